"""Importers: bring what people already have into a vault (ChatGPT, Claude, VaultMem, Portable
Memory, PAM), idempotently and with provenance.

Every importer turns its source into :class:`ImportUnit` values (one conversation, or one batch of
memories): the records to append, in VMEM terms (:class:`camillo.NewRecord`).  :func:`run_import`
then writes each unit as one append (so a unit is imported whole or not at all), skipping records
whose ``meta["import"]`` key the vault already holds: importing twice adds nothing.

Provenance travels in each record's ``meta``: ``import`` (``<kind>:<original id>``, the
idempotency key), ``source`` (the source file's name), ``original_id`` and ``original_ts``.
Authority on import: what the user wrote is ``user``; what an assistant wrote is ``inferred``; tool
and web content is ``external``; memories an assistant kept about the user become proposed facts,
preferences and instructions below ``user``, so they wait in the inbox for confirmation.

Nothing is left out silently: each unit says what it left out and why (``notes``), which files the
export carries for it (images, audio, video, uploads: counted by kind, referenced in the message's
``meta["files"]`` and stored, encrypted, as attachments of that message when the export holds them:
:func:`_store_files`), which of those files the export does not hold, which branches were kept as alternates, and which blocks, content types or files
the importer does not know (counted by name).  :class:`ImportReport` adds them up and says what
came in, per record type.

Hostile input (wrong shapes, huge strings, deep nesting, ZIP bombs, path-traversal names) ends in
:class:`ImportFailed` naming the file and the problem, or in a skipped unit with its reason; never a
traceback, and nothing half-imported.  :mod:`camillo.importers.safety` holds the shared limits.

Runs on the thread that owns the vault.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..changes import Changes
from ..errors import VaultError
from ..values import KEYED_TYPES, awaits_confirmation
from ..vault import NewRecord
from .safety import ImportFailed as ImportFailed
from .safety import open_source

if TYPE_CHECKING:
    from ..vault import Vault


@dataclass
class ImportUnit:
    """Records that are imported together or not at all (a conversation, a set of memories).

    ``notes`` are what the reader left out of this unit and why (regenerated branches, hidden
    turns, tombstoned or retracted memories); ``skipped`` counts the items they cover.  ``files``
    counts the files the unit refers to, by kind (``image``, ``audio``, ``video``, ``file``): they
    are referenced in their message's meta (and stored after the append); ``files_missing`` of them are not in the
    export, ``files_unhashed`` were too large to fingerprint.  ``alternates`` counts records kept
    from branches other than the current one; ``unknown`` counts, by name, what the reader does
    not know (a block type, a content type, a file).  A unit may carry notes and no records.
    """

    label: str
    records: list[NewRecord]
    compartment: str | None = None  # None: the compartment chosen for the import
    notes: list[str] = field(default_factory=list)
    skipped: int = 0
    files: dict[str, int] = field(default_factory=dict)
    files_missing: int = 0
    files_unhashed: int = 0
    alternates: int = 0
    unknown: dict[str, int] = field(default_factory=dict)


FILE_KINDS = {"image": ("image", "images"), "audio": ("audio file", "audio files"), "video": ("video", "videos"),
              "file": ("file", "files")}


def _plural(n: int, kind: str) -> str:
    one, many = FILE_KINDS.get(kind, (kind, kind + "s"))
    return f"{n} {one if n == 1 else many}"


def _add(into: dict[str, int], counts: dict[str, int]) -> None:
    for k, v in counts.items():
        into[k] = into.get(k, 0) + v


@dataclass
class ImportReport:
    kind: str
    source: str
    units: int = 0
    imported: int = 0
    skipped: int = 0
    proposals: int = 0
    reasons: list[str] = field(default_factory=list)
    by_type: dict[str, int] = field(default_factory=dict)  # what came in, per record type
    files: dict[str, int] = field(default_factory=dict)  # files referenced and left out, per kind
    files_stored: dict[str, int] = field(default_factory=dict)  # files stored as attachments, per kind
    files_missing: int = 0
    files_unhashed: int = 0
    alternates: int = 0
    unknown: dict[str, int] = field(default_factory=dict)
    changes: Changes = field(default_factory=Changes)  # what the imported records moved

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "changes"}

    def lines(self) -> list[str]:
        out = [f"Imported {self.imported} record(s) from {self.units} unit(s) of {self.source} ({self.kind}); "
               f"{self.skipped} skipped."]
        if self.by_type:
            out.append("  came in, by record type: " + ", ".join(f"{t} {n}" for t, n in sorted(self.by_type.items())))
        if self.alternates:
            out.append(f"  {self.alternates} message(s) of earlier or abandoned branches kept as alternates, "
                       "outside the conversations' threads")
        if self.files_stored:
            out.append("  stored, encrypted, as attachments of their messages: " + ", ".join(
                _plural(self.files_stored[k], k) for k in sorted(self.files_stored)))
        if self.files:
            kinds = ", ".join(_plural(self.files[k], k) for k in sorted(self.files, key=lambda k: (-self.files[k], k)))
            out.append(f"  left out: {kinds} (not in the export, or not readable; each message keeps a reference "
                       "to its files)")
        if self.files_missing:
            out.append(f"  {self.files_missing} file(s) a message refers to are not in the export")
        if self.files_unhashed:
            out.append(f"  {self.files_unhashed} file(s) too large to fingerprint: referenced by name and size only")
        if self.unknown:
            names = ", ".join(f"{n} {what}" for what, n in sorted(self.unknown.items()))
            out.append(f"  not recognised, counted and left out: {names}")
        if self.proposals:
            out.append(f"{self.proposals} remembered fact(s), preference(s) or instruction(s) wait in your inbox: "
                       "they bind only once you confirm them.")
        if self.reasons:
            out.append("What was left out or changed, and why:")
        out += [f"  {r}" for r in self.reasons[:50]]
        if len(self.reasons) > 50:
            out.append(f"  ... and {len(self.reasons) - 50} more")
        return out


Reader = Callable[..., Iterator[ImportUnit]]
KINDS: dict[str, str] = {
    "chatgpt": "camillo.importers.chatgpt",
    "claude": "camillo.importers.claude",
    "vaultmem": "camillo.importers.vaultmem",
    "portable-memory": "camillo.importers.portable_memory",
    "pam": "camillo.importers.pam",
}


def reader_for(kind: str) -> Reader:
    import importlib

    from ..errors import UsageError

    module = KINDS.get(kind)
    if module is None:
        raise UsageError(f"unknown import kind '{kind}'; use one of {', '.join(KINDS)}")
    read: Reader = importlib.import_module(module).read
    return read


def _proposal(r: NewRecord) -> bool:
    """Whether the record will wait in the inbox: a keyed value (fact, preference, instruction) that
    :func:`~camillo.records.awaits_confirmation`, with the authority it will claim."""
    return r.type in KEYED_TYPES and awaits_confirmation(r.default_authority())


def _store_files(vault: Vault, source: str, written: list[tuple[NewRecord, bytes]], compartment: str,
                 report: ImportReport) -> None:
    """Store the files the export carries as attachments of the messages that refer to them
    (``meta["files"]``), streamed from the export (never read whole); each one stored is no longer
    counted as left out.  A file that cannot be stored is said in the report; the message stays."""
    import json

    todo = []
    for record, rid in written:
        try:
            refs = json.loads((record.meta or {}).get("files") or "[]")
        except ValueError:
            continue
        # a file too large to fingerprint (no sha256) is referenced by name and size only, never stored
        todo += [(rid, ref) for ref in refs if isinstance(ref, dict) and isinstance(ref.get("member"), str)
                 and isinstance(ref.get("sha256"), str)]
    if not todo:
        return
    with open_source(source) as src:
        for rid, ref in todo:
            kind, name = str(ref.get("kind", "file")), str(ref.get("name") or ref["member"].rsplit("/", 1)[-1])
            try:
                report.changes |= vault.attach(src.stream(ref["member"]), compartment=compartment, name=name[:255],
                                               media_type=ref.get("media_type"), of=rid)
            except (VaultError, ImportFailed) as exc:
                report.reasons.append(f"{name}: not stored ({exc})")
                continue
            report.files_stored[kind] = report.files_stored.get(kind, 0) + 1
            if report.files.get(kind):
                report.files[kind] -= 1
                if not report.files[kind]:
                    del report.files[kind]


def run_import(vault: Vault, kind: str, source: str, *, compartment: str = "personal",
               passphrase: str | None = None, progress: Callable[[int, int], None] | None = None) -> ImportReport:
    """Import ``source`` into ``vault``; returns what was imported and what was skipped, and why."""
    import os

    reader = reader_for(kind)
    report = ImportReport(kind, os.path.basename(source.rstrip("/")) or source)
    vault.compartment_id(compartment)  # fails early, naming the compartments, if it does not exist
    existing = vault.imported_keys(f"{kind}:")
    kwargs: dict[str, Any] = {"passphrase": passphrase} if passphrase is not None else {}
    units = list(reader(source, **kwargs))  # the whole source is read and checked before any write
    for n, unit in enumerate(units):
        report.skipped += unit.skipped
        report.reasons += [f"{unit.label}: {note}" for note in unit.notes]
        _add(report.files, unit.files)
        _add(report.unknown, unit.unknown)
        report.files_missing += unit.files_missing
        report.files_unhashed += unit.files_unhashed
        report.alternates += unit.alternates
        if not unit.records:
            continue
        report.units += 1
        fresh = []
        for r in unit.records:
            key = (r.meta or {}).get("import")
            if key not in existing:
                fresh.append(r)
                if key is not None:
                    existing.add(key)  # the same item twice in one source is imported once
        already = len(unit.records) - len(fresh)
        if already:
            report.skipped += already
            report.reasons.append(f"{unit.label}: {already} record(s) already imported")
        if fresh:
            try:
                changes = vault.append(fresh, compartment=unit.compartment or compartment)
                report.changes |= changes
            except VaultError as exc:
                existing -= {(r.meta or {}).get("import") for r in fresh}
                report.skipped += len(fresh)
                report.reasons.append(f"{unit.label}: not imported ({exc})")
                continue
            report.imported += len(fresh)
            _store_files(vault, source, list(zip(fresh, changes.written)), unit.compartment or compartment, report)
            report.proposals += sum(1 for r in fresh if _proposal(r))
            _add(report.by_type, {t: sum(1 for r in fresh if r.type == t) for t in {r.type for r in fresh}})
        if progress is not None:
            progress(n + 1, len(units))
    return report
