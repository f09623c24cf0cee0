"""What a refresh reports of the control records it read: which parts of the roster they touch
(:class:`~camillo.changes.Changes`' devices, grants, credentials, policy and compartment list).

Pure computation over records and the roster; confined to the thread that owns the vault.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..control import Roster
from ..credentials import CredentialKind
from ..records import Kind, Record


def control_changes(records: Sequence[Record], roster: Roster) -> dict[str, bool]:
    """Which parts of the roster these control records touch (for :class:`Changes`): a revocation
    touches what its subject is (a device, a grant, a passphrase or recovery phrase)."""
    out = {"devices": False, "grants": False, "credentials": False, "policy": False, "compartment_list": False}
    for r in records:
        if r.kind in (Kind.GENESIS, Kind.DEVICE_CERT, Kind.DEVICE_NAME, Kind.DEVICE_ACK):
            out["devices"] = True
        if r.kind == Kind.COMPARTMENT:
            out["compartment_list"] = True
        if r.kind in (Kind.GENESIS, Kind.CRED_ANCHOR):
            out["credentials"] = True
        if r.kind == Kind.GRANT:
            out["grants"] = True
        if r.kind == Kind.POLICY:
            out["policy"] = True
        if r.kind == Kind.REVOKE:
            who = r.body.get(0)
            subject = roster.principals.get(who) if isinstance(who, bytes) else None
            if subject is None:
                out["devices"] = out["credentials"] = True  # not known here yet: say what it can be
            elif subject.grant is not None:
                out["grants"] = True
            elif subject.kind == CredentialKind.DEVICE:
                out["devices"] = True
            else:
                out["credentials"] = True
    return out
