"""Registering this installation as a writer the first time it opens a vault (spec §12.4).

A new device key, certified by the credential that unlocked the vault (the passphrase or the
recovery phrase, co-signed by the new key), with its own slot.  An installation whose earlier key
cannot be read any more (its local seal predates a master-secret roll, or the keychain lost it)
replaces that key: the old writer retires, and the slots that counted only through its signature
are re-issued under the new key first.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .. import ids, slots
from ..control import owner_entry, revocation_body
from ..credentials import Credential, CredentialKind
from ..records import Kind, encode_record
from ..session import Session
from ..session.installation import hostname, platform_label, register_installation
from ..session.writer import write_control
from .rekey import reissue_slots, slots_of

REPLACED_REASON = "its installation could no longer read its key; replaced"


def registration_records(unlocking: Credential, device: Credential, name: str, platform: str, *,
                         replaced: bytes | None = None,
                         chains: Mapping[tuple[bytes, bytes], Mapping[int, bytes]] | None = None,
                         ts: int | None = None, salts: Sequence[bytes | None] = (None, None)) -> list[bytes]:
    """The records a new writer's first batch in every compartment carries, in this order (spec
    §12.4): its DEVICE_CERT (author the unlocking credential; body ``{0: owner entry, 1: the replaced
    writer id or null, 2: the unlocking credential's kind}``, no key 3: the new key's own inner
    signature is its proof of possession; inner signatures in the order unlocking credential, new
    device) and, when it replaces an active key of this installation, the REVOKE of that key
    (author the new device, the same two signers, ``seen`` and ``pins`` from ``chains``).
    ``ts`` and ``salts`` are the current time and random unless given (the conformance vectors
    fix them)."""
    signers = [unlocking.signer, device.signer]
    cert = encode_record(
        Kind.DEVICE_CERT, unlocking.writer_id,
        body={0: owner_entry(CredentialKind.DEVICE, device.signer.public, device.recipient.public, name, platform),
              1: replaced, 2: unlocking.kind.label},
        signers=signers, ts=ts, salt=salts[0],
    )
    if replaced is None:
        return [cert]
    revoke = encode_record(Kind.REVOKE, device.writer_id, body=revocation_body(replaced, chains or {}, REPLACED_REASON),
                           signers=signers, ts=ts, salt=salts[1])
    return [cert, revoke]


def certify_installation(session: Session, device_name: str | None = None) -> None:
    """First open of a writable vault from this installation: a new device writer, certified by
    the credential that unlocked it, with its own slot."""
    unlocking = session.unlocking
    if unlocking is None or not session.keyring.unlocked:
        raise AssertionError("registration needs an unlocked owner session")
    device = Credential.generate(CredentialKind.DEVICE)
    name = device_name or hostname()
    roster = session.roster
    # An installation whose earlier key cannot be read any more (its local seal predates a
    # master-secret roll, or the keychain lost it) replaces that key: the old writer retires.
    # So does one whose earlier replacement or key rotation a crash interrupted before its
    # certificate was written (the installation names the uncertified key and what it replaces).
    inst = session.local.load_installation()
    replaced = None
    if inst is not None and unlocking.kind in (CredentialKind.PASSPHRASE, CredentialKind.RECOVERY):
        replaced = next((w for w in (inst.writer_id, inst.replaces) if w is not None
                         and roster.active_owner(w)
                         and roster.principals[w].kind == CredentialKind.DEVICE), None)
    records = registration_records(unlocking, device, name, platform_label(), replaced=replaced,
                                   chains=session.log.chains)
    cert = records[0]
    files = [session.build_slot(device.recipient.public, slots.SlotType.DEVICE, name, signer=device)]
    dead: list[str] = []
    if replaced is not None:
        # The slots that count only through the retired key's signature (it created the vault,
        # or rolled the keyring last) are re-issued under the new key first (spec §12.4).
        again, dead = reissue_slots(session, replaced, device)
        files += again
        dead += slots_of(session, roster.principals[replaced].recipient_id)
    with session.unannounced_files(ids.record_id(cert), [n for n, _ in files]):
        register_installation(session, device, replaces=replaced)
        written = session.write_files(files)
        write_control(session, records, session.all_compartments(),
                      undo=lambda: session.delete_quietly(reversed(written)))
    session.delete_quietly(dead)
