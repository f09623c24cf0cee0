"""Importers: ChatGPT and Claude exports, a real VaultMem vault, Portable Memory bundles and PAM
exports land as the documented records (authority, inbox, provenance), importing twice adds
nothing, and hostile sources (cut short, wrong shape, too deep, ZIP bombs, escaping names, huge
strings) end in ImportFailed with the vault untouched.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
import zipfile
from pathlib import Path

import pytest
from camillo import Authority, Vault
from camillo.exporters import canonical_json, jcs
from camillo.importers import ImportFailed, run_import, safety

from .helpers import snapshot

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "imports"
PASSPHRASE = "correct horse battery staple"


def by_import(vault: Vault) -> dict[str, object]:
    return {r.meta.get("import"): r for r in vault.timeline() if r.meta.get("import")}


def zip_dir(src: Path, out: Path, prefix: str = "") -> Path:
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(src.rglob("*")):
            if p.is_file():
                zf.write(p, prefix + p.relative_to(src).as_posix())
    return out


def refused(vault_path: str, vault: Vault, kind: str, source: str, match: str, **kw) -> ImportFailed:
    before = snapshot(vault_path)
    count = len(vault.timeline(include_hidden=True))
    with pytest.raises(ImportFailed, match=match) as info:
        run_import(vault, kind, source, **kw)
    assert snapshot(vault_path) == before, "a refused import changed the vault"
    assert len(vault.timeline(include_hidden=True)) == count
    return info.value


# ---------------------------------------------------------------------------------------------- ChatGPT


@pytest.mark.parametrize("as_zip", [False, True])
def test_chatgpt_export_lands_as_documented(new_vault, tmp_path, as_zip):
    path, vault, _ = new_vault
    source = str(FIX / "chatgpt" / "conversations.json")
    if as_zip:
        source = str(zip_dir(FIX / "chatgpt", tmp_path / "chatgpt-export.zip"))
    report = run_import(vault, "chatgpt", source)
    recs = by_import(vault)
    texts = {r.text for r in vault.timeline()}

    # Conversation A: the branch last shown, in order; the regeneration, reasoning, hidden turns gone.
    conv_a = vault.timeline(conversation="conv-a")
    assert conv_a[0].type == "conversation" and conv_a[0].text == "Weekend in Porto"
    assert [r.text for r in conv_a[1:]] == [
        "Plan a weekend in Porto for me.",
        "Day 1: Ribeira and a port wine cellar. Day 2: Serralves.",
        "[image: file-service://file-TICKET123, not in the export]\nHere is my train ticket, what time do I leave?",
        "print('08:15')",
        "08:15",
        "Porto guide\nhttps://example.org/porto\nPorto is on the Douro river.",
        "Your train leaves at 08:15. Enjoy Porto!",
    ]
    assert not any("OLD REGENERATED" in t or "SECRET REASONING" in t or "Model set context" in t for t in texts)
    assert "Thought for 2 seconds" not in texts
    # Authorities by author and content type.
    assert recs["chatgpt:m-u1"].claimed_class == Authority.USER
    assert recs["chatgpt:m-a1b"].claimed_class == Authority.INFERRED
    assert recs["chatgpt:m-a2"].claimed_class == Authority.INFERRED and recs["chatgpt:m-a2"].meta["recipient"] == "python"
    assert recs["chatgpt:m-t2"].claimed_class == Authority.EXTERNAL and recs["chatgpt:m-t2"].role == "tool"
    assert recs["chatgpt:m-q"].claimed_class == Authority.EXTERNAL and recs["chatgpt:m-q"].meta["url"]
    assert json.loads(recs["chatgpt:m-u2"].meta["files"]) == [
        {"kind": "image", "ref": "file-service://file-TICKET123", "missing": True, "origin": "upload", "size": 1234}]
    assert recs["chatgpt:m-u2"].meta["attachments"] == 1
    assert report.files == {"image": 1} and report.files_missing == 1
    # Provenance and time.
    u1 = recs["chatgpt:m-u1"]
    assert u1.meta["source"] == "conversations.json" and u1.meta["original_id"] == "m-u1"
    assert u1.ts == 1710000010 and u1.conversation == "conv-a"
    assert recs["chatgpt:m-b-u1"].ts == 1700000000  # no create_time: the conversation's
    # What ChatGPT remembered waits in the inbox; the older snapshot lost to the newer one.
    inbox = {v.key: v for v in vault.inbox()}
    memory_keys = sorted(k for k in inbox if k.startswith("user/chatgpt_memory_"))
    assert len(memory_keys) == 3
    values = {inbox[k].value for k in memory_keys}
    assert values == {"Sam likes port wine tasting.", "Sam is learning Portuguese.", "Sam prefers the metric system."}
    assert "Sam has a cat named Olderthan." not in texts
    bio = next(inbox[k] for k in memory_keys if inbox[k].value == "Sam likes port wine tasting.")
    assert bio.meta["from_message"] == "m-bio" and bio.claimed_class == Authority.INFERRED
    assert bio.key == "user/chatgpt_memory_" + hashlib.sha256(b"Sam likes port wine tasting.").hexdigest()[:8]
    learning = next(inbox[k] for k in memory_keys if inbox[k].value == "Sam is learning Portuguese.")
    assert learning.meta["saved_on"] == "2024-03-02"
    assert inbox["user/custom_instructions"].value == "Answer briefly. Use metric units."
    assert inbox["user/custom_instructions"].type == "instruction"
    assert inbox["user/custom_instructions"].claimed_class == Authority.OBSERVED
    assert inbox["user/chatgpt_profile"].value == "Preferred name: Sam\nRole: data engineer in Lisbon"
    assert inbox["user/chatgpt_profile"].type == "preference"
    assert report.proposals == 5
    reasons = "\n".join(report.reasons)
    assert "1 regenerated or edited branch(es) left out" in reasons
    assert "reasoning block(s)" in reasons and "hidden or empty system turn(s)" in reasons
    assert "1 item(s) that are not conversations" in reasons
    # Importing again adds nothing.
    again = run_import(vault, "chatgpt", source)
    assert again.imported == 0 and again.skipped >= report.imported


def test_chatgpt_single_conversation_object_and_missing_current_node(new_vault, tmp_path):
    _, vault, _ = new_vault
    conv = json.loads((FIX / "chatgpt" / "conversations.json").read_text())[1]
    del conv["current_node"]
    src = tmp_path / "one.json"
    src.write_text(json.dumps(conv))
    run_import(vault, "chatgpt", str(src))
    assert [r.text for r in vault.timeline(conversation="conv-b")][1:] == ["hello there", "Hi Sam!"]


SPLIT = FIX / "chatgpt-split" / "export"
GARDEN, VOICE, CATS = ("68b9a0c1-0000-8000-8000-00000000a00" + c for c in "124")


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def split_parts(tmp_path: Path, *, both: bool = True) -> Path:
    """The split export as a large export arrives: two ZIP parts in one folder, the first holding the
    manifest, the conversations and some files, the second the rest."""
    folder = tmp_path / "parts"
    folder.mkdir(parents=True)
    first = {"export_manifest.json", "conversations-000.json", "conversations-001.json", "user.json", "chat.html",
             "conversation_asset_file_names.json", "file-Gard3n-basil.jpg"}
    files = sorted(p for p in SPLIT.rglob("*") if p.is_file())
    for name, members in (("export-part-0001.zip", [p for p in files if p.name in first]),
                          ("export-part-0002.zip", [p for p in files if p.name not in first])):
        if name.endswith("0002.zip") and not both:
            continue
        with zipfile.ZipFile(folder / name, "w", zipfile.ZIP_DEFLATED) as zf:
            for p in members:
                zf.write(p, p.relative_to(SPLIT).as_posix())
    return folder


def check_split_export(vault: Vault, report) -> None:
    recs = by_import(vault)
    # The garden conversation: the title first although created after its first message; the branch last shown.
    garden = vault.timeline(conversation=GARDEN)
    assert [(r.type, r.role, r.claimed_class, r.text) for r in garden] == [
        ("conversation", None, Authority.INFERRED, "Basil with yellow leaves"),
        ("message", "user", Authority.USER,
         "[file: watering.pdf]\n[image: basil.jpg]\nWhat is wrong with this plant?"),
        ("message", "assistant", Authority.INFERRED,
         "Yellow leaves usually mean too much water [1]. Let the soil dry between waterings."),
        ("message", "user", Authority.USER,
         "[image: sediment://file_000000004d15, not in the export]\nAnd this one, a week later?"),
        ("message", "assistant", Authority.INFERRED, "It is recovering: new leaves are green."),
    ]
    assert garden[0].ts == garden[1].ts == 1757000000  # the title's own time is 1757000001.2
    assert garden[0].meta["original_ms"] == 1757000001200 and garden[1].meta["original_ms"] == 1757000000800
    assert garden[2].meta["original_ms"] == 1757000005250
    u1 = recs["chatgpt:m-g-u1"]
    assert json.loads(u1.meta["files"]) == [
        {"kind": "file", "ref": "file-Notes9", "name": "watering.pdf", "media_type": "application/pdf",
         "member": "file-Notes9-watering.pdf", "size": (SPLIT / "file-Notes9-watering.pdf").stat().st_size,
         "sha256": sha(SPLIT / "file-Notes9-watering.pdf"), "origin": "upload"},
        {"kind": "image", "ref": "file-service://file-Gard3n", "name": "basil.jpg", "media_type": "image/jpeg",
         "member": "file-Gard3n-basil.jpg", "size": (SPLIT / "file-Gard3n-basil.jpg").stat().st_size,
         "sha256": sha(SPLIT / "file-Gard3n-basil.jpg"), "origin": "upload"}]
    assert u1.meta["attachments"] == 2 and u1.meta["source"] == "conversations-000.json"
    assert json.loads(recs["chatgpt:m-g-a1"].meta["citations"]) == [
        {"title": "Growing basil indoors", "url": "https://garden.example/basil"}]
    assert json.loads(recs["chatgpt:m-g-u2"].meta["files"])[0]["missing"] is True
    # Voice: the transcripts are the words said; the recordings are referenced; a late answer keeps its place.
    voice = vault.timeline(conversation=VOICE)
    assert [(r.role, r.text) for r in voice[1:]] == [
        ("user", "Remind me to buy stamps tomorrow.\n[audio: file_00000000a0d1-5a2b.wav]"),
        ("assistant", "Noted: stamps, tomorrow.\n[audio: file_00000000a0d2-7c1e.wav]")]
    assert voice[1].claimed_class == Authority.USER and voice[1].meta["voice"] is True
    assert voice[2].ts == voice[1].ts and voice[2].meta["original_ms"] < voice[1].meta["original_ms"]
    spoken = json.loads(voice[1].meta["files"])[0]
    assert spoken["member"] == "file_00000000a0d1.dat" and spoken["media_type"] == "audio/wav"
    assert spoken["sha256"] == sha(SPLIT / "file_00000000a0d1.dat")
    # No id, no current_node, no message ids: a derived id, the newest leaf, node ids; DALL·E's image and prompt.
    drawing = next(r for r in vault.timeline() if r.type == "conversation" and r.text == "Lighthouse drawing")
    assert drawing.conversation.startswith("derived-")
    thread = vault.timeline(conversation=drawing.conversation)
    assert [r.text for r in thread[1:]] == ["Draw a lighthouse at dusk.", '{"prompt": "a lighthouse at dusk"}',
                                            "[image: file_00000000da11-3b9f.webp]", "Here is your lighthouse."]
    dalle = recs["chatgpt:n-l-t1"]
    assert dalle.role == "tool" and dalle.claimed_class == Authority.EXTERNAL
    assert dalle.meta["prompt"] == "a lighthouse at dusk, oil painting"
    assert json.loads(dalle.meta["files"])[0]["origin"] == "generated"
    # The same conversation in both files: the later copy.
    assert [r.text for r in vault.timeline(conversation=CATS)][1:] == [
        "What is a good name for a cat?", "Miso.", "Thanks, Miso it is."]
    texts = "\n".join(r.text for r in vault.timeline(include_hidden=True))
    assert "OLD ANSWER" not in texts and "LOOPING MESSAGE" not in texts and "EARLIER LEAF" not in texts
    # The report: what came in, per kind; files left out by kind; nothing unknown dropped quietly.
    assert report.by_type == {"conversation": 4, "message": 13}
    # every file the export holds is stored, encrypted, as an attachment of its message; the one it lacks is not
    assert report.files_stored == {"image": 2, "audio": 2, "file": 1}
    assert report.files == {"image": 1} and report.files_missing == 1
    stored = {r.value["name"]: r for r in vault.timeline() if r.type == "attachment" and "sha256" in r.value}
    assert set(stored) >= {"basil.jpg", "watering.pdf"}
    for r in stored.values():
        assert vault.record(bytes.fromhex(r.value["of"])).type == "message"
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "saved"
            vault.save_attachment(r.id, str(out))  # the very bytes of the export's member, checked
            assert hashlib.sha256(out.read_bytes()).hexdigest() == r.value["sha256"]
            assert out.stat().st_size == r.value["size"]
    assert report.unknown == {"ChatGPT content type 'app_pairing_content'": 1, "ChatGPT part 'mystery_part'": 1,
                              "file 'tasks.json'": 1}
    lines = "\n".join(report.lines())
    assert "stored, encrypted, as attachments of their messages: 2 audio files, 1 file, 2 images" in lines
    assert "left out: 1 image (not in the export" in lines
    assert "1 file(s) a message refers to are not in the export" in lines
    reasons = "\n".join(report.reasons)
    for expected in ("its messages link in a circle (node 'n-x' is its own ancestor); nothing of it was imported",
                     "it has no id: imported as derived-", "1 conversation(s) appear in more than one file",
                     "user.json not imported (account details)", "chat.html not imported",
                     "1 file(s) in the export that no imported message refers to were not imported (1 image)",
                     "conversation 'Basil with yellow leaves': 1 regenerated or edited branch(es) left out"):
        assert expected in reasons, expected


@pytest.mark.parametrize("layout", ["folder", "zip", "parts"])
def test_chatgpt_split_export_lands_in_order_with_its_files(new_vault, tmp_path, layout):
    _, vault, _ = new_vault
    source = {"folder": lambda: SPLIT, "zip": lambda: zip_dir(SPLIT, tmp_path / "export.zip"),
              "parts": lambda: split_parts(tmp_path)}[layout]()
    report = run_import(vault, "chatgpt", str(source))
    check_split_export(vault, report)
    assert not any("manifest lists" in r for r in report.reasons)
    again = run_import(vault, "chatgpt", str(source))
    assert again.imported == 0 and again.by_type == {}


def test_chatgpt_export_part_missing_is_reported(new_vault, tmp_path):
    _, vault, _ = new_vault
    report = run_import(vault, "chatgpt", str(split_parts(tmp_path, both=False)))
    assert any("file(s) the export's manifest lists are not here (a part of the export not downloaded?)" in r
               for r in report.reasons)
    # The files of the missing part: referenced, and said to be missing.
    assert report.files_missing == 1 + 4 and report.imported == 17
    again = run_import(vault, "chatgpt", str(split_parts(tmp_path / "later")))
    assert again.imported == 0, "the complete export adds no record: the references were kept, not the files"


def test_a_file_too_large_to_fingerprint_is_referenced_by_size(new_vault, tmp_path, monkeypatch):
    _, vault, _ = new_vault
    export = tmp_path / "export"
    shutil.copytree(SPLIT, export)
    big = export / "file-Gard3n-basil.jpg"
    with open(big, "r+b") as fh:
        fh.truncate(10 * 1024**3)  # a sparse 10 GB file: never read
    report = run_import(vault, "chatgpt", str(export))
    ref = json.loads(by_import(vault)["chatgpt:m-g-u1"].meta["files"])[1]
    assert ref["size"] == 10 * 1024**3 and "sha256" not in ref and ref["member"] == "file-Gard3n-basil.jpg"
    assert report.files_unhashed == 1
    assert "1 file(s) too large to fingerprint: referenced by name and size only" in "\n".join(report.lines())
    # ... and not stored: the vault does not take 10 GB from an export line it could not check
    sizes = [r.value.get("size") for r in vault.timeline() if r.type == "attachment" and isinstance(r.value, dict)]
    assert sizes and 10 * 1024**3 not in sizes, "the unfingerprinted file was stored"


# ---------------------------------------------------------------------------------------------- Claude


def test_claude_export_lands_as_documented(new_vault, tmp_path):
    _, vault, _ = new_vault
    source = str(zip_dir(FIX / "claude", tmp_path / "claude.zip", prefix="data-2025-02-03-10-00-00-batch-0000/"))
    report = run_import(vault, "claude", source)
    recs = by_import(vault)
    texts = "\n".join(r.text for r in vault.timeline(include_hidden=True))
    assert "HIDDEN THINKING" not in texts and "sam@example.org" not in texts
    assert recs["claude:conversation:cl-1"].text == "Garden"
    assert recs["claude:cm-1"].claimed_class == Authority.USER and recs["claude:cm-1"].role == "user"
    assert recs["claude:cm-1"].text == "[image: photo.jpg, not in the export]\n\nHow deep should I plant tomatoes?"
    assert json.loads(recs["claude:cm-1"].meta["files"]) == [
        {"kind": "image", "ref": "photo.jpg", "name": "photo.jpg", "media_type": "image/jpeg", "missing": True,
         "origin": "upload"}]
    assert report.files == {"image": 1} and report.files_missing == 1
    assert recs["claude:cm-2"].text == "Plant them about 2 cm deep."
    assert recs["claude:cm-2"].claimed_class == Authority.INFERRED
    use, result = recs["claude:cm-2:1"], recs["claude:cm-2:2"]
    assert use.claimed_class == Authority.EXTERNAL and use.meta["tool"] == "web_search" and use.role == "tool"
    assert use.text.startswith("[tool_use web_search]") and "tomato planting depth" in use.text
    assert result.text.startswith("[tool_result web_search]") and "https://example.org/tomatoes" in result.text
    att = recs["claude:cm-1:attachment:0"]
    assert att.type == "attachment" and att.claimed_class == Authority.EXTERNAL
    assert att.value == {"name": "notes.txt", "media_type": "text/plain", "text": "Bed A gets full sun.",
                         "conversation": "cl-1"}
    summary = next(r for r in vault.timeline() if r.meta.get("import", "").startswith("claude:summary:cl-1"))
    assert summary.type == "summary" and summary.claimed_class == Authority.INFERRED
    assert recs["claude:cm-3"].text == "Plain text only message"
    assert recs["claude:conversation:cl-2"].text == "(untitled)"
    project = next(r for r in vault.timeline() if r.meta.get("import", "").startswith("claude:project:pr-1"))
    assert project.type == "summary" and project.claimed_class == Authority.USER
    assert "Answer in metric units." in project.text and "Planning what grows where." in project.text
    doc = recs["claude:doc:doc-1"]
    assert doc.type == "attachment" and doc.value["name"] == "beds.md" and "Bed A: tomatoes" in doc.value["text"]
    inbox = {v.key: v for v in vault.inbox()}
    memories = {v.value for k, v in inbox.items() if k.startswith("user/claude_memory_")}
    assert memories == {"Sam is a data engineer at a logistics company.", "Sam grows tomatoes on a balcony.",
                        "Sam lives in Lisbon.", "Sam prefers short answers."}
    pkey = "project/claude_" + hashlib.sha256(b"pr-1").hexdigest()[:8]
    assert inbox[pkey].value.startswith("Purpose: plan the balcony garden.")
    assert inbox[pkey].meta["project"] == "Balcony garden"
    assert all(v.claimed_class == Authority.INFERRED for k, v in inbox.items())
    assert report.proposals == 5
    assert any("1 thinking block(s) left out" in r for r in report.reasons)
    assert any("1 empty message(s) left out" in r for r in report.reasons)
    assert run_import(vault, "claude", source).imported == 0
    # The unzipped folder is the same export: nothing new either.
    assert run_import(vault, "claude", str(FIX / "claude")).imported == 0


CLAUDE26 = FIX / "claude-2026" / "export"
TRIP, LEASE = "c1000000-0000-4000-8000-000000000001", "c2000000-0000-4000-8000-000000000002"


def claude_downloads(tmp_path: Path) -> Path:
    """The export as Claude now sends a large one: several downloads saved in one folder."""
    folder = tmp_path / "downloads"
    folder.mkdir()
    convs = [json.loads(p.read_text()) for p in sorted((CLAUDE26 / "conversations").glob("*.json"))]
    with zipfile.ZipFile(folder / "conversations-000.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("conversations.json", json.dumps(convs))
    with zipfile.ZipFile(folder / "projects-000.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        for p in (CLAUDE26 / "projects").glob("*.json"):
            zf.write(p, f"projects/{p.name}")
    shutil.copy(CLAUDE26 / "memories.json", folder)
    shutil.copy(CLAUDE26 / "users.json", folder)
    (folder / "manifest-0a1b2c3d-2026-06-01-10-00-00.json").write_text(json.dumps(
        {"files": [{"name": n} for n in ("conversations-000.zip", "projects-000.zip", "memories.json", "users.json")]}))
    return folder


def check_claude_2026(vault: Vault, report) -> None:
    recs = by_import(vault)
    thread = vault.timeline(conversation=TRIP)
    assert [(r.type, r.role, r.claimed_class, r.text) for r in thread] == [
        ("conversation", None, Authority.USER, "Two days in Lisbon"),
        ("message", "user", Authority.USER, "[image: map.png, not in the export]\n\nPlan two days in Lisbon."),
        ("message", "assistant", Authority.INFERRED, "Let me check the weather first."),
        ("message", "tool", Authority.EXTERNAL, '[tool_use web_search] {"query": "Lisbon weather June"}'),
        ("message", "tool", Authority.EXTERNAL, "[tool_result web_search]\nLisbon in June — https://weather.example/lisbon"),
        ("message", "assistant", Authority.INFERRED, "Sunny all week. Day 1: Alfama. Day 2: Belém."),
        ("message", "user", Authority.USER, "Make it three days, with a day trip to Sintra."),
        ("message", "assistant", Authority.INFERRED, "Day 3: Sintra and Cabo da Roca."),
        ("summary", "assistant", Authority.INFERRED, "Planning a short trip to Lisbon."),
    ]
    assert thread[6].meta["voice"] is True and thread[1].meta["original_ms"] == 1748772001500
    assert json.loads(thread[5].meta["citations"]) == [{"url": "https://weather.example/lisbon"}]
    assert thread[5].meta["import"] == "claude:m0000000-0000-4000-8000-000000000002:4"
    alternates = vault.timeline(conversation=TRIP + "#alternates")
    assert [(r.role, r.claimed_class, r.text) for r in alternates] == [
        ("user", Authority.OBSERVED, "EDITED AWAY: make it three days."),
        ("assistant", Authority.INFERRED, "OLD PLAN for three days."),
        ("assistant", Authority.INFERRED, "REGENERATED: Day 3: Sintra.")]
    assert {r.meta["alternate_of"] for r in alternates} == {TRIP}
    assert alternates[1].meta["parent"] == "m0000000-0000-4000-8000-000000000003"
    lease = vault.timeline(conversation=LEASE)
    assert [(r.type, r.text) for r in lease if r.type != "attachment"] == [
        ("conversation", "Reading a lease"),
        ("message", "[image: pasted image]\n\nIs the notice period fair?"),
        ("message", "Three months is common.\n\nCheck the renewal clause too.")]
    pasted = json.loads(next(r for r in lease if r.type == "message").meta["files"])[0]
    png = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDRsynthetic"
    assert pasted == {"kind": "image", "ref": "inline:d0000000-0000-4000-8000-000000000001/1", "name": "pasted image",
                      "media_type": "image/png", "size": len(png), "sha256": hashlib.sha256(png).hexdigest(),
                      "origin": "pasted", "inline": True}
    doc = recs["claude:d0000000-0000-4000-8000-000000000001:0"]
    assert doc.type == "attachment" and doc.claimed_class == Authority.EXTERNAL
    assert doc.value == {"name": "lease.txt", "media_type": "text/plain", "text": "Notice period: three months.",
                         "conversation": LEASE}
    assert recs["claude:d0000000-0000-4000-8000-000000000001:attachment:0"].value["media_type"] == "text/plain"
    texts = "\n".join(r.text for r in vault.timeline(include_hidden=True))
    assert "HIDDEN THINKING" not in texts and "SELF PARENT" not in texts and "sam@example.org" not in texts
    project = next(r for r in vault.timeline() if r.meta.get("import", "").startswith("claude:project:p1000000"))
    assert "Answer in metric units." in project.text and project.claimed_class == Authority.USER
    assert recs["claude:doc:q1000000-0000-4000-8000-000000000001"].value["name"] == "checklist.md"
    inbox = {v.value for v in vault.inbox()}
    assert {"Sam is moving to Lisbon in June.", "Sam prefers trains.", "Sam is learning Portuguese.",
            "Purpose: organise the move to Lisbon."} <= inbox
    assert report.by_type == {"attachment": 3, "conversation": 2, "fact": 4, "message": 12, "summary": 2}
    assert report.alternates == 3 and report.proposals == 4
    assert report.files == {"image": 2, "file": 1} and report.files_missing == 2
    assert report.unknown == {"Claude block 'flag'": 1, "Claude block 'mystery_block'": 1,
                              "Claude block 'web_widget'": 1}
    reasons = "\n".join(report.reasons)
    for expected in ("3 message(s) of edited or regenerated branches kept as alternates", "1 thinking block(s) left out",
                     "message 'e0000000-0000-4000-8000-000000000001' is its own ancestor); nothing of it was imported",
                     "users.json not imported (account details)"):
        assert expected in reasons, expected
    lines = "\n".join(report.lines())
    assert "3 message(s) of earlier or abandoned branches kept as alternates" in lines
    assert "left out: 2 images, 1 file (not in the export, or not readable" in lines and not report.files_stored


@pytest.mark.parametrize("layout", ["folder", "zip", "downloads"])
def test_claude_2026_export_lands_in_order_with_branches(new_vault, tmp_path, layout):
    _, vault, _ = new_vault
    source = {"folder": lambda: CLAUDE26, "zip": lambda: zip_dir(CLAUDE26, tmp_path / "claude.zip", "data-2026/"),
              "downloads": lambda: claude_downloads(tmp_path)}[layout]()
    report = run_import(vault, "claude", str(source))
    check_claude_2026(vault, report)
    if layout == "downloads":
        assert any("manifest-0a1b2c3d-2026-06-01-10-00-00.json not read" in r for r in report.reasons)
    assert run_import(vault, "claude", str(source)).imported == 0
    # Another layout of the same export: the same keys, nothing new.
    assert run_import(vault, "claude", str(CLAUDE26)).imported == 0


def test_claude_api_conversation_with_its_tree(new_vault, tmp_path):
    """One conversation as the API returns it (the whole tree and current_leaf_message_uuid), given alone."""
    _, vault, _ = new_vault
    one = tmp_path / "trip.json"
    shutil.copy(CLAUDE26 / "conversations" / f"{TRIP}.json", one)
    report = run_import(vault, "claude", str(one))
    assert [r.text for r in vault.timeline(conversation=TRIP)][-2:] == [
        "Day 3: Sintra and Cabo da Roca.", "Planning a short trip to Lisbon."]
    assert report.alternates == 3
    # Without current_leaf_message_uuid (the bulk export), the leaf created last is the current branch.
    conv = json.loads(one.read_text())
    del conv["current_leaf_message_uuid"]
    conv["chat_messages"][-1]["created_at"] = "2025-06-01T09:00:00.000000Z"  # the retry is now older
    conv["uuid"] = "c9000000-0000-4000-8000-000000000009"
    for m in conv["chat_messages"]:
        m["uuid"] = m["uuid"].replace("m0", "n0")
        if m["parent_message_uuid"]:
            m["parent_message_uuid"] = m["parent_message_uuid"].replace("m0", "n0")
    one.write_text(json.dumps(conv))
    run_import(vault, "claude", str(one))
    assert [r.text for r in vault.timeline(conversation=conv["uuid"]) if r.type == "message"][-1] == \
        "REGENERATED: Day 3: Sintra."


# ---------------------------------------------------------------------------------------------- VaultMem


VM_TEXTS = {
    "EPISODIC": "Yesterday I went hiking with Anna at Mount Tam and we saw a coyote near the trail.",
    "SEMANTIC": "The capital of Australia is Canberra.",
    "PERSONA": "I prefer dark roast coffee and I hate loud music.",
    "PROCEDURAL": "To deploy the app, first run the tests, then build the image and push it to the registry.",
}


@pytest.fixture
def vaultmem_vault(tmp_path):
    vaultmem = pytest.importorskip("vaultmem")
    from vaultmem import NullEmbedder, VaultSession

    folder = tmp_path / "vaultmem-vault"
    session = VaultSession.create(str(folder), "vaultmem pass", "alice", embedder=NullEmbedder())
    atoms = {}
    for kind, text in VM_TEXTS.items():
        atom = session.add(text)
        assert atom.type.value == kind, "vaultmem's classifier changed: pick other sample texts"
        atoms[kind] = atom.id
    session.close()
    # Our reader must agree with VaultMem's own on what the vault holds.
    again = VaultSession.open(str(folder), "vaultmem pass", embedder=NullEmbedder())
    assert again.atom_count == 4
    again.close()
    assert vaultmem.__name__ == "vaultmem"
    return folder, atoms


def test_vaultmem_vault_imports_with_its_passphrase(new_vault, vaultmem_vault):
    _, vault, _ = new_vault
    folder, atoms = vaultmem_vault
    report = run_import(vault, "vaultmem", str(folder), passphrase="vaultmem pass")
    assert report.imported == 4 and report.proposals == 0
    recs = by_import(vault)
    ep = recs[f"vaultmem:{atoms['EPISODIC']}"]
    assert ep.type == "event" and ep.kind_name == "NOTE" and ep.text == VM_TEXTS["EPISODIC"]
    for kind, typ in (("SEMANTIC", "fact"), ("PERSONA", "preference"), ("PROCEDURAL", "instruction")):
        r = recs[f"vaultmem:{atoms[kind]}"]
        assert r.type == typ and r.kind_name == "PUT" and r.value == VM_TEXTS[kind]
        assert r.key == "user/vaultmem_" + hashlib.sha256(atoms[kind].encode()).hexdigest()[:8]
        assert vault.fact(r.key).status == "ok"
    for r in recs.values():
        assert r.claimed_class == Authority.USER
        assert r.meta["granularity"] == "ATOM" and r.meta["data_class"] == "GENERAL"
        assert r.meta["confidence"] == "1.0" and r.meta["owner"] == "alice"
        assert r.ts == r.meta["original_ts"]
    assert recs[f"vaultmem:{atoms['PERSONA']}"].meta["vaultmem_type"] == "PERSONA"
    assert run_import(vault, "vaultmem", str(folder), passphrase="vaultmem pass").imported == 0


def test_vaultmem_wrong_passphrase_and_tampered_atom_import_nothing(new_vault, vaultmem_vault):
    path, vault, _ = new_vault
    folder, atoms = vaultmem_vault
    before_source = snapshot(folder)
    refused(path, vault, "vaultmem", str(folder), "wrong passphrase for the VaultMem vault", passphrase="not it")
    refused(path, vault, "vaultmem", str(folder), "needs its passphrase")
    atoms_file = folder / "current.atoms"
    data = bytearray(atoms_file.read_bytes())
    data[len(data) - 20] ^= 0x01  # inside the last atom's ciphertext or tag
    atoms_file.write_bytes(bytes(data))
    err = refused(path, vault, "vaultmem", str(folder), "fails authentication", passphrase="vaultmem pass")
    assert any(a in str(err) for a in atoms.values()), "the error names the tampered atom"
    assert "nothing was imported" in str(err)
    atoms_file.write_bytes(bytes(data[:-5]))  # cut short
    refused(path, vault, "vaultmem", str(folder), "outside the file|cut short", passphrase="vaultmem pass")
    header = folder / "current.vmem"
    raw = bytearray(header.read_bytes())
    raw[20] ^= 0xFF  # the atom count in the header (AAD of the index)
    header.write_bytes(bytes(raw))
    refused(path, vault, "vaultmem", str(folder), "index fails authentication", passphrase="vaultmem pass")
    assert set(before_source) == set(snapshot(folder)), "the reader never adds or removes source files"


def test_vaultmem_hostile_meta_is_refused(new_vault, vaultmem_vault):
    path, vault, _ = new_vault
    folder, _ = vaultmem_vault
    meta = json.loads((folder / "meta.json").read_text())
    meta["memory_cost"] = 64 * 1024 * 1024  # 64 GiB of Argon2 memory
    (folder / "meta.json").write_text(json.dumps(meta))
    refused(path, vault, "vaultmem", str(folder), "memory cost", passphrase="vaultmem pass")
    (folder / "meta.json").write_text('{"credential_slots": [')
    refused(path, vault, "vaultmem", str(folder), "not valid JSON", passphrase="vaultmem pass")


# ---------------------------------------------------------------------------------------------- Portable Memory


def write_bundle(root: Path, items: dict[str, list[dict]], tombstones: list[dict] | None = None) -> Path:
    """A .mem bundle written by the spec's rules (canonical JSON, CHECKSUMS, manifest)."""
    root.mkdir(parents=True)
    files = []

    def put(rel: str, rows: list[dict]) -> None:
        data = ("\n".join(sorted(canonical_json(r) for r in rows)) + "\n").encode()
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        files.append({"path": rel, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)})

    for kind, rows in items.items():
        put(f"items/{kind}.jsonl", rows)
    if tombstones:
        put("audit/tombstones.jsonl", tombstones)
    files.sort(key=lambda f: f["path"])
    sums = "".join(f"{f['sha256']}  {f['path']}\n" for f in files).encode()
    (root / "CHECKSUMS").write_bytes(sums)
    manifest = {"format": "1.1.0", "generator": "test/1.0", "conformanceLevel": "L2",
                "createdAt": "2026-01-01T00:00:00Z", "exportMode": "full", "schemaVersion": 1,
                "embeddingModel": "none", "embeddingDim": 0, "embeddingsIncluded": False, "capabilities": [],
                "counts": {k: len(v) for k, v in items.items()}, "files": files,
                "bundleDigest": hashlib.sha256(sums).hexdigest()}
    (root / "manifest.json").write_text(canonical_json(manifest))
    return root


def episode(eid: str, text: str, speaker: str | None = None, **extra) -> dict:
    e = {"id": eid, "eventTime": "2025-05-01T12:00:00Z", "mentionTime": "2025-05-01T12:00:00Z",
         "ingestionTime": "2025-05-02T12:00:00Z", "sourceType": "chat", "actors": [], "summary": text[:40],
         "details": text, "sensitivity": "low", "metadata": {}, "categories": [], "importance": 0.5,
         "confidence": 0.7, "lifecycleState": "HOT", "extractionState": "done", "accessCount": 0, "pinned": False,
         "vaultRefs": []}
    if speaker:
        e["speaker"] = speaker
    e.update(extra)
    return e


def pm_bundle(tmp_path: Path) -> Path:
    fact = {"id": "fact_1", "episodeID": "ep_1", "subject": "user", "predicate": "city", "object": "Lisbon",
            "text": "Sam lives in Lisbon.", "tValidFrom": "2025-05-01T12:00:00Z", "confidence": 0.9,
            "importance": 0.5, "createdAt": "2025-05-01T12:00:00Z"}
    old = dict(fact, id="fact_0", text="Sam lives in Porto.", tValidTo="2025-05-01T12:00:00Z", supersededBy="fact_1")
    gone = dict(fact, id="fact_2", episodeID="ep_gone", text="Sam's old address is 1 Rua X.")
    return write_bundle(tmp_path / "sample.mem", {
        "episode": [episode("ep_1", "I moved to Lisbon last week.", "user"),
                    episode("ep_2", "Noted: you live in Lisbon now.", "assistant"),
                    episode("ep_3", "Weekly report generated.", None, vendorScore=0.9),
                    episode("ep_gone", "My old address is 1 Rua X.", "user"),
                    episode("ep_del", "Deleted at the source.", "user", deletedAt="2025-06-01T00:00:00Z")],
        "fact": [fact, old, gone],
        "preference": [{"key": "units", "value": "metric"}, {"key": "theme", "value": "dark"}],
        "procedure": [{"id": "proc_1", "name": "Morning brief", "triggerPattern": "good morning",
                       "steps": ["Summarise my calendar", "List open tasks"], "successCount": 3, "failureCount": 0,
                       "enabled": True}],
        "core": [{"id": "human", "content": "Sam, data engineer, Lisbon.", "charBudget": 500, "version": 2}],
        "entity": [{"id": "ent_1", "type": "place", "canonicalName": "Lisbon", "aliases": [], "summary": "",
                    "sensitivity": "low", "updatedAt": "2025-05-01T12:00:00Z"}],
    }, tombstones=[
        {"id": "tomb_1", "op": "delete", "targetKind": "episode", "targetID": "ep_gone",
         "deletedAt": "2025-06-01T00:00:00Z", "actor": "u", "derived": {"sentenceIDs": [], "factIDs": ["fact_2"],
         "edgeIDs": [], "entityIDs": [], "chunkIDs": [], "embeddingCacheKeys": [], "episodeLinkCount": 0}},
        {"id": "tomb_2", "op": "delete", "targetKind": "preference", "targetID": "theme",
         "deletedAt": "2025-06-01T00:00:00Z", "actor": "u", "derived": {"sentenceIDs": [], "factIDs": [],
         "edgeIDs": [], "entityIDs": [], "chunkIDs": [], "embeddingCacheKeys": [], "episodeLinkCount": 0}},
    ])


def test_portable_memory_bundle_lands_tombstones_first(new_vault, tmp_path):
    path, vault, _ = new_vault
    bundle = pm_bundle(tmp_path)
    report = run_import(vault, "portable-memory", str(bundle))
    recs = by_import(vault)
    texts = "\n".join(r.text for r in vault.timeline(include_hidden=True))
    assert "1 Rua X" not in texts and "Deleted at the source" not in texts and "Porto" not in texts
    assert recs["portable-memory:ep_1"].claimed_class == Authority.USER and recs["portable-memory:ep_1"].role == "user"
    assert recs["portable-memory:ep_1"].type == "event" and recs["portable-memory:ep_1"].ts == 1746100800
    assert recs["portable-memory:ep_2"].claimed_class == Authority.INFERRED
    assert recs["portable-memory:ep_3"].claimed_class == Authority.OBSERVED
    facts = {f.key: f for f in vault.facts()}
    city = facts["user/pm_fact_" + hashlib.sha256(b"fact_1").hexdigest()[:8]]
    assert city.proposed[0].value == "Sam lives in Lisbon." and city.status == "pending"
    assert facts["user/pm_units"].proposed[0].value == "metric" and facts["user/pm_units"].status == "pending"
    assert "user/pm_theme" not in facts
    proc = next(f for k, f in facts.items() if k.startswith("user/pm_procedure_"))
    assert proc.proposed[0].type == "instruction" and "List open tasks" in proc.proposed[0].value
    assert facts["user/pm_core_human"].proposed[0].value == "Sam, data engineer, Lisbon."
    assert facts["user/pm_core_human"].proposed[0].claimed_class == Authority.OBSERVED
    reasons = "\n".join(report.reasons)
    assert "3 tombstoned record(s)" in reasons and "1 superseded or pruned fact(s)" in reasons
    assert "1 deleted episode(s)" in reasons and "'entity' record(s) not imported" in reasons
    assert run_import(vault, "portable-memory", str(bundle)).imported == 0
    # The same bundle zipped.
    zipped = zip_dir(bundle, tmp_path / "bundle.zip", prefix="sample.mem/")
    assert run_import(vault, "portable-memory", str(zipped)).imported == 0
    # Damage: a changed byte, an unlisted file, a CHECKSUMS that disagrees.
    ep = bundle / "items" / "episode.jsonl"
    ep.write_bytes(ep.read_bytes().replace(b"Lisbon last week", b"Lisbon last year"))
    refused(path, vault, "portable-memory", str(bundle), "checksum mismatch")
    bundle2 = pm_bundle(tmp_path / "b2")
    (bundle2 / "items" / "extra.jsonl").write_text('{"id": "x"}\n')
    refused(path, vault, "portable-memory", str(bundle2), "not listed in the manifest")
    bundle3 = pm_bundle(tmp_path / "b3")
    (bundle3 / "CHECKSUMS").write_text("0" * 64 + "  items/core.jsonl\n")
    refused(path, vault, "portable-memory", str(bundle3), "does not match the manifest|bundleDigest")


def test_published_portable_memory_sample_imports(new_vault):
    _, vault, _ = new_vault
    report = run_import(vault, "portable-memory", str(FIX / "portable-memory-sample.mem"))
    texts = {r.text for r in vault.timeline()}
    assert {"Project Vermilion launches on Pi Day 2027.", "The Reykjavik lab is led by Dr. Sabine Holt."} <= texts
    reasons = "\n".join(report.reasons)
    assert "'vendorThing' record(s) not imported" in reasons and "'edge' record(s)" in reasons
    assert report.imported == 2


def test_portable_memory_manifest_path_escape_is_refused(new_vault, tmp_path):
    path, vault, _ = new_vault
    bundle = pm_bundle(tmp_path)
    manifest = json.loads((bundle / "manifest.json").read_text())
    manifest["files"].append({"path": "../outside.jsonl", "sha256": "0" * 64, "bytes": 0})
    (bundle / "manifest.json").write_text(json.dumps(manifest))
    refused(path, vault, "portable-memory", str(bundle), "outside the bundle")


# ---------------------------------------------------------------------------------------------- PAM


def pam_memory(mid: str, typ: str, content: str, *, status: str = "active", method: str = "llm_inference",
               **extra) -> dict:
    from camillo.exporters.pam import content_hash

    m = {"id": mid, "type": typ, "status": status, "content": content, "content_hash": content_hash(content),
         "temporal": {"created_at": "2025-03-01T10:00:00Z"},
         "provenance": {"platform": "chatgpt", "extraction_method": method, "conversation_ref": "conv-1"},
         "confidence": {"initial": 0.9, "current": 0.85}}
    m.update(extra)
    return m


def pam_export(tmp_path: Path, *, tamper: bool = False) -> Path:
    root = tmp_path / "pam"
    (root / "conversations").mkdir(parents=True)
    memories = [
        pam_memory("m-1", "fact", "Sam works as a data engineer.", method="explicit_user_input"),
        pam_memory("m-2", "preference", "Sam prefers metric units."),
        pam_memory("m-3", "instruction", "Answer in Portuguese when asked.", method="manual"),
        pam_memory("m-4", "identity", "Sam is bilingual."),
        pam_memory("m-5", "fact", "Sam lives in Porto.", status="superseded"),
        pam_memory("m-6", "fact", "Sam is allergic to cats.", status="retracted"),
        pam_memory("m-7", "context", "Sam is moving house this month."),
        pam_memory("m-8", "custom", "Chose PostgreSQL for the project.", custom_type="decision"),
    ]
    checksum = "sha256:" + hashlib.sha256(jcs(sorted(memories, key=lambda m: m["id"]))).hexdigest()
    if tamper:
        memories[0]["content"] = "Sam works as an astronaut."
    store = {"schema": "portable-ai-memory", "schema_version": "1.0", "owner": {"id": "owner-1"},
             "memories": memories,
             "conversations_index": [{"id": "conv-1", "platform": "chatgpt", "title": "Move",
                                      "temporal": {"created_at": "2025-03-01T10:00:00Z"},
                                      "storage": {"type": "file", "ref": "conversations/conv-1.json"}}],
             "integrity": {"canonicalization": "RFC8785", "checksum": checksum, "total_memories": len(memories)}}
    (root / "memory-store.json").write_text(json.dumps(store, indent=2))
    conv = {"schema": "portable-ai-memory-conversation", "schema_version": "1.0", "id": "conv-1",
            "provider": {"name": "chatgpt", "conversation_id": "orig-conv-1"}, "title": "Move",
            "temporal": {"created_at": "2025-03-01T10:00:00Z"},
            "messages": [
                {"id": "msg-1", "role": "user", "content": {"type": "text", "text": "I am moving to Lisbon."},
                 "created_at": "2025-03-01T10:00:01Z"},
                {"id": "msg-2", "role": "assistant", "content": {"type": "text", "text": "hmm"},
                 "created_at": "2025-03-01T10:00:02Z", "is_thought": True},
                {"id": "msg-3", "role": "assistant", "content": {"type": "multipart", "parts": [
                    {"type": "text", "text": "Good luck with the move!"}, {"type": "image", "ref": "x.png"}]},
                 "created_at": "2025-03-01T10:00:03Z"},
                {"id": "msg-4", "role": "tool", "content": {"type": "text", "text": "weather: sunny"},
                 "created_at": "2025-03-01T10:00:04Z"}]}
    (root / "conversations" / "conv-1.json").write_text(json.dumps(conv))
    return root


def test_pam_export_lands_as_documented(new_vault, tmp_path):
    path, vault, _ = new_vault
    root = pam_export(tmp_path)
    report = run_import(vault, "pam", str(root))
    facts = {f.key: f for f in vault.facts()}
    h = lambda s: hashlib.sha256(s.encode()).hexdigest()[:8]  # noqa: E731
    engineer = facts[f"user/pam_fact_{h('m-1')}"].proposed[0]
    assert engineer.value == "Sam works as a data engineer." and engineer.claimed_class == Authority.OBSERVED
    assert facts[f"user/pam_fact_{h('m-1')}"].status == "pending"  # observed: a proposal, beside nothing
    assert engineer.meta["platform"] == "chatgpt" and engineer.meta["extraction_method"] == "explicit_user_input"
    assert engineer.meta["original_ts"] == 1740823200 and engineer.meta["pam_type"] == "fact"
    pref = facts[f"user/pam_preference_{h('m-2')}"]
    assert pref.status == "pending" and pref.proposed[0].claimed_class == Authority.INFERRED
    instr = facts[f"user/pam_instruction_{h('m-3')}"]
    assert instr.status == "pending" and instr.proposed[0].claimed_class == Authority.OBSERVED
    assert facts[f"user/pam_identity_{h('m-4')}"].proposed[0].meta["pam_type"] == "identity"
    texts = "\n".join(r.text for r in vault.timeline(include_hidden=True))
    assert "Porto" not in texts and "allergic" not in texts and "hmm" not in texts
    recs = by_import(vault)
    assert recs["pam:m-7"].type == "event" and recs["pam:m-8"].type == "decision"
    conv = vault.timeline(conversation="orig-conv-1")
    assert [(r.type, r.text, r.claimed_class) for r in conv] == [
        ("conversation", "Move", Authority.INFERRED), ("message", "I am moving to Lisbon.", Authority.USER),
        ("message", "Good luck with the move!", Authority.INFERRED), ("message", "weather: sunny", Authority.EXTERNAL)]
    reasons = "\n".join(report.reasons)
    assert "1 superseded memory not imported" in reasons and "1 retracted memory not imported" in reasons
    assert "1 thought message(s) left out" in reasons
    assert run_import(vault, "pam", str(root)).imported == 0
    assert run_import(vault, "pam", str(root / "memory-store.json")).imported == 0
    refused(path, vault, "pam", str(pam_export(tmp_path / "t", tamper=True)), "integrity checksum mismatch")


def test_published_pam_example_verifies_and_imports(new_vault):
    _, vault, _ = new_vault
    report = run_import(vault, "pam", str(FIX / "pam-example"))
    assert report.imported == 5 + 1 + 2  # memories, the conversation record, its two messages
    assert any("2 conversation file(s) named in conversations_index are not in the export" in r for r in report.reasons)
    keys = {f.key for f in vault.facts()}
    assert any(k.startswith("user/pam_skill_") for k in keys)


# ---------------------------------------------------------------------------------------------- hostile input


def _deep(n: int) -> str:
    return "[" * n + "]" * n


@pytest.mark.parametrize("kind,name", [("chatgpt", "conversations.json"), ("claude", "conversations.json"),
                                       ("pam", "memory-store.json")])
@pytest.mark.parametrize("case", ["truncated", "shape", "deep", "not-utf8", "nan"])
def test_malformed_json_fails_cleanly(new_vault, tmp_path, kind, name, case):
    path, vault, _ = new_vault
    good = {"chatgpt": FIX / "chatgpt" / "conversations.json", "claude": FIX / "claude" / "conversations.json",
            "pam": FIX / "pam-example" / "memory-store.json"}[kind].read_bytes()
    data = {"truncated": good[: len(good) // 2], "shape": b'{"hello": "world"}' if kind != "pam" else b"[1, 2, 3]",
            "deep": _deep(150).encode(), "not-utf8": b'["\xff\xfe"]', "nan": b"[NaN]"}[case]
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / name).write_bytes(data)
    match = {"truncated": "not valid JSON", "shape": "does not look like", "deep": "levels deep|too deeply",
             "not-utf8": "not UTF-8", "nan": "not valid JSON"}[case]
    t = time.monotonic()
    refused(path, vault, kind, str(folder), match)
    assert time.monotonic() - t < 10


def test_very_deep_json_does_not_crash(new_vault, tmp_path):
    path, vault, _ = new_vault
    src = tmp_path / "conversations.json"
    src.write_text(_deep(200_000))
    refused(path, vault, "chatgpt", str(src), "too deeply|levels deep")


@pytest.mark.parametrize("kind", ["chatgpt", "claude", "pam", "portable-memory"])
def test_zip_bomb_is_refused_in_bounded_memory(new_vault, tmp_path, kind):
    path, vault, _ = new_vault
    bomb = tmp_path / "bomb.zip"
    chunk = b"\0" * (1 << 20)
    inner = {"chatgpt": "conversations.json", "claude": "conversations.json", "pam": "memory-store.json",
             "portable-memory": "items/episode.jsonl"}[kind]
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as zf:
        if kind == "portable-memory":
            zf.writestr("manifest.json", json.dumps({"format": "1.1.0", "files": []}))
        with zf.open(inner, "w", force_zip64=True) as fh:
            for _ in range(1024):  # 1 GiB of zeros, about 1 MiB compressed
                fh.write(chunk)
    assert bomb.stat().st_size < 8 * 1024 * 1024
    tracemalloc.start()
    t = time.monotonic()
    try:
        refused(path, vault, kind, str(bomb), "ZIP bomb|uncompressed|expands")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 * 1024 * 1024 and time.monotonic() - t < 20


def test_zip_bomb_with_lying_sizes_stops_at_the_limit(new_vault, tmp_path, monkeypatch):
    """A member that declares a small size but inflates further is cut off at the declared size."""
    path, vault, _ = new_vault
    monkeypatch.setattr(safety, "MAX_TOTAL_BYTES", 4 * 1024 * 1024)
    monkeypatch.setattr(safety, "MAX_MEMBER_BYTES", 4 * 1024 * 1024)
    big = tmp_path / "big.zip"
    with zipfile.ZipFile(big, "w", zipfile.ZIP_STORED) as zf:
        zf.writestr("conversations.json", b"[" + b" " * (8 * 1024 * 1024) + b"]")
    refused(path, vault, "chatgpt", str(big), "bytes uncompressed|expands")


@pytest.mark.parametrize("member", ["../evil/conversations.json", "/etc/conversations.json",
                                    "C:/x/conversations.json", "a/../../conversations.json"])
def test_zip_with_escaping_member_name_is_refused(new_vault, tmp_path, member):
    path, vault, _ = new_vault
    z = tmp_path / "evil.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr("conversations.json", (FIX / "chatgpt" / "conversations.json").read_bytes())
        zf.writestr(member, "[]")
    err = refused(path, vault, "chatgpt", str(z), "points outside the archive")
    assert "evil.zip" in str(err)
    assert not (tmp_path.parent / "evil").exists()


def test_hostile_parts_of_an_export_are_refused_whole(new_vault, tmp_path):
    """An export in several ZIP parts: one part with an escaping name or a bomb refuses the whole
    export, nothing imported; a ZIP inside a part is not opened, and a file in two parts is read once,
    both said in the report."""
    path, vault, _ = new_vault
    for case in ("escape", "bomb"):
        folder = split_parts(tmp_path / case)
        with zipfile.ZipFile(folder / "export-part-0003.zip", "w", zipfile.ZIP_DEFLATED) as zf:
            if case == "escape":
                zf.writestr("../../outside.json", "[]")
            else:
                with zf.open("file_00000000b0b0.dat", "w", force_zip64=True) as fh:
                    for _ in range(64):
                        fh.write(b"\0" * (1 << 20))
        refused(path, vault, "chatgpt", str(folder), "points outside the archive" if case == "escape" else "ZIP bomb")
    folder = split_parts(tmp_path / "odd")
    with zipfile.ZipFile(folder / "export-part-0003.zip", "w") as zf:
        zf.writestr("nested.zip", (folder / "export-part-0002.zip").read_bytes())
        zf.writestr("user.json", "{}")
    report = run_import(vault, "chatgpt", str(folder))
    assert report.imported == 17
    assert report.unknown.get("ZIP inside the export (not opened)") == 1
    assert any("1 file(s) appear in more than one part of the export; the first copy was read" in r
               for r in report.reasons)


def test_symlink_out_of_a_folder_source_is_refused(new_vault, tmp_path):
    path, vault, _ = new_vault
    outside = tmp_path / "outside.json"
    outside.write_text("[]")
    folder = tmp_path / "export"
    folder.mkdir()
    os.symlink(outside, folder / "conversations.json")
    refused(path, vault, "claude", str(folder), "outside the folder")


def test_huge_string_is_truncated_with_a_marker(new_vault, tmp_path, monkeypatch):
    _, vault, _ = new_vault
    huge = "x" * (3 * 1024 * 1024) + "é"
    conv = {"id": "big", "title": "Big", "create_time": 1700000000, "current_node": "n1", "mapping": {
        "n1": {"id": "n1", "parent": None, "children": [], "message": {
            "id": "m-big", "author": {"role": "user"}, "create_time": 1700000001,
            "content": {"content_type": "text", "parts": [huge]}}}}}
    src = tmp_path / "conversations.json"
    src.write_text(json.dumps([conv]))
    t = time.monotonic()
    report = run_import(vault, "chatgpt", str(src))
    assert report.imported == 2 and time.monotonic() - t < 30
    msg = by_import(vault)["chatgpt:m-big"]
    assert msg.meta["truncated"] == len(huge.encode())
    assert len(msg.text.encode()) < safety.MAX_TEXT_BYTES + 200
    assert msg.text.endswith(f"[… truncated on import: {len(huge.encode())} bytes in the original]")


def test_oversized_json_file_is_refused(new_vault, tmp_path, monkeypatch):
    path, vault, _ = new_vault
    monkeypatch.setattr(safety, "MAX_JSON_BYTES", 1000)
    src = tmp_path / "conversations.json"
    src.write_text(json.dumps([{"mapping": {}, "title": "x" * 2000}]))
    refused(path, vault, "chatgpt", str(src), "at most 1000")


def test_sources_that_are_not_exports(new_vault, tmp_path):
    path, vault, _ = new_vault
    refused(path, vault, "chatgpt", str(tmp_path / "missing"), "does not exist")
    (tmp_path / "empty").mkdir()
    refused(path, vault, "chatgpt", str(tmp_path / "empty"), "no conversations.json or conversations-NNN.json")
    refused(path, vault, "claude", str(tmp_path / "empty"), "no conversations.json, conversations/, memories.json")
    refused(path, vault, "pam", str(tmp_path / "empty"), "no memory-store.json")
    refused(path, vault, "portable-memory", str(tmp_path / "empty"), "no manifest.json")
    refused(path, vault, "vaultmem", str(tmp_path / "empty"), "no meta.json", passphrase="x")
    broken = tmp_path / "broken.zip"
    broken.write_bytes(b"PK\x03\x04" + b"\0" * 100)
    refused(path, vault, "chatgpt", str(broken), "not a readable ZIP|conversations.json")


def test_a_bad_conversation_is_skipped_not_fatal(new_vault, tmp_path):
    _, vault, _ = new_vault
    loop = {"id": "loop", "title": "Loop", "current_node": "a", "mapping": {
        "a": {"id": "a", "parent": "b", "children": [], "message": None},
        "b": {"id": "b", "parent": "a", "children": ["a"], "message": None}}}
    good = json.loads((FIX / "chatgpt" / "conversations.json").read_text())[2]
    src = tmp_path / "conversations.json"
    src.write_text(json.dumps([loop, {"mapping": {}, "title": "no id"}, good]))
    report = run_import(vault, "chatgpt", str(src))
    assert any("link in a circle" in r for r in report.reasons)
    assert any("no id" in r for r in report.reasons)
    assert "Obrigado (or obrigada)." in {r.text for r in vault.timeline()}


def test_unknown_kind_and_compartment_are_usage_errors(new_vault):
    from camillo.errors import UsageError

    _, vault, _ = new_vault
    with pytest.raises(UsageError, match="unknown import kind"):
        run_import(vault, "myspace", "x")
    with pytest.raises(UsageError, match="no compartment"):
        run_import(vault, "chatgpt", str(FIX / "chatgpt"), compartment="nope")


def test_import_into_another_compartment(new_vault):
    _, vault, _ = new_vault
    run_import(vault, "claude", str(FIX / "claude"), compartment="work")
    assert {r.compartment for r in vault.timeline()} == {"work"}


# ---------------------------------------------------------------------------------------------- CLI


def run_cli(*args: str, env: dict | None = None, check: int = 0) -> subprocess.CompletedProcess:
    full = dict(os.environ, CAMILLO_PASSPHRASE=PASSPHRASE, **(env or {}))
    proc = subprocess.run([sys.executable, "-m", "camillo.cli", *args], capture_output=True, text=True, env=full,
                          timeout=120)
    assert proc.returncode == check, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    return proc


def test_cli_import_prints_the_report(new_vault, tmp_path, vaultmem_vault):
    path, vault, _ = new_vault
    vault.lock()
    out = run_cli("import", "chatgpt", path, str(FIX / "chatgpt" / "conversations.json"))
    assert "wait in your inbox" in out.stdout and "regenerated or edited branch" in out.stdout
    again = json.loads(run_cli("import", "chatgpt", path, str(FIX / "chatgpt"), "--json").stdout)
    assert again["imported"] == 0 and again["kind"] == "chatgpt"
    folder, _ = vaultmem_vault
    done = json.loads(run_cli("import", "vaultmem", path, str(folder), "--json", "--compartment", "work",
                              env={"CAMILLO_IMPORT_PASSPHRASE": "vaultmem pass"}).stdout)
    assert done["imported"] == 4
    bad = run_cli("import", "vaultmem", path, str(folder), env={"CAMILLO_IMPORT_PASSPHRASE": "wrong"}, check=4)
    assert "wrong passphrase for the VaultMem vault" in bad.stderr
    evil = tmp_path / "evil.zip"
    with zipfile.ZipFile(evil, "w") as zf:
        zf.writestr("../x.json", "[]")
    assert "points outside the archive" in run_cli("import", "claude", path, str(evil), check=4).stderr
    shutil.rmtree(folder)


def test_single_files_are_recognised_by_name(new_vault, tmp_path):
    _, vault, _ = new_vault
    mem = tmp_path / "memories.json"
    shutil.copy(FIX / "claude" / "memories.json", mem)
    report = run_import(vault, "claude", str(mem))
    assert report.imported == 5 and report.proposals == 5
    other = tmp_path / "my-claude-chats.json"
    shutil.copy(FIX / "claude" / "conversations.json", other)
    assert run_import(vault, "claude", str(other)).imported > 0
    store = tmp_path / "renamed-store.json"
    shutil.copy(FIX / "pam-example" / "memory-store.json", store)
    assert run_import(vault, "pam", str(store)).imported == 5


def test_forgotten_imports_stay_forgotten_on_reimport(new_vault):
    _, vault, _ = new_vault
    source = str(FIX / "chatgpt" / "conversations.json")
    run_import(vault, "chatgpt", source)
    target = by_import(vault)["chatgpt:m-u1"]
    vault.forget(record=target.id)
    rejected = next(v for v in vault.inbox() if v.key == "user/custom_instructions")
    vault.reject([rejected.id])
    assert run_import(vault, "chatgpt", source).imported == 0
    texts = {r.text for r in vault.timeline()}
    assert "Plan a weekend in Porto for me." not in texts
    assert "user/custom_instructions" not in {v.key for v in vault.inbox()}
