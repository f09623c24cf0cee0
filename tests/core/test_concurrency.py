"""Several processes appending to one vault folder at the same time.

Two kinds of concurrency:

* two processes of the **same installation** (one ``CAMILLO_HOME``, one writer id): they share the
  device state and its ``write.lock``, so they must hand out consecutive ``seq`` numbers and never
  the same one twice (a fork);
* two processes of **different installations** (two writers): each numbers its own chain; their
  batches interleave in the folder.

Each worker is a separate Python process started with ``subprocess`` and held at a barrier file
until every worker has opened the vault, then appends single-record batches as fast as it can and
prints every record and batch id the facade acknowledged.  Afterwards a fresh reader must find
every acknowledged record, no problem (no fork, gap or damaged file), every segment intact under
its content address, and exactly one segment per batch (nothing overwritten, nothing lost).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
from camillo import NewRecord, Unlock, Vault
from camillo.storage import hash_matches, kind_of

from .helpers import all_files

PASSPHRASE = "correct horse battery staple"
COUNT = 40

WORKER = r"""
import json, os, sys, time
from camillo import NewRecord, Unlock, Vault

path, barrier, tag, count, compartments = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5].split(",")
vault = Vault.open(path, Unlock.passphrase(os.environ["CAMILLO_PASSPHRASE"]))
print(json.dumps({"writer": vault.writer_id.hex()}), flush=True)
open(os.path.join(barrier, tag + ".ready"), "w").close()
deadline = time.time() + 60
while not os.path.exists(os.path.join(barrier, "go")):
    if time.time() > deadline:
        sys.exit("the barrier never opened")
    time.sleep(0.001)
for i in range(count):
    comp = compartments[i % len(compartments)]
    changes = vault.append([NewRecord(type="message", conversation=tag, role="user", text=f"{tag} {i}")],
                           compartment=comp)
    rid = changes.written[0]
    print(json.dumps({"record": rid.hex(), "batch": vault.record(rid).batch_id.hex(), "compartment": comp}),
          flush=True)
vault.lock()
"""


def segment_names(path: str) -> list[str]:
    out = []
    for f in all_files(path):
        rel = os.path.relpath(f, path).replace(os.sep, "/")
        if kind_of(rel) == "segment":
            out.append(rel)
    return out


def run_workers(path: str, barrier: str, workers: list[tuple[str, str, str]], count: int = COUNT) -> dict[str, dict]:
    """Start one process per (tag, CAMILLO_HOME, compartments), release them together, and return
    per tag: its writer id and the list of acknowledged (record, batch, compartment)."""
    os.makedirs(barrier, exist_ok=True)
    procs = {}
    for tag, home, comps in workers:
        env = dict(os.environ, CAMILLO_HOME=home, CAMILLO_PASSPHRASE=PASSPHRASE, CAMILLO_INSECURE_TEST_KDF="1",
                   CAMILLO_KEYCHAIN="none")
        procs[tag] = subprocess.Popen([sys.executable, "-c", WORKER, path, barrier, tag, str(count), comps],
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.time() + 60
    while not all(os.path.exists(os.path.join(barrier, f"{tag}.ready")) for tag in procs):
        dead = [t for t, p in procs.items() if p.poll() is not None]
        assert not dead, f"worker(s) {dead} died before the barrier: {[procs[t].stderr.read() for t in dead]}"
        assert time.time() < deadline, "workers never became ready"
        time.sleep(0.01)
    open(os.path.join(barrier, "go"), "w").close()
    results = {}
    for tag, proc in procs.items():
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0, f"worker {tag} failed ({proc.returncode}): {err}"
        assert "Traceback" not in err, err
        lines = [json.loads(line) for line in out.splitlines() if line.strip()]
        results[tag] = {"writer": lines[0]["writer"], "acks": [(x["record"], x["batch"], x["compartment"]) for x in lines[1:]]}
        assert len(results[tag]["acks"]) == count
    return results


def open_as(path: str, home: str, **kwargs) -> Vault:
    """Open ``path`` as the installation in ``home`` (the facade reads CAMILLO_HOME on open)."""
    old = os.environ["CAMILLO_HOME"]
    os.environ["CAMILLO_HOME"] = home
    try:
        return Vault.open(path, Unlock.passphrase(PASSPHRASE), **kwargs)
    finally:
        os.environ["CAMILLO_HOME"] = old


def read_back(path: str, home: str) -> Vault:
    """A fresh, cold reader that is no installation of this vault (it registers nothing)."""
    return open_as(path, home, register=False, cache=False)


def check_folder(path: str, vault: Vault, results: dict[str, dict], segments_before: int, extra_batches: int) -> None:
    acked_records = {r for res in results.values() for r, _, _ in res["acks"]}
    acked_batches = [b for res in results.values() for _, b, _ in res["acks"]]
    assert len(set(acked_batches)) == len(acked_batches), "one batch id acknowledged twice"
    assert len(acked_records) == sum(len(res["acks"]) for res in results.values())
    # every acknowledged record is there, once, in the timeline; every acknowledged batch accepted
    timeline = [r.id.hex() for r in vault.timeline()]
    assert acked_records <= set(timeline), f"lost records: {sorted(acked_records - set(timeline))[:3]}"
    assert len(timeline) == len(set(timeline)) == len(acked_records)
    assert {bytes.fromhex(b) for b in acked_batches} <= vault.session.log.accepted
    assert vault.problems() == [], [(p.kind, p.message) for p in vault.problems()]
    # files: intact under their content address, one per batch, nothing overwritten or left behind
    names = segment_names(path)
    for name in names:
        with open(os.path.join(path, name), "rb") as fh:
            assert hash_matches(name, fh.read()) is True, f"{name} does not match its hash"
    assert len(names) == segments_before + len(acked_batches) + extra_batches
    assert len(names) == len(vault.session.log.accepted), "a segment without its batch, or a batch without its file"
    leftovers = [f for f in all_files(path) if os.path.basename(f).startswith(".")]
    assert leftovers == [], f"temp files left behind: {leftovers}"


def chain_of(vault: Vault, writer_hex: str, compartment: str) -> dict[int, str]:
    chain = vault.session.log.chains.get((bytes.fromhex(writer_hex), vault.compartment_id(compartment)), {})
    return {seq: bid.hex() for seq, bid in chain.items()}


def assert_consecutive(chain: dict[int, str]) -> None:
    assert sorted(chain) == list(range(1, len(chain) + 1)), f"seq numbers are not 1..n: {sorted(chain)}"


@pytest.fixture
def vault_path(new_vault):
    path, vault, _ = new_vault
    vault.lock()  # the creating installation (CAMILLO_HOME from conftest) is already registered
    return path


def test_two_processes_of_one_installation(vault_path, tmp_path):
    home = os.environ["CAMILLO_HOME"]
    before = len(segment_names(vault_path))
    results = run_workers(vault_path, str(tmp_path / "barrier"), [("p1", home, "personal"), ("p2", home, "personal")])
    writer = results["p1"]["writer"]
    assert results["p2"]["writer"] == writer, "one installation must be one writer"
    with read_back(vault_path, str(tmp_path / "reader")) as v:
        check_folder(vault_path, v, results, before, extra_batches=0)
        chain = chain_of(v, writer, "personal")
        assert_consecutive(chain)
        assert len(chain) == 1 + 2 * COUNT  # the genesis batch, then every acknowledged one
        by_batch = {b: s for s, b in chain.items()}
        ranges = []
        for res in results.values():
            seqs = [by_batch[b] for _, b, _ in res["acks"]]
            assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs), "a process's own batches out of order"
            ranges.append((min(seqs), max(seqs)))
        # the two processes really ran at the same time: their seq ranges overlap (interleaved)
        assert ranges[0][0] < ranges[1][1] and ranges[1][0] < ranges[0][1], ranges
        assert not v.session.log.forks


def test_two_processes_of_one_installation_across_compartments(vault_path, tmp_path):
    """Both processes alternate between two compartments: the counters of each compartment must
    stay consecutive although the device state file holds both and is rewritten by both."""
    home = os.environ["CAMILLO_HOME"]
    before = len(segment_names(vault_path))
    results = run_workers(vault_path, str(tmp_path / "barrier"),
                          [("p1", home, "personal,work"), ("p2", home, "work,personal")])
    writer = results["p1"]["writer"]
    with read_back(vault_path, str(tmp_path / "reader")) as v:
        check_folder(vault_path, v, results, before, extra_batches=0)
        for comp in ("personal", "work"):
            chain = chain_of(v, writer, comp)
            assert_consecutive(chain)
            assert len(chain) == 1 + COUNT
        assert not v.session.log.forks and not v.session.log.gaps


def test_two_installations_at_once(vault_path, tmp_path):
    """Two new installations register (certificate batches in every compartment and a slot each)
    and append concurrently: two independent chains, interleaved."""
    before = len(segment_names(vault_path))
    homes = [str(tmp_path / "device-a"), str(tmp_path / "device-b")]
    results = run_workers(vault_path, str(tmp_path / "barrier"),
                          [("a", homes[0], "personal"), ("b", homes[1], "personal")])
    assert results["a"]["writer"] != results["b"]["writer"]
    with read_back(vault_path, str(tmp_path / "reader")) as v:
        # each registration wrote one certificate batch per compartment (control + three data)
        registration = 2 * (1 + len(v.compartments))
        check_folder(vault_path, v, results, before, extra_batches=registration)
        for res in results.values():
            chain = chain_of(v, res["writer"], "personal")
            assert_consecutive(chain)
            assert len(chain) == 1 + COUNT  # its certificate batch, then every acknowledged one
            assert [chain[s] for s in sorted(chain)][1:] == [b for _, b, _ in res["acks"]]
        assert len([f for f in all_files(vault_path) if f.endswith(".slot")]) == 3 + 2
        names = {p.writer_id.hex(): p for p in v.session.roster.principals.values()}
        assert results["a"]["writer"] in names and results["b"]["writer"] in names


def test_same_installation_and_another_device_together(vault_path, tmp_path):
    """Three processes at once: two of the owner's installation and one other device."""
    home = os.environ["CAMILLO_HOME"]
    other = str(tmp_path / "device-c")
    open_as(vault_path, other).lock()  # device c registers beforehand
    before = len(segment_names(vault_path))
    results = run_workers(vault_path, str(tmp_path / "barrier"),
                          [("p1", home, "personal"), ("p2", home, "personal"), ("c", other, "personal")], count=25)
    with read_back(vault_path, str(tmp_path / "reader")) as v:
        check_folder(vault_path, v, results, before, extra_batches=0)
        assert_consecutive(chain_of(v, results["p1"]["writer"], "personal"))
        assert_consecutive(chain_of(v, results["c"]["writer"], "personal"))
        assert len(chain_of(v, results["p1"]["writer"], "personal")) == 1 + 2 * 25
        assert len(chain_of(v, results["c"]["writer"], "personal")) == 1 + 25
        texts = [r.text for r in v.timeline()]
        assert sum(t.startswith("c ") for t in texts) == 25


def test_a_stale_process_continues_the_sequence(vault_path, tmp_path):
    """A process that opened the vault long ago, while another process of the same installation
    wrote many batches since, reloads the device state before numbering (no reuse of a seq)."""
    stale = Vault.open(vault_path, Unlock.passphrase(PASSPHRASE))
    fresh = Vault.open(vault_path, Unlock.passphrase(PASSPHRASE))
    assert stale.writer_id == fresh.writer_id
    for i in range(5):
        fresh.append([NewRecord(type="message", text=f"fresh {i}")])
    stale.append([NewRecord(type="message", text="stale")])
    fresh.append([NewRecord(type="message", text="fresh again")])
    writer = stale.writer_id.hex()
    stale.lock()
    fresh.lock()
    with read_back(vault_path, str(tmp_path / "reader")) as v:
        assert v.problems() == []
        chain = chain_of(v, writer, "personal")
        assert_consecutive(chain)
        assert len(chain) == 1 + 7
        assert sorted(r.text for r in v.timeline()) == sorted([*(f"fresh {i}" for i in range(5)), "stale", "fresh again"])
        by_seq = {s: v.record(v.session.materialized.db.execute("SELECT id FROM records WHERE batch = ?", (bytes.fromhex(b),))
                              .fetchone()[0]).text for s, b in chain.items() if s > 1}
        assert by_seq[7] == "stale" and by_seq[8] == "fresh again"
