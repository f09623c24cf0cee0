"""The GUI stays responsive while the worker opens and reads a vault of 100,000 records.

A 10 ms QTimer on the GUI thread records the largest gap between its ticks while the real worker
cold-opens the vault (``cache=False``: every segment read and verified), the timeline loads and
two searches run.  Run with ``pytest -s`` to see the figures.
"""

from __future__ import annotations

import gc
import time

import pytest
from PySide6.QtCore import Qt, QTimer

from .helpers import build_demo, copy_demo

RECORDS = 100_000
MAX_STALL = 0.200


class StallMeter:
    def __init__(self, interval_ms: int = 10) -> None:
        self.gc_pauses: list[tuple[int, float]] = []
        self._gc_started = 0.0
        gc.callbacks.append(self._gc)
        self.worst = 0.0
        self.worst_at = ""
        self.phase = "start"
        self.ticks = 0
        self.last = time.perf_counter()
        self.timer = QTimer()
        self.timer.setTimerType(Qt.TimerType.PreciseTimer)
        self.timer.timeout.connect(self._tick)
        self.timer.start(interval_ms)

    def _tick(self) -> None:
        now = time.perf_counter()
        gap = now - self.last
        if gap > self.worst:
            self.worst, self.worst_at = gap, self.phase
        self.last = now
        self.ticks += 1

    def _gc(self, phase: str, info: dict) -> None:  # runs on whichever thread collects
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self.gc_pauses.append((info["generation"], time.perf_counter() - self._gc_started))

    def stop(self) -> None:
        self._tick()
        self.timer.stop()
        gc.callbacks.remove(self._gc)

    def longest_gc(self) -> float:
        return max((d for _g, d in self.gc_pauses), default=0.0)


@pytest.fixture(scope="module")
def big_demo(tmp_path_factory):
    started = time.perf_counter()
    demo = build_demo(str(tmp_path_factory.mktemp("demo-100k")), records=RECORDS)
    print(f"\nbuilt a demo vault of {RECORDS:,} extra records in {time.perf_counter() - started:.1f} s")
    return demo


@pytest.mark.slow
def test_gui_stays_responsive_with_100k_records(qtbot, client, make_window, big_demo, tmp_path, request):
    from camillo import Vault

    demo = copy_demo(big_demo, str(tmp_path / "copy"))
    window = make_window()
    qtbot.wait(50)
    # The test process carries pytest, hypothesis and every test module: move those long-lived objects
    # out of the collector's way, so its full collections cost what they would in the app itself.
    gc.collect()
    gc.freeze()
    request.addfinalizer(gc.unfreeze)
    meter = StallMeter()
    box: dict = {}

    def opener(ctx):
        return Vault.open(demo.path, demo.unlock(), home=demo.homes["desktop"], cache=False,
                          progress=lambda d, t: ctx.progress(d, t, "reading"))

    progress: list[tuple[int, int]] = []
    meter.phase = "cold open"
    t0 = time.perf_counter()
    client.open_vault(opener, lambda info: box.setdefault("info", info), lambda e: box.setdefault("err", e),
                      context=window, on_progress=lambda d, t, _w: progress.append((d, t)))
    qtbot.waitUntil(lambda: bool(box), timeout=120_000)
    open_seconds = time.perf_counter() - t0
    assert "err" not in box, box.get("err")

    meter.phase = "timeline"
    t1 = time.perf_counter()
    with qtbot.waitSignal(window.view_ready, timeout=60_000, check_params_cb=lambda n: n == "timeline"):
        window.vault_opened(box["info"])
    timeline_seconds = time.perf_counter() - t1
    timeline = window.pages["timeline"]
    qtbot.waitUntil(lambda: timeline.model.total() >= RECORDS, timeout=30_000)  # counted after the first page
    for _ in range(3):  # scroll to the end of what is loaded: the view asks for more pages
        timeline.table.scrollToBottom()
        qtbot.wait(30)

    search_seconds = []
    for query in ("garden", "type:fact"):
        meter.phase = f"search {query}"
        t2 = time.perf_counter()
        window.search.setText(query)
        window._search()
        qtbot.waitUntil(lambda q=query: q in window.pages["search"].count.text(), timeout=60_000)
        search_seconds.append(time.perf_counter() - t2)
    assert window.pages["search"].model.rowCount() > 0
    meter.phase = "idle"
    qtbot.wait(50)
    meter.stop()

    print(f"\nresponsiveness with {timeline.model.total():,} records: cold open {open_seconds:.2f} s "
          f"({len(progress)} progress reports), timeline {timeline_seconds:.2f} s, searches "
          + ", ".join(f"{s:.2f} s" for s in search_seconds)
          + f"; largest GUI stall {meter.worst * 1000:.0f} ms (during {meter.worst_at}), {meter.ticks} ticks; "
          f"{len(meter.gc_pauses)} garbage collections, the longest {meter.longest_gc() * 1000:.0f} ms")
    assert progress, "the open reported no progress"
    assert meter.worst < MAX_STALL, f"the GUI stalled {meter.worst * 1000:.0f} ms during {meter.worst_at}"
