"""Facts by key: subject → attribute → current value, with status, history and provenance.

Selecting a fact shows its supersession chain (every value it had, who wrote it, with what
authority; the selected entry's whole value below it) and, for the current value, where it came
from: "Why does the agent believe this?" opens the source records.  The person adds a fact, edits
a fact's value and forgets one here (each at user authority: their own word), with an undo bar;
a forgotten fact is restored, and any earlier value made the value again, from its history (new
records: nothing is rewritten).  GUI thread only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from camillo import Changes, FactView, NewRecord, RecordView
from PySide6.QtCore import QModelIndex, Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QSplitter,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from .. import theme
from ..dialogs import BaseDialog
from ..models import PAGE, FactColumn, FactsModel, HistoryModel, Role, operation
from ..text import safe_text
from ..undo import set_value_again, undo_forget_fact_job
from ..widgets import Badge, muted_label
from .base import MovedFacts, SelectionMode, Table, View, apply_columns
from .detail import MEANING

STATUS_TEXT = {
    "ok": "One current value.",
    "conflict": "Two or more values were written without knowledge of each other. Review them in Conflicts.",
    "deleted": "Forgotten: hidden from agents. It stays in the encrypted history until you erase it.",
    "pending": "Not set: an agent proposed a value. It does not bind until you confirm it in the Inbox.",
}
PROPOSED_TEXT = "An agent proposed another value (in the Inbox); yours stays until you decide."


WHOLE = 1000  # a vault with at most this many facts lists them all, every subject open
SELECT_PAGES = 10  # pages of a subject read at most to show a fact to select among them


@dataclass(frozen=True)
class FactsPage:
    """What the Facts view shows first: the subjects with how many facts each has, the facts read of
    some (``whole``: of all), and how many facts there are of each status."""

    subjects: list[tuple[str, int]]
    read: dict[str, list[FactView]]
    counts: dict[str, int]
    whole: bool


def read_facts(vault: Any, key: str | None) -> FactsPage:
    """On the worker: every fact of a vault of at most :data:`WHOLE`; of a larger one, the subjects and
    the first page of the first subject and of ``key``'s (the one to select), read on until ``key``
    is among them (at most :data:`SELECT_PAGES` pages)."""
    subjects, counts = vault.fact_subjects(), vault.fact_counts()
    if sum(n for _s, n in subjects) <= WHOLE:
        read: dict[str, list[FactView]] = {}
        for f in vault.facts():
            read.setdefault(f.key.split("/", 1)[0], []).append(f)
        return FactsPage(subjects, read, counts, True)
    names = {s for s, _n in subjects}
    wanted = dict.fromkeys([subjects[0][0], *([key.split("/", 1)[0]] if key else [])])
    read = {}
    for subject in (s for s in wanted if s in names):
        facts = vault.facts(subject=subject, limit=PAGE)
        while key and len(facts) % PAGE == 0 and facts and facts[-1].key < key and len(facts) < SELECT_PAGES * PAGE:
            facts += vault.facts(subject=subject, after=(facts[-1].key, facts[-1].compartment_id), limit=PAGE)
        read[subject] = facts
    return FactsPage(subjects, read, counts, False)


class FactsView(View):
    name = "facts"
    title = "Facts"
    icon = "facts"
    shortcut = "Ctrl+3"
    depends_on = ("keys",)  # every fact (its detail pane: the selected one, see MovedFacts)

    def __init__(self, client: Any, window: Any) -> None:
        super().__init__(client, window)
        self.subtitle.setText("What your agents know, by key. Each value keeps its history and its provenance.")
        self.add_button = QPushButton("Add a fact\u2026")
        self.add_button.setObjectName("Primary")
        self.add_button.setToolTip("Write a fact, a preference or an instruction in your own words (user authority)")
        self.add_button.clicked.connect(self.add_fact)
        self.header.addWidget(self.add_button)
        self.model = FactsModel(self, client)
        self.tree = QTreeView()
        self.tree.setModel(self.model)
        self.tree.setAlternatingRowColors(True)
        self.tree.setUniformRowHeights(True)
        self.tree.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        apply_columns(self.tree, FactColumn)
        self.tree.setAccessibleName("facts")
        self.tree.setTabKeyNavigation(False)
        self.tree.selectionModel().currentChanged.connect(self._selected)
        # a subject's next page of facts is read when its last row read comes into sight
        self._sight = QTimer(self)
        self._sight.setSingleShot(True)
        self._sight.timeout.connect(self._fetch_in_sight)
        self.tree.expanded.connect(lambda _i: self._sight.start(0))
        self.tree.verticalScrollBar().valueChanged.connect(lambda _v: self._sight.start(0))
        self.model.rowsInserted.connect(lambda *_a: self._sight.start(0))

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
        self.edit_button = QPushButton("Edit value\u2026")
        self.edit_button.clicked.connect(self.edit_fact)
        self.forget_button = QPushButton("Forget")
        self.forget_button.setToolTip("Hide this value from your agents; it stays in the history (undo, or restore "
                                      "it later)")
        self.forget_button.clicked.connect(self.forget_fact)
        self.restore_button = QPushButton("Restore")
        self.restore_button.setToolTip("Write the value it had before it was forgotten again (a new record)")
        self.restore_button.clicked.connect(self.restore_fact)
        for b in (self.edit_button, self.forget_button, self.restore_button):
            self.act_row.addWidget(b)
        self.act_row.addStretch(1)
        rl.addLayout(self.act_row)
        more = QHBoxLayout()
        for b in (self.why, self.review, self.inbox):
            more.addWidget(b)
        more.addStretch(1)
        rl.addLayout(more)
        history_title = QLabel("History (newest last; \u25b6 marks the current value). Select an entry to read "
                               "its whole value.")
        history_title.setObjectName("Muted")
        history_title.setWordWrap(True)
        rl.addWidget(history_title)
        self.history = HistoryModel(self)
        # Every column but the value fits its contents (headers included); the value takes the rest.
        self.history_view = Table(self.history, name="fact history", selection=SelectionMode.ExtendedSelection,
                                  grid=False, alternating=False)
        self.history_view.horizontalHeader().setMinimumSectionSize(60)
        self.history_view.doubleClicked.connect(self._open_history)
        self.history_view.selectionModel().currentRowChanged.connect(lambda cur, _p: self._history_entry(cur.row()))
        rl.addWidget(self.history_view, 1)
        self.entry = QPlainTextEdit()
        self.entry.setReadOnly(True)
        self.entry.setObjectName("RecordText")
        self.entry.setAccessibleName("the selected history entry's whole value")
        self.entry.setMaximumHeight(110)
        rl.addWidget(self.entry)
        entry_row = QHBoxLayout()
        self.entry_label = muted_label("")
        entry_row.addWidget(self.entry_label, 1)
        self.again_button = QPushButton("Make this the value again")
        self.again_button.setToolTip("Write this earlier value again as your own word (a new record)")
        self.again_button.clicked.connect(self._value_again)
        entry_row.addWidget(self.again_button)
        rl.addLayout(entry_row)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.tree)
        self.splitter.addWidget(right)
        self.splitter.setSizes([700, 480])
        self.root.addWidget(self.splitter, 1)
        self._fact: FactView | None = None
        self._select_key: str | None = None
        self.moved = MovedFacts()  # redraw the selected fact's detail only when it moved
        self._show(None)

    def load(self) -> None:
        def to_select() -> tuple[str | None, str | None]:
            """The fact to select: the one asked for (perhaps while the facts were being read), else the one shown."""
            if self._select_key:
                return self._select_key, None
            return (self._fact.key, self._fact.compartment) if self._fact else (None, None)

        def done(page: FactsPage) -> None:
            key, comp = to_select()
            self._select_key = None
            self.model.set_subjects(page.subjects, page.read)
            if page.whole:
                self.tree.expandAll()
            else:  # (the subjects whose facts were read; the others open as the person expands them)
                for subject in page.read:
                    self.tree.expand(self.model.index(self.model.subject_row(subject) or 0, 0))
            total = self.model.total()
            self.title_label.setText(f"Facts  ({total:,})")
            conflict, pending = page.counts.get("conflict", 0), page.counts.get("pending", 0)
            if conflict or pending:
                self.subtitle.setText(f"{conflict:,} in conflict, {pending:,} waiting for your confirmation. "
                                      "Each value keeps its history and its provenance.")
            if key:
                self.select_fact(key, comp)
            elif self.model.rowCount():
                first = self.model.index(0, 0, self.model.index(0, 0))
                if first.isValid():
                    self.tree.setCurrentIndex(first)
            self.moved.shown()
            self.loaded.emit()

        wanted = to_select()[0]
        self.client.submit(lambda ctx: read_facts(ctx.vault, wanted), done, self.window_.show_error, context=self,
                           label="loading facts")

    def select_fact(self, key: str, compartment: str | None = None) -> None:
        idx = self.model.find(key, compartment)
        if idx.isValid():
            self.tree.setCurrentIndex(idx)
            self.tree.scrollTo(idx)
            return
        if self.model.read() < self.model.total():  # not among the facts read: its detail, read on its own
            self.tree.clearSelection()
            self.client.submit(lambda ctx: ctx.vault.fact(key, compartment), self._show, lambda _exc: None,
                               context=self, label="reading a fact")  # (gone meanwhile: nothing to show)

    def _fetch_in_sight(self) -> None:
        """Ask for the next page of each expanded subject whose last row read is in sight."""
        sight = self.tree.viewport().rect()
        for row in range(self.model.rowCount()):
            subject = self.model.index(row, 0)
            if not self.model.can_read_more(subject) or not self.tree.isExpanded(subject):
                continue
            n = self.model.rowCount(subject)
            if self.tree.visualRect(self.model.index(n - 1, 0, subject) if n else subject).intersects(sight):
                self.model.read_more(subject)

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
            for b in (self.why, self.review, self.inbox, self.edit_button, self.forget_button, self.restore_button):
                b.hide()
            self.history.set_records([])
            self._history_entry(-1)
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
        owner = bool(self.window_.info.get("is_owner"))
        self.edit_button.setVisible(owner and f.status != "conflict")
        self.forget_button.setVisible(owner and f.status in ("ok", "pending", "conflict"))
        self.restore_button.setVisible(owner and self.restorable(f) is not None)
        shown = safe_text(f.key, 80, single_line=True)
        for b, verb in ((self.edit_button, "edit the value of"), (self.forget_button, "forget"),
                        (self.restore_button, "restore")):
            b.setAccessibleName(f"{verb} {shown}")
        self.history.set_records(list(f.history), cur.id if cur else None)
        self._history_entry(-1)

    def _why(self) -> None:
        if self._fact and self._fact.current and self._fact.current.sources:
            self.window_.show_records(list(self._fact.current.sources),
                                      f"Why does the agent believe \u201c{safe_text(self._fact.key, 120, single_line=True)}\u201d?")

    # ---------------------------------------------------------------------------- history

    def _history_entry(self, row: int) -> None:
        v = self.history.record(row) if row >= 0 else None
        self.entry.setVisible(v is not None)
        if v is None:
            self.entry.setPlainText("")
            self.entry_label.setText("")
            self.again_button.hide()
            return
        self.entry.setPlainText(safe_text(v.text) if v.kind_name != "DEL" else "(no value: this entry forgot it)")
        self.entry_label.setText(safe_text(f"{operation(v)} by {v.writer}, {v.effective_label} authority", 200,
                                           single_line=True))
        f = self._fact
        current = f.current if f is not None else None
        self.again_button.setVisible(bool(self.window_.info.get("is_owner")) and v.kind_name == "PUT" and (
            current is None or f is None or f.status != "ok" or current.value != v.value))

    def _value_again(self) -> None:
        v = self.history.record(self.history_view.currentIndex().row())
        if v is None or v.kind_name != "PUT":
            return
        key = v.key
        self._select_key = key
        self.client.mutate(lambda ctx: set_value_again(ctx.vault, v), lambda _c: self.status_message.emit(
            f"{safe_text(key or '', 80, single_line=True)} is \u201c{safe_text(v.text, 80, single_line=True)}\u201d "
            "again."), self.window_.show_error, context=self, label="writing a value again")

    # ---------------------------------------------------------------------------- the person's word

    @staticmethod
    def restorable(f: FactView) -> RecordView | None:
        """The value a forgotten fact had (its latest PUT), or None."""
        if f.status != "deleted":
            return None
        return next((r for r in reversed(f.history) if r.kind_name == "PUT"), None)

    def add_fact(self) -> None:
        FactDialog(self, compartments=self.window_.info.get("compartments", [])).open()

    def edit_fact(self) -> None:
        if self._fact is not None:
            FactDialog(self, compartments=[self._fact.compartment], fact=self._fact).open()

    def forget_fact(self) -> None:
        f = self._fact
        if f is None:
            return
        key, comp = f.key, f.compartment
        self._select_key = key

        def done(_changes: Changes) -> None:
            shown = safe_text(key, 80, single_line=True)
            self.window_.offer_undo(f"Forgot {shown}: hidden from your agents.", undo_forget_fact_job(f),
                                    f"{shown} is back.")

        self.client.mutate(lambda ctx: ctx.vault.forget(key=key, compartment=comp), done, self.window_.show_error,
                           context=self, label="forgetting")

    def restore_fact(self) -> None:
        f = self._fact
        v = self.restorable(f) if f is not None else None
        if v is None:
            return
        self._select_key = v.key
        self.client.mutate(lambda ctx: set_value_again(ctx.vault, v), lambda _c: self.status_message.emit(
            f"Restored {safe_text(v.key or '', 80, single_line=True)}."), self.window_.show_error, context=self,
            label="restoring")

    def _open_history(self, index: QModelIndex) -> None:
        v = self.history.data(self.history.index(index.row(), 0), Role.RECORD)
        if v is not None:
            self.window_.show_record(v.id)

    def show_rows_after_write(self, key: str) -> None:
        self._select_key = key

    def clear(self) -> None:
        super().clear()
        self.moved.forget()
        self.model.set_facts([])
        self._show(None)


TYPES = (("fact", "Fact: something true about you or your world"),
         ("preference", "Preference: how you like things done"),
         ("instruction", "Instruction: what your agents should always do"))


class FactDialog(BaseDialog):
    """Add a fact, or edit a fact's value: written at user authority (the person's own word)."""

    def __init__(self, view: FactsView, *, compartments: list[str], fact: FactView | None = None) -> None:
        super().__init__(view, "Edit a fact" if fact is not None else "Add a fact")
        self.view = view
        self.fact = fact
        self.setMinimumWidth(520)
        lay = QVBoxLayout(self)
        lay.addWidget(muted_label("Written as your own word (user authority): it binds your agents. They see it in "
                                  "the compartment you choose."))
        form = QFormLayout()
        self.key = QLineEdit(fact.key if fact is not None else "user/")
        self.key.setAccessibleName("key")
        self.key.setToolTip("subject/attribute, such as user/home_city or work/project")
        self.key.setReadOnly(fact is not None)
        form.addRow("Key", self.key)
        self.value = QPlainTextEdit()
        self.value.setAccessibleName("value")
        self.value.setTabChangesFocus(True)
        self.value.setFixedHeight(90)
        current = fact.current if fact is not None and fact.status == "ok" else None
        if current is not None and current.kind_name == "PUT":
            self.value.setPlainText(current.text)
        form.addRow("Value", self.value)
        self.type = QComboBox()
        self.type.setAccessibleName("kind")
        for value, label in TYPES:
            self.type.addItem(label, value)
        if current is not None and current.type:
            self.type.setCurrentIndex(max(0, self.type.findData(current.type)))
        self.type.setEnabled(fact is None)
        form.addRow("Kind", self.type)
        self.compartment = QComboBox()
        self.compartment.setAccessibleName("compartment")
        for name in compartments or ["personal"]:
            self.compartment.addItem(safe_text(name, 60, single_line=True), name)
        self.compartment.setCurrentIndex(max(0, self.compartment.findData("personal")))
        self.compartment.setEnabled(fact is None)
        form.addRow("Compartment", self.compartment)
        lay.addLayout(form)
        self.error = QLabel("")
        self.error.setObjectName("Error")
        self.error.setWordWrap(True)
        self.error.setTextFormat(Qt.TextFormat.PlainText)
        lay.addWidget(self.error)
        buttons = QDialogButtonBox()
        self.save = buttons.addButton("Save" if fact is not None else "Add", QDialogButtonBox.ButtonRole.AcceptRole)
        self.save.setObjectName("Primary")
        buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.run)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        (self.value if fact is not None else self.key).setFocus()

    def run(self) -> None:
        key, value = self.key.text().strip(), self.value.toPlainText().strip()
        if not value:
            self.error.setText("Type the value.")
            return
        typ, comp = self.type.currentData(), self.compartment.currentData()
        item = NewRecord(type=typ, key=key, value=value)
        self.save.setEnabled(False)

        def done(_changes: Changes) -> None:
            self.view.status_message.emit(f"Saved: {safe_text(key, 80, single_line=True)} is "
                                          f"\u201c{safe_text(value, 80, single_line=True)}\u201d.")
            self.accept()

        def failed(exc: BaseException) -> None:
            self.save.setEnabled(True)
            self.error.setText(safe_text(str(exc), 600))  # a bad key says which and how to write it

        self.view.show_rows_after_write(key)
        self.view.client.mutate(lambda ctx: ctx.vault.append([item], compartment=comp), done, failed, context=self,
                                label="saving a fact")
