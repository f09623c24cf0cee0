"""Hostile-input limits and helpers shared by the importers.

An export is untrusted input: it may be damaged, hand-edited or crafted.  Everything here turns a
problem into :class:`~camillo.importers.ImportFailed` naming the file and the problem, before a
single record is written.

* **Sources.**  :func:`open_source` opens a ZIP archive, a folder or a single JSON file behind one
  interface (:class:`Source`); a folder that holds the several ZIP parts of one export (as ChatGPT
  and Claude send large exports) is read as one export (:class:`PartsSource`).  ZIP members are
  read by name into memory, never extracted to disk.  An archive is refused whole if a member name
  is absolute or climbs out (``..``), if it has more than :data:`MAX_MEMBERS` members, more than
  :data:`MAX_ARCHIVE_BYTES` uncompressed in all, or a member larger than 1 MiB that compresses
  better than :data:`MAX_RATIO` to 1 (a ZIP bomb).  What is read into memory (the JSON of the
  export) is bounded too: a member larger than :data:`MAX_MEMBER_BYTES` is refused, and reading
  stops once :data:`MAX_TOTAL_BYTES` were read in all.  The sizes a ZIP declares are not trusted
  either: reading stops at the declared size and at the limits.  In a folder, a name that leaves
  the folder (``..``, an absolute path, a symbolic link pointing outside) is refused.
* **Files the export carries** (images, audio, uploads) are never read into memory:
  :meth:`Source.fingerprint` streams a member through SHA-256, at most
  :data:`MAX_FINGERPRINT_BYTES` per file and :data:`MAX_FINGERPRINT_TOTAL` in all; a larger file
  is referenced by name and size without a hash, and the report says so.
* **JSON.**  :func:`load_json` refuses files over :data:`MAX_JSON_BYTES`, text that is not UTF-8,
  malformed JSON and nesting deeper than :data:`MAX_DEPTH` levels.
* **Text.**  :func:`clip` truncates a text longer than :data:`MAX_TEXT_BYTES` (UTF-8) at a
  character boundary, appends a visible marker and records the original length in the record's
  ``meta["truncated"]`` (bytes).  Truncating, rather than skipping, keeps a conversation whole; the
  marker says what was lost.

The limits are module attributes so that a caller (or a test) may tighten them.

Pure functions and read-only file access: any thread may call them (one Source per thread).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import re
import stat
import unicodedata
import zipfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, overload

from ..errors import VaultError
from ..values import json_to_cbor

MAX_MEMBERS = 100_000
MAX_MEMBER_BYTES = 512 * 1024 * 1024  # one file read into memory (the JSON of an export)
MAX_TOTAL_BYTES = 512 * 1024 * 1024  # all that is read into memory
MAX_ARCHIVE_BYTES = 256 * 1024**3  # what an archive may declare uncompressed in all (images and videos included)
MAX_FINGERPRINT_BYTES = 4 * 1024**3  # a carried file larger than this is referenced without a hash
MAX_FINGERPRINT_TOTAL = 64 * 1024**3  # all carried files hashed in one import
MAX_PARTS = 64  # ZIP parts of one export in a folder
MAX_RATIO = 200
RATIO_FLOOR = 1024 * 1024  # small members may compress very well legitimately
MAX_JSON_BYTES = 512 * 1024 * 1024
MAX_DEPTH = 64
MAX_TEXT_BYTES = 1024 * 1024
MAX_TS = 2**40  # about the year 36812: anything later is not a time

_CHUNK = 1024 * 1024


class ImportFailed(VaultError):
    """The source cannot be imported at all (nothing was written)."""

    exit_code = 4


def _failed(message: str) -> Exception:
    return ImportFailed(message)


def bad_name(name: str) -> bool:
    """Whether an archive or folder member name could point outside it (absolute, ``..``, a drive)."""
    if not name or name.startswith(("/", "\\", "~")) or "\\" in name or "\x00" in name:
        return True
    if re.match(r"^[A-Za-z]:", name):
        return True
    return any(part == ".." for part in name.split("/"))


@dataclass(frozen=True)
class Fingerprint:
    """What an import keeps of a file the export carries: its size, its SHA-256 (None when it is
    larger than :data:`MAX_FINGERPRINT_BYTES`, or the hashing budget is spent) and its first bytes
    (to recognise the file type of a ``.dat`` member)."""

    size: int
    sha256: str | None
    head: bytes = b""


class Source:
    """Files of an export, by relative name (``/``-separated)."""

    label: str  # the file or folder name, for messages
    notes: list[str]  # what opening the source found worth saying (parts, duplicates)
    _hashed: int = 0

    def names(self) -> list[str]:
        raise NotImplementedError

    def read(self, name: str, limit: int | None = None) -> bytes:
        raise NotImplementedError

    def size(self, name: str) -> int:
        raise NotImplementedError

    def stream(self, name: str) -> Iterable[bytes]:
        """Member ``name`` in chunks of at most 1 MiB, never more than it declares."""
        raise NotImplementedError

    def fingerprint(self, name: str) -> Fingerprint:
        """Size, SHA-256 and first bytes of member ``name``, streamed (never held in memory)."""
        size = self.size(name)
        if size > MAX_FINGERPRINT_BYTES or self._hashed + size > MAX_FINGERPRINT_TOTAL:
            return Fingerprint(size, None)
        h = hashlib.sha256()
        head = b""
        seen = 0
        for chunk in self.stream(name):
            if len(head) < 32:
                head += chunk[: 32 - len(head)]
            seen += len(chunk)
            if seen > size:
                raise _failed(f"{self.where(name)} holds more than the {size} bytes it declares: "
                              "a damaged or crafted archive; nothing was imported")
            h.update(chunk)
        self._hashed += seen
        return Fingerprint(seen, h.hexdigest(), head)

    def close(self) -> None:
        pass

    def __enter__(self) -> Source:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def where(self, name: str) -> str:
        return f"{self.label}/{name}" if name else self.label

    def find(self, basename: str) -> str | None:
        """The shallowest member called ``basename`` (exports often sit in one top folder)."""
        hits = [n for n in self.names() if n.rsplit("/", 1)[-1] == basename]
        if not hits:
            return None
        return min(hits, key=lambda n: (n.count("/"), n))

    def exists(self, name: str) -> bool:
        return name in set(self.names())


class ZipSource(Source):
    def __init__(self, path: str, label: str | None = None) -> None:
        self.label = label or os.path.basename(path.rstrip("/")) or path
        self.notes = []
        try:
            self.zf = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError, ValueError) as exc:
            raise _failed(f"{self.label} is not a readable ZIP archive ({exc})") from None
        infos = self.zf.infolist()
        if len(infos) > MAX_MEMBERS:
            self.zf.close()
            raise _failed(f"{self.label} has {len(infos)} files; at most {MAX_MEMBERS} are accepted")
        total = 0
        self._infos: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            name = info.filename
            if bad_name(name):
                self.zf.close()
                raise _failed(f"{self.label} holds a file named '{name[:200]}' that points outside the archive; "
                              "it was refused whole")
            if info.is_dir():
                continue
            if name in self._infos:
                self.zf.close()
                raise _failed(f"{self.label} holds two files named '{name[:200]}'; it was refused whole")
            if info.file_size > RATIO_FLOOR and info.file_size > MAX_RATIO * max(info.compress_size, 1):
                self.zf.close()
                raise _failed(f"{self.where(name)} expands {info.file_size // max(info.compress_size, 1)} times "
                              f"(more than {MAX_RATIO}): a ZIP bomb; the archive was refused whole")
            total += info.file_size
            if total > MAX_ARCHIVE_BYTES:
                self.zf.close()
                raise _failed(f"{self.label} expands to more than {MAX_ARCHIVE_BYTES} bytes; it was refused whole")
            self._infos[name] = info
        self._read_total = 0

    def names(self) -> list[str]:
        return sorted(self._infos)

    def _info(self, name: str) -> zipfile.ZipInfo:
        info = self._infos.get(name)
        if info is None:
            raise _failed(f"{self.label} has no file '{name}'")
        return info

    def size(self, name: str) -> int:
        return self._info(name).file_size

    def read(self, name: str, limit: int | None = None) -> bytes:
        info = self._info(name)
        cap = min(MAX_MEMBER_BYTES, limit if limit is not None else MAX_MEMBER_BYTES)
        if info.file_size > cap:
            raise _failed(f"{self.where(name)} is {info.file_size} bytes uncompressed; at most {cap} are accepted")
        out = io.BytesIO()
        for chunk in self.stream(name):
            out.write(chunk)
            self._read_total += len(chunk)
            if out.tell() > cap or self._read_total > MAX_TOTAL_BYTES:
                raise _failed(f"{self.where(name)} expands beyond its declared size or the "
                              f"{MAX_TOTAL_BYTES}-byte limit: a ZIP bomb; nothing was imported")
        return out.getvalue()

    def stream(self, name: str) -> Iterable[bytes]:
        info = self._info(name)
        try:
            with self.zf.open(info) as fh:
                seen = 0
                while True:
                    chunk = fh.read(_CHUNK)
                    if not chunk:
                        break
                    seen += len(chunk)
                    if seen > info.file_size:
                        raise _failed(f"{self.where(name)} expands beyond its declared size: a ZIP bomb; "
                                      "nothing was imported")
                    yield chunk
        except (zipfile.BadZipFile, zlib.error, OSError, EOFError, NotImplementedError, RuntimeError) as exc:
            raise _failed(f"{self.where(name)} cannot be read from the archive ({exc})") from None

    def close(self) -> None:
        self.zf.close()


class DirSource(Source):
    def __init__(self, path: str) -> None:
        self.root = os.path.realpath(path)
        self.label = os.path.basename(path.rstrip("/")) or path
        self.notes = []
        self._names: list[str] | None = None

    def resolve(self, name: str) -> str:
        """The real path of member ``name``; ImportFailed if it leads outside the folder."""
        if bad_name(name):
            raise _failed(f"'{name[:200]}' points outside {self.label}; refused")
        full = os.path.realpath(os.path.join(self.root, *name.split("/")))
        if full != self.root and not full.startswith(self.root + os.sep):
            raise _failed(f"{self.where(name)} leads outside the folder (a symbolic link?); refused")
        return full

    def names(self) -> list[str]:
        if self._names is None:
            out: list[str] = []
            for dirpath, dirnames, filenames in os.walk(self.root):
                dirnames[:] = sorted(d for d in dirnames if not os.path.islink(os.path.join(dirpath, d)))
                rel = os.path.relpath(dirpath, self.root)
                for f in sorted(filenames):
                    name = f if rel == "." else f"{rel.replace(os.sep, '/')}/{f}"
                    out.append(name)
                    if len(out) > MAX_MEMBERS:
                        raise _failed(f"{self.label} has more than {MAX_MEMBERS} files")
            self._names = sorted(out)
        return self._names

    def size(self, name: str) -> int:
        full = self.resolve(name)
        try:
            st = os.stat(full)
        except FileNotFoundError:
            raise _failed(f"{self.where(name)} does not exist") from None
        except OSError as exc:
            raise _failed(f"{self.where(name)} cannot be read ({exc.strerror or exc})") from None
        if not stat.S_ISREG(st.st_mode):
            raise _failed(f"{self.where(name)} is not a regular file")
        return st.st_size

    def read(self, name: str, limit: int | None = None) -> bytes:
        full = self.resolve(name)
        cap = MAX_MEMBER_BYTES if limit is None else min(limit, MAX_MEMBER_BYTES)
        size = self.size(name)
        if size > cap:
            raise _failed(f"{self.where(name)} is {size} bytes; at most {cap} are accepted")
        try:
            with open(full, "rb") as fh:
                data = fh.read(cap + 1)
        except OSError as exc:
            raise _failed(f"{self.where(name)} cannot be read ({exc.strerror or exc})") from None
        if len(data) > cap:
            raise _failed(f"{self.where(name)} grew beyond {cap} bytes while being read")
        return data

    def stream(self, name: str) -> Iterable[bytes]:
        full = self.resolve(name)
        try:
            with open(full, "rb") as fh:
                while True:
                    chunk = fh.read(_CHUNK)
                    if not chunk:
                        break
                    yield chunk
        except OSError as exc:
            raise _failed(f"{self.where(name)} cannot be read ({exc.strerror or exc})") from None


class FileSource(DirSource):
    """A single file (e.g. ``conversations.json`` given directly): its one member is its name."""

    def __init__(self, path: str) -> None:
        super().__init__(os.path.dirname(os.path.abspath(path)) or ".")
        self.only = os.path.basename(path)
        self.label = self.only

    def names(self) -> list[str]:
        return [self.only]

    def where(self, name: str) -> str:
        return name or self.label

    def read(self, name: str, limit: int | None = None) -> bytes:
        if name != self.only:
            raise _failed(f"{self.label}: no file '{name}' next to it was given")
        return super().read(name, limit)


class PartsSource(Source):
    """An export that arrived as several ZIP parts (``export-part-0001.zip``, ``conversations-000.zip``,
    ``projects-000.zip`` …) saved in one folder: one export whose files are the union of the parts'
    files and of the folder's own.  A name present in two parts is read from the first (sorted by
    part name) and the report says so; a ZIP inside a ZIP is not opened."""

    def __init__(self, folder: DirSource, parts: list[str]) -> None:
        self.label = folder.label
        self.notes = []
        self.folder = folder
        self.parts: list[ZipSource] = []
        self._where: dict[str, tuple[Source, str]] = {}
        try:
            for part in parts:
                self.parts.append(ZipSource(folder.resolve(part), label=folder.where(part)))
        except BaseException:
            self.close()
            raise
        twice = 0
        for name in folder.names():
            if name not in parts:
                self._where[name] = (folder, name)
        for z in self.parts:
            for name in z.names():
                if name in self._where:
                    twice += 1
                    continue
                self._where[name] = (z, name)
        if twice:
            self.notes.append(f"{twice} file(s) appear in more than one part of the export; the first copy was read")

    def _of(self, name: str) -> tuple[Source, str]:
        hit = self._where.get(name)
        if hit is None:
            raise _failed(f"{self.label} has no file '{name}'")
        return hit

    def names(self) -> list[str]:
        return sorted(self._where)

    def part_of(self, name: str) -> str:
        """The part (or the folder) a member was read from, for messages."""
        return self._of(name)[0].label

    def where(self, name: str) -> str:
        src, inner = self._of(name) if name in self._where else (self.folder, name)
        return src.where(inner)

    def read(self, name: str, limit: int | None = None) -> bytes:
        src, inner = self._of(name)
        return src.read(inner, limit)

    def size(self, name: str) -> int:
        src, inner = self._of(name)
        return src.size(inner)

    def stream(self, name: str) -> Iterable[bytes]:
        src, inner = self._of(name)
        return src.stream(inner)

    def close(self) -> None:
        for z in self.parts:
            z.close()


def open_source(path: str) -> Source:
    """A ZIP, a folder or a single file, by what ``path`` is (a ZIP is recognised by content).  A
    folder holding ZIP files is read together with them, as the parts of one export."""
    if not isinstance(path, str) or not path:
        raise _failed("no source given")
    if os.path.isdir(path):
        folder = DirSource(path)
        parts = [n for n in folder.names() if "/" not in n and n.lower().endswith(".zip")]
        if not parts:
            return folder
        if len(parts) > MAX_PARTS:
            raise _failed(f"{folder.label} holds {len(parts)} ZIP files; an export of at most {MAX_PARTS} parts "
                          "is accepted")
        return PartsSource(folder, parts)
    if not os.path.exists(path):
        raise _failed(f"{path} does not exist")
    if not os.path.isfile(path):
        raise _failed(f"{path} is neither a file nor a folder")
    try:
        with open(path, "rb") as fh:
            magic = fh.read(4)
    except OSError as exc:
        raise _failed(f"{path} cannot be read ({exc.strerror or exc})") from None
    if magic == b"PK\x03\x04" or zipfile.is_zipfile(path):
        return ZipSource(path)
    return FileSource(path)


# ------------------------------------------------------------------------------------------ JSON


def check_depth(obj: Any, where: str, limit: int | None = None) -> None:
    """Refuse containers nested deeper than ``limit`` (walks iteratively: no recursion)."""
    limit = MAX_DEPTH if limit is None else limit
    stack: list[tuple[Any, int]] = [(obj, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise _failed(f"{where} nests more than {limit} levels deep; refused")
        if isinstance(item, dict):
            stack.extend((v, depth + 1) for v in item.values() if isinstance(v, (dict, list)))
        elif isinstance(item, list):
            stack.extend((v, depth + 1) for v in item if isinstance(v, (dict, list)))


def parse_json(data: bytes, where: str) -> Any:
    if len(data) > MAX_JSON_BYTES:
        raise _failed(f"{where} is {len(data)} bytes; JSON files of at most {MAX_JSON_BYTES} bytes are accepted")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _failed(f"{where} is not UTF-8 text (byte {exc.start})") from None
    try:
        obj = json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise _failed(f"{where} nests too deeply to read; refused") from None
    except json.JSONDecodeError as exc:
        raise _failed(f"{where} is not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); "
                      "was it cut short?") from None
    except ValueError as exc:
        raise _failed(f"{where} is not valid JSON ({exc})") from None
    check_depth(obj, where)
    return obj


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def load_json(source: Source, name: str) -> Any:
    return parse_json(source.read(name, MAX_JSON_BYTES), source.where(name))


def parse_jsonl(data: bytes, where: str) -> list[Any]:
    """One JSON value per non-empty line."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _failed(f"{where} is not UTF-8 text (byte {exc.start})") from None
    out = []
    for number, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line, parse_constant=_no_constant))
        except RecursionError:
            raise _failed(f"{where} line {number} nests too deeply to read; refused") from None
        except ValueError as exc:
            raise _failed(f"{where} line {number} is not valid JSON ({exc})") from None
        check_depth(out[-1], f"{where} line {number}")
    return out


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an empty one (an optional object of an export)."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """``value`` if it is a JSON array, else an empty one."""
    return value if isinstance(value, list) else []


@overload
def as_str(value: Any) -> str | None: ...
@overload
def as_str(value: Any, default: str) -> str: ...
def as_str(value: Any, default: str | None = None) -> str | None:
    """``value`` if it is a text, else ``default``."""
    return value if isinstance(value, str) else default


def expect(obj: Any, typ: type | tuple[type, ...], where: str, what: str) -> Any:
    """``obj`` if it has the type an export of this kind has at this place, else ImportFailed."""
    if not isinstance(obj, typ):
        found = "an array" if isinstance(obj, list) else "an object" if isinstance(obj, dict) else type(obj).__name__
        raise _failed(f"{where} does not look like {what} (found {found} where it has something else)")
    return obj


# ------------------------------------------------------------------------------------------ values


def clip(text: str, meta: dict[str, Any] | None = None, limit: int | None = None) -> str:
    """``text`` cut to ``limit`` UTF-8 bytes with a marker; the original size goes in ``meta``."""
    limit = MAX_TEXT_BYTES if limit is None else limit
    if len(text) * 4 <= limit:
        return text
    raw = text.encode("utf-8", "surrogatepass")
    if len(raw) <= limit:
        return text
    cut = raw[:limit].decode("utf-8", "ignore")
    if meta is not None:
        meta["truncated"] = len(raw)
    return cut + f"\n[… truncated on import: {len(raw)} bytes in the original]"


def clean_text(value: Any) -> str | None:
    """Text fit for a record: str, NFC, lone surrogates replaced; None for anything else."""
    if not isinstance(value, str):
        return None
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        value = value.encode("utf-8", "replace").decode("utf-8")
    return unicodedata.normalize("NFC", value)


def short(value: Any, limit: int = 200) -> str | None:
    """A short single-line text for meta (ids, names, titles)."""
    text = clean_text(value)
    if text is None:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            text = str(value)
        else:
            return None
    return text[:limit]


def unix_ms(value: Any) -> int | None:
    """Milliseconds since 1970 from a number of seconds (ChatGPT, VaultMem; fractions kept) or an
    ISO 8601 text (Claude, PAM, .mem); None for anything else or a time outside 1970 … year 36812."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        if not math.isfinite(value) or value <= 0 or value >= MAX_TS:
            return None
        return round(value * 1000)
    if isinstance(value, str) and 0 < len(value) <= 64:
        text = value.strip()
        if text[-1:] in ("Z", "z"):
            text = text[:-1] + "+00:00"
        try:
            dt = datetime.fromisoformat(text)
        except ValueError:
            return None
        if dt.tzinfo is None:
            dt = dt.replace(tzinfo=UTC)
        ts = dt.timestamp()
        return round(ts * 1000) if 0 < ts < MAX_TS else None
    return None


def unix_ts(value: Any) -> int | None:
    """Unix seconds from a number (ChatGPT, VaultMem) or an ISO 8601 text (Claude, PAM, .mem)."""
    ms = unix_ms(value)
    return None if ms is None else ms // 1000


def iso(ts: int | None) -> str:
    """Whole-second RFC 3339 UTC with a ``Z`` (what PAM and Portable Memory write)."""
    return datetime.fromtimestamp(ts or 0, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def digest(text: str, n: int = 16) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:n]


def slug(text: str, limit: int = 80) -> str:
    """Lower-case ``[a-z0-9_]`` for a readable key part ('' if nothing is left)."""
    out = re.sub(r"[^a-z0-9]+", "_", unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower())
    return out.strip("_")[:limit]


def unique_keys(prefix: str, seeds: Iterable[str]) -> dict[str, str]:
    """``prefix + 8 hex`` of each seed's SHA-256; seeds whose 8 hex collide get 16 hex."""
    seeds = list(dict.fromkeys(seeds))
    short_of = {s: digest(s, 8) for s in seeds}
    counts: dict[str, int] = {}
    for h in short_of.values():
        counts[h] = counts.get(h, 0) + 1
    return {s: prefix + (h if counts[h] == 1 else digest(s, 16)) for s, h in short_of.items()}


def json_safe(value: Any) -> Any:
    """A JSON value as VMEM can store it: floats that are not whole numbers become text, and text is
    cleaned of control characters (the one JSON-to-CBOR conversion, lenient for exports)."""
    return json_to_cbor(value, fractions="text", text=lambda s: clean_text(s) or "")


def first_line(text: str, limit: int = 200) -> str:
    line = text.strip().split("\n", 1)[0].strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"
