"""Import a Portable Memory bundle (MacPaw ``.mem``, format 1.x): a folder, or a ZIP of one.

Order (spec §4): verify, apply tombstones, then merge.  Every file ``manifest.json`` lists is read
and its SHA-256 and size checked; ``CHECKSUMS`` must agree with the manifest, and ``bundleDigest``
(when present) with ``CHECKSUMS``; a file under ``items/``, ``audit/`` or ``embeddings/`` that the
manifest does not list refuses the bundle.  Any mismatch: ImportFailed, nothing imported.  A
``manifest.sig`` is not verified (Camillo holds no trusted Portable Memory keys); the bundle is
integrity-checked only.

Tombstones (``audit/tombstones.jsonl``) are applied first: a record whose id (a fact's episode, a
preference's key) is tombstoned is not imported, and is counted.

Mapping:

* ``episode`` → a note: type ``event`` (or the VMEM type an exported Camillo bundle recorded in its
  ``vmem`` field), text = ``details`` (else ``summary``), role = ``speaker``; authority
  ``user`` when the speaker is the user, ``inferred`` for an assistant, ``observed`` otherwise (the
  recorded ``vmem.class`` when present).  Episodes with ``deletedAt`` are skipped.
* ``fact`` → a ``fact`` PUT (``user/pm_fact_<8 hex>``), ``inferred`` (a derived triple); facts
  with ``tValidTo``, ``supersededBy`` or ``prunedAt`` are no longer current and are skipped.
* ``preference`` → a ``preference`` PUT (``user/pm_<key>``), ``procedure`` → an ``instruction``,
  ``core`` → a ``fact`` (``instruction`` for a persona block); all ``observed``.
* ``entity``, ``edge``, ``chunk``, ``resource``, links, communities, categories, ``secretRef`` and
  vendor kinds have no VMEM equivalent and are counted, not imported; ``context`` records only
  name scopes.

Keyed records never come in above ``observed`` (a bundle is unsigned plaintext anyone can write):
preferences and instructions wait in the inbox, and so do ``inferred`` facts.  When a line carries
a ``vmem`` object (a Camillo export), its type, key, role, conversation and value are restored and
its class is used, capped at ``observed`` for keyed records.  Records land in the compartment
chosen for the import; the original compartment is kept in ``meta["original_compartment"]``.

Idempotency keys: ``portable-memory:<id>`` (``portable-memory:preference:<hash of key>:<hash of
value>`` for preferences, which have no id).

A pure reader (no vault access): any thread may call it; :func:`run_import` writes on the vault's thread.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from typing import Any

from ..values import KEYED_TYPES, STANDARD_TYPES, Authority, check_key
from ..vault import NewRecord
from . import ImportFailed, ImportUnit
from .safety import (
    FileSource,
    Source,
    as_dict,
    as_list,
    as_str,
    bad_name,
    clean_text,
    clip,
    digest,
    expect,
    json_safe,
    load_json,
    open_source,
    parse_jsonl,
    short,
    slug,
    unique_keys,
    unix_ts,
)

KIND = "portable-memory"
NOTE_TYPES = frozenset(STANDARD_TYPES) - KEYED_TYPES
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
UNMAPPED = ("entity", "edge", "chunk", "resource", "factLink", "episodeLink", "community", "category", "secretRef")


def read(source_path: str, **_: Any) -> Iterator[ImportUnit]:
    with open_source(source_path) as src:
        if isinstance(src, FileSource):
            raise ImportFailed(f"{src.label} is a single file: give the .mem bundle folder (or a ZIP of it)")
        units = list(_read(src))
    yield from units


def vmem_of(line: dict[str, Any]) -> dict[str, Any]:
    vm = line.get("vmem")
    return vm if isinstance(vm, dict) else {}


def authority_of(vm: dict[str, Any], fallback: Authority, *, keyed: bool) -> Authority:
    label = vm.get("class")
    try:
        auth = Authority.parse(label) if isinstance(label, str) else fallback
    except Exception:
        auth = fallback
    return min(auth, Authority.OBSERVED) if keyed else auth


def valid_key(key: Any) -> str | None:
    if not isinstance(key, str):
        return None
    try:
        check_key(key)
    except Exception:
        return None
    return key


def base_meta(vm: dict[str, Any], import_key: str, source: str, original_id: str | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"import": import_key, "source": source}
    if original_id:
        meta["original_id"] = original_id[:200]
    if isinstance(vm.get("id"), str):
        meta["vmem_id"] = vm["id"][:64]
    if isinstance(vm.get("compartment"), str):
        meta["original_compartment"] = vm["compartment"][:100]
    return meta


def verify(src: Source, root: str) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The manifest and the bytes of every listed file, all checked (ImportFailed otherwise)."""
    mname = root + "manifest.json"
    manifest = expect(load_json(src, mname), dict, src.where(mname), "a Portable Memory manifest")
    fmt = manifest.get("format")
    if not isinstance(fmt, str) or not fmt.startswith("1."):
        raise ImportFailed(f"{src.where(mname)}: format {str(fmt)[:20]!r} is not a Portable Memory 1.x bundle")
    files = expect(manifest.get("files"), list, src.where(mname), "a Portable Memory manifest with 'files'")
    data: dict[str, bytes] = {}
    for entry in files:
        if not isinstance(entry, dict) or not isinstance(entry.get("path"), str) \
                or not isinstance(entry.get("sha256"), str) or not _HEX64.match(entry["sha256"]):
            raise ImportFailed(f"{src.where(mname)} lists a file entry without a path and a SHA-256")
        rel = entry["path"]
        if bad_name(rel) or any(p in ("", ".") for p in rel.split("/")):
            raise ImportFailed(f"{src.where(mname)} lists '{rel[:200]}', which points outside the bundle; refused")
        if rel in data:
            raise ImportFailed(f"{src.where(mname)} lists '{rel[:200]}' twice")
        if root + rel not in src.names():
            raise ImportFailed(f"{src.where(root + rel)} is listed in the manifest but missing; nothing was imported")
        raw = src.read(root + rel)
        if hashlib.sha256(raw).hexdigest() != entry["sha256"] or (
                isinstance(entry.get("bytes"), int) and entry["bytes"] != len(raw)):
            raise ImportFailed(f"{src.where(root + rel)}: checksum mismatch (the bundle is damaged or was modified); "
                               "nothing was imported")
        data[rel] = raw
    for name in src.names():
        if not name.startswith(root):
            continue
        rel = name[len(root):]
        if rel.split("/", 1)[0] in ("items", "audit", "embeddings") and rel not in data:
            raise ImportFailed(f"{src.where(name)} is not listed in the manifest; the bundle was refused")
    sums_name = root + "CHECKSUMS"
    if sums_name in src.names():
        raw = src.read(sums_name, 64 * 1024 * 1024)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ImportFailed(f"{src.where(sums_name)} is not UTF-8 text") from None
        listed: dict[str, str] = {}
        for line in text.splitlines():
            if not line.strip():
                continue
            hexd, sep, path = line.partition("  ")
            if not sep or not _HEX64.match(hexd):
                raise ImportFailed(f"{src.where(sums_name)} has a malformed line")
            listed[path] = hexd
        expected = {rel: hashlib.sha256(b).hexdigest() for rel, b in data.items()}
        if listed != expected:
            raise ImportFailed(f"{src.where(sums_name)} does not match the manifest (damaged or modified bundle); "
                               "nothing was imported")
        digest_ = manifest.get("bundleDigest")
        if digest_ is not None and digest_ != hashlib.sha256(raw).hexdigest():
            raise ImportFailed(f"{src.where(mname)}: bundleDigest does not match CHECKSUMS; nothing was imported")
    elif manifest.get("bundleDigest") is not None:
        raise ImportFailed(f"{src.where(mname)} names a bundleDigest but the bundle has no CHECKSUMS")
    return manifest, data


def _lines(data: dict[str, bytes], rel: str, src: Source, root: str) -> list[dict[str, Any]]:
    if rel not in data:
        return []
    return [x for x in parse_jsonl(data[rel], src.where(root + rel)) if isinstance(x, dict)]


def _read(src: Source) -> Iterator[ImportUnit]:
    mname = src.find("manifest.json")
    if mname is None:
        raise ImportFailed(f"{src.label} has no manifest.json: is it a Portable Memory (.mem) bundle?")
    root = mname[: -len("manifest.json")]
    _manifest, data = verify(src, root)
    label = src.label
    tomb_ids: set[str] = set()
    tomb_prefs: set[str] = set()
    for t in _lines(data, "audit/tombstones.jsonl", src, root):
        if isinstance(t.get("targetID"), str):
            (tomb_prefs if t.get("targetKind") == "preference" else tomb_ids).add(t["targetID"])
    notes: list[str] = []
    counts = {"tombstoned": 0, "deleted": 0, "superseded": 0, "empty": 0}
    episodes: list[NewRecord] = []
    for line in _lines(data, "items/episode.jsonl", src, root):
        rec = _episode(line, tomb_ids, counts, label)
        if rec is not None:
            episodes.append(rec)
    memories: list[NewRecord] = []
    facts = _lines(data, "items/fact.jsonl", src, root)
    fact_keys = unique_keys("user/pm_fact_", [str(f.get("id")) for f in facts])
    for line in facts:
        fid = line.get("id")
        if not isinstance(fid, str) or not fid:
            counts["empty"] += 1
            continue
        if fid in tomb_ids or line.get("episodeID") in tomb_ids:
            counts["tombstoned"] += 1
            continue
        if any(line.get(k) is not None for k in ("tValidTo", "supersededBy", "prunedAt")):
            counts["superseded"] += 1
            continue
        vm = vmem_of(line)
        text = clean_text(line.get("text")) or clean_text(line.get("object"))
        value: Any = json_safe(vm["value"]) if "value" in vm else text
        if value is None or value == "":
            counts["empty"] += 1
            continue
        typ: str = vm["type"] if vm.get("type") in KEYED_TYPES else "fact"
        meta = base_meta(vm, f"{KIND}:{fid}", label, fid)
        if isinstance(value, str):
            value = clip(value, meta)
        memories.append(NewRecord(type=typ, key=valid_key(vm.get("key")) or fact_keys[str(fid)], value=value,
                                  authority=authority_of(vm, Authority.INFERRED, keyed=True),
                                  ts=unix_ts(line.get("tValidFrom")) or unix_ts(line.get("createdAt")), meta=meta))
    for line in _lines(data, "items/preference.jsonl", src, root):
        key, val = line.get("key"), line.get("value")
        if not isinstance(key, str) or not key:
            counts["empty"] += 1
            continue
        if key in tomb_prefs:
            counts["tombstoned"] += 1
            continue
        vm = vmem_of(line)
        value = json_safe(vm["value"]) if "value" in vm else clean_text(val)
        if value is None or value == "":
            counts["empty"] += 1
            continue
        meta = base_meta(vm, f"{KIND}:preference:{digest(key)}:{digest(repr(value))}", label, key)
        if isinstance(value, str):
            value = clip(value, meta)
        vkey = valid_key(vm.get("key")) or "user/pm_" + (slug(key) or digest(key, 8))
        memories.append(NewRecord(type="preference", key=vkey, value=value,
                                  authority=authority_of(vm, Authority.OBSERVED, keyed=True), meta=meta))
    procs = _lines(data, "items/procedure.jsonl", src, root)
    proc_keys = unique_keys("user/pm_procedure_", [str(p.get("id")) for p in procs])
    for line in procs:
        pid = line.get("id")
        if not isinstance(pid, str) or not pid:
            counts["empty"] += 1
            continue
        if pid in tomb_ids:
            counts["tombstoned"] += 1
            continue
        vm = vmem_of(line)
        steps = [s for s in as_list(line.get("steps")) if isinstance(s, str)]
        if "value" in vm:
            value = json_safe(vm["value"])
        elif vm:
            value = clean_text("\n".join(steps))
        else:
            name = clean_text(line.get("name")) or ""
            value = clean_text("\n".join(([name] if name else []) + steps))
        if value is None or value == "":
            counts["empty"] += 1
            continue
        meta = base_meta(vm, f"{KIND}:{pid}", label, pid)
        if isinstance(value, str):
            value = clip(value, meta)
        memories.append(NewRecord(type="instruction", key=valid_key(vm.get("key")) or proc_keys[pid], value=value,
                                  authority=authority_of(vm, Authority.OBSERVED, keyed=True), meta=meta))
    for line in _lines(data, "items/core.jsonl", src, root):
        cid, content = line.get("id"), clean_text(line.get("content"))
        if not isinstance(cid, str) or not cid or not content:
            counts["empty"] += 1
            continue
        if cid in tomb_ids:
            counts["tombstoned"] += 1
            continue
        meta = base_meta({}, f"{KIND}:{cid}", label, cid)
        typ = "instruction" if "persona" in cid.lower() else "fact"
        memories.append(NewRecord(type=typ, key="user/pm_core_" + (slug(cid) or digest(cid, 8)),
                                  value=clip(content, meta), authority=Authority.OBSERVED, meta=meta))
    for kind, count in sorted(counts.items()):
        if count:
            notes.append({"tombstoned": f"{count} tombstoned record(s) not imported (deleted at the source)",
                          "deleted": f"{count} deleted episode(s) not imported",
                          "superseded": f"{count} superseded or pruned fact(s) not imported",
                          "empty": f"{count} record(s) without id or text skipped"}[kind])
    other = 0
    known = {"episode", "fact", "preference", "procedure", "core", "context"}
    for rel in sorted(data):
        if rel.startswith("items/") and rel.endswith(".jsonl"):
            kind = rel[len("items/"):-len(".jsonl")]
            if kind not in known:
                n = len(_lines(data, rel, src, root))
                if n:
                    other += n
                    what = "has no VMEM equivalent" if kind in UNMAPPED else "is a vendor kind"
                    notes.append(f"{n} '{kind}' record(s) not imported ({kind} {what})")
    skipped = sum(counts.values()) + other
    yield ImportUnit(f"bundle {label} (episodes)", episodes, notes=notes, skipped=skipped)
    yield ImportUnit(f"bundle {label} (memories)", memories)


def _episode(line: dict[str, Any], tomb_ids: set[str], counts: dict[str, int], label: str) -> NewRecord | None:
    eid = line.get("id")
    if not isinstance(eid, str) or not eid:
        counts["empty"] += 1
        return None
    if eid in tomb_ids:
        counts["tombstoned"] += 1
        return None
    if line.get("deletedAt") is not None:
        counts["deleted"] += 1
        return None
    vm = vmem_of(line)
    text = clean_text(line.get("details")) or clean_text(line.get("summary")) or ""
    typ: str = vm["type"] if vm.get("type") in NOTE_TYPES else "event"
    speaker = as_str(line.get("speaker"))
    role = vm.get("role") if vm else speaker
    role = short(role, 50) if isinstance(role, str) else None
    fallback = {"user": Authority.USER, "human": Authority.USER, "assistant": Authority.INFERRED}.get(
        speaker or "", Authority.OBSERVED)
    authority = authority_of(vm, fallback, keyed=False)
    md = as_dict(line.get("metadata"))
    conversation = vm.get("conversation") if vm else md.get("conversation")
    conversation = short(conversation, 200) if isinstance(conversation, str) else None
    meta = base_meta(vm, f"{KIND}:{eid}", label, eid)
    if isinstance(line.get("sourceType"), str):
        meta["source_type"] = short(line["sourceType"], 100)
    ts = unix_ts(line.get("eventTime")) or unix_ts(line.get("mentionTime")) or unix_ts(line.get("ingestionTime"))
    if "value" in vm:
        value = json_safe(vm["value"])
        if isinstance(value, dict) and isinstance(value.get("text"), str):
            value["text"] = clip(value["text"], meta)
        return NewRecord(type=typ, value=value, authority=authority, ts=ts, meta=meta)
    if typ == "conversation":
        title: str | None = as_str(vm.get("title"), text)
        return NewRecord(type="conversation", title=clip(title or "(untitled)", meta), conversation=conversation,
                         role=role, authority=authority, ts=ts, meta=meta)
    if not text.strip():
        counts["empty"] += 1
        return None
    title = as_str(vm.get("title"))
    return NewRecord(type=typ, text=clip(text, meta), conversation=conversation, role=role, title=title,
                     authority=authority, ts=ts, meta=meta)
