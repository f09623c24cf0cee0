"""The ``sync`` group: how long a change on one device takes to show on another through a real sync
engine, beside what the sync engine alone takes to carry the same files.

Two Syncthing instances on loopback (the harness of ``tests/sync``, :mod:`tests.sync.syncthing`,
with its settings: file watcher on with a 1 s delay, a 2 s rescan, no fsync of received files)
share one folder.  The lived-in vault of the corpus (``loose``) is copied into side A's folder, the
desktop of the fixture opens it there (device A), and once Syncthing delivered it a new installation
opens it on side B with the passphrase, which registers it (device B).  Then, one sample at a time,
each after both sides are quiet again and a random pause (so that samples fall at every phase of
Syncthing's watcher and rescan timers):

- **append**: A appends one message; the time from the call until B's ``refresh()`` (polled every
  20 ms) shows the record.  A thread notes when the segment file appeared in B's folder (it stats
  it every 2 ms), which splits the figure into Syncthing's part and Camillo's.
- **floor** (interleaved with the appends): a file of the size of an append's segment is written
  durably (temporary file, fsync, rename) into a ``probe/`` folder beside the vault on side A; the
  time until it is in B's folder, polled every 2 ms.  No Camillo involved.
- **erase**: A erases one message of ``personal``; the time from the call until B's refresh no
  longer shows it, and until B's view is whole again (as many records as A, sync status "up to
  date"), and (the thread, every 10 ms) until B's folder holds the operation's new files and none
  of those it deleted.  Floor: the same file changes (as many new files of the same sizes, as many
  deletions) made by hand in ``probe/`` and carried by Syncthing.
- **revoke**: A revokes a third device (registered on side A at set-up); the time until B's
  ``devices()`` shows it revoked, and until B's view is whole again.  Floor as for erase.

One child process runs the whole group (one pair of instances); ``--sync-samples`` sets the number
of append samples (erasures and revocations: a sixth of it, at least 2).  The vaults are used on
the main thread only; the file-watching thread only stats files.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from .corpus import clone_tree, messages
from .ops import _fixture, op

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLL_REFRESH = 0.020  # B's refresh, as a desktop polling the folder would
POLL_FILE = 0.002  # file arrival
TIMEOUT = 120.0


class Unavailable(RuntimeError):
    """The group cannot run here (no syncthing binary, no tests/sync harness)."""


def harness() -> Any:
    """The Syncthing harness of tests/sync (imported from this source tree)."""
    if ROOT not in sys.path:
        sys.path.insert(0, ROOT)
    try:
        from tests.sync import syncthing
    except ImportError as exc:  # pragma: no cover - a tree without tests/
        raise Unavailable(f"the Syncthing harness tests/sync/syncthing.py cannot be imported ({exc})") from exc
    if syncthing.syncthing_binary() is None:
        raise Unavailable("syncthing is not installed (apt-get install syncthing; scripts/setup does it)")
    return syncthing


def availability() -> str:
    """'' when the group can run, else why not (the parent asks before planning it)."""
    try:
        harness()
    except Unavailable as exc:
        return str(exc)
    return ""


# ---------------------------------------------------------------------------------------------
# Helpers


def _files(root: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for f in files:
            if f.startswith(".") or ".sync-conflict-" in f:
                continue
            p = os.path.join(dirpath, f)
            with contextlib.suppress(FileNotFoundError):
                out[os.path.relpath(p, root).replace(os.sep, "/")] = os.path.getsize(p)
    return out


def _durable_write(path: str, data: bytes) -> None:
    """As Camillo writes a file: a temporary file, fsync, rename, fsync of the folder."""
    folder = os.path.dirname(path)
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".tmp-{os.path.basename(path)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(tmp, path)
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _has(path: str, size: int) -> bool:
    try:
        return os.path.getsize(path) == size
    except OSError:
        return False


def _wait_quiet(pair: Any, timeout: float = 60.0) -> None:
    """Both sides connected, idle, complete for each other and holding the same files."""
    deadline = time.monotonic() + timeout
    while True:
        q = pair.check_quiet()
        if q.ok:
            return
        if time.monotonic() > deadline:
            raise pair.error(f"not quiet after {timeout:.0f}s: {q.why}")
        time.sleep(0.05)


class FileWatch:
    """A thread that polls file conditions on B's folder (stat calls only, never the vault) every
    ``period`` seconds and notes when each first held, so that a long refresh on the main thread
    does not delay the observation."""

    def __init__(self, t0: float, checks: dict[str, Callable[[], bool]], period: float) -> None:
        self.t0 = t0
        self.checks = checks
        self.period = period
        self.seen: dict[str, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="bench-file-watch", daemon=True)

    def _run(self) -> None:
        while not self.stop.is_set():
            now = time.perf_counter()
            for name, check in self.checks.items():
                if name not in self.seen and check():
                    self.seen[name] = now - self.t0
            if len(self.seen) == len(self.checks):
                return
            self.stop.wait(self.period)

    def __enter__(self) -> FileWatch:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


class Poller:
    """Polls B: its ``refresh()`` every 20 ms, and file checks (stat calls) on a thread of their own
    (:class:`FileWatch`: every 2 ms, or ``file_period``), noting when each condition first held
    (seconds since ``t0``)."""

    def __init__(self, b: Any, t0: float) -> None:
        self.b = b
        self.t0 = t0
        self.refreshes: list[float] = []  # duration of every refresh
        self.errors: list[str] = []
        self.last_refresh = -1.0

    def run(self, view: dict[str, Callable[[], bool]], files: dict[str, Callable[[], bool]],
            timeout: float = TIMEOUT, file_period: float = POLL_FILE) -> dict[str, float]:
        with FileWatch(self.t0, files, file_period) as watch:
            seen = self._run(view, files, watch, timeout)
        return {**seen, **watch.seen}

    def _run(self, view: dict[str, Callable[[], bool]], files: dict[str, Callable[[], bool]], watch: FileWatch,
             timeout: float) -> dict[str, float]:
        seen: dict[str, float] = {}
        deadline = self.t0 + timeout
        while True:
            now = time.perf_counter()
            if now - self.last_refresh >= POLL_REFRESH:
                self.last_refresh = now
                try:
                    self.b.refresh()
                except Exception as exc:  # reported: a refresh must not fail mid-sync
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                after = time.perf_counter()
                self.refreshes.append(after - now)
                for name, check in view.items():
                    if name not in seen and check():
                        seen[name] = after - self.t0
            if all(k in seen for k in view) and all(k in watch.seen for k in files):
                return seen
            if now > deadline:
                missing = [k for k in view if k not in seen] + [k for k in files if k not in watch.seen]
                raise RuntimeError(f"not reached within {timeout:.0f}s: {missing}; refresh errors: {self.errors[-3:]}")
            time.sleep(POLL_FILE)


class Floor:
    """The sync engine alone: files written into (and deleted from) ``probe/`` on side A, timed
    until side B holds exactly the same."""

    def __init__(self, pair: Any, rng: random.Random) -> None:
        self.pair = pair
        self.rng = rng
        self.n = 0
        self.a = os.path.join(pair.a.sync_root, "probe")
        self.b = os.path.join(pair.b.sync_root, "probe")
        os.makedirs(self.a, exist_ok=True)

    def _name(self) -> str:
        self.n += 1
        return f"{self.rng.getrandbits(64):016x}-{self.n}.seg"

    def prepare(self, deletions: list[int]) -> list[str]:
        """Files to delete in the next :meth:`measure` (created now, and carried to B first)."""
        names = [self._name() for _ in deletions]
        for name, size in zip(names, deletions):
            _durable_write(os.path.join(self.a, name), os.urandom(size))
        if names:
            self.pair.wait_files(lambda s: all(os.path.exists(os.path.join(self.b, n)) for n in names), self.pair.b,
                                 timeout=TIMEOUT, what="the floor's files to delete")
        return names

    def measure(self, sizes: list[int], delete: list[str] = ()) -> float:  # type: ignore[assignment]
        names = [(self._name(), size) for size in sizes]
        blobs = [os.urandom(size) for _n, size in names]
        t0 = time.perf_counter()
        for (name, _s), blob in zip(names, blobs):
            _durable_write(os.path.join(self.a, name), blob)
        for name in delete:
            os.unlink(os.path.join(self.a, name))
        deadline = t0 + TIMEOUT
        while True:
            if all(_has(os.path.join(self.b, n), s) for n, s in names) and \
                    not any(os.path.exists(os.path.join(self.b, n)) for n in delete):
                return time.perf_counter() - t0
            if time.perf_counter() > deadline:
                raise self.pair.error("the floor's files did not arrive on side B")
            time.sleep(POLL_FILE)


def _segment_of(v: Any, rid: bytes) -> str | None:
    """The segment file (relative path) an append just wrote its record to (reads the session)."""
    try:
        loc = v.session.materialized.record_location(rid)
        if loc is None:
            return None
        for name, bids in v.session.reader.segment_batches.items():
            if loc[0] in bids:
                return str(name)
    except AttributeError:
        return None
    return None


def _visible(v: Any, rid: bytes) -> bool:
    r = v.record(rid)
    return r is not None and r.valid and not r.erased


def _whole(b: Any, expected: int) -> bool:
    return b.stats().records == expected and b.sync_status().state == "up to date"


# ---------------------------------------------------------------------------------------------
# The operation


@op("sync")
def sync(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    st = harness()
    from camillo.demo import DEMO_PASSPHRASE
    from camillo.vault import NewRecord, Unlock, Vault

    samples = params.get("samples", 30)
    heavy = params.get("heavy", max(2, samples // 6))
    rng = random.Random(params.get("seed", 83))
    fx = _fixture(params, "loose")
    pair = st.Pair(os.path.join(scratch, "st")).start()
    vaults: list[Any] = []
    t_setup = time.perf_counter()
    try:
        va = os.path.join(pair.a.sync_root, "vault")
        vb = os.path.join(pair.b.sync_root, "vault")
        clone_tree(fx.vault, va)
        home_a = os.path.join(scratch, "homes", "desktop")
        clone_tree(fx.homes["desktop"], home_a)
        unlock = Unlock.passphrase(DEMO_PASSPHRASE)
        pair.wait_quiescent(timeout=900)
        a = Vault.open(va, unlock, home=home_a)
        vaults.append(a)
        extra = [f"bench-tablet-{i}" for i in range(heavy)]
        for name in extra:  # third devices to revoke, registered on side A
            Vault.open(va, unlock, home=os.path.join(scratch, "homes", name), device_name=name).lock()
        pair.wait_quiescent(timeout=300)
        b = Vault.open(vb, unlock, home=os.path.join(scratch, "homes", "b"), device_name="bench-b")
        vaults.append(b)
        for _ in range(5):  # settle: both refresh until nothing moves
            files = pair.wait_quiescent(timeout=300)
            a.refresh()
            b.refresh()
            if pair.wait_quiescent(timeout=300) == files:
                break
        setup_seconds = time.perf_counter() - t_setup
        floor = Floor(pair, rng)
        floor.prepare([])
        _durable_write(os.path.join(floor.a, "keep"), b"probe folder")  # the folder exists on both sides
        pair.wait_quiescent(timeout=120)
        items = messages(samples + 2, seed=89, now=int(time.time()), conversation_prefix="sync")
        recs = [NewRecord(type="message", conversation=x.conversation, role=x.role, text=x.text) for x in items]
        a.append([recs[-1]])  # one unmeasured round trip (a first append scans the folder)
        Poller(b, time.perf_counter()).run({"seen": lambda: True}, {})
        _wait_quiet(pair)
        out: dict[str, Any] = {"append": [], "floor": [], "erase": [], "revoke": [], "refresh_errors": []}
        seg_size = 0
        for i in range(samples):
            for which in (("camillo", "floor") if i % 2 == 0 else ("floor", "camillo")):
                time.sleep(rng.uniform(0.0, 1.0))
                if which == "floor":
                    size = seg_size or 4096
                    out["floor"].append({"seconds": floor.measure([size]), "bytes": size})
                else:
                    t0 = time.perf_counter()
                    rid = a.append([recs[i]]).written[0]
                    t_append = time.perf_counter() - t0
                    seg = _segment_of(a, rid)
                    seg_b = os.path.join(vb, *seg.split("/")) if seg else ""
                    if seg:
                        seg_size = os.path.getsize(os.path.join(va, *seg.split("/")))
                    poller = Poller(b, t0)
                    seen = poller.run({"visible": lambda rid=rid: _visible(b, rid)},
                                      {"file": lambda p=seg_b: bool(p) and os.path.exists(p)} if seg else {})
                    out["append"].append({"seconds": seen["visible"], "append": t_append, "file": seen.get("file"),
                                          "bytes": seg_size, "refreshes": len(poller.refreshes),
                                          "last_refresh": poller.refreshes[-1]})
                    out["refresh_errors"] += poller.errors
                _wait_quiet(pair)
        # erasures: one message of personal each, on A
        personal = a.compartment_id("personal")
        pool = [v.id for v in a.timeline(limit=2000) if v.compartment_id == personal and v.type == "message"]
        rng.shuffle(pool)
        for i in range(heavy):
            out["erase"].append(_heavy(pair, a, b, va, vb, floor, rng, "erase", pool[i], out))
        for name in extra:
            out["revoke"].append(_heavy(pair, a, b, va, vb, floor, rng, "revoke", name, out))
        out["setup_seconds"] = setup_seconds
        out["records"] = a.stats().records
        out["files"] = len(_files(va))
        out["syncthing"] = {"watch_delay_s": st.WATCH_DELAY_S, "rescan_s": st.RESCAN_S}
        return out
    finally:
        for v in vaults:
            with contextlib.suppress(Exception):
                if not v.locked:
                    v.lock()
        pair.close()


def _heavy(pair: Any, a: Any, b: Any, va: str, vb: str, floor: Floor, rng: random.Random, kind: str,
           subject: Any, out: dict[str, Any]) -> dict[str, Any]:
    """One erasure or revocation on A, seen from B; then the floor of the same file changes."""
    time.sleep(rng.uniform(0.0, 1.0))
    before = _files(va)
    t0 = time.perf_counter()
    if kind == "erase":
        a.erase([subject])
    else:
        a.revoke(subject, reason="benchmark")
    t_op = time.perf_counter() - t0
    after = _files(va)
    new = {k: s for k, s in after.items() if k not in before}
    gone = [k for k in before if k not in after]
    expected = a.stats().records

    def effective() -> bool:
        if kind == "erase":
            r = b.record(subject)
            return r is None or r.erased
        return any(d.name == subject and d.revoked for d in b.devices())

    poller = Poller(b, t0)
    seen = poller.run({"effective": effective, "whole": lambda: _whole(b, expected)},
                      {"files": lambda: all(_has(os.path.join(vb, *k.split("/")), s) for k, s in new.items())
                       and not any(os.path.exists(os.path.join(vb, *k.split("/"))) for k in gone)},
                      file_period=0.010)
    out["refresh_errors"] += poller.errors
    _wait_quiet(pair, timeout=300)
    a.refresh()  # A reads anything B wrote meanwhile
    _wait_quiet(pair, timeout=300)
    deletions = floor.prepare([before[k] for k in gone])
    _wait_quiet(pair, timeout=300)
    time.sleep(rng.uniform(0.0, 1.0))
    t_floor = floor.measure(list(new.values()), deletions)
    _wait_quiet(pair, timeout=300)
    return {"seconds_effective": seen["effective"], "seconds_whole": seen["whole"], "files": seen["files"],
            "operation": t_op, "new_files": len(new), "new_bytes": sum(new.values()), "deleted_files": len(gone),
            "refreshes": len(poller.refreshes), "longest_refresh": max(poller.refreshes), "floor": t_floor}
