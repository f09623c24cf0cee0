"""The long run over real Syncthing: many rounds of random appends on both devices mixed with sync
faults (a side paused, i.e. offline; a side killed with -9 and restarted; throttling) and owner
operations (compaction, reopening), each round ending quiescent with every acknowledged record
readable on both sides, ``problems()`` empty and no conflict copies.

Not part of the default run: ``CAMILLO_SYNC_SOAK=ROUNDS`` turns it on (docs/testing-sync.md), e.g.

    CAMILLO_SYNC_SOAK=200 .venv/bin/python -m pytest -q -p no:cacheprovider --timeout=0 tests/sync/test_soak.py

``CAMILLO_SYNC_SOAK_SEED`` replays a run (the seed is printed); ``CAMILLO_SYNC_SOAK_OPS`` adds the
operations the core does not survive yet (comma-separated: ``erase``), to watch them get fixed.

pytest main thread only.
"""

from __future__ import annotations

import os
import random

import pytest

from tests.sync.test_key_changes import Devices, assert_clean, assert_has, gone, note

ROUNDS = int(os.environ.get("CAMILLO_SYNC_SOAK", "0") or 0)
SEED = int(os.environ.get("CAMILLO_SYNC_SOAK_SEED", "0") or 0) or random.SystemRandom().randrange(1, 2**31)
EXTRA = {op.strip() for op in os.environ.get("CAMILLO_SYNC_SOAK_OPS", "").split(",") if op.strip()}

pytestmark = [pytest.mark.syncthing, pytest.mark.slow,
              pytest.mark.skipif(ROUNDS <= 0, reason="the soak runs only with CAMILLO_SYNC_SOAK=ROUNDS")]


def test_soak(syncthing_pair, monkeypatch):
    monkeypatch.setenv("CAMILLO_KEYCHAIN", "none")
    rng = random.Random(SEED)
    print(f"soak: {ROUNDS} rounds, seed {SEED} (CAMILLO_SYNC_SOAK_SEED={SEED} replays it)")
    pair = syncthing_pair
    d = Devices(pair)
    written: list[bytes] = []
    erased: list[bytes] = []
    log: list[str] = []
    try:
        for rnd in range(ROUNDS):
            for _step in range(rng.randint(4, 12)):
                op = rng.choice(["append-a", "append-a", "append-b", "append-b", "refresh", "pause", "resume",
                                 "kill", "throttle", "compact", "reopen", *(["erase"] if "erase" in EXTRA else [])])
                side = rng.choice(pair.sides)
                vault = d.a if side is pair.a else d.b
                log.append(f"round {rnd}: {op} {side.name}")
                if op.startswith("append"):
                    v = d.a if op.endswith("a") else d.b
                    for _ in range(rng.randint(1, 3)):
                        written += v.append(note(f"{op} r{rnd} {rng.random():.6f}")).written
                elif op == "refresh":
                    vault.refresh()
                elif op == "pause" and not side.paused:
                    side.pause()
                elif op == "resume" and side.paused:
                    side.resume()
                elif op == "kill":
                    side.kill()
                    if rng.random() < 0.5:
                        written += vault.append(note(f"while {side.name}'s syncthing is down")).written
                    side.restart()
                elif op == "throttle":
                    side.throttle(rng.choice([0, 0, 32, 256]))
                elif op == "compact":
                    vault.refresh()
                    vault.compact()
                elif op == "reopen":
                    if side is pair.a:
                        d.reopen_a()
                    else:
                        d.reopen_b()
                elif op == "erase" and written:
                    vault.refresh()
                    rid = rng.choice(written)
                    if vault.record(rid) is not None:
                        vault.erase([rid])
                        written.remove(rid)
                        erased.append(rid)
            pair.reset()
            d.settle()
            for name, v in (("laptop", d.a), ("desktop", d.b)):
                assert_has(v, written, f"{name} after round {rnd}")
                assert all(gone(v, rid) for rid in erased), f"{name} reads an erased record after round {rnd}"
            assert_clean(d)
    except BaseException:
        print("\n".join(log[-40:]))
        print(f"soak failed; replay with CAMILLO_SYNC_SOAK_SEED={SEED} CAMILLO_SYNC_SOAK={ROUNDS}")
        raise
    finally:
        d.close()
