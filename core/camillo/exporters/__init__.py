"""Exporters: write what a vault holds now in open interchange formats (Portable Memory ``.mem``,
PAM ``memory-store.json``), for people who leave or who want a plaintext copy elsewhere.

What is exported is the vault's *current* memory as its owner sees it:

* the timeline's notes (messages, conversations, events, decisions, summaries, attachments) as
  :meth:`Vault.timeline` lists them, which leaves out everything hidden (forgotten messages,
  rejected or deleted fact values) and everything erased;
* the binding value of each fact, preference and instruction whose status is ``ok`` or
  ``conflict`` (an unresolved conflict exports its preferred candidate, marked ``"conflict": true``),
  and beside it each proposal still waiting, marked ``"pending": true`` (a proposal is never
  exported as the value); deleted keys are not exported.

Nothing erased is exported, not even as an id.  Hidden (forgotten) records are exported only as
Portable Memory tombstones, which carry the target's id and kind and no content, so that a
receiver that already holds an earlier export deletes them too; PAM has no deletion record, so a
PAM export simply leaves them out.

Both exporters are deterministic: the same vault state gives the same bytes (records sorted by
id, canonical JSON, times taken from the records, never from the clock).  The output is
plaintext: say so to the user, and keep it out of synced folders.

Runs on the thread that owns the vault.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import heapq
import json
import math
import os
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, Any, Self

from ..errors import StorageError, UsageError
from ..values import PATH_ERRNOS, Authority, Kind, RecordView, vault_folder_holding

if TYPE_CHECKING:
    from ..vault import Vault

KINDS: dict[str, str] = {
    "portable-memory": "camillo.exporters.portable_memory",
    "pam": "camillo.exporters.pam",
}
NOTE_TEXT_KEYS = frozenset({"text", "conversation", "role", "title"})
# What an export returns: "format" and "out" (text), then counts of what was written, by kind.
ExportSummary = dict[str, str | int]


@functools.cache  # (each memory names it: looking the version up took 2 ms, most of a PAM export's time)
def generator() -> str:
    from importlib import metadata

    try:
        version = metadata.version("camillo")
    except metadata.PackageNotFoundError:
        version = "0.0.0"
    parts = [*version.split("+")[0].split("."), "0", "0", "0"][:3]
    return "camillo/" + ".".join(p if p.isdigit() else "0" for p in parts)


# ------------------------------------------------------------------------------- canonical JSON


def _canon_numbers(obj: Any) -> Any:
    if isinstance(obj, float):
        if not math.isfinite(obj):
            raise ValueError("NaN and infinities have no JSON form")
        if obj.is_integer() and abs(obj) < 1e16:
            return int(obj)
        return obj
    if isinstance(obj, dict):
        return {k: _canon_numbers(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_canon_numbers(v) for v in obj]
    return obj


def canonical_json(obj: Any) -> str:
    """Portable Memory's Canonical JSON (spec §1.1): sorted keys, no whitespace, raw UTF-8,
    shortest round-trip numbers, whole floats as integers.  One line, no newline."""
    return json.dumps(_canon_numbers(obj), ensure_ascii=False, sort_keys=True, separators=(",", ":"),
                      allow_nan=False)


def _es_number(x: float | int) -> str:
    """ECMAScript Number::toString, as RFC 8785 requires."""
    if isinstance(x, bool):
        raise TypeError("a boolean is not a number")
    if isinstance(x, int):
        if abs(x) >= 2**53:
            x = float(x)
        else:
            return str(x)
    if not math.isfinite(x):
        raise ValueError("NaN and infinities have no JSON form")
    if x == 0:
        return "0"
    from decimal import Decimal

    sign = "-" if x < 0 else ""
    _, digs, exp = Decimal(repr(abs(x))).as_tuple()  # repr: the shortest digits that round-trip
    digits = "".join(map(str, digs)).lstrip("0")
    trailing = len(digits) - len(digits.rstrip("0"))
    digits = digits.rstrip("0")
    n = len(digits) + int(exp) + trailing  # value = 0.<digits> × 10^n
    k = len(digits)
    if k <= n <= 21:
        out = digits + "0" * (n - k)
    elif 0 < n <= 21:
        out = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        out = digits[0] + ("." + digits[1:] if k > 1 else "") + "e" + ("+" if e > 0 else "-") + str(abs(e))
    return sign + out


def jcs(obj: Any) -> bytes:
    """RFC 8785 JSON Canonicalization Scheme (what PAM's ``integrity.checksum`` hashes).  Strings are
    escaped as ``json.dumps(s, ensure_ascii=False)`` escapes them (its own function, without the call's
    set-up, which took most of a PAM export's time)."""
    out: list[str] = []

    def emit(v: Any) -> None:
        if v is None:
            out.append("null")
        elif v is True:
            out.append("true")
        elif v is False:
            out.append("false")
        elif isinstance(v, (int, float)):
            out.append(_es_number(v))
        elif isinstance(v, str):
            out.append(encode_basestring(v))
        elif isinstance(v, (list, tuple)):
            out.append("[")
            for i, item in enumerate(v):
                if i:
                    out.append(",")
                emit(item)
            out.append("]")
        elif isinstance(v, dict):
            out.append("{")
            for i, key in enumerate(sorted(v, key=lambda s: s.encode("utf-16-be"))):
                if i:
                    out.append(",")
                out.append(encode_basestring(key))
                out.append(":")
                emit(v[key])
            out.append("}")
        else:
            raise TypeError(f"{type(v).__name__} has no JSON form")

    emit(obj)
    return "".join(out).encode("utf-8")


# ------------------------------------------------------------------------------- reading the vault


def forgotten(vault: Vault) -> list[tuple[RecordView, int | None]]:
    """The forgotten records (held whole: only what is hidden), each with when it was forgotten (its own
    time when that is unknown), by id so that exports are deterministic."""
    return sorted(((v, when if when is not None else v.ts) for v, when in vault.forgotten()), key=lambda p: p[0].id)


PAGE = 1000  # records read at once by an export


def paged(vault: Vault, ids: list[bytes]) -> Iterator[RecordView]:
    """The views of these records, read :data:`PAGE` at a time."""
    for at in range(0, len(ids), PAGE):
        yield from vault.records(ids[at:at + PAGE])


def visible_notes(vault: Vault) -> Iterator[RecordView]:
    """The notes the timeline shows, a page of records at a time (in time order): what an export holds
    at once is one page, not the vault (an export of 100,000 records held them all, and every line made
    of them: 974 MiB), each page after the last record of the one before (not every record's id at once)."""
    last: bytes | None = None
    while True:
        page = vault.timeline(limit=PAGE, after=last)
        yield from (v for v in page if v.kind == Kind.NOTE)
        if len(page) < PAGE:
            return
        last = page[-1].id


def fact_values(vault: Vault) -> Iterator[tuple[RecordView, str]]:
    """The binding value of each fact whose status is ``ok`` or ``conflict`` (a PUT; a conflict's
    preferred candidate), and beside it each proposal still waiting (``pending``, never in its place),
    with that status: read a page of records at a time (an export of a vault of facts held every fact's
    history at once), by key.  Each exporter sorts what it writes."""
    pairs = vault.fact_value_ids()
    for at in range(0, len(pairs), PAGE):
        page = pairs[at:at + PAGE]
        views = {v.id: v for v in vault.records([rid for rid, _ in page])}
        for rid, status in page:
            v = views.get(rid)
            if v is not None and (status == "pending" or v.kind == Kind.PUT):
                yield v, status


class Scratch:
    """A temporary SQLite database in the export's folder (plaintext, as the export is), deleted when
    closed.  Its queries read in the order of an index: SQLite's own sort of more than its cache spills
    to files in the system's temporary folder (``/var/tmp``), outside the export's."""

    def __init__(self, out: str) -> None:
        fd, self._path = tempfile.mkstemp(dir=out, prefix=".scratch-", suffix=".db")
        os.close(fd)
        self.db = sqlite3.connect(self._path)
        self.db.execute("PRAGMA journal_mode = OFF")
        self.db.execute("PRAGMA synchronous = OFF")

    def close(self) -> None:
        self.db.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


RUN_BYTES = 8 * 1024 * 1024  # lines sorted in memory at once by SortedLines


class SortedLines:
    """Lines of a file written in sorted order (as ``sorted`` sorts the text: UTF-8 sorts as its code
    points), by an external merge sort: runs of :data:`RUN_BYTES` sorted in memory, each written to a
    temporary file in the export's folder, merged when the file is written.  An export of a million
    records holds one run, not a list of its lines, and writes nothing outside its folder (a sort in a
    temporary SQLite database spilled to ``/var/tmp``).  The runs are deleted when closed."""

    def __init__(self, out: str) -> None:
        self._out = out
        self._run: list[bytes] = []
        self._held = 0
        self._runs: list[str] = []
        self.count = 0

    def add(self, line: str) -> None:
        data = line.encode("utf-8")
        if b"\n" in data:  # (canonical JSON has none: a run holds one line a line)
            raise ValueError("a line to sort holds a newline")
        self._run.append(data)
        self._held += len(data) + 64
        self.count += 1
        if self._held >= RUN_BYTES:
            self._spill()

    def _spill(self) -> None:
        self._run.sort()
        fd, path = tempfile.mkstemp(dir=self._out, prefix=".sorting-", suffix=".run")
        self._runs.append(path)
        with os.fdopen(fd, "wb") as fh:
            fh.writelines(line + b"\n" for line in self._run)
        self._run, self._held = [], 0

    def write(self, root: str, rel: str) -> dict[str, Any] | None:
        """Write the lines, sorted, each ending in a newline, to ``rel`` under ``root``; the file's entry
        for a manifest (bytes, path, SHA-256), or None (and no file) when there is none."""
        if not self.count:
            return None
        path = os.path.join(root, *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self._run.sort()
        digest, size = hashlib.sha256(), 0
        with contextlib.ExitStack() as stack:
            runs = [stack.enter_context(open(p, "rb")) for p in self._runs]
            fh = stack.enter_context(open(path, "wb"))
            for line in heapq.merge(self._run, *((x[:-1] for x in run) for run in runs)):
                chunk = line + b"\n"
                digest.update(chunk)
                fh.write(chunk)
                size += len(chunk)
        return {"bytes": size, "path": rel, "sha256": digest.hexdigest()}

    def close(self) -> None:
        self._run = []
        for p in self._runs:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(p)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def vmem_info(v: RecordView, status: str | None = None) -> dict[str, object]:
    """The record's VMEM identity and provenance, carried in the target's extension field: the
    record's JSON (:meth:`RecordView.to_json`) without what the target format carries itself
    (time, text; the value when it is the text), with sorted sources and the fact's status."""
    j = v.to_json()
    value = j.get("value")
    info: dict[str, object] = {
        "id": j["id"],
        "writer": j["writer"],
        "writer_name": j["writer_name"],
        "compartment": j["compartment"],
        "class": j["class"],
        "effective_class": j["effective_class"],
        "type": j["type"],
    }
    if "key" in j:
        info["key"] = j["key"]
    if "role" in j:
        info["role"] = j["role"]
    if "conversation" in j:
        info["conversation"] = j["conversation"]
    if isinstance(value, dict) and isinstance(value.get("title"), str):
        info["title"] = value["title"]
    if j["kind"] == Kind.PUT.name:
        if not isinstance(value, str):
            info["value"] = value
    elif not (isinstance(value, dict) and set(value) <= NOTE_TEXT_KEYS
              and all(isinstance(x, str) for x in value.values())):
        info["value"] = value
    if "sources" in j:
        info["sources"] = sorted(j["sources"])  # hex sorts as the ids do
    if status == "conflict":
        info["conflict"] = True
    if status == "pending":
        info["pending"] = True
    return {k: x for k, x in info.items() if x is not None}


def confidence(v: RecordView) -> float:
    c = v.effective_class if v.effective_class is not None else v.claimed_class
    by_class: dict[int | None, float] = {Authority.USER: 1.0, Authority.OBSERVED: 0.9, Authority.INFERRED: 0.7}
    return by_class.get(c, 0.5)


def record_text(v: RecordView) -> str:
    return v.text or ""


# ------------------------------------------------------------------------------- driver


def prepare_out(out: str) -> str:
    """``out`` as a new or empty folder (an export never overwrites files), outside any vault folder
    (an export is plaintext; a vault folder travels to the sync service)."""
    vault = vault_folder_holding(out)
    if vault is not None:
        raise UsageError(f"{out} is inside the vault folder {vault}; an export is plaintext: write it outside "
                         "any vault folder")
    if os.path.exists(out):
        if not os.path.isdir(out):
            raise UsageError(f"{out} exists and is not a folder; choose a new folder for the export")
        if os.listdir(out):
            raise UsageError(f"{out} is not empty; choose a new or empty folder for the export")
    else:
        os.makedirs(out)
    return out


def write_file(root: str, rel: str, data: bytes) -> None:
    path = os.path.join(root, *rel.split("/"))
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)


def run_export(vault: Vault, kind: str, out: str) -> ExportSummary:
    """Export ``vault`` to the folder ``out``; returns counts of what was written."""
    import importlib

    module = KINDS.get(kind)
    if module is None:
        raise UsageError(f"unknown export format '{kind}'; use one of {', '.join(KINDS)}")
    writer: Callable[[Vault, str], ExportSummary] = importlib.import_module(module).export
    try:
        return writer(vault, out)
    except OSError as exc:  # (the vault's own reads raise its errors: this is the export's folder or its disk)
        if exc.errno in PATH_ERRNOS:  # the place chosen: say where to write instead
            raise UsageError(f"cannot write the export to {out} ({exc.strerror}); choose a new folder you can "
                             "write to") from None
        raise StorageError(f"cannot write the export to {out}: {exc.strerror}; free some space or choose "
                           "another place, and delete what was written there") from None
