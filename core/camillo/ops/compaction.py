"""Compaction: many small segments become few large ones (spec §16.5).

Every interactive write is its own small segment, so a vault that lives for years accumulates
hundreds of thousands of files, and a cold open pays one HPKE open and one signature check per
batch.  Compaction, run by an owner device:

1. reads the compartment's small segments (below :data:`SMALL`) and verifies every batch in them;
2. re-encrypts those batches, unchanged, into segments of up to 4 MiB sealed under the
   compartment's *current* epoch (so old epoch keys stop opening future copies of the vault);
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

from ..control import BatchView, ManifestInfo
from ..records import Batch, Kind, encode_record
from ..session import Session
from ..session.copies import kept_signatures, merge_entries
from ..session.writer import write_batches
from ..values import CompactionReport
from .attachments import collect_garbage
from .erasure import reseal, segment_id

SMALL = 64 * 1024
GRACE_SECONDS = 7 * 86400


def compact(session: Session, *, prune_now: bool = False, now: float | None = None) -> CompactionReport:
    actor = session.require_owner("compacting")
    now = time.time() if now is None else now
    r = session.roster
    before = 0
    written = 0
    compacted = 0
    records: dict[bytes, list[bytes]] = {}
    new_files: list[tuple[str, bytes]] = []
    # An earlier compaction (by this device or another) whose old segments still wait for their
    # prune: neither those nor its new segments are compacted again, which would give their
    # batches a third copy.  Once pruned, its new segments are ordinary segments again.
    present = {segment_id(n) for n in session.reader.segment_batches}
    replaced = {sid for m in r.manifests.values() if m.kind == Kind.COMPACTION and not present.isdisjoint(m.removed)
                for sid in (*m.removed, *m.added)}
    control = session.all_compartments()[0]
    erased = r.erased_records()
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
        batches: dict[bytes, Batch] = {}
        for name in small:
            for b in session.reader.batches_of_segment(name):
                prior = batches.setdefault(b.id, b)
                if prior is not b and (prior.sigs != b.sigs or prior.records != b.records):
                    # (two copies: the signatures that verified, the bytes either holds that no erasure names)
                    batches[b.id] = Batch(prior.id, prior.header_bytes, prior.header,
                                          kept_signatures(session.batches, prior, b),
                                          merge_entries(prior.header.records, prior.records, b.records, erased))
        ordered = sorted(batches.values(), key=lambda b: (b.header.writer_id, b.header.seq))
        replaced_by_batch: dict[bytes, list[str]] = {}  # (a batch found in two of them: both are replaced)
        for name in small:
            for bid in session.reader.segment_batches[name]:
                replaced_by_batch.setdefault(bid, []).append(name)
        resealed = reseal(session, cid, epoch.epoch_id, epoch.public, ordered)
        new_files += [(name, data) for name, data, _ in resealed]
        for name, data, bids in resealed:
            written += 1
            compacted += len(bids)
            old = sorted({n for bid in bids for n in replaced_by_batch[bid]})
            rec = encode_record(
                Kind.COMPACTION, actor.writer_id,
                body={0: cid, 1: sorted(segment_id(n) for n in old), 2: [segment_id(name)], 3: sorted(bids)},
                signers=[actor.signer],
            )
            records.setdefault(control, []).append(rec)
            if cid != control:
                records.setdefault(cid, []).append(rec)
    if records:
        files = session.write_files(new_files)  # every new segment, or none, before the records listing them
        write_batches(session, records, undo=lambda: session.delete_quietly(reversed(files)))
    deleted, pending = prune(session, prune_now=prune_now, now=now)
    deleted += collect_garbage(session, now=now)  # chunk files no attachment names (after the grace period)
    now_r = session.roster
    alone = not any(p.writer_id not in now_r.revocations and p.writer_id != actor.writer_id for p in now_r.devices())
    changes = session.reader.changes(files_written=len(new_files) if records else 0, files_removed=deleted)
    return CompactionReport(before, written, deleted, compacted, pending, alone, changes)


def _size(session: Session, name: str) -> int:
    size = session.shelf.size(name)
    return SMALL + 1 if size is None else size


def _carriers(session: Session, record_ids: set[bytes]) -> dict[bytes, dict[bytes, BatchView]]:
    """For each of these control records, the accepted batch carrying it in each compartment (one
    pass over the batches, however many manifests there are)."""
    out: dict[bytes, dict[bytes, BatchView]] = {}
    accepted = session.log.accepted
    for v in session.batches.values():
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

