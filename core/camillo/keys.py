"""The key hierarchy below the credentials (spec §12.2).

::

    credential ──HPKE slot──▶ VMS_g  (vault master secret, generation g)
    VMS_g ──HKDF "vmem/v1/vms/owner-kem" ‖ vault_id ‖ g──▶ owner KEM key (X-Wing)
    owner KEM key ◀──envelope── ES_{c,e}  (epoch secret of compartment c, epoch e; also to grants)
    ES ──HKDF "vmem/v1/epoch/kem-seed" ‖ vault_id ‖ c ‖ e──▶ epoch key pair (EPK public)
    ES ──HKDF "vmem/v1/epoch/commit"   ‖ vault_id ‖ c ‖ e──▶ commitment published in the EPOCH record
    EPK ◀──HPKE in each segment header── random per-segment key

Local state (outside the vault) is encrypted under keys derived from the installation's own
credential seed with ``"vmem/v1/local/<purpose>" ‖ vault_id``.

Pure functions; any thread may call them.
"""

from __future__ import annotations

from .primitives import RecipientKey, hkdf, labelled


def owner_kem(vms: bytes, vault_id: bytes, generation: int) -> RecipientKey:
    return RecipientKey.from_seed(hkdf(vms, labelled("vmem/v1/vms/owner-kem", vault_id, generation.to_bytes(4, "big"))))


def next_master(vms: bytes, vault_id: bytes, generation: int) -> bytes:
    """The master secret an erasure rolls to from ``vms`` (spec §16.4): derived, so that two devices
    erasing concurrently from one generation arrive at one master secret, not two."""
    return hkdf(vms, labelled("vmem/v1/vms/next", vault_id, generation.to_bytes(4, "big")))


def join_master(secrets: list[bytes], vault_id: bytes, generation: int) -> bytes:
    """The master secret that joins two or more master secrets of one generation (spec §16.10 rule 9):
    derived from all of them, so that devices joining the same ones at once arrive at one, and a
    credential that one of them left out (a revocation's) cannot compute it."""
    return hkdf(b"".join(sorted(secrets)), labelled("vmem/v1/vms/join", vault_id, generation.to_bytes(4, "big")))


def epoch_key(secret: bytes, vault_id: bytes, compartment_id: bytes, epoch_id: bytes) -> RecipientKey:
    return RecipientKey.from_seed(hkdf(secret, labelled("vmem/v1/epoch/kem-seed", vault_id, compartment_id, epoch_id)))


def epoch_commit(secret: bytes, vault_id: bytes, compartment_id: bytes, epoch_id: bytes) -> bytes:
    return hkdf(secret, labelled("vmem/v1/epoch/commit", vault_id, compartment_id, epoch_id))


def local_key(secret: bytes, purpose: str, vault_id: bytes) -> bytes:
    """A key for this installation's local files (device state, cache) about one vault."""
    return hkdf(secret, labelled(f"vmem/v1/local/{purpose}", vault_id))
