"""The memory commands of ``camillo`` end to end, as separate processes on real folders: facts, fact,
conflicts, resolve, inbox, confirm, reject, forget, search with modifiers, merge of a folder and of a
``.vmem``, and ``verify`` after all of it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys

import pytest

PASSPHRASE = "correct horse battery staple"


def run(*args: str, stdin: str | None = None, env: dict | None = None, check: int | None = 0):
    full_env = dict(os.environ)
    full_env["CAMILLO_PASSPHRASE"] = PASSPHRASE
    full_env.update(env or {})
    proc = subprocess.run(
        [sys.executable, "-m", "camillo.cli", *args], input=stdin, capture_output=True, text=True, env=full_env,
        timeout=120,
    )
    if check is not None:
        assert proc.returncode == check, f"exit {proc.returncode}: {proc.stderr}"
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "internal error" not in proc.stderr, proc.stderr
    return proc


def jsonl(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def add(path: str, *records: dict, home: str | None = None, compartment: str | None = None) -> list[str]:
    extra = ["--compartment", compartment] if compartment else []
    env = {"CAMILLO_HOME": home} if home else None
    out = jsonl(run("add", path, *extra, stdin="\n".join(json.dumps(r) for r in records), env=env).stdout)
    assert len(out) == len(records)
    return [x["id"] for x in out]


def facts(path: str, *extra: str) -> dict[str, dict]:
    return {f["key"]: f for f in jsonl(run("facts", path, "--json", *extra).stdout)}


def search(path: str, query: str) -> list[dict]:
    return jsonl(run("search", path, query, "--json").stdout)


def verify_ok(path: str) -> None:
    report = json.loads(run("verify", path, "--json").stdout)
    assert report["ok"] is True and report["problems"] == [], report["problems"]


def fact_record(key: str, value, **kw) -> dict:
    return {"type": "fact", "key": key, "value": value, **kw}


@pytest.fixture
def vault_dir(tmp_path):
    path = str(tmp_path / "v")
    proc = run("init", path, "--name", "laptop-one")
    assert len(proc.stdout.split()) == 24
    return path


# ---------------------------------------------------------------------------------------------- conflicts


def test_conflict_from_two_copies_merge_resolve(vault_dir, tmp_path):
    a = vault_dir
    b = str(tmp_path / "b")
    home_b = str(tmp_path / "home-b")
    [lisbon] = add(a, fact_record("user/city", "Lisbon"))
    shutil.copytree(a, b)
    [porto] = add(a, fact_record("user/city", "Porto"))
    [faro] = add(b, fact_record("user/city", "Faro"), home=home_b)  # another installation edits its copy

    summary = json.loads(run("merge", a, b, "--json").stdout)
    assert summary["copied"] > 0 and summary["conflicts"] == ["user/city"]
    assert summary["discarded_edits"] == [] and summary["problems"] == []

    # facts --json
    city = facts(a)["user/city"]
    assert {"key", "value", "class", "effective_class", "status", "record", "history", "candidates"} <= set(city)
    assert city["status"] == "conflict"
    assert sorted(city["candidates"]) == sorted([porto, faro])
    assert city["record"] == city["candidates"][0] == min(porto, faro)  # same class: smallest id preferred
    assert city["value"] == ("Porto" if city["record"] == porto else "Faro")
    assert city["class"] == city["effective_class"] == "user"
    assert sorted(city["history"]) == sorted([lisbon, porto, faro]) and city["history"][0] == lisbon

    # fact KEY --json
    one = json.loads(run("fact", a, "user/city", "--json").stdout)
    assert one["status"] == "conflict" and one["record"] == city["record"]
    assert {r["id"]: r["value"] for r in one["history_records"]} == {lisbon: "Lisbon", porto: "Porto", faro: "Faro"}

    # conflicts --json
    [conflict] = jsonl(run("conflicts", a, "--json").stdout)
    assert conflict["key"] == "user/city" and conflict["compartment"] == "personal"
    assert {c["id"]: c["value"] for c in conflict["candidates_records"]} == {porto: "Porto", faro: "Faro"}
    assert "user/city" in run("conflicts", a).stdout
    assert {r["id"] for r in search(a, "is:conflict")} == {porto, faro}

    # resolve --pick (a unique prefix is enough)
    out = jsonl(run("resolve", a, "user/city", "--pick", faro[:16]).stdout)
    assert len(out) == 1
    city = facts(a)["user/city"]
    assert city["status"] == "ok" and city["value"] == "Faro" and city["record"] == out[0]["id"]
    assert city["class"] == "user" and city["candidates"] == []
    assert jsonl(run("conflicts", a, "--json").stdout) == []
    assert search(a, "is:conflict") == []
    # the copy that was merged in still has its own view until it merges back
    assert facts(b)["user/city"]["value"] == "Faro" and facts(b)["user/city"]["status"] == "ok"
    verify_ok(a)

    # a pick that is not a candidate is refused, nothing written
    proc = run("resolve", a, "user/city", "--pick", lisbon, check=None)
    assert proc.returncode != 0 and "not in conflict" in proc.stderr

    # the writer names: search agent:
    if "laptop-one" not in socket.gethostname().lower():
        mine = {r["id"] for r in search(a, "agent:laptop-one")}
        assert {lisbon, porto, out[0]["id"]} <= mine and faro not in mine
    assert search(a, "agent:nobody-of-that-name") == []


def test_merge_a_vmem_resolve_with_a_value_and_a_concurrent_delete(vault_dir, tmp_path):
    a = vault_dir
    [meal] = add(a, fact_record("user/food", "soup"))
    c = str(tmp_path / "c")
    shutil.copytree(a, c)
    [sushi] = add(a, fact_record("user/food", "sushi"))
    [ramen] = add(c, fact_record("user/food", "ramen"), home=str(tmp_path / "home-c"))
    vmem = str(tmp_path / "c.vmem")
    assert "wrote" in run("pack", c, vmem).stdout

    summary = json.loads(run("merge", a, vmem, "--json").stdout)
    assert summary["copied"] > 0 and summary["conflicts"] == ["user/food"] and summary["problems"] == []
    again = json.loads(run("merge", a, vmem, "--json").stdout)
    assert again["copied"] == 0 and again["conflicts"] == ["user/food"]  # idempotent
    assert json.loads(run("merge", a, c, "--json").stdout)["copied"] == 0  # same files as the .vmem
    text = run("merge", a, c).stdout
    assert "merged: 0 files copied" in text and "conflict: user/food" in text

    food = facts(a)["user/food"]
    assert food["status"] == "conflict" and sorted(food["candidates"]) == sorted([sushi, ramen])
    [new] = jsonl(run("resolve", a, "user/food", "--value", '{"dish": "udon", "count": 2}').stdout)
    food = facts(a)["user/food"]
    assert food["status"] == "ok" and food["value"] == {"dish": "udon", "count": 2} and food["record"] == new["id"]
    assert sorted(food["history"]) == sorted([meal, sushi, ramen, new["id"]])
    # a bare word is taken as text
    shutil.copytree(a, str(tmp_path / "c2"))
    add(a, fact_record("user/food", "pho"))
    add(str(tmp_path / "c2"), fact_record("user/food", "bao"), home=str(tmp_path / "home-c"))
    run("merge", a, str(tmp_path / "c2"))
    run("resolve", a, "user/food", "--value", "dumplings")
    assert facts(a)["user/food"]["value"] == "dumplings"
    proc = run("resolve", a, "user/food", "--value", "x", "--pick", new["id"], check=None)
    assert proc.returncode != 0 and "exactly one" in proc.stderr

    # a delete concurrent with an edit wins; the edit is reported as discarded; a later PUT resurrects
    d = str(tmp_path / "d")
    shutil.copytree(a, d)
    run("forget", a, "--key", "user/food")
    [edit] = add(d, fact_record("user/food", "tacos"), home=str(tmp_path / "home-d"))
    summary = json.loads(run("merge", a, d, "--json").stdout)
    assert summary["discarded_edits"] == ["user/food"] and summary["conflicts"] == []
    food = facts(a)["user/food"]
    assert food["status"] == "deleted" and food["value"] is None and food["discarded"] == [edit]
    [back] = add(a, fact_record("user/food", "paella"))
    food = facts(a)["user/food"]
    assert food["status"] == "ok" and food["value"] == "paella" and food["record"] == back

    # another vault is refused
    other = str(tmp_path / "other")
    run("init", other)
    proc = run("merge", a, other, check=None)
    assert proc.returncode != 0 and "different vault" in proc.stderr
    verify_ok(a)
    # the .vmem is older than what this device has seen since: verify says which batches it lacks,
    # as still syncing (spec §17.5), and exits 1
    proc = run("verify", vmem, "--json", check=1)
    report = json.loads(proc.stdout)
    assert report["ok"] is False and report["problems"]
    assert {p["kind"] for p in report["problems"]} == {"syncing"}, report["problems"]


# ---------------------------------------------------------------------------------------------- inbox


def test_inbox_confirm_and_reject(vault_dir):
    path = vault_dir
    [meet] = add(path, {"type": "preference", "key": "user/meetings", "value": "mornings", "role": "assistant"})
    [lisbon] = add(path, fact_record("user/city", "Lisbon"))
    [coimbra] = add(path, fact_record("user/city", "Coimbra", role="assistant"))  # an agent's inference
    state = facts(path)
    # a proposal never takes the place of a value: a key with only a proposal has none
    assert state["user/meetings"]["status"] == "pending" and state["user/meetings"]["value"] is None
    assert [p["class"] for p in state["user/meetings"]["proposed"]] == ["inferred"]
    assert state["user/city"]["status"] == "ok" and state["user/city"]["value"] == "Lisbon"
    assert [p["value"] for p in state["user/city"]["proposed"]] == ["Coimbra"]
    inbox = jsonl(run("inbox", path, "--json").stdout)
    assert {r["id"] for r in inbox} == {meet, coimbra}
    assert all(r["effective_class"] == "inferred" for r in inbox)
    assert {r["id"] for r in search(path, "is:pending")} == {meet, coimbra}
    assert "user/meetings" in run("inbox", path).stdout

    out = jsonl(run("confirm", path, meet).stdout)
    assert len(out) == 1 and out[0]["id"] != meet
    meeting = facts(path)["user/meetings"]
    assert meeting["status"] == "ok" and meeting["class"] == "inferred" and meeting["effective_class"] == "user"
    assert meeting["record"] == meet
    proc = run("confirm", path, meet, check=None)
    assert proc.returncode != 0 and "already has user authority" in proc.stderr

    out = jsonl(run("reject", path, coimbra[:20]).stdout)
    assert len(out) == 1  # the DEL that withdraws the proposal; the user's value was never displaced
    city = facts(path)["user/city"]
    assert city["status"] == "ok" and city["value"] == "Lisbon" and city["class"] == "user"
    assert city["record"] == lisbon and coimbra in city["history"] and city["proposed"] == []
    assert jsonl(run("inbox", path, "--json").stdout) == []
    assert search(path, "is:pending") == []
    verify_ok(path)


# ---------------------------------------------------------------------------------------------- forget


def test_forget_a_message_by_record(vault_dir):
    path = vault_dir
    keep, gone = add(path, {"type": "message", "conversation": "c1", "role": "user", "text": "keep this"},
                     {"type": "message", "conversation": "c1", "role": "user", "text": "my secret diary"})
    proc = run("forget", path, "--record", gone)
    assert "Hidden" in proc.stderr
    log = {r["id"]: r for r in jsonl(run("log", path, "--json").stdout)}
    assert keep in log and gone not in log
    everything = {r["id"]: r for r in jsonl(run("log", path, "--all", "--json").stdout)}
    assert gone in everything and everything[gone].get("hidden") is True
    assert search(path, "diary") == []
    assert [r["id"] for r in search(path, "diary is:hidden")] == [gone]
    assert "my secret diary" not in run("log", path).stdout
    verify_ok(path)


def test_forget_a_fact_by_key_and_by_record(vault_dir):
    path = vault_dir
    [pet] = add(path, fact_record("user/pet", "a cat named Mochi"))
    [job] = add(path, fact_record("work/role", "editor"), compartment="work")
    run("forget", path, "--key", "user/pet")
    run("forget", path, "--record", job)
    state = facts(path)
    assert state["user/pet"]["status"] == "deleted" and state["user/pet"]["value"] is None
    assert state["work/role"]["status"] == "deleted" and state["work/role"]["compartment"] == "work"
    assert pet in state["user/pet"]["history"]
    everything = {r["id"] for r in jsonl(run("log", path, "--all", "--json").stdout)}
    assert {pet, job} <= everything
    # forgetting twice says there is nothing to forget
    proc = run("forget", path, "--key", "user/pet", check=None)
    assert proc.returncode != 0 and "no current value" in proc.stderr
    proc = run("forget", path, "--key", "user/pet", "--record", pet, check=None)
    assert proc.returncode != 0 and "exactly one" in proc.stderr
    verify_ok(path)


@pytest.mark.regression
def test_a_forgotten_fact_is_hidden_from_log_and_search(vault_dir):
    path = vault_dir
    [pet] = add(path, fact_record("user/pet", "a cat named Mochi"))
    run("forget", path, "--key", "user/pet")
    assert pet in {r["id"] for r in jsonl(run("log", path, "--all", "--json").stdout)}
    assert pet not in {r["id"] for r in jsonl(run("log", path, "--json").stdout)}
    assert search(path, "Mochi") == []


# ---------------------------------------------------------------------------------------------- search


def test_search_modifiers(vault_dir):
    path = vault_dir
    hike, = add(path, {"type": "message", "conversation": "trip", "role": "user", "text": "I love hiking in the mountains"})
    old, = add(path, {"type": "message", "conversation": "old", "role": "user", "text": "an ancient hiking note",
                      "ts": 1579046400})  # 2020-01-15
    city, country = add(path, fact_record("user/home_city", "Lisbon"), fact_record("user/home_country", "Portugal"))
    pref, = add(path, {"type": "preference", "key": "user/meetings", "value": "mornings", "role": "assistant"})
    report, employer = add(path, {"type": "message", "conversation": "w", "role": "user", "text": "quarterly report due"},
                           fact_record("work/employer", "Acme"), compartment="work")

    def ids(q: str) -> set[str]:
        return {r["id"] for r in search(path, q)}

    assert ids("hiking") == {hike, old}
    assert ids("hik*") == {hike, old}
    assert ids('"love hiking"') == {hike}
    assert ids("type:message") == {hike, old, report}
    assert ids("type:preference") == {pref}
    assert ids("type:fact") == {city, country, employer}
    assert ids("key:user/home*") == {city, country}
    assert ids("key:user/home_city") == {city}
    assert ids("key:work/*") == {employer}
    assert ids("compartment:work") == {report, employer}
    assert ids("compartment:personal type:fact") == {city, country}
    assert ids("class:inferred") == {pref}
    assert ids("class:user") == {hike, old, city, country, report, employer}
    assert ids("is:pending") == {pref}
    assert ids("is:conflict") == set()
    assert ids("before:2021-01-01") == {old}
    assert ids("after:2021-01-01") == {hike, city, country, pref, report, employer}
    assert ids("hiking after:2021-01-01") == {hike}
    assert ids("conversation:trip") == {hike}
    assert ids("Lisbon type:fact compartment:personal") == {city}
    assert ids("Lisbon compartment:work") == set()
    if "laptop-one" not in socket.gethostname().lower():
        assert ids("agent:laptop-one") == {hike, old, city, country, pref, report, employer}
    assert ids("agent:somebody-else") == set()
    # results come as records with their fields
    [row] = search(path, "key:user/home_city")
    assert row["value"] == "Lisbon" and row["kind"] == "PUT" and row["compartment"] == "personal"
    assert "user/home_city" in run("search", path, "key:user/home_city").stdout
    assert len(jsonl(run("search", path, "type:message", "--json", "--limit", "1").stdout)) == 1
    # bad modifiers are usage errors, never tracebacks
    for bad in ("is:bogus", "compartment:nowhere", "before:yesterday", "class:boss"):
        proc = run("search", path, bad, check=None)
        assert proc.returncode == 2, (bad, proc.returncode, proc.stderr)
    verify_ok(path)


# ---------------------------------------------------------------------------------------------- entry points


@pytest.mark.regression
@pytest.mark.parametrize("entry", [
    ["-m", "camillo.cli"],
    ["-c", "import sys; from camillo.cli import main; sys.exit(main())"],  # what the console script runs
])
def test_memory_commands_exist_however_the_cli_is_started(vault_dir, entry):
    """Regression: run as ``python -m camillo.cli`` the module was ``__main__`` and the memory commands
    registered themselves on the other copy, ``camillo.cli`` ("invalid choice: 'facts'")."""
    env = dict(os.environ, CAMILLO_PASSPHRASE=PASSPHRASE)
    for args in (["facts", vault_dir, "--json"], ["search", vault_dir, "x", "--json"], ["inbox", vault_dir]):
        proc = subprocess.run([sys.executable, *entry, *args], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
