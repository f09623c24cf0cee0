"""Check every VMEM v1 history and access scenario in ``scenarios/`` against the current code.

The scenarios were written by ``generate_scenarios.py``; ``scenarios/README.md`` describes their
format.  Like ``test_vmem_vectors.py`` this file shares no code with the generator: it reads the
JSON and the files alone, as another implementation would.

* ``vmem`` scenarios open ``vault.vmem`` read-only and must show exactly the expected state;
* ``files`` scenarios are assembled in a fresh folder all at once and in ``orders`` shuffled
  arrival orders (descriptor, slots and envelopes first, then the segments in random chunks with a
  refresh after each chunk), and every final state must be exactly the expected one;
* ``steps`` scenarios (rollback, enrollment) run their steps and compare each observation.

A scenario on which Camillo is known to be wrong is a strict ``xfail`` naming the bug (see
``KNOWN_BUGS``), so it fails loudly once the bug is fixed.
"""

from __future__ import annotations

import json
import random
import shutil
import time
from pathlib import Path
from typing import Any

import pytest
from camillo import DamagedFile, Unlock, Vault
from camillo.ops.enrollment import Offer

SCENARIOS = Path(__file__).resolve().parent / "scenarios"
SCENARIO_DIRS = sorted(p for p in SCENARIOS.iterdir() if p.is_dir()) if SCENARIOS.is_dir() else []

EXPECTED_SCENARIOS = {
    "concurrent-supersession", "tombstone-vs-edit", "resurrection", "conflict-resolved", "fork", "gap", "rollback",
    "agent-user-record", "derived-above-sources", "appender-supersedes-foreign", "beyond-revocation-pin",
    "enrollment-wrong-secret", "concurrent-erasures", "proposals", "planted-copies",
}

# scenario name -> the bug that makes Camillo disagree with it (the test is then a strict xfail).
KNOWN_BUGS: dict[str, str] = {}


def _load(d: Path) -> dict[str, Any]:
    return json.loads((d / "scenario.json").read_text(encoding="ascii"))


def _params(delivery: str) -> list[Any]:
    out = []
    for d in SCENARIO_DIRS:
        if _load(d)["delivery"] != delivery:
            continue
        marks = [pytest.mark.xfail(strict=True, reason=KNOWN_BUGS[d.name])] if d.name in KNOWN_BUGS else []
        out.append(pytest.param(d, id=d.name, marks=marks))
    return out


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return {"bytes": v.hex()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return v


def _state(v: Vault) -> dict[str, Any]:
    return {
        "facts": [{
            "key": f.key, "compartment": f.compartment, "status": f.status,
            "current": f.current.id.hex() if f.current else None,
            "value": _jsonable(f.current.value) if f.current else None,
            "candidates": sorted(c.id.hex() for c in f.candidates),
            "discarded": sorted(r.id.hex() for r in f.discarded),
            "proposed": sorted(r.id.hex() for r in f.proposed),
        } for f in v.facts()],
        "timeline": [r.id.hex() for r in v.timeline()],
        "problems": sorted((p.kind, p.message) for p in v.problems()),
    }


def _unmatched(actual: list[tuple[str, str]], expected: list[dict[str, str]]) -> str | None:
    """None when every expected problem matches a distinct actual one and none is left over."""
    left = list(actual)
    for e in sorted(expected, key=lambda e: bool(e.get("optional"))):  # (optional ones: what is left)
        hit = next((a for a in left if a[0] == e["kind"] and e["contains"] in a[1]), None)
        if hit is None:
            if e.get("optional"):
                continue
            return f"no {e['kind']} problem containing {e['contains']!r} in {actual}"
        left.remove(hit)
    return f"unexpected problems {left}" if left else None


def _assert_state(state: dict[str, Any], expect: dict[str, Any], where: str) -> None:
    assert state["facts"] == expect["facts"], f"{where}: facts differ"
    assert state["timeline"] == expect["timeline"], f"{where}: timeline differs"
    why = _unmatched(state["problems"], expect["problems"])
    assert why is None, f"{where}: {why}"


def _open(target: Path, passphrase: str) -> Vault:
    return Vault.open(str(target), Unlock.passphrase(passphrase), register=False, cache=False)


def _names(root: Path) -> list[str]:
    """Canonical names (``segments/ab/ab….seg``) of every file under ``root``."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def _copy(src_root: Path, names: list[str], dst_root: Path) -> None:
    for n in names:
        dst = dst_root / n
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src_root / n, dst)


# ---------------------------------------------------------------------------------------------
# Well-formedness


def test_every_scenario_is_present_and_well_formed():
    assert {d.name for d in SCENARIO_DIRS} == EXPECTED_SCENARIOS
    assert set(KNOWN_BUGS) <= EXPECTED_SCENARIOS
    for d in SCENARIO_DIRS:
        s = _load(d)
        assert s["name"] == d.name
        desc = s["description"]
        assert isinstance(desc, str) and desc.endswith(".") and desc.count(". ") == 0 and len(desc) > 40, d.name
        assert isinstance(s["passphrase"], str) and s["passphrase"]
        delivery = s["delivery"]
        if delivery == "vmem":
            assert (d / "vault.vmem").is_file() and not (d / "files").exists()
        elif delivery == "files":
            assert s["orders"] >= 20 and (d / "files" / "VMEM").is_file() and not (d / "vault.vmem").exists()
        else:
            assert delivery == "steps"
            sets = {p.name for p in (d / "files").iterdir()}
            used = set()
            for case in s["cases"]:
                for step in case["steps"]:
                    if step["action"] == "deliver":
                        assert step["files"] in sets
                        used.add(step["files"])
                    elif step["action"] == "remove":
                        assert all(any((d / "files" / x / n).is_file() for x in sets) for n in step["files"])
                assert len(s["expect"][case["name"]]) == sum(st["action"] in ("open", "offer") for st in case["steps"])
            assert used == sets, f"{d.name}: unused file sets {sets - used}"
            continue
        exp = s["expect"]
        assert set(exp) == {"facts", "timeline", "problems"}
        for f in exp["facts"]:
            assert set(f) == {"key", "compartment", "status", "current", "value", "candidates", "discarded",
                              "proposed"}
            assert f["status"] in ("ok", "conflict", "deleted", "pending")
            assert (f["current"] is None) == (f["status"] == "pending")
            for listed in ("candidates", "discarded", "proposed"):
                assert f[listed] == sorted(f[listed])
        assert [f["key"] for f in exp["facts"]] == sorted(f["key"] for f in exp["facts"])
        for p in exp["problems"]:
            assert set(p) - {"optional"} == {"kind", "contains"} and p["contains"] and p.get("optional", True) is True


# ---------------------------------------------------------------------------------------------
# Whole vaults


@pytest.mark.parametrize("d", _params("vmem"))
def test_vmem_scenario(d: Path):
    s = _load(d)
    vmem = d / "vault.vmem"
    before = vmem.read_bytes()
    with _open(vmem, s["passphrase"]) as v:
        assert v.read_only
        _assert_state(_state(v), s["expect"], s["name"])
    assert vmem.read_bytes() == before


def _deliver_in_order(src: Path, names: list[str], folder: Path, passphrase: str,
                      rng: random.Random) -> tuple[dict[str, Any], list[list[str]]]:
    """Descriptor, slots and envelopes first; then the segments shuffled, in chunks of 1 to 3, the
    vault opened as soon as it opens and refreshed after every later chunk.  Returns the final
    state and the chunks (for the failure message)."""
    first = [n for n in names if not n.startswith("segments/")]
    segs = [n for n in names if n.startswith("segments/")]
    rng.shuffle(segs)
    chunks: list[list[str]] = []
    while segs:
        k = rng.randint(1, 3)
        chunks.append(segs[:k])
        segs = segs[k:]
    _copy(src, first, folder)
    vault = None
    try:
        for chunk in chunks:
            _copy(src, chunk, folder)
            if vault is None:
                try:
                    vault = _open(folder, passphrase)
                except DamagedFile:
                    continue  # its genesis record has not arrived yet
            else:
                vault.refresh()
        assert vault is not None, "the vault never opened"
        return _state(vault), chunks
    finally:
        if vault is not None:
            vault.lock()


@pytest.mark.parametrize("d", _params("files"))
def test_arrival_orders(d: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    s = _load(d)
    src = d / "files"
    names = _names(src)
    # All at once, as a fresh installation.
    monkeypatch.setenv("CAMILLO_HOME", str(tmp_path / "device-all-at-once"))
    shutil.copytree(src, tmp_path / "all-at-once")
    with _open(tmp_path / "all-at-once", s["passphrase"]) as v:
        _assert_state(_state(v), s["expect"], f"{s['name']} (all files at once)")
    assert s["orders"] >= 20
    for i in range(s["orders"]):
        rng = random.Random(f"{s['name']}/{i}")
        # each order is another device's experience: what one saw is not remembered by the next
        monkeypatch.setenv("CAMILLO_HOME", str(tmp_path / f"device-{i}"))
        state, chunks = _deliver_in_order(src, names, tmp_path / f"order-{i}", s["passphrase"], rng)
        order = " | ".join(" ".join(n.rsplit("/", 1)[1][:8] for n in c) for c in chunks)
        _assert_state(state, s["expect"], f"{s['name']} arrival order {i} ({order})")


# ---------------------------------------------------------------------------------------------
# Steps


def _run_steps(d: Path, s: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real_time = time.time
    for case in s["cases"]:
        name = case["name"]
        folder = tmp_path / name / "vault"
        folder.mkdir(parents=True)
        monkeypatch.setenv("CAMILLO_HOME", str(tmp_path / name / "device"))  # a fresh device per case
        expected = iter(s["expect"][name])
        for i, step in enumerate(case["steps"]):
            where = f"{s['name']}/{name} step {i} ({step['action']})"
            action = step["action"]
            if action == "deliver":
                shutil.copytree(d / "files" / step["files"], folder, dirs_exist_ok=True)
            elif action == "remove":
                for n in step["files"]:
                    (folder / n).unlink()
            elif action == "open":
                clock = step["clock"]
                monkeypatch.setattr(time, "time", lambda clock=clock: real_time() + clock)
                with Vault.open(str(folder), Unlock.passphrase(s["passphrase"]), register=True, cache=False) as v:
                    status = v.sync_status()[0]
                    problems = sorted((p.kind, p.message) for p in v.problems())
                monkeypatch.setattr(time, "time", real_time)
                e = next(expected)
                assert status == e["sync_status"], f"{where}: sync status {status!r}, problems {problems}"
                why = _unmatched(problems, e["problems"])
                assert why is None, f"{where}: {why}"
            elif action == "offer":
                with Vault.open(str(folder), Unlock.passphrase(s["passphrase"]), register=True, cache=False) as v:
                    offer = Offer(v.session, secret=bytes.fromhex(s["offer"]["secret"]))
                    assert offer.base == s["offer"]["rendezvous"], f"{where}: rendezvous name differs"
                    state = offer.poll()
                    request = offer.request is not None
                    messages = [("message", m) for m in offer.messages]
                    names = sorted(p.name for p in (folder / "enroll").iterdir()) if (folder / "enroll").exists() else []
                e = next(expected)
                assert state.name.lower() == e["state"], f"{where}: offer is {state.name}, messages {messages}"
                assert request == e["request"], f"{where}: the offer took the request"
                why = _unmatched(messages, e["messages"])
                assert why is None, f"{where}: {why}"
                if state.name == "WAITING":
                    assert names, f"{where}: the foreign request was deleted"
            else:
                raise AssertionError(f"{where}: unknown action")
        assert next(expected, None) is None, f"{s['name']}/{name}: expectations left over"


@pytest.mark.parametrize("d", _params("steps"))
def test_steps_scenario(d: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    s = _load(d)
    if s["name"] == "enrollment-wrong-secret":
        assert s["offer"]["secret"] != s["request"]["secret"]
        assert s["offer"]["rendezvous"] != s["request"]["rendezvous"]
    _run_steps(d, s, tmp_path, monkeypatch)
