"""Recovery recipients: a trusted person (or an escrow) who can open the vault with a key of their own
(spec §12.1 kind 4, §12.6).

The trusted person makes a key (:func:`camillo.credentials.write_recipient_key`: a key file sealed
under their own passphrase, which they keep, and its public half).  The owner adds the public half:
a CRED_ANCHOR for it (the person's proof of possession, a passphrase, recovery-phrase or recipient
co-signature: re-authentication, and this device's signature) in every compartment, and a slot of
type 4 wrapping the vault master secret to it.  From then on the key opens the vault on any
installation, like the recovery phrase, and may re-authenticate (set a new passphrase, revoke a
lost device).  The key is listed with the other credentials and revoked like any of them (the keys
roll: a removed recipient reads nothing written afterwards).

Confined to the thread that owns the vault.
"""

from __future__ import annotations

from .. import slots
from ..changes import Changes
from ..control import owner_entry
from ..credentials import CredentialKind, fingerprint, read_recipient_public, write_recipient_key
from ..errors import UsageError
from ..records import Kind, encode_record
from ..session import Session
from ..session.writer import write_control
from ..values import RecipientInfo, RecipientKeyFile, RevocationReport, Unlock
from .credentials import authenticate
from .devices import check_device_name
from .grant_trust import trust_files
from .revocation import find_principal, revoke


def make_key(path: str, passphrase: str, name: str = "", kdf: tuple[int, int, int] | None = None) -> RecipientKeyFile:
    """A new recipient key for a trusted person (no vault needed): ``path`` and ``path.pub``."""
    holder = check_device_name(name) if name else ""
    cred, public_path = write_recipient_key(path, passphrase, holder, kdf)
    return RecipientKeyFile(path, public_path, fingerprint(cred.signer.public))


def add_recipient(session: Session, name: str, public_path: str, *, reauth: Unlock | None = None) -> Changes:
    """Add the recipient whose public key file is ``public_path`` under ``name``; needs the passphrase,
    the recovery phrase or another recipient's key (re-authentication)."""
    actor = session.require_owner("adding a recovery recipient")
    label = check_device_name(name)
    xwing, sig_pk, pop, _holder = read_recipient_public(public_path)
    cred = authenticate(session, reauth)
    r = session.roster
    for p in r.principals.values():
        if p.sig_public == sig_pk:
            state = "removed" if p.writer_id in r.revocations else "added"
            raise UsageError(f"this key was already {state} as {p.name}; a key is added once (ask the trusted "
                             "person for a new one)")
        if p.kind == CredentialKind.RECIPIENT and p.name.lower() == label.lower() and p.writer_id not in r.revocations:
            raise UsageError(f"a trusted person called '{p.name}' is already a recipient; choose another name")
    anchor = encode_record(
        Kind.CRED_ANCHOR, actor.writer_id,
        body={0: owner_entry(CredentialKind.RECIPIENT, sig_pk, xwing, label, ""), 1: None, 3: pop},
        signers=[cred.signer, actor.signer],
    )
    files = [session.build_slot(xwing, slots.SlotType.RECIPIENT, label), *trust_files(session, pending=[anchor])]
    written = session.write_files(files)
    write_control(session, [anchor], session.all_compartments(),
                  undo=lambda: session.delete_quietly(reversed(written)))
    return session.reader.changes(files_written=len(files), note=f"{label} can now recover the vault")


def remove_recipient(session: Session, who: str, *, reauth: Unlock | None = None) -> RevocationReport:
    """Revoke a trusted person's key, by name or id: the keys roll, so it opens nothing written afterwards."""
    subject = find_principal(session, who, what="trusted person", only=lambda p: p.kind == CredentialKind.RECIPIENT)
    return revoke(session, subject, reauth=reauth)


def recipients(session: Session) -> list[RecipientInfo]:
    """The recovery recipients, added or removed."""
    r = session.roster
    out = []
    for p in r.principals.values():
        if p.kind == CredentialKind.RECIPIENT:
            rev = r.revocations.get(p.writer_id)
            out.append(RecipientInfo(p.writer_id, p.name, p.created, rev is not None, rev.ts if rev else None))
    return sorted(out, key=lambda x: (x.revoked, x.added, x.name))
