"""A passphrase change's slots can arrive before its records (a sync's order, or a host that holds the
records back): until they are read, the replaced passphrase still counts on the device they have not
reached, and it must gain nothing of the new generation there (spec §16.7, "What an old credential can
still read"; §16.10 rule 10).  A folder per device, carried between by hand."""

from __future__ import annotations

import glob
import os
import shutil

from camillo import NewRecord, Unlock, Vault, descriptor, segments

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


def _vault_id(folder: str) -> bytes:
    return descriptor.decode(open(os.path.join(folder, "VMEM"), "rb").read()).vault_id


def _generations_unwrapped(folder: str, passphrase: str) -> set[int]:
    """The generations whose master secret ``passphrase`` unwraps from the slots in ``folder``."""
    return {h.generation for h in slots_unwrapped_by(folder, passphrase)}


def _laptop_and(tmp_path, *devices: str, grant: bool = False) -> tuple[str, list[str], bytes]:
    """A laptop's vault (with an agent's grant), ``devices`` joined, every folder holding all of them; and
    the control compartment's id.  The recovery phrase is in ``tmp_path / "recovery phrase"``."""
    laptop = str(tmp_path / "laptop")
    v, phrase = Vault.create(laptop, PASSPHRASE, device_name="laptop", home=str(tmp_path / "h-laptop"))
    (tmp_path / "recovery phrase").write_text(phrase)  # (written down, as the person would)
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


def _open_with_the_replaced_passphrase(tmp_path, desktop: str, generation: int = 2, name: str = "desktop") -> None:
    """The desktop (or device ``name``), opened with the old passphrase, moves to the newest generation
    through its own device slot; the old passphrase unwraps nothing newer than the first from its folder
    afterwards."""
    v = Vault.open(desktop, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / f"h-{name}"))
    try:
        assert v.session.keyring.generation == generation
    finally:
        v.lock()
    assert _generations_unwrapped(desktop, PASSPHRASE) == {1}


def _revoke_with_the_old_passphrase(tmp_path, folder: str, name: str, lost: str) -> int:
    """Device ``name``, opened with the old passphrase on ``folder``, revokes device ``lost``; the generation
    it is at afterwards."""
    v = Vault.open(folder, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / f"h-{name}"))
    try:
        v.revoke(lost, reason="lost")
        return v.session.keyring.generation
    finally:
        v.lock()


def _changed_on_the_laptop(tmp_path, *to: str) -> None:
    """The laptop changes the passphrase; its key files (not its records) reach the folders ``to``."""
    v = _on_the_laptop(tmp_path)
    v.change_passphrase(NEW_PASSPHRASE)
    v.lock()
    for folder in to:
        _carry(str(tmp_path / "laptop"), folder, ("slots", "env"))


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


def test_a_roll_made_on_a_view_that_has_not_read_the_change_gives_the_replaced_passphrase_nothing_newer(tmp_path):
    """Found by review.  The laptop changes the passphrase.  A phone that received only the change's key
    files, opened with the old passphrase (which still counts there), revokes another device: its roll
    used to give the old passphrase a slot of its new master secret, which every folder then carried, the
    laptop's too, and everything written after it was under.  A roll now gives the new master secret only to
    the credentials that hold the current one, and to those the roll that made the current generation had
    not seen registered (spec §16.6 step 3).  Once the change's records arrive, the passphrase that replaced
    the old one opens every copy, on a device that never held the vault as well."""
    laptop, (phone, _spare), _control = _laptop_and(tmp_path, "phone", "spare")
    _changed_on_the_laptop(tmp_path, phone)
    assert _revoke_with_the_old_passphrase(tmp_path, phone, "phone", "spare") == 3
    assert _generations_unwrapped(phone, PASSPHRASE) == {1}
    _carry(phone, laptop)
    _carry(laptop, phone)
    for folder in (laptop, phone):
        assert _generations_unwrapped(folder, PASSPHRASE) <= {1}, folder
    v = _on_the_laptop(tmp_path, NEW_PASSPHRASE)
    v.lock()
    _carry(laptop, phone)
    with Vault.open(phone, Unlock.passphrase(NEW_PASSPHRASE), home=str(tmp_path / "h-new")) as v:
        # (the laptop rolled the keys again: the phone's roll had not seen the change's REVOKE, so it may have
        # given the old passphrase a slot, whether or not one is here, spec §16.10 rule 9 (c))
        assert v.session.keyring.generation == 4
        assert "before the change" in {r.text for r in v.timeline()}
    assert _generations_unwrapped(phone, PASSPHRASE) <= {1}
    assert 4 in _generations_unwrapped(phone, NEW_PASSPHRASE)


def test_a_second_roll_on_the_same_unread_view_gives_the_replaced_passphrase_nothing_newer(tmp_path):
    """The phone of the test above revokes a second device before the change's records arrive.  Its
    current generation is now its own roll's, which had seen the old passphrase registered and left it
    out: the second roll leaves it out too (a roll that consulted only the roster, once its own roll
    made the generation, gave it a slot of the fourth)."""
    _laptop, (phone, _spare, _tablet), _control = _laptop_and(tmp_path, "phone", "spare", "tablet")
    _changed_on_the_laptop(tmp_path, phone)
    assert [_revoke_with_the_old_passphrase(tmp_path, phone, "phone", lost) for lost in ("spare", "tablet")] == [3, 4]
    assert _generations_unwrapped(phone, PASSPHRASE) == {1}


def test_a_roll_made_on_a_view_that_has_not_read_a_revocation_gives_the_lost_device_nothing_newer(tmp_path):
    """The same for a lost device: the laptop revokes it; the phone receives the revocation's key files but
    not its records, and revokes another device.  Its roll used to give the lost device, which this roster
    still counted, a slot of its new master secret: whoever holds that laptop's key read what was written
    after."""
    laptop, (phone, spare, _tablet), _control = _laptop_and(tmp_path, "phone", "spare", "tablet")
    v = _on_the_laptop(tmp_path)
    v.revoke("spare", reason="lost")
    v.lock()
    _carry(laptop, phone, ("slots", "env"))
    v = Vault.open(phone, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "h-phone"))
    try:
        spare_key = next(p.recipient_id for p in v.session.roster.principals.values() if p.name == "spare")
        v.revoke("tablet", reason="lost")
        assert v.session.keyring.generation == 3
        named = {st.recipient_id for _h, st in v.session.current_slots()}
    finally:
        v.lock()
    assert named and spare_key not in named


def test_a_roll_read_here_that_had_not_read_the_change_either_gives_the_replaced_passphrase_nothing_newer(tmp_path):
    """The laptop changes the passphrase.  A tablet that received only the change's key files revokes a lost
    device (its roll leaves the old passphrase out: it holds nothing of the change's generation).  The phone
    receives the change's key files and all the tablet wrote, and is opened with the old passphrase: it
    moves to the tablet's generation through its own slot and reads the tablet's roll, which had seen the
    old passphrase registered and left it out.  The phone used to issue it a slot of that generation again,
    as for a passphrase set at the same time as the newest roll (spec §16.10 rule 10)."""
    _laptop, (phone, tablet, _spare), _control = _laptop_and(tmp_path, "phone", "tablet", "spare")
    _changed_on_the_laptop(tmp_path, tablet, phone)
    assert _revoke_with_the_old_passphrase(tmp_path, tablet, "tablet", "spare") == 3
    assert _generations_unwrapped(tablet, PASSPHRASE) == {1}
    _carry(tablet, phone)
    _open_with_the_replaced_passphrase(tmp_path, phone, generation=3, name="phone")
