"""The timeline in time order, a page at a time: pages, counts and positions read from the local
state's time index, so that a vault of a million records shows its first rows without listing them.

The state keeps a covering partial index of the records the timeline can show
(``records_by_time``: time, Lamport order, index in batch, id, the forgotten flag and the
compartment, for valid values and notes).  Every function here is answered from that index alone:
a page is a range of it (``LIMIT``/``OFFSET``), a count walks it without reading a record, and the
row of a record or of a day is a count of what sorts before it.  Time order is the state's: time,
then Lamport order, then the index in the batch, then the id; records without a time come first
oldest-first and last newest-first, as in SQL.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .errors import UsageError
from .state import State, visible_where

OLDEST_FIRST = "ts, lamport, idx, id"
NEWEST_FIRST = "ts DESC, lamport DESC, idx DESC, id DESC"


def page_rowids(state: State, *, offset: int = 0, limit: int | None = None, descending: bool = False,
                after: bytes | None = None, include_hidden: bool = False, compartments: Iterable[bytes] | None = None,
                conversation: str | None = None) -> list[int]:
    """The state's row numbers of rows ``offset`` to ``offset + limit`` (all the rest when ``limit`` is
    None): the time index holds each entry's row number, so the page's records are then read at them
    (State.records_at), not looked up one by one in the index of ids (a random page of it each, at a
    million records).  ``after`` (instead of an offset): the rows that follow that record's place in
    this order (it need not be shown), ranges of the index however far in it is, where an offset
    walks every row before it."""
    where, args = visible_where(include_hidden, compartments, conversation)
    order = NEWEST_FIRST if descending else OLDEST_FIRST
    if after is None:
        rows = state.db.execute(f"SELECT rowid FROM records WHERE {where} ORDER BY {order} LIMIT ? OFFSET ?",
                                [*args, -1 if limit is None else limit, offset])
        return [r[0] for r in rows]
    if offset:
        raise UsageError("read the timeline from an offset or after a record, not both")
    out: list[int] = []
    for more, more_args in _following(state, after, descending):
        if limit is not None and len(out) >= limit:
            break
        rows = state.db.execute(f"SELECT rowid FROM records WHERE {where} AND {more} ORDER BY {order} LIMIT ?",
                                [*args, *more_args, -1 if limit is None else limit - len(out)])
        out += [r[0] for r in rows]
    return out


def _following(state: State, record_id: bytes, descending: bool) -> list[tuple[str, list[Any]]]:
    """The rows after a record in time order, as ranges of the time index in order (records without a
    time sort first oldest-first and last newest-first, as SQL sorts NULL: a record's own class of
    time, then the other class whole)."""
    row = state.db.execute("SELECT ts, lamport, idx FROM records WHERE id = ?", [record_id]).fetchone()
    if row is None:
        raise UsageError(f"no record {record_id.hex()} in this vault to read the timeline on from; "
                         "start from the first page")
    ts, lamport, idx = row
    if ts is None:
        undated = [(f"ts IS NULL AND (lamport, idx, id) {'<' if descending else '>'} (?, ?, ?)", [lamport, idx, record_id])]
        return undated if descending else [*undated, ("ts IS NOT NULL", [])]
    dated = [(f"(ts, lamport, idx, id) {'<' if descending else '>'} (?, ?, ?, ?)", [ts, lamport, idx, record_id])]
    return [*dated, ("ts IS NULL", [])] if descending else dated


def count(state: State, **filters: Any) -> int:
    """How many rows the timeline has with these filters (``include_hidden``, ``compartments``,
    ``conversation``)."""
    where, args = visible_where(**filters)
    return int(state.db.execute(f"SELECT count(*) FROM records WHERE {where}", args).fetchone()[0])


def row_of(state: State, record_id: bytes, *, descending: bool = False, **filters: Any) -> int | None:
    """The row of a record (None when the timeline does not show it with these filters)."""
    where, args = visible_where(**filters)
    db = state.db
    row = db.execute(f"SELECT ts, lamport, idx FROM records WHERE id = ? AND {where}", [record_id, *args]).fetchone()
    if row is None:
        return None
    ts, lamport, idx = row
    if ts is None:  # among the records without a time, which sort first oldest-first
        before = db.execute(f"SELECT count(*) FROM records WHERE {where} AND ts IS NULL "
                            "AND (lamport, idx, id) < (?, ?, ?)", [*args, lamport, idx, record_id]).fetchone()[0]
    else:
        before = db.execute(f"SELECT (SELECT count(*) FROM records WHERE {where} AND ts IS NULL) + "
                            f"(SELECT count(*) FROM records WHERE {where} AND (ts, lamport, idx, id) < (?, ?, ?, ?))",
                            [*args, *args, ts, lamport, idx, record_id]).fetchone()[0]
    return count(state, **filters) - 1 - before if descending else int(before)


def row_of_day(state: State, start: int, *, descending: bool = False, **filters: Any) -> int:
    """The row of the first record of the day starting at ``start`` (a Unix time) in time order:
    oldest-first, the first record at or after ``start``; newest-first, the first one before the
    day's end (its latest, or the latest before it).  The count of rows when there is none."""
    where, args = visible_where(**filters)
    if descending:
        sql = f"SELECT count(*) FROM records WHERE {where} AND ts >= ?"
        return int(state.db.execute(sql, [*args, start + 86400]).fetchone()[0])
    sql = (f"SELECT (SELECT count(*) FROM records WHERE {where} AND ts IS NULL) + "
           f"(SELECT count(*) FROM records WHERE {where} AND ts < ?)")  # two ranges of the index
    return int(state.db.execute(sql, [*args, *args, start]).fetchone()[0])
