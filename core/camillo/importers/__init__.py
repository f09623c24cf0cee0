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

if TYPE_CHECKING:
    from ..vault import Vault


class ImportFailed(VaultError):
    """The source cannot be imported at all (nothing was written)."""

    exit_code = 4


@dataclass
class ImportUnit:
    """Records that are imported together or not at all (a conversation, a set of memories).

    ``notes`` are what the reader left out of this unit and why (regenerated branches, hidden
    turns, tombstoned or retracted memories); ``skipped`` counts the items they cover.  A unit may
    carry notes and no records.
    """

    label: str
    records: list[NewRecord]
    compartment: str | None = None  # None: the compartment chosen for the import
    notes: list[str] = field(default_factory=list)
    skipped: int = 0


@dataclass
class ImportReport:
    kind: str
    source: str
    units: int = 0
    imported: int = 0
    skipped: int = 0
    proposals: int = 0
    reasons: list[str] = field(default_factory=list)
    changes: Changes = field(default_factory=Changes)  # what the imported records moved

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "changes"}

    def lines(self) -> list[str]:
        out = [f"Imported {self.imported} record(s) from {self.units} unit(s) of {self.source} ({self.kind}); "
               f"{self.skipped} skipped."]
        if self.proposals:
            out.append(f"{self.proposals} remembered fact(s), preference(s) or instruction(s) wait in your inbox: "
                       "they bind only once you confirm them.")
        out += [f"  skipped: {r}" for r in self.reasons[:50]]
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
                report.changes |= vault.append(fresh, compartment=unit.compartment or compartment)
            except VaultError as exc:
                existing -= {(r.meta or {}).get("import") for r in fresh}
                report.skipped += len(fresh)
                report.reasons.append(f"{unit.label}: not imported ({exc})")
                continue
            report.imported += len(fresh)
            report.proposals += sum(1 for r in fresh if _proposal(r))
        if progress is not None:
            progress(n + 1, len(units))
    return report
