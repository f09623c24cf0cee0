"""What a warm open takes from the local state instead of computing it again, and the roster over the
batches that can move it.

A warm open of a vault of a million records finds its state, its flags and its causal log stored, and
100,000 batches it need not look at: :func:`take_stored` takes what is stored when the roster computed
from the batches that can move it (those holding a control record, and those not accepted) is the one it
was computed with; :func:`resumed_log` resumes the stored log at a recomputation; :func:`roster_of`
computes a changed roster from those batches and the new ones when no principal changed (another
device's epoch roll).  Functions of the session's reader (:class:`Reader` says what they use of it), which calls them.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Protocol

import cbor2

from .. import heap
from ..cache import SPECIAL_BATCHES, DatabaseError
from ..control import BatchView, Roster, build_roster
from ..log import CausalLog, StoredLog, encode_log, extend_log, extend_log_after_roster_change
from ..primitives import sha256
from ..records import Kind
from . import copies, rostermemo
from .keyring import EpochRef
from .rostermemo import RosterMemo
from .views import BatchViews


class Reader(copies.Reader, Protocol):
    """What these functions use of the session's reader (:class:`camillo.session.reader.Reader`)."""

    vault_id: bytes
    resume: tuple[bytes, bytes] | None  # (what the stored log was computed from, its head) read at the open
    log_special: bytes | None  # special_digest of the batches that can move the roster, kept with the log
    kept_chains: bytes | None  # the stored log's chains, read before it was deleted
    stored_log: StoredLog | None
    pending_batches: set[bytes]
    unreported: list[bytes]  # batches read since the last Changes
    roster: Roster
    roster_fingerprint: bytes
    roster_snapshot: tuple[bytes, dict[bytes, Any]] | None
    erasures_seen: frozenset[bytes]
    log: CausalLog
    log_fresh: bool
    log_stored: bool
    flags_new: set[bytes]
    flags_all: bool

    @property
    def last_accepted(self) -> set[bytes]: ...

    def check_epoch_keys(self, roster: Roster) -> set[EpochRef]: ...

    def forget_erased_epochs(self) -> None: ...

    def write_flags(self) -> None: ...

    def set_stored_log(self, log: StoredLog) -> None: ...

    @staticmethod
    def log_basis(roster: Roster, signed: set[bytes]) -> bytes: ...



def store_log(reader: Reader, log: CausalLog | StoredLog, basis: bytes | None) -> None:
    """Keep ``log`` in the local state (``basis`` None: the one kept stays: a stored log of an earlier
    layout stored again in this one), with the digest of what it holds of the batches that can move
    the roster (:func:`special_digest`; batches an older version stored without their writer and seq
    leave it out)."""
    head, chains = log.encode() if isinstance(log, StoredLog) else encode_log(log)
    db = reader.materialized.db
    rows = db.execute(f"SELECT id, writer, compartment, seq FROM cache_batches WHERE {SPECIAL_BATCHES}").fetchall()
    meta = [("log", head), ("log_chains", chains), *([("log_basis", basis)] if basis is not None else [])]
    reader.log_special = None
    if all(w is not None and c is not None and q is not None for _b, w, c, q in rows):
        reader.log_special = special_digest((b, log.batch_at((w, c), q) == b) for b, w, c, q in rows)
        meta.append(("log_special", reader.log_special))
    db.execute("DELETE FROM cache_meta WHERE key = 'log_special'")
    db.executemany("INSERT OR REPLACE INTO cache_meta(key, value) VALUES(?, ?)", meta)


def shed_views(reader: Reader, fetch: Callable[[bytes], bytes]) -> None:
    """Keep no view of the plain accepted batches read so far (a cold open's: 100,000 views at a
    million records, 3.7 KB each with its decoded header): from now on each is made again from its
    stored row when something asks for it (:class:`BatchViews`, as after a warm open; ``fetch``
    reads a stored header).  The views of the batches that can move the roster (holding a control
    record, or not accepted) are kept as they are.  Only once what was read is settled: no batch
    pending or unreported, and the flags of each written to the state first (the views made again
    read them there).  What the load freed is then given back to the system (:mod:`camillo.heap`)."""
    if isinstance(reader.batches, BatchViews) or reader.pending_batches or reader.unreported:
        return
    reader.write_flags()
    views = BatchViews(lambda: reader.materialized.cache_db, fetch)
    accepted = reader.last_accepted
    for bid, view in reader.batches.items():
        if view.has_control or bid not in accepted:
            views[bid] = view
    reader.batches = views
    reader.materialized.resume(reader.roster, views)
    heap.release()  # (what the load held, freed: at a million records 359 -> 246 MiB for the session)


def drop_stored(reader: Reader) -> None:
    """Delete the log kept in the local state (what it describes changed); the chains that the log
    taken at the open, or still to be taken and extended (:func:`resumed_log`), may ask for are read
    first."""
    with contextlib.suppress(DatabaseError):  # (damaged: met again, and reported, where it is asked for)
        if reader.stored_log is not None:
            reader.stored_log.chains()
        elif reader.resume is not None and reader.kept_chains is None:
            reader.kept_chains = stored_chains(reader)
    reader.materialized.db.execute("DELETE FROM cache_meta WHERE key IN ('log', 'log_chains', 'log_basis', 'log_special')")
    reader.log_stored = False


def stored_chains(reader: Reader) -> bytes:
    """The chains of the log kept in the local state (read when the stored log is first asked for one)."""
    if reader.kept_chains is not None:
        return reader.kept_chains
    row = reader.materialized.cache_db.execute("SELECT value FROM cache_meta WHERE key = 'log_chains'").fetchone()
    if row is None:
        raise DatabaseError("the local state keeps a causal log without its chains")
    chains: bytes = row[0]
    return chains


def special_digest(held: Iterable[tuple[bytes, bool]]) -> bytes:
    """A digest of (batch id, whether the log holds it) for the batches that can move the roster
    (BatchViews.special), kept with the stored log so that a warm open checks its stored flags
    against the log without reading the log's chains."""
    return sha256(cbor2.dumps(sorted([bid, flag] for bid, flag in held)))


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while a bulk step builds objects that live as long
    as the session (a view per batch, the roster, the causal log): it would walk the growing heap
    again and again for nothing (about a tenth of a warm open at 100k records, docs/benchmarks.md).
    Reference counting still frees everything else; the collector (process-wide) runs again
    afterwards if it ran before."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def take_stored(reader: Reader) -> bool:
    """The first refresh of a warm open, no segment having gone away since the local state was
    stored (the batches read since are set aside: :meth:`Reader.extend` or :meth:`Reader.recompute` takes them
    next): the state, the flags and the log stored are still true if the roster is the one they
    were computed with.  The roster is computed from the stored batches that can move it or be
    reported by it (BatchViews.special: those holding a control record, and those not accepted,
    whose problems are reported again; a revoked writer's batches beyond its revocation are among
    those), with the signatures verified before taken as stored, or taken as the last warm open computed
    it from exactly those batches with the same flags (:mod:`~camillo.session.rostermemo`: no view is
    made of them then); if its fingerprint, its erasures
    and every flag of those batches are as stored and every epoch secret checks, the stored log
    is taken and nothing else is computed: no view is made of the other batches (100,000 at a
    million records).  False, having changed nothing the recomputation depends on, when anything
    differs."""
    batches, resume, new = reader.batches, reader.resume, reader.pending_batches
    if (not isinstance(batches, BatchViews) or resume is None or not batches.held.keys() <= new
            or reader.roster.genesis is not None or not reader.roster_fingerprint):
        return False
    # The roster kept from an earlier warm open of exactly these batches with these flags (rostermemo),
    # else computed from them: no view is made of them when it is kept.
    flags = batches.special_flags()
    memo = RosterMemo(reader.materialized.db)
    digest = rostermemo.key(reader.vault_id, [(b, f) for b, f in flags if b not in new]) if flags is not None else None
    roster = memo.get(digest, batches.signatures.verify) if digest is not None else None
    special: dict[bytes, BatchView] | None = None
    kept = roster is not None
    if roster is None:
        with collector_paused():
            special = {b: v for b, v in batches.special().items() if b not in new}
            roster, _ = build_roster(reader.vault_id, special, of_writers=batches.of_writers)
    fingerprint = roster.fingerprint()
    if (roster.genesis is None or fingerprint != reader.roster_fingerprint or resume[0][:len(fingerprint)] != fingerprint
            or frozenset(roster.erasures) != reader.erasures_seen or reader.check_epoch_keys(roster)):
        return False
    try:  # (its head only: the chains' batches are read when first asked for)
        log = StoredLog.decode(resume[1], lambda: stored_chains(reader), DatabaseError)
    except ValueError:  # (damaged, or of an earlier format: the log computed now is stored on lock)
        reader.log_stored = False
        return False
    if special is not None and any(v.sig_ok | v.vouched << 1 != v.stored_flags & 3 for v in special.values()):
        return False  # (a kept roster was computed from these flags, and they checked then)
    # Whether the stored log holds each of those batches as its stored flag says: from the digest kept
    # with the log (of each one's id and whether the log held it, when stored: the same batches, since
    # the flags were not written since, or the log would be gone), else from the chains themselves.
    held = ([(v.id, v.stored_flags) for v in special.values()] if special is not None
            else [(b, f) for b, f in flags or () if b not in new])
    if reader.log_special is None or reader.log_special != special_digest((b, bool(f & 4)) for b, f in held):
        if special is None:
            special = {b: v for b, v in batches.special().items() if b not in new}
        try:
            if any(log.holds(v.writer_id, v.compartment_id, v.seq, v.id) != bool(v.stored_flags & 4)
                   for v in special.values()):
                return False
        except DatabaseError:  # (the chains do not hold what the head says: the log computed now is stored)
            reader.log_stored = False
            return False
    if log.whole_item:  # (an earlier version's layout: stored again in this one, once)
        store_log(reader, log, None)
    if not kept and digest is not None:
        memo.put(digest, roster)
    reader.resume, reader.roster = None, roster
    reader.set_stored_log(log)
    reader.materialized.resume(roster, batches)
    reader.forget_erased_epochs()
    reader.log_fresh = not new  # (extended by the new batches next)
    reader.roster_snapshot = (roster.global_fingerprint(), dict(roster.principals))
    return True


def resumed_log(reader: Reader, roster: Roster, signed: set[bytes]) -> CausalLog | None:
    """The log stored in the local state, when it was computed from exactly this roster and the
    signed batches but those read since the open (the batches and flags stored then have not
    changed: it was dropped otherwise), extended by the new ones when each is the next link of
    its chain (:func:`~camillo.log.extend_log`, and for new control batches the check of what
    they claim others had written, :func:`~camillo.log.extend_log_after_roster_change`, with the
    same roster on both sides: its fingerprint is the stored one): the log a full build would
    give, or nothing.  Asked once, by the first recomputation of an open."""
    resume, reader.resume = reader.resume, None
    new = reader.pending_batches
    if resume is None or resume[0] != reader.log_basis(roster, signed - new):
        return None
    try:
        log = StoredLog.decode(resume[1], lambda: stored_chains(reader), DatabaseError).full()
    except (ValueError, DatabaseError):
        reader.log_stored = False  # (the log built instead is stored on lock)
        return None
    added = sorted(b for b in new if b in signed)
    if not added:
        return log
    if any(reader.batches[b].has_control for b in added):
        extended = extend_log_after_roster_change(log, reader.batches, signed, roster, roster, set(added))
    else:
        extended = extend_log(log, reader.batches, added, roster)
    return log if extended else None


def roster_of(reader: Reader) -> tuple[Roster, set[bytes], set[bytes] | None]:
    """The roster, the signed batches, and the batches whose flags it may have changed (None: any).
    Over the local state's batches (a warm open, before a pass over every batch), the roster is
    computed from those that can move it or be reported by it (BatchViews.special, the new ones
    among them: a new batch is stored not accepted); when its fingerprint is the one the stored
    flags were computed with (the same principals, revocations, erasures and compartments: another
    device's epoch roll, a rename), every other batch is signed as it was (the accepted ones) and
    its flags do not change: no view is made of it (100,000 at a million records).

    When principals or revocations changed (a passphrase change replaces and revokes a credential;
    a device is revoked or enrolled) and nothing else a plain batch's verdict depends on did
    (:func:`moved_writers`), the roster is computed again over those batches and every batch of
    the writers that moved; the other accepted batches keep their verdicts.  Otherwise (and when
    other copies of a batch wait to be judged, :mod:`camillo.session.copies`) the roster is
    computed over every batch."""
    batches = reader.batches
    if isinstance(batches, BatchViews) and not batches.every and reader.roster_fingerprint and not reader.copies:
        if reader.flags_new and not reader.flags_all:
            reader.write_flags()  # (the stored acceptance flags say which batches are special)
        special = batches.special()
        roster, signed = build_roster(reader.vault_id, special, of_writers=batches.of_writers)
        fingerprint = roster.fingerprint()
        if roster.genesis is not None and fingerprint == reader.roster_fingerprint:
            return roster, signed | (reader.last_accepted - special.keys() - batches.gone), set(special)
        moved = moved_writers(reader.roster, roster)
        if moved is not None and not moved & copies.waiting_writers(reader):  # (else: copies to judge)
            views = {**special, **{v.id: v for v in batches.of_writers(moved)}}
            # (their batches can be excluded by a revocation: the roster computed again over them is
            # the same one, or the pass over every batch below decides)
            if len(views) > len(special):
                roster, signed = build_roster(reader.vault_id, views, of_writers=batches.of_writers)
            if len(views) == len(special) or roster.fingerprint() == fingerprint:
                return roster, signed | (reader.last_accepted - views.keys() - batches.gone), set(views)
    roster, signed = build_roster(reader.vault_id, batches)
    if (reader.copies or reader.copies_waiting) and copies.resolve(reader, roster):  # (another copy counts: §9.3)
        roster, signed = build_roster(reader.vault_id, batches)
    return roster, signed, None


def moved_writers(before: Roster, after: Roster) -> set[bytes] | None:
    """The writers whose batches' verdicts a change from roster ``before`` (the one the stored flags
    were computed with) to ``after`` can move: those whose principal changed, appeared or went, and
    those whose revocation did.  None when the change can move other batches too: another genesis,
    other erasures, or other compaction records vouching for batches (a plain batch is signed under
    its writer's key, or vouched for by a compaction whose signer is not revoked, and excluded
    only by its writer's revocation)."""
    if before.genesis is None or after.genesis is None or before.genesis.id != after.genesis.id:
        return None
    if before.erasures.keys() != after.erasures.keys() or vouchers(before) != vouchers(after):
        return None
    p, q = before.principals, after.principals
    r, s = before.revocations, after.revocations
    return {w for w in p.keys() | q.keys() if p.get(w) != q.get(w)} | {w for w in r.keys() | s.keys()
                                                                      if r.get(w) != s.get(w)}


def vouchers(roster: Roster) -> frozenset[bytes]:
    """The compaction records whose signer's word accepts the batches they list (as the roster's
    builder takes them: a signer not revoked)."""
    return frozenset(k for k, m in roster.manifests.items()
                     if m.kind == Kind.COMPACTION and m.signer not in roster.revocations)
