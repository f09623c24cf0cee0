"""Generate the VMEM v1 history and access scenarios in ``tests/conformance/scenarios/``.

Run from the repository root::

    .venv/bin/python -m tests.conformance.generate_scenarios

A scenario is a small vault built by simulated devices (one ``CAMILLO_HOME`` each), diverging
copies of its folder (``shutil.copytree``) recombined with :func:`camillo.transport.merge_into`,
and batches forged with the keys a misbehaving device or agent really holds.  Each scenario is a
directory ``scenarios/<name>/`` with ``scenario.json`` and either

* ``vault.vmem``: the whole vault in one file (the access scenarios), or
* ``files/``: the vault's files under their canonical names, to be delivered in shuffled arrival
  orders (the merge scenarios), or
* ``files/<set>/``: named sets of files that ``steps`` deliver and remove one after the other
  (rollback, enrollment).

The expected state is written from what each scenario *means* (the record ids the generator
wrote, and the rule that decides), not copied from what Camillo reads back.  The generator then
reads every scenario back the way ``test_scenarios.py`` does and prints any disagreement: a
disagreement is a bug in the reader, and the test keeps it visible as a strict ``xfail``.

``scenarios/README.md`` describes the format.  HPKE encapsulations, salts and ids are random, so
every run produces new artefacts: regenerate only on purpose and commit the whole directory.

The generator uses the insecure test-only Argon2id parameters (``CAMILLO_INSECURE_TEST_KDF=1``),
throw-away ``CAMILLO_HOME``s and no OS keychain (``CAMILLO_KEYCHAIN=none``).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from camillo import Authority, DamagedFile, NewRecord, Unlock, Vault, ids, segments, transport
from camillo.log import SYNC_GRACE_SECONDS
from camillo.ops.enrollment import rendezvous, typed_code
from camillo.primitives import SigningKey
from camillo.records import Batch, BatchHeader, Kind, encode_record, make_batch
from camillo.session.grantfile import read_grant_file
from camillo.session.writer import sealing_key, write_batches
from camillo.storage import FolderShelf, segment_name

SCENARIOS = Path(__file__).resolve().parent / "scenarios"
PASSPHRASE = "vmem scenarios"
T0 = 1_700_000_000  # record timestamps: the timeline is ordered by (ts, record id)
ORDERS = 20
CLOCK_AFTER_GRACE = SYNC_GRACE_SECONDS + 5


def fixed(label: str, n: int = 32) -> bytes:
    return hashlib.sha256(label.encode("ascii")).digest()[:n]


def jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return {"bytes": v.hex()}
    if isinstance(v, list):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    return v


# ---------------------------------------------------------------------------------------------
# Simulated devices


class World:
    """A scratch directory with one CAMILLO_HOME per simulated device."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def path(self, name: str) -> str:
        return str(self.root / name)

    def act_as(self, device: str) -> None:
        os.environ["CAMILLO_HOME"] = str(self.root / "homes" / device)

    def create(self, name: str = "vault", device: str = "desktop") -> tuple[str, Vault]:
        self.act_as(device)
        path = self.path(name)
        vault, _ = Vault.create(path, PASSPHRASE, device_name=device)
        return path, vault

    def open(self, path: str, device: str) -> Vault:
        """Open as ``device`` (registering it on its first open, as a real installation does)."""
        self.act_as(device)
        return Vault.open(path, Unlock.passphrase(PASSPHRASE), register=True, cache=False)

    def open_grant(self, path: str, grant_file: str, agent: str) -> Vault:
        self.act_as(f"agent-{agent}")
        return Vault.open(path, Unlock.grant(grant_file), cache=False)


def only(records: tuple[bytes, ...]) -> bytes:
    assert len(records) == 1, records
    return records[0]


def fact(text: str, ts: int, **kw: Any) -> NewRecord:
    return NewRecord(type=kw.pop("type", "fact"), key=kw.pop("key", "user/city"), value=text, ts=ts, **kw)


def message(text: str, ts: int, **kw: Any) -> NewRecord:
    return NewRecord(type="message", text=text, ts=ts, **kw)


def chain_of(vault: Vault, compartment: str) -> dict[int, bytes]:
    """seq -> batch id of the vault's own device in a compartment."""
    assert vault.session.actor is not None
    return dict(vault.session.log.chains[(vault.writer_id, vault.compartment_id(compartment))])


def frontier_of(vault: Vault, cid: bytes) -> dict[bytes, int]:
    """What this vault has seen of every writer of ``cid`` (the frontier a real write would claim)."""
    return {w: vault.session.log.max_seq(w, cid) for (w, c) in vault.session.log.chains if c == cid}


def forge(path: str, vault_id: bytes, cid: bytes, epoch: tuple[bytes, bytes], signer: SigningKey, seq: int,
          prev: bytes | None, frontier: dict[bytes, int], deps: list[bytes], raws: list[bytes]) -> tuple[bytes, str]:
    """Write a batch with a writer's own key, bypassing everything the facade checks (what a
    cloned device, a revoked laptop or an agent that ignores its software can do).  Returns the
    batch id and the segment name."""
    writer = ids.writer_id(signer.alg, signer.public)
    header = BatchHeader(vault_id, cid, writer, seq, prev, tuple(sorted(set(deps))), dict(frontier),
                         tuple(ids.record_id(r) for r in raws), int(time.time()))
    batch = make_batch(header, raws, signer)
    epoch_id, epoch_public = epoch
    seg = segments.seal_segment(vault_id, cid, epoch_id, epoch_public, segments.encode_payload([batch]))
    name = segment_name(seg)
    FolderShelf(path).write(name, seg)
    return batch.id, name


def vault_files(path: str) -> dict[str, bytes]:
    """Every vault file of a folder by canonical name (descriptor, slots, envelopes, segments, enroll)."""
    shelf = FolderShelf(path)
    try:
        return {n: shelf.read(n) for n in shelf.list()}
    finally:
        shelf.close()


def segment_of(vault: Vault, batch_id: bytes) -> str:
    return vault.session.batches[batch_id].segment


# ---------------------------------------------------------------------------------------------
# Expectations


def fact_expect(key: str, compartment: str, status: str, current: bytes | None, value: Any, *,
                candidates: tuple[bytes, ...] = (), discarded: tuple[bytes, ...] = (),
                proposed: tuple[bytes, ...] = ()) -> dict[str, Any]:
    return {
        "key": key,
        "compartment": compartment,
        "status": status,
        "current": current.hex() if current is not None else None,
        "value": jsonable(value),
        "candidates": sorted(c.hex() for c in candidates),
        "discarded": sorted(d.hex() for d in discarded),
        "proposed": sorted(p.hex() for p in proposed),
    }


def problem(kind: str, contains: str) -> dict[str, str]:
    return {"kind": kind, "contains": contains}


class Timeline:
    """Record ids in timeline order (record ts, then id), from the timestamps the generator chose."""

    def __init__(self) -> None:
        self.ts: dict[bytes, int] = {}

    def add(self, rid: bytes, ts: int) -> bytes:
        self.ts[rid] = ts
        return rid

    def of(self, *rids: bytes) -> list[str]:
        return [r.hex() for r in sorted(rids, key=lambda r: (self.ts[r], r))]


def observe(vault: Vault) -> dict[str, Any]:
    """The materialised state in the form of ``expect`` (problems as (kind, message) pairs)."""
    facts = []
    for f in vault.facts():
        facts.append({
            "key": f.key, "compartment": f.compartment, "status": f.status,
            "current": f.current.id.hex() if f.current else None,
            "value": jsonable(f.current.value) if f.current else None,
            "candidates": sorted(c.id.hex() for c in f.candidates),
            "discarded": sorted(d.id.hex() for d in f.discarded),
            "proposed": sorted(p.id.hex() for p in f.proposed),
        })
    return {
        "facts": facts,
        "timeline": [r.id.hex() for r in vault.timeline()],
        "problems": sorted((p.kind, p.message) for p in vault.problems()),
    }


def problems_match(actual: list[tuple[str, str]], expected: list[dict[str, Any]]) -> bool:
    left = list(actual)
    for e in sorted(expected, key=lambda e: bool(e.get("optional"))):  # (optional ones: what is left)
        hit = next((a for a in left if a[0] == e["kind"] and e["contains"] in a[1]), None)
        if hit is None:
            if e.get("optional"):
                continue
            return False
        left.remove(hit)
    return not left


def disagreements(state: dict[str, Any], expect: dict[str, Any]) -> list[str]:
    out = []
    for field in ("facts", "timeline"):
        if state[field] != expect[field]:
            out.append(f"{field}: expected {json.dumps(expect[field])}\n      got {json.dumps(state[field])}")
    if not problems_match(state["problems"], expect["problems"]):
        out.append(f"problems: expected {expect['problems']}\n      got {state['problems']}")
    return out


# ---------------------------------------------------------------------------------------------
# Output


class Out:
    def __init__(self, directory: Path, work: Path) -> None:
        self.dir = directory
        self.work = work
        self.names: list[str] = []
        self.disagreements: dict[str, list[str]] = {}

    def clean(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        for p in self.dir.iterdir():
            if p.is_dir():
                shutil.rmtree(p)

    def _start(self, name: str) -> Path:
        assert name not in self.names, name
        self.names.append(name)
        d = self.dir / name
        d.mkdir()
        return d

    @staticmethod
    def _write_files(target: Path, files: dict[str, bytes]) -> None:
        for n, data in sorted(files.items()):
            p = target.joinpath(*n.split("/"))
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)

    @staticmethod
    def _json(d: Path, scenario: dict[str, Any]) -> None:
        text = json.dumps(scenario, indent=2, ensure_ascii=True) + "\n"
        (d / "scenario.json").write_text(text, encoding="ascii")

    def state_scenario(self, name: str, description: str, folder: str, expect: dict[str, Any], *,
                       orders: int | None, notes: str | None = None, labels: dict[str, bytes] | None = None) -> None:
        """A vault whose materialised state is compared with ``expect``: as ``vault.vmem`` when
        ``orders`` is None, else as ``files/`` delivered in that many shuffled arrival orders."""
        d = self._start(name)
        scenario: dict[str, Any] = {"name": name, "description": description, "passphrase": PASSPHRASE}
        if orders is None:
            scenario["delivery"] = "vmem"
            transport.pack_vault(folder, str(d / "vault.vmem"))
        else:
            scenario["delivery"] = "files"
            scenario["orders"] = orders
            self._write_files(d / "files", vault_files(folder))
        if labels:
            scenario["records"] = {k: v.hex() for k, v in labels.items()}
        if notes:
            scenario["notes"] = notes
        scenario["expect"] = expect
        self._json(d, scenario)
        self._check(name, d, scenario)

    def steps_scenario(self, name: str, description: str, file_sets: dict[str, dict[str, bytes]],
                       cases: list[dict[str, Any]], expect: dict[str, list[dict[str, Any]]], *,
                       extra: dict[str, Any] | None = None, notes: str | None = None,
                       check: Callable[[Path, dict[str, Any]], dict[str, list[dict[str, Any]]]]) -> None:
        d = self._start(name)
        for set_name, files in file_sets.items():
            self._write_files(d / "files" / set_name, files)
        scenario: dict[str, Any] = {"name": name, "description": description, "passphrase": PASSPHRASE,
                                    "delivery": "steps", **(extra or {}), "cases": cases}
        if notes:
            scenario["notes"] = notes
        scenario["expect"] = expect
        self._json(d, scenario)
        got = check(d, scenario)
        problems = []
        for case, results in expect.items():
            for i, (e, g) in enumerate(zip(results, got.get(case, []))):
                if not _step_matches(g, e):
                    problems.append(f"{case} check {i}: expected {e}\n      got {g}")
            if len(got.get(case, [])) != len(results):
                problems.append(f"{case}: {len(got.get(case, []))} results for {len(results)} expectations")
        self._report(name, problems)

    def _check(self, name: str, d: Path, scenario: dict[str, Any]) -> None:
        """Read the scenario back as a fresh installation (all files at once) and compare."""
        reader = self.work / f"check-{name}"
        os.environ["CAMILLO_HOME"] = str(reader / "home")
        if scenario["delivery"] == "vmem":
            target = str(d / "vault.vmem")
        else:
            target = str(reader / "vault")
            shutil.copytree(d / "files", target)
        try:
            with Vault.open(target, Unlock.passphrase(PASSPHRASE), register=False, cache=False) as v:
                state = observe(v)
        except DamagedFile as exc:
            self._report(name, [f"does not open: {exc.message}"])
            return
        self._report(name, disagreements(state, scenario["expect"]))

    def _report(self, name: str, problems: list[str]) -> None:
        if problems:
            self.disagreements[name] = problems
            print(f"  {name}: Camillo DISAGREES with the expectation:")
            for p in problems:
                print(f"    {p}")
        else:
            print(f"  {name}: ok")


def _step_matches(got: dict[str, Any], expect: dict[str, Any]) -> bool:
    for k, v in expect.items():
        if k in ("problems", "messages"):
            if not problems_match(got.get(k, []), v):
                return False
        elif got.get(k) != v:
            return False
    return True


# ---------------------------------------------------------------------------------------------
# History (merge) scenarios


def two_devices_diverge(out: Out) -> dict[str, Any]:
    """Desktop writes Lisbon; the laptop registers; the folder is copied; each device supersedes
    Lisbon in its own copy at class user (desktop: Porto; laptop: Faro)."""
    world = World(out.work / "diverge")
    path, desktop = world.create()
    tl = Timeline()
    lisbon = tl.add(only(desktop.append([fact("Lisbon", T0 + 1)]).written), T0 + 1)
    desktop.lock()
    world.open(path, "laptop").lock()  # the laptop registers while both see the same folder
    copy = world.path("laptop-copy")
    shutil.copytree(path, copy)
    with world.open(path, "desktop") as v:
        porto = tl.add(only(v.append([fact("Porto", T0 + 2)]).written), T0 + 2)
    with world.open(copy, "laptop") as v:
        faro = tl.add(only(v.append([fact("Faro", T0 + 3)]).written), T0 + 3)
    transport.merge_into(path, copy)
    return {"path": path, "tl": tl, "lisbon": lisbon, "porto": porto, "faro": faro}


def concurrent_supersession(out: Out, s: dict[str, Any]) -> None:
    tl, lisbon, porto, faro = s["tl"], s["lisbon"], s["porto"], s["faro"]
    preferred = min(porto, faro)
    out.state_scenario(
        "concurrent-supersession",
        "Two devices concurrently supersede the same fact, both at class user, so the fact is in conflict and "
        "the candidate with the smaller record id is preferred.",
        s["path"],
        {
            "facts": [fact_expect("user/city", "personal", "conflict", preferred,
                                  "Porto" if preferred == porto else "Faro", candidates=(porto, faro))],
            "timeline": tl.of(lisbon, porto, faro),
            "problems": [],
        },
        orders=ORDERS,
        labels={"lisbon": lisbon, "porto_desktop": porto, "faro_laptop": faro},
        notes="Both PUTs name Lisbon in pred and neither saw the other; both bind (class user from an owner "
              "device).  The preferred candidate (current) is the one with the smallest record id.",
    )


def conflict_resolved(out: Out, s: dict[str, Any]) -> None:
    tl, lisbon, porto, faro = s["tl"], s["lisbon"], s["porto"], s["faro"]
    world = World(out.work / "resolve")
    with world.open(s["path"], "desktop") as v:
        assert v.fact("user/city").status == "conflict"
        resolved = only(v.resolve("user/city", pick=porto).written)
        tl.add(resolved, v.record(resolved).ts)
    out.state_scenario(
        "conflict-resolved",
        "A user-class PUT whose pred names every candidate of a conflict resolves it, so the fact is ok with "
        "the resolving record as its current value.",
        s["path"],
        {
            "facts": [fact_expect("user/city", "personal", "ok", resolved, "Porto")],
            "timeline": tl.of(lisbon, porto, faro, resolved),
            "problems": [],
        },
        orders=ORDERS,
        labels={"lisbon": lisbon, "porto_desktop": porto, "faro_laptop": faro, "resolution": resolved},
        notes="The resolution (written by the desktop after the merge) picks Porto's value; its pred is "
              "[porto, faro].  Its ts is the time it was written, so it is last on the timeline.",
    )


def tombstone_vs_edit(out: Out) -> None:
    world = World(out.work / "tombstone")
    path, desktop = world.create()
    tl = Timeline()
    lisbon = tl.add(only(desktop.append([fact("Lisbon", T0 + 1)]).written), T0 + 1)
    desktop.lock()
    world.open(path, "laptop").lock()
    copy = world.path("laptop-copy")
    shutil.copytree(path, copy)
    with world.open(path, "desktop") as v:
        deletion = only(v.forget(key="user/city").written)
    with world.open(copy, "laptop") as v:
        porto = tl.add(only(v.append([fact("Porto", T0 + 2)]).written), T0 + 2)
    transport.merge_into(path, copy)
    out.state_scenario(
        "tombstone-vs-edit",
        "A DEL of a fact concurrent with a PUT superseding the same value wins: the fact is deleted and the "
        "concurrent PUT is reported as discarded.",
        path,
        {
            "facts": [fact_expect("user/city", "personal", "deleted", deletion, None, discarded=(porto,))],
            "timeline": [],  # forgotten values leave the timeline: Lisbon (deleted) and Porto (discarded)
            "problems": [],
        },
        orders=ORDERS,
        labels={"lisbon": lisbon, "del_desktop": deletion, "porto_laptop": porto},
        notes="Both the DEL and the PUT name Lisbon in pred and neither saw the other.  A deleted fact's "
              "current record is its (smallest) live DEL, whose value is null.  Forgotten values stay in the "
              "history but leave the timeline: the PUT the DEL superseded and the edit it discarded.",
    )


def resurrection(out: Out) -> None:
    world = World(out.work / "resurrection")
    path, desktop = world.create()
    tl = Timeline()
    lisbon = tl.add(only(desktop.append([fact("Lisbon", T0 + 1)]).written), T0 + 1)
    deletion = only(desktop.forget(key="user/city").written)
    desktop.lock()
    with world.open(path, "laptop") as v:  # the laptop has seen the DEL
        assert v.fact("user/city").status == "deleted"
        porto = tl.add(only(v.append([fact("Porto", T0 + 2)]).written), T0 + 2)
    out.state_scenario(
        "resurrection",
        "A PUT written by another device after it saw the DEL of a fact brings the fact back: it is ok with "
        "the new value.",
        path,
        {
            "facts": [fact_expect("user/city", "personal", "ok", porto, "Porto")],
            "timeline": tl.of(porto),  # Lisbon was forgotten by the DEL: it left the timeline
            "problems": [],
        },
        orders=ORDERS,
        labels={"lisbon": lisbon, "del_desktop": deletion, "porto_laptop": porto},
        notes="The PUT names the DEL in pred and its batch's frontier covers the DEL's batch.",
    )


def fork(out: Out) -> None:
    world = World(out.work / "fork")
    path, v = world.create()
    tl = Timeline()
    before = tl.add(only(v.append([message("before the fork", T0 + 1)]).written), T0 + 1)
    chain = chain_of(v, "personal")
    top = max(chain)
    branch_a = v.append([message("branch A", T0 + 2)])
    batch_a = only(branch_a.batches)
    cid = v.compartment_id("personal")
    epoch = v.session.roster.current_epoch(cid)
    assert v.session.actor is not None
    wid = v.writer_id
    # The second branch: the same device, its counter restored to what it was before branch A.
    raw = encode_record(Kind.NOTE, wid, value={"text": "branch B"}, authority=Authority.USER, type="message",
                        ts=T0 + 3)
    batch_b, _ = forge(path, v.vault_id, cid, (epoch.epoch_id, epoch.public), v.session.actor.signer, top + 1, chain[top],
                       {wid: top}, [chain[top]], [raw])
    v.lock()
    seq = top + 1
    pair = ", ".join(b.hex()[:12] for b in sorted((batch_a, batch_b)))
    out.state_scenario(
        "fork",
        "One device signed two different batches at the same seq, so the fork is reported with both batch ids "
        "and the records of both branches are absent.",
        path,
        {
            "facts": [],
            "timeline": tl.of(before),
            "problems": [
                problem("fork", f"at seq {seq} in personal ({pair})"),
                problem("rejected", f"batch {batch_a.hex()[:12]} was rejected: beyond a proven fork of its writer at seq {seq}"),
                problem("rejected", f"batch {batch_b.hex()[:12]} was rejected: beyond a proven fork of its writer at seq {seq}"),
            ],
        },
        orders=ORDERS,
        labels={"before_the_fork": before, "branch_a_record": only(branch_a.written), "branch_b_record": ids.record_id(raw),
                "branch_a_batch": batch_a, "branch_b_batch": batch_b},
        notes=f"Both batches are personal seq {seq} of the desktop with the same prev; each is validly signed.  "
              "The writer's earlier batches still count; everything of that writer in that compartment from "
              "the fork point on is rejected.",
    )


def gap(out: Out) -> None:
    world = World(out.work / "gap")
    path, v = world.create()
    tl = Timeline()
    written = []
    for i in range(4):
        c = v.append([message(f"m{i}", T0 + 1 + i)])
        written.append((tl.add(only(c.written), T0 + 1 + i), only(c.batches)))
    chain = chain_of(v, "personal")
    seq = next(s for s, b in chain.items() if b == written[1][1])
    missing_segment = segment_of(v, written[1][1])
    v.lock()
    os.unlink(os.path.join(path, *missing_segment.split("/")))
    missing = written[1][1]
    out.state_scenario(
        "gap",
        "A writer's middle batch is missing while its later batches are present, so a gap naming the missing "
        "batch id and seq is reported (still syncing: the reader noticed it just now) and only that batch's "
        "record is absent.",
        path,
        {
            "facts": [],
            "timeline": tl.of(written[0][0], written[2][0], written[3][0]),
            "problems": [problem("syncing", f"batch {missing.hex()[:12]} (seq {seq})")],
        },
        orders=ORDERS,
        labels={"m0": written[0][0], "m1_missing": written[1][0], "m2": written[2][0], "m3": written[3][0],
                "missing_batch": missing},
        notes=f"The missing batch is named by the prev of personal seq {seq + 1}.  Later batches of the writer "
              "still count (a gap is not a fork).",
    )


# ---------------------------------------------------------------------------------------------
# Rollback (a device's memory: steps)


def rollback(out: Out) -> None:
    world = World(out.work / "rollback")
    path, v = world.create()
    v.lock()
    base = vault_files(path)
    with world.open(path, "desktop") as v:
        batches = [only(v.append([message(f"m{i}", T0 + 1 + i)]).batches) for i in range(3)]
        later_segments = {b: segment_of(v, b) for b in batches}
        genesis_personal = segment_of(v, chain_of(v, "personal")[1])
    everything = vault_files(path)
    later = {n: d for n, d in everything.items() if n not in base}
    assert set(later) == set(later_segments.values())
    # Another copy of the same folder is compacted by the desktop (old segments pruned at once).
    compacted_copy = world.path("compacted-copy")
    shutil.copytree(path, compacted_copy)
    with world.open(compacted_copy, "desktop") as v:
        report = v.compact(prune_now=True)
        assert report.segments_deleted > 0, report
        control = v.session.roster.control_id
        personal = v.compartment_id("personal")
        after = vault_files(compacted_copy)
        added = {n: d for n, d in after.items() if n not in everything}
        removed = sorted(n for n in everything if n not in after)
        kinds: dict[str, dict[str, bytes]] = {"manifest": {}, "manifest-personal": {}, "compacted": {}}
        for n, d in added.items():
            cid, _ = v.session.reader.segment_epochs[n]
            if len(v.session.reader.segment_batches[n]) > 1:
                kinds["compacted"][n] = d
            elif cid == control:
                kinds["manifest"][n] = d
            else:
                assert cid == personal
                kinds["manifest-personal"][n] = d
    assert all(kinds.values()), {k: len(x) for k, x in kinds.items()}
    assert removed == sorted([genesis_personal, *later_segments.values()]), removed
    newest = later_segments[batches[-1]]
    vanished = sorted(later_segments.values())

    def open_step(clock: int) -> dict[str, Any]:
        return {"action": "open", "clock": clock}

    cases = [
        {
            "name": "no-manifest",
            "description": "The newest batch this device saw vanishes from the folder and nothing vouches for it.",
            "steps": [
                {"action": "deliver", "files": "base"}, open_step(0),
                {"action": "deliver", "files": "later"}, open_step(0),
                {"action": "remove", "files": [newest]}, open_step(0), open_step(CLOCK_AFTER_GRACE),
                {"action": "deliver", "files": "later"}, open_step(CLOCK_AFTER_GRACE),
            ],
        },
        {
            "name": "compaction-manifest",
            "description": "The segments this device saw vanish because another copy compacted them: the signed "
                           "COMPACTION record arrives before the new segment does.",
            "steps": [
                {"action": "deliver", "files": "base"}, open_step(0),
                {"action": "deliver", "files": "later"}, open_step(0),
                {"action": "remove", "files": vanished}, {"action": "deliver", "files": "manifest"}, open_step(0),
                open_step(CLOCK_AFTER_GRACE),
                {"action": "deliver", "files": "compacted"}, open_step(CLOCK_AFTER_GRACE),
                {"action": "remove", "files": [genesis_personal]}, {"action": "deliver", "files": "manifest-personal"},
                open_step(CLOCK_AFTER_GRACE),
            ],
        },
    ]
    ok = {"sync_status": "up to date", "problems": []}
    seen_not_here = problem("syncing", f"batch {batches[-1].hex()[:12]} (seq {len(batches) + 1}) that this device "
                                       "saw is not here yet")
    expect = {
        "no-manifest": [
            ok, ok,
            {"sync_status": "syncing", "problems": [seen_not_here]},
            {"sync_status": "rollback alert",
             "problems": [problem("rollback", f"batch {batches[-1].hex()[:12]} (seq {len(batches) + 1}) that this "
                                              "device saw has vanished without a signed manifest")]},
            ok,
        ],
        "compaction-manifest": [
            ok, ok,
            {"sync_status": "syncing", "problems": [seen_not_here]},
            {"sync_status": "syncing", "problems": [seen_not_here]},  # covered by the manifest: never a rollback
            ok, ok,
        ],
    }
    file_sets = {"base": base, "later": later, **kinds}
    out.steps_scenario(
        "rollback",
        "A device that saw a batch raises a rollback alert when the batch vanishes for longer than the "
        "10-minute grace without a signed manifest, and none when a signed compaction manifest covers it.",
        file_sets, cases, expect,
        extra={"grace_seconds": SYNC_GRACE_SECONDS},
        notes="Each case starts from an empty folder and a fresh device.  The device's first open registers it "
              "(it writes its certificate and slot into the folder, which is why 'base' holds no personal "
              "batch beyond the genesis one: the device never claims to have seen the batches that later "
              "vanish).  'clock' is seconds added to the real clock for that open.  'manifest' holds the "
              "control batch with the COMPACTION record, 'compacted' the new segment that replaces the old "
              "personal segments, 'manifest-personal' the copy of the COMPACTION record in personal.  The personal "
              "genesis segment, which the compaction also replaced, is removed only after the new segment has "
              "arrived: the device's own certificate batch names it, so its early absence would be a gap "
              "(syncing, then missing batches), which is not what this scenario is about.  Delivering the same "
              "steps without 'manifest' gives a rollback alert at the second open after the removal.",
        check=run_steps,
    )


# ---------------------------------------------------------------------------------------------
# Access negatives


def agent_user_record(out: Out) -> None:
    world = World(out.work / "agent-user")
    path, v = world.create()
    tl = Timeline()
    note = tl.add(only(v.append([message("The quarterly report is due on Friday.", T0 + 1)], compartment="work").written),
                  T0 + 1)
    grant_file = world.path("assistant.grant")
    v.create_grant("assistant", {"work": "write"}, grant_file)
    v.lock()
    with world.open_grant(path, grant_file, "assistant") as agent:
        legit = tl.add(only(agent.append([fact("Friday", T0 + 2, key="project/deadline")], compartment="work").written),
                       T0 + 2)
        cid = agent.compartment_id("work")
        seq, prev = agent.session.device_state.counters[cid]
        frontier = frontier_of(agent, cid)
        epoch = sealing_key(agent.session, cid)
        assert agent.session.actor is not None
        signer, wid = agent.session.actor.signer, agent.writer_id
    raw = encode_record(Kind.PUT, wid, key="user/forward_invoices", value="to evil@example.org",
                        authority=Authority.USER, type="instruction", ts=T0 + 3)
    forge(path, v.vault_id, cid, epoch, signer, seq + 1, prev, {**frontier, wid: seq}, [prev], [raw])
    out.state_scenario(
        "agent-user-record",
        "An agent with a write grant that signs a user-class record itself has that record rejected, so the "
        "instruction it tried to plant is absent while its inferred fact stays a proposal (pending, no value).",
        path,
        {
            "facts": [fact_expect("project/deadline", "work", "pending", None, None, proposed=(legit,))],
            "timeline": tl.of(note, legit),
            "problems": [problem("rejected-record", f"record {ids.record_id(raw).hex()[:12]} was rejected: it "
                                                    "claims user authority but was written by agent assistant")],
        },
        orders=None,
        labels={"owner_note": note, "agent_fact": legit, "forged_user_instruction": ids.record_id(raw)},
        notes="The forged batch is well formed and validly signed by the grant's key, in a compartment the "
              "grant may write: only the record is refused (user class is for the owner's devices).",
    )


def derived_above_sources(out: Out) -> None:
    world = World(out.work / "derived")
    path, v = world.create()
    tl = Timeline()
    web = tl.add(only(v.append([message("a web page said so", T0 + 1, role="web")]).written), T0 + 1)
    laundered = only(v.append([fact("Evil Bank", T0 + 2, key="user/bank", authority=Authority.OBSERVED,
                                    sources=[web])]).written)
    honest = tl.add(only(v.append([fact("Evil Bank", T0 + 3, key="user/bank", authority=Authority.EXTERNAL,
                                        sources=[web])]).written), T0 + 3)
    v.lock()
    out.state_scenario(
        "derived-above-sources",
        "A fact that cites an external-class source but claims observed class is rejected, while the same fact "
        "at external class counts (a proposal: pending, with no value).",
        path,
        {
            "facts": [fact_expect("user/bank", "personal", "pending", None, None, proposed=(honest,))],
            "timeline": tl.of(web, honest),
            "problems": [problem("rejected-record", f"record {laundered.hex()[:12]} was rejected: it claims observed "
                                                    "authority, above its sources (external)")],
        },
        orders=None,
        labels={"web_message": web, "observed_above_source": laundered, "external_with_source": honest},
        notes="A derived record's class may not exceed the lowest effective class of its sources.",
    )


def appender_supersedes_foreign(out: Out) -> None:
    world = World(out.work / "appender")
    path, v = world.create()
    tl = Timeline()
    grant_file = world.path("collector.grant")
    g = v.create_grant("collector", {"work": "append"}, grant_file)
    key = f"append/{g.grant.grant_id.hex()}/mood"
    owner_change = v.append([fact("calm", T0 + 1, key=key)], compartment="work")
    owner = tl.add(only(owner_change.written), T0 + 1)
    cid = v.compartment_id("work")
    owner_batch = only(owner_change.batches)
    desktop_wid = v.writer_id if v.session.actor else b""
    desktop_seq = v.session.log.max_seq(desktop_wid, cid)
    v.lock()
    with world.open_grant(path, grant_file, "collector") as agent:
        appended = tl.add(only(agent.append([message("appended by the agent", T0 + 2)], compartment="work").written),
                          T0 + 2)
        seq, prev = agent.session.device_state.counters[cid]
        epoch = sealing_key(agent.session, cid)
    grant, _ = read_grant_file(grant_file)
    cred = grant.credential
    raw = encode_record(Kind.PUT, cred.writer_id, key=key, value="furious", authority=Authority.INFERRED,
                        pred=[owner], type="fact", ts=T0 + 3)
    forge(path, v.vault_id, cid, epoch, cred.signer, seq + 1, prev, {cred.writer_id: seq, desktop_wid: desktop_seq},
          [prev, owner_batch], [raw])
    out.state_scenario(
        "appender-supersedes-foreign",
        "An append-only agent that writes a PUT in its own key namespace whose pred names the owner's record "
        "has it rejected, so the owner's value stays current.",
        path,
        {
            "facts": [fact_expect(key, "work", "ok", owner, "calm")],
            "timeline": tl.of(owner, appended),
            "problems": [problem("rejected-record", f"record {ids.record_id(raw).hex()[:12]} was rejected: an "
                                                    "append grant may only supersede its own records")],
        },
        orders=None,
        labels={"owner_record": owner, "agent_message": appended, "forged_supersession": ids.record_id(raw)},
        notes="The forged batch claims (frontier and deps) to have seen the owner's batch, so the pred is in "
              "its causal past and of the same key: only the appender rule refuses it.",
    )


def beyond_revocation_pin(out: Out) -> None:
    world = World(out.work / "revocation")
    path, v = world.create()
    v.lock()
    tl = Timeline()
    with world.open(path, "laptop") as lap:
        before = tl.add(only(lap.append([message("written on the laptop", T0 + 1)]).written), T0 + 1)
        cid = lap.compartment_id("personal")
        seq, prev = lap.session.device_state.counters[cid]
        frontier = frontier_of(lap, cid)
        old_epoch = lap.session.roster.current_epoch(cid)
        assert lap.session.actor is not None and old_epoch is not None
        laptop = lap.session.actor
    with world.open(path, "desktop") as v:
        v.revoke(laptop.writer_id.hex()[:16], reason="lost on a train")
        after = tl.add(only(v.append([message("written after the revocation", T0 + 2)]).written), T0 + 2)
    raw = encode_record(Kind.NOTE, laptop.writer_id, value={"text": "the thief was here"}, authority=Authority.USER,
                        type="message", ts=T0 + 3)
    stolen, _ = forge(path, v.vault_id, cid, (old_epoch.epoch_id, old_epoch.public), laptop.signer, seq + 1, prev,
                      {**frontier, laptop.writer_id: seq}, [prev], [raw])
    out.state_scenario(
        "beyond-revocation-pin",
        "A revoked laptop that signs a new batch with the keys it still holds has the batch rejected, because "
        "its seq is beyond what the revocation pinned, while its earlier records stay.",
        path,
        {
            "facts": [],
            "timeline": tl.of(before, after),
            "problems": [problem("rejected", f"wrote it after it was revoked (seq {seq + 1} is beyond what the "
                                             "revocation accepted)")],
        },
        orders=None,
        labels={"laptop_before": before, "desktop_after": after, "stolen_record": ids.record_id(raw),
                "stolen_batch": stolen},
        notes="The REVOKE record pins, per compartment, the last batch of the laptop the revoking device had "
              "seen (seq and id).  The forged batch is sealed under the personal epoch the laptop still "
              "knows, which the owner can still read; it is validly signed and well formed.",
    )


def enrollment_wrong_secret(out: Out) -> None:
    world = World(out.work / "enroll")
    path, v = world.create()
    vault_id = v.vault_id
    v.lock()
    base = vault_files(path)
    offer_secret = fixed("vmem scenario: the offer's enrollment secret")
    wrong_secret = fixed("vmem scenario: another enrollment secret")
    world.act_as("intruder")
    join = Vault.join(path, typed_code(wrong_secret), name="intruder")
    join.start()
    req = {n: d for n, d in vault_files(path).items() if n not in base}
    assert list(req) == [rendezvous(wrong_secret, vault_id) + ".req"], list(req)
    data = next(iter(req.values()))
    at_offer = {rendezvous(offer_secret, vault_id) + ".req": data}
    cases = [
        {
            "name": "other-rendezvous",
            "description": "The request sits under the rendezvous name of the other secret.",
            "steps": [{"action": "deliver", "files": "vault"}, {"action": "deliver", "files": "other-rendezvous"},
                      {"action": "offer"}],
        },
        {
            "name": "offer-rendezvous",
            "description": "The same request bytes are placed under the offer's own rendezvous name.",
            "steps": [{"action": "deliver", "files": "vault"}, {"action": "deliver", "files": "offer-rendezvous"},
                      {"action": "offer"}],
        },
    ]
    expect = {
        "other-rendezvous": [{"state": "waiting", "request": False,
                              "messages": [problem("message", "do not match this offer were ignored")]}],
        "offer-rendezvous": [{"state": "refused", "request": False,
                              "messages": [problem("message", "the enrollment request was damaged or tampered with")]}],
    }
    out.steps_scenario(
        "enrollment-wrong-secret",
        "An enrollment request made with another secret than the offer's is never taken: ignored with a note "
        "under its own rendezvous name, and refused under the offer's.",
        {"vault": base, "other-rendezvous": req, "offer-rendezvous": at_offer},
        cases, expect,
        extra={"offer": {"secret": offer_secret.hex(), "rendezvous": rendezvous(offer_secret, vault_id)},
               "request": {"secret": wrong_secret.hex(), "rendezvous": rendezvous(wrong_secret, vault_id),
                           "typed_code": typed_code(wrong_secret)}},
        notes="The offering side is an owner device of the vault (the test opens it with the passphrase, which "
              "registers it) that makes an offer with offer.secret and polls the folder once.  'messages' "
              "entries match the offer's messages by substring (kind is always 'message').",
        check=run_steps,
    )


# ---------------------------------------------------------------------------------------------
# Running steps (the generator's own read-back; test_scenarios.py has its own copy)


def run_steps(d: Path, scenario: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    from camillo.ops.enrollment import Offer

    results: dict[str, list[dict[str, Any]]] = {}
    real_time = time.time
    for case in scenario["cases"]:
        root = Path(tempfile.mkdtemp(prefix=f"steps-{case['name']}-"))
        folder = root / "vault"
        folder.mkdir()
        os.environ["CAMILLO_HOME"] = str(root / "device")
        got = results.setdefault(case["name"], [])
        try:
            for step in case["steps"]:
                if step["action"] == "deliver":
                    shutil.copytree(d / "files" / step["files"], folder, dirs_exist_ok=True)
                elif step["action"] == "remove":
                    for n in step["files"]:
                        os.unlink(folder.joinpath(*n.split("/")))
                elif step["action"] == "open":
                    clock = step["clock"]
                    time.time = lambda clock=clock: real_time() + clock  # type: ignore[assignment]
                    try:
                        with Vault.open(str(folder), Unlock.passphrase(PASSPHRASE), register=True, cache=False) as v:
                            got.append({"sync_status": v.sync_status()[0],
                                        "problems": sorted((p.kind, p.message) for p in v.problems())})
                    finally:
                        time.time = real_time  # type: ignore[assignment]
                elif step["action"] == "offer":
                    with Vault.open(str(folder), Unlock.passphrase(PASSPHRASE), register=True, cache=False) as v:
                        offer = Offer(v.session, secret=bytes.fromhex(scenario["offer"]["secret"]))
                        assert offer.base == scenario["offer"]["rendezvous"]
                        state = offer.poll()
                        got.append({"state": state.name.lower(), "request": offer.request is not None,
                                    "messages": [("message", m) for m in offer.messages]})
                else:
                    raise AssertionError(step)
        finally:
            shutil.rmtree(root, ignore_errors=True)
    return results


# ---------------------------------------------------------------------------------------------
# Concurrent key changes (spec §16.10)


def concurrent_erasures(out: Out) -> None:
    """Two devices erase one record each, concurrently, from the same generation; the folders are then
    merged, before either completes the other's erasure.  Each new epoch holds the record the other
    device erased; both rolls derived the same master secret."""
    world = World(out.work / "concurrent-erasures")
    path, v = world.create()
    tl = Timeline()
    r1 = tl.add(only(v.append([message("secret one", T0 + 1)]).written), T0 + 1)
    r2 = tl.add(only(v.append([message("secret two", T0 + 2)]).written), T0 + 2)
    kept = tl.add(only(v.append([message("an ordinary day", T0 + 3)]).written), T0 + 3)
    v.lock()
    copy = world.path("laptop-copy")
    shutil.copytree(path, copy)
    world.open(copy, "laptop").lock()  # the laptop registers in its copy
    transport.merge_into(path, copy)
    transport.merge_into(copy, path)
    with world.open(path, "desktop") as desk:
        desk.erase([r1])
    with world.open(copy, "laptop") as lap:
        lap.erase([r2])
    transport.merge_into(path, copy)
    out.state_scenario(
        "concurrent-erasures",
        "Two devices erase one record each at the same time from one generation, and a reader of the merged "
        "folder opens it through either device's slots and shows neither erased record, although each new "
        "epoch still holds the one the other device erased.",
        path,
        {"facts": [], "timeline": tl.of(kept), "problems": []},
        orders=ORDERS,
        labels={"erased_by_desktop": r1, "erased_by_laptop": r2, "kept": kept},
        notes="A record an applied ERASE names does not count wherever its bytes still are (spec §16.10 rule 3): "
              "the devices then complete each other's erasure, which a reader need not wait for.",
    )


def proposals(out: Out) -> None:
    """An agent with a write grant (class observed, the most a write grant has) proposes beside the
    user's values: never in their place, and its DEL of the user's value does not delete it."""
    world = World(out.work / "proposals")
    path, v = world.create()
    tl = Timeline()
    lisbon = tl.add(only(v.append([fact("Lisbon", T0 + 1)]).written), T0 + 1)
    veg = tl.add(only(v.append([fact("vegetarian", T0 + 2, key="user/diet")]).written), T0 + 2)
    flat = tl.add(only(v.append([fact("flat white", T0 + 3, key="user/coffee")]).written), T0 + 3)
    bank = tl.add(only(v.append([fact("Good Bank", T0 + 4, key="user/bank")]).written), T0 + 4)
    grant_file = world.path("planner.grant")
    v.create_grant("planner", {"personal": "write"}, grant_file, max_class="observed")
    v.lock()
    with world.open_grant(path, grant_file, "planner") as agent:
        paris = tl.add(only(agent.append([fact("Paris", T0 + 5, authority=Authority.OBSERVED)]).written), T0 + 5)
        pesc = only(agent.append([fact("pescatarian", T0 + 6, key="user/diet")]).written)
        espresso = tl.add(only(agent.append([fact("espresso", T0 + 7, key="user/coffee")]).written), T0 + 7)
        mornings = tl.add(only(agent.append([fact("mornings", T0 + 8, key="user/meeting_time",
                                                  type="preference")]).written), T0 + 8)
        # A modified client: the agent signs a keyed DEL of the user's bank (Camillo refuses to write it).
        raw = encode_record(Kind.DEL, agent.writer_id, key="user/bank", pred=[bank])
        write_batches(agent.session, {agent.compartment_id("personal"): [raw]})
        agent_del = ids.record_id(raw)
    with world.open(path, "desktop") as v:
        rejection = only(v.reject([pesc]).written)
        confirmation = only(v.confirm([espresso], replace=True).written)
    out.state_scenario(
        "proposals",
        "An agent's proposals stay beside the user's values and never replace them; a key with only a proposal "
        "has no value (pending); rejecting a proposal leaves the user's value; a confirmed proposal is the value; "
        "an agent's DEL of the user's value deletes nothing.",
        path,
        {
            "facts": [
                fact_expect("user/bank", "personal", "ok", bank, "Good Bank"),
                fact_expect("user/city", "personal", "ok", lisbon, "Lisbon", proposed=(paris,)),
                fact_expect("user/coffee", "personal", "ok", espresso, "espresso"),
                fact_expect("user/diet", "personal", "ok", veg, "vegetarian"),
                fact_expect("user/meeting_time", "personal", "pending", None, None, proposed=(mornings,)),
            ],
            # the rejected proposal is hidden; the older user value a confirmed proposal replaced stays
            "timeline": tl.of(lisbon, veg, flat, bank, paris, espresso, mornings),
            "problems": [],
        },
        orders=ORDERS,
        labels={"lisbon_user": lisbon, "paris_observed_agent": paris, "vegetarian_user": veg,
                "pescatarian_agent": pesc, "reject_del": rejection, "flat_white_user": flat,
                "espresso_agent": espresso, "confirm": confirmation, "mornings_agent": mornings,
                "good_bank_user": bank, "agent_del_of_bank": agent_del},
        notes="Every agent record names the user's value in pred and its batch saw the user's batch, so only "
              "the binding rule (spec §19.3) keeps the user's values: a proposal or a withdrawal never "
              "displaces a binding record.  The confirmation is a CONFIRM only (the proposal saw the value it "
              "replaces).",
    )


def main(argv: list[str] | None = None) -> int:
    """Write every scenario, or (with names) only those, leaving the others as they are."""
    only_names = set(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory(prefix="vmem-scenarios-") as tmp:
        work = Path(tmp)
        os.environ["CAMILLO_INSECURE_TEST_KDF"] = "1"
        os.environ["CAMILLO_KEYCHAIN"] = "none"
        out = Out(SCENARIOS, work)
        if only_names:
            only_names |= {n for n, g in GENERATORS.items() if g in {GENERATORS[m] for m in only_names}}
            for name in only_names:
                shutil.rmtree(SCENARIOS / name, ignore_errors=True)
            done: set[Callable[[Out], None]] = set()
            for name in sorted(only_names):
                if GENERATORS[name] not in done:  # one generator may write several scenarios
                    GENERATORS[name](out)
                    done.add(GENERATORS[name])
            print(f"wrote {', '.join(sorted(only_names))} to {SCENARIOS}")
            return 1 if out.disagreements else 0
        out.clean()
        diverged_pair(out)
        tombstone_vs_edit(out)
        resurrection(out)
        fork(out)
        gap(out)
        rollback(out)
        agent_user_record(out)
        derived_above_sources(out)
        appender_supersedes_foreign(out)
        beyond_revocation_pin(out)
        enrollment_wrong_secret(out)
        concurrent_erasures(out)
        proposals(out)
        planted_copies(out)
    print(f"wrote {len(out.names)} scenarios to {SCENARIOS}")
    if out.disagreements:
        print(f"Camillo disagrees with {len(out.disagreements)} scenario(s): {', '.join(sorted(out.disagreements))}; "
              "mark them xfail(strict=True) in test_scenarios.py with the bug", file=sys.stderr)
    return 0


def planted_copies(out: Out) -> None:
    """Someone who can seal to a compartment (an append grant holds its public key; a reader of it
    can also copy its batches) plants copies of another writer's batches whose names sort before the
    originals: one with a broken signature, one with its record ``null`` as an erasure leaves it."""
    world = World(out.work / "planted-copies")
    path, v = world.create()
    tl = Timeline()
    forged_rid = tl.add(only(v.append([message("a copy with a broken signature sorts first", T0 + 1)]).written), T0 + 1)
    nulled_rid = tl.add(only(v.append([message("a copy with the record null sorts first", T0 + 2)]).written), T0 + 2)
    reader = v.session.reader

    def plant(rid: bytes, change: Callable[[Batch], Batch]) -> bytes:
        (bid,) = reader.materialized.batches_holding({rid})
        (name,) = reader.segments_holding({bid})
        batch = next(b for b in reader.batches_of_segment(name) if b.id == bid)
        cid, eid = reader.segment_epochs[name]
        public = v.session.roster.epochs[(cid, eid)].public
        while True:  # (a segment's key is random: so is its name)
            seg = segments.seal_segment(v.vault_id, cid, eid, public, segments.encode_payload([change(batch)]))
            if segment_name(seg) < name:
                break
        FolderShelf(path).write(segment_name(seg), seg)
        return bid

    def broken(b: Batch) -> Batch:
        alg, sig = b.sigs[0]
        return Batch(b.id, b.header_bytes, b.header, ((alg, bytes([sig[0] ^ 1]) + sig[1:]),), b.records)

    forged_batch = plant(forged_rid, broken)
    plant(nulled_rid, lambda b: Batch(b.id, b.header_bytes, b.header, b.sigs, (None,) * len(b.records)))
    v.lock()
    out.state_scenario(
        "planted-copies",
        "Copies of two batches planted under names that sort before the originals, one with a broken "
        "signature and one with its record null as an erasure leaves it, hide neither record in any arrival order.",
        path,
        {"facts": [], "timeline": tl.of(forged_rid, nulled_rid),
         "problems": [{"kind": "damaged", "contains": f"batch {forged_batch.hex()[:12]}", "optional": True}]},
        orders=ORDERS,
        labels={"signature_broken_in_a_copy": forged_rid, "null_in_a_copy": nulled_rid},
        notes="Spec §9.3: the copy kept takes the signatures of a copy whose signatures verify, and the bytes of "
              "a null entry no applied ERASE names from a copy that holds them. The copy with the broken "
              "signature is reported as having signatures that do not verify when it was read first, or as "
              "appearing with different contents when the original was read first in the same read; not when "
              "the reader verified the original in an earlier read (it need not read it again to compare). "
              "The null copy is not reported (an erasure's copy looks the same).",
    )


def diverged_pair(out: Out) -> None:
    diverged = two_devices_diverge(out)
    concurrent_supersession(out, diverged)
    conflict_resolved(out, diverged)  # continues from the same merged folder


GENERATORS: dict[str, Callable[[Out], None]] = {
    "concurrent-supersession": diverged_pair, "conflict-resolved": diverged_pair,
    "agent-user-record": agent_user_record, "derived-above-sources": derived_above_sources,
    "concurrent-erasures": concurrent_erasures, "proposals": proposals, "planted-copies": planted_copies,
}


if __name__ == "__main__":
    sys.exit(main())
