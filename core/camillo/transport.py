"""Moving a vault as one file: pack a folder into a ``.vmem``, unpack it into a folder.

Packing needs no key: it copies the vault's files (descriptor, slots, envelopes, attachment chunks, segments, including
segments already inside folder packs) into one deterministic pack (:mod:`camillo.packs`), so the
same vault state always gives the same bytes.  Unpacking writes every entry to its canonical path
after checking that content-addressed entries hash to their names.

Any thread may call these on paths no open vault is writing.
"""

from __future__ import annotations

import os

from . import descriptor
from .errors import DamagedFile, NotAVault, StorageError, UsageError
from .names import kind_of
from .objectstore import open_location
from .packs import PackReader, write_pack
from .primitives import random_bytes
from .storage import PATH_ERRNOS, FolderShelf, check_new_file, hash_matches


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
        entries = []
        for name in shelf.list():
            if kind_of(name) in ("descriptor", "slot", "envelope", "segment", "blob"):
                data = shelf.read(name)
                if hash_matches(name, data) is False:
                    raise DamagedFile(f"{name} does not match its name; run 'camillo verify' before packing", file=name)
                entries.append((name, data))
    finally:
        shelf.close()
    directory = os.path.dirname(os.path.abspath(out_path))
    tmp = os.path.join(directory, f".{os.path.basename(out_path)}.{random_bytes(6).hex()}.tmp")
    try:
        with open(tmp, "wb") as fh:
            size, digest = write_pack(entries, fh, complete_vault=True)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, out_path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if exc.errno in PATH_ERRNOS:  # the place chosen, not the vault: say where to write instead
            raise UsageError(f"cannot write {out_path} ({exc.strerror}); choose a folder you can write to") from None
        raise StorageError(f"cannot write {out_path}: {exc.strerror}") from None
    return size, digest


def unpack_vault(pack_path: str, directory: str) -> int:
    """Unpack a ``.vmem`` into an empty (or new) folder; return the number of files written."""
    reader = PackReader(pack_path)
    try:
        names = [e.name for e in reader.entries]
        if descriptor.NAME not in names:
            raise NotAVault(f"{pack_path} holds no vault descriptor; it is not a complete .vmem")
        shelf = open_location(directory, create=True)
        count = 0
        for name in names:
            data = reader.read(name)
            if hash_matches(name, data) is False:
                raise DamagedFile(f"{os.path.basename(pack_path)}: entry {name} does not match its name", file=name)
            if name == descriptor.NAME:
                continue
            shelf.write(name, data)
            count += 1
        shelf.write(descriptor.NAME, reader.read(descriptor.NAME))
        shelf.after_write(all_due=True)  # an object store: its segments packed now, not over later writes
        return count + 1
    finally:
        reader.close()


# a merge writes the files it copies this many at a time (or this many bytes): memory stays bounded
MERGE_CHUNK_FILES = 256
MERGE_CHUNK_BYTES = 32 * 1024 * 1024


def merge_into(path: str, other: str) -> list[str]:
    """Copy into the vault folder ``path`` every vault file of ``other`` (a folder or ``.vmem``)
    that it lacks; return the names copied.  The union of files is the merge: the state computed
    from it does not depend on the order in which files arrived (spec §17).  Refuses a different
    vault; never overwrites anything.  Files are written a chunk at a time, each durable before its
    name appears, with one fsync per directory per chunk (not three per file): a file that cannot be
    written takes its chunk's other new files with it, and the error is raised."""
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
        have = set(target.list())
        copied: list[str] = []
        pending: list[tuple[str, bytes]] = []

        def write_pending() -> None:  # a folder writes them in parallel, each directory fsynced once
            if isinstance(target, FolderShelf):
                target.write_all(pending)
            else:
                for n, d in pending:
                    target.write(n, d)
            copied.extend(n for n, _ in pending)
            pending.clear()

        for name in source.list():
            if name in have or kind_of(name) not in ("slot", "envelope", "segment", "blob"):
                continue
            data = source.read(name)
            if hash_matches(name, data) is False:
                continue  # a partial or damaged file in the other copy: skip it, verify names it there
            pending.append((name, data))
            if len(pending) >= MERGE_CHUNK_FILES or sum(len(d) for _, d in pending) >= MERGE_CHUNK_BYTES:
                write_pending()
        write_pending()
        if copied:
            target.after_write(all_due=True)
        return copied
    finally:
        source.close()
        target.close()
