"""Summaries of the cProfile files ``--profile DIR`` writes: ``python -m benchmarks.profiles DIR [N]``.

For each ``*.prof`` (one operation's timed region, see :class:`benchmarks.stats.Meter`) it prints
the top functions by own time and Camillo's functions by cumulative time, as percentages of the
region, with ``file:line``.  Runs on the main thread.
"""

from __future__ import annotations

import glob
import os
import pstats
import sys


def _short(path: str) -> str:
    for marker in ("/core/", "/site-packages/", "/benchmarks/"):
        if marker in path:
            return path.split(marker, 1)[1] if marker != "/benchmarks/" else "benchmarks/" + path.split(marker, 1)[1]
    return path


def summarize(path: str, top: int = 15) -> str:
    st = pstats.Stats(path)
    rows = [(tt, ct, nc, _short(f), line, fn) for (f, line, fn), (_cc, nc, tt, ct, _callers) in st.stats.items()]
    total = st.total_tt or 1.0
    out = [f"== {os.path.basename(path)}: {total:.3f} s profiled", "-- own time"]
    for tt, ct, nc, f, line, fn in sorted(rows, reverse=True)[:top]:
        out.append(f"{tt:8.3f} s {100 * tt / total:5.1f}%  cum {ct:7.3f}  calls {nc:<8} {f}:{line}({fn})")
    out.append("-- cumulative, camillo only (>= 3%)")
    for tt, ct, nc, f, line, fn in sorted(rows, key=lambda r: -r[1]):
        if f.startswith("camillo") and ct / total >= 0.03:
            out.append(f"{ct:8.3f} s {100 * ct / total:5.1f}%  own {tt:6.3f}  calls {nc:<8} {f}:{line}({fn})")
    return "\n".join(out)


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m benchmarks.profiles DIR [TOP]")
        return 2
    top = int(argv[1]) if len(argv) > 1 else 15
    for path in sorted(glob.glob(os.path.join(argv[0], "*.prof"))):
        print(summarize(path, top))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
