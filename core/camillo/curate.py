"""Acting on memory: confirm and reject inferences, resolve conflicts, forget (spec §19.4).

Each function turns a user decision into the records that express it, in the compartment of the
records it concerns; the facade signs and writes them as batches.  Nothing here edits a record:
decisions are new, signed records layered over the history.

* **confirm**: a CONFIRM naming the record, inner-signed by an owner device.  It raises the
  record's *effective* class to ``user`` without rewriting it.
* **reject**: a DEL whose ``pred`` names the proposal, which hides it.  When the proposal had
  superseded an earlier value, the same batch re-asserts that value with a PUT after the DEL
  ("a later PUT resurrects"), so rejecting a proposal never loses what was there before.
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

from .errors import UsageError
from .primitives import SigningKey
from .records import Authority, Kind, encode_record
from .state import FactView, RecordView, State


def _need(state: State, rid: bytes) -> RecordView:
    v = state.record(rid)
    if v is None or not v.valid:
        raise UsageError(f"no record {rid.hex()[:12]} in this vault")
    return v


def confirm_records(state: State, ids: Sequence[bytes], author: bytes, signer: SigningKey) -> dict[bytes, list[bytes]]:
    out: dict[bytes, list[bytes]] = defaultdict(list)
    for rid in ids:
        v = _need(state, rid)
        if v.kind not in (Kind.PUT, Kind.NOTE):
            raise UsageError(f"record {rid.hex()[:12]} is a {v.kind_name}; only facts and notes can be confirmed")
        if v.effective_class == Authority.USER:
            raise UsageError(f"record {rid.hex()[:12]} already has user authority; nothing to confirm")
        out[v.compartment_id].append(encode_record(Kind.CONFIRM, author, target=rid, signers=[signer]))
    return out


def _previous_value(state: State, v: RecordView) -> RecordView | None:
    """The value a proposal superseded, if any (so rejecting it can restore that value)."""
    for pid in v.pred:
        p = state.record(pid)
        if p is not None and p.valid and p.kind == Kind.PUT:
            return p
    return None


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
        if fact is None or rid not in {c.id for c in (fact.candidates or ((fact.current,) if fact.current else ()))}:
            raise UsageError(f"record {rid.hex()[:12]} is no longer the current value of {v.key}; nothing to reject")
        if fact.status == "conflict":
            raise UsageError(f"record {rid.hex()[:12]} is one side of a conflict on {v.key}; resolve the conflict "
                             "(pick the value to keep, or write a new one) instead of rejecting one side")
        delete = encode_record(Kind.DEL, author, key=v.key, pred=[rid], meta={"reject": True})
        out[v.compartment_id].append(delete)
        previous = _previous_value(state, v)
        if previous is not None and fact.status != "conflict":
            from . import ids as _ids

            out[v.compartment_id].append(encode_record(
                Kind.PUT, author, key=v.key, value=previous.value, authority=previous.claimed_class,
                pred=[_ids.record_id(delete)], type=previous.type,
                meta={"restores": previous.id.hex()},
            ))
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
            live = [c.id for c in fact.candidates] if fact and fact.status == "conflict" else (
                [fact.current.id] if fact and fact.current and fact.status != "deleted" else [])
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
    if fact is None or fact.status == "deleted":
        raise UsageError(f"there is no current value of {key} to forget")
    pred = [c.id for c in fact.candidates] if fact.status == "conflict" else [fact.current.id]
    return compartment_id, encode_record(Kind.DEL, author, key=key, pred=pred)
