"""Camillo beside VaultMem (``pip install vaultmem``, 0.3.x) on the same corpus and the same embedder.

Both sides get the same N messages (the texts :func:`benchmarks.corpus.messages` generates, like
:func:`camillo.demo.add_bulk`) and the same deterministic embedder: Camillo's
:class:`camillo.search.HashingEmbedder` (256 dimensions), wrapped for VaultMem's ``embed(text)`` /
``embed_batch(texts)`` protocol.  Both use Argon2id with 64 MiB, t = 3, p = 4 (VaultMem's fixed
parameters; Camillo's demo parameters).  Each phase runs in a fresh child process:

* add N memories and close: VaultMem ``VaultSession.create`` + ``add`` × N + ``close`` (it embeds
  on add); Camillo ``Vault.create`` + ``append`` in chunks of 5,000 + the first ``semantic_search``
  (which embeds every record and keeps the vectors in the encrypted cache) + ``lock``;
* reopen: ``VaultSession.open`` (decrypts every atom) / ``Vault.open`` with the cache, and
  ``Vault.open(cache=False)`` as a second Camillo row;
* semantic search p50 over a query set (VaultMem ``search``, Camillo ``semantic_search``), and
  Camillo's full-text search for reference;
* change the passphrase: Camillo ``change_passphrase``; VaultMem 0.3.3 has no such method, so the
  O(1) re-wrap its README describes is done with its own ``vaultmem.crypto`` functions (derive a
  new KEK, wrap the MEK, rewrite ``meta.json`` atomically);
* peak RSS of each phase.

Operations run on the main thread of a child process (:mod:`benchmarks.child`).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from .corpus import messages
from .stats import Meter, percentile

PASSPHRASE = "camillo demo passphrase"  # noqa: S105 - the public demo passphrase
NEW_PASSPHRASE = "a new benchmark passphrase"  # noqa: S105
KDF = (65536, 3, 4)
SEMANTIC_QUERIES = [
    "garden", "tax forms", "jazz records", "python script that renames photos", "learning Portuguese verbs",
    "kitchen renovation quotes", "a birthday present for Ana", "conference talk proposal", "the team offsite",
    "podcast recommendation",
]
OPS: dict[str, Any] = {}


def op(name: str):
    def register(fn):
        OPS[name] = fn
        return fn

    return register


class VaultMemHashingEmbedder:
    """Camillo's HashingEmbedder behind VaultMem's embedder protocol: identical vectors."""

    def __init__(self, dimension: int = 256) -> None:
        from camillo.search import HashingEmbedder

        self._inner = HashingEmbedder(dimension)

    @property
    def dimension(self) -> int:
        return self._inner.dimension

    def embed(self, text: str) -> list[float]:
        return self._inner.embed([text])[0]

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        vecs = self._inner.embed(texts)  # (a numpy array for several texts: given as VaultMem's lists)
        return vecs.tolist() if hasattr(vecs, "tolist") else vecs


def _texts(params: dict[str, Any]) -> list[Any]:
    return messages(params["count"], seed=61, now=int(params.get("now", time.time())), conversation_prefix="cmp")


def _search_rounds(fn, rounds: int) -> list[float]:
    fn(SEMANTIC_QUERIES[0])
    out = []
    for _ in range(rounds):
        for q in SEMANTIC_QUERIES:
            t0 = time.perf_counter()
            fn(q)
            out.append(time.perf_counter() - t0)
    return out


# ---------------------------------------------------------------------------------------------
# Camillo


@op("camillo_add")
def camillo_add(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    from camillo.search import HashingEmbedder
    from camillo.vault import Vault

    items = _texts(params)
    path, home = os.path.join(params["dir"], "vault"), os.path.join(params["dir"], "home")
    with Meter() as m:
        v, _phrase = Vault.create(path, PASSPHRASE, device_name="bench", kdf=KDF, home=home)
        for start in range(0, len(items), 5000):
            v.append(items[start : start + 5000], compartment="personal")
        t_add = time.perf_counter()
        v.semantic_search(SEMANTIC_QUERIES[0], HashingEmbedder(256))
        t_index = time.perf_counter()
        v.lock()
    return {"meter": m.to_json(), "add_seconds": t_add - m._t0, "index_seconds": t_index - t_add,
            "close_seconds": m.seconds - (t_index - m._t0)}


@op("camillo_reopen")
def camillo_reopen(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    from camillo.search import HashingEmbedder
    from camillo.vault import Unlock, Vault

    path, home = os.path.join(params["dir"], "vault"), os.path.join(params["dir"], "home")
    with Meter() as m_open:
        v = Vault.open(path, Unlock.passphrase(PASSPHRASE), home=home)
    emb = HashingEmbedder(256)
    with Meter() as m_search:
        semantic = _search_rounds(lambda q: v.semantic_search(q, emb, limit=10), params.get("rounds", 2))
    fulltext = _search_rounds(lambda q: v.search(q), params.get("rounds", 2))
    with Meter() as m_pw:
        v.change_passphrase(NEW_PASSPHRASE, kdf=KDF)
    v.lock()
    return {"open": m_open.to_json(), "search": m_search.to_json(), "passwd": m_pw.to_json(),
            "semantic_p50": percentile(semantic, 50), "fulltext_p50": percentile(fulltext, 50)}


@op("camillo_cold")
def camillo_cold(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    from camillo.vault import Unlock, Vault

    path, home = os.path.join(params["dir"], "vault"), os.path.join(params["dir"], "home")
    with Meter() as m:
        v = Vault.open(path, Unlock.passphrase(PASSPHRASE), home=home, cache=False)
    v.lock()
    return {"open": m.to_json()}


# ---------------------------------------------------------------------------------------------
# VaultMem


@op("vaultmem_add")
def vaultmem_add(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    from vaultmem import VaultSession

    items = _texts(params)
    path = os.path.join(params["dir"], "vaultmem")
    with Meter() as m:
        s = VaultSession.create(path, passphrase=PASSPHRASE, owner="bench", embedder=VaultMemHashingEmbedder())
        for item in items:
            s.add(item.text)
        t_add = time.perf_counter()
        s.close()
    return {"meter": m.to_json(), "add_seconds": t_add - m._t0, "close_seconds": m.seconds - (t_add - m._t0)}


def _vaultmem_change_passphrase(session: Any, path: str, new: str) -> None:
    """VaultMem 0.3.3 has no passphrase change; its documented O(1) re-wrap, with its own crypto."""
    import base64

    from vaultmem.crypto import derive_kek, random_salt, wrap_mek

    meta_path = os.path.join(path, "meta.json")
    with open(meta_path) as fh:
        meta = json.load(fh)
    salt = random_salt()
    kek = derive_kek(new, salt, meta.get("memory_cost", KDF[0]))
    iv, ct, tag = wrap_mek(kek, bytes(session._mek))
    slot = next(s for s in meta["credential_slots"] if s["slot_id"] == "primary")
    slot.update(kdf_salt=base64.b64encode(salt).decode(), wrapped_mek_iv=base64.b64encode(iv).decode(),
                wrapped_mek_ct=base64.b64encode(ct).decode(), wrapped_mek_tag=base64.b64encode(tag).decode())
    tmp = meta_path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(meta, fh, indent=2)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, meta_path)


@op("vaultmem_reopen")
def vaultmem_reopen(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    from vaultmem import VaultSession

    path = os.path.join(params["dir"], "vaultmem")
    with Meter() as m_open:
        s = VaultSession.open(path, passphrase=PASSPHRASE, embedder=VaultMemHashingEmbedder())
    with Meter() as m_search:
        semantic = _search_rounds(lambda q: s.search(q, top_k=10), params.get("rounds", 2))
    with Meter() as m_pw:
        _vaultmem_change_passphrase(s, path, NEW_PASSPHRASE)
    s.close()
    s2 = VaultSession.open(path, passphrase=NEW_PASSPHRASE, embedder=VaultMemHashingEmbedder())  # it took
    s2.close()
    return {"open": m_open.to_json(), "search": m_search.to_json(), "passwd": m_pw.to_json(),
            "semantic_p50": percentile(semantic, 50)}


def compare(run_child, *, count: int, runs: int, work: str, scratch_root: str, say=print) -> dict[str, Any]:
    """Run both sides ``runs`` times; return the table rows (median, min, max per side)."""
    import shutil

    from .stats import summary

    now = int(time.time())
    raw: dict[str, list[float]] = {}

    def put(key: str, value: float) -> None:
        raw.setdefault(key, []).append(value)

    for i in range(runs):
        d = os.path.join(work, "vaultmem-cmp", f"run-{i}")
        if os.path.exists(d):
            shutil.rmtree(d)
        os.makedirs(d)
        base = {"count": count, "dir": d, "now": now}
        say(f"  comparison run {i + 1}/{runs}: VaultMem add")
        r = run_child({**base, "op": "vaultmem_add"}, scratch_root=scratch_root)
        put("vaultmem.add", r["meter"]["seconds"])
        put("vaultmem.add.rss", r["meter"]["peak_rss_mib"])
        say(f"  comparison run {i + 1}/{runs}: VaultMem reopen, search, passphrase")
        r = run_child({**base, "op": "vaultmem_reopen"}, scratch_root=scratch_root)
        put("vaultmem.open", r["open"]["seconds"])
        put("vaultmem.open.rss", r["open"]["peak_rss_mib"])
        put("vaultmem.semantic", r["semantic_p50"])
        put("vaultmem.search.rss", r["search"]["peak_rss_mib"])
        put("vaultmem.passwd", r["passwd"]["seconds"])
        say(f"  comparison run {i + 1}/{runs}: Camillo add")
        r = run_child({**base, "op": "camillo_add"}, scratch_root=scratch_root)
        put("camillo.add", r["meter"]["seconds"])
        put("camillo.add.rss", r["meter"]["peak_rss_mib"])
        put("camillo.add.index", r["index_seconds"])
        say(f"  comparison run {i + 1}/{runs}: Camillo reopen, search, passphrase")
        r = run_child({**base, "op": "camillo_cold"}, scratch_root=scratch_root)
        put("camillo.cold", r["open"]["seconds"])
        put("camillo.cold.rss", r["open"]["peak_rss_mib"])
        r = run_child({**base, "op": "camillo_reopen"}, scratch_root=scratch_root)
        put("camillo.open", r["open"]["seconds"])
        put("camillo.open.rss", r["open"]["peak_rss_mib"])
        put("camillo.semantic", r["semantic_p50"])
        put("camillo.fulltext", r["fulltext_p50"])
        put("camillo.search.rss", r["search"]["peak_rss_mib"])
        put("camillo.passwd", r["passwd"]["seconds"])
        shutil.rmtree(d, ignore_errors=True)
    s = {k: summary(v) for k, v in raw.items()}

    def row(label: str, unit: str, cam: str | None, vm: str | None, note: str = "") -> dict[str, Any]:
        c = s.get(cam) if cam else None
        v = s.get(vm) if vm else None
        ratio = (c["median"] / v["median"]) if c and v and v["median"] > 0 else None
        return {"label": label, "unit": unit, "camillo": c, "vaultmem": v, "ratio": ratio, "note": note}

    rows = [
        row(f"add {count:,} memories + close", "s", "camillo.add", "vaultmem.add",
            "Camillo includes embedding every record (first semantic search) so both sides persist vectors"),
        row("  of which: embedding all records", "s", "camillo.add.index", None, "VaultMem embeds inside add"),
        row("reopen (Camillo: warm, with its cache)", "s", "camillo.open", "vaultmem.open",
            "VaultMem always decrypts every atom"),
        row("reopen (Camillo: cold, no cache)", "s", "camillo.cold", "vaultmem.open"),
        row("semantic search p50", "s", "camillo.semantic", "vaultmem.semantic", "same HashingEmbedder(256)"),
        row("full-text search p50", "s", "camillo.fulltext", None, "VaultMem has no full-text search"),
        row("change passphrase", "s", "camillo.passwd", "vaultmem.passwd",
            "VaultMem has no API for it: its documented MEK re-wrap, done with vaultmem.crypto"),
        row("peak RSS: add + close", "MiB", "camillo.add.rss", "vaultmem.add.rss"),
        row("peak RSS: reopen", "MiB", "camillo.open.rss", "vaultmem.open.rss"),
        row("peak RSS: reopen cold", "MiB", "camillo.cold.rss", "vaultmem.open.rss"),
        row("peak RSS: search", "MiB", "camillo.search.rss", "vaultmem.search.rss"),
    ]
    import importlib.metadata as md

    return {"records": count, "runs": runs, "vaultmem_version": md.version("vaultmem"), "rows": rows}
