"""A passphrase change's slots can arrive before its records (a sync's order, or a host that holds the
records back): until they are read, the replaced passphrase still counts on the device they have not
reached, and it must gain nothing of the new generation there (spec §16.7, "What an old credential can
still read"; §16.10 rule 10).  A folder per device, carried between by hand."""

from __future__ import annotations

import glob
import os
import shutil

import pytest
from camillo import NewRecord, Unlock, Vault, segments

from .helpers import slots_unwrapped_by

PASSPHRASE = "correct horse battery staple"
NEW_PASSPHRASE = "the passphrase that replaced it"


def _files(folder: str) -> set[str]:
    return {os.path.relpath(f, folder) for f in glob.glob(os.path.join(folder, "**", "*"), recursive=True)
            if os.path.isfile(f) and not os.path.basename(f).startswith(".")}


def _carry(src: str, dst: str, subdirs: tuple[str, ...] = ("",), *, only: set[str] | None = None) -> None:
    """Copy the files of ``src`` (under ``subdirs``, or those named in ``only``) that ``dst`` lacks; delete
    nothing."""
    for rel in sorted(_files(src)):
        if (rel in only) if only is not None else any(rel.startswith(sub) for sub in subdirs):
            d = os.path.join(dst, rel)
            if not os.path.exists(d):
                os.makedirs(os.path.dirname(d), exist_ok=True)
                shutil.copy2(os.path.join(src, rel), d)


def _join(tmp_path, source: str, name: str) -> str:
    """A copy of ``source``'s folder where a new device ``name`` registers (carried back to ``source``)."""
    folder = str(tmp_path / name)
    shutil.copytree(source, folder)
    Vault.open(folder, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / f"h-{name}"), device_name=name).lock()
    _carry(folder, source)
    return folder


def _generations_unwrapped(folder: str, passphrase: str) -> set[int]:
    """The generations whose master secret ``passphrase`` unwraps from the slots in ``folder``."""
    return {h.generation for h in slots_unwrapped_by(folder, passphrase)}


def _laptop_and(tmp_path, *devices: str, grant: bool = False) -> tuple[str, list[str], bytes]:
    """A laptop's vault (with an agent's grant), ``devices`` joined, every folder holding all of them; and
    the control compartment's id."""
    laptop = str(tmp_path / "laptop")
    v, _phrase = Vault.create(laptop, PASSPHRASE, device_name="laptop", home=str(tmp_path / "h-laptop"))
    v.append([NewRecord(type="message", text="before the change")])
    control = v.session.roster.control_id
    if grant:
        v.create_grant("agent", {"personal": "read"}, str(tmp_path / "agent.grant"))
    v.lock()
    folders = [_join(tmp_path, laptop, name) for name in devices]
    for folder in folders:
        _carry(laptop, folder)
    return laptop, folders, control


def _on_the_laptop(tmp_path, passphrase: str = PASSPHRASE) -> Vault:
    return Vault.open(str(tmp_path / "laptop"), Unlock.passphrase(passphrase), home=str(tmp_path / "h-laptop"))


def _segments_outside(folder: str, names: set[str], compartment: bytes) -> set[str]:
    """Those of ``names`` that are segments of another compartment than ``compartment``."""
    return {rel for rel in names if rel.startswith("segments")
            and segments.read_header(open(os.path.join(folder, rel), "rb").read(), rel).compartment_id != compartment}


def _open_with_the_replaced_passphrase(tmp_path, desktop: str, generation: int = 2) -> None:
    """The desktop, opened with the old passphrase, moves to the newest generation through its own device
    slot; the old passphrase unwraps nothing newer than the first from its folder afterwards."""
    v = Vault.open(desktop, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "h-desktop"))
    try:
        assert v.session.keyring.generation == generation
    finally:
        v.lock()
    assert _generations_unwrapped(desktop, PASSPHRASE) == {1}


def test_the_replaced_passphrase_gets_no_slot_of_the_new_generation_before_the_changes_records_arrive(tmp_path):
    """The laptop changes the passphrase.  The desktop's folder receives the new slots and key files but
    not yet the change's records, and the person opens the desktop with the old passphrase.  The desktop
    moves to the new generation through its own device slot; the old passphrase still counts there, so
    it used to be given a slot of the new generation (as a passphrase that won a concurrent change is),
    and from then on it unwrapped the new master secret from every copy of that slot: everything written
    after the change.  It waits now for the records of the roll, which revoke it."""
    laptop, (desktop,), _control = _laptop_and(tmp_path, "desktop")
    v = _on_the_laptop(tmp_path)
    v.change_passphrase(NEW_PASSPHRASE)
    v.append([NewRecord(type="message", text="after the change")])
    v.lock()
    _carry(laptop, desktop, ("slots", "env"))  # the key files first; the records are still on their way

    _open_with_the_replaced_passphrase(tmp_path, desktop)

    _carry(laptop, desktop)  # the records arrive
    v = Vault.open(desktop, Unlock.passphrase(NEW_PASSPHRASE), home=str(tmp_path / "h-desktop"))
    try:
        assert "after the change" in {r.text for r in v.timeline()}
    finally:
        v.lock()
    assert _generations_unwrapped(desktop, PASSPHRASE) == set()


def test_a_third_devices_epoch_at_the_new_generation_does_not_stand_for_the_changes_records(tmp_path):
    """A phone that also received only the change's key files moves to the new generation the same way
    and adds a compartment: an EPOCH record at that generation, by another device than the desktop.  It
    says nothing of the change's records (the phone never read them either): the desktop, opened with
    the replaced passphrase, still gives it no slot of the new generation (found by review)."""
    laptop, (desktop, phone), _control = _laptop_and(tmp_path, "desktop", "phone")
    v = _on_the_laptop(tmp_path)
    v.change_passphrase(NEW_PASSPHRASE)
    v.lock()
    _carry(laptop, phone, ("slots", "env"))
    v = Vault.open(phone, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "h-phone"))
    try:
        assert v.session.keyring.generation == 2
        v.add_compartment("travel")
    finally:
        v.lock()
    _carry(laptop, desktop, ("slots", "env"))
    _carry(phone, desktop)
    _open_with_the_replaced_passphrase(tmp_path, desktop)


def test_the_changing_devices_later_epoch_without_the_changes_batches_does_not_stand_for_them(tmp_path):
    """After the change the laptop revokes an agent's grant: a new epoch at the new generation in the
    grant's compartment, in a batch that carries no REVOKE of the old passphrase.  A host delivers the
    key files and that revocation's batches outside the control compartment, and holds back every batch
    of the change and the revocation's control batch: the desktop, opened with the replaced passphrase,
    gives it no slot of the new generation (found by review)."""
    laptop, (desktop,), control = _laptop_and(tmp_path, "desktop", grant=True)
    v = _on_the_laptop(tmp_path)
    v.change_passphrase(NEW_PASSPHRASE)
    v.append([NewRecord(type="message", text="after the change")])
    before = _files(laptop)
    v.revoke("agent")
    v.lock()
    later = _segments_outside(laptop, _files(laptop) - before, control)
    assert later
    _carry(laptop, desktop, ("slots", "env"))
    _carry(laptop, desktop, only=later)
    _open_with_the_replaced_passphrase(tmp_path, desktop)
    _carry(laptop, desktop)
    v = Vault.open(desktop, Unlock.passphrase(NEW_PASSPHRASE), home=str(tmp_path / "h-desktop"))
    v.lock()
    assert _generations_unwrapped(desktop, PASSPHRASE) == set()


def test_a_later_roll_of_the_changing_device_does_not_stand_for_the_earlier_changes_batches(tmp_path):
    """The laptop changes the passphrase (its batches revoke the first one), revokes an agent's grant (an
    epoch at that generation), then changes the passphrase again (its batches revoke only the second).  A
    host delivers the key files and the batches of the last two outside the control compartment, and holds
    back every control batch and every batch of the first change.  The second change's epoch follows the
    grant's, of an older generation, and the laptop wrote it; but the first change's batches, with the
    REVOKE of the first passphrase, are below it in the laptop's chains: a gap.  The desktop, opened with
    the first passphrase, gives it no slot of the newest generation (found by a third review: it used to,
    and the passphrase replaced two changes ago unwrapped the newest master secret)."""
    laptop, (desktop,), control = _laptop_and(tmp_path, "desktop", grant=True)
    v = _on_the_laptop(tmp_path)
    v.change_passphrase(NEW_PASSPHRASE)
    first = _files(laptop)
    v.revoke("agent")
    v.lock()
    v = _on_the_laptop(tmp_path, NEW_PASSPHRASE)
    v.change_passphrase("a third passphrase")
    v.lock()
    later = _segments_outside(laptop, _files(laptop) - first, control)
    _carry(laptop, desktop, ("slots", "env"))
    _carry(laptop, desktop, only=later)
    _open_with_the_replaced_passphrase(tmp_path, desktop, generation=3)


@pytest.mark.xfail(strict=True, reason="open: a roll made on a view that has not read a passphrase change gives the "
                                       "replaced passphrase a slot of a newer generation (found by review, 2026-12-07)")
def test_a_roll_made_on_a_view_that_has_not_read_the_change_gives_the_replaced_passphrase_nothing_newer(tmp_path):
    """The laptop changes the passphrase.  A phone that received only the change's key files, opened with
    the old passphrase (which still counts there), revokes another device: its roll is numbered past the
    change's generation, which it saw but has not read, and gives the old passphrase a slot of it.  Every
    folder then carries that slot, and the old passphrase unwraps a master secret newer than the change
    that replaced it.  (Refusing such a roll conflicts with a revocation never being refused, spec
    §16.10; numbering it as a second branch of its own generation + 1, for rule 9 to join, is the other
    way.  Open: the fix is a concurrency rule of its own.)"""
    laptop, (phone, _spare), _control = _laptop_and(tmp_path, "phone", "spare")
    v = _on_the_laptop(tmp_path)
    v.change_passphrase(NEW_PASSPHRASE)
    v.lock()
    _carry(laptop, phone, ("slots", "env"))
    v = Vault.open(phone, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "h-phone"))
    try:
        v.revoke("spare", reason="lost")
    finally:
        v.lock()
    assert _generations_unwrapped(phone, PASSPHRASE) <= {1}
