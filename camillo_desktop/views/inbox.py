"""The inbox: what agents proposed (and what imports brought in), waiting for the user's word.

Each proposal is shown beside the fact's current value, the user's own if there is one (the
binding value: :class:`camillo.FactView`'s ``current``), with who proposed it, when, and why: the
messages it was derived from, each one click from its conversation.  Newest first.  An agent's
conclusion ("prefers morning meetings") binds only once the user confirms it: confirm makes it the
user's word (over a value the user set, only after asking, naming both values); reject withdraws
it and leaves the user's value as it was.  Several at once are fine; Ctrl+Return confirms and
Delete rejects the selection.  Both offer an undo bar (:mod:`camillo_desktop.undo`).  GUI thread
only; the reads and writes run on the vault worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from camillo import Changes, FactView, RecordView
from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from ..dialogs import Ask
from ..models import Column, ColumnSpec, Sizing, TableModel, fmt_time, fmt_when
from ..text import safe_text
from ..undo import undo_confirm_job, undo_reject_job
from ..widgets import Badge, muted_label
from .base import SelectionMode, Table, View
from .detail import MEANING

EMPTY = "Nothing waits for you: what your agents and imports propose appears here until you confirm or reject it."


@dataclass(frozen=True)
class Proposal:
    """A proposal with what it is shown beside (read on the worker by :func:`proposals`)."""

    record: RecordView
    fact: FactView | None
    sources: tuple[RecordView, ...]
    proposer: str  # who proposed it (the original writer of a proposal proposed again)

    @property
    def yours(self) -> RecordView | None:
        """The fact's binding value (the user's), if any."""
        f = self.fact
        if f is None or f.current is None or f.status not in ("ok", "conflict") or f.current.kind_name != "PUT":
            return None
        return f.current


def proposals(vault: Any) -> list[Proposal]:
    """On the worker: every proposal with its fact, its sources and its proposer, newest first."""
    out = []
    for p in vault.inbox():
        fact = vault.fact(p.key, p.compartment) if p.key else None
        proposer = p.writer
        original = p.meta.get("restored_from")
        if isinstance(original, str):
            try:
                first = vault.record(bytes.fromhex(original))
            except ValueError:
                first = None
            if first is not None:
                proposer = f"{first.writer} (proposed again)"
        out.append(Proposal(p, fact, tuple(vault.records(p.sources)), proposer))
    out.sort(key=lambda x: (-(x.record.ts or 0), x.record.id))
    return out


def _yours_text(p: Proposal) -> str:
    yours = p.yours
    return yours.text if yours is not None else "\u2014"


class InboxColumn(Column):  # a row: a Proposal; values, keys and names are untrusted
    WHEN = ColumnSpec("When", lambda p: fmt_when(p.record.ts), width=76, tooltip=lambda p: fmt_time(p.record.ts))
    PROPOSED = ColumnSpec("Proposed", lambda p: p.record.text, limit=200, sizing=Sizing.STRETCH)
    YOURS = ColumnSpec("Your value", _yours_text, limit=120, width=150)
    KEY = ColumnSpec("About", lambda p: p.record.key, limit=120, width=150)
    BY = ColumnSpec("Proposed by", lambda p: p.proposer, limit=60, width=120)


def _box(title: str) -> tuple[QFrame, QVBoxLayout]:
    box = QFrame()
    box.setObjectName("Card")
    lay = QVBoxLayout(box)
    label = QLabel(title)
    label.setObjectName("Muted")
    lay.addWidget(label)
    return box, lay


def _value_label(text: str) -> QLabel:
    label = QLabel(text)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    label.setStyleSheet("font-size: 16px; font-weight: 600;")
    return label


class InboxView(View):
    name = "inbox"
    title = "Inbox"
    icon = "inbox"
    shortcut = "Ctrl+5"
    depends_on = ("keys",)  # the proposals and the values beside them
    selection = SelectionMode.ExtendedSelection

    def __init__(self, client: Any, window: Any) -> None:
        super().__init__(client, window)
        self.subtitle.setText("What your agents and imports propose, beside your own value. It is information, not an "
                              "instruction, until you confirm it. Select one or several: Ctrl+Return confirms, "
                              "Delete rejects.")
        self.confirm_button = QPushButton("Confirm")
        self.confirm_button.setObjectName("Primary")
        self.confirm_button.setToolTip("Make it your own word (user authority)  (Ctrl+Return)")
        self.reject_button = QPushButton("Reject")
        self.reject_button.setToolTip("Withdraw it: your agents no longer see it; your own value stays  (Delete)")
        self.confirm_button.clicked.connect(lambda: self._act("confirm"))
        self.reject_button.clicked.connect(lambda: self._act("reject"))
        self.header.addWidget(self.confirm_button)
        self.header.addWidget(self.reject_button)
        for keys, what in ((("Ctrl+Return", "Ctrl+Enter"), "confirm"), (("Delete",), "reject")):
            for key in keys:
                sc = QShortcut(QKeySequence(key), self)
                sc.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
                sc.activated.connect(lambda w=what: self._act(w))
        self.model = TableModel(InboxColumn, self)
        self.table = Table(self.model, name="proposals", selection=self.selection, dense=True, grid=False)
        self.table.selectionModel().currentRowChanged.connect(self._current)
        self.table.selectionModel().selectionChanged.connect(lambda *_: self._selection_changed())
        self.card_area = QScrollArea()
        self.card_area.setWidgetResizable(True)
        self.card_area.setFrameShape(QFrame.Shape.NoFrame)
        self.card_area.setMinimumWidth(320)
        self.empty = muted_label(EMPTY)
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty.hide()
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.table)
        split.addWidget(self.card_area)
        split.setSizes([640, 420])
        self.root.addWidget(self.empty)
        self.root.addWidget(split, 1)
        self.split = split
        self._select_id: bytes | None = None
        self._show(None)

    # ---------------------------------------------------------------------------- loading

    def load(self) -> None:
        self.client.submit(lambda ctx: proposals(ctx.vault), self._loaded, self.window_.show_error, context=self,
                           label="loading the inbox")

    def _loaded(self, items: list[Proposal]) -> None:
        current = self.selected_ids()
        self.model.set_rows(items)
        self.title_label.setText(f"Inbox  ({len(items)})")
        self.empty.setVisible(not items)
        self.split.setVisible(bool(items))
        target = self._select_id or (current[0] if current else None)
        self._select_id = None
        row = next((i for i, p in enumerate(items) if p.record.id == target), 0 if items else -1)
        if row >= 0:
            self.table.selectRow(row)
            self.table.scrollTo(self.model.index(row, 0))
        else:
            self._show(None)
        self._selection_changed()
        self.loaded.emit()

    def show_argument(self, argument: Any) -> None:
        if isinstance(argument, bytes):
            row = next((i for i, p in enumerate(self.model.rows()) if p.record.id == argument), -1)
            if row >= 0:
                self.table.selectRow(row)
            else:
                self._select_id = argument

    def clear(self) -> None:
        super().clear()
        self.model.set_rows([])
        self._show(None)

    # ---------------------------------------------------------------------------- the selection

    def selected(self) -> list[Proposal]:
        rows = sorted({i.row() for i in self.table.selectionModel().selectedRows()})
        return [p for p in (self.model.row(r) for r in rows) if p is not None]

    def selected_ids(self) -> list[bytes]:
        return [p.record.id for p in self.selected()]

    def _selection_changed(self) -> None:
        chosen = self.selected()
        for button, verb in ((self.confirm_button, "Confirm"), (self.reject_button, "Reject")):
            button.setEnabled(bool(chosen))
            if len(chosen) == 1:
                button.setAccessibleName(f"{verb.lower()} \u201c{safe_text(chosen[0].record.text, 60, single_line=True)}\u201d")
            else:
                button.setAccessibleName(f"{verb.lower()} the {len(chosen)} selected proposals")

    def _current(self, current: QModelIndex, _previous: QModelIndex) -> None:
        self._show(self.model.row(current.row()) if current.isValid() else None)

    def _show(self, p: Proposal | None) -> None:
        """The proposal beside the user's value, with who, when and why."""
        holder = QWidget()
        lay = QVBoxLayout(holder)
        lay.setContentsMargins(12, 0, 4, 0)
        if p is None:
            lay.addWidget(muted_label("Select a proposal to see it beside your own value."))
            lay.addStretch(1)
            self.card_area.setWidget(holder)
            return
        v = p.record
        key = QLabel(safe_text(f"{v.key}  \u00b7  {v.compartment}", 200, single_line=True))
        key.setObjectName("ViewTitle")
        key.setTextFormat(Qt.TextFormat.PlainText)
        lay.addWidget(key)
        row = QHBoxLayout()
        proposed, pl = _box("Proposed")
        pl.addWidget(_value_label(safe_text(v.text, 2000)))
        badge_row = QHBoxLayout()
        badge_row.addWidget(Badge(v.effective_label))
        badge_row.addStretch(1)
        pl.addLayout(badge_row)
        pl.addWidget(muted_label(safe_text(f"by {p.proposer}, {fmt_time(v.ts)}", 200, single_line=True)))
        pl.addWidget(muted_label(MEANING.get(v.effective_label, "")))
        pl.addStretch(1)
        row.addWidget(proposed, 1)
        yours, yl = _box("Your value")
        mine = p.yours
        if mine is not None:
            yl.addWidget(_value_label(safe_text(mine.text, 2000)))
            badge_row = QHBoxLayout()
            badge_row.addWidget(Badge(mine.effective_label))
            badge_row.addStretch(1)
            yl.addLayout(badge_row)
            yl.addWidget(muted_label(safe_text(f"set by {mine.writer}, {fmt_time(mine.ts)}", 200, single_line=True)))
            if mine.value != v.value:
                yl.addWidget(muted_label("Confirming the proposal replaces it (you are asked first)."))
        else:
            yl.addWidget(_value_label("None yet"))
            yl.addWidget(muted_label("Nothing binds your agents on this until you confirm a value."))
        yl.addStretch(1)
        row.addWidget(yours, 1)
        lay.addLayout(row)
        why = QLabel("Why does the agent think so?")
        why.setStyleSheet("font-weight: 600; padding-top: 8px;")
        lay.addWidget(why)
        if not p.sources:
            lay.addWidget(muted_label("It named no message it drew this from." if not v.sources else
                                      "Its sources are not readable here (another compartment, or erased)."))
        for s in p.sources:
            card, cl = _box(safe_text(f"{s.type or 'record'} by {s.writer}, {fmt_time(s.ts)}", 200, single_line=True))
            text = QLabel(safe_text(s.text, 600))
            text.setTextFormat(Qt.TextFormat.PlainText)
            text.setWordWrap(True)
            cl.addWidget(text)
            if s.conversation:
                b = QPushButton("Open in its conversation")
                b.setAccessibleName(f"open the source message \u201c{safe_text(s.text, 40, single_line=True)}\u201d "
                                    "in its conversation")
                b.clicked.connect(lambda _=False, rid=s.id: self.window_.open_in_thread(rid))
                cl.addWidget(b)
            lay.addWidget(card)
        lay.addStretch(1)
        self.card_area.setWidget(holder)

    # ---------------------------------------------------------------------------- confirm and reject

    def _act(self, what: str) -> None:
        chosen = self.selected()
        if not chosen:
            return
        ids = [p.record.id for p in chosen]
        n = len(ids)
        label = (f"\u201c{safe_text(chosen[0].record.text, 60, single_line=True)}\u201d" if n == 1
                 else f"{n} proposals")

        if what == "reject":
            def rejected(_changes: Changes) -> None:
                self.status_message.emit(f"Rejected {label}.")
                self.window_.offer_undo(f"Rejected {label}.", undo_reject_job([p.record for p in chosen]),
                                        f"{label} waits in your inbox again.")

            self.client.mutate(lambda ctx: ctx.vault.reject(ids), rejected, self.window_.show_error, context=self,
                               label="rejecting")
            return

        def confirmed(result: Any) -> None:
            self.status_message.emit(f"Confirmed {label}: it is your own word now.")
            self.window_.offer_undo(f"Confirmed {label}.", undo_confirm_job(result.value),
                                    f"Undone: {label} waits in your inbox again.")

        def ask_then_confirm(replaced: list[tuple[str, str, str]]) -> None:
            if replaced and not Ask.confirm(
                    self, "Replace your own value?",
                    "\n".join(f"{key}: you set \u201c{yours}\u201d; the proposal says \u201c{theirs}\u201d."
                              for key, yours, theirs in replaced)
                    + "\n\nConfirming makes the proposed value yours, in place of what you set.", yes="Replace"):
                return
            self.client.mutate(lambda ctx: confirm_job(ctx.vault, ids), confirmed, self.window_.show_error,
                               context=self, label="confirming")

        self.client.submit(lambda ctx: replaced_values(ctx.vault, ids), ask_then_confirm, self.window_.show_error,
                           context=self)


@dataclass(frozen=True)
class Confirmed:
    """What a confirmation changed (broadcast), and each proposal with its fact before (for undo)."""

    changes: Changes
    value: list[tuple[RecordView, FactView | None]]


def confirm_job(vault: Any, ids: list[bytes]) -> Confirmed:
    """On the worker: remember each proposal's fact as it is, then confirm (replacing the user's value,
    which the person agreed to)."""
    before = []
    for rid in ids:
        p = vault.record(rid)
        if p is not None:
            before.append((p, vault.fact(p.key, p.compartment) if p.key else None))
    return Confirmed(vault.confirm(ids, replace=True), before)


def replaced_values(vault: Any, ids: list[bytes]) -> list[tuple[str, str, str]]:
    """On the worker: (key, the user's value, the proposed value) for each proposal whose
    confirmation would replace a different value the user set."""
    out = []
    for rid in ids:
        p = vault.record(rid)
        if p is None or p.key is None:
            continue
        f = vault.fact(p.key, p.compartment)
        if f.status not in ("ok", "conflict"):
            continue  # no value of the user's (none yet, or forgotten): nothing is replaced
        for b in (f.candidates if f.status == "conflict" else [f.current] if f.current is not None else []):
            if b.kind_name == "PUT" and b.value != p.value:
                out.append((p.key, b.text, p.text))
    return out
