"""Writing memory: appending records, and acting on them: confirm and reject inferences, resolve
conflicts, forget (spec §19.4).

Each decision becomes the records that express it, in the compartment of the records it concerns,
signed and written as batches.  Nothing here edits a record:
decisions are new, signed records layered over the history.

* **confirm**: a CONFIRM naming the record, inner-signed by an owner device.  It raises the
  record's *effective* class to ``user`` without rewriting it, so the proposal becomes the user's
  word.  Over a different binding value it needs ``replace`` (the user must know what is replaced);
  when the proposal was written without knowledge of that value, the same batch also writes the
  value at class ``user`` over both, so the confirmed value is the fact's value, not one side of a
  conflict.
* **reject**: a DEL with ``meta {"reject": true}`` whose ``pred`` names the proposal: it withdraws the
  proposal (hidden) and leaves the binding value as it was (spec §19.3).
* **resolve**: one PUT whose ``pred`` names every candidate of the conflict, with the chosen value
  (or a new one), at class ``user``: the user decided.
* **forget**: a DEL of a key (or, for a keyless record such as a message, a DEL without key whose
  ``pred`` names it).  This hides; erasure (which destroys) is a separate operation.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from ..changes import Changes
from ..errors import AccessDenied, UsageError
from ..log import precedes
from ..primitives import SigningKey
from ..records import Authority, Kind, encode_record
from ..recordviews import FactView, RecordView
from ..session import Session
from ..session.unlock import catch_up_generation
from ..session.writer import write_batches
from ..state import State
from ..values import NewRecord, json_to_cbor
from .rekey import scheduled_epochs


def _need(state: State, rid: bytes) -> RecordView:
    v = state.record(rid)
    if v is None or not v.valid:
        raise UsageError(f"no record {rid.hex()[:12]} in this vault")
    return v


def binding_values(fact: FactView | None) -> list[RecordView]:
    """The user's word on a key: its binding value, the sides of its conflict, or the DEL that deleted it."""
    if fact is None or fact.current is None:
        return []
    return list(fact.candidates) if fact.status == "conflict" else [fact.current]


def _shown(v: RecordView) -> str:
    return "deleted" if v.kind == Kind.DEL else repr(v.text if isinstance(v.value, str) else v.value)


def _confirm_one(session: Session, v: RecordView, author: bytes, signer: SigningKey, replace: bool) -> list[bytes]:
    confirm = encode_record(Kind.CONFIRM, author, target=v.id, signers=[signer])
    if v.kind != Kind.PUT or v.key is None:
        return [confirm]
    fact = session.materialized.fact(v.compartment_id, v.key)
    if fact is None or v.id not in {p.id for p in fact.proposed}:
        raise UsageError(f"record {v.id.hex()[:12]} is no longer a proposal for {v.key}; nothing to confirm")
    word = binding_values(fact)
    replaced = [b for b in word if b.kind == Kind.DEL or b.value != v.value]
    if replaced and not replace:
        raise UsageError(f"{v.key} is {' or '.join(_shown(b) for b in replaced)} (your word); the proposal "
                         f"{v.id.hex()[:12]} says {_shown(v)}. Confirm with --replace to make it the value, or "
                         "reject the proposal to keep yours; nothing was confirmed")
    if all(_seen(session, b, v) for b in word):
        return [confirm]  # confirmed, the proposal supersedes everything it replaces
    settle = encode_record(Kind.PUT, author, key=v.key, value=v.value, authority=Authority.USER, type=v.type,
                           pred=sorted([b.id for b in word] + [v.id]), meta={"confirms": v.id.hex()})
    return [confirm, settle]


def _seen(session: Session, earlier: RecordView, later: RecordView) -> bool:
    """Whether ``later``'s writer had seen ``earlier`` (so ``later`` supersedes it, spec §19.3)."""
    if earlier.id in later.pred:
        return True
    a, b = session.batches.get(earlier.batch_id), session.batches.get(later.batch_id)
    return a is not None and b is not None and earlier.batch_id != later.batch_id and precedes(a, b)


def confirm_records(session: Session, ids: Sequence[bytes], author: bytes, signer: SigningKey,
                    replace: bool = False) -> dict[bytes, list[bytes]]:
    out: dict[bytes, list[bytes]] = defaultdict(list)
    for rid in ids:
        v = _need(session.materialized, rid)
        if v.kind not in (Kind.PUT, Kind.NOTE):
            raise UsageError(f"record {rid.hex()[:12]} is a {v.kind_name}; only facts and notes can be confirmed")
        if v.effective_class == Authority.USER:
            raise UsageError(f"record {rid.hex()[:12]} already has user authority; nothing to confirm")
        out[v.compartment_id] += _confirm_one(session, v, author, signer, replace)
    return out


def reject_records(state: State, ids: Sequence[bytes], author: bytes) -> dict[bytes, list[bytes]]:
    out: dict[bytes, list[bytes]] = defaultdict(list)
    for rid in ids:
        v = _need(state, rid)
        if v.kind == Kind.NOTE:
            out[v.compartment_id].append(encode_record(Kind.DEL, author, pred=[rid], meta={"reject": True}))
            continue
        if v.kind != Kind.PUT or v.key is None:
            raise UsageError(f"record {rid.hex()[:12]} is not a proposal that can be rejected")
        fact = state.fact(v.compartment_id, v.key)
        if fact is None or rid not in {p.id for p in fact.proposed}:
            what = "the user's word" if v.effective_class == Authority.USER else "no longer a proposal"
            raise UsageError(f"record {rid.hex()[:12]} is {what} for {v.key}; nothing to reject "
                             "(forget the key to hide a value you set)")
        out[v.compartment_id].append(encode_record(Kind.DEL, author, key=v.key, pred=[rid], meta={"reject": True}))
    return out


def resolve_conflict(fact: FactView, author: bytes, *, pick: bytes | None = None, value: Any = None,
                     value_given: bool = False) -> bytes:
    if fact.status != "conflict":
        raise UsageError(f"{fact.key} in {fact.compartment} is not in conflict (status: {fact.status})")
    candidates = [c.id for c in fact.candidates]
    if pick is not None:
        chosen = next((c for c in fact.candidates if c.id == pick), None)
        if chosen is None:
            raise UsageError(f"record {pick.hex()[:12]} is not one of the candidates of {fact.key}: "
                             f"{', '.join(c.hex()[:12] for c in candidates)}")
        value, typ = chosen.value, chosen.type
        meta = {"resolved": "picked", "picked": pick.hex()}
    elif value_given:
        typ = fact.current.type if fact.current else "fact"
        meta = {"resolved": "new value"}
    else:
        raise UsageError("give --pick RECORD_ID or --value JSON")
    return encode_record(Kind.PUT, author, key=fact.key, value=value, authority=Authority.USER, pred=candidates,
                         type=typ or "fact", meta=meta)


def forget(state: State, author: bytes, *, compartment_id: bytes | None = None, key: str | None = None,
           record: bytes | None = None) -> tuple[bytes, bytes]:
    """Returns (compartment id, DEL record bytes)."""
    if record is not None:
        v = _need(state, record)
        if v.key is not None:
            fact = state.fact(v.compartment_id, v.key)
            live = [r.id for r in binding_values(fact) + list(fact.proposed if fact else ()) if r.kind == Kind.PUT]
            if record not in live:
                raise UsageError(f"record {record.hex()[:12]} is an earlier value of {v.key}, not its current one; "
                                 "forget the key, or erase the record to destroy it")
            return v.compartment_id, encode_record(Kind.DEL, author, key=v.key, pred=live)
        if v.kind != Kind.NOTE:
            raise UsageError(f"record {record.hex()[:12]} is a {v.kind_name}; it cannot be forgotten")
        return v.compartment_id, encode_record(Kind.DEL, author, pred=[record])
    if key is None or compartment_id is None:
        raise UsageError("forget needs a key or a record id")
    fact = state.fact(compartment_id, key)
    pred = [r.id for r in binding_values(fact) + list(fact.proposed if fact else ()) if r.kind == Kind.PUT]
    if not pred:
        raise UsageError(f"there is no current value of {key} to forget")
    return compartment_id, encode_record(Kind.DEL, author, key=key, pred=sorted(pred))


# ---------------------------------------------------------------------------------- the session side


def find_fact(session: Session, key: str, compartment: str | None = None) -> FactView:
    """The fact ``key`` (in ``compartment``, or in the only compartment that has it)."""
    cids = [session.compartment_id(compartment)] if compartment else list(session.roster.compartments)
    found = [f for f in (session.materialized.fact(c, key) for c in cids) if f is not None]
    if not found:
        raise UsageError(f"no fact '{key}' in vault {session.vault_id.hex()[:12]}")
    if len(found) > 1:
        raise UsageError(f"'{key}' exists in several compartments ({', '.join(f.compartment for f in found)}); "
                         "name one with --compartment")
    return found[0]


def authority_for(session: Session, item: NewRecord) -> Authority:
    """What a new record claims: as given, else by role; an agent's defaults are one step lower
    (what the user said becomes ``observed``, the rest ``inferred`` or ``external``)."""
    if item.authority is not None or session.grant is None:
        return item.default_authority()
    if item.role in ("tool", "system", "web", "function"):
        return Authority.EXTERNAL
    if item.role == "user":
        return min(Authority.OBSERVED, session.grant.max_class)
    return min(Authority.INFERRED, session.grant.max_class)


def live_ids(session: Session, cid: bytes, key: str) -> list[bytes]:
    """The records a new value of ``key`` supersedes: the user's word (the value, every side of a
    conflict, or the DEL it resurrects from) and the proposals beside it."""
    f = session.materialized.fact(cid, key)
    return sorted(r.id for r in binding_values(f) + list(f.proposed if f else ()))


def encode_new(session: Session, item: NewRecord, cid: bytes, author: bytes) -> bytes:
    """A NewRecord as the signed-later record bytes (a keyed PUT or a NOTE), checked against the grant."""
    authority = authority_for(session, item)
    session.check_grant(cid, write=True, authority=authority, key=item.key)
    return item.encode(author, authority, lambda key: live_ids(session, cid, key))


def append(session: Session, items: Sequence[NewRecord], compartment: str) -> Changes:
    """Append records as one batch (or as many as a bulk import needs); durable on return."""
    if not items:
        raise UsageError("nothing to add")
    catch_up_generation(session)  # another device rolled the keys: write under the new ones
    actor = session.require_writer()
    cid = session.compartment_id(compartment)
    raws = [encode_new(session, item, cid, actor.writer_id) for item in items]
    scheduled_epochs(session)
    written = write_batches(session, {cid: raws}, quick=True, encoded_here=True)  # (encode_new's: encode_record's)
    return session.reader.changes(written=tuple(r for b in written[cid] for r in b.header.records))


def _write(session: Session, per: dict[bytes, list[bytes]], note: str) -> Changes:
    written = write_batches(session, dict(per))
    return session.reader.changes(written=tuple(r for bs in written.values() for b in bs for r in b.header.records),
                                  note=note)


def confirm(session: Session, record_ids: Sequence[bytes], replace: bool = False) -> Changes:
    actor = session.require_owner("confirming an inference")
    return _write(session, confirm_records(session, record_ids, actor.writer_id, actor.signer, replace),
                  f"confirmed {len(record_ids)}")


def reject(session: Session, record_ids: Sequence[bytes]) -> Changes:
    actor = session.require_owner("rejecting an inference")
    return _write(session, reject_records(session.materialized, record_ids, actor.writer_id),
                  f"rejected {len(record_ids)}")


def resolve(session: Session, key: str, *, compartment: str | None = None, pick: bytes | None = None,
            value: Any = None, value_given: bool = False) -> Changes:
    actor = session.require_owner("resolving a conflict")
    fact = find_fact(session, key, compartment)
    raw = resolve_conflict(fact, actor.writer_id, pick=pick, value=json_to_cbor(value), value_given=value_given)
    return _write(session, {fact.compartment_id: [raw]}, f"resolved {key}")


def forget_memory(session: Session, *, key: str | None = None, compartment: str | None = None,
                  record: bytes | None = None) -> Changes:
    """Hide a fact (DEL of its key) or a message.  It stays in the history; erase it to destroy it."""
    actor = session.require_writer()
    cid = None
    if key is not None:
        fact = find_fact(session, key, compartment)
        cid = fact.compartment_id
        if session.grant is not None and any(r.kind == Kind.PUT for r in binding_values(fact)):
            raise AccessDenied(f"{key} holds the user's word: the grant of agent {session.grant.agent} can take back "
                               "proposals, not forget what the user set (rule: only the owner's devices forget it)")
    cid, raw = forget(session.materialized, actor.writer_id, compartment_id=cid, key=key, record=record)
    return _write(session, {cid: [raw]}, "forgotten")
