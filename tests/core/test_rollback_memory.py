"""Every reader notices a rollback, not only writers: an installation that only ever runs ``verify``
(or ``log``, ``facts``, ``search`` …) remembers what it saw in its local state, never in the vault
folder, so a host that rolls the folder back is reported (``syncing`` within the grace period, then
``rollback``, exit 1); the reading commands warn on stderr and leave their JSON as it was; restoring
old slot files alone raises the rollback alert, naming the generation."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys

import pytest
from camillo import NewRecord, Unlock, Vault
from camillo import log as log_mod
from camillo.errors import RolledBack

PASSPHRASE = "correct horse battery staple"


def camillo(*args: str, home: str, offset: int = 0, check: int | None = None) -> subprocess.CompletedProcess:
    """The CLI as a separate process of the installation ``home``; ``offset`` moves its clock."""
    env = dict(os.environ, CAMILLO_PASSPHRASE=PASSPHRASE, CAMILLO_HOME=home)
    code = (f"import sys, time; real = time.time; time.time = lambda: real() + {offset}; "
            "from camillo.cli import main; sys.exit(main(sys.argv[1:]))")
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=120)
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    if check is not None:
        assert proc.returncode == check, (proc.returncode, proc.stdout, proc.stderr)
    return proc


def newest_segment(path: str) -> str:
    return max(glob.glob(os.path.join(path, "segments", "*", "*.seg")), key=os.path.getmtime)


@pytest.fixture
def two_installations(new_vault, tmp_path):
    """The vault's own installation writes; a second installation (``reader``) only reads."""
    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="first")])
    vault.lock()
    return path, str(tmp_path / "reader-home")


def test_a_reader_that_never_writes_notices_a_rollback(two_installations, tmp_path):
    path, reader = two_installations
    camillo("verify", path, home=reader, check=0)
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        v.append([NewRecord(type="message", text="second")])
    camillo("verify", path, home=reader, check=0)  # it has seen the second batch now
    before = sorted(glob.glob(os.path.join(path, "**"), recursive=True))
    os.unlink(newest_segment(path))  # the host rolls the folder back
    within = camillo("verify", path, home=reader, check=1)
    assert "syncing" in within.stdout + within.stderr
    after = camillo("verify", path, home=reader, offset=log_mod.SYNC_GRACE_SECONDS + 60, check=1)
    assert "rollback" in after.stdout + after.stderr
    # the reader's memory is in its own home: the vault folder gained nothing
    assert set(glob.glob(os.path.join(path, "**"), recursive=True)) <= set(before)


@pytest.mark.parametrize("command", [["log"], ["facts"], ["search", "first"], ["inbox"], ["conflicts"],
                                     ["fact", "user/city"]])
def test_reading_commands_warn_on_stderr_and_keep_their_json(two_installations, command):
    path, reader = two_installations
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        v.append([NewRecord(type="fact", key="user/city", value="Lisbon")])
    clean = camillo(command[0], path, *command[1:], "--json", home=reader, check=0)
    assert "warning" not in clean.stderr
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        v.append([NewRecord(type="message", text="third")])
    camillo("verify", path, home=reader, check=0)
    os.unlink(newest_segment(path))
    warned = camillo(command[0], path, *command[1:], "--json", home=reader, check=0)
    assert warned.stderr.count("warning") == 1 and "incomplete" in warned.stderr
    assert warned.stdout == clean.stdout
    for line in warned.stdout.splitlines():
        json.loads(line)


def test_restored_old_slots_raise_the_rollback_alert_naming_the_generation(new_vault, tmp_path):
    path, vault, _ = new_vault
    rid = vault.append([NewRecord(type="message", text="to erase")]).written[0]
    old_slots = str(tmp_path / "old-slots")
    shutil.copytree(os.path.join(path, "slots"), old_slots)
    generation = vault.session.keyring.generation
    vault.erase([rid])  # the master secret rolls: generation + 1
    vault.lock()
    shutil.rmtree(os.path.join(path, "slots"))
    shutil.copytree(old_slots, os.path.join(path, "slots"))  # the host restores the old slot files
    with pytest.raises(RolledBack, match=f"generation {generation}"):
        Vault.open(path, Unlock.passphrase(PASSPHRASE))
    proc = camillo("verify", path, home=os.environ["CAMILLO_HOME"], check=1)
    out = proc.stdout + proc.stderr
    assert f"generation {generation}" in out and "rolled the vault back" in out


def test_a_fresh_installation_has_nothing_to_compare_with(two_installations, tmp_path):
    """The honest limit: a reader that never saw the vault cannot know what it missed."""
    path, _ = two_installations
    os.unlink(newest_segment(path))
    camillo("verify", path, home=str(tmp_path / "brand-new"), check=0)
