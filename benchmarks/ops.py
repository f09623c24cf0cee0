"""The measured operations.  Each runs inside a fresh child process (:mod:`benchmarks.child`) on a
clone of a cached fixture, times only its own region (set-up such as cloning, and opening the vault
where the figure is not about opening, is outside it) and returns samples, counts for the floor
and the peak RSS reached inside the timed region.

An operation is ``fn(params, scratch) -> dict``; ``params`` carries ``work``, ``records`` and the
operation's own options.  Runs on the main thread of the child process.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import time
from collections.abc import Callable
from typing import Any

from .corpus import Corpus, Fixture, clone_fixture, messages, segment_files
from .stats import Meter

OPS: dict[str, Callable[[dict[str, Any], str], dict[str, Any]]] = {}

QUERIES = [
    "garden", '"tax forms"', "jazz records", "python script", "portuguese verbs type:message",
    "deadline compartment:work", "options class:inferred", "approach*", "podcast after:{year_ago}",
    "kitchen renovation before:{half_year_ago}", "inspection agent:laptop", "conversation:bulk-5",
    "key:user/*", "is:pending", "type:message", '"first approach is faster"', "cheapest undo",
    "birthday present Ana", "offsite compartment:personal", "Porto",
]


def queries() -> list[str]:
    def day(days: int) -> str:
        return time.strftime("%Y-%m-%d", time.gmtime(time.time() - days * 86400))

    return [q.format(year_ago=day(365), half_year_ago=day(180)) for q in QUERIES]


def op(name: str):
    def register(fn):
        OPS[name] = fn
        return fn

    return register


def _fixture(params: dict[str, Any], name: str) -> Fixture:
    corpus = Corpus(params["work"], params["records"], quick=params.get("quick", False), readonly=True,
                    say=lambda _m: None)
    return corpus.get(name)


def _clone(params: dict[str, Any], name: str, scratch: str) -> Fixture:
    return clone_fixture(_fixture(params, name), os.path.join(scratch, name))


def _open(fx: Fixture, who: str = "desktop", **kw: Any):
    from camillo.demo import DEMO_PASSPHRASE
    from camillo.vault import Unlock, Vault

    return Vault.open(fx.vault, Unlock.passphrase(DEMO_PASSPHRASE), home=fx.homes[who], **kw)


def _files(vault: str) -> dict[str, int]:
    out = {}
    for dirpath, _d, filenames in os.walk(vault):
        for f in filenames:
            if not f.startswith("."):
                p = os.path.join(dirpath, f)
                out[os.path.relpath(p, vault)] = os.path.getsize(p)
    return out


def _diff(before: dict[str, int], after: dict[str, int]) -> dict[str, Any]:
    """New and deleted vault files by kind (segments/, env/, slots/), with bytes."""
    out: dict[str, Any] = {}
    for what, names in (("new", [n for n in after if n not in before]), ("deleted", [n for n in before if n not in after])):
        src = after if what == "new" else before
        for n in names:
            kind = n.split("/", 1)[0]
            entry = out.setdefault(f"{what}_{kind}", {"files": 0, "bytes": 0})
            entry["files"] += 1
            entry["bytes"] += src[n]
    return out


def _no_fsync() -> None:
    """The documented switch: fsync becomes a no-op in this (child) process only."""
    os.fsync = lambda fd: None  # type: ignore[assignment]


# ---------------------------------------------------------------------------------------------
# Opening


@op("cold_open")
def cold_open(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """``Vault.open(..., cache=False)``: read and verify every file, no local cache."""
    fx = _clone(params, params["variant"], scratch)
    with Meter() as m:
        v = _open(fx, cache=False)
    out = {"meter": m.to_json(), "decryptions": v.session.reader.decryptions, "batches": len(v.session.batches)}
    if params.get("count"):  # (after the timed part) what the floors multiply, as the counts operation
        out["counts"] = _counts(v)
    v.lock()
    return out


def _set_up_apart(target: Callable[..., None], *args: Any, scratch: str) -> bool:
    """Run an operation's untimed set-up (opens of the vault, a revocation, an erasure, an agent's first open)
    in a fresh interpreter, and wait for it: what it leaves in memory is then not in this process, whose peak
    RSS the figure reports (round 41: an agent's warm open was reported at 491 MiB, of which 487 MiB were left
    by the owner's open and the agent's first open before it).  Whether it ran in another process than this
    one: the process it ran in notes its id in ``scratch`` first."""
    note = os.path.join(scratch, "set-up.pid")
    proc = multiprocessing.get_context("spawn").Process(target=_noted, args=(note, target, *args),
                                                        name=f"set-up {target.__name__}")
    proc.start()
    proc.join()
    if proc.exitcode != 0:
        raise RuntimeError(f"the untimed set-up {target.__name__} failed (exit code {proc.exitcode})")
    with open(note, encoding="ascii") as fh:
        return int(fh.read()) != os.getpid()


def _noted(note: str, target: Callable[..., None], *args: Any) -> None:
    """``target(*args)``, the id of the process it runs in written to the file ``note`` first."""
    with open(note, "w", encoding="ascii") as fh:
        fh.write(str(os.getpid()))
    target(*args)


def _prepare(fx: Fixture, settle: bool, revoke: str | None, erase: bool) -> None:
    """The set-up of :func:`_open_to_first_page` (in a process of its own: :func:`_set_up_apart`)."""
    if revoke is not None:  # this device revokes another first
        with _open(fx) as v:
            v.revoke(revoke, reason="benchmark")
    if erase:  # or erases the fixture's target record
        with _open(fx) as v:
            v.erase([bytes.fromhex(fx.meta["target"])])
    if settle:  # the local state as this version leaves it after any open: what it remembers
        _open(fx).lock()  # to save work (the envelopes read, the signatures verified) is there, as on a user's


def _open_to_first_page(params: dict[str, Any], scratch: str, fixture: str, *, settle: bool = False,
                        revoke: str | None = None, erase: bool = False) -> dict[str, Any]:
    fx = _clone(params, fixture, scratch)
    apart = (_set_up_apart(_prepare, fx, settle, revoke, erase, scratch=scratch)
             if settle or revoke is not None or erase else False)
    importlib.import_module("camillo.vault")  # (imported before the timed open, as in warm_open_agent)
    with Meter() as m:
        v = _open(fx)
        rows = v.timeline(limit=100)
    out = {"meter": m.to_json(), "rows": len(rows), "decryptions": v.session.reader.decryptions, "set_up_apart": apart}
    v.lock()
    return out


@op("warm_open")
def warm_open(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """Open with this installation's cache, then the first page (100 rows) of the timeline; on a
    clone opened and locked once before (a fixture an earlier version built is brought up to date)."""
    return _open_to_first_page(params, scratch, params.get("variant", "loose"), settle=True)


@op("warm_open_revoked")
def warm_open_revoked(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """:func:`warm_open` after this device revoked another (the laptop, lost): every open of such a vault judges
    whether the revoked key may hold the current keys (``camillo.ops.rekey.revoked_holds``), which once read
    every record to find the revocations."""
    return _open_to_first_page(params, scratch, "loose", settle=True, revoke="laptop")


@op("warm_open_erased")
def warm_open_erased(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """:func:`warm_open` of the erasure fixture after this device erased one record in its large epoch: every
    open after an erasure checks whether batches under the destroyed epoch must be sealed again."""
    return _open_to_first_page(params, scratch, "erasure", settle=True, erase=True)


@op("warm_open_agent")
def warm_open_agent(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """Warm open + first page of an agent whose grant writes one compartment (personal), on a clone opened by it
    once before (untimed: its first open reads what it can): the other compartments' segments stay unreadable to
    it, and a warm open reads none of them again (the local state keeps them with their epochs; each was read
    at every open once, 0.86 s at a million records)."""
    from camillo.vault import Unlock, Vault

    fx = _clone(params, "loose", scratch)
    grant, home = os.path.join(scratch, "agent.grant"), os.path.join(scratch, "agent-home")
    apart = _set_up_apart(_agent_first_open, fx, grant, home, scratch=scratch)
    with Meter() as m:
        v = Vault.open(fx.vault, Unlock.grant(grant), home=home)
        rows = v.timeline(limit=100)
    out = {"meter": m.to_json(), "rows": len(rows), "decryptions": v.session.reader.decryptions,
           "unreadable": len(v.session.reader.unreadable), "set_up_apart": apart}
    v.lock()
    return out


def _agent_first_open(fx: Fixture, grant: str, home: str) -> None:
    """The set-up of :func:`warm_open_agent` (in a process of its own: :func:`_set_up_apart`): the owner grants
    the agent one compartment, and the agent opens the vault once (a cold load of what it can read)."""
    from camillo.vault import Unlock, Vault

    with _open(fx) as v:
        v.create_grant("benchmark-agent", {"personal": "write"}, grant)
    Vault.open(fx.vault, Unlock.grant(grant), home=home).lock()


@op("reopen")
def reopen(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """Warm open + first page after another device (the laptop) wrote 1,000 batches."""
    return _open_to_first_page(params, scratch, "reopen")


# ---------------------------------------------------------------------------------------------
# Writing


@op("append")
def append(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """Interactive appends of one message each, on the lived-in vault (``fixture``: another, the
    compacted one); per-append latency.  At most ``count`` appends or ``seconds`` of them (at least
    30), after 5 unmeasured ones."""
    from camillo.vault import NewRecord

    fx = _clone(params, params.get("fixture", "loose"), scratch)
    if not params.get("fsync", True):
        _no_fsync()
    count, warmup, budget = params.get("count", 200), 5, params.get("seconds", 6.0)
    items = messages(count + warmup, seed=41, now=int(time.time()), conversation_prefix="interactive")
    recs = [NewRecord(type="message", conversation=x.conversation, role=x.role, text=x.text) for x in items]
    v = _open(fx)
    m, samples, cpu = timed_appends(v, recs, warmup, budget)
    v.lock()
    return {"meter": m.to_json(), "samples": samples, "samples_cpu": cpu,
            "record_bytes": sum(len(x.text or "") + 120 for x in items) // len(items)}


def timed_appends(v: Any, recs: list[Any], warmup: int, budget: float) -> tuple[Meter, list[float], list[float]]:
    """``warmup`` unmeasured appends of one record each, then one per record until all are done or
    ``budget`` seconds passed (at least 30): the Meter, and each append's wall and CPU seconds."""
    for rec in recs[:warmup]:
        v.append([rec])
    samples: list[float] = []
    cpu: list[float] = []
    with Meter() as m:
        for rec in recs[warmup:]:
            c0, t0 = time.process_time(), time.perf_counter()
            v.append([rec])
            samples.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            if len(samples) >= 30 and time.perf_counter() - m._t0 > budget:
                break
    return m, samples, cpu


@op("bulk_import")
def bulk_import(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """Import ``count`` more messages into the lived-in vault the way :func:`camillo.demo.add_bulk`
    does (``Vault.append`` of 5,000 at a time, 70% personal, 30% work), the vault already open."""
    import random

    from camillo.session import writer

    fx = _clone(params, "loose", scratch)
    count = params["count"]
    items = messages(count, seed=51, now=int(time.time()), conversation_prefix="import")
    rng = random.Random(51)
    before = segment_files(fx.vault)
    v = _open(fx)
    with Meter() as m:
        for start in range(0, count, 5000):
            v.append(items[start : start + 5000], compartment="personal" if rng.random() < 0.7 else "work")
    v.lock()
    new = {k: s for k, s in segment_files(fx.vault).items() if k not in before}
    chunk = 5000
    batches = sum(-(-min(chunk, count - s) // writer.BATCH_RECORDS) for s in range(0, count, chunk))
    return {"meter": m.to_json(), "records": count, "new_segments": len(new), "new_segment_bytes": sum(new.values()),
            "batches": batches}


@op("compaction")
def compaction(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """``Vault.compact(prune_now=True)`` on the lived-in vault (the laptop has not acknowledged yet,
    so the old segments stay: two-phase prune)."""
    fx = _clone(params, "loose", scratch)
    v = _open(fx)
    before = _files(fx.vault)
    small = {n: s for n, s in before.items() if n.startswith("segments/") and s <= 64 * 1024}
    with Meter() as m:
        report = v.compact(prune_now=True)
    v.lock()
    return {"meter": m.to_json(), "report": report.__dict__, "small_segments": len(small),
            "small_bytes": sum(small.values()), **_diff(before, _files(fx.vault))}


@op("erasure")
def erasure(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """``Vault.erase`` of one record in an epoch of records/10 records (re-authenticated by the
    passphrase the vault was opened with)."""
    fx = _clone(params, "erasure", scratch)
    v = _open(fx)
    before = _files(fx.vault)
    target = bytes.fromhex(fx.meta["target"])
    with Meter() as m:
        report = v.erase([target])
    after = _files(fx.vault)
    v.lock()
    return {"meter": m.to_json(), "report": {k: (len(x) if isinstance(x, list) else x)
                                             for k, x in report.to_json().items()},
            "epoch_records": fx.meta["epoch_records"], **_diff(before, after)}


@op("revoke")
def revoke(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """``Vault.revoke("laptop")``: a lost laptop (new epochs everywhere, the master secret rolls)."""
    fx = _clone(params, "loose", scratch)
    v = _open(fx)
    before = _files(fx.vault)
    with Meter() as m:
        report = v.revoke("laptop", reason="benchmark")
    after = _files(fx.vault)
    v.lock()
    return {"meter": m.to_json(), "report": report.__dict__ if hasattr(report, "__dict__") else str(report),
            **_diff(before, after)}


@op("passwd")
def passwd(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """``Vault.change_passphrase``: one Argon2id of the new passphrase, with the vault's parameters
    (those of its floor: the writer's default is 256 MiB, four times the corpus's 64 MiB), then the
    keys roll (new slots for every credential, a new epoch per compartment, envelopes re-wrapped)."""
    fx = _clone(params, "loose", scratch)
    v = _open(fx)
    kdf = _passphrase_kdf(v)
    before = _files(fx.vault)
    with Meter() as m:
        v.change_passphrase("a new benchmark passphrase", kdf=kdf)
    after = _files(fx.vault)
    v.lock()
    return {"meter": m.to_json(), **_diff(before, after)}


def _passphrase_kdf(v: Any) -> tuple[int, int, int] | None:
    """The Argon2id parameters (m KiB, t, p) of the vault's current passphrase slot."""
    for h in v.session.slot_headers()[0]:
        if h.kdf is not None and h.generation == v.session.keyring.generation:
            return (h.kdf.memory_kib, h.kdf.time_cost, h.kdf.parallelism)
    return None


@op("attachments")
def attachments(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """``Vault.attach`` of a ``mib`` MiB file (random bytes, so no chunk is shared) to a message of
    the lived-in vault, streamed from disk, then ``Vault.save_attachment`` of it to a new file (every
    chunk opened and checked, the whole hashed, written and fsynced)."""
    fx = _clone(params, "loose", scratch)
    mib = int(params.get("mib", 64))
    src, out = os.path.join(scratch, "file.bin"), os.path.join(scratch, "file-out.bin")
    with open(src, "wb") as fh:
        for _ in range(mib):
            fh.write(os.urandom(1 << 20))
    v = _open(fx)
    before = _files(fx.vault)
    with Meter() as m_attach:
        rid = v.attach(src, compartment="personal", name="file.bin").written[0]
    after = _files(fx.vault)
    with Meter() as m_fetch:
        v.save_attachment(rid, out)
    v.lock()
    return {"meter": m_attach.to_json(), "fetch": m_fetch.to_json(), "bytes": mib << 20, "chunks": mib,
            **_diff(before, after)}


# ---------------------------------------------------------------------------------------------
# Reading


@op("search")
def search(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """Full-text search with modifiers over the query set, several rounds; per-query latency."""
    fx = _clone(params, "loose", scratch)
    v = _open(fx)
    qs = queries()
    rounds = params.get("rounds", 5)
    samples, cpu, per_query, hits = [], [], {q: [] for q in qs}, {}
    v.search(qs[0])  # warm up SQLite's statement cache
    with Meter() as m:
        for _ in range(rounds):
            for q in qs:
                c0, t0 = time.process_time(), time.perf_counter()
                res = v.search(q)
                dt = time.perf_counter() - t0
                cpu.append(time.process_time() - c0)
                samples.append(dt)
                per_query[q].append(dt)
                hits[q] = len(res)
    v.lock()
    return {"meter": m.to_json(), "samples": samples, "samples_cpu": cpu, "hits": hits,
            "per_query_median_ms": {q: round(sorted(x)[len(x) // 2] * 1000, 2) for q, x in per_query.items()}}


# ---------------------------------------------------------------------------------------------
# Moving


@op("merge")
def merge(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """``merge_into(A, B)`` of two copies diverged by K batches, then a warm open of A to its
    first page (the merged state, as the user sees it)."""
    from camillo.transport import merge_into

    fx = _fixture(params, "merge")
    root = os.path.join(scratch, "A")
    from .corpus import clone_tree

    clone_tree(os.path.join(fx.root, "A"), root)
    os.sync()  # (as clone_fixture: the clone's own write-back is not the merge's)
    a = Fixture("merge-A", root, fx.meta)
    other = os.path.join(fx.root, "B", "vault")
    with Meter() as m:
        copied = merge_into(a.vault, other)
        t_copy = time.perf_counter()
        v = _open(a)
        rows = v.timeline(limit=100)
    copy_seconds = t_copy - m._t0
    out = {"meter": m.to_json(), "copy_seconds": copy_seconds, "copied_files": len(copied),
           "copied_bytes": sum(os.path.getsize(os.path.join(a.vault, *n.split("/"))) for n in copied),
           "decryptions": v.session.reader.decryptions, "rows": len(rows)}
    v.lock()
    return out


@op("pack")
def pack(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """``pack_vault`` of the lived-in vault into one ``.vmem`` (no key needed)."""
    from camillo.transport import pack_vault

    fx = _fixture(params, "loose")
    out_path = os.path.join(scratch, "vault.vmem")
    files = _files(fx.vault)
    with Meter() as m:
        size, _digest = pack_vault(fx.vault, out_path)
    return {"meter": m.to_json(), "files": len(files), "bytes": size}


@op("unpack")
def unpack(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """``unpack_vault`` of that ``.vmem`` into a new folder (every file written durably)."""
    from camillo.transport import pack_vault, unpack_vault

    fx = _fixture(params, "loose")
    pack_path = os.path.join(scratch, "vault.vmem")
    size, _ = pack_vault(fx.vault, pack_path)
    with Meter() as m:
        count = unpack_vault(pack_path, os.path.join(scratch, "unpacked"))
    return {"meter": m.to_json(), "files": count, "bytes": size}


# ---------------------------------------------------------------------------------------------
# Counting (not timed): what the floors multiply


@op("counts")
def counts(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """Open a fixture cold and count what a reader must do: HPKE opens, AEAD bytes, signatures,
    record bytes; plus the installation's cache size (for the warm-open floor)."""
    src = _fixture(params, params["variant"])
    fx = clone_fixture(src, os.path.join(scratch, src.name))
    v = _open(fx, cache=False)
    out = _counts(v)
    v.lock()
    return out


def _counts(v: Any) -> dict[str, Any]:
    """What a reader of the vault ``v`` (opened cold) must do, and the size of its local state."""
    from camillo import envelopes, ids, slots

    names = v.session.shelf.list()
    seg_sizes = [len(v.session.shelf.read(n)) for n in names if n.startswith("segments/") and n not in v.session.reader.unreadable]
    rid = ids.recipient_id(v.session.keyring.owner_kem.public)
    owner_env = 0
    for n in names:
        if n.startswith("env/") and envelopes.is_for(v.session.shelf.read(n), rid):
            owner_env += 1
    kdf = None
    for n in names:
        if n.startswith("slots/"):
            h = slots.read_header(v.session.shelf.read(n), n)
            if h.kdf is not None and h.generation == v.session.keyring.generation:
                kdf = [h.kdf.memory_kib, h.kdf.time_cost, h.kdf.parallelism]
    verified = sum(1 for x in v.session.batches.values() if x.sig_ok)
    vouched = sum(1 for x in v.session.batches.values() if x.vouched)
    controls: dict[bytes, int] = {}
    for x in v.session.batches.values():
        for rec in x.records:
            if rec is not None:
                controls[rec.id] = len(rec.sigs)
    # (the records from the state the open wrote them to: a batch's view keeps none of their bytes)
    records, record_bytes = v.session.materialized.db.execute(
        "SELECT count(*), coalesce(sum(length(raw)), 0) FROM records WHERE raw IS NOT NULL").fetchone()
    cache_path = v.session.local.cache_path(v.writer_id) if v.session.actor is not None else ""
    state_path = v.session.local.state_path(v.writer_id) if v.session.actor is not None else ""
    return {
        "segments": len(seg_sizes), "segment_bytes": sum(seg_sizes), "owner_envelopes": owner_env,
        "envelopes": sum(1 for n in names if n.startswith("env/")), "epoch_keys": len(v.session.keyring.epoch_keys),
        "slots": sum(1 for n in names if n.startswith("slots/")), "kdf": kdf,
        "batches": len(v.session.batches), "batches_verified": verified, "batches_vouched": vouched,
        "control_records": len(controls), "signature_verifies": verified + sum(controls.values()),
        "records": records, "record_bytes": record_bytes, "timeline_records": v.session.materialized.count(),
        "cache_bytes": sum(os.path.getsize(cache_path + x) for x in ("", "-wal")
                           if cache_path and os.path.exists(cache_path + x)),
        "state_bytes": os.path.getsize(state_path) if state_path and os.path.exists(state_path) else 0,
        "files": len(names),
    }


# The operations of the keychanges and sync groups live in their own modules and register here.
from . import keychanges as _keychanges  # noqa: E402,F401
from . import syncbench as _syncbench  # noqa: E402,F401
