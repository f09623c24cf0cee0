"""The crash-test worker: one process that runs one operation of :mod:`tests.reliability.scenarios`
with the real product code and may be killed at any point.

    python -m tests.reliability.crash_worker ROOT OPERATION KILL_SPEC_JSON

It prints JSON lines on stdout, each flushed at once so the parent has it even if this process is
killed right after: ``{"ready": true}`` when the kill hook is armed, ``{"ack": {...}}`` after each
acknowledged call returned, scenario-specific lines, and ``{"done": true, "events": N}`` at the end.

The kill spec: ``at`` (kill just before the N-th counted file-system event, see
:mod:`tests.reliability.faultfs`), ``cut`` (``none``, ``all`` or ``random``: emulate a power cut
first), ``seed``, and ``sabotage`` (break the product on purpose, to prove the harness notices:
``no-dir-fsync`` makes the folder shelf skip its directory fsyncs).  Instead of ``at``, ``call``
(``module:Class.method``) and ``nth`` kill just before the nth call of a product function.  Without ``at`` the worker runs
to the end and reports how many events it made (the parent's calibration run).

Runs on this process's main thread only.
"""

from __future__ import annotations

import json
import os
import sys
import time

from tests.reliability.faultfs import FaultFS
from tests.reliability.scenarios import SCENARIOS, World


class WorkerIO:
    def __init__(self, world: World, spec: dict) -> None:
        self.world = world
        self.spec = spec
        self.fs: FaultFS | None = None
        self.started = time.monotonic()

    def line(self, obj: dict) -> None:
        sys.stdout.write(json.dumps(obj) + "\n")
        sys.stdout.flush()

    def ack(self, obj: dict) -> None:
        self.line({"ack": obj})

    def arm(self) -> None:
        w = self.world
        self.fs = FaultFS([w.vault, os.path.join(w.root, "homes")], os.path.join(w.root, ".faultfs-stash"),
                          kill_at=self.spec.get("at"), cut=self.spec.get("cut", "none"), seed=self.spec.get("seed", 0))
        self.fs.install()
        if self.spec.get("call"):
            self._kill_at_call(self.spec["call"], self.spec.get("nth", 1))
        self.started = time.monotonic()
        self.line({"ready": True})

    def _kill_at_call(self, target: str, nth: int) -> None:
        """Crash (with the spec's power cut) just before the nth call of ``module:Class.method``
        or ``module:function``: a kill point named by what the product does, not by counting."""
        import importlib

        module_name, _, attr = target.partition(":")
        owner = importlib.import_module(module_name)
        *path, name = attr.split(".")
        for part in path:
            owner = getattr(owner, part)
        original = getattr(owner, name)
        calls = [0]
        fs = self.fs

        def wrapper(*args, **kwargs):
            calls[0] += 1
            if calls[0] == nth:
                fs.crash(f"call {target} #{nth}")
            return original(*args, **kwargs)

        setattr(owner, name, wrapper)

    def wait_for(self, name: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while not os.path.exists(os.path.join(self.world.root, name)):
            if time.monotonic() > deadline:
                raise SystemExit(f"the parent never created {name}")
            time.sleep(0.005)


def sabotage(kind: str | None) -> None:
    if kind is None:
        return
    if kind == "no-dir-fsync":
        import camillo.storage

        camillo.storage.fsync_dir = lambda directory: None
    else:
        raise SystemExit(f"unknown sabotage {kind}")


def main(argv: list[str]) -> int:
    root, op, spec = argv[0], argv[1], json.loads(argv[2])
    world = World(root)
    sabotage(spec.get("sabotage"))
    io = WorkerIO(world, spec)
    SCENARIOS[op].work(world, io)
    io.line({"done": True, "events": io.fs.events if io.fs else 0,
             "seconds": round(time.monotonic() - io.started, 4)})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
