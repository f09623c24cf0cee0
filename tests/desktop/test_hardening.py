"""The desktop's hardening: untrusted text shown escaped everywhere (cut before it is escaped), no
Python exception escaping into Qt, the locked state (a page with "Unlock…", the sidebar and the Lock
action leading to the unlock dialog, the search and our clipboard cleared), locking once however
often it is asked, the worker's idempotent shutdown, ``--view`` validated before Qt starts, the
welcome screen's demo folder removed on quit, determinate open progress and the GC policy."""

from __future__ import annotations

import dataclasses
import gc
import inspect
import os
import subprocess
import sys
import time
import unicodedata

import camillo
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PySide6.QtCore import QAbstractTableModel, QModelIndex, QObject, Qt
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QApplication, QTableView

from .helpers import call, open_vault, wait_idle

DISPLAY = Qt.ItemDataRole.DisplayRole
EVIL = "com.evil/\u202eexe.txt\x1b[2J\u2067<b>bold</b>\x00"
FORBIDDEN = ("\u202e", "\u2067", "\x1b", "\x00")


def assert_clean(text: str | None) -> None:
    assert text is not None
    for ch in FORBIDDEN:
        assert ch not in text, repr(text)


# --------------------------------------------------------------------------- safe_text


def escape_everything_then_cut(text, limit=None, single_line=False):
    """The definition safe_text must keep: escape every character, then cut to the limit."""
    from camillo_desktop.text import BIDI_CONTROLS

    if not text:
        return ""
    out = []
    for ch in text:
        if ch in BIDI_CONTROLS:
            out.append(f"\u27e8U+{ord(ch):04X}\u27e9")
        elif ch == "\n":
            out.append(" \u21b5 " if single_line else "\n")
        elif ch == "\t":
            out.append(" " if single_line else "\t")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn") and ch != "\u200d":
            out.append(chr(0x2400 + ord(ch)) if ord(ch) < 0x20 else "\ufffd")
        else:
            out.append(ch)
    result = "".join(out)
    if limit is not None and len(result) > limit:
        result = result[: limit - 1] + "\u2026"
    return result


HOSTILE_CHARS = st.sampled_from(["a", " ", "\n", "\t", "\x00", "\x1b", "\x7f", "\u202e", "\u2066", "\u200d",
                                 "\u200b", "\u00a0", "\ufeff", "\ud800", "\ue000", "\u0378", "\U0001f600", "\u2028"])


@settings(max_examples=400, deadline=None)
@given(text=st.lists(st.one_of(HOSTILE_CHARS, st.characters()), max_size=300).map("".join),
       limit=st.one_of(st.none(), st.integers(1, 400)), single_line=st.booleans())
def test_safe_text_cuts_first_yet_shows_what_escaping_everything_shows(text, limit, single_line):
    from camillo_desktop.text import safe_text

    assert safe_text(text, limit, single_line=single_line) == escape_everything_then_cut(text, limit, single_line)


def test_safe_tooltip_shows_markup_as_text():
    from camillo_desktop.text import safe_tooltip

    tip = safe_tooltip("<img src='x'><b>bold</b> \u202e & more")
    assert "&lt;img src='x'&gt;&lt;b&gt;bold&lt;/b&gt;" in tip and "&amp; more" in tip
    assert "<b>" not in tip and "\u202e" not in tip and "\u27e8U+202E\u27e9" in tip
    assert safe_tooltip("") == ""


# --------------------------------------------------------------------------- exceptions in Qt virtuals


def test_an_exception_in_a_qt_virtual_is_reported_and_the_default_returned(qtbot):
    from camillo_desktop.guard import qt_virtual

    class Broken(QAbstractTableModel):
        @qt_virtual(0)
        def rowCount(self, parent=QModelIndex()):  # noqa: B008
            return 3

        @qt_virtual(0)
        def columnCount(self, parent=QModelIndex()):  # noqa: B008
            return 2

        @qt_virtual()
        def data(self, index, role=DISPLAY):
            if role == DISPLAY and index.row() == 1:
                raise KeyError("a bug in data()")
            return "fine" if role == DISPLAY else None

    model = Broken()
    view = QTableView()
    qtbot.addWidget(view)
    view.setModel(model)
    with qtbot.capture_exceptions() as exceptions:
        view.show()
        qtbot.waitExposed(view)
        view.viewport().repaint()
        assert model.data(model.index(1, 0)) is None  # the default, not an exception
        assert model.data(model.index(0, 0)) == "fine"
        view.setModel(None)  # no later paint outside this block
        view.hide()
    assert exceptions and all(isinstance(e[1], KeyError) for e in exceptions)


def test_every_override_of_a_qt_method_in_the_app_is_guarded():
    """An override Qt calls from C++ must not let an exception out (see camillo_desktop.guard)."""
    import importlib
    import pkgutil

    import camillo_desktop

    not_virtual = {"__init__", "back"}  # constructors; QWizard.back is a slot, shadowed for Python callers
    unguarded = []
    for info in pkgutil.walk_packages(camillo_desktop.__path__, "camillo_desktop."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for cls in vars(module).values():
            if not (inspect.isclass(cls) and issubclass(cls, QObject) and cls.__module__ == module.__name__):
                continue
            qt_bases = [b for b in cls.__mro__ if b.__module__.startswith("PySide6")]
            for name, fn in vars(cls).items():
                if (inspect.isfunction(fn) and name not in not_virtual and any(name in vars(b) for b in qt_bases)
                        and not hasattr(fn, "__wrapped__")):
                    unguarded.append(f"{cls.__module__}.{cls.__name__}.{name}")
    assert not unguarded, f"Qt overrides without @qt_virtual: {unguarded}"


# --------------------------------------------------------------------------- untrusted text everywhere


def test_every_field_a_writer_chose_is_shown_escaped(qtbot, client, open_demo):
    from camillo_desktop.models import FactsModel, HistoryModel, RecordColumn, RecordTableModel
    from camillo_desktop.views.detail import DetailPane

    open_demo()
    fact = call(qtbot, client, lambda ctx: ctx.vault.fact("user/diet"))
    v = dataclasses.replace(fact.current, type=EVIL, compartment=EVIL, writer=EVIL, key=f"user/{EVIL}", text=EVIL,
                            conversation=EVIL, role=EVIL, reason=EVIL, valid=False)
    model = RecordTableModel(None)
    model.set_rows([v])
    for col in RecordColumn:
        for role in (DISPLAY, Qt.ItemDataRole.ToolTipRole):
            value = model.data(model.index(0, col), role)
            if value is not None:
                assert_clean(value)
    assert "&lt;b&gt;" in model.data(model.index(0, RecordColumn.TEXT), Qt.ItemDataRole.ToolTipRole)
    history = HistoryModel()
    history.set_records([v])
    for col in range(history.columnCount()):
        assert_clean(history.data(history.index(0, col), DISPLAY))
    facts = FactsModel()
    facts.set_facts([dataclasses.replace(fact, key=f"{EVIL}/{EVIL}", compartment=EVIL, current=v)])
    parent = facts.index(0, 0)
    assert_clean(facts.data(parent, DISPLAY))
    for col in range(facts.columnCount()):
        assert_clean(facts.data(facts.index(0, col, parent), DISPLAY) or "")
    from camillo_desktop.models import TableModel
    from camillo_desktop.views.activity import ActivityColumn
    from camillo_desktop.views.devices import DeviceColumn
    from camillo_desktop.views.grants import GrantColumn

    rows = {
        ActivityColumn: camillo.ActivityRow(batch=b"\1" * 32, ts=1, writer=EVIL, writer_kind=EVIL, compartment=EVIL,
                                            seq=1, records=1, summary=EVIL, verified=EVIL, status=EVIL),
        GrantColumn: camillo.GrantInfo(grant_id=b"\2" * 16, agent=EVIL, writer_id=b"\3" * 32, scopes={EVIL: EVIL},
                                       max_class=EVIL, expires=None, created=1),
        DeviceColumn: camillo.DeviceInfo(writer_id=b"\3" * 32, name=EVIL, platform=EVIL, kind=EVIL, enrolled=1,
                                         last_seen=None, revoked=False, this_device=False),
    }
    for columns, row in rows.items():
        table = TableModel(columns)
        table.set_rows([row])
        for col in columns:
            assert_clean(table.data(table.index(0, col), DISPLAY))
    pane = DetailPane(client)
    qtbot.addWidget(pane)
    pane.show_record(v)
    for text in [pane.heading.text(), pane.text.toPlainText(), *(f.text() for f in pane.fields.values())]:
        assert_clean(text)
    assert pane.fields["Type"].text().startswith("com.evil/\u27e8U+202E\u27e9exe.txt\u241b[2J")


# --------------------------------------------------------------------------- the locked state


def lock(qtbot, client, window) -> None:
    from camillo_desktop.actions import Action

    with qtbot.waitSignal(client.vault_locked, timeout=10_000):
        window.actions_[Action.LOCK].trigger()


def test_after_lock_and_cancel_the_window_offers_to_unlock(qtbot, client, demo_window, demo_vault,
                                                           unlock_prompts, monkeypatch):
    import camillo_desktop.mainwindow as mw
    from camillo_desktop.actions import Action

    window = demo_window
    path = window.info["path"]
    lock(qtbot, client, window)
    qtbot.waitUntil(lambda: len(unlock_prompts.asked) == 1, timeout=5000)  # asked, and cancelled
    assert window.stack.currentWidget() is window.locked_page
    assert window.unlock_button.isVisibleTo(window)
    assert "locked" in window.locked_page.findChild(type(window.vault_name), "ViewTitle").text()
    assert window.actions_[Action.LOCK].text() == "&Unlock\u2026"
    assert window.nav.currentRow() == -1

    qtbot.mouseClick(window.unlock_button, Qt.MouseButton.LeftButton)  # the button in the main area
    assert unlock_prompts.asked == [path] * 2
    window.actions_[Action.LOCK].trigger()  # the Lock button now unlocks
    assert unlock_prompts.asked == [path] * 3
    qtbot.mouseClick(window.lock_button, Qt.MouseButton.LeftButton)
    assert unlock_prompts.asked == [path] * 4

    # A sidebar entry leads to the unlock dialog, then to that view.
    class Unlocking(mw.UnlockDialog):
        @classmethod
        def ask(cls, client_, path_, parent=None):
            unlock_prompts.asked.append(path_)
            return open_vault(qtbot, client_, path_, demo_vault.unlock(), home=demo_vault.homes["desktop"])

    monkeypatch.setattr(mw, "UnlockDialog", Unlocking)
    facts_row = next(r for r in range(window.nav.count()) if window.nav.item(r).data(Qt.ItemDataRole.UserRole) == "facts")
    with qtbot.waitSignal(window.view_ready, timeout=20_000, check_params_cb=lambda n: n == "facts"):
        window.nav.setCurrentRow(facts_row)
    assert len(unlock_prompts.asked) == 5
    assert client.is_open and window.current_view() is window.pages["facts"]
    assert window.actions_[Action.LOCK].text() == "&Lock" and window.search.isEnabled()


def test_while_locked_the_search_and_the_actions_that_need_a_vault_are_off(qtbot, client, demo_window,
                                                                         unlock_prompts):
    from camillo_desktop.actions import SPECS, Action

    window = demo_window
    lock(qtbot, client, window)
    assert not window.search.isEnabled()
    for action, spec in SPECS.items():
        assert window.actions_[action].isEnabled() == (not spec.needs_vault or action is Action.LOCK), action
    window._search()  # Enter in the (disabled) field: nothing runs
    wait_idle(qtbot, client)
    assert window.stack.currentWidget() is window.locked_page


def test_lock_clears_the_search_field_the_results_and_our_clipboard(qtbot, client, demo_window, settings):
    from camillo_desktop.settings import Setting

    settings.set(Setting.CLIPBOARD_SECONDS, 60)
    window = demo_window
    view = window.pages["search"]
    window.search.setText("morning")
    with qtbot.waitSignal(window.view_ready, timeout=15_000, check_params_cb=lambda n: n == "search"):
        window._search()
    assert "morning" in view.count.text()
    window.copy_text("a secret from the vault")
    assert QGuiApplication.clipboard().text() == "a secret from the vault"
    lock(qtbot, client, window)
    assert window.search.text() == "" and view.count.text() == "" and view.query == ""
    assert view.model.rowCount() == 0
    assert QGuiApplication.clipboard().text() == ""
    assert window.status_clip.text() == "" and not window._clip_timer.isActive()


def test_lock_leaves_a_clipboard_the_user_changed(qtbot, client, demo_window, settings):
    from camillo_desktop.settings import Setting

    settings.set(Setting.CLIPBOARD_SECONDS, 60)
    demo_window.copy_text("from camillo")
    QGuiApplication.clipboard().setText("my own clipboard")
    lock(qtbot, client, demo_window)
    assert QGuiApplication.clipboard().text() == "my own clipboard"


def test_auto_lock_and_a_manual_lock_at_the_same_moment_lock_once(qtbot, client, demo_window, unlock_prompts):
    window = demo_window
    locked: list[bool] = []
    client.vault_locked.connect(lambda: locked.append(True))
    window.lock()
    assert client.locking and window.locked
    window._idle_lock()  # the idle timer fires before the lock job ran
    window.lock()
    client.lock()
    qtbot.waitUntil(lambda: bool(locked), timeout=10_000)
    wait_idle(qtbot, client)
    qtbot.wait(50)
    assert locked == [True]
    assert unlock_prompts.asked == [window.info["path"]]
    assert not client.locking and not client.is_open


def test_a_lock_callback_given_while_locking_is_called(qtbot, client, open_demo):
    open_demo()
    done: list[str] = []
    client.lock(lambda: done.append("first"))
    client.lock(lambda: done.append("second"))
    qtbot.waitUntil(lambda: len(done) == 2, timeout=10_000)
    assert done == ["first", "second"]


# --------------------------------------------------------------------------- search


def test_only_the_latest_search_is_shown(qtbot, demo_window):
    window = demo_window
    view = window.pages["search"]
    ready: list[str] = []
    window.view_ready.connect(lambda n: ready.append(view.count.text()) if n == "search" else None)
    window.search.setText("morning")
    window._search()
    window.search.setText("type:fact")
    window._search()
    qtbot.waitUntil(lambda: "type:fact" in view.count.text(), timeout=15_000)
    qtbot.wait(100)
    assert ready and all("type:fact" in r for r in ready)
    assert all(view.model.record(r).type == "fact" for r in range(view.model.rowCount()))


# --------------------------------------------------------------------------- the worker


def test_shutdown_twice_returns_at_once(qtbot):
    from camillo_desktop.worker import VaultClient

    c = VaultClient()
    c.shutdown()
    assert c.thread.isFinished()
    started = time.monotonic()
    c.shutdown()
    assert time.monotonic() - started < 5  # it used to wait 10 s for a job no thread would run


# --------------------------------------------------------------------------- the app


def test_an_unknown_view_is_refused_before_qt_starts(capsys):
    from camillo_desktop.app import VIEW_NAMES, main

    with pytest.raises(SystemExit) as exc:
        main(["--demo", "--view", "timline", "--screenshot", "out.png"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "timline" in err and all(name in err for name in VIEW_NAMES)


def test_the_view_names_of_the_command_line_are_the_main_windows(make_window):
    from camillo_desktop.app import VIEW_NAMES

    window = make_window(show=False)
    assert set(VIEW_NAMES) == set(window.pages)


DEMO_FROM_WELCOME_THEN_QUIT = """
import os, tempfile
made = []
real = tempfile.mkdtemp
def mkdtemp(*args, **kw):
    d = real(*args, **kw)
    if kw.get("prefix") == "camillo-demo-":
        made.append(d)
    return d
tempfile.mkdtemp = mkdtemp
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QPushButton
app = QApplication([])
from camillo_desktop import app as desktop
from camillo_desktop.mainwindow import MainWindow
from camillo_desktop.welcome import WelcomeWindow
clicked = []
def step():
    windows = QApplication.topLevelWidgets()
    for w in windows:
        if isinstance(w, MainWindow) and w.isVisible() and w.client.is_open:
            print("opened", os.path.isdir(made[0]), flush=True)
            w.close()
            return
        if isinstance(w, WelcomeWindow) and w.isVisible() and not clicked:
            clicked.append(True)
            next(b for b in w.findChildren(QPushButton) if b.text() == "Try the demo vault").click()
    QTimer.singleShot(50, step)
QTimer.singleShot(50, step)
rc = desktop.main([])
print("rc", rc, "made", len(made), "left", [d for d in made if os.path.exists(d)], flush=True)
"""


def test_the_demo_from_the_welcome_screen_is_removed_on_quit(tmp_path):
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", TMPDIR=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", DEMO_FROM_WELCOME_THEN_QUIT], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "opened True" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    assert "rc 0 made 1 left []" in proc.stdout, proc.stdout + proc.stderr[-3000:]


def test_the_open_progress_is_determinate(qtbot, client, make_window, demo_vault):
    from camillo import Vault

    window = make_window()
    seen: list[tuple[int, int]] = []
    original = window.show_progress

    def spy(done, total, what=""):
        original(done, total, what)
        seen.append((window.busy.minimum(), window.busy.maximum()))

    def opener(ctx):
        return Vault.open(demo_vault.path, demo_vault.unlock(), home=demo_vault.homes["desktop"], cache=False,
                          progress=lambda d, t: ctx.progress(d, t, "Reading the vault"))

    box: dict = {}
    client.open_vault(opener, lambda info: box.setdefault("ok", info), lambda e: box.setdefault("err", e),
                      context=window, on_progress=spy)
    qtbot.waitUntil(lambda: bool(box), timeout=30_000)
    assert "ok" in box, box
    assert seen and all(lo == 0 and hi > 0 for lo, hi in seen)  # a known total: a determinate bar
    assert window.statusBar().currentMessage().startswith("Reading the vault\u2026")
    wait_idle(qtbot, client)
    assert window.busy.maximum() == 0  # back to indeterminate for the next job


def test_the_heap_is_frozen_while_a_vault_is_open(qtbot, client, open_demo, unlock_prompts):
    from camillo_desktop.app import GC_THRESHOLD0, install_gc_policy

    threshold = gc.get_threshold()
    try:
        install_gc_policy(client)
        assert gc.get_threshold()[0] >= GC_THRESHOLD0
        open_demo()
        qtbot.waitUntil(lambda: gc.get_freeze_count() > 0, timeout=5000)
        with qtbot.waitSignal(client.vault_locked, timeout=10_000):
            client.lock()
        assert gc.get_freeze_count() == 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)
        QApplication.processEvents()


def test_no_collection_runs_while_a_vault_opens_and_its_objects_are_frozen_after(qtbot, client, demo_vault):
    """A full collection during an open at 1M records walked millions of objects holding the GIL
    (a 1.5 s GUI stall): the open job runs with collection disabled and freezes what it built.  A
    failed open freezes nothing and leaves collection as it was."""
    from camillo import Vault

    gc.unfreeze()
    seen: dict = {}

    def opener(ctx):
        seen["enabled during open"] = gc.isenabled()
        return Vault.open(demo_vault.path, demo_vault.unlock(), home=demo_vault.homes["desktop"])

    def failing(ctx):
        seen["enabled during failed open"] = gc.isenabled()
        raise camillo.WrongCredential("wrong passphrase")

    try:
        assert gc.isenabled()
        box: dict = {}
        client.open_vault(failing, lambda info: box.setdefault("ok", info), lambda e: box.setdefault("err", e))
        qtbot.waitUntil(lambda: bool(box), timeout=30_000)
        assert "err" in box and gc.isenabled() and gc.get_freeze_count() == 0
        box.clear()
        client.open_vault(opener, lambda info: box.setdefault("ok", info), lambda e: box.setdefault("err", e))
        qtbot.waitUntil(lambda: bool(box), timeout=30_000)
        assert "ok" in box, box
        assert seen == {"enabled during open": False, "enabled during failed open": False}
        assert gc.isenabled() and gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def test_the_clipboard_timer_belongs_to_the_window(make_window):
    """A parentless running timer freed by the garbage collector on the worker thread cannot be
    stopped there, and its next tick reached a deleted object (a crash seen in this suite)."""
    window = make_window(show=False)
    assert window.clipboard._timer.parent() is window
