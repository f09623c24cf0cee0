"""Import a ChatGPT data export (the ZIP OpenAI e-mails, its folder, or ``conversations.json``).

Each conversation becomes one unit: a ``conversation`` record (its title, written by ChatGPT, so
``inferred``) and the messages of the branch the user last saw, in order.  ChatGPT stores a
conversation as a tree: regenerated answers and edited questions are sibling branches.  The
importer walks from ``current_node`` up the ``parent`` links; the other branches are left out and
counted in the report.

Messages, by author: ``user`` → authority ``user``; ``assistant`` → ``inferred``; ``tool`` and
``system`` → ``external``; quoted and browsed web pages (``tether_quote``,
``tether_browsing_display``) → ``external`` whoever carries them.  Content types: ``text``,
``code``, ``execution_output``, ``system_error`` and the text parts of ``multimodal_text`` are
kept; images, audio and files in ``multimodal_text`` are noted as references in the text
(``[image: file-service://…]``) and in ``meta["attachment_refs"]`` (the files themselves are not
imported).  Left out and counted: nodes without a message, turns marked
``is_visually_hidden_from_conversation``, empty system turns, and reasoning (``thoughts``,
``reasoning_recap``: summaries of hidden reasoning, regenerated per answer; they are not part of
what either side said).

What ChatGPT remembered becomes proposals (below ``user``: they wait in the inbox):

* each memory the assistant wrote with the ``bio`` tool → a ``fact`` of authority ``inferred``
  (key ``user/chatgpt_memory_<8 hex of the text's SHA-256>``, ``meta["from_message"]`` = the
  ChatGPT message id); the tool's "Model set context updated." reply is dropped;
* each line ``N. [YYYY-MM-DD]. text`` of the newest ``model_editable_context`` snapshot → the same
  kind of fact (a text already written by ``bio`` is not repeated);
* the newest custom instructions (``user_editable_context``): ``user_instructions`` → the
  ``instruction`` ``user/custom_instructions`` and ``user_profile`` → the ``preference``
  ``user/chatgpt_profile``, both ``observed`` (the user typed them, but into another product's
  settings: they bind only once confirmed).

Idempotency keys (``meta["import"]``): ``chatgpt:<message id>``,
``chatgpt:conversation:<conversation id>``, ``chatgpt:memory:<16 hex of the text's SHA-256>``,
``chatgpt:custom_instructions:<hash>`` and ``chatgpt:profile:<hash>`` (new wording: a new value).

A pure reader (no vault access): any thread may call it; :func:`run_import` writes on the vault's thread.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..values import Authority
from ..vault import NewRecord
from . import ImportFailed, ImportUnit
from .safety import (
    FileSource,
    as_dict,
    as_str,
    clean_text,
    clip,
    digest,
    expect,
    load_json,
    open_source,
    short,
    unique_keys,
    unix_ts,
)

KIND = "chatgpt"
EXTERNAL_TYPES = frozenset({"tether_quote", "tether_browsing_display", "computer_output", "system_error"})
REASONING_TYPES = frozenset({"thoughts", "reasoning_recap"})
_LINE = re.compile(r"^\s*(\d+)\.\s*(?:\[(\d{4}-\d{2}-\d{2})\]\.?\s*)?(.*\S)\s*$")


@dataclass
class _Memories:
    bio: list[tuple[str, str, int | None, str]] = field(default_factory=list)  # text, message id, ts, conversation
    snapshot: tuple[int, str, str] | None = None  # ts, text, message id
    custom: tuple[int, Any, Any, str] | None = None  # ts, profile, instructions, message id


def read(source_path: str, **_: Any) -> Iterator[ImportUnit]:
    with open_source(source_path) as src:
        name = src.only if isinstance(src, FileSource) else src.find("conversations.json")
        if name is None:
            raise ImportFailed(f"{src.label} has no conversations.json: is it a ChatGPT data export?")
        where = src.where(name)
        data = load_json(src, name)
        units = list(_read_conversations(data, where, name))
    yield from units


def _conversations(data: Any, where: str) -> tuple[list[dict[str, Any]], int]:
    if isinstance(data, dict) and isinstance(data.get("mapping"), dict):
        return [data], 0
    if isinstance(data, dict) and isinstance(data.get("conversations"), list):
        data = data["conversations"]
    expect(data, list, where, "a ChatGPT export (a list of conversations)")
    convs = [c for c in data if isinstance(c, dict) and isinstance(c.get("mapping"), dict)]
    if data and not convs:
        raise ImportFailed(f"{where} does not look like a ChatGPT export: none of its {len(data)} item(s) is a "
                           "conversation with a 'mapping'")
    return convs, len(data) - len(convs)


def _read_conversations(data: Any, where: str, source_name: str) -> Iterator[ImportUnit]:
    convs, others = _conversations(data, where)
    memories = _Memories()
    if others:
        yield ImportUnit(source_name, [], notes=[f"{others} item(s) that are not conversations were skipped"],
                         skipped=others)
    for index, conv in enumerate(convs):
        yield _conversation(conv, index, source_name, memories)
    unit = _memory_unit(memories, source_name)
    if unit is not None:
        yield unit


def _linearise(mapping: dict[str, Any], current: Any) -> tuple[list[str], int] | None:
    """Node ids from the root to ``current``, and how many sibling branches were left out."""
    if not isinstance(current, str) or not isinstance(mapping.get(current), dict):
        def when(nid: str) -> tuple[float, str]:
            msg = mapping[nid].get("message") if isinstance(mapping[nid], dict) else None
            ts = unix_ts(msg.get("create_time")) if isinstance(msg, dict) else None
            return (ts or 0, nid)

        leaves = [k for k, n in mapping.items() if isinstance(n, dict) and not n.get("children")]
        if not leaves:
            return [], 0
        current = max(leaves, key=when)
    path: list[str] = []
    seen: set[str] = set()
    node: Any = current
    while isinstance(node, str) and isinstance(mapping.get(node), dict):
        if node in seen:
            return None
        seen.add(node)
        path.append(node)
        node = mapping[node].get("parent")
    path.reverse()
    branches = 0
    for nid in path:
        children = mapping[nid].get("children")
        if isinstance(children, list):
            branches += sum(1 for c in children if isinstance(c, str) and c in mapping and c not in seen)
    return path, branches


def _parts_text(parts: Any, refs: list[str]) -> str:
    out: list[str] = []
    if not isinstance(parts, list):
        return ""
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, dict):
            text = part.get("text")
            if isinstance(text, str) and text.strip():
                out.append(text)
                continue
            kind = short(part.get("content_type")) or "file"
            pointer = short(part.get("asset_pointer") or part.get("name") or part.get("id"), 300) or "?"
            label = "image" if "image" in kind else "audio" if "audio" in kind else "video" if "video" in kind else "file"
            refs.append(pointer)
            out.append(f"[{label}: {pointer}]")
    return "\n".join(p for p in out if p)


def _render(content: dict[str, Any], meta: dict[str, Any]) -> str:
    ctype = content.get("content_type")
    refs: list[str] = []
    if ctype in ("code", "execution_output"):
        text = as_str(content.get("text"), "")
        if isinstance(content.get("language"), str) and content["language"] not in ("", "unknown"):
            meta["language"] = short(content["language"], 50)
    elif ctype == "tether_quote":
        bits = [content.get("title"), content.get("url") or content.get("domain"), content.get("text")]
        text = "\n".join(b for b in bits if isinstance(b, str) and b.strip())
        if isinstance(content.get("url"), str):
            meta["url"] = short(content["url"], 1000)
    elif ctype == "tether_browsing_display":
        bits = [content.get("summary"), content.get("result")]
        text = "\n\n".join(b for b in bits if isinstance(b, str) and b.strip())
    elif ctype == "system_error":
        bits = [content.get("name"), content.get("text")]
        text = ": ".join(b for b in bits if isinstance(b, str) and b.strip())
    elif isinstance(content.get("parts"), list):
        text = _parts_text(content["parts"], refs)
    else:
        text = as_str(content.get("text"), "")
    if refs:
        meta["attachments"] = len(refs)
        meta["attachment_refs"] = " ".join(refs)[:1000]
    return clean_text(text) or ""


def _conversation(conv: dict[str, Any], index: int, source_name: str, memories: _Memories) -> ImportUnit:
    title = clean_text(conv.get("title")) or "(untitled)"
    label = f"conversation '{title[:60]}'"
    conv_id = short(conv.get("conversation_id") or conv.get("id"), 200)
    if not conv_id:
        return ImportUnit(f"conversation #{index + 1}", [], notes=["it has no id; skipped"], skipped=1)
    conv_ts = unix_ts(conv.get("create_time"))
    mapping = conv["mapping"]
    lin = _linearise(mapping, conv.get("current_node"))
    if lin is None:
        return ImportUnit(label, [], notes=["its messages link in a circle; skipped"], skipped=1)
    path, branches = lin
    cmeta: dict[str, Any] = {"import": f"{KIND}:conversation:{conv_id}", "source": source_name,
                             "original_id": conv_id}
    for key, name in (("default_model_slug", "model"), ("gizmo_id", "gizmo_id")):
        if isinstance(conv.get(key), str) and conv[key]:
            cmeta[name] = short(conv[key])
    if isinstance(conv.get("is_archived"), bool):
        cmeta["archived"] = conv["is_archived"]
    if conv_ts:
        cmeta["original_ts"] = conv_ts
    records = [NewRecord(type="conversation", title=clip(title, None, 4096), conversation=conv_id,
                         authority=Authority.INFERRED, ts=conv_ts, meta=cmeta)]
    hidden = reasoning = empty = 0
    unsupported: dict[str, int] = {}
    for n, nid in enumerate(path):
        msg = mapping[nid].get("message")
        if not isinstance(msg, dict):
            continue
        author = as_dict(msg.get("author"))
        role = author.get("role")
        content = as_dict(msg.get("content"))
        ctype = as_str(content.get("content_type"), "text")
        md = as_dict(msg.get("metadata"))
        mid = short(msg.get("id") or nid, 200) or f"{conv_id}:{n}"
        ts = unix_ts(msg.get("create_time")) or conv_ts
        if ctype == "user_editable_context":
            if memories.custom is None or (ts or 0) >= memories.custom[0]:
                memories.custom = (ts or 0, content.get("user_profile"), content.get("user_instructions"), mid)
            continue
        if ctype == "model_editable_context":
            text = clean_text(content.get("model_set_context"))
            if text and (memories.snapshot is None or (ts or 0) >= memories.snapshot[0]):
                memories.snapshot = (ts or 0, text, mid)
            continue
        if role == "assistant" and msg.get("recipient") == "bio":
            text = _render(content, {}).strip()
            if text:
                memories.bio.append((text, mid, ts, conv_id))
            continue
        if role == "tool" and author.get("name") == "bio":
            continue
        if md.get("is_visually_hidden_from_conversation") is True:
            hidden += 1
            continue
        if ctype in REASONING_TYPES:
            reasoning += 1
            continue
        meta: dict[str, Any] = {"import": f"{KIND}:{mid}", "source": source_name, "original_id": mid,
                                "content_type": short(ctype, 64) or "text"}
        text = _render(content, meta)
        if not text.strip():
            if role == "system":
                hidden += 1
            elif ctype not in ("text", "multimodal_text", "code", "execution_output"):
                unsupported[ctype] = unsupported.get(ctype, 0) + 1
            else:
                empty += 1
            continue
        if role == "user":
            authority = Authority.USER
        elif role == "assistant":
            authority = Authority.INFERRED
        else:
            authority = Authority.EXTERNAL
            role = role if role in ("tool", "system") else "tool"
        if ctype in EXTERNAL_TYPES:
            authority = Authority.EXTERNAL
        if isinstance(md.get("model_slug"), str):
            meta["model"] = short(md["model_slug"], 100)
        if isinstance(msg.get("recipient"), str) and msg["recipient"] not in ("all", ""):
            meta["recipient"] = short(msg["recipient"], 100)
        if role == "tool" and isinstance(author.get("name"), str):
            meta["tool"] = short(author["name"], 100)
        if ts:
            meta["original_ts"] = ts
        records.append(NewRecord(type="message", text=clip(text, meta), conversation=conv_id, role=role,
                                 authority=authority, ts=ts, meta=meta))
    notes: list[str] = []
    if branches:
        notes.append(f"{branches} regenerated or edited branch(es) left out (only the branch last shown is imported)")
    if hidden:
        notes.append(f"{hidden} hidden or empty system turn(s) left out")
    if reasoning:
        notes.append(f"{reasoning} reasoning block(s) (thoughts) left out")
    if empty:
        notes.append(f"{empty} empty message(s) left out")
    for ctype, count in sorted(unsupported.items()):
        notes.append(f"{count} message(s) of content type '{ctype}' without text left out")
    skipped = branches + hidden + reasoning + empty + sum(unsupported.values())
    return ImportUnit(label, records, notes=notes, skipped=skipped)


def _unwrap(text: str) -> str:
    """Custom instructions arrive wrapped in ChatGPT's preamble with the user's words in a fence."""
    m = re.search(r"```(.*?)```", text, re.S)
    return (m.group(1) if m else text).strip()


def _snapshot_lines(text: str) -> list[tuple[str, str | None]]:
    out: list[list[Any]] = []
    for line in text.splitlines():
        if not line.strip():
            continue
        m = _LINE.match(line)
        if m:
            out.append([m.group(3).strip(), m.group(2)])
        elif out:
            out[-1][0] += "\n" + line.strip()
        else:
            out.append([line.strip(), None])
    return [(t, d) for t, d in out if t]


def _memory_unit(mem: _Memories, source_name: str) -> ImportUnit | None:
    records: list[NewRecord] = []
    notes: list[str] = []
    texts: dict[str, dict[str, Any]] = {}
    for text, mid, ts, conv_id in mem.bio:
        text = clip(text, None, 64 * 1024)
        texts.setdefault(text, {"ts": ts, "meta": {"from_message": mid, "conversation": conv_id, "via": "bio"}})
    if mem.snapshot is not None:
        snap_ts, snap, snap_id = mem.snapshot
        for text, day in _snapshot_lines(snap):
            text = clip(text, None, 64 * 1024)
            if text in texts:
                continue
            meta: dict[str, Any] = {"via": "model_set_context", "from_message": snap_id}
            if day:
                meta["saved_on"] = day
            texts[text] = {"ts": unix_ts(f"{day}T00:00:00Z") if day else (snap_ts or None), "meta": meta}
    keys = unique_keys("user/chatgpt_memory_", texts)
    for text, info in texts.items():
        meta = {"import": f"{KIND}:memory:{digest(text)}", "source": source_name, **info["meta"]}
        records.append(NewRecord(type="fact", key=keys[text], value=text, authority=Authority.INFERRED,
                                 ts=info["ts"], meta=meta))
    if mem.custom is not None:
        ts, profile, instructions, mid = mem.custom
        for raw, typ, key, tag in ((instructions, "instruction", "user/custom_instructions", "custom_instructions"),
                                   (profile, "preference", "user/chatgpt_profile", "profile")):
            cleaned = clean_text(raw)
            if not cleaned or not _unwrap(cleaned):
                continue
            text = _unwrap(cleaned)
            meta = {"import": f"{KIND}:{tag}:{digest(text)}", "source": source_name, "from_message": mid,
                    "via": "user_editable_context"}
            records.append(NewRecord(type=typ, key=key, value=clip(text, meta), authority=Authority.OBSERVED,
                                     ts=ts or None, meta=meta))
    if not records and not notes:
        return None
    return ImportUnit("ChatGPT memories and custom instructions", records, notes=notes)
