"""Device keys in the real OS keychain: gnome-keyring's Secret Service on a private D-Bus session
(``scripts/test`` starts one).  Outside that session these tests skip."""

from __future__ import annotations

import os
import sys
import types

import keyring
import pytest
from camillo import KeychainError, NewRecord, Unlock, Vault, WrongCredential, keychain

from .helpers import all_files, switch_home

PASSPHRASE = "correct horse battery staple"

needs_secret_service = pytest.mark.skipif(
    not os.environ.get("DBUS_SESSION_BUS_ADDRESS"), reason="no D-Bus session (run the suite with scripts/test)"
)


@pytest.fixture
def os_keychain(monkeypatch):
    monkeypatch.setenv("CAMILLO_KEYCHAIN", "os")
    st = keychain.status()
    assert st.usable, st.reason
    assert "SecretService" in st.backend
    return st


@pytest.mark.secretservice
@needs_secret_service
def test_device_key_lives_in_the_secret_service(os_keychain, tmp_path, monkeypatch):
    path = str(tmp_path / "v")
    vault, _ = Vault.create(path, PASSPHRASE)
    vid, wid = vault.vault_id, vault.writer_id
    vault.append([NewRecord(type="message", text="kept with a device key")])
    vault.lock()
    stored = keyring.get_password("vmem", f"{vid.hex()}/{wid.hex()}")
    assert stored, "the device key is not in the Secret Service"
    # Nothing under CAMILLO_HOME holds the device key when the keychain is used.
    assert not any(f.endswith("device-key.bin") for f in all_files(os.environ["CAMILLO_HOME"]))
    # The keychain's own file on disk does not hold the key in the clear.
    keyring_dir = os.path.join(os.environ.get("XDG_DATA_HOME", os.path.expanduser("~/.local/share")), "keyrings")
    for f in all_files(keyring_dir) if os.path.isdir(keyring_dir) else []:
        assert stored.encode() not in open(f, "rb").read()
    with Vault.open(path, Unlock.device()) as v:
        assert v.unlocked_with == "device key"
        assert [r.text for r in v.timeline()] == ["kept with a device key"]
        v.append([NewRecord(type="message", text="written with the device key")])
    # A second installation registers its own key; the first still works.
    switch_home(monkeypatch, tmp_path / "laptop2")
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        second = v.writer_id
    assert second != wid
    assert keyring.get_password("vmem", f"{vid.hex()}/{second.hex()}")
    with Vault.open(path, Unlock.device()) as v:
        assert v.writer_id == second and len(v.timeline()) == 2
    # Deleting the key from the keychain: the device can no longer unlock, and says why.
    keychain.delete(vid, second)
    with pytest.raises(KeychainError, match="has no device key"):
        Vault.open(path, Unlock.device())


@pytest.mark.secretservice
@needs_secret_service
def test_cli_unlocks_with_the_device_key(os_keychain, tmp_path):
    import subprocess

    path = str(tmp_path / "v")
    env = dict(os.environ, CAMILLO_PASSPHRASE=PASSPHRASE)
    subprocess.run([sys.executable, "-m", "camillo.cli", "init", path], env=env, check=True, capture_output=True)
    env.pop("CAMILLO_PASSPHRASE")
    add = subprocess.run([sys.executable, "-m", "camillo.cli", "add", path, "--device"], env=env,
                         input='{"type":"message","text":"no passphrase needed"}', text=True, capture_output=True)
    assert add.returncode == 0, add.stderr
    log = subprocess.run([sys.executable, "-m", "camillo.cli", "log", path, "--device"], env=env, text=True,
                         capture_output=True)
    assert log.returncode == 0 and "no passphrase needed" in log.stdout


def test_plaintext_and_failing_backends_are_refused(monkeypatch, tmp_path):
    monkeypatch.setenv("CAMILLO_KEYCHAIN", "auto")
    fake_pkg = types.ModuleType("keyrings.alt.file")

    class PlaintextKeyring(keyring.backend.KeyringBackend):
        priority = 1

        def get_password(self, service, username):
            return None

        def set_password(self, service, username, password):
            raise AssertionError("a plaintext keyring must never be written")

        def delete_password(self, service, username):
            pass

    PlaintextKeyring.__module__ = "keyrings.alt.file"
    fake_pkg.PlaintextKeyring = PlaintextKeyring
    previous = keyring.get_keyring()
    keyring.set_keyring(PlaintextKeyring())
    try:
        st = keychain.status()
        assert not st.usable and "plaintext" in st.reason
        # A vault still works: the device key is sealed locally, and unlocking by device says why not.
        vault, _ = Vault.create(str(tmp_path / "v"), PASSPHRASE)
        vault.lock()
        with pytest.raises(WrongCredential, match="no OS keychain"):
            Vault.open(str(tmp_path / "v"), Unlock.device())
        from keyring.backends import fail

        keyring.set_keyring(fail.Keyring())
        st = keychain.status()
        assert not st.usable and "no OS keychain" in st.reason
    finally:
        keyring.set_keyring(previous)


@pytest.mark.secretservice
@needs_secret_service
def test_a_device_rotates_its_keychain_key_after_an_erasure(os_keychain, tmp_path, monkeypatch):
    path = str(tmp_path / "v")
    vault, _ = Vault.create(path, PASSPHRASE)
    target = vault.append([NewRecord(type="message", text="to be erased")]).written[0]
    vid = vault.vault_id
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as lap:
        old = lap.writer_id
    switch_home(monkeypatch, tmp_path / "home")
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        v.erase([target])
    switch_home(monkeypatch, tmp_path / "laptop")
    with Vault.open(path, Unlock.device()) as lap:
        new = lap.writer_id
        assert new != old and lap.problems() == []
    assert keyring.get_password("vmem", f"{vid.hex()}/{old.hex()}") is None, "the old key left the keychain"
    assert keyring.get_password("vmem", f"{vid.hex()}/{new.hex()}")
    with Vault.open(path, Unlock.device()) as lap:
        assert lap.writer_id == new


@pytest.mark.secretservice
@needs_secret_service
def test_a_device_killed_while_joining_keeps_its_keychain_key(os_keychain, tmp_path, monkeypatch):
    """The joining device stores its key in the keychain before it sends the request (spec §21.2):
    killed after the other device certified it, before finishing, it still holds the key, and its
    device slot opens the vault with it."""
    from camillo.ops.enrollment import Offer, OfferState

    path = str(tmp_path / "v")
    vault, _ = Vault.create(path, PASSPHRASE, device_name="desktop")
    home = os.environ["CAMILLO_HOME"]
    offer = Offer(vault.session)
    switch_home(monkeypatch, tmp_path / "laptop")
    join = Vault.join(path, offer.qr_text, name="laptop")
    sas = join.start()
    assert keychain.load(vault.vault_id, join.device.writer_id) is not None, "the key is stored before the request"
    switch_home(monkeypatch, home)
    assert offer.poll() == OfferState.REQUESTED
    offer.confirm(typed_sas=sas)
    switch_home(monkeypatch, tmp_path / "laptop")
    del join  # the new device's process dies here, before it finishes
    with Vault.open(path, Unlock.device()) as v:
        assert v.unlocked_with == "device key"
        v.append([NewRecord(type="message", text="written by the laptop")])
    switch_home(monkeypatch, home)
    vault.refresh()
    assert [d.name for d in vault.devices() if not d.revoked] == ["desktop", "laptop"]
    vault.lock()


@pytest.mark.secretservice
@needs_secret_service
def test_the_keychain_is_found_once_on_its_own_thread_while_the_passphrase_is_derived(os_keychain, tmp_path,
                                                                                        monkeypatch):
    """Finding keyring's backend takes about 0.1 s (every backend loaded, a subprocess looking for macOS's
    libraries): creating a vault and unlocking one whose device key is in the keychain start it beside
    Argon2id, and the caller that needs it takes that answer instead of searching again."""
    import threading

    import keyring.core

    searches: list[str] = []
    real = keyring.core.init_backend

    def init_backend(*a, **k):
        searches.append(threading.current_thread().name)
        return real(*a, **k)

    monkeypatch.setattr(keyring.core, "init_backend", init_backend)
    path = str(tmp_path / "v")
    monkeypatch.setattr(keyring.core, "_keyring_backend", None)  # (a new process: nothing found yet)
    vault, _ = Vault.create(path, PASSPHRASE)
    writer = vault.writer_id
    vault.lock()
    assert searches == ["camillo-keychain"]
    monkeypatch.setattr(keyring.core, "_keyring_backend", None)
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        assert v.unlocked_with == "passphrase"
        assert v.session.actor is not None and v.session.actor.writer_id == writer  # (its key, read)
    assert searches == ["camillo-keychain"] * 2
    assert keychain.prepare() is None  # found already in this process: no second search
    monkeypatch.setattr(keyring.core, "_keyring_backend", None)
    monkeypatch.setenv("CAMILLO_KEYCHAIN", "none")
    assert keychain.prepare() is None
