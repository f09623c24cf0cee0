"""No secret ever appears in a log record, a ``repr``, a ``str``, an exception message or the command
line's output (issue 10, item 6; CONTRIBUTING's rule).

One realistic session (:mod:`tests.security.session`) runs with every logger at DEBUG captured;
it provokes many errors on purpose.  Then the log records, every exception (and its chained causes),
the ``repr`` and ``str`` of every core object reachable from the session's objects, and everything the
command line printed on errors are scanned for every secret the session touched: passphrases,
recovery phrases (whole, two words in a row, a mistyped word), device and grant seeds, each
generation's vault master secret, owner KEM seeds, epoch secrets, the enrollment secret and typed
code, the local cache and device-state keys, in raw, hex (any 6-byte window), base64, base32 form.

Runs on pytest's main thread.
"""

from __future__ import annotations

import logging
import os

import pytest

from .scan import SecretScanner, reachable
from .session import run_session


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    capture = Capture()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)
    old_env = {k: os.environ.get(k) for k in ("CAMILLO_HOME", "CAMILLO_INSECURE_TEST_KDF", "CAMILLO_KEYCHAIN")}
    base = tmp_path_factory.mktemp("leaks")
    os.environ.update({"CAMILLO_HOME": str(base / "home"), "CAMILLO_INSECURE_TEST_KDF": "1",
                       "CAMILLO_KEYCHAIN": "none"})
    try:
        s = run_session(base, observer=lambda step: logging.getLogger("tests.security").debug("step %s", step))
    finally:
        root.removeHandler(capture)
        root.setLevel(old_level)
        for k, v in old_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    s.log_records = capture.records
    yield s
    if not s.vault.locked:
        s.vault.lock()


@pytest.fixture(scope="module")
def scanner(session):
    return SecretScanner(session.secrets, session.texts)


def test_the_session_touched_every_kind_of_secret(session, scanner):
    labels = " ".join(session.secrets)
    for kind in ("/vms/g1", "/vms/g2", "owner-kem", "epoch/", "/actor/device/x", "/unlocking/passphrase/e",
                 "grant-write/x", "grant-append/e", "laptop/x", "enrollment secret", "cache-key", "state-key",
                 "recovery entropy"):
        assert kind in labels, kind
    assert len(session.errors) >= 15
    assert session.log_records, "the DEBUG capture saw nothing: the test would prove nothing"


def test_the_scanner_finds_what_it_should(session, scanner):
    """The scan is not vacuous: planted leaks in each form are found."""
    import base64

    label, secret = next(iter(session.secrets.items()))
    for text in (secret.hex(), secret.hex()[:12], base64.b64encode(secret).decode(), repr(secret), str([secret]),
                 base64.b32encode(secret).decode(), f"key={secret.hex().upper()}"):
        assert scanner.find(text), text
    assert scanner.find(b"xx" + secret + b"yy")
    words = session.texts["recovery phrase"].split()
    assert scanner.find(f"... {words[3]} {words[4]} ...")
    assert scanner.find(f"passphrase was {session.texts['new passphrase']}")


def test_no_secret_in_log_records(session, scanner):
    leaks = []
    for r in session.log_records:
        text = r.getMessage()
        if r.exc_info:
            text += logging.Formatter().formatException(r.exc_info)
        found = scanner.find(text) | scanner.find(repr(r.args))
        if found:
            leaks.append((r.name, found, text[:200]))
    assert not leaks, leaks


def _chain(exc: BaseException):
    while exc is not None:
        yield exc
        exc = exc.__cause__ or exc.__context__


def test_no_secret_in_exception_messages(session, scanner):
    leaks = []
    for exc in session.errors:
        for e in _chain(exc):
            for text in (str(e), repr(e), *[str(a) for a in e.args]):
                found = scanner.find(text)
                if found:
                    leaks.append((type(e).__name__, found, text[:200]))
    assert not leaks, leaks


def test_a_mistyped_recovery_word_is_not_echoed(session):
    """The message names the position of the word, never the word (a mistyped word is most of a
    real one)."""
    msgs = [str(e) for e in session.errors if "recovery-phrase word" in str(e)]
    assert msgs, "the session did not mistype a word"
    words = session.texts["new recovery phrase"].split()
    # the message's own wording may share letters with a random phrase ("word", "check", "spell" are
    # BIP-39 words): only what is not part of that fixed wording counts
    fixed = "word 6 of the recovery phrase is not a recovery-phrase word; check its spelling"
    for m in msgs:
        assert "word 6" in m
        assert not any(w[:4] in m and w[:4] not in fixed for w in words if len(w) >= 4), m


def test_no_secret_in_repr_or_str_of_core_objects(session, scanner):
    leaks = []
    checked = 0
    for obj in reachable(session.objects):
        mod = type(obj).__module__ or ""
        if not mod.startswith("camillo"):
            continue
        checked += 1
        for text in (repr(obj), str(obj)):
            found = scanner.find(text)
            if found:
                leaks.append((type(obj).__qualname__, found, text[:160]))
                break
    assert checked > 200
    assert not leaks, leaks[:20]


def test_no_secret_in_what_the_command_line_prints(session, scanner):
    leaks = [(found, out[:200]) for out in session.outputs if (found := scanner.find(out))]
    assert not leaks, leaks


def test_unlock_and_credentials_hide_their_secrets():
    """The values that carry a secret by design show none of it."""
    from camillo import Unlock
    from camillo.credentials import Credential, CredentialKind
    from camillo.envelopes import EnvelopeKind, EnvelopePayload
    from camillo.ops.enrollment import parse_code, qr_text
    from camillo.primitives import SecretBytes, sha256

    secret = sha256(b"a secret for repr")
    scanner = SecretScanner({"s": secret}, {"p": "hunter2 hunter2 passphrase"})
    cred = Credential.from_seeds(CredentialKind.DEVICE, secret, sha256(secret))
    payload = EnvelopePayload(EnvelopeKind.EPOCH_SECRET, bytes(16), bytes(16), bytes(32), secret, [], b"", "env/x")
    parsed = parse_code(qr_text(bytes(32), secret, 1))
    for obj in (Unlock.passphrase("hunter2 hunter2 passphrase"), Unlock.recovery("hunter2 hunter2 passphrase"),
                cred, cred.recipient, cred.signer, SecretBytes(secret), payload, parsed):
        for text in (repr(obj), str(obj)):
            assert not scanner.find(text), (type(obj).__name__, text)


@pytest.mark.secretservice
@pytest.mark.skipif(not os.environ.get("DBUS_SESSION_BUS_ADDRESS"),
                    reason="no D-Bus session (run the suite with scripts/test)")
def test_no_secret_in_logs_with_the_real_keychain(tmp_path, monkeypatch):
    """The same scan with device keys in the real Secret Service (keyring and D-Bus log at DEBUG)."""
    import keyring
    from camillo import NewRecord, Unlock, Vault
    from camillo.errors import VaultError

    monkeypatch.setenv("CAMILLO_KEYCHAIN", "os")
    capture = Capture()
    root = logging.getLogger()
    old_level = root.level
    root.addHandler(capture)
    root.setLevel(logging.DEBUG)
    errors = []
    try:
        path = str(tmp_path / "v")
        vault, phrase = Vault.create(path, "keychain passphrase")
        vid, wid = vault.vault_id, vault.writer_id
        seeds = {"x": vault.session.actor.recipient.seed, "e": vault.session.actor.signer.seed, "vms": vault.session.keyring.master.get()}
        vault.append([NewRecord(type="message", text="kept with a device key")])
        vault.lock()
        stored = keyring.get_password("vmem", f"{vid.hex()}/{wid.hex()}")
        with Vault.open(path, Unlock.device()) as v:
            v.timeline()
        keyring.delete_password("vmem", f"{vid.hex()}/{wid.hex()}")
        try:
            Vault.open(path, Unlock.device())
        except VaultError as exc:
            errors.append(exc)
    finally:
        root.removeHandler(capture)
        root.setLevel(old_level)
    scanner = SecretScanner(seeds, {"stored": stored, "passphrase": "keychain passphrase", "phrase": phrase})
    leaks = [(r.name, found) for r in capture.records
             if (found := scanner.find(r.getMessage()) | scanner.find(repr(r.args)))]
    leaks += [(type(e).__name__, found) for e in errors if (found := scanner.find(str(e)))]
    assert errors and not leaks, leaks


def test_the_session_leaves_a_healthy_vault(session):
    """Everything the session did was legitimate: a fresh reader finds nothing wrong (this caught a
    revocation that counted only in some batch orders: test_threat_claims covers it)."""
    from camillo import Unlock, Vault

    from .session import NEW_PASSPHRASE, home

    with home(session.root / "fresh-reader"), Vault.open(
            session.path, Unlock.passphrase(NEW_PASSPHRASE), register=False, cache=False) as v:
        assert [p.to_json() for p in v.problems()] == []
        assert {d.name: d.revoked for d in v.devices()}["laptop"] is True
