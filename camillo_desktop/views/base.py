"""What every main-window view has: a name, a title, a load on demand and a reaction to Changes.

Views load lazily (the first time they are shown) and defer refreshes while hidden (Electrum's
``maybe_defer_update``): a hidden view only marks itself stale.  ``loaded`` is emitted when the
view's data has arrived (the screenshot mode waits for it).  GUI thread only.
"""

from __future__ import annotations

from typing import Any

from camillo import Changes
from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget


class View(QWidget):
    name = "view"
    title = "View"
    icon = "timeline"
    shortcut = ""
    loaded = Signal()
    status_message = Signal(str)
    navigate = Signal(str, object)  # view name, argument (e.g. a record id to select)

    def __init__(self, client: Any, window: Any) -> None:
        super().__init__()
        self.client = client
        self.window_ = window
        self._stale = True
        self.root = QVBoxLayout(self)
        self.root.setContentsMargins(16, 12, 16, 12)
        header = QHBoxLayout()
        self.title_label = QLabel(self.title)
        self.title_label.setObjectName("ViewTitle")
        header.addWidget(self.title_label)
        header.addStretch(1)
        self.header = header
        self.root.addLayout(header)
        self.subtitle = QLabel("")
        self.subtitle.setObjectName("Muted")
        self.subtitle.setWordWrap(True)
        self.root.addWidget(self.subtitle)

    def activate(self, argument: Any = None) -> None:
        """Shown by the user: load if stale."""
        if self._stale:
            self._stale = False
            self.load()
        if argument is not None:
            self.show_argument(argument)

    def show_argument(self, argument: Any) -> None:
        pass

    def load(self) -> None:
        self.loaded.emit()

    def relevant(self, changes: Changes) -> bool:
        return changes.timeline or changes.facts or changes.roster

    def on_changes(self, changes: Changes) -> None:
        if not self.relevant(changes):
            return
        if self.isVisible():
            self.load()
        else:
            self._stale = True

    def clear(self) -> None:
        """The vault was locked: forget what is shown."""
        self._stale = True
