"""Segment files: one or more signed batches of one compartment, sealed under one epoch (spec §9).

Layout (all integers big-endian)::

    0     8     "VMEMSEG1"
    8     2     suite = 0x0001
    10    2     flags = 0
    12    16    compartment_id
    28    16    epoch_id
    44    1168  HPKE(EPK of the epoch, segment key)   info = "vmem/v1/wrap/segment" ‖ 0x00 ‖ vault_id ‖ compartment_id ‖ epoch_id
    1212  24    salt
    1236  32    commitment
    1268  ...   XChaCha20-Poly1305 of u32 length ‖ CBOR [batch, ...] ‖ zero padding, tag

The file is ``max(4096, padme(1268 + 4 + payload + 16))`` bytes and is named by the SHA-256 of
its bytes.  A writer that can only append (it holds the epoch public key, not the secret) produces
exactly the same kind of file as an owner.

Pure functions; any thread may call them.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import encoding
from .errors import DamagedFile, LimitExceeded, UnsupportedVersion
from .primitives import (
    SUITE_VMEM1,
    WRAP_LEN,
    CryptoFailure,
    RecipientKey,
    hpke_unwrap,
    hpke_wrap,
    labelled,
    padme,
    random_bytes,
)
from .records import Batch, batch_from_cbor
from .sealed import OVERHEAD, open_sealed, seal

MAGIC = b"VMEMSEG1"
HEADER_LEN = 1212
MIN_SIZE = 4096
PAYLOAD_MAX = 8 * 1024 * 1024 + 64 * 1024  # one maximal batch plus framing, or a compacted run
LABEL = "vmem/v1/segment"


@dataclass(frozen=True)
class SegmentHeader:
    """What the host can read of a segment: which compartment and epoch it belongs to."""

    compartment_id: bytes
    epoch_id: bytes
    size: int


def segment_size(payload_len: int) -> int:
    return max(MIN_SIZE, padme(HEADER_LEN + OVERHEAD + payload_len))


def _wrap_info(vault_id: bytes, compartment_id: bytes, epoch_id: bytes) -> bytes:
    return labelled("vmem/v1/wrap/segment", vault_id, compartment_id, epoch_id)


def encode_payload(batches: list[Batch]) -> bytes:
    return encoding.encode([b.to_cbor() for b in batches])


def seal_segment(
    vault_id: bytes, compartment_id: bytes, epoch_id: bytes, epoch_public: bytes, payload: bytes
) -> bytes:
    return seal_segment_keyed(vault_id, compartment_id, epoch_id, epoch_public, payload)[0]


def seal_segment_keyed(
    vault_id: bytes, compartment_id: bytes, epoch_id: bytes, epoch_public: bytes, payload: bytes
) -> tuple[bytes, bytes]:
    """A sealed segment and its segment key (which opens it without the epoch's secret: a writer that
    seals to an epoch whose secret it does not hold keeps it, spec §16.10 rule 2)."""
    if len(payload) > PAYLOAD_MAX:
        raise LimitExceeded(f"a segment payload of {len(payload)} bytes exceeds {PAYLOAD_MAX}")
    segment_key = random_bytes(32)
    header = (
        MAGIC
        + SUITE_VMEM1.to_bytes(2, "big")
        + (0).to_bytes(2, "big")
        + compartment_id
        + epoch_id
        + hpke_wrap(epoch_public, segment_key, _wrap_info(vault_id, compartment_id, epoch_id))
    )
    context = vault_id + compartment_id + epoch_id
    return seal(segment_key, LABEL, context, header, payload, segment_size(len(payload))), segment_key


def read_header(data: bytes, name: str) -> SegmentHeader:
    if len(data) < MIN_SIZE:
        raise DamagedFile(f"segment {name} is truncated ({len(data)} bytes)", file=name)
    if data[:8] != MAGIC:
        raise DamagedFile(f"segment {name} does not start with VMEMSEG1", file=name)
    suite = int.from_bytes(data[8:10], "big")
    if suite != SUITE_VMEM1:
        raise UnsupportedVersion(
            f"segment {name} uses suite {suite:#06x}; a newer Camillo is required to read it", file=name
        )
    if data[10:12] != b"\x00\x00":
        raise UnsupportedVersion(f"segment {name} sets flags this Camillo does not know", file=name)
    return SegmentHeader(data[12:28], data[28:44], len(data))


def open_segment(data: bytes, name: str, vault_id: bytes, epoch_key: RecipientKey) -> bytes:
    """Decrypt a segment and return its payload bytes (CBOR list of batches)."""
    header = read_header(data, name)
    wrap = data[44 : 44 + WRAP_LEN]
    try:
        segment_key = hpke_unwrap(epoch_key, wrap, _wrap_info(vault_id, header.compartment_id, header.epoch_id))
    except CryptoFailure as exc:
        raise DamagedFile(f"segment {name} is damaged or tampered ({exc})", file=name) from None
    return _open_payload(data, name, vault_id, header, segment_key)


def open_segment_with(data: bytes, name: str, vault_id: bytes, segment_key: bytes) -> bytes:
    """Decrypt a segment with its own segment key (one its writer kept) and return its payload bytes."""
    return _open_payload(data, name, vault_id, read_header(data, name), segment_key)


def _open_payload(data: bytes, name: str, vault_id: bytes, header: SegmentHeader, segment_key: bytes) -> bytes:
    try:
        context = vault_id + header.compartment_id + header.epoch_id
        payload = open_sealed(segment_key, LABEL, context, data, HEADER_LEN)
    except CryptoFailure as exc:
        raise DamagedFile(f"segment {name} is damaged or tampered ({exc})", file=name) from None
    if segment_size(len(payload)) != len(data):
        raise DamagedFile(f"segment {name} is padded to a size no writer produces", file=name)
    return payload


def decode_payload(payload: bytes, name: str) -> list[Batch]:
    items = encoding.decode(payload, f"segment {name}", max_len=PAYLOAD_MAX)
    if not isinstance(items, list) or not items:
        raise DamagedFile(f"segment {name} holds no batches", file=name)
    return [batch_from_cbor(item) for item in items]
