"""Small statistics and process helpers shared by the benchmark modules: percentiles, summaries of
repeated runs, peak-RSS probes from ``/proc/self/status`` and wall-clock timing.

Pure functions (the RSS probes read the calling process); any thread may call them.
"""

from __future__ import annotations

import os
import re
import resource
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation between closest ranks."""
    if not values:
        raise ValueError("no values")
    xs = sorted(values)
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def summary(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max of one figure over several runs."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def _status_kib(field: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            m = re.search(rf"^{field}:\s+(\d+) kB", fh.read(), re.MULTILINE)
    except OSError:
        return None
    return int(m.group(1)) if m else None


def rss_mib() -> float:
    """Current resident set size of this process, MiB."""
    kib = _status_kib("VmRSS")
    return (kib or 0) / 1024


def reset_peak_rss() -> bool:
    """Reset this process's peak RSS (VmHWM) to its current RSS (Linux >= 4.0: ``clear_refs`` 5).
    Returns False where that is not possible; peaks then include everything before."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


def peak_rss_mib() -> float:
    """Peak RSS of this process since start or since :func:`reset_peak_rss`, MiB."""
    kib = _status_kib("VmHWM")
    if kib is None:
        kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / 1024


PROFILER = None  # a cProfile.Profile the child installs with --profile: it runs inside every Meter region


class Meter:
    """Times one region and records the peak RSS reached inside it (and the RSS before it).  When
    :data:`PROFILER` is set, the region (and only the region) is profiled."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.cpu_seconds = 0.0  # user + system time of every thread of this process in the region
        self.peak_rss_mib = 0.0
        self.rss_before_mib = 0.0
        self.peak_is_local = False

    def __enter__(self) -> Meter:
        self.rss_before_mib = rss_mib()
        self.peak_is_local = reset_peak_rss()
        if PROFILER is not None:
            PROFILER.enable()
        self._c0 = time.process_time()
        self._t0 = time.perf_counter()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.perf_counter() - self._t0
        self.cpu_seconds = time.process_time() - self._c0
        if PROFILER is not None:
            PROFILER.disable()
        self.peak_rss_mib = peak_rss_mib()

    def to_json(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "cpu_seconds": self.cpu_seconds, "peak_rss_mib": round(self.peak_rss_mib, 1),
                "rss_before_mib": round(self.rss_before_mib, 1), "peak_is_local": self.peak_is_local}


def time_per_call(fn: Callable[[], object], *, min_seconds: float = 0.2, repeats: int = 3) -> float:
    """Seconds per call of ``fn``: the best of ``repeats`` loops each running at least ``min_seconds``
    (best-of, as timeit does: on a busy machine the minimum is the least disturbed estimate)."""
    fn()  # warm up
    best = float("inf")
    for _ in range(repeats):
        n = 0
        t0 = time.perf_counter()
        while True:
            fn()
            n += 1
            elapsed = time.perf_counter() - t0
            if elapsed >= min_seconds:
                break
        best = min(best, elapsed / n)
    return best


def cpu_description() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def machine() -> dict[str, Any]:
    import platform

    try:
        load = os.getloadavg()
    except OSError:
        load = (0.0, 0.0, 0.0)
    return {"cpu": cpu_description(), "cores": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(), "load_average_at_start": [round(x, 2) for x in load]}
