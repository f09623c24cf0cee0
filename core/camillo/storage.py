"""Byte shelves: where a vault's files live (spec §4).

A shelf stores immutable, named byte strings and knows nothing about their meaning.  The folder
shelf is a live vault (a directory any sync service can carry); the pack shelf is a ``.vmem`` file
opened read-only.  Later stores (object stores) implement the same five calls.

Rules every shelf follows:

* Names match a strict pattern (below); anything else in the folder is ignored: dot-files and
  temp files, ``*.sync-conflict-*`` copies, iCloud ``*.icloud`` placeholders, editor droppings.
* A write creates a new file or finds identical bytes already there; it never overwrites.  The
  folder shelf writes a dot temp file in the target directory, fsyncs it, gives it its name with
  link(2) (which, unlike rename(2), fails when the name exists) and fsyncs the directory, so a crash
  leaves either nothing or the whole file (spec §4.4).  Files are created 0600, directories 0700.
* Deleting is only done by compaction, erasure and enrollment clean-up.
* Segments inside ``packs/*.pack`` are listed and read as if they were loose files.

A shelf is confined to the thread that uses the vault; ``FolderShelf.write_all`` stages an operation's files on
the process's pool of writing threads (:mod:`camillo.iopool`: writes and fsyncs only), and waits for them before
it returns.
"""

from __future__ import annotations

import builtins
import contextlib
import errno
import functools
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Protocol

from . import iopool
from .bulksync import WholeSync, file_system_sync
from .errors import (
    DamagedFile,
    NotAVault,
    ReadOnlyVault,
    StorageError,
    UnsupportedVersion,
    VaultError,
)
from .names import NAME_PATTERNS as NAME_PATTERNS  # re-exported
from .names import kind_of as kind_of  # re-exported
from .packs import TYPE_SEGMENT, PackReader
from .places import vault_folder_holding
from .primitives import random_bytes, sha256

DIRECTORIES = ("slots", "env", "segments", "packs", "enroll", "blobs")


def segment_name(data: bytes) -> str:
    h = sha256(data).hex()
    return f"segments/{h[:2]}/{h}.seg"


def content_hash_of(name: str) -> bytes | None:
    """For content-addressed names (segments, envelopes, packs, attachment chunks) the hash the bytes
    must have."""
    m = re.search(r"([0-9a-f]{64})\.(seg|env|pack|blob)$", name)
    return bytes.fromhex(m.group(1)) if m else None


def hash_matches(name: str, data: bytes) -> bool | None:
    """For content-addressed names: do the bytes hash to the name?  None for other names."""
    expected = content_hash_of(name)
    if expected is None:
        return None
    return sha256(data) == expected


class Shelf(Protocol):
    """What every shelf offers (:class:`FolderShelf`, :class:`PackShelf`, later stores): the type
    of a shelf wherever the code does not depend on which kind it is."""

    location: str
    writable: bool

    def list(self) -> builtins.list[str]: ...
    def changes(self) -> tuple[set[str], set[str], set[str]]: ...
    def exists(self, name: str) -> bool: ...
    def read(self, name: str) -> bytes: ...
    def write(self, name: str, data: bytes) -> bool: ...
    def delete(self, name: str) -> None: ...
    def close(self) -> None: ...


class FolderShelf:
    """A vault folder.  ``writable`` is False when the folder cannot be written."""

    # a pack's whole-file checksum is checked when it is first read (a mirror checked it against
    # its name when it downloaded it, and checks each segment against its own name when read)
    packs_hashed_on_open = True
    # the first scan of a warm open may take directories of segments on trust (prime_lazily)
    lazy_listing = True

    def __init__(self, path: str, *, create: bool = False) -> None:
        # ``root`` is the folder on disk; ``location`` is what messages name (the same, except for a
        # shelf whose folder is a local mirror of a remote store: see camillo.objectstore)
        self.location = self.root = os.path.abspath(path)
        if create:
            outer = vault_folder_holding(os.path.dirname(self.location))  # a vault folder around it
            if outer is not None:
                raise StorageError(f"{self.location} is inside the vault folder {outer}: a vault there would be "
                                   "synced and copied along with that one; choose a folder outside it")
            try:
                make_dirs_durable(self.location)
                if any(kind_of(n) for n in self.walk()):
                    raise StorageError(f"{self.location} already holds a vault; choose an empty folder" if os.path.exists(
                        os.path.join(self.location, "VMEM")) else f"{self.location} holds part of a vault (files but no "
                        "VMEM descriptor: an unpack or a copy cut short?); choose an empty folder, or delete this one")
                make_dirs_durable(*(os.path.join(self.location, d) for d in DIRECTORIES))
            except OSError as exc:
                raise StorageError(f"cannot create the vault folder {self.location}: {exc.strerror}") from None
        elif not os.path.isdir(self.location):
            raise NotAVault(f"{self.location} is not a folder")
        self.writable = os.access(self.location, os.W_OK)
        self._packs: dict[str, PackReader] = {}
        self._packed: dict[str, str] = {}
        # the incremental listing (see _scan)
        # rel dir -> (mtime, files, subdirs, racy: listed within a clock tick of its mtime)
        self._dirs: dict[str, tuple[int, frozenset[str], frozenset[str], bool]] = {}
        self._fine_clock = False  # some directory showed a sub-second mtime
        # directories as a listing made by an earlier process found them (see prime), and those
        # listed again or gone since the last listing_changes()
        self._primed: dict[str, tuple[int, frozenset[str], frozenset[str]]] = {}
        self._relisted: set[str] = set()
        # directories of segments taken on trust from that listing (see prime): rel -> (mtime,
        # subdirectories), their files read from it (``_load``) only when something needs them
        self._lazy: dict[str, tuple[int, frozenset[str]]] = {}
        self._load: Callable[[str], frozenset[str]] | None = None
        self._fresh: set[str] = set()  # listed by the first scan with nothing to compare with
        self._touched: set[str] = set()  # written or deleted in since last listed
        self._loose: set[str] = set()
        self._pack_files: set[str] = set()
        self._in_packs: dict[str, frozenset[str]] = {}  # pack name -> the segment names it holds
        self._names: set[str] = set()
        self._added: set[str] = set()
        self._removed: set[str] = set()
        self._unsynced: set[str] | None = None  # directories to fsync once, in write_all and delete_all

    # -- listing

    def walk(self) -> Iterator[str]:
        """Every file name in the vault's top level and directories, listed from the disk now (not
        the incremental listing) and not filtered by kind: what a host sees, packs included."""
        base = self.root
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


    # Listing is incremental: each directory's entries are kept with its mtime and listed again only
    # when the mtime changed, so a refresh of a vault of 100,000 files costs a stat per directory.
    # A directory whose mtime was within the clock's granularity of the moment it was listed is
    # listed again next time: a change made in the same tick would not move its mtime (the "racy"
    # entries of git's index).  The granularity is taken as RACY_NS (2 s: FAT, network shares)
    # until some directory shows a sub-second mtime, then FINE_RACY_NS (the kernel's coarse clock
    # ticks every few milliseconds).  Packs that did not parse (still syncing) are retried.
    RACY_NS = 2_000_000_000
    FINE_RACY_NS = 50_000_000

    def _scan(self) -> None:
        self.scan_folder()

    def scan_folder(self) -> None:
        """The incremental listing of the folder itself (what ``_scan`` does for a folder; a shelf
        whose folder mirrors a remote store refreshes the mirror first, then calls this)."""
        now = time.time_ns()
        seen_dirs: set[str] = set()
        found_loose: list[str] = []
        lost_loose: list[str] = []
        stat, dirs, base = os.stat, self._dirs, self.root
        stack = [""]
        while stack:
            rel = stack.pop()
            seen_dirs.add(rel)
            full = f"{base}/{rel}" if rel else base
            try:
                mtime = stat(full).st_mtime_ns
            except FileNotFoundError:
                continue
            except OSError as exc:
                raise StorageError(f"cannot list {full}: {exc.strerror}") from None
            if not self._fine_clock and mtime % 1_000_000_000:
                self._fine_clock = True
            cached = dirs.get(rel)
            if cached is None and rel in self._lazy:
                if self._lazy[rel][0] == mtime:  # as the stored listing has it: its names are not needed
                    stack.extend(self._lazy[rel][1])
                    continue
                cached = self._materialize(rel)  # moved: compared with the stored listing below
            if cached is not None and cached[0] == mtime and not cached[3]:
                stack.extend(cached[2])
                continue
            primed = self._primed.get(rel) if cached is None else None
            if primed is not None and primed[0] == mtime:  # as an earlier process listed it
                files, subdirs, racy = primed[1], primed[2], False
            else:
                # names listed here before passed kind_of then: only new ones are checked (another
                # device's 1,000 new batches move nearly every directory of 100,000 files)
                known = cached[1] if cached is not None else primed[1] if primed is not None else frozenset()
                fs, ds = set(), set()
                try:
                    with os.scandir(full) as it:
                        for e in it:
                            if e.name.startswith("."):
                                continue
                            child = f"{rel}/{e.name}" if rel else e.name
                            if e.is_dir(follow_symlinks=False):
                                if rel or e.name in DIRECTORIES:
                                    ds.add(child)
                            elif child in known or kind_of(child):
                                fs.add(child)
                except FileNotFoundError:
                    continue
                except OSError as exc:
                    raise StorageError(f"cannot list {full}: {exc.strerror}") from None
                files, subdirs = frozenset(fs), frozenset(ds)
                racy = now - mtime < (self.FINE_RACY_NS if self._fine_clock else self.RACY_NS)
                self._relisted.add(rel)
                self._touched.discard(rel)
                if cached is None and primed is None and self._load is not None:
                    self._fresh.add(rel)
            old = cached[1] if cached is not None else frozenset()
            found_loose.extend(files - old)
            lost_loose.extend(old - files)
            dirs[rel] = (mtime, files, subdirs, racy)
            stack.extend(subdirs)
        self._primed = {}  # (every directory there is was met above)

        for rel in [d for d in self._lazy if d not in seen_dirs]:
            self._materialize(rel)
        for rel in [d for d in self._dirs if d not in seen_dirs]:  # a directory that went away
            lost_loose.extend(self._dirs.pop(rel)[1])
            self._relisted.add(rel)
        # (every name listed passed kind_of: a pack is a name under packs/)
        for name in lost_loose:
            self._loose.discard(name)
            if name.startswith("packs/"):
                self._pack_gone(name)
            elif name not in self._packed:
                self._lose(name)
        if found_loose:  # in bulk: a first scan finds every file of the folder (100,000 at a million records)
            self._loose.update(found_loose)
            packs = {n for n in found_loose if n.startswith("packs/")}
            self._pack_files |= packs
            gained = set(found_loose) - packs - self._names
            self._names |= gained
            self._added |= gained
            self._removed -= gained
        for pack in [n for n in self._pack_files if n not in self._in_packs]:
            held = self._pack_segments(pack)
            if held or pack in self._packs:
                self._in_packs[pack] = frozenset(held)
                for name in held:
                    self._gain(name)

    def _pack_gone(self, name: str) -> None:
        """A pack is no longer here: its segments stop counting unless a loose file or another pack
        holds them."""
        self._pack_files.discard(name)
        self.load_names(self._in_packs.get(name, frozenset()))
        for inner in self._in_packs.pop(name, frozenset()):
            if self._packed.get(inner) == name:
                del self._packed[inner]
                other = next((p for p, held in self._in_packs.items() if inner in held), None)
                if other is not None:
                    self._packed[inner] = other
            if inner not in self._loose and inner not in self._packed:
                self._lose(inner)
        reader = self._packs.pop(name, None)
        if reader is not None:
            reader.close()

    def forget_pack(self, name: str) -> None:
        """Stop using a pack file now (it was deleted or is being replaced): as if it were gone, and
        found again by the next listing if it is there then."""
        self._loose.discard(name)
        self._pack_gone(name)
        rel = os.path.dirname(name)
        cached = self._dirs.get(rel)
        if cached is not None:  # listed again next time, so that a new file under the name is read
            self._dirs[rel] = (-1, cached[1] - {name}, cached[2], True)
            self._relisted.add(rel)

    def prime(self, entries: Iterable[tuple[str, int, frozenset[str], frozenset[str]]]) -> None:
        """Directories as a listing an earlier process made found them, each (directory, mtime,
        files, subdirectories), kept by this installation's local state (``Reader``): the first scan
        takes each one whose mtime has not moved since instead of listing it (at a million records,
        263 stats instead of listing 100,000 files).  Only entries listed outside their mtime's
        clock tick are kept (see RACY_NS), so a change since moved the mtime.  Ignored once the
        folder was scanned."""
        if not self._dirs:
            self._primed = {rel: (mtime, files, subdirs) for rel, mtime, files, subdirs in entries}

    def prime_lazily(self, entries: Iterable[tuple[str, int, frozenset[str], frozenset[str]]],
                     lazy: Iterable[tuple[str, int, frozenset[str]]], load: Callable[[str], frozenset[str]]) -> None:
        """:meth:`prime`, where the directories of segments (``lazy``: each (directory, mtime,
        subdirectories)) are taken as the earlier process left them, their files read with ``load``
        only when something needs them: when the directory's mtime moved (the scan then reports
        what changed since that listing, not every file), when a file is written or deleted in it,
        and for a pass over every name (:meth:`list`, :meth:`load_names`).  Until then
        :meth:`changes` neither reports those files nor counts them among "every name now": at a
        million records, a warm open with nothing new handles none of 100,000 names.  The caller
        knows what those listings held (it kept them with what it read of the files) and keeps
        ``load`` answering until :meth:`load_names` (``everything``) was called."""
        if not self._dirs:
            self.prime(entries)
            self._lazy = {rel: (mtime, subdirs) for rel, mtime, subdirs in lazy}
            self._load = load

    def _materialize(self, rel: str) -> tuple[int, frozenset[str], frozenset[str], bool]:
        """A directory taken on trust (prime_lazily) becomes one listed here: its files, as the stored
        listing has them, join the names known without being reported as new."""
        mtime, subdirs = self._lazy.pop(rel)
        assert self._load is not None
        files = self._load(rel)
        self._loose |= files
        self._names |= files
        entry = self._dirs[rel] = (mtime, files, subdirs, False)
        return entry

    def load_names(self, names: Iterable[str] = (), *, everything: bool = False) -> None:
        """Read the files of the directories taken on trust that hold one of ``names`` (or all of
        them): afterwards those names are among :meth:`changes`' "every name now" if they are in the
        folder."""
        if not self._lazy:
            return
        rels = list(self._lazy) if everything else {n.rsplit("/", 1)[0] for n in names} & self._lazy.keys()
        for rel in rels:
            self._materialize(rel)

    def listed(self, rel: str) -> frozenset[str]:
        """The files of a directory as the last scan listed it (none if it is not listed)."""
        entry = self._dirs.get(rel)
        return entry[1] if entry is not None else frozenset()

    def directories(self) -> set[str]:
        """Every directory the last scan met, listed or taken on trust."""
        return self._dirs.keys() | self._lazy.keys()

    def take_fresh(self) -> set[str]:
        """The directories a scan after :meth:`prime_lazily` listed with no earlier listing to compare
        with (none kept, or one kept while files were being written in it): every file they hold is
        reported, and none that went away, so the caller compares them with what it read before."""
        fresh, self._fresh = self._fresh, set()
        return fresh

    def listing_changes(self, every: bool = False) -> tuple[builtins.list[tuple[str, int, frozenset[str], frozenset[str]]],
                                                            builtins.list[str]]:
        """What to keep of the listing for :meth:`prime`: the directories listed again or gone since
        the last call (``every``: all of them), as (entries to keep, directories whose kept entry
        goes: gone, or listed within their mtime's clock tick)."""
        if every:
            self.load_names(everything=True)
        rels = (set(self._dirs) | self._relisted) if every else self._relisted
        # A directory of segments holding a name found by a listing the caller has not taken yet
        # (changes), or written or deleted in since it was listed, is not kept as it is: the caller's
        # state and the listing would disagree on it, and the next open takes it on trust
        # (prime_lazily).  It is kept again once both agree (listed after the change).
        stale = {rel for rel in (*self._touched, *(n.rsplit("/", 1)[0] for n in (*self._added, *self._removed)))
                 if rel.startswith("segments/")}
        self._relisted = {rel for rel in rels if rel in stale and rel in self._dirs}
        keep, drop = [], []
        for rel in rels | stale:  # (a directory taken on trust and written in since: its kept entry goes)
            entry = self._dirs.get(rel)
            if entry is None or entry[3] or entry[0] < 0 or rel in stale:
                drop.append(rel)
            else:
                keep.append((rel, entry[0], entry[1], entry[2]))
        return keep, drop

    def pack_holding(self, name: str) -> str | None:
        """The pack a segment is read from when no loose file holds it, if any."""
        return self._packed.get(name)

    def read_from_pack(self, name: str) -> bytes | None:
        """A segment's bytes as the pack holding it has them (even when a loose file holds it too),
        or None when no readable pack holds it.  Not checked against its name."""
        pack = self._packed.get(name)
        reader = self._packs.get(pack) if pack is not None else None
        if reader is None:
            return None
        try:
            return reader.read(name)
        except (DamagedFile, OSError):
            return None

    def packs_here(self) -> dict[str, frozenset[str]]:
        """The packs in the folder that could be read, each with the segment names it holds."""
        return dict(self._in_packs)

    def _gain(self, name: str) -> None:
        if name not in self._names:
            self._names.add(name)
            self._added.add(name)
            self._removed.discard(name)

    def _lose(self, name: str) -> None:
        if name in self._names:
            self._names.discard(name)
            self._removed.add(name)
            self._added.discard(name)

    def list(self) -> list[str]:
        self.load_names(everything=True)
        self._scan()
        return sorted(self._names)

    def files_in(self, directory: str) -> frozenset[str]:
        """The vault files directly in one top-level directory (``"slots"``), current: a stat of
        that directory when it did not change, a scan of the folder when it did; before the first
        scan of a plain folder, a listing of that directory alone (an open reads its slots before it
        derives the key, and lists the folder meanwhile: ``session.unlock._list_while_deriving``; an
        object store's mirror answers from its last listing of the store: ``ObjectShelf.files_in``)."""
        if self.unchanged(directory):
            return self._dirs[directory][1]
        if not self._dirs:
            try:
                with os.scandir(os.path.join(self.root, directory)) as it:
                    return frozenset(n for e in it if not e.name.startswith(".") and e.is_file()
                                     and kind_of(n := f"{directory}/{e.name}"))
            except FileNotFoundError:
                return frozenset()
            except OSError as exc:
                raise StorageError(f"cannot list {self.root}/{directory}: {exc.strerror}") from None
        self._scan()
        entry = self._dirs.get(directory)
        return entry[1] if entry is not None else frozenset()

    def scan_still_current(self, scanned_at: float, age: float) -> bool:
        """Whether a plain append may number its batch on the scan made at ``scanned_at``
        (time.monotonic()) instead of scanning again: it is younger than ``age`` seconds and no
        envelope or slot arrived since (a key change is never missed; other writers' batches that
        arrived meanwhile are concurrent with the append, as they would be a moment later)."""
        return (time.monotonic() - scanned_at < age and self.unchanged("env", "slots")
                and not self.key_files_unread())

    def start_key_check(self, scanned_at: float, age: float) -> Callable[[], bool] | None:
        """:meth:`scan_still_current` for a writer that numbers its batch meanwhile: None when the
        answer is already "no" (scan before numbering), else a function giving the answer, asked
        before the batch's counter is persisted (a folder answers at once)."""
        return (lambda: True) if self.scan_still_current(scanned_at, age) else None

    def key_files_unread(self) -> bool:
        """Whether a listing made since the last :meth:`changes` (``files_in``, ``list``) found an
        envelope or slot come or go that the reader has not been told of yet."""
        return any(n.startswith(("env/", "slots/")) for n in (*self._added, *self._removed))

    def unchanged(self, *directories: str) -> bool:
        """True when each of these top-level directories (``"env"``, ``"slots"``) is exactly as the
        last scan listed it: one stat each, no listing."""
        for directory in directories:
            entry = self._dirs.get(directory)
            if entry is None or entry[3]:
                return False
            try:
                if os.stat(os.path.join(self.root, directory)).st_mtime_ns != entry[0]:
                    return False
            except OSError:
                return False
        return True

    def changes(self) -> tuple[set[str], set[str], set[str]]:
        """(every name now, names added since the last call, names gone since the last call).  The
        first set is the shelf's own: do not change it.  After :meth:`prime_lazily`, "every name"
        leaves out the directories still taken on trust (see there)."""
        self._scan()
        added, removed = self._added, self._removed
        self._added, self._removed = set(), set()
        return self._names, added, removed

    def _pack_segments(self, pack: str) -> builtins.list[str]:
        reader = self._packs.get(pack)
        if reader is None:
            try:
                reader = PackReader(os.path.join(self.root, pack), verify_hash=self.packs_hashed_on_open)
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
        return os.path.join(self.root, *name.split("/"))

    def exists(self, name: str) -> bool:
        return os.path.exists(self._path(name)) or name in self._packed

    def is_staged(self, name: str, tmp: str) -> bool:
        """The temp file :meth:`stage` returned for ``name`` is still there (not committed yet)."""
        return os.path.exists(os.path.join(os.path.dirname(self._path(name)), tmp))

    def size(self, name: str) -> int | None:
        """The loose file's size in bytes, or None if it is not here as a loose file."""
        try:
            return os.path.getsize(self._path(name))
        except OSError:
            return None

    def mtime(self, name: str) -> float | None:
        """When the loose file last changed (seconds), or None if it is not here as a loose file."""
        try:
            return os.path.getmtime(self._path(name))
        except OSError:
            return None

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
        tmp = self.stage(name, data)
        if tmp is None:
            return False
        try:
            self.commit(name, tmp)
        except VaultError:
            self.unstage(name, tmp)
            raise
        return True

    def stage(self, name: str, data: bytes, *, sync: bool = True) -> str | None:
        """The first half of :meth:`write`: the bytes, fsynced, in a dot temp file beside ``name``
        (readers ignore it), its directory entry fsynced too.  Returns the temp file's name for
        :meth:`commit`, or None when ``name`` already holds these bytes.  ``sync`` False: the bytes
        are not fsynced here (:meth:`write_all` syncs the whole file system once before any of its
        names appear)."""
        if not self.writable:
            raise ReadOnlyVault(f"the vault folder {self.location} is read-only; nothing was written")
        path = self._path(name)
        directory = os.path.dirname(path)
        if os.path.exists(path):
            try:
                with open(path, "rb") as fh:
                    if fh.read() == data:
                        return None
            except OSError:
                pass
            raise StorageError(f"{name} already exists with different content; refusing to overwrite", file=name)
        tmp = f".tmp-{random_bytes(8).hex()}"
        try:
            make_dirs_durable(directory)
            fd = os.open(os.path.join(directory, tmp), os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
            try:
                view = memoryview(data)
                while view:
                    written = os.write(fd, view)
                    view = view[written:]
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            self._sync_dir(directory)
        except OSError as exc:
            self.unstage(name, tmp)
            raise self._write_error(name, exc) from None
        return tmp

    def _sync_dir(self, directory: str) -> None:
        if self._unsynced is None:
            fsync_dir(directory)
        else:
            self._unsynced.add(directory)

    @contextlib.contextmanager
    def _directories_synced_at_the_end(self, whole: WholeSync | None = None) -> Iterator[None]:
        """Within: each directory a write or deletion changed is fsynced once, on the way out (also
        when it fails), instead of after every file; with ``whole`` (:func:`file_system_sync`), their
        file systems are synced once instead (a merge's files go into 256 directories)."""
        self._unsynced = set()
        try:
            yield
        finally:
            directories, self._unsynced = self._unsynced, None
            try:
                if whole is not None and directories:
                    whole(directories)
                else:
                    fsync_dirs(directories)
            except OSError as exc:
                raise StorageError(f"cannot write to {exc.filename or self.location}: {exc.strerror}") from None

    def write_all(self, files: Sequence[tuple[str, bytes]]) -> builtins.list[str]:
        """Write an operation's new files (a key change's envelopes and slots, an erasure's segments,
        a merge's copies) as :meth:`write` writes each, durable when this returns, where :meth:`write`
        makes three fsyncs per file (a key change at 1M records writes over 200 envelopes): staged
        together (:meth:`stage_all`), then each given its name, each directory fsynced once.
        Returns the names written (not those that already held these bytes).  If one cannot be
        written, none stays: the ones written are deleted again and the error is raised."""
        if len(files) < 2:
            return [name for name, data in files if self.write(name, data)]
        written: builtins.list[str] = []
        whole = file_system_sync() if len(files) >= SYNC_WHOLE_FILES else None
        with self._directories_synced_at_the_end(whole):
            staged = self._stage_each(files, whole)
            try:
                for i, (name, tmp) in enumerate(staged):
                    if self.commit(name, tmp):
                        written.append(name)
                    staged[i] = (name, "")
            except BaseException:
                for name, tmp in staged:
                    if tmp:
                        self.unstage(name, tmp)
                for name in reversed(written):
                    with contextlib.suppress(VaultError):
                        self.delete(name)
                raise
        return written

    def stage_all(self, files: Sequence[tuple[str, bytes]]) -> builtins.list[tuple[str, str]]:
        """:meth:`stage` of each (name, temp file name; none for a name that already holds these
        bytes), all durable when this returns, at the cost of their own fsyncs, made in parallel, or,
        for many files where the system has it (:func:`file_system_sync`), of one sync of each file
        system they are on, and one fsync per directory: where :meth:`stage` makes two fsyncs per
        file one after the other (a passphrase change stages a segment per compartment).
        If one cannot be staged, none stays and the error is raised."""
        if len(files) == 1:  # (an interactive append: no pool)
            tmp = self.stage(*files[0])
            return [] if tmp is None else [(files[0][0], tmp)]
        whole = file_system_sync() if len(files) >= SYNC_WHOLE_FILES else None
        with self._directories_synced_at_the_end(whole):
            return self._stage_each(files, whole)

    def _stage_each(self, files: Sequence[tuple[str, bytes]],
                    whole: WholeSync | None) -> builtins.list[tuple[str, str]]:
        """What :meth:`stage_all` does, inside the caller's :meth:`_directories_synced_at_the_end`:
        each file's bytes durable before this returns, after every temp file is written (a sync of
        the whole file system then makes each file's bytes durable before its name appears, as its
        own fsync would: 5,000 files of 4 KiB in a new folder, 0.73 s with an fsync each on 8 threads ->
        0.15 s)."""
        if not files:
            return []
        # (before the threads: each made, and the parents of those made synced, once)
        make_dirs_durable(*sorted({os.path.dirname(self._path(name)) for name, _ in files}))
        staged: builtins.list[tuple[str, str]] = []
        failure: BaseException | None = None
        results = iopool.run_all([functools.partial(self.stage, name, data, sync=whole is None) for name, data in files])
        for (name, _data), tmp in zip(files, results):
            if isinstance(tmp, BaseException):  # the first failure is raised once all are done
                failure = failure or tmp
            elif tmp is not None:
                staged.append((name, tmp))
        if whole is not None and failure is None:  # every temp file written: synced at once
            try:
                whole({os.path.dirname(self._path(name)) for name, _ in files})
            except OSError as exc:
                failure = StorageError(f"cannot write to {self.location}: {exc.strerror}")
        if failure is not None:
            for name, tmp in staged:
                self.unstage(name, tmp)
            raise failure
        return staged

    def after_write(self, *, all_due: bool = False) -> None:
        """Upkeep after an acknowledged write (an object store packs small segments, spec §4.7.1;
        ``all_due``: every pack due now, after a merge or an unpack); nothing for a folder."""

    def delete_all(self, names: Iterable[str]) -> None:
        """:meth:`delete` each, with one fsync per directory at the end."""
        with self._directories_synced_at_the_end():
            for name in names:
                self.delete(name)

    def commit(self, name: str, tmp: str, *, sync: bool = True) -> bool:
        """The second half of :meth:`write`: move the staged temp file to ``name`` **create-only**
        and fsync the directory (spec §4.4; not with ``sync`` False: an object store's mirror, where
        the store already holds the durable copy).  The move is link(2) then unlink of the temp name,
        which fails instead of replacing a file that appeared meanwhile (rename(2) would replace
        it); where the file system has no hard links, a rename that refuses an existing name
        (Windows) or, on POSIX, a rename after checking that the name is free.  False when there is
        nothing to do: the name already holds these bytes, or the temp file is gone (committed
        before).  A name holding other bytes raises StorageError and is left as it is.  On any other
        failure the temp file stays, for a later commit (or :meth:`unstage`)."""
        path = self._path(name)
        directory = os.path.dirname(path)
        staged = os.path.join(directory, tmp)
        self._touch(name, written=True)
        try:
            try:
                os.link(staged, path)
            except OSError as exc:
                if exc.errno not in _NO_HARD_LINKS:
                    raise
                if os.name != "nt" and os.path.lexists(path):
                    raise FileExistsError(errno.EEXIST, "exists", path) from None
                os.rename(staged, path)  # Windows: refuses an existing name; POSIX: checked just above
            else:
                os.unlink(staged)
            if sync:
                self._sync_dir(directory)
        except FileExistsError:
            return self._settle_existing(name, path, staged, tmp)
        except FileNotFoundError:
            return False
        except OSError as exc:
            raise self._write_error(name, exc) from None
        return True

    def _settle_existing(self, name: str, path: str, staged: str, tmp: str) -> bool:
        """``name`` appeared before the staged file could take it: identical bytes are success (rule
        1 of spec §4.4), other bytes are refused (rule 2) and both files are left alone except the
        temp file, which is dropped."""
        try:
            with open(path, "rb") as a, open(staged, "rb") as b:
                same = a.read() == b.read()
        except FileNotFoundError:
            return False  # the temp file was committed by another process meanwhile
        except OSError as exc:
            raise self._write_error(name, exc) from None
        self.unstage(name, tmp)
        if not same:
            raise StorageError(f"{name} already exists with different content; refusing to overwrite", file=name)
        return False

    def unstage(self, name: str, tmp: str) -> None:
        """Drop a staged temp file that will not be committed."""
        try:
            os.unlink(os.path.join(os.path.dirname(self._path(name)), tmp))
        except OSError:
            pass

    def _touch(self, name: str, *, written: bool = False) -> None:
        """A file is written or deleted here: its directory's listing is not kept until listed again
        (listing_changes), and is read first if it was taken on trust (prime_lazily) and a file goes.
        A directory taken on trust that a file was ``written`` into stays so, its kept listing dropped
        (listing_changes): the next open lists it and compares it with the segments the state holds
        there (an append at a million records otherwise read a listing of some 400 names at its first
        write into each of the 256 directories)."""
        rel = name.rsplit("/", 1)[0]
        if rel in self._lazy and not written:
            self._materialize(rel)
        if rel.startswith("segments/"):
            self._touched.add(rel)

    def _write_error(self, name: str, exc: OSError) -> VaultError:
        if exc.errno == errno.ENOSPC:
            return StorageError(f"the disk is full; {name} was not written and the vault is unchanged", file=name)
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return ReadOnlyVault(f"cannot write to {self.location} ({exc.strerror}); the vault is unchanged")
        return StorageError(f"cannot write {name}: {exc.strerror}", file=name)

    def delete(self, name: str) -> None:
        if not self.writable:
            raise ReadOnlyVault(f"the vault folder {self.location} is read-only")
        path = self._path(name)
        self._touch(name)
        try:
            os.unlink(path)
            self._sync_dir(os.path.dirname(path))
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise StorageError(f"cannot delete {name}: {exc.strerror}", file=name) from None

    def close(self) -> None:
        for reader in self._packs.values():
            reader.close()
        self._packs.clear()


# errno values of link(2) on a file system without hard links (FAT, exFAT, some network and FUSE
# mounts): commit falls back to a rename that does not replace (spec §4.4)
_NO_HARD_LINKS = frozenset(e for e in (getattr(errno, n, None) for n in ("EPERM", "ENOTSUP", "EOPNOTSUPP", "ENOSYS",
                                                                          "EMLINK", "EXDEV", "EACCES"))
                           if e is not None)

FILE_MODE = 0o600  # vault files, before the umask (spec §4.4)
SYNC_WHOLE_FILES = 64  # write_all syncs the file system once, not each file, from this many files on
DIRECTORY_MODE = 0o700  # directories a writer creates in or for a vault, before the umask


def fsync_dir(directory: str) -> None:
    """Make the entries of a directory (a file created, renamed or deleted in it) survive a power cut."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs_durable(*directories: str, mode: int = DIRECTORY_MODE) -> None:
    """``os.makedirs`` of each, whose result survives a power cut: a new directory's entry lives in
    its parent, so the parent of each directory created here is fsynced, once, before this returns
    (POSIX makes a directory entry durable only then; a file fsynced inside a directory that is not
    is lost).  A key change's segments go to new directories of one parent: one fsync, not one each."""
    parents: set[str] = set()
    for directory in directories:
        missing = []
        d = os.path.abspath(directory)
        while not os.path.isdir(d):
            missing.append(d)
            parent = os.path.dirname(d)
            if parent == d:
                break
            d = parent
        for d in reversed(missing):
            try:
                os.mkdir(d, mode)
            except FileExistsError:
                pass  # another process made it; its entry may not be durable yet, so fsync anyway
            parents.add(os.path.dirname(d))
    fsync_dirs(parents)


def fsync_dirs(directories: Iterable[str]) -> None:
    """:func:`fsync_dir` of each, at once on several threads when there are several (each waits on
    the disk, not the processor: a key change syncs a dozen directories one after the other)."""
    for outcome in iopool.run_all([functools.partial(fsync_dir, directory) for directory in sorted(set(directories))]):
        if isinstance(outcome, BaseException):
            raise outcome  # (the first failure, once all are done)
