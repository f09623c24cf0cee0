"""The roster a warm open computed, kept in the local state for the next warm open of the same batches.

A warm open of an unchanged folder computes the roster from the batches that can move it (those
holding a control record, and those not accepted: :data:`camillo.cache.SPECIAL_BATCHES`) and takes
the stored state when it is the roster the state was computed with (:func:`camillo.session.resume.
take_stored`).  At a million records that is 218 batches whose headers and control records are
decoded and whose rules are applied twice (a revocation moves the fixpoint once more): about 40 ms of
a 200 ms open, and the same result every time nothing changed.

The roster is a function of those batches alone: each one's id is the hash of its header, which lists
its records' ids, and the builder's only other input is each batch's stored flags (whether its
signature verified, whether a compaction vouched for it).  So the memo keeps one roster in
``cache_meta`` under the digest of the vault id and of every such batch's id with its flags (:func:`key`),
written when a warm open computed it and took the stored state with it; an open whose batches and
flags give the same digest takes it instead of computing it.  Anything else (a batch added, gone or
accepted since, a flag changed, another version of this code) gives another digest, or another
layout (:data:`VERSION` and the shape of the roster's classes are in the digest), and the roster is
computed again.

The encoding is CBOR over the roster's dataclasses, driven by their type annotations: a dataclass is
the list of its fields in order, a mapping the list of its pairs, a record its exact bytes (decoded
again without its checks: it was checked when read from the vault).  Nothing secret is in it (public
keys, names, ids).  The memo lives in the local state, this installation's own database, encrypted and
authenticated page by page (:mod:`camillo.cache`): trusting it is the trust a warm open already puts in
the stored flags.  What does not decode as the annotations say is not taken (the roster is computed).

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import types
import typing
from collections.abc import Callable, Iterable
from typing import Any

import cbor2

from .. import ids
from ..cache import Connection
from ..control import Roster
from ..primitives import sha256
from ..records import Record, RecordIds, validated_record

VERSION = 1  # raised when the builder's rules change what it computes from the same batches
META_KEY = "roster_kept"  # (cache_meta's "roster" is the fingerprint the state was computed with)

_hints: dict[type, list[tuple[str, Any]]] = {}


def _fields(cls: type) -> list[tuple[str, Any]]:
    """The fields a dataclass is encoded by, with their resolved annotations (a callable, such as
    the roster's signature checker, is not data: the caller sets it)."""
    got = _hints.get(cls)
    if got is None:
        hints = typing.get_type_hints(cls)
        got = _hints[cls] = [(f.name, hints[f.name]) for f in dataclasses.fields(cls)
                             if typing.get_origin(hints[f.name]) is not Callable]
    return got


def _shape(hint: Any, seen: set[type]) -> str:
    """The layout the annotations give (part of the memo's key: a roster class with another field
    is another layout, and no memo of the old one is taken)."""
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        if hint in seen:
            return hint.__name__
        seen.add(hint)
        return hint.__name__ + "(" + ",".join(f"{n}:{_shape(h, seen)}" for n, h in _fields(hint)) + ")"
    args = typing.get_args(hint)
    name = getattr(hint, "__name__", None) or repr(typing.get_origin(hint) or hint)
    return name + ("[" + ",".join(_shape(a, seen) for a in args) + "]" if args else "")


@functools.cache
def shape() -> bytes:
    return _shape(Roster, set()).encode()


def key(vault_id: bytes, batches: Iterable[tuple[bytes, int]]) -> bytes:
    """The digest a roster is kept under: this code's layout, the vault id, and each (batch id,
    stored flags) the roster was computed from."""
    return sha256(b"camillo/local/roster\x00" + VERSION.to_bytes(4, "big") + sha256(shape()) + vault_id
                  + cbor2.dumps(sorted([b, f] for b, f in batches)))


def _encode(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str, bytes)):
        return int(value) if isinstance(value, enum.IntEnum) else value
    if isinstance(value, Record):
        return value.raw
    if isinstance(value, RecordIds):  # (one byte string, read back as one: a manifest's 100,000 batch ids)
        return bytes(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [_encode(getattr(value, name)) for name, _h in _fields(type(value))]
    if isinstance(value, dict):
        return [[_encode(k), _encode(v)] for k, v in value.items()]
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_encode(v) for v in value]
    raise TypeError(f"a roster holds a {type(value).__name__}, which the memo does not encode")


def encode(roster: Roster) -> bytes:
    return cbor2.dumps(_encode(roster))


_decoders: dict[Any, Callable[[Any], Any]] = {}


def _decoder(hint: Any) -> Callable[[Any], Any]:
    """A function that gives back the value of annotation ``hint`` that :func:`_encode` encoded
    (ValueError on anything else), made once per annotation."""
    got = _decoders.get(hint)
    if got is None:
        got = _decoders[hint] = _make_decoder(hint)
    return got


def _make_decoder(hint: Any) -> Callable[[Any], Any]:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Union or origin is types.UnionType:
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1 or len(args) != 2:
            raise TypeError(f"the roster holds a {hint!r}, which the memo does not decode")
        of = _decoder(inner[0])
        return lambda value: None if value is None else of(value)
    if origin is dict:
        kd, vd = _decoder(args[0]), _decoder(args[1])
        return lambda value: {kd(k): vd(v) for k, v in _pairs(value)}
    if origin in (list, set, frozenset):
        make, ed = origin, _decoder(args[0])
        return lambda value: make(ed(v) for v in _items(value))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        ed = _decoder(args[0])
        return lambda value: tuple(ed(v) for v in _items(value))
    if origin is tuple:
        eds = [_decoder(a) for a in args]
        return lambda value: tuple(d(v) for d, v in zip(eds, _sized(value, len(eds), "tuple"), strict=True))
    if hint is Record:
        return _record
    if hint is RecordIds:
        return RecordIds.from_bytes
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        cls, fields = hint, _fields(hint)
        names = [name for name, _h in fields]
        fds: list[Callable[[Any], Any]] = []  # (filled below: a dataclass may hold itself)

        def dataclass_of(value: Any) -> Any:
            items = _sized(value, len(names), cls.__name__)
            return cls(**{n: d(v) for n, d, v in zip(names, fds, items, strict=True)})
        _decoders[hint] = dataclass_of
        fds.extend(_decoder(h) for _n, h in fields)
        return dataclass_of
    if isinstance(hint, type) and issubclass(hint, enum.IntEnum):
        members = hint

        def member(value: Any) -> Any:
            if type(value) is not int:
                raise ValueError(f"a {members.__name__} that is not a number")
            return members(value)
        return member
    if hint in (bytes, str, bool, int):  # (a bool is not an int here)
        def plain(value: Any) -> Any:
            if type(value) is not hint:
                raise ValueError(f"a {type(value).__name__} where the roster holds a {hint.__name__}")
            return value
        return plain
    raise TypeError(f"the roster holds a {hint!r}, which the memo does not decode")


def _record(value: Any) -> Record:
    if type(value) is not bytes:
        raise ValueError("a record that is not bytes")
    return validated_record(value, ids.record_id(value))


def _sized(value: Any, n: int, what: str) -> list[Any]:
    items = _items(value)
    if len(items) != n:
        raise ValueError(f"a {what} of another length")
    return items


def _items(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise ValueError("a list expected")
    return value


def _pairs(value: Any) -> list[tuple[Any, Any]]:
    items = _items(value)
    if not all(isinstance(p, list) and len(p) == 2 for p in items):
        raise ValueError("a list of pairs expected")
    return [(k, v) for k, v in items]


def decode(data: bytes) -> Roster:
    """The roster :func:`encode` gave these bytes (ValueError: they do not decode as a roster)."""
    make = _decoder(Roster)  # (outside the try: a field the memo cannot decode is this code's error, raised)
    try:
        roster = make(cbor2.loads(data))
    except (cbor2.CBORError, TypeError, KeyError, ValueError) as exc:
        raise ValueError(f"the roster kept in the local state does not decode ({exc})") from None
    assert isinstance(roster, Roster)
    return roster


class RosterMemo:
    """The roster kept in the local state database ``db``, by :func:`key`."""

    def __init__(self, db: Connection) -> None:
        self.db = db

    def get(self, digest: bytes, verify: Callable[[int, bytes, bytes, bytes], bool]) -> Roster | None:
        """The roster kept under ``digest`` (checking signatures with ``verify``), or None."""
        row = self.db.execute("SELECT value FROM cache_meta WHERE key = ?", (META_KEY,)).fetchone()
        if row is None or not isinstance(row[0], bytes) or row[0][:32] != digest:
            return None
        try:
            roster = decode(row[0][32:])
        except ValueError:
            return None
        roster.verify = verify
        return roster

    def put(self, digest: bytes, roster: Roster) -> None:
        self.db.execute("INSERT OR REPLACE INTO cache_meta(key, value) VALUES(?, ?)",
                        (META_KEY, digest + encode(roster)))
