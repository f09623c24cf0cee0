"""Packs on an object store: many small segments fetched with one GET (spec §4.7.1, "Packs on an
object store"; docs/storage.md).

An object store answers one request at a time per connection, and a lived-in vault is thousands
of small segments (one per interactive write): a first open of 10,000 of them is 10,000 GETs,
bound by requests, not bytes.  So a writer on a store also uploads ``packs/<sha256>.pack`` files
(spec §13, flag 0) holding segments the store already holds loose, a few MiB at a time once
:data:`PACK_AFTER` loose segments are in no pack; and a mirror that lacks many segments fetches
the packs holding them whole, checks every segment against its name's hash and keeps it as a
loose file, and fetches the rest one by one.

A pack on a store is only a faster way to fetch segments the store lists loose: the loose
objects stay (the store keeps the segments twice); a reader never takes a segment from a pack
that the listing does not also hold loose (so a pack cannot bring back a segment an erasure or a
compaction deleted), and a writer that deletes a segment deletes the packs holding it.  Deleting
a pack loses nothing.

What this mirror knows of each pack (its segment names, read from its index with two ranged GETs)
is kept in the mirror's ``.packs.json`` (a cache: immutable facts, rebuilt when lost).

Confined to the thread that uses the vault, like its :class:`~camillo.objectstore.ObjectShelf`;
:meth:`StorePacks.fetch` runs its GETs on a small pool of threads of its own (fetch and write into
the mirror only), joined before it returns.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import io
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from .errors import VaultError
from .names import kind_of
from .packs import TRAILER_LEN, TYPE_SEGMENT, PackReader, parse_index, parse_trailer, write_pack
from .storage import content_hash_of, hash_matches


class Store(Protocol):
    """What packs need of an object store and its mirror (:class:`~camillo.objectstore.ObjectShelf`)."""

    root: str  # the mirror's folder

    @property
    def remote(self) -> Mapping[str, Any]: ...  # the last listing: vault name -> an object with ``size``


    def fetch_range(self, name: str, first: int, last: int) -> bytes | None: ...
    def open_object(self, name: str) -> Any: ...
    def put_new(self, name: str, data: bytes) -> bool: ...
    def still_there(self, name: str) -> bool: ...
    def delete_object(self, name: str) -> None: ...
    def read(self, name: str) -> bytes: ...
    def keep_in_mirror(self, name: str, data: bytes) -> None: ...
    def loose_segments(self) -> list[str]: ...

PACK_AFTER = 256  # a writer packs once this many of the store's loose segments are in no pack
PACK_STEP_BYTES = 4 << 20  # one packing step puts at most this much into one pack (one PUT)
FETCH_AT_LEAST = 16  # a mirror fetches a pack whole when it holds at least this many segments it lacks
FETCH_MAX_BYTES = 64 << 20  # a larger pack is not fetched whole (its segments come one GET each)
INDEX_MAX_BYTES = 4 << 20  # a larger index is not read (the pack is not used)
FETCHERS = 4  # packs fetched at once


class StorePacks:
    """The packs of one object store as its mirror knows them (module docstring)."""

    def __init__(self, shelf: Store) -> None:
        self.shelf = shelf
        self.path = os.path.join(shelf.root, ".packs.json")
        self.held: dict[str, frozenset[str]] = self._load()  # pack name -> the segment names its index lists
        self.unusable: set[str] = set()  # packs whose index could not be read (this process)
        self.fetched = 0  # packs fetched whole (this process)
        self._uncovered: set[str] | None = None  # loose segments in no pack, once counted

    # -- what is known

    def _load(self) -> dict[str, frozenset[str]]:
        try:
            with open(self.path, encoding="utf-8") as fh:
                raw = json.load(fh)
            return {p: frozenset(n for n in names if kind_of(n) == "segment")
                    for p, names in raw.items() if kind_of(p) == "pack" and isinstance(names, list)}
        except (OSError, ValueError, AttributeError, TypeError):
            return {}  # a cache: read the indexes again

    def _save(self) -> None:
        tmp = f"{self.path}.{os.getpid()}.tmp"
        try:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump({p: sorted(n) for p, n in sorted(self.held.items())}, fh)
            os.replace(tmp, self.path)
        except OSError:
            pass  # a cache: the indexes are read again next time

    def learn(self, listed: Iterable[str]) -> None:
        """Know the index of every pack in ``listed`` (the store's listing of ``packs/``): the
        indexes not known yet are read (two ranged GETs each, in parallel); packs no longer listed
        are forgotten."""
        listed = {p for p in listed if kind_of(p) == "pack"}
        gone = [p for p in self.held if p not in listed]
        new = sorted(p for p in listed if p not in self.held and p not in self.unusable)
        for p in gone:
            del self.held[p]
        if new:
            with concurrent.futures.ThreadPoolExecutor(min(16, len(new))) as pool:
                for pack, names in zip(new, pool.map(self._read_index, new)):
                    if names is None:
                        self.unusable.add(pack)
                    else:
                        self.held[pack] = names
        if gone or new:
            self._uncovered = None
            self._save()

    def _read_index(self, pack: str) -> frozenset[str] | None:
        """The segment names a pack's index lists (its trailer, then its index: two ranged GETs),
        or None when it cannot be read or is not a pack of segments of a sensible size."""
        listed = self.shelf.remote.get(pack)
        size = listed.size if listed is not None else 0
        if size <= TRAILER_LEN:
            return None
        try:
            trailer = self.shelf.fetch_range(pack, size - TRAILER_LEN, size - 1)
            if trailer is None:
                return None
            index_offset, index_len, count, _digest = parse_trailer(trailer, size, pack)
            if index_len > INDEX_MAX_BYTES:
                return None
            data = self.shelf.fetch_range(pack, index_offset, index_offset + index_len - 1)
            if data is None or len(data) != index_len:
                return None
            entries = parse_index(data, count, index_offset, pack)
        except VaultError:
            return None
        if any(e.type != TYPE_SEGMENT for e in entries):
            return None  # a pack on a store holds segments only
        return frozenset(e.name for e in entries)

    def holding(self, names: set[str]) -> list[str]:
        """The known packs that hold any of ``names``."""
        return sorted(p for p, held in self.held.items() if not held.isdisjoint(names))

    # -- a mirror catching up

    def fetch(self, missing: set[str], *, fresh: bool = False) -> set[str]:
        """Fetch whole the listed packs that hold at least FETCH_AT_LEAST of the ``missing``
        segments and put those segments into the mirror (each checked against its name's hash);
        the names obtained.  ``fresh``: the mirror holds nothing yet (a first open), so every pack
        is fetched, and its index read from the pack itself (no ranged GETs).  A pack that cannot be
        fetched, or is not what its name says, is skipped: its segments come one by one."""
        if len(missing) < FETCH_AT_LEAST:
            return set()
        listed = self.shelf.remote
        wanted: list[tuple[str, frozenset[str]]] = []
        if fresh:
            wanted = [(p, frozenset(missing)) for p in sorted(listed)
                      if kind_of(p) == "pack" and p not in self.unusable and listed[p].size <= FETCH_MAX_BYTES]
        else:
            self.learn(listed)
            left = set(missing)
            for pack in sorted(self.held, key=lambda p: -len(self.held[p] & left)):
                useful = self.held[pack] & frozenset(left)
                if pack not in listed or len(useful) < FETCH_AT_LEAST or listed[pack].size > FETCH_MAX_BYTES:
                    continue
                wanted.append((pack, useful))
                left -= useful
        got: set[str] = set()
        if not wanted:
            return got
        with concurrent.futures.ThreadPoolExecutor(min(FETCHERS, len(wanted))) as pool:
            jobs = {pool.submit(self._download, pack): (pack, useful) for pack, useful in wanted}
            for job in concurrent.futures.as_completed(jobs):  # unpacked here while the others download
                tmp, (pack, useful) = job.result(), jobs[job]
                if tmp is not None:
                    got |= self._unpack(tmp, useful - got, pack=pack if fresh else None)
        self.fetched += len(wanted)
        if fresh:
            self._save()
        return got

    def _download(self, pack: str) -> str | None:
        """The whole pack in a temporary file of the mirror, checked against its name; None when it
        is gone, cut short, too large or not what its name says."""
        tmp = os.path.join(self.shelf.root, f".pack-{os.urandom(8).hex()}.tmp")
        try:
            body = self.shelf.open_object(pack)
            if body is None:
                return None
            digest = hashlib.sha256()
            try:
                with open(tmp, "wb") as fh:
                    taken = 0
                    for chunk in iter(lambda: body.read(1 << 20), b""):
                        taken += len(chunk)
                        if taken > FETCH_MAX_BYTES:
                            raise ValueError("larger than it was listed")
                        digest.update(chunk)
                        fh.write(chunk)
            finally:
                body.close()
        except Exception:  # gone, cut short, dropped, or no room for it: its segments come one by one
            _unlink(tmp)
            return None
        if digest.digest() == content_hash_of(pack):
            return tmp
        _unlink(tmp)  # not the pack its name says (damaged, or a hostile host's)
        return None

    def _unpack(self, tmp: str, useful: frozenset[str], *, pack: str | None = None) -> set[str]:
        """Put the ``useful`` segments of a downloaded pack into the mirror, each checked against its
        name; the names put there.  ``pack``: its index was not read before; it is known from now
        on.  The temporary file is deleted."""
        got: set[str] = set()
        try:
            reader = PackReader(tmp, verify_hash=False)  # the whole file matched its name already
        except VaultError:
            _unlink(tmp)
            return got
        try:
            if pack is not None:
                if any(e.type != TYPE_SEGMENT for e in reader.entries):
                    return got  # a pack on a store holds segments only: not used
                self.held[pack] = frozenset(reader.by_name)
                self._uncovered = None
            for name in sorted(useful):
                entry = reader.by_name.get(name)
                if entry is None or entry.type != TYPE_SEGMENT:
                    continue
                data = reader.read(name)
                if hash_matches(name, data):
                    self.shelf.keep_in_mirror(name, data)
                    got.add(name)
        finally:
            reader.close()
            _unlink(tmp)
        return got

    # -- a writer keeping the store easy to fetch

    def uncovered(self) -> set[str]:
        """The mirror's loose segments that no known pack holds."""
        if self._uncovered is None:
            self.learn(self.shelf.remote)
            covered: set[str] = set().union(*self.held.values()) if self.held else set()
            self._uncovered = {n for n in self.shelf.loose_segments() if n not in covered}
        return self._uncovered

    def note_written(self, name: str) -> None:
        """A segment now loose on the store and in the mirror (uploaded or downloaded)."""
        if self._uncovered is not None and kind_of(name) == "segment":
            self._uncovered.add(name)

    def note_dropped(self, name: str) -> None:
        if self._uncovered is not None:
            self._uncovered.discard(name)

    def due(self) -> bool:
        """PACK_AFTER or more loose segments are in no pack."""
        return len(self.uncovered()) >= PACK_AFTER

    def pack_step(self) -> str | None:
        """When a pack is due, upload one pack of the loose segments in no pack (at most
        PACK_STEP_BYTES, the names in order); the new pack's name, or None."""
        todo = self.uncovered()
        if len(todo) < PACK_AFTER:
            return None
        entries: list[tuple[str, bytes]] = []
        size = 0
        for name in sorted(todo):
            try:
                data = self.shelf.read(name)  # a torn mirror copy is downloaded again here
            except (FileNotFoundError, VaultError):
                continue  # gone meanwhile (the next listing says so), or unreadable now: another time
            if entries and size + len(data) > PACK_STEP_BYTES:
                break
            entries.append((name, data))
            size += len(data)
        if len(entries) < 2:
            return None
        out = io.BytesIO()
        size, digest = write_pack(entries, out, complete_vault=False)
        pack = f"packs/{digest.hex()}.pack"
        self.shelf.put_new(pack, out.getvalue())
        names = frozenset(n for n, _d in entries)
        self.held[pack] = names
        self._uncovered = todo - names
        self._save()
        return pack

    def drop_stale(self) -> None:
        """Delete the known packs holding a segment the store no longer has (written while an
        erasure or a compaction deleted it): the last listing omits it and a HEAD confirms."""
        listed = self.shelf.remote
        for pack in sorted(self.held):
            absent = next((n for n in sorted(self.held[pack]) if n not in listed), None)
            if absent is not None and not self.shelf.still_there(absent):
                self.delete(pack)

    def delete(self, pack: str) -> None:
        self.shelf.delete_object(pack)
        self.held.pop(pack, None)
        self._uncovered = None
        self._save()


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
