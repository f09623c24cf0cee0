"""Reading segments: one (:func:`open_segment`: read, match its name, decrypt, decode), and many at once
(a cold open, a merge, a re-open after many new batches: :func:`read_segments`), decoded and their
records checked in a process of their own (:mod:`camillo.recordcheck`) while this one decrypts the
next segments and stages the batches already checked; while the child is the slower half, this
process decodes the segments it sends next itself and the child checks only their records.

The segments are taken in the order given and each one's batches are added in that order whether
the child read them or not (a segment the child refused is decoded here, :meth:`Reader.add_segment`
decodes in this process a batch the child did not pass, and every batch when no child runs), so
what is read, and every problem found, is the same either way.  A child is started for a read of at least :data:`START_SEGMENTS` segments or
:data:`START_BYTES` bytes of them, on a machine with a second core; until it is ready the segments
are checked here.  A cold load keeps the views of the plain batches it adds lean as it goes
(:func:`~camillo.session.views.lean_views`, every :data:`LEAN_EVERY` batches).  A function of the
session's reader, which calls it.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable, MutableMapping, Sequence
from typing import Protocol

import cbor2

from .. import cache as cache_mod
from .. import recordcheck, segments
from ..cache import Cache, DatabaseError, is_scratch
from ..control import BatchView
from ..errors import StorageError, VaultError
from ..packshelf import PackShelf
from ..records import Batch, checked_batch, shared
from ..rowfields import Fields
from ..state import State
from ..storage import FolderShelf, hash_matches
from ..values import Problem
from .keyring import EpochRef, KeyRing
from .resume import collector_paused
from .views import lean_views

# A child repays its start (about 0.1 s before it is ready, and its end) when what is left to check
# once it is ready takes longer than that here: a read of many segments (each also costs a file read
# and a decryption here), or of about 20,000 records.  At 10,000 records in 6 segments a child started
# after the first one was never ready in time and cost the open 40 ms (about a tenth).
START_SEGMENTS = 64
START_BYTES = 6 << 20
FORCE: bool | None = None  # tests: True starts a child for every read and waits for it, False never starts one


class Reader(Protocol):
    """What these functions use of the session's reader (:class:`camillo.session.reader.Reader`)."""

    shelf: FolderShelf | PackShelf
    materialized: State
    store: Cache | None
    scratch_root: str | None  # where a large read without local state goes (None: memory)
    vault_id: bytes
    keyring: KeyRing
    progress: Callable[[int, int], None] | None
    decryptions: int
    checked_apart: int
    segment_problems: dict[str, Problem]
    incomplete: set[str]
    unreadable: dict[str, EpochRef]
    segment_batches: MutableMapping[str, list[bytes]]
    batches: MutableMapping[bytes, BatchView]

    def add_segment(self, name: str, compartment_id: bytes, epoch_id: bytes, batches: list[Batch],
                    checked: Sequence[bool] | None = None,
                    fields: Sequence[list[Fields] | None] | None = None) -> list[bytes]: ...


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


# (name, compartment, epoch, its payload or the batches decoded here, ticket)
Held = tuple[str, bytes, bytes, "bytes | list[Batch]", recordcheck.Ticket]


def state_for(reader: Reader, todo: Sequence[str]) -> State:
    """The state a read of the segments ``todo`` goes into.  Without local state (``cache=False``,
    read-only, a second process, a device not yet registered) it lives in memory; a first read of
    :data:`~camillo.cache.SCRATCH_SEGMENT_BYTES` or more of segments goes to a scratch database on disk
    instead (:func:`~camillo.cache.scratch_database`: a cold open of a million records held 2.1 GB in
    memory), the empty one in memory closed (what it held: the memos of the signatures and
    envelopes just read, which are read again if asked).  A read of that much into an empty state, or
    of many segments at once, widens its page cache until the next commit (the rows of a merge go to
    random pages of the index of ids; a cold load builds that index after its rows, State.loading, and
    narrows it again, but in a state of an earlier revision: at 100,000 records, 9.9 -> 5.6 s on disk)."""
    state = reader.materialized
    large = bool(todo) and state.is_empty() and _at_least(reader.shelf, todo, cache_mod.SCRATCH_SEGMENT_BYTES)
    if large and reader.store is None and reader.scratch_root is not None and not is_scratch(state.cache_db):
        try:
            db = cache_mod.scratch_database(reader.scratch_root)
        except (OSError, DatabaseError):
            pass  # (an installation whose cache cannot be written reads in memory)
        else:
            state.close()
            state = reader.materialized = State(db)
    if large or len(todo) >= cache_mod.WIDE_SEGMENTS:
        state.widen_page_cache()
    return state


def _at_least(shelf: FolderShelf | PackShelf, names: Sequence[str], limit: int) -> bool:
    total = 0
    for name in names:
        total += shelf.size(name) or 0
        if total >= limit:
            return True
    return False


LEAN_EVERY = 256  # batches added between two passes of lean_views over those added since


def read_segments(reader: Reader, names: Sequence[str]) -> list[bytes]:
    """Read ``names`` in order; the ids of the batches added.  Python's cyclic garbage collector is
    paused meanwhile (:func:`~camillo.session.resume.collector_paused`): the read makes a view of
    every batch, which lives as long as the session, and the collector walked them again each time
    they had grown by a quarter (about 3.5 s of main-process time in a cold open of a million records,
    by ``perf``)."""
    with collector_paused():
        return _read_segments(reader, names)


def _read_segments(reader: Reader, names: Sequence[str]) -> list[bytes]:
    added: list[bytes] = []
    checker: recordcheck.RecordChecker | None = None
    held: deque[Held] = deque()
    last_report = 0.0
    total = len(names)
    # a cold load's views of plain batches are kept lean as it goes, from the rows it wrote (views.lean_views)
    lean, leaned = reader.materialized.cold_loading, 0
    state_db = lambda: reader.materialized.cache_db  # noqa: E731 - one for every view's StoredIds
    try:
        if (_cores() > 1 and (total >= START_SEGMENTS or _at_least(reader.shelf, names, START_BYTES))
                if FORCE is None else FORCE):
            checker = recordcheck.start()
            if FORCE and checker is not None:
                checker.wait_ready(30)
        for done, name in enumerate(names):
            if lean and len(added) - leaned >= LEAN_EVERY:
                lean_views(reader.batches, added[leaned:], state_db)
                leaned = len(added)
            if reader.progress is not None and (now := time.monotonic()) - last_report >= 0.05:
                last_report = now
                reader.progress(done, total)  # about 20 reports a second, whatever the segment sizes
            if checker is not None and checker.ready:
                opened = decrypt_segment(reader, name)
                if opened is None:
                    continue
                if checker.behind:  # (the child is the slower half: this segment is decoded here)
                    decoded = _decoded(reader, name, opened[2])
                    if decoded is not None:
                        held.append((name, opened[0], opened[1], decoded, checker.add(opened[2], decoded=True)))
                else:
                    held.append((name, *opened, checker.add(opened[2])))
                while held and checker.due(held[0][4]):
                    added += _take(reader, checker, held.popleft())
                continue
            while held:  # (the child died: what it held first, in order)
                added += _take(reader, checker, held.popleft())
            read = open_segment(reader, name)
            if read is not None:
                added += reader.add_segment(name, *read)
        while held:
            added += _take(reader, checker, held.popleft())
        if lean:
            lean_views(reader.batches, added[leaned:], state_db)
    finally:
        if checker is not None:
            checker.close()
    if reader.progress is not None and total:
        reader.progress(total, total)
    return added


def open_segment(reader: Reader, name: str) -> tuple[bytes, bytes, list[Batch]] | None:
    """Read, decrypt and decode a segment: (compartment, epoch, its batches), or None with its
    problem noted (or it set aside as unreadable until its epoch's key arrives)."""
    opened = decrypt_segment(reader, name)
    if opened is None:
        return None
    batches = _decoded(reader, name, opened[2])
    return None if batches is None else (opened[0], opened[1], batches)


def decrypt_segment(reader: Reader, name: str) -> tuple[bytes, bytes, bytes] | None:
    """Read and decrypt a segment: (compartment, epoch, its payload), or None as :func:`open_segment`."""
    try:
        data = reader.shelf.read(name)
    except FileNotFoundError:
        return None
    except StorageError as exc:
        reader.segment_problems[name] = Problem("unreadable", name, exc.message)
        return None
    if hash_matches(name, data) is False:
        reader.segment_problems[name] = Problem(
            "damaged", name, f"segment {name} does not match its name (still syncing, or damaged)")
        reader.incomplete.add(name)
        return None
    reader.incomplete.discard(name)
    try:
        header = segments.read_header(data, name)
    except VaultError as exc:
        reader.segment_problems[name] = Problem("damaged", name, exc.message)
        return None
    key = reader.keyring.epoch_keys.get((header.compartment_id, header.epoch_id))
    if key is None:
        reader.unreadable[name] = (header.compartment_id, header.epoch_id)
        reader.segment_batches.setdefault(name, [])
        return None
    reader.unreadable.pop(name, None)
    reader.segment_problems.pop(name, None)
    try:
        payload = segments.open_segment(data, name, reader.vault_id, key)
    except VaultError as exc:
        _damaged(reader, name, exc)
        return None
    reader.decryptions += 1
    return *shared((header.compartment_id, header.epoch_id)), payload  # (records.shared)


def _decoded(reader: Reader, name: str, payload: bytes) -> list[Batch] | None:
    """A decrypted segment's batches, decoded and checked here (None: its problem noted)."""
    try:
        return segments.decode_payload(payload, name)
    except VaultError as exc:
        _damaged(reader, name, exc)
        return None


def _damaged(reader: Reader, name: str, exc: VaultError) -> None:
    reader.segment_problems[name] = Problem("damaged", name, exc.message)
    reader.segment_batches[name] = []


def _take(reader: Reader, checker: recordcheck.RecordChecker | None, item: Held) -> list[bytes]:
    """Add a segment the child was sent: from what it read of it (its batches' ids and headers, unless
    they were decoded here, and its records' fields), else (the child refused it, or is gone) decoded
    here."""
    name, compartment_id, epoch_id, read, ticket = item
    try:
        answer = checker.verdicts(ticket) if checker is not None else None
    except recordcheck.CheckerGone:
        answer = None
    if isinstance(read, list):
        batches = read
    else:
        rebuilt = _from_child(read, answer) if answer is not None else None
        if rebuilt is None:
            answer, rebuilt = None, _decoded(reader, name, read)
            if rebuilt is None:
                return []
        batches = rebuilt
    if answer is None or len(answer) != len(batches):
        return reader.add_segment(name, compartment_id, epoch_id, batches)
    fields = [f for _, _, f in answer]
    reader.checked_apart += sum(f is not None for f in fields)
    return reader.add_segment(name, compartment_id, epoch_id, batches, [f is not None for f in fields], fields)


def _from_child(payload: bytes, answer: list[recordcheck.BatchAnswer]) -> list[Batch] | None:
    """A payload's batches rebuilt from a plain decoding of it and the ids and header fields the child
    sent when it decoded it strictly (None: they do not match; it is decoded here)."""
    try:
        items = cbor2.loads(payload)
        if len(items) != len(answer) or any(parts is None for _, parts, _ in answer):
            return None
        return [checked_batch(bid, entry, parts) for entry, (bid, parts, _) in zip(items, answer) if parts is not None]
    except (cbor2.CBORError, ValueError, TypeError):
        return None
