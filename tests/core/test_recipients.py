"""Trusted-person recovery (issue 17, item 5; spec §12.1 kind 4, §12.6), with real keys and files.

The trusted person makes a key (sealed under their own passphrase); the owner adds its public half;
on a new installation, the key opens the vault, registers the device and sets a new passphrase (the
keys roll).  A recipient is listed and revoked like any credential.  Every bad input is a specific
error and writes nothing."""

from __future__ import annotations

import base64
import os
import shutil

import pytest
from camillo import AccessDenied, NewRecord, Unlock, Vault, WrongCredential
from camillo.credentials import read_recipient_key
from camillo.errors import UsageError

from .helpers import snapshot, switch_home
from .test_credential_change import attacker_reads, union_copy

PASSPHRASE = "correct horse battery staple"
ALICE = "alice's own passphrase"


@pytest.fixture
def alice_key(tmp_path):
    made = Vault.make_recipient_key(str(tmp_path / "alice.key"), ALICE, "Alice")
    return made.path, made.public_path


def test_key_files_are_private_and_name_their_holder(alice_key):
    key, pub = alice_key
    assert oct(os.stat(key).st_mode & 0o777) == "0o600"
    assert "BEGIN VMEM RECIPIENT KEY" in open(key).read() and "of Alice" in open(key).read()
    assert "BEGIN VMEM RECIPIENT PUBLIC KEY" in open(pub).read()
    with pytest.raises(UsageError, match="already exists"):
        Vault.make_recipient_key(key, ALICE, "Alice")


def test_a_trusted_person_recovers_the_vault_on_a_new_installation(new_vault, alice_key, tmp_path, monkeypatch):
    path, vault, _ = new_vault
    key, pub = alice_key
    vault.append([NewRecord(type="message", text="written before")])
    changes = vault.add_recipient("Alice", pub)
    assert changes.credentials
    [alice] = vault.recipients()
    assert alice.name == "Alice" and not alice.revoked and alice.to_json()["name"] == "Alice"
    vault.lock()
    # The owner lost the passphrase and every device; Alice's key opens the vault on a new computer.
    switch_home(monkeypatch, tmp_path / "new-computer")
    with Vault.open(path, Unlock.recipient(key, ALICE), device_name="Rescued laptop") as v:
        assert v.unlocked_with == "recovery key" and v.is_owner
        assert "written before" in {r.text for r in v.timeline()}
        me = next(d for d in v.devices() if d.this_device)
        assert me.name == "Rescued laptop" and me.joined_with == "the recovery key of Alice"
        v.change_passphrase("a brand new passphrase")  # re-authenticated by Alice's key
        v.append([NewRecord(type="message", text="written after the rescue")])
        assert v.problems() == []
    with pytest.raises(WrongCredential):
        Vault.open(path, Unlock.passphrase(PASSPHRASE))
    switch_home(monkeypatch, tmp_path / "home")
    with Vault.open(path, Unlock.passphrase("a brand new passphrase")) as v:
        assert {"written before", "written after the rescue"} <= {r.text for r in v.timeline()}
        assert v.problems() == []


def test_a_removed_recipient_reads_nothing_written_afterwards(new_vault, alice_key, tmp_path):
    path, vault, _ = new_vault
    key, pub = alice_key
    vid = vault.vault_id
    vault.add_recipient("Alice", pub)
    vault.append([NewRecord(type="message", text="BEFORE-REMOVAL")])
    before = str(tmp_path / "before")
    shutil.copytree(path, before)
    with pytest.raises(UsageError, match="no trusted person 'Bob'"):
        vault.remove_recipient("Bob")
    report = vault.remove_recipient("Alice")
    assert report.kind == "recovery recipient" and report.generation
    assert vault.recipients()[0].revoked
    vault.append([NewRecord(type="message", text="AFTER-REMOVAL")])
    vault.lock()
    with pytest.raises(WrongCredential):
        Vault.open(path, Unlock.recipient(key, ALICE))
    # with every file the host ever held and Alice's key, only what came before
    host = str(tmp_path / "host")
    union_copy([before, path], host)
    seen = b"".join(attacker_reads(host, vid, read_recipient_key(key, ALICE)))
    assert b"BEFORE-REMOVAL" in seen and b"AFTER-REMOVAL" not in seen


def test_adding_a_recipient_needs_the_passphrase_not_a_device_key(new_vault, alice_key):
    path, vault, _ = new_vault
    vault.lock()
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        v.session.unlocking = None  # as if opened with the device key alone (no keychain in tests)
        with pytest.raises(AccessDenied, match="passphrase or recovery phrase"):
            v.add_recipient("Alice", alice_key[1])
        v.add_recipient("Alice", alice_key[1], reauth=Unlock.passphrase(PASSPHRASE))
        with pytest.raises(UsageError, match="already added as Alice"):
            v.add_recipient("Alice again", alice_key[1], reauth=Unlock.passphrase(PASSPHRASE))


def corrupt(path, tmp_path, name):
    text = open(path).read()
    lines = text.splitlines()
    body = [i for i, line in enumerate(lines) if line and not line.startswith(("#", "-----"))]
    raw = bytearray(base64.b64decode("".join(lines[i] for i in body)))
    raw[len(raw) // 2] ^= 1
    enc = base64.b64encode(bytes(raw)).decode()
    out = [*lines[: body[0]], *(enc[i:i + 64] for i in range(0, len(enc), 64)), *lines[body[-1] + 1:]]
    bad = tmp_path / name
    bad.write_text("\n".join(out) + "\n")
    return str(bad)


def forged_pub(pub, tmp_path):
    """The public key file of someone else's signing key, with a valid checksum: its proof of
    possession does not verify."""
    from camillo import encoding
    from camillo.credentials import PUB_ARMOR, _armored

    text = open(pub).read()
    start = text.index(PUB_ARMOR[0]) + len(PUB_ARMOR[0])
    m = encoding.decode(base64.b64decode("".join(text[start:text.index(PUB_ARMOR[1])].split())))
    m[3] = os.urandom(32)
    del m[15]
    bad = tmp_path / "forged.pub"
    bad.write_text(_armored(["# forged"], PUB_ARMOR, m))
    return str(bad)


def test_bad_recipient_keys_are_refused_and_nothing_is_written(new_vault, alice_key, tmp_path, monkeypatch):
    path, vault, _ = new_vault
    key, pub = alice_key
    foreign = tmp_path / "notes.txt"
    foreign.write_text("my shopping list\n")
    # the owner's side: a damaged, forged, foreign or private file given as the public key
    before = snapshot(path)
    for bad, why in ((corrupt(pub, tmp_path, "damaged.pub"), "damaged .its checksum"),
                     (forged_pub(pub, tmp_path), "forged"),
                     (str(foreign), "is not a Camillo recipient public key"),
                     (key, "it is the private key file"),
                     (str(tmp_path / "missing.pub"), "does not exist")):
        with pytest.raises(UsageError, match=why):
            vault.add_recipient("Alice", bad)
    with pytest.raises(UsageError, match="cannot be empty"):
        vault.add_recipient(" ", pub)
    assert snapshot(path) == before
    vault.add_recipient("Alice", pub)
    vault.lock()
    before = snapshot(path)
    # the trusted person's side: a wrong passphrase, a damaged or foreign key file, the .pub instead
    switch_home(monkeypatch, tmp_path / "new-computer")
    with pytest.raises(WrongCredential, match="wrong passphrase for the recipient key file"):
        Vault.open(path, Unlock.recipient(key, "not alice's passphrase"))
    for bad, why in ((corrupt(key, tmp_path, "damaged.key"), "damaged .its checksum"),
                     (str(foreign), "is not a Camillo recipient key file"),
                     (pub, "it is the public key file")):
        with pytest.raises((UsageError, WrongCredential), match=why):
            Vault.open(path, Unlock.recipient(bad, ALICE))
    other = Vault.make_recipient_key(str(tmp_path / "bob.key"), "bob", "Bob")
    with pytest.raises(WrongCredential, match="not one of vault"):
        Vault.open(path, Unlock.recipient(other.path, "bob"))
    assert snapshot(path) == before
