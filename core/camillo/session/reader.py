"""Reading a vault folder: envelopes, segments, the roster, the causal log and the materialised
state (spec §20 steps 3-7), incrementally.

A :class:`Reader` owns everything a session has read: the batches by id (:attr:`Reader.batches`,
one :class:`~camillo.control.BatchView` each, made from the local state when first asked for after a
warm open: :class:`~camillo.session.views.BatchViews`), which segment holds which batches under which
epoch (likewise read when asked for: :mod:`camillo.session.segmap`), the problems found on the way, the roster, the causal log and the materialised state
(:attr:`Reader.materialized`, an SQLite database).  :meth:`Reader.refresh` reads what appeared in
the folder since the last call and recomputes only what depends on it; what it returns names
exactly what moved.

Keys come from the session's :class:`~camillo.session.keyring.KeyRing`; the reader never holds a
secret of its own.  Confined to the thread that owns the vault.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, MutableMapping, Sequence
from contextlib import nullcontext
from typing import Any

import cbor2

from .. import cache as cache_mod
from .. import encoding, envelopes, ids, keys, segments
from ..cache import Cache, Connection, DatabaseError
from ..changes import Changes
from ..control import BatchView, Roster, build_roster
from ..erased import purge
from ..errors import StorageError, VaultError
from ..log import (
    CausalLog,
    StoredLog,
    build_log,
    extend_log,
    extend_log_after_roster_change,
    signed_of,
)
from ..memos import EnvelopeMemo, SignatureMemo
from ..names import kind_of
from ..packshelf import PackShelf
from ..primitives import CryptoFailure, RecipientKey, constant_time_equal, sha256
from ..records import Batch, Record, decode_record, shared, validated_record, verify_batch_signature
from ..rowfields import Fields, plain_fields
from ..state import State
from ..storage import FolderShelf, hash_matches
from ..values import Problem
from . import copies, listing, resume, segread
from .changed import control_changes
from .grantchain import trusted_epoch_keys
from .keyring import EpochRef, KeyRing
from .resume import collector_paused
from .segmap import SegmentBatches, SegmentEpochs
from .views import ROW, BatchViews, CachedView, ReadView, held_or_unkept, nones

Progress = Callable[[int, int], None]


class Reader:
    def __init__(self, shelf: FolderShelf | PackShelf, vault_id: bytes, keyring: KeyRing) -> None:
        self.shelf = shelf
        self.vault_id = vault_id
        self.keyring = keyring
        self.progress: Progress | None = None  # called while segments are read: (done, total)
        self.decryptions = 0  # segments decrypted (tests count warm opens with it)
        self.checked_apart = 0  # batches whose records a child process checked (camillo.recordcheck)
        # set for an agent's session: the grant's own key, and the owner devices it trusts
        self.grant_recipient: RecipientKey | None = None
        self.grant_trusted: dict[bytes, bytes] | None = None
        # an append grant's envelopes judged by its chain of trust (epoch public keys, owner
        # certificates, revoked owners), by file name
        self.grant_chain: dict[str, envelopes.EnvelopePayload] = {}
        self.store: Cache | None = None  # this actor's local state database, when the state lives there
        self.scratch_root: str | None = None  # where a large read without one goes (segread.state_for)
        self.store_doomed = False  # the local state is deleted on close (its actor no longer counts)
        self.materialized = State()
        self._log: CausalLog | None = None
        self.stored_log: StoredLog | None = None  # the log kept in the local state, each chain read when needed
        # the signatures verified good, kept in the local state (those of control records read here)
        self.signature_memo = SignatureMemo(lambda: self.materialized.cache_db)
        self.envelope_memo = EnvelopeMemo(lambda: self.materialized.cache_db)  # the envelopes read before
        self.reset()

    def reset(self) -> None:
        """Forget everything read (the keys below the master secret are forgotten by the caller);
        the local state database, if any, starts again empty."""
        self._take_listing()
        # a dict, or after a warm open views made from the local state when asked for
        self.batches: MutableMapping[bytes, BatchView] = {}
        self.single_reads = 0  # stored headers read one at a time (see _stored_batch)
        self.segment_batches: MutableMapping[str, list[bytes]] = {}
        self.segment_epochs: MutableMapping[str, EpochRef] = {}  # segment -> (compartment, epoch)
        self.segment_problems: dict[str, Problem] = {}
        self.unreadable: dict[str, EpochRef] = {}
        self.incomplete: set[str] = set()  # content-addressed files not matching their names (yet)
        self.rescan_all = True  # the next refresh considers every file (not only what changed)
        self.listing_trusted = False  # the next scan took the listing kept in the local state on trust
        self.envelopes_again = False  # the next refresh reads every envelope (read_again)
        self.segments_again: set[str] = set()  # and these segments
        self.scanned_at = -math.inf  # time.monotonic() of the last folder scan (see writer.WRITE_SCAN_AGE)
        self.roster = Roster(self.vault_id)
        self.log = CausalLog()  # (the property below: a stored log is decoded whole when first asked for)
        self.materialized.close()
        store = self.store
        self.materialized = State(store.create(self.keyring.generation), store.checkpointer()) if store is not None else State()
        self.roster_fingerprint = b""
        # (global fingerprint, principals) of the last recompute in this session: a roster change
        # that only adds, replaces or revokes principals re-checks only their records
        self.roster_snapshot: tuple[bytes, dict[bytes, Any]] | None = None
        self._last_accepted: set[bytes] | None = set()
        # the ERASE records the state was purged for: one of them missing from the folder (a rollback,
        # an older copy of the vault) means the state holds less than the folder does: it is rebuilt
        self.erasures_seen: frozenset[bytes] = frozenset()
        # the current keyring delivered an epoch an applied ERASE destroyed (a roll that had not seen
        # the erasure wrapped it): an owner device rolls the keys again (spec §16.10 rule 9)
        self.destroyed_delivered = False
        self.pending_batches: set[bytes] = set()
        self.moved_keys: set[tuple[bytes, str]] = set()  # facts that moved since the last Changes
        self.unreported: list[bytes] = []  # batches read since the last Changes
        self.copies: copies.Copies = {}  # other copies of held batches, to be judged (session.copies)
        self.copies_waiting: copies.Waiting = {}  # and those waiting for their writer's key
        # (segment, erased record) pairs known to hold no copy of the record (ops.repair)
        self.erasure_checked: set[tuple[str, bytes]] = set()
        self.dirty = True  # read something the local state has not committed yet
        # the causal log kept in the local state (spec §17; camillo.log.encode_log): a warm open of an
        # unchanged folder resumes it instead of building it over every batch
        self.log_fresh = False  # the log covers every batch read (a recomputation or an extension ran since)
        self.log_stored = False  # the local state holds this log (nothing it covers changed since)
        self.resume: tuple[bytes, bytes] | None = None  # (what it was computed from, its head) read at the open
        self.log_special: bytes | None = None  # (resume.special_digest, kept with it)
        self.kept_chains: bytes | None = None  # its chains, read before the stored log was deleted
        self.flags_all = True  # every batch's flags (signed, vouched, accepted) are to be written
        self.flags_new: set[bytes] = set()  # else these batches' flags
        self.listing_all = True  # the local state is to keep the folder's whole listing (else what moved)
        self.committed_at = time.monotonic()

    def forget_cached_roster(self) -> None:
        """The next recompute checks every record again (the keys changed under it)."""
        self.roster_fingerprint, self.roster_snapshot, self.last_accepted = b"", None, set()

    # ------------------------------------------------------------------------------ the local state

    def attach(self, store: Cache, db: Connection, resumed: bool) -> str:
        """Keep the state in this actor's local state database ``db`` from now on: resume from what
        it holds (``resumed``; batches decoded again without repeating the checks made before they
        were stored), or move what was read so far into it.  Returns "" or why it was not resumed."""
        problem = self.load_cached(db, store) if resumed else ""
        if resumed and not problem:
            self.store, self.store_doomed = store, False
            return ""
        db.close()
        self.move_to(store)
        return problem

    def move_to(self, store: Cache) -> None:
        """Keep the state in ``store`` from now on, with everything read so far (read in memory
        before this actor was known, or in the store of the key this installation replaced, which
        is deleted)."""
        self._take_listing()
        self.flags_all = True
        self.write_flags()
        state = self.materialized
        state.commit()  # (the full-text index, and how far it goes, move with it)
        state.settle()
        old, self.store, self.store_doomed = self.store, store, False
        if old is not None and old is not store:  # a new key of this installation: its database moves
            db = store.take_over(old, state.cache_db, self.keyring.generation)
            old.release()
        else:  # read in memory so far (a first registration): copied into a new database
            db = store.export(state.cache_db, self.keyring.generation)
            state.close()
        self.materialized = State(db, store.checkpointer())
        self.dirty, self.flags_new = False, set()
        self.listing_all = True
        self.committed_at = time.monotonic()

    def detach(self) -> None:
        """Forget everything read and work in memory (the local state database is closed, kept)."""
        self._take_listing()
        store, self.store = self.store, None
        if store is not None:
            self.materialized.close()
            self.materialized = State()
            store.release()
        self.reset()

    @property
    def log(self) -> CausalLog:
        """The causal log; after a warm open the stored one (:attr:`stored_log`), decoded when first asked."""
        if self._log is None:
            assert self.stored_log is not None
            self._log, self.stored_log = self.stored_log.full(), None
        return self._log

    @log.setter
    def log(self, log: CausalLog) -> None:
        self._log, self.stored_log = log, None

    def set_stored_log(self, log: StoredLog) -> None:
        self._log, self.stored_log = None, log

    def log_facts(self) -> CausalLog | StoredLog:
        """The log, or the stored one not decoded whole yet: what the rollback memory reads of it."""
        return self.stored_log if self._log is None and self.stored_log is not None else self.log

    def _take_listing(self) -> None:
        """The folder's listing taken on trust from the local state is read whole before that
        database is closed or replaced (listing.prime)."""
        if isinstance(self.shelf, FolderShelf):
            self.shelf.load_names(everything=True)

    def load_cached(self, db: Connection, store: Cache) -> str:
        """Resume from a local state database this session's actor wrote (``store``'s).  Returns ""
        or why it was refused."""
        with collector_paused():
            return self._load_cached(db, store)

    # What a pass over every batch reads of each (views.ROW: the covering index cache_batches_open
    # answers it alone).
    BATCHES_QUERY = f"SELECT {ROW} FROM cache_batches"
    ACCEPTED_QUERY = "SELECT id FROM cache_batches WHERE accepted = 1"  # (cache_batches_accepted alone)

    def _load_cached(self, db: Connection, store: Cache) -> str:
        try:
            state = State(db, store.checkpointer())  # its schema completed where an older version lacks a table or a column
            # Every segment's name; which batches it holds and under which epoch read when asked for
            # (see SegmentBatches, SegmentEpochs).
            seg_map = SegmentBatches(lambda: self.materialized.cache_db)
            seg_epochs = SegmentEpochs(lambda: self.materialized.cache_db)
            # No view of a batch yet: those that can move the roster are made by the first refresh
            # (BatchViews.special), the others when something asks for them.
            views = BatchViews(lambda: self.materialized.cache_db, self._stored_batch)
            # (not the log's chains, megabytes at 1M read when asked for, nor the roster kept: rostermemo)
            meta = dict(db.execute("SELECT key, value FROM cache_meta WHERE key NOT IN ('log_chains', 'roster_kept')"))
            unread = listing.unread_of(meta)
            unreadable = listing.unreadable_of(meta, unread) if unread is not None else {}
            # the folder's first scan lists only what moved since (trusted: reports only what moved)
            trusted = isinstance(self.shelf, FolderShelf) and listing.prime(self.shelf, db, unread)
        except (VaultError, cbor2.CBORError, ValueError, TypeError, KeyError, AttributeError, DatabaseError) as exc:
            db.close()
            return f"the local state was damaged and is rebuilt ({exc})"
        self.materialized.close()
        self.materialized = state
        self.batches, self.single_reads = views, 0
        self.segment_batches = seg_map
        self.segment_epochs = seg_epochs
        self.roster_fingerprint = meta.get("roster", b"")
        self.erasures_seen = frozenset(encoding.decode(meta["erasures"])) if "erasures" in meta else frozenset()
        if "log" in meta and "log_basis" in meta:
            self.resume, self.log_stored = (meta["log_basis"], meta["log"]), True
            self.log_special = meta.get("log_special")
        self._last_accepted = None  # the stored flags say (read when first needed)
        self.dirty = self.flags_all = False
        self.flags_new = set()
        if trusted and unread is not None:
            # what the stored listing holds was read (or is among ``unread``): the first refresh reads
            # what moved since, every envelope (the keys are not kept) and the unread segments again, but
            # those kept as unreadable for want of their epoch's key (read once a key of it is here), held
            # as a read of them holds them, so that every way a segment is forgotten forgets them too
            self.rescan_all, self.envelopes_again = False, True
            self.segments_again = set(unread) - unreadable.keys()
            for name, ref in unreadable.items():
                self.unreadable[name] = shared(ref)
                self.segment_batches[name] = []  # (segread.decrypt_segment; never a read one's: not in ``unread``)
            self.listing_trusted = True
        self.listing_all = False
        return ""

    @property
    def last_accepted(self) -> set[bytes]:
        """The batches the last recomputation or extension accepted (the stored flags, after a warm
        open: read when first asked for)."""
        if self._last_accepted is None:
            self._last_accepted = {b for (b,) in self.materialized.cache_db.execute(self.ACCEPTED_QUERY)}
        return self._last_accepted

    @last_accepted.setter
    def last_accepted(self, accepted: set[bytes]) -> None:
        self._last_accepted = accepted

    # After this many single reads of stored headers in a session, the rest are read at once: a pass
    # over every batch (the log built again, the activity view) then costs one query, not 100,000.
    SINGLE_READS = 256

    def _stored_batch(self, bid: bytes, db: Connection | None = None) -> bytes:
        """A batch's stored header and signatures, for a view read back from the local state
        (:class:`CachedView`), when it is first decoded."""
        if db is None:  # (given: a state of an older version being completed, every header read once)
            db = self.materialized.cache_db
            self.single_reads += 1
        if self.single_reads == self.SINGLE_READS:
            held = self.batches.held if isinstance(self.batches, BatchViews) else self.batches
            for b, blob in db.execute("SELECT id, batch FROM cache_batches"):
                view = held.get(b)
                if isinstance(view, CachedView) and view.undecoded:
                    view.hold(blob)
        row = db.execute("SELECT batch FROM cache_batches WHERE id = ?", (bid,)).fetchone()
        if row is None:
            raise DatabaseError(f"batch {bid.hex()[:12]} is listed in the local state but not stored in it")
        stored: bytes = row[0]
        return stored

    def settle(self, *, force: bool = False, index: bool = True) -> None:
        """Commit the local state when it changed and the last commit is older than COMMIT_AGE
        (``force``: now).  Called where what was read is consistent: after an extension, a
        recomputation, a refresh; and on close.  ``force`` also completes the search index and
        commits it when nothing else changed: an index a search built (or one a cold load left
        to build, whose rows an earlier commit saved) is kept for the next open, not built again
        by its first search (10 s at a million records); ``index=False``: not the index (an
        erasure's commit before its purge: it does not build the index for that)."""
        if self.store is None or not (self.dirty or force):
            return
        if not force and time.monotonic() - self.committed_at < cache_mod.COMMIT_AGE:
            return
        if self.dirty:
            self.write_flags()
        if force:
            if index:
                self.materialized.ensure_search()  # the stored state holds a complete search index
            self._store_log()
        self._store_listing()
        self.materialized.commit()  # (forced with nothing read: what the index and the vectors gained)
        if self.dirty:
            self.dirty = False
            self.committed_at = time.monotonic()

    def _store_listing(self) -> None:
        """Keep what moved of the folder's listing in the local state, for the next open's first scan
        (:meth:`~camillo.storage.FolderShelf.prime`)."""
        if not isinstance(self.shelf, FolderShelf):
            return
        listing.store(self.shelf, self.materialized.db, self.listing_all,
                      [*self.unreadable, *self.incomplete, *self.segment_problems], self.unreadable)
        self.listing_all = False

    @staticmethod
    def log_basis(roster: Roster, signed: set[bytes]) -> bytes:
        """What a log is a function of, besides the batches stored: the roster and the signed batches."""
        return roster.fingerprint() + sha256(b"".join(sorted(signed)))

    def _store_log(self) -> None:
        """Keep the log in the local state (on lock), when it covers every batch stored."""
        if self.log_stored or not self.log_fresh or self.pending_batches or self.roster.genesis is None:
            return
        resume.store_log(self, self.log, self.log_basis(self.roster, signed_of(self.log)))
        self.log_stored = True

    def _drop_stored_log(self, *, added: bool = False) -> None:
        """Batches or their flags changed: the stored log no longer describes them.  (``added``: new
        batches only; the log read at the open may still be extended by them, see _resumed_log.)"""
        if not added:
            self.resume = None
        if self.log_stored:
            resume.drop_stored(self)

    def _resumed_log(self, roster: Roster, signed: set[bytes]) -> CausalLog | None:
        return resume.resumed_log(self, roster, signed)

    def write_flags(self) -> None:
        """Write what the roster and the log decided of each batch (all of them after a
        recomputation, else those read since), with the roster's fingerprint."""
        flagged = self.batches.items() if self.flags_all else (
            (b, self.batches[b]) for b in self.flags_new if b in self.batches)
        accepted = self.last_accepted
        rows = []
        for bid, v in flagged:  # only what changed: a key change at the tip moves a handful of a million
            bits = v.sig_ok | v.vouched << 1 | (bid in accepted) << 2  # (bools are ints: no int() per batch)
            if bits != v.stored_flags:
                rows.append((bits & 1, bits >> 1 & 1, bits >> 2, bid))
                v.stored_flags = bits
        self.materialized.write_flags(rows)
        if rows:
            self._drop_stored_log()
        self.materialized.cache_db.executemany("INSERT OR REPLACE INTO cache_meta(key, value) VALUES(?, ?)", [
            ("roster", self.roster_fingerprint), ("generation", encoding.encode(self.keyring.generation)),
            ("erasures", encoding.encode(sorted(self.erasures_seen)))])
        self.flags_all, self.flags_new = False, set()

    # ------------------------------------------------------------------------------ reading

    def refresh(self) -> bool:
        """Read what is new in the vault folder and recompute what depends on it.  The shelf says
        which names appeared and went away since the last call, so a refresh that finds nothing new
        costs a stat per directory, and one that finds a batch costs that batch.  What moved is
        collected for the next :meth:`changes`; True when keys came or segments went (everything
        read may have changed)."""
        self.scanned_at = time.monotonic()
        if isinstance(self.shelf, FolderShelf):  # (names the shelf took on trust, needed now)
            self.shelf.load_names(self.segments_again, everything=self.rescan_all)
        names, added, removed = self.shelf.changes()
        if self.listing_trusted and isinstance(self.shelf, FolderShelf):
            self.listing_trusted = False
            removed |= listing.vanished(self.shelf, self.materialized.cache_db, self.unreadable)
        envelope_names: set[str] | frozenset[str] | None = None  # (None: those among ``added``)
        complete = self.rescan_all or self.envelopes_again  # (every envelope of the folder is read)
        if self.rescan_all:  # first read, or keys were forgotten: consider every file again
            self.rescan_all = self.envelopes_again = False
            self.segments_again = set()
            added = names  # (the shelf's own set: only read below)
            removed = self.segment_batches.keys() - names
            envelope_names = self._envelope_names(names)
        elif self.envelopes_again or self.segments_again:  # this device's roll (read_again)
            envelopes = self._envelope_names(names) if self.envelopes_again else set()
            added = set(added) | envelopes | {n for n in self.segments_again if n in names}
            self.envelopes_again, self.segments_again = False, set()
        for name in self.incomplete - names:  # an incomplete file that went away: nothing to report
            self.incomplete.discard(name)
            self.segment_problems.pop(name, None)
        retry = self.incomplete & names  # still syncing: look again
        # Set operations, not a pass in Python over every name: a warm open or a key change brings
        # every name of the folder here (100,000 at a million records), nearly all of them read before.
        if envelope_names is None:
            envelope_names = {n for n in added if n.startswith("env/")}
        new_keys = self.read_envelopes(sorted(n for n in envelope_names | retry if kind_of(n) == "envelope"),
                                       complete=complete)
        new_batches: list[bytes] = []
        known, unreadable = self.segment_batches, self.unreadable
        unknown = known.unknown(added) if isinstance(known, SegmentBatches) else added - known.keys()
        candidates = unknown | (added & unreadable.keys()) | retry
        todo = sorted(n for n in candidates if kind_of(n) == "segment" and (n not in known or n in unreadable))
        state = segread.state_for(self, todo)  # (on disk when large and without local state; its page cache wide)
        # a cold load into an empty state builds the secondary indexes once, after it, and writes its rows valid
        # until the validity pass over every record that follows it (State.loading)
        with state.loading() if todo else nullcontext():
            new_batches += segread.read_segments(self, todo)
            if new_keys:  # (those whose epoch's key is here now: the others stay unreadable, read or not)
                held = self.keyring.epoch_keys
                for name in [n for n, ref in self.unreadable.items() if ref in held]:
                    new_batches += self.read_segment(name)
                    if self.unreadable.pop(name, None) is not None and name not in self.segment_problems:
                        removed.add(name)  # (not there: deleted, its directory's mtime put back; found by review)
        vanished = sorted(n for n in removed if n in self.segment_batches)
        if vanished:
            self.forget_segments(vanished)
        if not vanished and self._resume_stored():
            # the state as stored, then what arrived since, as if the session had stayed open: the log and
            # the state extended by new plain batches in O(new), anything else recomputed
            if (new_batches or self.copies) and not self.extend(new_batches):
                self.recompute()
            return bool(new_keys)
        if not new_batches and not vanished and not self.copies and self.roster.genesis is not None:
            # nothing to read: new keys that open no new batch (the same epoch secrets wrapped to a
            # rolled owner key, or keys for epochs nothing is sealed to yet) change nothing read
            return bool(new_keys)
        if vanished or new_keys or not self.extend(new_batches):
            self.recompute()
        return bool(new_keys or vanished)

    def read_again(self, segments: Iterable[str] = ()) -> None:
        """The epoch keys were forgotten under a rolled master secret this device wrote: the next
        refresh reads every envelope again, and ``segments`` (forgotten by the caller), instead of
        considering every file of the folder (at 1M records, 200,000 names)."""
        self.envelopes_again = True
        self.segments_again |= set(segments)

    def _envelope_names(self, names: set[str]) -> set[str]:
        if isinstance(self.shelf, FolderShelf):
            return set(self.shelf.files_in("env"))  # the directory's listing, not a pass over every name
        return {n for n in names if n.startswith("env/")}

    def shed_views(self) -> None:
        """What a cold open read stays in the state, not in memory (:func:`resume.shed_views`)."""
        resume.shed_views(self, self._stored_batch)

    def changes(self, **flags: Any) -> Changes:
        """What moved since the last call: the batches read (written here or arrived) with their
        records, and the facts whose value, status or history moved."""
        new = list(dict.fromkeys(b for b in self.unreported if b in self.batches))
        self.unreported = []
        views = [self.batches[b] for b in new]
        moved, self.moved_keys = self.moved_keys, set()
        controls = [r for v in views for r in v.records if r is not None]
        # the memory records; control records speak through devices, grants, credentials and policy
        records = tuple(rid for v in views for rid, rec in zip(v.header.records, v.records) if rec is None)
        return Changes(records=records, batches=tuple(new),
                       keys=frozenset((self.roster.compartment_name(c), k) for c, k in moved),
                       compartments=frozenset(self.roster.compartment_name(v.header.compartment_id) for v in views),
                       **{**control_changes(controls, self.roster), **flags})

    def forget_segments(self, names: Sequence[str]) -> None:
        """Segments that went away (a prune deletes thousands at once): their batches are forgotten
        unless another segment still holds them, in one pass over what remains."""
        dropped: list[bytes] = []
        for name in names:
            dropped += self.segment_batches.pop(name, [])
            self.segment_epochs.pop(name, None)
            self.unreadable.pop(name, None)
        still = {b for other in self.segment_batches.values() for b in other} if dropped else set()
        gone = list(dict.fromkeys(b for b in dropped if b not in still))
        for b in gone:
            self.batches.pop(b, None)
        self.materialized.forget_batches(gone)
        self.materialized.db.executemany("DELETE FROM cache_segments WHERE name = ?", [(n,) for n in names])
        self.materialized.db.executemany("DELETE FROM cache_batches WHERE id = ?", [(b,) for b in gone])
        self.dirty = True
        if gone:
            self.log_fresh = False
            self._drop_stored_log()

    def resealed(self, old: Sequence[str], new: Sequence[tuple[str, list[bytes]]], ref: EpochRef) -> None:
        """This device erases: the batches of the ``old`` segments (about to be deleted) live on in
        the ``new`` ones it sealed under the epoch ``ref``, the same batches without the erased records.
        They are moved, not read again: nothing the roster, the log or the state computed from them
        depends on the segment that holds them, and the erased records' rows were scrubbed when the
        erasure was read (``camillo.erased``).  No view holds a batch's record bytes (add_segment)."""
        db = self.materialized.cache_db
        for name in old:
            self.segment_batches.pop(name, None)
            self.segment_epochs.pop(name, None)
            self.unreadable.pop(name, None)
        db.executemany("DELETE FROM cache_segments WHERE name = ?", [(n,) for n in old])
        for name, bids in new:
            self.segment_batches[name] = list(bids)
            self.segment_epochs[name] = ref
            self.unreadable.pop(name, None)  # (seen before its epoch's key was here)
            self.segment_problems.pop(name, None)
            db.execute("INSERT OR REPLACE INTO cache_segments(name, batches, compartment, epoch) VALUES(?, ?, ?, ?)",
                       (name, encoding.encode(list(bids)), *ref))
            for bid in bids:
                view = self.batches.get(bid)
                if view is None:
                    continue
                view.segment, view.epoch_id = name, ref[1]
            db.executemany("UPDATE cache_batches SET segment = ?, epoch = ? WHERE id = ?",
                           [(name, ref[1], bid) for bid in bids])
        self.dirty = True

    def read_envelopes(self, names: list[str], *, complete: bool = False) -> bool:
        """Open the envelopes addressed to this session (the owner KEM key, or the grant's key), those
        read before from the local state (:class:`~camillo.memos.EnvelopeMemo`).  ``complete``:
        ``names`` is every envelope of the folder."""
        recipient = self.keyring.owner_kem if self.keyring.owner_kem is not None else self.grant_recipient
        if recipient is None:
            return False
        rid = ids.recipient_id(recipient.public)
        found = chained = False
        memo = self.envelope_memo
        read = memo.known(rid) if names else {}
        if complete:
            memo.keep_only(names)
        for name in names:
            if name in self.keyring.seen_envelopes:
                continue
            if name in read:  # read before (its name is its hash): what it held, checked again below
                self.incomplete.discard(name)
                self.segment_problems.pop(name, None)
                self.keyring.seen_envelopes.add(name)
                raw = read[name]
                if raw is None:
                    continue
                try:
                    payload = envelopes.read_payload(raw, name, self.vault_id, checked=True)
                except (VaultError, cbor2.CBORError, ValueError, TypeError):  # (not what an envelope opens to: read the file again next time)
                    self.keyring.seen_envelopes.discard(name)
                    memo.forget_name(name)
                    continue
            else:
                try:
                    data = self.shelf.read(name)
                except (FileNotFoundError, StorageError):
                    continue
                matches = hash_matches(name, data)  # (None: a store's name that is no hash: not remembered)
                if matches is False:
                    # still syncing, or damaged: try again next time, and say so meanwhile
                    self.segment_problems[name] = Problem(
                        "damaged", name, f"envelope {name} does not match its name (still syncing, or damaged)")
                    self.incomplete.add(name)
                    continue
                self.incomplete.discard(name)
                self.segment_problems.pop(name, None)
                self.keyring.seen_envelopes.add(name)
                try:
                    envelopes.check_shape(data, name)
                    if not envelopes.is_for(data, rid):
                        if matches:
                            memo.remember(name, rid, None)
                        continue
                    raw = envelopes.unwrap_payload(data, name, self.vault_id, recipient)
                    payload = envelopes.read_payload(raw, name, self.vault_id)
                except CryptoFailure:
                    continue
                except VaultError as exc:
                    self.segment_problems[name] = Problem("damaged", name, exc.message)
                    continue
                if matches:
                    memo.remember(name, rid, raw, (payload.compartment_id, payload.epoch_id))
            if payload.recipient_id != rid:
                self.segment_problems[name] = Problem("damaged", name, f"envelope {name} names another recipient")
                continue
            if payload.kind in (envelopes.EnvelopeKind.EPOCH_PUBLIC, envelopes.EnvelopeKind.OWNER_CERT,
                                envelopes.EnvelopeKind.OWNER_REVOKED):
                if self.grant_trusted is not None:  # what an append grant judges with its chain of trust
                    self.grant_chain[name] = payload
                    chained = True
                continue
            found = self.keyring.learn(payload) or found
        return (chained and self.follow_grant_chain()) or found

    def follow_grant_chain(self) -> bool:
        """The epoch public keys an append grant holds, recomputed from every envelope of its chain
        of trust read (:mod:`camillo.session.grantchain`); True when they changed."""
        if self.grant_trusted is None:
            return False
        good, untrusted = trusted_epoch_keys(self.vault_id, self.grant_trusted, self.grant_chain)
        before = dict(self.keyring.epoch_publics)
        for ref in before:
            self.keyring.envelope_sources.pop(ref, None)
        self.keyring.epoch_publics.clear()
        for p in good:
            self.segment_problems.pop(p.file, None)
            self.keyring.learn(p)
        for file in untrusted:
            self.segment_problems[file] = Problem(
                "untrusted", file, f"envelope {file} gives an epoch key signed by no owner this grant trusts; "
                "it is not used")
        return self.keyring.epoch_publics != before

    def read_segment(self, name: str) -> list[bytes]:
        opened = segread.open_segment(self, name)
        return [] if opened is None else self.add_segment(name, *opened)

    def take_written(self, name: str, compartment_id: bytes, epoch_id: bytes, batches: list[Batch], *,
                     encoded_here: bool = False) -> list[bytes]:
        """What :meth:`read_segment` returns for a segment this actor has just sealed and written,
        taken from the batches it sealed: no read, no decryption, and no signature check (they are
        its own, just made; its name, the hash of bytes sealed under a fresh key, is new).
        ``encoded_here``: every record was built by :func:`~camillo.records.encode_record`, which
        checks a map as decode_record does: not checked again (a tenth of an import)."""
        checked = [True] * len(batches) if encoded_here else None
        added = self.add_segment(name, compartment_id, epoch_id, batches, checked, new=True)  # (this writer's next)
        for bid in added:
            self.batches[bid].sig_ok = True
        return added

    def add_segment(self, name: str, compartment_id: bytes, epoch_id: bytes, batches: list[Batch],
                    checked: Sequence[bool] | None = None, fields: Sequence[list[Fields] | None] | None = None,
                    *, new: bool = False) -> list[bytes]:
        """Take a segment's batches (``checked[i]``: every record of ``batches[i]`` was checked, by
        :mod:`camillo.recordcheck` or this process's encoder; ``fields[i]``: what the child read of
        them, which a plain batch is staged from; ``new``: none of them can be held already)."""
        added: list[bytes] = []
        store = self.materialized.store_read  # (each row kept and written with many: State.store_read)
        for i, batch in enumerate(batches):
            problem = self._check_batch_shape(batch, compartment_id)
            if problem:
                self.segment_problems[f"{name}#{batch.id.hex()[:12]}"] = Problem("damaged", name, problem)
                continue
            existing = None if new else held_or_unkept(self.batches, batch.id)
            if existing is not None:  # (same header and record ids, each checked: signatures or erasures differ)
                copies.offer(self, name, existing, batch)
                continue
            read = plain_fields(batch.records, fields[i]) if fields is not None else None
            try:
                records: list[Record | None] = [] if read is not None else [
                    None if raw is None else validated_record(raw, rid) if checked is not None and checked[i]
                    else decode_record(raw, expected_id=rid) for rid, raw in zip(batch.header.records, batch.records)]
            except VaultError as exc:
                self.segment_problems[f"{name}#{batch.id.hex()[:12]}"] = Problem(
                    "damaged", name, f"batch {batch.id.hex()[:12]}: {exc.message}")
                continue
            controls = [r if r is not None and r.is_control else None for r in records]
            # No record or header bytes kept (in the state; an erasure reads the segment again): a cold
            # open of a million records held them all, 350 + 65 MB.  A plain batch shares one tuple of nulls.
            kept = Batch(batch.id, b"", batch.header, batch.sigs, (nulls := nones(len(batch.records))))
            view = (ReadView(kept, name, epoch_id, controls, self.signature_memo) if any(controls)
                    else BatchView(kept, name, epoch_id, nulls))
            if new and isinstance(self.batches, BatchViews):
                self.batches.add(batch.id, view)
            else:
                self.batches[batch.id] = view
            if read is None:
                self.materialized.stage(view, records)
            else:  # (staged from what the child read: not decoded here again)
                self.materialized.stage_fields(view, read, batch.records)
            store([(batch.id, name, epoch_id,  # (checked when decoded: encoded without a walk)
                    encoding.encode_own([batch.header_bytes, [list(x) for x in batch.sigs]]),
                    encoding.encode_own([r.raw if r is not None else None for r in view.records]),
                    batch.header.writer_id, batch.header.seq, batch.header.compartment_id,
                    1 if view.has_control else 0)])
            added.append(batch.id)
            self.pending_batches.add(batch.id)
            self.log_fresh = False
            self._drop_stored_log(added=True)
            self.unreported.append(batch.id)
        self.segment_batches[name] = [b.id for b in batches]
        self.segment_epochs[name] = shared((compartment_id, epoch_id))  # (one pair for every segment under it)
        store((), (name, encoding.encode([b.id for b in batches]), compartment_id, epoch_id))
        self.dirty = True
        return added

    def _check_batch_shape(self, batch: Batch, compartment_id: bytes) -> str | None:
        h = batch.header
        if h.vault_id != self.vault_id:
            return f"batch {batch.id.hex()[:12]} belongs to another vault"
        if h.compartment_id != compartment_id:
            return f"batch {batch.id.hex()[:12]} claims another compartment than its segment"
        return None

    def segments_holding(self, batch_ids: set[bytes] | frozenset[bytes]) -> list[str]:
        """The segments read that hold one of these batches (without decoding every segment's list
        after a warm open: SegmentBatches.holding)."""
        held = self.segment_batches
        if isinstance(held, SegmentBatches):
            return held.holding(batch_ids)
        return [name for name, bids in held.items() if not batch_ids.isdisjoint(bids)]

    def segments_under(self, refs: set[EpochRef]) -> dict[str, EpochRef]:
        """The segments sealed under one of these epochs, read or not readable here, with their epoch
        (without reading every segment's epoch after a warm open: SegmentEpochs.under)."""
        epochs = self.segment_epochs
        found = epochs.under(refs) if isinstance(epochs, SegmentEpochs) else {
            name: ref for name, ref in epochs.items() if ref in refs}
        for name, ref in self.unreadable.items():
            if ref in refs:
                found[name] = ref
            else:
                found.pop(name, None)
        return found

    def segment_ref(self, name: str) -> EpochRef | None:
        """The epoch a segment is sealed under, read or not readable here."""
        return self.unreadable.get(name) or self.segment_epochs.get(name)

    def batches_of_segment(self, name: str) -> list[Batch]:
        """Decrypt a segment read before (its epoch key is here) and return its batches."""
        ref = self.segment_epochs[name]
        payload = segments.open_segment(self.shelf.read(name), name, self.vault_id, self.keyring.epoch_keys[ref])
        return segments.decode_payload(payload, name)

    # ------------------------------------------------------------------------------ recomputing

    def extend(self, new: list[bytes]) -> bool:
        """New batches that change nothing but the log's chains (no control record, by writers the
        roster knows, each the next link of its chain, seeing only what is here): verify them and
        extend the log and the state in O(new) instead of recomputing everything.  False when the
        general path is needed (it then gives the same result)."""
        if self.roster.genesis is None or not new:
            return False
        verified = []
        for bid in new:
            v = self.batches.get(bid)
            if v is None or any(r is not None for r in v.records):
                return False
            pk = self.roster.signer_public(v.header.writer_id)
            if pk is None:
                return False
            if not (v.sig_ok or verify_batch_signature(v.batch, pk)):
                return False
            verified.append(v)
        if not extend_log(self.log, self.batches, list(new), self.roster):
            return False
        for v in verified:
            v.signed = v.sig_ok = True
        result = self.materialized.materialize(self.roster, self.log, self.batches, self.pending_batches | set(new))
        self.last_accepted |= set(new)
        self.log_fresh = True
        self.flags_new |= set(new) | self.pending_batches
        self.pending_batches = set()
        self.moved_keys |= result.keys
        self.settle()
        return True

    def _resume_stored(self) -> bool:
        return resume.take_stored(self)

    def forget_changes(self) -> None:
        """What moved so far is no change (what an open read: a million records, not listed for nothing)."""
        self.unreported, self.moved_keys = [], set()

    def recompute(self) -> None:
        with collector_paused():
            self._recompute()

    def _roster(self) -> tuple[Roster, set[bytes], set[bytes] | None]:
        return resume.roster_of(self)

    def _recompute(self) -> None:
        roster, signed, touched = self._roster()
        bad_epochs = self.check_epoch_keys(roster)
        if bad_epochs:
            self.keyring.forget(bad_epochs)
            self.envelope_memo.forget(bad_epochs)
            self.keyring.seen_envelopes.clear()  # another envelope may carry the genuine key: read them again
            self.rescan_all = True
            bad = [name for name, bids in self.segment_batches.items()
                   if any(self.batches.get(b) and (self.batches[b].header.compartment_id, self.batches[b].epoch_id)
                          in bad_epochs for b in bids)]
            self.forget_segments(bad)
            for name in bad:
                self.segment_problems[name] = Problem(
                    "damaged", name, f"segment {name} is sealed under an epoch key no owner vouched for")
            roster, signed = build_roster(self.vault_id, self.batches)
            touched = None
        erasures = frozenset(roster.erasures)
        if self.erasures_seen - erasures:  # the state was purged for an erasure this folder does not hold
            self.reset()
            self.refresh()
            return
        # a state that held something meets a new erasure: it is purged below, whatever order the
        # erased record's rows left in (scrubbed here, or deleted with a segment that went away first)
        new_erasure = bool(erasures - self.erasures_seen) and bool(self.last_accepted)
        self.erasures_seen = erasures
        before, self.roster = self.roster, roster
        self.forget_erased_epochs()
        resumed = self._resumed_log(roster, signed)
        if resumed is not None:
            self.log = resumed
        elif not extend_log_after_roster_change(self.log, self.batches, signed, before, roster, self.pending_batches):
            self.log = build_log(self.batches, signed, roster)
        self.log_fresh = True
        fingerprint = roster.fingerprint()
        global_fp = roster.global_fingerprint()
        writers: set[bytes] = set()
        erasing = False
        moved = self.log.accepted ^ self.last_accepted  # accepted or rejected since the last computation
        affected: set[bytes] | None = self.pending_batches | moved
        if fingerprint != self.roster_fingerprint:
            old = self.roster_snapshot
            only_new_erasures = (before.genesis is not None and roster.genesis is not None
                                 and before.genesis.id == roster.genesis.id and before.erasures.keys() <= roster.erasures.keys())
            if old is None or (old[0] != global_fp and not only_new_erasures):
                affected = None  # everything is checked again
            else:  # principals added, replaced or revoked (acceptance changes are in ``affected``)
                if old[0] != global_fp:  # erasures added: the batches holding what they erase are checked again
                    targets = {t for k, e in roster.erasures.items() if k not in before.erasures for t in e.targets}
                    affected = (affected or set()) | self.materialized.batches_holding(targets)
                    erasing = True
                writers = {w for w in old[1].keys() | roster.principals.keys()
                           if old[1].get(w) != roster.principals.get(w)}
        result = self.materialized.materialize(roster, self.log, self.batches, affected, writers=writers,
                                               erasing=erasing)
        self.roster_snapshot = (global_fp, dict(roster.principals))
        self.roster_fingerprint = fingerprint
        self.last_accepted = set(self.log.accepted)
        self.pending_batches = set()
        self.moved_keys |= result.keys
        self.dirty = True
        if touched is None:
            self.flags_all = True  # the roster may have signed, vouched or excluded any batch
        else:  # only those it was computed from, and those the log accepted or rejected since
            self.flags_new |= touched | moved
        if self.materialized.flag_indexes_unbuilt:  # a cold load's: its flags written now, then the indexes over them
            self.write_flags()
        self.settle(force=bool(result.scrubbed or new_erasure), index=False)
        if result.scrubbed or new_erasure:  # what was erased leaves no trace on disk either
            purge(self.materialized)

    def forget_erased_epochs(self) -> None:
        """An ERASE destroyed these epochs' secrets: a session that held them (it was open while
        another device erased) drops them too, so nothing it writes later (a keyring roll) can
        wrap them again."""
        destroyed = self.roster.destroyed_epochs()
        announced = max((info.generation for info in self.roster.epochs.values()), default=0)
        if (destroyed & self.keyring.envelope_sources.keys() and announced
                and self.keyring.generation >= announced):  # the newest keys, not an older keyring still held
            self.destroyed_delivered = True
        self.keyring.forget(destroyed)
        self.envelope_memo.forget(destroyed)

    def check_epoch_keys(self, roster: Roster) -> set[EpochRef]:
        """Every epoch secret we used must match its signed EPOCH record, and the envelope that
        delivered it must be signed by an owner (spec §15.3)."""
        bad: set[EpochRef] = set()
        if roster.genesis is None:
            return bad
        for ref, secret in self.keyring.epoch_secrets.items():
            info = roster.epochs.get(ref)
            if info is None:
                continue  # its EPOCH record has not arrived yet: segments stay unverified below
            if not constant_time_equal(keys.epoch_commit(secret.get(), self.vault_id, *ref), info.commit):
                bad.add(ref)
                continue
            payload = self.keyring.envelope_sources.get(ref)
            if payload is not None and not roster.owner_signed(payload.signatures, payload.message):
                bad.add(ref)
        return bad

    def close(self) -> None:
        """Drop the state (the local state database is closed, and deleted when doomed)."""
        self.grant_recipient = None  # an agent's key: its seed goes with the session
        self.grant_trusted = None
        self.grant_chain = {}
        try:
            self.materialized.close()
        except Exception:  # noqa: S110 - closing a database that the caller committed or dropped loses nothing
            pass
        self.batches = {}
        store, self.store = self.store, None
        if store is not None:
            if self.store_doomed:
                store.discard()
            store.release()
