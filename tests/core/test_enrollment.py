"""Enrolling a second device between two installations (two CAMILLO_HOMEs) on one synced folder,
and every refusal: wrong code, a second request, expiry, tampering, mismatched codes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from camillo import NewRecord, Unlock, Vault
from camillo.errors import EnrollmentError
from camillo.ops.enrollment import Offer, OfferState, parse_code, qr_text, typed_code

from .helpers import all_files, switch_home

PASSPHRASE = "correct horse battery staple"


@pytest.fixture
def existing(new_vault, tmp_path, monkeypatch):
    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="written before the new device joined")])
    return path, vault


def _join(monkeypatch, tmp_path, path, code, name="laptop"):
    switch_home(monkeypatch, tmp_path / name)
    return Vault.join(path, code, name=name)


def test_enrollment_end_to_end(existing, tmp_path, monkeypatch):
    path, vault = existing
    home = os.environ["CAMILLO_HOME"]
    offer = Offer(vault.session)
    assert offer.qr_text.startswith("VMEM1:") and len(offer.qr_text) == 131
    join = _join(monkeypatch, tmp_path, path, offer.qr_text)
    code_on_new_device = join.start()
    assert len(code_on_new_device) == 6 and code_on_new_device.isdigit()
    # The host sees two opaque files: no name, no key.
    rendezvous = [f for f in all_files(path) if "/enroll/" in f]
    assert len(rendezvous) == 1
    blob = open(rendezvous[0], "rb").read()
    assert b"laptop" not in blob and join.device.recipient.public[:32] not in blob
    assert join.poll() is None  # not confirmed yet
    switch_home(monkeypatch, home)
    assert offer.poll() == OfferState.REQUESTED
    assert offer.sas == code_on_new_device and offer.request.name == "laptop"
    offer.confirm(typed_sas=code_on_new_device)
    switch_home(monkeypatch, tmp_path / "laptop")
    new = join.poll()
    assert new is not None
    with new:
        assert new.writer_id == join.device.writer_id
        assert [r.text for r in new.timeline()] == ["written before the new device joined"]
        new.append([NewRecord(type="message", text="written by the new device")])
        assert new.problems() == []
        # it remembers the other device's frontier at once (rollback detection starts now)
        assert new.session.device_state.remembered
    switch_home(monkeypatch, home)
    assert offer.poll() == OfferState.DONE
    assert not [f for f in all_files(path) if "/enroll/" in f], "rendezvous files are deleted after the ack"
    vault.refresh()
    assert {d.name for d in vault.devices()} >= {"test laptop", "laptop"}
    assert "written by the new device" in {r.text for r in vault.timeline()}


def test_typed_code_fallback(existing, tmp_path, monkeypatch):
    path, vault = existing
    home = os.environ["CAMILLO_HOME"]
    offer = Offer(vault.session)
    code = offer.typed_code
    assert len(code.replace("-", "")) == 53
    assert parse_code(code.lower().replace("-", " ")).secret == offer.secret
    join = _join(monkeypatch, tmp_path, path, code)
    sas = join.start()
    switch_home(monkeypatch, home)
    offer.poll()
    offer.confirm(typed_sas=sas)
    switch_home(monkeypatch, tmp_path / "laptop")
    with join.poll() as new:
        assert new.problems() == []


def test_typos_in_the_typed_code_are_caught():
    code = typed_code(bytes(range(32)))
    broken = ("1" if code[0] != "1" else "2") + code[1:]
    with pytest.raises(EnrollmentError, match="typo"):
        parse_code(broken)
    with pytest.raises(EnrollmentError):
        parse_code("VMEM1:NOTBASE32!!")


def test_request_under_the_wrong_secret_is_ignored_and_reported(existing, tmp_path, monkeypatch):
    path, vault = existing
    home = os.environ["CAMILLO_HOME"]
    offer = Offer(vault.session)
    wrong = Offer(vault.session)  # another secret the user mistyped or an old code
    join = _join(monkeypatch, tmp_path, path, wrong.typed_code)
    join.start()
    switch_home(monkeypatch, home)
    assert offer.poll() == OfferState.WAITING
    assert any("do not match this offer" in m for m in offer.messages)
    with pytest.raises(EnrollmentError, match="nothing to confirm"):
        offer.confirm()


def test_second_request_to_one_offer_is_refused(existing, tmp_path, monkeypatch):
    path, vault = existing
    offer = Offer(vault.session)
    _join(monkeypatch, tmp_path, path, offer.qr_text, "first").start()
    second = _join(monkeypatch, tmp_path, path, offer.qr_text, "second")
    with pytest.raises(EnrollmentError, match="already used"):
        second.start()


def test_expired_offer_is_refused_on_both_sides(existing, tmp_path, monkeypatch):
    path, vault = existing
    home = os.environ["CAMILLO_HOME"]
    old = Offer(vault.session, expiry=int(time.time()) - 1)
    assert old.poll() == OfferState.EXPIRED
    with pytest.raises(EnrollmentError, match="expired"):
        _join(monkeypatch, tmp_path, path, old.qr_text)
    switch_home(monkeypatch, home)
    offer = Offer(vault.session, expiry=int(time.time()) + 2)
    join = _join(monkeypatch, tmp_path, path, offer.typed_code)  # the typed code carries no expiry
    join.start()
    switch_home(monkeypatch, home)
    time.sleep(2.2)
    assert offer.poll() == OfferState.EXPIRED
    with pytest.raises(EnrollmentError, match="expired"):
        offer.confirm()


def test_tampered_request_is_refused(existing, tmp_path, monkeypatch):
    path, vault = existing
    home = os.environ["CAMILLO_HOME"]
    offer = Offer(vault.session)
    _join(monkeypatch, tmp_path, path, offer.qr_text).start()
    req = next(f for f in all_files(path) if f.endswith(".req"))
    data = bytearray(open(req, "rb").read())
    data[40] ^= 1  # the host substitutes bytes (say, its own key)
    open(req, "wb").write(bytes(data))
    switch_home(monkeypatch, home)
    assert offer.poll() == OfferState.REFUSED
    assert any("tampered" in m for m in offer.messages)


def test_mismatched_codes_enrol_nothing(existing, tmp_path, monkeypatch):
    path, vault = existing
    home = os.environ["CAMILLO_HOME"]
    offer = Offer(vault.session)
    join = _join(monkeypatch, tmp_path, path, offer.qr_text)
    sas = join.start()
    switch_home(monkeypatch, home)
    offer.poll()
    wrong = "000000" if sas != "000000" else "111111"
    with pytest.raises(EnrollmentError, match="do not match"):
        offer.confirm(typed_sas=wrong)
    vault.refresh()
    assert "laptop" not in {d.name for d in vault.devices()}
    switch_home(monkeypatch, tmp_path / "laptop")
    assert join.poll() is None


def test_code_for_another_vault_is_refused(existing, tmp_path, monkeypatch):
    path, vault = existing
    other, _ = Vault.create(str(tmp_path / "other"), PASSPHRASE)
    code = qr_text(other.vault_id, b"\x01" * 32, int(time.time()) + 600)
    other.lock()
    with pytest.raises(EnrollmentError, match="different vault"):
        _join(monkeypatch, tmp_path, path, code)


def test_cli_enrollment_between_two_installations(tmp_path):
    env = dict(os.environ, CAMILLO_PASSPHRASE=PASSPHRASE, CAMILLO_HOME=str(tmp_path / "desktop"))
    path = str(tmp_path / "v")

    def camillo(*args, env=env, **kw):
        return subprocess.run([sys.executable, "-m", "camillo.cli", *args], env=env, capture_output=True, text=True,
                              timeout=120, **kw)

    assert camillo("init", path).returncode == 0
    offer = camillo("enroll", "offer", path)
    assert offer.returncode == 0, offer.stderr
    lines = offer.stdout.splitlines()
    qr = next(line for line in lines if line.startswith("VMEM1:"))
    assert any(line.startswith("code: ") for line in lines)
    assert "\u2588" in offer.stdout or "#" in offer.stdout or "▀" in offer.stdout  # the QR drawn in the terminal
    laptop_env = dict(env, CAMILLO_HOME=str(tmp_path / "laptop"))
    laptop_env.pop("CAMILLO_PASSPHRASE")
    join = subprocess.Popen([sys.executable, "-m", "camillo.cli", "enroll", "join", path, "--code", qr, "--name",
                             "laptop", "--timeout", "60"], env=laptop_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    first = join.stdout.readline()
    assert first.startswith("code to compare: ")
    sas = first.split()[-1]
    wrong = camillo("enroll", "confirm", path, "--code", "000000" if sas != "000000" else "111111")
    assert wrong.returncode != 0 and "do not match" in wrong.stderr
    join.kill()
    join.wait()
    # A fresh offer, and this time the codes match.
    offer = camillo("enroll", "offer", path, "--no-qr")
    qr = offer.stdout.splitlines()[0]
    join = subprocess.Popen([sys.executable, "-m", "camillo.cli", "enroll", "join", path, "--code", qr, "--name",
                             "laptop", "--timeout", "60"], env=laptop_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    sas = join.stdout.readline().split()[-1]
    confirm = camillo("enroll", "confirm", path, "--code", sas)
    assert confirm.returncode == 0, confirm.stderr
    out, err = join.communicate(timeout=60)
    assert join.returncode == 0, err
    assert "enrolled as laptop" in out
    devices = camillo("devices", path, "--json")
    assert '"name": "laptop"' in devices.stdout
    # the laptop now writes with its own key (sealed locally here: no keychain in this test)
    add = camillo("add", path, env=dict(laptop_env, CAMILLO_PASSPHRASE=PASSPHRASE),
                  input='{"type":"message","text":"from the laptop"}')
    assert add.returncode == 0, add.stderr
    assert "from the laptop" in camillo("log", path).stdout


def test_offer_needs_the_owner(existing, tmp_path, monkeypatch):
    path, vault = existing
    vault.create_grant("agent", {"work": "read"}, str(tmp_path / "a.grant"))
    vault.lock()
    switch_home(monkeypatch, tmp_path / "agent")
    from camillo import AccessDenied

    with Vault.open(path, Unlock.grant(str(tmp_path / "a.grant"))) as v, pytest.raises(AccessDenied):
        Offer(v.session)


def test_a_device_enrolled_after_an_erasure_keeps_its_key(existing, tmp_path, monkeypatch):
    """A new device's only slot postdates every erasure: it must not rotate its key on joining
    (it used to, then registered the retired key, and could never open the vault again)."""
    path, vault = existing
    home = os.environ["CAMILLO_HOME"]
    rid = vault.append([NewRecord(type="message", text="erased before the laptop joined")]).written[0]
    vault.erase([rid])
    offer = Offer(vault.session)
    join = _join(monkeypatch, tmp_path, path, offer.typed_code)
    join.start()
    switch_home(monkeypatch, home)
    offer.poll()
    offer.confirm()
    switch_home(monkeypatch, tmp_path / "laptop")
    with join.poll() as new:
        assert new.writer_id == join.device.writer_id
        assert new.problems() == []
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as again:
        assert again.writer_id == join.device.writer_id, "the enrolled key was rotated away"
        assert not next(d for d in again.devices() if d.writer_id == join.device.writer_id).revoked


def _confirmed_join(existing, tmp_path, monkeypatch):
    """A join the offering device confirmed, whose new device then died before finishing (its
    ``poll`` is never called): the certificate and the slot are in the vault."""
    path, vault = existing
    home = os.environ["CAMILLO_HOME"]
    offer = Offer(vault.session)
    join = _join(monkeypatch, tmp_path, path, offer.qr_text)
    sas = join.start()
    switch_home(monkeypatch, home)
    offer.poll()
    offer.confirm(typed_sas=sas)
    vault.refresh()
    assert join.device.writer_id in vault.session.roster.principals
    switch_home(monkeypatch, tmp_path / "laptop")
    return path, vault, join


def test_a_joining_device_names_its_key_before_it_sends_the_request(existing, tmp_path, monkeypatch):
    """Spec §21.2 step 1: the installation is the new device from the request on, so that a process
    killed after the other device certified its key leaves no device nobody holds."""
    path, vault = existing
    offer = Offer(vault.session)
    join = _join(monkeypatch, tmp_path, path, offer.qr_text)
    join.start()
    from camillo.localstate import VaultLocal

    inst = VaultLocal(vault.vault_id).load_installation()
    assert inst is not None and inst.writer_id == join.device.writer_id and inst.keystore == "local"


def test_a_device_killed_while_joining_is_retired_on_its_next_open(existing, tmp_path, monkeypatch):
    """Without a keychain the new key can be sealed only under the master secret, which comes with
    the response: the process died with it.  The next open with the passphrase certifies a new key
    and retires the enrolled one (re-certification, spec §12.4): no active device nobody holds."""
    path, vault, join = _confirmed_join(existing, tmp_path, monkeypatch)
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), device_name="laptop") as v:
        assert v.session.actor is not None and v.writer_id != join.device.writer_id
        assert join.device.writer_id in v.session.roster.revocations
        v.append([NewRecord(type="message", text="written by the laptop after all")])
        assert v.problems() == []
    vault.refresh()
    active = [d.name for d in vault.devices() if not d.revoked]
    assert sorted(active) == ["laptop", "test laptop"]


@pytest.mark.regression
def test_a_confirmation_interrupted_after_its_response_is_finished_by_confirming_again(existing, tmp_path, monkeypatch):
    """Found by the crash suite (kill after the response was written, before the offer was saved as
    confirmed): confirming again wrote a new response over the old one ('already exists with
    different content').  The response is written last, so its presence with the new device
    certified means the enrollment is done; a response nobody here wrote is refused."""
    path, vault = existing
    home = os.environ["CAMILLO_HOME"]
    offer = Offer(vault.session)
    secret, expiry = offer.secret, offer.expiry
    join = _join(monkeypatch, tmp_path, path, offer.qr_text)
    sas = join.start()
    switch_home(monkeypatch, home)
    assert offer.poll() == OfferState.REQUESTED
    offer.confirm(typed_sas=sas)
    devices = len(vault.devices())
    # the same offer as a restarted process reloads it (its state REQUESTED: the save after confirm was lost)
    replay = Offer(vault.session, secret=secret, expiry=expiry)
    assert replay.poll() == OfferState.REQUESTED
    replay.confirm(typed_sas=sas)
    assert replay.state == OfferState.CONFIRMED and len(vault.devices()) == devices
    switch_home(monkeypatch, tmp_path / "laptop")
    new = join.poll()
    assert new is not None
    new.lock()


@pytest.mark.regression
def test_a_response_this_device_did_not_write_is_refused(existing, tmp_path, monkeypatch):
    path, vault = existing
    home = os.environ["CAMILLO_HOME"]
    offer = Offer(vault.session)
    join = _join(monkeypatch, tmp_path, path, offer.qr_text)
    sas = join.start()
    switch_home(monkeypatch, home)
    assert offer.poll() == OfferState.REQUESTED
    with open(os.path.join(path, *(offer.base + ".resp").split("/")), "wb") as fh:
        fh.write(b"written by someone who saw the code")
    with pytest.raises(EnrollmentError, match="did not write it"):
        offer.confirm(typed_sas=sas)
    assert len([d for d in vault.devices() if not d.revoked]) == 1
