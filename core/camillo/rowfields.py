"""What the local state stores of a record beside its bytes, read from its decoded map.

One function, :func:`record_fields`, used by the state's staging (:meth:`camillo.state.State.stage`)
and by the record-check child (:mod:`camillo.recordcheck`), which decodes every record of a large
read anyway and sends these fields back with its verdict: the reading process then stages the
record from them without decoding it a second time (a cold open of a million records decoded each
record in both processes).  The child runs this same code, so a record is staged the same either way.

Pure functions; any thread or process may call them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .records import CONTROL_KINDS, F, Kind
from .recordviews import shown_ts, value_text

_KIND, _AUTHOR, _KEY, _VALUE, _CLASS = F.KIND, F.AUTHOR, F.KEY, F.VALUE, F.CLASS
_PRED, _SOURCES, _TARGET, _META, _TS, _TYPE = F.PRED, F.SOURCES, F.TARGET, F.META, F.TS, F.TYPE
_PUT, _NOTE = int(Kind.PUT), int(Kind.NOTE)

# (author, kind, type, key, class, shown ts, conversation, role, text, pred, sources, target, import key):
# a plain tuple of plain values (bytes, text, integers, lists of ids, None), which ``marshal`` carries
Fields = tuple[bytes, int, "str | None", "str | None", "int | None", "int | None", "str | None", "str | None", str,
               "list[bytes] | None", "list[bytes] | None", "bytes | None", "str | None"]
KIND_AT = 1  # where the record's kind is in Fields


def record_fields(m: dict[int, Any]) -> Fields:
    """The fields of a decoded and checked record's map (``decode_record``'s) that the local state
    stores: its text is what the full-text index reads (a conversation's title, else the value's
    text), its conversation and role those of a message."""
    kind, value, rtype = m[_KIND], m.get(_VALUE), m.get(_TYPE)
    conversation = role = None
    text = value_text(value) if kind in (_PUT, _NOTE) else ""
    if isinstance(value, dict):
        c = value.get("conversation")
        conversation = c if isinstance(c, str) else None
        r = value.get("role")
        role = r if isinstance(r, str) else None
        if rtype == "conversation" and isinstance(title := value.get("title"), str):
            text = title
    meta = m.get(_META)
    import_key = meta.get("import") if meta else None
    return (m[_AUTHOR], kind, rtype, m.get(_KEY), m.get(_CLASS), shown_ts(m.get(_TS)), conversation, role, text,
            m.get(_PRED), m.get(_SOURCES), m.get(_TARGET), import_key if isinstance(import_key, str) else None)


def plain_fields(raws: Sequence[bytes | None], read: list[Fields] | None) -> list[Fields | None] | None:
    """What the record-check child read of each of a batch's records (``raws``; None where erased),
    when it checked every one and none is a control record (the roster needs those decoded); else
    None: the batch's records are decoded by the reader."""
    if read is None or len(read) != sum(raw is not None for raw in raws):
        return None
    if any(f[KIND_AT] in CONTROL_KINDS for f in read):
        return None
    at = iter(read)
    return [None if raw is None else next(at) for raw in raws]
