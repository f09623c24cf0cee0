"""What an open finishes: the work a crash or another device left for this installation.

Run by the facade after every writable unlock, in this order:

1. files of an operation of this installation that a crash stopped before the record announcing
   them are deleted (spec §12.4, §16.4);
2. a device certified before an erasure it has not seen replaces its key (its old key could open
   the pre-erasure copies through its old slot, §16.4);
3. the current generation's dead slots are deleted: those of revoked credentials, whose deletion a
   crash interrupted (the last step of a credential change, §16.7).

Confined to the thread that owns the vault.
"""

from __future__ import annotations

from ..session import Session
from .credentials import finish_credential_changes
from .erasure import rotate_if_erasure_seen


def finish_open(session: Session, *, enrolling: bool = False) -> None:
    """``enrolling``: the device's only slot was made after every erasure so far (it just joined),
    so it has no pre-erasure key to rotate away."""
    if session.read_only or not session.keyring.unlocked:
        return
    session.finish_unannounced()
    if session.actor is None:
        return
    if not enrolling:
        rotate_if_erasure_seen(session)
    finish_credential_changes(session)
