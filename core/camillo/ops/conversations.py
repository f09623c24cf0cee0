"""The list of conversations, newest activity first, a page at a time.

A page without a text or an agent filter near the top of the list is found in the state's time index,
newest first, until it holds enough distinct conversations (a million records: the newest few
thousand entries are read, not the records); a page further down from one pass over the conversation
index (the list's order, no record read); then only the page's conversations are summed up, each by
its own range of the conversation index.  A text or an agent filter needs every conversation's words or writers: those
lists are computed over the whole state (one pass each), as before.  Both give the same
conversations in the same order: last activity first (none last), then compartment and id.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from .. import search
from ..errors import UsageError
from ..recordviews import RecordView
from ..session import Session
from ..state import visible_where
from ..values import ConversationInfo

Key = tuple[bytes, str]  # (compartment id, conversation)
NEWEST_SCAN = 2_000  # pages within this many conversations of the top come from the time index


def _where(session: Session, compartment: str | None) -> tuple[str, list[Any]]:
    where, args = visible_where(False, None, None)
    if compartment is not None:
        roster = session.roster
        cid = roster.compartment_id(compartment)
        if cid is None or cid == roster.control_id:
            raise UsageError(f"no compartment {compartment} (have {', '.join(sorted(session.compartments))})")
        where += " AND compartment = ?"
        args.append(cid)
    return where + " AND conversation IS NOT NULL", args


def count(session: Session, *, compartment: str | None = None) -> int:
    """How many conversations there are (in ``compartment``), counted in the conversation index."""
    where, args = _where(session, compartment)
    db = session.materialized.db
    return int(db.execute(f"SELECT count(*) FROM (SELECT DISTINCT conversation, compartment FROM records "
                          f"WHERE {where})", args).fetchone()[0])


def conversations(session: Session, *, text: str | None = None, compartment: str | None = None,
                  agent: str | None = None, offset: int = 0, limit: int | None = None) -> list[ConversationInfo]:
    """The conversations, newest activity first.  ``text``: only those whose title or messages
    match its words and phrases (full text); ``compartment``: only those in it; ``agent``: only those
    someone of that name (a device or an agent, any part of the name) wrote in, or an import of that
    source brought.  ``offset`` and ``limit``: one page of them."""
    if offset < 0 or (limit is not None and limit < 0):
        raise UsageError("offset and limit must not be negative")
    where, args = _where(session, compartment)
    if limit is not None and not (text and text.strip()) and not agent:
        if offset + limit <= NEWEST_SCAN:
            keys = _newest(session, where, args, offset + limit)
            return _summaries(session, where, args, keys)[offset:offset + limit]
        return _summaries(session, where, args, _ranked(session, where, args)[offset:offset + limit])
    matching = search.conversations_matching(session.materialized, text) if text and text.strip() else None
    found = _summaries(session, where, args, None, matching=matching, agent=agent)
    return found[offset:] if limit is None else found[offset:offset + limit]


def summary(session: Session, conversation: str, compartment: str) -> ConversationInfo | None:
    """One conversation's summary, as the list shows it (None when it has no message shown)."""
    where, args = _where(session, compartment)
    cid = session.roster.compartment_id(compartment)
    assert cid is not None  # _where checked it
    found = _summaries(session, where, args, [(cid, conversation)])
    return found[0] if found else None


def _order(c: ConversationInfo) -> tuple[bool, int, str, str]:
    return c.last is None, -(c.last or 0), c.compartment, c.conversation


def _newest(session: Session, where: str, args: list[Any], wanted: int) -> list[Key]:
    """The ``wanted`` conversations of latest activity (and every one tied with the last of them),
    from the time index read newest first: a conversation's first entry there is its last activity."""
    found: dict[Key, int | None] = {}
    boundary: int | None = None
    rows = session.materialized.db.execute(
        f"SELECT compartment, conversation, ts FROM records WHERE {where} "
        "ORDER BY ts DESC, lamport DESC, idx DESC, id DESC", args)
    try:
        for comp, conv, ts in rows:
            if len(found) >= wanted and ts != boundary:
                break
            if (comp, conv) not in found:
                found[(comp, conv)] = ts
                if len(found) == wanted:
                    boundary = ts
    finally:
        rows.close()
    return list(found)


def _ranked(session: Session, where: str, args: list[Any]) -> list[Key]:
    """Every conversation in list order, from one pass over the conversation index (no record read):
    a page far down the list costs the same as the count."""
    roster = session.roster
    rows = session.materialized.db.execute(
        f"SELECT compartment, conversation, max(ts) FROM records WHERE {where} GROUP BY conversation, compartment",
        args).fetchall()
    names = {cid: roster.compartment_name(cid) for cid in {r[0] for r in rows}}
    rows.sort(key=lambda r: (r[2] is None, -(r[2] or 0), names[r[0]], r[1]))
    return [(comp, conv) for comp, conv, _last in rows]


def _per_key(session: Session, sql: str, where: str, args: list[Any], keys: list[Key]) -> Iterator[tuple[Any, ...]]:
    """``sql`` (a SELECT with ``{where}``) for each conversation, its range of the conversation index."""
    db = session.materialized.db
    for comp, conv in keys:
        yield from db.execute(sql.format(where=f"{where} AND conversation = ? AND compartment = ?"),
                              [*args, conv, comp])


def _summaries(session: Session, where: str, args: list[Any], keys: list[Key] | None, *,
               matching: set[Key] | None = None, agent: str | None = None) -> list[ConversationInfo]:
    """Each conversation's summary (``keys``: these, else all of them), in list order."""
    state, roster = session.materialized, session.roster
    db = state.db

    def rows(sql: str) -> Iterable[tuple[Any, ...]]:
        if keys is None:
            return db.execute(sql.format(where=where), args)
        return _per_key(session, sql, where, args, keys)

    found: dict[Key, dict[str, Any]] = {}
    for comp, conv, writer, n, msgs, first, last in rows(
            "SELECT compartment, conversation, writer, count(*), sum(type IS NOT 'conversation'), min(ts), max(ts) "
            "FROM records WHERE {where} GROUP BY compartment, conversation, writer"):
        if matching is not None and (comp, conv) not in matching:
            continue
        c = found.setdefault((comp, conv), {"writers": {}, "messages": 0, "first": None, "last": None})
        c["writers"][writer] = c["writers"].get(writer, 0) + n
        c["messages"] += msgs
        if first is not None and (c["first"] is None or first < c["first"]):
            c["first"] = first
        if last is not None and (c["last"] is None or last > c["last"]):
            c["last"] = last
    titles: dict[Key, RecordView] = {}
    title_rows = list(rows("SELECT compartment, conversation, id FROM records WHERE {where} "
                           "AND type = 'conversation' ORDER BY ts, lamport, idx, id"))
    wanted = [(comp, conv, rid) for comp, conv, rid in title_rows if (comp, conv) in found]
    views = {v.id: v for v in state.records(rid for _, _, rid in wanted)}
    for comp, conv, rid in wanted:
        if rid in views:
            titles.setdefault((comp, conv), views[rid])
    untitled = {k for k in found if k not in titles or not titles[k].text.strip()}
    openings: dict[Key, str] = {}
    if untitled:
        for comp, conv, _first, opening in rows(
                "SELECT compartment, conversation, min(ts), substr(text, 1, 160) FROM records WHERE {where} "
                "AND type IS NOT 'conversation' AND text != '' GROUP BY compartment, conversation"):
            if (comp, conv) in untitled:
                openings[(comp, conv)] = " ".join(opening.split())
    needle = agent.lower() if agent else None
    out = []
    for (comp, conv), c in found.items():
        view = titles.get((comp, conv))
        source = view.meta.get("source") if view is not None else None
        source = source if isinstance(source, str) else ""
        writers = tuple(roster.writer_name(w) for w, _ in sorted(c["writers"].items(), key=lambda x: (-x[1], x[0])))
        if needle is not None and not any(needle in n.lower() for n in (*writers, source)):
            continue
        title = view.text.strip() if view is not None and view.text.strip() else openings.get((comp, conv)) or conv
        out.append(ConversationInfo(conversation=conv, compartment=roster.compartment_name(comp), title=title,
                                    first=c["first"], last=c["last"], messages=c["messages"], writers=writers,
                                    source=source))
    out.sort(key=_order)
    return out
