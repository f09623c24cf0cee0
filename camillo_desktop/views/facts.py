"""Facts by key: subject → attribute → current value, with status, history and provenance.

Selecting a fact shows its supersession chain (every value it had, who wrote it, with what
authority) and, for the current value, where it came from: "Why does the agent believe this?"
opens the source records.  GUI thread only.
"""

from __future__ import annotations

from typing import Any

from camillo import Changes, FactView
from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSplitter,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from .. import theme
from ..models import FactColumn, FactsModel, HistoryModel, Role
from ..text import safe_text
from ..widgets import Badge
from .base import MovedFacts, SelectionMode, Table, View, apply_columns
from .detail import MEANING

STATUS_TEXT = {
    "ok": "One current value.",
    "conflict": "Two or more values were written without knowledge of each other. Review them in Conflicts.",
    "deleted": "Forgotten: hidden from agents. It stays in the encrypted history until you erase it.",
    "pending": "Not set: an agent proposed a value. It does not bind until you confirm it in the Inbox.",
}
PROPOSED_TEXT = "An agent proposed another value (in the Inbox); yours stays until you decide."


class FactsView(View):
    name = "facts"
    title = "Facts"
    icon = "facts"
    shortcut = "Ctrl+3"
    depends_on = ("keys",)  # every fact (its detail pane: the selected one, see MovedFacts)

    def __init__(self, client: Any, window: Any) -> None:
        super().__init__(client, window)
        self.subtitle.setText("What your agents know, by key. Each value keeps its history and its provenance.")
        self.model = FactsModel(self)
        self.tree = QTreeView()
        self.tree.setModel(self.model)
        self.tree.setAlternatingRowColors(True)
        self.tree.setUniformRowHeights(True)
        self.tree.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        apply_columns(self.tree, FactColumn)
        self.tree.setAccessibleName("facts")
        self.tree.selectionModel().currentChanged.connect(self._selected)

        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(12, 0, 0, 0)
        self.key_label = QLabel("Select a fact")
        self.key_label.setObjectName("ViewTitle")
        self.key_label.setTextFormat(Qt.TextFormat.PlainText)
        rl.addWidget(self.key_label)
        row = QHBoxLayout()
        self.status_badge = Badge("-")
        self.authority_badge = Badge("-")
        row.addWidget(self.status_badge)
        row.addWidget(self.authority_badge)
        row.addStretch(1)
        rl.addLayout(row)
        self.value_label = QLabel("")
        self.value_label.setTextFormat(Qt.TextFormat.PlainText)
        self.value_label.setWordWrap(True)
        self.value_label.setStyleSheet("font-size: 15px;")
        self.value_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        rl.addWidget(self.value_label)
        self.status_text = QLabel("")
        self.status_text.setObjectName("Muted")
        self.status_text.setWordWrap(True)
        rl.addWidget(self.status_text)
        self.act_row = QHBoxLayout()
        self.why = QPushButton("Why does the agent believe this?")
        self.why.setToolTip("Open the records this value was derived from")
        self.why.clicked.connect(self._why)
        self.review = QPushButton("Review the conflict")
        self.review.clicked.connect(lambda: self.navigate.emit("conflicts", self._fact.key if self._fact else None))
        self.inbox = QPushButton("Open in the Inbox")
        self.inbox.clicked.connect(lambda: self.navigate.emit("inbox", self._fact.proposed[0].id
                                                              if self._fact and self._fact.proposed else None))
        for b in (self.why, self.review, self.inbox):
            self.act_row.addWidget(b)
        self.act_row.addStretch(1)
        rl.addLayout(self.act_row)
        history_title = QLabel("History (newest last; \u25b6 marks the current value)")
        history_title.setObjectName("Muted")
        rl.addWidget(history_title)
        self.history = HistoryModel(self)
        # Every column but the value fits its contents (headers included); the value takes the rest.
        self.history_view = Table(self.history, name="fact history", selection=SelectionMode.ExtendedSelection,
                                  grid=False, alternating=False)
        self.history_view.horizontalHeader().setMinimumSectionSize(60)
        self.history_view.doubleClicked.connect(self._open_history)
        rl.addWidget(self.history_view, 1)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.tree)
        self.splitter.addWidget(right)
        self.splitter.setSizes([640, 540])
        self.root.addWidget(self.splitter, 1)
        self._fact: FactView | None = None
        self._select_key: str | None = None
        self.moved = MovedFacts()  # redraw the selected fact's detail only when it moved
        self._show(None)

    def load(self) -> None:
        def done(facts: list[FactView]) -> None:
            key = self._select_key or (self._fact.key if self._fact else None)
            comp = self._fact.compartment if self._fact and not self._select_key else None
            self._select_key = None
            self.model.set_facts(facts)
            self.tree.expandAll()
            counts = {s: sum(1 for f in facts if f.status == s) for s in ("conflict", "pending")}
            self.title_label.setText(f"Facts  ({len(facts)})")
            if counts["conflict"] or counts["pending"]:
                self.subtitle.setText(f"{counts['conflict']} in conflict, {counts['pending']} waiting for your "
                                      "confirmation. Each value keeps its history and its provenance.")
            if key:
                self.select_fact(key, comp)
            elif self.model.rowCount():
                first = self.model.index(0, 0, self.model.index(0, 0))
                if first.isValid():
                    self.tree.setCurrentIndex(first)
            self.moved.shown()
            self.loaded.emit()

        self.client.submit(lambda ctx: ctx.vault.facts(), done, self.window_.show_error, context=self,
                           label="loading facts")

    def select_fact(self, key: str, compartment: str | None = None) -> None:
        idx = self.model.find(key, compartment)
        if idx.isValid():
            self.tree.setCurrentIndex(idx)
            self.tree.scrollTo(idx)

    def show_argument(self, argument: Any) -> None:
        if isinstance(argument, str):
            if self.model.rowCount():
                self.select_fact(argument)
            else:
                self._select_key = argument

    def on_changes(self, changes: Changes) -> None:
        self.moved.add(changes)
        super().on_changes(changes)

    def _selected(self, current: QModelIndex, _previous: QModelIndex) -> None:
        f, shown = self.model.fact(current), self._fact
        if (f is not None and shown is not None and (f.compartment, f.key) == (shown.compartment, shown.key)
                and (f.compartment, f.key) not in self.moved):
            self._fact = f  # the fact shown, selected again after a reload: it did not move, its detail stays
            return
        self._show(f)

    def _show(self, f: FactView | None) -> None:
        self._fact = f
        if f is None:
            self.key_label.setText("Select a fact")
            self.value_label.setText("")
            self.status_text.setText("")
            self.status_badge.hide()
            self.authority_badge.hide()
            for b in (self.why, self.review, self.inbox):
                b.hide()
            self.history.set_records([])
            return
        cur = f.current
        self.key_label.setText(safe_text(f"{f.key}  ·  {f.compartment}", 120, single_line=True))
        self.status_badge.set(f.status, theme.STATUS_COLORS.get(f.status))
        self.status_badge.show()
        if cur is not None and f.status != "deleted":
            self.authority_badge.set(cur.effective_label)
            self.authority_badge.show()
            self.value_label.setText(safe_text(cur.text, 2000))
            self.status_text.setText(STATUS_TEXT.get(f.status, "") + "  " + MEANING.get(cur.effective_label, "")
                                     + ("  " + PROPOSED_TEXT if f.proposed else ""))
        elif f.status == "pending" and f.proposed:
            self.authority_badge.set(f.proposed[0].effective_label)
            self.authority_badge.show()
            self.value_label.setText(safe_text(f"Proposed: {f.proposed[0].text}", 2000))
            self.status_text.setText(STATUS_TEXT["pending"])
        else:
            self.authority_badge.hide()
            self.value_label.setText("(forgotten)")
            self.status_text.setText(STATUS_TEXT["deleted"])
        self.why.setVisible(bool(cur and cur.sources))
        self.review.setVisible(f.status == "conflict")
        self.inbox.setVisible(bool(f.proposed))
        self.history.set_records(list(f.history), cur.id if cur else None)

    def _why(self) -> None:
        if self._fact and self._fact.current and self._fact.current.sources:
            self.window_.show_records(list(self._fact.current.sources),
                                      f"Why does the agent believe \u201c{safe_text(self._fact.key, 120, single_line=True)}\u201d?")

    def _open_history(self, index: QModelIndex) -> None:
        v = self.history.data(self.history.index(index.row(), 0), Role.RECORD)
        if v is not None:
            self.window_.show_record(v.id)

    def clear(self) -> None:
        super().clear()
        self.moved.forget()
        self.model.set_facts([])
        self._show(None)
