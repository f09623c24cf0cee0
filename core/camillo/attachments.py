"""Attachment chunk files: a file's bytes, stored encrypted in the vault in fixed-size chunks
(spec §9.5).

Layout of one chunk file (all integers big-endian)::

    0     8     "VMEMBLB1"
    8     2     suite = 0x0001
    10    2     flags = 0
    12    24    salt
    36    32    commitment
    68    ...   XChaCha20-Poly1305 of u32 length ‖ chunk bytes ‖ zero padding, tag

sealed (:mod:`camillo.sealed`) with ``prk`` = the chunk's own 32-byte key, label
``vmem/v1/attachment/chunk`` and context ``vault_id``.  A writer that holds its compartment's epoch
secret derives the key from that secret and the chunk's SHA-256, and the salt from the key
(convergent within one compartment epoch: the same bytes make the same file, stored once); an append
grant, which holds no secret, draws both at random.  The file is ``max(4096, padme(68 + 4 + len +
16))`` bytes, like a segment, and is named by the SHA-256 of its bytes:
``blobs/<first 2 hex>/<64 hex>.blob``.  The chunk keys and names live only in the attachment
record's body, inside a segment sealed under its compartment's epoch: who can read the record can read
the file; erasing every record that names a chunk destroys its key (and the chunk is deleted).

Pure functions; any thread may call them.
"""

from __future__ import annotations

from .errors import DamagedFile, UnsupportedVersion
from .primitives import SUITE_VMEM1, CryptoFailure, hkdf, labelled, padme, sha256
from .sealed import OVERHEAD, SALT_LEN, open_sealed, seal

MAGIC = b"VMEMBLB1"
HEADER_LEN = 12
MIN_SIZE = 4096
CHUNK_SIZE = 1 << 20  # plaintext bytes per chunk (the last one may be shorter)
MAX_CHUNKS = 1 << 16  # 64 GiB at the default chunk size
LABEL = "vmem/v1/attachment/chunk"
KEY_LABEL = "vmem/v1/attachment/chunk-key"
SALT_LABEL = "vmem/v1/attachment/chunk-salt"


def chunk_file_size(chunk_len: int) -> int:
    return max(MIN_SIZE, padme(HEADER_LEN + OVERHEAD + chunk_len))


def _header() -> bytes:
    return MAGIC + SUITE_VMEM1.to_bytes(2, "big") + (0).to_bytes(2, "big")


def seal_chunk(vault_id: bytes, chunk_key: bytes, chunk: bytes, *, convergent: bool) -> bytes:
    """A chunk file.  ``convergent``: the salt is derived from the key (which the writer derived from
    the chunk's bytes and its compartment's epoch secret), so the same bytes in the same epoch give the
    same file; otherwise the salt is random."""
    if len(chunk) > CHUNK_SIZE:
        raise ValueError("chunk larger than CHUNK_SIZE")
    salt = hkdf(chunk_key, labelled(SALT_LABEL, vault_id), length=SALT_LEN) if convergent else None
    return seal(chunk_key, LABEL, vault_id, _header(), chunk, chunk_file_size(len(chunk)), salt=salt)


def convergent_key(epoch_secret: bytes, vault_id: bytes, compartment_id: bytes, epoch_id: bytes,
                   chunk: bytes) -> bytes:
    """The key of a chunk written by a writer that holds its compartment's epoch secret."""
    return hkdf(epoch_secret, labelled(KEY_LABEL, vault_id, compartment_id, epoch_id, sha256(chunk)))


def chunk_name(data: bytes) -> str:
    h = sha256(data).hex()
    return f"blobs/{h[:2]}/{h}.blob"


def open_chunk(data: bytes, name: str, vault_id: bytes, chunk_key: bytes) -> bytes:
    """The chunk's bytes, or DamagedFile naming the file."""
    if len(data) < MIN_SIZE:
        raise DamagedFile(f"attachment chunk {name} is truncated ({len(data)} bytes)", file=name)
    if data[:8] != MAGIC:
        raise DamagedFile(f"attachment chunk {name} does not start with VMEMBLB1", file=name)
    suite = int.from_bytes(data[8:10], "big")
    if suite != SUITE_VMEM1 or data[10:12] != b"\x00\x00":
        raise UnsupportedVersion(f"attachment chunk {name} uses a suite or flags this Camillo does not know; "
                                 "a newer Camillo is required to read it", file=name)
    try:
        chunk = open_sealed(chunk_key, LABEL, vault_id, data, HEADER_LEN)
    except CryptoFailure as exc:
        raise DamagedFile(f"attachment chunk {name} is damaged or tampered, or belongs elsewhere ({exc})",
                          file=name) from None
    if chunk_file_size(len(chunk)) != len(data) or len(chunk) > CHUNK_SIZE:
        raise DamagedFile(f"attachment chunk {name} is padded to a size no writer produces", file=name)
    return chunk
