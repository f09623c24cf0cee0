"""Copies of one batch found in several segments: whose signatures and which bytes count (spec §9.3).

A batch's id is the hash of its header, which lists its records' ids, so two copies of one batch can
differ only in their signatures and in erased (``null``) entries.  Neither is covered by the id: anyone
who can seal a segment to the compartment (an agent with an append grant holds its public key; a reader
of it can also copy its batches, signatures and all) could plant a copy of another writer's batch with
broken signatures, or with its records ``null``, whose segment name sorts first.  A reader that kept the
first copy found would then reject the batch, or miss its records.  So a copy whose signatures differ from
the held one's is remembered (:func:`offer`) while the held copy is not known to verify, as is a copy
holding records the held copy lacks; once the roster knows the writer's key, the held copy takes the
signatures of the first copy whose signatures verify and the bytes of the entries no applied ERASE names
(:func:`resolve`): what a reader keeps then depends only on what verifies, never on the order names sort in.

A writer's key is bound to its writer id (the id is the hash of the key), so a key found anywhere (the
roster, or a certificate inside the batch itself, as a new device's first batch carries) judges a copy
soundly; whether the writer may write at all is still the roster's decision, made after the swap.

Confined to the thread that owns the vault (the reader's).
"""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping, Sequence
from typing import Protocol
from weakref import WeakKeyDictionary

import cbor2

from .. import encoding
from ..control import BatchView, O, Roster
from ..errors import VaultError
from ..records import Batch, Kind, decode_record, verify_batch_signature
from ..state import UNEXPLAINED, UNEXPLAINED_ROWS, State
from ..values import Problem
from .views import CachedView

Copies = dict[bytes, list[str]]  # batch id -> the segments holding its other copies (read again when judged)
Waiting = dict[bytes, tuple[bytes, list[str]]]  # batch id -> (writer, those segments)


class Reader(Protocol):
    """What these functions use of the session's reader (:class:`camillo.session.reader.Reader`)."""

    batches: MutableMapping[bytes, BatchView]
    copies: Copies
    copies_waiting: Waiting  # (copies of a writer whose key is not known yet: no computation forced)
    materialized: State
    segment_problems: dict[str, Problem]
    pending_batches: set[bytes]
    dirty: bool
    scanned_at: float  # (time.monotonic() of the refresh reading now)

    def batches_of_segment(self, name: str) -> list[Batch]: ...


def offer(reader: Reader, name: str, held: BatchView, batch: Batch) -> None:
    """Another copy of a batch already held, found in segment ``name``.  A copy whose signatures
    differ is reported as damage when neither copy has erased entries (§9.3).  It is remembered,
    for :func:`resolve`, while the held copy is not known to verify, and so is a copy holding
    records where the copy held in this read has ``null`` entries."""
    cached = isinstance(held, CachedView)
    fills = any(raw is not None for raw in batch.records) and (
        reader.materialized.staged_erased(batch.id) or (cached and batch.id in _lacking(reader)))
    if cached and (held.sig_ok or held.vouched) and not fills:
        return  # (verified here before: its stored copy is the one whose signatures count)
    if held.batch.sigs == batch.sigs and not fills:
        return
    if held.batch.sigs != batch.sigs and not cached and None not in batch.records and \
            not reader.materialized.staged_erased(batch.id):
        reader.segment_problems[f"{name}#dup"] = Problem(
            "damaged", name, f"batch {batch.id.hex()[:12]} appears with different contents in {held.segment}")
    if fills or not held.sig_ok:
        reader.copies.setdefault(batch.id, []).append(name)


_LACKING: WeakKeyDictionary[Reader, tuple[float, set[bytes]]] = WeakKeyDictionary()


def _lacking(reader: Reader) -> set[bytes]:
    """The batches whose stored copy lacks records no erasure names, as the state last judged them:
    read once per refresh (a refresh after another device's compaction meets a copy of every batch),
    from the index of the rows that do not count."""
    held = _LACKING.get(reader)
    if held is None or held[0] != reader.scanned_at:
        rows = reader.materialized.db.execute(UNEXPLAINED_ROWS, (UNEXPLAINED,))
        held = _LACKING[reader] = (reader.scanned_at, {bid for _rid, bid in rows})
    return held[1]


def resolve(reader: Reader, roster: Roster) -> bool:
    """Judge the copies :func:`offer` remembered, once ``roster`` knows the writers' keys (or a
    certificate in the batch gives its writer's).  A held copy whose signatures do not verify is
    replaced by the first copy whose signatures do; and an entry that is ``null`` in the copy kept,
    and that no applied ERASE names, takes the record's bytes from a copy that holds them (they are
    checked against the record id the signed header lists, §8.5; not reported: a copy whose ERASE has
    not arrived yet looks the same).  True when a batch changed: the roster is to be computed again.
    Copies of a writer whose key is not known yet wait (:func:`waiting_writers`), forcing nothing: a
    planted copy of a made-up writer's batch would otherwise make every refresh compute everything."""
    todo = {bid: list(found) for bid, (_w, found) in reader.copies_waiting.items()}
    for bid, found in reader.copies.items():
        todo.setdefault(bid, []).extend(found)
    changed, waiting = False, Waiting()
    erased = roster.erased_records()
    for bid, found in todo.items():
        view = reader.batches.get(bid)
        if view is None:
            continue
        keys = _keys(roster, view)
        if not keys:
            waiting[bid] = (view.writer_id, found)
            continue
        held = _read(reader, view.segment, bid)
        if held is None:
            continue  # (its segment went away meanwhile: what was read stands)
        others = [(name, b) for name in found if (b := _read(reader, name, bid)) is not None]
        segment, sigs = view.segment, view.batch.sigs
        if not (view.sig_ok or any(verify_batch_signature(view.batch, k) for k in keys)):
            good = next(((n, b) for n, b in others if any(verify_batch_signature(b, k) for k in keys)), None)
            if good is None:
                continue  # (no copy verifies: the batch is rejected, as its first copy would be)
            segment, sigs = good[0], good[1].sigs
        rids = view.header.records
        # (the held copy's segment read again: its bytes are checked too, a file may change under its name)
        base = tuple(checked(raw, rid) for rid, raw in zip(rids, held.records))
        records = base
        for _name, b in others:
            records = merge_entries(rids, records, b.records, erased)
        if segment == view.segment and records == base:
            continue
        _take(reader, view, segment, sigs, base, records)
        changed = True
    reader.copies, reader.copies_waiting = Copies(), waiting
    return changed


def waiting_writers(reader: Reader) -> set[bytes]:
    """The writers whose key the copies waiting for it need (a roster that changes them judges them)."""
    return {writer for writer, _found in reader.copies_waiting.values()}


def merge_entries(rids: Sequence[bytes], first: Sequence[bytes | None], other: Sequence[bytes | None],
                  erased: set[bytes] | frozenset[bytes]) -> tuple[bytes | None, ...]:
    """The entries of two copies of one batch: ``first``'s, and where it has ``null``, the bytes
    ``other`` holds (checked against the record id, :func:`checked`); ``null`` where either copy has
    it and an erasure names the record (``erased``).  A planted copy with entries ``null`` thus
    removes nothing, here or in what an erasure or a compaction writes anew."""
    return tuple(None if (x is None or y is None) and rid in erased else x if x is not None else checked(y, rid)
                 for rid, x, y in zip(rids, first, other, strict=True))


def _read(reader: Reader, name: str, bid: bytes) -> Batch | None:
    """The copy of batch ``bid`` in segment ``name``, read again (None: gone, or not there)."""
    try:
        return next((b for b in reader.batches_of_segment(name) if b.id == bid), None)
    except (FileNotFoundError, KeyError, VaultError):
        return None


def checked(raw: bytes | None, rid: bytes) -> bytes | None:
    """A record's bytes from another copy, if they are the record the header lists (its id)."""
    if raw is None:
        return None
    try:
        decode_record(raw, expected_id=rid)
    except VaultError:
        return None
    return raw


def _keys(roster: Roster, view: BatchView) -> list[bytes]:
    """Public keys that may be the writer's: the roster's, and those of the owner entries in the
    batch's own certificates or genesis (a key that is not the writer's fails the writer-id check
    of :func:`~camillo.records.verify_batch_signature`)."""
    keys = [k] if (k := roster.signer_public(view.writer_id)) else []
    for rec in view.records:
        if rec is None or rec.kind not in (Kind.DEVICE_CERT, Kind.GENESIS):
            continue
        body = rec.body if isinstance(rec.body, dict) else {}
        entries = [body.get(0)] if rec.kind == Kind.DEVICE_CERT else body.get(3)
        for entry in entries if isinstance(entries, list) else []:
            if isinstance(entry, dict) and isinstance(pk := entry.get(O.SIG_PK), bytes):
                keys.append(pk)
    return keys


def _take(reader: Reader, view: BatchView, segment: str, sigs: tuple[tuple[int, bytes], ...],
          held: tuple[bytes | None, ...], records: tuple[bytes | None, ...]) -> None:
    """The held view takes another copy's signatures and segment, or records the copy held lacked:
    in memory, in the stored row, and in the state (its rows staged again)."""
    old, short = view.segment, view.id.hex()[:12]
    db = reader.materialized.cache_db
    row = db.execute("SELECT batch FROM cache_batches WHERE id = ?", (view.id,)).fetchone()
    header_bytes = cbor2.loads(row[0])[0]
    view.batch = Batch(view.id, b"", view.header, sigs, view.batch.records)
    view.segment, view.sig_ok, view.signed = segment, True, False
    if segment != old:
        said = reader.segment_problems.get(f"{segment}#dup")
        if said is not None and short in said.message:
            del reader.segment_problems[f"{segment}#dup"]
        reader.segment_problems[f"{old}#dup"] = Problem(
            "damaged", old, f"batch {short} in {old} has signatures that do not verify; its copy in {segment} is used")
    if records != held:
        decoded = [None if raw is None else decode_record(raw, expected_id=rid)
                   for rid, raw in zip(view.header.records, records)]
        controls = [r if r is not None and r.is_control else None for r in decoded]
        view.records, view.has_control = controls, any(controls)
        state = reader.materialized
        state.flush()
        state.forget_batches([view.id])
        state.stage(view, decoded)
        db.execute("UPDATE cache_batches SET controls = ?, control = ? WHERE id = ?",
                   (encoding.encode([r.raw if r is not None else None for r in controls]),
                    1 if view.has_control else 0, view.id))
    db.execute("UPDATE cache_batches SET segment = ?, batch = ? WHERE id = ?",
               (segment, encoding.encode([header_bytes, [list(s) for s in sigs]]), view.id))
    reader.pending_batches.add(view.id)  # (its records are judged again, in a refresh too)
    reader.dirty = True


def kept_signatures(views: Mapping[bytes, BatchView], first: Batch, other: Batch) -> tuple[tuple[int, bytes], ...]:
    """Of two copies of one batch read again from their segments (an erasure or a compaction writes
    the batch anew), the signatures of the copy this reader kept: the one that verified (§9.3), not a
    planted copy's that happened to be read first."""
    if first.sigs == other.sigs:
        return first.sigs
    view = views.get(first.id)
    return other.sigs if view is not None and view.batch.sigs == other.sigs else first.sigs
