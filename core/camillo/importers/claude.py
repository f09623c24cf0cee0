"""Import a Claude data export (the ZIP Anthropic e-mails, or its folder).

Reads ``conversations.json``, ``memories.json`` and ``projects.json`` wherever they sit in the
archive (exports put them in one ``data-…`` folder); at least one must be present.
``users.json`` (name, e-mail, phone) is not imported.

* **Conversations** (one unit each): a ``conversation`` record (title ``name``), an ``inferred``
  ``summary`` note when Claude wrote one, then each message: ``human`` → role ``user``, authority
  ``user``; ``assistant`` → ``inferred``.  A message's ``text`` blocks are joined into one
  ``message`` record (the ``text`` field is used when there are no blocks).  ``tool_use`` and
  ``tool_result`` blocks become separate ``message`` records of role ``tool``, authority
  ``external``, whose text starts with ``[tool_use NAME]`` / ``[tool_result NAME]``
  (``meta["tool"]`` = the name).  ``thinking`` blocks are left out and counted (as for ChatGPT's
  reasoning: not what either side said); ``token_budget`` blocks carry nothing.  Each attachment
  with ``extracted_content`` becomes an ``attachment`` note, authority ``external`` (a document's
  content is not the user's own statement), value ``{"name", "media_type", "text",
  "conversation"}``; ``files`` without content are named in the message's ``meta["files"]``.
* **memories.json**: ``conversations_memory`` is split into paragraphs, and a paragraph made of
  list items into its items (markdown headings are dropped); each becomes a proposed ``fact``,
  ``inferred`` (key ``user/claude_memory_<8 hex>``).  Each ``project_memories`` entry becomes one
  proposed fact ``project/claude_<8 hex of the project uuid>``.
* **projects.json**: one ``summary`` note per project, authority ``user`` (the user wrote the
  description and the project instructions), and one ``attachment`` note per project document
  (``external``).

Idempotency keys: ``claude:<message uuid>`` (``:<block index>`` for tool blocks,
``:attachment:<n>`` for attachments), ``claude:conversation:<uuid>``,
``claude:summary:<uuid>:<hash>``, ``claude:memory:<hash>``, ``claude:project_memory:<uuid>:<hash>``,
``claude:project:<uuid>:<hash>`` and ``claude:doc:<uuid or hash>``.

A pure reader (no vault access): any thread may call it; :func:`run_import` writes on the vault's thread.
"""

from __future__ import annotations

import json
import mimetypes
import re
from collections.abc import Iterator
from typing import Any

from ..values import Authority
from ..vault import NewRecord
from . import ImportFailed, ImportUnit
from .safety import (
    FileSource,
    Source,
    as_list,
    clean_text,
    clip,
    digest,
    expect,
    json_safe,
    load_json,
    open_source,
    short,
    unique_keys,
    unix_ts,
)

KIND = "claude"
_BULLET = re.compile(r"^\s*(?:[-*•–]|\d+[.)])\s+")


def read(source_path: str, **_: Any) -> Iterator[ImportUnit]:
    with open_source(source_path) as src:
        units = list(_read(src))
    yield from units


def _find(src: Source, name: str) -> str | None:
    if isinstance(src, FileSource):
        if src.only == name:
            return name
        others = ("conversations.json", "memories.json", "projects.json", "users.json")
        return src.only if name == "conversations.json" and src.only not in others else None
    return src.find(name)


def _read(src: Source) -> Iterator[ImportUnit]:
    conv_name, mem_name, proj_name = (_find(src, n) for n in ("conversations.json", "memories.json", "projects.json"))
    if not (conv_name or mem_name or proj_name):
        raise ImportFailed(f"{src.label} has no conversations.json, memories.json or projects.json: "
                           "is it a Claude data export?")
    # Parse every file first: a damaged one refuses the whole import.
    convs = _list_of(load_json(src, conv_name), src.where(conv_name), "chat_messages",
                     "Claude conversations") if conv_name else []
    memories = _list_of(load_json(src, mem_name), src.where(mem_name), None, "Claude memories") if mem_name else []
    projects = _list_of(load_json(src, proj_name), src.where(proj_name), None, "Claude projects") if proj_name else []
    names = {p.get("uuid"): clean_text(p.get("name")) for p in projects if isinstance(p, dict)}
    for index, conv in enumerate(convs):
        yield _conversation(conv, index, conv_name or "")
    for index, proj in enumerate(projects):
        yield _project(proj, index, proj_name or "")
    if memories:
        yield _memories(memories, mem_name or "", names)


def _list_of(data: Any, where: str, needed: str | None, what: str) -> list[dict[str, Any]]:
    if isinstance(data, dict):
        data = [data]
    expect(data, list, where, f"{what} (a list)")
    items = [d for d in data if isinstance(d, dict)]
    if data and not items:
        raise ImportFailed(f"{where} does not look like {what}: it holds no objects")
    if needed and items and not any(isinstance(d.get(needed), list) for d in items):
        raise ImportFailed(f"{where} does not look like {what}: no item has '{needed}'")
    return items


def _tool_text(block: dict[str, Any]) -> str:
    btype = block.get("type")
    name = short(block.get("name"), 100) or "tool"
    if btype == "tool_use":
        body = block.get("input")
        rendered = json.dumps(json_safe(body), ensure_ascii=False, sort_keys=True) if body is not None else ""
        return f"[tool_use {name}] {rendered}".strip()
    lines: list[str] = []
    content = block.get("content")
    items = content if isinstance(content, list) else [content]
    for item in items:
        if isinstance(item, str):
            lines.append(item)
        elif isinstance(item, dict):
            bits = [item.get("title"), item.get("url"), item.get("text")]
            lines.append(" — ".join(b for b in bits if isinstance(b, str) and b.strip()))
    err = " (error)" if block.get("is_error") is True else ""
    return f"[tool_result {name}]{err}\n" + "\n".join(x for x in lines if x)


def _conversation(conv: dict[str, Any], index: int, source_name: str) -> ImportUnit:
    title = clean_text(conv.get("name")) or "(untitled)"
    label = f"conversation '{title[:60]}'"
    conv_id = short(conv.get("uuid"), 200)
    if not conv_id:
        return ImportUnit(f"conversation #{index + 1}", [], notes=["it has no uuid; skipped"], skipped=1)
    conv_ts = unix_ts(conv.get("created_at"))
    cmeta: dict[str, Any] = {"import": f"{KIND}:conversation:{conv_id}", "source": source_name, "original_id": conv_id}
    if conv_ts:
        cmeta["original_ts"] = conv_ts
    records = [NewRecord(type="conversation", title=clip(title, None, 4096), conversation=conv_id,
                         authority=Authority.USER, ts=conv_ts, meta=cmeta)]
    summary = clean_text(conv.get("summary"))
    if summary and summary.strip():
        smeta: dict[str, Any] = {"import": f"{KIND}:summary:{conv_id}:{digest(summary)}", "source": source_name,
                                 "original_id": conv_id}
        records.append(NewRecord(type="summary", text=clip(summary, smeta), conversation=conv_id, role="assistant",
                                 authority=Authority.INFERRED, ts=unix_ts(conv.get("updated_at")) or conv_ts,
                                 meta=smeta))
    thinking = empty = other = 0
    messages = as_list(conv.get("chat_messages"))
    for n, msg in enumerate(messages):
        if not isinstance(msg, dict):
            other += 1
            continue
        sender = msg.get("sender")
        role, authority = ("user", Authority.USER) if sender == "human" else ("assistant", Authority.INFERRED)
        mid = short(msg.get("uuid"), 200) or f"{conv_id}:{n}"
        ts = unix_ts(msg.get("created_at")) or conv_ts
        texts: list[str] = []
        tools: list[tuple[int, dict[str, Any]]] = []
        blocks = msg.get("content")
        if isinstance(blocks, list) and blocks:
            for b, block in enumerate(blocks):
                if not isinstance(block, dict):
                    continue
                btype = block.get("type")
                if btype == "text" and isinstance(block.get("text"), str):
                    texts.append(block["text"])
                elif btype == "thinking":
                    thinking += 1
                elif btype in ("tool_use", "tool_result"):
                    tools.append((b, block))
        elif isinstance(msg.get("text"), str):
            texts.append(msg["text"])
        meta: dict[str, Any] = {"import": f"{KIND}:{mid}", "source": source_name, "original_id": mid}
        if ts:
            meta["original_ts"] = ts
        files = [short(f.get("file_name"), 200) for f in as_list(msg.get("files")) if isinstance(f, dict)]
        if any(files):
            meta["files"] = ", ".join(f for f in files if f)[:1000]
        text = clean_text("\n\n".join(t for t in texts if t.strip())) or ""
        if text.strip():
            records.append(NewRecord(type="message", text=clip(text, meta), conversation=conv_id, role=role,
                                     authority=authority, ts=ts, meta=meta))
        elif not tools:
            empty += 1
        for b, block in tools:
            tmeta: dict[str, Any] = {"import": f"{KIND}:{mid}:{b}", "source": source_name, "original_id": mid,
                                     "block": str(block.get("type")), "tool": short(block.get("name"), 100) or "tool"}
            records.append(NewRecord(type="message", text=clip(clean_text(_tool_text(block)) or "", tmeta),
                                     conversation=conv_id, role="tool", authority=Authority.EXTERNAL, ts=ts,
                                     meta=tmeta))
        attachments = as_list(msg.get("attachments"))
        for a, att in enumerate(attachments):
            if not isinstance(att, dict):
                continue
            body = clean_text(att.get("extracted_content"))
            if not body or not body.strip():
                continue
            name = short(att.get("file_name"), 300) or f"attachment {a + 1}"
            ameta: dict[str, Any] = {"import": f"{KIND}:{mid}:attachment:{a}", "source": source_name,
                                     "original_id": mid}
            if isinstance(att.get("file_size"), int) and not isinstance(att["file_size"], bool) and att["file_size"] >= 0:
                ameta["size"] = att["file_size"]
            value = {"name": name, "media_type": short(att.get("file_type"), 100) or _guess(name),
                     "text": clip(body, ameta), "conversation": conv_id}
            records.append(NewRecord(type="attachment", value=value, authority=Authority.EXTERNAL, ts=ts, meta=ameta))
    notes = []
    if thinking:
        notes.append(f"{thinking} thinking block(s) left out")
    if empty:
        notes.append(f"{empty} empty message(s) left out")
    if other:
        notes.append(f"{other} malformed message(s) left out")
    return ImportUnit(label, records, notes=notes, skipped=thinking + empty + other)


def _guess(name: str) -> str:
    return mimetypes.guess_type(name)[0] or "text/plain"


def _project(proj: dict[str, Any], index: int, source_name: str) -> ImportUnit:
    name = clean_text(proj.get("name")) or "(unnamed project)"
    label = f"project '{name[:60]}'"
    pid = short(proj.get("uuid"), 200)
    if not pid:
        return ImportUnit(f"project #{index + 1}", [], notes=["it has no uuid; skipped"], skipped=1)
    ts = unix_ts(proj.get("created_at"))
    description = clean_text(proj.get("description")) or ""
    template = clean_text(proj.get("prompt_template")) or ""
    parts = [f"Project: {name}"]
    if description.strip():
        parts.append(description.strip())
    if template.strip():
        parts.append("Project instructions:\n" + template.strip())
    text = "\n\n".join(parts)
    meta: dict[str, Any] = {"import": f"{KIND}:project:{pid}:{digest(text)}", "source": source_name,
                            "original_id": pid, "project": name[:200]}
    records = [NewRecord(type="summary", value={"title": name, "text": clip(text, meta)},
                         authority=Authority.USER, ts=ts, meta=meta)]
    docs = as_list(proj.get("docs"))
    for d, doc in enumerate(docs):
        if not isinstance(doc, dict):
            continue
        body = clean_text(doc.get("content"))
        if not body or not body.strip():
            continue
        fname = short(doc.get("filename"), 300) or f"document {d + 1}"
        did = short(doc.get("uuid"), 200) or f"{pid}:{digest(body)}"
        dmeta: dict[str, Any] = {"import": f"{KIND}:doc:{did}", "source": source_name, "original_id": did,
                                 "project": name[:200]}
        records.append(NewRecord(type="attachment", value={"name": fname, "media_type": _guess(fname),
                                                           "text": clip(body, dmeta)},
                                 authority=Authority.EXTERNAL, ts=unix_ts(doc.get("created_at")) or ts, meta=dmeta))
    return ImportUnit(label, records)


def _split_memory(text: str) -> list[str]:
    out: list[str] = []
    for para in re.split(r"\n\s*\n", text):
        lines = [ln.strip() for ln in para.strip().splitlines() if ln.strip()]
        lines = [ln for ln in lines if not ln.startswith("#") and not re.fullmatch(r"\*\*[^*]+\*\*:?", ln)]
        if not lines:
            continue
        if len(lines) > 1 and sum(1 for ln in lines if _BULLET.match(ln)) >= len(lines) - 1:
            out += [_BULLET.sub("", ln).strip() for ln in lines if _BULLET.sub("", ln).strip()]
        else:
            out.append(" ".join(_BULLET.sub("", ln) if i == 0 else ln for i, ln in enumerate(lines)).strip())
    return [o for o in out if o]


def _memories(items: list[dict[str, Any]], source_name: str, project_names: dict[Any, str | None]) -> ImportUnit:
    records: list[NewRecord] = []
    texts: list[str] = []
    for item in items:
        block = clean_text(item.get("conversations_memory"))
        if block:
            texts += [clip(t, None, 64 * 1024) for t in _split_memory(block)]
    keys = unique_keys("user/claude_memory_", texts)
    for text in dict.fromkeys(texts):
        records.append(NewRecord(type="fact", key=keys[text], value=text, authority=Authority.INFERRED,
                                 meta={"import": f"{KIND}:memory:{digest(text)}", "source": source_name,
                                       "via": "conversations_memory"}))
    projects: dict[str, str] = {}
    for item in items:
        pm = item.get("project_memories")
        if isinstance(pm, dict):
            for pid, body in pm.items():
                body_text = clean_text(body)
                if body_text and body_text.strip() and isinstance(pid, str):
                    projects[pid] = body_text.strip()
    pkeys = unique_keys("project/claude_", projects)
    for pid, text in projects.items():
        meta: dict[str, Any] = {"import": f"{KIND}:project_memory:{digest(pid)}:{digest(text)}",
                                "source": source_name, "via": "project_memories", "project_id": pid[:200]}
        if project_names.get(pid):
            meta["project"] = (project_names[pid] or "")[:200]
        records.append(NewRecord(type="fact", key=pkeys[pid], value=clip(text, meta), authority=Authority.INFERRED,
                                 meta=meta))
    return ImportUnit("Claude memories", records)
