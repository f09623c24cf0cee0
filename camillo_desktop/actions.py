"""Every action of the main window, registered in one place (Picard's ``mainwindow/actions.py``).

An :class:`Action` enum names each one; :data:`SPECS` gives its label, standard shortcut and
whether it needs an open vault.  The main window creates the QActions from this table and connects
them; menus, toolbars and tests refer to actions by enum.  GUI thread only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum, auto

from PySide6.QtGui import QKeySequence


class Action(Enum):
    NEW_VAULT = auto()
    OPEN_VAULT = auto()
    OPEN_OBJECT_STORAGE = auto()
    LOCK = auto()
    FIND = auto()
    REFRESH = auto()
    SETTINGS = auto()
    QUIT = auto()
    COPY = auto()
    SHORTCUTS = auto()
    ABOUT = auto()


@dataclass(frozen=True)
class Spec:
    label: str
    shortcut: QKeySequence | QKeySequence.StandardKey | str | None
    needs_vault: bool
    tip: str = ""


SPECS: dict[Action, Spec] = {
    Action.NEW_VAULT: Spec("&New vault\u2026", QKeySequence.StandardKey.New, False, "Create a new vault"),
    Action.OPEN_VAULT: Spec("&Open vault\u2026", QKeySequence.StandardKey.Open, False, "Open a vault folder or .vmem file"),
    Action.OPEN_OBJECT_STORAGE: Spec("Open object &storage\u2026", None, False,
                                     "Open a vault kept in an S3-compatible bucket"),
    Action.LOCK: Spec("&Lock", "Ctrl+L", True, "Lock the vault: its keys leave memory"),
    Action.FIND: Spec("&Find\u2026", QKeySequence.StandardKey.Find, True, "Search memory (field modifiers allowed)"),
    Action.REFRESH: Spec("&Refresh", QKeySequence.StandardKey.Refresh, True, "Read what other devices and agents wrote"),
    Action.SETTINGS: Spec("&Settings\u2026", QKeySequence.StandardKey.Preferences, False, "Auto-lock, clipboard, appearance"),
    Action.QUIT: Spec("&Quit", QKeySequence.StandardKey.Quit, False, "Lock and quit"),
    Action.COPY: Spec("&Copy text", QKeySequence.StandardKey.Copy, True, "Copy the selected record's text"),
    Action.SHORTCUTS: Spec("&Keyboard shortcuts", "F1", False, "Show every shortcut"),
    Action.ABOUT: Spec("&About Camillo", None, False, ""),
}


def shortcut_text(spec: Spec) -> str:
    sc = spec.shortcut
    if sc is None:
        return ""
    seq = QKeySequence(sc) if not isinstance(sc, QKeySequence) else sc
    if isinstance(sc, QKeySequence.StandardKey):
        seqs = QKeySequence.keyBindings(sc)
        seq = seqs[0] if seqs else QKeySequence()
    return seq.toString(QKeySequence.SequenceFormat.NativeText)
