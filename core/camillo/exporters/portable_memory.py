"""Export a vault as a Portable Memory bundle (MacPaw ``.mem``, format 1.1.0): ``manifest.json``,
``items/<kind>.jsonl`` in Canonical JSON, ``audit/tombstones.jsonl``, ``CHECKSUMS``; unsigned.

Mapping (every line carries a top-level ``"vmem"`` object, kept by Portable Memory readers as a
foreign field: record id, writer, compartment, claimed ``class`` and ``effective_class``, VMEM
type, key, role, conversation, and the value when it is not plain text):

* notes (messages, conversations, events, decisions, summaries, attachments) → ``episode``
  (``id`` ``ep_<record id>``; ``sourceType`` = the VMEM type; ``speaker`` and ``actors`` = the
  role; ``details`` = the full text, ``summary`` its first line; ``eventTime``, ``mentionTime`` and
  ``ingestionTime`` = the record's time; ``contextID`` = the compartment);
* facts (and vendor-typed keyed records) → ``fact`` (``subject``/``predicate`` = the two halves of
  the key, ``object`` and ``text`` = the value as text, ``episodeID`` = the first source when it is
  exported, else empty);
* preferences → ``preference`` (``key``, ``value`` as text);
* instructions → ``procedure`` (``name`` = the key, ``steps`` = [the text]);
* compartments → ``context`` records (``ctx_<name>``);
* forgotten (hidden) records → ``tombstone`` lines (op ``delete``, no content), so that a receiver
  holding an earlier export deletes them too.  Erased records leave no trace.

``confidence`` is derived from the effective authority (user 1, observed 0.9, inferred 0.7,
external 0.5).  ``createdAt`` in the manifest is the newest record's time (not the clock), so the
bundle is byte-for-byte reproducible.  The conformance level declared is ``L0`` (a valid,
checksum-clean bundle).

The episodes and the keyed records are read a page of records at a time (the keyed records twice: first
for the sources they name) and their lines sorted through temporary files in the export's folder
(deleted before the export returns, :class:`camillo.exporters.SortedLines`), so the export holds a page
and a run of lines, not the vault.

Pure reading of the vault and writing of files: runs on the thread that owns the vault.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import TYPE_CHECKING, Any

from ..importers.safety import first_line, iso, slug
from ..values import Kind
from . import (
    ExportSummary,
    SortedLines,
    canonical_json,
    confidence,
    fact_values,
    forgotten,
    generator,
    prepare_out,
    record_text,
    visible_notes,
    vmem_info,
    write_file,
)

if TYPE_CHECKING:
    from ..values import RecordView
    from ..vault import Vault

FORMAT = "1.1.0"
SPEC_URL = "https://github.com/MacPaw/portable-memory/blob/main/Spec/portable-memory-spec.md"


def context_id(compartment: str) -> str:
    return "ctx_" + (slug(compartment, 60) or hashlib.sha256(compartment.encode()).hexdigest()[:12])


def _episode(v: RecordView) -> dict[str, Any]:
    text = record_text(v)
    when = iso(v.ts)
    out: dict[str, Any] = {
        "accessCount": 0, "actors": [v.role] if v.role else [], "categories": [v.type or "note"],
        "confidence": confidence(v), "contextID": context_id(v.compartment), "details": text,
        "eventTime": when, "extractionState": "done", "id": "ep_" + v.id.hex(), "importance": 0.5,
        "ingestionTime": when, "lifecycleState": "HOT", "mentionTime": when, "metadata": {},
        "pinned": False, "sensitivity": "normal", "sourceType": v.type or "note", "summary": first_line(text),
        "vaultRefs": [], "vmem": vmem_info(v),
    }
    if v.role:
        out["speaker"] = v.role
    if v.conversation:
        out["metadata"]["conversation"] = v.conversation
    return out


def _keyed(v: RecordView, status: str, exported: set[str]) -> tuple[str, dict[str, Any]]:
    text = record_text(v)
    when = iso(v.ts)
    info = vmem_info(v, status)
    key = v.key or "user/unknown"
    if v.type == "preference":
        return "preference", {"key": key, "value": text, "vmem": info}
    if v.type == "instruction":
        return "procedure", {"enabled": True, "failureCount": 0, "id": "proc_" + v.id.hex(), "name": key,
                             "steps": [text], "successCount": 0, "triggerPattern": "", "vmem": info}
    subject, _, predicate = key.partition("/")
    episode = next((e for e in ("ep_" + s.hex() for s in sorted(v.sources)) if e in exported), "")
    return "fact", {"confidence": confidence(v), "createdAt": when, "episodeID": episode, "id": "fact_" + v.id.hex(),
                    "importance": 0.5, "object": text, "predicate": predicate, "subject": subject,
                    "tValidFrom": when, "text": text, "vmem": info}


def _tombstone(v: RecordView, when: int | None) -> dict[str, Any]:
    if v.kind == Kind.NOTE:
        kind, target = "episode", "ep_" + v.id.hex()
    elif v.type == "preference":
        kind, target = "preference", v.key or ""
    elif v.type == "instruction":
        kind, target = "procedure", "proc_" + v.id.hex()
    else:
        kind, target = "fact", "fact_" + v.id.hex()
    return {"actor": "camillo", "deletedAt": iso(when),
            "derived": {"chunkIDs": [], "edgeIDs": [], "embeddingCacheKeys": [], "entityIDs": [], "episodeLinkCount": 0,
                        "factIDs": [], "sentenceIDs": []},
            "id": "tomb_" + v.id.hex(), "op": "delete", "reason": "forgotten in Camillo", "targetID": target,
            "targetKind": kind}


def export(vault: Vault, out: str) -> ExportSummary:
    hidden = forgotten(vault)  # (the notes and the keyed records are read a page at a time below)
    prepare_out(out)
    sources: set[bytes] = set()  # the records the keyed ones name as their sources
    exported: set[str] = set()  # the episodes among them
    compartments: set[str] = set()
    newest = 0  # the newest record's time (the bundle's createdAt: not the clock's)
    first_ts: dict[str, int] = {}  # each compartment's first record's time

    def dated(v: RecordView) -> None:
        nonlocal newest
        if v.ts:
            newest = max(newest, v.ts)
            if v.compartment not in first_ts or v.ts < first_ts[v.compartment]:
                first_ts[v.compartment] = v.ts

    for v, _ in fact_values(vault):  # (read again below, once the episodes they name are known)
        sources.update(v.sources)
        compartments.add(v.compartment)
        dated(v)
    span: list[str] = []  # the first and the last episode's eventTime
    files: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    with contextlib.ExitStack() as stack:
        kinds: dict[str, SortedLines] = {}

        def lines(kind: str) -> SortedLines:
            if kind not in kinds:
                kinds[kind] = stack.enter_context(SortedLines(out))
            return kinds[kind]

        for v in visible_notes(vault):
            line = _episode(v)
            lines("episode").add(canonical_json(line))
            when = line["eventTime"]
            span = [min(span[0], when), max(span[1], when)] if span else [when, when]
            if v.id in sources:
                exported.add(line["id"])
            compartments.add(v.compartment)
            dated(v)
        live_prefs: set[str] = set()  # a preference is keyed by its key; a key present now is not tombstoned
        for v, status in fact_values(vault):
            kind, row = _keyed(v, status, exported)
            lines(kind).add(canonical_json(row))
            if kind == "preference":
                live_prefs.add(row["key"])
        tombstones = [_tombstone(v, when) for v, when in hidden
                      if not (v.type == "preference" and v.key in live_prefs)]
        for c in sorted(compartments):
            lines("context").add(canonical_json({"archived": False, "createdAt": iso(first_ts.get(c)),
                                                 "id": context_id(c), "label": c}))
        for kind in sorted(kinds):
            entry = kinds[kind].write(out, f"items/{kind}.jsonl")
            if entry is not None:
                files.append(entry)
                counts[kind] = kinds[kind].count
    if tombstones:
        data = ("\n".join(sorted(canonical_json(t) for t in tombstones)) + "\n").encode("utf-8")
        write_file(out, "audit/tombstones.jsonl", data)
        files.append({"bytes": len(data), "path": "audit/tombstones.jsonl", "sha256": hashlib.sha256(data).hexdigest()})
        counts["tombstone"] = len(tombstones)
    files.sort(key=lambda f: f["path"])
    checksums = "".join(f"{f['sha256']}  {f['path']}\n" for f in files).encode("utf-8")
    write_file(out, "CHECKSUMS", checksums)
    manifest: dict[str, Any] = {
        "bundleDigest": hashlib.sha256(checksums).hexdigest(),
        "capabilities": ["ext", "tombstones"],
        "conformanceLevel": "L0",
        "counts": counts,
        "createdAt": iso(newest),
        "embeddingDim": 0,
        "embeddingModel": "none",
        "embeddingsIncluded": False,
        "exportMode": "full",
        "files": files,
        "format": FORMAT,
        "generator": generator(),
        "schemaVersion": 1,
        "specURL": SPEC_URL,
    }
    if span:
        manifest["coverage"] = {"from": span[0], "to": span[1]}
    if compartments:
        manifest["scopes"] = sorted(context_id(c) for c in compartments)
    write_file(out, "manifest.json", canonical_json(manifest).encode("utf-8"))
    return {"format": "portable-memory", "out": out, **counts}
