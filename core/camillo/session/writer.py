"""Writing batches: number, sign, seal and durably write records, then read them back (spec §17.6).

Every write of the vault (an append, a curation, a control record of any operation) goes through
:func:`write_batches`.  It holds this actor's write lock while it numbers batches, so two processes
of one installation never use one ``seq``; it stages the segments (complete and fsynced, under
names readers ignore) before the counter is persisted, and renames them into place after, so a
crash can skip a number but never reuse one.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Mapping
from functools import partial

from .. import ids, segments
from ..control import preferred
from ..devicestate import DeviceState
from ..errors import AccessDenied, DamagedFile, Incomplete, VaultError, WriterFrozen
from ..primitives import constant_time_equal
from ..records import Batch, BatchHeader, make_batch
from ..storage import FolderShelf, segment_name
from .core import Session

BATCH_RECORDS = 2000
BATCH_BYTES = 2 * 1024 * 1024
SEGMENT_PAYLOAD = 4 * 1024 * 1024
# A plain append numbers its batches after a scan of the folder, unless the last scan is younger
# than this, this installation's last batch is read (no other process of it wrote since), and no
# envelope or slot arrived (a new epoch, a revocation, a rotation): then ``deps`` and ``frontier``
# name what was seen up to this long ago, which the format allows (they are what the writer had
# seen).  A scan costs a stat per segment directory (up to 256), which back-to-back appends would
# otherwise each pay.
WRITE_SCAN_AGE = 0.5


def chunks(raws: list[bytes]) -> list[list[bytes]]:
    """Split records into batches of at most BATCH_RECORDS records and about BATCH_BYTES."""
    out: list[list[bytes]] = [[]]
    size = 0
    for raw in raws:
        if out[-1] and (len(out[-1]) >= BATCH_RECORDS or size + len(raw) > BATCH_BYTES):
            out.append([])
            size = 0
        out[-1].append(raw)
        size += len(raw)
    return out


def sealing_key(session: Session, cid: bytes) -> tuple[bytes, bytes]:
    """(epoch id, epoch public key) new segments of ``cid`` are sealed to: the current epoch (spec
    §15.2).  A writer that reads (an owner device, a write grant) prefers, among concurrent heads, one
    whose secret it holds, so that it can read back what it writes (spec §16.10); when it holds none
    (another device's new epoch whose key is still on its way) it seals to the current one, which
    everyone else can read and this writer too once the key arrives (it keeps each such segment's own
    key meanwhile, in case an erasure destroys that epoch first: :func:`_number_and_seal`)."""
    roster, keyring = session.roster, session.keyring
    epoch = roster.current_epoch(cid)
    if epoch is not None:
        if keyring.epoch_secrets and (cid, epoch.epoch_id) not in keyring.epoch_keys:
            held = [h for h in roster.epoch_heads(cid) if (cid, h.epoch_id) in keyring.epoch_keys]
            if held:
                epoch = min(held, key=preferred)
        own = keyring.epoch_keys.get((cid, epoch.epoch_id))
        if own is not None and not constant_time_equal(own.public, epoch.public):
            # The EPOCH record announces a public key that its secret does not give: what would be
            # sealed to it could never be read with the epoch's secret (spec §9.2, §15.2).
            raise DamagedFile(
                f"the EPOCH record {epoch.record_id.hex()[:12]} of compartment {session.compartment_name(cid)} "
                "announces a public key that does not belong to its epoch secret, so nothing was written there "
                "(what it already holds is unaffected); the owner device that wrote that record is faulty: "
                "revoking it ('camillo devices', 'camillo revoke') starts a new epoch")
        return epoch.epoch_id, epoch.public
    # An append grant cannot read EPOCH records: it follows the chain of public keys delivered to it.
    keyring = session.keyring
    mine = {e: p for (c, e), p in keyring.epoch_publics.items() if c == cid}
    if not mine:
        name = session.compartment_name(cid)
        if session.grant is not None:
            raise AccessDenied(
                f"the append grant of agent {session.grant.agent} finds no key to write to compartment {name} "
                "signed by an owner it trusts: its grant file names none of the owners' current keys and no chain "
                "of certificates leads to them (a grant file made before Camillo followed key changes, or the "
                "owners' keys changed in a way it cannot follow). Ask the vault's owner for a new grant file")
        if session.keyring.unlocked:  # an owner that cannot read its compartment's epochs yet
            raise Incomplete(f"this copy of the vault cannot be read in full yet (the keys of another device's "
                             f"change have not all arrived), so nothing was written to {name}: let the sync "
                             "finish and try again")
        raise AccessDenied(f"no key to write to compartment {name} is available here")
    prevs = {keyring.envelope_sources[(cid, e)].prev_epoch for e in mine}
    heads = sorted(e for e in mine if e not in prevs) or sorted(mine)
    return heads[0], mine[heads[0]]


def causal_fields(chains: Mapping[tuple[bytes, bytes], Mapping[int, bytes]], dag_heads: Iterable[bytes], cid: bytes,
                  data_compartments: Collection[bytes] | None = None,
                  prev_frontier: Mapping[bytes, int] | None = None,
                  tops: Mapping[tuple[bytes, bytes], int] | None = None,
                  ) -> tuple[tuple[bytes, ...], dict[bytes, int], dict[bytes, dict[bytes, int]]]:
    """``deps``, ``frontier`` (without the writer's own entry) and ``heads`` of the next batch in
    ``cid`` (spec §17.6 rule 5), from the writer's causal log: ``chains`` ((writer, compartment) ->
    {seq: batch id}, the accepted batches) and ``dag_heads`` (the compartment's DAG heads, §17.2).

    * ``deps``: the heads in byte order, the 64 highest when there are more;
    * ``frontier``: for every writer with a chain in ``cid``, its highest accepted seq (the highest,
      also when a lower seq is missing), raised where needed to ``prev_frontier`` (the writer's
      previous batch, which another process of the installation may have written having seen more);
    * ``heads``: for a control batch (``data_compartments`` given), writer -> highest accepted seq in
      every data compartment with a chain, so a reader that lacks a compartment's batches knows it
      (§17.4); empty otherwise (key 11 is then not written).

    ``tops``: each chain's highest seq where the log keeps it (``CausalLog.tops``), so that an append
    does not take the maximum of a chain of 100,000 batches."""
    tops = tops or {}

    def top(key: tuple[bytes, bytes], chain: Mapping[int, bytes]) -> int:
        t = tops.get(key)
        return t if t is not None else max(chain)

    deps = tuple(sorted(dag_heads)[-64:])
    frontier = {w: top((w, c), chain) for (w, c), chain in chains.items() if c == cid and chain}
    for w, s in (prev_frontier or {}).items():
        if frontier.get(w, 0) < s:
            frontier[w] = s
    heads: dict[bytes, dict[bytes, int]] = {}
    if data_compartments is not None:
        for (w, c), chain in chains.items():
            if c in data_compartments and chain:
                heads.setdefault(c, {})[w] = top((w, c), chain)
    return deps, frontier, heads


def key_check(session: Session) -> Callable[[], bool] | None:
    """For a plain append that may skip the scan (WRITE_SCAN_AGE): None when the view must be
    refreshed before numbering; otherwise a function that says whether no key change arrived
    (FolderShelf.start_key_check: a folder knows at once; an object store lists ``env/`` on a
    worker thread while the batch is numbered, sealed and staged, and is asked before the counter
    is persisted)."""
    shelf = session.shelf
    if not isinstance(shelf, FolderShelf):
        return None
    return shelf.start_key_check(session.reader.scanned_at, WRITE_SCAN_AGE)


def write_batches(session: Session, per_compartment: dict[bytes, list[bytes]], *,
                  undo: Callable[[], None] | None = None, quick: bool = False,
                  encoded_here: bool = False, remember: bool = True) -> dict[bytes, list[Batch]]:
    """Sign, seal and durably write the records as batches (one for an interactive write; as
    many as needed for a bulk import, several per segment), then read them back in.  ``undo``
    runs if they could not be written at all (nothing of them will ever appear): the caller
    deletes the files it wrote for them.  ``quick`` (plain appends only; never a write that
    follows files this process just wrote, like a compaction's or an erasure's) lets a recent
    scan stand in for a new one (WRITE_SCAN_AGE).  ``encoded_here``: every record was just built
    by :func:`~camillo.records.encode_record` (:meth:`Reader.take_written` does not check them again).
    ``remember`` False: the caller checks the vault against this device's memory itself afterwards
    (:meth:`Session.update_memory`; a key change does when it reads the new keys)."""
    session.require_writer()
    folder = session.folder()
    store = session.device_state_store
    if store is None:
        raise AssertionError("a writer without a device state")
    with store.locked():
        on_disk = store.load()
        if on_disk is not None:
            session.device_state = on_disk
        finished = session.commit_staged()
        # this installation's last batch in each compartment not read yet: another process wrote it
        tips = [session.device_state.counters.get(cid, (0, None))[1] for cid in per_compartment]
        own_tips_read = all(tip is None or tip in session.batches for tip in tips)
        for attempt in range(2):
            confirm = None if finished or not quick or not own_tips_read or attempt else key_check(session)
            # The segments are staged (complete, fsynced, under dot names readers ignore) before the
            # counter is persisted and renamed into place after it, and the counter remembers them:
            # a crash in between is finished by the next open or write instead of leaving a
            # number skipped for good (a gap every reader would report as missing).  What fails before
            # the counter is saved wrote nothing: the counters numbered in memory are forgotten, and the
            # caller's files for these records (a key change's) deleted, as none of them will appear.
            staged: list[tuple[str, str]] = []
            try:
                if confirm is None:
                    session.refresh()  # see what other processes and devices wrote before numbering
                files, sealed, written = _number_and_seal(session, per_compartment)
                staged = folder.stage_all(files)  # (a key change's segment per compartment: together)
                if confirm is not None and not confirm():
                    _forget(session, staged)  # a key change arrived meanwhile: numbered again on the new view
                    continue
                session.device_state.extra["staged"] = [[n, t] for n, t in staged]
                store.save(session.device_state)  # durable before any segment exists
            except BaseException:
                _forget(session, staged)
                if undo is not None:
                    undo()
                raise
            break
        for name, tmp in staged:
            folder.commit(name, tmp)
    # Take in exactly what was written, from the batches sealed (the folder was scanned just before
    # numbering; what others write meanwhile arrives with the next refresh).
    reader = session.reader
    new: list[bytes] = []
    for name, cid, epoch_id, group in sealed:
        new += reader.take_written(name, cid, epoch_id, group, encoded_here=encoded_here)
    if new and not reader.extend(new):
        reader.recompute()
    if remember:
        session.update_memory()
    folder.after_write()
    return written


def _forget(session: Session, staged: list[tuple[str, str]]) -> None:
    """Undo a numbering that was not persisted (it never happened: its numbers are used again):
    drop its staged segments and reload the device state as it is on disk."""
    for name, tmp in staged:
        session.folder().unstage(name, tmp)
    try:
        store = session.device_state_store
        session.device_state = (store.load() if store is not None else None) or DeviceState()
    except VaultError:
        pass


def _number_and_seal(session: Session, per_compartment: dict[bytes, list[bytes]],
                     ) -> tuple[list[tuple[str, bytes]], list[tuple[str, bytes, bytes, list[Batch]]],
                                dict[bytes, list[Batch]]]:
    """Number, sign and seal the records on the session's current view, advancing the counters and
    the rollback memory in ``session.device_state`` (in memory only: the caller persists them, or
    reloads the device state to forget them).  Returns the segments (name, bytes), what each
    holds (name, compartment, epoch, batches) and the batches written per compartment."""
    actor = session.require_writer()
    written: dict[bytes, list[Batch]] = {}
    files: list[tuple[str, bytes]] = []
    sealed: list[tuple[str, bytes, bytes, list[Batch]]] = []  # each segment: name, compartment, epoch, batches
    log = session.log
    for cid, raws in per_compartment.items():
        epoch_id, public = sealing_key(session, cid)
        secret = session.keyring.secret((cid, epoch_id))
        if secret is not None:  # kept until others read these batches (an erasure may destroy the epoch)
            session.device_state.kept.setdefault(cid, {}).setdefault(epoch_id, secret)
        # Sealed to an epoch whose secret this writer does not hold (another device's key change is not
        # all here yet): it keeps each segment's own key instead, to seal those batches again if an
        # erasure it has not seen yet destroyed that epoch (spec §16.10 rule 2).  (An append grant reads
        # nothing and seals nothing again: it keeps none.)
        keep = secret is None and bool(session.keyring.unlocked or session.keyring.epoch_secrets)
        seal = partial(_seal_one, session, files, sealed, cid, epoch_id, public, keep)
        seq, prev = session.device_state.counters.get(cid, (0, None))
        on_vault = log.max_seq(actor.writer_id, cid)
        if on_vault > seq:
            raise WriterFrozen(
                f"this installation's batches go up to seq {on_vault} in "
                f"{session.roster.compartment_name(cid)} but it only remembers {seq}: it was restored from a "
                "backup or copied. It will not write (that would fork its history); revoke this device and "
                "register it again"
            )
        if any(f.writer_id == actor.writer_id for f in log.forks):
            raise WriterFrozen("this writer is frozen by a proven fork; revoke it and register again")
        # the previous batch's frontier, remembered at its write with the counter (one save), also
        # when this view cannot read that batch (sealed to an epoch another device's erasure
        # destroyed, not sealed again yet); read from the batch when remembered by an older version
        last = session.device_state.extra.get("frontiers", {}).get(cid)
        if last is None and prev is not None and (prev_view := session.batches.get(prev)) is not None:
            last = prev_view.batch.header.frontier
        deps, frontier, heads = causal_fields(
            log.chains, log.heads.get(cid, set()), cid,
            session.roster.compartments if cid == session.roster.control_id else None, last, log.tops)
        group: list[Batch] = []
        group_size = 0
        batches: list[Batch] = []
        for chunk in chunks(raws):
            seq += 1
            frontier[actor.writer_id] = seq - 1
            header = BatchHeader(session.vault_id, cid, actor.writer_id, seq, prev, deps, dict(frontier),
                                 tuple(ids.record_id(r) for r in chunk), int(time.time()), heads=heads)
            batch = make_batch(header, chunk, actor.signer)
            size = sum(len(r) for r in chunk) + 512
            if group and group_size + size > SEGMENT_PAYLOAD:
                seal(group)
                group, group_size = [], 0
            group.append(batch)
            group_size += size
            batches.append(batch)
            prev, deps = batch.id, (batch.id,)
        seal(group)
        if prev is None:
            raise AssertionError("no batch written")
        session.device_state.counters[cid] = (seq, prev)
        session.device_state.extra.setdefault("frontiers", {})[cid] = dict(frontier)
        # remembered with the counter (one save): the rollback memory of this writer's own chain
        session.device_state.remembered.setdefault(cid, {})[actor.writer_id] = (seq, prev)
        written[cid] = batches
    return files, sealed, written


def _seal_one(session: Session, files: list[tuple[str, bytes]], sealed: list[tuple[str, bytes, bytes, list[Batch]]],
              cid: bytes, epoch_id: bytes, public: bytes, keep: bool, group: list[Batch]) -> None:
    """Seal one segment of ``group`` for :func:`_number_and_seal` (``keep``: keep its segment key)."""
    seg, key = segments.seal_segment_keyed(session.vault_id, cid, epoch_id, public, segments.encode_payload(group))
    files.append((segment_name(seg), seg))
    sealed.append((files[-1][0], cid, epoch_id, group))
    if keep:
        session.device_state.kept_segments[files[-1][0]] = key


def write_control(session: Session, raws: list[bytes], compartments: list[bytes], *,
                  undo: Callable[[], None] | None = None) -> dict[bytes, list[Batch]]:
    """The same control records, one batch in each of ``compartments``."""
    return write_batches(session, {c: list(raws) for c in compartments}, undo=undo)
