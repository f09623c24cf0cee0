"""Import and export from the desktop: bring a ChatGPT, Claude, VaultMem, Portable Memory or PAM
export into the vault, or write the vault out as Portable Memory or PAM.

The work is :func:`camillo.run_import` / :func:`camillo.run_export`, run on the vault worker with
progress; the dialog shows the report (what was imported, what was skipped and why) and leads to
the inbox when memories wait for confirmation.  The import job returns the vault's
:class:`camillo.ImportReport`, whose ``changes`` (what it appended) the client broadcasts, so only
the views showing what moved reload.  Importing twice adds nothing.  GUI thread only; the jobs run
on the vault worker.
"""

from __future__ import annotations

import os
from typing import Any

import camillo
from camillo import ImportReport
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QComboBox,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QVBoxLayout,
    QWidget,
)

from .dialogs import Ask, BaseDialog
from .text import safe_text
from .widgets import SecretEdit, muted_label, path_field

# kind -> (menu label, what to choose, explanation)
IMPORT_KINDS: dict[str, tuple[str, str, str]] = {
    "chatgpt": ("ChatGPT export\u2026", "file",
                "The ZIP you get from ChatGPT (Settings \u2192 Data controls \u2192 Export), or its "
                "conversations.json. Conversations come in as messages; ChatGPT's memories and your custom "
                "instructions wait in your inbox."),
    "claude": ("Claude export\u2026", "file",
               "The ZIP (or unpacked folder) from Claude (Settings \u2192 Privacy \u2192 Export data). "
               "Conversations, projects and Claude's memories; the memories wait in your inbox."),
    "vaultmem": ("VaultMem vault\u2026", "folder",
                 "A VaultMem vault folder and its passphrase. Nothing in it is changed."),
    "portable-memory": ("Portable Memory bundle (.mem)\u2026", "folder",
                        "A Portable Memory (.mem) folder. Preferences and instructions wait in your inbox."),
    "pam": ("PAM memory store\u2026", "file",
            "A PAM memory-store.json (or its folder). Preferences and instructions wait in your inbox."),
}
EXPORT_KINDS: dict[str, str] = {"portable-memory": "Portable Memory (.mem)\u2026", "pam": "PAM\u2026"}


class ImportDialog(BaseDialog):
    """Choose the source and the compartment, run the import on the worker, show the report."""

    def __init__(self, window: Any, kind: str) -> None:
        label, pick, explain = IMPORT_KINDS[kind]
        super().__init__(window, "Import: " + label.rstrip("\u2026"))
        self.window_ = window
        self.kind, self.pick = kind, pick
        self.setMinimumWidth(620)
        lay = QVBoxLayout(self)
        lay.addWidget(muted_label(explain + " Importing the same export again adds nothing."))
        form = QFormLayout()
        self.source, row = path_field(self._browse, accessible="source")
        form.addRow("From", row)
        self.compartment = QComboBox()
        for name in window.info.get("compartments", []) or ["personal"]:
            self.compartment.addItem(safe_text(name, 60, single_line=True), name)
        self.compartment.setCurrentIndex(max(0, self.compartment.findData("personal")))  # unless the person picks
        form.addRow("Into compartment", self.compartment)
        self.passphrase = SecretEdit("the VaultMem vault's passphrase")
        self.passphrase_row = QWidget()
        pl = QHBoxLayout(self.passphrase_row)
        pl.setContentsMargins(0, 0, 0, 0)
        pl.addWidget(self.passphrase)
        if kind == "vaultmem":
            form.addRow("Its passphrase", self.passphrase_row)
        lay.addLayout(form)
        self.bar = QProgressBar()
        self.bar.hide()
        lay.addWidget(self.bar)
        self.result = QLabel("")
        self.result.setWordWrap(True)
        self.result.setTextFormat(Qt.TextFormat.PlainText)
        self.result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(self.result)
        buttons = QDialogButtonBox()
        self.start = buttons.addButton("Import", QDialogButtonBox.ButtonRole.AcceptRole)
        self.start.setObjectName("Primary")
        self.inbox = buttons.addButton("Open the inbox", QDialogButtonBox.ButtonRole.ActionRole)
        self.inbox.hide()
        self.inbox.clicked.connect(self._open_inbox)
        self.close_button = buttons.addButton(QDialogButtonBox.StandardButton.Close)
        buttons.accepted.connect(self.run)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.report: ImportReport | None = None
        self.error: BaseException | None = None

    def _browse(self) -> None:
        if self.pick == "folder":
            path = QFileDialog.getExistingDirectory(self, "Choose the folder")
        else:
            path, _ = QFileDialog.getOpenFileName(self, "Choose the export", os.path.expanduser("~"),
                                                  "Exports (*.zip *.json);;All files (*)")
        if path:
            self.source.setText(path)

    def run(self) -> None:
        source = self.source.text().strip()
        if not source:
            self.result.setText("Choose the export to import.")
            return
        passphrase = self.passphrase.text() if self.kind == "vaultmem" else None
        if self.kind == "vaultmem" and not passphrase:
            self.result.setText("Type the VaultMem vault's passphrase.")
            return
        self.passphrase.clear()
        kind, compartment = self.kind, self.compartment.currentData()
        self.start.setEnabled(False)
        self.bar.setRange(0, 0)
        self.bar.show()
        self.result.setText("Reading and checking the whole export before writing anything\u2026")

        def job(ctx: Any) -> ImportReport:
            return camillo.run_import(ctx.vault, kind, source, compartment=compartment, passphrase=passphrase,
                                      progress=lambda done, total: ctx.progress(done, total, "importing"))

        def progress(done: int, total: int, _what: str) -> None:
            self.bar.setRange(0, max(total, 1))
            self.bar.setValue(done)

        def done(report: ImportReport) -> None:
            self.report = report
            self.bar.hide()
            self.start.setEnabled(True)
            # The report quotes titles and names from the export: shown escaped.
            self.result.setText(safe_text("\n".join(report.lines()), 20_000))
            self.inbox.setVisible(report.proposals > 0)

        def failed(exc: BaseException) -> None:
            self.error = exc
            self.bar.hide()
            self.start.setEnabled(True)
            self.result.setText(safe_text(f"Not imported: {exc}", 2000)
                                + "\nNothing was written for the part that failed.")

        self.window_.client.mutate(job, done, failed, context=self, on_progress=progress,
                                   label=f"importing {IMPORT_KINDS[kind][0].rstrip(chr(0x2026))}")

    def _open_inbox(self) -> None:
        self.accept()
        self.window_.show_view("inbox")


def export_vault(window: Any, kind: str, out: str | None = None) -> None:
    """Write the vault out (plaintext!) to a new or empty folder, after saying so."""
    if out is None:
        out = QFileDialog.getExistingDirectory(window, "Export to an empty folder")
        if not out:
            return
    if not Ask.confirm(window, "Export in plaintext?",
                       f"The export in {out} is not encrypted: anyone who gets the folder can read it. Nothing you "
                       "forgot or erased is included. Keep it out of synced or shared folders and delete it when "
                       "done.", yes="Export"):
        return
    window.client.submit(lambda ctx: camillo.run_export(ctx.vault, kind, out),
                         lambda summary: Ask.inform(window, "Exported", _summary(kind, out, summary)),
                         window.show_error, context=window, label="exporting")


def _summary(kind: str, out: str, summary: dict[str, Any]) -> str:
    counts = ", ".join(f"{v} {k}" for k, v in sorted(summary.items()) if isinstance(v, int))
    return (f"Wrote the {EXPORT_KINDS[kind].rstrip(chr(0x2026))} export to {safe_text(out, 300, single_line=True)}"
            + (f" ({safe_text(counts, 300, single_line=True)})." if counts else "."))
