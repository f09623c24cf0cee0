"""New compartments after creation (issue 17, item 6; spec §14.5, §14.8), with real keys and files:
the COMPARTMENT record, the first epoch and its envelope, and a copy of the roster in the new
compartment so that a grant of it alone can check what it reads.  Records go into it, grants cover
it, other devices see it; bad names are refused and write nothing."""

from __future__ import annotations

import pytest
from camillo import NewRecord, Unlock, Vault
from camillo.errors import UsageError

from .helpers import snapshot, switch_home

PASSPHRASE = "correct horse battery staple"


def test_add_a_compartment_write_to_it_and_grant_it(new_vault, tmp_path, monkeypatch):
    path, vault, _ = new_vault
    before = {c.name for c in vault.compartment_list()}
    assert before == {"personal", "work", "health"}
    changes = vault.add_compartment("  travel ")
    assert changes.compartment_list and changes.roster
    infos = {c.name: c for c in vault.compartment_list()}
    assert set(infos) == before | {"travel"}
    assert infos["travel"].added and infos["personal"].added is None and infos["travel"].records == 0
    vault.append([NewRecord(type="message", text="Lisbon in May")], compartment="travel")
    vault.create_grant("planner", {"travel": "read"}, str(tmp_path / "planner.grant"))
    vault.create_grant("logger", {"travel": "append"}, str(tmp_path / "logger.grant"))
    infos = {c.name: c for c in vault.compartment_list()}
    assert infos["travel"].records == 1 and infos["travel"].agents == ("logger", "planner")
    assert vault.problems() == []
    vault.lock()
    # an agent with the new compartment alone computes the roster from its copy and reads it
    switch_home(monkeypatch, tmp_path / "agent")
    with Vault.open(path, Unlock.grant(str(tmp_path / "logger.grant"))) as logger:
        logger.append([NewRecord(type="message", text="booked the train")], compartment="travel")
    with Vault.open(path, Unlock.grant(str(tmp_path / "planner.grant"))) as planner:
        assert sorted(r.text for r in planner.timeline()) == ["Lisbon in May", "booked the train"]
        assert planner.problems() == []
    # another device sees it, reads it and writes to it
    switch_home(monkeypatch, tmp_path / "second")
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), device_name="second") as v:
        assert "travel" in v.compartments
        v.append([NewRecord(type="fact", key="user/next_trip", value="Lisbon")], compartment="travel")
        assert v.fact("user/next_trip", "travel").current.value == "Lisbon"
        assert v.problems() == []


def test_an_open_session_on_another_device_picks_up_the_new_compartment(new_vault, tmp_path, monkeypatch):
    path, vault, _ = new_vault
    home = str(tmp_path / "home")
    switch_home(monkeypatch, tmp_path / "second")
    other = Vault.open(path, Unlock.passphrase(PASSPHRASE), device_name="second")
    switch_home(monkeypatch, home)
    vault.add_compartment("travel")
    vault.append([NewRecord(type="message", text="in travel")], compartment="travel")
    switch_home(monkeypatch, tmp_path / "second")
    changes = other.refresh()
    assert changes.compartment_list and "travel" in other.compartments
    assert "in travel" in {r.text for r in other.timeline()}
    other.lock()


@pytest.mark.parametrize(("name", "why"), [
    ("", "needs a name"), ("   ", "needs a name"), ("control", "vault's own compartment"),
    ("Control", "vault's own compartment"), ("work", "already has a compartment 'work'"),
    ("WORK", "already has a compartment 'work'"), ("a,b", "commas"), ("x" * 65, "at most 64"),
    ("tab\tname", "control characters"),
])
def test_bad_compartment_names_are_refused_and_nothing_is_written(new_vault, name, why):
    path, vault, _ = new_vault
    before = snapshot(path)
    with pytest.raises(UsageError, match=why):
        vault.add_compartment(name)
    assert snapshot(path) == before and len(vault.compartment_list()) == 3


def test_a_compartment_whose_creation_was_cut_short_gets_its_roster_before_a_grant(new_vault, tmp_path,
                                                                                monkeypatch):
    """A crash after the control batch and before the new compartment's own first batch leaves a
    compartment without a copy of the roster; the first grant that covers it writes the copy."""
    path, vault, _ = new_vault
    from camillo.ops import compartments

    monkeypatch.setattr(compartments, "mirror_roster", lambda *a, **k: None)  # the crash: no own batch
    vault.add_compartment("travel")
    monkeypatch.undo()
    switch_home(monkeypatch, tmp_path / "home")
    cid = vault.compartment_id("travel")
    assert not compartments.has_roster(vault.session, cid)
    vault.create_grant("planner", {"travel": "read"}, str(tmp_path / "planner.grant"))
    assert compartments.has_roster(vault.session, cid)
    vault.append([NewRecord(type="message", text="after the repair")], compartment="travel")
    vault.lock()
    switch_home(monkeypatch, tmp_path / "agent")
    with Vault.open(path, Unlock.grant(str(tmp_path / "planner.grant"))) as planner:
        assert [r.text for r in planner.timeline()] == ["after the repair"]
