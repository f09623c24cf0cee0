"""Fixtures for the desktop tests: isolated QSettings, a real vault worker with the GUI-thread guard,
main windows, and demo vaults (built once per session, copied per test).

The root conftest already runs Qt offscreen and gives every test its own CAMILLO_HOME, test-only
Argon2 parameters and no OS keychain.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from .helpers import DemoVault, build_demo, copy_demo, open_vault

# --------------------------------------------------------------------------- QSettings isolation


def _point_qsettings_at(directory: str) -> None:
    from PySide6.QtCore import QSettings

    os.makedirs(directory, exist_ok=True)
    for fmt in (QSettings.Format.NativeFormat, QSettings.Format.IniFormat):
        for scope in (QSettings.Scope.UserScope, QSettings.Scope.SystemScope):
            QSettings.setPath(fmt, scope, directory)


@pytest.fixture(scope="session", autouse=True)
def _session_qsettings(tmp_path_factory) -> Iterator[str]:
    """Before anything in the desktop suite creates a QSettings (or the QApplication exists), point
    every settings location at a scratch folder, and XDG_CONFIG_HOME too (for subprocesses)."""
    directory = str(tmp_path_factory.mktemp("qsettings-session"))
    old = os.environ.get("XDG_CONFIG_HOME")
    os.environ["XDG_CONFIG_HOME"] = directory
    _point_qsettings_at(directory)
    yield directory
    if old is None:
        os.environ.pop("XDG_CONFIG_HOME", None)
    else:
        os.environ["XDG_CONFIG_HOME"] = old


@pytest.fixture(autouse=True)
def _isolated_qsettings(tmp_path, monkeypatch) -> str:
    """Each test starts from default settings of its own."""
    directory = str(tmp_path / "qsettings")
    monkeypatch.setenv("XDG_CONFIG_HOME", directory)
    _point_qsettings_at(directory)
    return directory


# --------------------------------------------------------------------------- modal boxes


@dataclass
class Informed:
    """What the app told the user through :class:`camillo_desktop.dialogs.Ask` during the test."""

    messages: list[tuple[str, str]] = field(default_factory=list)
    questions: list[tuple[str, str]] = field(default_factory=list)

    def unexpected(self) -> list[tuple[str, str]]:
        return [m for m in self.messages if m[0] == "Something went wrong"]


@pytest.fixture(autouse=True)
def informed(monkeypatch) -> Iterator[Informed]:
    """Ask.inform/confirm never open a blocking message box in the tests: answers queued in
    ``Ask.next_answers`` are used as designed; otherwise the box is recorded (inform) or answered
    "Cancel" (confirm).  A "Something went wrong" box (a job failed with a non-vault error) fails
    the test."""
    from camillo_desktop.dialogs import Ask

    record = Informed()
    original_confirm = Ask.confirm.__func__
    original_inform = Ask.inform.__func__

    def confirm(cls, parent, title, text, **kw):
        if cls.next_answers:
            return original_confirm(cls, parent, title, text, **kw)
        record.questions.append((title, text))
        return False

    def inform(cls, parent, title, text):
        if cls.next_answers:
            original_inform(cls, parent, title, text)
            return
        record.messages.append((title, text))

    monkeypatch.setattr(Ask, "next_answers", [])
    monkeypatch.setattr(Ask, "confirm", classmethod(confirm))
    monkeypatch.setattr(Ask, "inform", classmethod(inform))
    yield record
    assert not record.unexpected(), f"the app reported an unexpected error: {record.unexpected()}"


class UnlockPrompts:
    """The unlock dialog the main window shows after a lock.  By default it is not opened (a
    modal ``exec`` would block the test); the paths it was asked for are recorded.  A test that
    wants the real dialog calls :meth:`real`, and then must drive it (see test_app_flows)."""

    def __init__(self, monkeypatch) -> None:
        import camillo_desktop.mainwindow as mw

        self.asked: list[str] = []
        self._mp = monkeypatch
        self._mw = mw
        self._real = mw.UnlockDialog
        prompts = self

        class RecordingUnlockDialog(self._real):
            @classmethod
            def ask(cls, client, path, parent=None):
                prompts.asked.append(path)
                return None

        monkeypatch.setattr(mw, "UnlockDialog", RecordingUnlockDialog)

    def real(self) -> None:
        self._mp.setattr(self._mw, "UnlockDialog", self._real)


@pytest.fixture(autouse=True)
def unlock_prompts(monkeypatch) -> UnlockPrompts:
    return UnlockPrompts(monkeypatch)


# --------------------------------------------------------------------------- the worker


@pytest.fixture
def client(qapp) -> Iterator[Any]:
    """A real VaultClient (its own worker QThread) with the GUI-thread guard installed."""
    from camillo_desktop.worker import VaultClient, install_thread_guard, remove_thread_guard

    install_thread_guard()
    c = VaultClient()
    try:
        yield c
    finally:
        c.shutdown()
        remove_thread_guard()
        qapp.processEvents()


# --------------------------------------------------------------------------- settings and windows


@pytest.fixture
def settings(_isolated_qsettings):
    """Default settings, but for the live folder watcher: off, so that a test decides when the window
    reads what another process wrote (the live test turns it on)."""
    from camillo_desktop.settings import Setting, Settings

    s = Settings()
    s.set(Setting.LIVE, False)
    return s


@pytest.fixture
def make_window(qtbot, client, settings) -> Callable[..., Any]:
    """``make_window(show=True)`` -> a MainWindow on the real client, closed after the test."""
    from camillo_desktop.mainwindow import MainWindow

    def make(show: bool = True, first_view: str | None = "timeline"):
        """``first_view``: the view shown once a vault opens (as if last shown; None: the app's default,
        the conversations)."""
        from camillo_desktop.settings import Setting

        if first_view is not None:
            settings.set(Setting.LAST_VIEW, first_view)
        window = MainWindow(client, settings)
        qtbot.addWidget(window)
        if show:
            window.show()
            qtbot.waitExposed(window)
        return window

    return make


# --------------------------------------------------------------------------- demo vaults


@pytest.fixture(scope="session")
def demo_template(tmp_path_factory) -> DemoVault:
    return build_demo(str(tmp_path_factory.mktemp("demo-template")))


@pytest.fixture
def demo_vault(demo_template, tmp_path) -> DemoVault:
    """A fresh copy of the demo vault for this test."""
    return copy_demo(demo_template, str(tmp_path / "demo"))


@pytest.fixture
def open_demo(qtbot, client, demo_vault) -> Callable[..., dict[str, Any]]:
    """``open_demo()`` opens this test's demo copy on the worker as the demo's desktop installation."""

    def do(**kw: Any) -> dict[str, Any]:
        return open_vault(qtbot, client, demo_vault.path, demo_vault.unlock(), home=demo_vault.homes["desktop"], **kw)

    return do


@pytest.fixture
def demo_window(qtbot, client, make_window, open_demo) -> Any:
    """A shown main window with the demo vault open on the timeline, its first page decoded."""
    window = make_window()
    with qtbot.waitSignal(window.view_ready, timeout=20_000, check_params_cb=lambda name: name == "timeline"):
        window.vault_opened(open_demo())
    return window
