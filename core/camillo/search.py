"""Search over the materialised state: full text with field modifiers, and optional semantic search.

Search is derived, never stored in the vault (spec §19.5).  Full-text search uses the state's SQLite
FTS5 index.  A query is words and quoted phrases (all must match; ``word*`` matches a prefix, searched
as the terms that start so when they are few, :data:`PREFIX_TERMS`) plus modifiers, combined with AND.
Results come by relevance (bm25 within windows of the newest matches, :data:`RELEVANCE_WINDOW`, computed
by FTS5; for a query with a phrase of several words, computed from the records' text with every part
weighted alike, since FTS5 would first count every record holding the phrase) or newest first:

=====================  ==========================================================
``type:message``        semantic type (message, fact, preference, a vendor type...)
``key:user/home*``      fact key, ``*`` at the end for a prefix
``agent:NAME``          written by the device or agent grant with this name
``compartment:work``    in this compartment
``class:user``          effective authority class (user, observed, inferred, external)
``is:conflict``         a candidate of an open conflict
``is:pending``          waiting in the inbox for confirmation
``is:hidden``           forgotten (hidden by a DEL)
``before:2026-01-31``   written before this date (UTC); ``after:`` likewise
``conversation:ID``     in this conversation
=====================  ==========================================================

Semantic search is optional, behind the :class:`Embedder` protocol (``embed``, ``dimension``,
``model_id``).  Vectors are derived and disposable: they are kept in the local state database
(encrypted page by page), keyed by the embedder's model id, one byte per dimension (int8 and a
scale), and are recomputed when missing.  They are scored a chunk at a time, keeping only the best:
with numpy installed (the ``semantic`` extra) each chunk is one matrix product, without it a loop
per record.  Ranking blends cosine similarity with recency, and for
``summary`` records with VaultMem's significance ``σ = (1 − e^(−κ·freq))·e^(−λ·days)``.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import calendar
import hashlib
import itertools
import json
import math
import re
import struct
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from .cache import (
    SEARCH_BODY,
    SEARCH_KEY,
    SEARCH_ROW_BITS,
    SEARCH_ROW_MASK,
    SEARCH_TIME_MAX,
    Connection,
    search_group,
)
from .errors import UsageError
from .records import Authority
from .recordviews import RecordView
from .state import State

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

MODIFIERS = ("type", "key", "agent", "compartment", "class", "is", "before", "after", "conversation")
_TOKEN = re.compile(r'(\w+):"([^"]*)"|(\w+):(\S+)|"([^"]*)"|(\S+)')


@dataclass
class Query:
    words: list[str]
    phrases: list[str]
    filters: dict[str, list[str]]

    @property
    def has_text(self) -> bool:
        return bool(self.words or self.phrases)


def parse(text: str) -> Query:
    words: list[str] = []
    phrases: list[str] = []
    filters: dict[str, list[str]] = {}
    for m in _TOKEN.finditer(text):
        name = m.group(1) or m.group(3)
        value = m.group(2) if m.group(1) else m.group(4)
        if name is not None and name.lower() in MODIFIERS:
            filters.setdefault(name.lower(), []).append(value)
        elif m.group(5) is not None:
            if m.group(5).strip():
                phrases.append(m.group(5))
        else:
            token = m.group(0)
            if token.strip():
                words.append(token)
    return Query(words, phrases, filters)


def _fts_string(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


def _fts_query(q: Query, prefix_terms: Callable[[str], list[str] | None] = lambda _t: None) -> str:
    """The FTS5 query of ``q``; a ``word*`` as the terms ``prefix_terms`` gives for its last token
    (None: FTS5's own prefix query; no term: nothing matches)."""
    parts = []
    for w in q.words:
        # FTS5 tokenises the indexed text; quote each user word so operators in it are literal.
        tokens = [t for t in re.split(r"[^\w]+", w.rstrip("*")) if t]
        for i, t in enumerate(tokens):
            last = w.endswith("*") and i == len(tokens) - 1
            terms = prefix_terms(t) if last else None
            if terms is None:
                parts.append(_fts_string(t) + ("*" if last else ""))
            elif not terms:
                return _fts_string(t) + "*"  # (no term starts so: nothing matches, as FTS5 says itself)
            else:
                parts.append("(" + " OR ".join(_fts_string(x) for x in terms) + ")")
    for p in q.phrases:
        parts.append(_fts_string(p))
    # words of punctuation alone have no token (FTS5 indexes none): dropped beside others; alone, the empty
    # phrase, which matches nothing (an empty query is an FTS5 syntax error)
    return " AND ".join(parts) or '""'


def _day(value: str, name: str) -> int:
    try:
        return calendar.timegm(time.strptime(value, "%Y-%m-%d"))
    except ValueError:
        raise UsageError(f"{name}: expects a date such as 2026-01-31, not '{value}'") from None


def _conditions(state: State, q: Query) -> tuple[list[str], list[object]] | None:
    """The WHERE conditions (on ``records r``) and their arguments of a query's modifiers; None
    when they can match nothing (an agent no writer is called)."""
    roster = state.roster
    where = ["r.valid = 1", "r.kind IN (1, 3)"]
    args: list[object] = []
    if "hidden" not in q.filters.get("is", []):
        where.append("r.hidden = 0")
    for value in q.filters.get("type", []):
        where.append("r.type = ?")
        args.append(value)
    # Keys, pending inferences and conflicts are few next to the messages: each of those modifiers
    # picks its candidates from the keyed records (a partial index) or the facts table first, so the
    # time-ordered scan that finds the first page does not walk a million messages to find them.
    for value in q.filters.get("key", []):
        if value.endswith("*"):
            where.append("r.rowid IN (SELECT rowid FROM records WHERE key IS NOT NULL AND key LIKE ? ESCAPE '\\')")
            args.append(value[:-1].replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
        else:
            where.append("r.rowid IN (SELECT rowid FROM records WHERE key IS NOT NULL AND key = ?)")
            args.append(value)
    for value in q.filters.get("conversation", []):
        where.append("r.conversation = ?")
        args.append(value)
    for value in q.filters.get("compartment", []):
        cid = roster.compartment_id(value)
        if cid is None:
            raise UsageError(f"compartment:{value}: no such compartment (have {', '.join(roster.compartments.values())})")
        where.append("r.compartment = ?")
        args.append(cid)
    for value in q.filters.get("agent", []):
        needle = value.lower()
        writers = [p.writer_id for p in roster.principals.values()
                   if needle in ((p.grant.agent if p.grant else p.name) or "").lower()]
        if not writers:
            return None
        where.append(f"r.writer IN ({','.join('?' * len(writers))})")
        args += writers
    for value in q.filters.get("class", []):
        where.append("r.effective = ?")
        args.append(int(Authority.parse(value)))
    for value in q.filters.get("before", []):
        where.append("r.ts < ?")
        args.append(_day(value, "before"))
    for value in q.filters.get("after", []):
        where.append("r.ts >= ?")
        args.append(_day(value, "after") + 86400)
    for value in q.filters.get("is", []):
        if value == "conflict":
            where.append("r.rowid IN (SELECT k.rowid FROM facts f JOIN records k ON k.compartment = f.compartment "
                         "AND k.key = f.key WHERE f.status = 'conflict' AND instr(f.candidates, k.id) > 0)")
        elif value == "pending":
            where.append("r.id IN (SELECT id FROM proposals)")
        elif value != "hidden":
            raise UsageError(f"is:{value}: use is:conflict, is:pending or is:hidden")
    return where, args


NEWEST = "r.ts DESC, r.lamport DESC, r.idx DESC, r.id"
ORDERS = ("relevance", "time")
DEFAULT_WHERE = ["r.valid = 1", "r.kind IN (1, 3)", "r.hidden = 0"]


def _newest_key(ts: int | None, lamport: int, idx: int, rid: bytes) -> tuple[int, int, int, int, bytes]:
    """Python's order for :data:`NEWEST` (SQLite puts NULL last when descending)."""
    return (ts is None, -(ts or 0), -lamport, -idx, rid)


# Relevance ranks the matches in windows of this many, newest first (the index's order: by time, then
# the order the records were stored in): the matches of the newest window that pass the modifiers
# ordered by bm25, then newest; then the next window's likewise, and so on.  A query with fewer matches
# is ranked by bm25 over all of them; one that matches a third of a million records scores the windows
# up to its page, not every match (1.5 s at a million records).
RELEVANCE_WINDOW = 2000
# A query ranked from its matches' text (_phrase_scores) reads each match's record: its windows hold at
# most this many (2,000 records' pages read and decrypted cost 30-40 ms at a million records).
TEXT_WINDOW = 500


def _joined(where: list[str]) -> str:
    """The join of the index's matches (``s``) with their record rows (``r``)."""
    return (f"FROM search s JOIN records r ON r.rowid = (s.rowid & {SEARCH_ROW_MASK}) "
            f"WHERE search MATCH ? AND {' AND '.join(where)}")


def _key_range(q: Query, column: str = "s.rowid") -> tuple[list[str], list[object]]:
    """Conditions on the index's rowid (SEARCH_KEY) implied by ``before:`` and ``after:``: FTS5 then
    skips the matches outside the time range instead of joining each with its record."""
    conds: list[str] = []
    args: list[object] = []
    for value in q.filters.get("before", []):
        conds.append(f"{column} < ?")  # ts < day: SEARCH_KEY below the day's (rows without ts: time 0)
        args.append(search_group(_day(value, "before")) << SEARCH_ROW_BITS)
    for value in q.filters.get("after", []):
        day = _day(value, "after") + 86400
        if 0 <= day <= SEARCH_TIME_MAX:  # ts >= day: SEARCH_KEY from the day's
            conds.append(f"{column} >= ?")
            args.append(day << SEARCH_ROW_BITS)
    return conds, args


def _newest(state: State, q: Query, match: str, where: list[str], args: list[object], count: int) -> list[bytes]:
    """The first ``count`` matches in :data:`NEWEST` order: read newest first from the index, then
    the rest of the last one's second (whose records the index does not order by NEWEST)."""
    conds, extra = _key_range(q)
    rows = state.db.execute(f"SELECT s.rowid >> {SEARCH_ROW_BITS}, r.ts, r.lamport, r.idx, r.id "
                            f"{_joined(where + conds)} ORDER BY s.rowid DESC", [match, *args, *extra])
    found: list[tuple[int, int, int, int, bytes]] = []
    last = -1  # the time (second) of the count-th match read
    try:
        for group, ts, lamport, idx, rid in rows:
            if group < last:
                break
            found.append(_newest_key(ts, lamport, idx, rid))
            if len(found) == count:
                last = group
    finally:
        rows.close()
    return [key[-1] for key in sorted(found)[:count]]


# A ``word*`` whose prefix this many terms of the index or fewer start with is searched as those terms
# (FTS5 otherwise merges every such term's whole list of matches before the first result, and bm25 then
# counts them all again: 125 ms for ``approach*`` at a million records, against 35 ms).
PREFIX_TERMS = 64


def _prefix_terms(state: State, prefix: str) -> list[str] | None:
    """The index's terms that start with ``prefix`` (folded as the index folds), when there are at most
    PREFIX_TERMS of them; None otherwise."""
    db = state.db
    if not state.search_terms:  # (a view of the index's terms: of this connection, in memory)
        db.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.search_terms USING fts5vocab(main, search, 'row')")
        state.search_terms = True
    upper = prefix[:-1] + chr(ord(prefix[-1]) + 1)
    terms = [t for (t,) in db.execute("SELECT term FROM temp.search_terms WHERE term >= ? AND term < ? LIMIT ?",
                                      (prefix, upper, PREFIX_TERMS + 1))]
    return terms if len(terms) <= PREFIX_TERMS else None


def _expanded(state: State, q: Query) -> str:
    """The FTS5 query of ``q`` (:func:`_fts_query`), each ``word*`` written as the terms it stands for
    when they are few (PREFIX_TERMS): the same matches, found newest first without a pass over all of
    them.  (An ASCII prefix only: folded by the index as by ``lower``.)"""
    return _fts_query(q, lambda t: _prefix_terms(state, t.lower()) if t.isascii() else None)


# FTS5's bm25 parameters (its defaults), for the windows ranked outside it (_phrase_scores)
BM25_K1, BM25_B = 1.2, 0.75
_INDEX_WORD = re.compile(r"[^\W_]+")  # (the index's unicode61 tokenizer: letters and digits; "_" separates)


def _folded_words(text: str) -> list[str]:
    """The words of ``text`` as the index holds them (case and accents aside)."""
    return _INDEX_WORD.findall(_folded(text))


def _long_phrases(q: Query) -> bool:
    """Does the query hold a phrase of several words (whose bm25 FTS5 computes over every record
    holding it: 160-200 ms at a million records for common words, whatever the window)?"""
    return any(len(_INDEX_WORD.findall(p)) > 1 for p in q.phrases)


def _folded(text: str) -> str:
    """``text`` as the index compares it: case and accents aside (:func:`_fold`; ASCII text only
    case-folded, fast for a window of records)."""
    return text.casefold() if text.isascii() else _fold(text)


def _occurrences(words: list[str], prefix: bool) -> re.Pattern[str]:
    """Finds every occurrence, overlapping ones too, of these folded words one after the other in a
    folded text, with only what the index's tokenizer splits on between them, each a whole word (the
    last one only its start, for a prefix): one zero-width match per occurrence."""
    body = r"[\W_]+".join(re.escape(w) for w in words)
    end = "" if prefix else r"(?![^\W_])"
    return re.compile(r"(?<![^\W_])(?=" + body + end + ")")


def _phrase_scores(state: State, q: Query, rowids: list[int]) -> dict[int, float]:
    """bm25 of each index rowid's record, as FTS5 computes it for the query's phrases and words,
    but with every phrase and word weighted alike (no inverse document frequency: counting the records
    holding each phrase is what costs), and the record's length in characters against the window's
    mean: occurrences counted in the record's text, folded as the index folds it, one regular
    expression each (2,000 records in a few milliseconds).  Negative, like FTS5's (lower is better)."""
    parts: list[re.Pattern[str]] = []
    for w in q.words:
        tokens = _folded_words(w.rstrip("*"))
        parts += [_occurrences([t], w.endswith("*") and i == len(tokens) - 1) for i, t in enumerate(tokens)]
    parts += [_occurrences(_folded_words(p), False) for p in q.phrases]
    rows = state.db.execute(f"SELECT rowid, {SEARCH_BODY} FROM records WHERE rowid IN (SELECT value FROM json_each(?))",
                            [json.dumps([r & SEARCH_ROW_MASK for r in rowids])]).fetchall()
    mean = max(sum(len(body) for _r, body in rows) / max(len(rows), 1), 1.0)
    scores: dict[int, float] = {}
    k1, b = BM25_K1, BM25_B
    for rowid, body in rows:
        text, norm, score = _folded(body), k1 * (1 - b + b * len(body) / mean), 0.0
        for pattern in parts:
            tf = len(pattern.findall(text))
            score += tf * (k1 + 1) / (tf + norm)
        scores[rowid] = -score
    return {r: scores.get(r & SEARCH_ROW_MASK, 0.0) for r in rowids}


def _by_relevance(state: State, q: Query, match: str, where: list[str], args: list[object], wanted: int) -> list[int]:
    """The rowids of the first ``wanted`` matching records by relevance: the index's matches in windows of
    RELEVANCE_WINDOW, newest first, scored by FTS5 alone (no record read; a query with a phrase of
    several words by :func:`_phrase_scores`, in windows of TEXT_WINDOW); in each, the matches that pass the modifiers by bm25,
    then newest.  Only the windows up to ``wanted`` are read."""
    db = state.db
    conds, extra = _key_range(q, "rowid")
    out: list[int] = []
    below: list[object] = []
    outside = _long_phrases(q)
    size = min(RELEVANCE_WINDOW, TEXT_WINDOW) if outside else RELEVANCE_WINDOW
    while len(out) < wanted:
        window = db.execute(f"SELECT rowid{'' if outside else ', bm25(search)'} FROM search "
                            f"WHERE {' AND '.join(['search MATCH ?', *conds])} "
                            f"{'AND rowid < ?' if below else ''} ORDER BY rowid DESC LIMIT ?",
                            [match, *extra, *below, size]).fetchall()
        if not window:
            break
        below = [window[-1][0]]
        if outside:
            scores = _phrase_scores(state, q, [r for (r,) in window])
            window = [(r, scores[r]) for (r,) in window]
        window.sort(key=lambda m: (m[1], -m[0]))  # by score (ties: read together below)
        out += _best_of(db, window, where, args, wanted - len(out))
        if len(window) < size:
            break
    return out


def _best_of(db: Connection, window: list[tuple[int, float]], where: list[str], args: list[object],
             wanted: int) -> list[int]:
    """The rowids of the first ``wanted`` of a window's matches (sorted by score) that pass the
    conditions, by score, then newest: their records are looked up a chunk at a time, in score order, until
    ``wanted`` passed and every match tied with the last of them was seen.  A chunk after the
    first is sized from the share of rows the conditions kept so far (at most four times the last)."""
    lookup = (f"SELECT r.rowid, r.id, r.ts, r.lamport, r.idx FROM records r WHERE r.rowid IN "
              f"(SELECT value FROM json_each(?)) AND {' AND '.join(where)}")
    found: list[tuple[float, int, int, int, int, bytes, int]] = []  # (score, newest key..., id, rowid), sorted
    at, chunk = 0, wanted + wanted // 4 + 16  # (without modifiers nearly every match passes)
    while at < len(window):
        rows = window[at:at + chunk]
        at += len(rows)
        score = {sk & SEARCH_ROW_MASK: rank for sk, rank in rows}
        kept = db.execute(lookup, [json.dumps(list(score)), *args]).fetchall()
        found += [(score[k[0]], *_newest_key(k[2], k[3], k[4], k[1]), k[0]) for k in kept]
        found.sort()
        if len(found) >= wanted and (at == len(window) or window[at][1] > found[wanted - 1][0]):
            break  # the rest score below the last wanted one (ties included: they came in this chunk)
        if len(found) >= wanted:
            chunk *= 4  # matches tied with the last wanted one go on: read on, faster each time
        else:  # sized from the share of rows the conditions kept so far, at most 4 times the last chunk
            chunk = min(int((wanted - len(found)) * at / max(len(found), 1) * 1.25) + 64, 4 * chunk)
    return [f[-1] for f in found[:wanted]]


# A count that reads each match's record (a query with modifiers, or without words) stops this many
# matches past the page it comes with: the GUI's total then costs what the page does, not what every
# match does (seconds for a common word at a million records); the next page's count goes further.
COUNT_AHEAD = 10_000


def _capped_count(db: Connection, sql: str, args: list[object], cap: int) -> tuple[int, bool]:
    """(how many rows ``sql`` (a SELECT ... FROM ... WHERE ...) gives, up to ``cap``; whether that is all)."""
    n = int(db.execute(f"SELECT count(*) FROM ({sql} LIMIT ?)", [*args, cap + 1]).fetchone()[0])
    return min(n, cap), n <= cap


def _match_count(state: State, q: Query, match: str, where: list[str], args: list[object],
                 cap: int) -> tuple[int, bool]:
    """(how many records match, whether that is all of them): without modifiers, the index's count
    less the matching records that are invalid or forgotten (few; a partial index finds them), so the
    matches are not all read, and exact; with modifiers or a phrase of several words (whose every match
    FTS5 checks word by word: 160-200 ms for a common phrase at a million records), each match is joined
    with its record, so at most ``cap`` are counted."""
    db = state.db
    if where != DEFAULT_WHERE or args or _long_phrases(q):  # (a phrase's matches are each checked: counted to a cap)
        conds, extra = _key_range(q)
        return _capped_count(db, f"SELECT 1 {_joined(where + conds)}", [match, *args, *extra], cap)
    listed = db.execute("SELECT count(*) FROM search WHERE search MATCH ?", [match]).fetchone()[0]
    unlisted = db.execute(f"SELECT count(*) FROM search WHERE search MATCH ? AND rowid IN (SELECT {SEARCH_KEY} FROM "
                          "records INDEXED BY records_unlisted WHERE valid = 0 OR hidden = 1)", [match]).fetchone()[0]
    return int(listed - unlisted), True


def search(state: State, text: str, *, limit: int = 200) -> list[RecordView]:
    """Full-text search with modifiers; results by relevance (:func:`_by_relevance`), or by time without words."""
    q = parse(text)
    state.ensure_search()
    found = _conditions(state, q)
    if found is None:
        return []
    where, args = found
    if q.has_text:
        return state.records_at(_by_relevance(state, q, _expanded(state, q), where, args, limit))
    sql = f"SELECT r.id FROM records r WHERE {' AND '.join(where)} ORDER BY {NEWEST} LIMIT ?"
    rows = state.db.execute(sql, [*args, limit]).fetchall()
    return state.records(r[0] for r in rows)


SNIPPET_WORDS = 24  # at most this many words around the first match
Snippet = tuple[tuple[str, bool], ...]
_WORD = re.compile(r"\w+")


def _fold(word: str) -> str:
    """A word as the index compares it: case and accents aside (unicode61, remove_diacritics)."""
    return "".join(c for c in unicodedata.normalize("NFKD", word) if not unicodedata.combining(c)).casefold()


def _snippet(text: str, q: Query) -> Snippet:
    """The words of ``text`` around its first match, in pieces: (word, True) for a matched word (a
    query word, a ``word*`` prefix or a phrase's word), (text, False) around them.  The index holds
    no copy of the text, so the snippet is made from the record's own."""
    terms, prefixes = set(), set()
    for w in q.words:
        tokens = [_fold(t) for t in _WORD.findall(w.rstrip("*"))]
        terms.update(tokens)
        if w.endswith("*") and tokens:
            prefixes.add(tokens[-1])
    terms.update(_fold(t) for p in q.phrases for t in _WORD.findall(p))
    words = list(_WORD.finditer(text))
    hit = [m for m in words if _fold(m.group()) in terms or any(_fold(m.group()).startswith(p) for p in prefixes)]
    if not hit:
        return _opening(text)
    first = words.index(hit[0])
    lo = max(0, min(first - SNIPPET_WORDS // 3, len(words) - SNIPPET_WORDS))
    shown = words[lo:lo + SNIPPET_WORDS]
    matched = {m.start() for m in hit}
    out: list[tuple[str, bool]] = [("\u2026", False)] if lo > 0 else []
    at = shown[0].start() if lo > 0 else 0
    for m in shown:
        if m.start() in matched:
            between = text[at:m.start()]
            if out and out[-1][1] and at > 0 and not between.strip():  # a run of matched words: one piece
                out[-1] = (out[-1][0] + between + m.group(), True)
            else:
                out += [(between, False), (m.group(), True)]
            at = m.end()
    end = shown[-1].end() if lo + SNIPPET_WORDS < len(words) else len(text)
    out.append((text[at:end] + ("\u2026" if end < len(text) else ""), False))
    return tuple((t, k) for t, k in out if t)


def search_page(state: State, text: str, *, offset: int = 0, limit: int = 200,
                order: str = "relevance") -> tuple[int, bool, list[tuple[RecordView, Snippet]]]:
    """One page of a search: (how many records match in all, whether that count is all of them (a
    count reading each match's record stops COUNT_AHEAD past the page), the page's records with a
    snippet of each).  ``order``: "relevance" (:func:`_by_relevance`) or "time" (newest first); a query without
    words is always in time order.  A snippet without words to match is the text's beginning."""
    if order not in ORDERS:
        raise UsageError(f"order: use one of {', '.join(ORDERS)}, not '{order}'")
    if offset < 0 or limit < 0:
        raise UsageError("offset and limit must not be negative")
    q = parse(text)
    state.ensure_search()
    found = _conditions(state, q)
    if found is None:
        return 0, True, []
    where, args = found
    cap = offset + limit + COUNT_AHEAD
    db = state.db
    if q.has_text:
        match = _expanded(state, q)
        total, exact = _match_count(state, q, match, where, args, cap)
        if limit == 0:
            return total, exact, []
        if order == "relevance":
            views = state.records_at(_by_relevance(state, q, match, where, args, offset + limit)[offset:])
        else:
            views = state.records(_newest(state, q, match, where, args, offset + limit)[offset:])
        return total, exact, [(v, _snippet(v.text, q)) for v in views]
    base = f"FROM records r WHERE {' AND '.join(where)}"
    total, exact = _capped_count(db, f"SELECT 1 {base}", args, cap)
    rows = db.execute(f"SELECT r.id {base} ORDER BY {NEWEST} LIMIT ? OFFSET ?", [*args, limit, offset]).fetchall()
    return total, exact, [(v, _opening(v.text)) for v in state.records(r[0] for r in rows)]


def conversations_matching(state: State, text: str) -> set[tuple[bytes, str]]:
    """(compartment id, conversation) of every conversation whose title or messages contain the
    words and phrases of ``text`` (modifiers are not used here; every word must match one record)."""
    q = parse(text)
    q = Query(q.words + [f"{k}:{v}" for k, vs in q.filters.items() for v in vs], q.phrases, {})
    if not q.has_text:
        return set()
    state.ensure_search()
    rows = state.db.execute("SELECT DISTINCT r.compartment, r.conversation "
                            f"{_joined(['r.valid = 1', 'r.hidden = 0', 'r.conversation IS NOT NULL'])}",
                            [_fts_query(q)])
    return {(comp, conv) for comp, conv in rows}


def _opening(text: str, limit: int = 200) -> Snippet:
    if not text:
        return ()
    return ((text[:limit] + ("\u2026" if len(text) > limit else "")), False),


# ---------------------------------------------------------------------------------------------
# Semantic search


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors.  Implementations: :class:`HashingEmbedder` (deterministic, no
    model; for tests and benchmarks), :class:`SentenceTransformerEmbedder`, :class:`OllamaEmbedder`."""

    model_id: str
    dimension: int

    def embed(self, texts: Sequence[str]) -> Any:
        """One vector per text, in order: a list of lists of floats, or a 2-D numpy array."""
        ...


class HashingEmbedder:
    """Feature hashing of words and word pairs into a fixed-size, L2-normalised vector.  Needs no
    model and gives the same vectors everywhere; good for tests, benchmarks and comparisons.

    Each feature's place and sign come from a BLAKE2b hash, remembered for the features met last
    (a bounded memo: a vault's vocabulary repeats).  With numpy, a batch of texts is summed and
    normalised as one array, which :func:`quantize_all` takes as it is; the values are the same
    IEEE doubles as a loop's (the sums are of small integers, exact in any order).  Any thread
    may call it; it holds no lock, and the memo is only ever added to or cleared whole.  The memo
    holds words of the texts embedded for as long as the embedder lives: a test and benchmark
    embedder, which no product path gives a vault's records."""

    MEMO = 1 << 16  # features remembered (cleared whole when full)

    def __init__(self, dimension: int = 256) -> None:
        self.dimension = dimension
        self.model_id = f"hashing-{dimension}"
        self._memo: dict[str, int] = {}

    def _codes(self, text: str) -> list[int]:
        """Each feature of ``text`` as ``place * 2 + (1 when it adds, 0 when it subtracts)``."""
        words = re.findall(r"\w+", text.lower())
        features = words + [a + " " + b for a, b in zip(words, words[1:])]
        memo = self._memo
        found = list(map(memo.get, features))  # (in C: nearly every feature was met before)
        if None not in found:
            return found  # type: ignore[return-value]
        codes = []
        for feature, code in zip(features, found):
            if code is None:
                h = hashlib.blake2b(feature.encode(), digest_size=8).digest()
                code = (int.from_bytes(h[:4], "big") % self.dimension) * 2 + (h[4] & 1)
            codes.append(code)
        if len(memo) >= self.MEMO:
            memo.clear()
        memo.update(zip(features, codes))
        return codes

    def embed(self, texts: Sequence[str]) -> Any:
        """One vector per text: a list of lists of floats, or for more than one text with numpy
        installed a 2-D float64 array of the same values."""
        codes = [self._codes(t) for t in texts]
        if len(codes) > 1 and _numpy_installed():
            return self._embed_array(codes)
        out = []
        for row in codes:
            vec = [0.0] * self.dimension
            for code in row:
                vec[code >> 1] += 1.0 if code & 1 else -1.0
            norm = math.sqrt(sum(vec[i] * vec[i] for i in {code >> 1 for code in row})) or 1.0
            out.append([x / norm for x in vec])
        return out

    def _embed_array(self, codes: list[list[int]]) -> Any:
        import numpy as np

        dim = self.dimension
        flat = np.fromiter(itertools.chain.from_iterable(codes), dtype=np.int64)
        rows = np.repeat(np.arange(len(codes), dtype=np.int64), [len(row) for row in codes])
        signs = (flat & 1) * 2.0 - 1.0
        m = np.bincount(rows * dim + (flat >> 1), weights=signs, minlength=len(codes) * dim)
        m = m.reshape(len(codes), dim)
        norms = np.sqrt((m * m).sum(axis=1))
        norms[norms == 0] = 1.0
        return m / norms[:, None]


class SentenceTransformerEmbedder:
    """A local sentence-transformers model (optional extra: ``pip install sentence-transformers``)."""

    def __init__(self, model: str = "all-MiniLM-L6-v2") -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise UsageError("semantic search with a local model needs: pip install sentence-transformers") from None
        self._model = SentenceTransformer(model)
        self.dimension = int(self._model.get_sentence_embedding_dimension())
        self.model_id = f"sentence-transformers/{model}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [list(map(float, v)) for v in self._model.encode(list(texts), normalize_embeddings=True)]


class OllamaEmbedder:
    """An Ollama server's embedding endpoint (``/api/embed``), e.g. on localhost."""

    def __init__(self, url: str = "http://localhost:11434", model: str = "all-minilm") -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.model_id = f"ollama/{model}"
        self.dimension = len(self.embed(["dimension probe"])[0])

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import urllib.request

        req = urllib.request.Request(  # noqa: S310 - the user chooses the Ollama URL
            f"{self.url}/api/embed", data=json.dumps({"model": self.model, "input": list(texts)}).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310
                embeddings: list[list[float]] = json.load(resp)["embeddings"]
                return embeddings
        except OSError as exc:
            raise UsageError(f"the Ollama server at {self.url} did not answer ({exc})") from None


_SCORE_ROWS = 8192  # vectors scored at a time: memory does not grow with the vault


def significance(freq: int, days: float, kappa: float = 0.3, lam: float = 0.01) -> float:
    """VaultMem's significance of a recurring pattern: grows with frequency, decays with age."""
    return (1 - math.exp(-kappa * freq)) * math.exp(-lam * days)


def quantize(vec: Sequence[float]) -> tuple[bytes, float]:
    """A vector as stored: int8 components and the scale that multiplies them back."""
    top = max((abs(x) for x in vec), default=0.0)
    if not top or not math.isfinite(top):
        return bytes(len(vec)), 0.0
    return struct.pack(f"<{len(vec)}b", *(max(-127, min(127, round(x * 127 / top))) for x in vec)), top / 127


def quantize_all(vecs: Any) -> list[tuple[bytes, float]]:
    """:func:`quantize` of each vector, the same bytes and scales: with numpy, one array operation for
    all of them (the same IEEE operations, rounding half to even as ``round`` does), since a loop in
    Python over every component took 89 µs a vector, against 17 µs (about 7 s of embedding 100,000 records)."""
    if len(vecs) == 0:
        return []
    if getattr(vecs, "ndim", None) != 2 and (not _numpy_installed() or len({len(v) for v in vecs}) != 1):
        return [quantize(v) for v in vecs]  # (an embedder's 2-D array needs no check: numpy made it)
    import numpy as np

    a = np.asarray(vecs, dtype=np.float64)
    top = np.abs(a).max(axis=1) if a.shape[1] else np.zeros(len(a))
    usable = (top > 0) & np.isfinite(top)
    q = np.zeros(a.shape, dtype=np.int8)
    rows = a[usable]
    q[usable] = np.clip(np.rint(rows * 127 / top[usable, None]), -127, 127).astype(np.int8)
    return [(q[i].tobytes(), float(top[i]) / 127) if usable[i] else (bytes(a.shape[1]), 0.0)
            for i in range(len(a))]


# A stored vector with what ranking needs (the Python scorer's rows)
_VectorRow = tuple[bytes, float, int, int, int]  # vec, scale, record rowid, ts, summary


def _numpy_installed() -> bool:
    """numpy is optional (the "semantic" extra): it is imported where it is used, not at import."""
    try:
        import numpy  # noqa: F401
    except ImportError:
        return False
    return True


def _scores_arrays(matrix: NDArray[np.int8], scales: NDArray[np.float64], stamps: NDArray[np.float64],
                   query: NDArray[np.float64], now: float) -> NDArray[np.float64]:
    """Cosine plus recency for a chunk of vectors, as one matrix product (int8 vectors, float64 sums)."""
    import numpy as np

    days = np.maximum(0.0, (now - np.where(stamps != 0, stamps, now)) / 86400)
    dots = matrix.astype(np.float64) @ query
    # rounded so that equal vectors tie whatever the chunk (a matrix product's last bits depend on its shape)
    return np.round(dots * scales + 0.05 * np.exp(-days / 365), 12)


@dataclass
class _Vectors:
    """One model's stored vectors held in memory after the first semantic search, so that the next
    ones read no database page: one byte per dimension and per record (int8), plus the row, scale,
    time and summary flag of each (21 bytes).  Extended by the vectors stored since; dropped when
    records leave the state (``State.forget_batches``) or vectors are deleted."""

    model: str
    dim: int
    upto: int  # the highest record rowid held
    rowids: NDArray[np.int64]
    matrix: NDArray[np.int8]
    scales: NDArray[np.float64]
    stamps: NDArray[np.float64]
    summaries: NDArray[np.bool_]


def _vectors_in_memory(state: State, model: str, dim: int) -> _Vectors:
    import numpy as np

    held = state.vector_cache
    if not isinstance(held, _Vectors) or held.model != model or held.dim != dim:
        held = _Vectors(model, dim, 0, np.empty(0, np.int64), np.empty((0, dim), np.int8), np.empty(0),
                        np.empty(0), np.empty(0, np.bool_))
    cursor = state.db.execute("SELECT vec, scale, record, ts, summary FROM vectors WHERE model = ? AND record > ? "
                              "AND length(vec) = ? ORDER BY record", (model, held.upto, dim))
    parts = [held]
    while rows := cursor.fetchmany(_SCORE_ROWS):
        blobs, scales, rids, stamps, summaries = zip(*rows)
        parts.append(_Vectors(model, dim, rids[-1], np.asarray(rids, np.int64),
                              np.frombuffer(b"".join(blobs), np.int8).reshape(len(rows), dim),
                              np.asarray(scales, np.float64), np.asarray(stamps, np.float64),
                              np.asarray(summaries, np.bool_)))
    if len(parts) > 1:
        held = _Vectors(model, dim, parts[-1].upto, *(np.concatenate([getattr(p, f) for p in parts]) for f in
                                                      ("rowids", "matrix", "scales", "stamps", "summaries")))
    state.vector_cache = held
    return held


def _scores_python(rows: Sequence[_VectorRow], query: Sequence[float], now: float, dimension: int) -> list[float]:
    """The same without numpy, a loop per record (about 10 µs each at 256 dimensions)."""
    out = []
    fmt = f"<{dimension}b"
    for blob, scale, _rid, ts, _summary in rows:
        cos = math.fsum(a * b for a, b in zip(query, struct.unpack(fmt, blob))) * scale
        days = max(0.0, (now - (ts or now)) / 86400)
        out.append(round(cos + 0.05 * math.exp(-days / 365), 12))
    return out


def semantic_search(state: State, text: str, embedder: Embedder, *, limit: int = 20,
                    now: float | None = None) -> list[tuple[float, RecordView]]:
    """Rank visible records by cosine similarity to ``text`` (blended with recency, and for
    ``summary`` records with significance).  Missing vectors are computed and kept: every message
    and value with text gets one, in the order the state stored them, so the newest vector says
    where to go on.  The vectors are scored a chunk at a time from their own table (never joined
    with the records), keeping only the best ``limit`` and their ties; the invalid and forgotten
    records (a partial index) are left out."""
    use_numpy = _numpy_installed()
    db = state.db
    model, dim = embedder.model_id, embedder.dimension
    stored = db.execute("SELECT length(vec) FROM vectors WHERE model = ? LIMIT 1", (model,)).fetchone()
    if stored is not None and stored[0] != dim:  # the model now gives another dimension: start again
        db.execute("DELETE FROM vectors WHERE model = ?", (model,))
        state.vector_cache = None
    start = db.execute("SELECT max(record) FROM vectors WHERE model = ?", (model,)).fetchone()[0] or 0
    missing = db.execute(
        "SELECT rowid, text, coalesce(key, ''), coalesce(ts, 0), type = 'summary' FROM records "
        "WHERE rowid > ? AND kind IN (1, 3) AND text != '' ORDER BY rowid", (start,))
    while chunk := missing.fetchmany(256):
        vecs = quantize_all(embedder.embed([f"{key} {t}".strip() for _, t, key, _, _ in chunk]))
        db.executemany("INSERT OR REPLACE INTO vectors(model, record, vec, scale, ts, summary) VALUES(?,?,?,?,?,?)",
                       [(model, rowid, *v, ts, int(bool(summary)))
                        for (rowid, _, _, ts, summary), v in zip(chunk, vecs)])
    if limit <= 0:
        return []
    query = embedder.embed([text])[0]
    now = time.time() if now is None else now
    unlisted = {r for (r,) in db.execute("SELECT rowid FROM records INDEXED BY records_unlisted "
                                         "WHERE valid = 0 OR hidden = 1")}
    best = (_best_in_memory(state, model, dim, query, now, unlisted, limit) if use_numpy
            else _best_streamed(state, model, dim, query, now, unlisted, limit))
    # every vector's record is in the state (vectors leave with their rows: State.forget_batches, erased.scrub)
    ids = dict(db.execute(f"SELECT rowid, id FROM records WHERE rowid IN ({','.join('?' * len(best))})",
                          [r for _, r in best]).fetchall()) if best else {}
    ranked = sorted(((s, ids[r]) for s, r in best if r in ids), key=lambda x: (-x[0], x[1]))[:limit]
    views = {v.id: v for v in state.records(rid for _, rid in ranked)}
    return [(s, views[rid]) for s, rid in ranked if rid in views]


def _keep_best(best: list[tuple[float, int]], limit: int) -> list[tuple[float, int]]:
    """The best ``limit`` (score, rowid) and every one tied with the last: ids decide between them."""
    best.sort(key=lambda x: -x[0])
    if len(best) > limit:
        edge = best[limit - 1][0]
        best = [b for b in best if b[0] >= edge]
    return best


def _significance(state: State, rowid: int, ts: float, now: float) -> float:
    view = state.record_by_rowid(rowid)
    freq = view.meta.get("frequency", 1) if view is not None else 1
    days = max(0.0, (now - (ts or now)) / 86400)
    return 0.2 * significance(freq if isinstance(freq, int) and freq > 0 else 1, days)


def _best_in_memory(state: State, model: str, dim: int, query: Sequence[float], now: float, unlisted: set[int],
                    limit: int) -> list[tuple[float, int]]:
    import numpy as np

    held = _vectors_in_memory(state, model, dim)
    q = np.asarray(query, dtype=np.float64)
    hidden = np.fromiter(unlisted, np.int64, len(unlisted)) if unlisted else None
    best: list[tuple[float, int]] = []
    for start in range(0, len(held.rowids), _SCORE_ROWS):
        part = slice(start, start + _SCORE_ROWS)
        rows, matrix, scales = held.rowids[part], held.matrix[part], held.scales[part]
        stamps, summaries = held.stamps[part], held.summaries[part]
        if hidden is not None:  # a copy of the chunk without the invalid and forgotten records
            keep = np.flatnonzero(~np.isin(rows, hidden))
            rows, matrix, scales, stamps, summaries = rows[keep], matrix[keep], scales[keep], stamps[keep], summaries[keep]
        if not len(rows):
            continue
        scores = _scores_arrays(matrix, scales, stamps, q, now)
        for i in np.flatnonzero(summaries):
            scores[i] += _significance(state, int(rows[i]), float(stamps[i]), now)
        chosen = _best_numpy(scores, limit) if len(rows) > limit else range(len(rows))
        best = _keep_best(best + [(float(scores[i]), int(rows[i])) for i in chosen], limit)
    return best


def _best_streamed(state: State, model: str, dim: int, query: Sequence[float], now: float, unlisted: set[int],
                   limit: int) -> list[tuple[float, int]]:
    """Without numpy: the stored vectors a chunk at a time, scored in Python."""
    cursor = state.db.execute("SELECT vec, scale, record, ts, summary FROM vectors WHERE model = ? AND length(vec) = ?",
                              (model, dim))
    best: list[tuple[float, int]] = []
    while rows := cursor.fetchmany(_SCORE_ROWS):
        rows = [row for row in rows if row[2] not in unlisted]
        scores = _scores_python(rows, query, now, dim)
        for i in [i for i, row in enumerate(rows) if row[4]]:
            scores[i] += _significance(state, rows[i][2], rows[i][3], now)
        best = _keep_best(best + [(scores[i], rows[i][2]) for i in range(len(rows))], limit)
    return best


def _best_numpy(scores: NDArray[np.float64] | list[float], limit: int) -> list[np.intp]:
    """The indices of the ``limit`` best scores and of any tied with the last of them."""
    import numpy as np

    kth = np.partition(-np.asarray(scores), limit - 1)[limit - 1]
    return [i for i in np.flatnonzero(-np.asarray(scores) <= kth)]
