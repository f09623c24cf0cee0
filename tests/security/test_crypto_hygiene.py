"""Crypto hygiene (issue 10, item 4): nonces never repeat under one key, secret-derived values are
compared in constant time, and secrets are wiped from the objects that held them when a vault locks.

* **Nonces.**  The primitives layer is wrapped *inside this test process only* (every camillo module's
  reference to ``aead_encrypt``, and the HPKE suite object), then a realistic session runs for real
  (:mod:`tests.security.session`: appends, grants, agents, enrollment, passphrase change, revocations,
  erasure, recovery re-issue, compaction, caches and device state saved).  Every (key, nonce) of
  XChaCha20-Poly1305 and every HPKE encapsulation is recorded; none may repeat.
* **Constant time.**  An AST scan of the core finds every ``==``/``!=`` whose operands involve a
  secret-derived or authenticating value (commitments, tags, check values, SAS codes, hashes,
  signatures, seeds, keys).  Each site must either use ``hmac.compare_digest`` (through
  ``primitives.constant_time_equal``) or be listed in :data:`REVIEWED` with the reason it is not a
  secret comparison.  A new site fails the test until someone reviews it.
* **Wiping.**  After ``Vault.lock()`` the ``SecretBytes`` buffers that held the master secret and the
  epoch secrets are zero, and no secret is reachable from the locked vault object any more.

Runs on pytest's main thread.
"""

from __future__ import annotations

import ast
import os
import pathlib
import re
import sys
from collections import Counter

import pytest

from .scan import SecretScanner, reachable
from .session import NEW_PASSPHRASE, home, run_session

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def quiet_env(tmp_path, monkeypatch):
    monkeypatch.setenv("CAMILLO_HOME", str(tmp_path / "home"))
    return tmp_path


# ---------------------------------------------------------------------------------------------
# Nonces


class NonceRecorder:
    def __init__(self) -> None:
        self.aead: list[tuple[bytes, bytes]] = []
        self.hpke_enc: list[bytes] = []


def _instrument(monkeypatch) -> NonceRecorder:
    import camillo.primitives as prim

    rec = NonceRecorder()
    original = prim.aead_encrypt

    def aead_encrypt(key: bytes, nonce: bytes, aad: bytes, plaintext: bytes) -> bytes:
        rec.aead.append((bytes(key), bytes(nonce)))
        return original(key, nonce, aad, plaintext)

    patched = 0
    for name, mod in list(sys.modules.items()):
        if name.startswith("camillo") and getattr(mod, "aead_encrypt", None) is original:
            monkeypatch.setattr(mod, "aead_encrypt", aead_encrypt)
            patched += 1
    assert patched >= 2  # primitives itself, sealed, enrollment...

    suite = prim._HPKE_SUITE

    class Suite:
        def encrypt(self, plaintext, public_key, info=b""):
            out = suite.encrypt(plaintext, public_key, info=info)
            rec.hpke_enc.append(bytes(out[: prim.XWING_ENC_LEN]))
            return out

        def decrypt(self, ciphertext, private_key, info=b""):
            return suite.decrypt(ciphertext, private_key, info=info)

    monkeypatch.setattr(prim, "_HPKE_SUITE", Suite())
    return rec


def test_nonces_never_repeat_under_one_key_in_a_realistic_session(quiet_env, monkeypatch):
    rec = _instrument(monkeypatch)
    s = run_session(quiet_env)
    s.vault.lock()  # the cache and the device state are sealed again on lock
    pairs = Counter(rec.aead)
    repeated = [(k.hex()[:12], n.hex()[:12], c) for (k, n), c in pairs.items() if c > 1]
    assert not repeated, f"(key, nonce) pairs used more than once: {repeated[:10]}"
    per_key = Counter(k for k, _ in rec.aead)
    # The test saw the cases that matter: many encryptions, and keys used for several messages
    # (the enrollment response key seals the response and the acknowledgement).
    assert len(rec.aead) > 150, len(rec.aead)
    assert any(c > 1 for c in per_key.values())
    nonces = Counter(n for _, n in rec.aead)
    assert all(c == 1 for c in nonces.values()), "a 24-byte nonce appeared twice (even under another key)"
    encs = Counter(rec.hpke_enc)
    assert len(rec.hpke_enc) > 50 and all(c == 1 for c in encs.values()), "an HPKE encapsulation repeated"


def test_the_nonce_recorder_would_see_a_repeat(quiet_env, monkeypatch):
    """The instrument works: a deliberately repeated salt makes the same (key, nonce) twice."""
    import camillo.sealed as sealed

    rec = _instrument(monkeypatch)
    monkeypatch.setattr(sealed, "random_bytes", lambda n: bytes(n))
    prk = bytes(range(32))
    sealed.seal(prk, "vmem/v1/segment", b"ctx", b"h", b"one", 200)
    sealed.seal(prk, "vmem/v1/segment", b"ctx", b"h", b"two", 200)
    assert len(rec.aead) == 2 and rec.aead[0] == rec.aead[1]


# ---------------------------------------------------------------------------------------------
# Constant-time comparisons

SECRETISH = re.compile(
    r"commit|\btag|tag_for|mac\b|\bsas\b|\.sas\b|typed_sas|secret|seed|vms|passphrase|password|digest|sha256|"
    r"hash|checksum|check\b|\bsig\b|signature|_key\b|nonce|\bpop\b|token|\bcode\b|entropy",
    re.I,
)
# Operands that are not secret material: sizes, types, enum members and module constants, kinds.
NOT_A_VALUE = re.compile(r"^(len|type|isinstance|int|str)\(|\.kind\b|\.type\b|\.method\b|\.keystore\b|\.alg\b|"
                         r"^[A-Z][A-Z0-9_]*$|\.[A-Z][A-Z0-9_]+$|^kind$|^slot_type$")

# Every secret-looking ``==``/``!=`` in the core that is *not* a comparison of secret material, with
# the reason.  Keyed by (file, source of the comparison).  docs/security.md summarises this review.
REVIEWED = {
    ("session/listing.py", "decoded[0] == _digest(meta['unread'])"):
        "the digest of the list of segment names not read that the local state keeps beside their epochs (public "
        "within it, no secret in it): a mismatch only reads those segments again",
    ("session/resume.py", "reader.log_special != special_digest(((b, bool(f & 4)) for b, f in held))"):
        "a digest of batch ids and acceptance flags the local state keeps (public within it, no secret in it): "
        "a mismatch only sends the warm open to the stored log's chains",
    ("session/rostermemo.py", "row[0][:32] != digest"):
        "the digest of the batch ids and flags a kept roster was computed from (public within the local "
        "state, no secret in it): a mismatch only computes the roster again",
    ("descriptor.py", "m.get(4) != d.check()"):
        "the descriptor's check value is a public hash of public fields (spec §4.2: not a security control)",
    ("credentials.py", "m.get(15) != _checksum(m)"):
        "a recipient key file's checksum is a hash of what the file shows (its seeds are sealed under the "
        "holder's passphrase); it tells a damaged file from a wrong passphrase",
    ("slots.py", "sha256(data[:BODY_END]) != data[BODY_END:]"):
        "the slot checksum is a public hash of public bytes (it tells damage from a wrong passphrase)",
    ("slots.py", "st.get(S.WRAP_HASH) == sha256(header.wrap)"):
        "compares the public wrap's hash with the statement already authenticated by the AEAD",
    ("packs.py", "h.digest() != digest"):
        "a pack's checksum covers public bytes; packs are authenticated file by file",
    ("storepacks.py", "digest.digest() != content_hash_of(pack)"):
        "a pack downloaded from an object store against its public name (its segments are checked one by one)",
    ("envelopes.py", "data[8:12] == tag_for(data[12:12 + XWING_ENC_LEN], recipient_id)"):
        "the envelope tag is a public routing hint (a host that times it learns less than from the "
        "HPKE attempt that follows)",
    ("ops/enrollment.py", "session_id(secret) != sid"):
        "sid is printed in the QR code next to the secret: a check value of the code's own transcription",
    ("ops/enrollment.py", "CROCKFORD_CHECK[n % 37] != cleaned[52]"):
        "the typed code's check character, computed locally from what the user typed",
    ("ops/enrollment.py", "sha256(slot) != slot_hash"):
        "the slot is a public vault file; its hash comes from the authenticated response",
    ("importers/pam.py", "actual != checksum"):
        "a PAM export's integrity checksum over public (unencrypted) export content",
    ("importers/portable_memory.py", "hashlib.sha256(raw).hexdigest() != entry['sha256']"):
        "a Portable Memory bundle's file digest over public export content",
    ("importers/portable_memory.py", "digest_ != hashlib.sha256(raw).hexdigest()"):
        "a Portable Memory bundle digest over public export content",
    ("storage.py", "sha256(data) == expected"):
        "a content-addressed file's hash against its public name",
    ("records.py", "k != sig_key"):
        "an integer map key (the signatures' field number), not a signature",
    ("cli/common.py", "prompt_secret('Repeat it: ', env) != first"):
        "the user typing a new passphrase twice on their own terminal (no attacker measures it)",
}


def _operand_text(node: ast.AST) -> str:
    return ast.unparse(node)


def secret_comparisons() -> list[tuple[str, int, str]]:
    """(file relative to core/camillo, line, source) of every ``==``/``!=`` on secret-looking values."""
    base = ROOT / "core" / "camillo"
    out = []
    for path in sorted(base.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare) or not any(isinstance(o, (ast.Eq, ast.NotEq)) for o in node.ops):
                continue
            operands = [node.left, *node.comparators]
            if any(isinstance(o, ast.Constant) and not isinstance(o.value, bytes) for o in operands):
                continue  # compared with a number, a text or None: not secret material
            texts = [_operand_text(o) for o in operands]
            if all(NOT_A_VALUE.search(t) for t in texts):
                continue
            if any(SECRETISH.search(t) and not NOT_A_VALUE.search(t) for t in texts):
                out.append((path.relative_to(base).as_posix(), node.lineno, ast.unparse(node)))
    return out


def test_secret_comparisons_are_constant_time_or_reviewed():
    found = secret_comparisons()
    unreviewed = [f"{f}:{line}: {src}" for f, line, src in found if (f, src) not in REVIEWED]
    assert not unreviewed, ("compare these with primitives.constant_time_equal (hmac.compare_digest), or "
                            "review them and add them to REVIEWED with the reason:\n" + "\n".join(unreviewed))


def test_reviewed_list_has_no_stale_entries():
    present = {(f, src) for f, _, src in secret_comparisons()}
    assert not set(REVIEWED) - present, set(REVIEWED) - present


def test_the_scan_catches_a_plain_comparison_of_a_commitment(tmp_path):
    """The scan itself works on the kind of code it must refuse."""
    code = "def f(keys, commitment):\n    return keys.commitment == commitment\n"
    node = ast.parse(code).body[0].body[0].value
    texts = [ast.unparse(o) for o in [node.left, *node.comparators]]
    assert any(SECRETISH.search(t) for t in texts)


def test_the_secret_comparisons_that_matter_use_compare_digest():
    """Key commitments, epoch commitments and the SAS code go through compare_digest."""
    base = ROOT / "core" / "camillo"
    src = {p.relative_to(base).as_posix(): p.read_text() for p in base.rglob("*.py")}
    assert "constant_time_equal(keys.commitment, commitment)" in src["sealed.py"]
    assert "constant_time_equal(keys.epoch_commit(" in src["session/reader.py"]
    assert "constant_time_equal(typed_sas" in src["ops/enrollment.py"]
    assert "hmac.compare_digest(a, b)" in src["primitives.py"]


# ---------------------------------------------------------------------------------------------
# Wiping on lock


def test_lock_wipes_the_secret_buffers_and_drops_every_secret(quiet_env):
    s = run_session(quiet_env)
    vault = s.vault
    s.harvest(vault, "final")
    buffers = [vault.session.keyring.master._buf] + [sb._buf for sb in vault.session.keyring.epoch_secrets.values()]
    assert buffers and all(any(b) for b in buffers)
    held = SecretScanner(s.secrets, {})
    before = [o for o in reachable(vault) if isinstance(o, (bytes, bytearray)) and held.find(o)]
    assert before, "the open vault holds secrets (else this test proves nothing)"
    master = vault.session.keyring.master
    vault.lock()
    assert all(not any(b) for b in buffers), "a SecretBytes buffer was not zeroed"
    assert master is not None and master.wiped and vault.session.keyring.master is None
    leftovers = {}
    for o in reachable(vault):
        if isinstance(o, (bytes, bytearray, str)):
            found = held.find(o)
            if found:
                leftovers.setdefault(next(iter(found)), type(o).__name__)
    assert not leftovers, f"still reachable from the locked vault: {leftovers}"


def test_lock_of_an_agent_vault_drops_the_grant_credential(quiet_env):
    from camillo import Unlock, Vault
    from camillo.session.grantfile import read_grant_file

    with home(quiet_env / "desk"):
        v, _ = Vault.create(str(quiet_env / "v"), NEW_PASSPHRASE)
        gpath = str(quiet_env / "a.grant")
        v.create_grant("coder", {"work": "write"}, gpath)
        v.lock()
    g = read_grant_file(gpath)[0]
    secrets = {"x": g.credential.recipient.seed, "e": g.credential.signer.seed}
    with home(quiet_env / "agent"):
        agent = Vault.open(str(quiet_env / "v"), Unlock.grant(gpath))
        for (cid, eid), sb in agent.session.keyring.epoch_secrets.items():
            secrets[f"epoch {eid.hex()[:8]}"] = sb.get()
        agent.lock()
    found = {lab for o in reachable(agent) if isinstance(o, (bytes, bytearray, str))
             for lab in SecretScanner(secrets, {}).find(o)}
    assert not found, found


def test_locked_vault_refuses_every_call(quiet_env):
    from camillo import Vault
    from camillo.errors import VaultError

    with home(quiet_env / "desk"):
        v, _ = Vault.create(str(quiet_env / "v"), NEW_PASSPHRASE)
    v.lock()
    for call in (v.timeline, v.facts, v.problems, lambda: v.search("x")):
        with pytest.raises(VaultError, match="locked"):
            call()
    assert os.path.isdir(str(quiet_env / "v"))
