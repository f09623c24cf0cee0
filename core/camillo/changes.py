"""The ``Changes`` value every mutation returns, so views refresh only what changed.

Like Anki's ``OpChanges``: the desktop routes one of these to each view after an operation and a
view reloads only when something it shows is named.  A ``Changes`` names exactly what moved:

* ``records`` and ``batches``: memory records (messages, facts, notes, decisions) written or newly
  arrived from other devices, and the batches that carry them (control records too: they speak
  through the flags below); ``compartments`` names where they went; ``written`` is the part of
  ``records`` this operation wrote itself, in order (an append's new record ids);
* ``keys``: the facts (compartment name, key) whose value, status or history moved;
* ``devices``, ``grants``, ``credentials`` and ``policy``: the roster changed in that respect
  (a device enrolled, revoked, renamed, acknowledged or rotated its key; a grant created or revoked;
  a passphrase, recovery phrase, trusted person's key or device key file added or replaced; the
  erasure policy set); ``compartment_list``: a data compartment was added (compartment pickers);
* ``files_written`` and ``files_removed``: key files and re-encrypted segments written or deleted
  (not counting the segments that carry the batches above);
* ``reloaded``: everything was read again under new keys (another device rolled the master
  secret, or an erasure re-encrypted what this session had read): every view reloads.

Any thread may create or read one.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Changes:
    records: tuple[bytes, ...] = ()
    batches: tuple[bytes, ...] = ()
    written: tuple[bytes, ...] = ()
    keys: frozenset[tuple[str, str]] = field(default_factory=frozenset)  # (compartment name, key)
    compartments: frozenset[str] = field(default_factory=frozenset)
    devices: bool = False
    grants: bool = False
    credentials: bool = False
    policy: bool = False
    compartment_list: bool = False
    files_written: int = 0
    files_removed: int = 0
    reloaded: bool = False
    note: str = ""

    def __or__(self, other: Changes) -> Changes:
        have_records, have_batches = set(self.records), set(self.batches)
        return Changes(
            records=self.records + tuple(r for r in other.records if r not in have_records),
            batches=self.batches + tuple(b for b in other.batches if b not in have_batches),
            written=self.written + other.written,
            keys=self.keys | other.keys,
            compartments=self.compartments | other.compartments,
            devices=self.devices or other.devices,
            grants=self.grants or other.grants,
            credentials=self.credentials or other.credentials,
            policy=self.policy or other.policy,
            compartment_list=self.compartment_list or other.compartment_list,
            files_written=self.files_written + other.files_written,
            files_removed=self.files_removed + other.files_removed,
            reloaded=self.reloaded or other.reloaded,
            note="; ".join(n for n in (self.note, other.note) if n),
        )

    @property
    def timeline(self) -> bool:
        """Records came or went: the timeline, search results and conversations may differ."""
        return bool(self.records) or self.reloaded

    @property
    def facts(self) -> bool:
        """A fact's value or status moved: facts, conflicts and the inbox may differ."""
        return bool(self.keys) or self.reloaded

    @property
    def roster(self) -> bool:
        """Who holds keys changed: devices, grants, credentials or the policy."""
        return (self.devices or self.grants or self.credentials or self.policy or self.compartment_list
                or self.reloaded)

    @property
    def empty(self) -> bool:
        return not (self.records or self.batches or self.keys or self.roster or self.files_written
                    or self.files_removed)
