"""Import a PAM export (Portable AI Memory 1.x): ``memory-store.json`` (given directly, in a folder,
or in a ZIP) and the conversation files next to it (``conversations/*.json`` and those its
``conversations_index`` names).

Integrity: when the store carries ``integrity``, its ``checksum`` (SHA-256 over the RFC 8785 form
of the memories sorted by id) and ``total_memories`` must match, else ImportFailed and nothing is
imported.  A ``signature`` is not verified (PAM says importers must not reject unsigned exports,
and Camillo holds no PAM keys).

Memories, by ``type``: ``preference`` → ``preference``; ``instruction`` → ``instruction``;
``fact``, ``identity``, ``skill``, ``relationship``, ``goal``, ``environment``, ``project`` →
``fact`` (key ``user/pam_<type>_<8 hex of the memory id's SHA-256>``, ``meta["pam_type"]`` keeps
the PAM type); ``context`` → an ``event`` note; ``custom`` → the note type ``custom_type`` names
when it is ``event``, ``decision``, ``summary`` or ``attachment``, else a ``fact``.  Memories whose
``status`` is ``superseded``, ``retracted`` or ``archived`` are not current: skipped, with the
reason.  Authority: ``provenance.extraction_method`` ``explicit_user_input`` or ``manual`` →
``observed``; anything else → ``inferred``; keyed records never above ``observed`` (an unsigned
plaintext file): preferences, instructions and inferred facts wait in the inbox.  Provenance goes to
``meta``: ``platform``, ``extraction_method``, ``original_id``, ``original_ts``.

Conversations: a ``conversation`` record (``inferred``: titles are usually machine-written) and
the messages: ``user`` → ``user``, ``assistant`` → ``inferred``, ``system`` and ``tool`` →
``external``; messages marked ``is_thought`` are left out.  A Camillo export's ``vmem`` objects
(``metadata.vmem``, ``raw_metadata.vmem``) restore the original type, key, role, conversation, value
and class (capped at ``observed`` for keyed records).

Idempotency keys: ``pam:<memory id>``, ``pam:conversation:<id>``, ``pam:msg:<conversation id>:<message id>``.

A pure reader (no vault access): any thread may call it; :func:`run_import` writes on the vault's thread.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from typing import Any

from ..values import KEYED_TYPES, Authority
from ..vault import NewRecord
from . import ImportFailed, ImportUnit
from .portable_memory import NOTE_TYPES, authority_of, base_meta, valid_key
from .safety import (
    FileSource,
    Source,
    as_dict,
    as_str,
    bad_name,
    clean_text,
    clip,
    expect,
    json_safe,
    load_json,
    open_source,
    short,
    slug,
    unique_keys,
    unix_ts,
)

KIND = "pam"
FACT_TYPES = frozenset({"fact", "identity", "skill", "relationship", "goal", "environment", "project"})
NOT_CURRENT = frozenset({"superseded", "retracted", "archived"})


def read(source_path: str, **_: Any) -> Iterator[ImportUnit]:
    if os.path.isfile(source_path) and os.path.basename(source_path) == "memory-store.json":
        source_path = os.path.dirname(os.path.abspath(source_path))  # to find conversations/ next to it
    with open_source(source_path) as src:
        units = list(_read(src))
    yield from units


def verify_integrity(store: dict[str, Any], memories: list[Any], where: str) -> None:
    from ..exporters import jcs

    integrity = store.get("integrity")
    if integrity is None:
        return
    expect(integrity, dict, where, "a PAM integrity block")
    total = integrity.get("total_memories")
    if isinstance(total, int) and total != len(memories):
        raise ImportFailed(f"{where}: integrity.total_memories says {total}, the file holds {len(memories)}; "
                           "nothing was imported")
    checksum = integrity.get("checksum")
    if checksum is None:
        return
    ordered = sorted(memories, key=lambda m: str(m.get("id", "")) if isinstance(m, dict) else "")
    try:
        actual = "sha256:" + hashlib.sha256(jcs(ordered)).hexdigest()
    except (TypeError, ValueError) as exc:
        raise ImportFailed(f"{where}: the memories cannot be canonicalised to check the checksum ({exc})") from None
    if actual != checksum:
        raise ImportFailed(f"{where}: integrity checksum mismatch (the export is damaged or was modified); "
                           "nothing was imported")


def _read(src: Source) -> Iterator[ImportUnit]:
    name = src.only if isinstance(src, FileSource) else src.find("memory-store.json")
    if name is None:
        raise ImportFailed(f"{src.label} has no memory-store.json: is it a PAM export?")
    where = src.where(name)
    root = name[: -len(name.rsplit("/", 1)[-1])]
    store = expect(load_json(src, name), dict, where, "a PAM memory store (an object)")
    if store.get("schema") != "portable-ai-memory":
        raise ImportFailed(f"{where} does not look like a PAM memory store (its 'schema' is not 'portable-ai-memory')")
    version = store.get("schema_version")
    if not isinstance(version, str) or not version.startswith("1."):
        raise ImportFailed(f"{where}: PAM schema version {str(version)[:20]!r} is not supported (1.x is)")
    memories = expect(store.get("memories", []), list, where, "a PAM memory store with a 'memories' list")
    verify_integrity(store, memories, where)
    conv_names: list[str] = []
    missing = 0
    index = store.get("conversations_index")
    if isinstance(index, list):
        for entry in index:
            storage = entry.get("storage") if isinstance(entry, dict) else None
            if isinstance(storage, dict) and storage.get("type") == "file" and isinstance(storage.get("ref"), str):
                ref = storage["ref"]
                if bad_name(ref):
                    raise ImportFailed(f"{where} names the conversation file '{ref[:200]}', outside the export; "
                                       "refused")
                if root + ref in src.names():
                    conv_names.append(root + ref)
                else:
                    missing += 1
    conv_names += [n for n in src.names() if n.startswith(root + "conversations/") and n.endswith(".json")]
    conv_names = sorted(dict.fromkeys(conv_names))
    docs = [(n, load_json(src, n)) for n in conv_names]  # all parsed before anything is imported
    yield _memories(memories, name.rsplit("/", 1)[-1])
    if missing:
        yield ImportUnit(name.rsplit("/", 1)[-1], [], notes=[f"{missing} conversation file(s) named in "
                                                              "conversations_index are not in the export"],
                         skipped=missing)
    for n, doc in docs:
        yield _conversation(doc, src.where(n), n.rsplit("/", 1)[-1])


def _memories(memories: list[Any], source: str) -> ImportUnit:
    records: list[NewRecord] = []
    skipped: dict[str, int] = {}
    items = [m for m in memories if isinstance(m, dict) and isinstance(m.get("id"), str) and m["id"]]
    if len(items) < len(memories):
        skipped["malformed"] = len(memories) - len(items)
    keys: dict[str, dict[str, str]] = {}
    by_type: dict[str, list[str]] = {}
    for m in items:
        by_type.setdefault(slug(str(m.get("type")), 20) or "memory", []).append(m["id"])
    for t, ids in by_type.items():
        keys[t] = unique_keys(f"user/pam_{t}_", ids)
    for m in items:
        mid = m["id"]
        status = m.get("status", "active")
        if status in NOT_CURRENT:
            skipped[str(status)] = skipped.get(str(status), 0) + 1
            continue
        content = clean_text(m.get("content"))
        md = as_dict(m.get("metadata"))
        vm = as_dict(md.get("vmem"))
        if not content and "value" not in vm:
            skipped["empty"] = skipped.get("empty", 0) + 1
            continue
        ptype = as_str(m.get("type"), "fact")
        if vm.get("type") in KEYED_TYPES or vm.get("type") in NOTE_TYPES:
            typ = vm["type"]
        elif ptype in ("preference", "instruction"):
            typ = ptype
        elif ptype == "context":
            typ = "event"
        elif ptype == "custom" and m.get("custom_type") in ("event", "decision", "summary", "attachment"):
            typ = m["custom_type"]
        else:
            typ = "fact"
        prov = as_dict(m.get("provenance"))
        method = prov.get("extraction_method")
        fallback = Authority.OBSERVED if method in ("explicit_user_input", "manual") else Authority.INFERRED
        keyed = typ in KEYED_TYPES
        authority = authority_of(vm, fallback, keyed=keyed)
        temporal = as_dict(m.get("temporal"))
        ts = unix_ts(temporal.get("created_at"))
        meta = base_meta(vm, f"{KIND}:{mid}", source, mid)
        meta["pam_type"] = short(ptype, 40) or "fact"
        for field_, name in (("platform", "platform"), ("extraction_method", "extraction_method"),
                             ("conversation_ref", "conversation_ref")):
            if isinstance(prov.get(field_), str):
                meta[name] = short(prov[field_], 200)
        if ts:
            meta["original_ts"] = ts
        value: Any = json_safe(vm["value"]) if "value" in vm else clip(content or "", meta)
        if keyed:
            key = valid_key(vm.get("key")) or keys[slug(str(m.get("type")), 20) or "memory"][mid]
            records.append(NewRecord(type=typ, key=key, value=value, authority=authority, ts=ts, meta=meta))
        elif isinstance(value, dict):
            records.append(NewRecord(type=typ, value=value, authority=authority, ts=ts, meta=meta))
        else:
            records.append(NewRecord(type=typ, text=str(value), authority=authority, ts=ts, meta=meta,
                                     conversation=vm.get("conversation") if isinstance(vm.get("conversation"), str)
                                     else None))
    notes = [f"{n} {what} memor{'y' if n == 1 else 'ies'} not imported (not current)" if what in NOT_CURRENT
             else f"{n} {what} memor{'y' if n == 1 else 'ies'} skipped" for what, n in sorted(skipped.items())]
    return ImportUnit(f"{source} (memories)", records, notes=notes, skipped=sum(skipped.values()))


def _conversation(doc: Any, where: str, fname: str) -> ImportUnit:
    if not isinstance(doc, dict) or doc.get("schema") != "portable-ai-memory-conversation" \
            or not isinstance(doc.get("messages"), list):
        return ImportUnit(fname, [], notes=["not a PAM conversation file; skipped"], skipped=1)
    file_id = short(doc.get("id"), 200) or fname
    raw = as_dict(doc.get("raw_metadata"))
    cvm = as_dict(raw.get("vmem"))
    provider = as_dict(doc.get("provider"))
    if cvm:
        conv_id = as_str(cvm.get("conversation"))
    else:
        conv_id = short(provider.get("conversation_id"), 200) or file_id
    title = clean_text(doc.get("title"))
    temporal = as_dict(doc.get("temporal"))
    conv_ts = unix_ts(temporal.get("created_at"))
    records: list[NewRecord] = []
    label = f"conversation '{(title or file_id)[:60]}'"
    if cvm or (title and conv_id):
        meta = base_meta(cvm, f"{KIND}:conversation:{file_id}", fname, file_id)
        if isinstance(provider.get("name"), str):
            meta["platform"] = short(provider["name"], 32)
        ctitle = as_str(cvm.get("title"), title or "(untitled)")
        records.append(NewRecord(type="conversation", title=clip(ctitle, meta), conversation=conv_id,
                                 authority=authority_of(cvm, Authority.INFERRED, keyed=False), ts=conv_ts, meta=meta))
    thoughts = empty = 0
    for n, msg in enumerate(doc["messages"]):
        if not isinstance(msg, dict):
            empty += 1
            continue
        if msg.get("is_thought") is True:
            thoughts += 1
            continue
        content = as_dict(msg.get("content"))
        text = as_str(content.get("text"))
        if text is None and isinstance(content.get("parts"), list):
            text = "\n".join(p["text"] for p in content["parts"] if isinstance(p, dict) and isinstance(p.get("text"), str))
        text = clean_text(text) or ""
        mraw = as_dict(msg.get("raw_metadata"))
        vm = as_dict(mraw.get("vmem"))
        if not text.strip() and "value" not in vm:
            empty += 1
            continue
        prole: str = msg["role"] if msg.get("role") in ("user", "assistant", "system", "tool") else "tool"
        role = as_str(vm.get("role")) if vm else prole
        fallback = {"user": Authority.USER, "assistant": Authority.INFERRED}.get(prole, Authority.EXTERNAL)
        authority = authority_of(vm, fallback, keyed=False)
        mid = short(msg.get("id"), 200) or str(n)
        meta = base_meta(vm, f"{KIND}:msg:{file_id}:{mid}", fname, short(msg.get("provider_message_id"), 200) or mid)
        ts = unix_ts(msg.get("created_at")) or conv_ts
        mconv = as_str(vm.get("conversation")) if vm else conv_id
        typ: str = vm["type"] if vm.get("type") in NOTE_TYPES else "message"
        if "value" in vm:
            records.append(NewRecord(type=typ, value=json_safe(vm["value"]), authority=authority, ts=ts, meta=meta))
        else:
            records.append(NewRecord(type=typ, text=clip(text, meta), conversation=mconv, role=role,
                                     authority=authority, ts=ts, meta=meta))
    notes = []
    if thoughts:
        notes.append(f"{thoughts} thought message(s) left out")
    if empty:
        notes.append(f"{empty} empty or malformed message(s) left out")
    return ImportUnit(label, records, notes=notes, skipped=thoughts + empty)

