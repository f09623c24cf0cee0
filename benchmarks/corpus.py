"""Reproducible benchmark vaults, built once per size with :mod:`camillo.demo` and cached.

Under ``WORK/<records>/`` each fixture is a folder with ``vault/``, ``homes/`` (the simulated
installations' local state: desktop, laptop and two agents) and ``meta.json``:

``demo``       ``build_demo_vault(records=0)``: two devices, three agents, grants, an erasure, a
               conflict (the base of the next two).
``bulk``       the demo plus ``add_bulk(N)``, what ``build_demo_vault(records=N)`` builds: N messages
               imported in bulk (batches of up to 2,000 records, segments of up to 4 MiB).
``loose``      the demo plus the same ``add_bulk(N)`` written as interactive batches of
               ``LOOSE_BATCH`` (10) records, each sealed in its own segment, as if the messages had
               arrived in conversation turns over two years: the "lived-in" vault most figures use.
``compacted``  ``loose`` after compaction by the desktop, acknowledged by the laptop (a control
               batch) and pruned, so the small segments are gone.
``reopen``     ``loose`` after the laptop wrote 1,000 more one-record batches (100 with ``quick``);
               the desktop's cache in it predates them.
``merge``      two copies of ``loose``: ``A`` where the desktop wrote K/2 one-record batches and
               ``B`` where the laptop wrote K/2, K = 10,000 × records / 1,000,000 (at least 10).
``erasure``    ``bulk`` after a revocation started a new epoch of ``personal``, into which
               records/10 messages were then imported: erasure re-encrypts that epoch.

Building uses only the public facade and :func:`camillo.demo.add_bulk`, except that the
``loose``, ``reopen`` and ``merge`` fixtures set ``BATCH_RECORDS``/``SEGMENT_PAYLOAD`` on the
``Vault`` class or instance while they write (so a bulk call produces exactly the files that many
interactive appends would), and ``compacted`` calls :func:`camillo.ops.compaction.prune` after the
acknowledgement (``Vault.compact`` would first re-compact the still-present old segments).
Measured operations never change a fixture: they run on a clone (:func:`clone_tree`).

Runs on the main thread of the benchmark process.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

CORPUS_VERSION = 4
LOOSE_BATCH = 10
REOPEN_BATCHES = 1000
HOMES = ("desktop", "laptop", "planner", "coder")
DEPS = {"bulk": "demo", "loose": "demo", "compacted": "loose", "reopen": "loose", "merge": "loose", "erasure": "bulk"}
BULK_LINE = ("bulk", "erasure")  # built from the demo alone, beside the loose line


def merge_divergence(records: int) -> int:
    """Batches by which the two merge copies differ: 10,000 at 1M records, scaled down linearly."""
    return max(10, round(10_000 * records / 1_000_000))


def erasure_epoch_records(records: int) -> int:
    """Records in the epoch an erasure re-encrypts: 100,000 at 1M records, scaled down linearly."""
    return max(100, records // 10)


@dataclass
class Fixture:
    name: str
    root: str
    meta: dict[str, Any]

    @property
    def vault(self) -> str:
        return os.path.join(self.root, "vault")

    @property
    def homes(self) -> dict[str, str]:
        return {h: os.path.join(self.root, "homes", h) for h in HOMES}


# The local state database (and its write-ahead log) and the device state's two copies are changed in
# place: a clone copies them (a linked copy would carry a clone's writes back into the fixture).
_COPIED = (".lock", "state.db", "state.db-wal", "state.db-shm", "state.bin", "state-1.bin")


def clone_tree(src: str, dst: str) -> None:
    """Copy a folder with hard links: vault files and most sealed local files are never changed in
    place (writes create new files and rename them), so a linked clone behaves as a copy.  Lock
    files, the local state database, which SQLite changes in place, and the device state, whose two
    copies are overwritten in place by turns, are copied.  Directories keep
    their modification times (as ``cp -a`` does): a clone is the same folder opened again, whose
    listing the local state keeps (``FolderShelf.prime``), not a folder whose every directory just
    changed."""
    made: list[tuple[str, os.stat_result]] = []
    for dirpath, _dirnames, filenames in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        target = os.path.join(dst, rel) if rel != "." else dst
        os.makedirs(target, exist_ok=True)
        made.append((target, os.stat(dirpath)))
        for f in filenames:
            s, d = os.path.join(dirpath, f), os.path.join(target, f)
            if f.endswith(_COPIED):
                shutil.copy2(s, d)
                continue
            try:
                os.link(s, d)
            except OSError:
                shutil.copy2(s, d)
    for target, st in made:  # (once every entry is made: a directory's own entries move its mtime)
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))


def clone_fixture(fx: Fixture, dst: str) -> Fixture:
    """A clone of the fixture, flushed to the disk before anything is timed: otherwise the first
    fsync of the measured operation pays for writing out the clone itself (200,000 new links and a
    copied local state at 1M records), which no user's machine has pending."""
    clone_tree(fx.root, dst)
    os.sync()
    return Fixture(fx.name, dst, dict(fx.meta))


def tree_fingerprint(path: str) -> dict[str, int]:
    files = size = 0
    for dirpath, _d, filenames in os.walk(path):
        for f in filenames:
            files += 1
            size += os.path.getsize(os.path.join(dirpath, f))
    return {"files": files, "bytes": size}


def messages(count: int, *, seed: int, now: int, conversation_prefix: str = "bulk") -> list[Any]:
    """Messages like :func:`camillo.demo.add_bulk` writes (same sentences, lengths and spread)."""
    from camillo.demo import ANSWERS, DAY, FILLER_SENTENCES, FILLER_TOPICS
    from camillo.vault import NewRecord

    rng = random.Random(seed)
    out = []
    conv = 0
    for _ in range(count):
        if rng.random() < 0.1:
            conv += 1
        topic = rng.choice(FILLER_TOPICS)
        user = rng.random() < 0.5
        text = rng.choice(FILLER_SENTENCES).format(t=topic) if user else rng.choice(ANSWERS)
        text += " " + " ".join(rng.choice(ANSWERS).split()[: rng.randrange(0, 40)])
        out.append(NewRecord(type="message", conversation=f"{conversation_prefix}-{conv}",
                             role="user" if user else "assistant", text=text.strip(),
                             ts=int(now - rng.uniform(0, 730) * DAY)))
    return out


def segment_files(vault: str) -> dict[str, int]:
    out = {}
    base = os.path.join(vault, "segments")
    for dirpath, _d, filenames in os.walk(base):
        for f in filenames:
            if f.endswith(".seg"):
                p = os.path.join(dirpath, f)
                out[os.path.relpath(p, vault)] = os.path.getsize(p)
    return out


def _open(vault: str, home: str, **kw: Any):
    from camillo.demo import DEMO_PASSPHRASE
    from camillo.vault import Unlock, Vault

    return Vault.open(vault, Unlock.passphrase(DEMO_PASSPHRASE), home=home, **kw)


def write_interactive(vault: str, home: str, items: list[Any], *, compartment: str = "personal",
                      per_batch: int = 1) -> None:
    """Write ``items`` as batches of ``per_batch`` records, each in its own segment (what that many
    interactive appends produce), in a few facade calls."""
    with _open(vault, home) as v, batch_limits(per_batch, 1):
        for start in range(0, len(items), 500 * per_batch):
            v.append(items[start : start + 500 * per_batch], compartment=compartment)


@contextlib.contextmanager
def batch_limits(records: int, payload: int) -> Iterator[None]:
    """Batches of at most ``records`` records and segments of about ``payload`` bytes while inside
    (the writer's limits, set for the whole process: the fixtures imitate many small writes)."""
    from camillo.session import writer

    saved = writer.BATCH_RECORDS, writer.SEGMENT_PAYLOAD
    writer.BATCH_RECORDS, writer.SEGMENT_PAYLOAD = records, payload
    try:
        yield
    finally:
        writer.BATCH_RECORDS, writer.SEGMENT_PAYLOAD = saved


def warm(fx: Fixture, who: str = "desktop") -> None:
    """Open and lock once, so the installation's cache is current (a warm open reads nothing new)."""
    with _open(fx.vault, fx.homes[who]):
        pass


def state_format() -> str:
    """What the fixtures' local states are stamped with: the state's format and revision, and the layout
    of the roster it keeps (a fixture whose kept roster has another layout computes it again at every
    open of every clone, which the warm open's untimed first open then pays, and its peak memory shows)."""
    from camillo.cache import FORMAT, REVISION
    from camillo.primitives import sha256
    from camillo.session.rostermemo import shape

    return f"{FORMAT}.{REVISION}.{sha256(shape()).hex()[:8]}"


class Corpus:
    """The fixtures of one size under ``work``; built on first use, reused afterwards."""

    def __init__(self, work: str, records: int, *, rebuild: bool = False, quick: bool = False,
                 readonly: bool = False, say: Callable[[str], None] = print) -> None:
        self.work = os.path.abspath(work)
        self.records = records
        self.reopen_batches = 100 if quick else REOPEN_BATCHES
        self.base = os.path.join(self.work, str(records))
        self.rebuild = rebuild
        self.readonly = readonly  # measuring children: use what the parent built, never build
        self.say = say
        self._built: dict[str, Fixture] = {}

    def prepare(self, names: list[str]) -> None:
        """Build or reuse the fixtures ``names`` (and what they are built from), the two lines that
        share nothing but the demo side by side on the machine's two cores: ``bulk`` and ``erasure``
        in a child process (``python -m benchmarks.corpus``) while this one builds ``loose`` and
        what comes from it.  At 1M records the corpus took 15.6 min from nothing this way, against
        23.6 min one fixture after the other."""
        wanted = set(names)
        side = [n for n in BULK_LINE if n in wanted or (n == "bulk" and "erasure" in wanted)]
        proc = None
        if side and "loose" in wanted and not self.readonly:
            demo = self.get("demo")
            if self._valid_meta("bulk", demo) is None or ("erasure" in side and self._reusable("erasure") is None):
                self.say(f"building {' and '.join(side)} in a second process beside the rest")
                cmd = [sys.executable, "-m", "benchmarks.corpus", self.work, str(self.records), *side,
                       *(("--quick",) if self.reopen_batches != REOPEN_BATCHES else ())]
                # (never --rebuild: the demo was just rebuilt if asked, which makes the rest stale)
                proc = subprocess.Popen(cmd)
        try:
            for name in names:
                if proc is None or name not in side:
                    self.get(name)
        finally:
            if proc is not None and proc.wait() != 0:
                raise RuntimeError(f"building the {' and '.join(side)} corpus failed (exit {proc.returncode}); "
                                   "its output is above")
        self.rebuild = False  # (what the second process rebuilt is fresh now)
        for name in side:
            self.get(name)

    def _reusable(self, name: str) -> dict[str, Any] | None:
        """The cached meta of ``name`` if it and everything it is built from are current."""
        dep = DEPS.get(name)
        if dep is None:
            return self._valid_meta(name, None)
        parent = self._reusable(dep)
        return None if parent is None else self._valid_meta(name, Fixture(dep, os.path.join(self.base, dep), parent))

    def _valid_meta(self, name: str, dep: Fixture | None) -> dict[str, Any] | None:
        """The cached meta of ``name``, or None when it is missing or stale (built from an older
        ``dep``, another size or corpus version)."""
        meta_path = os.path.join(self.base, name, "meta.json")
        if self.rebuild or not os.path.exists(meta_path):
            return None
        with open(meta_path) as fh:
            meta: dict[str, Any] = json.load(fh)
        if (meta.get("version") != CORPUS_VERSION or meta.get("records") != self.records
                or (dep is not None and meta.get("parent_built") != dep.meta["built"])
                or (name == "reopen" and meta.get("new_batches") != self.reopen_batches)):
            return None
        # (the parent process checks; its children trust it) a vault that changed since it was built:
        # something opened the fixture in place (a profiling script with a home of its own registers a
        # device, and every figure on that fixture then measures reading what it wrote)
        vault = os.path.join(self.base, name, "vault")
        if not self.readonly and "fingerprint" in meta and tree_fingerprint(vault) != meta["fingerprint"]:
            self.say(f"the {name} corpus's vault changed since it was built (opened in place?): it is built again")
            return None
        return meta

    def get(self, name: str) -> Fixture:
        if name in self._built:
            return self._built[name]
        root = os.path.join(self.base, name)
        meta_path = os.path.join(root, "meta.json")
        dep = self.get(DEPS[name]) if name in DEPS else None
        meta = self._valid_meta(name, dep)
        if meta is None:
            if self.readonly:
                raise RuntimeError(f"the {name} corpus in {root} is missing or stale; the parent builds it")
            if os.path.exists(root):
                shutil.rmtree(root)
            os.makedirs(root)
            self.say(f"building the {name} corpus of {self.records:,} records in {root}")
            t0 = time.perf_counter()
            fx = Fixture(name, root, {})
            extra = getattr(self, f"_build_{name}")(fx, dep)
            meta = {"version": CORPUS_VERSION, "records": self.records, "built": time.time(),
                    "build_seconds": round(time.perf_counter() - t0, 2),
                    "parent_built": dep.meta["built"] if dep else None, **(extra or {})}
            meta["fingerprint"] = tree_fingerprint(fx.vault)
            meta["state_format"] = state_format()
            with open(meta_path, "w") as fh:
                json.dump(meta, fh, indent=1)
            self.say(f"  built in {meta['build_seconds']} s")
        fx = Fixture(name, root, meta)
        if not self.readonly:
            self._upgrade_local_state(fx, meta_path)
        self._built[name] = fx
        return fx

    def _upgrade_local_state(self, fx: Fixture, meta_path: str) -> None:
        """A fixture built before the local state database (or an older format of it): the simulated
        installations' local state is made what building it now would leave (the vault is unchanged)."""
        current = state_format()  # (an open completes a state of an older revision in place: once)
        if str(fx.meta.get("state_format")) == current and self._has_state_db(fx):
            return
        self.say(f"making the local state of the {fx.name} corpus current (format {current})")
        if fx.name == "reopen":  # the desktop's state predates the laptop's batches: loose's, copied
            loose = self.get("loose")
            for sub in ("cache",):
                target = os.path.join(fx.homes["desktop"], sub)
                shutil.rmtree(target, ignore_errors=True)
                shutil.copytree(os.path.join(loose.homes["desktop"], sub), target)
        elif fx.name == "merge":
            with _open(os.path.join(fx.root, "A", "vault"), os.path.join(fx.root, "A", "homes", "desktop")):
                pass
        else:
            for who in ("laptop", "desktop"):
                if os.path.isdir(fx.homes[who]):
                    warm(fx, who)
        fx.meta["state_format"] = current
        with open(meta_path, "w") as fh:
            json.dump(fx.meta, fh, indent=1)

    @staticmethod
    def _has_state_db(fx: Fixture) -> bool:
        """The desktop installation holds a local state database (a fixture recorded as current
        could still hold only the sealed image of earlier versions: every "warm" open of it was a
        cold one)."""
        home = os.path.join(fx.root, "A", "homes", "desktop") if fx.name == "merge" else fx.homes["desktop"]
        if not os.path.isdir(os.path.join(home, "cache")):
            return True  # no installation keeps a local state in this fixture
        return any("state.db" in files for _d, _s, files in os.walk(os.path.join(home, "cache")))

    # -- builders

    def _build_demo(self, fx: Fixture, _dep: Fixture | None) -> dict[str, Any]:
        from camillo.demo import build_demo_vault

        build_demo_vault(fx.vault, records=0, home=os.path.join(fx.root, "homes"))
        return {}

    def _clone_parent(self, fx: Fixture, dep: Fixture | None) -> None:
        assert dep is not None
        clone_tree(dep.root, fx.root)
        os.unlink(os.path.join(fx.root, "meta.json"))

    def _build_bulk(self, fx: Fixture, dep: Fixture | None) -> dict[str, Any]:
        from camillo.demo import add_bulk

        self._clone_parent(fx, dep)
        add_bulk(fx.vault, self.records, seed=7, homes=fx.homes)
        warm(fx, "laptop")
        warm(fx, "desktop")
        return {}

    def _build_loose(self, fx: Fixture, dep: Fixture | None) -> dict[str, Any]:
        from camillo.demo import add_bulk

        self._clone_parent(fx, dep)
        with batch_limits(LOOSE_BATCH, 1):
            add_bulk(fx.vault, self.records, seed=7, homes=fx.homes)
        warm(fx, "laptop")
        warm(fx, "desktop")
        return {"loose_batch": LOOSE_BATCH}

    def _build_compacted(self, fx: Fixture, dep: Fixture | None) -> dict[str, Any]:
        from camillo.ops.compaction import prune

        self._clone_parent(fx, dep)
        with _open(fx.vault, fx.homes["desktop"]) as v:
            report = v.compact(prune_now=True)
        with _open(fx.vault, fx.homes["laptop"]) as v:
            v.set_policy(erasure=True)  # a control batch: the laptop has seen the compaction
        with _open(fx.vault, fx.homes["desktop"]) as v:
            deleted, pending = prune(v.session, prune_now=True)
        warm(fx, "laptop")
        warm(fx, "desktop")
        return {"compaction": {"segments_before": report.segments_before, "written": report.segments_written,
                               "deleted": deleted, "pending": pending}}

    def _build_reopen(self, fx: Fixture, dep: Fixture | None) -> dict[str, Any]:
        self._clone_parent(fx, dep)
        before = segment_files(fx.vault)
        items = messages(self.reopen_batches, seed=11, now=int(time.time()), conversation_prefix="laptop")
        write_interactive(fx.vault, fx.homes["laptop"], items)
        new = {k: v for k, v in segment_files(fx.vault).items() if k not in before}
        return {"new_batches": self.reopen_batches, "new_segments": len(new), "new_segment_bytes": sum(new.values())}

    def _build_merge(self, fx: Fixture, dep: Fixture | None) -> dict[str, Any]:
        assert dep is not None
        k = merge_divergence(self.records)
        now = int(time.time())
        out: dict[str, Any] = {"divergence": k}
        for side, who, seed in (("A", "desktop", 21), ("B", "laptop", 22)):
            root = os.path.join(fx.root, side)
            clone_tree(dep.root, root)
            os.unlink(os.path.join(root, "meta.json"))
            before = segment_files(os.path.join(root, "vault"))
            items = messages(k // 2 if side == "A" else k - k // 2, seed=seed, now=now, conversation_prefix=who)
            write_interactive(os.path.join(root, "vault"), os.path.join(root, "homes", who), items)
            new = {p: s for p, s in segment_files(os.path.join(root, "vault")).items() if p not in before}
            out[side] = {"batches": len(items), "new_segments": len(new), "new_segment_bytes": sum(new.values())}
        with _open(os.path.join(fx.root, "A", "vault"), os.path.join(fx.root, "A", "homes", "desktop")):
            pass
        os.makedirs(fx.vault, exist_ok=True)  # the fingerprint's folder (the sides live in A/ and B/)
        return out

    def _build_erasure(self, fx: Fixture, dep: Fixture | None) -> dict[str, Any]:
        self._clone_parent(fx, dep)
        n = erasure_epoch_records(self.records)
        items = messages(n, seed=31, now=int(time.time()), conversation_prefix="epoch")
        with _open(fx.vault, fx.homes["desktop"]) as v:
            v.revoke("web-clipper", reason="benchmark: start a new epoch of personal")
            target = None
            for start in range(0, n, 5000):
                ch = v.append(items[start : start + 5000], compartment="personal")
                if target is None:
                    target = ch.written[len(ch.written) // 2]
        assert target is not None
        return {"epoch_records": n, "target": target.hex()}


def main(argv: list[str]) -> int:
    """``python -m benchmarks.corpus WORK RECORDS NAME... [--quick]``: build or reuse those
    fixtures (the second process of :meth:`Corpus.prepare`)."""
    work, records, *names = [a for a in argv if a != "--quick"]
    lane = "/".join(names)
    corpus = Corpus(work, int(records), quick="--quick" in argv,
                    say=lambda msg: print(f"[{lane}] {msg}", flush=True))
    for name in names:
        corpus.get(name)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
