"""The search syntax, discoverable: a popover beside the search field listing every modifier with an
example; choosing one puts it in the field.  GUI thread only.
"""

from __future__ import annotations

from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QFrame, QLabel, QLineEdit, QPushButton, QToolButton, QVBoxLayout, QWidget

# (what to insert, what it finds): the modifiers of camillo.search, in the person's words
MODIFIERS: list[tuple[str, str]] = [
    ('"exact phrase"', "these words, together, in this order"),
    ("word*", "words starting with \u201cword\u201d"),
    ("type:message", "only messages (or fact, preference, instruction, summary \u2026)"),
    ("key:user/home*", "facts whose key starts with user/home"),
    ("agent:planner", "written by this agent or device"),
    ("compartment:work", "only in this compartment"),
    ("class:user", "with this authority: user, observed, inferred or external"),
    ("is:pending", "waiting in your inbox for a decision"),
    ("is:conflict", "values in an open conflict"),
    ("is:hidden", "forgotten records too"),
    ("after:2026-01-01", "written after this day (before: likewise)"),
    ("conversation:ID", "in one conversation"),
]


class SearchHelp(QFrame):
    """The popover: one button per modifier (inserting it) and a line on how words combine."""

    def __init__(self, field: QLineEdit, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Popup)
        self.setObjectName("Popover")
        self.setAccessibleName("search help")
        self.field = field
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 10, 12, 10)
        lay.setSpacing(2)
        title = QLabel("Search memory")
        title.setStyleSheet("font-weight: 600;")
        lay.addWidget(title)
        intro = QLabel("Every word must match. Add any of these (click one to add it):")
        intro.setObjectName("Muted")
        intro.setWordWrap(True)
        lay.addWidget(intro)
        self.buttons: list[QPushButton] = []
        for token, meaning in MODIFIERS:
            b = QPushButton(f"{token}   \u2014 {meaning}")
            b.setFlat(True)
            b.setStyleSheet("text-align: left; padding: 3px 4px;")
            b.setAccessibleName(f"add {token}: {meaning}")
            b.clicked.connect(lambda _=False, t=token: self.insert(t))
            lay.addWidget(b)
            self.buttons.append(b)
        tail = QLabel("Results show how many records match in all; scroll for more. Enter searches, Esc clears.")
        tail.setObjectName("Muted")
        tail.setWordWrap(True)
        lay.addWidget(tail)

    def insert(self, token: str) -> None:
        text = self.field.text()
        self.field.setText((text.rstrip() + " " if text.strip() else "") + token)
        self.hide()
        self.field.setFocus()
        if token.endswith(("*", "ID", '"')):  # a placeholder: select it for typing over
            start = len(self.field.text()) - len(token)
            self.field.setSelection(start, len(token))

    def show_below(self, anchor: QWidget) -> None:
        self.adjustSize()
        self.move(anchor.mapToGlobal(QPoint(anchor.width() - self.width(), anchor.height() + 4)))
        self.show()
        if self.buttons:
            self.buttons[0].setFocus()


def help_button(field: QLineEdit, parent: QWidget) -> tuple[QToolButton, SearchHelp]:
    """A "?" button that shows the popover below itself."""
    popover = SearchHelp(field, parent)
    button = QToolButton(parent)
    button.setText("?")
    button.setToolTip("How to search: every modifier, with an example")
    button.setAccessibleName("search help: the modifiers you can use")
    button.clicked.connect(lambda: popover.show_below(button))
    return button, popover
