"""Agent grants: giving an agent scoped access to compartments (spec §16.2).

A grant is a GRANT record (in the control compartment and each scoped compartment), envelopes that
deliver the agent its keys (epoch secrets for read and write, the current epoch's public key for
append), and the grant file the owner hands to the agent (:mod:`camillo.session.grantfile`).

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import os
import time

from .. import ids
from ..control import GrantInfo as RosterGrant
from ..control import Level, Principal
from ..credentials import Credential, CredentialKind
from ..errors import StorageError, UsageError
from ..places import PATH_ERRNOS, check_new_file
from ..records import Authority, Kind, encode_record
from ..session import Session
from ..session.grantfile import GrantFile, write_grant_file
from ..session.writer import write_batches
from ..values import GrantCreated, GrantInfo
from .compartments import mirror_roster
from .rekey import FileList, grant_envelopes


def create_grant(session: Session, agent: str, scopes: dict[str, Level], max_class: Authority,
                 not_after: int | None, out_path: str) -> GrantCreated:
    """Write a GRANT record (control + scoped compartments), the envelopes that give the agent its
    keys, and the grant file (the agent's credential, mode 0600)."""
    actor = session.require_owner("creating a grant")
    if not agent.strip():
        raise UsageError("a grant needs an agent name")
    if max_class > Authority.OBSERVED:
        raise UsageError("an agent grant's maximum class is at most observed: only you write with user authority")
    check_new_file(out_path, "the grant file (a secret)")
    if os.path.lexists(out_path):
        raise UsageError(f"{out_path} already exists; choose another file for the grant")
    roster = session.roster
    if "control" in scopes:
        raise UsageError("a grant cannot cover the control compartment (it holds the vault's own keys); "
                         "choose data compartments")
    scope_ids = {name: session.compartment_id(name) for name in scopes}
    cred = Credential.generate(CredentialKind.GRANT)
    grant_id = ids.new_random_id()
    now = int(time.time())
    record = encode_record(
        Kind.GRANT, actor.writer_id,
        body={0: grant_id, 1: agent, 2: sorted([scope_ids[n], int(lv)] for n, lv in scopes.items()),
              3: cred.signer.public, 4: cred.recipient.public, 5: int(max_class), 6: not_after, 7: now},
        signers=[actor.signer],
    )
    principal = Principal(cred.writer_id, CredentialKind.GRANT, cred.signer.alg, cred.signer.public,
                          cred.recipient.public, agent, "agent", now, ids.record_id(record))
    principal.grant = RosterGrant(grant_id, agent, {scope_ids[n]: lv for n, lv in scopes.items()}, max_class,
                                  not_after, now, ids.record_id(record))
    files: FileList = []
    for cid in scope_ids.values():
        current = roster.current_epoch(cid)
        for e in roster.epochs_of(cid):
            secret = session.keyring.secret((cid, e.epoch_id))
            if secret is None:
                continue
            files += grant_envelopes(session, principal, cid, e.epoch_id, secret, e.prev,
                                     current=current is not None and e.epoch_id == current.epoch_id)
    # the owners it trusts to sign the epoch keys it seals to, and to certify the owners that come
    # later (an append grant follows their chain: ops.grant_trust)
    trusted = tuple(sorted((p.writer_id, p.sig_public) for p in roster.principals.values()
                           if p.is_owner and p.writer_id not in roster.revocations))
    g = GrantFile(session.vault_id, grant_id, agent, dict(scopes), max_class, not_after, cred, trusted)
    for cid in scope_ids.values():
        mirror_roster(session, cid)  # a compartment whose creation a crash cut short gets its roster copy
    try:
        write_grant_file(out_path, g, scope_ids)
    except OSError as exc:
        if exc.errno not in PATH_ERRNOS:
            raise StorageError(f"cannot write the grant file {out_path}: {exc.strerror}") from None
        raise UsageError(f"cannot write the grant file {out_path} ({exc.strerror}); choose a folder you can "
                         "write to") from None
    try:
        written = session.write_files(files)
        write_batches(session, {c: [record] for c in [session.all_compartments()[0], *scope_ids.values()]},
                      undo=lambda: session.delete_quietly(reversed(written)))
    except BaseException:
        os.unlink(out_path)
        raise
    info = GrantInfo(grant_id, agent, cred.writer_id, {n: lv.label for n, lv in sorted(scopes.items())},
                     max_class.label, not_after, now)
    return GrantCreated(info, out_path, session.reader.changes(files_written=len(files)))
