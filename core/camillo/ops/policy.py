"""The vault's policy: whether erasure is allowed (spec §16.6).

A POLICY record in every compartment, naming the policy records it supersedes; the newest live one
holds.  Setting it needs the owner's device.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import time

from ..changes import Changes
from ..errors import ErasureDisabled
from ..records import Kind, encode_record
from ..session import Session
from ..session.writer import write_control


def set_policy(session: Session, *, erasure: bool, reason: str = "") -> Changes:
    actor = session.require_owner("changing the vault policy")
    policies = session.roster.policies
    live = [rid for rid in policies if not any(rid in p for (_, _, p) in policies.values())]
    record = encode_record(Kind.POLICY, actor.writer_id, body={0: "enabled" if erasure else "disabled", 1: reason,
                                                               2: sorted(live)}, signers=[actor.signer])
    write_control(session, [record], session.all_compartments())
    return session.reader.changes(note="policy changed")


def require_erasure_allowed(session: Session) -> None:
    pol = session.roster.policy
    if not pol.erasure_enabled:
        when = time.strftime("%Y-%m-%d", time.gmtime(pol.ts)) if pol.ts else "an unknown date"
        raise ErasureDisabled(
            f"this vault's policy forbids erasure (set by {session.roster.writer_name(pol.signer or b'')} on {when}"
            + (f": {pol.reason}" if pol.reason else "") + "); 'forget' still hides records from agents"
        )
