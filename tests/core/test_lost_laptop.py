"""The lost-laptop flow locks the thief out (issue 17, item 4).

The thief has the laptop: its installation (the device key, sealed locally), the passphrase (typed
on it, or saved), and every file the synced folder ever held.  The owner, on another device, revokes
the laptop, changes the passphrase and re-issues the recovery phrase.  Afterwards the thief gets
nothing new: not by Camillo's rules, but cryptographically (the attacker below skips every check and
decrypts what it can with the keys alone, in the style of ``test_credential_change``).  Revoking
without changing the passphrase leaves the vault open to whoever knows it, and the report says so."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest
from camillo import DeviceRevoked, NewRecord, Unlock, Vault, WrongCredential, keys
from camillo.credentials import from_passphrase, from_recovery_phrase

from .helpers import switch_home
from .test_access import keys_from_files, readable_plaintexts
from .test_credential_change import attacker_reads, old_kdf, union_copy

PASSPHRASE = "correct horse battery staple"
NEW_PASSPHRASE = "a passphrase the thief never saw"


@pytest.fixture
def stolen(new_vault, tmp_path, monkeypatch):
    """A vault with a second device, the laptop, then stolen: what the thief holds."""
    path, vault, phrase = new_vault
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), device_name="Laptop") as lap:
        lap.append([NewRecord(type="message", text="WRITTEN-ON-THE-LAPTOP")])
        device = lap.session.actor  # what the thief extracts from the laptop's local state
        last_owner_key = keys.owner_kem(lap.session.keyring.master_secret(), lap.vault_id,
                                        lap.session.keyring.generation)
        vid = lap.vault_id
    seen = str(tmp_path / "what-the-laptop-synced")
    shutil.copytree(path, seen)
    switch_home(monkeypatch, tmp_path / "home")
    thief_keys = [device.recipient, last_owner_key, from_passphrase(PASSPHRASE, old_kdf(path, vid)).recipient,
                  from_recovery_phrase(phrase).recipient]
    return path, vid, phrase, seen, thief_keys


def test_after_the_full_flow_the_thief_gets_nothing_new(stolen, tmp_path, monkeypatch):
    path, vid, phrase, seen, thief_keys = stolen
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        report = v.revoke("Laptop", reason="stolen")
        assert report.still_opens == ("passphrase", "recovery phrase")
        v.change_passphrase(NEW_PASSPHRASE)
        new_phrase = v.reissue_recovery_phrase().phrase
        v.append([NewRecord(type="message", text="AFTER-THE-FLOW")])
        v.append([NewRecord(type="message", text="WORK-AFTER-THE-FLOW")], compartment="work")
    # The thief's installation, with the old passphrase: no slot opens, nothing is registered.
    switch_home(monkeypatch, tmp_path / "laptop")
    for unlock in (Unlock.passphrase(PASSPHRASE), Unlock.recovery(phrase)):
        with pytest.raises(WrongCredential):
            Vault.open(path, unlock, re_register=True)
    # Cryptographically: every file the host ever held, every key the thief has (the laptop's device
    # key, the last owner key it derived, the old passphrase and recovery phrase).
    host = str(tmp_path / "host")
    union_copy([seen, path], host)
    secrets, _ = keys_from_files(host, vid, thief_keys)
    got = b"".join(readable_plaintexts(host, vid, secrets))
    got += b"".join(attacker_reads(host, vid, from_passphrase(PASSPHRASE, old_kdf(seen, vid))))
    got += b"".join(attacker_reads(host, vid, from_recovery_phrase(phrase)))
    assert b"WRITTEN-ON-THE-LAPTOP" in got  # the honest caveat: what it could read stays readable
    assert b"AFTER-THE-FLOW" not in got and b"WORK-AFTER-THE-FLOW" not in got
    # The owner reads everything with the new credentials, and the thief's old writes stay valid.
    switch_home(monkeypatch, tmp_path / "home")
    with Vault.open(path, Unlock.recovery(new_phrase), register=False) as v:
        assert {"WRITTEN-ON-THE-LAPTOP", "AFTER-THE-FLOW"} <= {r.text for r in v.timeline()}
        assert v.problems() == []


def test_revoking_alone_leaves_the_vault_open_to_whoever_knows_the_passphrase(stolen, tmp_path, monkeypatch):
    """Why the flow goes on: after the revocation alone, the laptop's installation, with the old
    passphrase, joins again as a new device and writes at user authority (the issue's report)."""
    path, *_ = stolen
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        report = v.revoke("Laptop")
        steps = report.next_steps()
        assert steps and "still opens the vault for whoever knows it" in steps[0]
        assert any("re-issue it" in s for s in steps)
    switch_home(monkeypatch, tmp_path / "laptop")
    with pytest.raises(DeviceRevoked, match="was revoked by"):
        Vault.open(path, Unlock.passphrase(PASSPHRASE))
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), re_register=True) as thief:
        thief.append([NewRecord(type="fact", key="user/bank", value="Thief Bank")])
    switch_home(monkeypatch, tmp_path / "home")
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        assert v.fact("user/bank").current.value == "Thief Bank"
        assert [d.joined_with for d in v.new_devices()] == ["your passphrase"]  # and it shows as new


def cli(*args, env=None, check=0, home):
    full = {**os.environ, "CAMILLO_HOME": str(home), "CAMILLO_PASSPHRASE": PASSPHRASE, **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "camillo.cli", *args], capture_output=True, text=True, env=full,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == check, proc.stderr
    assert "Traceback" not in proc.stderr
    return proc


def test_the_cli_flow_revokes_changes_the_passphrase_and_reissues_the_recovery_phrase(stolen, tmp_path):
    path, *_ = stolen
    proc = cli("revoke", path, "Laptop", "--change-passphrase", "--reissue-recovery",
               env={"CAMILLO_NEW_PASSPHRASE": NEW_PASSPHRASE}, home=tmp_path / "home")
    assert "Revoked device Laptop." in proc.stdout and "Passphrase changed" in proc.stdout
    assert len(proc.stdout.strip().splitlines()[-1].split()) in (12, 24)  # the new recovery phrase
    cli("devices", path, home=tmp_path / "laptop", check=3)  # the old passphrase opens nothing
    cli("devices", path, home=tmp_path / "home", env={"CAMILLO_PASSPHRASE": NEW_PASSPHRASE})


def test_the_cli_says_plainly_when_the_passphrase_was_not_changed(stolen, tmp_path):
    path, *_ = stolen
    proc = cli("revoke", path, "Laptop", home=tmp_path / "home")
    assert "NOT changed: whoever knows it can still open the vault" in proc.stdout
    assert "camillo recovery reissue" in proc.stdout
