"""A user credential that a roll could not give a slot of its new master secret: a device that registers
while another device revokes (the roll had not seen it), a new passphrase whose own slot arrives after a
roll made on another device (the roll that made the current generation registered it).  It gets one once a
device that counts it has read that roll (spec §16.6 step 3).  A folder per device, carried between by
hand."""

from __future__ import annotations

import shutil

from camillo import NewRecord, Unlock, Vault

from .test_replaced_passphrase import NEW_PASSPHRASE, PASSPHRASE, _carry, _files, _laptop_and, _on_the_laptop


def test_a_device_registered_while_another_revokes_reads_what_is_written_after_the_roll(tmp_path):
    """The tablet registers on a copy of the vault while the laptop revokes a lost phone and writes.  Once
    the two copies have met, the laptop (which made the roll, and now counts the tablet) gives the tablet a
    slot of the new generation; the tablet used to stay at the first, read nothing written since and say
    the vault was incomplete, for as long as no device rolled the keys again."""
    laptop, (_phone,), _control = _laptop_and(tmp_path, "phone")
    tablet = str(tmp_path / "tablet")
    shutil.copytree(laptop, tablet)
    Vault.open(tablet, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "h-tablet"), device_name="tablet").lock()
    v = _on_the_laptop(tmp_path)
    v.revoke("phone", reason="lost")
    v.append([NewRecord(type="message", text="after the revocation")])
    v.lock()
    _carry(tablet, laptop)
    _carry(laptop, tablet)
    with _on_the_laptop(tmp_path) as v:
        tablet_key = next(p.recipient_id for p in v.session.roster.principals.values() if p.name == "tablet")
        assert tablet_key in {st.recipient_id for _h, st in v.session.current_slots()}
    _carry(laptop, tablet)
    with Vault.open(tablet, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "h-tablet")) as v:
        assert v.session.keyring.generation == 2
        assert "after the revocation" in {r.text for r in v.timeline()}
        assert not [n for n in v.notices() if n.kind == "incomplete"]


def test_a_new_passphrase_whose_slot_arrives_after_a_roll_still_opens_the_vault_on_a_new_device(tmp_path):
    """Found by review.  The laptop changes the passphrase; its records reach the phone, but the new
    passphrase's own slot arrives later (a sync's order).  The phone revokes a lost device: the new
    passphrase holds no slot of the current generation there, and it was the change itself that registered
    it.  Once every file has synced, the new passphrase opens the vault on a device that never held it and
    reads what was written after the phone's roll."""
    from .helpers import slots_unwrapped_by

    laptop, (phone, _spare), _control = _laptop_and(tmp_path, "phone", "spare")
    v = _on_the_laptop(tmp_path)
    v.change_passphrase(NEW_PASSPHRASE)
    v.lock()
    late = {h.name for h in slots_unwrapped_by(laptop, NEW_PASSPHRASE)}
    _carry(laptop, phone, only=_files(laptop) - late)
    recovery = Unlock.recovery((tmp_path / "recovery phrase").read_text())
    with Vault.open(phone, recovery, home=str(tmp_path / "h-phone")) as v:
        v.revoke("spare", reason="lost")
        assert v.session.keyring.generation == 3
    for _ in range(2):
        _carry(phone, laptop)
        _carry(laptop, phone)
        _on_the_laptop(tmp_path, NEW_PASSPHRASE).lock()
    with _on_the_laptop(tmp_path, NEW_PASSPHRASE) as v:
        v.append([NewRecord(type="message", text="after everything met")])
    fresh = str(tmp_path / "fresh")
    shutil.copytree(laptop, fresh)
    with Vault.open(fresh, Unlock.passphrase(NEW_PASSPHRASE), home=str(tmp_path / "h-fresh"), device_name="fresh") as v:
        assert v.session.keyring.generation == 3
        assert "after everything met" in {r.text for r in v.timeline()}


def test_a_device_registered_while_the_passphrase_changed_gets_a_slot_after_a_roll_made_without_reading_it(tmp_path):
    """Found by review.  A device registers (with the recovery phrase) while the laptop changes the
    passphrase.  The phone receives that registration and the change's key files, not its records, and
    revokes a lost device: its roll leaves the new device out (it holds nothing of the change's generation,
    and the change is not read there).  Once every file has synced, the roll of the current generation (the
    phone's) had seen the device registered, but had not read the roll before it, which had not: the device
    is judged by that one, and gets a slot of the current generation (it used to get none, ever, and read
    nothing written after the change)."""
    laptop, (phone, _spare, _tablet), _control = _laptop_and(tmp_path, "phone", "spare", "tablet")
    recovery = Unlock.recovery((tmp_path / "recovery phrase").read_text())
    newcomer = str(tmp_path / "newcomer")
    shutil.copytree(laptop, newcomer)
    Vault.open(newcomer, recovery, home=str(tmp_path / "h-newcomer"), device_name="newcomer").lock()
    v = _on_the_laptop(tmp_path)
    v.change_passphrase(NEW_PASSPHRASE)
    v.lock()
    _carry(newcomer, phone)
    _carry(laptop, phone, ("slots", "env"))
    with Vault.open(phone, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "h-phone")) as v:
        v.revoke("spare", reason="lost")
        assert v.session.keyring.generation == 3
    folders = (laptop, phone, newcomer)
    for _ in range(2):
        for a in folders:
            for b in set(folders) - {a}:
                _carry(a, b)
        _on_the_laptop(tmp_path, NEW_PASSPHRASE).lock()
    with _on_the_laptop(tmp_path, NEW_PASSPHRASE) as v:
        v.append([NewRecord(type="message", text="after everything met")])
    _carry(laptop, newcomer)
    with Vault.open(newcomer, recovery, home=str(tmp_path / "h-newcomer")) as v:
        assert v.session.keyring.generation == 4  # (rolled again: the phone's roll had not seen the change, rule 9 (c))
        assert "after everything met" in {r.text for r in v.timeline()}


def test_a_passphrase_whose_change_is_here_only_in_its_data_copies_gets_a_slot_of_a_roll_that_had_not_seen_it(tmp_path):
    """Found by the key-change hunt's flaky example (about 1 run in 5).  The phone changes the passphrase while
    the laptop revokes two lost devices.  The change's records reach the laptop in their data batches' copies,
    not yet in its control batch, so the laptop counts the new passphrase but finds no control copy of it to
    judge by.  Every control batch the laptop's rolls had seen is here, and none carries the change, so they
    had not seen it: the laptop's next roll gives it a slot.  It used to withhold it; in the hunt's example the
    laptop's key was then sealed under a master secret only that roll's slots open, and the person was refused
    with every passphrase on the laptop."""
    from .helpers import slots_unwrapped_by
    from .test_replaced_passphrase import _segments_outside

    laptop, (phone, *_devices), control = _laptop_and(tmp_path, "phone", "spare", "tablet", "watch")
    before = _files(phone)
    with Vault.open(phone, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "h-phone")) as v:
        v.change_passphrase(NEW_PASSPHRASE)
    new = _files(phone) - before
    held_back = {rel for rel in new if rel.startswith("segments")} - _segments_outside(phone, new, control)
    assert held_back  # (the change's control batch)
    with _on_the_laptop(tmp_path) as v:
        v.revoke("spare", reason="lost")
        v.revoke("tablet", reason="lost")
        assert v.session.keyring.generation == 3
    _carry(phone, laptop, only=new - held_back)
    recovery = Unlock.recovery((tmp_path / "recovery phrase").read_text())
    with Vault.open(laptop, recovery, home=str(tmp_path / "h-laptop")) as v:
        v.revoke("watch", reason="lost")
        generation = v.session.keyring.generation
        v.append([NewRecord(type="message", text="after the roll")])
    assert generation in {h.generation for h in slots_unwrapped_by(laptop, NEW_PASSPHRASE)}


THIRD_PASSPHRASE = "a third passphrase"


def test_a_revoked_passphrase_whose_registration_is_here_only_in_its_data_copies_gets_no_slot(tmp_path):
    """Found by review (a guard of the test above).  The host withholds the control batch that registered the
    second passphrase and every batch of the change that replaced it.  The newest roll (the laptop's
    revocation) had seen both and left the second passphrase out, but its batches that carried them are not
    here: a device given the rest, where the replaced passphrase still counts (its REVOKE is withheld),
    revokes another device, and its roll must not give the replaced passphrase a slot of the new master
    secret.  (The grant's revocation is what makes the generation-4 roll's records readable here.)"""
    from .helpers import slots_unwrapped_by
    from .test_replaced_passphrase import _segments_outside

    laptop, (target, _spare, _tablet), control = _laptop_and(tmp_path, "target", "spare", "tablet", grant=True)
    before = _files(laptop)
    with _on_the_laptop(tmp_path) as v:  # P1 -> P2: its anchor in the control batch, and in the data copies
        v.change_passphrase(NEW_PASSPHRASE)
    first = _files(laptop) - before
    first_control = {rel for rel in first if rel.startswith("segments")} - _segments_outside(laptop, first, control)
    assert first_control
    before = _files(laptop)
    with _on_the_laptop(tmp_path, NEW_PASSPHRASE) as v:  # P2 -> P3: revokes P2
        v.change_passphrase(THIRD_PASSPHRASE)
    second = {rel for rel in _files(laptop) - before if rel.startswith("segments")}
    with _on_the_laptop(tmp_path, THIRD_PASSPHRASE) as v:
        v.revoke("agent")
        v.revoke("spare", reason="lost")  # generation 4: its roll had seen P2 registered, and revoked
        assert v.session.keyring.generation == 4
    _carry(laptop, target, only=_files(laptop) - first_control - second)
    recovery = Unlock.recovery((tmp_path / "recovery phrase").read_text())
    with Vault.open(target, recovery, home=str(tmp_path / "h-target"), cache=False) as v:
        r = v.session.roster
        assert v.session.keyring.generation == 4
        assert [p for p in r.principals.values() if p.kind.label == "passphrase" and p.writer_id not in r.revocations]
        v.revoke("tablet", reason="lost")
        assert v.session.keyring.generation == 5
    assert {h.generation for h in slots_unwrapped_by(target, NEW_PASSPHRASE)}.isdisjoint({4, 5})


def test_a_roster_mirror_copy_kept_first_does_not_hide_a_passphrases_control_copy(tmp_path):
    """Found by review.  A passphrase set on the phone is copied, with the phone's certificate, into the first
    batch of a compartment the tablet adds (a roster mirror).  When a device's state kept that copy first, the
    search for the anchor's control copy looked only in the tablet's control chain, found none, and the rule
    above counted the passphrase as unseen by a roll that had seen it registered and left it out (the laptop
    had replaced it): that device's next roll gave the replaced passphrase its new master secret.  Every
    control chain here is searched now."""
    from .helpers import slots_unwrapped_by
    from .test_replaced_passphrase import _join

    laptop = str(tmp_path / "laptop")
    v, phrase = Vault.create(laptop, PASSPHRASE, device_name="laptop", home=str(tmp_path / "h-laptop"))
    v.append([NewRecord(type="message", text="before")])
    v.lock()
    target = _join(tmp_path, laptop, "target")
    phone, tablet, desk, _spare, _other = (_join(tmp_path, laptop, n) for n in ("phone", "tablet", "desk", "spare", "other"))
    for folder in (phone, tablet, desk):
        _carry(laptop, folder)
    with Vault.open(phone, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "h-phone")) as v:
        v.change_passphrase(NEW_PASSPHRASE)  # registered in the phone's control batch
    for folder in (laptop, tablet, desk):
        _carry(phone, folder)
    before = _files(tablet)
    with Vault.open(tablet, Unlock.passphrase(NEW_PASSPHRASE), home=str(tmp_path / "h-tablet")) as v:
        v.add_compartment("travel")  # the mirror: the phone's certificate and the new anchor in the tablet's batch
    mirror = {rel for rel in _files(tablet) - before if rel.startswith("segments")}
    _carry(tablet, laptop)
    _carry(tablet, desk)
    before = _files(laptop)
    with Vault.open(laptop, Unlock.passphrase(NEW_PASSPHRASE), home=str(tmp_path / "h-laptop")) as v:
        v.change_passphrase(THIRD_PASSPHRASE)  # revokes the phone's passphrase
    second = {rel for rel in _files(laptop) - before if rel.startswith("segments")}
    _carry(laptop, desk, ("slots", "env"))
    with Vault.open(desk, Unlock.passphrase(NEW_PASSPHRASE), home=str(tmp_path / "h-desk")) as v:
        v.revoke("spare", reason="lost")  # its roll had seen the phone's passphrase registered, and leaves it out
        assert v.session.keyring.generation == 4
    assert 4 not in {h.generation for h in slots_unwrapped_by(desk, NEW_PASSPHRASE)}
    recovery = Unlock.recovery(phrase)
    _carry(desk, target, ("slots", "env"))
    _carry(tablet, target, only=mirror)  # the host brings the mirror first
    Vault.open(target, recovery, home=str(tmp_path / "h-target")).lock()
    for folder in (laptop, phone, tablet, desk):
        _carry(folder, target, only=_files(folder) - second)
    with Vault.open(target, recovery, home=str(tmp_path / "h-target")) as v:
        assert v.session.keyring.generation == 4
        v.revoke("other", reason="lost")
        generation = v.session.keyring.generation
    assert generation not in {h.generation for h in slots_unwrapped_by(target, NEW_PASSPHRASE)}
