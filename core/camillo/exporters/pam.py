"""Export a vault as PAM (Portable AI Memory 1.0): ``memory-store.json`` plus
``conversations/<id>.json`` for the conversations.

Mapping:

* facts → memories of type ``fact``, preferences → ``preference``, instructions →
  ``instruction``; other keyed types and the non-message notes (events → ``context``; decisions,
  summaries and attachments → ``custom`` with ``custom_type`` = the VMEM type) → memories too;
* files attached to messages (spec §9.5) → the message's ``attachments`` (type, name, MIME type,
  size, ``ref`` = ``attachments/<sha256>``, ``provider_id`` = the attachment record's id), each file's
  exact bytes written once to that path in the export;
* messages and conversation records → one PAM conversation file per conversation
  (``conversations/conv-<16 hex of the conversation id's SHA-256>.json``), listed in
  ``conversations_index``; messages without a conversation go to ``conv-unthreaded.json``.

Provenance: ``provenance.platform`` = ``camillo``; ``provenance.extraction_method`` from the
record's effective authority (``user`` and ``observed`` → ``explicit_user_input``, ``inferred`` →
``llm_inference``, ``external`` → ``api_export``); ``confidence`` from it too (1, 0.9, 0.7, 0.5).
The exact VMEM identity (record id, writer, compartment, claimed and effective class, type, key,
role, conversation, non-text value) travels in ``metadata.vmem`` (memories) and
``raw_metadata.vmem`` (conversations, messages).  ``owner.id`` is the vault id; ``export_id`` is a
UUID derived from the content and ``export_date`` is the newest record's time, so the same vault
state gives the same bytes.  ``integrity.checksum`` is SHA-256 over the RFC 8785 form of the
memories sorted by id, each memory written in full as the official SDK (``portable-ai-memory``)
reads it back (``tags`` included, empty), so the SDK's validator computes the same checksum.  A
memory from a conversation that is exported names it in ``provenance.conversation_ref`` and the
conversation's index entry lists it in ``derived_memories`` (both directions, as the validator
checks).  PAM has no deletion record: hidden and erased records are simply absent.

The notes and the keyed records are read a page of records at a time, each conversation's messages
again for its file, and the memories (the keyed records and the notes that are no conversation's) are
held on their way to ``memory-store.json`` in a temporary database in the export's folder (deleted
before the export returns), which also sums them: the export holds one conversation, not the vault.

Runs on the thread that owns the vault.
"""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from typing import TYPE_CHECKING, Any

from ..importers.safety import digest, iso
from ..values import Authority, Kind
from . import (
    ExportSummary,
    Scratch,
    confidence,
    fact_values,
    generator,
    jcs,
    paged,
    prepare_out,
    record_text,
    visible_notes,
    vmem_info,
    write_file,
)

if TYPE_CHECKING:
    from ..values import RecordView
    from ..vault import Vault

DOCUMENT_TYPES = {"application/pdf", "application/msword", "application/rtf",
                  "application/vnd.openxmlformats-officedocument.wordprocessingml.document"}
PLATFORM = "camillo"
MEMORY_TYPES = {"fact": "fact", "preference": "preference", "instruction": "instruction", "event": "context"}
CONVERSATION_TYPES = frozenset({"message", "conversation"})
STORE_INDENT = "    "  # a memory's lines in memory-store.json (an item of the top-level "memories" list)
MEMORIES_HERE = "\x00memories\x00"  # where the memories go in memory-store.json, streamed from the database


def content_hash(text: str) -> str:
    """PAM §6 (as the reference SDK computes it): trim, lower-case, NFC, collapse white space."""
    import re
    import unicodedata

    norm = re.sub(r"\s+", " ", unicodedata.normalize("NFC", text.strip().lower()))
    return "sha256:" + hashlib.sha256(norm.encode("utf-8")).hexdigest()


def extraction_method(v: RecordView) -> str:
    c = v.effective_class if v.effective_class is not None else v.claimed_class
    if c is not None and c >= Authority.OBSERVED:
        return "explicit_user_input"
    if c == Authority.INFERRED:
        return "llm_inference"
    return "api_export"


def conversation_file_id(conversation: str | None) -> str:
    return "conv-unthreaded" if conversation is None else "conv-" + digest(conversation)


def _memory(v: RecordView, status: str | None, exported: set[str | None]) -> dict[str, Any]:
    text = record_text(v) or f"({v.type})"
    ptype = MEMORY_TYPES.get(v.type or "", "custom")
    c = confidence(v)
    mem: dict[str, Any] = {
        "id": "mem-" + v.id.hex(),
        "type": ptype,
        "status": "active",
        "content": text,
        "content_hash": content_hash(text),
        "tags": [],
        "confidence": {"initial": c, "current": c},
        "temporal": {"created_at": iso(v.ts)},
        "provenance": {"platform": PLATFORM, "extraction_method": extraction_method(v), "extractor": generator()},
        "metadata": {"vmem": vmem_info(v, status)},
    }
    if ptype == "custom":
        mem["custom_type"] = v.type or "note"
    if v.conversation is not None and v.conversation in exported:
        mem["provenance"]["conversation_ref"] = conversation_file_id(v.conversation)
    return mem


def _role(v: RecordView) -> str:
    if v.role in ("user", "assistant", "system", "tool"):
        return v.role
    c = v.effective_class if v.effective_class is not None else v.claimed_class
    return "user" if c == Authority.USER else "assistant" if c == Authority.INFERRED else "tool"


def _attachment_kind(media_type: str) -> str:
    top = media_type.split("/", 1)[0]
    if top in ("image", "audio", "video"):
        return top
    return "document" if media_type in DOCUMENT_TYPES or top == "text" else "file"


def _attach(vault: Vault, v: RecordView, out: str, by_message: dict[str, list[dict[str, Any]]]) -> None:
    """A file attached to a message: written once to ``attachments/<sha256>`` in the export (its exact
    bytes, checked), and listed as a PAM message attachment under the message's id (hex)."""
    value = v.value if isinstance(v.value, dict) else {}
    of, digest = value.get("of"), value.get("sha256")
    if v.type != "attachment" or not isinstance(of, str) or not isinstance(digest, str):
        return
    ref = f"attachments/{digest}"
    path = os.path.join(out, *ref.split("/"))
    if not os.path.exists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        vault.save_attachment(v.id, path)
    media = str(value.get("media_type") or "application/octet-stream")
    by_message.setdefault(of, []).append({
        "type": _attachment_kind(media), "name": value.get("name"), "mime_type": media,
        "size_bytes": value.get("size"), "ref": ref, "provider_id": v.id.hex()})


class _Memories(Scratch):
    """The memories on their way to ``memory-store.json``, held in the export's temporary database: each
    one's id, the conversation file it is derived from, its lines as the store shows them and its RFC
    8785 form, read back in the order of their ids, which an index keeps (an export of a million facts
    holds none of them, and SQLite sorts nothing outside the export's folder)."""

    def __init__(self, out: str) -> None:
        super().__init__(out)
        self.db.execute("CREATE TABLE memories(id TEXT NOT NULL, conversation TEXT, doc BLOB NOT NULL, "
                        "canon BLOB NOT NULL)")
        self.db.execute("CREATE INDEX by_id ON memories(id)")
        self.db.execute("CREATE INDEX by_conversation ON memories(conversation, id)")
        self.count = 0

    def put(self, mem: dict[str, Any]) -> None:
        doc = json.dumps(mem, ensure_ascii=False, sort_keys=True, indent=2)  # at the depth the store puts it
        self.db.execute("INSERT INTO memories VALUES(?, ?, ?, ?)",
                         (mem["id"], mem["provenance"].get("conversation_ref"),
                          "\n".join(STORE_INDENT + line for line in doc.split("\n")).encode("utf-8"), jcs(mem)))
        self.count += 1

    def derived(self, conversation_file: str) -> list[str]:
        return [r[0] for r in self.db.execute("SELECT id FROM memories WHERE conversation = ? ORDER BY id",
                                                (conversation_file,))]

    def checksum(self) -> str:
        """SHA-256 over the RFC 8785 form of the memories sorted by id (a JSON array of them)."""
        h = hashlib.sha256(b"[")
        for i, (canon,) in enumerate(self.db.execute("SELECT canon FROM memories ORDER BY id")):
            h.update(b"," + canon if i else canon)
        h.update(b"]")
        return "sha256:" + h.hexdigest()

    def write_store(self, root: str, store: dict[str, Any]) -> None:
        """``memory-store.json``: ``store`` as indented JSON, its ``memories`` the rows, by id."""
        text = json.dumps({**store, "memories": MEMORIES_HERE}, ensure_ascii=False, sort_keys=True, indent=2) + "\n"
        head, tail = text.split('\n  "memories": ' + json.dumps(MEMORIES_HERE), 1)
        with open(os.path.join(root, "memory-store.json"), "wb") as fh:
            fh.write((head + '\n  "memories": ').encode("utf-8"))
            if not self.count:
                fh.write(b"[]")
            else:
                for i, (doc,) in enumerate(self.db.execute("SELECT doc FROM memories ORDER BY id")):
                    fh.write(b",\n" if i else b"[\n")
                    fh.write(doc)
                fh.write(b"\n  ]")
            fh.write(tail.encode("utf-8"))


def _messages(vault: Vault, conversation: str | None, unthreaded: list[bytes]) -> list[RecordView]:
    """The messages the timeline shows of one conversation (of every compartment), or those without
    one: read for its file, a page at a time, and let go once it is written."""
    ids = vault.timeline_ids(conversation=conversation) if conversation is not None else unthreaded
    return [v for v in paged(vault, ids) if v.kind == Kind.NOTE and v.type == "message" and v.conversation == conversation]


def export(vault: Vault, out: str) -> ExportSummary:
    vault_id = vault.vault_id.hex()
    prepare_out(out)
    # each conversation (by its id, across compartments, as a PAM conversation file), with the id of its
    # first conversation record (the smallest) if it has one; the messages without a conversation; the
    # notes that are no conversation's (memories, attachments): their ids, read again once every
    # conversation is known, as the messages are per file
    threads: dict[str | None, bytes | None] = {}
    unthreaded: list[bytes] = []
    others: list[bytes] = []
    files: dict[str, list[dict[str, Any]]] = {}  # the attachments of each message (hex id)
    newest = 0
    for v in visible_notes(vault):
        newest = max(newest, v.ts or 0)
        if v.type not in CONVERSATION_TYPES:
            others.append(v.id)
            _attach(vault, v, out, files)
            continue
        first = threads.setdefault(v.conversation, None)
        if v.type == "conversation" and (first is None or v.id < first):
            threads[v.conversation] = v.id
        elif v.type == "message" and v.conversation is None:
            unthreaded.append(v.id)
    for listed in files.values():
        listed.sort(key=lambda f: f["provider_id"])
    exported = set(threads)
    with _Memories(out) as memories:
        for v, status in fact_values(vault):
            newest = max(newest, v.ts or 0)
            memories.put(_memory(v, status, exported))
        for v in paged(vault, others):
            memories.put(_memory(v, None, exported))
        index: list[dict[str, Any]] = []
        written = 0
        for conv in sorted(threads, key=lambda c: (c is not None, c or "")):
            first = threads[conv]
            rec = vault.record(first) if first is not None else None
            msgs = sorted(_messages(vault, conv, unthreaded), key=lambda v: (v.ts or 0, v.id))
            fid = conversation_file_id(conv)
            times = [v.ts for v in msgs if v.ts] + ([rec.ts] if rec is not None and rec.ts else [])
            created, updated = (min(times), max(times)) if times else (0, 0)
            title = None
            if rec is not None and isinstance(rec.value, dict) and isinstance(rec.value.get("title"), str):
                title = rec.value["title"]
            doc: dict[str, Any] = {
                "schema": "portable-ai-memory-conversation",
                "schema_version": "1.0",
                "id": fid,
                "provider": {"name": PLATFORM, "conversation_id": conv},
                "title": title,
                "temporal": {"created_at": iso(created), "updated_at": iso(updated)},
                "messages": [
                    {"id": "msg-" + v.id.hex(), "role": _role(v), "content": {"type": "text", "text": record_text(v)},
                     "created_at": iso(v.ts), "raw_metadata": {"vmem": vmem_info(v)},
                     **({"attachments": files[v.id.hex()]} if v.id.hex() in files else {})}
                    for v in msgs
                ],
                "raw_metadata": {"vmem": vmem_info(rec)} if rec is not None else {},
            }
            write_file(out, f"conversations/{fid}.json",
                       (json.dumps(doc, ensure_ascii=False, sort_keys=True, indent=2) + "\n").encode("utf-8"))
            written += 1
            index.append({"id": fid, "platform": PLATFORM, "title": title, "message_count": len(msgs),
                          "temporal": {"created_at": iso(created), "updated_at": iso(updated)}, "tags": [],
                          "derived_memories": memories.derived(fid),
                          "storage": {"type": "file", "ref": f"conversations/{fid}.json", "format": "json"}})
        checksum = memories.checksum()
        memories.write_store(out, {
            "schema": "portable-ai-memory",
            "schema_version": "1.0",
            "spec_uri": "https://portable-ai-memory.org/spec/v1.0",
            "export_id": str(uuid.UUID(bytes=hashlib.sha256((vault_id + checksum).encode()).digest()[:16],
                                        version=4)),
            "exported_by": generator(),
            "export_date": iso(newest),
            "owner": {"id": vault_id},
            "relations": [],
            "conversations_index": index,
            "integrity": {"canonicalization": "RFC8785", "checksum": checksum, "total_memories": memories.count},
            "export_type": "full",
        })
        return {"format": "pam", "out": out, "memories": memories.count, "conversations": written}
