"""Cryptographic primitives of the VMEM-1 suite: the only module that touches crypto libraries.

Everything above this module speaks in bytes and in the small typed values defined here, so the
suite can be audited in one file and replaced by a later suite without touching the format code.

VMEM-1 (``docs/spec.md`` §3):

* X-Wing (ML-KEM-768 + X25519) recipient keys from a 32-byte seed; HPKE base mode with KEM 0x647a,
  HKDF-SHA256 and ChaCha20-Poly1305 wraps a 32-byte key into exactly 1168 bytes.
* XChaCha20-Poly1305 for content, keyed through HKDF-Expand with a 32-byte key commitment that
  readers compare in constant time before decrypting.
* Argon2id for passphrases, with reader bounds on the cleartext parameters.
* BIP39 (English, 24 words) recovery phrases, checksum enforced.
* Ed25519 signatures tagged with algorithm ids (1 = Ed25519; 2 = ML-DSA-65 reserved).
* SHA-256 for ids and HKDF, every label ``vmem/v1/...`` followed by one 0x00 byte.
* Padmé padding lengths.

Secrets are held in ``bytes`` handed to C libraries; wiping is best effort (:class:`SecretBytes`).
Pure functions; any thread may call them.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
import unicodedata
from dataclasses import dataclass, field

import nacl.bindings
import nacl.exceptions
from argon2.low_level import Type as _Argon2Type
from argon2.low_level import hash_secret_raw as _argon2_hash
from cryptography.exceptions import InvalidSignature, InvalidTag
from cryptography.hazmat.primitives import hashes, hpke
from cryptography.hazmat.primitives.asymmetric import ed25519, mlkem, x25519
from cryptography.hazmat.primitives.kdf.hkdf import HKDF, HKDFExpand
from mnemonic import Mnemonic

from .errors import LimitExceeded, UsageError, WrongCredential

SUITE_VMEM1 = 0x0001

XWING_SEED_LEN = 32
XWING_PK_LEN = 1216
XWING_ENC_LEN = 1120
WRAP_LEN = 1168  # enc (1120) + ChaCha20-Poly1305(32-byte key) (48)
KEY_LEN = 32
XNONCE_LEN = 24
TAG_LEN = 16
COMMIT_LEN = 32

SIG_ED25519 = 1
SIG_MLDSA65 = 2  # reserved: not produced or accepted by v1 readers
SIG_SLHDSA = 3  # reserved
ED25519_PK_LEN = 32
ED25519_SIG_LEN = 64

# Argon2id: what writers use by default, the floor writers must respect, and what readers accept.
ARGON2_DEFAULT = (262144, 3, 4)  # m KiB (256 MiB), t, p
ARGON2_WRITER_MIN_M = 65536
ARGON2_WRITER_MIN_T = 3
ARGON2_READER_MAX_M = 2097152  # 2 GiB
ARGON2_READER_MAX_T = 16
ARGON2_READER_MAX_P = 16
ARGON2_SALT_MIN = 16
ARGON2_SALT_MAX = 32
# Test-only parameters (spec §4.2): accepted by readers, written only when CAMILLO_INSECURE_TEST_KDF=1.
ARGON2_TEST = (8192, 1, 1)

_HPKE_SUITE = hpke.Suite(hpke.KEM.MLKEM768_X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.CHACHA20_POLY1305)
_MNEMONIC = Mnemonic("english")


class CryptoFailure(Exception):
    """Internal: an AEAD, HPKE or signature check failed.  Callers turn it into a VaultError that
    names the file; it never leaves the core."""


def random_bytes(n: int) -> bytes:
    return os.urandom(n)


def constant_time_equal(a: bytes, b: bytes) -> bool:
    return hmac.compare_digest(a, b)


class SecretBytes:
    """A secret held in a mutable buffer so :meth:`wipe` can overwrite it (best effort: copies made
    by C libraries or by ``bytes(...)`` conversions are not reachable).  Never shows its value."""

    __slots__ = ("_buf",)

    def __init__(self, value: bytes | bytearray) -> None:
        self._buf = bytearray(value)

    def get(self) -> bytes:
        if not self._buf:
            raise ValueError("secret was wiped")
        return bytes(self._buf)

    def wipe(self) -> None:
        for i in range(len(self._buf)):
            self._buf[i] = 0
        self._buf = bytearray()

    @property
    def wiped(self) -> bool:
        return not self._buf

    def __repr__(self) -> str:
        return "SecretBytes(<hidden>)"

    __str__ = __repr__

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SecretBytes) and constant_time_equal(bytes(self._buf), bytes(other._buf))

    def __hash__(self) -> int:
        return id(self)


# ---------------------------------------------------------------------------------------------
# Hashes, labels and HKDF


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def labelled(label: str, *parts: bytes) -> bytes:
    """``label ‖ 0x00 ‖ part1 ‖ part2 ...``: the input of every VMEM hash and KDF."""
    if not label.startswith("vmem/v1/"):
        raise ValueError(f"not a VMEM label: {label}")
    return label.encode("ascii") + b"\x00" + b"".join(parts)


def tagged_hash(label: str, *parts: bytes) -> bytes:
    return sha256(labelled(label, *parts))


def hkdf(ikm: bytes, info: bytes, *, salt: bytes = b"", length: int = KEY_LEN) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=salt or None, info=info).derive(ikm)


def hkdf_expand(prk: bytes, info: bytes, length: int) -> bytes:
    return HKDFExpand(algorithm=hashes.SHA256(), length=length, info=info).derive(prk)


# ---------------------------------------------------------------------------------------------
# X-Wing recipient keys and HPKE wraps


@dataclass(frozen=True, repr=False)
class RecipientKey:
    """An X-Wing key pair derived from its 32-byte seed.  ``public`` is the 1216-byte public key."""

    seed: bytes
    public: bytes
    _private: hpke.MLKEM768X25519PrivateKey = field(compare=False)

    @classmethod
    def from_seed(cls, seed: bytes) -> RecipientKey:
        if len(seed) != XWING_SEED_LEN:
            raise ValueError("an X-Wing seed is 32 bytes")
        expanded = hashlib.shake_256(seed).digest(96)
        kem = mlkem.MLKEM768PrivateKey.from_seed_bytes(expanded[0:64])
        dh = x25519.X25519PrivateKey.from_private_bytes(expanded[64:96])
        public = kem.public_key().public_bytes_raw() + dh.public_key().public_bytes_raw()
        return cls(seed, public, hpke.MLKEM768X25519PrivateKey(kem, dh))

    @classmethod
    def generate(cls) -> RecipientKey:
        return cls.from_seed(random_bytes(XWING_SEED_LEN))

    def unwrap(self, wrapped: bytes, info: bytes) -> bytes:
        """Open a 1168-byte wrap made to this key.  The length is checked before HPKE runs (the
        partitioning-oracle rule); any failure, including ML-KEM implicit rejection, is
        CryptoFailure ("not for this key")."""
        if len(wrapped) != WRAP_LEN:
            raise CryptoFailure(f"a wrap is {WRAP_LEN} bytes, not {len(wrapped)}")
        try:
            key = _HPKE_SUITE.decrypt(wrapped, self._private, info=info)
        except (InvalidTag, ValueError):
            raise CryptoFailure("wrap does not open with this key") from None
        if len(key) != KEY_LEN:
            raise CryptoFailure("wrapped key has the wrong length")
        return key

    def __repr__(self) -> str:
        return f"RecipientKey(public={self.public[:4].hex()}…)"


@functools.lru_cache(maxsize=64)  # an epoch's key seals every segment of that epoch: parsed once
def _recipient_public(public: bytes) -> hpke.MLKEM768X25519PublicKey:
    if len(public) != XWING_PK_LEN:
        raise CryptoFailure("an X-Wing public key is 1216 bytes")
    try:
        return hpke.MLKEM768X25519PublicKey(
            mlkem.MLKEM768PublicKey.from_public_bytes(public[:1184]),
            x25519.X25519PublicKey.from_public_bytes(public[1184:]),
        )
    except ValueError as exc:
        raise CryptoFailure(f"invalid X-Wing public key: {exc}") from None


_PROBE = x25519.X25519PrivateKey.from_private_bytes(bytes(range(1, 33)))


def check_recipient_public(public: bytes) -> None:
    """Raise CryptoFailure unless ``public`` is a well-formed X-Wing public key, including an
    X25519 part that is not a low-order point (which would make every wrap to it fail)."""
    _recipient_public(public)
    try:
        _PROBE.exchange(x25519.X25519PublicKey.from_public_bytes(public[1184:]))
    except ValueError:
        raise CryptoFailure("the X25519 part of this X-Wing key is a low-order point") from None


def hpke_wrap(public: bytes, key: bytes, info: bytes) -> bytes:
    """HPKE SealBase of a 32-byte key to an X-Wing public key; always 1168 bytes."""
    if len(key) != KEY_LEN:
        raise ValueError("VMEM wraps 32-byte keys only")
    try:
        wrapped = _HPKE_SUITE.encrypt(key, _recipient_public(public), info=info)
    except ValueError as exc:
        raise CryptoFailure(f"cannot wrap to this X-Wing key ({exc})") from None
    assert len(wrapped) == WRAP_LEN
    return wrapped


def hpke_unwrap(recipient: RecipientKey, wrapped: bytes, info: bytes) -> bytes:
    """Open a 1168-byte wrap (:meth:`RecipientKey.unwrap`); CryptoFailure when it is not for this key."""
    return recipient.unwrap(wrapped, info)


# ---------------------------------------------------------------------------------------------
# Content AEAD with key commitment


@dataclass(frozen=True, repr=False)
class BodyKeys:
    key: bytes
    nonce: bytes
    commitment: bytes


def derive_body_keys(prk: bytes, label: str, salt: bytes, context: bytes) -> BodyKeys:
    """``key ‖ nonce ‖ commitment = HKDF-Expand(prk, label ‖ 0x00 ‖ salt ‖ context, 88)``."""
    okm = hkdf_expand(prk, labelled(label, salt, context), KEY_LEN + XNONCE_LEN + COMMIT_LEN)
    return BodyKeys(okm[:32], okm[32:56], okm[56:88])


def aead_encrypt(key: bytes, nonce: bytes, aad: bytes, plaintext: bytes) -> bytes:
    return nacl.bindings.crypto_aead_xchacha20poly1305_ietf_encrypt(plaintext, aad, nonce, key)


def aead_decrypt(key: bytes, nonce: bytes, aad: bytes, ciphertext: bytes) -> bytes:
    if len(ciphertext) < TAG_LEN:
        raise CryptoFailure("ciphertext is shorter than its authentication tag")
    try:
        return nacl.bindings.crypto_aead_xchacha20poly1305_ietf_decrypt(ciphertext, aad, nonce, key)
    except (nacl.exceptions.CryptoError, ValueError):
        raise CryptoFailure("authentication tag does not verify") from None


def padme(length: int) -> int:
    """Padmé (PURBs, Algorithm 1): round up so that only O(log log L) bits of the length leak."""
    if length < 2:
        return length
    e = length.bit_length() - 1
    s = e.bit_length()
    mask = (1 << (e - s)) - 1
    return (length + mask) & ~mask


# ---------------------------------------------------------------------------------------------
# Signatures


@dataclass(frozen=True, repr=False)
class SigningKey:
    """An Ed25519 key from its 32-byte seed.  ``public`` is 32 bytes; ``alg`` is the VMEM id."""

    seed: bytes
    public: bytes
    _private: ed25519.Ed25519PrivateKey = field(compare=False)
    alg: int = SIG_ED25519

    @classmethod
    def from_seed(cls, seed: bytes) -> SigningKey:
        if len(seed) != 32:
            raise ValueError("an Ed25519 seed is 32 bytes")
        private = ed25519.Ed25519PrivateKey.from_private_bytes(seed)
        return cls(seed, private.public_key().public_bytes_raw(), private)

    @classmethod
    def generate(cls) -> SigningKey:
        return cls.from_seed(random_bytes(32))

    def sign(self, message: bytes) -> bytes:
        return self._private.sign(message)

    def __repr__(self) -> str:
        return f"SigningKey(public={self.public[:4].hex()}…)"


def verify_signature(alg: int, public: bytes, message: bytes, signature: bytes) -> bool:
    """True when ``signature`` is valid; False for a bad signature, a malformed key, or an
    algorithm this reader does not implement (ML-DSA-65 is reserved in v1)."""
    if alg != SIG_ED25519 or len(public) != ED25519_PK_LEN or len(signature) != ED25519_SIG_LEN:
        return False
    try:
        ed25519.Ed25519PublicKey.from_public_bytes(public).verify(signature, message)
    except (InvalidSignature, ValueError):
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Passphrases and recovery phrases


@dataclass(frozen=True)
class KdfParams:
    """Argon2id parameters as stored in cleartext in a passphrase slot."""

    memory_kib: int
    time_cost: int
    parallelism: int
    salt: bytes

    def check_reader_bounds(self) -> None:
        """Refuse parameters a hostile host could use to exhaust memory or time (spec §4.2)."""
        if not 8 <= self.memory_kib <= ARGON2_READER_MAX_M:
            raise LimitExceeded(f"Argon2id memory {self.memory_kib} KiB is outside 8..{ARGON2_READER_MAX_M}")
        if not 1 <= self.time_cost <= ARGON2_READER_MAX_T:
            raise LimitExceeded(f"Argon2id time cost {self.time_cost} is outside 1..{ARGON2_READER_MAX_T}")
        if not 1 <= self.parallelism <= ARGON2_READER_MAX_P:
            raise LimitExceeded(f"Argon2id parallelism {self.parallelism} is outside 1..{ARGON2_READER_MAX_P}")
        if not ARGON2_SALT_MIN <= len(self.salt) <= ARGON2_SALT_MAX:
            raise LimitExceeded(f"Argon2id salt of {len(self.salt)} bytes is outside 16..32")
        if self.memory_kib < 8 * self.parallelism:
            raise LimitExceeded("Argon2id memory must be at least 8 KiB per lane")

    @classmethod
    def fresh(cls, params: tuple[int, int, int] | None = None) -> KdfParams:
        """New parameters for a passphrase slot; writers never go below 64 MiB and t = 3
        (except with CAMILLO_INSECURE_TEST_KDF=1, for tests)."""
        m, t, p = params or writer_kdf_defaults()
        if os.environ.get("CAMILLO_INSECURE_TEST_KDF") != "1" and (m < ARGON2_WRITER_MIN_M or t < ARGON2_WRITER_MIN_T):
            raise UsageError(f"Argon2id parameters below m={ARGON2_WRITER_MIN_M} KiB, t={ARGON2_WRITER_MIN_T} are too weak "
                             "for a passphrase slot")
        return cls(m, t, p, random_bytes(16))


def writer_kdf_defaults() -> tuple[int, int, int]:
    """What new passphrase slots use: the spec defaults, or the tiny test-only parameters when
    CAMILLO_INSECURE_TEST_KDF=1 (never set this for a real vault)."""
    if os.environ.get("CAMILLO_INSECURE_TEST_KDF") == "1":
        return ARGON2_TEST
    return ARGON2_DEFAULT


def normalize_passphrase(passphrase: str) -> bytes:
    if not passphrase:
        raise UsageError("the passphrase is empty")
    return unicodedata.normalize("NFC", passphrase).encode("utf-8")


def argon2id(passphrase: str, params: KdfParams) -> bytes:
    params.check_reader_bounds()
    return _argon2_hash(
        normalize_passphrase(passphrase),
        params.salt,
        time_cost=params.time_cost,
        memory_cost=params.memory_kib,
        parallelism=params.parallelism,
        hash_len=32,
        type=_Argon2Type.ID,
    )


def new_recovery_phrase() -> str:
    """24 BIP39 English words encoding 256 bits of fresh entropy."""
    return _MNEMONIC.to_mnemonic(random_bytes(32))


def normalize_recovery_phrase(phrase: str) -> str:
    return " ".join(unicodedata.normalize("NFKD", phrase).lower().split())


def recovery_entropy(phrase: str) -> bytes:
    """The entropy behind a BIP39 phrase of 12 to 24 words, checksum enforced."""
    words = normalize_recovery_phrase(phrase)
    count = len(words.split())
    if count not in (12, 15, 18, 21, 24):
        raise WrongCredential(f"a recovery phrase has 12 to 24 words; this one has {count}")
    unknown = [i for i, w in enumerate(words.split(), 1) if w not in _MNEMONIC.wordlist]
    if unknown:  # by position: a mistyped word is most of a real one, so it is never echoed
        raise WrongCredential(f"word {unknown[0]} of the recovery phrase is not a recovery-phrase word; "
                              "check its spelling")
    try:
        return bytes(_MNEMONIC.to_entropy(words))
    except ValueError:
        raise WrongCredential("the recovery phrase's checksum is wrong; a word is missing or mistyped") from None


def is_recovery_word(word: str) -> bool:
    return word.lower() in _MNEMONIC.wordlist
