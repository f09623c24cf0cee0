"""The user's own credentials: re-authentication, changing the passphrase, a new recovery phrase.

Irreversible actions (revoking a user credential, erasing, changing a credential) need the
passphrase or the recovery phrase, not only a device key: :func:`authenticate` derives and checks it.

A credential change writes a CRED_ANCHOR (signed by the new credential, the one that authorised the
change and this device) with a REVOKE of the old credential in every compartment, and rolls the keys
as any revocation of a user credential does: a random new master secret (new slots for every
remaining credential), a new epoch in every compartment.  Old data is not re-encrypted, so the cost
does not grow with the vault's size (spec §16.7).

Confined to the thread that owns the vault.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .. import slots
from ..changes import Changes
from ..control import owner_entry
from ..credentials import (
    Credential,
    CredentialKind,
    from_passphrase,
    from_recovery_phrase,
    read_recipient_key,
)
from ..errors import AccessDenied, Incomplete, UsageError, WrongCredential
from ..primitives import KdfParams, new_recovery_phrase
from ..records import Kind, encode_record
from ..revocation import REAUTH_KINDS
from ..session import Session
from ..session.installation import seal_device_key_for
from ..session.unlock import epochs_not_here
from ..values import RecoveryPhrase, Unlock
from .rekey import (
    SLOT_TYPE,
    USER_KINDS,
    Rekey,
    apply,
    keys_not_here,
    new_epochs_everywhere,
    newest_view,
    other_roll_read,
    passphrase_kdfs,
    proof_of_possession,
    roll_keyring,
    roll_read_whole,
    unseen_by_roll,
)


def authenticate(session: Session, unlock: Unlock | None) -> Credential:
    """The passphrase, recovery phrase or recovery recipient's key that authorises an irreversible
    action.  Without an explicit ``unlock`` the credential the vault was unlocked with is used, if it
    is one of those."""
    roster = session.roster
    cred: Credential | None
    if unlock is None:
        cred = session.unlocking
        if cred is None or cred.kind not in REAUTH_KINDS:
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
    elif unlock.method == "recipient":
        cred = read_recipient_key(unlock.path or "", unlock.secret or "")
    else:
        raise AccessDenied("re-authenticate with your passphrase or recovery phrase")
    if not roster.active_owner(cred.writer_id):
        raise WrongCredential(f"that {cred.kind.label} is not a current credential of this vault; nothing was changed")
    if cred.kind == CredentialKind.PASSPHRASE and cred.kdf is not None:
        session.proven_kdf[cred.recipient_id] = cred.kdf
    return cred


def change_passphrase(session: Session, new_passphrase: str, *, kdf: tuple[int, int, int] | None = None,
                      reauth: Unlock | None = None) -> Changes:
    """Replace the passphrase credential and roll the keys (see :func:`replace_credential`).  Needs
    the current passphrase or the recovery phrase (the credential the vault was unlocked with, or
    ``reauth``): a device key alone cannot mint a passphrase.

    The new passphrase's Argon2id runs on a worker thread (it releases the interpreter lock) while
    this thread rolls the keys and writes the files that do not depend on it."""
    if not new_passphrase:
        raise UsageError("the new passphrase is empty")
    params = KdfParams.fresh(kdf)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="camillo-argon2id") as pool:
        derived = pool.submit(from_passphrase, new_passphrase, params)
        changes = replace_credential(session, CredentialKind.PASSPHRASE, derived.result, "passphrase changed",
                                     reauth, {2: [params.memory_kib, params.time_cost, params.parallelism,
                                                  params.salt]})
        new = derived.result()
    if session.unlocking is not None and session.unlocking.kind == CredentialKind.PASSPHRASE:
        session.unlocking = new
    return changes


def reissue_recovery(session: Session, *, reauth: Unlock | None = None) -> RecoveryPhrase:
    """A new recovery phrase replaces the old one and the keys roll (see :func:`replace_credential`)."""
    phrase = new_recovery_phrase()
    new = from_recovery_phrase(phrase)
    changes = replace_credential(session, CredentialKind.RECOVERY, lambda: new, "recovery phrase re-issued", reauth,
                                 {3: proof_of_possession(session.vault_id, new)})
    return RecoveryPhrase(phrase, changes)


def replace_credential(session: Session, kind: CredentialKind, derive: Callable[[], Credential], reason: str,
                       reauth: Unlock | None, anchor_fields: dict[int, Any]) -> Changes:
    """Replace the user's passphrase or recovery phrase (``kind``) with the credential ``derive``
    returns: a CRED_ANCHOR for it (signed by it, by the credential that authorised the change and by
    this device) and a REVOKE of the old one in every compartment; and, as for any revoked user
    credential, the vault master secret rolls to a random one and every compartment starts a new
    epoch (spec §16.7).  So the old credential, even with every old file a host kept, opens only the
    old generation: it reads what was written before the change and nothing after.  Old data is not
    re-encrypted: the cost is the number of compartments, slots and grants, never the number of
    records.

    ``derive`` is called once the roll's own files are written (the new passphrase's Argon2id may
    still be running): if it fails, or anything before the control records does, those files are
    deleted again (nothing announces them)."""
    actor = session.require_owner("changing a credential")
    newest_view(session)
    cred = authenticate(session, reauth)
    roster = session.roster
    label = "passphrase" if kind == CredentialKind.PASSPHRASE else "recovery phrase"
    waiting = keys_not_here(session)
    if waiting:  # its random roll could not deliver them: what they seal would be lost (spec §16.10 rules 9, 10)
        raise Incomplete(f"{waiting}: changing the {label} now would leave part of the vault readable only with "
                         "the old keys. Nothing was changed: let the sync finish, then try again")
    old = [p for p in roster.principals.values() if p.kind == kind and p.writer_id not in roster.revocations]
    exclude = {p.writer_id for p in old}
    rekey = Rekey(session)
    roll_keyring(session, rekey, exclude=exclude)
    everywhere = session.all_compartments()
    new_epochs_everywhere(session, rekey, everywhere, reason, exclude=exclude)
    if rekey.new_vms is None or rekey.new_generation is None:
        raise AssertionError("the keyring did not roll")
    early = session.write_files(rekey.files)  # (while the new credential may still be derived)
    rekey.files = []
    try:
        seal_device_key_for(session, rekey.new_vms, rekey.new_generation)  # (before the records, as apply would)
        rekey.device_key_sealed = True
        new = derive()
        anchor = encode_record(
            Kind.CRED_ANCHOR, new.writer_id,
            body={0: owner_entry(kind, new.signer.public, new.recipient.public, label, ""),
                  1: old[0].writer_id if old else None, **anchor_fields},
            signers=[new.signer, cred.signer, actor.signer],
        )
        # a recovery phrase that authorised its own replacement: its successor signs the revocation
        itself = kind == CredentialKind.RECOVERY and cred.kind == CredentialKind.RECOVERY
        signers = [new.signer, actor.signer] if itself else [new.signer, cred.signer, actor.signer]
        revokes = [session.revoke_record(p.writer_id, reason, signers=signers) for p in old]
        rekey.files.append(session.build_slot(new.recipient.public, SLOT_TYPE[kind], label, kdf=new.kdf,
                                              generation=rekey.new_generation, vms=rekey.new_vms))
        rekey.add_records(everywhere, anchor, *revokes)
    except BaseException:
        session.delete_quietly(reversed(early))
        raise
    apply(session, rekey, written_before=early)
    return session.reader.changes(files_written=len(early) + len(rekey.files), files_removed=len(rekey.delete),
                                  note=reason)


def finish_credential_changes(session: Session) -> int:
    """Delete the current generation's dead slots: those of revoked user credentials (the last step
    of a passphrase change or recovery phrase re-issue, spec §16.7, or of a device key's retirement,
    §12.4 and §16.4, when a crash came between the control records and the deletion: such a slot no
    longer counts, but the old secret still unwraps the current master secret from it), and those
    whose every signer is revoked (originals that a retirement re-issued, which can never count
    again).  And the passphrase and recovery slots of older generations: a credential change that
    rolled the keys gave every remaining user credential a slot of the new generation, so an older
    one only lets a replaced credential open the old generation (a crash came before the roll's
    deletions), once every passphrase and recovery phrase that counts has a slot of the current one.
    Device slots of older generations stay: a device that joined while the keys rolled may have
    nothing newer yet.  Returns how many slots were deleted."""
    r = session.roster
    if not session.is_owner:
        return 0
    if any(h.generation > session.keyring.generation for h in session.slot_headers(ask_store=False)[0]):
        # a newer generation is in the folder and this device has not moved to it (no slot of it opens for
        # its key yet): the slot that unlocked it here may be the only way back to its key (spec §16.10
        # rule 10), and what is dead at this generation is for the device that moves on to clear
        return 0
    deleted = 0
    superseded = (slots.SlotType.PASSPHRASE, slots.SlotType.RECOVERY)
    # run on open, after the open listed the store: a mirror's slots as that listing left them; kept while
    # this keyring lacks an announced epoch (an older master secret may be the only way to it, rule 10), and
    # while a passphrase or recovery phrase that counts has no slot of this generation: a roll a crash stopped
    # before its records (reached through a newest slot tried first) replaced nothing, and the older slot may
    # be the only one of the passphrase that counts; or the records replacing it have not arrived yet
    older = [h for h in session.slot_headers(ask_store=False)[0]
             if h.generation < session.keyring.generation and h.type in superseded]
    if older and not epochs_not_here(session) and not _lacks_current_slot(session):  # (checked when there are some)
        for h in older:
            session.shelf.delete(h.name)
            deleted += 1
    if not r.revocations:
        return deleted
    dead = {p.recipient_id for p in r.principals.values() if p.writer_id in r.revocations and p.kind in USER_KINDS}
    for h, st in list(session.current_slots(ask_store=False)):
        if st.recipient_id in dead or all(sig[0] in r.revocations for sig in st.signatures):
            session.shelf.delete(h.name)
            deleted += 1
    return deleted


def _lacks_current_slot(session: Session) -> bool:
    """Whether an unrevoked passphrase or recovery phrase has no slot of the current generation."""
    r = session.roster
    have = {st.recipient_id for _h, st in session.current_slots(ask_store=False)}
    return any(p.kind in (CredentialKind.PASSPHRASE, CredentialKind.RECOVERY) and p.writer_id not in r.revocations
               and p.recipient_id not in have for p in r.principals.values())


def issue_missed_slots(session: Session) -> int:
    """Give a slot of the current generation to every user credential this roster counts that holds none
    and that the roll which made the current generation had not seen registered (spec §16.6 step 3,
    :func:`unseen_by_roll`): a device registered, or a passphrase set, at the same time as that roll, which
    could not give it one.  Otherwise such a device stays at the older generation, reading nothing written
    since, until the next roll.  Only once this device has read that roll (rule 8) and the log has no gap,
    as for the re-issue of rule 10.  Returns how many slots were written."""
    r = session.roster
    if session.read_only or not session.is_owner or session.actor is None:
        return 0
    have = {st.recipient_id for _h, st in session.current_slots(ask_store=False)}
    lacking = [p for p in r.principals.values()
               if p.kind in USER_KINDS and p.writer_id not in r.revocations and p.recipient_id not in have]
    if not lacking or not roll_read_whole(session):
        return 0
    unseen, headers = unseen_by_roll(session), session.slot_headers()[0]
    files = []
    for p in lacking:
        if p.writer_id not in unseen:
            continue
        kdfs: list[KdfParams | None] = [None]
        if p.kind == CredentialKind.PASSPHRASE and not (kdfs := [*passphrase_kdfs(session, p, [], headers)]):
            continue
        files += [session.build_slot(p.recipient_public, SLOT_TYPE[p.kind], p.name, kdf=kdf) for kdf in kdfs]
    if files:
        session.write_files(files)
    return len(files)


def keep_unlocking_slot(session: Session) -> bool:
    """This session was unlocked by a passphrase or recovery phrase with a slot of an older master
    secret, and moved to the current one through this device's own slot (spec §16.10 rule 10): when
    that credential still counts (it was set at the same time as another change, which did not know of
    it, and won, §14.6), give it a slot of the current generation, with the KDF parameters of the slot
    it unlocked, before :func:`finish_credential_changes` deletes the older one.  Otherwise a device
    that never held this vault could open it with no passphrase at all.  Only once the roll that made the
    current generation is read (:func:`other_roll_read`): before, the credential may be one that roll
    replaced.  True when a slot was written."""
    cred, used, roster = session.unlocking, session.unlock_slot, session.roster
    if (cred is None or used is None or cred.kind not in USER_KINDS or not session.is_owner
            or used.generation >= session.keyring.generation):
        return False
    p = roster.principals.get(cred.writer_id)
    if (p is None or cred.writer_id in roster.revocations or not other_roll_read(session)
            or cred.writer_id not in unseen_by_roll(session)):  # (a roll that saw it and left it out revoked it)
        return False
    if any(st.recipient_id == cred.recipient_id for _h, st in session.current_slots()):
        return False
    session.write_files([session.build_slot(p.recipient_public, used.type, p.name, kdf=used.kdf)])
    return True
