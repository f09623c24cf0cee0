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
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .access import write_files
from .control import BatchView, ManifestInfo
from .erasure import _batches_of_segment, reseal
from .records import Kind, encode_record

if TYPE_CHECKING:
    from .vault import Vault

SMALL = 64 * 1024
GRACE_SECONDS = 7 * 86400


@dataclass
class CompactionReport:
    segments_before: int
    segments_written: int
    segments_deleted: int
    batches: int
    pending: int  # old segments kept until other devices acknowledge (or the grace period ends)

    alone: bool = False  # no other active device: old segments wait for the grace period

    def lines(self) -> list[str]:
        def n(count: int, word: str, plural: str = "") -> str:
            return f"{count} {word if count == 1 else plural or word + 's'}"

        out = [f"Compacted {n(self.batches, 'batch', 'batches')} from "
               f"{n(self.segments_before, 'small segment')} into {n(self.segments_written, 'large segment')}; "
               f"deleted {n(self.segments_deleted, 'old segment')}."]
        if self.pending and self.alone:
            out.append(f"{n(self.pending, 'old segment')} kept for the 7-day grace period, in case another copy of "
                       "this folder is still syncing; run compact again later, or with --prune-now if no other "
                       "copy exists, to delete them.")
        elif self.pending:
            out.append(f"{n(self.pending, 'old segment')} kept until your other devices have seen the compaction "
                       "(any of their writes to the compacted compartments); run compact again later to delete them.")
        return out


def _segment_id(name: str) -> bytes:
    return bytes.fromhex(name.rsplit("/", 1)[1][:64])


def compact(vault: Vault, *, prune_now: bool = False, now: float | None = None) -> CompactionReport:
    vault._require_owner("compacting")
    actor = vault._require_writer()
    now = time.time() if now is None else now
    r = vault.roster
    before = 0
    written = 0
    compacted = 0
    records: dict[bytes, list[bytes]] = {}
    new_files: list[tuple[str, bytes]] = []
    # An earlier compaction (by this device or another) whose old segments still wait for their
    # prune: neither those nor its new segments are compacted again, which would give their
    # batches a third copy.  Once pruned, its new segments are ordinary segments again.
    present = {_segment_id(n) for n in vault._segment_batches}
    replaced = {sid for m in r.manifests.values() if m.kind == Kind.COMPACTION and m.removed & present
                for sid in m.removed | m.added}
    for cid in [r.control_id, *r.compartments]:
        epoch = r.current_epoch(cid)
        if epoch is None or (cid, epoch.epoch_id) not in vault._epoch_keys:
            continue
        small = sorted(
            name for name, (c, _e) in vault._segment_epochs.items()
            if c == cid and name not in vault._unreadable and _segment_id(name) not in replaced
            and vault.shelf.exists(name)
            and len(vault._segment_batches.get(name, [])) > 0 and _size(vault, name) <= SMALL
            and all(b in vault.log.accepted for b in vault._segment_batches[name])
        )
        if len(small) < 2:
            continue
        before += len(small)
        batches = {}
        for name in small:
            for b in _batches_of_segment(vault, name):
                batches.setdefault(b.id, b)
        ordered = sorted(batches.values(), key=lambda b: (b.header.writer_id, b.header.seq))
        replaced_by_batch = {b: name for name in small for b in vault._segment_batches[name]}
        resealed = reseal(vault, cid, epoch.epoch_id, epoch.public, ordered)
        new_files += [(name, data) for name, data, _ in resealed]
        for name, data, bids in resealed:
            written += 1
            compacted += len(bids)
            old = sorted({replaced_by_batch[b] for b in bids})
            rec = encode_record(
                Kind.COMPACTION, actor.writer_id,
                body={0: cid, 1: sorted(_segment_id(n) for n in old), 2: [_segment_id(name)], 3: sorted(bids)},
                signers=[actor.signer],
            )
            records.setdefault(r.control_id, []).append(rec)
            if cid != r.control_id:
                records.setdefault(cid, []).append(rec)
    if records:
        files = write_files(vault, new_files)  # every new segment, or none, before the records listing them
        vault._write_batches(records, undo=lambda: vault._delete_quietly(reversed(files)))
    deleted, pending = prune(vault, prune_now=prune_now, now=now)
    now_r = vault.roster
    alone = not any(p.writer_id not in now_r.revocations and p.writer_id != actor.writer_id for p in now_r.devices())
    return CompactionReport(before, written, deleted, compacted, pending, alone)


def _size(vault: Vault, name: str) -> int:
    import os

    try:
        return os.path.getsize(vault.shelf._path(name))  # type: ignore[attr-defined]
    except (OSError, AttributeError):
        return SMALL + 1


def _carriers(vault: Vault, record_ids: set[bytes]) -> dict[bytes, dict[bytes, BatchView]]:
    """For each of these control records, the accepted batch carrying it in each compartment (one
    pass over the batches, however many manifests there are)."""
    out: dict[bytes, dict[bytes, BatchView]] = {}
    accepted = vault.log.accepted
    for v in vault.views.values():
        for rec in v.records:
            if rec is not None and rec.id in record_ids and v.id in accepted:
                out.setdefault(rec.id, {}).setdefault(v.header.compartment_id, v)
    return out


def _acknowledged(vault: Vault, m: ManifestInfo, carriers_by_record: dict[bytes, dict[bytes, BatchView]]) -> bool:
    """Every other active device has written a batch that saw a batch carrying ``m``: a control
    batch that saw the control compartment's carrier, or a batch of the compacted compartment
    that saw the carrier there (the COMPACTION record is written in both, so ordinary appends
    acknowledge a compaction of a data compartment).  Frontiers are per compartment, so each
    carrier is compared with batches of its own compartment."""
    r = vault.roster
    carriers = carriers_by_record.get(m.record_id, {})  # compartment -> the batch carrying m there
    if not carriers:
        return False
    writer = next(iter(carriers.values())).header.writer_id
    others = [p for p in r.devices() if p.writer_id not in r.revocations and p.writer_id != writer]
    for p in others:
        seen = False
        for c, carrier in carriers.items():
            chain = vault.log.chains.get((p.writer_id, c))
            if not chain:
                continue
            # frontiers never go backwards along a chain (readers reject that), so its top says it all
            top = vault.views[chain[vault.log.tops.get((p.writer_id, c)) or max(chain)]]
            if top.header.frontier.get(carrier.header.writer_id, 0) >= carrier.header.seq:
                seen = True
                break
        if not seen:
            return False
    return True


def prune(vault: Vault, *, prune_now: bool = False, now: float | None = None) -> tuple[int, int]:
    """Delete segments that signed COMPACTION records replaced, when safe.  (deleted, still pending)"""
    now = time.time() if now is None else now
    r = vault.roster
    others_exist = any(p.writer_id not in r.revocations and vault.actor is not None
                       and p.writer_id != vault.actor.writer_id for p in r.devices())
    deleted = pending = 0
    by_id = {_segment_id(n): n for n in vault._segment_batches}
    carriers = _carriers(vault, {m.record_id for m in r.manifests.values() if m.kind == Kind.COMPACTION}) \
        if others_exist else {}
    for m in r.manifests.values():
        if m.kind != Kind.COMPACTION:
            continue
        # the replacement must be here and readable before anything it replaces is deleted
        if not all(a in by_id and by_id[a] not in vault._unreadable for a in m.added):
            continue
        old = [by_id[s] for s in m.removed if s in by_id]
        if not old:
            continue
        if others_exist:
            safe = _acknowledged(vault, m, carriers)  # D9 (a): every other device has seen it
        else:
            safe = prune_now or now - m.ts >= GRACE_SECONDS  # D9 (b): one device, after a grace period
        if not safe:
            pending += len(old)
            continue
        for name in old:
            vault.shelf.delete(name)
            deleted += 1
    if deleted:
        vault._refresh()
    return deleted, pending

