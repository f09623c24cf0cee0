"""The folder's listing kept in the local state, and the first scan of a warm open made from it.

A warm open of a vault of a million records finds 100,000 segment files in 256 directories, nearly
all of them read before.  The local state keeps each directory's listing (``cache_dirs``: its mtime,
files and subdirectories, as the reader last took them in) and the segments listed but not read
(``unread`` in ``cache_meta``: not readable yet, still syncing, damaged), with the epoch of each one not
readable here for want of its key (``unread_epochs``: not read again until a key of that epoch is here; an
agent whose grant opens one compartment of a million records read the 33,700 segments of the others at every
open, 0.86 s).  The first scan then takes
every directory of segments whose mtime has not moved on trust, without reading its names
(:meth:`~camillo.storage.FolderShelf.prime_lazily`), and reports only what changed since.  This is
sound because the stored listing and the stored state agree on those directories: a directory is
kept only once every name its listing holds was taken in by the reader, and only when this
installation has not written or deleted in it since it was listed
(:meth:`~camillo.storage.FolderShelf.listing_changes`); a directory with no listing kept is listed
whole and compared with the segments the state holds there (:func:`vanished`).

Functions of the session's reader, which calls them.  Confined to the thread that owns the vault.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .. import encoding
from ..cache import Connection
from ..errors import VaultError
from ..names import kind_of
from ..primitives import sha256
from ..storage import FolderShelf

EpochRef = tuple[bytes, bytes]  # (compartment id, epoch id)


def lines(text: str) -> frozenset[str]:
    """The names of a listing kept in the local state (one per line; none: empty)."""
    return frozenset(text.split("\n")) if text else frozenset()


# Every directory's mtime and subdirectories, and the files of those that are not directories of
# segments (a few hundred names: keys, slots, packs).
_PRIMED = ("SELECT rel, mtime, CASE WHEN rel LIKE 'segments/%' THEN NULL ELSE files END, subdirs FROM cache_dirs")


def prime(shelf: FolderShelf, db: Connection, unread: list[str] | None) -> bool:
    """Give the shelf the listing kept in ``db``, for its first scan.  With the segments listed but not
    read last time (``unread``; None: a state that did not keep them), the directories of segments
    are taken on trust (read from ``db`` when needed; True); else every kept file is read now (a
    shelf that mirrors an object store compares every name with the store's listing anyway)."""
    eager, lazy = [], []
    if unread is None or not shelf.lazy_listing:
        for rel, mtime, files, subdirs in db.execute("SELECT rel, mtime, files, subdirs FROM cache_dirs"):
            eager.append((rel, mtime, lines(files), lines(subdirs)))
        shelf.prime(eager)
        return False
    for rel, mtime, files, subdirs in db.execute(_PRIMED):
        if files is None:
            lazy.append((rel, mtime, lines(subdirs)))
        else:
            eager.append((rel, mtime, lines(files), lines(subdirs)))

    def load(rel: str) -> frozenset[str]:
        row = db.execute("SELECT files FROM cache_dirs WHERE rel = ?", (rel,)).fetchone()
        return lines(row[0]) if row is not None else frozenset()

    shelf.prime_lazily(eager, lazy, load)
    return True


def unread_of(meta: dict[str, bytes]) -> list[str] | None:
    """The segments listed but not read that the local state kept (None: it kept none, an older state)."""
    if "unread" not in meta:
        return None
    names = encoding.decode(meta["unread"])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ValueError("the local state's list of unread segments is damaged")
    return names


def _digest(unread: bytes) -> bytes:
    return sha256(unread)[:16]


def unreadable_of(meta: dict[str, bytes], unread: list[str]) -> dict[str, EpochRef]:
    """Those of ``unread`` (:func:`unread_of`) the local state kept as not readable here for want of their
    epoch's key, each with that epoch (:func:`store`).  None when it kept none, or kept them beside another
    list than ``unread``: an older version, which keeps no epochs, rewrote the list, and its positions say
    nothing of the new one (found by review); each is then read again.  Likewise when what is kept is not
    in this form (a version's that kept them otherwise): reading them again is always right."""
    try:
        decoded = encoding.decode(meta["unread_epochs"])
    except (KeyError, TypeError, ValueError, VaultError):  # (none kept, or not canonical CBOR: found by review)
        return {}
    if not (isinstance(decoded, list) and len(decoded) == 2 and isinstance(decoded[1], list)
            and decoded[0] == _digest(meta["unread"])):
        return {}
    out: dict[str, EpochRef] = {}
    for group in decoded[1]:
        if not (isinstance(group, list) and len(group) == 3 and isinstance(group[0], bytes)
                and isinstance(group[1], bytes) and isinstance(group[2], list)):
            return {}
        ref = (group[0], group[1])
        for i in group[2]:
            if type(i) is not int or not 0 <= i < len(unread) or unread[i] in out:
                return {}
            out[unread[i]] = ref
    return out


def store(shelf: FolderShelf, db: Connection, every: bool, unread: Iterable[str],
          unreadable: Mapping[str, EpochRef]) -> None:
    """Keep what moved of the folder's listing (``every``: all of it), and the segments listed but not
    read (``unread``: not readable yet, still syncing, damaged), which the next open reads again, but for
    those not readable for want of their epoch's key (``unreadable``), kept with that epoch, by their
    position in the list and beside its digest (:func:`unreadable_of`): a segment's name is the hash of its
    bytes, so the next open reads one again only once a key of its epoch is here (the reader's refresh)."""
    keep, drop = shelf.listing_changes(every=every)
    db.executemany("DELETE FROM cache_dirs WHERE rel = ?", [(rel,) for rel in drop])
    db.executemany("INSERT OR REPLACE INTO cache_dirs(rel, mtime, files, subdirs) VALUES(?, ?, ?, ?)",
                   [(rel, mtime, "\n".join(files), "\n".join(subdirs)) for rel, mtime, files, subdirs in keep])
    names = sorted({n for n in unread if kind_of(n) == "segment"})
    listed = encoding.encode(names)
    groups: dict[EpochRef, list[int]] = {}
    for i, name in enumerate(names):
        if (ref := unreadable.get(name)) is not None:
            groups.setdefault(ref, []).append(i)
    kept = encoding.encode([_digest(listed), [[c, e, at] for (c, e), at in sorted(groups.items())]])
    db.executemany("INSERT OR REPLACE INTO cache_meta(key, value) VALUES(?, ?)",
                   [("unread", listed), ("unread_epochs", kept)])


def vanished(shelf: FolderShelf, db: Connection, unreadable: Iterable[str] = ()) -> set[str]:
    """At the first scan after :func:`prime`: the segments the state holds, or kept as ``unreadable``
    (:func:`unreadable_of`), that are no longer there, among those the scan could not compare with a kept
    listing: in directories it listed with none kept (it reports every file such a directory holds, and
    none that went away), and in directories of segments that are not in the folder at all (a copy of the
    vault made before they were written).  The others are reported by the scan itself.  (An unreadable one
    not found gone would be reported as waiting for its key at every open after, found by review.)"""
    gone: set[str] = set()
    fresh = shelf.take_fresh()
    present = shelf.directories()
    for prefix in range(256):  # (segments/xx/ with xx the name's first two hex digits: names.py)
        rel = f"segments/{prefix:02x}"
        if rel in fresh or rel not in present:
            here = shelf.listed(rel)
            # the names under "rel/": from "rel/" up to "rel0" ("0" follows "/")
            gone.update(name for (name,) in db.execute(
                "SELECT name FROM cache_segments WHERE name > ? AND name < ?", (rel + "/", rel + "0"))
                if name not in here and shelf.pack_holding(name) is None)  # (a pack may hold it: still here)
    for name in unreadable:
        rel = name.rsplit("/", 1)[0]
        if (rel in fresh or rel not in present) and name not in shelf.listed(rel) and shelf.pack_holding(name) is None:
            gone.add(name)
    return gone
