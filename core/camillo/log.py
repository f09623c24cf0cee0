"""The causal log: per-writer chains, gaps, forks and causal order (spec §17).

Each writer numbers its batches per compartment (``seq`` from 1, ``prev`` naming the previous
batch), lists the DAG heads it had seen (``deps``) and its version vector (``frontier``).  From the
set of signed batches this module derives, independently of arrival order:

* **forks**: two signed batches of one writer with the same (compartment, seq), or a ``prev`` that
  names another batch than the one at ``seq - 1``.  Both headers are signed by the writer, so they
  are a transferable proof; the writer is frozen in that compartment from the fork point on.
* **gaps**: a ``seq``, a ``deps`` entry or a ``frontier`` claim that names a batch we do not have.
  Each gap names the writer, compartment, seq and, where known, the batch id.
* **causal order**: batch A precedes batch B (same compartment) iff
  ``B.frontier[A.writer] >= A.seq`` (or A is B, or A is earlier on B's own chain).
* **authorisation**: the writer may write this compartment (roster), and its frontier never goes
  backwards along its chain.

Pure computation; confined to the thread that owns the vault.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_left
from collections.abc import Callable, Container, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import cbor2

from .control import BatchView, Roster


@dataclass(frozen=True)
class Gap:
    writer_id: bytes
    compartment_id: bytes
    seq: int
    batch_id: bytes | None
    reason: str


@dataclass(frozen=True)
class Fork:
    writer_id: bytes
    compartment_id: bytes
    seq: int
    batch_ids: tuple[bytes, ...]


@dataclass
class CausalLog:
    accepted: set[bytes] = field(default_factory=set)
    rejected: dict[bytes, str] = field(default_factory=dict)
    gaps: list[Gap] = field(default_factory=list)
    forks: list[Fork] = field(default_factory=list)
    chains: dict[tuple[bytes, bytes], dict[int, bytes]] = field(default_factory=dict)
    heads: dict[bytes, set[bytes]] = field(default_factory=dict)
    tops: dict[tuple[bytes, bytes], int] = field(default_factory=dict)  # max seq of each chain (kept by the builders)

    def batch_at(self, key: tuple[bytes, bytes], seq: int) -> bytes | None:
        """The batch at ``seq`` of a chain (writer, compartment); as :meth:`StoredLog.batch_at`."""
        return self.chains.get(key, {}).get(seq)

    def tops_here(self) -> list[tuple[tuple[bytes, bytes], int, bytes]]:
        """Each non-empty chain's (writer, compartment), highest seq and the batch there."""
        out = []
        for key, chain in self.chains.items():
            if chain:
                top = self.tops.get(key) or max(chain)
                out.append((key, top, chain[top]))
        return out

    def max_seq(self, writer_id: bytes, compartment_id: bytes) -> int:
        top = self.tops.get((writer_id, compartment_id))
        if top is not None:
            return top
        chain = self.chains.get((writer_id, compartment_id))
        return max(chain) if chain else 0


def precedes(a: BatchView, b: BatchView) -> bool:
    """True when batch ``a`` is in the causal past of batch ``b`` (same compartment)."""
    ha, hb = a.header, b.header
    if ha.compartment_id != hb.compartment_id:
        return False
    if ha.writer_id == hb.writer_id:
        return ha.seq <= hb.seq
    return hb.frontier.get(ha.writer_id, 0) >= ha.seq


GAP_RUN_DETAIL = 64  # a longer run of missing seqs is reported as one gap (spec §17.4)


def _add_gaps(gaps: list[Gap], writer: bytes, compartment: bytes, first: int, last: int, last_id: bytes | None,
              reason: str) -> None:
    """Report the missing seqs ``first`` to ``last`` of one writer, the last one named by ``last_id``.
    A run longer than :data:`GAP_RUN_DETAIL` is one gap (its first seq, the count in the reason), so
    a hostile seq or frontier claim (any uint) costs nothing to report."""
    if last - first + 1 <= GAP_RUN_DETAIL:
        for seq in range(first, last + 1):
            gaps.append(Gap(writer, compartment, seq, last_id if seq == last else None, reason))
        return
    end = last - 1 if last_id is not None else last
    gaps.append(Gap(writer, compartment, first, None, f"{reason} (seq {first} to {end}: {end - first + 1} batches)"))
    if last_id is not None:
        gaps.append(Gap(writer, compartment, last, last_id, reason))


def build_log(views: Mapping[bytes, BatchView], signed: set[bytes], roster: Roster) -> CausalLog:
    """The causal log of the signed batches (spec §17): each writer's chain per compartment (up to a
    proven fork, frontiers never going backwards), what is rejected and why, the gaps (a chain's
    missing links, claims of other writers' frontiers and of control batches' ``heads``, dependencies
    not here) and the DAG heads.  One pass over the batches for the chains, one over the accepted
    ones for everything they claim (a warm open runs this over every batch)."""
    log = CausalLog()
    candidates: dict[tuple[bytes, bytes], dict[int, list[BatchView]]] = {}
    verdicts: dict[tuple[bytes, bytes], tuple[bool, str]] = {}  # roster.can_write, once per chain
    for bid in signed:
        v = views[bid]
        h = v.header
        key = (h.writer_id, h.compartment_id)
        verdict = verdicts.get(key)
        if verdict is None:
            verdict = verdicts[key] = roster.can_write(h.writer_id, h.compartment_id)
        if not verdict[0]:
            log.rejected[bid] = verdict[1]
            continue
        by_seq = candidates.get(key)
        if by_seq is None:
            by_seq = candidates[key] = {}
        group = by_seq.get(h.seq)
        if group is None:
            by_seq[h.seq] = [v]
        else:
            group.append(v)

    for (wid, cid), by_seq in candidates.items():
        seqs = sorted(by_seq)
        fork_seq = None
        fork_ids: tuple[bytes, ...] = ()
        for seq in seqs:
            group = by_seq[seq]
            if len(group) > 1:
                fork_seq, fork_ids = seq, tuple(sorted(v.id for v in group))
                break
            prev_group = by_seq.get(seq - 1)
            prev = group[0].header.prev
            if prev_group and prev != prev_group[0].id:
                assert prev is not None  # seq > 1 here, and such a header always names its prev
                fork_seq, fork_ids = seq - 1, tuple(sorted((prev_group[0].id, prev)))
                break
        chain: dict[int, bytes] = {}  # in seq order
        # Frontiers never go backwards along one writer's chain.
        last_frontier: Mapping[bytes, int] = {}
        for seq in seqs:
            if fork_seq is not None and seq >= fork_seq:
                for forked in by_seq[seq]:
                    log.rejected[forked.id] = f"beyond a proven fork of its writer at seq {fork_seq}"
                continue
            v = by_seq[seq][0]
            frontier = v.header.frontier
            if frontier is not last_frontier:
                backwards = False
                for w, s in last_frontier.items():
                    if frontier.get(w, 0) < s:
                        backwards = True
                        break
                if backwards:
                    log.rejected[v.id] = "its frontier goes backwards from the writer's previous batch"
                    continue
            last_frontier = frontier
            chain[seq] = v.id
        if fork_seq is not None:
            log.forks.append(Fork(wid, cid, fork_seq, fork_ids))
        log.chains[(wid, cid)] = chain
        log.accepted.update(chain.values())
        below = 0
        for seq, bid in chain.items():
            if seq > below + 1:  # seqs below+1 .. seq-1 are missing; the last one is named by seq's prev
                _add_gaps(log.gaps, wid, cid, below + 1, seq - 1, views[bid].header.prev,
                          "missing from its writer's chain")
            below = seq

    present = log.accepted
    # what the accepted batches of each compartment have seen of each writer (their frontiers): the
    # claims a missing batch is reported from, and what makes a batch no DAG head
    seen_max: dict[bytes, dict[bytes, int]] = {}
    heads_claimed: dict[tuple[bytes, bytes], int] = {}  # control batches' ``heads``
    referenced: dict[bytes, bytes] = {}  # missing-candidate batch id -> compartment of a batch naming it
    control_id = roster.control_id
    for bid in present:
        h = views[bid].header
        cid = h.compartment_id
        m = seen_max.get(cid)
        if m is None:
            m = seen_max[cid] = {}
        for w, s in h.frontier.items():
            if s > m.get(w, 0):
                m[w] = s
        if cid == control_id:  # what a control batch's writer had seen everywhere
            for c, per in h.heads.items():
                if c in roster.compartments:
                    for w, s in per.items():
                        if w not in roster.revocations and s > heads_claimed.get((w, c), 0):
                            # a revoked writer's later batches are rejected anyway
                            heads_claimed[(w, c)] = s
        for d in h.deps:
            if d not in referenced:
                referenced[d] = cid
        if h.prev and h.prev not in referenced:
            referenced[h.prev] = cid
    claimed = dict(heads_claimed)
    for cid, m in seen_max.items():
        for w, s in m.items():
            if s > claimed.get((w, cid), 0):
                claimed[(w, cid)] = s
    for (w, c), s in claimed.items():
        have = log.max_seq(w, c)  # chain gaps are all below it: a claim never repeats one
        if s > have:
            _add_gaps(log.gaps, w, c, have + 1, s, None, "seen by another writer but not here")
    claimed_missing = {(g.compartment_id) for g in log.gaps if g.batch_id is None}
    gap_ids = {g.batch_id for g in log.gaps if g.batch_id is not None}
    for dep, cid in referenced.items():
        if dep in present or dep in log.rejected or dep in gap_ids:
            continue
        if cid in claimed_missing:
            continue  # the same absence is already reported from a writer's frontier claim
        log.gaps.append(Gap(b"", cid, 0, dep, "named as a dependency by another batch but not here"))
        gap_ids.add(dep)
    # DAG heads per compartment: accepted batches that no accepted batch has seen.
    for bid in present:
        h = views[bid].header
        if seen_max[h.compartment_id].get(h.writer_id, 0) < h.seq:
            log.heads.setdefault(h.compartment_id, set()).add(bid)
    log.tops = {key: max(chain) for key, chain in log.chains.items() if chain}
    return log


def extend_log(log: CausalLog, views: Mapping[bytes, BatchView], new: list[bytes], roster: Roster) -> bool:
    """The common case in O(new): each new batch is the next link of its writer's chain, by a
    writer the roster lets write there, at a place no rejected batch holds, seeing only
    batches that are here, and filling no gap (a compartment may have gaps: a host that withholds
    one batch must not make every later append rebuild the log over the whole vault).  Then
    :func:`build_log` would give exactly the log extended by them: the same gaps (a claim or a
    dependency naming a new batch would have been a gap; none is, and the new batches claim
    nothing absent), the same forks (no rejected batch holds a new batch's place in its chain),
    heads and chains: extend ``log`` in place and return True.  Otherwise change nothing and
    return False (the caller rebuilds the whole log)."""
    tops: dict[tuple[bytes, bytes], int] = {}
    last: dict[tuple[bytes, bytes], BatchView] = {}
    order = sorted((views[b] for b in new), key=lambda v: (v.header.writer_id, v.header.compartment_id, v.header.seq))
    gap_slots = {(g.writer_id, g.compartment_id, g.seq) for g in log.gaps}
    gap_ids = {g.batch_id for g in log.gaps if g.batch_id is not None}
    # the chain places of rejected batches (a new batch there would make a fork; a forked chain's
    # next place always holds one): few, or a writer that floods rejected batches costs a pass over
    # them (their stored writer, compartment and seq: no header decoded), not over the vault
    rejected_slots = {(rv.writer_id, rv.compartment_id, rv.seq) for r in log.rejected
                      if (rv := views.get(r)) is not None}
    ids_new = set(new)
    for v in order:
        h = v.header
        key = (h.writer_id, h.compartment_id)
        if v.id in log.accepted or v.id in log.rejected or v.id in gap_ids:
            return False
        if (h.writer_id, h.compartment_id, h.seq) in gap_slots or (h.writer_id, h.compartment_id, h.seq) in rejected_slots:
            return False
        if h.writer_id in roster.revocations or not roster.can_write(h.writer_id, h.compartment_id)[0]:
            return False
        top = tops.get(key, log.max_seq(*key))
        if h.seq != top + 1:
            return False
        if top:
            prev_view = last.get(key) or views.get(log.chains[key][top])
            if prev_view is None or h.prev != prev_view.id:
                return False
            if any(h.frontier.get(w, 0) < s for w, s in prev_view.header.frontier.items()):
                return False
        elif h.prev is not None:
            return False
        for w, s in h.frontier.items():
            if s > tops.get((w, h.compartment_id), log.max_seq(w, h.compartment_id)) and not (w == h.writer_id and s == h.seq - 1):
                return False
        for d in h.deps:
            if d not in log.accepted and d not in ids_new:
                return False
        tops[key] = h.seq
        last[key] = v
    for v in order:
        h = v.header
        key = (h.writer_id, h.compartment_id)
        log.chains.setdefault(key, {})[h.seq] = v.id
        log.tops[key] = h.seq
        log.accepted.add(v.id)
        heads = log.heads.setdefault(h.compartment_id, set())
        for hid in list(heads):
            hh = views[hid].header
            if h.frontier.get(hh.writer_id, 0) >= hh.seq:
                heads.discard(hid)
        heads.add(v.id)
    return True


# ---------------------------------------------------------------------------------------------
# What this device remembers (spec §17.5): rollback and withholding detection.

SYNC_GRACE_SECONDS = 600  # T1: how long something missing counts as "still syncing"


@dataclass(frozen=True)
class Alert:
    kind: str  # "rollback" | "missing" | "syncing"
    compartment_id: bytes
    writer_id: bytes
    seq: int
    batch_id: bytes | None
    since: int
    message: str


class Vouched(Container[bytes]):
    """The batches that signed manifests vouch for (``batches`` of each compaction or erasure manifest),
    asked about one at a time: no set of them all is made (a compacted vault of a million records
    lists 100,000 batches in its manifests, and a set of them took an append 6 ms)."""

    def __init__(self, per_manifest: Iterable[Container[bytes]]) -> None:
        self._per = list(per_manifest)

    def __contains__(self, bid: object) -> bool:
        return any(bid in batches for batches in self._per)


def check_memory(remembered: dict[bytes, dict[bytes, tuple[int, bytes]]], first_missing: dict[bytes, int],
                 remembered_generation: int, log: CausalLog | StoredLog, covered: Container[bytes], generation: int,
                 now: int, remembered_epochs: dict[bytes, bytes] | None = None,
                 known_epochs: set[tuple[bytes, bytes]] | None = None, mine: bytes | None = None,
                 ) -> tuple[list[Alert], dict[bytes, dict[bytes, tuple[int, bytes]]], dict[bytes, int]]:
    """Compare what a device remembers with what the vault shows now.

    A remembered batch that is absent is "syncing" for :data:`SYNC_GRACE_SECONDS` after it was first
    noticed, then a **rollback** alert, unless a signed compaction or erasure manifest vouches for
    it (then it is only syncing: its new copy has not arrived yet).  A gap (a batch named but absent)
    is likewise "syncing", then "missing".  Returns the alerts, the new memory (the union of the old
    and the present: memory never shrinks), and the updated first-noticed times.

    A remembered batch that is here but rejected (a fork, a revoked writer) is reported with its
    reason elsewhere; only when it is the rememberer's own (``mine``: a write it made and was told
    succeeded) is it also "syncing" here, since what it wrote is not part of the vault's view.
    """
    alerts: list[Alert] = []
    still_missing: dict[bytes, int] = {}

    def since(key: bytes) -> int:
        t = first_missing.get(key, now)
        still_missing[key] = t
        return t

    for cid, per_writer in remembered.items():
        for wid, (seq, bid) in per_writer.items():
            here = log.batch_at((wid, cid), seq)
            if here == bid:
                continue
            if bid in log.rejected:
                if wid == mine:
                    alerts.append(Alert("syncing", cid, wid, seq, bid, now, f"batch {bid.hex()[:12]} (seq {seq}) that "
                                        f"this device wrote was refused: {log.rejected[bid]}"))
                continue
            if here is not None:
                alerts.append(Alert("rollback", cid, wid, seq, bid, now,
                                    f"batch {bid.hex()[:12]} (seq {seq}) that this device saw was replaced by another"))
                continue
            t = since(bid)
            if bid in covered or now - t < SYNC_GRACE_SECONDS:
                alerts.append(Alert("syncing", cid, wid, seq, bid, t,
                                    f"batch {bid.hex()[:12]} (seq {seq}) that this device saw is not here yet"))
            else:
                alerts.append(Alert("rollback", cid, wid, seq, bid, t,
                                    f"batch {bid.hex()[:12]} (seq {seq}) that this device saw has vanished "
                                    "without a signed manifest: the storage was rolled back or withheld it"))
    for cid, eid in (remembered_epochs or {}).items():
        if known_epochs is None or (cid, eid) in known_epochs:
            continue
        t = since(eid)
        kind = "syncing" if now - t < SYNC_GRACE_SECONDS else "rollback"
        alerts.append(Alert(kind, cid, b"", 0, None, t,
                            f"epoch {eid.hex()[:12]} that this device saw is no longer announced"
                            + (" (still syncing?)" if kind == "syncing" else ": the storage was rolled back")))
    if generation < remembered_generation:
        alerts.append(Alert("rollback", b"", b"", generation, None, now,
                            f"the vault presents master-secret generation {generation}, older than generation "
                            f"{remembered_generation} this device already saw: old slots were restored"))
    for g in log.gaps:
        key = g.batch_id or (g.writer_id + g.compartment_id + g.seq.to_bytes(8, "big"))
        t = since(key)
        kind = "syncing" if now - t < SYNC_GRACE_SECONDS or (g.batch_id in covered) else "missing"
        what = f"batch {g.batch_id.hex()[:12]}" if g.batch_id else "a batch"
        at = f" (seq {g.seq})" if g.seq else ""
        alerts.append(Alert(kind, g.compartment_id, g.writer_id, g.seq, g.batch_id, t,
                            f"{what}{at} has not arrived: {g.reason}"))
    memory = {c: dict(m) for c, m in remembered.items()}
    for (wid, cid), top, top_id in log.tops_here():
        old = memory.setdefault(cid, {}).get(wid)
        if old is None or top >= old[0]:
            memory[cid][wid] = (top, top_id)
    return alerts, memory, still_missing


def extend_log_after_roster_change(log: CausalLog, views: Mapping[bytes, BatchView], signed: set[bytes],
                                   old: Roster, roster: Roster, new: set[bytes]) -> bool:
    """The common case of a key change in O(new): new batches (control records among them: a
    revocation, new epochs, a credential change) at the tip of a log with nothing missing, rejected
    or forked, after which the recomputed ``roster`` signs exactly the old log plus the new
    batches, lets every chain's writer still write there, knows the same compartments and revokes
    at least whom it revoked.  Then :func:`build_log` gives exactly the log extended by them
    (a revocation only drops claims, and there was no gap for it to close): extend ``log`` in
    place and return True.  Otherwise change nothing and return False."""
    if not new or log.gaps or log.forks or log.rejected:
        return False
    if signed != log.accepted | new or roster.compartments.keys() != old.compartments.keys():
        return False
    if not old.revocations.keys() <= roster.revocations.keys():
        return False
    if any(not roster.can_write(w, c)[0] for w, c in log.chains):
        return False
    tops = dict(log.tops)
    for bid in new:
        h = views[bid].header
        key = (h.writer_id, h.compartment_id)
        tops[key] = max(tops.get(key, 0), h.seq)
    for bid in new:  # what a new control batch's writer had seen everywhere must all be here
        h = views[bid].header
        if h.compartment_id != roster.control_id:
            continue
        for c, per in h.heads.items():
            if c in roster.compartments and any(
                    w not in roster.revocations and s > tops.get((w, c), 0) for w, s in per.items()):
                return False
    return extend_log(log, views, sorted(new), roster)


# ---------------------------------------------------------------------------------------------
# The log kept in the local state between sessions (a warm open of an unchanged folder resumes it)

# 3: the chains' tops, the rejections, gaps, forks and heads in one small item, the chains' batches in
# a second one read when first asked for (2: both in one item; 1: one list)
_LOG_FORMAT = 3
_LOG_FORMAT_ONE_ITEM = 2
_ID = 32  # bytes of a batch id
_RECORD = 8 + _ID  # bytes of a chain's entry in the stored batches: its seq, then (apart) its batch id


def signed_of(log: CausalLog) -> set[bytes]:
    """The signed batches a log was computed from: :func:`build_log` accepts or rejects each one (and
    :func:`extend_log` accepts the ones it adds)."""
    return log.accepted | log.rejected.keys()


def _packed(seqs: Iterable[int]) -> bytes:
    arr = array("Q", seqs)
    if sys.byteorder == "big":
        arr.byteswap()
    return arr.tobytes()


def _unpacked(data: bytes) -> array[int]:
    arr = array("Q")
    arr.frombytes(data)
    if sys.byteorder == "big":
        arr.byteswap()
    return arr


def encode_log(log: CausalLog) -> tuple[bytes, bytes]:
    """The log as the local state keeps it (its accepted set and tops are its chains'): a small head,
    ``[3, chains, rejected, gaps, forks, heads]`` with each chain as (writer, compartment, top seq, top
    batch, its length), and the chains' batches apart, each chain in the head's order as its seqs
    ascending (little-endian u64) then their batch ids in the same order, so that a warm open reads
    the head alone and one batch of a chain is found without decoding the chain."""
    chains: list[tuple[bytes, bytes, int, bytes | None, array[int], bytes]] = []
    for (w, c), chain in log.chains.items():
        seqs = sorted(chain)
        top = seqs[-1] if seqs else 0
        chains.append((w, c, top, chain.get(top), array("Q", seqs), b"".join(chain[q] for q in seqs)))
    return _encode(chains, log.rejected, log.gaps, log.forks, log.heads)


def _encode(chains: Iterable[tuple[bytes, bytes, int, bytes | None, array[int], bytes]], rejected: dict[bytes, str],
            gaps: list[Gap], forks: list[Fork], heads: dict[bytes, set[bytes]]) -> tuple[bytes, bytes]:
    tops: list[list[Any]] = []
    body: list[bytes] = []
    for w, c, top, bid, seqs, ids in chains:
        tops.append([w, c, top, bid, len(seqs)])
        body += (_packed(seqs), ids)
    head = cbor2.dumps([_LOG_FORMAT, tops, [[b, r] for b, r in rejected.items()],
                        [[g.writer_id, g.compartment_id, g.seq, g.batch_id, g.reason] for g in gaps],
                        [[f.writer_id, f.compartment_id, f.seq, list(f.batch_ids)] for f in forks],
                        [[c, sorted(h)] for c, h in heads.items()]])
    return head, b"".join(body)


class StoredLog:
    """A log as the local state keeps it, read where asked: what a warm open of an unchanged folder
    asks of the log (each chain's top for the rollback memory, the rejections and the gaps) comes from
    its head alone; the chains' batches (megabytes at a million records) are read when first asked
    for (``load``), and a batch of a chain is then found by bisecting its packed seqs, without making
    an object of every batch of every chain.  :meth:`full` gives the :class:`CausalLog`.  Built by
    :meth:`decode` (ValueError when the head is not what :func:`encode_log` wrote; ``damaged``, called
    with a reason, gives what to raise when the batches read later are not)."""

    def __init__(self, tops: dict[tuple[bytes, bytes], tuple[int, bytes | None, int]], rejected: dict[bytes, str],
                 gaps: list[Gap], forks: list[Fork], heads: dict[bytes, set[bytes]],
                 load: Callable[[], bytes], damaged: Callable[[str], Exception]) -> None:
        self._tops = tops
        self._chains: dict[tuple[bytes, bytes], tuple[array[int], bytes]] | None = None
        self._load, self._damaged = load, damaged
        self.rejected, self.gaps, self.forks, self.heads = rejected, gaps, forks, heads
        self.whole_item = False  # stored in an earlier version's layout (format 2: head and chains in one)

    @classmethod
    def decode(cls, head: bytes, load: Callable[[], bytes],
               damaged: Callable[[str], Exception] = ValueError) -> StoredLog:
        """The log whose head is ``head`` and whose batches ``load()`` gives; an item of format 2
        (both in one) is read whole now."""
        try:
            fmt, tops, rejected, gaps, forks, heads = cbor2.loads(head)
            if fmt == _LOG_FORMAT_ONE_ITEM:  # (a state an earlier version stored)
                kept = {(w, c): (top, bid, len(seqs) // 8) for w, c, top, bid, seqs, _ids in tops}
                body = b"".join(part for *_k, seqs, ids in tops for part in (seqs, ids))
                log = cls(kept, {}, [], [], {}, lambda: body, damaged)
                log.whole_item = True
                log.chains(ValueError)  # (read whole now: ValueError when it does not hold what it says)
            elif fmt == _LOG_FORMAT:
                kept = {(w, c): (top, bid, n) for w, c, top, bid, n in tops}
                if any(type(n) is not int or n < 0 for _t, _b, n in kept.values()):
                    raise ValueError("a chain's length is not a count")
                log = cls(kept, {}, [], [], {}, load, damaged)
            else:
                raise ValueError(f"log format {fmt}")
            log.rejected = {b: r for b, r in rejected}
            log.gaps = [Gap(w, c, s, b, r) for w, c, s, b, r in gaps]
            log.forks = [Fork(w, c, s, tuple(b)) for w, c, s, b in forks]
            log.heads = {c: set(h) for c, h in heads}
            return log
        except (cbor2.CBORError, TypeError, KeyError, ValueError) as exc:
            raise ValueError(f"the stored log does not decode ({exc})") from None

    def chains(self, damaged: Callable[[str], Exception] | None = None,
               ) -> dict[tuple[bytes, bytes], tuple[array[int], bytes]]:
        """Each chain's seqs and batch ids, read and checked against the head when first asked for
        (``damaged``: what to raise then, instead of the log's own, when they do not hold what it says)."""
        if self._chains is None:
            fail = damaged or self._damaged
            body, at, kept = self._load(), 0, {}
            for key, (top, bid, n) in self._tops.items():
                seqs = _unpacked(body[at:at + 8 * n])
                ids = body[at + 8 * n:at + _RECORD * n]
                at += _RECORD * n
                if len(seqs) != n or len(ids) != _ID * n or (n and (seqs[-1] != top or ids[-_ID:] != bid)) or (
                        not n and bid is not None):
                    raise fail("the causal log stored in the local state does not hold what its head says")
                kept[key] = (seqs, ids)
            if at != len(body):
                raise fail("the causal log stored in the local state is longer than its head says")
            self._chains = kept
        return self._chains

    def batch_at(self, key: tuple[bytes, bytes], seq: int) -> bytes | None:
        """The batch at ``seq`` of a chain (writer, compartment), or None (its top without reading the chains)."""
        top = self._tops.get(key)
        if top is None:
            return None
        if seq == top[0]:
            return top[1]
        seqs, ids = self.chains()[key]
        k = bisect_left(seqs, seq)
        return ids[k * _ID:(k + 1) * _ID] if k < len(seqs) and seqs[k] == seq else None

    def max_seq(self, writer_id: bytes, compartment_id: bytes) -> int:
        """A chain's highest seq (0 when it has none); as :meth:`CausalLog.max_seq`."""
        top = self._tops.get((writer_id, compartment_id))
        return top[0] if top is not None else 0

    def holds(self, writer_id: bytes, compartment_id: bytes, seq: int, batch_id: bytes) -> bool:
        """Whether the batch is accepted (on its writer's chain at its seq)."""
        return self.batch_at((writer_id, compartment_id), seq) == batch_id

    def tops_here(self) -> list[tuple[tuple[bytes, bytes], int, bytes]]:
        """Each non-empty chain's (writer, compartment), highest seq and the batch there."""
        return [(key, top, bid) for key, (top, bid, _n) in self._tops.items() if bid is not None]

    def encode(self) -> tuple[bytes, bytes]:
        """What :func:`encode_log` gives for this log (without making the :class:`CausalLog`)."""
        chains = self.chains()
        return _encode([(w, c, top, bid, *chains[(w, c)]) for (w, c), (top, bid, _n) in self._tops.items()],
                       self.rejected, self.gaps, self.forks, self.heads)

    def full(self) -> CausalLog:
        log = CausalLog(rejected=self.rejected, gaps=self.gaps, forks=self.forks, heads=self.heads)
        for key, (seqs, ids) in self.chains().items():
            chain = dict(zip(seqs, (ids[k:k + _ID] for k in range(0, len(ids), _ID)), strict=True))
            log.chains[key] = chain
            log.accepted.update(chain.values())
            if chain:
                log.tops[key] = self._tops[key][0]
        return log
