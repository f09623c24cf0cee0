"""The epoch public keys an append grant may seal to: those signed by an owner its chain of trust
reaches (spec §16.2).  An append grant cannot read the roster: it trusts the owners its grant file
names, and an owner certified by them in a chain of certificates delivered to it
(:func:`~camillo.control.grant_trust`), so nobody else (say, a reader of the compartment, or a revoked
device) can make it seal to a key of theirs.

Pure functions; the session's reader (confined to the thread that owns the vault) calls them.
"""

from __future__ import annotations

from collections.abc import Mapping

from .. import envelopes
from ..control import grant_trust
from ..primitives import verify_signature


def trusted_epoch_keys(vault_id: bytes, trusted_owners: dict[bytes, bytes],
                       chain: Mapping[str, envelopes.EnvelopePayload],
                       ) -> tuple[list[envelopes.EnvelopePayload], list[str]]:
    """Of the envelopes of the chain (by file name): the epoch public keys signed by an owner the
    chain of trust from ``trusted_owners`` reaches, in file-name order, and the files of the others."""
    kinds = envelopes.EnvelopeKind
    held = [chain[n] for n in sorted(chain)]
    trusted = grant_trust(vault_id, trusted_owners,
                          [p.key for p in held if p.kind == kinds.OWNER_CERT],
                          [(p.key, p.signatures, p.message) for p in held if p.kind == kinds.OWNER_REVOKED])
    good: list[envelopes.EnvelopePayload] = []
    untrusted: list[str] = []
    for p in held:
        if p.kind != kinds.EPOCH_PUBLIC:
            continue
        if any(isinstance(s, list) and len(s) == 3 and isinstance(s[0], bytes) and s[0] in trusted
               and type(s[1]) is int and isinstance(s[2], bytes)
               and verify_signature(s[1], trusted[s[0]], p.message, s[2]) for s in p.signatures):
            good.append(p)
        else:
            untrusted.append(p.file)
    return good, untrusted
