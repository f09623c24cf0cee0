"""The encrypted cache of the materialised state, so a warm open reads only new segments (spec §18.3).

The cache is the state's SQLite database, serialised with ``sqlite3.Connection.serialize`` and
sealed (XChaCha20-Poly1305 with key commitment, :mod:`camillo.localstate`) under a key derived from
the actor's own seed and the vault id.  Besides records and facts the database holds what the
reader pipeline needs to resume: each batch's header, signatures and control records, and which
segment files were already processed.

It is disposable: deleting it loses nothing.  A cache that does not open (another vault, another
actor, tampering, an older cache format) or that belongs to an older master-secret generation
(erasure rolls the generation and requires caches to be purged) is discarded and rebuilt from the
vault's files.  No plaintext ever reaches disk: the database lives in memory and only its sealed
serialisation is written.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import os
import sqlite3

from . import encoding
from .errors import VaultError
from .keys import local_key
from .localstate import atomic_write, open_local, read_file, seal_local

CACHE_FORMAT = 6


class Cache:
    def __init__(self, path: str, secret: bytes, vault_id: bytes) -> None:
        self.path = path
        self.vault_id = vault_id
        self._key = local_key(secret, "cache", vault_id)

    def load(self, generation: int) -> sqlite3.Connection | None:
        """The cached database, or None when there is none or it must not be trusted."""
        data = read_file(self.path)
        if data is None:
            return None
        try:
            raw = open_local(self._key, "cache", self.vault_id, data, self.path)
            del data
            # A deserialised database lives in SQLite's memdb, which refuses to grow past 1 GiB
            # ("database or disk is full", reached by a million records): copy it into an ordinary
            # in-memory database, which grows as memory allows.
            loaded = sqlite3.connect(":memory:")
            loaded.deserialize(raw)
            del raw
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
        except (VaultError, sqlite3.DatabaseError, ValueError, TypeError):
            self.discard()
            return None

    def save(self, db: sqlite3.Connection, generation: int) -> None:
        db.executemany(
            "INSERT OR REPLACE INTO cache_meta(key, value) VALUES(?, ?)",
            [("format", encoding.encode(CACHE_FORMAT)), ("generation", encoding.encode(generation)),
             ("vault", self.vault_id)],
        )
        db.commit()
        atomic_write(self.path, seal_local(self._key, "cache", self.vault_id, db.serialize()))

    def discard(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
