"""The causal log extended by new batches (:func:`camillo.log.extend_log`) equals the log built
from scratch (:func:`camillo.log.build_log`), in logs with gaps, forks, rejected batches and
claims of batches that are not here: random histories of a few writers, where some batches are
withheld, some writers fork or let their frontier go backwards, and some frontiers and deps name
batches that never arrive.  Whenever the extension says it applies, every part of the log (chains,
accepted, rejected, gaps with their batch and reason, forks, heads, tops) must be what a full build
gives; and the common case (a writer's next batch in a compartment with a gap elsewhere) must apply.

Pure computation; pytest main thread.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass, field

from camillo.log import CausalLog, build_log, extend_log

C1, C2 = b"c" * 16, b"d" * 16
WRITERS = [bytes([65 + i]) * 16 for i in range(3)]


@dataclass
class Header:
    writer_id: bytes
    compartment_id: bytes
    seq: int
    prev: bytes | None
    deps: tuple[bytes, ...]
    frontier: dict[bytes, int]
    heads: dict[bytes, dict[bytes, int]] = field(default_factory=dict)


@dataclass
class View:
    id: bytes
    header: Header

    def __post_init__(self) -> None:  # (as camillo.control.BatchView)
        self.writer_id, self.compartment_id, self.seq = self.header.writer_id, self.header.compartment_id, self.header.seq


class Roster:
    """What the log asks of a roster: every test writer may write every compartment."""

    def __init__(self) -> None:
        self.control_id = b"\0" * 16
        self.compartments = {C1: "personal", C2: "work"}
        self.revocations: dict[bytes, object] = {}

    def can_write(self, writer_id: bytes, cid: bytes) -> tuple[bool, str]:
        return True, ""


def batch_id(*parts: object) -> bytes:
    return hashlib.sha256(repr(parts).encode()).digest()


def history(rng: random.Random, size: int) -> list[View]:
    """Batches in the order they were written: honest chains with frontiers of what each writer had
    seen, plus hostile turns (a fork, a frontier going backwards, a claim or a dep of nothing)."""
    views: list[View] = []
    mine: dict[tuple[bytes, bytes], list[View]] = {}
    seen: dict[bytes, dict[bytes, int]] = {c: {} for c in (C1, C2)}
    for n in range(size):
        w, c = rng.choice(WRITERS), rng.choice((C1, C2))
        chain = mine.setdefault((w, c), [])
        frontier = dict(seen[c])
        seq, prev = len(chain) + 1, chain[-1].id if chain else None
        deps = tuple(v.id for v in rng.sample(views, min(len(views), rng.randrange(3))) if v.header.compartment_id == c)
        turn = rng.random()
        if turn < 0.05 and chain:  # a fork: another batch at a seq already used
            seq = rng.randrange(1, len(chain) + 1)
            prev = chain[seq - 2].id if seq > 1 else None
        elif turn < 0.1 and frontier:  # a frontier going backwards
            frontier = {k: 0 for k in frontier}
        elif turn < 0.15:  # a claim of a batch that never arrives
            other = rng.choice(WRITERS)
            frontier[other] = frontier.get(other, 0) + rng.randrange(1, 90)
        elif turn < 0.2:
            deps = (*deps, batch_id("never", n))
        frontier[w] = max(frontier.get(w, 0), seq - 1) if turn >= 0.1 else frontier.get(w, 0)
        v = View(batch_id(n, w, c, seq), Header(w, c, seq, prev, deps, frontier))
        views.append(v)
        if seq == len(chain) + 1:
            chain.append(v)
        seen[c][w] = max(seen[c].get(w, 0), seq)
    return views


def shape(log: CausalLog) -> dict:
    return {"accepted": log.accepted, "rejected": log.rejected, "chains": log.chains,
            "gaps": sorted((g.writer_id, g.compartment_id, g.seq, g.batch_id or b"", g.reason) for g in log.gaps),
            "forks": sorted((f.writer_id, f.compartment_id, f.seq, f.batch_ids) for f in log.forks),
            "heads": {c: h for c, h in log.heads.items() if h},
            "tops": {k: t for k, t in log.tops.items() if log.chains.get(k)}}


def test_an_extended_log_equals_a_full_build_in_logs_with_gaps_forks_and_rejections():
    roster = Roster()
    applied = refused = 0
    for seed in range(600):
        rng = random.Random(seed)
        written = history(rng, rng.randrange(5, 60))
        views = {v.id: v for v in written}
        withheld = {v.id for v in rng.sample(written, rng.randrange(0, 4))}
        here = [v.id for v in written if v.id not in withheld]
        if rng.random() < 0.5:  # arrived in the order written
            cut = rng.randrange(1, len(here))
            had, rest = set(here[:cut]), here[cut:]
        else:  # arrived in any order (a sync service): later batches may be here before earlier ones
            had = {b for b in here if rng.random() < 0.8}
            rest = [b for b in here if b not in had]
        if not had or not rest:
            continue
        log = build_log(views, had, roster)
        new = rest[:rng.randrange(1, 4)]
        before = shape(log)
        if extend_log(log, views, new, roster):  # type: ignore[arg-type]
            applied += 1
            assert shape(log) == shape(build_log(views, had | set(new), roster)), seed  # type: ignore[arg-type]
        else:
            refused += 1
            assert shape(log) == before, seed  # a refusal changes nothing
    assert applied > 60 and refused > 60, (applied, refused)


def test_a_gap_elsewhere_leaves_the_next_batch_of_a_chain_to_the_extension():
    """A host withholds one batch of writer A: writer B's next batch, and A's own next one, still
    extend the log (before, any gap in the compartment made every append rebuild the whole log)."""
    roster = Roster()
    a, b = WRITERS[0], WRITERS[1]
    a1 = View(batch_id("a1"), Header(a, C1, 1, None, (), {}))
    a2 = View(batch_id("a2"), Header(a, C1, 2, a1.id, (), {a: 1}))  # withheld
    a3 = View(batch_id("a3"), Header(a, C1, 3, a2.id, (), {a: 2}))
    b1 = View(batch_id("b1"), Header(b, C1, 1, None, (), {a: 3}))
    b2 = View(batch_id("b2"), Header(b, C1, 2, b1.id, (b1.id,), {a: 3, b: 1}))
    a4 = View(batch_id("a4"), Header(a, C1, 4, a3.id, (), {a: 3, b: 2}))
    views = {v.id: v for v in (a1, a2, a3, b1, b2, a4)}
    here = {a1.id, a3.id, b1.id}
    log = build_log(views, here, roster)  # type: ignore[arg-type]
    assert [(g.seq, g.batch_id) for g in log.gaps] == [(2, a2.id)]
    for nxt in (b2, a4):
        assert extend_log(log, views, [nxt.id], roster)  # type: ignore[arg-type]
        here.add(nxt.id)
        assert shape(log) == shape(build_log(views, here, roster))  # type: ignore[arg-type]
    # the withheld batch itself fills the gap: the whole log is built again
    assert not extend_log(log, views, [a2.id], roster)  # type: ignore[arg-type]


def test_a_new_batch_that_would_change_a_gap_or_a_fork_is_left_to_the_full_build():
    """The cases the extension must refuse, each built by hand: the full build (what a refusal
    leads to) then differs from a plain extension."""
    roster = Roster()
    a, b = WRITERS[0], WRITERS[1]
    a1 = View(batch_id("a1"), Header(a, C1, 1, None, (), {}))
    a2 = View(batch_id("a2"), Header(a, C1, 2, a1.id, (), {a: 1}))

    def refused(here: set[bytes], new: View, views: list[View]) -> None:
        by_id = {v.id: v for v in views}
        log = build_log(by_id, here, roster)  # type: ignore[arg-type]
        before = shape(log)
        assert not extend_log(log, by_id, [new.id], roster)  # type: ignore[arg-type]
        assert shape(log) == before

    # 1. a dependency named by another batch without a claim of it: that gap closes when it arrives
    b1 = View(batch_id("b1"), Header(b, C1, 1, None, (a2.id,), {}))
    refused({a1.id, b1.id}, a2, [a1, a2, b1])
    # 2. another batch at a rejected batch's place (its frontier went backwards): a fork, both rejected
    b2 = View(batch_id("b2"), Header(b, C1, 2, b1.id, (), {a: 1}))
    a2_claims_b = View(batch_id("a2-b"), Header(a, C1, 2, a1.id, (), {a: 1, b: 1}))
    a3_back = View(batch_id("a3-back"), Header(a, C1, 3, a2_claims_b.id, (), {a: 2, b: 0}))
    a3 = View(batch_id("a3"), Header(a, C1, 3, a2_claims_b.id, (), {a: 2, b: 2}))
    refused({a1.id, a2_claims_b.id, b1.id, b2.id, a3_back.id}, a3,
            [a1, a2_claims_b, b1, b2, a3_back, a3])
    # 3. a third batch at the seq where a writer's chain forked: the writer is frozen from the fork on
    a2_fork = View(batch_id("a2-fork"), Header(a, C1, 2, a1.id, (), {a: 1, b: 0}))
    a2_third = View(batch_id("a2-third"), Header(a, C1, 2, a1.id, (), {a: 1, b: 2}))
    refused({a1.id, a2.id, a2_fork.id}, a2_third, [a1, a2, a2_fork, a2_third])
