"""Writing the results: ``bench-N.json`` (everything, including raw samples), ``bench-N.md`` (the
tables) and ``bench.png`` (open time and search latency against vault size, from every
``bench-*.json`` in the output folder).  The plot uses matplotlib when it is installed (the
``bench`` extra) and otherwise draws the same chart with Pillow.

Runs on the main thread.
"""

from __future__ import annotations

import glob
import json
import math
import os
from typing import Any

OPEN_SERIES = [("cold_open_loose", "cold open, loose segments"), ("cold_open_compacted", "cold open after compaction"),
               ("cold_open_bulk", "cold open, bulk-imported"), ("warm_open", "warm open to first page"),
               ("reopen", "re-open after 1,000 new batches")]
SEARCH_SERIES = [("search_p50", "search p50"), ("search_p99", "search p99"), ("gui_search", "GUI search p50")]
COLORS = ["#2563eb", "#16a34a", "#9333ea", "#ea580c", "#dc2626", "#0891b2"]


def fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "s":
        a = abs(value)
        if a < 1e-5:
            return f"{value * 1e6:.2f} µs"
        if a < 1e-3:
            return f"{value * 1e6:.0f} µs"
        if a < 1:
            return f"{value * 1e3:.3g} ms" if a < 0.1 else f"{value * 1e3:.0f} ms"
        return f"{value:.3g} s" if a < 100 else f"{value:.0f} s"
    if unit == "records/s":
        return f"{value:,.0f}/s"
    if unit == "MiB":
        return f"{value:,.0f} MiB" if value >= 100 else f"{value:.1f} MiB"
    return f"{value:.3g} {unit}"


def _target(t: dict[str, Any] | None) -> str:
    if not t:
        return ""
    at = "*" if t.get("at") else ""
    if t["kind"] == "lt":
        return f"< {fmt(t['value'], 's')}{at}"
    if t["kind"] == "ratio_le":
        return f"≤ {t['value']:g}× floor{at}"
    if t["kind"] == "ratio_lt":
        return f"< {t['value']:g}× plaintext{at}"
    if t["kind"] == "floor_plus":
        return f"≤ floor + {fmt(t['value'], 's')}{at}"
    if t["kind"] == "ratio_le_folder":
        return f"≤ {t['value']:g}× the folder{at}"
    if t["kind"] == "ge":
        return f"≥ {t['value']:g} MB/s{at}"
    return ""


def markdown_table(result: dict[str, Any]) -> str:
    lines = ["| Figure | Median | Min – max | CPU | Floor | × floor | Peak RSS | Target | Status |",
             "|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for f in result["figures"]:
        u = f["unit"]
        floor_unit = "MiB" if f["id"] == "peak_rss" else u
        ratio = f"{f['ratio']:.1f}×" if f.get("ratio") is not None else "—"
        rss = fmt(f.get("peak_rss_mib"), "MiB") if f.get("peak_rss_mib") and f["id"] != "peak_rss" else ""
        cpu = fmt(f["cpu_median"], u) if f.get("cpu_median") is not None else ""
        lines.append(f"| {f['label']} | {fmt(f['median'], u)} | {fmt(f['min'], u)} – {fmt(f['max'], u)} | {cpu} | "
                     f"{fmt(f.get('floor'), floor_unit) if f.get('floor') is not None else '—'} | {ratio} | {rss} | "
                     f"{_target(f.get('target'))} | {f.get('status', '')} |")
    return "\n".join(lines)


def floor_table(result: dict[str, Any]) -> str:
    lines = ["| Figure | Floor components |", "|---|---|"]
    for f in result["figures"]:
        comps = f.get("floor_components")
        if not comps or f["id"] == "peak_rss":
            continue
        total = sum(comps.values()) or 1
        parts = ", ".join(f"{k} {fmt(v, 's')} ({100 * v / total:.0f}%)" for k, v in
                          sorted(comps.items(), key=lambda kv: -kv[1]) if v > 0)
        lines.append(f"| {f['label'].strip()} | {parts} |")
    return "\n".join(lines)


def counts_table(result: dict[str, Any]) -> str:
    keys = [("records", "records (all batches)"), ("record_bytes", "plaintext record bytes"),
            ("batches", "batches"), ("batches_vouched", "batches vouched by a compaction"),
            ("segments", "segments"), ("segment_bytes", "segment bytes"), ("envelopes", "envelopes"),
            ("owner_envelopes", "envelopes for the owner (HPKE opens)"), ("epoch_keys", "epoch keys"),
            ("signature_verifies", "signature verifies at a cold open"), ("files", "vault files"),
            ("cache_bytes", "desktop cache file bytes")]
    counts = result["counts"]
    names = list(counts)
    lines = ["| | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for k, label in keys:
        lines.append(f"| {label} | " + " | ".join(f"{counts[n].get(k, 0):,}" for n in names) + " |")
    return "\n".join(lines)


def primitives_table(result: dict[str, Any]) -> str:
    p = result["primitives"]
    rows = [("HPKE open (X-Wing, 32-byte key)", fmt(p["hpke_open"], "s")), ("HPKE seal", fmt(p["hpke_seal"], "s")),
            ("X-Wing key from seed", fmt(p["xwing_keygen"], "s")),
            ("Ed25519 sign / verify", f"{fmt(p['ed25519_sign'], 's')} / {fmt(p['ed25519_verify'], 's')}"),
            ("XChaCha20-Poly1305 open", f"{fmt(p['aead_open_per_call'], 's')} + {1 / p['aead_open_per_byte'] / 1e6:,.0f} MB/s"),
            ("XChaCha20-Poly1305 seal", f"{fmt(p['aead_seal_per_call'], 's')} + {1 / p['aead_seal_per_byte'] / 1e6:,.0f} MB/s"),
            ("HKDF-Expand (88 bytes)", fmt(p["hkdf_expand"], "s")),
            ("SHA-256", f"{1 / p['sha256_per_byte'] / 1e6:,.0f} MB/s"),
            ("Durable 4 KiB file (write, fsync, rename, fsync dir)", fmt(p["durable_write_4k"], "s")),
            ("Sequential write + one fsync", f"{1 / p['seq_write_per_byte'] / 1e6:,.0f} MB/s")]
    if "durable_write_bulk_4k" in p:
        rows.append(("Durable 4 KiB file among 512 (write each, one syncfs, link each, fsync dir)",
                     fmt(p["durable_write_bulk_4k"], "s")))
    if "argon2id" in p:
        kdf = result["counts"]["loose"].get("kdf") or ["?", "?", "?"]
        rows.insert(0, (f"Argon2id (m = {kdf[0]} KiB, t = {kdf[1]}, p = {kdf[2]})", fmt(p["argon2id"], "s")))
    samples = result.get("primitives_samples") or []
    lines = ["| Primitive | Time |", "|---|---:|"] + [f"| {a} | {b} |" for a, b in rows]
    if len(samples) > 1:
        spread = [x["hpke_open"] for x in samples]
        lines.append(f"| (HPKE open over the {len(samples)} timings: fastest – slowest) | "
                     f"{fmt(min(spread), 's')} – {fmt(max(spread), 's')} |")
    return "\n".join(lines)


def vaultmem_table(cmp: dict[str, Any]) -> str:
    lines = [f"VaultMem {cmp['vaultmem_version']}, {cmp['records']:,} memories, {cmp['runs']} run(s); median (min – max).",
             "", "| | Camillo | VaultMem | Camillo / VaultMem | Note |", "|---|---:|---:|---:|---|"]
    for r in cmp["rows"]:
        def cell(s: dict[str, float] | None, unit: str = r["unit"]) -> str:
            if not s:
                return "—"
            return f"{fmt(s['median'], unit)} ({fmt(s['min'], unit)} – {fmt(s['max'], unit)})"

        ratio = f"{r['ratio']:.2f}" if r.get("ratio") is not None else "—"
        lines.append(f"| {r['label']} | {cell(r['camillo'])} | {cell(r['vaultmem'])} | {ratio} | {r.get('note', '')} |")
    return "\n".join(lines)


def keychanges_table(kc: dict[str, Any]) -> str:
    """The same operations on the code before the rules of spec §16.10 and on this code."""
    lines = [f"Before: {kc['before']['description']}; median (min – max) over the runs, CPU median.", "",
             "| Operation | Before | After | After / before | CPU before | CPU after | CPU after / before |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in kc["rows"]:
        def cell(x: dict[str, float]) -> str:
            return f"{fmt(x['median'], 's')} ({fmt(x['min'], 's')} – {fmt(x['max'], 's')})"

        ratio = f"{r['ratio']:.2f}" if r.get("ratio") is not None else "—"
        cratio = f"{r['cpu_ratio']:.2f}" if r.get("cpu_ratio") is not None else "—"
        lines.append(f"| {r['label']} | {cell(r['before'])} | {cell(r['after'])} | {ratio} | "
                     f"{fmt(r['cpu_before']['median'], 's')} | {fmt(r['cpu_after']['median'], 's')} | {cratio} |")
    return "\n".join(lines)


def sync_table(sync: dict[str, Any]) -> str:
    """Where the time of a change seen through Syncthing goes."""
    def q(xs: list[float], p: float) -> str:
        if not xs:
            return "—"
        ys = sorted(xs)
        pos = (len(ys) - 1) * p / 100
        lo = int(pos)
        hi = min(lo + 1, len(ys) - 1)
        return fmt(ys[lo] + (ys[hi] - ys[lo]) * (pos - lo), "s")

    app = sync["append"]
    rows = [("B's refresh shows the record", [x["seconds"] for x in app]),
            ("the segment file is in B's folder", [x["file"] for x in app if x.get("file") is not None]),
            ("from the file in B's folder to B's refresh showing it (20 ms polling)",
             [x["seconds"] - x["file"] for x in app if x.get("file") is not None]),
            ("floor: Syncthing carries one file of that size", [x["seconds"] for x in sync["floor"]]),
            ("A's append() itself", [x["append"] for x in app]),
            ("the refresh on B that found it", [x["last_refresh"] for x in app])]
    lines = [f"Through two Syncthing instances on loopback ({len(app)} appends; the vault: {sync['records']:,} records, "
             f"{sync['files']:,} files; watcher delay {sync['syncthing']['watch_delay_s']} s, rescan "
             f"{sync['syncthing']['rescan_s']} s):", "", "| One append, from the call on A | p50 | p95 | max |",
             "|---|---:|---:|---:|"]
    lines += [f"| {label} | {q(xs, 50)} | {q(xs, 95)} | {q(xs, 100)} |" for label, xs in rows]
    for kind in ("erase", "revoke"):
        xs = sync.get(kind) or []
        if not xs:
            continue
        lines += ["", f"| {kind} on A (one row per sample) | {kind}() | in effect on B | from the return | files on B | "
                      "B whole again | floor (same file changes) | files new / deleted | refreshes, longest |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for i, x in enumerate(xs, 1):
            lines.append(f"| {i} | {fmt(x['operation'], 's')} | {fmt(x['seconds_effective'], 's')} | "
                         f"{fmt(x['seconds_effective'] - x['operation'], 's')} | {fmt(x['files'], 's')} | "
                         f"{fmt(x['seconds_whole'], 's')} | {fmt(x['floor'], 's')} | {x['new_files']} / "
                         f"{x['deleted_files']} | {x['refreshes']}, {fmt(x['longest_refresh'], 's')} |")
    if sync.get("refresh_errors"):
        lines += ["", f"B's refresh raised {len(sync['refresh_errors'])} time(s) while files arrived: "
                      + "; ".join(sorted(set(sync["refresh_errors"]))[:5])]
    return "\n".join(lines)


def markdown(result: dict[str, Any]) -> str:
    m = result["machine"]
    out = [f"# Camillo benchmarks: {result['records']:,} records", "",
           f"{result['date']}; {m['cpu']}, {m['cores']} cores; Python {m['python']}; {result['runs']} run(s) per figure "
           f"(median, min – max); load average {m['load_average_at_start']} at start, "
           f"{result.get('load_average_at_end')} at end; whole run {result['elapsed_seconds']:.0f} s "
           f"(corpus {result.get('corpus_seconds', 0):.0f} s of it).", "",
           markdown_table(result), "",
           "## Floor components", "", floor_table(result), "",
           "## What the floors count", "", counts_table(result), "",
           "## Primitives on this machine", "", primitives_table(result), ""]
    if result.get("vaultmem"):
        out += ["## Camillo and VaultMem", "", vaultmem_table(result["vaultmem"]), ""]
    if result.get("keychanges") or result.get("sync"):
        out += ["## Key changes under concurrency", ""]
        if result.get("keychanges"):
            out += [keychanges_table(result["keychanges"]), ""]
        if result.get("sync"):
            out += [sync_table(result["sync"]), ""]
    out += ["## Notes", ""] + [f"- {n}" for n in result.get("notes", [])] + [""]
    return "\n".join(out)


def write_all(result: dict[str, Any], out: str) -> list[str]:
    n = result["records"]
    jpath = os.path.join(out, f"bench-{n}.json")
    tmp = jpath + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(result, fh, indent=1, default=str)
    os.replace(tmp, jpath)
    mpath = os.path.join(out, f"bench-{n}.md")
    with open(mpath, "w") as fh:
        fh.write(markdown(result))
    ppath = os.path.join(out, "bench.png")
    plot(out, ppath)
    return [jpath, mpath, ppath]


# ---------------------------------------------------------------------------------------------
# The plot


def series(out: str) -> dict[str, list[tuple[int, float, float, float]]]:
    """figure id -> [(records, median, min, max)] over every bench-*.json in ``out``."""
    data: dict[str, list[tuple[int, float, float, float]]] = {}
    for path in sorted(glob.glob(os.path.join(out, "bench-*.json"))):
        try:
            with open(path) as fh:
                r = json.load(fh)
        except (OSError, ValueError):
            continue
        for f in r.get("figures", []):
            data.setdefault(f["id"], []).append((r["records"], f["median"], f["min"], f["max"]))
            if f.get("peak_rss_mib"):  # the memory panel: "rss:<figure>"
                rss = f["peak_rss_mib"]
                data.setdefault("rss:" + f["id"], []).append((r["records"], rss, rss, rss))
        for f in r.get("figures", []):
            if f["id"] == "cold_open_loose" and f.get("floor"):
                data.setdefault("cold_open_loose_floor", []).append((r["records"], f["floor"], f["floor"], f["floor"]))
    for v in data.values():
        v.sort()
    return data


MEMORY_SERIES = [("rss:cold_open_loose", "cold open, loose segments"), ("rss:warm_open", "warm open to first page"),
                 ("rss:search_p50", "search"), ("rss:append_nofsync_p50", "append"), ("rss:erasure", "erase one record")]
# (title, series, unit of the y axis)
PANELS = [("Open time against vault size", [*OPEN_SERIES, ("cold_open_loose_floor", "floor of the cold open (loose)")], "s"),
          ("Search latency against vault size", SEARCH_SERIES, "s"),
          ("Peak memory (RSS) against vault size", MEMORY_SERIES, "MiB")]


def plot(out: str, path: str) -> None:
    data = series(out)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _plot_pillow(data, path)
        return
    fig, axes = plt.subplots(1, len(PANELS), figsize=(6 * len(PANELS), 4.8), dpi=110)
    for ax, (title, names, unit) in zip(axes, PANELS):
        for i, (fid, label) in enumerate(names):
            pts = data.get(fid)
            if not pts:
                continue
            xs = [p[0] for p in pts]
            ys = [p[1] for p in pts]
            err = [[p[1] - p[2] for p in pts], [p[3] - p[1] for p in pts]]
            style = "--" if fid.endswith("_floor") else "-"
            ax.errorbar(xs, ys, yerr=err, fmt="o" + style, color=COLORS[i % len(COLORS)], label=label, capsize=3,
                        markersize=4, linewidth=1.4)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("records in the vault")
        ax.set_ylabel("seconds" if unit == "s" else unit)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.25)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def _plot_pillow(data: dict[str, list[tuple[int, float, float, float]]], path: str) -> None:
    """The same log-log panels with Pillow only (no matplotlib installed)."""
    from PIL import Image, ImageDraw

    img = Image.new("RGB", (660 * len(PANELS), 540), "white")
    d = ImageDraw.Draw(img)
    for panel, (title, names, unit) in enumerate(PANELS):
        _pillow_panel(d, data, 80 + panel * 660, title, names, unit)
    img.save(path)


def _pillow_panel(d: Any, data: dict[str, list[tuple[int, float, float, float]]], x0: int, title: str,
                  names: list[tuple[str, str]], unit: str = "s") -> None:
    y0, pw, ph = 50, 540, 380
    pts_all = [p for fid, _l in names for p in data.get(fid, [])]
    d.text((x0, 20), title, fill="black")
    d.rectangle([x0, y0, x0 + pw, y0 + ph], outline="#888888")
    if not pts_all:
        return
    xs = [p[0] for p in pts_all]
    ys = [v for p in pts_all for v in p[1:] if v > 0]
    lx0, lx1 = math.floor(math.log10(min(xs))) - 0.3, math.ceil(math.log10(max(xs))) + 0.3
    ly0, ly1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    if ly1 <= ly0:
        ly1 = ly0 + 1

    def X(v: float) -> float:
        return x0 + (math.log10(v) - lx0) / (lx1 - lx0) * pw

    def Y(v: float) -> float:
        return y0 + ph - (math.log10(max(v, 1e-12)) - ly0) / (ly1 - ly0) * ph

    for e in range(int(ly0), int(ly1) + 1):
        yy = Y(10.0 ** e)
        d.line([x0, yy, x0 + pw, yy], fill="#eeeeee")
        d.text((x0 - 60, yy - 6), f"1e{e} {unit}", fill="#444444")
    for e in range(math.ceil(lx0), math.floor(lx1) + 1):
        xx = X(10.0 ** e)
        d.line([xx, y0, xx, y0 + ph], fill="#eeeeee")
        d.text((xx - 14, y0 + ph + 6), f"1e{e}", fill="#444444")
    d.text((x0 + pw // 2 - 60, y0 + ph + 24), "records in the vault", fill="black")
    legend_y = y0 + 8
    for i, (fid, label) in enumerate(names):
        pts = data.get(fid)
        if not pts:
            continue
        color = COLORS[i % len(COLORS)]
        coords = [(X(p[0]), Y(p[1])) for p in pts]
        if len(coords) > 1:
            d.line(coords, fill=color, width=2)
        for (cx, cy), p in zip(coords, pts):
            d.line([cx, Y(p[2]), cx, Y(p[3])], fill=color, width=1)
            d.ellipse([cx - 4, cy - 4, cx + 4, cy + 4], fill=color)
        d.rectangle([x0 + 10, legend_y + 3, x0 + 20, legend_y + 11], fill=color)
        d.text((x0 + 26, legend_y), label, fill="black")
        legend_y += 16
