"""The files an export carries (uploaded images and documents, generated images, voice recordings),
found from the references its messages make, and kept as stable references until the vault can
store them.

A reference becomes a :class:`FileRef`: its kind (``image``, ``audio``, ``video``, ``file``), the
export's own reference (an asset pointer such as ``file-service://file-…`` or ``sediment://file_…``,
a file id, a Claude file uuid), the file's name and media type, and, when the export holds the file,
the member that holds it with its size and SHA-256 (streamed, never held in memory; see
:meth:`~camillo.importers.safety.Source.fingerprint`).  A message keeps its references in
``meta["files"]`` as canonical JSON text (a list of objects with the keys of :meth:`FileRef.to_json`),
so that a later version can attach the very same bytes without importing the message again.

How a reference finds its file (ChatGPT, observed layouts): a member whose name, without folders,
starts with the file id followed by ``-``, ``.`` or the end (``file-ABC-photo.jpg``,
``file_00aa….dat``, ``dalle-generations/file-ABC-….webp``, ``user-…/file_00aa-….png``,
``<conversation>/audio/file_00aa-….wav``); ``conversation_asset_file_names.json``, where present,
gives the original name of a ``.dat`` member.  Claude: a member whose name starts with the file's
uuid.  A reference the export does not hold is kept with ``"missing": true`` and counted.

Pure reading of the source: any thread may call it (one :class:`Files` per import).
"""

from __future__ import annotations

import json
import mimetypes
import re
from dataclasses import dataclass
from typing import Any

from .safety import Source, as_dict, load_json, short

KINDS = ("image", "audio", "video", "file")
MAX_REFS = 64  # references kept in one message's meta (the count is kept in full)
_ID = re.compile(r"^(file[-_][A-Za-z0-9]+|[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})"
                 r"(?=$|[-.])")
_HEXISH = re.compile(r"[0-9a-fA-F-]*")  # a uuid or part of one, as generated names end
_SCHEMES = ("file-service://", "sediment://", "file://")
# Files of an export that are not carried files (the export's own data and pages).
DATA_SUFFIXES = (".json", ".jsonl", ".html", ".htm", ".index", ".txt", ".md", ".csv")
_MAGIC: tuple[tuple[bytes, int, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", 0, "image/png"), (b"\xff\xd8\xff", 0, "image/jpeg"), (b"GIF8", 0, "image/gif"),
    (b"WEBP", 8, "image/webp"), (b"WAVE", 8, "audio/wav"), (b"ID3", 0, "audio/mpeg"), (b"OggS", 0, "audio/ogg"),
    (b"%PDF-", 0, "application/pdf"), (b"ftyp", 4, "video/mp4"), (b"\x1aE\xdf\xa3", 0, "video/webm"),
    (b"PK\x03\x04", 0, "application/zip"),
)


def sniff(head: bytes) -> str | None:
    """The media type a file's first bytes give away (PNG, JPEG, GIF, WebP, WAV, MP3, Ogg, PDF, MP4, WebM, ZIP)."""
    for magic, at, media in _MAGIC:
        if head[at:at + len(magic)] == magic:
            return media
    return None


def kind_of(media_type: str | None, default: str = "file") -> str:
    top = (media_type or "").split("/", 1)[0]
    return top if top in ("image", "audio", "video") else default


def file_id(ref: str) -> str:
    """The id in an asset pointer (``sediment://file_00aa`` → ``file_00aa``)."""
    for scheme in _SCHEMES:
        if ref.startswith(scheme):
            return ref[len(scheme):]
    return ref


@dataclass
class FileRef:
    kind: str
    ref: str
    name: str | None = None
    media_type: str | None = None
    size: int | None = None
    sha256: str | None = None
    member: str | None = None
    origin: str | None = None  # "upload", "generated", "voice", …
    inline: bool = False  # the bytes are inside the export's JSON (base64), not a file of the export

    @property
    def missing(self) -> bool:
        return self.member is None and not self.inline

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "ref": self.ref}
        for key in ("name", "media_type", "size", "sha256", "member", "origin"):
            value = getattr(self, key)
            if value is not None:
                out[key] = value
        if self.missing:
            out["missing"] = True
        if self.inline:
            out["inline"] = True
        return out

    def label(self) -> str:
        return self.name or self.ref


class Files:
    """The carried files of one export, and what its messages referred to."""

    def __init__(self, src: Source, names: dict[str, str] | None = None) -> None:
        self.src = src
        self.original_names = names or {}  # member → the name the user gave the file
        self._by_id: dict[str, list[str]] = {}
        self.carried: list[str] = []
        for member in src.names():
            base = member.rsplit("/", 1)[-1]
            m = _ID.match(base)
            if base.lower().endswith(DATA_SUFFIXES) or (base.lower().endswith(".zip") and not m):
                continue  # the export's own data; a ZIP that is no upload is a nested archive (not opened)
            self.carried.append(member)
            if m:
                self._by_id.setdefault(m.group(1).lower(), []).append(member)
        self._prints: dict[str, tuple[int, str | None, bytes]] = {}
        self.referenced: set[str] = set()

    def member_for(self, ref: str) -> str | None:
        key = file_id(ref).strip().lower()
        hits = self._by_id.get(key)
        if not hits and key.startswith(("file-", "file_")):
            hits = self._by_id.get(("file_" if key[4] == "-" else "file-") + key[5:])
        if not hits:
            return None
        return min(hits, key=lambda n: (n.count("/"), len(n), n))

    def resolve(self, ref: str, kind: str | None = None, *, name: Any = None, media_type: Any = None,
                size: Any = None, origin: str | None = None) -> FileRef:
        """A reference as the export states it, with what the export holds for it."""
        ref = short(ref, 300) or "?"
        member = self.member_for(ref)
        out = FileRef(kind or "file", ref, name=short(name, 300), media_type=short(media_type, 100), origin=origin)
        if isinstance(size, int) and not isinstance(size, bool) and size >= 0:
            out.size = size
        if member is None:
            if out.media_type is None and out.name:
                out.media_type = mimetypes.guess_type(out.name)[0]
            if kind is None:
                out.kind = kind_of(out.media_type)
            return out
        self.referenced.add(member)
        if member not in self._prints:
            fp = self.src.fingerprint(member)
            self._prints[member] = (fp.size, fp.sha256, fp.head)
        fsize, digest, head = self._prints[member]
        out.member, out.size, out.sha256 = member, fsize, digest
        if out.name is None:
            base = self.original_names.get(member, "").rsplit("/", 1)[-1]
            if not base:
                base = member.rsplit("/", 1)[-1]
                m = _ID.match(base)
                rest = base[len(m.group(1)) + 1:] if m and base[len(m.group(1)):][:1] == "-" else ""
                if rest and not _HEXISH.fullmatch(rest.rsplit(".", 1)[0]):
                    base = rest  # file-ABC-photo.jpg: the user's name after the id
            out.name = short(base, 300)
        if out.media_type is None:
            guessed = mimetypes.guess_type(out.name or "")[0] if out.name and not out.name.endswith(".dat") else None
            out.media_type = sniff(head) or guessed or "application/octet-stream"
        if kind is None:
            out.kind = kind_of(out.media_type)
        return out

    def unreferenced(self) -> dict[str, int]:
        """Carried files no message referred to, counted by kind (from their names)."""
        out: dict[str, int] = {}
        for member in self.carried:
            if member in self.referenced:
                continue
            k = kind_of(mimetypes.guess_type(self.original_names.get(member) or member)[0])
            out[k] = out.get(k, 0) + 1
        return out


class Tally:
    """What one unit referred to: counts by kind, missing and unfingerprinted files, unknown names."""

    def __init__(self) -> None:
        self.files: dict[str, int] = {}
        self.missing = 0
        self.unhashed = 0
        self.unknown: dict[str, int] = {}

    def add_refs(self, refs: list[FileRef]) -> None:
        for r in refs:
            self.files[r.kind] = self.files.get(r.kind, 0) + 1
            if r.missing:
                self.missing += 1
            elif r.sha256 is None:
                self.unhashed += 1

    def unknown_name(self, what: str) -> None:
        self.unknown[what] = self.unknown.get(what, 0) + 1


def refs_meta(meta: dict[str, Any], refs: list[FileRef]) -> None:
    """Put a message's file references in its meta: ``files`` (canonical JSON text) and ``attachments`` (count)."""
    if not refs:
        return
    meta["attachments"] = len(refs)
    meta["files"] = json.dumps([r.to_json() for r in refs[:MAX_REFS]], ensure_ascii=False, sort_keys=True,
                               separators=(",", ":"))


def marker(ref: FileRef) -> str:
    """The line a message's text shows where a file was: ``[image: photo.png]``."""
    what = {"image": "image", "audio": "audio", "video": "video"}.get(ref.kind, "file")
    tail = "" if not ref.missing else ", not in the export"
    return f"[{what}: {ref.label()}{tail}]"


def asset_names(src: Source, where: str | None) -> dict[str, str]:
    """``conversation_asset_file_names.json`` (newer ChatGPT exports): member → original name."""
    if where is None:
        return {}
    data = as_dict(load_json(src, where))
    root = where[: -len(where.rsplit("/", 1)[-1])]
    return {root + k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}
