"""Mutation fuzzing of every decoder: bit flips, byte sets, truncations, extensions, deletions and
duplications, splices across the whole corpus, CBOR length-field inflation and indefinite-length
rewrites, binary length/count-field inflation, and CBOR tree mutations re-encoded non-canonically
(duplicate and unsorted keys, non-shortest heads, indefinite lengths).

Each loop starts from the target's seeds (and, for the insider targets, plaintexts that the harness
seals with the right keys), counts every input, and fails listing each one that broke the contract
(see :mod:`tests.fuzz.fuzzlib`).  CI runs a fixed number of derandomized inputs; ``scripts/fuzz``
multiplies them.  Runs on pytest's main thread.
"""

from __future__ import annotations

import os

import pytest

from .fuzzlib import SEEDS, fuzz_loop, iterations, load_dir

# inputs per target in CI (the long run multiplies them by CAMILLO_FUZZ_SCALE)
PLAIN_BUDGET = {
    "descriptor": 1200, "record": 1200, "batch": 1000, "segment": 300, "segment-payload": 600, "slot": 400,
    "slot-statement": 600, "envelope": 400, "envelope-payload": 600, "pack": 500, "pack-index": 600,
    "pack-trailer": 400, "vmem-unpack": 80, "grant-file": 600, "grant-map": 800, "enroll-code": 600,
    "installation": 400, "device-state": 200, "device-state-plain": 400, "cache": 80, "cache-db": 50,
}
WORLD_BUDGET = {
    "enroll-req": 40, "enroll-req-plain": 150, "enroll-resp": 40, "enroll-resp-plain": 150, "grant-vault": 60,
    "cache-vault": 12, "slot-vault": 15,
}
WORLD_SEED_DIRS = {"enroll-req-plain": "enroll-req-plain", "enroll-resp-plain": "enroll-resp-plain",
                   "grant-vault": "grant-map", "cache-vault": "cache-db"}


def _pool() -> list[bytes]:
    """Every seed of every target: material for splices."""
    return [d for p in sorted(SEEDS.iterdir()) if p.is_dir() for d in load_dir(p)]


@pytest.mark.parametrize("name", sorted(PLAIN_BUDGET))
def test_mutations(plain, name):
    seeds = load_dir(SEEDS / name)
    if name == "device-state":
        seeds = [_sealed_state(plain)]
    if name == "cache":
        seeds = [_sealed_cache(plain)]
    fuzz_loop(plain[name], seeds, iterations(PLAIN_BUDGET[name]), _pool() + seeds)


@pytest.mark.parametrize("name", sorted(WORLD_BUDGET))
def test_mutations_against_a_real_vault(world, name):
    seeds = world.seeds(name)
    if name in WORLD_SEED_DIRS:
        seeds += load_dir(SEEDS / WORLD_SEED_DIRS[name])
    fuzz_loop(world.targets()[name], seeds, iterations(WORLD_BUDGET[name]), seeds)


def _sealed_state(plain) -> bytes:
    from camillo.keys import local_key
    from camillo.localstate import seal_local

    from .targets import Fixed

    return seal_local(local_key(Fixed.LOCAL_SECRET, "state", Fixed.VAULT), "state", Fixed.VAULT,
                      (SEEDS / "device-state-plain" / "real.cbor").read_bytes())


def _sealed_cache(plain) -> bytes:
    """The real seed database, encrypted as the fixed actor's local state database."""
    import tempfile

    from camillo.cache import Cache

    from .targets import Fixed, install_state_image

    with tempfile.TemporaryDirectory() as tmp:
        cache = Cache(os.path.join(tmp, "state.db"), Fixed.LOCAL_SECRET, Fixed.VAULT)
        assert install_state_image(cache, (SEEDS / "cache-db" / "real.sqlite").read_bytes(), 1)
        return open(cache.path, "rb").read()
