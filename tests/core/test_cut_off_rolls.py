"""Rolls made on a view cut off from a key change (a host holds the change back from a device, which then
revokes or erases with the old passphrase still counting there): the credential the change replaced must
read nothing the changing device writes after it, however the files arrive and whatever the devices do next
(spec §16.10 rule 9 (c)), and no credential that counts is left without a slot.  The attacker holds the old
passphrase and every file the host ever had, and reads with no reader rule: each slot it unwraps, each
master secret a join or an erasure would derive from what it holds, each envelope to those owner keys.
Found by review.  A folder per device, carried between by hand."""

from __future__ import annotations

import glob
import os
import shutil

from camillo import NewRecord, Unlock, Vault, keys, slots
from camillo.credentials import from_passphrase
from camillo.primitives import CryptoFailure

from .helpers import slots_unwrapped_by
from .test_access import keys_from_files, readable_plaintexts
from .test_credential_change import old_kdf, union_copy
from .test_replaced_passphrase import (
    NEW_PASSPHRASE,
    PASSPHRASE,
    _carry,
    _files,
    _laptop_and,
    _on_the_laptop,
    _revoke_with_the_old_passphrase,
    _vault_id,
)


def _old_passphrase_reads(host: str, vault_id: bytes) -> bytes:
    """Every plaintext the old passphrase opens from the host's files: through each slot it unwraps, the
    joins of master secrets of one generation it holds, and the erasures' derivations from each."""
    old = from_passphrase(PASSPHRASE, old_kdf(os.path.join(host, "before"), vault_id))
    held: dict[int, set[bytes]] = {}
    for f in glob.glob(os.path.join(host, "slots", "*")):
        h = slots.read_header(open(f, "rb").read(), "slots/" + os.path.basename(f))
        try:
            held.setdefault(h.generation, set()).add(slots.unwrap_vms(h, vault_id, old.recipient))
        except CryptoFailure:
            continue
    for generation, masters in list(held.items()):
        if len(masters) > 1:
            held.setdefault(generation + 1, set()).add(keys.join_master(sorted(masters), vault_id, generation + 1))
    recipients = [old.recipient]
    for generation, masters in held.items():
        for vms in masters:
            for g in range(generation, generation + 4):
                recipients.append(keys.owner_kem(vms, vault_id, g))
                vms = keys.next_master(vms, vault_id, g + 1)
    secrets, _ = keys_from_files(host, vault_id, recipients)
    return b"".join(readable_plaintexts(host, vault_id, secrets))


def _changed_and_cut_off(tmp_path, *, extra: tuple[str, ...] = (), typo: bool = False) -> tuple[str, str, str]:
    """The laptop (with a phone, spare, tablet and ``extra`` devices) changes the passphrase and writes
    AFTER-THE-CHANGE; the phone, holding none of it, revokes spare and tablet with the old passphrase
    (generations 2 and 3).  The laptop's and phone's folders, and the host's (every file both had)."""
    laptop, (phone, *_others), _control = _laptop_and(tmp_path, "phone", "spare", "tablet", *extra)
    host = str(tmp_path / "host")
    union_copy([laptop], os.path.join(host, "before"))  # (its slot parameters, for the attacker)
    v = _on_the_laptop(tmp_path)
    if typo:
        v.append([NewRecord(type="message", text="a typo to erase")])
        _carry(laptop, phone)
    v.change_passphrase(NEW_PASSPHRASE)
    v.append([NewRecord(type="message", text="AFTER-THE-CHANGE")])
    v.lock()
    union_copy([laptop], host)
    assert [_revoke_with_the_old_passphrase(tmp_path, phone, "phone", lost) for lost in ("spare", "tablet")] == [2, 3]
    union_copy([phone], host)
    return laptop, phone, host


def _nothing_after_the_change(host: str, laptop: str, *written: str) -> None:
    seen = _old_passphrase_reads(host, _vault_id(laptop))
    assert b"before the change" in seen
    assert [m for m in ("AFTER-THE-CHANGE", *written) if m.encode() in seen] == []


def test_rolls_made_cut_off_from_the_change_that_outnumber_it_give_the_replaced_passphrase_nothing_of_it(tmp_path):
    """The laptop, given the phone's files, moved to generation 3 through its own slot, handed it what it
    wrote after the change and went on writing under it: the old passphrase read all of it.  Now a device
    that holds a credential revoked by a revocation the roll of its current generation had not seen rolls
    the keys again first, and hands nothing to that owner key.  Nothing written is lost: the phone, once it
    has everything, reads it all."""
    laptop, phone, host = _changed_and_cut_off(tmp_path)
    _carry(phone, laptop)
    with _on_the_laptop(tmp_path, NEW_PASSPHRASE) as v:
        assert v.session.keyring.generation == 4
        v.append([NewRecord(type="message", text="AFTER-THE-MERGE")])
    union_copy([laptop], host)
    _carry(laptop, phone)
    with Vault.open(phone, Unlock.passphrase(NEW_PASSPHRASE), home=str(tmp_path / "h-phone")) as v:
        assert v.session.keyring.generation == 4
        assert {"before the change", "AFTER-THE-CHANGE", "AFTER-THE-MERGE"} <= {r.text for r in v.timeline()}
        v.append([NewRecord(type="message", text="PHONE-AFTER-SYNC")])
    union_copy([phone], host)
    _nothing_after_the_change(host, laptop, "AFTER-THE-MERGE", "PHONE-AFTER-SYNC")


def test_a_host_that_holds_back_the_old_passphrases_slots_does_not_stop_the_keys_rolling_again(tmp_path):
    """The laptop never receives the old passphrase's slots of the phone's rolls (the host keeps them): it
    used to look for such a slot, find none, and hand what it wrote after the change to the phone's
    generation.  It judges by the batches now: the phone's roll had not seen the change's REVOKE."""
    laptop, phone, host = _changed_and_cut_off(tmp_path)
    withheld = {h.name for h in slots_unwrapped_by(phone, PASSPHRASE)}
    _carry(phone, laptop, only=_files(phone) - withheld)
    with _on_the_laptop(tmp_path, NEW_PASSPHRASE) as v:
        assert v.session.keyring.generation == 4
        v.append([NewRecord(type="message", text="AFTER-THE-MERGE")])
    union_copy([laptop], host)
    _nothing_after_the_change(host, laptop, "AFTER-THE-MERGE")


def test_an_open_session_that_moves_onto_the_cut_off_rolls_rolls_again_before_it_writes(tmp_path):
    """The phone's files arrive while the laptop's session is open: the append moves to generation 3 and
    used to write there at once."""
    laptop, phone, host = _changed_and_cut_off(tmp_path)
    with _on_the_laptop(tmp_path, NEW_PASSPHRASE) as v:
        _carry(phone, laptop)
        v.append([NewRecord(type="message", text="WRITTEN-IN-THE-OPEN-SESSION")])
        assert v.session.keyring.generation == 4
    union_copy([laptop], host)
    _nothing_after_the_change(host, laptop, "WRITTEN-IN-THE-OPEN-SESSION")


def test_two_refreshes_the_second_bringing_the_cut_off_rolls_records_roll_again(tmp_path):
    """The phone's key files arrive first (the open session moves to generation 3: no roll batch to judge
    by yet), then its records, with no slot file or revocation new."""
    laptop, phone, host = _changed_and_cut_off(tmp_path)
    with _on_the_laptop(tmp_path, NEW_PASSPHRASE) as v:
        _carry(phone, laptop, ("slots", "env"))
        v.refresh()
        _carry(phone, laptop)
        v.refresh()
        v.append([NewRecord(type="message", text="AFTER-TWO-REFRESHES")])
    union_copy([laptop], host)
    _nothing_after_the_change(host, laptop, "AFTER-TWO-REFRESHES")


def test_two_cut_off_branches_are_not_joined_into_a_master_secret_the_old_passphrase_computes(tmp_path):
    """The phone and a second device, both cut off, each revoke a device at once: two master secrets of
    generation 3, both of which the old passphrase holds.  The laptop used to join them, and a join is
    derived from them: the old passphrase computed it.  Its roll is random now."""
    laptop, phone, host = _changed_and_cut_off(tmp_path, extra=("x", "y", "z"))
    tablet2 = str(tmp_path / "z")
    shutil.rmtree(tablet2)
    shutil.copytree(phone, tablet2)  # (z's installation, with the phone's view up to its generation 3)
    phone_view = _files(phone)
    assert _revoke_with_the_old_passphrase(tmp_path, phone, "phone", "x") == 4
    v = Vault.open(tablet2, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "h-z"))
    v.lock()
    _carry(phone, tablet2, only=phone_view)
    assert _revoke_with_the_old_passphrase(tmp_path, tablet2, "z", "y") == 4
    union_copy([phone, tablet2], host)
    _carry(phone, laptop)
    _carry(tablet2, laptop)
    for text in ("AFTER-THE-MERGE", "AFTER-REOPEN"):
        with _on_the_laptop(tmp_path, NEW_PASSPHRASE) as v:
            v.append([NewRecord(type="message", text=text)])
    union_copy([laptop], host)
    _nothing_after_the_change(host, laptop, "AFTER-THE-MERGE", "AFTER-REOPEN")


def test_an_erasure_in_an_open_session_does_not_derive_from_the_cut_off_rolls_master_secret(tmp_path):
    """The phone's files arrive while the laptop's session is open and the person erases a record: the
    erasure's roll used to be derived from the phone's generation, which the old passphrase computes on."""
    laptop, phone, host = _changed_and_cut_off(tmp_path, typo=True)
    with _on_the_laptop(tmp_path, NEW_PASSPHRASE) as v:
        _carry(phone, laptop)
        typo = next(r.id for r in v.timeline() if r.text == "a typo to erase")
        v.erase([typo], reauth=Unlock.passphrase(NEW_PASSPHRASE))
        v.append([NewRecord(type="message", text="AFTER-THE-ERASURE")])
    with _on_the_laptop(tmp_path, NEW_PASSPHRASE) as v:
        v.append([NewRecord(type="message", text="AFTER-REOPEN")])
        assert "a typo to erase" not in {r.text for r in v.timeline()}
    union_copy([laptop], host)
    _nothing_after_the_change(host, laptop, "AFTER-THE-ERASURE", "AFTER-REOPEN")


def test_an_erasure_does_not_strand_a_device_registered_while_another_revoked(tmp_path):
    """Ordinary flow: a tablet registers while the laptop revokes a lost phone; its registration reaches the
    laptop's open session, and the person erases a message.  The erasure's roll judged who may get its new
    master secret with the erasing device's new key, which has no slot to find the roll by: the tablet got
    none, lost its older one, and stayed at the first generation for good."""
    laptop, (_phone,), _control = _laptop_and(tmp_path, "phone")
    tablet = str(tmp_path / "tablet")
    shutil.copytree(laptop, tablet)
    Vault.open(tablet, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "h-tablet"), device_name="tablet").lock()
    with _on_the_laptop(tmp_path) as v:
        v.append([NewRecord(type="message", text="a typo to erase")])
        v.revoke("phone", reason="lost")
        _carry(tablet, laptop)
        typo = next(r.id for r in v.timeline() if r.text == "a typo to erase")
        v.erase([typo], reauth=Unlock.passphrase(PASSPHRASE))
        v.append([NewRecord(type="message", text="after the erasure")])
    for _ in range(2):
        _carry(laptop, tablet)
        _carry(tablet, laptop)
        _on_the_laptop(tmp_path).lock()
    _carry(laptop, tablet)
    with Vault.open(tablet, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "h-tablet")) as v:
        assert "after the erasure" in {r.text for r in v.timeline()}
