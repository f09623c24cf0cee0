"""Exporters: Portable Memory and PAM exports are valid against the published JSON Schemas, are
deterministic, carry provenance and authority, leave out everything forgotten, deleted, rejected
or erased, and import back into a fresh vault with the same messages, facts and values.

Authority after a round trip (documented in docs/importing.md): notes and messages keep their
class (it travels in the ``vmem`` field); keyed records come back at most ``observed``, because an
interchange file is unsigned plaintext: a ``user`` fact returns as an ``observed`` fact (status
ok), a ``user`` preference or instruction returns pending in the inbox.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from camillo import Authority, NewRecord, Vault
from camillo.exporters import _es_number, canonical_json, jcs, run_export
from camillo.importers import run_import

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
SCHEMAS = FIXTURES / "schemas"
PASSPHRASE = "correct horse battery staple"
SECRETS = ("FORGOTTEN-MESSAGE-1", "DELETED-FACT-2", "REJECTED-GUESS-3", "ERASED-DIAGNOSIS-4", "OLD-CITY-5")


def build(vault: Vault) -> dict[str, bytes]:
    """A vault with something of everything, and with forgotten, deleted, rejected and erased data."""
    ids: dict[str, bytes] = {}
    ch = vault.append([
        NewRecord(type="conversation", title="Moving to Lisbon", conversation="c-1", ts=1700000000),
        NewRecord(type="message", text="I am moving to Lisbon in May.", conversation="c-1", role="user", ts=1700000001),
        NewRecord(type="message", text="Congratulations! Need a checklist?", conversation="c-1", role="assistant",
                  ts=1700000002),
        NewRecord(type="message", text="FORGOTTEN-MESSAGE-1 my bank PIN", conversation="c-1", role="user",
                  ts=1700000003),
        NewRecord(type="message", text="weather: sunny", conversation="c-1", role="tool", ts=1700000004),
        NewRecord(type="message", text="A note without a conversation", role="user", ts=1700000005),
    ])
    ids["forgotten"] = ch.written[3]
    vault.append([
        NewRecord(type="fact", key="user/city", value="OLD-CITY-5 Porto", ts=1700000010),
    ])
    vault.append([
        NewRecord(type="fact", key="user/city", value="Lisbon", ts=1700000011),
        NewRecord(type="fact", key="user/shoe_size", value=43, ts=1700000012),
        NewRecord(type="preference", key="user/units", value="metric", ts=1700000013),
        NewRecord(type="instruction", key="assistant/tone", value="Be brief.", ts=1700000014),
        NewRecord(type="fact", key="user/diet", value={"vegetarian": True, "since": 2019}, ts=1700000015),
        NewRecord(type="event", text="Signed the lease.", ts=1700000016),
        NewRecord(type="attachment", value={"name": "lease.txt", "media_type": "text/plain", "text": "Lease terms"},
                  ts=1700000017),
        NewRecord(type="fact", key="user/employer", value="Acme", authority=Authority.INFERRED, ts=1700000018),
        NewRecord(type="fact", key="user/pet", value="DELETED-FACT-2 a cat", ts=1700000019),
        NewRecord(type="fact", key="user/guess", value="REJECTED-GUESS-3", authority=Authority.INFERRED,
                  ts=1700000020),
    ])
    erased = vault.append([NewRecord(type="message", text="ERASED-DIAGNOSIS-4", conversation="c-1", role="user",
                                     ts=1700000030)])
    vault.forget(record=ids["forgotten"])
    vault.forget(key="user/pet")
    vault.reject([vault.fact("user/guess").proposed[0].id])
    vault.erase([erased.records[0]])
    return ids


def read_all(root: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file())


def validator(path: Path):
    jsonschema = pytest.importorskip("jsonschema")
    schema = json.loads(path.read_text())
    return jsonschema.Draft202012Validator(schema)


def test_canonical_json_matches_portable_memory_vectors():
    vectors = json.loads((SCHEMAS / "portable-memory" / "canonical-json.vectors.json").read_text())["vectors"]
    assert vectors
    for v in vectors:
        try:
            out = canonical_json(v["input"])
        except (TypeError, ValueError):
            continue
        if "canonical" in v:
            assert out == v["canonical"], v["name"]
            assert hashlib.sha256(out.encode()).hexdigest() == v["sha256"], v["name"]


def test_jcs_matches_rfc8785_and_the_published_pam_checksum():
    assert _es_number(1e21) == "1e+21" and _es_number(1e-7) == "1e-7" and _es_number(0.000001) == "0.000001"
    assert _es_number(123456789012345680000.0) == "123456789012345680000" and _es_number(-0.0) == "0"
    assert jcs({"b": [1.0, "é", None], "a": True}) == '{"a":true,"b":[1,"é",null]}'.encode()
    store = json.loads((FIXTURES / "imports" / "pam-example" / "memory-store.json").read_text())
    memories = sorted(store["memories"], key=lambda m: m["id"])
    assert "sha256:" + hashlib.sha256(jcs(memories)).hexdigest() == store["integrity"]["checksum"]


def test_portable_memory_export_is_valid_complete_and_deterministic(new_vault, tmp_path):
    path, vault, _ = new_vault
    ids = build(vault)
    out = tmp_path / "export.mem"
    summary = run_export(vault, "portable-memory", str(out))
    assert summary["episode"] == 7 and summary["fact"] == 4
    data = read_all(out)
    for secret in SECRETS:
        assert secret.encode() not in data, secret
    # Checksums, manifest and bundle digest.
    manifest = json.loads((out / "manifest.json").read_text())
    assert (out / "manifest.json").read_text() == canonical_json(manifest)
    sums = (out / "CHECKSUMS").read_bytes()
    assert manifest["bundleDigest"] == hashlib.sha256(sums).hexdigest()
    for f in manifest["files"]:
        raw = (out / f["path"]).read_bytes()
        assert hashlib.sha256(raw).hexdigest() == f["sha256"] and len(raw) == f["bytes"]
        assert f"{f['sha256']}  {f['path']}".encode() in sums
    assert not (out / "manifest.sig").exists()
    # Every line against the published schema of its kind; canonical JSON, sorted.
    validator(SCHEMAS / "portable-memory" / "manifest.schema.json").validate(manifest)
    kinds = {"items/episode.jsonl": "episode", "items/fact.jsonl": "fact", "items/preference.jsonl": "preference",
             "items/procedure.jsonl": "procedure", "items/context.jsonl": "context",
             "audit/tombstones.jsonl": "tombstone"}
    lines: dict[str, list[dict]] = {}
    for rel, kind in kinds.items():
        text = (out / rel).read_text()
        assert text.endswith("\n")
        rows = text.splitlines()
        assert rows == sorted(rows)
        check = validator(SCHEMAS / "portable-memory" / f"{kind}.schema.json")
        lines[kind] = []
        for row in rows:
            obj = json.loads(row)
            assert canonical_json(obj) == row
            check.validate(obj)
            lines[kind].append(obj)
    episodes = {e["vmem"]["id"]: e for e in lines["episode"]}
    user_msg = next(e for e in episodes.values() if e["details"] == "I am moving to Lisbon in May.")
    assert user_msg["vmem"]["class"] == "user" and user_msg["vmem"]["effective_class"] == "user"
    original = next(r for r in vault.timeline() if r.text == "I am moving to Lisbon in May.")
    assert user_msg["vmem"]["compartment"] == "personal" and user_msg["vmem"]["writer"] == original.writer_id.hex()
    assert user_msg["vmem"]["id"] == original.id.hex() and user_msg["id"] == "ep_" + original.id.hex()
    assert user_msg["speaker"] == "user" and user_msg["contextID"] == "ctx_personal"
    assert user_msg["eventTime"] == "2023-11-14T22:13:21Z"
    employer = next(f for f in lines["fact"] if f["vmem"]["key"] == "user/employer")
    assert employer["vmem"]["class"] == "inferred" and employer["vmem"]["pending"] is True
    assert employer["confidence"] == 0.7 and employer["subject"] == "user" and employer["predicate"] == "employer"
    assert lines["preference"] == [{"key": "user/units", "value": "metric", "vmem": lines["preference"][0]["vmem"]}]
    assert lines["procedure"][0]["name"] == "assistant/tone" and lines["procedure"][0]["steps"] == ["Be brief."]
    targets = {t["targetID"] for t in lines["tombstone"]}
    assert "ep_" + ids["forgotten"].hex() in targets
    # The forgotten message, the deleted pet fact, the rejected guess (a superseded value is history, not deleted).
    assert len(lines["tombstone"]) == 3
    assert all(t["op"] == "delete" and "reason" in t for t in lines["tombstone"])
    # Deterministic: the same state gives the same bytes.
    again = tmp_path / "again.mem"
    run_export(vault, "portable-memory", str(again))
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == \
        {p.relative_to(again): p.read_bytes() for p in again.rglob("*") if p.is_file()}
    from camillo.errors import UsageError

    with pytest.raises(UsageError, match="not empty"):
        run_export(vault, "portable-memory", str(out))



def _messages_and_peak(vault, kind: str, out, conversation) -> tuple[dict, int]:
    """3,000 messages of 1 KB (``conversation(i)`` gives each one's) appended, then exported as
    ``kind`` to ``out``: the summary, and the most the export allocated at once (tracemalloc)."""
    import tracemalloc

    for start in range(0, 3000, 500):
        vault.append([NewRecord(type="message", text=f"message {i} " + "words " * 170, conversation=conversation(i),
                                role="user") for i in range(start, start + 500)])
    tracemalloc.start()
    try:
        summary = run_export(vault, kind, str(out))
        return summary, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_portable_memory_export_holds_a_page_of_records_not_the_vault(new_vault, tmp_path, monkeypatch):
    """The episodes are read a page of records at a time and their lines sorted on disk (a temporary
    database in the export's folder, gone afterwards): with 3,000 messages of 1 KB, what the export
    allocates at its peak is about one page, not the vault (100,000 records held 974 MiB)."""
    from camillo import exporters

    path, vault, _ = new_vault
    monkeypatch.setattr(exporters, "PAGE", 100)
    monkeypatch.setattr(exporters, "RUN_BYTES", 512 * 1024)  # (what it holds of its lines: one run)
    out = tmp_path / "export.mem"
    summary, peak = _messages_and_peak(vault, "portable-memory", out, lambda i: "c")
    assert summary["episode"] == 3000
    assert peak < 2_500_000, f"the export allocated {peak} bytes at once"
    lines = (out / "items" / "episode.jsonl").read_text().splitlines()
    assert len(lines) == 3000 and lines == sorted(lines)
    assert sorted(p.name for p in out.iterdir()) == ["CHECKSUMS", "items", "manifest.json"]  # (no sorting left)


def test_a_pam_export_holds_a_conversation_not_the_vault(new_vault, tmp_path, monkeypatch):
    """A PAM export reads the notes a page at a time to find the conversations, then each
    conversation's messages for its file and lets them go: with 3,000 messages of 1 KB in 30
    conversations (and 50 without one), what it allocates at its peak is about one conversation, not
    the vault (100,000 records held 439 MiB)."""
    from camillo import exporters

    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text=f"loose {i}", role="user") for i in range(50)])
    monkeypatch.setattr(exporters, "PAGE", 100)
    out = tmp_path / "pam"
    summary, peak = _messages_and_peak(vault, "pam", out, lambda i: f"c{i % 30}")
    assert summary["conversations"] == 31
    assert peak < 2_500_000, f"the export allocated {peak} bytes at once"
    files = sorted((out / "conversations").iterdir())
    counts = sorted(len(json.loads(f.read_text())["messages"]) for f in files)
    assert counts == [50] + [100] * 30


@pytest.mark.parametrize("kind", ["pam", "portable-memory"])
def test_an_export_of_many_facts_holds_a_page_of_them_not_every_fact(new_vault, tmp_path, monkeypatch, kind):
    """The keyed records are read a page at a time (their ids from the facts' rows, not every fact's
    history), and PAM's memories wait for memory-store.json in the export's temporary database: with
    1,500 facts of 1 KB (500 of them with an older value too) and 250 events, what the export allocates
    at its peak is about one page, not every fact (57.6 MB for PAM and 34.1 MB for Portable Memory with
    twice as many, before)."""
    import tracemalloc

    from camillo import exporters

    path, vault, _ = new_vault
    for start in range(0, 1500, 500):
        vault.append([NewRecord(type="fact", key=f"user/k{i}", value=f"old {i} " + "words " * 170)
                      for i in range(start, start + 500) if i % 3 == 0])
        vault.append([NewRecord(type="fact", key=f"user/k{i}", value=f"value {i} " + "words " * 170)
                      for i in range(start, start + 500)])
    vault.append([NewRecord(type="event", text=f"event {i} " + "words " * 170) for i in range(250)])
    monkeypatch.setattr(exporters, "PAGE", 100)
    monkeypatch.setattr(exporters, "RUN_BYTES", 512 * 1024)  # (what Portable Memory holds of its lines: one run)
    out = tmp_path / kind
    tracemalloc.start()
    try:
        summary = run_export(vault, kind, str(out))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2_500_000, f"the export allocated {peak} bytes at once"
    if kind == "pam":
        assert summary["memories"] == 1750
        store = json.loads((out / "memory-store.json").read_text())
        ids = [m["id"] for m in store["memories"]]
        assert len(ids) == 1750 and ids == sorted(ids) and store["integrity"]["total_memories"] == 1750
        assert store["integrity"]["checksum"] == "sha256:" + hashlib.sha256(jcs(store["memories"])).hexdigest()
        facts = [m["content"] for m in store["memories"] if m["type"] == "fact"]
        assert len(facts) == 1500 and all(c.startswith("value ") for c in facts)  # the values, not the old ones
    else:
        assert summary["fact"] == 1500 and summary["episode"] == 250
        lines = (out / "items" / "fact.jsonl").read_text().splitlines()
        assert len(lines) == 1500 and lines == sorted(lines) and all('"object":"value ' in ln for ln in lines)
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # (no temporary database left)


@pytest.mark.parametrize("kind", ["pam", "portable-memory"])
def test_an_export_reads_the_notes_page_after_page_not_every_id_first(new_vault, tmp_path, monkeypatch, kind):
    """The notes are read a page after the last record of the one before (Vault.timeline after a record),
    never by listing the whole timeline's ids first (a million ids held at once); a conversation's
    own ids (PAM's file of it) are listed, as it is written.  The same notes, in the same order."""
    from camillo import exporters

    path, vault, _ = new_vault
    vault.append([NewRecord(type="event", text=f"event {i}") for i in range(25)]
                 + [NewRecord(type="message", conversation="c", role="user", text=f"hello {i}") for i in range(5)])
    whole = [v.id for v in vault.timeline() if v.kind_name == "NOTE"]
    monkeypatch.setattr(exporters, "PAGE", 4)
    assert [v.id for v in exporters.visible_notes(vault)] == whole
    real = Vault.timeline_ids

    def timeline_ids(self, **filters):
        assert filters.get("conversation") is not None, "every id of the timeline listed at once"
        return real(self, **filters)

    monkeypatch.setattr(Vault, "timeline_ids", timeline_ids)
    summary = run_export(vault, kind, str(tmp_path / kind))
    assert summary.get("memories", summary.get("episode")) == (25 if kind == "pam" else 30)  # (PM: messages too)


def test_sorted_lines_merge_runs_written_in_the_exports_folder_and_leave_nothing(tmp_path, monkeypatch):
    """The lines an export sorts are sorted in runs in memory, each run written to a temporary file in
    the export's folder and merged at the end: the file is every line once, in the order ``sorted``
    gives (UTF-8 included), and no run is left.  (A sort in a temporary SQLite database spilled the
    plaintext to /var/tmp, outside the export's folder.)"""
    import random

    from camillo import exporters

    monkeypatch.setattr(exporters, "RUN_BYTES", 2000)
    rng = random.Random(5)
    lines = [canonical_json({"id": rng.randrange(10**6), "t": rng.choice(["é", "z", "a", "日本", "\n"]) * rng.randrange(9)})
             for _ in range(400)] + ['{"same":1}'] * 3
    rng.shuffle(lines)
    seen: list[str] = []
    real = exporters.tempfile.mkstemp

    def mkstemp(**kw):
        fd, path = real(**kw)
        seen.append(path)
        return fd, path

    monkeypatch.setattr(exporters.tempfile, "mkstemp", mkstemp)
    with exporters.SortedLines(str(tmp_path)) as sorter:
        for line in lines:
            sorter.add(line)
        entry = sorter.write(str(tmp_path), "items/x.jsonl")
    data = (tmp_path / "items" / "x.jsonl").read_bytes()
    assert data.decode("utf-8").splitlines() == sorted(lines)
    assert entry == {"bytes": len(data), "path": "items/x.jsonl", "sha256": hashlib.sha256(data).hexdigest()}
    assert len(seen) > 10 and all(os.path.dirname(p) == str(tmp_path) for p in seen)  # (runs, in its folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["items"]
    with pytest.raises(ValueError, match="newline"):
        exporters.SortedLines(str(tmp_path)).add("two\nlines")


def test_the_forgotten_records_are_read_from_the_hidden_rows_alone(new_vault, monkeypatch):
    """What an export's tombstones (and the desktop's forgotten list) are made from: the hidden rows,
    found by their index, not a view of every record of the timeline, twice."""
    from camillo import state as state_module

    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text=f"m{i}") for i in range(50)])
    gone = vault.timeline()[:3]
    for v in gone:
        vault.forget(record=v.id)
    asked: list[int] = []
    real = state_module.State.records

    def counted(self, ids):
        ids = list(ids)
        asked.append(len(ids))
        return real(self, ids)

    monkeypatch.setattr(state_module.State, "records", counted)
    forgotten = vault.forgotten()
    assert sorted(v.id for v, _ in forgotten) == sorted(v.id for v in gone)
    assert all(when is not None for _, when in forgotten)
    assert sum(asked) <= 3, f"views of {sum(asked)} records made for 3 forgotten ones"


def test_pam_export_is_valid_complete_and_deterministic(new_vault, tmp_path):
    path, vault, _ = new_vault
    build(vault)
    out = tmp_path / "pam"
    summary = run_export(vault, "pam", str(out))
    data = read_all(out)
    for secret in SECRETS:
        assert secret.encode() not in data, secret
    store = json.loads((out / "memory-store.json").read_text())
    validator(SCHEMAS / "pam" / "portable-ai-memory.schema.json").validate(store)
    check_conv = validator(SCHEMAS / "pam" / "portable-ai-memory-conversation.schema.json")
    for entry in store["conversations_index"]:
        check_conv.validate(json.loads((out / entry["storage"]["ref"]).read_text()))
    assert summary == {"format": "pam", "out": str(out), "memories": 8, "conversations": 2}
    assert store["integrity"]["checksum"] == "sha256:" + hashlib.sha256(
        jcs(sorted(store["memories"], key=lambda m: m["id"]))).hexdigest()
    assert store["owner"]["id"] == vault.vault_id.hex()
    mems = {m["metadata"]["vmem"].get("key") or m["metadata"]["vmem"]["type"]: m for m in store["memories"]}
    assert mems["user/city"]["provenance"]["extraction_method"] == "explicit_user_input"
    assert mems["user/employer"]["provenance"]["extraction_method"] == "llm_inference"
    assert mems["user/units"]["type"] == "preference" and mems["assistant/tone"]["type"] == "instruction"
    assert mems["event"]["type"] == "context"
    assert mems["attachment"]["type"] == "custom" and mems["attachment"]["custom_type"] == "attachment"
    assert mems["user/diet"]["metadata"]["vmem"]["value"] == {"since": 2019, "vegetarian": True}
    conv = json.loads((out / "conversations" / f"conv-{hashlib.sha256(b'c-1').hexdigest()[:16]}.json").read_text())
    assert [(m["role"], m["content"]["text"]) for m in conv["messages"]] == [
        ("user", "I am moving to Lisbon in May."), ("assistant", "Congratulations! Need a checklist?"),
        ("tool", "weather: sunny")]
    assert conv["title"] == "Moving to Lisbon" and conv["provider"]["conversation_id"] == "c-1"
    again = tmp_path / "pam2"
    run_export(vault, "pam", str(again))
    assert read_all(out) == read_all(again)


def _state(vault: Vault) -> tuple[set, dict, dict]:
    messages = {(r.conversation, r.role, r.text) for r in vault.timeline() if r.type == "message"}
    # a value, or what is proposed for a key without one (imported keyed records come back as proposals)
    shown = {f.key: f.current if f.current is not None else f.proposed[0] for f in vault.facts() if f.status != "deleted"}
    facts = {k: (r.type, r.value) for k, r in shown.items()}
    notes = {(r.type, r.text, json.dumps(r.value, sort_keys=True)) for r in vault.timeline()
             if r.type in ("event", "attachment", "conversation")}
    return messages, facts, notes


@pytest.mark.parametrize("fmt", ["portable-memory", "pam"])
def test_round_trip_brings_back_the_same_memory(new_vault, tmp_path, fmt):
    path, vault, _ = new_vault
    build(vault)
    out = tmp_path / "out"
    run_export(vault, fmt, str(out))
    before = _state(vault)
    classes = {r.text: r.claimed_class for r in vault.timeline() if r.type == "message"}
    fresh, _ = Vault.create(str(tmp_path / "fresh"), PASSPHRASE)
    with fresh:
        report = run_import(fresh, fmt, str(out))
        assert report.imported > 0
        after = _state(fresh)
        assert after == before
        # Messages keep their class; keyed records come back at most observed.
        for r in fresh.timeline():
            if r.type == "message":
                assert r.claimed_class == classes[r.text]
        facts = {f.key: f for f in fresh.facts()}
        # ... so every one waits in the inbox as a proposal (no value until the user confirms it)
        assert all(f.status == "pending" and f.current is None for f in facts.values())
        assert facts["user/city"].proposed[0].claimed_class == Authority.OBSERVED
        assert facts["user/employer"].proposed[0].claimed_class == Authority.INFERRED
        assert fresh.fact("user/shoe_size").proposed[0].value == 43
        assert run_import(fresh, fmt, str(out)).imported == 0


def test_cli_export_both_formats(new_vault, tmp_path):
    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="hello", role="user", conversation="c")])
    vault.lock()
    env = dict(os.environ, CAMILLO_PASSPHRASE=PASSPHRASE)
    for fmt in ("portable-memory", "pam"):
        out = tmp_path / fmt
        proc = subprocess.run([sys.executable, "-m", "camillo.cli", "export", fmt, path, str(out), "--json"],
                              capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["format"] == fmt
    assert (tmp_path / "portable-memory" / "manifest.json").exists()
    assert (tmp_path / "pam" / "memory-store.json").exists()
    proc = subprocess.run([sys.executable, "-m", "camillo.cli", "export", "pam", path, str(tmp_path / "pam")],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 2 and "not empty" in proc.stderr


def test_vmem_info_is_a_selection_of_the_records_json(new_vault):
    """The exporters' provenance is derived from RecordView.to_json, the one JSON view of a record."""
    from camillo.exporters import vmem_info

    _, vault, _ = new_vault
    build(vault)
    vault.append([NewRecord(type="fact", key="user/blob", value=b"\x00raw"),
                  NewRecord(type="com.example/list", value=[1, "two", b"3"]),
                  NewRecord(type="com.example/map", value={"text": "t", "n": 1})])
    own = {"title", "conflict", "pending", "sources", "value"}
    for v in vault.timeline(include_hidden=True):
        j = v.to_json()
        for status in (None, "conflict", "pending"):
            info = vmem_info(v, status)
            assert {k: x for k, x in info.items() if k not in own} == {
                k: j[k] for k in ("id", "writer", "writer_name", "compartment", "class", "effective_class", "type",
                                  "key", "role", "conversation") if j.get(k) is not None}
            assert info.get("sources", []) == sorted(j.get("sources", []))
            if "value" in info:
                assert info["value"] == j["value"]
            assert info.get("conflict", False) is (status == "conflict")
    values = {v.key or v.type: vmem_info(v).get("value") for v in vault.timeline()}
    assert values["user/blob"] == {"bytes": b"\x00raw".hex()}
    assert values["com.example/list"] == [1, "two", {"bytes": "33"}]
    assert values["com.example/map"] == {"text": "t", "n": 1}  # not only text: the value travels
    assert values["user/city"] is None  # a text value is the target's own text


# ---------------------------------------------------------------------------------------------- the formats' own tools


def test_pam_export_passes_the_official_sdk_validator(new_vault, tmp_path):
    """The PAM SDK (PyPI ``portable-ai-memory``) loads every file of the export and its deep
    validator (content hashes, the integrity checksum over the memories as the SDK reads them,
    cross-references in both directions, temporal order, the conversations' message DAG) finds no
    error and no warning."""
    pam = pytest.importorskip("portable_ai_memory")
    _, vault, _ = new_vault
    build(vault)
    vault.append([NewRecord(type="decision", text="Take the flat in Alfama.", conversation="c-1", ts=1700000040),
                  NewRecord(type="event", text="Viewing at 10:00.", conversation="c-gone", ts=1700000041)])
    # a file attached to a message travels with it: PAM's message attachments, the bytes in the export
    photo = bytes(range(256)) * 20
    message = next(r for r in vault.timeline(conversation="c-1") if r.type == "message")
    vault.attach([photo], name="flat.jpg", media_type="image/jpeg", of=message.id)
    out = tmp_path / "pam"
    run_export(vault, "pam", str(out))
    store = pam.load(out / "memory-store.json")
    result = pam.validate_memory_store(store)
    assert result.is_valid and not result.issues, str(result)
    conversations = sorted((out / "conversations").glob("*.json"))
    assert len(conversations) == len(store.conversations_index) == 2
    for path in conversations:
        checked = pam.validate_conversation(pam.load(path))
        assert checked.is_valid and not checked.issues, f"{path.name}: {checked}"
    msgs = [m for path in conversations for m in json.loads(path.read_text())["messages"]]
    (carrier,) = [m for m in msgs if m.get("attachments")]
    assert carrier["id"] == "msg-" + message.id.hex()
    (att,) = carrier["attachments"]
    assert (att["type"], att["name"], att["mime_type"], att["size_bytes"]) == ("image", "flat.jpg", "image/jpeg",
                                                                               len(photo))
    assert (out / att["ref"]).read_bytes() == photo
    # The checksum is the SDK's own, over the memories as it reads them back.
    memories = [m.model_dump(mode="json", by_alias=True, exclude_none=True) for m in store.memories]
    assert pam.compute_integrity_checksum(memories) == store.integrity.checksum
    # The decision made in conversation c-1 is listed by it, both ways; the event of a conversation that is
    # not exported names none.
    raw = json.loads((out / "memory-store.json").read_text())
    decision = next(m for m in raw["memories"] if m["content"] == "Take the flat in Alfama.")
    entry = next(e for e in raw["conversations_index"] if e["id"] == decision["provenance"]["conversation_ref"])
    assert entry["derived_memories"] == [decision["id"]]
    viewing = next(m for m in raw["memories"] if m["content"] == "Viewing at 10:00.")
    assert "conversation_ref" not in viewing["provenance"] and viewing["metadata"]["vmem"]["conversation"] == "c-gone"
    # And the export imports back unchanged (our reader checks the same checksum).
    fresh, _ = Vault.create(str(tmp_path / "fresh"), PASSPHRASE)
    with fresh:
        assert run_import(fresh, "pam", str(out)).imported > 0


def test_portable_memory_export_passes_mem_validate(new_vault, tmp_path):
    """MacPaw's reference implementation (PyPI ``portable-memory``): ``mem validate`` (the L0
    conformance check: manifest, checksums, byte counts, no unlisted files, every known-kind line
    decodes) passes, and its bundle importer reads the export into its in-memory store."""
    pytest.importorskip("portable_memory")
    from portable_memory.importer import BundleImporter
    from portable_memory.inmemory import InMemoryStore
    from portable_memory.validator import BundleValidator

    _, vault, _ = new_vault
    build(vault)
    out = tmp_path / "export.mem"
    summary = run_export(vault, "portable-memory", str(out))
    proc = subprocess.run([sys.executable, "-c", "import sys; from portable_memory.cli import main; sys.exit(main())",
                           "validate", str(out)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("OK") and "format 1.1.0" in proc.stdout
    result = BundleValidator().validate(out)
    assert result.ok, result.issues
    store = InMemoryStore()
    report = BundleImporter().import_bundle(store, out, reembed=False)
    assert len(store.export_episodes()) == summary["episode"] == 7
    assert report.tombstones_applied == summary["tombstone"] == 3
    # A bundle someone altered after the export fails the same tool.
    (out / "items" / "fact.jsonl").write_text((out / "items" / "fact.jsonl").read_text().replace("Lisbon", "Porto"))
    bad = subprocess.run([sys.executable, "-c", "import sys; from portable_memory.cli import main; sys.exit(main())",
                          "validate", str(out)], capture_output=True, text=True, timeout=120)
    assert bad.returncode != 0 and "checksum mismatch" in bad.stdout + bad.stderr
