"""The sealed-body construction shared by segments, slots and envelopes (spec §6.1).

A sealed file is ``header ‖ salt(24) ‖ commitment(32) ‖ XChaCha20-Poly1305(ciphertext)`` where

* ``key ‖ nonce ‖ commitment = HKDF-Expand(prk, label ‖ 0x00 ‖ salt ‖ context, 88)``;
* the AEAD's associated data is every byte before the ciphertext (header, salt and commitment),
  so no cleartext byte can be changed without detection;
* the plaintext is ``u32 BE payload length ‖ payload ‖ zero bytes`` filling the file to its fixed
  or padded size, and readers reject any non-zero padding byte.

The commitment is compared in constant time before decryption, so a key that "happens to decrypt"
(a partitioning or invisible-salamander attack) is refused before any plaintext exists.

Pure functions; any thread may call them.
"""

from __future__ import annotations

from .primitives import (
    COMMIT_LEN,
    TAG_LEN,
    XNONCE_LEN,
    CryptoFailure,
    aead_decrypt,
    aead_encrypt,
    constant_time_equal,
    derive_body_keys,
    random_bytes,
)

SALT_LEN = XNONCE_LEN
OVERHEAD = SALT_LEN + COMMIT_LEN + TAG_LEN + 4  # salt, commitment, tag, length prefix


def seal(prk: bytes, label: str, context: bytes, header: bytes, payload: bytes, total_len: int,
         salt: bytes | None = None) -> bytes:
    """``salt``: random unless given (attachment chunks derive it, so that equal chunks under one
    compartment epoch seal to equal files: deduplication, spec §9.5)."""
    salt = random_bytes(SALT_LEN) if salt is None else salt
    if len(salt) != SALT_LEN:
        raise ValueError("salt of the wrong length")
    keys = derive_body_keys(prk, label, salt, context)
    prefix = header + salt + keys.commitment
    plaintext_len = total_len - len(prefix) - TAG_LEN
    if 4 + len(payload) > plaintext_len:
        raise ValueError(f"payload of {len(payload)} bytes does not fit a {total_len}-byte file")
    plaintext = len(payload).to_bytes(4, "big") + payload + bytes(plaintext_len - 4 - len(payload))
    return prefix + aead_encrypt(keys.key, keys.nonce, prefix, plaintext)


def open_sealed(prk: bytes, label: str, context: bytes, data: bytes, header_len: int) -> bytes:
    """Return the payload, or raise CryptoFailure naming which check failed."""
    body_start = header_len + SALT_LEN + COMMIT_LEN
    if len(data) < body_start + TAG_LEN + 4:
        raise CryptoFailure("file is too short to hold a sealed body")
    salt = data[header_len : header_len + SALT_LEN]
    commitment = data[header_len + SALT_LEN : body_start]
    keys = derive_body_keys(prk, label, salt, context)
    if not constant_time_equal(keys.commitment, commitment):
        raise CryptoFailure("key commitment does not match")
    plaintext = aead_decrypt(keys.key, keys.nonce, data[:body_start], data[body_start:])
    length = int.from_bytes(plaintext[:4], "big")
    if length > len(plaintext) - 4:
        raise CryptoFailure("payload length is larger than the file")
    if plaintext.count(b"\x00", 4 + length) != len(plaintext) - 4 - length:
        raise CryptoFailure("padding bytes are not zero")
    return plaintext[4 : 4 + length]
