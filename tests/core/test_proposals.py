"""A proposal never displaces the user's word (spec §19.3): an agent with a write grant, at any
class its grant allows, proposes beside the user's value and never in its place, for every face
(the API, ``camillo facts``/``fact``/``inbox`` in JSON and text, search, the exporters); it cannot
delete the user's value, even with a modified client; confirming over the user's value needs
``replace`` and names both values; rejecting leaves the value as it was."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from camillo import AccessDenied, Authority, NewRecord, Unlock, UsageError, Vault
from camillo.exporters import fact_values
from camillo.records import Kind, encode_record
from camillo.session.writer import write_batches

from .helpers import switch_home

PASSPHRASE = "correct horse battery staple"


def owner(path):
    return Vault.open(path, Unlock.passphrase(PASSPHRASE))


@pytest.fixture
def vault_and_agent(new_vault, tmp_path, monkeypatch):
    """A vault where the user set user/home_city = Lisbon, and a write grant at class observed
    (the most a write grant can have) for agent 'planner'."""
    path, vault, _ = new_vault
    vault.append([NewRecord(type="fact", key="user/home_city", value="Lisbon")])
    grant = str(tmp_path / "planner.grant")
    vault.create_grant("planner", {"personal": "write"}, grant, max_class="observed")
    vault.lock()
    return path, grant


def as_agent(monkeypatch, tmp_path, grant_path, path):
    switch_home(monkeypatch, tmp_path / "agent-home")
    return Vault.open(path, Unlock.grant(grant_path))


def back_to_owner(monkeypatch, tmp_path):
    switch_home(monkeypatch, tmp_path / "home")


@pytest.mark.parametrize("authority", [Authority.OBSERVED, Authority.INFERRED])
def test_a_proposal_is_reported_beside_the_users_value_never_in_its_place(vault_and_agent, tmp_path, monkeypatch,
                                                                         authority):
    path, grant = vault_and_agent
    with as_agent(monkeypatch, tmp_path, grant, path) as agent:
        proposal = agent.append([NewRecord(type="fact", key="user/home_city", value="Paris",
                                           authority=authority)]).written[0]
        # what every other agent reads: the user's word, with the proposal beside it
        f = agent.fact("user/home_city")
        assert f.current.value == "Lisbon" and f.status == "ok"
        assert [p.id for p in f.proposed] == [proposal]
    back_to_owner(monkeypatch, tmp_path)
    with owner(path) as v:
        f = v.fact("user/home_city")
        j = f.to_json()
        assert (j["value"], j["status"], j["effective_class"]) == ("Lisbon", "ok", "user")
        assert [(p["value"], p["class"], p["writer"], p["record"]) for p in j["proposed"]] == [
            ("Paris", authority.label, "agent planner", proposal.hex())]
        assert [r.id for r in v.inbox()] == [proposal]
        assert [r.id for r in v.search("is:pending")] == [proposal]
        assert "Lisbon" in [r.text for r in v.search("Lisbon")]
        exported = {(r.text, status) for r, status in fact_values(v)}
        assert ("Lisbon", "ok") in exported and ("Paris", "pending") in exported


def test_a_key_with_only_proposals_is_pending_with_no_value(vault_and_agent, tmp_path, monkeypatch):
    path, grant = vault_and_agent
    with as_agent(monkeypatch, tmp_path, grant, path) as agent:
        rid = agent.append([NewRecord(type="fact", key="user/partner", value="Ana",
                                      authority=Authority.OBSERVED)]).written[0]
        f = agent.fact("user/partner")
        assert f.status == "pending" and f.current is None
        assert f.to_json()["value"] is None and f.to_json()["proposed"][0]["record"] == rid.hex()


def test_an_agent_cannot_delete_the_users_value_even_with_a_modified_client(vault_and_agent, tmp_path, monkeypatch):
    path, grant = vault_and_agent
    with as_agent(monkeypatch, tmp_path, grant, path) as agent:
        with pytest.raises(AccessDenied, match="holds the user's word"):
            agent.forget(key="user/home_city")
        # The modified client: a keyed DEL naming the user's value, signed and written by the agent.
        f = agent.fact("user/home_city")
        session = agent.session
        raw = encode_record(Kind.DEL, agent.writer_id, key="user/home_city", pred=[f.current.id])
        write_batches(session, {f.compartment_id: [raw]})
        session.refresh()
    back_to_owner(monkeypatch, tmp_path)
    with owner(path) as v:
        f = v.fact("user/home_city")
        assert (f.status, f.current.value) == ("ok", "Lisbon")
        assert "Lisbon" in [r.text for r in v.timeline()]


def test_confirming_over_the_users_value_needs_replace_and_names_both(vault_and_agent, tmp_path, monkeypatch):
    path, grant = vault_and_agent
    with as_agent(monkeypatch, tmp_path, grant, path) as agent:
        proposal = agent.append([NewRecord(type="fact", key="user/home_city", value="Paris")]).written[0]
    back_to_owner(monkeypatch, tmp_path)
    with owner(path) as v:
        with pytest.raises(UsageError, match=r"'Lisbon'.*'Paris'.*--replace"):
            v.confirm([proposal])
        assert v.fact("user/home_city").current.value == "Lisbon"
        v.confirm([proposal], replace=True)
        f = v.fact("user/home_city")
        assert (f.status, f.current.id, f.current.effective_class, f.proposed) == (
            "ok", proposal, Authority.USER, ())


def test_confirming_a_proposal_that_never_saw_the_users_value_makes_it_the_value(new_vault, tmp_path, monkeypatch):
    """The agent wrote from a copy that did not have the user's value yet: confirming it (with
    replace) gives the fact that value, not a conflict between the two."""
    path, vault, _ = new_vault
    grant = str(tmp_path / "planner.grant")
    vault.create_grant("planner", {"personal": "write"}, grant, max_class="observed")
    vault.lock()
    agent_copy = str(tmp_path / "agent-copy")
    shutil.copytree(path, agent_copy)
    with owner(path) as v:
        v.append([NewRecord(type="fact", key="user/home_city", value="Lisbon")])
    with as_agent(monkeypatch, tmp_path, grant, agent_copy) as agent:
        proposal = agent.append([NewRecord(type="fact", key="user/home_city", value="Paris")]).written[0]
    back_to_owner(monkeypatch, tmp_path)
    Vault.merge(path, agent_copy)
    with owner(path) as v:
        assert v.fact("user/home_city").current.value == "Lisbon"
        v.confirm([proposal], replace=True)
        f = v.fact("user/home_city")
        assert (f.status, f.current.value, f.proposed) == ("ok", "Paris", ())
    with owner(path) as v:  # a fresh materialisation agrees
        assert v.fact("user/home_city").current.value == "Paris"


def test_confirming_where_nothing_is_set_or_the_value_is_the_same_needs_no_replace(vault_and_agent, tmp_path,
                                                                                   monkeypatch):
    path, grant = vault_and_agent
    with as_agent(monkeypatch, tmp_path, grant, path) as agent:
        same = agent.append([NewRecord(type="fact", key="user/home_city", value="Lisbon")]).written[0]
        new = agent.append([NewRecord(type="preference", key="user/meeting_time", value="mornings")]).written[0]
    back_to_owner(monkeypatch, tmp_path)
    with owner(path) as v:
        v.confirm([same, new])
        assert v.fact("user/meeting_time").current.id == new
        assert v.fact("user/home_city").current.value == "Lisbon"
        assert v.inbox() == []


def test_rejecting_a_proposal_leaves_the_users_value_as_it_was(vault_and_agent, tmp_path, monkeypatch):
    path, grant = vault_and_agent
    with owner(path) as v:
        before = v.fact("user/home_city").current.id
    with as_agent(monkeypatch, tmp_path, grant, path) as agent:
        proposal = agent.append([NewRecord(type="fact", key="user/home_city", value="Paris")]).written[0]
    back_to_owner(monkeypatch, tmp_path)
    with owner(path) as v:
        v.reject([proposal])
        f = v.fact("user/home_city")
        assert (f.status, f.current.id, f.proposed) == ("ok", before, ())
        assert v.inbox() == []
        assert "Paris" not in [r.text for r in v.timeline()]
        with pytest.raises(UsageError, match="user's word"):
            v.reject([before])


def test_a_newer_user_value_settles_the_proposals_it_saw(vault_and_agent, tmp_path, monkeypatch):
    path, grant = vault_and_agent
    with as_agent(monkeypatch, tmp_path, grant, path) as agent:
        agent.append([NewRecord(type="fact", key="user/home_city", value="Paris")])
    back_to_owner(monkeypatch, tmp_path)
    with owner(path) as v:
        v.append([NewRecord(type="fact", key="user/home_city", value="Porto")])
        f = v.fact("user/home_city")
        assert (f.status, f.current.value, f.proposed) == ("ok", "Porto", ())


def cli(*args, env_home, check=None):
    env = dict(os.environ, CAMILLO_PASSPHRASE=PASSPHRASE, CAMILLO_HOME=env_home)
    proc = subprocess.run([sys.executable, "-m", "camillo.cli", *args], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=120)
    assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    if check is not None:
        assert proc.returncode == check, proc.stderr
    return proc


def test_the_cli_shows_the_users_value_and_needs_replace(vault_and_agent, tmp_path, monkeypatch):
    path, grant = vault_and_agent
    with as_agent(monkeypatch, tmp_path, grant, path) as agent:
        proposal = agent.append([NewRecord(type="fact", key="user/home_city", value="Paris")]).written[0]
    home = str(tmp_path / "home")
    facts = [json.loads(line) for line in cli("facts", path, "--json", env_home=home, check=0).stdout.splitlines()]
    city = next(f for f in facts if f["key"] == "user/home_city")
    assert city["value"] == "Lisbon" and city["proposed"][0]["value"] == "Paris"
    text = cli("fact", path, "user/home_city", env_home=home, check=0).stdout
    assert "Lisbon" in text.splitlines()[0] and "proposed" in text
    inbox = cli("inbox", path, env_home=home, check=0).stdout
    assert "Paris" in inbox and "now: Lisbon" in inbox
    refused = cli("confirm", path, proposal.hex(), env_home=home, check=2)
    assert "Lisbon" in refused.stderr and "Paris" in refused.stderr and "--replace" in refused.stderr
    cli("confirm", path, proposal.hex(), "--replace", env_home=home, check=0)
    facts = [json.loads(line) for line in cli("facts", path, "--json", env_home=home, check=0).stdout.splitlines()]
    assert next(f for f in facts if f["key"] == "user/home_city")["value"] == "Paris"
