"""What an erasure leaves in the local state, and how it is taken out (spec §16.4, §18.3).

* :func:`scrub`: the rows of erased records that still hold content (a copy read before the
  erasure, or from a segment under a live epoch that another device's erasure has not reached
  yet, §16.10) lose it: text, bytes, key, type and the rest, their full-text entries and semantic
  vectors.  The row stays, as any erased record's does.
* :func:`purge`: afterwards, the write-ahead log, whose frames may hold earlier versions of pages, is
  checkpointed and truncated.  (The full-text index drops a deleted record's entries from its pages
  at once: FTS5 ``secure-delete``, set by :func:`camillo.cache.complete_schema`.)

What is deleted is overwritten: the local state database runs with ``secure_delete``
(:mod:`camillo.cache`).  ``tests/security/test_erasure_purge.py`` decrypts every page to check.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

from typing import Protocol

from .cache import SEARCH_BODY, SEARCH_KEY, Connection
from .passes import rows_in
from .records import Kind


class State(Protocol):
    """What of :class:`camillo.state.State` this needs (the state imports this module)."""

    vector_cache: object | None

    @property
    def db(self) -> Connection: ...

    @property
    def indexed(self) -> int: ...

    def commit(self) -> None: ...

    def settle(self) -> None: ...


def scrub(state: State, db: Connection, targets: set[bytes]) -> int:
    """Remove what erased records' rows still hold, in the state's database ``db`` (its staged rows
    written); returns how many rows were scrubbed (the caller then commits and :func:`purge`\\ s)."""
    rows: list[int] = [r for (r,) in rows_in(db, "SELECT rowid FROM records WHERE id IN ({}) AND "
                                              "(erased = 0 OR raw IS NOT NULL OR text IS NOT NULL)", sorted(targets))]
    if not rows:
        return 0
    state.vector_cache = None
    marks = [(r,) for r in rows]
    indexed = [(r,) for r in rows if r <= state.indexed]  # (the index is not built for this)
    db.executemany(f"INSERT INTO search(search, rowid, body) SELECT 'delete', {SEARCH_KEY}, {SEARCH_BODY} FROM records "
                   f"WHERE rowid = ? AND kind IN ({int(Kind.PUT)}, {int(Kind.NOTE)})", indexed)
    db.executemany("DELETE FROM vectors WHERE record = ?", marks)
    db.executemany("DELETE FROM refs WHERE record = (SELECT id FROM records WHERE rowid = ?)", marks)
    db.executemany("UPDATE records SET author = NULL, kind = NULL, type = NULL, key = NULL, class = NULL, "
                   "effective = NULL, ts = NULL, conversation = NULL, role = NULL, text = NULL, raw = NULL, "
                   "has_refs = 0, erased = 1, import_key = NULL WHERE rowid = ?", marks)
    return len(rows)


def purge(state: State) -> None:
    """After records left the state for good: commit, and checkpoint and truncate the write-ahead
    log.  (The full-text index removed their entries from its pages when they were deleted: FTS5
    ``secure-delete``, :func:`camillo.cache.complete_schema`.)"""
    state.commit()
    state.settle()  # (a checkpoint running on a thread of its own would keep this one from truncating)
    state.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
