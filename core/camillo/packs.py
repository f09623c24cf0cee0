"""Pack files: many vault files in one, for transport (``.vmem``) and for cold storage (spec §13).

Layout::

    "VMEMPACK" ‖ u16 version = 1 ‖ u16 flags ‖ entry bytes ... ‖ index ‖ trailer (56 bytes)
    index   = CBOR [[type, name, offset, length], ...] sorted by (type, name)
              type 1 descriptor, 2 slot, 3 envelope, 4 segment; name is the file's path in a folder
    trailer = index_offset u64 ‖ index_len u32 ‖ count u32 ‖ SHA-256(every byte before the trailer) ‖ "VMEMEND1"

Entries are the exact bytes of the files, in index order, so the same set of files always gives the
same pack, byte for byte.  A ``.vmem`` file (flag bit 0 set) holds a whole vault; a pack inside a
vault folder (``packs/<sha256>.pack``, flag 0) holds segments only.  Packing never re-encrypts.

Pure functions plus a reader over an open file; the reader is confined to the thread that made it.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from functools import partial
from typing import BinaryIO, NamedTuple

from . import encoding
from .errors import DamagedFile, NotAVault, UnsupportedVersion
from .names import kind_of

MAGIC = b"VMEMPACK"
END = b"VMEMEND1"
HEADER_LEN = 12
TRAILER_LEN = 56
FLAG_COMPLETE_VAULT = 1

TYPE_DESCRIPTOR = 1
TYPE_SLOT = 2
TYPE_ENVELOPE = 3
TYPE_SEGMENT = 4
TYPE_BLOB = 5  # an attachment chunk (spec §9.5)
MIN_ENTRY = {TYPE_DESCRIPTOR: 8, TYPE_SLOT: 4096, TYPE_ENVELOPE: 4096, TYPE_SEGMENT: 4096, TYPE_BLOB: 4096}


_TYPES = {"descriptor": TYPE_DESCRIPTOR, "slot": TYPE_SLOT, "envelope": TYPE_ENVELOPE, "segment": TYPE_SEGMENT,
          "blob": TYPE_BLOB}


def entry_type(name: str) -> int:
    """The pack entry type of a canonical vault file name; ValueError for any other name."""
    typ = _TYPES.get(kind_of(name) or "")
    if typ is None:
        raise ValueError(f"{name!r} does not belong in a pack")
    return typ


def write_pack(entries: Iterable[tuple[str, bytes]], out: BinaryIO, *, complete_vault: bool) -> tuple[int, bytes]:
    """Write a pack of these entries to the binary file ``out``; return (size, SHA-256 of the whole
    pack).  An entry shorter than any writer makes one of its kind is refused (DamagedFile) before
    anything is written: a reader refuses the whole pack for it."""
    held = list(entries)
    for name, data in held:
        _check_length(name, len(data))
    return stream_pack([(name, partial(bytes, data)) for name, data in held], out, complete_vault=complete_vault)


def stream_pack(entries: Iterable[tuple[str, Callable[[], bytes]]], out: BinaryIO, *,
                complete_vault: bool) -> tuple[int, bytes]:
    """:func:`write_pack` of entries given as a name and what reads its bytes, each read when its turn
    comes and let go once written: what is held at once is one file, not the vault (a ``.vmem`` of a
    million records held its 511 MB).  An entry too short for its kind raises DamagedFile when it is
    met: the caller discards what was written (a pack without its trailer is refused anyway)."""
    ordered = sorted(((entry_type(n), n, read) for n, read in entries), key=lambda e: (e[0], e[1]))
    before_trailer = hashlib.sha256()

    def emit(chunk: bytes) -> None:
        before_trailer.update(chunk)
        out.write(chunk)

    emit(MAGIC + (1).to_bytes(2, "big") + (FLAG_COMPLETE_VAULT if complete_vault else 0).to_bytes(2, "big"))
    offset = HEADER_LEN
    index = []
    for typ, name, read in ordered:
        data = read()
        _check_length(name, len(data))
        index.append([typ, name, offset, len(data)])
        emit(data)
        offset += len(data)
    index_bytes = encoding.encode(index)
    emit(index_bytes)
    trailer = (
        offset.to_bytes(8, "big")
        + len(index_bytes).to_bytes(4, "big")
        + len(index).to_bytes(4, "big")
        + before_trailer.digest()
        + END
    )
    out.write(trailer)
    whole = before_trailer.copy()
    whole.update(trailer)
    return offset + len(index_bytes) + TRAILER_LEN, whole.digest()


def _check_length(name: str, length: int) -> None:
    if length < MIN_ENTRY[entry_type(name)]:
        raise DamagedFile(f"{name} is {length} bytes, shorter than any {kind_of(name)} file; it is damaged "
                          "or not a vault file: run 'camillo verify', and move it out of the vault before "
                          "packing", file=name)


class PackEntry(NamedTuple):
    type: int
    name: str
    offset: int
    length: int


def parse_trailer(trailer: bytes, size: int, name: str) -> tuple[int, int, int, bytes]:
    """The trailer of a pack of ``size`` bytes: (index offset, index length, entry count, SHA-256 of
    every byte before the trailer); DamagedFile when it is missing or points outside the pack."""
    if len(trailer) != TRAILER_LEN or trailer[48:56] != END:
        raise DamagedFile(f"{name} is truncated or damaged: its trailer is missing", file=name)
    index_offset = int.from_bytes(trailer[0:8], "big")
    index_len = int.from_bytes(trailer[8:12], "big")
    count = int.from_bytes(trailer[12:16], "big")
    if not index_offset >= HEADER_LEN or index_offset + index_len != size - TRAILER_LEN:
        raise DamagedFile(f"{name}: the trailer points outside the file", file=name)
    if count > (index_offset - HEADER_LEN) // 8 + 1:
        raise DamagedFile(f"{name}: the trailer claims {count} entries, more than the file can hold", file=name)
    return index_offset, index_len, count, trailer[16:48]


def parse_index(data: bytes, count: int, index_offset: int, name: str) -> list[PackEntry]:
    """A pack's index (CBOR), checked: ``count`` entries of known types under canonical names,
    sorted, filling the pack from its header to ``index_offset`` with no gap or overlap."""
    index = encoding.decode_rows(data, f"{name} index", 4, max_len=len(data))
    if not isinstance(index, list) or len(index) != count:
        raise DamagedFile(f"{name}: the index does not list {count} entries", file=name)
    entries = []
    expected_offset = HEADER_LEN
    previous: tuple[int, str] | None = None
    for item in index:
        if not isinstance(item, list) or len(item) != 4:
            raise DamagedFile(f"{name}: malformed index entry", file=name)
        typ, entry_name, offset, length = item
        if type(typ) is not int or type(entry_name) is not str or type(offset) is not int or type(length) is not int:
            raise DamagedFile(f"{name}: malformed index entry", file=name)
        if offset != expected_offset or typ not in MIN_ENTRY or length < MIN_ENTRY[typ]:
            raise DamagedFile(f"{name}: index entry {entry_name!r} is out of place", file=name)
        try:
            if entry_type(entry_name) != typ:
                raise ValueError
        except ValueError:
            raise DamagedFile(f"{name}: index entry {entry_name!r} has the wrong type", file=name) from None
        key = (typ, entry_name)
        if previous is not None and key <= previous:
            raise DamagedFile(f"{name}: the index is not sorted", file=name)
        previous = key
        expected_offset += length
        entries.append(PackEntry(typ, entry_name, offset, length))
    if expected_offset != index_offset:
        raise DamagedFile(f"{name}: entries do not fill the pack", file=name)
    return entries


class PackReader:
    """Random access to the entries of one pack file, after checking its trailer and index."""

    def __init__(self, path: str, *, verify_hash: bool = True) -> None:
        self.path = path
        try:
            self._fh = open(path, "rb")  # noqa: SIM115 - kept open for random access, closed in close()
        except OSError as exc:
            raise NotAVault(f"cannot open {path}: {exc.strerror}") from None
        try:
            self.flags, self.entries = self._read_index(verify_hash)
        except Exception:
            self._fh.close()
            raise
        self.by_name = {e.name: e for e in self.entries}

    def _read_index(self, verify_hash: bool) -> tuple[int, list[PackEntry]]:
        fh = self._fh
        size = os.fstat(fh.fileno()).st_size
        name = os.path.basename(self.path)
        if size < HEADER_LEN + TRAILER_LEN:
            raise NotAVault(f"{name} is too short to be a VMEM pack")
        head = fh.read(HEADER_LEN)
        if head[:8] != MAGIC:
            raise NotAVault(f"{name} is not a VMEM pack (it does not start with VMEMPACK)")
        version = int.from_bytes(head[8:10], "big")
        if version != 1:
            raise UnsupportedVersion(f"{name} is a version {version} pack; a newer Camillo is required")
        flags = int.from_bytes(head[10:12], "big")
        if flags & ~FLAG_COMPLETE_VAULT:
            raise UnsupportedVersion(f"{name} sets pack flags this Camillo does not know")
        fh.seek(size - TRAILER_LEN)
        index_offset, index_len, count, digest = parse_trailer(fh.read(TRAILER_LEN), size, name)
        if verify_hash:
            h = hashlib.sha256()
            fh.seek(0)
            remaining = size - TRAILER_LEN
            while remaining:
                chunk = fh.read(min(remaining, 1 << 20))
                if not chunk:
                    raise DamagedFile(f"{name} is truncated", file=name)
                h.update(chunk)
                remaining -= len(chunk)
            if h.digest() != digest:
                raise DamagedFile(f"{name} is damaged: its checksum does not match its contents", file=name)
        fh.seek(index_offset)
        return flags, parse_index(fh.read(index_len), count, index_offset, name)

    def read(self, name: str) -> bytes:
        entry = self.by_name[name]
        self._fh.seek(entry.offset)
        data = self._fh.read(entry.length)
        if len(data) != entry.length:
            raise DamagedFile(f"{os.path.basename(self.path)} is truncated at {name}", file=name)
        return data

    def close(self) -> None:
        self._fh.close()
