"""Import a Claude data export: the ZIP Anthropic e-mails, its folder, the several ZIP parts a newer
export arrives as (``conversations-000.zip``, ``projects-000.zip``, …, saved in one folder), or one
JSON file.

Layouts read (wherever they sit in the archive; at least one must be present):

* ``conversations.json`` (a list of conversations), ``conversations/<uuid>.json`` (one
  conversation per file) and a single conversation object as the API returns it (with the whole
  message tree and ``current_leaf_message_uuid``).  A conversation found in two files is imported
  once (the copy updated last), and the report says so.
* ``projects.json`` (a list) or ``projects/<uuid>.json`` (one project per file).
* ``memories.json`` (a list or one object).  ``users.json`` (name, e-mail, phone) is not imported.

Files the importer does not know are counted by name in the report.

* **Conversations** (one unit each): a ``conversation`` record (title ``name``), an ``inferred``
  ``summary`` note when Claude wrote one, then the messages of the *current branch*, in order.
  Claude keeps every edited question and regenerated answer in one flat ``chat_messages`` list,
  linked by ``parent_message_uuid``; the current branch runs from ``current_leaf_message_uuid``
  (else the leaf created last) up to the root.  Messages of other branches are kept as
  *alternates*: the same records in the conversation ``<uuid>#alternates`` (so they are not
  interleaved with the thread), ``meta["alternate_of"]`` = the conversation, ``meta["parent"]`` =
  their parent message; a user's abandoned turn has authority ``observed`` (the user wrote it, then
  replaced it: not their current words).  Without any ``parent_message_uuid`` the messages are one
  branch in export order.  A conversation whose messages link in a circle (a message naming itself
  as its parent) is skipped whole, with the reason.
* **Messages**: ``human`` → role ``user``, authority ``user``; ``assistant`` → ``inferred``.  The
  content blocks become records in their original order: consecutive text goes into one
  ``message`` record; a ``tool_use`` or ``tool_result`` block becomes its own ``message`` record
  of role ``tool``, authority ``external`` (text ``[tool_use NAME] …`` / ``[tool_result NAME] …``,
  ``meta["tool"]``), so text written after a tool call comes after it.  ``voice_note`` blocks: the
  transcript is the sender's words (``meta["voice"]``).  ``document`` blocks: their text becomes an
  ``attachment`` note (``external``).  ``image`` blocks and the message's ``files``: references
  (``[image: name]`` in the text, ``meta["files"]``; Claude exports carry only their names, so they
  are counted as not in the export unless the export holds a file named by its uuid).  Citations of
  text blocks are kept in ``meta["citations"]`` (JSON text: title and url each).  ``thinking`` and
  ``redacted_thinking`` blocks are left out and counted (not what either side said);
  ``token_budget`` blocks carry nothing; ``web_widget``, ``flag`` and any block type the importer
  does not know are counted by type and left out.  Each attachment with ``extracted_content``
  becomes an ``attachment`` note, authority ``external``, value ``{"name", "media_type", "text",
  "conversation"}``; one without content is a file reference.  Times are kept to the millisecond
  (``meta["original_ms"]``); a record's ``ts`` is never earlier than the one before it.
* **memories.json**: ``conversations_memory`` is split into paragraphs, and a paragraph made of
  list items into its items (markdown headings are dropped); each becomes a proposed ``fact``,
  ``inferred`` (key ``user/claude_memory_<8 hex>``).  Each ``project_memories`` entry becomes one
  proposed fact ``project/claude_<8 hex of the project uuid>``.
* **projects**: one ``summary`` note per project, authority ``user`` (the user wrote the
  description and the project instructions), and one ``attachment`` note per project document
  (``external``).

Idempotency keys: ``claude:<message uuid>`` (its first text; ``:<block index>`` for every later
record of the message: text after a tool call, tool blocks, documents; ``:attachment:<n>`` for
attachments), ``claude:conversation:<uuid>``, ``claude:summary:<uuid>:<hash>``,
``claude:memory:<hash>``, ``claude:project_memory:<uuid>:<hash>``, ``claude:project:<uuid>:<hash>``
and ``claude:doc:<uuid or hash>``.  A conversation without a uuid gets ``derived-<16 hex>`` from its
creation time and first message.

A pure reader (no vault access): any thread may call it; :func:`run_import` writes on the vault's thread.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import mimetypes
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..values import Authority
from ..vault import NewRecord
from . import ImportFailed, ImportUnit
from .files import FileRef, Files, Tally, kind_of, marker, refs_meta
from .safety import (
    FileSource,
    Source,
    as_dict,
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
    unix_ms,
    unix_ts,
)

KIND = "claude"
_BULLET = re.compile(r"^\s*(?:[-*•–]|\d+[.)])\s+")
KNOWN_FILES = {"users.json": "account details"}
TEXTLESS_BLOCKS = frozenset({"token_budget"})
THINKING_BLOCKS = frozenset({"thinking", "redacted_thinking"})
TOOL_BLOCKS = frozenset({"tool_use", "tool_result", "server_tool_use", "web_search_tool_result"})


def read(source_path: str, **_: Any) -> Iterator[ImportUnit]:
    with open_source(source_path) as src:
        units = list(_read(src))
    yield from units


@dataclass
class _Layout:
    conversations: list[str] = field(default_factory=list)
    projects: list[str] = field(default_factory=list)
    memories: str | None = None


def _layout(src: Source) -> _Layout:
    out = _Layout()
    if isinstance(src, FileSource):
        if src.only == "memories.json":
            out.memories = src.only
        elif src.only == "projects.json":
            out.projects = [src.only]
        elif src.only != "users.json":
            out.conversations = [src.only]
        return out
    for name in src.names():
        parts = name.split("/")
        base, folder = parts[-1], (parts[-2] if len(parts) > 1 else "")
        if not base.endswith(".json"):
            continue
        if base == "conversations.json" or re.fullmatch(r"conversations-\d{1,6}\.json", base) or (
                folder == "conversations"):
            out.conversations.append(name)
        elif base == "projects.json" or folder == "projects":
            out.projects.append(name)
    out.memories = src.find("memories.json")
    return out


def _read(src: Source) -> Iterator[ImportUnit]:
    lay = _layout(src)
    if not (lay.conversations or lay.memories or lay.projects):
        raise ImportFailed(f"{src.label} has no conversations.json, conversations/, memories.json, projects.json "
                           "or projects/: is it a Claude data export?")
    # Parse every file first: a damaged one refuses the whole import.
    convs: dict[str, tuple[dict[str, Any], str]] = {}
    anonymous: list[tuple[dict[str, Any], str]] = []
    duplicates = 0
    for name in lay.conversations:
        for conv in _list_of(load_json(src, name), src.where(name), "chat_messages", "Claude conversations"):
            cid = short(conv.get("uuid"), 200)
            if not cid:
                anonymous.append((conv, name))
            elif cid in convs:
                duplicates += 1
                if str(conv.get("updated_at") or "") > str(convs[cid][0].get("updated_at") or ""):
                    convs[cid] = (conv, name)
            else:
                convs[cid] = (conv, name)
    memories = _list_of(load_json(src, lay.memories), src.where(lay.memories), None, "Claude memories") \
        if lay.memories else []
    projects: list[tuple[dict[str, Any], str]] = []
    for name in lay.projects:
        projects += [(p, name) for p in _list_of(load_json(src, name), src.where(name), None, "Claude projects")]
    files = Files(src)
    head = _source_unit(src, lay, files)
    if head is not None:
        yield head
    if duplicates:
        yield ImportUnit(src.label, [], notes=[f"{duplicates} conversation(s) appear in more than one file; the "
                                               "copy updated last was imported"])
    names = {p.get("uuid"): clean_text(p.get("name")) for p, _ in projects}
    for index, (conv, name) in enumerate(list(convs.values()) + anonymous):
        yield _conversation(conv, index, name.rsplit("/", 1)[-1], files)
    for index, (proj, name) in enumerate(projects):
        yield _project(proj, index, name.rsplit("/", 1)[-1])
    if memories:
        yield _memories(memories, (lay.memories or "").rsplit("/", 1)[-1], names)


def _source_unit(src: Source, lay: _Layout, files: Files) -> ImportUnit | None:
    notes = list(getattr(src, "notes", []))
    unknown: dict[str, int] = {}
    read_ = set(lay.conversations) | set(lay.projects) | {lay.memories}
    for n in src.names():
        base = n.rsplit("/", 1)[-1]
        if n in read_ or n in files.carried:
            continue
        if base in KNOWN_FILES:
            notes.append(f"{base} not imported ({KNOWN_FILES[base]})")
        elif base.startswith("manifest") and base.endswith(".json"):
            notes.append(f"{base} not read (the list of the export's downloads)")
        else:
            what = "ZIP inside the export (not opened)" if base.lower().endswith(".zip") else f"file '{base[:80]}'"
            unknown[what] = unknown.get(what, 0) + 1
    if files.carried:
        spare = files.carried
        notes.append(f"{len(spare)} file(s) the export carries are only imported as references of the messages "
                     "that name them")
    if not notes and not unknown:
        return None
    return ImportUnit(src.label, [], notes=notes, unknown=unknown)


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
    if btype in ("tool_use", "server_tool_use"):
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


def _guess(name: str) -> str:
    return mimetypes.guess_type(name)[0] or "text/plain"


def _cite(item: Any) -> dict[str, str] | None:
    item = as_dict(item)
    for where in (item, as_dict(item.get("details")), as_dict(item.get("source")), as_dict(item.get("metadata"))):
        url = where.get("url")
        if isinstance(url, str) and url.startswith(("http://", "https://")):
            out = {"url": url[:1000]}
            title = where.get("title") or item.get("title") or item.get("document_title")
            if isinstance(title, str) and title.strip():
                out["title"] = title.strip()[:300]
            return out
    title = item.get("document_title") or item.get("title")
    if isinstance(title, str) and title.strip():
        return {"title": title.strip()[:300]}
    return None


def _branches(msgs: list[dict[str, Any]], leaf: Any) -> tuple[list[int], list[int]] | str:
    """Indexes of the current branch (root first) and of the other messages; or the uuid of a
    message whose parent links go round in a circle."""
    by_id = {m["uuid"]: i for i, m in enumerate(msgs) if isinstance(m.get("uuid"), str) and m["uuid"]}
    parent = {i: m.get("parent_message_uuid") for i, m in enumerate(msgs)}
    for i, p in parent.items():
        if isinstance(p, str) and p == msgs[i].get("uuid"):
            return p
    if not any(isinstance(p, str) and p in by_id for p in parent.values()):
        return list(range(len(msgs))), []
    has_child = {by_id[p] for p in parent.values() if isinstance(p, str) and p in by_id}
    if isinstance(leaf, str) and leaf in by_id:
        start = by_id[leaf]
    else:
        leaves = [i for i in range(len(msgs)) if i not in has_child]
        start = max(leaves, key=lambda i: (unix_ms(msgs[i].get("created_at")) or 0, i))
    path: list[int] = []
    seen: set[int] = set()
    node: int | None = start
    while node is not None:
        if node in seen:
            return str(msgs[node].get("uuid"))
        seen.add(node)
        path.append(node)
        p = parent[node]
        node = by_id.get(p) if isinstance(p, str) else None
    path.reverse()
    others = [i for i in range(len(msgs)) if i not in seen]
    others.sort(key=lambda i: (unix_ms(msgs[i].get("created_at")) or 0, i))
    return path, others


class _Clock:
    """Record times that never go back: the thread keeps the export's order."""

    def __init__(self, start: int | None) -> None:
        self.last = start

    def at(self, ts: int | None) -> int | None:
        if ts is None or (self.last is not None and ts < self.last):
            ts = self.last
        self.last = ts
        return ts


@dataclass
class _Ctx:
    conv_id: str
    source: str
    files: Files
    tally: Tally
    thinking: int = 0
    empty: int = 0


def _file_refs(msg: dict[str, Any], ctx: _Ctx) -> list[FileRef]:
    refs: list[FileRef] = []
    for f in as_list(msg.get("files")) + as_list(msg.get("files_v2")):
        f = as_dict(f)
        name = short(f.get("file_name"), 300)
        fid = short(f.get("file_uuid") or f.get("uuid"), 200) or name
        if not fid:
            continue
        fkind = f.get("file_kind")
        kind = "image" if fkind == "image" else kind_of(mimetypes.guess_type(name or "")[0])
        refs.append(ctx.files.resolve(fid, kind, name=name, media_type=f.get("file_type") or f.get("mime_type"),
                                      size=f.get("file_size") or f.get("size_bytes"), origin="upload"))
    return refs


def _image_ref(block: dict[str, Any], where: str, ctx: _Ctx) -> FileRef:
    source = as_dict(block.get("source"))
    name = short(block.get("file_name") or block.get("title"), 300)
    data = source.get("data")
    if source.get("type") == "base64" and isinstance(data, str):
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            raw = None
        if raw is not None:  # the bytes are in the JSON: ref says where (message uuid / block index)
            return FileRef("image", "inline:" + where, name=name or "pasted image",
                           media_type=short(source.get("media_type"), 100), size=len(raw),
                           sha256=hashlib.sha256(raw).hexdigest(), origin="pasted", inline=True)
    ref = short(block.get("file_uuid") or source.get("file_id") or source.get("url") or name, 300) or "image"
    return ctx.files.resolve(ref, "image", name=name, media_type=source.get("media_type"), origin="upload")


def _message_records(msg: dict[str, Any], n: int, ctx: _Ctx, clock: _Clock, *,
                     alternate: bool = False) -> list[NewRecord]:
    sender = msg.get("sender")
    role, authority = ("user", Authority.USER) if sender == "human" else ("assistant", Authority.INFERRED)
    if alternate and role == "user":
        authority = Authority.OBSERVED
    conversation = f"{ctx.conv_id}#alternates" if alternate else ctx.conv_id
    mid = short(msg.get("uuid"), 200) or f"{ctx.conv_id}:{n}"
    ms = unix_ms(msg.get("created_at"))
    ts = clock.at(ms // 1000 if ms else None)
    records: list[NewRecord] = []

    def base(key: str) -> dict[str, Any]:
        meta: dict[str, Any] = {"import": key, "source": ctx.source, "original_id": mid}
        if ms:
            meta["original_ts"] = ms // 1000
            meta["original_ms"] = ms
        if alternate:
            meta["alternate_of"] = ctx.conv_id
            if isinstance(msg.get("parent_message_uuid"), str):
                meta["parent"] = short(msg["parent_message_uuid"], 200)
        return meta

    refs = _file_refs(msg, ctx)
    texts: list[str] = [marker(r) for r in refs]
    cites: list[dict[str, str]] = []
    voice = False
    seg_start: int | None = None

    def flush() -> None:
        nonlocal texts, cites, refs, voice, seg_start
        text = clean_text("\n\n".join(t for t in texts if t.strip())) or ""
        if text.strip():
            key = f"{KIND}:{mid}" if not any(r.type == "message" and r.role != "tool" for r in records) \
                else f"{KIND}:{mid}:{seg_start}"
            meta = base(key)
            ctx.tally.add_refs(refs)
            refs_meta(meta, refs)
            if cites:
                meta["citations"] = json.dumps(cites, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
            if voice:
                meta["voice"] = True
            records.append(NewRecord(type="message", text=clip(text, meta), conversation=conversation, role=role,
                                     authority=authority, ts=ts, meta=meta))
        texts, cites, refs, voice, seg_start = [], [], [], False, None

    blocks = msg.get("content")
    if isinstance(blocks, list) and blocks:
        for b, block in enumerate(blocks):
            if not isinstance(block, dict):
                ctx.tally.unknown_name("Claude block that is not an object")
                continue
            btype = block.get("type")
            if seg_start is None:
                seg_start = b
            if btype == "text":
                if isinstance(block.get("text"), str):
                    texts.append(block["text"])
                cites += [c for c in (_cite(x) for x in as_list(block.get("citations"))) if c and c not in cites]
            elif btype == "voice_note":
                words = block.get("transcript") if isinstance(block.get("transcript"), str) else block.get("text")
                if isinstance(words, str) and words.strip():
                    texts.append(words)
                    voice = True
                else:
                    ctx.tally.unknown_name("Claude voice_note block without a transcript")
            elif btype == "image":
                ref = _image_ref(block, f"{mid}/{b}", ctx)
                refs.append(ref)
                texts.append(marker(ref))
            elif btype in THINKING_BLOCKS:
                ctx.thinking += 1
            elif btype in TEXTLESS_BLOCKS:
                pass
            elif btype in TOOL_BLOCKS:
                flush()
                tmeta = base(f"{KIND}:{mid}:{b}")
                tmeta["block"] = str(btype)
                tmeta["tool"] = short(block.get("name"), 100) or "tool"
                records.append(NewRecord(type="message", text=clip(clean_text(_tool_text(block)) or "", tmeta),
                                         conversation=conversation, role="tool", authority=Authority.EXTERNAL,
                                         ts=ts, meta=tmeta))
            elif btype == "document":
                flush()
                records += _document(block, b, mid, conversation, ts, base, ctx)
            else:
                ctx.tally.unknown_name(f"Claude block '{short(btype, 60) or 'untyped'}'")
        flush()
    elif isinstance(msg.get("text"), str):
        texts.append(msg["text"])
        seg_start = 0
        flush()
    else:
        flush()
    for a, att in enumerate(as_list(msg.get("attachments"))):
        if not isinstance(att, dict):
            continue
        body = clean_text(att.get("extracted_content"))
        name = short(att.get("file_name"), 300) or f"attachment {a + 1}"
        if not body or not body.strip():
            ref = ctx.files.resolve(short(att.get("file_uuid"), 200) or name, None, name=name,
                                    media_type=att.get("file_type"), size=att.get("file_size"), origin="upload")
            ctx.tally.add_refs([ref])
            continue
        ameta = base(f"{KIND}:{mid}:attachment:{a}")
        if isinstance(att.get("file_size"), int) and not isinstance(att["file_size"], bool) and att["file_size"] >= 0:
            ameta["size"] = att["file_size"]
        ftype = short(att.get("file_type"), 100)
        value = {"name": name, "media_type": ftype if ftype and "/" in ftype else _guess(name),
                 "text": clip(body, ameta), "conversation": conversation}
        records.append(NewRecord(type="attachment", value=value, authority=Authority.EXTERNAL, ts=ts, meta=ameta))
    if not records:
        ctx.empty += 1
    return records


def _document(block: dict[str, Any], b: int, mid: str, conversation: str, ts: int | None, base: Any,
              ctx: _Ctx) -> list[NewRecord]:
    source = as_dict(block.get("source"))
    body = None
    for candidate in (source.get("data") if source.get("type") in ("text", None) else None, block.get("text"),
                      block.get("content") if isinstance(block.get("content"), str) else None):
        if isinstance(candidate, str) and candidate.strip():
            body = clean_text(candidate)
            break
    name = short(block.get("title") or block.get("file_name") or block.get("name"), 300) or f"document {b + 1}"
    if not body:
        ref = ctx.files.resolve(short(block.get("file_uuid") or source.get("file_id"), 200) or name, "file",
                                name=name, media_type=source.get("media_type"), origin="upload")
        ctx.tally.add_refs([ref])
        return []
    dmeta = base(f"{KIND}:{mid}:{b}")
    dmeta["block"] = "document"
    value = {"name": name, "media_type": short(source.get("media_type"), 100) or _guess(name),
             "text": clip(body, dmeta), "conversation": conversation}
    return [NewRecord(type="attachment", value=value, authority=Authority.EXTERNAL, ts=ts, meta=dmeta)]


def _conversation(conv: dict[str, Any], index: int, source_name: str, files: Files) -> ImportUnit:
    title = clean_text(conv.get("name")) or "(untitled)"
    if not title.strip():
        title = "(untitled)"
    label = f"conversation '{title[:60]}'"
    msgs = [m for m in as_list(conv.get("chat_messages")) if isinstance(m, dict)]
    malformed = len(as_list(conv.get("chat_messages"))) - len(msgs)
    notes: list[str] = []
    conv_id = short(conv.get("uuid"), 200)
    if not conv_id:
        opening = next((short(m.get("uuid"), 200) or str(m.get("text"))[:2000] for m in msgs), "")
        conv_id = "derived-" + digest(f"{conv.get('created_at')!r}|{opening}")
        notes.append(f"it has no uuid: imported as {conv_id}, derived from its creation time and first message")
    branches = _branches(msgs, conv.get("current_leaf_message_uuid"))
    if isinstance(branches, str):
        return ImportUnit(label, [], notes=[f"its messages link in a circle (message '{branches[:80]}' is its own "
                                            "ancestor); nothing of it was imported"], skipped=1)
    path, others = branches
    conv_ms = unix_ms(conv.get("created_at"))
    cmeta: dict[str, Any] = {"import": f"{KIND}:conversation:{conv_id}", "source": source_name, "original_id": conv_id}
    if conv_ms:
        cmeta["original_ts"] = conv_ms // 1000
        cmeta["original_ms"] = conv_ms
    for key in ("model", "project_uuid"):
        if isinstance(conv.get(key), str) and conv[key]:
            cmeta[key] = short(conv[key], 200)
    title_record = NewRecord(type="conversation", title=clip(title, None, 4096), conversation=conv_id,
                             authority=Authority.USER, ts=conv_ms // 1000 if conv_ms else None, meta=cmeta)
    records = [title_record]
    ctx = _Ctx(conv_id, source_name, files, Tally())
    clock = _Clock(title_record.ts)
    first: int | None = None
    for i in path:
        got = _message_records(msgs[i], i, ctx, clock)
        if first is None and got:
            first = got[0].ts
        records += got
    if first is not None and (title_record.ts is None or title_record.ts > first):
        title_record.ts = first  # the title comes first
    summary = clean_text(conv.get("summary"))
    if summary and summary.strip():  # Claude's summary of the whole thread, after it
        smeta: dict[str, Any] = {"import": f"{KIND}:summary:{conv_id}:{digest(summary)}", "source": source_name,
                                 "original_id": conv_id}
        records.append(NewRecord(type="summary", text=clip(summary, smeta), conversation=conv_id, role="assistant",
                                 authority=Authority.INFERRED, ts=clock.at(unix_ts(conv.get("updated_at"))),
                                 meta=smeta))
    alternates: list[NewRecord] = []
    alt_clock = _Clock(None)
    for i in others:
        alternates += _message_records(msgs[i], i, ctx, alt_clock, alternate=True)
    records += alternates
    if others:
        notes.append(f"{len(others)} message(s) of edited or regenerated branches kept as alternates "
                     f"(conversation {conv_id}#alternates), not in the thread")
    if ctx.thinking:
        notes.append(f"{ctx.thinking} thinking block(s) left out")
    if ctx.empty:
        notes.append(f"{ctx.empty} empty message(s) left out")
    if malformed:
        notes.append(f"{malformed} malformed message(s) left out")
    t = ctx.tally
    return ImportUnit(label, records, notes=notes, skipped=ctx.thinking + ctx.empty + malformed + sum(t.unknown.values()),
                      files=t.files, files_missing=t.missing, files_unhashed=t.unhashed,
                      alternates=len(others), unknown=t.unknown)


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
