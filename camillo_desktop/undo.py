"""Undo, the only way a vault allows: new records that put back what an action changed.

Nothing in a vault is rewritten.  Confirming, rejecting, forgetting and resolving each offer an undo
bar for :data:`UNDO_SECONDS` seconds; undoing writes new records (signed by this device) that bring
back what was there before:

* **reject** a proposal: the proposal is proposed again (a copy: the same value, class and sources,
  ``meta.restored_from`` naming the original), back in the inbox;
* **confirm** a proposal: the value the user had before is written again (or, if there was none, the
  key is forgotten), and the proposal is proposed again;
* **forget** a fact: its value is written again; **forget** a message: it is written again (a copy,
  at its time, in its conversation);
* **resolve** a conflict: the value the conflict showed first is the user's value again and the
  other candidate waits beside it in the inbox (one device's proposals of a key supersede each other,
  spec §19.3, so with more than two candidates the others stay in the key's history, where "Propose
  it again" brings each back).

The same functions serve later, from a record's history: "Restore" on a forgotten record, "Make this
the value again" and "Propose it again" in a fact's history.  Erasure is never undoable (it destroys
keys) and never appears here.

:class:`UndoBar`: GUI thread only.  The ``*_job`` functions and what they return run on the vault
worker (they take the vault).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from camillo import Authority, Changes, FactView, NewRecord, RecordView, UsageError
from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget

from .text import safe_text

UNDO_SECONDS = 8
Job = Callable[[Any], Changes]  # runs on the worker with the vault; returns what it changed


def _meta(v: RecordView) -> dict[str, Any]:
    meta = {k: x for k, x in v.meta.items() if isinstance(x, (str, bool, int)) and k != "restored_from"}
    meta["restored_from"] = v.id.hex()
    return meta


def propose_again(vault: Any, v: RecordView, *, authority: Authority | None = None,
                  sources: list[bytes] | None = None) -> Changes:
    """A proposal again: a copy of ``v`` (value, type, class, sources) beside the fact's value."""
    klass = authority if authority is not None else Authority(v.claimed_class if v.claimed_class is not None
                                                              else Authority.INFERRED)
    if klass >= Authority.USER:
        klass = Authority.OBSERVED  # a proposal is below the user's word
    item = NewRecord(type=v.type or "fact", key=v.key, value=v.value, authority=klass,
                     sources=list(v.sources) if sources is None else sources, pred=[], meta=_meta(v))
    return vault.append([item], compartment=v.compartment)


def set_value_again(vault: Any, v: RecordView, *, pred: list[bytes] | None = None) -> Changes:
    """``v``'s value as the user's word again (a new user PUT of its key)."""
    item = NewRecord(type=v.type or "fact", key=v.key, value=v.value, authority=Authority.USER,
                     sources=list(v.sources), pred=pred, meta=_meta(v))
    return vault.append([item], compartment=v.compartment)


def write_again(vault: Any, v: RecordView) -> Changes:
    """A forgotten record back: a fact's value as it was (the user's, or a proposal), a message as a copy."""
    if v.key is not None:
        return set_value_again(vault, v) if v.effective_label == "user" else propose_again(vault, v)
    item = NewRecord(type=v.type or "note", value=v.value,
                     authority=Authority(v.claimed_class) if v.claimed_class is not None else None,
                     sources=list(v.sources), ts=v.ts, meta=_meta(v))
    return vault.append([item], compartment=v.compartment)


# ------------------------------------------------------------------------------------------ jobs


def restore_job(rid: bytes) -> Job:
    def job(vault: Any) -> Changes:
        v = vault.record(rid)
        if v is None or v.erased:
            raise UsageError("this record is no longer in the vault (erased); there is nothing to restore")
        return write_again(vault, v)

    return job


def undo_reject_job(proposals: list[RecordView]) -> Job:
    def job(vault: Any) -> Changes:
        changes = Changes()
        for p in proposals:
            changes = changes | propose_again(vault, p)
        return changes

    return job


def undo_confirm_job(pairs: list[tuple[RecordView, FactView | None]]) -> Job:
    """``pairs``: each confirmed proposal with its fact as it was before the confirmation."""

    def job(vault: Any) -> Changes:
        changes = Changes()
        for p, before in pairs:
            had = before.current if before is not None and before.status in ("ok", "conflict") else None
            if had is not None and had.kind_name == "PUT":
                changes = changes | set_value_again(vault, had, pred=[p.id])
            else:
                changes = changes | vault.forget(key=p.key, compartment=p.compartment)
            changes = changes | propose_again(vault, p)
        return changes

    return job


def undo_forget_fact_job(before: FactView) -> Job:
    def job(vault: Any) -> Changes:
        if before.current is None or before.current.kind_name != "PUT":
            raise UsageError(f"{before.key} had no value to bring back")
        return set_value_again(vault, before.current)

    return job


def undo_resolve_job(before: FactView) -> Job:
    def job(vault: Any) -> Changes:
        first = before.current or (before.candidates[0] if before.candidates else None)
        if first is None:
            return vault.forget(key=before.key, compartment=before.compartment)
        changes = set_value_again(vault, first)  # written first: a later proposal never displaces it
        other = next((c for c in before.candidates if c.id != first.id), None)
        if other is not None:
            changes = changes | propose_again(vault, other, authority=Authority.OBSERVED, sources=[other.id])
        return changes

    return job


# ------------------------------------------------------------------------------------------ the bar


class UndoBar(QFrame):
    """"Confirmed “mornings”.  [Undo]" for a few seconds after an action."""

    undo_requested = Signal(object, str)  # the job, what to say once undone

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("UndoBar")
        self.setAccessibleName("undo the last change")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(12, 6, 8, 6)
        self.label = QLabel("")
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.label.setWordWrap(True)
        lay.addWidget(self.label, 1)
        self.button = QPushButton("Undo")
        self.button.clicked.connect(self._undo)
        lay.addWidget(self.button)
        close = QToolButton()
        close.setText("\u2715")
        close.setAccessibleName("close the undo bar")
        close.clicked.connect(self.dismiss)
        lay.addWidget(close)
        self.timer = QTimer(self)
        self.timer.setSingleShot(True)
        self.timer.timeout.connect(self.dismiss)
        self._job: Job | None = None
        self._undone = ""
        self.hide()

    def offer(self, text: str, job: Job, undone: str) -> None:
        """Say what was done, with Undo for UNDO_SECONDS seconds (``undone``: what to say after undoing)."""
        self.label.setText(safe_text(text, 300, single_line=True))
        self.button.setAccessibleName(safe_text(f"undo: {text}", 300, single_line=True))
        self._job, self._undone = job, undone
        self.button.setEnabled(True)
        self.show()
        self.timer.start(UNDO_SECONDS * 1000)

    @property
    def pending(self) -> bool:
        return self._job is not None and self.isVisible()

    def _undo(self) -> None:
        job, self._job = self._job, None
        self.dismiss()
        if job is not None:
            self.undo_requested.emit(job, self._undone)

    def dismiss(self) -> None:
        self.timer.stop()
        self._job = None
        self.hide()
