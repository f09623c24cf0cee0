"""What the views, the command line and the MCP server show of records and facts: :class:`RecordView`,
:class:`FactView` and their one JSON form each (what ``camillo log --json`` prints, and what the other
faces derive theirs from), with how a record's value and time are shown (:func:`value_text`,
:func:`shown_ts`).  :mod:`camillo.state` makes them from its rows.

Values only (frozen dataclasses and functions): any thread may use them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, NotRequired, TypeAlias, TypedDict, cast

from .records import Authority, Kind

# Timestamps are informational (spec §8.2: any uint).  One a calendar cannot show (after the year 3000)
# or SQLite cannot store (2**63 and above) is treated as absent, so a writer cannot break readers with it.
TS_SHOWN_MAX = 32_503_680_000  # 3000-01-01T00:00:00Z


def shown_ts(ts: Any) -> int | None:
    """A record's or batch's ``ts`` as views show and order it: None when absent or out of range."""
    return ts if type(ts) is int and 0 <= ts <= TS_SHOWN_MAX else None


def value_text(value: Any) -> str:
    """A plain-text rendering of a record value for lists and search."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(text := value.get("text", value.get("name")), str):  # a file: its name
        return text
    return json.dumps(jsonable(value), ensure_ascii=False, sort_keys=True)


# A JSON value, as json.dumps writes it.
JSON: TypeAlias = "bool | int | float | str | list[JSON] | dict[str, JSON] | None"


def jsonable(v: object) -> JSON:
    """A record value in JSON terms: byte strings become ``{"bytes": hex}``, map keys text."""
    if isinstance(v, bytes):
        return {"bytes": v.hex()}
    if isinstance(v, list):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    return cast(JSON, v)  # None, bool, int or text: the CBOR profile has nothing else (no floats, no tags)


# The JSON view of a record (RecordView.to_json): what ``camillo log --json`` prints, and what the other
# faces derive theirs from (the MCP server's records, the exporters' provenance).  "kind" is a Kind name
# (or ERASED, UNKNOWN(n)), "class" the claimed authority class, "effective_class" that class raised by a
# CONFIRM, "writer" the writer id in hex; the optional fields appear only when set (text: not empty).
RecordJSON = TypedDict("RecordJSON", {
    "id": str, "kind": str, "type": str | None, "compartment": str, "class": str | None,
    "effective_class": str | None, "writer": str, "writer_name": str, "writer_kind": str, "ts": int | None,
    "batch": str, "verified": str, "key": NotRequired[str], "value": NotRequired[JSON], "text": NotRequired[str],
    "conversation": NotRequired[str], "role": NotRequired[str], "sources": NotRequired[list[str]],
    "pred": NotRequired[list[str]], "target": NotRequired[str], "meta": NotRequired[JSON],
    "rejected": NotRequired[str | None], "hidden": NotRequired[bool], "unknown_fields": NotRequired[list[int]],
})

# A proposal beside a fact's value: the proposed value, its class, who proposed it (name), its record id
# and the records it was derived from (its sources).
ProposalJSON = TypedDict("ProposalJSON", {
    "record": str, "value": JSON, "type": str | None, "class": str | None, "effective_class": str | None,
    "writer": str, "writer_kind": str, "ts": int | None, "sources": list[str],
})

# The JSON view of a fact (FactView.to_json): its binding value's fields, taken from that record's
# RecordJSON ("writer" is the writer's name), the record ids of its history, and the proposals beside it.
FactJSON = TypedDict("FactJSON", {
    "key": str, "compartment": str, "value": JSON, "type": str | None, "class": str | None,
    "effective_class": str | None, "status": str, "record": str | None, "writer": str | None,
    "history": list[str], "candidates": list[str], "discarded": list[str], "proposed": list[ProposalJSON],
})


@dataclass(frozen=True)
class RecordView:
    """One record as the views, the CLI and the MCP server show it."""

    id: bytes
    kind: int
    kind_name: str
    type: str | None
    compartment_id: bytes
    compartment: str
    writer_id: bytes
    writer: str
    writer_kind: str
    ts: int | None
    key: str | None
    value: Any
    text: str
    conversation: str | None
    role: str | None
    claimed_class: int | None
    effective_class: int | None
    sources: tuple[bytes, ...]
    pred: tuple[bytes, ...]
    target: bytes | None
    meta: dict[str, Any]
    batch_id: bytes
    verified: str  # "signature", "compaction" (accepted on a COMPACTION signature)
    valid: bool
    reason: str | None
    hidden: bool
    erased: bool
    unknown_fields: tuple[int, ...] = ()

    @property
    def class_label(self) -> str:
        return Authority(self.claimed_class).label if self.claimed_class is not None else "-"

    @property
    def effective_label(self) -> str:
        return Authority(self.effective_class).label if self.effective_class is not None else "-"

    def to_json(self) -> RecordJSON:
        """The one JSON view of a record (see RecordJSON): the faces print it or derive theirs from it."""
        out: RecordJSON = {
            "id": self.id.hex(), "kind": self.kind_name, "type": self.type, "compartment": self.compartment,
            "class": self.class_label if self.claimed_class is not None else None,
            "effective_class": self.effective_label if self.effective_class is not None else None,
            "writer": self.writer_id.hex(), "writer_name": self.writer, "writer_kind": self.writer_kind,
            "ts": self.ts, "batch": self.batch_id.hex(), "verified": self.verified,
        }
        if self.key is not None:
            out["key"] = self.key
        if self.value is not None:
            out["value"] = jsonable(self.value)
        if self.text:
            out["text"] = self.text
        if self.conversation is not None:
            out["conversation"] = self.conversation
        if self.role is not None:
            out["role"] = self.role
        if self.sources:
            out["sources"] = [s.hex() for s in self.sources]
        if self.pred:
            out["pred"] = [p.hex() for p in self.pred]
        if self.target:
            out["target"] = self.target.hex()
        if self.meta:
            out["meta"] = jsonable(self.meta)
        if not self.valid:
            out["rejected"] = self.reason
        if self.hidden:
            out["hidden"] = True
        if self.unknown_fields:
            out["unknown_fields"] = list(self.unknown_fields)
        return out


@dataclass(frozen=True)
class FactView:
    compartment: str
    compartment_id: bytes
    key: str
    status: str  # ok | conflict | deleted | pending (no binding value, only proposals)
    current: RecordView | None  # the binding value (ok), preferred candidate (conflict), DEL (deleted)
    candidates: tuple[RecordView, ...]
    discarded: tuple[RecordView, ...]
    history: tuple[RecordView, ...]
    proposed: tuple[RecordView, ...] = ()  # proposals beside the value, never in its place (spec §19.3)

    def to_json(self) -> FactJSON:
        """The fact as JSON: its binding value's fields (from the record's JSON), record ids, proposals."""
        cur = self.current.to_json() if self.current is not None else None
        return {
            "key": self.key,
            "compartment": self.compartment,
            "value": cur.get("value") if cur is not None and cur["kind"] == Kind.PUT.name else None,
            "type": cur["type"] if cur is not None else None,
            "class": cur["class"] if cur is not None else None,
            "effective_class": cur["effective_class"] if cur is not None else None,
            "status": self.status,
            "record": cur["id"] if cur is not None else None,
            "writer": cur["writer_name"] if cur is not None else None,
            "history": [r.id.hex() for r in self.history],
            "candidates": [r.id.hex() for r in self.candidates] if self.status == "conflict" else [],
            "discarded": [r.id.hex() for r in self.discarded],
            "proposed": [_proposal_json(r.to_json()) for r in self.proposed],
        }


def _proposal_json(j: RecordJSON) -> ProposalJSON:
    return {"record": j["id"], "value": j.get("value"), "type": j["type"], "class": j["class"],
            "effective_class": j["effective_class"], "writer": j["writer_name"], "writer_kind": j["writer_kind"],
            "ts": j["ts"], "sources": j.get("sources", [])}
