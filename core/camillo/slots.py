"""Slot files: one user credential's wrap of the vault master secret (spec §10).

Every user credential (a device, the passphrase, the recovery phrase, an optional recovery
recipient) has one 4096-byte slot per master-secret generation, at ``slots/<slot_id hex>.slot``::

    0     8     "VMEMSLOT"
    8     1     version = 1
    9     1     credential type: 1 device, 2 passphrase, 3 recovery phrase, 4 recovery recipient
    10    16    slot_id (random)
    26    4     generation of the master secret (u32)
    30    4     Argon2id memory in KiB (u32)      ┐ passphrase slots only;
    34    4     Argon2id time cost (u32)          │ zero otherwise
    38    1     Argon2id parallelism (u8)         │
    39    1     salt length (u8, 16..32)          │
    40    32    salt, zero-filled after its length┘
    72    1168  HPKE(credential's X-Wing key, VMS)  info = "vmem/v1/wrap/vms" ‖ 0x00 ‖ vault_id ‖ slot_id ‖ generation
    1240  24    salt       ┐ sealed body under the master secret (label "vmem/v1/slot",
    1264  32    commitment │ context vault_id ‖ slot_id ‖ generation): the slot statement,
    1296  2768  ciphertext ┘ signed by an owner-role key
    4064  32    checksum = SHA-256(bytes 0..4063)

Slots are the only vault files not named by their hash, so the checksum lets a reader tell a damaged
slot ("slot X is damaged") from a wrong passphrase; it is not a security control (anyone can
recompute it), the statement's signature is.

The cleartext part is exactly what a passphrase holder needs before it has any key.  Because
anyone who knows a credential's public key could write a wrap to it, a slot counts only when its
statement verifies against the vault's roster (spec §10.3): a host cannot plant one.

Pure functions; any thread may call them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from . import encoding
from .errors import CanonicalError, DamagedFile, UnsupportedVersion
from .primitives import (
    WRAP_LEN,
    CryptoFailure,
    KdfParams,
    RecipientKey,
    SigningKey,
    hpke_unwrap,
    hpke_wrap,
    labelled,
    sha256,
)
from .records import signing_message
from .sealed import open_sealed, seal

MAGIC = b"VMEMSLOT"
SIZE = 4096
BODY_END = SIZE - 32
HEADER_LEN = 1240
LABEL = "vmem/v1/slot"
SIG_LABEL = "vmem/v1/slot-sig"


class SlotType(IntEnum):
    DEVICE = 1
    PASSPHRASE = 2
    RECOVERY = 3
    RECIPIENT = 4


@dataclass(frozen=True)
class SlotHeader:
    """The cleartext of a slot: all a host (or a passphrase holder before unlocking) can read."""

    name: str
    type: SlotType
    slot_id: bytes
    generation: int
    kdf: KdfParams | None
    wrap: bytes
    data: bytes


class S:
    """Slot statement map keys."""

    VAULT = 0
    SLOT = 1
    TYPE = 2
    GENERATION = 3
    RECIPIENT = 4
    WRAP_HASH = 5
    KDF = 6
    LABEL = 7
    SIGS = 13


def _info(vault_id: bytes, slot_id: bytes, generation: int) -> bytes:
    return labelled("vmem/v1/wrap/vms", vault_id, slot_id, generation.to_bytes(4, "big"))


def _context(vault_id: bytes, slot_id: bytes, generation: int) -> bytes:
    return vault_id + slot_id + generation.to_bytes(4, "big")


def file_name(slot_id: bytes) -> str:
    return f"slots/{slot_id.hex()}.slot"


def build_slot(
    *,
    vault_id: bytes,
    slot_id: bytes,
    slot_type: SlotType,
    generation: int,
    vms: bytes,
    recipient_public: bytes,
    recipient_id: bytes,
    kdf: KdfParams | None,
    label: str,
    signer: SigningKey,
    signer_id: bytes,
) -> bytes:
    kdf_block = bytes(42)
    if kdf is not None:
        kdf_block = (
            kdf.memory_kib.to_bytes(4, "big")
            + kdf.time_cost.to_bytes(4, "big")
            + kdf.parallelism.to_bytes(1, "big")
            + len(kdf.salt).to_bytes(1, "big")
            + kdf.salt.ljust(32, b"\x00")
        )
    wrap = hpke_wrap(recipient_public, vms, _info(vault_id, slot_id, generation))
    header = (
        MAGIC
        + b"\x01"
        + bytes([slot_type])
        + slot_id
        + generation.to_bytes(4, "big")
        + kdf_block
        + wrap
    )
    assert len(header) == HEADER_LEN
    statement: dict[int, Any] = {
        S.VAULT: vault_id,
        S.SLOT: slot_id,
        S.TYPE: int(slot_type),
        S.GENERATION: generation,
        S.RECIPIENT: recipient_id,
        S.WRAP_HASH: sha256(wrap),
        S.KDF: None if kdf is None else [kdf.memory_kib, kdf.time_cost, kdf.parallelism, kdf.salt],
        S.LABEL: label,
    }
    message = signing_message(SIG_LABEL, statement, S.SIGS)
    statement[S.SIGS] = [[signer_id, signer.alg, signer.sign(message)]]
    body = seal(vms, LABEL, _context(vault_id, slot_id, generation), header, encoding.encode(statement), BODY_END)
    return body + sha256(body)


def read_header(data: bytes, name: str) -> SlotHeader:
    if len(data) != SIZE:
        raise DamagedFile(f"slot {name} is {len(data)} bytes; slots are {SIZE} bytes", file=name)
    if data[:8] != MAGIC:
        raise DamagedFile(f"slot {name} does not start with VMEMSLOT", file=name)
    if sha256(data[:BODY_END]) != data[BODY_END:]:
        raise DamagedFile(f"slot {name} is damaged (its checksum does not match)", file=name)
    if data[8] != 1:
        raise UnsupportedVersion(f"slot {name} has version {data[8]}; a newer Camillo is required", file=name)
    try:
        slot_type = SlotType(data[9])
    except ValueError:
        raise UnsupportedVersion(f"slot {name} has unknown credential type {data[9]}", file=name) from None
    slot_id = data[10:26]
    if name != file_name(slot_id):
        raise DamagedFile(f"slot {name} carries the id of another slot ({slot_id.hex()})", file=name)
    generation = int.from_bytes(data[26:30], "big")
    m = int.from_bytes(data[30:34], "big")
    t = int.from_bytes(data[34:38], "big")
    p = data[38]
    salt_len = data[39]
    salt_field = data[40:72]
    kdf = None
    if slot_type == SlotType.PASSPHRASE:
        if not 16 <= salt_len <= 32 or any(salt_field[salt_len:]):
            raise DamagedFile(f"slot {name} has a malformed Argon2id salt", file=name)
        kdf = KdfParams(m, t, p, salt_field[:salt_len])
    elif any(data[30:72]):
        raise DamagedFile(f"slot {name} has KDF parameters although it is not a passphrase slot", file=name)
    return SlotHeader(name, slot_type, slot_id, generation, kdf, data[72 : 72 + WRAP_LEN], data)


def unwrap_vms(header: SlotHeader, vault_id: bytes, key: RecipientKey) -> bytes:
    """The master secret, or CryptoFailure when this slot is not for ``key``."""
    return hpke_unwrap(key, header.wrap, _info(vault_id, header.slot_id, header.generation))


@dataclass(frozen=True)
class SlotStatement:
    recipient_id: bytes
    wrap_hash: bytes
    label: str
    signatures: list[list[Any]]
    message: bytes


def read_statement(header: SlotHeader, vault_id: bytes, vms: bytes) -> SlotStatement:
    """Decrypt and check a slot's statement.  Signatures are checked by the caller (roster)."""
    try:
        payload = open_sealed(
            vms, LABEL, _context(vault_id, header.slot_id, header.generation), header.data[:BODY_END], HEADER_LEN
        )
    except CryptoFailure as exc:
        raise DamagedFile(f"slot {header.name} is damaged or tampered ({exc})", file=header.name) from None
    st = encoding.decode(payload, f"slot {header.name} statement")
    try:
        if not isinstance(st, dict):
            raise CanonicalError("not a map")
        ok = (
            st.get(S.VAULT) == vault_id
            and st.get(S.SLOT) == header.slot_id
            and st.get(S.TYPE) == int(header.type)
            and st.get(S.GENERATION) == header.generation
            and st.get(S.WRAP_HASH) == sha256(header.wrap)
            and isinstance(st.get(S.RECIPIENT), bytes)
            and isinstance(st.get(S.LABEL), str)
            and isinstance(st.get(S.SIGS), list)
            and st[S.SIGS]
        )
        kdf = st.get(S.KDF)
        if header.kdf is None:
            ok = ok and kdf is None
        else:
            ok = ok and kdf == [header.kdf.memory_kib, header.kdf.time_cost, header.kdf.parallelism, header.kdf.salt]
        if not ok:
            raise CanonicalError("statement does not match the slot's cleartext")
        for sig in st[S.SIGS]:
            if not (isinstance(sig, list) and len(sig) == 3 and isinstance(sig[0], bytes) and isinstance(sig[2], bytes)):
                raise CanonicalError("malformed signature")
    except CanonicalError as exc:
        raise DamagedFile(f"slot {header.name}: {exc.message}", file=header.name) from None
    return SlotStatement(
        st[S.RECIPIENT], st[S.WRAP_HASH], st[S.LABEL], st[S.SIGS], signing_message(SIG_LABEL, st, S.SIGS)
    )
