"""A device that registers while another device rolls the keys (a revocation) is one that roll could not
give a slot of its new master secret: it gets one once a device that counts it has read that roll (spec
§16.6 step 3), and reads what is written after the roll.  A folder per device, carried between by hand."""

from __future__ import annotations

import shutil

from camillo import NewRecord, Unlock, Vault

from .test_replaced_passphrase import PASSPHRASE, _carry, _laptop_and, _on_the_laptop


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
