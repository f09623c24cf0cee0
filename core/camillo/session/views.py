"""Batch views read back from the local state database, made when first asked for, decoded when first used.

After a warm open the reader's batches are a :class:`BatchViews` mapping over the database: a view of a
batch is made from its row when something asks for it (an append's extension of the log asks for a
handful; a pass over every batch reads every row once).  A warm open of a folder that did not change
makes views only of the batches that can move the roster (those holding a control record, and those
not accepted: :meth:`BatchViews.special`, an index of the database), not of the 100,000 others at a
million records.  What the roster and the flags need of a batch is kept beside it in the database and
read with its row: its id, segment, epoch, writer, seq, compartment, signature and acceptance flags, and
whether it holds a control record (its stored control records are an array of nulls when it holds none,
recognised without decoding).  Its header and signatures (73 MB at a million records) are read from the
database and decoded the first time something asks for them (``fetch``; the reader reads the rest at
once after a number of such reads, for a pass over every batch), its control records likewise.

A cold load keeps the views of the plain batches it reads (they are shed once the open is done) lean as
it goes (:func:`lean_views`): without their record ids, read back from the batch's stored row when asked
for (:class:`StoredIds`), and with the batch ids their headers name shared with those batches' own.

The bytes come from this installation's own, authenticated database (a page that does not
authenticate is refused whole); one that does not decode is reported as a damaged local state
(:class:`~camillo.cache.DatabaseError`, which the session turns into "rebuilt from the vault").

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import struct
from collections.abc import (
    Callable,
    ItemsView,
    Iterable,
    Iterator,
    Mapping,
    MutableMapping,
    Sequence,
    ValuesView,
)
from functools import cached_property
from typing import Any

import cbor2

from .. import ids
from ..cache import SPECIAL_BATCHES, Connection, DatabaseError
from ..control import BatchView
from ..errors import VaultError
from ..memos import SignatureMemo, Verify
from ..records import Batch, BatchHeader, H, Record, RecordIds, cached_batch, shared, validated_record

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


def nones(n: int) -> tuple[None, ...]:
    """The records of a batch holding ``n`` and no control record, as the roster and the log see
    them: one shared, immutable tuple for each ``n`` (a list per view was 13 MB at a million
    records); nothing changes a view's records."""
    held = _NONES.get(n)
    if held is None:
        held = _NONES[n] = (None,) * n
    return held


def stored_batch(bid: bytes, stored: bytes) -> Batch:
    """A batch from its stored header and signatures (``cache_batches.batch``): not checked again, this
    installation wrote them; one that does not decode is a damaged local state."""
    try:
        header_bytes, sigs = cbor2.loads(stored)
        return cached_batch(bid, header_bytes, sigs)
    except (cbor2.CBORError, ValueError, TypeError, KeyError) as exc:
        raise DatabaseError(f"a batch stored in the local state does not decode ({exc})") from None


def batch_times(db: Connection) -> Iterator[tuple[bytes, int]]:
    """Every stored batch's id and time (``cache_batches``), in one pass over the table that makes no view and
    keeps no header: what a list of the newest batches orders by (the activity view), a page of them decoded
    after.  A stored header that does not decode is a damaged local state."""
    for bid, stored in db.execute("SELECT id, batch FROM cache_batches"):
        try:
            header_bytes, _sigs = cbor2.loads(stored)
            ts = cbor2.loads(header_bytes)[H.TS]
        except (cbor2.CBORError, ValueError, TypeError, LookupError) as exc:
            raise DatabaseError(f"a batch stored in the local state does not decode ({exc})") from None
        yield bid, ts


class StoredIds(Sequence[bytes]):
    """The record ids of a plain batch a cold load read and stored, which its view keeps without them
    (:func:`lean_views`): read back from the batch's stored header when first asked for, then held.
    Nothing asks before the open sheds the view (:func:`~camillo.session.resume.shed_views`): the
    roster, the log and the validity pass need a plain batch's writer, place in its chain and
    frontier, not its record ids.  A sequence of the ids, equal to the tuple of them."""

    __slots__ = ("_bid", "_db", "_ids", "_n")

    def __init__(self, bid: bytes, n: int, db: Callable[[], Connection]) -> None:
        self._bid, self._n, self._db = bid, n, db
        self._ids: Sequence[bytes] | None = None

    def _read(self) -> Sequence[bytes]:
        if self._ids is None:
            row = self._db().execute("SELECT batch FROM cache_batches WHERE id = ?", (self._bid,)).fetchone()
            if row is None:
                raise DatabaseError("a batch read in this session is missing from the local state")
            self._ids = stored_batch(self._bid, row[0]).header.records
        return self._ids

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: Any) -> Any:
        return self._read()[i]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._read())

    def __contains__(self, rid: object) -> bool:
        return rid in self._read()

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, (RecordIds, StoredIds)) else other)

    def __hash__(self) -> int:
        return hash(tuple(self))


class PackedFrontier(Mapping[bytes, int]):
    """A plain batch's frontier as a lean view keeps it (:func:`lean_views`): its writers one tuple that
    the headers naming the same writers share, their seqs packed in one byte string, 8 bytes each (a
    dict and its numbers were about 250 bytes a batch: 25 MB at a million records).  A mapping equal to
    the dict it was made from; :func:`packed` leaves a frontier it cannot pack as it is."""

    __slots__ = ("_seqs", "_writers")

    def __init__(self, writers: tuple[bytes, ...], seqs: bytes) -> None:
        self._writers, self._seqs = writers, seqs

    def _values(self) -> tuple[int, ...]:
        return _PACKS[len(self._writers)].unpack(self._seqs)

    def __getitem__(self, writer: bytes) -> int:
        try:
            i = self._writers.index(writer)
        except ValueError:
            raise KeyError(writer) from None
        seq: int = _PACKS[1].unpack_from(self._seqs, 8 * i)[0]
        return seq

    def __contains__(self, writer: object) -> bool:
        return writer in self._writers

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._writers)

    def __len__(self) -> int:
        return len(self._writers)

    def items(self) -> ItemsView[bytes, int]:
        return dict(zip(self._writers, self._values(), strict=True)).items()

    def values(self) -> ValuesView[int]:
        return dict(zip(self._writers, self._values(), strict=True)).values()


_PACKED_MAX = 16  # writers a packed frontier holds at most (a lookup scans them; a longer one stays a dict)
_PACKS = [struct.Struct(f"<{n}Q") for n in range(_PACKED_MAX + 1)]


def packed(frontier: Mapping[bytes, int]) -> Mapping[bytes, int]:
    """A header's frontier packed (:class:`PackedFrontier`); as it is when packed already, empty, longer
    than :data:`_PACKED_MAX` writers, or naming a seq that 8 bytes do not hold."""
    n = len(frontier)
    if isinstance(frontier, PackedFrontier) or not 0 < n <= _PACKED_MAX:
        return frontier
    try:
        seqs = _PACKS[n].pack(*frontier.values())
    except struct.error:
        return frontier
    return PackedFrontier(shared(tuple(frontier)), seqs)  # (records.shared: one tuple for the same writers)


def lean_views(batches: Mapping[bytes, BatchView], added: Iterable[bytes], db: Callable[[], Connection]) -> None:
    """Keep the views of these plain batches, which a cold load read and whose rows it wrote, without
    their record ids (:class:`StoredIds`), with their frontiers packed (:class:`PackedFrontier`), and
    with the ids their headers name of batches held here (``prev``, ``deps``) shared with those
    batches' own: at a million records, 100,000 views held until the open sheds them: the open's peak,
    about 480 -> 435 MiB.  (Their signatures are kept: the roster verifies those of the batches no
    compaction vouches for, on a pool of threads.)"""
    held = batches.held if isinstance(batches, BatchViews) else batches
    for bid in added:
        view = held.get(bid)
        if view is None or type(view) is not BatchView:  # (a ReadView holds a control record: kept whole)
            continue
        h = view.header
        if isinstance(h.records, StoredIds):
            continue
        prev = held.get(h.prev) if h.prev is not None else None
        deps = tuple(d if (dep := held.get(d)) is None else dep.id for d in h.deps)
        header = BatchHeader(h.vault_id, h.compartment_id, h.writer_id, h.seq, h.prev if prev is None else prev.id,
                             deps, packed(h.frontier), StoredIds(bid, len(h.records), db), h.ts, h.sig_algs, h.heads)
        view.batch = Batch(bid, b"", header, view.batch.sigs, view.batch.records)
        view.header = header


class ReadView(BatchView):
    """A :class:`~camillo.control.BatchView` of a batch holding a control record, read from its segment
    in this session: its control records' inner signatures are checked with the local state's memo,
    so that those a cold open or a refresh verified are not verified again by the warm opens after
    it (at a million records the first warm open after one verified 50 again: 10 ms)."""

    __slots__ = ("_memo",)

    def __init__(self, batch: Batch, segment: str, epoch_id: bytes, records: list[Record | None],
                 memo: SignatureMemo) -> None:
        super().__init__(batch, segment, epoch_id, records)
        self._memo = memo

    def verifier(self) -> Verify:
        return self._memo.verify


class CachedView(BatchView):
    """A :class:`~camillo.control.BatchView` of a batch stored in the local state: the attributes
    every batch is asked for are set now, ``batch``, ``header`` and ``records`` when first read.  Its
    control records' inner signatures are checked with the state's memo of those verified before."""

    # (its own attributes in slots as the base's; ``__dict__`` only for what is decoded when first read)
    __slots__ = ("__dict__", "_controls", "_fetch", "_memo", "_stored")

    def __init__(self, bid: bytes, segment: str, epoch_id: bytes, writer_id: bytes, seq: int, compartment_id: bytes,
                 fetch: Callable[[bytes], bytes], controls: bytes, flags: int,
                 memo: SignatureMemo | None = None) -> None:
        # (no dataclass __init__: nothing is decoded yet; the stored header is fetched when first asked for)
        self.id, self.segment, self.epoch_id, self.writer_id = bid, segment, epoch_id, writer_id
        self.seq, self.compartment_id = seq, compartment_id
        self.sig_ok, self.vouched, self.signed = bool(flags & 1), bool(flags & 2), False
        self.stored_flags = flags
        self._fetch, self._stored = fetch, b""
        self._memo: SignatureMemo | None = None  # (set only on a view holding a control record)
        plain = plain_count(controls)
        if plain is not None:
            self.has_control, self._controls = False, b""
            self.__dict__["records"] = nones(plain)  # what ``records`` would decode
        else:
            self._controls = controls
            self.has_control = any(r is not None for r in self.records)
            self._memo = memo

    def verifier(self) -> Verify:
        return super().verifier() if self._memo is None else self._memo.verify

    # (cached_property: decoded once, then a plain attribute of the view, read as fast as any other)
    @cached_property
    def batch(self) -> Batch:  # type: ignore[override]
        stored, self._stored = self._stored or self._fetch(self.id), b""
        return stored_batch(self.id, stored)

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


# A batch's row as a view needs it (the covering index cache_batches_open answers it alone: the stored
# headers beside them in the table's pages are 73 MB at a million records).
ROW = "id, segment, epoch, controls, sig_ok, vouched, accepted, writer, seq, compartment"
Row = tuple[bytes, str, bytes, bytes, int, int, int, "bytes | None", "int | None", "bytes | None"]


def _flags(sig_ok: int, vouched: int, accepted: int) -> int:
    """A batch's stored flags as a view's ``stored_flags`` holds them."""
    return (1 if sig_ok else 0) | (2 if vouched else 0) | (4 if accepted else 0)


# The flags of the batches that can move the roster (the covering index cache_batches_special_flags answers it alone).
SPECIAL_FLAGS = ("SELECT id, sig_ok, vouched, accepted, writer IS NULL OR control IS NULL "
                 f"FROM cache_batches WHERE {SPECIAL_BATCHES}")


class BatchViews(MutableMapping[bytes, BatchView]):
    """The batches of a local state by id, as the reader's ``batches``: a view is made from its row
    when first asked for and kept (the roster's flags live on it); a pass over all of them
    (``values``, ``items``) reads every row once.  A warm open of an unchanged folder makes views
    only of the batches that can move the roster (:meth:`special`); the rest (100,000 at a million
    records) are made when something asks for them: the log's extension by an append asks for a
    handful.

    Views added here (batches read in this session) are kept as given; the caller writes their rows,
    and deletes the row of a view it removes.  Confined to the thread that owns the vault."""

    def __init__(self, db: Callable[[], Connection], fetch: Callable[[bytes], bytes]) -> None:
        self._db, self._fetch = db, fetch
        self.signatures = SignatureMemo(db)  # the signatures verified good, kept in the local state
        self.held: dict[bytes, BatchView] = {}
        self._gone: set[bytes] = set()  # removed here, their rows deleted by the caller
        self._count: int | None = None
        # one object for each of the few distinct (writer, epoch, compartment): every row brings its
        # own copy of each (at a million records the open's memory went from 294 to 230 MiB)
        self._combos: dict[tuple[bytes, bytes, bytes], tuple[bytes, bytes, bytes]] = {}
        self.filled: list[tuple[bytes, int, bytes, int, bytes]] = []  # rows of an older version completed
        self.every = False  # a view of every batch is held (a pass over all of them read every row)

    def _make(self, row: Row, *, keep: bool = True) -> BatchView:
        bid, segment, epoch, controls, sig_ok, vouched, acc, writer, seq, comp = row
        if writer is None or seq is None or comp is None:  # a state an older version wrote
            h = stored_batch(bid, self._fetch(bid)).header
            writer, seq, comp = h.writer_id, h.seq, h.compartment_id
            self.filled.append((writer, seq, comp, 0 if plain_count(controls) is not None else 1, bid))
        combo = self._combos.get((writer, epoch, comp))
        if combo is None:
            combo = self._combos[writer, epoch, comp] = (writer, epoch, comp)
        view = CachedView(bid, segment, combo[1], combo[0], seq, combo[2], self._fetch, controls,
                          _flags(sig_ok, vouched, acc), self.signatures)
        if keep:
            self.held[bid] = view
        return view

    def _views(self, where: str = "", args: tuple[object, ...] = ()) -> list[BatchView]:
        if self.every and not where:  # (the roster's fixpoint passes over every batch several times)
            return [v for b, v in self.held.items() if b not in self._gone]
        return self._of_rows(self._db().execute(f"SELECT {ROW} FROM cache_batches {where}", args).fetchall())

    def _of_rows(self, rows: list[Row]) -> list[BatchView]:
        held, gone, out = self.held, self._gone, []
        for row in rows:
            bid = row[0]
            if bid in gone:
                continue
            view = held.get(bid)
            out.append(view if view is not None else self._make(row))
        return out

    def special(self) -> dict[bytes, BatchView]:
        """The batches holding a control record or not accepted (cache.SPECIAL_BATCHES), by id, each
        with its stored header read in the same query (the roster decodes them all); a batch an older
        version stored, without its control flag, is among them and gets it."""
        rows = self._db().execute(f"SELECT {ROW}, control, batch FROM cache_batches WHERE {SPECIAL_BATCHES}").fetchall()
        views = self._of_rows([row[:-2] for row in rows])
        unset = {row[0] for row in rows if row[-2] is None}
        for view, row in zip(views, [row for row in rows if row[0] not in self._gone], strict=True):
            if isinstance(view, CachedView) and view.undecoded:
                view.hold(row[-1])
        if unset:
            self._db().executemany("UPDATE cache_batches SET control = ? WHERE id = ?",
                                   [(1 if v.has_control else 0, v.id) for v in views if v.id in unset])
        self.complete()
        return {v.id: v for v in views}

    def special_flags(self) -> list[tuple[bytes, int]] | None:
        """The ids of :meth:`special`'s batches with their stored flags (as a view's ``stored_flags``),
        read from the index alone, no view made; None when a row of an older version is among them
        (:meth:`special` completes it)."""
        rows = self._db().execute(SPECIAL_FLAGS).fetchall()
        if any(row[4] for row in rows):
            return None
        gone = self._gone
        return [(bid, _flags(s, v, a)) for bid, s, v, a, _ in rows if bid not in gone]

    def with_control(self) -> list[BatchView]:
        """The batches holding a control record, found among :meth:`special`'s (no view is made of a
        plain accepted batch: 100,000 at a million records)."""
        return [v for v in self.special().values() if v.has_control]

    def of_writers(self, writers: set[bytes]) -> list[BatchView]:
        """The batches these writers wrote (a few, for a credential that signs only control batches),
        and those whose writer a state of an older version did not store."""
        return self._views(f"WHERE writer IS NULL OR writer IN ({', '.join('?' * len(writers))})",
                           tuple(sorted(writers)))

    def complete(self) -> None:
        """Write the columns completed for rows an older version stored."""
        if self.filled:
            self._db().executemany("UPDATE cache_batches SET writer = ?, seq = ?, compartment = ?, control = ? "
                                   "WHERE id = ?", self.filled)
            self.filled = []

    def values(self) -> list[BatchView]:  # type: ignore[override]
        views = self._views()
        self.complete()
        self.every = True
        return views

    def items(self) -> list[tuple[bytes, BatchView]]:  # type: ignore[override]
        return [(v.id, v) for v in self.values()]

    def keys(self) -> list[bytes]:  # type: ignore[override]
        return [v.id for v in self.values()]

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.keys())

    @property
    def gone(self) -> set[bytes]:
        """The batches removed here (their segments went away)."""
        return self._gone

    def peek(self, bid: bytes) -> BatchView | None:
        """The view of this batch if one is held (none is made)."""
        return self.held.get(bid)

    def __getitem__(self, bid: bytes) -> BatchView:
        view = self.unkept(bid, keep=True)
        if view is None:
            raise KeyError(bid)
        return view

    def unkept(self, bid: bytes, *, keep: bool = False) -> BatchView | None:
        """The view of this batch held, else one made from its row and (unless ``keep``) not kept; None:
        not here.  A refresh that meets another copy of a batch compares the two and lets the view go:
        after another device's compaction it meets a copy of every batch, and kept a view of each
        (100,000 at a million records) for the rest of the session."""
        view = self.held.get(bid)
        if view is not None or bid in self._gone:
            return view
        row = self._db().execute(f"SELECT {ROW} FROM cache_batches WHERE id = ?", (bid,)).fetchone()
        return None if row is None else self._make(row, keep=keep)

    def __contains__(self, bid: object) -> bool:
        if bid in self.held:
            return True
        return bid not in self._gone and self._db().execute(
            "SELECT 1 FROM cache_batches WHERE id = ?", (bid,)).fetchone() is not None

    def add(self, bid: bytes, view: BatchView) -> None:
        """A view of a batch that cannot be here yet (this writer's own, just sealed): no lookup."""
        if self._count is not None:
            self._count += 1
        self._gone.discard(bid)
        self.held[bid] = view

    def __setitem__(self, bid: bytes, view: BatchView) -> None:
        if self._count is not None and bid not in self:
            self._count += 1
        self._gone.discard(bid)
        self.held[bid] = view

    def __delitem__(self, bid: bytes) -> None:
        if bid not in self:
            raise KeyError(bid)
        self.held.pop(bid, None)
        self._gone.add(bid)
        if self._count is not None:
            self._count -= 1

    def __len__(self) -> int:
        if self._count is None:
            db = self._db()
            n = db.execute("SELECT count(*) FROM cache_batches").fetchone()[0]
            self._count = n - sum(1 for b in self._gone if b not in self.held and db.execute(
                "SELECT 1 FROM cache_batches WHERE id = ?", (b,)).fetchone() is not None)
        return self._count


def with_control(batches: Mapping[bytes, BatchView]) -> list[BatchView]:
    """The batches holding a control record: a local state's from its index (:meth:`BatchViews.with_control`:
    no view is made of a plain batch, nor its records decoded), a map of views by a pass over them."""
    if isinstance(batches, BatchViews):
        return batches.with_control()
    return [v for v in batches.values() if v.has_control]


def held_or_unkept(batches: Mapping[bytes, BatchView], bid: bytes) -> BatchView | None:
    """``batches.get(bid)``, except that a local state's view made from its row is not kept
    (:meth:`BatchViews.unkept`)."""
    return batches.unkept(bid) if isinstance(batches, BatchViews) else batches.get(bid)
