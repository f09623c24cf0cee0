"""The desktop app under the benchmark: ``python -m benchmarks.gui '<json params>'`` (a child).

It starts the real main window (``camillo_desktop.mainwindow.MainWindow`` with its
``VaultClient`` worker thread and the GUI-thread guard) under ``QT_QPA_PLATFORM=offscreen``,
opens a clone of the lived-in vault with the demo passphrase (warm: the desktop's cache is there)
the way ``camillo-desktop --demo`` does, and measures:

* launch → first timeline rows: from the moment the parent started this process (interpreter
  start, imports from the bytecode compiled before the runs as an installed app's is, and Qt
  set-up included; the copy of the fixture this process makes first left out) to the timeline view's ``loaded`` signal, which fires
  once the first page of rows has been decoded on the worker and is in the model;
* open → first rows: from the open job's submission to the same signal;
* search latency per query: from pressing Return in the search field to the search view's
  ``loaded`` signal;
* a long conversation's thread (``thread_messages``, 10,000 by default, appended to the clone first):
  from asking the conversations view for it to its latest message on screen (``thread_open``) and
  to its first page whole (``thread_page_in``), then paging back through it (``thread_pages`` pages scrolled to the top one after another) and
  jumping to its start and back to its end (Ctrl+Home, Ctrl+End); with the longest GUI-thread stall
  of each (``thread_open_stall``, ``thread_scroll_stall``);
* the longest GUI-thread stall in each phase: a 5 ms ``QTimer`` on the GUI thread records the
  longest gap between two of its ticks (a gap of 5 ms means no stall); for the open it also
  records when the three longest gaps started and when the open returned (``opened``), the window
  was shown (``shown``) and the timeline was asked for (``view_requested``), relative to the open,
  and, per gap, the GUI thread's and the process's CPU time: ``*_stall_cpu`` is the most process
  CPU time inside one gap, the stall an otherwise idle machine would show (on a loaded machine a
  gap can be mostly time the OS did not run the process at all).

Settings go to a temporary INI file; the keychain is off (``CAMILLO_KEYCHAIN=none``).
Runs the GUI thread (this module) and the app's vault worker thread.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from .child import MARK

GUI_QUERIES = ["garden", "python script", "portuguese verbs type:message", "key:user/*", "type:message",
               '"first approach is faster"', "birthday present Ana", "deadline compartment:work"]


def main(argv: list[str]) -> int:
    params = json.loads(argv[0])
    os.environ["QT_QPA_PLATFORM"] = "offscreen"
    os.environ.pop("DISPLAY", None)
    os.environ.pop("WAYLAND_DISPLAY", None)
    scratch = params["scratch"]
    launched = params["launched"]

    from camillo import DEMO_PASSPHRASE, NewRecord, Unlock, Vault
    from PySide6.QtCore import QSettings, QTimer
    from PySide6.QtWidgets import QApplication

    from camillo_desktop import theme
    from camillo_desktop.mainwindow import MainWindow
    from camillo_desktop.settings import Setting, Settings
    from camillo_desktop.worker import VaultClient, install_thread_guard

    from .corpus import Corpus, clone_fixture

    try:  # older trees register the second desktop issue's views in a separate module
        import camillo_desktop.views_more  # noqa: F401
    except ImportError:
        pass

    t_clone = time.time()
    fx = clone_fixture(Corpus(params["work"], params["records"], quick=params.get("quick", False),
                              readonly=True, say=lambda _m: None).get("loose"),
                       os.path.join(scratch, "loose"))
    # the benchmark's own copy of the vault is not the person's launch: it is left out of launch → rows
    launched += time.time() - t_clone
    app = QApplication.instance() or QApplication(["camillo-bench"])
    settings = Settings(QSettings(os.path.join(scratch, "settings.ini"), QSettings.Format.IniFormat))
    settings.set(Setting.LAST_VIEW, "timeline")  # the first figures are the timeline's
    settings.set(Setting.LIVE, False)  # no folder watching: the figures are the person's actions only
    theme.apply(app, "light")
    install_thread_guard()
    client = VaultClient()
    window = MainWindow(client, settings)
    window.resize(1280, 800)

    # (tick time, gap since the previous tick, GUI-thread CPU time and process CPU time in the gap):
    # a gap the GUI thread spent computing shows its own CPU time; one spent waiting for the GIL
    # shows the process's (the worker's) CPU time; one where neither ran is the OS scheduler.
    ticks: list[tuple[float, float, float, float]] = []
    last = [time.perf_counter(), time.thread_time(), time.process_time()]

    def tick() -> None:
        now, th, pr = time.perf_counter(), time.thread_time(), time.process_time()
        ticks.append((now, now - last[0], th - last[1], pr - last[2]))
        last[:] = [now, th, pr]

    probe = QTimer()
    probe.setInterval(5)
    probe.timeout.connect(tick)
    probe.start()

    def stall(t0: float, t1: float) -> float:
        return max((g for t, g, _th, _pr in ticks if t0 < t <= t1 + 0.005), default=0.0)

    def stall_cpu(t0: float, t1: float) -> float:
        """The most process CPU time spent inside one gap: the stall a machine with idle cores
        would see (a gap where the process did not run at all is the OS scheduler's)."""
        return max((min(g, pr) for t, g, _th, pr in ticks if t0 < t <= t1 + 0.005), default=0.0)

    def longest(t0: float, t1: float, n: int = 3) -> list[dict[str, float]]:
        """The n longest gaps: when they started (from t0), how long, GUI-thread and process CPU."""
        gaps = sorted((x for x in ticks if t0 < x[0] <= t1 + 0.005), key=lambda x: -x[1])[:n]
        return [{"start": round(t - g - t0, 4), "gap": round(g, 4), "gui_cpu": round(th, 4), "process_cpu": round(pr, 4)}
                for t, g, th, pr in gaps]

    result: dict[str, Any] = {"queries": []}
    state: dict[str, Any] = {"phase": "open", "i": 0}
    queries = list(GUI_QUERIES) * params.get("rounds", 2)

    def finish(error: str | None = None) -> None:
        if error:
            result["error"] = error
        probe.stop()
        app.quit()

    thread_messages = int(params.get("thread_messages", 10_000))
    thread_pages = int(params.get("thread_pages", 12))
    long_conversation = ("bench-long-thread", "personal")

    def write_long_conversation(ctx: Any) -> Any:
        """On the worker: a conversation of ``thread_messages`` messages, user and assistant in turn,
        some of them long and with Markdown (lists, code), written in a few appends."""
        base = int(time.time()) - thread_messages * 60
        changes = None
        for start in range(0, thread_messages, 1000):
            items = []
            for i in range(start, min(thread_messages, start + 1000)):
                user = i % 2 == 0
                text = (f"Question {i}: how do I keep the garden watered while away?" if user else
                        f"Answer {i}:\n\n- water in the **morning**\n- mulch the beds\n\n```\nwater --zone {i % 7}\n```\n"
                        + "More detail about soil and weather. " * (1 + i % 40))
                items.append(NewRecord(type="message", conversation=long_conversation[0],
                                       role="user" if user else "assistant", text=text, ts=base + i * 60))
            changes = ctx.vault.append(items, compartment=long_conversation[1])
        ctx.vault.conversation_ids(*long_conversation)  # what the writes cost is counted here, not in the open
        ctx.vault.conversations()
        return changes

    def thread_phase() -> None:
        state["phase"] = "thread-write"
        t = time.perf_counter()

        def written(_changes: Any) -> None:
            result["thread_write_seconds"] = time.perf_counter() - t
            window.show_view("conversations")
            QTimer.singleShot(20, open_when_idle)

        def open_when_idle() -> None:
            """The views the writes concerned have reloaded: the worker is free, the open is timed alone."""
            if client.pending_jobs():
                QTimer.singleShot(20, open_when_idle)
                return
            thread = window.pages["conversations"].thread
            state["phase"] = "thread-open"
            thread.shown.connect(thread_shown)
            thread.settled.connect(thread_settled)
            state["t0"] = time.perf_counter()
            thread.show_conversation(long_conversation[0], long_conversation[1])

        client.mutate(write_long_conversation, written, lambda exc: finish(f"writing the conversation: {exc}"),
                      context=window, label="benchmark: a long conversation")

    def thread_settled() -> None:
        now = time.perf_counter()
        thread = window.pages["conversations"].thread
        if state["phase"] == "thread-page":  # its first page whole
            result["thread_page_in"] = now - state["t0"]
            result["thread_open_stall"] = stall(state["t0"], now)
            result["thread_open_stall_cpu"] = stall_cpu(state["t0"], now)
            result["thread_bubbles"] = len(thread.bubbles)
            state["phase"], state["page"], state["t_scroll"] = "thread-scroll", 0, time.perf_counter()
            state["lo"] = thread.lo
            QTimer.singleShot(50, scroll_up)

    def thread_shown() -> None:
        now = time.perf_counter()
        thread = window.pages["conversations"].thread
        if state["phase"] == "thread-open":  # the latest message on screen
            result["thread_messages"] = len(thread.ids)
            result["thread_open"] = now - state["t0"]
            state["phase"] = "thread-page"
        elif state["phase"] == "thread-start":
            result["thread_to_start"] = now - state["t0"]
            state["phase"] = "thread-end"
            state["t0"] = time.perf_counter()
            thread.go_to_end()
        elif state["phase"] == "thread-end":
            result["thread_to_end"] = now - state["t0"]
            result["thread_scroll_stall"] = stall(state["t_scroll"], now)
            result["thread_scroll_stall_cpu"] = stall_cpu(state["t_scroll"], now)
            result["thread_scroll_longest"] = longest(state["t_scroll"], now, 1)
            result["thread_at_end"] = thread.hi == len(thread.ids)
            finish()

    def scroll_up() -> None:
        """Scroll to the top of what is loaded; the view fetches the page before it."""
        thread = window.pages["conversations"].thread
        if thread.lo < state["lo"]:
            state["page"] += 1
            state["lo"] = thread.lo
        if state["page"] >= thread_pages or thread.lo == 0 or time.perf_counter() - state["t_scroll"] > 120:
            result["thread_pages_read"] = state["page"]
            result["thread_page_seconds"] = (time.perf_counter() - state["t_scroll"]) / max(1, state["page"])
            state["phase"] = "thread-start"
            state["t0"] = time.perf_counter()
            thread.go_to_start()
            return
        thread.area.verticalScrollBar().setValue(0)
        QTimer.singleShot(20, scroll_up)

    def next_query() -> None:
        if state["i"] >= len(queries):
            if thread_messages > 0:
                thread_phase()
            else:
                finish()
            return
        q = queries[state["i"]]
        state["phase"] = "search"
        state["t0"] = time.perf_counter()
        window.search.setText(q)
        window._search()

    def ready(name: str) -> None:
        now = time.perf_counter()
        if state["phase"] == "open" and name == "timeline":
            state["phase"] = "idle"
            result["open_to_rows"] = now - state["t_open"]
            result["launch_to_rows"] = time.time() - launched
            result["open_stall"] = stall(state["t_open"], now)
            result["open_stall_cpu"] = stall_cpu(state["t_open"], now)
            t0 = state["t_open"]
            result["open_marks"] = {k: round(v - t0, 4) for k, v in marks.items()}
            result["open_marks"]["rows"] = round(now - t0, 4)
            result["open_longest_gaps"] = longest(t0, now)
            QTimer.singleShot(300, next_query)
        elif state["phase"] == "search" and name == "search":
            state["phase"] = "idle"
            result["queries"].append({"query": queries[state["i"]], "latency": now - state["t0"],
                                      "stall": stall(state["t0"], now), "stall_cpu": stall_cpu(state["t0"], now),
                                      "longest": longest(state["t0"], now, 1)})
            state["i"] += 1
            QTimer.singleShot(50, next_query)

    window.view_ready.connect(ready)

    def opener(_ctx) -> Vault:
        return Vault.open(fx.vault, Unlock.passphrase(DEMO_PASSPHRASE), home=fx.homes["desktop"])

    marks: dict[str, float] = {}

    def opened(info: dict[str, Any]) -> None:
        marks["opened"] = time.perf_counter()
        window.show()
        marks["shown"] = time.perf_counter()
        window.vault_opened(info)
        marks["view_requested"] = time.perf_counter()

    def start() -> None:
        state["t_open"] = time.perf_counter()
        result["process_start_to_open"] = time.time() - launched
        client.open_vault(opener, opened, lambda exc: finish(f"open failed: {exc}"), context=window)

    QTimer.singleShot(0, start)
    QTimer.singleShot(int(params.get("timeout", 300) * 1000), lambda: finish("timed out"))
    app.exec()
    client.shutdown()
    result["max_tick_gap_overall"] = max((g for _t, g, _th, _pr in ticks), default=0.0)
    result["ticks"] = len(ticks)
    sys.stdout.write(MARK + json.dumps(result) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
