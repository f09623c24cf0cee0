"""Credentials: who can open a vault, and the keys each one holds (spec §12).

Every credential is an X-Wing recipient key (vault keys are wrapped to it) plus an Ed25519 key (it
signs what it authorises).  They differ only in where the two 32-byte seeds come from:

* **device**: random seeds kept in the OS keychain (:mod:`camillo.keychain`);
* **passphrase**: ``ikm = Argon2id(NFC(passphrase), salt, m, t, p)``, then
  ``xwing = HKDF(ikm, "vmem/v1/cred/xwing")`` and ``ed25519 = HKDF(ikm, "vmem/v1/cred/ed25519")``;
* **recovery phrase**: ``ikm = HKDF(BIP39 entropy, "vmem/v1/cred/recovery")``, then the same two;
* **recovery recipient** (a trusted person): random seeds in a key file the person keeps, sealed
  under their own passphrase; its public half (``.pub``) is what the vault's owner adds (spec §12.6);
* **agent grant**: random seeds in the grant file handed to the agent.

Pure functions, and the recipient key files (each touches only the file it is given); any thread
may call them.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

from . import encoding, ids
from .errors import UsageError, VaultError, WrongCredential
from .primitives import (
    SIG_ED25519,
    XWING_PK_LEN,
    CryptoFailure,
    KdfParams,
    RecipientKey,
    SigningKey,
    aead_decrypt,
    aead_encrypt,
    argon2id,
    check_recipient_public,
    hkdf,
    labelled,
    random_bytes,
    recovery_entropy,
    sha256,
    verify_signature,
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


# ---------------------------------------------------------------------------------------------
# Recovery recipients' key files (spec §12.6)

KEY_ARMOR = ("-----BEGIN VMEM RECIPIENT KEY-----", "-----END VMEM RECIPIENT KEY-----")
PUB_ARMOR = ("-----BEGIN VMEM RECIPIENT PUBLIC KEY-----", "-----END VMEM RECIPIENT PUBLIC KEY-----")


def recipient_pop(signer: SigningKey, recipient_public: bytes) -> bytes:
    """A recipient key's proof of possession, made once when the key is made (it serves any vault):
    an Ed25519 signature over ``labelled("vmem/v1/recipient-pop", sig_public, xwing_public)``."""
    return signer.sign(labelled("vmem/v1/recipient-pop", signer.public, recipient_public))


def fingerprint(sig_public: bytes) -> str:
    """What the trusted person and the owner read aloud to compare keys: 16 hex digits of the writer id."""
    h = ids.writer_id(SIG_ED25519, sig_public).hex()[:16]
    return " ".join(h[i:i + 4] for i in range(0, 16, 4))


def _seal_key(passphrase: str, kdf: KdfParams) -> bytes:
    return hkdf(argon2id(passphrase, kdf), labelled("vmem/v1/recipient-key/seal"))


def _checksum(m: dict[Any, Any]) -> bytes:
    """Field 15 of a key file: SHA-256 of the map without it.  It tells a damaged file from a wrong
    passphrase; it is not a security control (the seal and the proof of possession are)."""
    return sha256(encoding.encode({k: v for k, v in m.items() if k != 15}))


def _armored(lines: list[str], armor: tuple[str, str], m: dict[int, Any]) -> str:
    m = {**m, 15: _checksum(m)}
    body = base64.b64encode(encoding.encode(m)).decode()
    return "\n".join([*lines, armor[0], *(body[i:i + 64] for i in range(0, len(body), 64)), armor[1], ""])


def _write_new(path: str, text: str, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


def write_recipient_key(path: str, passphrase: str, name: str = "",
                        kdf: tuple[int, int, int] | None = None) -> tuple[Credential, str]:
    """Make a recipient key: ``path`` holds its seeds sealed under ``passphrase`` (Argon2id, then
    XChaCha20-Poly1305; mode 0600), ``path.pub`` its public keys, the proof of possession and the
    holder's name.  Both are created, never overwritten.  Returns the credential and the .pub path."""
    if not passphrase:
        raise UsageError("the recipient key needs a passphrase of its own (CAMILLO_RECIPIENT_PASSPHRASE)")
    public_path = path + ".pub"
    for p in (path, public_path):
        if os.path.exists(p):
            raise UsageError(f"{p} already exists; choose another file name")
    cred = Credential.generate(CredentialKind.RECIPIENT)
    params = KdfParams.fresh(kdf)
    nonce = random_bytes(24)
    sealed = aead_encrypt(_seal_key(passphrase, params), nonce,
                          labelled("vmem/v1/recipient-key", cred.signer.public),
                          encoding.encode({0: cred.recipient.seed, 1: cred.signer.seed}))
    who = f" of {name}" if name else ""
    private = _armored(
        [f"# A Camillo recovery key{who}. Keep it, and its passphrase, safe: with both it opens every vault",
         "# that added its public key (the .pub file beside it). Fingerprint: " + fingerprint(cred.signer.public)],
        KEY_ARMOR,
        {0: "vmem-recipient-key", 1: 1, 2: [params.memory_kib, params.time_cost, params.parallelism, params.salt],
         3: nonce, 4: sealed, 5: cred.signer.public, 6: name})
    public = _armored(
        [f"# The public half of a Camillo recovery key{who}: give it to the vault's owner",
         "# ('camillo recipient add DIR --name NAME --key FILE'). Fingerprint: " + fingerprint(cred.signer.public)],
        PUB_ARMOR,
        {0: "vmem-recipient-pub", 1: 1, 2: cred.recipient.public, 3: cred.signer.public,
         4: recipient_pop(cred.signer, cred.recipient.public), 5: name})
    _write_new(path, private, 0o600)
    try:
        _write_new(public_path, public, 0o644)
    except BaseException:
        os.unlink(path)
        raise
    return cred, public_path


def _read_armored(path: str, armor: tuple[str, str], what: str) -> dict[Any, Any]:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read(1 << 20)
    except FileNotFoundError:
        raise UsageError(f"{path} does not exist") from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not {what}") from None
    if armor[0] not in text:
        other = KEY_ARMOR if armor == PUB_ARMOR else PUB_ARMOR
        hint = (" (it is the private key file: give the owner the .pub file)" if other[0] in text and armor == PUB_ARMOR
                else " (it is the public key file: open with the private key file)" if other[0] in text else "")
        raise UsageError(f"{path} is not {what}{hint}")
    try:
        start = text.index(armor[0]) + len(armor[0])
        m = encoding.decode(base64.b64decode("".join(text[start:text.index(armor[1])].split()), validate=True), what)
    except (ValueError, VaultError):
        raise UsageError(f"{path} is damaged ({what} that cannot be decoded); ask for a new copy") from None
    if not isinstance(m, dict) or m.get(1) != 1:
        raise UsageError(f"{path} is {what} of a version this Camillo does not know")
    if m.get(15) != _checksum(m):
        raise UsageError(f"{path} is damaged (its checksum does not match); ask for a new copy")
    return m


def read_recipient_public(path: str) -> tuple[bytes, bytes, bytes, str]:
    """The public half of a recipient key: (X-Wing public key, Ed25519 public key, proof of
    possession, holder's name), every field checked (UsageError naming the file otherwise)."""
    m = _read_armored(path, PUB_ARMOR, "a Camillo recipient public key")
    xwing, sig_pk, pop, name = m.get(2), m.get(3), m.get(4), m.get(5, "")
    if not (m.get(0) == "vmem-recipient-pub" and isinstance(xwing, bytes) and len(xwing) == XWING_PK_LEN
            and isinstance(sig_pk, bytes) and len(sig_pk) == 32 and isinstance(pop, bytes) and isinstance(name, str)):
        raise UsageError(f"{path} is damaged (a field of the recipient public key is missing or malformed)")
    try:
        check_recipient_public(xwing)
    except CryptoFailure:
        raise UsageError(f"{path} is damaged (its X-Wing public key is malformed)") from None
    if not verify_signature(SIG_ED25519, sig_pk, labelled("vmem/v1/recipient-pop", sig_pk, xwing), pop):
        raise UsageError(f"{path} is damaged or forged: its proof that the key's holder made it does not verify")
    return xwing, sig_pk, pop, name


def read_recipient_key(path: str, passphrase: str) -> Credential:
    """Open a recipient key file with its holder's passphrase (WrongCredential when it is wrong;
    UsageError naming the file when it is damaged or not such a file)."""
    m = _read_armored(path, KEY_ARMOR, "a Camillo recipient key file")
    kdf_raw, nonce, sealed, sig_pk = m.get(2), m.get(3), m.get(4), m.get(5)
    if not (m.get(0) == "vmem-recipient-key" and isinstance(kdf_raw, list) and len(kdf_raw) == 4
            and all(type(x) is int for x in kdf_raw[:3]) and isinstance(kdf_raw[3], bytes)
            and isinstance(nonce, bytes) and len(nonce) == 24 and isinstance(sealed, bytes)
            and isinstance(sig_pk, bytes) and len(sig_pk) == 32):
        raise UsageError(f"{path} is damaged (a field of the recipient key file is missing or malformed)")
    kdf = KdfParams(kdf_raw[0], kdf_raw[1], kdf_raw[2], kdf_raw[3])
    try:
        kdf.check_reader_bounds()
    except VaultError as exc:
        raise UsageError(f"{path} is damaged or hostile ({exc.message})") from None
    try:
        plain = aead_decrypt(_seal_key(passphrase, kdf), nonce, labelled("vmem/v1/recipient-key", sig_pk), sealed)
    except CryptoFailure:
        raise WrongCredential(f"wrong passphrase for the recipient key file {path} (or the file was altered); "
                              "nothing was opened") from None
    seeds = encoding.decode(plain, "recipient key")
    if not (isinstance(seeds, dict) and isinstance(seeds.get(0), bytes) and isinstance(seeds.get(1), bytes)
            and len(seeds[0]) == 32 and len(seeds[1]) == 32):
        raise UsageError(f"{path} is damaged (its sealed seeds are malformed)")
    cred = Credential.from_seeds(CredentialKind.RECIPIENT, seeds[0], seeds[1])
    if cred.signer.public != sig_pk:
        raise UsageError(f"{path} is damaged (its keys do not match the public key it names)")
    return cred
