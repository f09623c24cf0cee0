"""The crash harness, parent side: build each scenario's template world once, then for every
iteration copy it, start :mod:`tests.reliability.crash_worker`, kill it (at a counted file-system
event, with or without an emulated power cut, or after a random delay), and run the scenario's
checks.  :class:`Tally` counts kills survived per operation and kill kind, and keeps each failure
with what is needed to reproduce it (operation, kill spec, seed).

Also the scale knob shared by the three reliability suites: ``CAMILLO_RELIABILITY_SCALE``
(default 1; ``scripts/reliability`` raises it) and ``CAMILLO_RELIABILITY_SEED``.

Runs on the pytest main thread (the worker is a separate process; no threads here).
"""

from __future__ import annotations

import json
import os
import random
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from tests.reliability.scenarios import SCENARIOS, CheckFailed, World

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def scale() -> float:
    return float(os.environ.get("CAMILLO_RELIABILITY_SCALE", "1"))


def scaled(n: int) -> int:
    return max(1, round(n * scale()))


def seed() -> int:
    return int(os.environ.get("CAMILLO_RELIABILITY_SEED", "20261129"))


@dataclass
class Kill:
    at: int | None = None  # kill just before the N-th file-system event
    cut: str = "none"  # power-cut emulation at that point: none | all | random
    delay: float | None = None  # or: SIGKILL from the parent this long after "ready"
    seed: int = 0
    sabotage: str | None = None
    call: str | None = None  # or: just before the nth call of this product function (module:Class.method)
    nth: int = 1

    @property
    def kind(self) -> str:
        if self.delay is not None:
            return "delay"
        if self.call is not None:
            return f"call/{self.cut}"
        if self.at is None:
            return "none"
        return f"event/{self.cut}"

    def spec(self) -> dict:
        return {"at": self.at, "cut": self.cut, "seed": self.seed, "sabotage": self.sabotage, "call": self.call,
                "nth": self.nth}

    def __str__(self) -> str:
        if self.delay is not None:
            return f"SIGKILL after {self.delay:.4f}s"
        if self.call is not None:
            return f"kill before call {self.nth} of {self.call}, power cut {self.cut}, seed {self.seed}"
        if self.at is None:
            return "no kill"
        return f"kill before event {self.at}, power cut {self.cut}, seed {self.seed}"


@dataclass
class Outcome:
    killed: bool
    acks: list[dict]
    events: int
    seconds: float
    tolerated: list[str] = field(default_factory=list)
    root: str = ""


class WorkerFailed(AssertionError):
    pass


def run_worker(world: World, op: str, kill: Kill, ctx: dict, timeout: float = 180) -> Outcome:
    scenario = SCENARIOS[op]
    env = dict(os.environ, CAMILLO_INSECURE_TEST_KDF="1", CAMILLO_KEYCHAIN="none",
               CAMILLO_HOME=world.home("worker-default"))
    env.pop("CAMILLO_PASSPHRASE", None)
    err_path = os.path.join(world.root, "worker.stderr")
    with open(err_path, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "tests.reliability.crash_worker", world.root, op,
                                 json.dumps(kill.spec())], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err)
    acks: list[dict] = []
    done: dict = {}
    fd = proc.stdout.fileno()
    buf = b""
    deadline = time.monotonic() + timeout
    kill_time = None
    parent_killed = False
    try:
        while True:
            now = time.monotonic()
            if now > deadline:
                proc.kill()
                raise WorkerFailed(f"{op}: the worker did not finish in {timeout}s ({kill})")
            wait = deadline - now
            if kill_time is not None:
                wait = max(0.0, min(wait, kill_time - now))
            ready, _, _ = select.select([fd], [], [], wait)
            if kill_time is not None and time.monotonic() >= kill_time and proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                parent_killed = True
                kill_time = None
            if not ready:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                raw, buf = buf.split(b"\n", 1)
                line = json.loads(raw)
                if "ack" in line:
                    acks.append(line["ack"])
                elif line.get("ready") and kill.delay is not None:
                    kill_time = time.monotonic() + kill.delay
                elif line.get("done"):
                    done = line
                elif scenario.on_line is not None:
                    scenario.on_line(world, line, ctx)
    finally:
        proc.stdout.close()
        rc = proc.wait()
    stderr = open(err_path, "rb").read().decode(errors="replace")
    killed = rc == -signal.SIGKILL
    if not killed and rc != 0:
        raise WorkerFailed(f"{op}: the worker failed (exit {rc}, {kill}):\n{stderr[-3000:]}")
    if killed and not parent_killed and "faultfs: killed" not in stderr:
        raise WorkerFailed(f"{op}: the worker was killed by something else ({kill}):\n{stderr[-3000:]}")
    return Outcome(killed, acks, done.get("events", 0), done.get("seconds", 0.0))


@dataclass
class Failure:
    op: str
    kill: Kill
    message: str
    root: str

    def __str__(self) -> str:
        return f"{self.op}: {self.kill}: {self.message} (world kept in {self.root})"


@dataclass(frozen=True)
class KnownBug:
    """An unfixed bug the campaigns may hit: counted as known, not as a failure, as long as its
    deterministic reproducer in test_crash.py is a strict xfail (so fixing it forces removing this)."""

    name: str
    op: str
    matches: Callable[[str], bool]
    reproducer: str


KNOWN_BUGS: tuple[KnownBug, ...] = (
    # none open (the last, a passphrase change killed between its counter and its segments leaving the old
    # slots, was fixed on 2026-12-07: test_crash.py has its regression test)
)


class KnownBugHit(AssertionError):
    """A deterministic reproducer hit exactly its known bug (what its strict xfail expects)."""


def known_bug(op: str, message: str) -> KnownBug | None:
    return next((b for b in KNOWN_BUGS if b.op == op and b.matches(message)), None)


@dataclass
class Tally:
    runs: Counter = field(default_factory=Counter)
    known: Counter = field(default_factory=Counter)  # (op, known bug name) -> kills that hit it
    survived: Counter = field(default_factory=Counter)  # (op, kind) -> kills survived
    tolerated: Counter = field(default_factory=Counter)  # (op, problem kind) seen right after a kill
    events: dict = field(default_factory=dict)
    failures: list[Failure] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = []
        for op in sorted({o for o, _ in self.runs}):
            kinds = {k: n for (o, k), n in sorted(self.survived.items()) if o == op}
            total = sum(kinds.values())
            fails = sum(1 for f in self.failures if f.op == op)
            detail = ", ".join(f"{k} {n}" for k, n in kinds.items())
            tol = ", ".join(f"{k} x{n}" for (o, k), n in sorted(self.tolerated.items()) if o == op)
            known = sum(n for (o, _), n in self.known.items() if o == op)
            out.append(f"{op:<15} {total:>4} kills survived ({detail}); {fails} failed"
                       + (f"; {known} hit a known bug" if known else "")
                       + f"; {self.events.get(op, '?')} fs events per run" + (f"; tolerated right after the kill: {tol}" if tol else ""))
        for (op, name), n in sorted(self.known.items()):
            out.append(f"  known bug ({op}, x{n}): {name}")
        return out


class Campaign:
    """Kills of one operation.  ``base`` holds the template and the iterations' worlds."""

    def __init__(self, op: str, base: str, tally: Tally, rng: random.Random | None = None, *,
                 allow_known: bool = True) -> None:
        self.op = op
        self.allow_known = allow_known
        self.scenario = SCENARIOS[op]
        self.base = base
        self.tally = tally
        self.rng = rng or random.Random(seed())
        self.template = os.path.join(base, f"template-{op}")
        self.count = 0
        self.events = 0
        self.seconds = 0.0
        if not os.path.isdir(self.template):
            os.makedirs(self.template)
            self.scenario.build(World(self.template))

    def iteration(self, kill: Kill, *, keep: bool = False) -> Outcome | None:
        self.count += 1
        root = tempfile.mkdtemp(prefix=f"{self.op}-{self.count:05d}-", dir=self.base)
        os.rmdir(root)
        shutil.copytree(self.template, root, symlinks=True)
        world = World(root)
        try:
            ctx = self.scenario.prepare(world)
            out = run_worker(world, self.op, kill, ctx)
            out.tolerated = self.scenario.check(world, out.acks, ctx) or []
        except CheckFailed as exc:
            bug = known_bug(self.op, str(exc)) if self.allow_known else None
            if bug is None:
                self.tally.failures.append(Failure(self.op, kill, str(exc), root))
            else:
                self.tally.known[(self.op, bug.name)] += 1
                shutil.rmtree(root, ignore_errors=True)
            return None
        except WorkerFailed as exc:
            self.tally.failures.append(Failure(self.op, kill, str(exc), root))
            return None
        out.root = root
        self.tally.runs[(self.op, kill.kind)] += 1
        if out.killed:
            self.tally.survived[(self.op, kill.kind)] += 1
            for k in out.tolerated:
                self.tally.tolerated[(self.op, k)] += 1
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
        return out

    def calibrate(self) -> None:
        out = self.iteration(Kill())
        if out is None:
            raise AssertionError(f"{self.op}: the uninterrupted run fails: {self.tally.failures[-1]}")
        if out.killed or not out.acks:
            raise AssertionError(f"{self.op}: the uninterrupted run acknowledged nothing")
        self.events, self.seconds = out.events, out.seconds
        self.tally.events[self.op] = out.events

    def plan(self, n: int) -> list[Kill]:
        """n kills: event kills (process crash, full and random power cuts) and random delays."""
        kills = []
        for i in range(n):
            s = self.rng.randrange(1 << 30)
            mode = i % 4
            if mode == 3:
                kills.append(Kill(delay=self.rng.uniform(0, self.seconds * 1.05), seed=s))
            else:
                kills.append(Kill(at=self.rng.randint(1, max(1, self.events)), cut=("none", "all", "random")[mode],
                                  seed=s))
        return kills

    def run(self, n: int) -> None:
        self.calibrate()
        for kill in self.plan(n):
            self.iteration(kill)


def run_campaigns(ops: list[str], n: int, base: str, tally: Tally, seed_value: int | None = None) -> None:
    rng = random.Random(seed() if seed_value is None else seed_value)
    for op in ops:
        Campaign(op, base, tally, random.Random(rng.randrange(1 << 30))).run(n)
