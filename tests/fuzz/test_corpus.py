"""Replay the fuzz corpus: the real seeds must open, the hand-made hostile cases and every crashing
input ever found (``corpus/regressions/``) must end in a clean, named refusal within the budget, and
``make_corpus.py`` must still write exactly the checked-in seeds.

Runs on pytest's main thread.
"""

from __future__ import annotations

import pytest

from . import fuzzlib, make_corpus
from .fuzzlib import HOSTILE, REGRESSIONS, SEEDS, check, load_dir

PLAIN = ["descriptor", "record", "batch", "segment", "segment-payload", "slot", "slot-statement", "envelope",
         "envelope-payload", "pack", "pack-index", "pack-trailer", "vmem-unpack", "grant-file", "grant-map",
         "enroll-code", "installation", "device-state", "device-state-plain", "cache", "cache-db"]
WORLD = ["enroll-req", "enroll-req-plain", "enroll-resp", "enroll-resp-plain", "grant-vault", "cache-vault",
         "slot-vault"]
# The corpus seeds of a plain target that a world target also reads (its plaintext format).
WORLD_SEED_DIRS = {"enroll-req-plain": "enroll-req-plain", "enroll-resp-plain": "enroll-resp-plain",
                   "grant-vault": "grant-map", "cache-vault": "cache-db"}


def test_make_corpus_writes_exactly_the_checked_in_seeds():
    assert make_corpus.write(check=True) == []


def test_every_plain_target_has_seeds():
    missing = [t for t in PLAIN if t not in ("device-state", "cache") and not load_dir(SEEDS / t)]
    assert not missing


@pytest.mark.parametrize("name", PLAIN)
def test_seeds_are_accepted(plain, name):
    """The seeds are real objects: each must take the decoder's success path (else mutations of
    it would only ever test the first check)."""
    target = plain[name]
    for data in load_dir(SEEDS / name):
        assert check(target, data) == "accepted", name


def _hostiles(name: str) -> list[bytes]:
    inputs = load_dir(HOSTILE / name)
    target_dir = WORLD_SEED_DIRS.get(name, name)
    if target_dir in make_corpus.CBOR_TARGETS:
        inputs += load_dir(HOSTILE / target_dir) if target_dir != name else []
        inputs += load_dir(HOSTILE / "_cbor") + list(make_corpus.large_hostiles().values())
    return inputs


# Hostile cases that are valid for the decoder alone (their harm shows later, in the state or the
# UI): they must pass the contract, not necessarily be refused.
MAY_ACCEPT = {"record", "grant-map", "enroll-resp-plain", "enroll-req-plain", "grant-file"}


@pytest.mark.parametrize("name", PLAIN)
def test_hostile_cases_are_refused_cleanly(plain, name):
    inputs = _hostiles(name)
    if not inputs:
        pytest.skip(f"no hand-made hostile cases for {name}")
    for data in inputs:
        label = check(plain[name], data)
        if name not in MAY_ACCEPT and plain[name].expected:
            assert label != "accepted", (name, data[:40])


@pytest.mark.parametrize("name", WORLD)
def test_world_seeds_and_hostile_cases(world, name):
    target = world.targets()[name]
    for data in world.seeds(name) + load_dir(SEEDS / WORLD_SEED_DIRS.get(name, "-")):
        check(target, data)
    for data in _hostiles(name):
        check(target, data)


@pytest.mark.parametrize("name", PLAIN + WORLD)
def test_regressions_replay(request, name):
    inputs = load_dir(REGRESSIONS / name)
    if not inputs:
        pytest.skip(f"no regression inputs for {name} (none found yet)")
    targets = request.getfixturevalue("world").targets() if name in WORLD else request.getfixturevalue("plain")
    for data in inputs:
        check(targets[name], data)


def test_counters_count():
    """The report at the end of the session is not fiction: inputs are counted per target."""
    before = fuzzlib.INPUTS["descriptor"]
    from .targets import run_descriptor

    check(fuzzlib.Target("descriptor", run_descriptor, names=["VMEM"]), b"\xa0")
    assert fuzzlib.INPUTS["descriptor"] == before + 1
