"""Packs on an object store: small segments gathered into few objects (spec §4.7.1, "Packs on an
object store"; docs/storage.md).

An object store answers one request at a time per connection and lists at most 1,000 keys a page,
and a lived-in vault is thousands of small segments (one per interactive write): a first open of
10,000 of them is ten listing pages and 10,000 GETs, bound by requests, not bytes.  So a writer on a
store gathers them into ``packs/<sha256>.pack`` files (spec §13, flag 0), a few MiB each once
:data:`PACK_AFTER` loose segments are in no pack, and then deletes the loose objects the pack holds:
as in a folder (spec §4.6), a pack's segments are files of the vault.

The mirror holds the store's packs as it holds the loose objects (the same folder layout, read by
:class:`~camillo.storage.FolderShelf`): a pack is downloaded whole, checked against its name, and
each segment is checked against its own name whenever it is read.

Deleting a segment a pack holds (an erasure's or a compaction's old segments) uploads first a pack
of that pack's other segments (or puts a lone one back loose), then deletes the old pack: nothing
another device wrote is lost.  Two devices doing this to one pack at the same moment, or a packing
step racing a deletion, can leave a deleted segment in a pack; a deleted segment of an erasure is
sealed under destroyed keys, and the next writable open deletes it again (spec §16.4).

Confined to the thread that uses the vault, like its :class:`~camillo.objectstore.ObjectShelf`;
:meth:`StorePacks.fetch` runs its GETs on a small pool of threads of its own (each downloads one
pack into the mirror), joined before it returns.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import io
import os
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from .errors import StorageError
from .names import kind_of
from .packs import MIN_ENTRY, TYPE_SEGMENT, write_pack
from .storage import content_hash_of, hash_matches


class Store(Protocol):
    """What packs need of an object store and its mirror (:class:`~camillo.objectstore.ObjectShelf`)."""

    root: str  # the mirror's folder

    @property
    def remote(self) -> Mapping[str, Any]: ...  # the last listing: vault name -> an object with ``size``

    def open_object(self, name: str) -> Any: ...
    def still_there(self, name: str) -> bool: ...
    def put_new(self, name: str, data: bytes) -> bool: ...
    def delete_objects(self, names: Iterable[str]) -> None: ...
    def read(self, name: str) -> bytes: ...
    def read_from_pack(self, name: str) -> bytes | None: ...
    def size(self, name: str) -> int | None: ...
    def keep_in_mirror(self, name: str, data: bytes) -> None: ...
    def drop_from_mirror(self, name: str) -> None: ...
    def mirror_packs(self) -> Mapping[str, frozenset[str]]: ...
    def loose_segments(self) -> list[str]: ...


PACK_AFTER = 256  # a writer packs once this many of the store's loose segments are in no pack
PACK_STEP_BYTES = 4 << 20  # one packing step puts at most this much into one pack (one PUT)
PACK_BELOW = 256 << 10  # only segments smaller than this are packed (a larger one is fetched well alone)
TIDY_AFTER = 16  # loose copies of packed segments the store holds before a writer deletes them
FETCHERS = 4  # packs fetched at once
PACK_MAX_BYTES = 4 << 30  # a pack is at most this large (spec §4.7.1); a download stops one byte past it


class StorePacks:
    """The packs of one object store and its mirror (module docstring)."""

    def __init__(self, shelf: Store) -> None:
        self.shelf = shelf
        self.fetched = 0  # packs downloaded whole (this process)
        self.fetched_again: set[str] = set()  # packs downloaded again after a segment did not match its name
        self.refused: set[str] = set()  # packs whose segments are not what their names say (not used)
        self._uncovered: set[str] | None = None  # loose segments in no pack, once counted

    def _path(self, name: str) -> str:
        return os.path.join(self.shelf.root, *name.split("/"))

    # -- a mirror catching up

    def fetch(self, packs: Iterable[str]) -> set[str]:
        """Download the listed ``packs`` into the mirror, FETCHERS at a time, each checked against
        its name; the packs that could not be (gone, cut short, or not what their name says): they
        are still syncing, and asked for again at the next listing."""
        packs = sorted(packs)
        if not packs:
            return set()
        with concurrent.futures.ThreadPoolExecutor(min(FETCHERS, len(packs))) as pool:
            ok = dict(zip(packs, pool.map(self._download, packs)))
        self.fetched += sum(ok.values())
        self._uncovered = None
        return {p for p, done in ok.items() if not done}

    def _download(self, pack: str) -> bool:
        """The whole pack into the mirror (a temporary file, checked, then renamed into place)."""
        tmp = os.path.join(self.shelf.root, f".pack-{os.urandom(8).hex()}.tmp")
        try:
            body = self.shelf.open_object(pack)
            if body is None:
                return False
            digest = hashlib.sha256()
            try:
                with open(tmp, "wb") as fh:
                    taken = 0
                    for chunk in iter(lambda: body.read(1 << 20), b""):
                        taken += len(chunk)
                        if taken > PACK_MAX_BYTES:
                            raise ValueError("larger than a pack can be")
                        digest.update(chunk)
                        fh.write(chunk)
            finally:
                body.close()
            if digest.digest() != content_hash_of(pack):
                raise ValueError("not the pack its name says")  # damaged, or a hostile host's
            os.makedirs(os.path.dirname(self._path(pack)), exist_ok=True)
            os.replace(tmp, self._path(pack))
            return True
        except Exception:  # gone, cut short, dropped, forged, or no room for it: tried again later
            _unlink(tmp)
            return False

    # -- a writer keeping the store easy to fetch

    def uncovered(self) -> set[str]:
        """The mirror's small loose segments that no pack in the mirror holds."""
        if self._uncovered is None:
            covered = self._covered()
            self._uncovered = {n for n in self.shelf.loose_segments() if n not in covered and self._small(n)}
        return self._uncovered

    def _small(self, name: str) -> bool:
        size = self.shelf.size(name)
        return size is not None and size < PACK_BELOW

    def copy_in_pack_is_good(self, name: str) -> bool:
        """A pack in the mirror holds ``name`` with the bytes its name says: its loose copy may go."""
        data = self.shelf.read_from_pack(name)
        return data is not None and hash_matches(name, data) is True

    def _covered(self) -> set[str]:
        held = self.shelf.mirror_packs()
        return set().union(*held.values()) if held else set()

    def note_written(self, name: str) -> None:
        """A segment now loose on the store and in the mirror (uploaded or downloaded)."""
        if self._uncovered is not None and kind_of(name) == "segment" and self._small(name):
            self._uncovered.add(name)

    def note_dropped(self, name: str) -> None:
        if self._uncovered is not None:
            self._uncovered.discard(name)

    def due(self) -> bool:
        """PACK_AFTER or more loose segments are in no pack."""
        return len(self.uncovered()) >= PACK_AFTER

    def pack_step(self) -> str | None:
        """When a pack is due, upload one pack of the loose segments in no pack (at most
        PACK_STEP_BYTES, the names in order), keep it in the mirror, then delete those loose
        objects from the store and the mirror; the new pack's name, or None."""
        todo = self.uncovered()
        if len(todo) < PACK_AFTER:
            return None
        entries: list[tuple[str, bytes]] = []
        size = 0
        for name in sorted(todo):
            try:
                data = self.shelf.read(name)  # a torn mirror copy is downloaded again here
            except (FileNotFoundError, StorageError):
                continue  # gone meanwhile (the next listing says so), or unreadable now: another time
            if len(data) < MIN_ENTRY[TYPE_SEGMENT]:
                continue  # shorter than any segment (planted): left loose, a pack with it would not read
            if entries and size + len(data) > PACK_STEP_BYTES:
                break
            entries.append((name, data))
            size += len(data)
        if len(entries) < 2:
            return None
        pack = self._put_pack(entries)
        names = [n for n, _d in entries]
        self._uncovered = todo - set(names)
        self._delete_loose(names)
        return pack

    def _put_pack(self, entries: list[tuple[str, bytes]]) -> str:
        """Upload a pack of ``entries`` (conditional PUT) and keep it in the mirror; its name."""
        out = io.BytesIO()
        _size, digest = write_pack(entries, out, complete_vault=False)
        pack = f"packs/{digest.hex()}.pack"
        data = out.getvalue()
        self.shelf.put_new(pack, data)
        self.shelf.keep_in_mirror(pack, data)
        self.shelf.mirror_packs()  # the mirror reads its segments from now on
        return pack

    def _delete_loose(self, names: list[str]) -> None:
        """Delete loose copies of segments a pack in the mirror holds (store first, then mirror)."""
        self.shelf.delete_objects(names)
        for name in names:
            self.shelf.drop_from_mirror(name)

    def tidy(self, *, at_least: int = TIDY_AFTER) -> int:
        """Delete from the store (and the mirror) the loose copies of segments a pack holds (left by
        a packing step that stopped between its PUT and its deletions, or by a copy of the vault
        merged in), once there are ``at_least`` of them; how many."""
        listed = self.shelf.remote
        covered = self._covered()
        doubled = sorted(n for n in listed if kind_of(n) == "segment" and n in covered)
        if not doubled or len(doubled) < at_least:
            return 0
        doubled = [n for n in doubled if self.copy_in_pack_is_good(n)]  # never trust a pack unread
        if not doubled:
            return 0
        self._delete_loose(doubled)
        return len(doubled)

    # -- deleting segments a pack holds

    def delete_segments(self, names: set[str]) -> None:
        """Before ``names`` are deleted (spec §4.5): every pack holding any of them is replaced by a
        pack of its other segments (a lone one goes back loose), uploaded first, then the old pack
        is deleted.  Every listed pack is in the mirror first (so none is missed); one that cannot
        be downloaded stops the deletion (StorageError), and nothing is lost."""
        doomed = {n for n in names if kind_of(n) == "segment"}
        if not doomed:
            return
        listed_packs = [p for p in self.shelf.remote if kind_of(p) == "pack"]
        held = self.shelf.mirror_packs()
        failed = self.fetch(p for p in listed_packs if p not in held)
        failed = {p for p in failed if self.shelf.still_there(p)}  # not one another device replaced meanwhile
        if failed:
            raise StorageError(f"{sorted(failed)[0]} could not be downloaded from the store, so the segments it "
                               "holds cannot be deleted yet; nothing was deleted: try again when the store answers",
                               file=sorted(failed)[0])
        held = self.shelf.mirror_packs()
        for pack in sorted(p for p, inner in held.items() if not inner.isdisjoint(doomed)):
            entries = []  # read before the old pack goes
            for name in sorted(held[pack] - doomed):
                try:
                    entries.append((name, self.shelf.read(name)))
                except FileNotFoundError:
                    continue  # no copy anywhere matches its name (a forged pack's): there is nothing to keep
            if len(entries) >= 2:
                self._put_pack(entries)
            elif entries:  # a lone segment goes back loose
                name, data = entries[0]
                self.shelf.put_new(name, data)
                self.shelf.keep_in_mirror(name, data)
            self.shelf.delete_objects([pack])
            self.shelf.drop_from_mirror(pack)
        self._uncovered = None


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
