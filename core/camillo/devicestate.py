"""The durable, encrypted state one actor (a device or an agent grant) keeps about one vault.

It holds what must survive restarts and must never come from the host:

* ``counters``: for each compartment, the actor's last ``seq`` and batch id.  It is written and
  fsynced *before* the segment carrying that batch, so a crash can skip a number but never reuse
  one (which would be a fork);
* ``remembered``: per compartment and writer, the highest ``seq`` and batch id this actor has seen,
  plus the epochs and the master-secret generation; on the next open anything remembered that has
  vanished without a signed manifest is a rollback alert (spec §17.5);
* ``first_missing``: when each missing batch was first noticed, so sync lag shows as "syncing"
  for ten minutes before it becomes "missing";
* ``kept``: the secrets of the epochs this writer sealed its own batches to, until every other
  device has read them (another device's erasure may destroy such an epoch first; the writer then
  seals its batches again under the current epoch, spec §16.10); ``kept_segments``: the keys of the
  segments it sealed to an epoch whose secret it did not hold, for the same purpose.

It is sealed under a key derived from the actor's own signing seed, and every save holds an
exclusive lock on ``write.lock`` beside it (writers hold it while they allocate a ``seq``), so two
processes of one installation can never write the same number.

It lives in two files, ``state.bin`` and ``state-1.bin``, written in place by turns (as a database
keeps two copies of its header): each save overwrites the older one and fsyncs it, and the copy that
opens with the highest write count (``"writes"`` in the sealed map) is the state.  A crash in the
middle of a save leaves that copy failing its authentication, and the other one, the previous save,
stands, as a temp file never renamed would have left it.  Writing in place spares each save a new
file, a rename over the old one and a directory fsync (0.9-2.7 ms per append at 10k and 100k, with
fsync or without, on these machines, docs/benchmarks.md).  A state written by a version that kept
one file is read as write count 0.  A save that forgets a kept secret (an epoch an erasure
destroyed) the other copy still holds writes both copies.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from . import encoding
from .errors import DamagedFile, StorageError
from .keys import local_key
from .localstate import open_local, read_file, seal_local, write_error
from .storage import fsync_dir, make_dirs_durable


@dataclass
class DeviceState:
    counters: dict[bytes, tuple[int, bytes]] = field(default_factory=dict)
    remembered: dict[bytes, dict[bytes, tuple[int, bytes]]] = field(default_factory=dict)
    epochs: dict[bytes, bytes] = field(default_factory=dict)
    generation: int = 0
    first_missing: dict[bytes, int] = field(default_factory=dict)
    manifests: list[bytes] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    # compartment -> epoch -> secret: the epochs this writer sealed batches to, kept until every other
    # device has read those batches, so that if another device's erasure destroys such an epoch
    # meanwhile, this writer can still open its own batches and seal them again (spec §16.10)
    kept: dict[bytes, dict[bytes, bytes]] = field(default_factory=dict, repr=False)
    # segment name -> its segment key: the segments this writer sealed to an epoch whose secret it did
    # not hold (another device's key change not all here yet), kept until it holds that secret or has
    # sealed their batches again after an erasure destroyed the epoch (spec §16.10 rule 2)
    kept_segments: dict[str, bytes] = field(default_factory=dict, repr=False)

    def to_map(self) -> dict[str, Any]:
        return {
            "counters": {c: [s, b] for c, (s, b) in self.counters.items()},
            "epochs": dict(self.epochs),
            "extra": self.extra,
            "first_missing": dict(self.first_missing),
            "generation": self.generation,
            "kept": {c: dict(m) for c, m in self.kept.items()},
            "kept_segments": dict(self.kept_segments),
            "manifests": list(self.manifests),
            "remembered": {c: {w: [s, b] for w, (s, b) in m.items()} for c, m in self.remembered.items()},
        }

    @classmethod
    def from_map(cls, m: dict[str, Any]) -> DeviceState:
        return cls(
            counters={c: (v[0], v[1]) for c, v in m.get("counters", {}).items()},
            remembered={c: {w: (v[0], v[1]) for w, v in mm.items()} for c, mm in m.get("remembered", {}).items()},
            epochs=dict(m.get("epochs", {})),
            generation=m.get("generation", 0),
            first_missing=dict(m.get("first_missing", {})),
            manifests=list(m.get("manifests", [])),
            extra=dict(m.get("extra", {})),
            kept={c: dict(mm) for c, mm in m.get("kept", {}).items()},
            kept_segments=dict(m.get("kept_segments", {})),
        )


# The second copy's name beside the first (``state.bin``): see the module's docstring.
SECOND_COPY = "state-1.bin"
WRITES = "writes"  # the sealed map's write count (beside DeviceState's own keys)


class DeviceStateStore:
    def __init__(self, path: str, secret: bytes, vault_id: bytes) -> None:
        self.path = path
        self.paths = (path, os.path.join(os.path.dirname(path), SECOND_COPY))
        self.vault_id = vault_id
        self._key = local_key(secret, "state", vault_id)
        # each copy's bytes as this store last read or wrote them, with their checked plaintext, write
        # count and the kept secrets it holds: an append loads the state first (another process may
        # have written), and it is nearly always unchanged
        self._known: dict[str, tuple[bytes, bytes, int, frozenset[bytes]]] = {}
        self._writes = -1  # the highest write count on disk, as last read or written (-1: not read)
        self._held = 0  # how deep this store holds the lock (a save outside it takes it itself)

    def _open(self, path: str, data: bytes) -> tuple[bytes, int]:
        known = self._known.get(path)
        if known is not None and known[0] == data:  # the same bytes: opened and checked before
            return known[1], known[2]
        raw = open_local(self._key, "state", self.vault_id, data, path)
        try:
            m = encoding.decode(raw, "device state")
            state = DeviceState.from_map(m)  # (its shape checked once; a load makes its own copy)
            writes = m.get(WRITES, 0)
            if type(writes) is not int or writes < 0:
                raise ValueError(writes)
            secrets = _secrets(state)
        except Exception:
            raise DamagedFile(f"the device state {path} is damaged", file=path) from None
        self._known[path] = (data, raw, writes, secrets)
        return raw, writes

    def load(self) -> DeviceState | None:
        """The state of the newest copy that opens; None when there is none.  A copy that fails is
        a save a crash interrupted when the other copy opens, and damage when neither does."""
        best: tuple[int, bytes] | None = None
        failure: DamagedFile | None = None
        for path in self.paths:
            data = read_file(path)
            if not data:  # (absent, or created by a first save that a crash stopped before it wrote a byte)
                continue
            try:
                raw, writes = self._open(path, data)
            except DamagedFile as exc:
                failure = failure or exc
                continue
            if best is None or writes > best[0]:
                best = (writes, raw)
        if best is None:
            if failure is not None and not self._held:
                # (a reader without the lock may have read both copies in the middle of two saves)
                with self.locked():
                    return self.load()
            if failure is not None:
                raise failure
            self._writes = -1
            return None
        self._writes = best[0]
        return DeviceState.from_map(encoding.decode_checked(best[1]))

    def save(self, state: DeviceState) -> None:
        """Overwrite the older copy with ``state`` (under the lock; taken here when not held)."""
        if not self._held:
            with self.locked():
                self.save(state)
            return
        if self._writes < 0:
            self.load_writes()
        writes = self._writes + 1
        path = self.paths[writes % 2]
        m = state.to_map()
        m[WRITES] = writes
        raw = encoding.encode_own(m)
        data = seal_local(self._key, "state", self.vault_id, raw)
        self._known.pop(path, None)
        _overwrite(path, data)
        kept = _secrets(state)
        self._known[path] = (data, raw, writes, kept)
        self._writes = writes
        other = self._known.get(self.paths[(writes + 1) % 2])
        if other is not None and not other[3] <= kept:
            # the other copy still holds a secret this state forgot (a destroyed epoch's): it is
            # overwritten too, so that forgetting a secret leaves it in neither copy
            self.save(state)

    def load_writes(self) -> None:
        """Read the write count on disk (a save that follows no load under this hold of the lock)."""
        try:
            self.load()
        except DamagedFile:
            self._writes = -1  # neither copy opens: the count starts again (the damaged copies never win)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive across processes of this installation (POSIX advisory lock); re-entrant within
        this store.  A load under it reads what the last save wrote."""
        if self._held:
            self._held += 1
            try:
                yield
            finally:
                self._held -= 1
            return
        try:
            make_dirs_durable(os.path.dirname(self.path), mode=0o700)  # (the copies' entries need it durable)
        except OSError as exc:
            raise StorageError(f"cannot make the directory of local state {self.path}: {exc.strerror}") from None
        fd = os.open(os.path.join(os.path.dirname(self.path), "write.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._held = 1
            self._writes = -1  # another process may have saved since
            yield
        finally:
            self._held = 0
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _secrets(state: DeviceState) -> frozenset[bytes]:
    return frozenset([*(secret for per in state.kept.values() for secret in per.values()),
                      *state.kept_segments.values()])


def _overwrite(path: str, data: bytes) -> None:
    """Write ``data`` over the file at ``path`` in place and fsync it (a new file: its directory too).
    Called under :meth:`DeviceStateStore.locked`, which made the directory durable."""
    directory = os.path.dirname(path)
    try:
        try:
            fd = os.open(path, os.O_WRONLY)
            new = False
        except FileNotFoundError:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            new = True
        try:
            try:
                view = memoryview(data)
                at = 0
                while at < len(data):
                    at += os.pwrite(fd, view[at:], at)
                os.ftruncate(fd, len(data))
                os.fsync(fd)
            finally:
                os.close(fd)
        except BaseException:
            if new:  # (a copy that was there stays, failing its check: the other one stands)
                with contextlib.suppress(OSError):
                    os.unlink(path)
            raise
        if new:
            fsync_dir(directory)
    except OSError as exc:
        raise write_error(path, exc) from None
