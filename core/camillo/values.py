"""The values the vault facade takes and returns: how to unlock, what to append, and typed reports.

This module is also the faces' vocabulary of the format: the authority classes, the record kinds
and keyed types, the key rule, the search query syntax, and the views of records and facts
(re-exported from the layers that define them), so a face never imports those layers.

Everything here is plain data (frozen where it can be): the CLI, the MCP server, the importers, the
exporters and the desktop app build these and read these, and never the machinery behind them.
Any thread may create or read one; none holds a live reference into an open vault (a report's
``record`` is a :class:`~camillo.recordviews.RecordView`, itself a snapshot).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from . import encoding
from .changes import Changes
from .control import Policy
from .errors import CanonicalError, LimitExceeded, UsageError

# object-store locations and their keys, for the faces (the desktop's Open object storage…, the CLI's --endpoint-url)
from .objectstore import forget_object_store_keys as forget_object_store_keys
from .objectstore import is_object_store as is_object_store
from .objectstore import object_store_keys_kept as object_store_keys_kept
from .objectstore import object_store_url as object_store_url
from .objectstore import remember_object_store_keys as remember_object_store_keys
from .objectstore import with_endpoint as with_endpoint

# where a face must not write plaintext or secrets (a vault folder travels to every host it syncs to), and
# the errors of writing a new file that are about the place chosen, not the disk (a face says where instead)
from .places import PATH_ERRNOS as PATH_ERRNOS
from .places import vault_folder_holding as vault_folder_holding
from .records import (
    KEYED_TYPES,
    MAX_ID_LIST,
    STANDARD_TYPES,
    TYPE_MAX_BYTES,
    Authority,
    Kind,
    awaits_confirmation,
    check_key,
    check_type_name,
    encode_record,
    quoted,
)
from .recordviews import FactView, RecordView, jsonable
from .search import parse as parse_search_query

if TYPE_CHECKING:
    from .credentials import Credential

DEFAULT_COMPARTMENTS = ("personal", "work", "health")

JSONValue = Any  # what json.loads returns: dict, list, str, int, float, bool or None


@dataclass(frozen=True)
class Unlock:
    """How to open a vault.  Build one with the class methods; the secret is never shown."""

    method: str  # passphrase | recovery | device | grant | recipient
    secret: str | None = field(default=None, repr=False)
    path: str | None = None
    credential: Credential | None = field(default=None, repr=False)  # a device key held in memory (enrollment)
    enrolling: bool = False  # that credential was certified just now, after every erasure so far

    @classmethod
    def passphrase(cls, text: str) -> Unlock:
        return cls("passphrase", text)

    @classmethod
    def recovery(cls, phrase: str) -> Unlock:
        return cls("recovery", phrase)

    @classmethod
    def device(cls) -> Unlock:
        return cls("device")

    @classmethod
    def grant(cls, path: str) -> Unlock:
        return cls("grant", path=path)

    @classmethod
    def recipient(cls, key_file: str, passphrase: str) -> Unlock:
        """A trusted person's recovery key (spec §12.1, kind 4): the key file ``camillo recipient
        keygen`` wrote, and the passphrase that protects it."""
        return cls("recipient", passphrase, path=key_file)

    @classmethod
    def with_device_credential(cls, credential: Credential, *, enrolling: bool = False) -> Unlock:
        """A device key already in memory (a device finishing its enrollment: ``enrolling=True``
        says its only slot was made after every erasure the vault has seen, so it has no
        pre-erasure key to rotate away)."""
        return cls("device", credential=credential, enrolling=enrolling)


VALUE_MAX_DEPTH = encoding.MAX_DEPTH - 1  # arrays and objects in a value: the record map is the first level




def check_text(text: str, path: str) -> str:
    """``text`` if UTF-8 can hold it, else UsageError naming ``path``: JSON's ``\\ud800``-style
    escapes can make a lone surrogate, which is not a character."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise UsageError(f"{path} holds a lone surrogate (\\u{ord(text[exc.start]):04x}), which is not Unicode "
                         "text; a JSON escape \\ud800-\\udbff must be followed by one \\udc00-\\udfff") from None
    return text


def check_int(n: int, path: str, low: int = encoding.INT_MIN, what: str = "-2^64 to 2^64-1") -> int:
    """``n`` if it is an integer VMEM stores (spec §2.1: -2^64 to 2^64-1, or from ``low``), else UsageError."""
    if low <= n <= encoding.INT_MAX:
        return n
    digits = str(n)
    shown = digits if len(digits) <= 24 else f"a {len(digits.lstrip('-'))}-digit number"
    raise UsageError(f"{path} is {shown}, outside what VMEM stores ({what}); write it as text")


def json_to_cbor(value: JSONValue, path: str = "value", *, fractions: str = "refuse",
                 text: Callable[[str], str] | None = None) -> Any:
    """A JSON value in the CBOR profile (spec §2): no floating-point numbers, integers within
    -2^64 … 2^64-1, text that is UTF-8, at most :data:`VALUE_MAX_DEPTH` nested arrays and objects.

    Whole floats become integers.  With ``fractions="refuse"`` (what a person or agent typed) a
    fraction, an integer outside 64 bits, text that is not UTF-8 and nesting beyond the limit are
    refused: UsageError or LimitExceeded naming ``path`` and the limit.  With ``fractions="text"``
    (what an importer found in someone else's export) they are kept as text: the number's digits,
    the nested part as compact JSON.  ``text`` cleans every string and name (importers drop control
    characters and lone surrogates).  The recursion never goes deeper than the limit."""
    lenient = fractions == "text"

    def as_text(s: str) -> str:
        return check_text(text(s) if text is not None else s, path)

    def convert(v: JSONValue, depth: int) -> Any:
        if isinstance(v, bool) or v is None:
            return v
        if isinstance(v, int):
            if lenient and not encoding.INT_MIN <= v <= encoding.INT_MAX:
                return str(v)
            return check_int(v, path)
        if isinstance(v, float):
            if math.isfinite(v) and v.is_integer() and abs(v) < 2**63:
                return int(v)
            if lenient:
                return repr(v)
            raise UsageError(f"{path}: VMEM stores no floating-point numbers; write {v!r} as text")
        if isinstance(v, str):
            return as_text(v)
        if isinstance(v, (list, dict)):
            if depth >= VALUE_MAX_DEPTH:
                if lenient:
                    try:
                        return as_text(json.dumps(v, ensure_ascii=False, separators=(",", ":"), default=str))
                    except (RecursionError, ValueError):
                        return "…"
                raise LimitExceeded(f"{path} nests arrays and objects more than {VALUE_MAX_DEPTH} levels deep, "
                                    f"the most a VMEM record holds (spec §2.2); flatten it or store it as text")
            if isinstance(v, list):
                return [convert(x, depth + 1) for x in v]
            return {as_text(str(k)): convert(x, depth + 1) for k, x in v.items()}
        return v

    return convert(value, 0)


def parse_json(data: bytes | str, what: str = "the input") -> JSONValue:
    """One JSON value from UTF-8 bytes or text (a leading byte order mark is allowed); UsageError
    saying what is wrong with it, never a decoder's exception."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise UsageError(f"{what} is not UTF-8 text (byte 0x{data[exc.start]:02x} at position {exc.start + 1})"
                             ) from None
    try:
        return json.loads(data.removeprefix("\ufeff"))
    except json.JSONDecodeError as exc:
        raise UsageError(f"{what} is not JSON ({exc.msg}, column {exc.colno})") from None
    except RecursionError:
        raise LimitExceeded(f"{what} nests arrays and objects too deeply to read; a VMEM record holds at most "
                            f"{VALUE_MAX_DEPTH} levels in a value") from None
    except ValueError:  # a number of more digits than Python converts (4300)
        raise UsageError(f"{what} holds a number thousands of digits long; VMEM stores integers from -2^64 to "
                         "2^64-1: write it as text") from None


def _id_list(ids: Sequence[bytes], name: str) -> list[bytes]:
    """The record ids as a record lists them (sorted, unique), within the spec's limit."""
    if any(not isinstance(x, bytes) or len(x) != 32 for x in ids):
        raise UsageError(f"\"{name}\" must list record ids (32 bytes, 64 hex digits each)")
    out = sorted(set(ids))
    if len(out) > MAX_ID_LIST:
        raise LimitExceeded(f"\"{name}\" lists {len(out)} record ids; a VMEM record holds at most {MAX_ID_LIST} "
                            "(spec §8.6)")
    return out


def _check_meta(meta: Any) -> None:
    if meta is None:
        return
    if not isinstance(meta, dict) or not all(isinstance(k, str) for k in meta):
        raise UsageError("\"meta\" must map names to text, non-negative integers or booleans")
    for k, v in meta.items():
        check_text(k, "\"meta\"")
        if isinstance(v, str):
            check_text(v, f"\"meta\" {quoted(k)}")
        elif isinstance(v, int) and not isinstance(v, bool):
            check_int(v, f"\"meta\" {quoted(k)}", 0, "0 to 2^64-1")
        elif not isinstance(v, (bool, bytes)):
            raise UsageError("\"meta\" must map names to text, non-negative integers or booleans")


JSON_FIELDS = ("class", "conversation", "key", "meta", "pred", "role", "sources", "text", "title", "ts", "type",
               "value")  # the fields of one ``camillo add`` line


@dataclass
class NewRecord:
    """One record to append, in the terms people and agents use (the CLI's JSON lines).

    ``type`` decides the operation: fact, preference and instruction are keyed PUTs; everything
    else is a NOTE.  ``authority`` defaults by role: what the user wrote is ``user``, what an
    assistant wrote is ``inferred``, tool, system and web content is ``external``.
    """

    type: str
    key: str | None = None
    value: Any = None
    text: str | None = None
    conversation: str | None = None
    role: str | None = None
    title: str | None = None
    authority: Authority | None = None
    sources: Sequence[bytes] = ()
    pred: Sequence[bytes] | None = None
    meta: dict[str, Any] | None = None
    ts: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.authority, str):  # "inferred", as in the CLI's JSON (UsageError if unknown)
            self.authority = Authority.parse(self.authority)

    def default_authority(self) -> Authority:
        if self.authority is not None:
            return self.authority
        if self.role in ("assistant", "model", "agent"):
            return Authority.INFERRED
        if self.role in ("tool", "system", "web", "function"):
            return Authority.EXTERNAL
        return Authority.USER

    def encode(self, author: bytes, authority: Authority,
               supersedes: Callable[[str], Sequence[bytes]] = lambda key: ()) -> bytes:
        """The record's bytes: a keyed PUT (fact, preference, instruction) or a NOTE, by ``author``
        at ``authority``; a keyed record without ``pred`` replaces ``supersedes(key)``.  What no
        vault can store is a UsageError or LimitExceeded naming the field and the limit."""
        typ = self.type
        for name in ("type", "key", "text", "conversation", "role", "title"):
            field_value = getattr(self, name)
            if isinstance(field_value, str):
                check_text(field_value, f"\"{name}\"")
        if len(typ.encode("utf-8")) > TYPE_MAX_BYTES:
            raise LimitExceeded(f"the type {quoted(typ)} is longer than {TYPE_MAX_BYTES} bytes")
        check_type_name(typ)
        if self.ts is not None and (not isinstance(self.ts, int) or isinstance(self.ts, bool)):
            raise UsageError("\"ts\" must be a Unix time in seconds")
        if self.ts is not None:
            check_int(self.ts, "\"ts\"", 0, "0 to 2^64-1 seconds")
        sources = _id_list(self.sources, "sources")
        _check_meta(self.meta)
        if typ in KEYED_TYPES:
            if not self.key:
                raise UsageError(f"a {typ} needs a \"key\" such as user/home_city")
            value = json_to_cbor(self.value if self.value is not None else self.text)
            if value is None:
                raise UsageError(f"the {typ} {quoted(self.key)} needs a \"value\"")
            pred = _id_list(self.pred if self.pred is not None else supersedes(self.key), "pred")
            return encode_record(Kind.PUT, author, key=self.key, value=value, authority=authority, pred=pred,
                                 sources=sources, meta=self.meta, type=typ, ts=self.ts)
        note: Any
        if self.value is not None:
            note = json_to_cbor(self.value)
        else:
            fields = {"text": self.text, "conversation": self.conversation, "role": self.role, "title": self.title}
            note = {k: v for k, v in fields.items() if v is not None}
            if typ == "message" and "text" not in note:
                raise UsageError("a message needs a \"text\"")
        if self.key is not None:
            raise UsageError(f"a {typ} record has no key; keys belong to facts, preferences and instructions")
        return encode_record(Kind.NOTE, author, value=note, authority=authority, sources=sources, meta=self.meta,
                             type=typ, ts=self.ts)

    def check(self) -> None:
        """Refuse what no vault can store, before any vault is opened (the record is encoded once, by
        no one, and thrown away): UsageError or LimitExceeded naming the field and the limit."""
        try:
            self.encode(bytes(32), self.default_authority())
        except CanonicalError as exc:  # a rule of the format the checks above do not name: still the input's
            raise UsageError(f"VMEM cannot store this record ({exc.message})") from None

    @classmethod
    def from_json(cls, obj: JSONValue) -> NewRecord:
        """One JSON object of ``camillo add``, checked (:meth:`check`): UsageError or LimitExceeded
        name the field and what to write instead."""
        if not isinstance(obj, dict):
            raise UsageError("not a JSON object; write one object per line, such as "
                             "{\"type\": \"message\", \"text\": \"...\"}")
        unknown = sorted(set(obj) - set(JSON_FIELDS))
        if unknown:
            names = ", ".join(quoted(n, 24) for n in unknown[:5]) + (", …" if len(unknown) > 5 else "")
            raise UsageError(f"unknown field(s) {names}; allowed: {', '.join(JSON_FIELDS)}")
        typ = obj.get("type")
        if not isinstance(typ, str):
            raise UsageError("each record needs a \"type\" (message, conversation, fact, preference, instruction, ...)")
        for name in ("text", "conversation", "role", "title", "key"):
            if obj.get(name) is not None and not isinstance(obj[name], str):
                raise UsageError(f"\"{name}\" must be text")
        klass = obj.get("class")
        try:
            authority = Authority.parse(klass) if klass is not None else None
        except UsageError:
            raise UsageError("\"class\" must be one of user, observed, inferred or external"
                             + (f", not {quoted(klass)}" if isinstance(klass, str) else "")) from None
        ts = obj.get("ts")
        if ts is not None and (not isinstance(ts, int) or isinstance(ts, bool) or ts < 0):
            raise UsageError("\"ts\" must be a Unix time in seconds")

        def hex_ids(name: str) -> list[bytes]:
            listed = obj.get(name)
            if listed is None:
                return []
            try:
                if not isinstance(listed, list):
                    raise ValueError
                out = [bytes.fromhex(x) for x in listed]
            except (TypeError, ValueError):
                raise UsageError(f"\"{name}\" must be a list of hex record ids") from None
            if any(len(x) != 32 for x in out):
                raise UsageError(f"\"{name}\" must list 64-digit hex record ids")
            return out

        record = cls(
            type=typ, key=obj.get("key"), value=obj.get("value"), text=obj.get("text"),
            conversation=obj.get("conversation"), role=obj.get("role"), title=obj.get("title"),
            authority=authority, sources=hex_ids("sources"), pred=hex_ids("pred") if "pred" in obj else None,
            meta=obj.get("meta"), ts=ts,
        )
        record.check()
        return record


@dataclass(frozen=True)
class Notice:
    """Something the person should be told about this device: its writes that were rejected or
    sealed again, its key that an erasure replaced, this device revoked, a view still syncing."""

    kind: str  # rejected-writes | sealed-again | key-rotated | revoked | waiting-for-join | key-sealed-elsewhere
    # | passphrase-replaced | incomplete
    message: str
    # what a face needs to say it in its own words (empty where it does not apply)
    count: int = 0  # writes rejected or sealed again
    compartment: str = ""
    who: str = ""  # the device(s) that erased or revoked
    when: int | None = None  # when it was revoked
    why: str = ""  # the reason given, or the rule that rejected

    def to_json(self) -> dict[str, object]:
        return {"kind": self.kind, "message": self.message, "count": self.count, "compartment": self.compartment,
                "who": self.who, "when": self.when, "why": self.why}


@dataclass(frozen=True)
class Problem:
    """Something wrong or incomplete about this copy of the vault, with the file it concerns."""

    kind: str
    file: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "file": self.file, "message": self.message}


class SyncStatus(NamedTuple):
    """For status bars: "up to date", "syncing", "missing batches" or "rollback alert", with details."""

    state: str
    details: list[str]


@dataclass(frozen=True)
class VaultStats:
    batches: int  # accepted batches
    records: int  # records in the materialised state


def describe_platform(recorded: str) -> str:
    """A device's platform as people say it ("Linux", "macOS laptop", "Windows"), from what its
    certificate recorded (older Camillo recorded the kernel: "Linux 6.8.0-31-generic", "Darwin 23.4.0")."""
    text = " ".join(recorded.split())
    laptop = text.endswith(" laptop")
    base = text.removesuffix(" laptop")
    first = base.split(" ", 1)[0].lower() if base else ""
    name = {"linux": "Linux", "darwin": "macOS", "macos": "macOS", "windows": "Windows", "freebsd": "FreeBSD",
            "openbsd": "OpenBSD", "android": "Android", "ios": "iOS"}.get(first)
    if name is None:
        return text[:40] or "unknown platform"
    return f"{name} laptop" if laptop else name


def when_text(ts: int | None) -> str:
    """A time as people say it in a sentence: "1 Dec at 16:40" (local time)."""
    if not ts:
        return "an unknown date"
    t = time.localtime(ts)
    year = f" {t.tm_year}" if t.tm_year != time.localtime().tm_year else ""
    return f"{t.tm_mday} {time.strftime('%b', t)}{year} at {time.strftime('%H:%M', t)}"


@dataclass(frozen=True)
class DeviceInfo:
    """One of the user's devices.  ``new``: it joined (by code, or with a credential on a new
    installation) and no device the vault trusts acknowledged it yet ("was this you?");
    ``joined_with`` says how, in words ("your passphrase", "a code shown on Laptop", …)."""

    writer_id: bytes
    name: str
    platform: str  # as people say it ("Linux", "macOS laptop"); the recorded text is in ``platform_recorded``
    kind: str
    enrolled: int
    last_seen: int | None
    revoked: bool
    this_device: bool
    replaced: bool = False  # an old key of a device that rotated its key (after an erasure, or re-certified)
    new: bool = False
    joined_with: str = ""
    platform_recorded: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"writer": self.writer_id.hex(), "name": self.name, "platform": self.platform, "kind": self.kind,
                "enrolled": self.enrolled, "last_seen": self.last_seen, "revoked": self.revoked,
                "this_device": self.this_device, "replaced": self.replaced, "new": self.new,
                "joined_with": self.joined_with}

    def was_this_you(self) -> str:
        """The question to ask about a new device, in one sentence."""
        return (f"A new device, '{self.name}' ({self.platform}), joined on {when_text(self.enrolled)} using "
                f"{self.joined_with or 'a credential of this vault'}. Was this you?")


@dataclass(frozen=True)
class RecipientInfo:
    """A recovery recipient: a trusted person (or an escrow) whose own key can open the vault."""

    writer_id: bytes
    name: str
    added: int
    revoked: bool
    revoked_at: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"writer": self.writer_id.hex(), "name": self.name, "added": self.added, "revoked": self.revoked,
                "revoked_at": self.revoked_at}


@dataclass(frozen=True)
class RecipientKeyFile:
    """What ``camillo recipient keygen`` wrote: the trusted person's key file (protected by their
    passphrase; they keep it) and its public half (``.pub``, which the vault's owner adds)."""

    path: str
    public_path: str
    fingerprint: str  # short, to read aloud when the owner adds the .pub

    def to_json(self) -> dict[str, Any]:
        return {"key_file": self.path, "public_key": self.public_path, "fingerprint": self.fingerprint}


@dataclass(frozen=True)
class CompartmentInfo:
    """A data compartment: its name, id, how many records it holds and which agents it is granted to."""

    name: str
    compartment_id: bytes
    records: int
    agents: tuple[str, ...] = ()
    added: int | None = None  # when a COMPARTMENT record created it (None: created with the vault)

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "id": self.compartment_id.hex(), "records": self.records,
                "agents": list(self.agents), "added": self.added}


@dataclass(frozen=True)
class GrantInfo:
    """An agent grant as the owner sees it (no secret: the credential is in the grant file)."""

    grant_id: bytes
    agent: str
    writer_id: bytes
    scopes: dict[str, str]  # compartment name -> read | write | append
    max_class: str
    expires: int | None
    created: int
    last_used: int | None = None
    revoked: bool = False
    revoked_at: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {"grant_id": self.grant_id.hex(), "agent": self.agent, "writer": self.writer_id.hex(),
                "scopes": dict(self.scopes), "max_class": self.max_class, "expires": self.expires,
                "created": self.created, "last_used": self.last_used, "revoked": self.revoked,
                "revoked_at": self.revoked_at}


@dataclass(frozen=True)
class RecordContext:
    """The causal context of a record: its writer, and what that writer had seen when it wrote."""

    writer: str
    seq: int | None = None
    ts: int | None = None
    seen: dict[str, int] = field(default_factory=dict)  # writer name -> highest seq seen
    segment: str | None = None
    compartment: str | None = None


@dataclass(frozen=True)
class ConversationInfo:
    """A conversation as a list shows it: what it is called, where and when, who took part."""

    conversation: str  # its id, as its records name it
    compartment: str
    title: str  # its title record's text, else the start of its first message, else its id
    first: int | None  # its earliest record's time
    last: int | None  # its latest record's time (last activity)
    messages: int  # its messages (the title record not counted)
    writers: tuple[str, ...]  # who wrote in it (device and agent names), most records first
    source: str = ""  # where an import brought it from ("ChatGPT", "Claude"), else ""


@dataclass(frozen=True)
class SearchHit:
    """A record a search found, with the text around what matched: ``snippet`` is that text in
    pieces, each marked True when it is a matched word (False: text around it)."""

    record: RecordView
    snippet: tuple[tuple[str, bool], ...]


@dataclass(frozen=True)
class SearchPage:
    """One page of a search: ``total`` records match in all; ``hits`` are those from ``offset`` on,
    in ``order`` (relevance: best first; time: newest first).  ``total_exact`` False: more than
    ``total`` match (a count that reads each match's record stops ``search.COUNT_AHEAD`` past the
    page; the next page's count goes further)."""

    query: str
    order: str
    total: int
    offset: int
    hits: list[SearchHit]
    total_exact: bool = True


@dataclass(frozen=True)
class ActivityRow:
    """One batch: who wrote what, when, where, and how it was verified."""

    batch: bytes
    ts: int
    writer: str
    writer_kind: str  # device | agent | passphrase | recovery phrase | unknown
    compartment: str
    seq: int
    records: int
    summary: str
    verified: str
    status: str


@dataclass(frozen=True)
class HealthReport:
    """What deserves the owner's attention (the KeePassXC reports idea)."""

    conflicts: list[str]
    pending: list[str]
    stale_grants: list[str]
    stale_devices: list[str]
    crowded_compartments: dict[str, list[str]]
    sync: str
    sync_details: list[str]
    problems: list[Problem]
    erasure_enabled: bool
    devices: int
    grants: int
    records: int

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["problems"] = [p.to_json() for p in self.problems]
        return out


@dataclass(frozen=True)
class ErasurePreview:
    """What erasing a record will do, in numbers, before anything is done."""

    record: RecordView
    compartment: str
    epochs: int
    segments: int
    batches: int
    other_devices: list[str]
    readers: list[str]
    allowed: bool
    policy_reason: str


@dataclass(frozen=True)
class RevocationReport:
    subject: str
    kind: str
    compartments: tuple[str, ...]
    new_epochs: int
    generation: int | None
    deleted_files: int
    changes: Changes = field(default_factory=Changes)
    # a revoked device (a lost laptop): the credentials that still open the vault for whoever knows them,
    # which the next steps replace ("passphrase", "recovery phrase")
    still_opens: tuple[str, ...] = ()

    def lines(self) -> list[str]:
        out = [f"Revoked {self.kind} {self.subject}."]
        out.append(f"New keys for {', '.join(self.compartments)}: it cannot read anything written from now on.")
        out.append("Any batch it writes after this revocation is rejected by every copy of the vault.")
        if self.generation:
            out.append(f"The vault master secret rolled to generation {self.generation}; its old slot was deleted.")
        out.append("What it already read stays exposed: revocation cannot recall copies it made.")
        out += self.next_steps()
        return out

    def next_steps(self) -> list[str]:
        """What finishes locking a lost device out, one sentence each (empty for an agent grant)."""
        out = []
        if "passphrase" in self.still_opens:
            out.append("Your passphrase still opens the vault for whoever knows it, on any computer (the lost "
                       "device may have it saved or typed): change it now, which also rolls the keys again.")
        if "recovery phrase" in self.still_opens:
            out.append("If the recovery phrase was stored on or near the lost device, re-issue it too: the old "
                       "phrase then opens nothing written after.")
        return out


@dataclass(frozen=True)
class ReachReport:
    """What an erasure did, and what it could not reach."""

    records: list[str]
    compartment: str
    epochs_destroyed: list[str]
    batches_reencrypted: int
    segments_deleted: int
    segments_written: int
    key_files_deleted: int
    generation: int
    exposed: list[str] = field(default_factory=list)
    changes: Changes = field(default_factory=Changes)
    attachment_chunks_deleted: int = 0  # the erased files' chunks (whose keys only erased records held)

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "changes"}

    def lines(self) -> list[str]:
        out = [
            f"Erased {len(self.records)} record(s) from {self.compartment}: their bytes are gone from the vault and "
            f"the keys of {len(self.epochs_destroyed)} epoch(s) that sealed them were destroyed.",
            f"Re-encrypted {self.batches_reencrypted} surviving batch(es) into {self.segments_written} new segment(s); "
            f"deleted {self.segments_deleted} old segment(s) and {self.key_files_deleted} old key file(s); "
            f"the master secret is now at generation {self.generation} and this device has a new key.",
        ]
        if self.attachment_chunks_deleted:
            out.append(f"Deleted {self.attachment_chunks_deleted} chunk file(s) of the erased attachments, whose keys "
                       "were only in the erased records.")
        out += [
            "What erasure cannot reach:",
        ]
        out += [f"  - {line}" for line in self.exposed]
        return out


@dataclass(frozen=True)
class CompactionReport:
    segments_before: int
    segments_written: int
    segments_deleted: int
    batches: int
    pending: int  # old segments kept until other devices acknowledge (or the grace period ends)
    alone: bool = False  # no other active device: old segments wait for the grace period
    changes: Changes = field(default_factory=Changes)

    def lines(self) -> list[str]:
        def n(count: int, word: str, plural: str = "") -> str:
            return f"{count} {word if count == 1 else plural or word + 's'}"

        out = [f"Compacted {n(self.batches, 'batch', 'batches')} from "
               f"{n(self.segments_before, 'small segment')} into {n(self.segments_written, 'large segment')}; "
               f"deleted {n(self.segments_deleted, 'old segment')}."]
        if self.pending and self.alone:
            out.append(f"{n(self.pending, 'old segment')} kept for the 7-day grace period, in case another copy of "
                       "this folder is still syncing; run compact again later, or with --prune-now if no other "
                       "copy exists, to delete them.")
        elif self.pending:
            out.append(f"{n(self.pending, 'old segment')} kept until your other devices have seen the compaction "
                       "(any of their writes to the compacted compartments); run compact again later to delete them.")
        return out


@dataclass(frozen=True)
class GrantCreated:
    """A new agent grant: its file was written to ``path`` (mode 0600) and the grant recorded."""

    grant: GrantInfo
    path: str
    changes: Changes = field(default_factory=Changes)


@dataclass(frozen=True)
class RecoveryPhrase:
    """A new recovery phrase, shown to the user once and never stored."""

    phrase: str = field(repr=False)
    changes: Changes = field(default_factory=Changes)


__all__ = [
    "DEFAULT_COMPARTMENTS",
    "KEYED_TYPES",
    "STANDARD_TYPES",
    "ActivityRow",
    "Authority",
    "Changes",
    "CompactionReport",
    "CompartmentInfo",
    "ConversationInfo",
    "DeviceInfo",
    "ErasurePreview",
    "FactView",
    "GrantCreated",
    "GrantInfo",
    "HealthReport",
    "Kind",
    "NewRecord",
    "Notice",
    "Policy",
    "Problem",
    "ReachReport",
    "RecipientInfo",
    "RecipientKeyFile",
    "RecordContext",
    "RecordView",
    "RecoveryPhrase",
    "RevocationReport",
    "SearchHit",
    "SearchPage",
    "SyncStatus",
    "Unlock",
    "VaultStats",
    "awaits_confirmation",
    "check_key",
    "check_text",
    "describe_platform",
    "json_to_cbor",
    "jsonable",
    "parse_json",
    "parse_search_query",
    "when_text",
]
