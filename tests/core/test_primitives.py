"""VMEM-1 primitives (camillo.primitives): HPKE wraps, content AEAD, Padmé, Argon2id bounds,
recovery phrases, signatures and secret handling."""

from __future__ import annotations

import time
import unicodedata

import pytest
from camillo import primitives as P
from camillo.errors import LimitExceeded, UsageError, WrongCredential
from camillo.primitives import CryptoFailure
from hypothesis import given, settings
from hypothesis import strategies as st
from mnemonic import Mnemonic

MNEMONIC = Mnemonic("english")
ZERO_PHRASE = " ".join(["abandon"] * 23 + ["art"])  # BIP39 vector for 32 zero bytes


@pytest.fixture(scope="module")
def recipient() -> P.RecipientKey:
    return P.RecipientKey.from_seed(bytes(range(32)))


@pytest.fixture(scope="module")
def other_recipient() -> P.RecipientKey:
    return P.RecipientKey.from_seed(bytes(range(1, 33)))


@pytest.fixture(scope="module")
def wrap(recipient) -> bytes:
    return P.hpke_wrap(recipient.public, b"K" * 32, b"info")


# ---------------------------------------------------------------------------------------------
# Constants and helpers


def test_suite_constants():
    assert P.WRAP_LEN == P.XWING_ENC_LEN + P.KEY_LEN + P.TAG_LEN == 1168
    assert P.XWING_PK_LEN == 1216
    assert P.ARGON2_TEST == (8192, 1, 1)


def test_labelled_and_tagged_hash():
    assert P.labelled("vmem/v1/x", b"a", b"b") == b"vmem/v1/x\x00ab"
    assert P.tagged_hash("vmem/v1/x", b"ab") == P.sha256(b"vmem/v1/x\x00ab")
    assert P.tagged_hash("vmem/v1/x", b"ab") != P.tagged_hash("vmem/v1/y", b"ab")
    with pytest.raises(ValueError, match="not a VMEM label"):
        P.labelled("vmem/v2/x")
    with pytest.raises(ValueError, match="not a VMEM label"):
        P.labelled("other")


def test_constant_time_equal():
    assert P.constant_time_equal(b"abc", b"abc")
    assert not P.constant_time_equal(b"abc", b"abd")
    assert not P.constant_time_equal(b"abc", b"ab")


def test_random_bytes():
    a, b = P.random_bytes(32), P.random_bytes(32)
    assert len(a) == 32 and a != b
    assert P.random_bytes(0) == b""


# ---------------------------------------------------------------------------------------------
# X-Wing keys and HPKE wraps


def test_recipient_key_from_seed_is_deterministic(recipient):
    again = P.RecipientKey.from_seed(bytes(range(32)))
    assert again.public == recipient.public
    assert again == recipient
    assert len(recipient.public) == P.XWING_PK_LEN
    assert P.RecipientKey.generate().public != recipient.public


def test_recipient_key_repr_hides_the_seed(recipient):
    text = repr(recipient)
    assert recipient.seed.hex() not in text
    assert text.startswith("RecipientKey(public=")


@pytest.mark.parametrize("n", [0, 16, 31, 33, 64])
def test_recipient_key_rejects_wrong_seed_length(n):
    with pytest.raises(ValueError, match="32 bytes"):
        P.RecipientKey.from_seed(bytes(n))


def test_hpke_wrap_is_exactly_1168_bytes_and_randomised(recipient, wrap):
    assert len(wrap) == 1168 == P.WRAP_LEN
    again = P.hpke_wrap(recipient.public, b"K" * 32, b"info")
    assert len(again) == 1168
    assert again != wrap


@settings(max_examples=30, deadline=None)
@given(key=st.binary(min_size=32, max_size=32), info=st.binary(max_size=200))
def test_hpke_round_trip(recipient, key, info):
    wrapped = P.hpke_wrap(recipient.public, key, info)
    assert len(wrapped) == P.WRAP_LEN
    assert P.hpke_unwrap(recipient, wrapped, info) == key


@pytest.mark.parametrize("n", [0, 16, 31, 33, 64])
def test_hpke_wrap_refuses_keys_that_are_not_32_bytes(recipient, n):
    with pytest.raises(ValueError, match="32-byte keys"):
        P.hpke_wrap(recipient.public, bytes(n), b"info")


def test_hpke_unwrap_with_the_right_key(recipient, wrap):
    assert P.hpke_unwrap(recipient, wrap, b"info") == b"K" * 32


def test_hpke_unwrap_with_a_wrong_key(other_recipient, wrap):
    with pytest.raises(CryptoFailure, match="does not open"):
        P.hpke_unwrap(other_recipient, wrap, b"info")


@pytest.mark.parametrize("info", [b"", b"infO", b"info\x00", b"inf"])
def test_hpke_unwrap_with_a_wrong_info(recipient, wrap, info):
    with pytest.raises(CryptoFailure):
        P.hpke_unwrap(recipient, wrap, info)


@pytest.mark.parametrize("n", [0, 1, 48, 1120, 1167])
def test_hpke_unwrap_truncated(recipient, wrap, n):
    with pytest.raises(CryptoFailure, match="a wrap is 1168 bytes"):
        P.hpke_unwrap(recipient, wrap[:n], b"info")


@pytest.mark.parametrize("extra", [b"\x00", b"\x01" * 16, bytes(1168)])
def test_hpke_unwrap_extended(recipient, wrap, extra):
    with pytest.raises(CryptoFailure, match="a wrap is 1168 bytes"):
        P.hpke_unwrap(recipient, wrap + extra, b"info")


def test_hpke_unwrap_every_single_flipped_byte(recipient, wrap):
    """Exhaustive over all 1168 positions: every change is CryptoFailure, nothing else."""
    for i in range(len(wrap)):
        for mask in (0x01, 0x80):
            bad = bytearray(wrap)
            bad[i] ^= mask
            with pytest.raises(CryptoFailure):
                P.hpke_unwrap(recipient, bytes(bad), b"info")


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_hpke_unwrap_random_corruption(recipient, wrap, data):
    i = data.draw(st.integers(0, len(wrap) - 1))
    mask = data.draw(st.integers(1, 255))
    bad = bytearray(wrap)
    bad[i] ^= mask
    with pytest.raises(CryptoFailure):
        P.hpke_unwrap(recipient, bytes(bad), b"info")


@pytest.mark.parametrize(
    "x25519_enc",
    [bytes(32), b"\x01" + bytes(31), b"\xec" + b"\xff" * 30 + b"\x7f"],
    ids=["zero", "one", "p-1"],
)
def test_hpke_unwrap_low_order_x25519_share_is_crypto_failure(recipient, wrap, x25519_enc):
    bad = wrap[: P.XWING_ENC_LEN - 32] + x25519_enc + wrap[P.XWING_ENC_LEN :]
    assert len(bad) == P.WRAP_LEN
    with pytest.raises(CryptoFailure):
        P.hpke_unwrap(recipient, bad, b"info")


def test_hpke_unwrap_garbage(recipient):
    for filler in (bytes(P.WRAP_LEN), b"\xff" * P.WRAP_LEN, P.random_bytes(P.WRAP_LEN)):
        with pytest.raises(CryptoFailure):
            P.hpke_unwrap(recipient, filler, b"info")


@pytest.mark.parametrize("n", [0, 32, 1184, 1215, 1217, 2432])
def test_check_recipient_public_rejects_wrong_lengths(n):
    with pytest.raises(CryptoFailure, match="1216 bytes"):
        P.check_recipient_public(bytes(n))


def test_check_recipient_public_accepts_a_real_key(recipient):
    P.check_recipient_public(recipient.public)


def test_check_recipient_public_rejects_invalid_ml_kem_key():
    with pytest.raises(CryptoFailure, match="invalid X-Wing public key"):
        P.check_recipient_public(b"\xff" * P.XWING_PK_LEN)


def test_hpke_wrap_to_malformed_public_key_is_crypto_failure():
    with pytest.raises(CryptoFailure):
        P.hpke_wrap(b"\xff" * P.XWING_PK_LEN, bytes(32), b"info")
    with pytest.raises(CryptoFailure):
        P.hpke_wrap(bytes(100), bytes(32), b"info")


LOW_ORDER = pytest.mark.regression  # was a bug found by fuzzing; fixed


@LOW_ORDER
@pytest.mark.parametrize("tail", [bytes(32), b"\x01" + bytes(31)], ids=["zero", "one"])
def test_check_recipient_public_rejects_low_order_x25519_point(recipient, tail):
    with pytest.raises(CryptoFailure):
        P.check_recipient_public(recipient.public[:1184] + tail)


@LOW_ORDER
@pytest.mark.parametrize("tail", [bytes(32), b"\x01" + bytes(31)], ids=["zero", "one"])
def test_hpke_wrap_to_low_order_x25519_point_is_crypto_failure(recipient, tail):
    with pytest.raises(CryptoFailure):
        P.hpke_wrap(recipient.public[:1184] + tail, bytes(32), b"info")


# ---------------------------------------------------------------------------------------------
# Content AEAD and body keys


def test_derive_body_keys_is_deterministic_and_sized():
    a = P.derive_body_keys(b"p" * 32, "vmem/v1/segment", b"s" * 24, b"ctx")
    b = P.derive_body_keys(b"p" * 32, "vmem/v1/segment", b"s" * 24, b"ctx")
    assert (a.key, a.nonce, a.commitment) == (b.key, b.nonce, b.commitment)
    assert (len(a.key), len(a.nonce), len(a.commitment)) == (32, 24, 32)
    assert len({a.key, a.nonce, a.commitment}) == 3


def test_derive_body_keys_is_separated_by_every_input():
    def keys(prk=b"p" * 32, label="vmem/v1/segment", salt=b"s" * 24, context=b"ctx"):
        k = P.derive_body_keys(prk, label, salt, context)
        return (k.key, k.nonce, k.commitment)

    reference = keys()
    variants = [
        keys(label="vmem/v1/slot"),
        keys(label="vmem/v1/envelope"),
        keys(prk=b"q" * 32),
        keys(salt=b"t" * 24),
        keys(context=b"ctX"),
        keys(context=b""),
    ]
    all_keys = {reference, *variants}
    assert len(all_keys) == len(variants) + 1
    # No component is shared between any two derivations.
    components = [c for k in all_keys for c in k]
    assert len(set(components)) == len(components)


def test_derive_body_keys_refuses_non_vmem_labels():
    with pytest.raises(ValueError):
        P.derive_body_keys(b"p" * 32, "segment", b"s" * 24, b"")


@settings(max_examples=100)
@given(
    key=st.binary(min_size=32, max_size=32),
    nonce=st.binary(min_size=24, max_size=24),
    aad=st.binary(max_size=64),
    plaintext=st.binary(max_size=512),
)
def test_aead_round_trip(key, nonce, aad, plaintext):
    ct = P.aead_encrypt(key, nonce, aad, plaintext)
    assert len(ct) == len(plaintext) + P.TAG_LEN
    assert P.aead_decrypt(key, nonce, aad, ct) == plaintext


@settings(max_examples=150)
@given(
    plaintext=st.binary(max_size=128),
    aad=st.binary(max_size=32),
    where=st.sampled_from(["ciphertext", "aad", "nonce", "key"]),
    data=st.data(),
)
def test_aead_tamper_is_crypto_failure(plaintext, aad, where, data):
    key, nonce = b"k" * 32, b"n" * 24
    ct = P.aead_encrypt(key, nonce, aad, plaintext)
    parts = {"ciphertext": ct, "aad": aad or b"\x00", "nonce": nonce, "key": key}
    target = bytearray(parts[where])
    if where == "aad" and not aad:
        parts["aad"] = bytes(target)  # appended byte is the change
    else:
        target[data.draw(st.integers(0, len(target) - 1))] ^= data.draw(st.integers(1, 255))
        parts[where] = bytes(target)
    with pytest.raises(CryptoFailure, match="does not verify"):
        P.aead_decrypt(parts["key"], parts["nonce"], parts["aad"], parts["ciphertext"])


@pytest.mark.parametrize("n", [0, 1, 15])
def test_aead_decrypt_too_short(n):
    with pytest.raises(CryptoFailure):
        P.aead_decrypt(b"k" * 32, b"n" * 24, b"", bytes(n))


def test_aead_truncated_or_extended():
    ct = P.aead_encrypt(b"k" * 32, b"n" * 24, b"", b"hello world")
    for bad in (ct[:-1], ct + b"\x00", ct[1:]):
        with pytest.raises(CryptoFailure):
            P.aead_decrypt(b"k" * 32, b"n" * 24, b"", bad)


# ---------------------------------------------------------------------------------------------
# Padmé

# Observed bound: for L >= 4096 at least the 4 top bits after the leading one are kept, so
# padme(L) - L <= 2**(e-s) - 1 < L / 16 (6.25 %); the measured maximum is ~6.2467 % (L = 4097).
PADME_BOUND = 1 / 16


def test_padme_small_values():
    assert [P.padme(n) for n in range(12)] == [0, 1, 2, 3, 4, 5, 6, 7, 8, 10, 10, 12]
    assert P.padme(4096) == 4096
    assert P.padme(4097) == 4352


def test_padme_exhaustive_properties_up_to_256k():
    previous = 0
    worst = 0.0
    for length in range(0, 1 << 18):
        p = P.padme(length)
        assert p >= length
        assert p >= previous  # monotone non-decreasing
        previous = p
        if length >= 4096:
            worst = max(worst, (p - length) / length)
    assert worst < PADME_BOUND
    assert worst > 0.062  # the bound is tight: 255/4097


@settings(max_examples=300)
@given(st.integers(min_value=0, max_value=2**40))
def test_padme_properties(length):
    p = P.padme(length)
    assert p >= length
    assert P.padme(p) == p  # a bucket is its own bucket
    assert P.padme(length + 1) >= p
    if length >= 4096:
        assert (p - length) < length * PADME_BOUND
        # Only O(log log L) significant bits remain.
        e = length.bit_length() - 1
        s = e.bit_length()
        assert p % (1 << (e - s)) == 0
    if length >= 2:
        assert p == length or P.padme(p - 1) == p


# ---------------------------------------------------------------------------------------------
# Argon2id parameters


SALT16 = b"s" * 16


@pytest.mark.parametrize(
    "params, message",
    [
        ((P.ARGON2_READER_MAX_M + 1, 1, 1, SALT16), "memory"),
        ((4 * 1024 * 1024, 1, 1, SALT16), "memory"),
        ((2**32 - 1, 1, 1, SALT16), "memory"),
        ((7, 1, 1, SALT16), "memory"),
        ((0, 1, 1, SALT16), "memory"),
        ((8192, 17, 1, SALT16), "time cost"),
        ((8192, 2**32 - 1, 1, SALT16), "time cost"),
        ((8192, 0, 1, SALT16), "time cost"),
        ((8192, 1, 17, SALT16), "parallelism"),
        ((8192, 1, 255, SALT16), "parallelism"),
        ((8192, 1, 0, SALT16), "parallelism"),
        ((8192, 1, 1, b"s" * 15), "salt of 15 bytes"),
        ((8192, 1, 1, b"s" * 33), "salt of 33 bytes"),
        ((8192, 1, 1, b""), "salt of 0 bytes"),
        ((64, 1, 16, SALT16), "8 KiB per lane"),
    ],
)
def test_kdf_reader_bounds_refuse(params, message):
    kdf = P.KdfParams(*params)
    with pytest.raises(LimitExceeded, match=message):
        kdf.check_reader_bounds()
    # argon2id refuses before doing any work (a hostile slot cannot make us allocate 4 GiB).
    start = time.perf_counter()
    with pytest.raises(LimitExceeded):
        P.argon2id("passphrase", kdf)
    assert time.perf_counter() - start < 0.5


@pytest.mark.parametrize(
    "params",
    [
        (P.ARGON2_READER_MAX_M, P.ARGON2_READER_MAX_T, P.ARGON2_READER_MAX_P, b"s" * 32),
        (8, 1, 1, SALT16),
        (*P.ARGON2_TEST, SALT16),
        (*P.ARGON2_DEFAULT, SALT16),
        (128, 16, 16, b"s" * 24),
    ],
)
def test_kdf_reader_bounds_accept(params):
    P.KdfParams(*params).check_reader_bounds()


def test_argon2id_with_test_params_is_deterministic():
    kdf = P.KdfParams(*P.ARGON2_TEST, SALT16)
    a = P.argon2id("correct horse", kdf)
    assert len(a) == 32
    assert P.argon2id("correct horse", kdf) == a
    assert P.argon2id("correct horsE", kdf) != a
    assert P.argon2id("correct horse", P.KdfParams(*P.ARGON2_TEST, b"t" * 16)) != a
    assert P.argon2id("correct horse", P.KdfParams(8192, 2, 1, SALT16)) != a


def test_argon2id_normalizes_passphrases_to_nfc():
    kdf = P.KdfParams(*P.ARGON2_TEST, SALT16)
    composed = "caf\u00e9"
    decomposed = unicodedata.normalize("NFD", composed)
    assert composed != decomposed
    assert P.argon2id(composed, kdf) == P.argon2id(decomposed, kdf)


def test_empty_passphrase_is_usage_error():
    with pytest.raises(UsageError, match="empty"):
        P.argon2id("", P.KdfParams(*P.ARGON2_TEST, SALT16))


def test_kdf_fresh_and_writer_defaults(monkeypatch):
    monkeypatch.setenv("CAMILLO_INSECURE_TEST_KDF", "1")
    assert P.writer_kdf_defaults() == P.ARGON2_TEST
    fresh = P.KdfParams.fresh()
    assert (fresh.memory_kib, fresh.time_cost, fresh.parallelism) == P.ARGON2_TEST
    assert len(fresh.salt) == 16 and fresh.salt != P.KdfParams.fresh().salt
    fresh.check_reader_bounds()
    monkeypatch.delenv("CAMILLO_INSECURE_TEST_KDF")
    assert P.writer_kdf_defaults() == P.ARGON2_DEFAULT
    monkeypatch.setenv("CAMILLO_INSECURE_TEST_KDF", "yes")  # only exactly "1" enables it
    assert P.writer_kdf_defaults() == P.ARGON2_DEFAULT
    assert P.ARGON2_DEFAULT[0] >= P.ARGON2_WRITER_MIN_M and P.ARGON2_DEFAULT[1] >= P.ARGON2_WRITER_MIN_T


# ---------------------------------------------------------------------------------------------
# Recovery phrases


def test_new_recovery_phrase_round_trips():
    phrase = P.new_recovery_phrase()
    words = phrase.split()
    assert len(words) == 24
    assert all(P.is_recovery_word(w) for w in words)
    entropy = P.recovery_entropy(phrase)
    assert len(entropy) == 32
    assert MNEMONIC.to_mnemonic(entropy) == phrase
    assert P.new_recovery_phrase() != phrase


def test_known_bip39_vector():
    assert P.recovery_entropy(ZERO_PHRASE) == bytes(32)


@settings(max_examples=50)
@given(st.binary(min_size=32, max_size=32))
def test_recovery_entropy_round_trip(entropy):
    assert P.recovery_entropy(MNEMONIC.to_mnemonic(entropy)) == entropy


@pytest.mark.parametrize("n", [16, 20, 24, 28])
def test_shorter_bip39_phrases_are_accepted(n):
    entropy = bytes(range(n))
    assert P.recovery_entropy(MNEMONIC.to_mnemonic(entropy)) == entropy


def test_wrong_checksum_word():
    phrase = " ".join(["abandon"] * 24)  # checksum of zero entropy is "art", not "abandon"
    with pytest.raises(WrongCredential, match="checksum is wrong"):
        P.recovery_entropy(phrase)


@settings(max_examples=40)
@given(st.binary(min_size=32, max_size=32), st.integers(0, 22))
def test_swapped_words_fail_the_checksum_or_change_entropy(entropy, i):
    words = MNEMONIC.to_mnemonic(entropy).split()
    if words[i] == words[i + 1]:
        return
    words[i], words[i + 1] = words[i + 1], words[i]
    try:
        assert P.recovery_entropy(" ".join(words)) != entropy
    except WrongCredential as exc:
        assert "checksum" in str(exc)


def test_unknown_word():
    phrase = " ".join(["abandon"] * 23 + ["xyzzy"])
    with pytest.raises(WrongCredential, match="word 24 of the recovery phrase is not a recovery-phrase word") as info:
        P.recovery_entropy(phrase)
    assert "xyzzy" not in str(info.value)  # a mistyped word is most of a real one: never echoed


@pytest.mark.parametrize("count", [0, 1, 11, 13, 23, 25, 48])
def test_wrong_word_count(count):
    phrase = " ".join(["abandon"] * count)
    with pytest.raises(WrongCredential, match=f"this one has {count}"):
        P.recovery_entropy(phrase)


def test_eleven_words_names_the_count():
    with pytest.raises(WrongCredential, match="12 to 24 words; this one has 11"):
        P.recovery_entropy(" ".join(ZERO_PHRASE.split()[:11]))


@pytest.mark.parametrize(
    "variant",
    [
        "  " + ZERO_PHRASE.replace(" ", "   ") + "  ",
        ZERO_PHRASE.upper(),
        ZERO_PHRASE.title(),
        ZERO_PHRASE.replace(" ", "\n"),
        ZERO_PHRASE.replace(" ", "\t"),
        "\u3000".join(ZERO_PHRASE.split()),  # ideographic space
    ],
)
def test_recovery_phrase_normalization(variant):
    assert P.normalize_recovery_phrase(variant) == ZERO_PHRASE
    assert P.recovery_entropy(variant) == bytes(32)


def test_is_recovery_word():
    assert P.is_recovery_word("abandon")
    assert P.is_recovery_word("ZOO")
    assert not P.is_recovery_word("xyzzy")
    assert not P.is_recovery_word("")


# ---------------------------------------------------------------------------------------------
# Signatures


@pytest.fixture(scope="module")
def signer() -> P.SigningKey:
    return P.SigningKey.from_seed(b"\x07" * 32)


def test_signing_key_is_deterministic(signer):
    again = P.SigningKey.from_seed(b"\x07" * 32)
    assert again.public == signer.public and len(signer.public) == 32
    assert signer.alg == P.SIG_ED25519 == 1
    assert signer.sign(b"m") == again.sign(b"m")  # Ed25519 is deterministic
    assert len(signer.sign(b"m")) == P.ED25519_SIG_LEN
    assert signer.seed.hex() not in repr(signer)
    with pytest.raises(ValueError):
        P.SigningKey.from_seed(bytes(31))


@settings(max_examples=50)
@given(st.binary(max_size=256))
def test_sign_verify(signer, message):
    sig = signer.sign(message)
    assert P.verify_signature(P.SIG_ED25519, signer.public, message, sig)
    assert not P.verify_signature(P.SIG_ED25519, signer.public, message + b"x", sig)


def test_verify_wrong_key(signer):
    sig = signer.sign(b"m")
    other = P.SigningKey.from_seed(b"\x08" * 32)
    assert P.verify_signature(1, other.public, b"m", sig) is False


@settings(max_examples=100)
@given(st.integers(0, 63), st.integers(1, 255))
def test_verify_flipped_signature(signer, i, mask):
    sig = bytearray(signer.sign(b"m"))
    sig[i] ^= mask
    assert P.verify_signature(1, signer.public, b"m", bytes(sig)) is False


@settings(max_examples=100)
@given(st.integers(0, 31), st.integers(1, 255))
def test_verify_flipped_public_key(signer, i, mask):
    sig = signer.sign(b"m")
    pk = bytearray(signer.public)
    pk[i] ^= mask
    assert P.verify_signature(1, bytes(pk), b"m", sig) is False


@pytest.mark.parametrize("alg", [0, P.SIG_MLDSA65, P.SIG_SLHDSA, 255, -1, 2**70])
def test_verify_reserved_or_unknown_algorithm(signer, alg):
    sig = signer.sign(b"m")
    assert P.verify_signature(alg, signer.public, b"m", sig) is False


@pytest.mark.parametrize(
    "public, signature",
    [
        (b"", None),
        (b"short", None),
        ("pk31", None),
        ("pk33", None),
        (None, b""),
        (None, "sig63"),
        (None, "sig65"),
        (bytes(32), None),  # the identity point
        (b"\xff" * 32, None),  # not a point
    ],
)
def test_verify_malformed_inputs_return_false(signer, public, signature):
    sig = signer.sign(b"m")
    if public == "pk31":
        public = signer.public[:31]
    elif public == "pk33":
        public = signer.public + b"\x00"
    elif public is None:
        public = signer.public
    if signature == "sig63":
        signature = sig[:63]
    elif signature == "sig65":
        signature = sig + b"\x00"
    elif signature is None:
        signature = sig
    assert P.verify_signature(1, public, b"m", signature) is False


# ---------------------------------------------------------------------------------------------
# SecretBytes


def test_secret_bytes_hides_its_value():
    secret = P.SecretBytes(b"hunter2-hunter2")
    for text in (repr(secret), str(secret), f"{secret}", f"{[secret]}"):
        assert "hunter2" not in text
        assert "<hidden>" in text
    assert secret.get() == b"hunter2-hunter2"


def test_secret_bytes_wipe_zeroes_the_buffer():
    secret = P.SecretBytes(bytearray(b"top secret"))
    buffer = secret._buf  # the very buffer wipe() must overwrite
    assert not secret.wiped
    secret.wipe()
    assert bytes(buffer) == bytes(len(b"top secret"))
    assert secret.wiped
    with pytest.raises(ValueError, match="wiped"):
        secret.get()
    secret.wipe()  # idempotent


def test_secret_bytes_copies_its_input():
    source = bytearray(b"abc")
    secret = P.SecretBytes(source)
    secret.wipe()
    assert source == bytearray(b"abc")


def test_secret_bytes_equality():
    assert P.SecretBytes(b"a") == P.SecretBytes(b"a")
    assert P.SecretBytes(b"a") != P.SecretBytes(b"b")
    assert P.SecretBytes(b"a") != b"a"
    s = P.SecretBytes(b"a")
    assert hash(s) == hash(s)
