"""Import a ChatGPT data export: the ZIP OpenAI e-mails, its folder, the ZIP parts of a large export
saved in one folder, or a conversations file given directly.

Layouts read (all observed in real exports): one ``conversations.json``; or the conversations split
over ``conversations-000.json``, ``conversations-001.json``, … (newer exports, with an
``export_manifest.json`` listing every file of the export and, for large exports, spread over
several ZIP parts); a single conversation object; ``{"conversations": [...]}``.  Where the same
conversation appears in two files, the copy updated last is imported and the report says so.
Files the export carries are found by the ids the messages use (:mod:`camillo.importers.files`);
``conversation_asset_file_names.json`` names ``.dat`` members.  A file the manifest lists that is
not in the export (a part not downloaded) is reported; every other file the importer does not read
is named in the report (``user.json``, ``chat.html``, … are known and said to be left out; a file it
does not know is counted by name).

Each conversation becomes one unit: a ``conversation`` record (its title, written by ChatGPT, so
``inferred``) and the messages of the branch the user last saw, in order.  ChatGPT stores a
conversation as a tree: regenerated answers and edited questions are sibling branches.  The
importer walks from ``current_node`` up the ``parent`` links (the split export's nodes carry no
``children``: they are derived from the parents); without a ``current_node`` it takes the leaf
created last.  The other branches are left out and counted.  A conversation whose nodes link in a
circle (a node naming itself as its parent) is skipped whole, with the reason.

Identity and time: a conversation without an id gets ``derived-<16 hex>`` from its creation time
and its first message (its id, else its text), so importing the same export, or a newer one,
derives the same id; a message without an id takes its node's.  Times are kept to the millisecond
(``meta["original_ms"]``; ``meta["original_ts"]`` in seconds); the record ``ts`` (whole seconds) is
never earlier than the record before it, so the thread keeps the export's order, and the title
record comes first (its ``ts`` is at most its first message's).

Messages, by author: ``user`` → authority ``user``; ``assistant`` → ``inferred``; ``tool`` and
``system`` → ``external``; quoted and browsed web pages (``tether_quote``,
``tether_browsing_display``) → ``external`` whoever carries them.  Content types: ``text``,
``code``, ``execution_output``, ``system_error`` and the parts of ``multimodal_text`` are kept:
text parts as text, ``audio_transcription`` parts as the words spoken (a voice message is the
user's words), and files as references: ``image_asset_pointer`` (uploads, and images a tool such as
DALL·E generated: ``meta["prompt"]`` keeps the prompt), ``audio_asset_pointer``,
``video_container_asset_pointer``, ``real_time_user_audio_video_asset_pointer`` (voice-mode audio,
video and frames) and the uploads listed in ``metadata.attachments``.  A file becomes a line in the
text (``[image: photo.png]``) and an entry of ``meta["files"]`` (name, media type, size, SHA-256,
the member holding it; see :mod:`~camillo.importers.files`); the files the export holds are then
stored as attachments of their message (:func:`camillo.importers._store_files`) and the report counts
them by kind.  Citations (``metadata.content_references``,
``metadata.citations``) are kept in ``meta["citations"]`` (JSON text: title and url each), and the
private-use markers that anchor them in the text become ``[n]``.  Left out and counted: nodes
without a message, turns marked ``is_visually_hidden_from_conversation``, empty system turns,
reasoning (``thoughts``, ``reasoning_recap``: summaries of hidden reasoning, regenerated per
answer; they are not part of what either side said), and content types or parts without text that
the importer does not know (by name).

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

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..values import Authority
from ..vault import NewRecord
from . import ImportFailed, ImportUnit
from .files import FileRef, Files, Tally, asset_names, marker, refs_meta
from .safety import (
    FileSource,
    Source,
    as_dict,
    as_list,
    as_str,
    clean_text,
    clip,
    digest,
    expect,
    load_json,
    open_source,
    short,
    unique_keys,
    unix_ms,
    unix_ts,
)

KIND = "chatgpt"
EXTERNAL_TYPES = frozenset({"tether_quote", "tether_browsing_display", "computer_output", "system_error"})
REASONING_TYPES = frozenset({"thoughts", "reasoning_recap"})
TEXT_TYPES = frozenset({"text", "multimodal_text", "code", "execution_output"})
KNOWN_TYPES = TEXT_TYPES | EXTERNAL_TYPES | REASONING_TYPES | {"user_editable_context", "model_editable_context"}
_LINE = re.compile(r"^\s*(\d+)\.\s*(?:\[(\d{4}-\d{2}-\d{2})\]\.?\s*)?(.*\S)\s*$")
_SHARD = re.compile(r"^conversations(?:-\d{1,6})?\.json$")
_MARKER = re.compile("\ue200[^\ue201]{0,2000}\ue201")
_PRIVATE = re.compile("[\ue200-\ue2ff]")
# Files of an export this importer knows and does not import, and why.
NOT_IMPORTED = {
    "user.json": "account details", "user_settings.json": "settings", "message_feedback.json": "ratings of answers",
    "shared_conversations.json": "links to shared conversations", "model_comparisons.json": "answer comparisons",
    "chat.html": "the same conversations as a web page", "sora.json": "Sora data",
    "conversations.json.index": "an index of the split conversations",
}
READ = {"export_manifest.json", "conversation_asset_file_names.json"}


@dataclass
class _Memories:
    bio: list[tuple[str, str, int | None, str]] = field(default_factory=list)  # text, message id, ts, conversation
    snapshot: tuple[int, str, str] | None = None  # ts, text, message id
    custom: tuple[int, Any, Any, str] | None = None  # ts, profile, instructions, message id


def read(source_path: str, **_: Any) -> Iterator[ImportUnit]:
    with open_source(source_path) as src:
        units = list(_read(src))
    yield from units


def _conversation_files(src: Source) -> list[str]:
    """``conversations.json`` and ``conversations-NNN.json`` in the shallowest folder holding any."""
    if isinstance(src, FileSource):
        return [src.only]
    hits = [n for n in src.names() if _SHARD.match(n.rsplit("/", 1)[-1])]
    if not hits:
        return []
    depth = min(n.count("/") for n in hits)
    return sorted((n for n in hits if n.count("/") == depth), key=lambda n: (n.rsplit("/", 1)[-1] != "conversations.json", n))


def _read(src: Source) -> Iterator[ImportUnit]:
    names = _conversation_files(src)
    if not names:
        raise ImportFailed(f"{src.label} has no conversations.json or conversations-NNN.json: is it a ChatGPT "
                           "data export?")
    docs = [(n, load_json(src, n)) for n in names]  # every file parsed before anything is imported
    files = Files(src, asset_names(src, None if isinstance(src, FileSource)
                                   else src.find("conversation_asset_file_names.json")))
    found: dict[str, tuple[dict[str, Any], str]] = {}
    order: list[str] = []
    anonymous: list[tuple[dict[str, Any], str]] = []
    others = duplicates = 0
    for name, data in docs:
        convs, other = _conversations(data, src.where(name))
        others += other
        for conv in convs:
            cid = short(conv.get("conversation_id") or conv.get("id"), 200)
            if not cid:
                anonymous.append((conv, name))
            elif cid in found:
                duplicates += 1
                if _updated(conv) > _updated(found[cid][0]):
                    found[cid] = (conv, name)
            else:
                found[cid] = (conv, name)
                order.append(cid)
    head = _source_unit(src, names, files)
    if head is not None:
        yield head
    if others:
        yield ImportUnit(names[0].rsplit("/", 1)[-1], [],
                         notes=[f"{others} item(s) that are not conversations were skipped"], skipped=others)
    if duplicates:
        yield ImportUnit(src.label, [], notes=[f"{duplicates} conversation(s) appear in more than one file; the "
                                               "copy updated last was imported"])
    memories = _Memories()
    for index, (conv, name) in enumerate([found[c] for c in order] + anonymous):
        yield _conversation(conv, index, name.rsplit("/", 1)[-1], memories, files)
    unit = _memory_unit(memories, names[0].rsplit("/", 1)[-1])
    if unit is not None:
        yield unit
    spare = files.unreferenced()
    if spare:
        total = sum(spare.values())
        yield ImportUnit(src.label, [], notes=[f"{total} file(s) in the export that no imported message refers to "
                                               f"were not imported ({_kinds(spare)})"], skipped=total)


def _kinds(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))


def _updated(conv: dict[str, Any]) -> float:
    t = conv.get("update_time")
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else 0.0


def _source_unit(src: Source, names: list[str], files: Files) -> ImportUnit | None:
    """What the export holds besides its conversations, and whether its manifest is complete."""
    notes = list(getattr(src, "notes", []))
    unknown: dict[str, int] = {}
    left: dict[str, int] = {}
    for n in src.names():
        base = n.rsplit("/", 1)[-1]
        if n in names or base in READ or n in files.carried:
            continue
        if base in NOT_IMPORTED:
            left[base] = left.get(base, 0) + 1
        elif base.lower().endswith(".zip"):
            unknown["ZIP inside the export (not opened)"] = unknown.get("ZIP inside the export (not opened)", 0) + 1
        else:
            unknown[f"file '{base[:80]}'"] = unknown.get(f"file '{base[:80]}'", 0) + 1
    for base in sorted(left):
        notes.append(f"{base} not imported ({NOT_IMPORTED[base]})")
    manifest = None if isinstance(src, FileSource) else src.find("export_manifest.json")
    if manifest is not None:
        listed = [short(as_dict(e).get("path"), 500) for e in as_list(as_dict(load_json(src, manifest)).get(
            "export_files"))]
        root = manifest[: -len("export_manifest.json")]
        present = set(src.names())
        absent = [p for p in listed if p and root + p not in present]
        if absent:
            notes.append(f"{len(absent)} file(s) the export's manifest lists are not here (a part of the export "
                         f"not downloaded?), e.g. {absent[0]}")
    if not notes and not unknown:
        return None
    return ImportUnit(src.label, [], notes=notes, unknown=unknown)


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


def _children(mapping: dict[str, Any]) -> dict[str, list[str]]:
    """Each node's children, from ``children`` lists and from ``parent`` links (split exports list no children)."""
    out: dict[str, list[str]] = {}
    for k, n in mapping.items():
        if not isinstance(n, dict):
            continue
        p = n.get("parent")
        if isinstance(p, str) and p != k and isinstance(mapping.get(p), dict):
            out.setdefault(p, [])
            if k not in out[p]:
                out[p].append(k)
        for c in as_list(n.get("children")):
            if isinstance(c, str) and c != k and isinstance(mapping.get(c), dict):
                out.setdefault(k, [])
                if c not in out[k]:
                    out[k].append(c)
    return out


def _linearise(mapping: dict[str, Any], current: Any) -> tuple[list[str], int] | str:
    """Node ids from the root to ``current``, and how many sibling branches were left out; or, when
    the parent links go round in a circle, the node where they do."""
    children = _children(mapping)
    if not isinstance(current, str) or not isinstance(mapping.get(current), dict):
        def when(nid: str) -> tuple[float, str]:
            msg = mapping[nid].get("message")
            ms = unix_ms(msg.get("create_time")) if isinstance(msg, dict) else None
            return (ms or 0, nid)

        leaves = [k for k, n in mapping.items() if isinstance(n, dict) and not children.get(k)]
        if not leaves:
            return [], 0
        current = max(leaves, key=when)
    path: list[str] = []
    seen: set[str] = set()
    node: Any = current
    while isinstance(node, str) and isinstance(mapping.get(node), dict):
        if node in seen:
            return node
        seen.add(node)
        path.append(node)
        node = mapping[node].get("parent")
    path.reverse()
    branches = 0
    for nid in path:
        branches += sum(1 for c in children.get(nid, []) if c not in seen)
    return path, branches


@dataclass
class _Part:
    text: list[str] = field(default_factory=list)
    refs: list[FileRef] = field(default_factory=list)
    voice: bool = False
    prompt: str | None = None


def _pointer(part: dict[str, Any], kind: str, files: Files, names: dict[str, dict[str, Any]], out: _Part,
             origin: str | None) -> None:
    ref = short(part.get("asset_pointer"), 300)
    if not ref:
        return
    fid = ref.split("://", 1)[-1]
    att = names.pop(fid, None) or {}
    md = as_dict(part.get("metadata"))
    if kind == "image" and (md.get("dalle") or md.get("generation")):
        origin = "generated"
        prompt = as_dict(md.get("dalle")).get("prompt")
        if isinstance(prompt, str) and prompt.strip():
            out.prompt = clean_text(prompt)
    r = files.resolve(ref, kind, name=att.get("name"), media_type=att.get("mime_type") or att.get("mimeType"),
                      size=part.get("size_bytes") if part.get("size_bytes") is not None else att.get("size"),
                      origin=origin)
    out.refs.append(r)
    out.text.append(marker(r))


def _parts(parts: list[Any], files: Files, names: dict[str, dict[str, Any]], tally: Tally, origin: str) -> _Part:
    out = _Part()
    for part in parts:
        if isinstance(part, str):
            out.text.append(part)
            continue
        if not isinstance(part, dict):
            continue
        ptype = part.get("content_type")
        if ptype == "audio_transcription":
            words = clean_text(part.get("text"))
            if words and words.strip():
                out.text.append(words)
                out.voice = True
        elif ptype == "image_asset_pointer":
            _pointer(part, "image", files, names, out, origin)
        elif ptype == "audio_asset_pointer":
            _pointer(part, "audio", files, names, out, "voice")
        elif ptype == "video_container_asset_pointer":
            _pointer(part, "video", files, names, out, "voice")
        elif ptype == "real_time_user_audio_video_asset_pointer":
            for key, kind in (("audio_asset_pointer", "audio"), ("video_container_asset_pointer", "video")):
                if isinstance(part.get(key), dict):
                    _pointer(part[key], kind, files, names, out, "voice")
            for frame in as_list(part.get("frames_asset_pointers")):
                if isinstance(frame, dict):
                    _pointer(frame, "image", files, names, out, "video frame")
        elif isinstance(part.get("text"), str) and part["text"].strip():
            out.text.append(part["text"])
        else:
            tally.unknown_name(f"ChatGPT part '{short(ptype, 60) or 'untyped'}'")
    return out


def _citations(md: dict[str, Any], text: str) -> tuple[str, list[dict[str, str]]]:
    """The message's sources (title and url), and its text with the private-use markers anchoring
    them replaced by ``[n]`` (or the entity's name)."""
    cites: list[dict[str, str]] = []

    def add(title: Any, url: Any) -> int | None:
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            return None
        entry = {"url": url[:1000]}
        if isinstance(title, str) and title.strip():
            entry["title"] = title.strip()[:300]
        for i, c in enumerate(cites):
            if c["url"] == entry["url"]:
                return i + 1
        if len(cites) >= 50:
            return None
        cites.append(entry)
        return len(cites)

    for ref in as_list(md.get("content_references")):
        ref = as_dict(ref)
        items = [as_dict(i) for i in as_list(ref.get("items")) + as_list(ref.get("sources"))]
        numbers = [add(i.get("title"), i.get("url")) for i in items] + [add(ref.get("title"), ref.get("url"))]
        shown = "".join(f"[{n}]" for n in dict.fromkeys(n for n in numbers if n is not None))
        if not shown and isinstance(ref.get("name"), str):
            shown = ref["name"]
        matched = ref.get("matched_text")
        if isinstance(matched, str) and matched.strip() and _PRIVATE.search(matched):
            text = text.replace(matched, shown)
    for cite in as_list(md.get("citations")):
        meta = as_dict(as_dict(cite).get("metadata"))
        add(meta.get("title"), meta.get("url"))
    if _PRIVATE.search(text):
        text = _PRIVATE.sub("", _MARKER.sub("", text))
    return text, cites


def _render(content: dict[str, Any], meta: dict[str, Any], files: Files, names: dict[str, dict[str, Any]],
            tally: Tally, origin: str) -> tuple[str, list[FileRef], _Part | None]:
    ctype = content.get("content_type")
    part: _Part | None = None
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
        part = _parts(content["parts"], files, names, tally, origin)
        text = "\n".join(p for p in part.text if p)
    else:
        text = as_str(content.get("text"), "")
    refs = part.refs if part is not None else []
    return clean_text(text) or "", refs, part


def _derived_id(conv: dict[str, Any], mapping: dict[str, Any], path: list[str]) -> str:
    """A stable id for a conversation that has none: its creation time and its first message."""
    first = ""
    for nid in path:
        msg = mapping[nid].get("message")
        if isinstance(msg, dict) and as_dict(msg.get("author")).get("role") in ("user", "assistant"):
            first = short(msg.get("id"), 200) or json.dumps(as_dict(msg.get("content")), sort_keys=True,
                                                            ensure_ascii=False)[:2000]
            break
    return "derived-" + digest(f"{conv.get('create_time')!r}|{first or ','.join(path[:3])}")


def _conversation(conv: dict[str, Any], index: int, source_name: str, memories: _Memories,
                  files: Files) -> ImportUnit:
    title = clean_text(conv.get("title")) or "(untitled)"
    if not title.strip():
        title = "(untitled)"
    label = f"conversation '{title[:60]}'"
    mapping = conv["mapping"]
    lin = _linearise(mapping, conv.get("current_node"))
    if isinstance(lin, str):
        return ImportUnit(label, [], notes=[f"its messages link in a circle (node '{lin[:80]}' is its own ancestor); "
                                            "nothing of it was imported"], skipped=1)
    path, branches = lin
    notes: list[str] = []
    conv_id = short(conv.get("conversation_id") or conv.get("id"), 200)
    if not conv_id:
        conv_id = _derived_id(conv, mapping, path)
        notes.append(f"it has no id: imported as {conv_id}, derived from its creation time and first message")
    conv_ms = unix_ms(conv.get("create_time"))
    cmeta: dict[str, Any] = {"import": f"{KIND}:conversation:{conv_id}", "source": source_name,
                             "original_id": conv_id}
    for key, name in (("default_model_slug", "model"), ("gizmo_id", "gizmo_id")):
        if isinstance(conv.get(key), str) and conv[key]:
            cmeta[name] = short(conv[key])
    if isinstance(conv.get("is_archived"), bool):
        cmeta["archived"] = conv["is_archived"]
    if conv_ms:
        cmeta["original_ts"] = conv_ms // 1000
        cmeta["original_ms"] = conv_ms
    title_record = NewRecord(type="conversation", title=clip(title, None, 4096), conversation=conv_id,
                             authority=Authority.INFERRED, ts=conv_ms // 1000 if conv_ms else None, meta=cmeta)
    records = [title_record]
    hidden = reasoning = empty = 0
    tally = Tally()
    last = conv_ms // 1000 if conv_ms else None
    first_ts: int | None = None
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
        ms = unix_ms(msg.get("create_time"))
        ts = ms // 1000 if ms else None
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
            text = _render(content, {}, files, {}, Tally(), "upload")[0].strip()
            if text:
                memories.bio.append((text, mid, ts or last, conv_id))
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
        uploads = {short(a.get("id"), 300) or "": a for a in (as_dict(x) for x in as_list(md.get("attachments")))}
        uploads.pop("", None)
        origin = "generated" if role == "tool" else "upload"
        text, refs, part = _render(content, meta, files, uploads, tally, origin)
        extra = [files.resolve(fid, None, name=a.get("name"), media_type=a.get("mime_type") or a.get("mimeType"),
                               size=a.get("size"), origin="upload") for fid, a in uploads.items()]
        if extra:
            text = "\n".join([marker(r) for r in extra] + ([text] if text else []))
            refs = extra + refs
        text, cites = _citations(md, text)
        if not text.strip():
            if role == "system":
                hidden += 1
            elif ctype not in KNOWN_TYPES:
                tally.unknown_name(f"ChatGPT content type '{short(ctype, 60)}'")
            else:
                empty += 1
            continue
        tally.add_refs(refs)
        refs_meta(meta, refs)
        if cites:
            meta["citations"] = json.dumps(cites, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
        if part is not None and part.voice:
            meta["voice"] = True
        if part is not None and part.prompt:
            meta["prompt"] = clip(part.prompt, None, 4000)
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
        if ms:
            meta["original_ts"] = ms // 1000
            meta["original_ms"] = ms
        # The thread keeps the export's order: no record is earlier than the one before it.
        ts = ts if ts is not None else last
        if ts is not None and last is not None and ts < last and first_ts is not None:
            ts = last
        if first_ts is None:
            first_ts = ts
        last = ts if ts is not None else last
        records.append(NewRecord(type="message", text=clip(text, meta), conversation=conv_id, role=role,
                                 authority=authority, ts=ts, meta=meta))
    if first_ts is not None and (title_record.ts is None or title_record.ts > first_ts):
        title_record.ts = first_ts  # the title comes first
    if branches:
        notes.append(f"{branches} regenerated or edited branch(es) left out (only the branch last shown is imported)")
    if hidden:
        notes.append(f"{hidden} hidden or empty system turn(s) left out")
    if reasoning:
        notes.append(f"{reasoning} reasoning block(s) (thoughts) left out")
    if empty:
        notes.append(f"{empty} empty message(s) left out")
    skipped = branches + hidden + reasoning + empty + sum(tally.unknown.values())
    return ImportUnit(label, records, notes=notes, skipped=skipped, files=tally.files, files_missing=tally.missing,
                      files_unhashed=tally.unhashed, unknown=tally.unknown)


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
