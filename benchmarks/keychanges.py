"""The ``keychanges`` group: what the rules for concurrent key changes (spec §16.10) cost.

Two kinds of figures:

- **Before and after.** ``Vault.erase`` of one record, ``Vault.revoke`` of a device, and a
  ``refresh()`` that picks up one batch another device wrote, each run by the current code and by
  the code before the rules landed (the first parent of the merge of branch ``keychanges`` into
  main), on the same cached corpus and with the same venv.  The old code runs from a git worktree
  (default ``/tmp/bench-before``, created on first use with ``git worktree add --detach``) put
  first on ``PYTHONPATH`` of the measuring child; the benchmark code itself is always this tree's.
- **The new work on its own** (current code only): a ``refresh()`` on a device that must seal
  again N batches after another device's erasure destroyed the epoch it sealed them to
  (:func:`reseal`), and the first ``refresh()`` that completes an erasure another device's
  concurrent erasure left incomplete (:func:`complete`).

Concurrency without a sync engine: the two devices work on two copies of the folder (hard-linked
clones of one fixture), and :func:`exchange` then does what a sync engine does, in both directions:
files one side added are copied to the other, files one side deleted since the common base are
deleted on the other.

The operations run in child processes (:mod:`benchmarks.child`), main thread only.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from typing import Any

from .corpus import Fixture, clone_fixture, messages
from .ops import _fixture, _open, op

BEFORE_TREE = os.path.join(tempfile.gettempdir(), "bench-before")  # /tmp/bench-before
MERGED_BRANCH = "keychanges"
RESEAL_SIZES = (0, 1, 10, 100)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ---------------------------------------------------------------------------------------------
# The code before the rules (parent process)


def _git(*args: str, cwd: str = ROOT) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=120).stdout


def before_rev(root: str = ROOT) -> tuple[str, str]:
    """(sha, description): the first parent of the merge of branch ``keychanges`` into main (``git log
    --merges --oneline | grep keychanges``; the merge *of* the branch, not a merge of main into it)."""
    lines = [ln.split(" ", 2) for ln in _git("log", "--merges", "--format=%H %P", "--grep", MERGED_BRANCH,
                                              cwd=root).splitlines() if ln.strip()]
    subjects = {ln.split(" ", 1)[0]: ln.split(" ", 1)[1] for ln in
                _git("log", "--merges", "--format=%H %s", "--grep", MERGED_BRANCH, cwd=root).splitlines() if ln.strip()}
    if not lines:
        raise RuntimeError(f"no merge of branch {MERGED_BRANCH!r} in this history")
    into_main = [ln for ln in lines if subjects.get(ln[0], "").startswith(f"Merge branch '{MERGED_BRANCH}'")]
    merge, first_parent = (into_main or lines)[0][:2]
    return first_parent, f"{first_parent[:7]} (first parent of {merge[:7]}, {subjects.get(merge, '')!r})"


def ensure_before_tree(rev: str, path: str = BEFORE_TREE, root: str = ROOT) -> str:
    """A worktree of ``rev`` at ``path`` (created with ``git worktree add --detach`` when missing);
    refuses a folder that holds something else.  Returns the folder whose ``core/`` goes first on
    PYTHONPATH."""
    if os.path.exists(path):
        try:
            head = _git("rev-parse", "HEAD", cwd=path).strip()
        except (subprocess.CalledProcessError, OSError) as exc:
            raise RuntimeError(f"{path} exists and is not a git worktree; remove it or pass --before-tree") from exc
        if head != _git("rev-parse", rev).strip():
            raise RuntimeError(f"{path} holds {head[:7]}, not {rev[:7]}; remove it (git worktree remove {path}) "
                               "or pass --before-tree")
    else:
        _git("worktree", "add", "--detach", path, rev, cwd=root)
    if not os.path.isfile(os.path.join(path, "core", "camillo", "vault.py")):
        raise RuntimeError(f"{path}/core/camillo/vault.py is missing")
    return path


def before_env(tree: str) -> dict[str, str]:
    """The extra environment of a child that runs the old code."""
    old = os.environ.get("PYTHONPATH", "")
    return {"PYTHONPATH": os.path.join(tree, "core") + (os.pathsep + old if old else "")}


# ---------------------------------------------------------------------------------------------
# Two copies of a folder, as a sync engine would reconcile them


def vault_files(vault: str) -> dict[str, int]:
    """Relative path -> size of every vault file (dot files, staging and lock files left out)."""
    out = {}
    for dirpath, dirs, files in os.walk(vault):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for f in files:
            if f.startswith(".") or f.endswith(".lock"):
                continue
            p = os.path.join(dirpath, f)
            try:
                out[os.path.relpath(p, vault).replace(os.sep, "/")] = os.path.getsize(p)
            except FileNotFoundError:
                continue
    return out


def exchange(base: set[str], x: str, y: str) -> dict[str, int]:
    """Reconcile two vault folders that both started as ``base``: what one added is copied to the
    other, what one deleted is deleted on the other (never a file both still hold)."""
    fx, fy = vault_files(x), vault_files(y)
    moved = {"copied": 0, "deleted": 0}
    for src, dst, have_src, have_dst in ((x, y, fx, fy), (y, x, fy, fx)):
        for name in sorted(set(have_src) - set(have_dst) - base):
            os.makedirs(os.path.dirname(os.path.join(dst, name)), exist_ok=True)
            shutil.copy2(os.path.join(src, name), os.path.join(dst, name))
            moved["copied"] += 1
        for name in sorted((base - set(have_src)) & set(have_dst)):
            os.unlink(os.path.join(dst, name))
            moved["deleted"] += 1
    return moved


def _two_copies(params: dict[str, Any], scratch: str, fixture: str) -> tuple[Fixture, Fixture, set[str]]:
    src = _fixture(params, fixture)
    x = clone_fixture(src, os.path.join(scratch, "X"))
    y = clone_fixture(src, os.path.join(scratch, "Y"))
    return x, y, set(vault_files(x.vault))


def _readable(v: Any, rid: bytes) -> bool:
    r = v.record(rid)
    return r is not None and r.valid and not r.erased


def _gone(v: Any, rid: bytes) -> bool:
    r = v.record(rid)
    return r is None or r.erased


def _timed(fn: Any) -> tuple[Any, float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t0, time.process_time() - c0


# ---------------------------------------------------------------------------------------------
# Operations (child processes)


@op("kc_refresh_one")
def refresh_one(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """The laptop appends one message to the lived-in vault; the desktop's ``refresh()`` picks it up
    (both open on one folder, in this process).  ``rounds`` samples after ``warmup`` unmeasured
    ones; the first refresh after the open is reported on its own (it fills what later ones reuse).
    Runs on the code before the rules too."""
    from camillo.vault import NewRecord

    from .stats import Meter

    fx = clone_fixture(_fixture(params, "loose"), os.path.join(scratch, "loose"))
    rounds, warmup = params.get("rounds", 20), params.get("warmup", 2)
    items = messages(rounds + warmup + 1, seed=61, now=int(time.time()), conversation_prefix="other-device")
    recs = [NewRecord(type="message", conversation=x.conversation, role=x.role, text=x.text) for x in items]
    desktop = _open(fx, "desktop")
    laptop = _open(fx, "laptop")
    samples, cpu, files = [], [], []
    first = None
    with Meter() as m:
        for i, rec in enumerate(recs):
            rid = laptop.append([rec]).written[0]
            _ch, dt, dc = _timed(desktop.refresh)
            if not _readable(desktop, rid):
                raise RuntimeError("the desktop's refresh did not pick up the laptop's batch")
            if i == 0:
                first = (dt, dc)
            elif i > warmup:
                samples.append(dt)
                cpu.append(dc)
                files.append(_ch.files_written)
    laptop.lock()
    desktop.lock()
    assert first is not None
    return {"meter": m.to_json(), "samples": samples, "samples_cpu": cpu, "first": first[0], "first_cpu": first[1],
            "files_written": sum(files)}


@op("kc_reseal")
def reseal(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """Another device's erasure destroyed the epoch this device sealed ``n`` batches to: the laptop
    appends ``n`` one-message batches to ``personal`` in copy Y while the desktop erases one record
    of that epoch (the ``erasure`` fixture: an epoch of records/10) in copy X; the copies are
    exchanged; the laptop's next ``refresh()`` is timed: it adopts the erasure's master secret,
    reads the vault again and seals the ``n`` batches again under the new epoch (``n = 0``: the
    same refresh with nothing to seal again, the baseline)."""
    from camillo.vault import NewRecord

    from .stats import Meter

    n = params.get("n", 1)
    x, y, base = _two_copies(params, scratch, "erasure")
    target = bytes.fromhex(x.meta["target"])
    laptop = _open(y, "laptop")
    mine = []
    for item in messages(n, seed=71, now=int(time.time()), conversation_prefix="during-erasure"):
        mine += laptop.append([NewRecord(type="message", conversation=item.conversation, role=item.role,
                                         text=item.text)], compartment="personal").written
    desktop = _open(x, "desktop")
    erase_report, erase_s, erase_cpu = _timed(lambda: desktop.erase([target]))
    desktop.lock()
    moved = exchange(base, x.vault, y.vault)
    before = vault_files(y.vault)
    with Meter() as m:
        changes = laptop.refresh()
    after = vault_files(y.vault)
    lost = [rid.hex()[:12] for rid in mine if not _readable(laptop, rid)]
    if lost or not _gone(laptop, target):
        raise RuntimeError(f"after the refresh: {len(lost)} of {n} batches unreadable, erased record gone: "
                           f"{_gone(laptop, target)}")
    notices = [x.kind for x in laptop.notices()] if hasattr(laptop, "notices") else []  # not before the rules
    if n and "sealed-again" not in notices:
        raise RuntimeError(f"no batch was sealed again (notices: {notices})")
    new = {k: s for k, s in after.items() if k not in before}
    laptop.lock()
    return {"meter": m.to_json(), "n": n, "reloaded": changes.reloaded, "notices": notices,
            "new_segments": {"files": sum(1 for k in new if k.startswith("segments/")),
                             "bytes": sum(s for k, s in new.items() if k.startswith("segments/"))},
            "new_files": len(new), "deleted_files": sum(1 for k in before if k not in after),
            "exchanged": moved, "erase_seconds": erase_s, "erase_cpu": erase_cpu,
            "epoch_records": x.meta["epoch_records"]}


@op("kc_complete")
def complete(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """Two concurrent erasures from one generation: the desktop erases record t1 in copy X, the
    laptop record t2 of the same epoch in copy Y (the ``erasure`` fixture's epoch of records/10);
    the copies are exchanged; the desktop's first ``refresh()`` finds t1's bytes under the laptop's
    new epoch (and t2's under its own) and completes the erasure (timed).  The copies are then
    exchanged again and the laptop's refresh, which reads that completion, is timed too."""
    from .stats import Meter

    x, y, base = _two_copies(params, scratch, "erasure")
    t1 = bytes.fromhex(x.meta["target"])
    desktop = _open(x, "desktop")
    conversation = desktop.record(t1).conversation  # the epoch's messages: conversations "epoch-*"
    t2 = next(rid for rid in desktop.timeline_ids(conversation=conversation) if rid != t1)
    laptop = _open(y, "laptop")
    _r, erase_s, erase_cpu = _timed(lambda: desktop.erase([t1]))
    laptop.erase([t2])
    moved = exchange(base, x.vault, y.vault)
    before = vault_files(x.vault)
    with Meter() as m:
        changes = desktop.refresh()
    after = vault_files(x.vault)
    if not (_gone(desktop, t1) and _gone(desktop, t2)):
        raise RuntimeError("the desktop still reads an erased record after its refresh")
    deleted = {k: s for k, s in before.items() if k not in after}
    new = {k: s for k, s in after.items() if k not in before}
    exchange(set(before), x.vault, y.vault)  # both copies held ``before`` after the first exchange
    c0, t0 = time.process_time(), time.perf_counter()
    laptop.refresh()
    other_s, other_cpu = time.perf_counter() - t0, time.process_time() - c0
    ok = all(_gone(v, t) for v in (desktop, laptop) for t in (t1, t2))
    desktop.lock()
    laptop.lock()
    if not ok:
        raise RuntimeError("an erased record is readable after both refreshes")
    return {"meter": m.to_json(), "completed": changes.files_written > 0 or bool(new),
            "files_written": changes.files_written, "files_removed": changes.files_removed,
            "new_segments": {"files": sum(1 for k in new if k.startswith("segments/")),
                             "bytes": sum(s for k, s in new.items() if k.startswith("segments/"))},
            "new_env": sum(1 for k in new if k.startswith("env/")), "new_slots": sum(1 for k in new if k.startswith("slots/")),
            "deleted_segments": {"files": sum(1 for k in deleted if k.startswith("segments/")),
                                 "bytes": sum(s for k, s in deleted.items() if k.startswith("segments/"))},
            "exchanged": moved, "erase_seconds": erase_s, "erase_cpu": erase_cpu,
            "other_refresh_seconds": other_s, "other_refresh_cpu": other_cpu,
            "epoch_records": x.meta["epoch_records"]}
