"""The ``Changes`` value every mutation returns, so views refresh only what changed.

Like Anki's ``OpChanges``: the desktop routes one of these to each view after an operation and a
view reloads only when a field it shows is set.  Any thread may create or read one.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Changes:
    records: tuple[bytes, ...] = ()
    batches: tuple[bytes, ...] = ()
    keys: frozenset[tuple[str, str]] = field(default_factory=frozenset)  # (compartment name, key)
    compartments: frozenset[str] = field(default_factory=frozenset)
    timeline: bool = False
    facts: bool = False
    roster: bool = False  # devices, grants, epochs, policy
    credentials: bool = False  # slots (passphrase, recovery, devices)
    files_removed: int = 0
    note: str = ""

    def __or__(self, other: Changes) -> Changes:
        return Changes(
            self.records + other.records,
            self.batches + other.batches,
            self.keys | other.keys,
            self.compartments | other.compartments,
            self.timeline or other.timeline,
            self.facts or other.facts,
            self.roster or other.roster,
            self.credentials or other.credentials,
            self.files_removed + other.files_removed,
            "; ".join(n for n in (self.note, other.note) if n),
        )

    @property
    def empty(self) -> bool:
        return not (self.records or self.batches or self.roster or self.credentials or self.files_removed)
