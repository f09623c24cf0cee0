"""Which batches each segment holds and under which epoch it is sealed, read back from the local state.

A warm open of a vault of a million records knows 100,000 segments.  What it needs of them at once is
their names (the folder's names are compared with them); which batches each holds is needed for the few
segments an operation looks at (a prune, an erasure, a compaction), and under which epoch each is
sealed likewise.  :class:`SegmentBatches` holds every name with its stored list, decoded when first
asked for; :class:`SegmentEpochs` asks the database for one segment's epoch, and reads them all only for
a pass over every segment.  Both are the reader's own maps: the reader writes the database's rows
beside every change it makes to them.

The bytes come from this installation's own, authenticated database; a list that does not decode is
reported as a damaged local state (:class:`~camillo.cache.DatabaseError`, which the session turns into
"rebuilt from the vault").

Confined to the thread that owns the vault.
"""

from __future__ import annotations

from collections.abc import Callable, ItemsView, Iterator, KeysView, MutableMapping, ValuesView

import cbor2

from ..cache import Connection, DatabaseError

EpochRef = tuple[bytes, bytes]  # (compartment id, epoch id)


class SegmentBatches(MutableMapping[str, list[bytes]]):
    """Segment name -> the ids of the batches it holds: every name at once, each list decoded when
    first asked for."""

    def __init__(self, stored: dict[str, bytes | list[bytes]]) -> None:
        self._held = stored  # a stored (undecoded) list, or the list

    def __getitem__(self, name: str) -> list[bytes]:
        held = self._held[name]
        if isinstance(held, bytes):
            try:
                decoded = cbor2.loads(held)
            except (cbor2.CBORError, ValueError, TypeError) as exc:
                raise DatabaseError(f"segment {name} is stored with a damaged list of batches ({exc})") from None
            if not isinstance(decoded, list) or not all(isinstance(b, bytes) for b in decoded):
                raise DatabaseError(f"segment {name} is stored with a damaged list of batches")
            held = self._held[name] = decoded
        return held

    def __setitem__(self, name: str, batches: list[bytes]) -> None:
        self._held[name] = batches

    def __delitem__(self, name: str) -> None:
        del self._held[name]

    def __contains__(self, name: object) -> bool:
        return name in self._held

    def __iter__(self) -> Iterator[str]:
        return iter(self._held)

    def __len__(self) -> int:
        return len(self._held)

    def keys(self) -> KeysView[str]:  # (the dict's own: set operations with the folder's names run in C)
        return self._held.keys()


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
