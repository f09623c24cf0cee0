"""Who signs the slots, and what happens to them when that key retires (spec §10.3, §12.4, §16.4,
§16.6, §16.7).  A slot counts only while some signer of its statement is an active owner, so every
path that retires an owner key must leave every remaining credential a slot of the current generation
signed by a key that stays: re-certification after a lost device key (the lost key created the vault,
rolled the keyring last, enrolled a device or changed the passphrase), revocation of a device that
rolled the keyring last, key rotation after an erasure, passphrase change and recovery phrase re-issue.

Every path is checked the same way: afterwards, from fresh installations, the passphrase, the recovery
phrase and every remaining device open the vault, and a full verification reports nothing."""

from __future__ import annotations

import glob
import os

from camillo import NewRecord, Unlock, Vault
from camillo.ops.enrollment import Offer
from camillo.slots import read_statement

from .helpers import switch_home

PASSPHRASE = "correct horse battery staple"
NEW_PASSPHRASE = "another passphrase altogether"


def message(text: str) -> NewRecord:
    return NewRecord(type="message", role="user", text=text)


def lose_device_key(home) -> None:
    """This installation can no longer read its device key (a deleted device-key.bin; the same as a
    keychain that lost the entry)."""
    found = glob.glob(os.path.join(str(home), "**", "device-key.bin"), recursive=True)
    assert found
    for f in found:
        os.unlink(f)


def current_slot_signers(v: Vault) -> dict[str, list[bytes]]:
    out = {}
    for h in v.session.slot_headers()[0]:
        if h.generation == v.session.keyring.generation:
            out[h.name] = [sig[0] for sig in read_statement(h, v.vault_id, v.session.keyring.master.get()).signatures]
    return out


def assert_every_credential_opens(path, tmp_path, phrase, *, passphrase=PASSPHRASE, devices=(), expect=()):
    """Fresh installations open with the passphrase and the recovery phrase, verify clean and read
    ``expect``; each home in ``devices`` opens with its own device key (its own local state)."""
    for n, unlock in enumerate((Unlock.passphrase(passphrase), Unlock.recovery(phrase))):
        with Vault.open(path, unlock, home=str(tmp_path / f"fresh-{n}"), register=False, cache=False) as v:
            assert [(p.kind, p.message) for p in v.problems(full=True)] == []
            assert set(expect) <= {r.text for r in v.timeline()}
            signers = current_slot_signers(v)
            # every current slot is signed by an active device: no slot counts through a retired key
            for name, wids in signers.items():
                assert any(v.session.roster.active_owner(w) for w in wids), name
                assert all(v.session.roster.principals[w].kind.label == "device" for w in wids if w in v.session.roster.principals)
    for home in devices:
        with Vault.open(path, Unlock.passphrase(passphrase), home=str(home)) as v:
            inst = v.session.local.load_installation()
            assert v.session.actor is not None and v.writer_id == inst.writer_id
            v.append([message(f"written from {os.path.basename(str(home))}")])


def test_lost_key_that_created_the_vault_and_changed_the_passphrase(tmp_path):
    """The lost key signed every slot of generation 1 and the new passphrase's slot."""
    path = str(tmp_path / "v")
    v, phrase = Vault.create(path, PASSPHRASE, device_name="first", home=str(tmp_path / "h1"))
    with v:
        v.append([message("before")])
        v.change_passphrase(NEW_PASSPHRASE)
        lost = v.writer_id
    lose_device_key(tmp_path / "h1")
    with Vault.open(path, Unlock.passphrase(NEW_PASSPHRASE), home=str(tmp_path / "h1")) as v:
        assert lost in v.session.roster.revocations and v.writer_id != lost
        assert not any(lost in wids for wids in current_slot_signers(v).values()), "the originals are deleted"
    assert_every_credential_opens(path, tmp_path, phrase, passphrase=NEW_PASSPHRASE, devices=[tmp_path / "h1"],
                                  expect=["before"])


def test_lost_key_that_rolled_the_keyring_last(tmp_path):
    """A second device revoked a third one (a keyring roll: it signed every slot of the new
    generation), then lost its key."""
    path = str(tmp_path / "v")
    v, phrase = Vault.create(path, PASSPHRASE, device_name="first", home=str(tmp_path / "h1"))
    v.lock()
    for name in ("second", "third"):
        with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / name), device_name=name) as v:
            v.append([message(f"by {name}")])
            if name == "third":
                third = v.writer_id.hex()
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "second")) as v:
        v.revoke(third, reason="lost")
        roller, generation = v.writer_id, v.session.keyring.generation
        assert all(wids == [roller] for wids in current_slot_signers(v).values())
    lose_device_key(tmp_path / "second")
    with Vault.open(path, Unlock.recovery(phrase), home=str(tmp_path / "second")) as v:
        assert roller in v.session.roster.revocations and v.session.keyring.generation == generation  # no roll: the same generation
    assert_every_credential_opens(path, tmp_path, phrase, devices=[tmp_path / "h1", tmp_path / "second"],
                                  expect=["by second", "by third"])


def test_lost_key_that_enrolled_a_device(tmp_path, monkeypatch):
    """The enrolled device's only slot was signed by the device that confirmed it, which then lost
    its key: the enrolled device must still open with its own key."""
    path = str(tmp_path / "v")
    switch_home(monkeypatch, tmp_path / "h1")
    v, phrase = Vault.create(path, PASSPHRASE, device_name="first")
    offer = Offer(v.session)
    switch_home(monkeypatch, tmp_path / "laptop")
    join = Vault.join(path, offer.qr_text, name="laptop")
    sas = join.start()
    switch_home(monkeypatch, tmp_path / "h1")
    offer.poll()
    offer.confirm(typed_sas=sas)
    switch_home(monkeypatch, tmp_path / "laptop")
    with join.poll() as new:
        new.append([message("by the laptop")])
    switch_home(monkeypatch, tmp_path / "h1")
    v.lock()
    lose_device_key(tmp_path / "h1")
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "h1")) as v:
        assert [d.name for d in v.devices() if d.revoked] == ["first"]
    # the laptop's own slot (the one its device key unlocks) was re-issued
    with Vault.open(path, Unlock.with_device_credential(join.device), home=str(tmp_path / "laptop")) as v:
        assert v.unlocked_with == "device key" and v.writer_id == join.device.writer_id
        v.append([message("by the laptop, after the first device lost its key")])
    assert_every_credential_opens(path, tmp_path, phrase, devices=[tmp_path / "h1", tmp_path / "laptop"],
                                  expect=["by the laptop, after the first device lost its key"])


def test_revoking_the_device_that_rolled_the_keyring_last(tmp_path):
    """A lost laptop rolled the keyring last (it signed every current slot); revoking it rolls the
    keyring again, so the new generation's slots are signed by the revoking device (spec §16.6)."""
    path = str(tmp_path / "v")
    v, phrase = Vault.create(path, PASSPHRASE, device_name="desktop", home=str(tmp_path / "desktop"))
    v.lock()
    for name in ("laptop", "phone"):
        with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / name), device_name=name) as v:
            v.append([message(f"by {name}")])
            if name == "phone":
                phone = v.writer_id.hex()
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "laptop")) as v:
        v.revoke(phone, reason="sold")
        laptop = v.writer_id
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "desktop")) as v:
        v.revoke(laptop.hex(), reason="lost")
        desktop = v.writer_id
        assert all(wids == [desktop] for wids in current_slot_signers(v).values())
    assert_every_credential_opens(path, tmp_path, phrase, devices=[tmp_path / "desktop"], expect=["by laptop"])


def test_rotation_after_an_erasure_by_the_key_that_signed_the_new_slots(tmp_path):
    """The erasing device's new key signed every slot of the new generation.  If it later rotates
    as if it had not seen the erasure (here: its device state was lost), its old key retires without
    a keyring roll (spec §16.4, "Other devices"): those slots must be re-issued first."""
    path = str(tmp_path / "v")
    v, phrase = Vault.create(path, PASSPHRASE, device_name="desktop", home=str(tmp_path / "desktop"))
    with v:
        target = v.append([message("to be erased")]).written[0]
        v.append([message("kept")])
        v.erase([target])
        rotated = v.writer_id
        assert all(wids == [rotated] for wids in current_slot_signers(v).values())
        copies = v.session.device_state_store.paths  # (the device state's two copies)
    for state in copies:
        if os.path.exists(state):
            os.unlink(state)
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "desktop")) as v:
        assert rotated in v.session.roster.revocations, "it rotated again"
        assert v.writer_id != rotated
        assert not any(rotated in wids for wids in current_slot_signers(v).values())
    assert_every_credential_opens(path, tmp_path, phrase, devices=[tmp_path / "desktop"], expect=["kept"])


def test_another_device_rotating_after_an_erasure_keeps_every_slot(tmp_path):
    """The usual rotation: another device opens after an erasure and replaces its key; the slot it
    signed for itself goes, every other slot (signed by the erasing device) stays."""
    path = str(tmp_path / "v")
    v, phrase = Vault.create(path, PASSPHRASE, device_name="desktop", home=str(tmp_path / "desktop"))
    v.lock()
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "laptop"), device_name="laptop") as v:
        laptop = v.writer_id
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "desktop")) as v:
        v.erase([v.append([message("to be erased")]).written[0]])
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "laptop")) as v:
        assert laptop in v.session.roster.revocations and v.writer_id != laptop
    assert_every_credential_opens(path, tmp_path, phrase, devices=[tmp_path / "desktop", tmp_path / "laptop"])


def test_passphrase_and_recovery_credentials_never_sign_slots(tmp_path):
    """Changing the passphrase and re-issuing the recovery phrase revoke the old credentials without
    a keyring roll; that is safe only because those credentials never sign a slot (every slot is
    signed by a device, spec §10.2)."""
    path = str(tmp_path / "v")
    v, phrase = Vault.create(path, PASSPHRASE, device_name="desktop", home=str(tmp_path / "desktop"))
    with v:
        v.change_passphrase(NEW_PASSPHRASE)
        phrase = v.reissue_recovery_phrase().phrase
        for wids in current_slot_signers(v).values():
            assert [v.session.roster.principals[w].kind.label for w in wids] == ["device"]
        assert len([p for p in v.session.roster.principals.values() if p.writer_id in v.session.roster.revocations]) == 2
    assert_every_credential_opens(path, tmp_path, phrase, passphrase=NEW_PASSPHRASE,
                                  devices=[tmp_path / "desktop"])
