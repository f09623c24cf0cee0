"""This installation's own files about a vault, kept outside the vault folder (spec §18).

Where: ``$CAMILLO_HOME`` when set (tests and several simulated devices on one machine use it),
otherwise the platform's user data directory (state) and user cache directory (cache), from
platformdirs.  Per vault, under ``vaults/<vault_id hex>/``:

* ``installation.cbor``: which writer this installation is (its writer id, where its key lives,
  its slot).  No secrets, no vault content.
* ``device-key.bin``: only when no OS keychain can be used: the device seeds, sealed under a key
  derived from the vault master secret of each generation the device has seen.
* ``pending.cbor`` (with ``operation.lock``): while an operation writes vault files ahead of the
  record that announces them (an erasure, a re-certification, a key rotation), their names and that
  record's id, so that files a crash left unannounced are deleted on the next open.
* ``actors/<writer_id hex>/state.bin`` and ``state-1.bin``: the durable device state (own ``seq``
  counters, the frontier and epochs it remembers, rollback evidence), sealed under the actor's own
  seed, in two copies written by turns (:mod:`camillo.devicestate`).
* ``actors/<writer_id hex>/state.db`` (cache directory, with its ``-wal`` and ``-shm`` files and
  ``state.lock``): the disposable materialised state, a page-encrypted SQLite database opened in
  place (:mod:`camillo.cache`).

Every file is written to a temp file, fsynced and renamed (the device state's copies are
overwritten in place by turns instead).  Every sealed file is
``"VMEMLOCL" ‖ version ‖ salt(24) ‖ commitment(32) ‖ XChaCha20-Poly1305`` with the file's purpose and
the vault id bound into the key derivation, so a file copied from another vault or purpose fails.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import platformdirs

from . import encoding
from .errors import DamagedFile, StorageError
from .primitives import CryptoFailure, random_bytes
from .sealed import open_sealed, seal
from .storage import make_dirs_durable

LOCAL_MAGIC = b"VMEMLOCL\x01"


def _roots(home: str | None = None) -> tuple[str, str]:
    home = home or os.environ.get("CAMILLO_HOME")
    if home:
        return os.path.join(home, "data"), os.path.join(home, "cache")
    return platformdirs.user_data_dir("camillo", "camillo"), platformdirs.user_cache_dir("camillo", "camillo")


def data_root(home: str | None = None) -> str:
    return _roots(home)[0]


def cache_root(home: str | None = None) -> str:
    return _roots(home)[1]


def atomic_write(path: str, data: bytes | Iterable[bytes], mode: int = 0o600) -> None:
    """Replace ``path`` durably with ``data`` (bytes, or pieces written one after the other)."""
    directory = os.path.dirname(path)
    try:
        make_dirs_durable(directory, mode=0o700)
        tmp = os.path.join(directory, f".tmp-{random_bytes(8).hex()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            try:
                for piece in ((data,) if isinstance(data, (bytes, bytearray, memoryview)) else data):
                    view = memoryview(piece)
                    while view:
                        view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException:  # the disk filled up, or producing the pieces failed: leave nothing behind
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError as exc:
        raise write_error(path, exc) from None


def write_error(path: str, exc: OSError) -> StorageError:
    """What to tell the user when writing the local state file ``path`` failed with ``exc``."""
    if exc.errno == errno.ENOSPC:
        return StorageError(f"the disk holding this installation's local state is full; {path} was not written: "
                            "free some space and try again")
    if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return StorageError(f"cannot write this installation's local state {path} ({exc.strerror}): make it "
                            "writable (or set CAMILLO_HOME elsewhere) and try again")
    return StorageError(f"cannot write local state {path}: {exc.strerror}")


def seal_local(key: bytes, purpose: str, vault_id: bytes, payload: bytes) -> bytes:
    total = len(LOCAL_MAGIC) + 24 + 32 + 16 + 4 + len(payload)
    return seal(key, f"vmem/v1/local-file/{purpose}", vault_id, LOCAL_MAGIC, payload, total)


def open_local(key: bytes, purpose: str, vault_id: bytes, data: bytes, path: str) -> bytes:
    if not data.startswith(LOCAL_MAGIC):
        raise DamagedFile(f"{path} is not a Camillo local-state file", file=path)
    try:
        return open_sealed(key, f"vmem/v1/local-file/{purpose}", vault_id, data, len(LOCAL_MAGIC))
    except CryptoFailure:
        raise DamagedFile(f"{path} does not belong to this vault or is damaged", file=path) from None


def read_file(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"cannot read local state {path}: {exc.strerror}") from None


@dataclass
class Installation:
    """Who this installation is in one vault.  ``replaces``: the key this one retires, until the
    new key's certificate is in the vault (a re-certification or key rotation that a crash
    interrupted is retried with the same old key, so no key nobody holds stays active)."""

    writer_id: bytes
    keystore: str  # "keychain" or "local"
    created: int
    replaces: bytes | None = None

    def to_map(self) -> dict[str, Any]:
        m = {"created": self.created, "keystore": self.keystore, "writer": self.writer_id}
        if self.replaces is not None:
            m["replaces"] = self.replaces
        return m


class VaultLocal:
    """Paths and helpers for this installation's files about one vault."""

    def __init__(self, vault_id: bytes, home: str | None = None) -> None:
        self.vault_id = vault_id
        self.home = home
        self.dir = os.path.join(data_root(home), "vaults", vault_id.hex())
        self.cache_dir = os.path.join(cache_root(home), "vaults", vault_id.hex())
        self._generation: tuple[tuple[int, int, int], int] | None = None  # (the file's stat, its number)

    # -- installation identity

    @property
    def installation_path(self) -> str:
        return os.path.join(self.dir, "installation.cbor")

    def load_installation(self) -> Installation | None:
        data = read_file(self.installation_path)
        if data is None:
            return None
        try:
            m = encoding.decode(data, "installation.cbor")
            replaces = m.get("replaces")
            if replaces is not None and not isinstance(replaces, bytes):
                raise TypeError("replaces")
            return Installation(m["writer"], m["keystore"], m["created"], replaces)
        except Exception:
            raise DamagedFile(
                f"{self.installation_path} is damaged; move it away and open the vault with your passphrase",
                file=self.installation_path,
            ) from None

    def save_installation(self, inst: Installation) -> None:
        atomic_write(self.installation_path, encoding.encode(inst.to_map()))

    def forget_installation(self) -> None:
        for path in (self.installation_path, self.device_key_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    # -- the files of an operation not yet announced (spec §12.4, §16.4)

    @property
    def pending_path(self) -> str:
        return os.path.join(self.dir, "pending.cbor")

    @contextlib.contextmanager
    def operation_lock(self, *, wait: bool = True) -> Iterator[bool]:
        """Exclusive across processes of this installation while an operation writes files ahead of
        the record that announces them; yields False (without waiting) when ``wait`` is False and
        another process holds it.  The lock goes with the process, so a crashed one holds nothing."""
        path = os.path.join(self.dir, "operation.lock")
        try:
            make_dirs_durable(self.dir, mode=0o700)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise StorageError(f"cannot write this installation's local state {path} ({exc.strerror}): make it "
                               "writable (or set CAMILLO_HOME elsewhere) and try again") from None
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def load_pending(self) -> tuple[bytes, list[str]] | None:
        """(id of the record that announces them, vault file names) of an unfinished operation."""
        data = read_file(self.pending_path)
        if data is None:
            return None
        try:
            m = encoding.decode(data, "pending.cbor")
            announce, files = m["announce"], m["files"]
            if not isinstance(announce, bytes) or not all(isinstance(f, str) for f in files):
                raise TypeError("pending.cbor")
            return announce, list(files)
        except Exception:
            return None  # damaged: nothing to finish (the files, if any, stay unannounced)

    def save_pending(self, announce: bytes, files: list[str]) -> None:
        atomic_write(self.pending_path, encoding.encode({"announce": announce, "files": list(files)}))

    def clear_pending(self) -> None:
        try:
            os.unlink(self.pending_path)
        except FileNotFoundError:
            pass

    # -- the newest master-secret generation this installation has seen (not secret: a number)

    @property
    def generation_path(self) -> str:
        return os.path.join(self.dir, "generation.cbor")

    def load_generation(self) -> int:
        """0 when none was recorded (or the file is damaged: nothing to compare with).  Read again
        only when its stat moved (an append asks after each write; a save replaces the file)."""
        try:
            st = os.stat(self.generation_path)
            stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        if stamp is not None and self._generation is not None and self._generation[0] == stamp:
            return self._generation[1]
        data = read_file(self.generation_path)
        try:
            g = encoding.decode(data, "generation.cbor") if data is not None else 0
        except Exception:
            return 0
        g = g if isinstance(g, int) and not isinstance(g, bool) and g >= 0 else 0
        self._generation = (stamp, g) if stamp is not None else None
        return g

    def save_generation(self, generation: int) -> None:
        with contextlib.suppress(StorageError):  # a read-only home: the device state still remembers
            atomic_write(self.generation_path, encoding.encode(generation))

    # -- device seeds when no keychain is usable

    @property
    def device_key_path(self) -> str:
        return os.path.join(self.dir, "device-key.bin")

    def actor_dir(self, writer_id: bytes) -> str:
        return os.path.join(self.dir, "actors", writer_id.hex())

    def state_path(self, writer_id: bytes) -> str:
        return os.path.join(self.actor_dir(writer_id), "state.bin")

    def cache_path(self, writer_id: bytes) -> str:
        return os.path.join(self.cache_dir, "actors", writer_id.hex(), "state.db")

    def holds_a_state(self) -> bool:
        """Whether some actor of this installation keeps a local state database of the vault (an
        open will likely resume from it; the actor is known only once a credential opened a slot)."""
        try:
            actors = os.listdir(os.path.join(self.cache_dir, "actors"))
        except OSError:
            return False
        return any(os.path.exists(os.path.join(self.cache_dir, "actors", a, "state.db")) for a in actors)
