"""Envelope files: an epoch key delivered to one recipient (spec §11).

Epoch secrets reach the owner KEM key and read/write grants, and epoch public keys reach append
grants, in 4096-byte envelopes at ``env/<sha256 of file>.env``::

    0     8     "VMEMENV1"
    8     4     tag = SHA-256("vmem/v1/env-tag" ‖ 0x00 ‖ enc ‖ recipient_id)[0:4]
    12    1168  HPKE(recipient, envelope key)   info = "vmem/v1/wrap/envelope" ‖ 0x00 ‖ vault_id
    1180  24    salt       ┐ sealed body under the envelope key (label "vmem/v1/envelope",
    1204  32    commitment │ context vault_id): the payload, signed by an owner-role key
    1236  2860  ciphertext ┘

The tag lets a recipient skip envelopes that are not for it without trying HPKE on each, and tells
the host nothing, because the host never learns recipient ids.

Payload (CBOR map): 0 kind (1 epoch secret, 2 epoch public key, 3 owner certificate, 4 revoked
owner), 1 vault_id, 2 compartment_id, 3 epoch_id, 4 recipient_id, 5 the key (32-byte secret or
1216-byte public key; for kind 3 the bytes of a DEVICE_CERT or CRED_ANCHOR record, for kind 4 the
revoked owner's writer id), 6 the previous epoch id or null (so an appender, which cannot read EPOCH
records, knows which epoch is current), 13 signatures over ``"vmem/v1/envelope-sig" ‖ 0x00 ‖
SHA-256(payload without 13)``.  Kinds 3 and 4 go to append grants only, which cannot read the
roster: they follow the chain of owner certificates from the owners their grant file names (spec
§11.2, §16.2); they carry no compartment or epoch (keys 2 and 3 absent).

Pure functions; any thread may call them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from . import encoding
from .errors import CanonicalError, DamagedFile
from .primitives import (
    WRAP_LEN,
    XWING_ENC_LEN,
    CryptoFailure,
    RecipientKey,
    SigningKey,
    hpke_unwrap,
    hpke_wrap,
    labelled,
    random_bytes,
    sha256,
    tagged_hash,
)
from .records import signing_message
from .sealed import open_sealed, seal

MAGIC = b"VMEMENV1"
SIZE = 4096
HEADER_LEN = 12 + WRAP_LEN
LABEL = "vmem/v1/envelope"
SIG_LABEL = "vmem/v1/envelope-sig"


class EnvelopeKind(IntEnum):
    EPOCH_SECRET = 1
    EPOCH_PUBLIC = 2
    OWNER_CERT = 3  # an owner credential's certificate record, for an append grant's chain of trust
    OWNER_REVOKED = 4  # an owner credential revoked by another one (a lost device), for an append grant
    PREVIOUS_MASTERS = 5  # the master secrets before a random roll, to the new owner key (spec §16.6)
    PREVIOUS_SEAL_KEYS = 6  # the local-seal keys of the master secrets before any roll, to the new owner key (§16.6)


PREVIOUS_ENTRY = 36  # an entry of a kind-5 envelope: u32 generation, then the master secret
PREVIOUS_MAX = 16  # entries at most: the newest first
SEAL_ENTRY = 68  # an entry of a kind-6 envelope: u32 generation, the writer id, then the seal key
SEAL_MAX = 24  # entries at most: the newest generation first
HANDED_ON = (EnvelopeKind.PREVIOUS_MASTERS, EnvelopeKind.PREVIOUS_SEAL_KEYS)  # what a roll hands on (§16.6)


def pack_previous_masters(entries: list[tuple[int, bytes]]) -> bytes:
    """Key 5 of a kind-5 envelope: each (generation, master secret), newest first, at most
    :data:`PREVIOUS_MAX`."""
    return b"".join(g.to_bytes(4, "big") + vms for g, vms in entries[:PREVIOUS_MAX])


def previous_masters(key: bytes) -> list[tuple[int, bytes]]:
    """The (generation, master secret) entries of a kind-5 envelope's key (checked by read_payload)."""
    return [(int.from_bytes(key[at:at + 4], "big"), key[at + 4:at + PREVIOUS_ENTRY])
            for at in range(0, len(key), PREVIOUS_ENTRY)]


def pack_seal_keys(entries: list[tuple[int, bytes, bytes]]) -> bytes:
    """Key 5 of a kind-6 envelope: each (generation, writer id, seal key), newest generation first, at
    most :data:`SEAL_MAX`."""
    return b"".join(g.to_bytes(4, "big") + writer + key for g, writer, key in entries[:SEAL_MAX])


def seal_keys(key: bytes) -> list[tuple[int, bytes, bytes]]:
    """The (generation, writer id, seal key) entries of a kind-6 envelope's key (checked by read_payload)."""
    return [(int.from_bytes(key[at:at + 4], "big"), key[at + 4:at + 36], key[at + 36:at + SEAL_ENTRY])
            for at in range(0, len(key), SEAL_ENTRY)]


MAX_CERT_BYTES = 2400  # a certificate that does not fit an envelope is not delivered (names are short)


class P:
    KIND = 0
    VAULT = 1
    COMPARTMENT = 2
    EPOCH = 3
    RECIPIENT = 4
    KEY = 5
    PREV = 6
    SIGS = 13


@dataclass(frozen=True)
class EnvelopePayload:
    kind: EnvelopeKind
    compartment_id: bytes
    epoch_id: bytes
    recipient_id: bytes
    key: bytes = field(repr=False)  # an epoch secret: never shown
    signatures: list[list[Any]]
    message: bytes
    file: str
    prev_epoch: bytes | None = None


def tag_for(enc: bytes, recipient_id: bytes) -> bytes:
    return tagged_hash("vmem/v1/env-tag", enc, recipient_id)[:4]


def file_name(data: bytes) -> str:
    return f"env/{sha256(data).hex()}.env"


def build_envelope(
    *,
    vault_id: bytes,
    kind: EnvelopeKind,
    compartment_id: bytes | None,
    epoch_id: bytes | None,
    recipient_public: bytes,
    recipient_id: bytes,
    key: bytes,
    signer: SigningKey,
    signer_id: bytes,
    prev_epoch: bytes | None = None,
) -> bytes:
    envelope_key = random_bytes(32)
    wrap = hpke_wrap(recipient_public, envelope_key, labelled("vmem/v1/wrap/envelope", vault_id))
    header = MAGIC + tag_for(wrap[:XWING_ENC_LEN], recipient_id) + wrap
    payload: dict[int, Any] = {
        P.KIND: int(kind),
        P.VAULT: vault_id,
        P.RECIPIENT: recipient_id,
        P.KEY: key,
    }
    if kind in (EnvelopeKind.EPOCH_SECRET, EnvelopeKind.EPOCH_PUBLIC):
        payload.update({P.COMPARTMENT: compartment_id, P.EPOCH: epoch_id, P.PREV: prev_epoch})
    message = signing_message(SIG_LABEL, payload, P.SIGS)
    payload[P.SIGS] = [[signer_id, signer.alg, signer.sign(message)]]
    return seal(envelope_key, LABEL, vault_id, header, encoding.encode(payload), SIZE)


def check_shape(data: bytes, name: str) -> None:
    if len(data) != SIZE:
        raise DamagedFile(f"envelope {name} is {len(data)} bytes; envelopes are {SIZE} bytes", file=name)
    if data[:8] != MAGIC:
        raise DamagedFile(f"envelope {name} does not start with VMEMENV1", file=name)


def is_for(data: bytes, recipient_id: bytes) -> bool:
    return data[8:12] == tag_for(data[12 : 12 + XWING_ENC_LEN], recipient_id)


def open_envelope(data: bytes, name: str, vault_id: bytes, recipient: RecipientKey) -> EnvelopePayload:
    """Open an envelope addressed to ``recipient``; CryptoFailure when it is not for this key."""
    return read_payload(unwrap_payload(data, name, vault_id, recipient), name, vault_id)


def unwrap_payload(data: bytes, name: str, vault_id: bytes, recipient: RecipientKey) -> bytes:
    """The payload's bytes (deterministic CBOR, not checked yet: :func:`read_payload`) of an envelope
    addressed to ``recipient``; CryptoFailure when it is not for this key."""
    check_shape(data, name)
    envelope_key = hpke_unwrap(recipient, data[12 : 12 + WRAP_LEN], labelled("vmem/v1/wrap/envelope", vault_id))
    try:
        return open_sealed(envelope_key, LABEL, vault_id, data, HEADER_LEN)
    except CryptoFailure as exc:
        raise DamagedFile(f"envelope {name} is damaged or tampered ({exc})", file=name) from None


def read_payload(raw: bytes, name: str, vault_id: bytes, *, checked: bool = False) -> EnvelopePayload:
    """The payload of envelope ``name`` from its bytes, checked (the profile, the vault, the kind, the
    lengths); DamagedFile or CanonicalError when it is not one.  ``checked``: bytes this reader
    decoded with this function before (kept in its local state, camillo.memos.EnvelopeMemo): their
    encoding is not checked against the profile again, their fields are."""
    p = encoding.decode_checked(raw) if checked else encoding.decode(raw, f"envelope {name}")
    try:
        if not isinstance(p, dict) or p.get(P.VAULT) != vault_id:
            raise CanonicalError("belongs to another vault")
        kind_value: Any = p.get(P.KIND)  # untrusted CBOR: the lookup refuses what is not an envelope kind
        kind = EnvelopeKind(kind_value)
        comp, epoch, rid, key, sigs = (p.get(k) for k in (P.COMPARTMENT, P.EPOCH, P.RECIPIENT, P.KEY, P.SIGS))
        if kind in (EnvelopeKind.OWNER_CERT, EnvelopeKind.OWNER_REVOKED, *HANDED_ON):
            comp = epoch = b""  # not about an epoch
        elif not (isinstance(comp, bytes) and len(comp) == 16 and isinstance(epoch, bytes) and len(epoch) == 16):
            raise CanonicalError("malformed payload")
        if not (
            isinstance(rid, bytes)
            and isinstance(key, bytes)
            and isinstance(sigs, list)
            and sigs
        ):
            raise CanonicalError("malformed payload")
        prev = p.get(P.PREV)
        if prev is not None and (not isinstance(prev, bytes) or len(prev) != 16):
            raise CanonicalError("previous epoch id is malformed")
        if (kind == EnvelopeKind.EPOCH_SECRET and len(key) != 32) or (
            kind == EnvelopeKind.EPOCH_PUBLIC and len(key) != 1216
        ) or (kind == EnvelopeKind.OWNER_REVOKED and len(key) != 32) or (
            kind == EnvelopeKind.PREVIOUS_MASTERS
            and (len(key) % PREVIOUS_ENTRY or not 0 < len(key) <= PREVIOUS_ENTRY * PREVIOUS_MAX)
        ) or (
            kind == EnvelopeKind.PREVIOUS_SEAL_KEYS
            and (len(key) % SEAL_ENTRY or not 0 < len(key) <= SEAL_ENTRY * SEAL_MAX)
        ):
            raise CanonicalError("key has the wrong length")
    except (CanonicalError, ValueError) as exc:
        raise DamagedFile(f"envelope {name}: {exc}", file=name) from None
    return EnvelopePayload(kind, comp, epoch, rid, key, sigs, signing_message(SIG_LABEL, p, P.SIGS, checked=checked),
                           name, prev)
