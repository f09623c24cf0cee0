"""Helpers for the desktop tests (imported by conftest.py and the test modules)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

DEMO_DIR = "Demo vault"


@contextlib.contextmanager
def no_guard() -> Iterator[None]:
    """Temporarily lift the GUI-thread guard (to prepare vault files from the test itself)."""
    import camillo.vault as cv

    saved = cv.thread_guard()
    cv.set_thread_guard(None)
    try:
        yield
    finally:
        cv.set_thread_guard(saved)


def wait_idle(qtbot, client, timeout: int = 15_000) -> None:
    """Wait until every job submitted so far has delivered its result."""
    qtbot.waitUntil(lambda: not client._jobs, timeout=timeout)


def wait_view(qtbot, window, name: str, argument=None, timeout: int = 20_000):
    """Show the view ``name`` (with ``argument``) and wait until it reports ready; returns it."""
    with qtbot.waitSignal(window.view_ready, timeout=timeout, check_params_cb=lambda n: n == name):
        window.show_view(name, argument)
    return window.current_view()


def click(qtbot, button) -> None:
    """Click a button the person can see and use (a hidden or disabled one fails the test)."""
    from PySide6.QtCore import Qt

    assert button.isVisible() and button.isEnabled(), f"{button.text()!r} cannot be clicked"
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def cell(model, row: int, column: int) -> str:
    """The text a table shows in a cell."""
    return model.data(model.index(row, column))


def call(qtbot, client, fn: Callable[[Any], Any], timeout: int = 20_000) -> Any:
    """Run ``fn(ctx)`` on the worker, wait, and return its result (or raise its error)."""
    box: dict[str, Any] = {}
    client.submit(fn, lambda r: box.setdefault("ok", r), lambda e: box.setdefault("err", e), label="test call")
    qtbot.waitUntil(lambda: bool(box), timeout=timeout)
    if "err" in box:
        raise box["err"]
    return box["ok"]


def open_vault(qtbot, client, path: str, unlock: Any, *, home: str | None = None, cache: bool = True,
               timeout: int = 30_000) -> dict[str, Any]:
    """Open ``path`` through ``client.open_vault`` (on the worker) and wait for ``vault_opened``."""
    from camillo import Vault

    box: dict[str, Any] = {}

    def opener(ctx):
        return Vault.open(path, unlock, home=home, cache=cache)

    client.open_vault(opener, lambda info: box.setdefault("ok", info), lambda e: box.setdefault("err", e))
    qtbot.waitUntil(lambda: bool(box), timeout=timeout)
    if "err" in box:
        raise box["err"]
    return box["ok"]


# The file format's words, which the person is never shown (the GUI says what they mean instead):
# lowercase ones in any case, the record types only in capitals ("put" and "note" are English too).
JARGON_WORDS = re.compile(r"\b(batch(es)?|epochs?|segments?|generations?|units?|device_cert|control|seq)\b"
                          r"|camillo passwd|--re-register", re.IGNORECASE)
JARGON_TYPES = re.compile(r"\b(PUT|NOTE)\b")


def jargon_in(texts: list[str]) -> list[str]:
    """The texts that use a word of the file format (an empty list when none does)."""
    return [t for t in texts if JARGON_WORDS.search(t) or JARGON_TYPES.search(t)]


def visible_texts(root) -> list[str]:
    """Every text ``root`` and its visible descendants show or say: labels, buttons, tooltips, the
    names screen readers read, placeholders, window titles."""
    from PySide6.QtWidgets import QAbstractButton, QLabel, QLineEdit, QWidget

    out: list[str] = []
    for w in [root, *root.findChildren(QWidget)]:
        if w is not root and not w.isVisibleTo(root):
            continue
        if isinstance(w, QLabel):
            out.append(w.text())
        elif isinstance(w, QAbstractButton):
            out.append(w.text().replace("&", ""))
        elif isinstance(w, QLineEdit):
            out.append(w.placeholderText())
        out += [w.toolTip(), w.accessibleName(), w.accessibleDescription()]
        if w.isWindow():
            out.append(w.windowTitle())
    return [t for t in out if t]


@dataclass
class DemoVault:
    """A private copy of the demo vault: its folder, the simulated installations and grants."""

    path: str
    homes: dict[str, str]
    grants: dict[str, str]
    passphrase: str
    recovery_phrase: str

    def unlock(self):
        from camillo import Unlock

        return Unlock.passphrase(self.passphrase)


def copy_demo(template: DemoVault, dest: str) -> DemoVault:
    """Copy the vault folder and its ``.homes`` folder (installations, grant files) to ``dest``."""
    os.makedirs(dest, exist_ok=True)
    src_base = os.path.dirname(template.path)
    name = os.path.basename(template.path)
    path = os.path.join(dest, name)
    shutil.copytree(template.path, path)
    shutil.copytree(template.path + ".homes", path + ".homes")
    homes = {k: os.path.join(path + ".homes", os.path.relpath(v, template.path + ".homes"))
             for k, v in template.homes.items()}
    grants = {k: os.path.join(dest, os.path.relpath(v, src_base)) for k, v in template.grants.items()}
    return DemoVault(path, homes, grants, template.passphrase, template.recovery_phrase)


_build_lock = threading.Lock()


def build_demo(directory: str, records: int = 0) -> DemoVault:
    """Build a demo vault (with the keychain off, whatever the caller's environment)."""
    from camillo import DEMO_PASSPHRASE, build_demo_vault

    path = os.path.join(directory, DEMO_DIR)
    with _build_lock, no_guard(), pytest.MonkeyPatch.context() as mp:
        mp.setenv("CAMILLO_KEYCHAIN", "none")
        mp.setenv("CAMILLO_INSECURE_TEST_KDF", "1")
        mp.setenv("CAMILLO_HOME", os.path.join(directory, "builder-home"))
        info = build_demo_vault(path, records=records)
    return DemoVault(path, dict(info.homes), dict(info.grants), DEMO_PASSPHRASE, info.recovery_phrase)


