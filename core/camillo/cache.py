"""The local state database: one actor's materialised state of one vault, opened in place (spec §18.3).

The state (records, facts, the full-text index, semantic vectors, and what the reader pipeline needs
to resume: each batch's header, signatures and control records, and which segment files were
processed) lives in one SQLite database encrypted page by page with SQLCipher 4 (the ``sqlcipher3``
wheels): every 4 KiB page is AES-256-CBC with a random IV and an HMAC-SHA256 over the page, its
number and the IV (HMAC-SHA512 in a state an earlier version wrote: the next open copies it once into
one with HMAC-SHA256 pages), under a random 256-bit page key, never a key of the vault.  The page key is sealed
beside the database (``state.db.key``) under a key derived from the actor's own seed and the vault id
(:func:`camillo.keys.local_key`, purpose ``state-db-key``; a database of an earlier version has none,
and its page key is derived from the seed, purpose ``state-db``).  When this installation's key
rotates (an erasure), the page key is sealed to the new key and the database renamed, not re-encrypted
(:meth:`Cache.take_over`).  The write-ahead log is encrypted the same way; temporary tables stay in
memory.  A stolen disk shows the files' sizes and modification times, nothing else (docs/security.md §5).

The records, facts and index are read in place, page by page, as queries need them; what an open still
reads whole is a row per batch (its writer, seq, compartment, flags and control records: the roster is
rebuilt from them and the stored causal log resumed, so a warm open is O(batches): docs/benchmarks.md);
a batch's stored header is read when first decoded.  Every refresh, append and merge updates the
database in place and commits at most every :data:`COMMIT_AGE` seconds and on close, so a crash
(kill -9, power loss) leaves the last commit: an older but consistent state, from which the next open
reads what is new in the folder.

It is disposable: deleting it loses nothing.  A database that does not open (another vault or another
actor: the key does not match; tampering: a page's HMAC fails; an older format) is deleted and rebuilt
from the vault's files, never trusted over them.  One saved under an older master-secret generation is
kept: nothing in it depends on the master secret; what a new erasure removed is scrubbed from it
(``camillo.erased``; the database deletes securely), and if an erasure it was purged for is no longer
in the folder (a rollback, an older copy) it is rebuilt (``Reader.recompute``).  A damaged page met later, during
a query, raises :class:`~camillo.errors.DamagedFile` and the database is deleted (see
:func:`is_damage`).  One process at a time keeps an actor's database (an exclusive lock beside it); a
second process of the same installation works in memory instead.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from sqlcipher3 import dbapi2 as sqlite  # the stdlib's sqlite3 interface over SQLCipher

from . import encoding, storage
from .errors import DamagedFile, StorageError
from .keys import local_key
from .localstate import atomic_write, open_local, read_file, seal_local
from .primitives import KEY_LEN, random_bytes
from .storage import make_dirs_durable

FORMAT = 8
# What an open of a FORMAT 8 state completes in place (no rebuild): 2 = the time and conversation
# indexes, the batches' writer column and the stored causal log (issue 19); 3 = the full-text index
# with immediate deletions (built again when first needed: see complete_schema); 4 = the batches'
# seq and compartment columns; 5 = the full-text index keyed by time (SEARCH_KEY: built again when
# first needed) and the covering index a warm open reads the batches from; 6 = the vault folder's
# listing (cache_dirs); 7 = the batches' control column and the index of the batches a warm open of
# an unchanged folder reads (cache_batches_special); 8 = the segments' index by epoch (cache_segments_epoch);
# 9 = the causal log kept chain by chain (camillo.log.StoredLog: a log of an earlier revision is built again);
# 10 = the batches' index by writer (cache_batches_writer) and that of those vouched for (cache_batches_vouched);
# 11 = the index of the accepted batches' ids (cache_batches_accepted); 12 = that of the batches a warm open of an
# unchanged folder reads, with their flags (cache_batches_special_flags, in place of cache_batches_special);
# 13 = the index of the records that refer to others (records_with_refs); 14 = pages authenticated by
# HMAC-SHA256, not SQLCipher's default HMAC-SHA512 (STATE_HMAC: an older state is copied once, Cache._reauthenticated)
# 15 = the records' index of ids its own (records_id, RECORDS_ID_DDL), not the table's: a cold load builds it after
# its rows (an earlier revision's state keeps the table's own); 16 = the index of the control records
# (records_control: a warm open after a revocation read every record twice, 0.34 s at 100,000 records)
REVISION = 16
COMMIT_AGE = 2.0  # seconds: the longest a change stays uncommitted while the vault is open
PAGE_CACHE_KIB = 16 * 1024  # SQLite's page cache per connection (the rest stays on disk)
# ... while a refresh reads many segments (a merge, a month of another device's batches), until its
# commit: their rows go to random pages of the indexes of ids (30,000 pages for a merge of 5,000)
WIDE_PAGE_CACHE_KIB = 128 * 1024
# ... and while the full-text index of many records is built (the first search or the lock after a cold
# load): its merges read back what it wrote a moment ago, which a wider cache keeps, but at a million
# records the 128 MiB one took the process 197 MiB above where it was, over a cold open's own peak
# (this one: 90 MiB, for a build of 13 s instead of 11)
SEARCH_BUILD_CACHE_KIB = 32 * 1024
# ... and while a cold load writes a vault's rows into an empty state of an earlier revision (whose index of
# ids is the table's own: see RECORDS_ID_DDL), as wide as the index of ids they make (about 55 bytes a row,
# less than half of this), from 32 MiB up to WIDE_PAGE_CACHE_KIB: a load of a million records held 128 MiB of
# pages at its peak, of which about 40 MiB it never read again
LOAD_CACHE_BYTES_PER_ROW = 96
LOAD_CACHE_MIN_KIB = 32 * 1024
WIDE_SEGMENTS = 1000  # from this many segments read at once
AUTOCHECKPOINT_PAGES = 1000  # SQLite's default: a commit that leaves a longer log copies it (wal_autocheckpoint)
_EXPORTING = ".exporting"
# the database's random page key, sealed to the actor's own key (absent: a database of an earlier
# version, whose page key is derived from the actor's seed)
_KEY_FILE = ".key"
_SUFFIXES = ("", "-wal", "-shm", "-journal", _EXPORTING, _EXPORTING + "-journal", _KEY_FILE)
LEGACY = "cache.bin"  # the sealed SQLite image of earlier versions, read whole at every open

if TYPE_CHECKING:  # sqlcipher3 ships no type information; its interface is the stdlib's
    from sqlite3 import Connection as Connection
    from sqlite3 import DatabaseError as DatabaseError
else:
    Connection = sqlite.Connection
    DatabaseError = sqlite.DatabaseError

# sqlcipher3 binds a parameter that is not an int, a float, a str or a bytearray through its adapters,
# and when none is registered for its type, looks for two attributes whose absence raises: about 2 us a
# parameter (a cold load binds twenty to each record it stages, half of them bytes or None: the rows of a
# million records took 25 s, 13 s with these).  Adapters for bytes and None return the value itself.
sqlite.register_adapter(bytes, bytes)  # (bytes(b) is b)
sqlite.register_adapter(type(None), {}.get)  # ({}.get(None) is None)


# The state's tables (:mod:`camillo.state` computes what they hold; spec §19).
SCHEMA = """
CREATE TABLE IF NOT EXISTS records(
  rowid INTEGER PRIMARY KEY AUTOINCREMENT,
  id BLOB NOT NULL,
  batch BLOB NOT NULL,
  idx INTEGER NOT NULL,
  compartment BLOB NOT NULL,
  writer BLOB NOT NULL,
  author BLOB,
  kind INTEGER,
  type TEXT,
  key TEXT,
  class INTEGER,
  effective INTEGER,
  ts INTEGER,
  conversation TEXT,
  role TEXT,
  text TEXT,
  raw BLOB,
  has_refs INTEGER NOT NULL DEFAULT 0,
  valid INTEGER NOT NULL DEFAULT 0,
  reason TEXT,
  hidden INTEGER NOT NULL DEFAULT 0,
  erased INTEGER NOT NULL DEFAULT 0,
  import_key TEXT,
  lamport INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS records_import ON records(import_key) WHERE import_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS records_batch ON records(batch);
CREATE INDEX IF NOT EXISTS records_key ON records(compartment, key) WHERE key IS NOT NULL;
-- what the timeline and the conversation list read, without reading a record (camillo.timeline):
-- the valid values and notes in time order, and by conversation
DROP INDEX IF EXISTS records_time;
DROP INDEX IF EXISTS records_timeline;
DROP INDEX IF EXISTS records_conversation;
CREATE INDEX IF NOT EXISTS records_by_time ON records(ts, lamport, idx, id, hidden, compartment, conversation) WHERE valid = 1 AND kind IN (1, 3);
CREATE INDEX IF NOT EXISTS records_by_conversation ON records(conversation, compartment, ts, hidden, writer, type) WHERE conversation IS NOT NULL AND valid = 1 AND kind IN (1, 3);
CREATE INDEX IF NOT EXISTS records_unlisted ON records(kind) WHERE valid = 0 OR hidden = 1;
CREATE INDEX IF NOT EXISTS records_attachments ON records(valid) WHERE type = 'attachment';
-- the records that refer to others (the pass over references reads them, not every record)
CREATE INDEX IF NOT EXISTS records_with_refs ON records(id) WHERE has_refs = 1;
-- the control records (kinds 16 and up: a few thousand in a vault of a million), which the rules over
-- revocations read by kind at every open of a vault that has revoked someone (ops.rekey.REVOKES_QUERY)
CREATE INDEX IF NOT EXISTS records_control ON records(kind) WHERE kind >= 16;
CREATE TABLE IF NOT EXISTS refs(record BLOB NOT NULL, ref BLOB NOT NULL, how INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS refs_ref ON refs(ref);
CREATE INDEX IF NOT EXISTS refs_record ON refs(record);
CREATE TABLE IF NOT EXISTS facts(
  compartment BLOB NOT NULL,
  key TEXT NOT NULL,
  status TEXT NOT NULL,
  current BLOB,
  candidates BLOB,
  discarded BLOB,
  history BLOB,
  proposed BLOB,
  PRIMARY KEY(compartment, key)
);
-- the facts in the order they are listed, a page at a time (State.facts: by key, then compartment)
CREATE INDEX IF NOT EXISTS facts_by_key ON facts(key, compartment);
CREATE TABLE IF NOT EXISTS proposals(id BLOB PRIMARY KEY, compartment BLOB NOT NULL, key TEXT NOT NULL);
-- the full-text index: contentless, of SEARCH_BODY, its rowid the record's SEARCH_KEY (newest last); a
-- deletion gives the indexed text again and, with FTS5's secure-delete (set by complete_schema), removes
-- the entries at once (see complete_schema)
CREATE VIRTUAL TABLE IF NOT EXISTS search USING fts5(body, content = '', tokenize = 'unicode61 remove_diacritics 2');
-- each batch read, what a warm open needs of it without decoding it: its writer, seq and compartment
-- (NULL in a state an older version wrote: filled by the next open, see complete_schema), signature
-- and acceptance flags, and whether it holds a control record (control: 1 or 0; NULL in a state an
-- older version wrote, whose writer, seq and compartment may be NULL too: filled by the next open)
CREATE TABLE IF NOT EXISTS cache_batches(
  id BLOB PRIMARY KEY, segment TEXT NOT NULL, epoch BLOB NOT NULL, batch BLOB NOT NULL, controls BLOB NOT NULL,
  sig_ok INTEGER NOT NULL DEFAULT 0, vouched INTEGER NOT NULL DEFAULT 0, accepted INTEGER NOT NULL DEFAULT 0,
  writer BLOB, seq INTEGER, compartment BLOB, control INTEGER
); CREATE INDEX IF NOT EXISTS cache_batches_epoch ON cache_batches(epoch);
CREATE TABLE IF NOT EXISTS cache_segments(name TEXT PRIMARY KEY, batches BLOB NOT NULL, compartment BLOB, epoch BLOB);
-- the segments sealed under given epochs (every open of a vault with an erasure asks for the destroyed ones)
CREATE INDEX IF NOT EXISTS cache_segments_epoch ON cache_segments(epoch);
CREATE TABLE IF NOT EXISTS cache_meta(key TEXT PRIMARY KEY, value BLOB);
-- what an open need not do again (camillo.memos): the signatures verified good (a digest of the algorithm,
-- key, signature and message of each), and, while cache_meta keeps that a check found every erasure
-- complete ('erasures_complete'), the segments stored since (noted by the trigger, whoever stores them)
CREATE TABLE IF NOT EXISTS cache_signatures(digest BLOB PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS cache_segments_since(name TEXT PRIMARY KEY) WITHOUT ROWID;
-- the envelopes read (camillo.memos.EnvelopeMemo): for each file name and recipient id, the payload it
-- opened to (an epoch key with its signatures), with the epoch it is about, or NULL: not for that recipient
CREATE TABLE IF NOT EXISTS cache_envelopes(name TEXT NOT NULL, recipient BLOB NOT NULL, compartment BLOB,
                                           epoch BLOB, payload BLOB, PRIMARY KEY(name, recipient)) WITHOUT ROWID;
CREATE TRIGGER IF NOT EXISTS cache_segments_noted AFTER INSERT ON cache_segments
  WHEN EXISTS (SELECT 1 FROM cache_meta WHERE key = 'erasures_complete')
  BEGIN INSERT OR IGNORE INTO cache_segments_since(name) VALUES (new.name); END;
CREATE TRIGGER IF NOT EXISTS cache_segments_noted_again AFTER UPDATE ON cache_segments
  WHEN EXISTS (SELECT 1 FROM cache_meta WHERE key = 'erasures_complete')
  BEGIN INSERT OR IGNORE INTO cache_segments_since(name) VALUES (new.name); END;
-- the vault folder's listing (camillo.storage.FolderShelf.prime): each directory with its mtime, its
-- files' and its subdirectories' names (one per line), listed outside its mtime's clock tick
CREATE TABLE IF NOT EXISTS cache_dirs(rel TEXT PRIMARY KEY, mtime INTEGER NOT NULL, files TEXT NOT NULL,
                                      subdirs TEXT NOT NULL);
-- semantic vectors (camillo.search): one byte per dimension, each vector scaled so that its largest
-- component is +-127 and rounded (int8), with the scale beside it (a score's error is below 1/127 of
-- the largest component's); with the record's time and whether it is a summary, so that scoring
-- never joins the records. ``vectors8`` was the first version's table (no time): vectors are
-- recomputed.
DROP TABLE IF EXISTS vectors8;
CREATE TABLE IF NOT EXISTS vectors(model TEXT NOT NULL, record INTEGER NOT NULL, vec BLOB NOT NULL,
                                   scale REAL NOT NULL, ts INTEGER NOT NULL, summary INTEGER NOT NULL,
                                   PRIMARY KEY(model, record)) WITHOUT ROWID;
"""

# What the full-text index holds of a record row (a PUT's or a NOTE's): a deletion from the index gives
# it again, computed from the same row (whose columns never change until the row is scrubbed or deleted)
SEARCH_BODY = "coalesce(text, '') || ' ' || coalesce(key, '') || ' ' || coalesce(type, '')"

# The full-text index's rowid of a record row: its time in seconds (clamped to 0 .. 2^33 - 1, none: 0)
# above the row's own rowid (below 2^30), so that the index lists its matches in time order (the newest
# last: FTS5 reads them newest first with ORDER BY rowid DESC, and a time range is a rowid range) and the
# row is found from the index's rowid alone (``rowid & SEARCH_ROW_MASK``).  Computed from columns that
# do not change until the row is scrubbed, which deletes it from the index first.
SEARCH_ROW_BITS = 30
SEARCH_ROW_MASK = (1 << SEARCH_ROW_BITS) - 1
SEARCH_TIME_MAX = (1 << 33) - 1
SEARCH_KEY = f"((min(max(coalesce(ts, 0), 0), {SEARCH_TIME_MAX}) << {SEARCH_ROW_BITS}) | rowid)"


# The batches of cache_batches_special (see complete_schema).
SPECIAL_BATCHES = "control IS NOT 0 OR accepted = 0"


def search_group(ts: int) -> int:
    """The time part of SEARCH_KEY for a record time ``ts`` (seconds)."""
    return min(max(ts, 0), SEARCH_TIME_MAX)


# The batches' secondary indexes (complete_schema makes them; a cold load builds them after it, see
# indexes_deferred).
BATCH_INDEXES = (
    # What a warm open reads of every batch, without the stored headers beside it in the table's pages
    # (73 MB at a million records): the open's scan reads this index alone, a third of the time.
    "CREATE INDEX IF NOT EXISTS cache_batches_open ON cache_batches(id, segment, epoch, controls, sig_ok, "
    "vouched, accepted, writer, seq, compartment)",
    # The batches a warm open of an unchanged folder makes a view of (camillo.session.views.BatchViews):
    # those holding a control record (the roster's), those not accepted (their problems are reported
    # again), and those an older version stored (control NULL: completed by that open); with the flags
    # a warm open reads of them alone when it keeps the roster computed from them (BatchViews.special_flags:
    # this index, not 218 rows of the table beside their stored headers, at a million records).
    f"CREATE INDEX IF NOT EXISTS cache_batches_special_flags ON cache_batches(id, sig_ok, vouched, accepted, writer, "
    f"control) WHERE {SPECIAL_BATCHES}",
    # The batches of given writers (BatchViews.of_writers): those a key change can move, without a scan
    # of every batch (100 ms at a million records, twice in a passphrase change).
    "CREATE INDEX IF NOT EXISTS cache_batches_writer ON cache_batches(writer)",
    # The batches accepted on a compaction's signature (State._COLUMNS asks it for each record a page
    # shows: a lookup in this index alone, which holds none in a vault never compacted, not in the
    # table's own index and then its row: 5-7 ms -> 0.8 ms for a page of 200 results at a million records).
    "CREATE INDEX IF NOT EXISTS cache_batches_vouched ON cache_batches(id) WHERE vouched = 1",
    # The accepted batches' ids (Reader.last_accepted, which a key change asks for): this index alone, not
    # the covering index of every column (125 -> 36 ms at a million records).
    "CREATE INDEX IF NOT EXISTS cache_batches_accepted ON cache_batches(id) WHERE accepted = 1",
)


# The records' unique index of ids: a row of an id already stored is not written (INSERT OR IGNORE keeps the
# first).  Its own index since revision 15, so that a cold load builds it after its rows (indexes_deferred), a
# sort, instead of writing each of a million random ids into it as it goes, whose pages the load's page cache
# then had to hold (about 90 MiB at a million records: most of a cold open's memory beside its views).  A
# state an earlier revision wrote has it as the table's own (``id BLOB UNIQUE``), which cannot be dropped:
# that state keeps it, and a cold load into it writes every row into it as before.
RECORDS_ID_DDL = "CREATE UNIQUE INDEX IF NOT EXISTS records_id ON records(id)"
_TABLE_RECORDS_ID = "sqlite_autoindex_records_1"


def records_id_own(db: Connection) -> bool:
    """The records' index of ids is :data:`RECORDS_ID_DDL`'s, not the table's own (an earlier revision's)."""
    return db.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (_TABLE_RECORDS_ID,)).fetchone() is None


def keep_first_rows(db: Connection) -> None:
    """Of the rows of an id written twice while the records had no index of ids (the same record in two
    batches: a hostile writer's, or a copy), keep the first, as INSERT OR IGNORE into the index, had it
    been there, would have kept it; delete the others."""
    db.execute("DELETE FROM records WHERE rowid IN (SELECT r.rowid FROM records AS r JOIN (SELECT id, "
               "min(rowid) AS first FROM records GROUP BY id HAVING count(*) > 1) AS d "
               "ON r.id = d.id AND r.rowid > d.first)")


def build_records_id(db: Connection) -> None:
    """Build the records' index of ids (after a cold load; or in a state a failed one left without it),
    the rows of an id written twice first reduced to the first (:func:`keep_first_rows`)."""
    try:
        db.execute(RECORDS_ID_DDL)
    except sqlite.IntegrityError:  # (the transaction stays open: the deletion and the build are in it)
        keep_first_rows(db)
        db.execute(RECORDS_ID_DDL)


class ReadRows:
    """The rows of cache_batches and cache_segments of the segments a read took (Reader.add_segment),
    written a chunk at a time: a loose vault's segment holds one batch, and a statement for each segment's
    took a cold open of a million records (100,000 segments) 3.3 s of its reading process.  The state
    writes them before anything reads those tables (State.cache_db, State.db, State.flush)."""

    ROWS = 2_000  # written once this many are kept

    def __init__(self) -> None:
        self.batches: list[tuple[Any, ...]] = []
        self.segments: list[tuple[Any, ...]] = []

    def __bool__(self) -> bool:
        return bool(self.batches or self.segments)

    def add(self, batch_rows: Sequence[tuple[Any, ...]], segment_row: tuple[Any, ...] | None) -> bool:
        """Keep them; whether it is time to write them."""
        self.batches += batch_rows
        if segment_row is not None:
            self.segments.append(segment_row)
        return len(self.batches) >= self.ROWS or len(self.segments) >= self.ROWS

    def write(self, db: Connection) -> None:
        """Write them; kept until both statements succeed (a failure is met again by the next access,
        which writes them first: INSERT OR REPLACE of the same rows, nothing written in between)."""
        db.executemany("INSERT OR REPLACE INTO cache_batches(id, segment, epoch, batch, controls, writer, seq, "
                       "compartment, control) VALUES(?,?,?,?,?,?,?,?,?)", self.batches)
        db.executemany("INSERT OR REPLACE INTO cache_segments(name, batches, compartment, epoch) VALUES(?, ?, ?, ?)",
                       self.segments)
        self.batches, self.segments = [], []


def complete_schema(db: Connection) -> None:
    """Create what is missing of the schema, and bring a state an older version wrote to this one in
    place: the columns of ``cache_batches`` it lacks (the writer, seq and compartment: ``ALTER TABLE``
    adds them empty, in constant time; the reader fills them), and the full-text index, which earlier versions kept with
    ``contentless_delete`` (a deletion only marked its entries, which stayed in the index's pages until
    its segments were merged: an erasure then rewrote the whole index, 2 s at a million records), or
    with the record's own rowid as the index's (before SEARCH_KEY: matches not in time order); that
    one is dropped, and built again when first needed.  This version's index removes a deleted
    record's entries from its pages at once (FTS5 ``secure-delete``, with the database's own
    ``secure_delete``: nothing of an erased record stays in a page)."""
    old = db.execute("SELECT sql FROM sqlite_master WHERE name = 'search'").fetchone()
    if old is not None and ("contentless_delete" in old[0] or db.execute(
            "SELECT 1 FROM cache_meta WHERE key = 'search_key'").fetchone() is None):
        db.execute("DROP TABLE search")
        db.execute("DELETE FROM cache_meta WHERE key = 'indexed'")
    db.executescript(SCHEMA)
    if records_id_own(db) and db.execute("SELECT 1 FROM sqlite_master WHERE name = 'records_id'").fetchone() is None:
        build_records_id(db)  # (a new state; or one a cold load left without it, as a failed write of its last rows can)
    db.execute("INSERT OR IGNORE INTO cache_meta(key, value) VALUES('search_key', 1)")
    have = {row[1] for row in db.execute("PRAGMA table_info(cache_batches)")}
    for column, kind in (("writer", "BLOB"), ("seq", "INTEGER"), ("compartment", "BLOB"), ("control", "INTEGER")):
        if column not in have:
            db.execute(f"ALTER TABLE cache_batches ADD COLUMN {column} {kind}")
    db.execute("DROP INDEX IF EXISTS cache_batches_special")  # (revision 7's, without the flags)
    for ddl in BATCH_INDEXES:
        db.execute(ddl)
    if db.execute("SELECT 1 FROM search_config WHERE k = 'secure-delete'").fetchone() is None:
        db.execute("INSERT INTO search(search, rank) VALUES('secure-delete', 1)")


# The indexes of the records, references and batches tables, built after a bulk load (see indexes_deferred).
_INDEX_DDL = [line.rstrip(";") for line in SCHEMA.splitlines()
              if line.startswith("CREATE INDEX") and (" ON records(" in line or " ON refs(" in line)]
_INDEX_DDL += BATCH_INDEXES
# ... but for the partial indexes of rows a vault holds few of (keyed records, attachments, records that
# refer to others; records not valid or hidden, of which a cold load, writing its rows valid, adds none:
# State.loading), kept during the load: each build read every row of the table for them (0.9 to 2.5 s at
# a million records, each).
_LIVE_INDEXES = ("records_key", "records_attachments", "records_with_refs", "records_unlisted", "records_control",
                 "records_import")
# The index of imported records' keys is kept during a cold load until it stages a record that has one (a vault
# built by an import can hold a million, each at a random page of it), then dropped and built after the load
# (State.flush; a vault without imports: its build read every row, 0.58 s at a million records, for nothing).
IMPORT_INDEX = "records_import"
IMPORT_INDEX_DDL = next(line.rstrip(";") for line in SCHEMA.splitlines() if f" {IMPORT_INDEX} ON " in line)
_INDEX_DDL = [ddl for ddl in _INDEX_DDL if ddl.split()[5] not in _LIVE_INDEXES]
_DEFERRED_INDEXES = [line.split()[5] for line in _INDEX_DDL]  # CREATE INDEX IF NOT EXISTS <name> ON …
# Those over what the computation of validity writes (the columns valid and hidden): after a cold load,
# built once it has run (State.materialize), not before it (each of its million updates then moved an
# entry out of one of them and into another).
VALIDITY_INDEX_DDL = [ddl for ddl in _INDEX_DDL if re.search(r"\b(valid|hidden)\b", ddl)]
# Those over the batches' flags (sig_ok, vouched, accepted), which a cold load writes for every batch once
# its roster and log are computed: built after that (State.write_flags), not before it (each of the
# 100,000 updates of a million records' load moved entries of four indexes at random pages, and its row at
# a random page of the table: 5.8 s of a 38 s cold open).
FLAG_INDEX_DDL = [ddl for ddl in BATCH_INDEXES if re.search(r"\b(sig_ok|vouched|accepted)\b", ddl)]


@contextmanager
def indexes_deferred(db: Connection, flush: Callable[[], None],
                     later: Callable[[list[str], list[str]], None]) -> Iterator[None]:
    """Load many batches into an empty state (a cold open): the secondary indexes of the records, the
    references and the batches are dropped for the load and built once after it, after ``flush``
    wrote the last staged rows (a sorted build instead of a B-tree update per row); those of
    :data:`VALIDITY_INDEX_DDL` and :data:`FLAG_INDEX_DDL` are handed to ``later`` (the state builds
    them once its validity is computed, and once the batches' flags are written).  A process killed
    meanwhile leaves a database without them, which the next open's schema (``CREATE INDEX IF NOT
    EXISTS``) completes.  A state that holds records is loaded as it is.  The records' index of ids is
    built after the load too (:func:`build_records_id`), unless the state has it as the table's own
    (:func:`records_id_own`)."""
    if db.execute("SELECT 1 FROM records LIMIT 1").fetchone() is not None:
        yield
        return
    ids_later = records_id_own(db)
    for name in _DEFERRED_INDEXES + (["records_id"] if ids_later else []):
        db.execute(f"DROP INDEX IF EXISTS {name}")
    try:
        yield
    finally:
        try:
            flush()
        finally:  # (never a table without it for the rest of the session, whatever the last rows met)
            if ids_later:
                build_records_id(db)
        for ddl in _INDEX_DDL:  # (execute, not executescript: that would commit the load half-way)
            if ddl not in VALIDITY_INDEX_DDL and ddl not in FLAG_INDEX_DDL:
                db.execute(ddl)
        db.execute(IMPORT_INDEX_DDL)  # (there still, unless the load staged an imported record: State.flush)
        later(VALIDITY_INDEX_DDL, FLAG_INDEX_DDL)


def memory_database() -> Connection:
    """A state database in memory (an open without local state: ``cache=False``, read-only, a
    second process of this installation).  The same SQLite as the local state, unencrypted."""
    db: Connection = sqlite.connect(":memory:")
    db.execute("PRAGMA temp_store = MEMORY")
    return db


# A read into a state without local state goes to a scratch database on disk (scratch_database), not
# memory, from this many bytes of segments: a state in memory is about four times its segments' size
# (a million records' held 1.7 GB of a cold open's 2.1 GB), and under this it stays under about 130 MB.
SCRATCH_SEGMENT_BYTES = 32 << 20
SCRATCH_PAGE_BYTES = 16 << 10  # a scratch database's pages
_SCRATCH_FILE = "state.db"


class _ScratchConnection(sqlite.Connection):  # type: ignore[misc]
    """A connection to a scratch database (:func:`scratch_database`): closing it deletes its files."""

    scratch_dir = ""

    def close(self) -> None:
        try:
            super().close()
        finally:
            _remove_scratch(self.scratch_dir)


def is_scratch(db: Connection) -> bool:
    """A scratch database's connection (:func:`scratch_database`)."""
    return isinstance(db, _ScratchConnection)


def _remove_scratch(directory: str) -> None:
    if directory:
        for suffix in ("", "-journal", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(directory, _SCRATCH_FILE + suffix))
        with contextlib.suppress(OSError):
            os.rmdir(directory)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # (another user's process)
    return True


def scratch_database(root: str) -> Connection:
    """A state database of this process alone on disk, for a read of a large vault without local
    state (``cache=False``, read-only, a second process of this installation, a device not yet
    registered): memory holds SQLite's page cache of it, not all of it.  Encrypted page by page as the
    local state is, under a random key that only this process ever holds (never written anywhere:
    a scratch database a killed process left behind is unreadable), in a directory of its own under
    ``root`` (``<pid>-<random>``: a directory whose process is gone is deleted by the next one made);
    its files are deleted when it is closed.  No rollback journal on disk, no fsync: nothing in it
    needs to survive the process.  OSError when ``root`` cannot be written."""
    os.makedirs(root, mode=0o700, exist_ok=True)
    for name in os.listdir(root):  # left by a process killed while it held one
        pid = name.partition("-")[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            _remove_scratch(os.path.join(root, name))
    directory = tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=root)
    try:
        db: _ScratchConnection = sqlite.connect(os.path.join(directory, _SCRATCH_FILE), factory=_ScratchConnection)
    except BaseException:
        _remove_scratch(directory)
        raise
    db.scratch_dir = directory
    # Its pages authenticated by HMAC-SHA256, not SQLCipher's default HMAC-SHA512: as strong a tag, and
    # twice as fast where the processor computes SHA-256 itself (a cold load writes, reads and
    # rewrites each page of its million records several times; nothing opens this database again).
    # And pages of 16 KiB, not 4: a page's cipher and tag have a fixed cost beside the bytes (at 1M
    # records, two alternated pairs of cold opens: 55.8 / 52.0 -> 52.1 / 46.7 s).
    return _keyed(db, random_bytes(KEY_LEN), journal="MEMORY", synchronous="OFF", hmac="HMAC_SHA256",
                  page_size=SCRATCH_PAGE_BYTES)


def is_damage(exc: BaseException) -> bool:
    """An SQLite error that says a page did not decrypt or the file is malformed ("file is not a
    database", "database disk image is malformed"), not a locked database, a full disk or a bad
    statement (those are subclasses)."""
    return type(exc) is DatabaseError


class Cache:
    """This actor's local state database for one vault: where it is, its key, opening and deleting it."""

    def __init__(self, path: str, secret: bytes, vault_id: bytes) -> None:
        self.path = path
        self.vault_id = vault_id
        self._derived = local_key(secret, "state-db", vault_id)  # the page key of an earlier version's database
        self._wrap = local_key(secret, "state-db-key", vault_id)  # seals the page key
        self._page: bytes | None = None
        self._lock_fd: int | None = None
        self.problem = ""  # why the last open started from nothing ("" when it resumed or there was none)

    @property
    def page_key(self) -> bytes:
        """The database's page key, sealed beside it (or derived from the actor's seed, for a database
        of an earlier version).  A sealed key that does not open raises :class:`DamagedFile`."""
        if self._page is None:
            sealed = read_file(self.path + _KEY_FILE)
            self._page = self._derived if sealed is None else open_local(
                self._wrap, "state-db-key", self.vault_id, sealed, self.path + _KEY_FILE)
        return self._page

    # ------------------------------------------------------------------------------ opening

    def open(self, generation: int) -> tuple[Connection, bool] | None:
        """The database, and whether it holds a state to resume from (False: a new, empty one).
        None when another process of this installation holds it (it then works in memory)."""
        if not self.acquire():
            return None
        legacy = os.path.join(os.path.dirname(self.path), LEGACY)
        with contextlib.suppress(OSError):
            os.unlink(legacy)
        if os.path.exists(self.path):
            db = None
            try:
                db = self._connect()
                if db.execute("PRAGMA cipher_hmac_algorithm").fetchone()[0] == LEGACY_HMAC:
                    db = self._reauthenticated(db)
                # (by key: the stored causal log beside them is megabytes at a million records, read
                # where the reader asks for it)
                meta = dict(db.execute("SELECT key, value FROM cache_meta WHERE key IN "
                                       "('format', 'vault', 'generation', 'erasures')").fetchall())
                if encoding.decode(meta.get("format", b"\x00")) != FORMAT or meta.get("vault") != self.vault_id:
                    self.problem = "the local state was of an older version and is rebuilt"
                elif encoding.decode(meta.get("generation", b"\x00")) != generation and "erasures" not in meta:
                    # an older version's state, saved before the keys rolled: it may hold what an
                    # erasure removed, and does not say which erasures it was purged for
                    self.problem = "the vault's keys changed since the local state was saved: it is rebuilt"
                else:
                    # also after a roll of the master secret (another device changed a credential,
                    # revoked or erased): the reader reads what changed, scrubs what an erasure
                    # removed, and rebuilds if an erasure it was purged for is gone
                    return db, True
            except (sqlite.DatabaseError, ValueError, TypeError, DamagedFile):
                self.problem = "the local state did not open (damaged, or not this installation's) and is rebuilt"
            if db is not None:
                db.close()
            self._delete_files()
        return self.create(generation), False

    def _meta(self, generation: int) -> list[tuple[str, bytes]]:
        return [("format", encoding.encode(FORMAT)), ("generation", encoding.encode(generation)),
                ("vault", self.vault_id)]

    def create(self, generation: int) -> Connection:
        """A new, empty database (any previous one is deleted first), under a new random page key."""
        self._delete_files()
        try:
            make_dirs_durable(os.path.dirname(self.path), mode=0o700)
            self._seal_key(random_bytes(KEY_LEN))
            db = self._connect()
            db.execute("CREATE TABLE cache_meta(key TEXT PRIMARY KEY, value BLOB)")
            db.executemany("INSERT INTO cache_meta(key, value) VALUES(?, ?)", self._meta(generation))
            db.commit()
        except (OSError, sqlite.OperationalError) as exc:
            raise self._unwritable(exc) from None
        return db

    def export(self, source: Connection, generation: int) -> Connection:
        """A new database holding a copy of ``source`` (a state read in memory before this actor was
        known: a first registration), encrypted page by page on the way (``sqlcipher_export``)."""
        self._delete_files()
        staged = self.path + _EXPORTING  # complete before it takes the database's name: a process killed
        try:                              # while exporting leaves no half-made database to be resumed
            make_dirs_durable(os.path.dirname(self.path), mode=0o700)
            self._seal_key(random_bytes(KEY_LEN))
            source.executemany("INSERT OR REPLACE INTO cache_meta(key, value) VALUES(?, ?)", self._meta(generation))
            source.commit()
            _export(source, staged, self.page_key)
            os.replace(staged, self.path)
            storage.fsync_dir(os.path.dirname(self.path))
            return self._connect()
        except (OSError, sqlite.OperationalError) as exc:
            self._delete_files()
            raise self._unwritable(exc) from None

    def _reauthenticated(self, db: Connection) -> Connection:
        """The database ``db``, which an earlier version wrote with HMAC-SHA512 pages (revision 13 and
        before), copied once into one whose pages carry HMAC-SHA256 tags (:data:`STATE_HMAC`), under
        the same page key, which takes its name when complete: a process killed meanwhile leaves the
        old one, which the next open converts.  ``db`` is closed."""
        staged = self.path + _EXPORTING
        try:
            for left in (staged, staged + "-journal"):  # (by a process killed while it converted)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(left)
            _export(db, staged, self.page_key)
            db.close()  # (its write-ahead log checkpointed and deleted; what it held is in the copy)
            for suffix in ("-wal", "-shm"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path + suffix)
            os.replace(staged, self.path)
            storage.fsync_dir(os.path.dirname(self.path))
        except (OSError, sqlite.OperationalError) as exc:
            with contextlib.suppress(Exception):
                db.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(staged)
            raise self._unwritable(exc) from None
        return self._connect()

    def take_over(self, old: Cache, db: Connection, generation: int) -> Connection:
        """The database of the key this installation replaced (``old``, open as ``db``), taken over in
        place: its page key is sealed to this key beside it and the file renamed into this key's
        place.  No page is re-encrypted: a key rotation (an erasure's) costs the same at any size,
        where re-keying every page took 21 s at a million records (docs/benchmarks.md).  What an
        erasure removed was overwritten in place before (``camillo.erased``); what this leaves to a
        holder of the current key is said in docs/security.md §5.  ``db`` is closed.  A process killed
        meanwhile leaves either the old database (deleted with the old key) or this one, complete."""
        self._delete_files()
        try:
            make_dirs_durable(os.path.dirname(self.path), mode=0o700)
            db.executemany("INSERT OR REPLACE INTO cache_meta(key, value) VALUES(?, ?)", self._meta(generation))
            db.commit()
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()  # the whole database in its main file
            key = old.page_key
            db.close()
            self._seal_key(key)
            os.replace(old.path, self.path)
            storage.fsync_dir(os.path.dirname(self.path))
            old.discard()
            return self._connect()
        except (OSError, StorageError, sqlite.OperationalError) as exc:
            with contextlib.suppress(Exception):
                db.close()
            self._delete_files()
            raise self._unwritable(exc) from None

    def _seal_key(self, key: bytes) -> None:
        """Make ``key`` this database's page key, sealed to the actor's key beside it (durably, before
        the database it opens: a key file without a database is deleted by the next :meth:`create`)."""
        atomic_write(self.path + _KEY_FILE, seal_local(self._wrap, "state-db-key", self.vault_id, key))
        self._page = key

    def _unwritable(self, exc: Exception) -> StorageError:
        return StorageError(f"cannot write this installation's local state {self.path} ({exc}): make it "
                            "writable (or set CAMILLO_HOME elsewhere) and try again")

    def _connect(self) -> Connection:
        return _connect(self.path, self.page_key)

    def checkpointer(self) -> Callable[[], tuple[int, int, int] | None]:
        """A function that copies what the write-ahead log holds into the database file, on a
        connection of its own: any thread may call it while the owner's connection goes on (a
        passive checkpoint waits for no reader or writer; what it cannot copy yet, a later one
        does).  A checkpoint that fails leaves the log as it was: nothing is lost, a later one
        copies it.  A merge of 5,000 batches at a million records writes 125 MB to the log; copying
        it on the owner's connection made its commit 1.08 s instead of 0.82 s (docs/benchmarks.md).  (:class:`camillo.state.State` calls it
        after a wide commit, and waits for it before the database is closed or handed over.)"""
        path, key = self.path, self.page_key

        def checkpoint() -> tuple[int, int, int] | None:
            """(busy, pages in the log, pages copied), or None when it could not run."""
            with contextlib.suppress(OSError, sqlite.Error):
                db = _connect(path, key, existing=True)
                try:
                    return tuple(db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone())
                finally:
                    db.close()
            return None

        return checkpoint

    def acquire(self) -> bool:
        """Hold this database for this process (False: another process of this installation does)."""
        if self._lock_fd is not None:
            return True
        directory = os.path.dirname(self.path)
        try:
            make_dirs_durable(directory, mode=0o700)
            fd = os.open(os.path.join(directory, "state.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        except OSError:
            return False  # a read-only home: work in memory
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        self._lock_fd = fd
        return True

    def release(self) -> None:
        """Let another process of this installation keep the database (the connection is closed)."""
        if self._lock_fd is not None:
            with contextlib.suppress(OSError):
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    # ------------------------------------------------------------------------------ deleting

    def _delete_files(self) -> None:
        self._page = None
        for suffix in _SUFFIXES:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path + suffix)

    def discard(self, db: Any = None) -> None:
        """Delete the database (its connection ``db`` is closed first)."""
        if db is not None:
            with contextlib.suppress(Exception):
                db.close()
        self._delete_files()


# The local state's pages are authenticated by HMAC-SHA256: as strong a tag as SQLCipher's default
# HMAC-SHA512, and twice as fast where the processor computes SHA-256 itself (every page a warm open,
# a search or a commit reads or writes).  A state an earlier version wrote has HMAC-SHA512 pages: it is
# copied once into a database with HMAC-SHA256 pages by the next open (Cache._reauthenticated).
STATE_HMAC = "HMAC_SHA256"
LEGACY_HMAC = "HMAC_SHA512"


def _connect(path: str, key: bytes, existing: bool = False) -> Connection:
    """A connection to the page-encrypted database at ``path`` (page key ``key``), set up as every
    connection to it is (``existing``: never one that makes the file, if it is gone)."""
    def connect(hmac: str) -> Connection:
        db: Connection = (sqlite.connect(f"file:{urllib.parse.quote(path)}?mode=rw", uri=True) if existing
                          else sqlite.connect(path))
        # (the write-ahead log: a power cut keeps the last checkpointed commit)
        return _keyed(db, key, journal="WAL", synchronous="NORMAL", hmac=hmac)

    try:
        db = connect(STATE_HMAC)
    except DatabaseError as exc:
        if not is_damage(exc):
            raise
        try:  # (pages an earlier version wrote; a wrong key or a damaged file fails both ways)
            db = connect(LEGACY_HMAC)
        except DatabaseError:
            raise exc from None
    os.chmod(path, 0o600)
    return db


def _export(source: Connection, staged: str, key: bytes) -> None:
    """A copy of the database ``source`` into a new file ``staged`` (page key ``key``, pages
    authenticated by :data:`STATE_HMAC`), encrypted page by page on the way (``sqlcipher_export``),
    and durable when this returns."""
    source.execute("ATTACH DATABASE ? AS store KEY ?", (staged, f"x'{key.hex()}'"))
    try:
        source.execute(f"PRAGMA store.cipher_hmac_algorithm = {STATE_HMAC}")
        source.execute("SELECT sqlcipher_export('store')").fetchall()
    finally:
        source.execute("DETACH DATABASE store")
    fd = os.open(staged, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _keyed(db: Connection, key: bytes, *, journal: str, synchronous: str, hmac: str = "",
           page_size: int = 0) -> Connection:
    """``db`` set up as every page-encrypted database of the state is, under page key ``key``, with
    this journal and sync mode, and this page authentication (``hmac``: SQLCipher's default,
    HMAC-SHA512, when empty) and page size (SQLCipher's default, 4 KiB, when 0) (closed when that fails)."""
    try:
        db.execute("PRAGMA cipher_log_level = NONE")  # a wrong key is expected (discarded), not logged
        db.execute(f"PRAGMA key = \"x'{key.hex()}'\"")
        if hmac:
            db.execute(f"PRAGMA cipher_hmac_algorithm = {hmac}")
        if page_size:
            db.execute(f"PRAGMA cipher_page_size = {int(page_size)}")
        db.execute("PRAGMA temp_store = MEMORY")  # no temporary file, encrypted or not
        # what is deleted is overwritten, in the page and in freed pages: an erased record leaves
        # nothing behind when its rows go (spec §16.4; tests/security/test_erasure_purge.py)
        db.execute("PRAGMA secure_delete = ON")
        db.execute(f"PRAGMA cache_size = -{PAGE_CACHE_KIB}")
        db.execute(f"PRAGMA journal_mode = {journal}").fetchone()  # the first read: a wrong key fails here
        db.execute(f"PRAGMA synchronous = {synchronous}")
    except BaseException:
        db.close()
        raise
    return db
