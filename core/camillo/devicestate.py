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
  seals its batches again under the current epoch, spec §16.10).

The file is sealed under a key derived from the actor's own signing seed, and writers hold an
exclusive lock on ``write.lock`` beside it while they allocate a ``seq``, so two processes of one
installation can never write the same number.

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
from .errors import DamagedFile
from .keys import local_key
from .localstate import atomic_write, open_local, read_file, seal_local


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

    def to_map(self) -> dict[str, Any]:
        return {
            "counters": {c: [s, b] for c, (s, b) in self.counters.items()},
            "epochs": dict(self.epochs),
            "extra": self.extra,
            "first_missing": dict(self.first_missing),
            "generation": self.generation,
            "kept": {c: dict(m) for c, m in self.kept.items()},
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
        )


class DeviceStateStore:
    def __init__(self, path: str, secret: bytes, vault_id: bytes) -> None:
        self.path = path
        self.vault_id = vault_id
        self._key = local_key(secret, "state", vault_id)
        # the file's bytes as this store last read or wrote them, and their checked plaintext: an
        # append loads the state first (another process may have written), and it is nearly always
        # unchanged
        self._known: tuple[bytes, bytes] | None = None

    def load(self) -> DeviceState | None:
        data = read_file(self.path)
        if data is None:
            return None
        known = self._known
        if known is not None and known[0] == data:  # the same bytes: opened and checked before
            return DeviceState.from_map(encoding.decode_checked(known[1]))
        raw = open_local(self._key, "state", self.vault_id, data, self.path)
        try:
            state = DeviceState.from_map(encoding.decode(raw, "device state"))
        except Exception:
            raise DamagedFile(f"the device state {self.path} is damaged", file=self.path) from None
        self._known = (data, raw)
        return state

    def save(self, state: DeviceState) -> None:
        raw = encoding.encode(state.to_map())
        data = seal_local(self._key, "state", self.vault_id, raw)
        self._known = None
        atomic_write(self.path, data)
        self._known = (data, raw)

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive across processes of this installation (POSIX advisory lock)."""
        os.makedirs(os.path.dirname(self.path), mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(os.path.dirname(self.path), "write.lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
