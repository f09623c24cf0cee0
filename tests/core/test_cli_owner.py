"""The owner's controls on the command line (issue 17): ``camillo devices`` (--json, --rename, --ack,
the device name of a new installation), ``camillo recipient`` (keygen, add, list, opening with
--recipient-key on a new installation, remove) and ``camillo compartments``.  Each bad input is one
specific line on stderr, exit 2 or 3, and nothing written."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from .helpers import snapshot

PASSPHRASE = "correct horse battery staple"
ALICE = "alice's own passphrase"


def run(*args, home, env=None, check=0, stdin=None):
    full = {**os.environ, "CAMILLO_HOME": str(home), "CAMILLO_PASSPHRASE": PASSPHRASE, **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "camillo.cli", *args], capture_output=True, text=True, env=full,
                          timeout=120, input=stdin)
    assert proc.returncode == check, f"exit {proc.returncode}: {proc.stderr}"
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
    return proc


def lines(proc):
    return [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]


@pytest.fixture
def vault(tmp_path):
    path = str(tmp_path / "vault")
    run("init", path, "--name", "Home desktop", home=tmp_path / "home")
    return path


def test_devices_json_rename_and_ack(vault, tmp_path):
    home, work = tmp_path / "home", tmp_path / "work"
    run("log", vault, home=work, env={"CAMILLO_DEVICE_NAME": "Work laptop"})
    devices = lines(run("devices", vault, "--json", home=home))
    assert {d["name"] for d in devices} == {"Home desktop", "Work laptop"}
    for d in devices:
        assert {"name", "platform", "enrolled", "last_seen", "revoked", "this_device", "new"} <= set(d)
        assert d["platform"] in ("Linux", "Linux laptop", "macOS", "macOS laptop", "Windows")
    new = next(d for d in devices if d["name"] == "Work laptop")
    assert new["new"] is True and new["joined_with"] == "your passphrase" and not new["this_device"]
    text = run("devices", vault, home=home)
    assert "NEW" in text.stdout and "Was this you?" in text.stderr and "--ack" in text.stderr
    renamed = run("devices", vault, "--rename", "Work laptop", "Travel laptop", "--json", home=home)
    assert {d["name"] for d in lines(renamed)} == {"Home desktop", "Travel laptop"}
    acked = run("devices", vault, "--ack", "Travel laptop", "--json", home=home)
    assert not any(d["new"] for d in lines(acked))
    assert not any(d["new"] for d in lines(run("devices", vault, "--json", home=work)))
    # bad input: one line, exit 2, nothing written
    before = snapshot(vault)
    for args, why in ((("--rename", "Travel laptop", "Home desktop"), "already called 'Home desktop'"),
                      (("--rename", "nobody", "x"), "no device 'nobody'"),
                      (("--rename", "Travel laptop", " "), "cannot be empty"),
                      (("--ack", "nobody"), "no device 'nobody'")):
        bad = run("devices", vault, *args, home=home, check=2)
        assert why in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert snapshot(vault) == before


def test_the_device_name_is_asked_for_a_new_installation(vault, tmp_path):
    """In a terminal the name is asked (the host name by default); without one, the host name."""
    import pty

    pid, fd = pty.fork()
    if pid == 0:  # the child runs camillo with a terminal on stdin
        os.environ.update(CAMILLO_HOME=str(tmp_path / "tty-home"), CAMILLO_PASSPHRASE=PASSPHRASE)
        os.execv(sys.executable, [sys.executable, "-m", "camillo.cli", "log", vault])  # noqa: S606
    out = b""
    while b"Name for this device" not in out:
        out += os.read(fd, 1024)
    os.write(fd, b"Kitchen tablet\n")
    while True:
        try:
            chunk = os.read(fd, 1024)
        except OSError:
            break
        if not chunk:
            break
    os.waitpid(pid, 0)
    names = {d["name"] for d in lines(run("devices", vault, "--json", home=tmp_path / "home"))}
    assert "Kitchen tablet" in names


def test_recipient_keygen_add_open_on_a_new_installation_and_remove(vault, tmp_path):
    home, rescue = tmp_path / "home", tmp_path / "rescue"
    key = str(tmp_path / "alice.key")
    made = run("recipient", "keygen", key, "--name", "Alice", "--json", home=tmp_path / "alice",
               env={"CAMILLO_RECIPIENT_PASSPHRASE": ALICE})
    assert lines(made)[0]["public_key"] == key + ".pub" and os.path.exists(key + ".pub")
    run("recipient", "add", vault, "--name", "Alice", "--key", key + ".pub", home=home)
    [alice] = lines(run("recipient", "list", vault, "--json", home=home))
    assert alice["name"] == "Alice" and alice["revoked"] is False
    # a new installation opens with Alice's key (any command), is led to a new passphrase, and sets one
    opened = run("log", vault, "--recipient-key", key, home=rescue,
                 env={"CAMILLO_RECIPIENT_PASSPHRASE": ALICE, "CAMILLO_DEVICE_NAME": "Rescue laptop"})
    assert "camillo passwd" in opened.stderr and "--recipient-key" in opened.stderr
    run("passwd", vault, "--recipient-key", key, home=rescue,
        env={"CAMILLO_RECIPIENT_PASSPHRASE": ALICE, "CAMILLO_NEW_PASSPHRASE": "new after the rescue"})
    run("log", vault, home=home, check=3)  # the old passphrase is gone
    new_env = {"CAMILLO_PASSPHRASE": "new after the rescue"}
    devices = lines(run("devices", vault, "--json", home=rescue, env=new_env))
    assert next(d for d in devices if d["this_device"])["joined_with"] == "the recovery key of Alice"
    # bad input
    wrong = run("log", vault, "--recipient-key", key, home=tmp_path / "x", check=3,
                env={"CAMILLO_RECIPIENT_PASSPHRASE": "not hers"})
    assert "wrong passphrase for the recipient key file" in wrong.stderr
    foreign = tmp_path / "notes.txt"
    foreign.write_text("hello\n")
    # the first device's first open after the rescue replaces its key (its local seal predates the roll)
    run("recipient", "list", vault, home=home, env=new_env)
    before = snapshot(vault)
    for f, why, code in ((str(foreign), "is not a Camillo recipient key file", 2),
                         (key + ".pub", "it is the public key file", 2)):
        bad = run("log", vault, "--recipient-key", f, home=tmp_path / "x", check=code,
                  env={"CAMILLO_RECIPIENT_PASSPHRASE": ALICE})
        assert why in bad.stderr
    bad = run("recipient", "add", vault, "--name", "Alice 2", "--key", key, home=home, check=2, env=new_env)
    assert "it is the private key file" in bad.stderr
    bad = run("recipient", "add", vault, "--name", "Alice 2", "--key", key + ".pub", home=home, check=2, env=new_env)
    assert "already added as Alice" in bad.stderr
    assert snapshot(vault) == before
    removed = run("recipient", "remove", vault, "Alice", home=home, env=new_env)
    assert "Revoked recovery recipient Alice." in removed.stdout
    assert lines(run("recipient", "list", vault, "--json", home=home, env=new_env))[0]["revoked"] is True
    gone = run("log", vault, "--recipient-key", key, home=tmp_path / "y", check=3,
               env={"CAMILLO_RECIPIENT_PASSPHRASE": ALICE})
    assert "recovery key" in gone.stderr


def test_compartments_list_and_add(vault, tmp_path):
    home = tmp_path / "home"
    listed = lines(run("compartments", vault, "--json", home=home))
    assert [c["name"] for c in listed] == ["health", "personal", "work"]
    added = run("compartments", vault, "--add", "travel", "--json", home=home)
    assert "travel" in [c["name"] for c in lines(added)]
    run("add", vault, "--compartment", "travel", home=home, stdin='{"type": "message", "text": "in travel"}\n')
    travel = next(c for c in lines(run("compartments", vault, "--json", home=home)) if c["name"] == "travel")
    assert travel["records"] == 1 and travel["added"]
    run("grant", vault, "--agent", "planner", "--compartment", "travel", "--level", "read",
        "--out", str(tmp_path / "planner.grant"), home=home)
    assert "in travel" in run("log", vault, "--grant", str(tmp_path / "planner.grant"), home=tmp_path / "a").stdout
    before = snapshot(vault)
    for name, why in (("travel", "already has a compartment 'travel'"), ("", "needs a name"),
                      ("control", "vault's own compartment")):
        bad = run("compartments", vault, "--add", name, home=home, check=2)
        assert why in bad.stderr
    assert snapshot(vault) == before
