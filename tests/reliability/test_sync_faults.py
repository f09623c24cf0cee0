"""Sync faults between two device copies of a vault (see :mod:`tests.reliability.syncsim`).

Device A wrote four batches (four segments) that device B has not received.  The simulated sync
service delivers them to B's folder late and out of order, partially (a file still being written,
under its final name), duplicated under every common conflict-copy name, or reverts B's folder to an
older copy.  After every delivery step B refreshes and must:

* show every record of every completely delivered file, and nothing from a file that is not;
* show the fact the newest delivered batch sets, never a conflict, never an older value than it
  showed before unless it says it is not up to date;
* report ``syncing`` while a batch is known to be missing (naming its seq or batch id) or a file is
  incomplete (naming the file), and ``up to date`` only when nothing is;
* after a rollback: ``syncing`` at once, then the ``rollback alert`` after T1 = 600 s when what it
  saw vanished without a signed manifest (``missing batches`` for a hole below the top), or at once
  when old slots (an older master-secret generation) were restored.

Enumerated: every delivery order (24), every file at five partial lengths (20), every file under eight
conflict-copy styles (32 in CI, complete/truncated x before/after spread over them; all 128 at scale
2 and up), every non-empty set of vanished files (15), restored old slots; then hypothesis-generated
event sequences (40 in CI; ``CAMILLO_RELIABILITY_SCALE`` scales them).

pytest main thread only.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import time

import pytest
from camillo import Unlock, Vault
from camillo import log as log_mod
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.reliability import syncsim
from tests.reliability.conftest import count
from tests.reliability.harness import scale, scaled, seed
from tests.reliability.scenarios import PASSPHRASE

SUITE = "sync faults (scenarios)"


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CAMILLO_INSECURE_TEST_KDF", "1")
        mp.setenv("CAMILLO_KEYCHAIN", "none")
        base = str(tmp_path_factory.mktemp("sync-upstream"))
        return syncsim.build(base)


class Fresh:
    """Replicas of B's baseline, one per scenario."""

    def __init__(self, upstream, root: str) -> None:
        self.folder, self.home, self.up = upstream
        self.root = root
        self.n = 0

    def __call__(self) -> syncsim.Replica:
        self.n += 1
        d = os.path.join(self.root, f"r{self.n:05d}")
        shutil.copytree(self.folder, os.path.join(d, "b"))
        shutil.copytree(self.home, os.path.join(d, "home"))
        r = syncsim.Replica(os.path.join(d, "b"), os.path.join(d, "home"), self.up)
        r.open()
        r.check()  # the baseline: up to date, nothing of A's new batches
        return r

    def done(self, r: syncsim.Replica) -> None:
        r.close()
        shutil.rmtree(os.path.dirname(r.path), ignore_errors=True)


@pytest.fixture
def fresh(upstream, tmp_path):
    return Fresh(upstream, str(tmp_path))


def finish(r: syncsim.Replica) -> None:
    """The sync completes: every file arrives whole; B is up to date with everything."""
    for f in r.up.files:
        if f.index not in r.complete:
            r.deliver(f.index)
    status, details = r.check()
    assert status == "up to date", details
    assert not r.vault.problems(full=True)


def test_every_delivery_order(fresh):
    for order in itertools.permutations(range(1, 5)):
        r = fresh()
        for i in order:
            r.deliver(i)
            r.check()
        finish(r)
        fresh.done(r)
        count(SUITE, "delivery orders (every permutation of 4 files)")


def partial_lengths(size: int) -> list[int]:
    return [0, 1, 1268, size // 2, size - 1]  # empty, one byte, the header only, half, all but one byte


def test_partial_files_are_never_taken_for_whole(fresh):
    rng = random.Random(seed())
    for f in fresh.up.files:
        for n in partial_lengths(len(f.data)):
            order = rng.sample(range(1, 5), 4)
            r = fresh()
            for i in order:
                if i == f.index:
                    r.deliver_partial(i, n)
                else:
                    r.deliver(i)
                r.check()
            r.reopen()  # a new session sees the same incomplete file the same way
            r.check()
            finish(r)
            fresh.done(r)
            count(SUITE, "partial files (each file at 5 lengths)")


def conflict_cases(files) -> list[tuple]:
    """Every file under every style, complete or truncated, before or after the real file (128); in
    the CI run a covering subset: each file under each style once, each style seeing all four
    complete/truncated x before/after combinations (32)."""
    styles = list(syncsim.CONFLICT_STYLES)
    if scale() >= 2:
        return list(itertools.product(files, styles, (False, True), (True, False)))
    return [(f, style, bool((fi + si) % 2), bool((fi + si) // 2 % 2))
            for fi, f in enumerate(files) for si, style in enumerate(styles)]


def test_conflict_copies_are_ignored(fresh):
    rng = random.Random(seed() + 1)
    for f, style, truncated, before in conflict_cases(fresh.up.files):
        order = rng.sample(range(1, 5), 4)
        r = fresh()
        n = len(f.data) // 3 if truncated else None
        for i in order:
            if i == f.index and before:
                r.conflict_copy(i, style, n)
                r.check()
            r.deliver(i)
            if i == f.index and not before:
                r.conflict_copy(i, style, n)
            r.check()
        finish(r)
        assert all(p.kind != "damaged" for p in r.vault.problems()), "a conflict copy was read"
        fresh.done(r)
        count(SUITE, "conflict copies (files x 8 styles x complete/truncated x before/after)")


EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("deliver"), st.integers(1, 4)),
        st.tuples(st.just("partial"), st.integers(1, 4), st.floats(0, 0.999)),
        st.tuples(st.just("conflict"), st.integers(1, 4), st.sampled_from(sorted(syncsim.CONFLICT_STYLES)),
                  st.booleans()),
        st.tuples(st.just("reopen")),
    ),
    min_size=1, max_size=12,
)


@settings(max_examples=scaled(40), deadline=None, derandomize=scale() <= 1,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(events=EVENTS)
def test_random_delivery_sequences(upstream, tmp_path_factory, events):
    fresh = Fresh(upstream, str(tmp_path_factory.mktemp("seq")))
    r = fresh()
    try:
        for ev in events:
            if ev[0] == "deliver":
                r.deliver(ev[1])
            elif ev[0] == "partial":
                if ev[1] in r.complete:
                    continue  # a sync client does not rewrite a file it already finished
                r.deliver_partial(ev[1], int(ev[2] * len(r.up.files[ev[1] - 1].data)))
            elif ev[0] == "conflict":
                f = r.up.files[ev[1] - 1]
                r.conflict_copy(ev[1], ev[2], None if ev[3] else len(f.data) // 2)
            else:
                r.reopen()
            r.check()
        finish(r)
    finally:
        fresh.done(r)
    count(SUITE, "random event sequences (hypothesis)")


# ---------------------------------------------------------------------------------------------- rollback


def later(monkeypatch, seconds: float) -> None:
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + seconds)


@pytest.mark.parametrize("vanished", [s for k in range(1, 5) for s in itertools.combinations(range(1, 5), k)],
                         ids=lambda s: "vanished-" + "".join(map(str, s)))
def test_vanished_batches_are_syncing_then_an_alert(fresh, monkeypatch, vanished):
    r = fresh()
    for i in range(1, 5):
        r.deliver(i)
    r.check()
    for i in vanished:
        r.delete(i)
    status, details = r.check(rolled_back=True)
    assert status == "syncing", f"B's folder lost {vanished} and B says {status!r}"
    text = "\n".join(details)
    named = [f for f in r.up.files if f.index in vanished and (f.batch.hex()[:12] in text or f"seq {f.seq}" in text)]
    assert named, f"the status details name none of the vanished batches: {details}"
    texts = {v.text for v in r.vault.timeline()}
    assert not {"m1", "m3", "m4"} - texts or status != "up to date"
    r.close()
    later(monkeypatch, log_mod.SYNC_GRACE_SECONDS + 5)
    r.open()
    status, details = r.vault.sync_status()
    if 4 in vanished:  # the newest batch B saw vanished without a signed manifest
        assert status == "rollback alert", (status, details)
        assert any("vanished without a signed manifest" in d for d in details)
        assert [p for p in r.vault.problems() if p.kind == "rollback"]
    else:  # a hole below batches that are still here: a gap, missing rather than rolled back
        assert status == "missing batches", (status, details)
    for i in vanished:
        r.deliver(i)
    status, details = r.check()
    assert status == "up to date", details
    fresh.done(r)
    count(SUITE, "rollbacks (every non-empty set of vanished files)")


def test_restored_old_slots_raise_an_alert_at_once(tmp_path):
    """The host restores the folder from before a revocation (old slots, old envelopes): the device
    remembers the newer master-secret generation and raises the alert on the first open."""
    path, old = str(tmp_path / "v"), str(tmp_path / "old")
    vault, _ = Vault.create(path, PASSPHRASE, device_name="A", home=str(tmp_path / "home-a"))
    vault.lock()
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "home-c"), device_name="C") as c:
        lost = c.writer_id.hex()
    shutil.copytree(path, old)
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "home-a")) as v:
        v.revoke(lost, reason="lost")
        assert v.sync_status()[0] == "up to date"
        generation = v.session.keyring.generation
    shutil.rmtree(path)
    shutil.copytree(old, path)  # the rollback
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "home-a")) as v:
        assert v.session.keyring.generation < generation
        status, details = v.sync_status()
        assert status == "rollback alert", (status, details)
        assert any("old slots were restored" in d for d in details)
    count(SUITE, "rollbacks (old slots restored)")
