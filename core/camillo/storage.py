"""Byte shelves: where a vault's files live (spec §4).

A shelf stores immutable, named byte strings and knows nothing about their meaning.  The folder
shelf is a live vault (a directory any sync service can carry); the pack shelf is a ``.vmem`` file
opened read-only.  Later stores (object stores) implement the same five calls.

Rules every shelf follows:

* Names match a strict pattern (below); anything else in the folder is ignored: dot-files and
  temp files, ``*.sync-conflict-*`` copies, iCloud ``*.icloud`` placeholders, editor droppings.
* A write creates a new file or finds identical bytes already there; it never overwrites.  The
  folder shelf writes a dot temp file in the target directory, fsyncs it, renames it into place and
  fsyncs the directory, so a crash leaves either nothing or the whole file.
* Deleting is only done by compaction, erasure and enrollment clean-up.
* Segments inside ``packs/*.pack`` are listed and read as if they were loose files.

A shelf is confined to the thread that uses the vault.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Iterator
from typing import Protocol

from .errors import DamagedFile, NotAVault, ReadOnlyVault, StorageError, UnsupportedVersion
from .names import NAME_PATTERNS, kind_of  # noqa: F401 - re-exported
from .packs import TYPE_SEGMENT, PackReader
from .primitives import random_bytes, sha256

DIRECTORIES = ("slots", "env", "segments", "packs", "enroll")


def segment_name(data: bytes) -> str:
    h = sha256(data).hex()
    return f"segments/{h[:2]}/{h}.seg"


def content_hash_of(name: str) -> bytes | None:
    """For content-addressed names (segments, envelopes, packs) the hash the bytes must have."""
    m = re.search(r"([0-9a-f]{64})\.(seg|env|pack)$", name)
    return bytes.fromhex(m.group(1)) if m else None


def hash_matches(name: str, data: bytes) -> bool | None:
    """For content-addressed names: do the bytes hash to the name?  None for other names."""
    expected = content_hash_of(name)
    if expected is None:
        return None
    return sha256(data) == expected


class Shelf(Protocol):
    location: str
    writable: bool

    def list(self) -> list[str]: ...
    def read(self, name: str) -> bytes: ...
    def write(self, name: str, data: bytes) -> bool: ...
    def delete(self, name: str) -> None: ...
    def exists(self, name: str) -> bool: ...


class FolderShelf:
    """A vault folder.  ``writable`` is False when the folder cannot be written."""

    def __init__(self, path: str, *, create: bool = False) -> None:
        self.location = os.path.abspath(path)
        if create:
            try:
                os.makedirs(self.location, exist_ok=True)
                if any(kind_of(n) for n in self._walk()):
                    raise StorageError(f"{self.location} already holds a vault; choose an empty folder")
                for d in DIRECTORIES:
                    os.makedirs(os.path.join(self.location, d), exist_ok=True)
            except OSError as exc:
                raise StorageError(f"cannot create the vault folder {self.location}: {exc.strerror}") from None
        elif not os.path.isdir(self.location):
            raise NotAVault(f"{self.location} is not a folder")
        self.writable = os.access(self.location, os.W_OK)
        self._packs: dict[str, PackReader] = {}
        self._packed: dict[str, str] = {}

    # -- listing

    def _walk(self) -> Iterator[str]:
        base = self.location
        try:
            top = os.listdir(base)
        except OSError as exc:
            raise StorageError(f"cannot list {base}: {exc.strerror}") from None
        for entry in top:
            if entry.startswith("."):
                continue
            full = os.path.join(base, entry)
            if entry == "VMEM":
                yield entry
            elif entry in DIRECTORIES and os.path.isdir(full):
                for dirpath, dirnames, filenames in os.walk(full):
                    dirnames[:] = [d for d in dirnames if not d.startswith(".")]
                    rel = os.path.relpath(dirpath, base)
                    for f in filenames:
                        if not f.startswith("."):
                            yield f"{rel}/{f}".replace(os.sep, "/")

    def list(self) -> list[str]:
        names = []
        packs = []
        for name in self._walk():
            kind = kind_of(name)
            if kind == "pack":
                packs.append(name)
            elif kind:
                names.append(name)
        loose = set(names)
        for pack in packs:
            for inner in self._pack_segments(pack):
                if inner not in loose:
                    loose.add(inner)
                    names.append(inner)
        return sorted(names)

    def _pack_segments(self, pack: str) -> list[str]:
        reader = self._packs.get(pack)
        if reader is None:
            try:
                reader = PackReader(os.path.join(self.location, pack))
            except (DamagedFile, NotAVault, UnsupportedVersion, OSError):
                return []  # not fully synced yet, damaged or from a newer Camillo: verify reports it
            self._packs[pack] = reader
        found = []
        for e in reader.entries:
            if e.type == TYPE_SEGMENT:
                self._packed[e.name] = pack
                found.append(e.name)
        return found

    # -- access

    def _path(self, name: str) -> str:
        if kind_of(name) is None:
            raise ValueError(f"not a vault file name: {name}")
        return os.path.join(self.location, *name.split("/"))

    def exists(self, name: str) -> bool:
        return os.path.exists(self._path(name)) or name in self._packed

    def read(self, name: str) -> bytes:
        path = self._path(name)
        try:
            with open(path, "rb") as fh:
                return fh.read()
        except FileNotFoundError:
            pack = self._packed.get(name)
            if pack is not None and pack in self._packs:
                return self._packs[pack].read(name)
            raise
        except OSError as exc:
            raise StorageError(f"cannot read {name}: {exc.strerror}", file=name) from None

    def write(self, name: str, data: bytes) -> bool:
        """Create ``name`` durably.  False if identical bytes were already there."""
        if not self.writable:
            raise ReadOnlyVault(f"the vault folder {self.location} is read-only; nothing was written")
        path = self._path(name)
        directory = os.path.dirname(path)
        if os.path.exists(path):
            try:
                with open(path, "rb") as fh:
                    if fh.read() == data:
                        return False
            except OSError:
                pass
            raise StorageError(f"{name} already exists with different content; refusing to overwrite", file=name)
        tmp = os.path.join(directory, f".tmp-{random_bytes(8).hex()}")
        try:
            os.makedirs(directory, exist_ok=True)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                os.fsync(fd)
            finally:
                os.close(fd)
            os.rename(tmp, path)
            _fsync_dir(directory)
        except OSError as exc:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            if exc.errno == errno.ENOSPC:
                raise StorageError(f"the disk is full; {name} was not written and the vault is unchanged", file=name) from None
            if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise ReadOnlyVault(f"cannot write to {self.location} ({exc.strerror}); the vault is unchanged") from None
            raise StorageError(f"cannot write {name}: {exc.strerror}", file=name) from None
        return True

    def delete(self, name: str) -> None:
        if not self.writable:
            raise ReadOnlyVault(f"the vault folder {self.location} is read-only")
        path = self._path(name)
        try:
            os.unlink(path)
            _fsync_dir(os.path.dirname(path))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageError(f"cannot delete {name}: {exc.strerror}", file=name) from None

    def close(self) -> None:
        for reader in self._packs.values():
            reader.close()
        self._packs.clear()


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class PackShelf:
    """A ``.vmem`` file opened read-only: every entry is readable under its folder name."""

    writable = False

    def __init__(self, path: str) -> None:
        self.location = os.path.abspath(path)
        self._reader = PackReader(self.location)

    def list(self) -> list[str]:
        return sorted(e.name for e in self._reader.entries)

    def exists(self, name: str) -> bool:
        return name in self._reader.by_name

    def read(self, name: str) -> bytes:
        try:
            return self._reader.read(name)
        except KeyError:
            raise FileNotFoundError(name) from None

    def write(self, name: str, data: bytes) -> bool:
        raise ReadOnlyVault(f"{os.path.basename(self.location)} is a .vmem file and opens read-only; unpack it to change it")

    def delete(self, name: str) -> None:
        self.write(name, b"")

    def close(self) -> None:
        self._reader.close()


def open_shelf(path: str) -> FolderShelf | PackShelf:
    if os.path.isdir(path):
        return FolderShelf(path)
    if os.path.isfile(path):
        return PackShelf(path)
    raise NotAVault(f"{path} does not exist; give a vault folder or a .vmem file")
