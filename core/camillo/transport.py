"""Moving a vault as one file: pack a folder into a ``.vmem``, unpack it into a folder.

Packing needs no key: it copies the vault's files (descriptor, slots, envelopes, attachment chunks, segments, including
segments already inside folder packs) into one deterministic pack (:mod:`camillo.packs`), so the
same vault state always gives the same bytes.  Unpacking writes every entry to its canonical path
after checking that content-addressed entries hash to their names.

Any thread may call these on paths no open vault is writing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from functools import partial

from . import descriptor
from .errors import DamagedFile, NotAVault, StorageError, UsageError
from .names import kind_of
from .objectstore import open_location
from .packs import PackReader, stream_pack
from .places import PATH_ERRNOS, check_new_file
from .primitives import random_bytes
from .storage import DIRECTORIES, FolderShelf, Shelf, hash_matches


def pack_vault(path: str, out_path: str, *, replace: bool = True) -> tuple[int, bytes]:
    """Write ``out_path`` (a ``.vmem``); return (size, SHA-256).  Never inside a vault folder (the
    one packed or another); an existing file only with ``replace``."""
    check_new_file(out_path, "the .vmem file")
    if not replace and os.path.lexists(out_path):
        raise UsageError(f"{out_path} already exists; choose a new file name, or replace it on purpose "
                         "(camillo pack --force)")
    shelf = open_location(path)
    try:
        if not shelf.exists(descriptor.NAME):
            raise NotAVault(f"{path} is not a VMEM vault (no VMEM descriptor)")
        descriptor.decode(shelf.read(descriptor.NAME))
        names = [n for n in shelf.list() if kind_of(n) in ("descriptor", "slot", "envelope", "segment", "blob")]

        def read(name: str) -> bytes:  # (each file read when its turn comes: one held at a time)
            data = shelf.read(name)
            if hash_matches(name, data) is False:
                raise DamagedFile(f"{name} does not match its name; run 'camillo verify' before packing", file=name)
            return data

        directory = os.path.dirname(os.path.abspath(out_path))
        tmp = os.path.join(directory, f".{os.path.basename(out_path)}.{random_bytes(6).hex()}.tmp")
        try:
            with open(tmp, "wb") as fh:
                size, digest = stream_pack([(n, partial(read, n)) for n in names], fh, complete_vault=True)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, out_path)
        except BaseException as exc:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            if not isinstance(exc, OSError) or not _ours(exc, tmp, out_path):  # (an entry refused, the vault's
                raise  # own read failing, or an interruption: as they are)
            if exc.errno in PATH_ERRNOS:  # the place chosen, not the vault: say where to write instead
                raise UsageError(f"cannot write {out_path} ({exc.strerror}); choose a folder you can write to") from None
            raise StorageError(f"cannot write {out_path}: {exc.strerror}") from None
    finally:
        shelf.close()
    return size, digest


def _ours(exc: OSError, *paths: str) -> bool:
    """Whether this error is about writing the pack (the file made or its place), not reading the vault."""
    return exc.filename is None or exc.filename in paths


def unpack_vault(pack_path: str, directory: str) -> int:
    """Unpack a ``.vmem`` into an empty (or new) folder; return the number of files written.  The
    files are written in chunks, as a merge writes them (:func:`write_chunked`), the descriptor last:
    a folder an interrupted unpack left is no vault, and an unpack into it says it holds part of one."""
    reader = PackReader(pack_path)
    try:
        names = [e.name for e in reader.entries]
        if descriptor.NAME not in names:
            raise NotAVault(f"{pack_path} holds no vault descriptor; it is not a complete .vmem")
        shelf = open_location(directory, create=True)

        def files() -> Iterator[tuple[str, bytes]]:
            for name in names:
                data = reader.read(name)
                if hash_matches(name, data) is False:
                    raise DamagedFile(f"{os.path.basename(pack_path)}: entry {name} does not match its name",
                                      file=name)
                if name != descriptor.NAME:
                    yield name, data

        count = len(write_chunked(shelf, files(), every=True))
        shelf.write(descriptor.NAME, reader.read(descriptor.NAME))
        shelf.after_write(all_due=True)  # an object store: its segments packed now, not over later writes
        return count + 1
    finally:
        reader.close()


def loose_missing(source: str, target: str) -> list[str] | None:
    """The names of the vault files loose in folder ``source`` that folder ``target`` does not
    hold loose: one listing of each directory on both sides (names only, in C), without the
    shelf's incremental bookkeeping, which a merge of two folders does not need (a listing of both
    at a million records: 1.1 s -> 0.2 s).  None when either side holds packs (their segments count
    as its files: the shelves' own listings decide)."""
    if any(os.path.isdir(p) and os.listdir(p) for p in (os.path.join(source, "packs"), os.path.join(target, "packs"))):
        return None
    missing: list[str] = []
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            have = set(os.listdir(os.path.join(target, rel) if rel else target))
        except (FileNotFoundError, NotADirectoryError):
            have = set()
        try:
            with os.scandir(os.path.join(source, rel) if rel else source) as entries:
                for e in entries:
                    if e.name.startswith("."):
                        continue
                    child = f"{rel}/{e.name}" if rel else e.name
                    if e.is_dir(follow_symlinks=False):
                        if rel or e.name in DIRECTORIES:
                            stack.append(child)
                    elif e.name not in have and kind_of(child):
                        missing.append(child)
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise StorageError(f"cannot list {os.path.join(source, rel)}: {exc.strerror}") from None
    return missing


# a merge or an unpack writes its files this many at a time (or this many bytes): memory stays bounded
MERGE_CHUNK_FILES = 8192
MERGE_CHUNK_BYTES = 32 * 1024 * 1024


def write_chunked(shelf: Shelf, files: Iterable[tuple[str, bytes]], *, every: bool = False) -> list[str]:
    """Write ``files`` to ``shelf`` a chunk at a time (MERGE_CHUNK_FILES files or MERGE_CHUNK_BYTES
    bytes: memory stays bounded); a folder writes each chunk at once (storage.FolderShelf.write_all:
    each file durable before its name appears, with one sync of the file system or an fsync of each,
    and one fsync per directory, not three fsyncs per file), where a file that cannot be written takes
    its chunk's other new files with it and the error is raised.  Returns the names written (``every``:
    also those that already held these bytes)."""
    written: list[str] = []
    pending: list[tuple[str, bytes]] = []
    size = 0

    def flush() -> None:
        if isinstance(shelf, FolderShelf):
            new = set(shelf.write_all(pending))
        else:
            new = {n for n, d in pending if shelf.write(n, d)}
        written.extend(n for n, _ in pending if every or n in new)
        pending.clear()

    for name, data in files:
        pending.append((name, data))
        size += len(data)
        if len(pending) >= MERGE_CHUNK_FILES or size >= MERGE_CHUNK_BYTES:
            flush()
            size = 0
    flush()
    return written


def merge_into(path: str, other: str) -> list[str]:
    """Copy into the vault folder ``path`` every vault file of ``other`` (a folder or ``.vmem``)
    that it lacks; return the names copied.  The union of files is the merge: the state computed
    from it does not depend on the order in which files arrived (spec §17).  Refuses a different
    vault; never overwrites anything.  Files are written a chunk at a time, each durable before its
    name appears, with one sync of the file system (or an fsync of each file) and one fsync per
    directory per chunk (storage.FolderShelf.write_all), not three fsyncs per file: a file that
    cannot be written takes its chunk's other new files with it, and the error is raised."""
    target = open_location(path)
    source = open_location(other)
    try:
        if not target.exists(descriptor.NAME):
            raise NotAVault(f"{path} is not a VMEM vault (no VMEM descriptor)")
        mine = descriptor.decode(target.read(descriptor.NAME))
        if not source.exists(descriptor.NAME):
            raise NotAVault(f"{other} is not a VMEM vault (no VMEM descriptor)")
        theirs = descriptor.decode(source.read(descriptor.NAME))
        if mine.vault_id != theirs.vault_id:
            raise NotAVault(
                f"{other} is a different vault ({theirs.vault_id.hex()[:12]}, not {mine.vault_id.hex()[:12]}); "
                "only copies of the same vault can be merged"
            )
        # (two folders on disk: not an object store, whose local mirror need not hold all its files)
        fast = (loose_missing(source.root, target.root) if type(target) is FolderShelf
                and type(source) is FolderShelf else None)
        names = fast if fast is not None else sorted(set(source.list()) - set(target.list()))

        def files() -> Iterator[tuple[str, bytes]]:
            for name in names:
                if kind_of(name) not in ("slot", "envelope", "segment", "blob"):
                    continue
                data = source.read(name)
                if hash_matches(name, data) is not False:  # (a partial or damaged file in the other copy:
                    yield name, data                       # skipped, verify names it there)

        copied = write_chunked(target, files())
        if copied:
            target.after_write(all_due=True)
        return copied
    finally:
        source.close()
        target.close()
