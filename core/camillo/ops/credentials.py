"""The user's own credentials: re-authentication, changing the passphrase, a new recovery phrase.

Irreversible actions (revoking a user credential, erasing, changing a credential) need the
passphrase or the recovery phrase, not only a device key: :func:`authenticate` derives and checks it.

A credential change writes one new slot and a CRED_ANCHOR (signed by the new credential, the one
that authorised the change and this device) with a REVOKE of the old credential in every
compartment, then deletes the old slot: O(1) in vault size (spec §16.7).

Confined to the thread that owns the vault.
"""

from __future__ import annotations

from .. import slots
from ..changes import Changes
from ..control import owner_entry
from ..credentials import Credential, CredentialKind, from_passphrase, from_recovery_phrase
from ..errors import AccessDenied, UsageError, WrongCredential
from ..primitives import KdfParams, new_recovery_phrase
from ..records import Kind, encode_record
from ..session import Session
from ..session.writer import write_control
from ..values import RecoveryPhrase, Unlock
from .rekey import USER_KINDS, proof_of_possession


def authenticate(session: Session, unlock: Unlock | None) -> Credential:
    """The passphrase or recovery credential that authorises an irreversible action.  Without an
    explicit ``unlock`` the credential the vault was unlocked with is used, if it is one of those."""
    roster = session.roster
    cred: Credential | None
    if unlock is None:
        cred = session.unlocking
        if cred is None or cred.kind not in (CredentialKind.PASSPHRASE, CredentialKind.RECOVERY):
            raise AccessDenied("this needs your passphrase or recovery phrase (re-authentication); "
                               "a device key alone cannot do it")
    elif unlock.method == "passphrase":
        kdfs = [h.kdf for h in session.slot_headers()[0] if h.type == slots.SlotType.PASSPHRASE and h.kdf]
        cred = None
        for kdf in kdfs:
            candidate = from_passphrase(unlock.secret or "", kdf)
            if roster.active_owner(candidate.writer_id):
                cred = candidate
                break
        if cred is None:
            raise WrongCredential("wrong passphrase; nothing was changed")
    elif unlock.method == "recovery":
        cred = from_recovery_phrase(unlock.secret or "")
    else:
        raise AccessDenied("re-authenticate with your passphrase or recovery phrase")
    if not roster.active_owner(cred.writer_id):
        raise WrongCredential(f"that {cred.kind.label} is not a current credential of this vault; nothing was changed")
    return cred


def change_passphrase(session: Session, new_passphrase: str, *, kdf: tuple[int, int, int] | None = None,
                      reauth: Unlock | None = None) -> Changes:
    """Replace the passphrase credential: one new slot and one certificate, O(1) in vault size.
    Needs the current passphrase or the recovery phrase (the credential the vault was unlocked
    with, or ``reauth``): a device key alone cannot mint a passphrase."""
    actor = session.require_owner("changing the passphrase")
    if not new_passphrase:
        raise UsageError("the new passphrase is empty")
    cred = authenticate(session, reauth)
    roster = session.roster
    old = [p for p in roster.principals.values()
           if p.kind == CredentialKind.PASSPHRASE and p.writer_id not in roster.revocations]
    new = from_passphrase(new_passphrase, KdfParams.fresh(kdf))
    if new.kdf is None:
        raise AssertionError("a passphrase credential without KDF parameters")
    records = [encode_record(
        Kind.CRED_ANCHOR, new.writer_id,
        body={0: owner_entry(CredentialKind.PASSPHRASE, new.signer.public, new.recipient.public, "passphrase", ""),
              1: old[0].writer_id if old else None,
              2: [new.kdf.memory_kib, new.kdf.time_cost, new.kdf.parallelism, new.kdf.salt]},
        signers=[new.signer, cred.signer, actor.signer],
    )]
    for p in old:
        records.append(session.revoke_record(p.writer_id, "passphrase changed",
                                             signers=[new.signer, cred.signer, actor.signer]))
    old_slots = [h.name for h in session.slot_headers()[0] if h.type == slots.SlotType.PASSPHRASE]
    slot = session.write_slot(new, slots.SlotType.PASSPHRASE, "passphrase")
    write_control(session, records, session.all_compartments(), undo=lambda: session.delete_quietly([slot]))
    for name in old_slots:
        session.shelf.delete(name)
    if session.unlocking is not None and session.unlocking.kind == CredentialKind.PASSPHRASE:
        session.unlocking = new
    return session.reader.changes(files_written=1, files_removed=len(old_slots), note="passphrase changed")


def reissue_recovery(session: Session, *, reauth: Unlock | None = None) -> RecoveryPhrase:
    """A new recovery phrase replaces the old one (new slot, anchor; the old one is revoked)."""
    actor = session.require_owner("re-issuing the recovery phrase")
    cred = authenticate(session, reauth)
    roster = session.roster
    phrase = new_recovery_phrase()
    new = from_recovery_phrase(phrase)
    old = [p for p in roster.principals.values()
           if p.kind == CredentialKind.RECOVERY and p.writer_id not in roster.revocations]
    records = [encode_record(
        Kind.CRED_ANCHOR, new.writer_id,
        body={0: owner_entry(CredentialKind.RECOVERY, new.signer.public, new.recipient.public, "recovery phrase", ""),
              1: old[0].writer_id if old else None, 3: proof_of_possession(session.vault_id, new)},
        signers=[new.signer, cred.signer, actor.signer],
    )]
    signer = new if cred.kind == CredentialKind.RECOVERY else cred
    for p in old:
        records.append(session.revoke_record(p.writer_id, "recovery phrase re-issued",
                                             signers=[signer.signer, actor.signer]))
    old_slots = [h.name for h in session.slot_headers()[0] if h.type == slots.SlotType.RECOVERY]
    slot = session.write_slot(new, slots.SlotType.RECOVERY, "recovery phrase")
    write_control(session, records, session.all_compartments(), undo=lambda: session.delete_quietly([slot]))
    for name in old_slots:
        session.shelf.delete(name)
    return RecoveryPhrase(phrase, session.reader.changes(files_written=1, files_removed=len(old_slots),
                                                         note="recovery phrase re-issued"))


def finish_credential_changes(session: Session) -> int:
    """Delete the current generation's dead slots: those of revoked user credentials (the last step
    of a passphrase change or recovery phrase re-issue, spec §16.7, or of a device key's retirement,
    §12.4 and §16.4, when a crash came between the control records and the deletion: such a slot no
    longer counts, but the old secret still unwraps the current master secret from it), and those
    whose every signer is revoked (originals that a retirement re-issued, which can never count
    again).  Returns how many slots were deleted."""
    r = session.roster
    if not session.is_owner or not r.revocations:
        return 0
    dead = {p.recipient_id for p in r.principals.values() if p.writer_id in r.revocations and p.kind in USER_KINDS}
    deleted = 0
    for h, st in list(session.current_slots()):
        if st.recipient_id in dead or all(sig[0] in r.revocations for sig in st.signatures):
            session.shelf.delete(h.name)
            deleted += 1
    return deleted
