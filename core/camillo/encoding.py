"""Deterministic CBOR: the only encoding VMEM uses for structured data (spec §2).

The profile is RFC 8949 §4.2.1 core deterministic encoding restricted to: unsigned and negative
integers (64-bit), byte strings, UTF-8 text strings, arrays, maps, ``false``, ``true`` and ``null``.
No floats, no tags, no ``undefined``, no indefinite lengths, no duplicate keys.  Within one map all
keys share one major type (format maps use small unsigned integers, value maps use text, id maps
such as a frontier use byte strings), which
makes RFC 8949 bytewise key order and cbor2's ``canonical=True`` length-first order identical.

Decoding is strict: the bytes are decoded, every item's type is checked and every map's keys are
checked to come in deterministic order (as read: cbor2 keeps a map's keys in the order of the
bytes), and the value is encoded again, keys in the order read, and compared with the input byte
for byte.  That comparison rejects duplicate keys (which cbor2 silently collapses), non-shortest
integers and lengths, indefinite lengths and trailing bytes; with the keys' order checked, the
bytes are then the value's deterministic encoding.  (Encoding in the order read, instead of sorting
every map again, is a third of the cost of decoding a record: a cold open decodes a million of
them; ``test_encoding`` checks on random values that both encodings agree where the keys are in
order.)  Nesting is bounded by cbor2 (400 levels) and by :data:`MAX_DEPTH` below.

Pure functions; any thread may call them.
"""

from __future__ import annotations

from typing import Any, NoReturn

import cbor2

from .errors import CanonicalError

MAX_DEPTH = 64
INT_MIN = -(2**64)  # the integers the profile holds (spec §2.1)
INT_MAX = 2**64 - 1

Value = None | bool | int | bytes | str | list["Value"] | dict[Any, "Value"]


_KEY_KINDS = {int: "uint", str: "text", bytes: "bytes"}


_NOT_DETERMINISTIC = ("not deterministic CBOR (duplicate or unsorted keys, non-shortest form, indefinite length "
                      "or trailing bytes)")


def _check(obj: Any, depth: int, path: str, ordered: bool = False) -> None:
    # ``depth`` counts the arrays and maps around ``obj``; an array or map is itself one more level.
    # ``ordered``: every map's keys must also come in deterministic order (a decoded value, whose
    # maps keep the order of its bytes).  (The leaves of an array or a map are checked in its loop,
    # not by a call each: a record is a map of some twenty of them, and a cold open checks a million
    # records.)
    t = type(obj)
    if t is dict or t is list:
        if depth >= MAX_DEPTH:
            raise CanonicalError(f"{path}: nested more than {MAX_DEPTH} levels")
        key_type: type | None = None
        last: Any = None
        for k, v in obj.items() if t is dict else enumerate(obj):
            if t is dict:
                kt = type(k)
                if kt is int and k < 0:
                    raise CanonicalError(f"{path}: negative map key")
                if kt is not key_type:
                    if kt not in _KEY_KINDS:
                        raise CanonicalError(f"{path}: map keys must be unsigned integers, text or byte strings")
                    if key_type is not None:
                        raise CanonicalError(f"{path}: map mixes key types ({_KEY_KINDS[key_type]} and "
                                             f"{_KEY_KINDS[kt]})")
                    key_type = kt
                if ordered:
                    # Keys of one major type sort by their encoding: shorter first (an integer's value,
                    # a string's length in bytes), then bytewise (code point order is UTF-8's byte order).
                    order = k if kt is int else _string_order(k)
                    if last is not None and order <= last:
                        raise CanonicalError(f"{path}: {_NOT_DETERMINISTIC}")
                    last = order
            tv = type(v)
            if tv is str or tv is bytes or tv is bool or v is None:
                continue
            if tv is int:
                if not INT_MIN <= v <= INT_MAX:
                    raise CanonicalError(f"{path}: integer outside 64 bits")
                continue
            _check(v, depth + 1, path, ordered)
        return
    if t is int:
        if not INT_MIN <= obj <= INT_MAX:
            raise CanonicalError(f"{path}: integer outside 64 bits")
        return
    if t is bytes or t is str or t is bool or obj is None:
        return
    if t is float:
        raise CanonicalError(f"{path}: floating-point numbers are not allowed")
    raise CanonicalError(f"{path}: {t.__name__} (a CBOR tag or simple value) is not allowed")


def _string_order(k: Any) -> tuple[int, Any]:
    return len(k) if type(k) is bytes or k.isascii() else len(k.encode()), k


def check_value(obj: Any, path: str = "value") -> None:
    """Raise CanonicalError unless ``obj`` is inside the VMEM CBOR profile."""
    _check(obj, 0, path)


def encode(obj: Any) -> bytes:
    """Encode ``obj`` deterministically.  Raises CanonicalError for values outside the profile."""
    _check(obj, 0, "value")
    return cbor2.dumps(obj, canonical=True)


def encode_own(obj: Any) -> bytes:
    """:func:`encode` of a value this installation built from values inside the profile (its device
    state, whose stored copy :func:`decode` checked when it was read), without walking it first: an
    append saves it once, and the walk was a quarter of that save."""
    return cbor2.dumps(obj, canonical=True)


def _reject_tag(*args: Any) -> NoReturn:
    """cbor2's hook for unknown tags (5.x passes (decoder, tag), 6.x passes (tag, immutable))."""
    tag = next((a for a in args if isinstance(a, cbor2.CBORTag)), None)
    raise CanonicalError(f"CBOR tag {tag.tag if tag is not None else '?'} is not allowed")


def decode_checked(data: bytes) -> Any:
    """Decode bytes that :func:`decode` accepted (or :func:`encode` produced) before, without
    checking them again: a fresh copy of the same value."""
    return cbor2.loads(data)


def _loads(data: bytes, what: str, max_len: int | None) -> Any:
    """cbor2's reading of exactly one item (tags refused), not yet checked against the profile."""
    if max_len is not None and len(data) > max_len:
        raise CanonicalError(f"{what}: {len(data)} bytes is larger than the limit of {max_len}")
    if not data:
        raise CanonicalError(f"{what}: empty")
    try:
        return cbor2.loads(data, tag_hook=_reject_tag)
    except CanonicalError as exc:
        message = f"{what}: {exc.message}"
    except (cbor2.CBORDecodeError, ValueError, TypeError, OverflowError, RecursionError, MemoryError) as exc:
        cause = exc.__cause__ or exc.__context__
        message = f"{what}: {cause.message}" if isinstance(cause, CanonicalError) else f"{what}: not valid CBOR ({exc})"
    # raised outside the handler so that no context is chained: cbor2's errors (a UnicodeDecodeError
    # above all) hold the bytes they failed on, which may be a decrypted secret's neighbours
    raise CanonicalError(message)


def _same_encoding(obj: Any, data: bytes, what: str) -> None:
    # (encoded in the order read: the caller checked that every map's keys are in order)
    if cbor2.dumps(obj) != data:
        raise CanonicalError(f"{what}: {_NOT_DETERMINISTIC}")


def decode(data: bytes, what: str = "CBOR item", *, max_len: int | None = None) -> Any:
    """Decode strictly: exactly one item, inside the profile, and canonical."""
    obj = _loads(data, what, max_len)
    _in_profile(obj, what)
    _same_encoding(obj, data, what)
    return obj


def _in_profile(obj: Any, what: str) -> None:
    """A decoded value's check: inside the profile, and every map's keys in deterministic order."""
    try:
        _check(obj, 0, what, True)
    except CanonicalError as exc:
        raise CanonicalError(exc.message) from None


def decode_rows(data: bytes, what: str, width: int, *, max_len: int | None = None) -> Any:
    """Decode strictly, like :func:`decode`, a value expected to be an array of rows of ``width``
    integers and text strings (a pack's index: thousands of rows, checked here in one pass where
    the generic walk costs several times more).  A value of any other shape is checked as
    :func:`decode` checks it and returned for the caller to refuse."""
    obj = _loads(data, what, max_len)
    if not _rows_in_profile(obj, width):
        _in_profile(obj, what)
    _same_encoding(obj, data, what)
    return obj


def _rows_in_profile(obj: Any, width: int) -> bool:
    if type(obj) is not list:
        return False
    for row in obj:
        if type(row) is not list or len(row) != width:
            return False
        for item in row:
            t = type(item)
            if not (t is str or (t is int and INT_MIN <= item <= INT_MAX)):
                return False
    return True
