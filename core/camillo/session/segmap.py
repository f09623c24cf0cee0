"""Which batches each segment holds and under which epoch it is sealed, read back from the local state.

A warm open of a vault of a million records knows 100,000 segments.  It needs none of them at once:
the folder's directories that did not move are taken on trust (:mod:`camillo.session.listing`), and
the few new names are looked up one by one.  Which batches a segment holds is needed for the few
segments an operation looks at (a prune, an erasure, the check that an erasure is complete), and under
which epoch each is sealed likewise.  :class:`SegmentBatches` answers whether a segment is known from
its row, reads every name only for a pass over the names, and a segment's list when first asked for
(all of them at once for a pass over every list; the database finds the segments holding given batches
itself); :class:`SegmentEpochs` asks the database for one segment's epoch, or for the segments of given
epochs, and reads them all only for a pass over every segment.  Both are the reader's own maps: the
reader writes the database's rows beside every change it makes to them.

The bytes come from this installation's own, authenticated database; a list that does not decode is
reported as a damaged local state (:class:`~camillo.cache.DatabaseError`, which the session turns into
"rebuilt from the vault").

Confined to the thread that owns the vault.
"""

from __future__ import annotations

from collections.abc import Callable, ItemsView, Iterator, KeysView, MutableMapping, ValuesView
from typing import cast

import cbor2

from ..cache import Connection, DatabaseError

EpochRef = tuple[bytes, bytes]  # (compartment id, epoch id)
_ABSENT: list[bytes] = []  # (a marker: not among the names read so far)


def _decoded(name: str, stored: bytes) -> list[bytes]:
    try:
        decoded = cbor2.loads(stored)
    except (cbor2.CBORError, ValueError, TypeError) as exc:
        raise DatabaseError(f"segment {name} is stored with a damaged list of batches ({exc})") from None
    if not isinstance(decoded, list) or not all(isinstance(b, bytes) for b in decoded):
        raise DatabaseError(f"segment {name} is stored with a damaged list of batches")
    return decoded


class SegmentBatches(MutableMapping[str, list[bytes]]):
    """Segment name -> the ids of the batches it holds, read from the database when first asked for:
    whether a segment is known by its row, every name at once for a pass over every segment (or over
    the names), each list when first asked for (all of them at once for a pass over every list)."""

    def __init__(self, db: Callable[[], Connection]) -> None:
        self._db = db
        self._held: dict[str, list[bytes] | None] = {}  # its list once read (None: not yet)
        self._complete = False  # _held holds every name
        self._changed: set[str] = set()  # set or removed here: the stored row may say otherwise

    def _stored(self, name: str) -> bytes | None:
        row = self._db().execute("SELECT batches FROM cache_segments WHERE name = ?", (name,)).fetchone()
        return None if row is None else cast(bytes, row[0])

    def __getitem__(self, name: str) -> list[bytes]:
        held = self._held.get(name, _ABSENT)
        if held is _ABSENT and (self._complete or name in self._changed):
            raise KeyError(name)
        if held is None or held is _ABSENT:
            stored = self._stored(name)
            if stored is None:
                if held is _ABSENT:
                    raise KeyError(name)
                raise DatabaseError(f"segment {name} is listed in the local state but not stored in it")
            held = self._held[name] = _decoded(name, stored)
        return held

    def _names(self) -> dict[str, list[bytes] | None]:
        held = self._held
        if not self._complete:
            changed = self._changed
            for (name,) in self._db().execute("SELECT name FROM cache_segments"):
                if name not in changed:
                    held.setdefault(name, None)
            self._complete = True
        return held

    def _read_all(self) -> dict[str, list[bytes] | None]:
        held = self._names()
        if None in held.values():
            for name, stored in self._db().execute("SELECT name, batches FROM cache_segments"):
                if held.get(name, ()) is None:
                    held[name] = _decoded(name, stored)
        return held

    def items(self) -> ItemsView[str, list[bytes]]:
        return cast("dict[str, list[bytes]]", self._read_all()).items()  # (every list read)

    def values(self) -> ValuesView[list[bytes]]:
        return cast("dict[str, list[bytes]]", self._read_all()).values()

    def __setitem__(self, name: str, batches: list[bytes]) -> None:
        self._held[name] = batches
        self._changed.add(name)

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        self._held.pop(name, None)
        self._changed.add(name)

    def __contains__(self, name: object) -> bool:
        if name in self._held:
            return True
        if self._complete or not isinstance(name, str) or name in self._changed:
            return False
        return self._db().execute("SELECT 1 FROM cache_segments WHERE name = ?", (name,)).fetchone() is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())

    def keys(self) -> KeysView[str]:  # (the dict's own: set operations with the folder's names run in C)
        return self._names().keys()

    def unknown(self, names: set[str]) -> set[str]:
        """Those of ``names`` that are not known: one lookup each while not every name was read
        (a warm open's first refresh, which brings a few names), set operations afterwards.  A name
        outside ``segments/`` is never known (a warm open at a million records brings the 275
        envelopes' names: no lookup for them)."""
        if self._complete or len(names) > 4096:
            return names - self._names().keys()
        return {name for name in names if not name.startswith("segments/") or name not in self}

    def holding(self, batch_ids: set[bytes] | frozenset[bytes]) -> list[str]:
        """The segments that hold one of these batches: the database looks for each id's bytes in the
        stored lists (a stored list holds each id's bytes in one piece), and only the lists it finds
        them in are read, so a few ids are looked for among 100,000 segments in milliseconds."""
        if not batch_ids:
            return []
        if len(batch_ids) > 16:
            return [name for name, bids in self.items() if not batch_ids.isdisjoint(bids)]
        db, changed = self._db(), self._changed
        ids = sorted(batch_ids)  # (one pass over the stored lists for all of them)
        maybe = {name for (name,) in db.execute(
            f"SELECT name FROM cache_segments WHERE {' OR '.join(['instr(batches, ?) > 0'] * len(ids))}", ids)
            if name not in changed}
        maybe |= {name for name in changed if name in self._held}
        return [name for name in sorted(maybe) if name in self and not batch_ids.isdisjoint(self[name])]


class SegmentEpochs(MutableMapping[str, EpochRef]):
    """Segment name -> (compartment, epoch) it is sealed under: one segment's from the database when
    asked for, every segment's at once for a pass over all of them."""

    def __init__(self, db: Callable[[], Connection]) -> None:
        self._db = db
        self._all: dict[str, EpochRef] | None = None  # every segment's, once a pass asked
        self._changed: dict[str, EpochRef | None] = {}  # set (or removed: None) here before that
        # one object for each of the few distinct pairs: every row brings its own copy
        self._refs: dict[EpochRef, EpochRef] = {}

    def _ref(self, compartment: bytes, epoch: bytes) -> EpochRef:
        ref = self._refs.get((compartment, epoch))
        if ref is None:
            ref = self._refs[compartment, epoch] = (compartment, epoch)
        return ref

    def _every(self) -> dict[str, EpochRef]:
        if self._all is None:
            every = {name: self._ref(c, e) for name, c, e in self._db().execute(
                "SELECT name, compartment, epoch FROM cache_segments WHERE compartment IS NOT NULL")}
            for name, ref in self._changed.items():
                if ref is None:
                    every.pop(name, None)
                else:
                    every[name] = ref
            self._all, self._changed = every, {}
        return self._all

    def under(self, refs: set[EpochRef]) -> dict[str, EpochRef]:
        """The segments sealed under one of these epochs (one pass of the database, not a map of every
        segment), with their epoch."""
        if self._all is not None or not refs:
            return {name: ref for name, ref in self._every().items() if ref in refs} if refs else {}
        epochs = sorted({e for _c, e in refs})
        found = {name: self._ref(c, e) for name, c, e in self._db().execute(
            f"SELECT name, compartment, epoch FROM cache_segments WHERE epoch IN ({','.join('?' * len(epochs))})",
            epochs) if (c, e) in refs}
        for name, ref in self._changed.items():
            if ref is not None and ref in refs:
                found[name] = ref
            else:
                found.pop(name, None)
        return found

    def __getitem__(self, name: str) -> EpochRef:
        if self._all is not None:
            return self._all[name]
        if name in self._changed:
            ref = self._changed[name]
            if ref is None:
                raise KeyError(name)
            return ref
        row = self._db().execute("SELECT compartment, epoch FROM cache_segments WHERE name = ? "
                                 "AND compartment IS NOT NULL", (name,)).fetchone()
        if row is None:
            raise KeyError(name)
        return self._ref(*row)

    def __setitem__(self, name: str, ref: EpochRef) -> None:
        if self._all is not None:
            self._all[name] = ref
        else:
            self._changed[name] = ref

    def __delitem__(self, name: str) -> None:
        if name not in self:
            raise KeyError(name)
        if self._all is not None:
            del self._all[name]
        else:
            self._changed[name] = None

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            self[name]
        except KeyError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self._every())

    def __len__(self) -> int:
        return len(self._every())

    def keys(self) -> KeysView[str]:
        return self._every().keys()

    def items(self) -> ItemsView[str, EpochRef]:
        return self._every().items()

    def values(self) -> ValuesView[EpochRef]:
        return self._every().values()
