"""A passphrase change's slots can arrive before its records (a sync's order, or a host that holds the
records back): until they are read, the replaced passphrase still counts on the device they have not
reached, and it must gain nothing of the new generation there (spec §16.7, "What an old credential can
still read"; §16.10 rule 10).  Two folders, one per device, carried between by hand."""

from __future__ import annotations

import glob
import os
import shutil

from camillo import NewRecord, Unlock, Vault, descriptor, slots
from camillo.credentials import from_passphrase
from camillo.primitives import CryptoFailure

PASSPHRASE = "correct horse battery staple"
NEW_PASSPHRASE = "the passphrase that replaced it"


def _carry(src: str, dst: str, subdirs: tuple[str, ...] = ("",)) -> None:
    """Copy the files of ``src`` (under ``subdirs``) that ``dst`` lacks; delete nothing."""
    for sub in subdirs:
        for f in glob.glob(os.path.join(src, sub, "**", "*"), recursive=True):
            if os.path.isfile(f) and not os.path.basename(f).startswith("."):
                d = os.path.join(dst, os.path.relpath(f, src))
                if not os.path.exists(d):
                    os.makedirs(os.path.dirname(d), exist_ok=True)
                    shutil.copy2(f, d)


def _generations_unwrapped(folder: str, passphrase: str) -> set[int]:
    """The generations whose master secret ``passphrase`` unwraps from the slots in ``folder``, whatever a
    reader would then decide (an attacker who holds the old passphrase and what the host kept)."""
    vid = descriptor.decode(open(os.path.join(folder, "VMEM"), "rb").read()).vault_id
    out = set()
    for f in glob.glob(os.path.join(folder, "slots", "*.slot")):
        h = slots.read_header(open(f, "rb").read(), "slots/" + os.path.basename(f))
        if h.kdf is None:
            continue
        try:
            slots.unwrap_vms(h, vid, from_passphrase(passphrase, h.kdf).recipient)
            out.add(h.generation)
        except CryptoFailure:
            continue
    return out


def test_the_replaced_passphrase_gets_no_slot_of_the_new_generation_before_the_changes_records_arrive(tmp_path):
    """The laptop changes the passphrase.  The desktop's folder receives the new slots and key files but
    not yet the change's records, and the person opens the desktop with the old passphrase.  The desktop
    moves to the new generation through its own device slot; the old passphrase still counts there, so
    it used to be given a slot of the new generation (as a passphrase that won a concurrent change is),
    and from then on it unwrapped the new master secret from every copy of that slot: everything written
    after the change.  It waits now for the records of the roll, which revoke it."""
    laptop, desktop = str(tmp_path / "laptop"), str(tmp_path / "desktop")
    v, _phrase = Vault.create(laptop, PASSPHRASE, device_name="laptop", home=str(tmp_path / "h-laptop"))
    v.append([NewRecord(type="message", text="before the change")])
    v.lock()
    shutil.copytree(laptop, desktop)
    Vault.open(desktop, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "h-desktop"), device_name="desktop").lock()
    _carry(desktop, laptop)
    v = Vault.open(laptop, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "h-laptop"))
    v.change_passphrase(NEW_PASSPHRASE)
    v.append([NewRecord(type="message", text="after the change")])
    v.lock()
    _carry(laptop, desktop, ("slots", "env"))  # the key files first; the records are still on their way

    v = Vault.open(desktop, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "h-desktop"))
    try:
        assert v.session.keyring.generation == 2
    finally:
        v.lock()
    assert _generations_unwrapped(desktop, PASSPHRASE) == {1}

    _carry(laptop, desktop)  # the records arrive
    v = Vault.open(desktop, Unlock.passphrase(NEW_PASSPHRASE), home=str(tmp_path / "h-desktop"))
    try:
        assert "after the change" in {r.text for r in v.timeline()}
    finally:
        v.lock()
    assert _generations_unwrapped(desktop, PASSPHRASE) == set()
