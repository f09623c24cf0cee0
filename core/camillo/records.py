"""Records and batches: the signed, content-addressed units of a vault (spec §7 and §8).

A *record* is one deterministic-CBOR map with small integer keys; its id is a tagged SHA-256 of its
exact bytes.  A *batch* is what one writer appends at once: a header (writer, compartment, ``seq``,
``prev``, ``deps``, ``frontier`` and the ordered record ids) signed by the writer, plus the record
bytes.  Erasure may later replace a record's bytes by ``null`` while the header and its signature
stay valid.

This module knows the schema and nothing about keys, files or meaning; :mod:`camillo.control`
gives control records their meaning and :mod:`camillo.log` checks batches against each other.
Records of unknown kinds or with unknown keys are kept byte for byte.

Pure functions; any thread may call them.
"""

from __future__ import annotations

import concurrent.futures
import os
import time
import unicodedata
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from functools import cached_property
from typing import Any, TypeVar

import cbor2

from . import encoding, ids
from .errors import CanonicalError, DamagedFile, LimitExceeded, UnsupportedVersion, UsageError
from .primitives import SIG_ED25519, SigningKey, labelled, random_bytes, sha256, verify_signature

RECORD_MAX_BYTES = 4 * 1024 * 1024
BATCH_MAX_BYTES = 8 * 1024 * 1024
BATCH_MAX_RECORDS = 100_000
KEY_MAX_BYTES = 512
TYPE_MAX_BYTES = 128
MAX_DEPS = 64
MAX_FRONTIER = 1024
MAX_ID_LIST = 4096


class Kind(IntEnum):
    """Record kinds (spec §8.2).  A record of a kind not listed here is kept byte for byte."""

    PUT = 1
    DEL = 2
    NOTE = 3
    CONFIRM = 4
    GENESIS = 16
    DEVICE_CERT = 17
    CRED_ANCHOR = 18
    GRANT = 19
    REVOKE = 20
    EPOCH = 21
    POLICY = 22
    ERASE = 23
    ERASURE_MANIFEST = 24
    COMPACTION = 25
    COMPARTMENT = 26
    DEVICE_NAME = 27
    DEVICE_ACK = 28

    @classmethod
    def known(cls, value: object) -> bool:
        """Whether ``value`` is the number of a kind this reader knows."""
        return value in cls._value2member_map_


CONTROL_KINDS = frozenset(k for k in Kind if k >= 16)
SIGNED_KINDS = CONTROL_KINDS | {Kind.CONFIRM}


class Authority(IntEnum):
    """Authority classes, highest first: only ``user`` binds instructions and preferences."""

    EXTERNAL = 0
    INFERRED = 1
    OBSERVED = 2
    USER = 3

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: object) -> Authority:
        if isinstance(text, int) and not isinstance(text, bool) and 0 <= text <= 3:
            return cls(text)
        if isinstance(text, str) and text.strip().upper() in cls.__members__:
            return cls[text.strip().upper()]
        raise UsageError(f"unknown authority class {text!r}; use user, observed, inferred or external")


STANDARD_TYPES = (
    "message",
    "conversation",
    "fact",
    "preference",
    "instruction",
    "event",
    "decision",
    "summary",
    "attachment",
)
KEYED_TYPES = frozenset({"fact", "preference", "instruction"})


def awaits_confirmation(authority: int | None) -> bool:
    """Whether a keyed value (a PUT) is a proposal, waiting in the inbox beside the fact's value
    rather than binding (spec §19.3): its effective class (the claimed class, raised to ``user`` by a
    valid CONFIRM) is below ``user``; None counts as ``external``."""
    return (authority if authority is not None else 0) < Authority.USER


class F:
    """Record map keys (spec §8.2)."""

    V = 0
    KIND = 1
    AUTHOR = 2
    SALT = 3
    KEY = 4
    VALUE = 5
    CLASS = 6
    PRED = 7
    SOURCES = 8
    ERASE = 9
    TARGET = 10
    META = 11
    BODY = 12
    SIGS = 13
    TS = 14
    TYPE = 15


class H:
    """Batch header map keys (spec §8.1)."""

    V = 0
    VAULT = 1
    COMPARTMENT = 2
    WRITER = 3
    SEQ = 4
    PREV = 5
    DEPS = 6
    FRONTIER = 7
    RECORDS = 8
    TS = 9
    SIG_ALGS = 10
    HEADS = 11  # control batches: what the writer had seen of every data compartment (spec §8.1, §17.4)


def quoted(text: str, width: int = 40) -> str:
    """Someone's text inside a message: quoted, on one line (control, invisible and bidirectional
    characters and lone surrogates escaped, as ``repr`` does), at most ``width`` characters."""
    return repr(text if len(text) <= width else text[: width - 1] + "…")


def check_type_name(name: str) -> None:
    if name in STANDARD_TYPES:
        return
    # A vendor extension is <reverse-dns>/<name>, e.g. "com.example/bookmark".
    head, sep, tail = name.partition("/")
    if not sep or "." not in head or not tail or len(name.encode()) > TYPE_MAX_BYTES:
        raise UsageError(
            f"unknown record type {quoted(name)}: use one of {', '.join(STANDARD_TYPES)} "
            "or a vendor extension such as com.example/bookmark"
        )
    if any(not (c.isalnum() or c in "-._/") for c in name):
        raise UsageError(f"record type {quoted(name)} may use letters, digits, '-', '.', '_' and '/' only")


def check_key(key: str) -> None:
    """Keys are ``<subject>/<attribute>`` in NFC, at most 512 bytes, no control characters."""
    if not isinstance(key, str) or not key:
        raise UsageError("a fact key is a non-empty text such as user/home_city")
    if len(key.encode("utf-8")) > KEY_MAX_BYTES:
        raise LimitExceeded(f"the key {quoted(key)} is longer than {KEY_MAX_BYTES} bytes")
    if unicodedata.normalize("NFC", key) != key:
        raise UsageError(f"the key {quoted(key)} is not in Unicode NFC form")
    if "/" not in key.strip("/") or key != key.strip() or any(unicodedata.category(c)[0] == "C" for c in key):
        raise UsageError(f"the key {quoted(key)} must look like <subject>/<attribute>, e.g. user/home_city")


@dataclass(frozen=True, eq=False)
class Record:
    """A decoded record.  ``raw`` is the exact bytes the id covers.

    The properties give the fields the types :func:`decode_record` checked them to have (a record
    of the state store or the cache was checked when it was first read).  ``fields`` is the record's
    map, but for a :class:`ListingRecord`'s, which lacks its body (read ``body``)."""

    raw: bytes
    id: bytes
    fields: dict[int, Any] = field(repr=False)

    @property
    def kind(self) -> int:
        kind: int = self.fields[F.KIND]
        return kind

    @property
    def kind_name(self) -> str:
        try:
            return Kind(self.kind).name
        except ValueError:
            return f"UNKNOWN({self.kind})"

    @property
    def author(self) -> bytes:
        author: bytes = self.fields[F.AUTHOR]
        return author

    @property
    def key(self) -> str | None:
        key: str | None = self.fields.get(F.KEY)
        return key

    @property
    def value(self) -> Any:
        return self.fields.get(F.VALUE)

    @property
    def authority(self) -> int | None:
        authority: int | None = self.fields.get(F.CLASS)
        return authority

    @property
    def pred(self) -> list[bytes]:
        pred: list[bytes] = self.fields.get(F.PRED, [])
        return pred

    @property
    def sources(self) -> list[bytes]:
        sources: list[bytes] = self.fields.get(F.SOURCES, [])
        return sources

    @property
    def target(self) -> bytes | None:
        target: bytes | None = self.fields.get(F.TARGET)
        return target

    @property
    def meta(self) -> dict[str, Any]:
        meta: dict[str, Any] = self.fields.get(F.META, {})
        return meta

    @property
    def body(self) -> dict[int, Any]:
        body: dict[int, Any] = self.fields.get(F.BODY, {})
        return body

    @property
    def sigs(self) -> list[list[Any]]:
        sigs: list[list[Any]] = self.fields.get(F.SIGS, [])
        return sigs

    @property
    def ts(self) -> int | None:
        ts: int | None = self.fields.get(F.TS)
        return ts

    @property
    def type(self) -> str | None:
        type: str | None = self.fields.get(F.TYPE)
        return type

    @property
    def erase(self) -> bool:
        return bool(self.fields.get(F.ERASE, False))

    @property
    def is_control(self) -> bool:
        return self.kind in CONTROL_KINDS

    @cached_property
    def control_message(self) -> bytes:
        """What its inner signers signed (spec §14), computed once (the roster asks for a control
        record's several times at every open); its map was checked when the record was decoded."""
        return signing_message(CONTROL_SIG_LABEL, self.fields, F.SIGS, checked=True)

    @property
    def known_kind(self) -> bool:
        return Kind.known(self.kind)


# The control records that list segments and batches by the thousand (spec §16.6, §16.7)
_LISTING_KINDS = frozenset({int(Kind.ERASURE_MANIFEST), int(Kind.COMPACTION)})


class ListingRecord(Record):
    """An ERASURE_MANIFEST or a COMPACTION record: a :class:`Record` whose body, the segments and
    batches it lists, is decoded from its bytes each time it is read, never held (its ``fields`` lack
    it: the whole map is ``cbor2.loads(raw)``).  A session holds every control record it read, and
    the compactions of a million records listed 410,000 ids: 29 MB as Python objects, against 13 MB
    of their bytes.  The body is read when the roster is computed (all of them, 2.5 ms at 100,000 records)."""

    @property
    def body(self) -> dict[int, Any]:
        body: dict[int, Any] = cbor2.loads(self.raw).get(F.BODY, {})
        return body

    @cached_property
    def control_message(self) -> bytes:
        """As :attr:`Record.control_message`, from the whole map (kept, as a record's is: a label and a
        hash, which the roster asks for at every computation; all of them, made again, 6.8 ms at 100,000
        records)."""
        return signing_message(CONTROL_SIG_LABEL, cbor2.loads(self.raw), F.SIGS, checked=True)


def _id_list(value: Any, what: str, *, sorted_unique: bool, limit: int = MAX_ID_LIST) -> list[bytes]:
    if not isinstance(value, list) or len(value) > limit:
        raise CanonicalError(f"{what} must be a list of at most {limit} ids")
    for item in value:
        if not isinstance(item, bytes) or len(item) != 32:
            raise CanonicalError(f"{what} holds something that is not a 32-byte id")
    if sorted_unique and any(a >= b for a, b in zip(value, value[1:])):
        raise CanonicalError(f"{what} must be sorted and without duplicates")
    return value


def _check_fields(m: dict[int, Any]) -> None:
    """Validate the shape of every known field; unknown integer keys are allowed and kept."""
    version = m.get(F.V)
    if type(version) is int and version > 1:
        raise UnsupportedVersion(f"a record of version {version}; a newer Camillo is required to read it")
    if type(version) is not int or version != 1:
        raise CanonicalError("record version must be 1")
    kind = m.get(F.KIND)
    if not isinstance(kind, int) or isinstance(kind, bool) or not 0 <= kind < 2**16:
        raise CanonicalError("record kind must be a small unsigned integer")
    author = m.get(F.AUTHOR)
    if not isinstance(author, bytes) or len(author) != 32:
        raise CanonicalError("record author must be a 32-byte writer id")
    salt = m.get(F.SALT)
    if not isinstance(salt, bytes) or len(salt) != 16:
        raise CanonicalError("record salt must be 16 bytes")
    if F.KEY in m:
        if not isinstance(m[F.KEY], str):
            raise CanonicalError("record key must be text")
        try:
            check_key(m[F.KEY])
        except (UsageError, LimitExceeded) as exc:
            raise CanonicalError(exc.message) from None
    if F.CLASS in m and (
        not isinstance(m[F.CLASS], int) or isinstance(m[F.CLASS], bool) or not 0 <= m[F.CLASS] <= 3
    ):
        raise CanonicalError("record class must be 0..3")
    if F.PRED in m:
        _id_list(m[F.PRED], "pred", sorted_unique=True)
    if F.SOURCES in m:
        _id_list(m[F.SOURCES], "sources", sorted_unique=True)
    if F.ERASE in m and not isinstance(m[F.ERASE], bool):
        raise CanonicalError("erase must be true or false")
    if F.TARGET in m and (not isinstance(m[F.TARGET], bytes) or len(m[F.TARGET]) != 32):
        raise CanonicalError("target must be a 32-byte record id")
    if F.META in m:
        meta = m[F.META]
        if not isinstance(meta, dict) or any(not isinstance(k, str) for k in meta):
            raise CanonicalError("meta must be a map with text keys")
        for v in meta.values():
            if not (isinstance(v, (str, bytes, bool)) or (isinstance(v, int) and v >= 0)):
                raise CanonicalError("meta values must be text, unsigned integers, booleans or bytes")
    if F.BODY in m and (not isinstance(m[F.BODY], dict) or any(not isinstance(k, int) for k in m[F.BODY])):
        raise CanonicalError("body must be a map with integer keys")
    if F.SIGS in m:
        sigs = m[F.SIGS]
        if not isinstance(sigs, list) or not sigs or len(sigs) > 16:
            raise CanonicalError("sigs must be a non-empty list of at most 16 signatures")
        for s in sigs:
            if (
                not isinstance(s, list)
                or len(s) != 3
                or not isinstance(s[0], bytes)
                or len(s[0]) != 32
                or type(s[1]) is not int
                or not 0 <= s[1] <= 255
                or not isinstance(s[2], bytes)
            ):
                raise CanonicalError("each signature is [writer_id, alg, signature]")
    if F.TS in m and (not isinstance(m[F.TS], int) or isinstance(m[F.TS], bool) or m[F.TS] < 0):
        raise CanonicalError("ts must be an unsigned integer")
    if F.TYPE in m and (not isinstance(m[F.TYPE], str) or not 0 < len(m[F.TYPE].encode()) <= TYPE_MAX_BYTES):
        raise CanonicalError("type must be a short text")

    required: tuple[int, ...] = ()
    if kind == Kind.PUT:
        required = (F.KEY, F.VALUE, F.CLASS, F.TYPE)
    elif kind == Kind.DEL:
        required = (F.PRED,)  # without a key, a DEL hides the keyless records it names
    elif kind == Kind.NOTE:
        required = (F.VALUE, F.CLASS, F.TYPE)
    elif kind == Kind.CONFIRM:
        required = (F.TARGET, F.SIGS)
    elif kind in CONTROL_KINDS:
        required = (F.BODY, F.SIGS)
    missing = [k for k in required if k not in m]
    if missing:
        raise CanonicalError(f"a {Kind(kind).name} record lacks field(s) {missing}")
    if kind == Kind.DEL and not m[F.PRED]:
        raise CanonicalError("a DEL record must name what it deletes in pred")


def decode_record(raw: bytes, *, expected_id: bytes | None = None) -> Record:
    if len(raw) > RECORD_MAX_BYTES:
        raise CanonicalError(f"a record of {len(raw)} bytes is larger than {RECORD_MAX_BYTES}")
    rid = ids.record_id(raw)
    if expected_id is not None and rid != expected_id:
        raise DamagedFile("a record's bytes do not hash to the id its batch header lists")
    m = encoding.decode(raw, "record")
    if not isinstance(m, dict):
        raise CanonicalError("a record must be a CBOR map")
    _check_fields(m)
    return _record(raw, rid, m)


def validated_record(raw: bytes, rid: bytes) -> Record:
    """A record this reader already checked with :func:`decode_record` (kept in its state store or
    sealed cache): decoded again without repeating the checks."""
    return _record(raw, rid, cbor2.loads(raw))


def _record(raw: bytes, rid: bytes, m: dict[int, Any]) -> Record:
    """The record of bytes ``raw`` decoded to ``m``: a :class:`ListingRecord` for a manifest or a compaction."""
    if type(m) is dict and m.get(F.KIND) in _LISTING_KINDS:
        return ListingRecord(raw, rid, {k: v for k, v in m.items() if k != F.BODY})
    return Record(raw, rid, m)


def signing_message(label: str, fields: dict[int, Any], sig_key: int, *, checked: bool = False) -> bytes:
    """What a statement's signers sign: ``label ‖ 0x00 ‖ SHA-256(canonical map without sig_key)``
    (``checked``: the map is a decoded record's, inside the profile already: not walked again)."""
    unsigned = {k: v for k, v in fields.items() if k != sig_key}
    return labelled(label, sha256(cbor2.dumps(unsigned, canonical=True) if checked else encoding.encode(unsigned)))


CONTROL_SIG_LABEL = "vmem/v1/control-sig"


def encode_record(
    kind: int,
    author: bytes,
    *,
    key: str | None = None,
    value: Any = None,
    authority: int | None = None,
    pred: Iterable[bytes] = (),
    sources: Iterable[bytes] = (),
    erase: bool | None = None,
    target: bytes | None = None,
    meta: dict[str, Any] | None = None,
    body: dict[int, Any] | None = None,
    signers: Sequence[SigningKey] = (),
    ts: int | None = None,
    type: str | None = None,
    extra: dict[int, Any] | None = None,
    salt: bytes | None = None,
) -> bytes:
    """Build one record's bytes.  ``signers`` inner-sign it (control records and CONFIRM), in the
    order given.  ``salt`` is random unless given (the writer-side conformance vectors fix it)."""
    if salt is not None and len(salt) != 16:
        raise ValueError("a record salt is 16 bytes")
    m: dict[int, Any] = {F.V: 1, F.KIND: int(kind), F.AUTHOR: author, F.SALT: salt or random_bytes(16)}
    if key is not None:
        check_key(key)
        m[F.KEY] = key
    if kind in (Kind.PUT, Kind.NOTE) or value is not None:
        m[F.VALUE] = value
    if authority is not None:
        m[F.CLASS] = int(authority)
    pred = sorted(set(pred))
    if pred or kind == Kind.DEL:
        m[F.PRED] = pred
    sources = sorted(set(sources))
    if sources:
        m[F.SOURCES] = sources
    if erase is not None:
        m[F.ERASE] = erase
    if target is not None:
        m[F.TARGET] = target
    if meta:
        m[F.META] = dict(meta)
    if body is not None:
        m[F.BODY] = body
    m[F.TS] = int(time.time()) if ts is None else ts
    if type is not None:
        check_type_name(type)
        m[F.TYPE] = type
    if extra:
        m.update(extra)
    if signers:
        message = signing_message(CONTROL_SIG_LABEL, m, F.SIGS)
        m[F.SIGS] = [[ids.writer_id(s.alg, s.public), s.alg, s.sign(message)] for s in signers]
    raw = encoding.encode(m)
    if len(raw) > RECORD_MAX_BYTES:
        raise LimitExceeded(
            f"this record is {len(raw)} bytes; VMEM records are limited to {RECORD_MAX_BYTES} bytes. "
            "Split the text or store a large file as several attachments."
        )
    _check_fields(m)
    return raw


def verify_inner_signatures(
    record: Record, lookup: Callable[[bytes], bytes | None],
    verify: Callable[[int, bytes, bytes, bytes], bool] | None = None,
) -> tuple[list[bytes], list[bytes]]:
    """Check a control record's (or CONFIRM's) inner signatures.

    ``lookup(writer_id)`` returns the Ed25519 public key of a known signer or None.  Returns the
    writer ids whose signatures verified and those that were unknown; a signature that is present
    but wrong raises DamagedFile (it can only come from tampering or a bug).  ``verify`` checks one
    signature (by default :func:`~camillo.primitives.verify_signature`; the roster's, over batches read back from
    the local state, remembers what verified before: :class:`camillo.memos.SignatureMemo`).
    """
    message = record.control_message
    check = verify or verify_signature
    good: list[bytes] = []
    unknown: list[bytes] = []
    for wid, alg, sig in record.sigs:
        pk = lookup(wid)
        if pk is None:
            unknown.append(wid)
            continue
        if ids.writer_id(alg, pk) != wid or not check(alg, pk, message, sig):
            raise DamagedFile(f"record {record.id.hex()[:12]} carries a signature that does not verify")
        good.append(wid)
    return good, unknown


# ---------------------------------------------------------------------------------------------
# Batches


class RecordIds(Sequence[bytes]):
    """The record ids a decoded batch header lists, held as one byte string (32 bytes an id) and not
    as a tuple of objects: a cold open of a million records keeps 100,000 headers, whose ids took 84
    MB that way.  A sequence of the ids, equal to the tuple of them (and hashed like it)."""

    __slots__ = ("_ids",)

    def __init__(self, ids: Iterable[bytes] = (), *, joined: bytes = b"") -> None:
        self._ids = joined or b"".join(ids)  # (``joined``: the ids one after the other, as __bytes__ gives them)

    def __len__(self) -> int:
        return len(self._ids) >> 5

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return tuple(self)[i]
        n = len(self._ids) >> 5
        at = i + n if i < 0 else i
        if not 0 <= at < n:
            raise IndexError("record index out of range")
        return self._ids[at << 5:(at + 1) << 5]

    def __iter__(self) -> Iterator[bytes]:
        ids = self._ids
        return (ids[at:at + 32] for at in range(0, len(ids), 32))

    def __contains__(self, rid: object) -> bool:
        if not isinstance(rid, bytes) or len(rid) != 32:
            return False
        at = self._ids.find(rid)
        while at >= 0 and at & 31:  # (a match that straddles two ids)
            at = self._ids.find(rid, at + 1)
        return at >= 0

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RecordIds):
            return self._ids == bytes(other)
        return tuple(self) == other if isinstance(other, tuple) else NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __bytes__(self) -> bytes:
        """The ids one after the other."""
        return self._ids

    @classmethod
    def from_bytes(cls, ids: bytes) -> RecordIds:
        """The ids :meth:`__bytes__` gave (ValueError: not a whole number of ids)."""
        if type(ids) is not bytes or len(ids) & 31:
            raise ValueError("record ids that are not a whole number of 32-byte ids")
        return cls(joined=ids)

    def __repr__(self) -> str:
        return f"RecordIds({tuple(self)!r})"


@dataclass(frozen=True, slots=True)  # (slots: a cold open of a million records keeps 100,000 headers)
class BatchHeader:
    vault_id: bytes
    compartment_id: bytes
    writer_id: bytes
    seq: int
    prev: bytes | None
    deps: tuple[bytes, ...]
    frontier: Mapping[bytes, int] = field(hash=False)  # (a dict; packed in a cold load's lean views)
    records: Sequence[bytes]  # (a tuple as written, RecordIds as decoded)
    ts: int
    sig_algs: tuple[int, ...] = (SIG_ED25519,)
    # compartment id -> writer id -> highest seq the writer had seen there (control batches only)
    heads: dict[bytes, dict[bytes, int]] = field(default_factory=dict, hash=False)

    def to_map(self) -> dict[int, Any]:
        m: dict[int, Any] = {
            H.V: 1,
            H.VAULT: self.vault_id,
            H.COMPARTMENT: self.compartment_id,
            H.WRITER: self.writer_id,
            H.SEQ: self.seq,
            H.PREV: self.prev,
            H.DEPS: list(self.deps),
            H.FRONTIER: dict(self.frontier),
            H.RECORDS: list(self.records),
            H.TS: self.ts,
            H.SIG_ALGS: list(self.sig_algs),
        }
        if self.heads:
            m[H.HEADS] = {c: dict(per) for c, per in self.heads.items()}
        return m

    def encode(self) -> bytes:
        return encoding.encode(self.to_map())


# One object for each id that headers repeat (the vault's, a compartment's, a writer's and those of the
# writers a frontier lists) and each list of signature algorithms they name, not a copy in each header: a
# cold open of a million records keeps 100,000 headers (40 MB of copies of ids, 4.8 MB of the lists); and
# for each segment's (compartment, epoch) (camillo.session.segread: 100,000 segments in a loose vault of a
# million records, 15 MB) and the writers of each packed frontier (camillo.session.views.PackedFrontier).
# Bounded: values a hostile folder invents only empty it sooner.
_SHARED: dict[Any, Any] = {}
_SHARED_MAX = 4096
_V = TypeVar("_V", bound=Hashable)


def shared(value: _V) -> _V:
    """One object for each value (an id, a list of algorithms, a segment's compartment and epoch, the
    writers a packed frontier names): the one held, or this one, now held."""
    held = _SHARED.get(value)
    if held is None:
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        held = _SHARED[value] = value
    return held


def _decoded_header(m: dict[int, Any], deps: Sequence[bytes], frontier: dict[bytes, int], records: Iterable[bytes],
                    heads: dict[bytes, dict[bytes, int]]) -> BatchHeader:
    """A header decoded from map ``m`` (checked, or stored by this installation), its repeated ids shared
    and its record ids held as one byte string."""
    return _shared_header(m[H.VAULT], m[H.COMPARTMENT], m[H.WRITER], m[H.SEQ], m.get(H.PREV), deps, frontier,
                          RecordIds(records), m[H.TS], m[H.SIG_ALGS], heads)


def _shared_header(vault: bytes, comp: bytes, writer: bytes, seq: int, prev: bytes | None, deps: Sequence[bytes],
                   frontier: dict[bytes, int], records: RecordIds, ts: int, algs: Sequence[int],
                   heads: dict[bytes, dict[bytes, int]]) -> BatchHeader:
    """A decoded header's fields as one header, the ids headers repeat shared (:func:`shared`), and
    one empty map for the heads that all but control batches' headers lack (:data:`_NO_HEADS`)."""
    return BatchHeader(shared(vault), shared(comp), shared(writer), seq, prev, tuple(deps),
                       {shared(w): s for w, s in frontier.items()}, records, ts, shared(tuple(algs)), heads or _NO_HEADS)


# The heads of every decoded header that has none (a header's maps are never changed once it is made): a
# cold open of a million records keeps 100,000 headers, and an empty map each was 6.4 MB.
_NO_HEADS: dict[bytes, dict[bytes, int]] = {}


def _header_from_map(m: Any) -> BatchHeader:
    version = m.get(H.V) if isinstance(m, dict) else None
    if type(version) is int and version > 1:
        raise UnsupportedVersion(f"a batch of version {version}; a newer Camillo is required to read it")
    if not isinstance(m, dict) or type(version) is not int or version != 1:
        raise CanonicalError("batch header must be a map with version 1")

    def need(key: int, typ: type, what: str) -> Any:
        v = m.get(key)
        if type(v) is not typ:
            raise CanonicalError(f"batch header field {what} is missing or has the wrong type")
        return v

    vault = need(H.VAULT, bytes, "vault_id")
    comp = need(H.COMPARTMENT, bytes, "compartment_id")
    writer = need(H.WRITER, bytes, "writer_id")
    seq = need(H.SEQ, int, "seq")
    if len(vault) != 32 or len(comp) != 16 or len(writer) != 32 or not 1 <= seq < 2**63:
        raise CanonicalError("batch header ids or seq are malformed")
    prev = m.get(H.PREV)
    if seq == 1:
        if prev is not None:
            raise CanonicalError("the first batch of a writer (seq 1) must have prev = null")
    elif not isinstance(prev, bytes) or len(prev) != 32:
        raise CanonicalError("a batch with seq > 1 must name its prev batch")
    deps = _id_list(need(H.DEPS, list, "deps"), "deps", sorted_unique=True)
    if len(deps) > MAX_DEPS:
        raise CanonicalError(f"a batch names more than {MAX_DEPS} deps")
    frontier = need(H.FRONTIER, dict, "frontier")
    if len(frontier) > MAX_FRONTIER:
        raise CanonicalError(f"a batch frontier lists more than {MAX_FRONTIER} writers")
    for w, s in frontier.items():
        if not isinstance(w, bytes) or len(w) != 32 or type(s) is not int or s < 0:
            raise CanonicalError("frontier entries are writer_id -> seq")
    if frontier.get(writer) != seq - 1:
        raise CanonicalError("a batch frontier must list its own writer at seq - 1")
    records = need(H.RECORDS, list, "records")
    if not 0 < len(records) <= BATCH_MAX_RECORDS:
        raise CanonicalError(f"a batch lists 1 to {BATCH_MAX_RECORDS} records")
    _id_list(records, "records", sorted_unique=False, limit=BATCH_MAX_RECORDS)
    if len(set(records)) != len(records):
        raise CanonicalError("a batch lists the same record twice")
    ts = need(H.TS, int, "ts")
    if ts < 0:
        raise CanonicalError("batch header field ts must be an unsigned integer")
    algs = need(H.SIG_ALGS, list, "sig_algs")
    if not algs or any(type(a) is not int or a < 0 for a in algs):
        raise CanonicalError("sig_algs must list algorithm ids")
    heads = _heads(m.get(H.HEADS))
    return _decoded_header(m, deps, frontier, records, heads)


MAX_HEADS_COMPARTMENTS = 256


def _heads(value: Any) -> dict[bytes, dict[bytes, int]]:
    """Header key 11 (optional): compartment id -> writer id -> seq, each inner map a frontier."""
    if value is None:
        return {}
    if not isinstance(value, dict) or len(value) > MAX_HEADS_COMPARTMENTS:
        raise CanonicalError(f"batch header field heads must map at most {MAX_HEADS_COMPARTMENTS} compartments")
    out: dict[bytes, dict[bytes, int]] = {}
    for c, per in value.items():
        if not isinstance(c, bytes) or len(c) != 16 or not isinstance(per, dict) or len(per) > MAX_FRONTIER:
            raise CanonicalError("batch header field heads maps compartment ids to frontiers")
        for w, s in per.items():
            if not isinstance(w, bytes) or len(w) != 32 or type(s) is not int or not 0 <= s < 2**63:
                raise CanonicalError("heads entries are writer_id -> seq")
        out[c] = dict(per)
    return out


@dataclass(frozen=True, eq=False, slots=True)
class Batch:
    """A decoded batch.  ``records[i]`` is None where erasure removed the record's bytes.  The batch a
    view keeps once its segment was read holds neither its records' bytes (all None) nor its header's
    (``header_bytes`` empty): the local state holds them (camillo.session.reader.Reader.add_segment)."""

    id: bytes
    header_bytes: bytes
    header: BatchHeader
    sigs: tuple[tuple[int, bytes], ...]
    records: tuple[bytes | None, ...]

    def to_cbor(self) -> list[Any]:
        return [self.header_bytes, [list(s) for s in self.sigs], list(self.records)]


BATCH_SIG_LABEL = "vmem/v1/batch-sig"


def batch_signing_message(batch_id: bytes) -> bytes:
    return labelled(BATCH_SIG_LABEL, batch_id)


def make_batch(header: BatchHeader, records: Sequence[bytes], signer: SigningKey) -> Batch:
    header_bytes = header.encode()
    bid = ids.batch_id(header_bytes)
    sig = signer.sign(batch_signing_message(bid))
    batch = Batch(bid, header_bytes, header, ((signer.alg, sig),), tuple(records))
    size = len(encoding.encode(batch.to_cbor()))
    if size > BATCH_MAX_BYTES:
        raise LimitExceeded(f"this batch is {size} bytes; a batch is limited to {BATCH_MAX_BYTES} bytes")
    return batch


def batch_from_cbor(item: Any) -> Batch:
    """Check a batch's structure (not its signature, which needs the roster)."""
    if not isinstance(item, list) or len(item) != 3:
        raise CanonicalError("a batch is [header, sigs, records]")
    header_bytes, sigs, records = item
    if not isinstance(header_bytes, bytes) or not isinstance(sigs, list) or not isinstance(records, list):
        raise CanonicalError("a batch is [header bytes, sigs, records]")
    header = _header_from_map(encoding.decode(header_bytes, "batch header"))
    if len(records) != len(header.records):
        raise CanonicalError("a batch carries a different number of records than its header lists")
    if not sigs or len(sigs) > 4:
        raise CanonicalError("a batch carries 1 to 4 signatures")
    parsed_sigs = []
    for s in sigs:
        if (not isinstance(s, list) or len(s) != 2 or type(s[0]) is not int or not 0 <= s[0] <= 255
                or not isinstance(s[1], bytes)):
            raise CanonicalError("a batch signature is [alg, signature]")
        parsed_sigs.append((s[0], s[1]))
    for r in records:
        if r is not None and not isinstance(r, bytes):
            raise CanonicalError("batch records are byte strings or null")
    return Batch(ids.batch_id(header_bytes), header_bytes, header, tuple(parsed_sigs), tuple(records))


def cached_batch(batch_id: bytes, header_bytes: bytes, sigs: Sequence[Sequence[Any]]) -> Batch:
    """A batch rebuilt from the local state, its record bytes left out (None): its header was checked
    strictly when its segment was read, and the local state's pages are authenticated (a damaged
    database is refused whole), so the header is decoded without checking it again, and its id is
    the one stored beside it.  A header that is not what this installation stored raises KeyError
    or TypeError: the caller rebuilds the local state."""
    m = cbor2.loads(header_bytes)
    heads = m.get(H.HEADS)
    frontier = m[H.FRONTIER]
    if type(frontier) is not dict or type(m[H.SEQ]) is not int:
        raise TypeError("a stored batch header is not one this installation wrote")
    header = _decoded_header(m, m[H.DEPS], frontier, m[H.RECORDS], {c: dict(per) for c, per in heads.items()} if heads else {})
    return Batch(batch_id, header_bytes, header, tuple((a, s) for a, s in sigs), (None,) * len(header.records))


# A checked header's fields as a record-check child sends them back (camillo.recordcheck: ``marshal``
# carries bytes, ints, None, tuples and dicts): vault, compartment, writer, seq, prev, deps, frontier,
# the record ids joined, ts, sig_algs, heads.
HeaderParts = tuple[bytes, bytes, bytes, int, "bytes | None", tuple[bytes, ...], dict[bytes, int], bytes, int,
                    tuple[int, ...], dict[bytes, dict[bytes, int]]]


def header_parts(h: BatchHeader) -> HeaderParts:
    """What :func:`checked_batch` rebuilds ``h`` from (``h`` decoded by :func:`batch_from_cbor`)."""
    recs = bytes(h.records) if isinstance(h.records, RecordIds) else b"".join(h.records)
    frontier = h.frontier if type(h.frontier) is dict else dict(h.frontier)
    return (h.vault_id, h.compartment_id, h.writer_id, h.seq, h.prev, h.deps, frontier, recs, h.ts, h.sig_algs, h.heads)


def checked_batch(bid: bytes, item: Sequence[Any], parts: HeaderParts) -> Batch:
    """A batch of a segment whose payload a record-check child decoded strictly
    (:func:`camillo.segments.decode_payload`), rebuilt here from ``item``, its entry in a plain
    (not checked again) decoding of the same payload, and the id and header fields the child sent:
    the header is neither decoded nor checked a second time (about 40 µs a batch)."""
    header_bytes, sigs, raws = item
    vault, comp, writer, seq, prev, deps, frontier, recs, ts, algs, heads = parts
    header = _shared_header(vault, comp, writer, seq, prev, deps, frontier, RecordIds(joined=recs), ts, algs, heads)
    return Batch(bid, header_bytes, header, tuple((a, s) for a, s in sigs), tuple(raws))


def verify_batch_signature(batch: Batch, public: bytes, algs: Sequence[int] = (SIG_ED25519,)) -> bool:
    """Every algorithm the writer's certificate lists must be present and valid (no stripping)."""
    if tuple(batch.header.sig_algs) != tuple(algs):
        return False
    if ids.writer_id(algs[0], public) != batch.header.writer_id:
        return False
    have = dict(batch.sigs)
    message = batch_signing_message(batch.id)
    return all(a in have and verify_signature(a, public, message, have[a]) for a in algs)


PARALLEL_SIGNATURES = 64  # verify_batch_signatures uses every core from this many batches on


def verify_batch_signatures(batches: Sequence[tuple[Batch, bytes]]) -> list[bool]:
    """:func:`verify_batch_signature` of each (batch, writer's public key), on every core when
    there are many (Ed25519 verification releases the interpreter lock: 5,000 batches of a merge,
    0.5 s on one core).  Any thread; the pool's threads are joined before it returns."""
    workers = min(os.cpu_count() or 1, 8)
    if workers < 2 or len(batches) < PARALLEL_SIGNATURES:
        return [verify_batch_signature(b, pk) for b, pk in batches]
    step = -(-len(batches) // workers)
    parts = [batches[i : i + step] for i in range(0, len(batches), step)]

    def verify(part: Sequence[tuple[Batch, bytes]]) -> list[bool]:
        return [verify_batch_signature(b, pk) for b, pk in part]

    # The calling thread verifies the first part while the pool does the rest: a pool started
    # lazily could otherwise hand every part to its first thread when that one is done before the
    # next is submitted (the calling thread waiting out a switch interval).
    with concurrent.futures.ThreadPoolExecutor(len(parts) - 1) as pool:
        rest = [pool.submit(verify, part) for part in parts[1:]]
        first = verify(parts[0])
        return first + [ok for f in rest for ok in f.result()]
