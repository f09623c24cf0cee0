"""The encrypted cache of the materialised state, so a warm open reads only new segments (spec §18.3).

The cache is the state's SQLite database, serialised with ``sqlite3.Connection.serialize`` and
sealed (XChaCha20-Poly1305 with key commitment, :mod:`camillo.localstate`) under a key derived from
the actor's own seed and the vault id, in chunks of 1 MiB: ``magic ‖ u32 chunk count ‖ u64 image
length ‖ (u32 length ‖ sealed chunk)*``, where chunk *i* of *n* is sealed under the purpose
``cache/i/n/length``, so no chunk can be moved, dropped, repeated or taken from another cache.  At a
million records the image is over a gigabyte, and one AEAD call over it held the interpreter lock
for seconds (the GUI thread froze); a chunk holds it for about a millisecond.  Besides records and
facts the database holds what the reader pipeline needs to resume: each batch's header, signatures
and control records, and which segment files were already processed.

It is disposable: deleting it loses nothing.  A cache that does not open (another vault, another
actor, tampering, an older cache format) or that belongs to an older master-secret generation
(erasure rolls the generation and requires caches to be purged) is discarded and rebuilt from the
vault's files.  No plaintext ever reaches disk: the database lives in memory and only its sealed
serialisation is written.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import mmap
import os
import sqlite3
from collections.abc import Iterator
from typing import Any

from . import encoding
from .errors import VaultError
from .keys import local_key
from .localstate import atomic_write, open_local, seal_local

CACHE_FORMAT = 7
MAGIC = b"VMEMCACH\x02"
CHUNK = 1 << 20
_HEAD = len(MAGIC) + 4 + 8
_SEALED_MAX = CHUNK + 256  # a sealed chunk: the chunk and the local-file overhead


class Cache:
    def __init__(self, path: str, secret: bytes, vault_id: bytes) -> None:
        self.path = path
        self.vault_id = vault_id
        self._key = local_key(secret, "cache", vault_id)

    def load(self, generation: int) -> sqlite3.Connection | None:
        """The cached database, or None when there is none or it must not be trusted."""
        try:
            image = self._read_image()
            if image is None:
                return None
            # A deserialised database lives in SQLite's memdb, which refuses to grow past 1 GiB
            # ("database or disk is full", reached by a million records): copy it into an ordinary
            # in-memory database, which grows as memory allows.
            loaded = sqlite3.connect(":memory:")
            try:
                loaded.deserialize(image)
            finally:
                image.close()
            db = sqlite3.connect(":memory:")
            loaded.backup(db)
            loaded.close()
            meta = dict(db.execute("SELECT key, value FROM cache_meta"))
            if (
                encoding.decode(meta.get("format", b"\x00")) != CACHE_FORMAT
                or encoding.decode(meta.get("generation", b"\x00")) != generation
                or meta.get("vault") != self.vault_id
            ):
                db.close()
                self.discard()
                return None
            return db
        except (VaultError, sqlite3.DatabaseError, ValueError, TypeError, MemoryError, OSError):
            self.discard()
            return None

    def _read_image(self) -> mmap.mmap | None:
        """Read and open the chunks one at a time into one buffer (never the whole file at once).
        The buffer is anonymous memory from the kernel: a bytearray of a gigabyte is zero-filled
        first, half a second holding the interpreter lock."""
        try:
            fh = open(self.path, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise ValueError(f"cannot read {self.path}: {exc.strerror}") from None
        with fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(_HEAD)
            if len(head) != _HEAD or not head.startswith(MAGIC):
                raise ValueError("not a Camillo cache (or an older one)")
            count = int.from_bytes(head[len(MAGIC):len(MAGIC) + 4], "big")
            length = int.from_bytes(head[len(MAGIC) + 4:], "big")
            # checked against the file's size before anything is allocated for them
            if not 1 <= count <= size // 32 or not (count - 1) * CHUNK < length <= min(count * CHUNK, size):
                raise ValueError("the cache's chunk count and length disagree with each other or the file")
            image = mmap.mmap(-1, length)
            try:
                self._fill(fh, image, count, length)
            except BaseException:
                image.close()
                raise
        return image

    def _fill(self, fh: Any, image: mmap.mmap, count: int, length: int) -> None:
        offset = 0
        for i in range(count):
            n = int.from_bytes(fh.read(4), "big")
            if not 0 < n <= _SEALED_MAX:
                raise ValueError(f"cache chunk {i} has an impossible length")
            sealed = fh.read(n)
            if len(sealed) != n:
                raise ValueError("the cache is truncated")
            chunk = open_local(self._key, f"cache/{i}/{count}/{length}", self.vault_id, sealed, self.path)
            if len(chunk) != min(CHUNK, length - offset):
                raise ValueError(f"cache chunk {i} has the wrong size")
            image[offset:offset + len(chunk)] = chunk
            offset += len(chunk)
        if fh.read(1):
            raise ValueError("the cache has bytes after its last chunk")

    def sealed_chunks(self, image: bytes | memoryview) -> Iterator[bytes]:
        """The cache file for a serialised database, piece by piece (:meth:`save` streams them)."""
        view = memoryview(image)
        length = len(view)
        count = max(1, -(-length // CHUNK))
        yield MAGIC + count.to_bytes(4, "big") + length.to_bytes(8, "big")
        for i in range(count):
            sealed = seal_local(self._key, f"cache/{i}/{count}/{length}", self.vault_id,
                                bytes(view[i * CHUNK:(i + 1) * CHUNK]))
            yield len(sealed).to_bytes(4, "big") + sealed

    def save(self, db: sqlite3.Connection, generation: int) -> None:
        db.executemany(
            "INSERT OR REPLACE INTO cache_meta(key, value) VALUES(?, ?)",
            [("format", encoding.encode(CACHE_FORMAT)), ("generation", encoding.encode(generation)),
             ("vault", self.vault_id)],
        )
        db.commit()
        atomic_write(self.path, self.sealed_chunks(db.serialize()))

    def discard(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
