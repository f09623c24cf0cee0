"""Revoking a device (a lost laptop), a user credential or an agent grant (spec §16.3).

Revocation starts a new epoch in every compartment the revoked party could read, so nothing written
afterwards is sealed to a key it holds; revoking a user credential (a device, the passphrase, the
recovery phrase) also rolls the vault master secret, so its slot stops opening the vault.  The
REVOKE record pins what the revoking device has seen of the revoked writer's chains: its later
batches are rejected by every reader.

Revoking a user credential must be signed by the passphrase or recovery credential (re-authentication):
a stolen device alone cannot revoke the others.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

from collections.abc import Callable

from ..control import Principal
from ..credentials import CredentialKind
from ..errors import UsageError
from ..primitives import SigningKey
from ..session import Session
from ..values import RevocationReport, Unlock
from .credentials import authenticate
from .rekey import USER_KINDS, Rekey, apply, new_epoch, new_epochs_everywhere, newest_view, roll_keyring


def find_principal(session: Session, text: str, *, what: str = "device or grant",
                   only: Callable[[Principal], bool] | None = None) -> Principal:
    """A device, credential or grant by grant id, writer id (or a unique prefix of 8+ hex digits), or
    name; ``only`` narrows what may match (``what`` names it in messages)."""
    needle = text.strip().lower()
    r = session.roster
    matches = []
    for p in r.principals.values():
        if only is not None and not only(p):
            continue
        ids_ = [p.writer_id.hex()]
        if p.grant is not None:
            ids_.append(p.grant.grant_id.hex())
        if (len(needle) >= 8 and any(i.startswith(needle) for i in ids_)) or needle in (
            p.name.lower(), (p.grant.agent.lower() if p.grant else "")):
            matches.append(p)
    live = [p for p in matches if p.writer_id not in r.revocations]
    if len(live) == 1:
        return live[0]
    if not matches:
        raise UsageError(f"no {what} '{text}' in this vault (see 'camillo devices', 'camillo grants' and "
                         "'camillo recipient list')")
    if not live:
        raise UsageError(f"'{text}' is already revoked")
    raise UsageError(f"'{text}' matches several: "
                     + ", ".join(f"{p.name or p.kind.label} ({p.writer_id.hex()[:12]})" for p in live)
                     + "; give more of its id")


def revoke(session: Session, subject: Principal, *, reason: str = "", reauth: Unlock | None = None) -> RevocationReport:
    actor = session.require_owner("revoking")
    newest_view(session)
    r = session.roster
    if subject.writer_id in r.revocations:
        raise UsageError(f"{subject.name} is already revoked")
    if subject.writer_id == actor.writer_id:
        raise UsageError("this device cannot revoke itself; revoke it from another device or re-enrol")
    signers: list[SigningKey] = [actor.signer]
    is_user = subject.kind in USER_KINDS
    if is_user or reauth is not None:
        cred = authenticate(session, reauth)  # a user credential's revocation always needs it
        signers = [cred.signer, actor.signer]
        owners_left = [p for p in r.principals.values() if p.kind in USER_KINDS and p.writer_id not in r.revocations
                       and p.writer_id != subject.writer_id]
        if not owners_left:
            raise UsageError("this is the last credential of the vault; it cannot be revoked")
    rekey = Rekey(session)
    exclude = {subject.writer_id}
    everywhere = [session.all_compartments()[0], *sorted(r.compartments)]
    affected = sorted(subject.grant.scopes) if subject.grant is not None else everywhere
    what = subject.grant.agent if subject.grant else subject.name
    if is_user:
        roll_keyring(session, rekey, exclude=exclude)
        new_epochs_everywhere(session, rekey, affected, f"revoked {what}", exclude=exclude)
    else:
        for cid in affected:
            new_epoch(session, rekey, cid, f"revoked {what}", exclude=exclude)
    revoke_record = session.revoke_record(subject.writer_id, reason or f"revoked {what}", signers=signers)
    rekey.add_records(everywhere, revoke_record)
    apply(session, rekey)
    # a lost device may hold (or have seen typed) the credentials that open the vault anywhere
    still = tuple(p.kind.label for p in r.principals.values()
                  if subject.kind == CredentialKind.DEVICE and p.writer_id not in r.revocations
                  and p.kind in (CredentialKind.PASSPHRASE, CredentialKind.RECOVERY))
    return RevocationReport(
        what, "agent grant" if subject.grant else subject.kind.label,
        tuple(r.compartment_name(c) for c in affected), len(affected), rekey.new_generation, len(rekey.delete),
        session.reader.changes(files_written=len(rekey.files), files_removed=len(rekey.delete)),
        still_opens=tuple(sorted(set(still))),
    )
