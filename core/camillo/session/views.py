"""Batch views read back from the local state database, decoded when first used.

A warm open builds one view per batch of the vault (100,000 at a million records).  What the roster
and the flags need of every batch is kept beside it in the database and read at once: its id,
segment, epoch, writer, seq, compartment, signature and acceptance flags, and whether it holds a
control record (its stored control records are an array of nulls when it holds none, recognised
without decoding).  Its header and signatures (73 MB at a million records) are read from the
database and decoded the first time something asks for them (``fetch``; the reader reads the rest at
once after a number of such reads, for a pass over every batch), its control records likewise: a
batch the session never looks at again is never read whole.  Control batches (a few hundred) are decoded at
once, since the roster reads every one.

The bytes come from this installation's own, authenticated database (a page that does not
authenticate is refused whole); one that does not decode is reported as a damaged local state
(:class:`~camillo.cache.DatabaseError`, which the session turns into "rebuilt from the vault").

Confined to the thread that owns the vault.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from typing import Any

import cbor2

from .. import ids
from ..cache import DatabaseError
from ..control import BatchView
from ..errors import VaultError
from ..records import Batch, BatchHeader, Record, cached_batch, validated_record

_NULL = 0xF6  # CBOR null


def plain_count(controls: bytes) -> int | None:
    """How many records a batch holds when its stored control records are all null (a CBOR array
    of nulls: it holds no control record); None otherwise."""
    if not controls:
        return None
    first = controls[0]
    if 0x80 <= first <= 0x97:
        n, at = first - 0x80, 1
    elif first in (0x98, 0x99, 0x9A):
        at = 1 + (1 << (first - 0x98))
        n = int.from_bytes(controls[1:at], "big")
    else:
        return None
    return n if len(controls) == at + n and controls.count(_NULL, at) == n else None


_NONES: dict[int, tuple[None, ...]] = {}


def _nones(n: int) -> tuple[None, ...]:
    """The records of a batch holding ``n`` and no control record, as the roster and the log see
    them: one shared, immutable tuple for each ``n`` (a list per view was 13 MB at a million
    records); nothing changes a view's records."""
    held = _NONES.get(n)
    if held is None:
        held = _NONES[n] = (None,) * n
    return held


class CachedView(BatchView):
    """A :class:`~camillo.control.BatchView` of a batch stored in the local state: the attributes
    every batch is asked for are set now, ``batch``, ``header`` and ``records`` when first read."""

    def __init__(self, bid: bytes, segment: str, epoch_id: bytes, writer_id: bytes, seq: int, compartment_id: bytes,
                 fetch: Callable[[bytes], bytes], controls: bytes, flags: int) -> None:
        # (no dataclass __init__: nothing is decoded yet; the stored header is fetched when first asked for)
        self.id, self.segment, self.epoch_id, self.writer_id = bid, segment, epoch_id, writer_id
        self.seq, self.compartment_id = seq, compartment_id
        self.sig_ok, self.vouched, self.signed = bool(flags & 1), bool(flags & 2), False
        self.stored_flags = flags
        self._fetch, self._stored = fetch, b""
        plain = plain_count(controls)
        if plain is not None:
            self.has_control, self._controls = False, b""
            self.__dict__["records"] = _nones(plain)  # what ``records`` would decode
        else:
            self._controls = controls
            self.has_control = any(r is not None for r in self.records)

    # (cached_property: decoded once, then a plain attribute of the view, read as fast as any other)
    @cached_property
    def batch(self) -> Batch:  # type: ignore[override]
        stored, self._stored = self._stored or self._fetch(self.id), b""
        try:
            header_bytes, sigs = cbor2.loads(stored)
            return cached_batch(self.id, header_bytes, sigs)
        except (cbor2.CBORError, ValueError, TypeError, KeyError) as exc:
            raise DatabaseError(f"a batch stored in the local state does not decode ({exc})") from None

    @property
    def undecoded(self) -> bool:
        """Its stored header is neither decoded nor held yet."""
        return "batch" not in self.__dict__ and not self._stored

    def hold(self, stored: bytes) -> None:
        """Keep its stored header and signatures (read with many others at once) until decoded."""
        self._stored = stored

    @cached_property
    def header(self) -> BatchHeader:  # type: ignore[override]
        return self.batch.header

    @cached_property
    def records(self) -> list[Record | None]:  # type: ignore[override]
        try:
            raws: list[Any] = cbor2.loads(self._controls)
            return [None if raw is None else validated_record(raw, ids.record_id(raw)) for raw in raws]
        except (cbor2.CBORError, ValueError, TypeError, VaultError) as exc:
            raise DatabaseError(f"a batch stored in the local state does not decode ({exc})") from None
