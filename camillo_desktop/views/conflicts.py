"""Conflicts: values written without knowledge of each other, side by side, and the user's choice.

The list shows each open conflict; the review shows every candidate as a card (value, who wrote
it, with what authority, when, what its writer had seen, its sources) with "Keep this value", plus
"Write a new value".  The result is a PUT naming all candidates, and the view says what it did.
GUI thread only.
"""

from __future__ import annotations

from typing import Any

from camillo import FactView, RecordContext
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from ..models import fmt_time
from ..text import safe_text
from ..undo import undo_resolve_job
from ..widgets import Badge, muted_label
from ..worker import Changed
from .base import View
from .detail import MEANING


def unseen_text(index: int, contexts: list[RecordContext], fact: FactView) -> str:
    """What candidate ``index``'s writer did not know of when it wrote, in words: "laptop's last 3
    changes" for each other candidate's writer whose changes it had not seen."""
    mine = contexts[index]
    parts = []
    for j, other in enumerate(contexts):
        if j == index or other.writer == mine.writer or other.seq is None:
            continue
        missed = other.seq - mine.seen.get(other.writer, 0)
        if missed > 0:
            parts.append(f"{other.writer}'s last change" if missed == 1 else f"{other.writer}'s last {missed} changes")
    if parts:
        return "Written without knowing of: " + ", ".join(dict.fromkeys(parts))
    return "Written without knowing of the other value"


class CandidateCard(QFrame):
    def __init__(self, view: ConflictsView, fact: FactView, index: int, contexts: list[RecordContext]) -> None:
        super().__init__()
        self.setObjectName("Card")
        c = fact.candidates[index]
        lay = QVBoxLayout(self)
        top = QHBoxLayout()
        label = QLabel("Preferred for now" if index == 0 else f"Candidate {index + 1}")
        label.setObjectName("Muted")
        top.addWidget(label)
        top.addStretch(1)
        top.addWidget(Badge(c.effective_label))
        lay.addLayout(top)
        value = QLabel(safe_text(c.text, 600))
        value.setTextFormat(Qt.TextFormat.PlainText)
        value.setWordWrap(True)
        value.setStyleSheet("font-size: 17px; font-weight: 600; padding: 6px 0;")
        value.setAccessibleName(f"candidate value {index + 1}")
        lay.addWidget(value)
        facts = [
            ("Written by", safe_text(f"{c.writer} ({c.writer_kind})", 80, single_line=True)),
            ("When", fmt_time(c.ts)),
            ("Authority", MEANING.get(c.effective_label, c.effective_label)),
        ]
        lines = [f"{name}: {text}" for name, text in facts]
        lines.append(safe_text(unseen_text(index, contexts, fact), 300, single_line=True))
        for line in lines:
            row = QLabel(line)
            row.setWordWrap(True)
            row.setTextFormat(Qt.TextFormat.PlainText)
            row.setObjectName("Muted")
            lay.addWidget(row)
        if c.sources:
            why = QPushButton(f"Its sources ({len(c.sources)})")
            why.clicked.connect(lambda: view.window_.show_records(
                list(c.sources), f"Sources of \u201c{safe_text(c.text, 80, single_line=True)}\u201d"))
            lay.addWidget(why)
        keep = QPushButton("Keep this value")
        keep.setObjectName("Primary")
        keep.setAccessibleName(f"Keep {safe_text(c.text, 60, single_line=True)}")
        keep.clicked.connect(lambda: view.resolve(fact, pick=c.id))
        lay.addWidget(keep)
        self.setMinimumWidth(260)
        self.setMaximumWidth(420)


class ConflictsView(View):
    name = "conflicts"
    title = "Conflicts"
    icon = "conflicts"
    shortcut = "Ctrl+4"
    depends_on = ("keys",)  # the facts in conflict

    def __init__(self, client: Any, window: Any) -> None:
        super().__init__(client, window)
        self.subtitle.setText("Two devices or agents wrote different values without knowing of each other. "
                              "Nothing was silently decided: pick the value to keep, or write a new one.")
        self.list = QListWidget()
        self.list.setAccessibleName("open conflicts")
        self.list.setMaximumWidth(320)
        self.list.currentItemChanged.connect(lambda cur, _p: self._review(cur.data(Qt.ItemDataRole.UserRole) if cur else None))
        self.review = QWidget()
        rl = QVBoxLayout(self.review)
        rl.setContentsMargins(12, 0, 0, 0)
        self.key_label = QLabel("")
        self.key_label.setObjectName("ViewTitle")
        self.key_label.setTextFormat(Qt.TextFormat.PlainText)
        rl.addWidget(self.key_label)
        self.cards_area = QScrollArea()
        self.cards_area.setWidgetResizable(True)
        self.cards_area.setFrameShape(QFrame.Shape.NoFrame)
        rl.addWidget(self.cards_area, 1)
        new_row = QHBoxLayout()
        self.new_value = QLineEdit()
        self.new_value.setPlaceholderText("or write a new value\u2026")
        self.new_value.setAccessibleName("a new value instead of the values in conflict")
        self.new_button = QPushButton("Use this value instead")
        self.new_button.clicked.connect(lambda: self._fact and self.resolve(self._fact, value=self.new_value.text()))
        new_row.addWidget(self.new_value, 1)
        new_row.addWidget(self.new_button)
        rl.addLayout(new_row)
        self.result = QLabel("")
        self.result.setWordWrap(True)
        self.result.setTextFormat(Qt.TextFormat.PlainText)
        self.result.setObjectName("Success")
        rl.addWidget(self.result)
        self.empty = muted_label("No open conflicts: every fact has one value. When two devices write different "
                                 "values for the same fact without knowing of each other, they appear here.")
        rl.addWidget(self.empty)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.list)
        split.addWidget(self.review)
        split.setSizes([300, 900])
        self.root.addWidget(split, 1)
        self._fact: FactView | None = None
        self._facts: dict[str, FactView] = {}
        self._select: str | None = None

    def load(self) -> None:
        def done(facts: list[FactView]) -> None:
            self._facts = {f"{f.compartment}\u0000{f.key}": f for f in facts}
            self.title_label.setText(f"Conflicts  ({len(facts)})")
            current = self._select or (self._fact.key if self._fact else None)
            self._select = None
            self.list.clear()
            chosen = None
            for key, f in self._facts.items():
                item = QListWidgetItem(f"{safe_text(f.key, 200, single_line=True)}\n"
                                       f"{safe_text(f.compartment, 80, single_line=True)} \u00b7 {len(f.candidates)} values")
                item.setData(Qt.ItemDataRole.UserRole, key)
                self.list.addItem(item)
                if f.key == current:
                    chosen = item
            self.empty.setVisible(not facts)
            self.new_value.setEnabled(bool(facts))
            self.new_button.setEnabled(bool(facts))
            if chosen or self.list.count():
                self.list.setCurrentItem(chosen or self.list.item(0))
            else:
                self._review(None)
            self.loaded.emit()

        self.client.submit(lambda ctx: ctx.vault.conflicts(), done, self.window_.show_error, context=self)

    def show_argument(self, argument: Any) -> None:
        if isinstance(argument, str):
            self._select = argument
            self.load()

    def _review(self, key: str | None) -> None:
        f = self._facts.get(key) if key else None
        self._fact = f
        if f is None:
            self.key_label.setText("")
            self.cards_area.setWidget(QWidget())
            return
        self.key_label.setText(safe_text(f"{f.key}  \u00b7  {f.compartment}", 200, single_line=True))

        def job(ctx):
            return [ctx.vault.record_context(c.id) for c in f.candidates]

        def show(contexts: list[RecordContext]) -> None:
            if self._fact is not f:
                return
            holder = QWidget()
            outer = QVBoxLayout(holder)
            row = QHBoxLayout()
            for i in range(len(contexts)):
                row.addWidget(CandidateCard(self, f, i, contexts), 0, Qt.AlignmentFlag.AlignTop)
            row.addStretch(1)
            outer.addLayout(row)
            outer.addStretch(1)
            self.cards_area.setWidget(holder)
            self.loaded.emit()

        self.client.submit(job, show, self.window_.show_error, context=self)

    def resolve(self, fact: FactView, *, pick: bytes | None = None, value: str | None = None) -> None:
        if value is not None and not value.strip():
            return
        key, comp = fact.key, fact.compartment

        def job(ctx):
            if pick is not None:
                changes = ctx.vault.resolve(key, compartment=comp, pick=pick)
            else:
                changes = ctx.vault.resolve(key, compartment=comp, value=value, value_given=True)
            return Changed(changes, ctx.vault.fact(key, comp))

        def done(result: Changed) -> None:
            after = result.value
            self.window_.offer_undo(f"Resolved {safe_text(key, 80, single_line=True)}.", undo_resolve_job(fact),
                                    f"Undone: {safe_text(key, 80, single_line=True)} has its earlier value again; "
                                    "the other one waits in your inbox.")
            self.result.setText(f"Resolved: {safe_text(key, 200, single_line=True)} is now \u201c{safe_text(after.current.text, 120)}\u201d "
                                f"({after.current.effective_label} authority). One new record names all "
                                f"{len(fact.candidates)} candidates, so every copy of the vault agrees once it syncs.")
            self.new_value.clear()

        self.client.mutate(job, done, self.window_.show_error, context=self)

    def clear(self) -> None:
        super().clear()
        self._facts = {}
        self._fact = None
        self.list.clear()
        self.key_label.setText("")
        self.cards_area.setWidget(QWidget())
        self.result.setText("")
        self.new_value.clear()
