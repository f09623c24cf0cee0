"""Vault → Merge another copy: bring in what another copy of this vault has (a folder, or a ``.vmem``
file: a backup, a USB stick, a copy a sync service kept apart), and say what came in and which
conflicts it opened.

The merge copies the other copy's files this folder lacks (``Vault.merge``: the union of files is
the merge, nothing is overwritten, a different vault is refused), then reads them
(``Vault.refresh``).  The job returns a :class:`MergeResult` carrying the Changes the refresh
returned, so only the views showing what moved reload.  GUI thread only; the job runs on the vault
worker.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

import camillo
from camillo import Changes, FactView, UsageError
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QVBoxLayout,
)

from .dialogs import BaseDialog
from .text import safe_text
from .widgets import muted_label


@dataclass(frozen=True)
class MergeResult:
    files: int  # files copied in
    kinds: dict[str, int]  # new records by what they are (messages, facts ...)
    conflicts: list[FactView]  # conflicts the merge opened
    changes: Changes = field(default_factory=Changes)

    def lines(self) -> list[str]:
        n = sum(self.kinds.values())
        if not self.files:
            return ["Nothing came in: this vault already had everything the other copy has."]
        what = ", ".join(f"{count} {SINGULAR.get(kind, kind) if count == 1 else kind}"
                         for kind, count in sorted(self.kinds.items(), key=lambda x: (-x[1], x[0])))
        out = [f"{n} new record{'s' if n != 1 else ''} came in" + (f" ({what})." if what else ".")]
        if self.conflicts:
            out.append(f"It opened {len(self.conflicts)} conflict{'s' if len(self.conflicts) != 1 else ''}: the two "
                       "copies hold different values for the same thing, written without knowing of each other:")
            for f in self.conflicts:
                values = " / ".join(f"\u201c{c.text}\u201d" for c in f.candidates)
                out.append(f"  \u2022 {f.key} ({f.compartment}): {values}")
        else:
            out.append("It opened no conflict.")
        return out


SINGULAR = {"messages": "message", "facts and preferences": "fact or preference", "other records": "other record"}


def _kind(v: Any) -> str:
    if v.type == "message":
        return "messages"
    if v.key is not None:
        return "facts and preferences"
    return "other records"


def merge_job(other: str) -> Any:
    def job(ctx: Any) -> MergeResult:
        vault = ctx.vault
        if os.path.isfile(vault.location):
            raise UsageError("this vault is a single .vmem file: unpack it into a folder first to merge other "
                             "copies into it")
        before = {(f.compartment, f.key) for f in vault.conflicts()}
        copied = camillo.Vault.merge(vault.location, other)
        changes = vault.refresh()
        kinds: dict[str, int] = {}
        for v in vault.records(changes.records):
            kinds[_kind(v)] = kinds.get(_kind(v), 0) + 1
        opened = [f for f in vault.conflicts() if (f.compartment, f.key) not in before]
        return MergeResult(len(copied), kinds, opened, changes)

    return job


class MergeDialog(BaseDialog):
    """Choose the other copy, merge it, read what came in."""

    def __init__(self, window: Any) -> None:
        super().__init__(window, "Merge another copy")
        self.window_ = window
        self.setMinimumWidth(600)
        lay = QVBoxLayout(self)
        lay.addWidget(muted_label("Another copy of this vault (a folder, or a .vmem file) may hold changes this one "
                                  "lacks: a backup, a copy on a USB stick, a copy your sync service kept apart. "
                                  "Merging brings them in; nothing here is overwritten or lost."))
        row = QHBoxLayout()
        self.path = QLineEdit()
        self.path.setPlaceholderText("the other copy: a vault folder or a .vmem file")
        self.path.setAccessibleName("the other copy")
        row.addWidget(self.path, 1)
        folder = QPushButton("Folder\u2026")
        folder.clicked.connect(self._folder)
        file = QPushButton(".vmem file\u2026")
        file.clicked.connect(self._file)
        row.addWidget(folder)
        row.addWidget(file)
        lay.addLayout(row)
        self.result = QLabel("")
        self.result.setWordWrap(True)
        self.result.setTextFormat(Qt.TextFormat.PlainText)
        self.result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.result)
        buttons = QDialogButtonBox()
        self.merge = buttons.addButton("Merge", QDialogButtonBox.ButtonRole.AcceptRole)
        self.merge.setObjectName("Primary")
        self.review = buttons.addButton("Review the conflicts", QDialogButtonBox.ButtonRole.ActionRole)
        self.review.hide()
        self.review.clicked.connect(self._review)
        buttons.addButton(QDialogButtonBox.StandardButton.Close)
        buttons.accepted.connect(self.run)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.report: MergeResult | None = None
        self.path.setFocus()

    def _folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "The other copy (a vault folder)")
        if path:
            self.path.setText(path)

    def _file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "The other copy (a .vmem file)", "", "VMEM vaults (*.vmem)")
        if path:
            self.path.setText(path)

    def run(self) -> None:
        other = self.path.text().strip()
        if not other:
            self.result.setText("Choose the other copy first.")
            return
        self.merge.setEnabled(False)
        self.result.setText("Merging\u2026")

        def done(result: MergeResult) -> None:
            self.report = result
            self.merge.setEnabled(True)
            self.result.setText(safe_text("\n".join(result.lines()), 8000))  # keys and values are untrusted
            self.review.setVisible(bool(result.conflicts))

        def failed(exc: BaseException) -> None:
            self.merge.setEnabled(True)
            self.result.setText(safe_text(f"Not merged: {exc}", 2000) + "\nNothing was changed.")

        self.window_.client.mutate(merge_job(other), done, failed, context=self, label="merging another copy")

    def _review(self) -> None:
        first = self.report.conflicts[0].key if self.report and self.report.conflicts else None
        self.accept()
        self.window_.show_view("conflicts", first)
