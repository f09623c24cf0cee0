"""Fixtures of the fuzz tests (the plain targets, the real-vault world) and the input counters'
report: at the end of a session that ran fuzz tests, a table of inputs tried per target and the
outcomes seen, also written as JSON to ``$CAMILLO_FUZZ_STATS`` when that is set.

pytest hooks and fixtures: pytest's main thread only.
"""

from __future__ import annotations

import json
import os

import pytest

from . import fuzzlib
from .targets import World, plain_targets


@pytest.fixture(scope="session")
def plain(tmp_path_factory):
    """Every vault-free target, with its scratch directory."""
    return plain_targets(tmp_path_factory.mktemp("fuzz-plain"))


@pytest.fixture(scope="session")
def world(tmp_path_factory):
    """A real vault (own home, test KDF, no keychain) and the targets that need one."""
    w = World(tmp_path_factory.mktemp("fuzz-world"))
    yield w
    w.close()


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    if not fuzzlib.INPUTS:
        return
    tr = terminalreporter
    tr.section(f"fuzz inputs (profile {fuzzlib.PROFILE}, seed {fuzzlib.SEED})")
    total = 0
    for name in sorted(fuzzlib.INPUTS):
        n = fuzzlib.INPUTS[name]
        total += n
        top = ", ".join(f"{k} {v}" for k, v in fuzzlib.OUTCOMES[name].most_common(4))
        crashes = len(fuzzlib.CRASHES.get(name, []))
        tr.write_line(f"{name:20} {n:8d} inputs  {crashes:3d} broke the contract   [{top}]")
    tr.write_line(f"{'total':20} {total:8d} inputs")
    out = os.environ.get("CAMILLO_FUZZ_STATS")
    if out:
        with open(out, "w") as fh:
            json.dump({"profile": fuzzlib.PROFILE, "seed": fuzzlib.SEED, "inputs": dict(fuzzlib.INPUTS),
                       "outcomes": {k: dict(v) for k, v in fuzzlib.OUTCOMES.items()},
                       "crashes": dict(fuzzlib.CRASHES)}, fh, indent=1, sort_keys=True)
