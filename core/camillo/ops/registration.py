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
from ..control import owner_entry
from ..credentials import Credential, CredentialKind
from ..errors import DeviceRevoked, UsageError
from ..localstate import VaultLocal
from ..records import Kind, encode_record
from ..revocation import REAUTH_KINDS, revocation_body
from ..session import Session
from ..session.installation import hostname, key_sealed_elsewhere, platform_label, register_installation
from ..session.writer import write_control
from ..values import Notice
from . import reports
from .devices import MAX_NAME_CHARS, check_device_name, unique_name
from .grant_trust import trust_files
from .rekey import epochs_holding_data_not_here, reissue_slots, roll_read, slots_of

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


def is_new_installation(vault_id: bytes, home: str | None = None) -> bool:
    """Has this installation never been a writer of the vault (no installation record for it)?"""
    return VaultLocal(vault_id, home).load_installation() is None


def default_device_name() -> str:
    """The name a new device gets unless the person chooses one: this computer's host name."""
    try:
        return check_device_name(hostname()[:MAX_NAME_CHARS])
    except UsageError:
        return "this computer"


def register_on_open(session: Session, device_name: str | None, *, re_register: bool = False) -> None:
    """A writable open of a vault this installation does not write to yet (it has no usable device
    key for it): certify a new device, unless another device revoked this installation's device (a
    lost laptop found again), which needs ``re_register`` (DeviceRevoked otherwise, saying by whom
    and when).  Nothing is done for a read-only folder, when the keychain is locked, or while this
    installation's key waits for two master secrets to be joined (spec §16.10 rule 9)."""
    if not session.shelf.writable or session.actor is not None or session.keychain_problem or session.key_waiting:
        return
    revoked = reports.installation_revocation(session)
    if revoked is not None and not re_register:
        raise DeviceRevoked(f"{reports.revoked_message(session, revoked)}. Nothing was written. To use this "
                            "vault on this device again, open it with the option to register it anew "
                            "(camillo: --re-register)", who=reports.revoker_names(session, revoked),
                            when=revoked.ts, why=revoked.reason)
    if not re_register and key_sealed_elsewhere(session):
        session.key_waiting = (
            "this device's key is protected by the passphrase it last opened the vault with, which another "
            "device's change at the same time did not know of: open the vault here once with that passphrase "
            "(it hands over what this device wrote), or register this device anew (camillo: --re-register), "
            "which loses what it wrote since that passphrase was set")
        session.notices.append(Notice("key-sealed-elsewhere", session.key_waiting))
        return
    inst = session.local.load_installation()
    if (not re_register and inst is not None and session.roster.active_owner(inst.writer_id)
            and (epochs_holding_data_not_here(session) or not roll_read(session))):
        # The replacement's REVOKE pins what the old key wrote as this view accepts it (spec §14.6): on a view
        # that cannot read some of it yet, readers would reject the rest. It waits for the sync (§16.10 rule 10),
        # and for the records and key files of the roll that made the current generation (rule 8): a partial
        # sync can bring its slots first, without the envelopes of kinds 5 and 6 through which this device's key,
        # sealed under an older master secret, may still be found (§16.6), or the keys of what it wrote.
        session.key_waiting = (
            "this device's key must be replaced (it cannot be read under the vault's current keys), and keys "
            "that another device made have not arrived here yet: it reads but does not write until the sync "
            "has brought them")
        return
    certify_installation(session, device_name)


def certify_installation(session: Session, device_name: str | None = None) -> None:
    """First open of a writable vault from this installation: a new device writer, certified by
    the credential that unlocked it, with its own slot."""
    unlocking = session.unlocking
    if unlocking is None or not session.keyring.unlocked:
        raise AssertionError("registration needs an unlocked owner session")
    device = Credential.generate(CredentialKind.DEVICE)
    roster = session.roster
    # An installation whose earlier key cannot be read any more (its local seal predates a
    # master-secret roll, or the keychain lost it) replaces that key: the old writer retires.
    # So does one whose earlier replacement or key rotation a crash interrupted before its
    # certificate was written (the installation names the uncertified key and what it replaces).
    inst = session.local.load_installation()
    replaced = None
    if inst is not None and unlocking.kind in REAUTH_KINDS:
        replaced = next((w for w in (inst.writer_id, inst.replaces) if w is not None
                         and roster.active_owner(w)
                         and roster.principals[w].kind == CredentialKind.DEVICE), None)
    # the name the person chose; else the replaced key's (the same computer), else the host name
    if device_name:
        name = check_device_name(device_name)
    elif replaced is not None:
        name = roster.principals[replaced].name
    else:
        name = unique_name(roster, default_device_name())
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
    files += trust_files(session, pending=records, signer=device)  # append grants follow the new key
    with session.unannounced_files(ids.record_id(cert), [n for n, _ in files]):
        register_installation(session, device, replaces=replaced)
        written = session.write_files(files)
        write_control(session, records, session.all_compartments(),
                      undo=lambda: session.delete_quietly(reversed(written)))
    session.delete_quietly(dead)
