"""Compaction: many small segments become few large ones (spec §16.5).

Every interactive write is its own small segment, so a vault that lives for years accumulates
hundreds of thousands of files, and a cold open pays one HPKE open and one signature check per
batch.  Compaction, run by an owner device:

1. reads the compartment's small segments (below :data:`SMALL`) whose batches are all accepted;
2. re-encrypts those batches, unchanged, into segments of up to 4 MiB sealed under the
   compartment's *current* epoch (so old epoch keys stop opening future copies of the vault),
   reading each small segment when the order of writer and seq reaches it and writing each new
   segment once sealed: what it holds at once is about one new segment's batches, whatever the
   vault's size (none of the new segments stays if one cannot be read or written);
3. writes one signed COMPACTION record per new segment, listing the old segments it replaces and the
   batch ids it verified; readers accept those batches on that signature instead of checking every
   batch signature again (``camillo verify --full`` still checks them all);
4. deletes the old segments only once that is safe (the two-phase rule of restic and duplicacy):
   every other active device has acknowledged the compaction (one of its later batches has seen
   it), or, in a vault with no other device, after a grace period (7 days by default;
   ``prune_now`` skips it when the user knows no other copy is syncing).  Until then both copies
   exist and readers deduplicate batches by id.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

from ..control import BatchView, ManifestInfo
from ..records import Batch, Kind, encode_record
from ..session import Session
from ..session.copies import kept_signatures, merge_entries
from ..session.views import with_control
from ..session.writer import write_batches
from ..values import CompactionReport
from .attachments import collect_garbage
from .erasure import Sealer, segment_id

SMALL = 64 * 1024
GRACE_SECONDS = 7 * 86400
WRITE_BYTES = 16 * 1024 * 1024  # new segments written together (each directory fsynced once a write)


def compact(session: Session, *, prune_now: bool = False, now: float | None = None) -> CompactionReport:
    actor = session.require_owner("compacting")
    now = time.time() if now is None else now
    r = session.roster
    before = 0
    written = 0
    compacted = 0
    records: dict[bytes, list[bytes]] = {}
    new_files: list[tuple[str, bytes]] = []  # (sealed, not yet written)
    files: list[str] = []  # (written)
    # An earlier compaction (by this device or another) whose old segments still wait for their
    # prune: neither those nor its new segments are compacted again, which would give their
    # batches a third copy.  Once pruned, its new segments are ordinary segments again.
    present = {segment_id(n) for n in session.reader.segment_batches}
    replaced = {sid for m in r.manifests.values() if m.kind == Kind.COMPACTION and not present.isdisjoint(m.removed)
                for sid in (*m.removed, *m.added)}
    control = session.all_compartments()[0]
    erased = r.erased_records()
    try:
        for cid in session.all_compartments():
            epoch = r.current_epoch(cid)
            if epoch is None or (cid, epoch.epoch_id) not in session.keyring.epoch_keys:
                continue
            small = sorted(
                name for name, (c, _e) in session.reader.segment_epochs.items()
                if c == cid and name not in session.reader.unreadable and segment_id(name) not in replaced
                and session.shelf.exists(name)
                and len(session.reader.segment_batches.get(name, [])) > 0 and _size(session, name) <= SMALL
                and all(b in session.log.accepted for b in session.reader.segment_batches[name])
            )
            if len(small) < 2:
                continue
            before += len(small)
            for name, data, bids, old in _sealed(session, cid, epoch.epoch_id, epoch.public, small, erased):
                new_files.append((name, data))
                written += 1
                compacted += len(bids)
                rec = encode_record(
                    Kind.COMPACTION, actor.writer_id,
                    body={0: cid, 1: sorted(segment_id(n) for n in old), 2: [segment_id(name)], 3: sorted(bids)},
                    signers=[actor.signer],
                )
                records.setdefault(control, []).append(rec)
                if cid != control:
                    records.setdefault(cid, []).append(rec)
                if sum(len(d) for _n, d in new_files) >= WRITE_BYTES:  # (written as they are sealed)
                    files += session.write_files(new_files)
                    new_files = []
        if records:  # every new segment, or none, before the records listing them
            files += session.write_files(new_files)
    except BaseException:  # (a segment that cannot be read or written: none of the new ones stays)
        session.delete_quietly(reversed(files))
        raise
    if records:
        write_batches(session, records, undo=lambda: session.delete_quietly(reversed(files)))
    deleted, pending = prune(session, prune_now=prune_now, now=now)
    deleted += collect_garbage(session, now=now)  # chunk files no attachment names (after the grace period)
    now_r = session.roster
    alone = not any(p.writer_id not in now_r.revocations and p.writer_id != actor.writer_id for p in now_r.devices())
    changes = session.reader.changes(files_written=len(files) if records else 0, files_removed=deleted)
    return CompactionReport(before, written, deleted, compacted, pending, alone, changes)


def _sealed(session: Session, cid: bytes, eid: bytes, epk: bytes, small: list[str],
            erased: frozenset[bytes] | set[bytes]) -> Iterator[tuple[str, bytes, list[bytes], list[str]]]:
    """The batches of these small segments sealed again into large ones, ordered by writer id then
    seq (spec §16.5), as (name, bytes, batch ids, the small segments holding those batches): each
    small segment is read when the order reaches its first batch, and its batches are held only until
    they are sealed, so what is held at once is about one segment's worth, not the compartment (at a
    million records a compaction held every batch and every new segment: 1.2 GiB).  The order comes
    from the causal log's chains (every batch here is accepted), without reading a segment; a batch
    found in two of them is sealed once, with the signatures of the copy kept and the bytes either
    holds of a record no erasure names (§9.3), and both segments are replaced."""
    holders: dict[bytes, list[str]] = {}  # batch id -> the small segments holding it
    for name in small:
        for bid in session.reader.segment_batches[name]:
            holders.setdefault(bid, []).append(name)
    order = sorted((w, seq, bid) for (w, c), chain in session.log.chains.items() if c == cid
                   for seq, bid in chain.items() if bid in holders)
    pool: dict[bytes, Batch] = {}  # read, not yet sealed
    read: set[str] = set()
    done: set[bytes] = set()  # sealed
    sealer = Sealer(session, cid, eid, epk)

    def take(name: str) -> None:
        read.add(name)
        for b in session.reader.batches_of_segment(name):
            if b.id in done or b.id not in holders:  # (sealed already, or not listed for this segment)
                continue
            prior = pool.setdefault(b.id, b)
            if prior is not b and (prior.sigs != b.sigs or prior.records != b.records):
                pool[b.id] = Batch(prior.id, prior.header_bytes, prior.header,
                                   kept_signatures(session.batches, prior, b),
                                   merge_entries(prior.header.records, prior.records, b.records, erased))

    def seal(bid: bytes) -> list[tuple[str, bytes, list[bytes], list[str]]]:
        if bid in done:
            return []
        for name in holders[bid]:  # (every copy read before the batch is sealed)
            if name not in read:
                take(name)
        done.add(bid)
        batch = pool.pop(bid, None)  # (None: not in the segments that listed it, as read now)
        return [] if batch is None else [with_old(s) for s in sealer.add(batch)]

    def with_old(sealed: tuple[str, bytes, list[bytes]]) -> tuple[str, bytes, list[bytes], list[str]]:
        return (*sealed, sorted({n for bid in sealed[2] for n in holders[bid]}))

    for _w, _seq, bid in order:
        yield from seal(bid)
    # (a batch the chains do not give, which cannot happen for accepted batches: sealed after them, in
    # the same order, read from its segment)
    for name in small:
        if name not in read:
            take(name)
    for b in sorted(pool.values(), key=lambda b: (b.header.writer_id, b.header.seq)):
        yield from seal(b.id)
    yield from (with_old(s) for s in sealer.finish())


def _size(session: Session, name: str) -> int:
    size = session.shelf.size(name)
    return SMALL + 1 if size is None else size


def _carriers(session: Session, record_ids: set[bytes]) -> dict[bytes, dict[bytes, BatchView]]:
    """For each of these control records, the accepted batch carrying it in each compartment (one
    pass over the batches holding a control record, however many manifests there are: a pass over
    every batch's records decoded the whole vault, a million records held until the session ended)."""
    out: dict[bytes, dict[bytes, BatchView]] = {}
    accepted = session.log.accepted
    for v in with_control(session.batches):
        for rec in v.records:
            if rec is not None and rec.id in record_ids and v.id in accepted:
                out.setdefault(rec.id, {}).setdefault(v.header.compartment_id, v)
    return out


def _acknowledged(session: Session, m: ManifestInfo, carriers_by_record: dict[bytes, dict[bytes, BatchView]]) -> bool:
    """Every other active device has written a batch that saw a batch carrying ``m``: a control
    batch that saw the control compartment's carrier, or a batch of the compacted compartment
    that saw the carrier there (the COMPACTION record is written in both, so ordinary appends
    acknowledge a compaction of a data compartment).  Frontiers are per compartment, so each
    carrier is compared with batches of its own compartment."""
    r = session.roster
    carriers = carriers_by_record.get(m.record_id, {})  # compartment -> the batch carrying m there
    if not carriers:
        return False
    writer = next(iter(carriers.values())).header.writer_id
    others = [p for p in r.devices() if p.writer_id not in r.revocations and p.writer_id != writer]
    for p in others:
        seen = False
        for c, carrier in carriers.items():
            chain = session.log.chains.get((p.writer_id, c))
            if not chain:
                continue
            # frontiers never go backwards along a chain (readers reject that), so its top says it all
            top = session.batches[chain[session.log.tops.get((p.writer_id, c)) or max(chain)]]
            if top.header.frontier.get(carrier.header.writer_id, 0) >= carrier.header.seq:
                seen = True
                break
        if not seen:
            return False
    return True


def prune(session: Session, *, prune_now: bool = False, now: float | None = None) -> tuple[int, int]:
    """Delete segments that signed COMPACTION records replaced, when safe.  (deleted, still pending)"""
    now = time.time() if now is None else now
    r = session.roster
    others_exist = any(p.writer_id not in r.revocations and session.actor is not None
                       and p.writer_id != session.actor.writer_id for p in r.devices())
    deleted = pending = 0
    by_id = {segment_id(n): n for n in session.reader.segment_batches}
    carriers = _carriers(session, {m.record_id for m in r.manifests.values() if m.kind == Kind.COMPACTION}) \
        if others_exist else {}
    for m in r.manifests.values():
        if m.kind != Kind.COMPACTION:
            continue
        # the replacement must be here and readable before anything it replaces is deleted
        if not all(a in by_id and by_id[a] not in session.reader.unreadable for a in m.added):
            continue
        old = [by_id[s] for s in m.removed if s in by_id]
        if not old:
            continue
        if others_exist:
            safe = _acknowledged(session, m, carriers)  # D9 (a): every other device has seen it
        else:
            safe = prune_now or now - m.ts >= GRACE_SECONDS  # D9 (b): one device, after a grace period
        if not safe:
            pending += len(old)
            continue
        session.delete_files(old)
        deleted += len(old)
    if deleted:
        session.refresh()
    return deleted, pending

