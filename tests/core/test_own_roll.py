"""A device's own roll of the master secret that a crash stopped (spec §16.6 "A slot of a newer generation
that the device signed itself", §16.7): before its control records it announced nothing, and the device
stays where it was; after them, the device moves on through the slot it signed itself and clears the
replaced passphrase's older slots.  The crash is real: a child process that dies (``os._exit``) at the
point named, its files left as they were.  The kill after the records, with the recovery that opened
with the old passphrase, is in tests/reliability/test_crash.py."""

from __future__ import annotations

import glob
import os
import subprocess
import sys

import pytest
from camillo import NewRecord, Unlock, Vault, WrongCredential, envelopes, ids, slots
from camillo.primitives import random_bytes
from camillo.session import core as session_core

PASSPHRASE = "correct horse battery staple"
NEW_PASSPHRASE = "a new passphrase, never recorded"

# A passphrase change that dies right before its control batches: its new slots and envelopes (a
# master secret of the next generation, slots signed by this device) are in the folder, nothing
# announces them.
_CRASH = """
import os, sys
from camillo import Unlock, Vault
import camillo.ops.rekey as rekey
path, home, old, new = sys.argv[1:5]
v = Vault.open(path, Unlock.passphrase(old), home=home)
rekey.write_batches = lambda *a, **k: os._exit(9)
v.change_passphrase(new)
sys.exit(1)
"""


def _crash_before_records(path: str, home: str) -> None:
    r = subprocess.run([sys.executable, "-c", _CRASH, path, home, PASSPHRASE, NEW_PASSPHRASE],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 9, (r.returncode, r.stdout, r.stderr[-3000:])


def _slots(path: str) -> list[tuple[int, str]]:
    out = []
    for f in sorted(glob.glob(os.path.join(path, "slots", "*.slot"))):
        h = slots.read_header(open(f, "rb").read(), "slots/" + os.path.basename(f))
        out.append((h.generation, h.type.name))
    return sorted(out)


def _generation_opened(path: str, unlock: Unlock, home: str) -> int:
    v = Vault.open(path, unlock, home=home)
    try:
        return v.session.keyring.generation
    finally:
        v.lock()


@pytest.fixture
def orphan_roll(tmp_path):
    """A vault whose laptop died in a passphrase change before the change's records."""
    path, home = str(tmp_path / "vault"), str(tmp_path / "laptop")
    v, phrase = Vault.create(path, PASSPHRASE, device_name="laptop", home=home)
    v.append([NewRecord(type="message", text="before the change")])
    owner = ids.recipient_id(v.session.keyring.owner_kem.public)
    v.lock()
    _crash_before_records(path, home)
    assert _slots(path) == [(1, "DEVICE"), (1, "PASSPHRASE"), (1, "RECOVERY"),
                            (2, "DEVICE"), (2, "PASSPHRASE"), (2, "RECOVERY")]
    return path, home, phrase, tmp_path, owner


def test_a_roll_stopped_before_its_records_never_takes_the_slot_of_the_passphrase_that_still_counts(orphan_roll):
    """The recovery phrase opens the newest slot first, the stopped roll's.  The passphrase that still
    counts has no slot of that generation, so its older slot, its only one, stays: it used to be
    deleted as a replaced passphrase's, and then the passphrase opened the vault on no new
    installation (found by review)."""
    path, home, phrase, tmp, _owner = orphan_roll
    assert _generation_opened(path, Unlock.recovery(phrase), home) == 2
    assert (1, "PASSPHRASE") in _slots(path)
    assert _generation_opened(path, Unlock.passphrase(PASSPHRASE), str(tmp / "new-installation")) == 1
    with pytest.raises(WrongCredential, match="never authorised"):
        Vault.open(path, Unlock.passphrase(NEW_PASSPHRASE), home=str(tmp / "another"))


def test_the_passphrase_that_counts_keeps_its_slot_after_a_later_epoch_at_the_stopped_rolls_generation(orphan_roll):
    """The recovery phrase opens the stopped roll's generation; a compartment added then starts an epoch
    whose EPOCH record names that generation, as a scheduled epoch or an agent's revocation would.  The
    passphrase that counts still has no slot of that generation, so its older slot stays: it used to go
    at the next open once any epoch named the generation, and then the passphrase opened the vault
    nowhere, the laptop included (found by a second review)."""
    path, home, phrase, tmp, _owner = orphan_roll
    v = Vault.open(path, Unlock.recovery(phrase), home=home)
    try:
        assert v.session.keyring.generation == 2
        v.add_compartment("projects")
    finally:
        v.lock()
    assert _generation_opened(path, Unlock.recovery(phrase), home) == 2
    assert (1, "PASSPHRASE") in _slots(path)
    assert _generation_opened(path, Unlock.passphrase(PASSPHRASE), str(tmp / "new-installation")) in (1, 2)
    assert _generation_opened(path, Unlock.passphrase(PASSPHRASE), home) in (1, 2)


def test_a_roll_stopped_before_its_records_is_not_moved_to_even_when_an_envelope_is_withheld(orphan_roll):
    """The device's own slot of the stopped roll is not used: an epoch this keyring lacks (a host
    withholds one of its envelopes) is not the roll's announcement, which would be an EPOCH record
    naming the roll's generation (found by review: any missing epoch the other master secret delivered
    used to count)."""
    path, home, _phrase, _tmp, owner = orphan_roll
    # one of the older master secret's envelopes (the stopped roll wrapped every epoch it held again)
    envelope = next(f for f in sorted(glob.glob(os.path.join(path, "env", "*.env")))
                    if envelopes.is_for(open(f, "rb").read(), owner))
    os.unlink(envelope)
    v = Vault.open(path, Unlock.passphrase(PASSPHRASE), home=home)
    try:
        assert v.session.keyring.generation == 1
        assert v.session.roster.active_owner(v.session.unlocking.writer_id)
    finally:
        v.lock()


def test_a_roll_stopped_before_its_records_is_neither_tried_again_at_each_refresh_nor_remembered(orphan_roll,
                                                                                                 monkeypatch):
    """With an announced epoch missing here (a grant's revocation whose envelopes the sync has not
    brought), the device's own slot of the stopped roll is looked at once, not at every refresh and
    write (two reads of every key each), and never remembered as a generation seen: going back from
    it raised a rollback alert that stayed after the envelopes arrived (found by review)."""
    path, home, _phrase, tmp, _owner = orphan_roll
    v = Vault.open(path, Unlock.passphrase(PASSPHRASE), home=home)
    before = set(os.listdir(os.path.join(path, "env")))
    v.create_grant("bot", {"personal": "read"}, str(tmp / "bot.grant"))
    v.revoke("bot")
    v.lock()
    stash = tmp / "stash"
    stash.mkdir()
    withheld = sorted(set(os.listdir(os.path.join(path, "env"))) - before)
    assert withheld
    for name in withheld:
        os.replace(os.path.join(path, "env", name), stash / name)
    adoptions: list[int] = []
    real = session_core.Session.adopt_master_secret

    def counting(self, vms, generation, **kw):
        adoptions.append(generation)
        return real(self, vms, generation, **kw)

    monkeypatch.setattr(session_core.Session, "adopt_master_secret", counting)
    v = Vault.open(path, Unlock.passphrase(PASSPHRASE), home=home)
    try:
        assert v.session.keyring.generation == 1
        adoptions.clear()
        for i in range(3):
            v.refresh()
            v.append([NewRecord(type="message", text=f"while the keys sync {i}")])
        assert adoptions == []
        assert not v.session.alerts
    finally:
        v.lock()
    for name in withheld:
        os.replace(stash / name, os.path.join(path, "env", name))
    v = Vault.open(path, Unlock.passphrase(PASSPHRASE), home=home)
    try:
        assert not v.session.alerts, [a.message for a in v.session.alerts]
        assert v.sync_status().state == "up to date"
    finally:
        v.lock()


def test_a_slot_planted_for_the_device_at_a_newer_generation_leaves_no_rollback_alert(tmp_path):
    """A host plants a slot of the next generation for this device's key, with a master secret of its
    own, signed by a stranger: the device tries it and goes back.  Trying it no longer remembers the
    newer generation as seen (a rollback alert ever after, on a vault nobody rolled back)."""
    path, home = str(tmp_path / "vault"), str(tmp_path / "laptop")
    v, phrase = Vault.create(path, PASSPHRASE, device_name="laptop", home=home)
    stranger = Vault.create(str(tmp_path / "other"), PASSPHRASE, device_name="stranger",
                            home=str(tmp_path / "stranger"))[0]
    s = v.session
    name, data = s.build_slot(s.actor.recipient.public, slots.SlotType.DEVICE, "planted", signer=stranger.session.actor,
                              generation=s.keyring.generation + 1, vms=random_bytes(32))
    stranger.lock()
    v.lock()
    with open(os.path.join(path, name), "wb") as f:
        f.write(data)
    v = Vault.open(path, Unlock.passphrase(PASSPHRASE), home=home)
    try:
        assert v.session.keyring.generation == 1
        assert not v.session.alerts, [a.message for a in v.session.alerts]
        assert v.session.local.load_generation() == 1
    finally:
        v.lock()
    v = Vault.open(path, Unlock.passphrase(PASSPHRASE), home=home)
    try:
        assert not v.session.alerts, [a.message for a in v.session.alerts]
    finally:
        v.lock()


def test_another_session_of_the_installation_moves_on_once_the_stopped_rolls_records_are_read(tmp_path, monkeypatch):
    """The desktop is open while the command line changes the passphrase on the same installation and
    dies right after the change's records.  The desktop had looked at the slots while the change was
    in flight (its new slots there, its records not yet): the records that arrive next change no slot
    file, and the desktop used to stay on the older generation, its unlocking passphrase revoked, until
    it was opened again.  The number of epochs announced is part of what it watches now (found by
    review)."""
    from camillo.ops import rekey

    path, home = str(tmp_path / "vault"), str(tmp_path / "laptop")
    Vault.create(path, PASSPHRASE, device_name="laptop", home=home)[0].lock()
    desktop = Vault.open(path, Unlock.passphrase(PASSPHRASE), home=home)
    command_line = Vault.open(path, Unlock.passphrase(PASSPHRASE), home=home)
    real = rekey.write_batches

    class Died(BaseException):
        """The command line's process ends here (nothing after its records runs)."""

    def records_then_die(*a, **k):
        desktop.refresh()  # the new slots are in the folder, the records not yet
        assert desktop.session.keyring.generation == 1
        real(*a, **k)
        raise Died

    monkeypatch.setattr(rekey, "write_batches", records_then_die)
    with pytest.raises(Died):
        command_line.change_passphrase(NEW_PASSPHRASE)
    monkeypatch.setattr(rekey, "write_batches", real)
    try:
        for _ in range(2):  # (a refresh looks at the generation before it reads what is new: one behind)
            desktop.refresh()
        assert desktop.session.keyring.generation == 2
        desktop.append([NewRecord(type="message", text="from the desktop")])
    finally:
        desktop.lock()
    assert _generation_opened(path, Unlock.passphrase(NEW_PASSPHRASE), str(tmp_path / "new-installation")) == 2
