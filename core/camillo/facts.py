"""The rules of facts (spec §19.3): which records of a key are the user's word, which supersede which,
the binding value and the proposals beside it, and from them a fact's status.

A key's records are its valid PUTs and keyed DELs.  Some of them **bind** (the user's word):

* a PUT whose *effective* class is ``user`` (written at class ``user`` by an owner device, or
  confirmed by the user);
* a DEL written by an owner device that is not a rejection (``meta {"reject": true}``).

Every other PUT is a **proposal**; every other DEL (an agent's, or the user's rejection) is a
**withdrawal**.  A binding record supersedes any record its writer had seen; a proposal or a
withdrawal supersedes only proposals.  So nothing an agent writes (at any class its grant allows)
can displace, hide or delete the user's word, and rejecting a proposal leaves the binding value as
it was.

Pure functions over plain rows (no database, no roster): :mod:`camillo.state` gathers each key's
records, says which bind, and stores what :func:`decide` returns.  Any thread.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from .records import Authority, Kind


class FactRow(NamedTuple):
    """A valid keyed PUT or DEL, as the fact rules see it."""

    id: bytes
    batch: bytes
    idx: int
    kind: int
    effective: int | None
    binding: bool  # see binds()


class Decided(NamedTuple):
    """What the rules decide for one key."""

    status: str  # ok | conflict | deleted | pending
    current: bytes | None  # the binding value (ok), the preferred candidate (conflict), the DEL (deleted)
    candidates: list[bytes]  # conflict: the binding values, preferred first
    discarded: list[bytes]  # deleted: the binding values a concurrent binding DEL discarded
    proposed: list[bytes]  # the live proposals, in history order
    history: list[bytes]  # every record of the key, in history order
    forgotten: list[bytes]  # PUTs that leave the timeline: deleted, discarded or withdrawn


def binds(kind: int, effective: int | None, *, by_owner_device: bool, rejection: bool) -> bool:
    """Whether a keyed record is the user's word (see the module docstring)."""
    if kind == Kind.PUT:
        return effective == Authority.USER
    return by_owner_device and not rejection


def decide(recs: Sequence[FactRow], supersedes: Callable[[FactRow, FactRow], bool],
           order: Callable[[FactRow], tuple[int, int, int, bytes]]) -> Decided:
    """The fact of one key.  ``supersedes(s, r)``: r's id is in s's ``pred``, or r is earlier in s's
    batch, or r's batch causally precedes s's (spec §19.3); ``order`` sorts the history."""

    def displaces(s: FactRow, r: FactRow) -> bool:
        return (s.binding or not r.binding) and supersedes(s, r)

    live = [r for r in recs if not any(displaces(s, r) for s in recs)]
    binding = [r for r in live if r.binding]
    dels = [r for r in binding if r.kind == Kind.DEL]
    puts = [r for r in binding if r.kind == Kind.PUT]
    history = sorted(recs, key=order)
    proposed = [r.id for r in history if r in live and not r.binding and r.kind == Kind.PUT]
    all_dels = [r for r in recs if r.kind == Kind.DEL]
    forgotten = [r.id for r in recs if r.kind == Kind.PUT and (
        any(displaces(d, r) for d in all_dels) or (dels and r in puts))]
    ids = [r.id for r in history]
    if dels:
        return Decided("deleted", min(r.id for r in dels), [], sorted(r.id for r in puts), proposed, ids, forgotten)
    if len(puts) > 1:
        best = sorted(puts, key=lambda r: (-(r.effective or 0), r.id))
        return Decided("conflict", best[0].id, [r.id for r in best], [], proposed, ids, forgotten)
    if puts:
        return Decided("ok", puts[0].id, [], [], proposed, ids, forgotten)
    if proposed:
        return Decided("pending", None, [], [], proposed, ids, forgotten)
    # Only withdrawals are live (every proposal was rejected or taken back): the key has no value.
    withdrawn = min((r.id for r in live if r.kind == Kind.DEL), default=None)
    return Decided("deleted", withdrawn, [], [], [], ids, forgotten)
