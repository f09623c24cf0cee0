"""Data compartments after creation: listing them, and adding one (spec §14.5, §14.8, §15.1).

Adding a compartment writes, in this order:

1. an envelope wrapping the new compartment's first epoch secret to the owner KEM key;
2. into the control compartment and every existing data compartment: the COMPARTMENT record (its
   id and name), and into control its first EPOCH record (reason ``"created"``);
3. into the new compartment, as its first batch: the same COMPARTMENT and EPOCH records, with a copy
   of every control record a reader of the compartment alone needs to compute the roster (the
   genesis, the certificates and credential anchors, the revocations, the policies, the device
   names), so that a read grant of the new compartment can check what it reads (spec §14.8).

A crash between 2 and 3 leaves a compartment without its own batch: owners read and write it, and
the copy of the roster is written before a grant first covers it (:func:`mirror_roster`).

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import unicodedata

from .. import ids, timeline
from ..changes import Changes
from ..errors import UsageError
from ..records import Kind, Record, encode_record
from ..session import Session
from ..session.writer import write_batches
from ..values import CompartmentInfo
from .rekey import Rekey, apply, new_epoch

MAX_NAME_CHARS = 64
# what every data compartment carries (spec §14.8), copied into a new one
ROSTER_KINDS = (Kind.GENESIS, Kind.DEVICE_CERT, Kind.CRED_ANCHOR, Kind.REVOKE, Kind.POLICY, Kind.DEVICE_NAME,
                Kind.COMPARTMENT)


def check_compartment_name(session: Session, name: str) -> str:
    """A new compartment's name: non-empty, not ``control``, not one the vault has (in any case), at
    most 64 characters, without control characters or commas (UsageError naming the problem)."""
    text = unicodedata.normalize("NFC", name.strip())
    if not text:
        raise UsageError("a compartment needs a name, such as 'travel'")
    if text.lower() == "control":
        raise UsageError("'control' is the name of the vault's own compartment; choose another name")
    existing = {n.lower(): n for n in session.roster.compartments.values()}
    if text.lower() in existing:
        raise UsageError(f"this vault already has a compartment '{existing[text.lower()]}'; choose another name")
    if len(text) > MAX_NAME_CHARS:
        raise UsageError(f"a compartment name has at most {MAX_NAME_CHARS} characters")
    if "," in text or any(unicodedata.category(c).startswith("C") for c in text):
        raise UsageError("a compartment name cannot hold commas or control characters")
    return text


def add_compartment(session: Session, name: str) -> Changes:
    """Create a data compartment: its COMPARTMENT record, its first epoch and envelope, and its first
    batch carrying a copy of the roster (see the module docstring)."""
    actor = session.require_owner("adding a compartment")
    text = check_compartment_name(session, name)
    cid = ids.new_random_id()
    record = encode_record(Kind.COMPARTMENT, actor.writer_id, body={0: cid, 1: text}, signers=[actor.signer])
    rekey = Rekey(session)
    new_epoch(session, rekey, cid, "created", exclude=set())
    own = rekey.records.pop(cid)  # sealed under the new epoch, once the roster knows it (below)
    everywhere = session.all_compartments()
    rekey.add_records(everywhere, record)
    apply(session, rekey)
    if session.roster.compartment_id(text) != cid:
        raise AssertionError("the new compartment is not in the roster")
    mirror_roster(session, cid, [record, *own])
    return session.reader.changes(files_written=len(rekey.files), note=f"compartment {text} added")


def has_roster(session: Session, cid: bytes) -> bool:
    """Does compartment ``cid`` carry its own copy of the genesis (its first batch was written)?"""
    return any(v.header.compartment_id == cid and any(r is not None and r.kind == Kind.GENESIS for r in v.records)
               for v in session.batches.values())


def mirror_roster(session: Session, cid: bytes, extra: list[bytes] | None = None) -> None:
    """Write into ``cid`` a copy of every control record its readers need for the roster (unless it
    has one already), with ``extra`` records."""
    if has_roster(session, cid) and not extra:
        return
    r = session.roster
    applied = ({p.record_id for p in r.principals.values()} | {rev.record_id for rev in r.revocations.values()}
               | set(r.policies) | set(r.renames))
    copies: dict[bytes, Record] = {}
    for v in sorted(session.batches.values(), key=lambda v: v.id):
        for rec in v.records:
            if rec is not None and rec.kind in ROSTER_KINDS and rec.id not in copies and (
                    rec.kind in (Kind.GENESIS, Kind.COMPARTMENT) or rec.id in applied):
                copies[rec.id] = rec
    ordered = sorted(copies.values(), key=lambda rec: rec.kind != Kind.GENESIS)  # the genesis first
    raws = [rec.raw for rec in ordered] + [raw for raw in extra or [] if ids.record_id(raw) not in copies]
    write_batches(session, {cid: raws})


def list_compartments(session: Session) -> list[CompartmentInfo]:
    """The data compartments, by name: id, records, the agents granted them, when added."""
    r, state = session.roster, session.materialized
    agents: dict[bytes, list[str]] = {}
    for p in r.grants():
        if p.grant is not None and p.writer_id not in r.revocations:
            for c in p.grant.scopes:
                agents.setdefault(c, []).append(p.grant.agent)
    return [CompartmentInfo(name, cid, timeline.count(state, compartments=[cid]), tuple(sorted(agents.get(cid, []))),
                            r.compartments_added.get(cid))
            for name, cid in session.compartments.items()]
