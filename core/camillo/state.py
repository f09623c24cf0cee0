"""The materialised state: what a vault means, computed from its verified batches (spec §19).

Everything here is derived and disposable: it is rebuilt from the vault's files whenever the local
state is missing or doubtful.  It lives in one SQLite database: this actor's page-encrypted local
state, opened in place (:mod:`camillo.cache`), or one in memory for an open without it, so that a
million records are never Python objects at once.

What it computes, with the rules of spec §19:

* **record validity**: a record counts only when its batch was accepted by the causal log and the
  record itself obeys the authority rules (author is the batch writer; ``user`` class only from the
  owner's devices; an agent never above its grant's maximum; an appender only in its own key
  namespace; ``pred`` only inside the record's causal past; a derived record never above its
  sources' effective class);
* **effective class**: the claimed class, raised to ``user`` by a valid CONFIRM;
* **facts** per (compartment, key), by the rules of :mod:`camillo.facts`: the binding value (the
  user's word), the status ``ok``, ``conflict`` (several concurrent binding values), ``deleted`` or
  ``pending`` (no binding value, only proposals), and the proposals beside it, waiting in the inbox;
* **the timeline**: conversations, messages and other records, minus what a DEL hid or erasure removed;
* **search**: SQLite FTS5 over the visible text (query language in :mod:`camillo.search`).

Confined to the thread that owns the vault (SQLite connections are not shared), but for the copy of
the write-ahead log into the database file that a wide commit leaves to a thread of its own, on a
connection of its own (:meth:`State.commit`, :meth:`State.settle`).
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import cbor2

from . import encoding, heap
from .cache import (
    AUTOCHECKPOINT_PAGES,
    IMPORT_INDEX,
    LOAD_CACHE_BYTES_PER_ROW,
    LOAD_CACHE_MIN_KIB,
    PAGE_CACHE_KIB,
    SEARCH_BODY,
    SEARCH_BUILD_CACHE_KIB,
    SEARCH_KEY,
    SEARCH_ROW_MASK,
    WIDE_PAGE_CACHE_KIB,
    Connection,
    DatabaseError,
    ReadRows,
    complete_schema,
    indexes_deferred,
    keep_first_rows,
    memory_database,
    records_id_own,
)
from .control import BatchView, Roster
from .erased import scrub
from .log import CausalLog
from .passes import (
    REF_PRED,
    REF_SOURCE,
    REF_TARGET,
    check_references,
    compute_facts,
    hide,
    keys_of,
    reach,
    rows_in,
    static_check,
    unjudged_done,
    unjudged_rows,
)
from .records import CONTROL_KINDS, F, Kind, Record
from .recordviews import FactView, RecordView
from .rowfields import Fields, record_fields

SQLITE_INT_MAX = 2**63 - 1
UNEXPLAINED = "removed without an erasure record"  # the reason of a null entry no applied ERASE names
FACT_PAGE = 500  # facts whose records are read together
UNEXPLAINED_ROWS = "SELECT id, batch FROM records WHERE (valid = 0 OR hidden = 1) AND reason = ?"  # (its index)
_VALUE, _META, _NOTE = F.VALUE, F.META, int(Kind.NOTE)  # (as plain integers: read for every record)
_KIND_NAMES = {int(k): k.name for k in Kind}
# the fields a record's view knows (others are shown as unknown)
_KNOWN_FIELDS = frozenset(int(f) for f in (F.V, F.KIND, F.AUTHOR, F.SALT, F.KEY, F.VALUE, F.CLASS, F.PRED, F.SOURCES,
                                           F.ERASE, F.TARGET, F.META, F.BODY, F.SIGS, F.TS, F.TYPE))


# A staged row of the records table, in the column order of State.flush's INSERT: id, batch, idx,
# compartment, writer, author, kind, type, key, class, effective, ts, conversation, role, text, raw,
# has_refs, erased, import_key, lamport (a plain tuple: a large vault stages millions).
_StagedRecord = tuple[bytes, bytes, int, bytes, bytes, bytes | None, int | None, str | None, str | None, int | None,
                      int | None, int | None, str | None, str | None, str | None, bytes | None, int, int, str | None, int]


def visible_where(include_hidden: bool = False, compartments: Iterable[bytes] | None = None,
                  conversation: str | None = None) -> tuple[str, list[Any]]:
    """The SQL condition and arguments of the records the timeline shows (valid values and notes)."""
    comps = list(compartments) if compartments is not None else None
    where = ["valid = 1", "kind IN (1, 3)", *([] if include_hidden else ["hidden = 0"]),
             *([f"compartment IN ({','.join('?' * len(comps))})"] if comps is not None else []),
             *(["conversation = ?"] if conversation is not None else [])]
    return " AND ".join(where), [*(comps or []), *([conversation] if conversation is not None else [])]


def fact_where(*, compartments: Iterable[bytes] | None = None, subject: str | None = None, status: str | None = None,
               proposed: bool = False, forgotten: bool = True) -> tuple[str, list[Any]]:
    """The SQL condition on the facts table for these filters, and its arguments: ``compartments`` (ids),
    ``subject`` (keys ``<subject>/...``, a range of the index of keys: keys are compared exactly, case and
    all), ``status``, ``proposed`` (only facts with proposals waiting beside them), ``forgotten`` (False:
    leave out the facts whose value was forgotten)."""
    where: list[str] = ["1"]
    args: list[Any] = []
    if compartments is not None:
        comps = list(compartments)
        where.append(f"compartment IN ({','.join('?' * len(comps))})")
        args += comps
    if subject is not None:  # "/" is U+002F, "0" the character after it: the keys "<subject>/..."
        where.append("key >= ? AND key < ?")
        args += [subject + "/", subject + "0"]
    if status is not None:
        where.append("status = ?")
        args.append(status)
    if not forgotten:
        where.append("status != 'deleted'")
    if proposed:
        where.append("EXISTS (SELECT 1 FROM proposals p WHERE p.compartment = facts.compartment AND p.key = facts.key)")
    return " AND ".join(where), args


@dataclass
class MaterializeResult:
    keys: set[tuple[bytes, str]] = field(default_factory=set)
    scrubbed: int = 0  # copies of erased records whose content was removed (the caller purges)


class State:
    def __init__(self, db: Connection | None = None, checkpoint: Callable[[], object] | None = None) -> None:
        """``db``: the local state's database (None: one in memory); ``checkpoint``: a function that
        checkpoints its write-ahead log on a connection of its own (:meth:`camillo.cache.Cache.checkpointer`):
        a wide commit leaves it to a thread of its own (see :meth:`commit`)."""
        self._db = db if db is not None else memory_database()
        self._checkpoint = checkpoint
        self._checkpointer: threading.Thread | None = None
        complete_schema(self._db)  # (a new state, or one an older version wrote)
        self._db.commit()
        self._roster: Roster | None = None
        self._views: Mapping[bytes, BatchView] = {}
        self._rows: list[_StagedRecord] = []  # staged, not yet written (see flush)
        self._wide = False  # widened until the next commit, a wide one (widen_page_cache; _loaded narrows it sooner)
        self._refs: list[tuple[bytes, bytes, int]] = []  # (record id, referenced id, REF_*)
        self._read = ReadRows()  # rows of cache_batches and cache_segments a read keeps (store_read): see cache_db
        self._staged_erased: set[bytes] = set()  # batches staged here with an erased (null) entry
        self._inert: set[bytes] = set()  # small batches staged here that _only_inert needs no query for
        self._unbuilt: list[str] = []  # indexes a cold load left to build once validity is computed (defer_indexes)
        self._unbuilt_flags: list[str] = []  # ... and once the batches' flags are written (write_flags)
        self._presumed = False  # rows are written valid until a validity pass over every record (loading)
        # the control records a cold load staged, while its index of ids is built after it (loading): a compaction
        # copies them into its batches, and the index would meet each twice (a million records' held 202)
        self._load_controls: set[bytes] | None = None
        self._import_live = False  # a cold load keeps the index of import keys until it stages one (flush)
        self._load_rows = 0  # rows a wide cold load wrote so far, and its page cache (KiB; not one: <= 0)
        self._load_kib = 0
        # records forget_batches removed, what they referred to, their keys: the next materialize reaches from them
        self._forgotten: set[bytes] = set()
        self._forgotten_keys: set[tuple[bytes, str]] = set()
        # records up to this rowid are in the full-text index (rowids only grow: AUTOINCREMENT)
        row = self._db.execute("SELECT value FROM cache_meta WHERE key = 'indexed'").fetchone()
        self._indexed: int = encoding.decode(row[0]) if row is not None else 0
        # the semantic vectors of one model in memory (camillo.search._Vectors), once searched
        self.vector_cache: object | None = None
        self.search_terms = False  # camillo.search made its view of the index's terms on this connection

    @property
    def roster(self) -> Roster:
        """The roster the last :meth:`materialize` computed the state with."""
        roster = self._roster
        assert roster is not None, "the state is read before it was materialized"
        return roster

    def resume(self, roster: Roster, views: Mapping[bytes, BatchView]) -> None:
        """The state as stored was materialised with this roster over these batches (a warm open of
        an unchanged folder: nothing to compute)."""
        self._roster, self._views = roster, views

    # ------------------------------------------------------------------------------- ingest

    _FLUSH_ROWS = 5_000  # staged rows written at once (their records' bytes held until then)

    def stage(self, view: BatchView, records: Sequence[Record | None]) -> None:
        """Store a newly decrypted batch's records (not yet counted: materialize decides)."""
        self.stage_fields(view, [None if rec is None else record_fields(rec.fields) for rec in records],
                          [None if rec is None else rec.raw for rec in records])

    def stage_fields(self, view: BatchView, fields: Sequence[Fields | None], raws: Sequence[bytes | None]) -> None:
        """:meth:`stage` of the records whose bytes are ``raws`` and whose fields :func:`record_fields`
        read (None: erased), here or in the record-check child (:mod:`camillo.recordcheck`)."""
        rows: list[_StagedRecord] = []
        refs: list[tuple[bytes, bytes, int]] = []
        h = view.header
        # Orders records written within one second: later batches of a writer, and batches that saw
        # others, sort after what they saw; records of one batch keep their order.
        lamport = min(h.seq + sum(h.frontier.values()), SQLITE_INT_MAX)
        bid, cid, wid, rids = view.id, h.compartment_id, h.writer_id, h.records
        controls = self._load_controls
        inert = len(fields) <= 4
        for idx, (rid, f) in enumerate(zip(rids, fields)):  # (an iterator of the ids, not an index into them each time)
            if f is None:
                rows.append((rid, bid, idx, cid, wid, None, None, None, None, None,
                             None, None, None, None, None, None, 0, 1, None, lamport))
                self._staged_erased.add(bid)
                inert = False
                continue
            author, kind, rtype, key, authority, ts, conversation, role, text, pred, sources, target, import_key = f
            if kind not in CONTROL_KINDS or controls is None or rid not in controls:  # (controls: see loading)
                rows.append((rid, bid, idx, cid, wid, author, kind, rtype, key, authority, authority, ts, conversation,
                             role, text, raws[idx], 1 if pred or sources or target else 0, 0, import_key, lamport))
                if kind in CONTROL_KINDS and controls is not None:
                    controls.add(rid)
            if pred:
                refs += [(rid, p, REF_PRED) for p in pred]
            if sources:
                refs += [(rid, s, REF_SOURCE) for s in sources]
            if target:
                refs.append((rid, target, REF_TARGET))
            inert = inert and (kind == _NOTE or kind in CONTROL_KINDS) and key is None
        if inert and not refs:
            self._inert.add(bid)  # (an append's: keyless notes and control records without references)
        self._rows += rows  # (buffered: one statement per table for many batches; an open stages thousands)
        self._refs += refs
        if len(self._rows) >= self._FLUSH_ROWS:
            self.flush()

    @property
    def db(self) -> Connection:
        """The database, with every staged row written first (so no reader sees a partial view)."""
        if self._rows or self._refs or self._read:
            self.flush()
        if self._unbuilt:
            self.build_indexes()
        if self._unbuilt_flags:
            self.build_flag_indexes()
        return self._db

    @contextlib.contextmanager
    def loading(self) -> Iterator[None]:
        """Batches are read into this state (staged).  Into an empty one, a cold load, the secondary
        indexes are built after (:func:`camillo.cache.indexes_deferred`) and the rows are written
        valid: the next :meth:`materialize` checks every record then and writes only those that are
        not valid, instead of every row of the table twice (4.3 s of a cold open at a million
        records).  Nothing is committed before that pass: :meth:`commit` first writes every row not
        valid, as a row no pass has judged is, and the transaction is never committed half-way, so a
        process killed meanwhile leaves nothing of the load."""
        if not self.is_empty():
            yield
            return
        self._presumed = True
        self._import_live = True
        if records_id_own(self._db):  # (its rows go to the tables' ends, the index of ids built after: no wide cache)
            self._load_controls = set()
            if self._wide:
                self._db.execute(f"PRAGMA cache_size = -{PAGE_CACHE_KIB}")
        elif self._wide:  # (an earlier revision's state: its page cache grows with the rows written, _load_cache)
            self._load_rows, self._load_kib = 0, 0
            self._load_cache()
        try:
            with indexes_deferred(self._db, self._loaded, self.defer_indexes):
                yield
        finally:
            self._load_controls = None
            self._import_live = False

    @property
    def cold_loading(self) -> bool:
        """Batches are being loaded into an empty state (:meth:`loading`), none judged yet."""
        return self._presumed

    def _load_cache(self) -> None:
        """A wide cold load's page cache: :data:`~camillo.cache.LOAD_CACHE_BYTES_PER_ROW` for each row
        written so far (the index of ids its rows go to at random pages, with room to spare), from
        :data:`~camillo.cache.LOAD_CACHE_MIN_KIB` up to :data:`~camillo.cache.WIDE_PAGE_CACHE_KIB`."""
        kib = min(WIDE_PAGE_CACHE_KIB, max(LOAD_CACHE_MIN_KIB, self._load_rows * LOAD_CACHE_BYTES_PER_ROW >> 10))
        if kib != self._load_kib:
            self._load_kib = kib
            self._db.execute(f"PRAGMA cache_size = -{kib}")

    def _loaded(self) -> None:
        """A cold load's last rows are written: its page cache is narrowed again (``_wide`` stays, for
        the commit's checkpoint).  In an earlier revision's state the rows went to random pages of the
        index of ids (in this one it is built after them); the index builds and the validity pass after
        it read the table in order, and each build sorts its entries in memory beside the cache (at a
        million records the open's peak memory, 704 -> 616 MiB)."""
        self.flush()
        self._load_kib = -1  # (grown no more)
        self._db.execute(f"PRAGMA cache_size = -{PAGE_CACHE_KIB}")
        self._db.execute("PRAGMA shrink_memory")

    def defer_indexes(self, ddl: Sequence[str], flags: Sequence[str] = ()) -> None:
        """Leave the indexes ``ddl`` to build by the next :meth:`materialize`, once its validity pass
        wrote what they index (or by any earlier read), and those over the batches' flags, ``flags``,
        to build once the reader wrote them (:meth:`write_flags`; or by any earlier read)."""
        self._unbuilt = list(ddl)
        self._unbuilt_flags = list(flags)

    def build_indexes(self) -> None:
        """Build the indexes a cold load left to build (:meth:`defer_indexes`)."""
        unbuilt, self._unbuilt = self._unbuilt, []
        for statement in unbuilt:
            self._db.execute(statement)

    # A cold load's flags (every batch's, before the indexes over them are built: FLAG_INDEX_DDL), from this
    # many on, are written by one pass over the table in its own order, each row joined to its flags in a
    # temporary table, not by a lookup of each row at a random page of it (100,000 of a million records':
    # 5.8 -> 0.9 s).  Not those of a merge, whose rows sit together at the table's end (10,000 at a million
    # records: 0.05 s row by row, 0.28 s by a pass over every row).
    BULK_FLAG_ROWS = 4096

    def write_flags(self, rows: list[tuple[int, int, int, bytes]]) -> None:
        """Write batches' flags, each row (sig_ok, vouched, accepted, id); then build the indexes over
        them a cold load left to build."""
        db = self.cache_db
        rows.sort(key=lambda row: row[3])  # in the order of the id index: each of its pages read once
        if len(rows) < self.BULK_FLAG_ROWS or not self._unbuilt_flags:
            db.executemany("UPDATE cache_batches SET sig_ok = ?, vouched = ?, accepted = ? WHERE id = ?", rows)
        else:  # (OR FAIL, which no row can meet: no statement journal of every page it changes, in memory)
            db.execute("CREATE TEMP TABLE IF NOT EXISTS flag_rows(id BLOB PRIMARY KEY, sig_ok INTEGER, "
                       "vouched INTEGER, accepted INTEGER) WITHOUT ROWID")
            db.executemany("INSERT OR REPLACE INTO temp.flag_rows(sig_ok, vouched, accepted, id) VALUES(?, ?, ?, ?)",
                           rows)
            db.execute("UPDATE OR FAIL cache_batches NOT INDEXED SET sig_ok = f.sig_ok, vouched = f.vouched, "
                       "accepted = f.accepted FROM temp.flag_rows AS f WHERE f.id = cache_batches.id")
            db.execute("DROP TABLE temp.flag_rows")
        self.build_flag_indexes()

    @property
    def flag_indexes_unbuilt(self) -> bool:
        """A cold load left the indexes over the batches' flags to build once they are written."""
        return bool(self._unbuilt_flags)

    def build_flag_indexes(self) -> None:
        """Build the indexes over the batches' flags a cold load left to build (:meth:`defer_indexes`)."""
        unbuilt, self._unbuilt_flags = self._unbuilt_flags, []
        for statement in unbuilt:
            self._db.execute(statement)

    @property
    def cache_db(self) -> Connection:
        """The database for the cache_* tables only, which staging never touches: the rows of the batches
        and segments read (:meth:`store_read`) written first, not the staged records."""
        if self._read:
            self._read.write(self._db)
        return self._db

    def store_read(self, batch_rows: Sequence[tuple[Any, ...]], segment_row: tuple[Any, ...] | None = None) -> None:
        """Keep the rows of cache_batches and cache_segments of a segment read (:class:`~camillo.cache.ReadRows`),
        written before anything reads those tables (:attr:`cache_db`, :attr:`db`, :meth:`flush`)."""
        if self._read.add(batch_rows, segment_row):
            self._read.write(self._db)

    def flush(self) -> None:
        """Write the staged rows (before anything reads the tables), and those of the batches and
        segments read."""
        if self._read:
            self._read.write(self._db)
        if not self._rows and not self._refs:  # (refs alone: a cold load's copy of a control record, stage_fields)
            return
        rows, refs = self._rows, self._refs
        self._rows, self._refs = [], []
        if self._import_live and any(row[18] is not None for row in rows):  # (import_key: see cache.IMPORT_INDEX)
            self._import_live = False
            self._db.execute(f"DROP INDEX IF EXISTS {IMPORT_INDEX}")
        self._db.executemany(  # (valid: as presumed by a cold load, else not until a validity pass)
            "INSERT OR IGNORE INTO records(id,batch,idx,compartment,writer,author,kind,type,key,class,effective,ts,"
            "conversation,role,text,raw,has_refs,erased,import_key,lamport,valid) "
            f"VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,{int(self._presumed)})",
            rows,
        )
        self._db.executemany("INSERT INTO refs(record, ref, how) VALUES(?,?,?)", refs)
        if self._load_kib > 0:  # (a wide cold load's rows: its page cache grows with them)
            self._load_rows += len(rows)
            self._load_cache()

    # The full-text index is built when first needed (a search, closing, a deletion), not by an open.
    _INDEX_CHUNK = 50_000  # It indexes a PUT's or a NOTE's text, key and type (runs of spaces are ignored).

    @property
    def indexed(self) -> int:
        """The records up to this rowid are in the full-text index (those after it are not)."""
        return self._indexed

    def ensure_search(self) -> None:
        """Index the records written since the last call, a chunk of rows at a time."""
        if self._rows:
            self.flush()
        db = self._db
        top = db.execute("SELECT max(rowid) FROM records").fetchone()[0] or 0
        if top > SEARCH_ROW_MASK:  # (a billion records written into one state: SEARCH_KEY has no room)
            raise DatabaseError("the local state has used up its record numbers for the search index")
        width = db.execute("PRAGMA cache_size").fetchone()[0]  # (-KiB: a cold load's is narrow again, _loaded)
        widen = top - self._indexed > self._INDEX_CHUNK and width > -SEARCH_BUILD_CACHE_KIB
        if widen:  # (many rows: the pages of the index they make stay in memory while it is built)
            db.execute(f"PRAGMA cache_size = -{SEARCH_BUILD_CACHE_KIB}")
        try:
            while self._indexed < top:
                upto = min(top, self._indexed + self._INDEX_CHUNK)
                # (in the index's order: FTS5 writes out what it holds in memory whenever a rowid is not
                # above the last one, and the rows of a cold load are not in time order)
                db.execute(f"INSERT INTO search(rowid, body) SELECT {SEARCH_KEY}, {SEARCH_BODY} FROM records "
                           "WHERE rowid > ? AND rowid <= ? AND kind IN (?, ?) ORDER BY 1",
                           (self._indexed, upto, Kind.PUT, Kind.NOTE))
                self._indexed = upto
                db.execute("INSERT OR REPLACE INTO cache_meta(key, value) VALUES('indexed', ?)",
                           (encoding.encode(upto),))
        finally:
            if widen:
                db.execute(f"PRAGMA cache_size = {width}")
                db.execute("PRAGMA shrink_memory")
                heap.release()  # (the pages it held, freed, back to the system)

    def forget_batches(self, batch_ids: Iterable[bytes]) -> None:
        """Remove batches (their segments went away).  The next :meth:`materialize` reaches from
        their records and what those referred to, and judges their keys' facts again.  (Rows the
        full-text index does not hold yet leave nothing to delete there: it is not built for this.)"""
        self.vector_cache = None
        db = self.db
        controls = self._load_controls
        if controls is not None:  # (during a cold load, whose index of ids is built after it: the rows of an id
            keep_first_rows(db)  # written twice are first reduced to the one the index would have kept)
        else:
            controls = set()
        for bid in batch_ids:
            self._inert.discard(bid)
            for rid, comp, key in db.execute("SELECT id, compartment, key FROM records WHERE batch = ?", (bid,)):
                self._forgotten.add(rid)
                controls.discard(rid)  # (its row goes: staged again, it is written again)
                if key is not None:
                    self._forgotten_keys.add((comp, key))
            self._forgotten |= {ref for (ref,) in db.execute(
                "SELECT ref FROM refs WHERE record IN (SELECT id FROM records WHERE batch = ?)", (bid,))}
            db.execute(f"INSERT INTO search(search, rowid, body) SELECT 'delete', {SEARCH_KEY}, {SEARCH_BODY} FROM records "
                       "WHERE batch = ? AND kind IN (?, ?) AND rowid <= ?", (bid, Kind.PUT, Kind.NOTE, self.indexed))
            db.execute("DELETE FROM refs WHERE record IN (SELECT id FROM records WHERE batch = ?)", (bid,))
            # an erased record's semantic vector goes with it (it says what the text was about)
            db.execute("DELETE FROM vectors WHERE record IN (SELECT rowid FROM records WHERE batch = ?)", (bid,))
            db.execute("DELETE FROM records WHERE batch = ?", (bid,))

    def commit(self) -> None:
        """Make what was written durable in the local state (nothing to do in memory); a page cache
        :meth:`widen_page_cache` widened is narrowed again, its pages released."""
        self.flush()
        if self._presumed:  # (a cold load no validity pass followed: not one of its records is valid yet)
            self._db.execute("UPDATE OR FAIL records SET valid = 0 WHERE valid = 1")
            self._presumed = False
        if self._unbuilt:
            self.build_indexes()
        self.build_flag_indexes()  # (the reader writes the flags before it commits: settle)
        settled = self._checkpointer
        if settled is not None and not settled.is_alive():
            self.settle()
        # A wide commit (many segments read at once) leaves a write-ahead log of many pages, which
        # SQLite would copy into the database file before the commit returns: a thread of its own
        # copies it instead, while the open goes on to its first page (a merge's commit at a million
        # records, 1.08 -> 0.82 s: docs/benchmarks.md); the owner's commits leave the log alone until
        # it is done.
        background = self._wide and self._checkpoint is not None and self._db.in_transaction
        if background and self._checkpointer is None:
            self._db.execute("PRAGMA wal_autocheckpoint = 0")
        try:
            if self._db.in_transaction:
                self._db.commit()
        except BaseException:
            if background and self._checkpointer is None:  # (no thread to wait for: the commits checkpoint again)
                with contextlib.suppress(DatabaseError):
                    self._db.execute(f"PRAGMA wal_autocheckpoint = {AUTOCHECKPOINT_PAGES}")
            raise
        if background and self._checkpointer is None:
            thread = threading.Thread(target=self._checkpoint, name="camillo-state-checkpoint")
            try:
                thread.start()
            except RuntimeError:  # (no thread to be had: the owner's commits checkpoint, as SQLite does)
                self._db.execute(f"PRAGMA wal_autocheckpoint = {AUTOCHECKPOINT_PAGES}")
            else:
                self._checkpointer = thread
        if self._wide:
            self._wide = False
            self._db.execute(f"PRAGMA cache_size = -{PAGE_CACHE_KIB}")
            self._db.execute("PRAGMA shrink_memory")
            heap.release()  # (the pages it held, freed, back to the system)

    def is_empty(self) -> bool:
        """No record is staged or stored (a first read, a cold load, goes into it)."""
        return not self._rows and self._db.execute("SELECT 1 FROM records LIMIT 1").fetchone() is None

    def widen_page_cache(self) -> None:
        """Many batches are about to be written at once: SQLite's page cache holds every page they
        touch until the next :meth:`commit` (each read and decrypted once, not again after being
        evicted: a merge of 5,000 batches at a million records, 0.6 s less)."""
        self._wide = True
        self._db.execute(f"PRAGMA cache_size = -{WIDE_PAGE_CACHE_KIB}")

    def settle(self) -> None:
        """Wait for a checkpoint a wide commit left to a thread of its own (before the database is
        closed, handed over or its log truncated); the owner's commits checkpoint again."""
        if self._checkpointer is not None:
            self._checkpointer.join()
            self._db.execute(f"PRAGMA wal_autocheckpoint = {AUTOCHECKPOINT_PAGES}")
            self._checkpointer = None

    def close(self) -> None:
        """Close the database (a checkpoint left to a thread done first); the page key the checkpoint
        held goes with it (a locked vault keeps no key reachable: docs/security.md)."""
        try:
            self.settle()
        finally:
            self._checkpoint = self._checkpointer = None
            self._db.close()

    # ------------------------------------------------------------------------------- materialize

    def materialize(self, roster: Roster, log: CausalLog, views: Mapping[bytes, BatchView],
                    affected: set[bytes] | None = None, writers: set[bytes] | frozenset[bytes] = frozenset(),
                    erasing: bool = False) -> MaterializeResult:
        """Recompute validity, effective classes, hidden records and facts.  ``affected`` limits
        the work to what a change to the records of those batches (new ones, and those whose
        acceptance changed) and of ``writers`` (principals the roster added, replaced or revoked;
        CONFIRMs are then checked again too, since they depend on who the owners are) can reach
        (:func:`camillo.passes.reach`); None re-checks every record (the genesis changed, or an
        erasure went away).  ``erasing``: erasures were added and the batches holding what they
        name are in ``affected``: not the plain-notes path (it scrubs)."""
        self.flush()
        self._roster = roster
        self._views = views
        if self._presumed:  # rows a cold load wrote valid: every record is checked (loading)
            affected = None
        result = MaterializeResult()
        db = self._db  # (not self.db: indexes a cold load left to build are built after the validity pass)
        accepted = log.accepted
        erased_targets = roster.erased_records()

        # A changed principal that wrote no memory record (a replaced passphrase, a revoked recovery
        # phrase, a new device) changes no record's validity, class, reference or fact.
        writers = self._memory_writers(writers, views)
        forgotten, forgotten_keys = self._forgotten, self._forgotten_keys
        self._forgotten, self._forgotten_keys = set(), set()
        if affected is not None and not affected and not writers and not erasing and not forgotten:
            return result  # the same roster, no batch read or accepted since: nothing can have moved
        if affected is not None and not writers and not erasing and not forgotten and self._only_inert(affected, views):
            # New plain notes (messages) and control records that no record refers to: nothing but
            # their own validity can change, so the reference, hiding and fact passes (which scale
            # with the vault) are skipped.
            # (by rowid, in its order: new records sit together at the table's end, where the index of
            # ids would visit a random page of a million records' for each)
            rows = sorted(rows_in(db, "SELECT rowid, batch, writer, author, kind, class, key, raw FROM records "
                                      "WHERE batch IN ({})", affected))
            db.executemany("UPDATE records SET valid = ?, reason = ?, effective = ? WHERE rowid = ?", [
                (0, "its batch is not accepted", klass, row) if batch not in accepted else
                (0 if (reason := static_check(roster, views[batch], writer, author, kind, klass, key, raw))
                 else 1, reason, klass, row)
                for row, batch, writer, author, kind, klass, key, raw in rows])
            return result

        # The records this change can move (None: every record), and the facts it can move.
        scope: set[bytes] | None = None
        keys: set[tuple[bytes, str]] | None = None
        if affected is not None:  # (before an erased record's key and references are scrubbed)
            seeds = erased_targets | forgotten | {rid for (rid,) in rows_in(
                db, "SELECT id FROM records WHERE batch IN ({})", affected)}
            if writers:
                marks = ",".join("?" * len(writers))
                seeds |= {rid for (rid,) in db.execute(f"SELECT id FROM records WHERE writer IN ({marks}) OR kind = ?",
                                                       (*writers, Kind.CONFIRM))}
            scope = reach(db, seeds)
            keys = keys_of(db, scope) | forgotten_keys
        # 0. An erased record keeps no content here, whatever copy it came from (read before the
        #    erasure, or from a segment another device's erasure has not reached yet, §16.10).
        result.scrubbed = scrub(self, db, erased_targets)
        # 1. Static validity of each record: batch accepted and authority rules that need only the
        #    record and its writer (then the passes that follow references start from it).
        # (written back by rowid, in its order: a table scan's order, and one page after the other
        # instead of a lookup in the index of ids, a random page of it, for each record; in chunks, so
        # that a million records' verdicts are never in memory at once; a record's bytes read for a CONFIRM.
        # Over every record, those found invalid are noted and written after the scan, and the others by
        # one statement, not a million: no row's values bound, no statement run again for each.)
        # (over every record, only those not valid without looking are read here: unjudged_rows)
        cols = f"rowid, id, batch, writer, author, kind, class, key, iif(kind = {int(Kind.CONFIRM)}, raw, NULL), erased"
        every = scope is None
        if every:
            db.execute("CREATE TEMP TABLE IF NOT EXISTS invalid(row INTEGER PRIMARY KEY, reason TEXT, effective INTEGER)")
            db.execute("DELETE FROM temp.invalid")
        checked: Iterator[Any] = (
            db.execute(f"SELECT {cols} FROM records WHERE {unjudged_rows(db, roster, accepted, erased_targets)}")
            if scope is None else iter(sorted(rows_in(db, f"SELECT {cols} FROM records WHERE id IN ({{}})", scope))))
        while chunk := list(islice(checked, 10_000)):
            verdicts: list[tuple[str | None, int | None, int]] = []  # reason (None: valid), effective, rowid
            for row, rid, batch, writer, author, kind, klass, key, raw, erased in chunk:
                if batch not in accepted:
                    verdicts.append(("its batch is not accepted", klass, row))
                elif erased or rid in erased_targets:  # a copy from before its erasure is erased too (§16.10)
                    # (a null entry no ERASE names: reported from its row, UNEXPLAINED_ROWS, whatever ran since)
                    verdicts.append(("erased" if rid in erased_targets else UNEXPLAINED, None, row))
                elif (reason := static_check(roster, views[batch], writer, author, kind, klass, key, raw)) or not every:
                    verdicts.append((reason, klass, row))
            if every:
                db.executemany("INSERT INTO temp.invalid(reason, effective, row) VALUES(?, ?, ?)", verdicts)
            else:
                db.executemany("UPDATE records SET valid = (?1 IS NULL), reason = ?1, effective = ?2 WHERE rowid = ?3",
                               verdicts)
        if every:  # (each statement alone leaves no record valid that is not; OR FAIL, which no row can meet,
            # keeps SQLite from copying every page it changes into a statement journal, in memory: 600 MB)
            mine = "FROM temp.invalid WHERE row = records.rowid"  # (by rowid: no scan of every record)
            db.execute(f"UPDATE OR FAIL records SET valid = 0, reason = (SELECT reason {mine}), effective = "
                       f"(SELECT effective {mine}) WHERE rowid IN (SELECT row FROM temp.invalid)")
            if not self._presumed:  # (a cold load's rows were written valid, their class effective: loading)
                db.execute("UPDATE OR FAIL records SET valid = 1, reason = NULL, effective = class WHERE (valid = 0 "
                           "OR reason IS NOT NULL OR effective IS NOT class) AND rowid NOT IN (SELECT row FROM temp.invalid)")
            db.execute("DELETE FROM temp.invalid")
            unjudged_done(db)
            self._presumed = False
        self.build_indexes()  # (those a cold load left to build: over what this pass wrote)
        # 2. References: pred inside the causal past, CONFIRM targets, sources.
        check_references(db, roster, views, scope)
        # 3. Hidden keyless records (a DEL without key names them in pred).
        hide(db, scope)
        # 4. Facts.
        result.keys = compute_facts(db, roster, views, keys)
        return result

    @staticmethod
    def _memory_writers(writers: set[bytes] | frozenset[bytes], views: Mapping[bytes, BatchView]) -> set[bytes]:
        """Those of ``writers`` that wrote a memory record (a batch view holds None for each): only
        their records' static checks, references and facts depend on who they are.  Views read back
        from the local state (session.views.BatchViews) are asked only for those writers' batches: a
        passphrase change at a million records made views of 100,000 batches here."""
        if not writers:
            return set()
        of_writers = getattr(views, "of_writers", None)
        candidates = views.values() if of_writers is None else of_writers(set(writers))
        return {v.writer_id for v in candidates if v.writer_id in writers and any(r is None for r in v.records)}

    def _only_inert(self, batches: set[bytes], views: Mapping[bytes, BatchView]) -> bool:
        """Only keyless NOTEs and control records, no references, named by no record, none erased? (stage)"""
        db, staged = self.db, batches <= self._inert
        self._inert -= batches
        marks = ",".join("?" * len(batches))
        controls = ",".join("?" * len(CONTROL_KINDS))
        # a batch that went away (its records may have been facts); one control record may sit in
        # several batches (a key change writes it to every compartment), stored once
        if any(b not in views for b in batches):
            return False
        if not batches or (not staged and db.execute(
                f"SELECT 1 FROM records WHERE batch IN ({marks}) AND ((kind IS NOT ? AND kind NOT IN ({controls})) "
                "OR key IS NOT NULL OR has_refs = 1 OR erased = 1) LIMIT 1",
                (*batches, Kind.NOTE, *CONTROL_KINDS)).fetchone()):
            return False
        return db.execute(f"SELECT 1 FROM refs WHERE ref IN (SELECT id FROM records WHERE batch IN ({marks})) LIMIT 1",
                          tuple(batches)).fetchone() is None

    # ------------------------------------------------------------------------------- queries

    # (with the stored flag of its batch: accepted on a COMPACTION signature)
    _COLUMNS = ("id, batch, compartment, writer, raw, valid, reason, hidden, erased, effective, kind, "
                "EXISTS (SELECT 1 FROM cache_batches INDEXED BY cache_batches_vouched "
                "WHERE cache_batches.id = records.batch AND vouched = 1)")

    def _vouched(self, batch: bytes, stored: int | None) -> bool:
        """Whether a batch was accepted on a COMPACTION record's signature: its view's flag when one is
        held, else the flag stored (a mapping of views made when asked for, session.views.BatchViews,
        is asked only for the views it holds: a page of results makes none)."""
        peek = getattr(self._views, "peek", None)
        view = peek(batch) if peek is not None else self._views.get(batch)
        return bool(view.vouched) if view is not None else bool(stored)

    def _view(self, row: tuple[Any, ...], shown: dict[bytes, tuple[str, str]] | None = None) -> RecordView | None:
        """The view of a stored row (``shown``: each writer's name and kind, kept across the rows of
        one page: a page of search results is 200 rows by a few writers)."""
        rid, batch, comp, writer, raw, valid, reason, hidden, erased, effective, kind, stored_vouched = row
        roster = self.roster
        names = shown.get(writer) if shown is not None else None
        if names is None:
            p = roster.principals.get(writer)
            names = (roster.writer_name(writer), "agent" if p is not None and p.grant else (p.kind.label if p else "unknown"))
            if shown is not None:
                shown[writer] = names
        writer_name, writer_kind = names
        if raw is None:
            return RecordView(rid, 0, "ERASED", None, comp, roster.compartment_name(comp), writer,
                              writer_name, writer_kind, None, None, None, "", None, None, None, None,
                              (), (), None, {}, batch, "signature", False, reason, bool(hidden), True)
        # (the record's map read directly, as validated_record would give it: checked when first read)
        m: dict[int, Any] = cbor2.loads(raw)
        # (its kind, text, conversation and role as the state stores them: camillo.rowfields)
        _author, rkind, rtype, key, claimed, ts, conversation, role, text, pred, sources, target, _ = record_fields(m)
        kind_name = _KIND_NAMES.get(rkind) or f"UNKNOWN({rkind})"
        unknown = tuple(sorted(m.keys() - _KNOWN_FIELDS))
        return RecordView(
            id=rid, kind=rkind, kind_name=kind_name, type=rtype, compartment_id=comp,
            compartment=roster.compartment_name(comp), writer_id=writer, writer=writer_name,
            writer_kind=writer_kind, ts=ts, key=key, value=m.get(_VALUE), text=text,
            conversation=conversation, role=role, claimed_class=claimed, effective_class=effective,
            sources=tuple(sources or ()), pred=tuple(pred or ()), target=target, meta=dict(m.get(_META, {})),
            batch_id=batch, verified="compaction" if self._vouched(batch, stored_vouched) else "signature",
            valid=bool(valid), reason=reason, hidden=bool(hidden), erased=bool(erased), unknown_fields=unknown,
        )

    def _views_of(self, rows: Iterable[tuple[Any, ...]]) -> list[RecordView]:
        """The views of these rows, in their order (each writer's name made once for them all)."""
        shown: dict[bytes, tuple[str, str]] = {}
        return [v for v in (self._view(row, shown) for row in rows) if v is not None]

    def record(self, rid: bytes) -> RecordView | None:
        row = self.db.execute(f"SELECT {self._COLUMNS} FROM records WHERE id = ?", (rid,)).fetchone()
        return self._view(row) if row else None

    def staged_erased(self, batch: bytes) -> bool:
        """The copy of this batch staged by this object held an erased (null) entry (no query: a cold
        load's indexes wait for its end)."""
        return batch in self._staged_erased

    def batches_holding(self, record_ids: Iterable[bytes]) -> set[bytes]:
        """The batches the state holds these records under."""
        return {b for (b,) in rows_in(self.db, "SELECT DISTINCT batch FROM records WHERE id IN ({})",
                                      sorted(record_ids))}

    def record_by_rowid(self, rowid: int) -> RecordView | None:
        """The record the state stores under this row (semantic vectors name records so)."""
        row = self.db.execute(f"SELECT {self._COLUMNS} FROM records WHERE rowid = ?", (rowid,)).fetchone()
        return self._view(row) if row else None

    def raw_record(self, rid: bytes) -> bytes | None:
        """A valid record's bytes (None when unknown, invalid or erased)."""
        row = self.db.execute("SELECT raw FROM records WHERE id = ? AND valid = 1 AND erased = 0", (rid,)).fetchone()
        return row[0] if row else None

    def raw_attachment_records(self) -> Iterator[tuple[bytes, bytes]]:
        """(id, bytes) of the valid, unerased attachment records (their chunk lists), from a partial
        index: an erasure asks, and a million messages are not read to answer."""
        yield from self.db.execute("SELECT id, raw FROM records INDEXED BY records_attachments WHERE "
                                   "type = 'attachment' AND valid = 1 AND erased = 0 AND raw IS NOT NULL")

    def records(self, ids: Iterable[bytes]) -> list[RecordView]:
        """The views of these records, in the order given (unknown ids are left out)."""
        wanted = list(ids)
        rows: dict[bytes, tuple[Any, ...]] = {
            row[0]: row for row in rows_in(self.db, f"SELECT {self._COLUMNS} FROM records WHERE id IN ({{}})", wanted)}
        return self._views_of(rows[r] for r in wanted if r in rows)

    def records_at(self, rowids: Sequence[int]) -> list[RecordView]:
        """The views of the records at these rowids (the full-text index's keys carry them), in the
        order given: a page of search results read where the search found it, without a lookup in
        the index of record ids for each (about 2 ms of a search's 24 at a million records)."""
        rows = {row[0]: row[1:] for row in self.db.execute(
            f"SELECT rowid, {self._COLUMNS} FROM records WHERE rowid IN (SELECT value FROM json_each(?))",
            [json.dumps(list(rowids))])}
        return self._views_of(rows[r] for r in rowids if r in rows)

    def timeline_ids(self, *, include_hidden: bool = False, compartments: Iterable[bytes] | None = None,
                     conversation: str | None = None, limit: int | None = None, offset: int = 0) -> list[bytes]:
        """Ids of the timeline in order (time, then id): what the lazy table model pages through."""
        where, args = visible_where(include_hidden, compartments, conversation)
        sql = f"SELECT id FROM records WHERE {where} ORDER BY ts, lamport, idx, id"
        if limit is not None or offset:
            sql += " LIMIT ? OFFSET ?"
            args += [-1 if limit is None else limit, offset]
        return [r[0] for r in self.db.execute(sql, args)]

    def timeline(self, offset: int = 0, limit: int | None = None, **filters: Any) -> list[RecordView]:
        ids = self.timeline_ids(limit=limit, offset=offset, **filters)
        return self.records(ids)

    def all_records(self) -> list[RecordView]:
        rows = self.db.execute(f"SELECT {self._COLUMNS} FROM records ORDER BY ts, lamport, idx, id").fetchall()
        return [v for v in (self._view(r) for r in rows) if v is not None]

    # The valid records: all (counted in the smallest index) less those records_unlisted holds not valid (its
    # condition repeated for SQLite), not a pass over every row (0.92 s at 1M records, now 0.07 s).
    COUNT_QUERIES = ("SELECT count(*) FROM records", "SELECT count(*) FROM records WHERE (valid = 0 OR hidden = 1) AND valid = 0")

    def count(self) -> int:
        total, invalid = (self.db.execute(q).fetchone()[0] for q in self.COUNT_QUERIES)
        return int(total - invalid)

    def record_location(self, rid: bytes) -> tuple[bytes, bytes] | None:
        """(batch id, compartment id) of a record, valid or not."""
        row = self.db.execute("SELECT batch, compartment FROM records WHERE id = ?", (rid,)).fetchone()
        return (row[0], row[1]) if row is not None else None

    def erased(self, record_ids: Sequence[bytes]) -> set[bytes]:
        """Which of these records an erasure removed."""
        if not record_ids:
            return set()
        marks = ",".join("?" * len(record_ids))
        return {rid for rid, in self.db.execute(f"SELECT id FROM records WHERE erased = 1 AND id IN ({marks})",
                                                tuple(record_ids))}

    def keys_of(self, record_ids: Iterable[bytes]) -> set[str]:
        """The fact keys these records write (none for messages)."""
        out = set()
        for rid in record_ids:
            row = self.db.execute("SELECT key FROM records WHERE id = ?", (rid,)).fetchone()
            if row is not None and row[0] is not None:
                out.add(row[0])
        return out

    def forgotten_at(self, rid: bytes) -> int | None:
        """When a record was forgotten: the time of the newest valid-or-not DEL naming it, or of the
        DEL that deleted its fact."""
        row = self.db.execute("SELECT max(r.ts) FROM refs f JOIN records r ON r.id = f.record "
                              "WHERE f.ref = ? AND f.how = ? AND r.kind = ?", (rid, REF_PRED, int(Kind.DEL))).fetchone()
        return row[0] if row and row[0] is not None else None

    def fact(self, compartment_id: bytes, key: str) -> FactView | None:
        row = self.db.execute(
            "SELECT compartment, key, status, current, candidates, discarded, history, proposed FROM facts "
            "WHERE compartment = ? AND key = ?", (compartment_id, key)).fetchone()
        return self._facts_of([row])[0] if row else None

    def facts(self, *, after: tuple[str, bytes] | None = None, offset: int = 0, limit: int | None = None,
              **filters: Any) -> list[FactView]:
        """The facts, by key then compartment id: those after the fact ``after`` (its key and compartment
        id), then past the first ``offset``, at most ``limit`` of them (a page read from the index of keys:
        after a fact it costs the page, however many facts there are).  Filters as :func:`fact_where`."""
        where, args = fact_where(**filters)
        if after is not None:
            where += " AND (key, compartment) > (?, ?)"
            args += list(after)
        rows = self.db.execute(
            f"SELECT compartment, key, status, current, candidates, discarded, history, proposed FROM facts "
            f"WHERE {where} ORDER BY key, compartment LIMIT ? OFFSET ?", [*args, -1 if limit is None else limit, offset],
        ).fetchall()
        return self._facts_of(rows)

    def fact_counts(self, **filters: Any) -> dict[str, int]:
        """How many facts there are of each status (``ok``, ``conflict``, ``deleted``, ``pending``), counted
        in the table, no record read.  Filters as :func:`fact_where`."""
        where, args = fact_where(**filters)
        return {status: n for status, n in self.db.execute(
            f"SELECT status, count(*) FROM facts WHERE {where} GROUP BY status", args)}

    def fact_subjects(self, **filters: Any) -> list[tuple[str, int]]:
        """The subjects of the facts' keys (the part before the first "/"), in order, with how many facts
        each has.  Filters as :func:`fact_where`."""
        where, args = fact_where(**filters)
        return [(subject, n) for subject, n in self.db.execute(
            f"SELECT substr(key, 1, instr(key, '/') - 1) AS subject, count(*) FROM facts WHERE {where} "
            "GROUP BY subject ORDER BY subject", args)]

    def fact_keys(self, **filters: Any) -> list[str]:
        """The keys of the facts, in order, without reading a record (a report's list of names)."""
        where, args = fact_where(**filters)
        return [k for k, in self.db.execute(f"SELECT key FROM facts WHERE {where} ORDER BY key, compartment", args)]

    def _facts_of(self, rows: list[tuple[Any, ...]]) -> list[FactView]:
        """The facts of these rows (compartment, key, status, current, then the encoded lists of candidates,
        discarded values, history and proposals), the records of :data:`FACT_PAGE` facts read together,
        each once: five queries a fact took 7 s for 30,000 facts."""
        out: list[FactView] = []
        for at in range(0, len(rows), FACT_PAGE):
            page = [(comp, key, status, current, *(tuple(encoding.decode(x)) for x in lists))
                    for comp, key, status, current, *lists in rows[at:at + FACT_PAGE]]
            wanted = dict.fromkeys(rid for p in page for rid in ((p[3],) if p[3] else ()) + sum(p[4:], ()))
            views = {v.id: v for v in self.records(wanted)}
            out += [FactView(self.roster.compartment_name(comp), comp, key, status,
                             views.get(current) if current else None,
                             *(tuple(views[r] for r in ids if r in views) for ids in (cands, disc, hist, prop)))
                    for comp, key, status, current, cands, disc, hist, prop in page]
        return out

    def fact_value_ids(self) -> list[tuple[bytes, str]]:
        """What an export takes of each fact, as ids (read a page at a time by the caller): the binding
        value, or a conflict's preferred candidate, with the status (``ok``, ``conflict``; the caller
        keeps it only when it is a PUT, as :meth:`facts` shows it), and each proposal waiting beside it,
        marked ``pending``; by key, then compartment."""
        out: list[tuple[bytes, str]] = []
        for status, current, proposed in self.db.execute(
                "SELECT status, current, proposed FROM facts ORDER BY key, compartment"):
            if status in ("ok", "conflict") and current is not None:
                out.append((current, status))
            out += [(rid, "pending") for rid in encoding.decode(proposed)]
        return out

    def import_keys(self, prefix: str = "") -> set[str]:
        """The ``meta.import`` keys of every valid record (importers use them to add nothing twice)."""
        rows = self.db.execute("SELECT import_key FROM records WHERE import_key IS NOT NULL AND import_key LIKE ? "
                               "AND erased = 0", (prefix.replace("%", "") + "%",))
        return {r[0] for r in rows}

    def rejected(self) -> list[RecordView]:
        rows = self.db.execute(
            f"SELECT {self._COLUMNS} FROM records WHERE valid = 0 AND erased = 0 "
            "AND reason NOT IN ('its batch is not accepted', 'erased')"
        ).fetchall()
        return [v for v in (self._view(r) for r in rows) if v is not None]
