"""A ``.vmem`` file opened read-only as a shelf (:class:`PackShelf`: every entry readable under its folder
name), and :func:`open_shelf`, which opens a vault folder or such a file.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import os

from .errors import NotAVault, ReadOnlyVault
from .packs import PackReader
from .storage import FolderShelf


class PackShelf:
    """A ``.vmem`` file opened read-only: every entry is readable under its folder name."""

    writable = False

    def __init__(self, path: str) -> None:
        self.location = os.path.abspath(path)
        self._reader = PackReader(self.location)

    def list(self) -> list[str]:
        return sorted(e.name for e in self._reader.entries)

    def changes(self) -> tuple[set[str], set[str], set[str]]:
        """As :meth:`FolderShelf.changes`: a .vmem file never changes once open."""
        names = {e.name for e in self._reader.entries}
        first = not getattr(self, "_listed", False)
        self._listed = True
        return names, (set(names) if first else set()), set()

    def exists(self, name: str) -> bool:
        return name in self._reader.by_name

    def size(self, name: str) -> int | None:
        """The packed file's length in bytes (what a read of it weighs: whether it goes to a scratch
        database and is checked in a child process, :mod:`camillo.session.segread`), or None if the
        file holds no such entry.  Nothing is ever compacted in a ``.vmem`` file: it is read-only."""
        entry = self._reader.by_name.get(name)
        return None if entry is None else entry.length

    def read(self, name: str) -> bytes:
        try:
            return self._reader.read(name)
        except KeyError:
            raise FileNotFoundError(name) from None

    def write(self, name: str, data: bytes) -> bool:
        raise ReadOnlyVault(f"{os.path.basename(self.location)} is a .vmem file and opens read-only; unpack it to change it")

    def delete(self, name: str) -> None:
        self.write(name, b"")

    def after_write(self, *, all_due: bool = False) -> None:
        """Nothing: a ``.vmem`` file is never written."""

    def close(self) -> None:
        self._reader.close()


def open_shelf(path: str) -> FolderShelf | PackShelf:
    if os.path.isdir(path):
        return FolderShelf(path)
    if os.path.isfile(path):
        return PackShelf(path)
    raise NotAVault(f"{path} does not exist; give a vault folder or a .vmem file")
