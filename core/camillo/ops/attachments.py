"""Attachments: files (images, documents, recordings) stored encrypted in the vault (spec §9.5).

* **attach**: the file is read in chunks of :data:`~camillo.attachments.CHUNK_SIZE` (never whole), each
  sealed into its own chunk file and written durably, then one ``attachment`` record names them, in its
  compartment: value ``{"name", "media_type", "size", "sha256", "of"?}`` (what every face shows), body
  ``{0: chunk size, 1: [[chunk file hash, chunk key, chunk length], ...]}`` (what only a reader of the
  compartment sees).  Equal chunks in one compartment epoch are stored once.
* **read_attachment**: streams the chunks back to a file, checks every chunk and the whole file's
  SHA-256, and leaves nothing behind on any failure.
* **chunks_in_use** / **collect_garbage**: the chunk files no live attachment record names; those older
  than the grace period (another device's attachment may still be on its way) are deleted.

Memory is bounded by one chunk whatever the file's size.  Confined to the thread that owns the vault.
"""

from __future__ import annotations

import contextlib
import hashlib
import mimetypes
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, BinaryIO

from .. import attachments as layout
from ..changes import Changes
from ..control import Level
from ..errors import AccessDenied, DamagedFile, StorageError, UsageError
from ..log import SYNC_GRACE_SECONDS
from ..places import PATH_ERRNOS, check_new_file
from ..primitives import constant_time_equal, random_bytes
from ..records import Authority, F, Kind, encode_record, validated_record
from ..session import Session
from ..session.writer import sealing_key, write_batches
from ..storage import FolderShelf

MAX_NAME = 255


@dataclass(frozen=True)
class Chunk:
    name: str  # the chunk file's vault name
    key: bytes
    length: int


@dataclass(frozen=True)
class StoredFile:
    """What an attachment record says about its file (``body`` decoded)."""

    record_id: bytes
    name: str
    media_type: str
    size: int
    sha256: str
    chunks: tuple[Chunk, ...]


def parse_body(rid: bytes, value: Any, body: dict[int, Any]) -> StoredFile:
    """The file an attachment record names, or DamagedFile when its body is not well formed."""
    problem = f"attachment record {rid.hex()[:12]} is malformed"
    if not isinstance(value, dict) or not isinstance(body.get(1), list):
        raise DamagedFile(f"{problem}: it names no file")
    chunks = []
    for item in body[1]:
        if (not isinstance(item, list) or len(item) != 3 or not isinstance(item[0], bytes) or len(item[0]) != 32
                or not isinstance(item[1], bytes) or len(item[1]) != 32 or type(item[2]) is not int
                or not 0 <= item[2] <= layout.CHUNK_SIZE):
            raise DamagedFile(f"{problem}: a chunk reference is not [hash, key, length]")
        h = item[0].hex()
        chunks.append(Chunk(f"blobs/{h[:2]}/{h}.blob", item[1], item[2]))
    size, digest = value.get("size"), value.get("sha256")
    if type(size) is not int or size != sum(c.length for c in chunks) or not isinstance(digest, str):
        raise DamagedFile(f"{problem}: its size or SHA-256 does not match its chunks")
    return StoredFile(rid, str(value.get("name", "")), str(value.get("media_type", "application/octet-stream")),
                      size, digest, tuple(chunks))


def stored_file(session: Session, rid: bytes) -> StoredFile:
    """The file of a readable attachment record (UsageError when the record is not one)."""
    state = session.materialized
    v = state.record(rid)
    if (v is None or not v.valid or v.erased) and session.grant is not None:
        g = session.grant
        raise AccessDenied(f"the grant of agent {g.agent} ({g.grant_id.hex()[:12]}) reads no record {rid.hex()[:12]}: "
                           f"it covers {', '.join(sorted(g.scopes))} only (rule: a grant reads only its compartments)")
    if v is None or not v.valid or v.erased:
        raise UsageError(f"no record {rid.hex()[:12]} in this vault")
    session.check_grant(v.compartment_id, write=False, read=True)
    raw = state.raw_record(rid)
    if v.type != "attachment" or raw is None:
        raise UsageError(f"record {rid.hex()[:12]} is a {v.type or v.kind_name.lower()}, not an attachment")
    rec = validated_record(raw, rid)
    if not rec.body:
        raise UsageError(f"attachment {rid.hex()[:12]} holds text only (no stored file); its text is in the record")
    return parse_body(rid, rec.fields.get(F.VALUE), rec.body)


def _read_pieces(stream: BinaryIO) -> Iterator[bytes]:
    while True:
        piece = stream.read(layout.CHUNK_SIZE)
        if not piece:
            return
        yield piece


def _rechunk(pieces: Iterable[bytes]) -> Iterator[bytes]:
    """Pieces of any size as chunks of exactly CHUNK_SIZE bytes (the last one shorter)."""
    buf = bytearray()
    for piece in pieces:
        buf += piece
        while len(buf) >= layout.CHUNK_SIZE:
            yield bytes(buf[:layout.CHUNK_SIZE])
            del buf[:layout.CHUNK_SIZE]
    if buf:
        yield bytes(buf)


def attach(session: Session, source: str | Iterable[bytes], *, compartment: str, name: str | None = None,
           media_type: str | None = None, of: bytes | None = None) -> Changes:
    """Store a file in ``compartment`` as an attachment (of the record ``of``): ``source`` is its
    path, or its bytes as pieces of any size (a member of an export being imported)."""
    actor = session.require_writer()
    cid = session.compartment_id(compartment)
    session.check_grant(cid, write=True)
    path = source if isinstance(source, str) else "the file"
    if name is None and not isinstance(source, str):
        raise UsageError("an attachment given as bytes needs a name")
    shown = name if name is not None else os.path.basename(path)
    if not shown or len(shown) > MAX_NAME or any(ord(c) < 32 for c in shown):
        raise UsageError(f"the attachment name {shown!r} is empty, too long or has control characters; give --name")
    kind = media_type or mimetypes.guess_type(shown)[0] or "application/octet-stream"
    append_only = session.grant is not None and session.grant.scopes.get(compartment) == Level.APPEND
    if of is not None and not append_only:  # an append grant reads nothing: readers check the link
        target = session.materialized.record(of)
        if target is None or not target.valid:
            raise UsageError(f"no record {of.hex()[:12]} to attach to in this vault")
        if target.compartment_id != cid:
            raise UsageError(f"record {of.hex()[:12]} is in {target.compartment}; attach the file there "
                             f"(--compartment {target.compartment})")
    stream: contextlib.AbstractContextManager[Any]
    if isinstance(source, str):
        try:
            stream = open(source, "rb")  # noqa: SIM115 - closed below, after the last chunk
        except OSError as exc:
            raise UsageError(f"cannot read {source}: {exc.strerror}; nothing was added") from None
        pieces: Iterable[bytes] = _read_pieces(stream)
    else:
        stream, pieces = contextlib.nullcontext(), _rechunk(source)
    eid, _ = sealing_key(session, cid)
    secret = session.keyring.secret((cid, eid))
    chunks: list[list[Any]] = []
    digest, size = hashlib.sha256(), 0
    with stream:
        try:
            for piece in pieces:
                if len(chunks) >= layout.MAX_CHUNKS:
                    raise UsageError(f"{path} is larger than {layout.MAX_CHUNKS} chunks; nothing was added")
                digest.update(piece)
                size += len(piece)
                key = (layout.convergent_key(secret, session.vault_id, cid, eid, piece) if secret is not None
                       else random_bytes(32))
                data = layout.seal_chunk(session.vault_id, key, piece, convergent=secret is not None)
                chunk_name = layout.chunk_name(data)
                session.shelf.write(chunk_name, data)  # durable; an equal chunk already there is kept
                chunks.append([bytes.fromhex(chunk_name[-69:-5]), key, len(piece)])
        except OSError as exc:
            raise StorageError(f"reading {path} failed ({exc.strerror}); nothing was added") from None
    value: dict[str, Any] = {"name": shown, "media_type": kind, "size": size, "sha256": digest.hexdigest()}
    if of is not None:
        value["of"] = of.hex()
    # a file the user attaches is theirs; an agent's is what it observed, within its grant
    authority = Authority.USER if session.grant is None else min(Authority.OBSERVED, session.grant.max_class)
    raw = encode_record(Kind.NOTE, actor.writer_id, value=value, type="attachment", ts=int(time.time()),
                        authority=authority, body={0: layout.CHUNK_SIZE, 1: chunks})
    written = write_batches(session, {cid: [raw]})
    return session.reader.changes(written=tuple(r for b in written[cid] for r in b.header.records),
                                  note=f"attached {shown}")


def pieces(session: Session, f: StoredFile) -> Iterator[bytes]:
    """The file's bytes, chunk by chunk, each checked; DamagedFile for a missing or damaged chunk, or
    (after the last chunk) when the whole does not match its SHA-256: a caller keeps nothing it has
    not seen to the end."""
    digest = hashlib.sha256()
    for c in f.chunks:
        try:
            data = session.shelf.read(c.name)
        except FileNotFoundError:
            raise DamagedFile(f"attachment {f.record_id.hex()[:12]} ({f.name}) lacks its chunk {c.name}: it has not "
                              "arrived (wait for the sync) or was deleted", file=c.name) from None
        piece = layout.open_chunk(data, c.name, session.vault_id, c.key)
        if len(piece) != c.length:
            raise DamagedFile(f"attachment chunk {c.name} has {len(piece)} bytes, not {c.length}", file=c.name)
        digest.update(piece)
        yield piece
    if not constant_time_equal(digest.hexdigest().encode(), f.sha256.encode()):  # a hash of the plaintext
        raise DamagedFile(f"attachment {f.record_id.hex()[:12]} ({f.name}) does not match its SHA-256")


def read_attachment(session: Session, rid: bytes, out_path: str) -> StoredFile:
    """Write the attachment's exact bytes to ``out_path`` (which must not exist), checking every chunk
    and the whole file's SHA-256; on any failure nothing is left at ``out_path``."""
    f = stored_file(session, rid)
    check_new_file(out_path, "the attachment (its plaintext)")
    if os.path.lexists(out_path):
        raise UsageError(f"{out_path} exists; choose another file name (nothing was written)")
    tmp = f"{out_path}.camillo-partial"
    try:
        with open(tmp, "xb") as out:
            for piece in pieces(session, f):
                out.write(piece)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, out_path)
    except OSError as exc:
        if exc.errno in PATH_ERRNOS:  # the place chosen, not the vault
            raise UsageError(f"cannot write {out_path} ({exc.strerror}); choose a folder you can write to "
                             "(nothing was written)") from None
        raise StorageError(f"cannot write {out_path} ({exc.strerror}); nothing was written") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return f


def attachment_bytes(session: Session, rid: bytes, limit: int) -> tuple[StoredFile, bytes]:
    """The attachment's exact bytes in memory, checked, when it has at most ``limit`` bytes (an agent's
    or a thumbnail's read); UsageError naming its size otherwise."""
    f = stored_file(session, rid)
    if f.size > limit:
        raise UsageError(f"attachment {rid.hex()[:12]} ({f.name}) has {f.size:,} bytes, more than the {limit:,} "
                         "this read returns; save it to a file instead (camillo attachment DIR ID --out FILE)")
    return f, b"".join(pieces(session, f))


def chunks_named(session: Session, record_ids: set[bytes] | None = None) -> set[str]:
    """The chunk files named by the live attachment records (or by ``record_ids`` among them)."""
    out: set[str] = set()
    for rid, raw in session.materialized.raw_attachment_records():
        if record_ids is not None and rid not in record_ids:
            continue
        rec = validated_record(raw, rid)
        if rec.body:
            try:
                out.update(c.name for c in parse_body(rid, rec.fields.get(F.VALUE), rec.body).chunks)
            except DamagedFile:
                continue
    return out


def attachments_of(session: Session, record_ids: set[bytes]) -> set[bytes]:
    """The live attachment records that belong to (``of``) one of these records: an erasure takes them
    along."""
    out = set()
    for rid, raw in session.materialized.raw_attachment_records():
        value = validated_record(raw, rid).fields.get(F.VALUE)
        of = value.get("of") if isinstance(value, dict) else None
        if isinstance(of, str) and len(of) == 64 and bytes.fromhex(of) in record_ids:
            out.add(rid)
    return out


def collect_garbage(session: Session, *, now: float | None = None) -> int:
    """Delete the chunk files no live attachment record names and older than the grace period (a
    file another device is still attaching has its chunks here before its record).  Returns how many."""
    shelf = session.shelf
    if not session.is_owner or session.read_only or not isinstance(shelf, FolderShelf):
        return 0
    named = chunks_named(session)
    limit = (now if now is not None else time.time()) - SYNC_GRACE_SECONDS
    deleted = 0
    for name in shelf.list():
        if layout_kind(name) and name not in named:
            mtime = shelf.mtime(name)
            if mtime is not None and mtime < limit:
                shelf.delete(name)
                deleted += 1
    return deleted


def layout_kind(name: str) -> bool:
    return name.startswith("blobs/") and name.endswith(".blob")
