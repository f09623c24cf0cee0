"""Identifiers: how every id in a vault is computed (spec §5).

Content ids are SHA-256 over a domain label and exact bytes, so the same bytes always have the same
id and an id can never be confused across types.  File ids are plain SHA-256 of the file, so
``sha256sum`` verifies a vault folder.  Random ids (compartments, epochs, slots, grants) are 16
bytes from the OS CSPRNG.

Pure functions; any thread may call them.
"""

from __future__ import annotations

from .primitives import random_bytes, sha256, tagged_hash

RANDOM_ID_LEN = 16
HASH_ID_LEN = 32


def vault_id(genesis_record: bytes) -> bytes:
    return tagged_hash("vmem/v1/genesis", genesis_record)


def record_id(record: bytes) -> bytes:
    return tagged_hash("vmem/v1/record", record)


def batch_id(header: bytes) -> bytes:
    return tagged_hash("vmem/v1/batch", header)


def file_id(data: bytes) -> bytes:
    return sha256(data)


def writer_id(alg: int, signing_public: bytes) -> bytes:
    return tagged_hash("vmem/v1/writer-id", bytes([alg]), signing_public)


def recipient_id(recipient_public: bytes) -> bytes:
    return tagged_hash("vmem/v1/recipient-id", recipient_public)


def new_random_id() -> bytes:
    return random_bytes(RANDOM_ID_LEN)


def short(identifier: bytes, n: int = 12) -> str:
    """The first ``n`` hex digits of an id, for messages and lists (never used for lookups)."""
    return identifier.hex()[:n]
