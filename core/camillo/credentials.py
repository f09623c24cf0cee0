"""Credentials: who can open a vault, and the keys each one holds (spec §12).

Every credential is an X-Wing recipient key (vault keys are wrapped to it) plus an Ed25519 key (it
signs what it authorises).  They differ only in where the two 32-byte seeds come from:

* **device**: random seeds kept in the OS keychain (:mod:`camillo.keychain`);
* **passphrase**: ``ikm = Argon2id(NFC(passphrase), salt, m, t, p)``, then
  ``xwing = HKDF(ikm, "vmem/v1/cred/xwing")`` and ``ed25519 = HKDF(ikm, "vmem/v1/cred/ed25519")``;
* **recovery phrase**: ``ikm = HKDF(BIP39 entropy, "vmem/v1/cred/recovery")``, then the same two;
* **agent grant**: random seeds in the grant file handed to the agent.

Pure functions; any thread may call them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

from . import ids
from .primitives import (
    KdfParams,
    RecipientKey,
    SigningKey,
    argon2id,
    hkdf,
    labelled,
    random_bytes,
    recovery_entropy,
)


class CredentialKind(IntEnum):
    DEVICE = 1
    PASSPHRASE = 2
    RECOVERY = 3
    RECIPIENT = 4
    GRANT = 5

    @property
    def label(self) -> str:
        return {1: "device", 2: "passphrase", 3: "recovery phrase", 4: "recovery recipient", 5: "agent grant"}[
            self.value
        ]


@dataclass(frozen=True, repr=False)
class Credential:
    kind: CredentialKind
    recipient: RecipientKey
    signer: SigningKey
    kdf: KdfParams | None = None

    @property
    def writer_id(self) -> bytes:
        return ids.writer_id(self.signer.alg, self.signer.public)

    @property
    def recipient_id(self) -> bytes:
        return ids.recipient_id(self.recipient.public)

    def __repr__(self) -> str:
        return f"Credential({self.kind.label}, writer={self.writer_id.hex()[:12]})"

    @classmethod
    def from_seeds(cls, kind: CredentialKind, xwing_seed: bytes, ed25519_seed: bytes) -> Credential:
        return cls(kind, RecipientKey.from_seed(xwing_seed), SigningKey.from_seed(ed25519_seed))

    @classmethod
    def generate(cls, kind: CredentialKind) -> Credential:
        return cls.from_seeds(kind, random_bytes(32), random_bytes(32))


def _from_ikm(kind: CredentialKind, ikm: bytes, kdf: KdfParams | None = None) -> Credential:
    return Credential(
        kind,
        RecipientKey.from_seed(hkdf(ikm, labelled("vmem/v1/cred/xwing"))),
        SigningKey.from_seed(hkdf(ikm, labelled("vmem/v1/cred/ed25519"))),
        kdf,
    )


def from_passphrase(passphrase: str, kdf: KdfParams) -> Credential:
    """Derive the passphrase credential (one Argon2id run with the slot's parameters)."""
    return _from_ikm(CredentialKind.PASSPHRASE, argon2id(passphrase, kdf), kdf)


def from_recovery_phrase(phrase: str) -> Credential:
    entropy = recovery_entropy(phrase)
    return _from_ikm(CredentialKind.RECOVERY, hkdf(entropy, labelled("vmem/v1/cred/recovery")))
