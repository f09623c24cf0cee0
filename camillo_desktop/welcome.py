"""The welcome screen: create a vault, join one another device of the person has ("Join an
existing vault": :class:`~camillo_desktop.flows.JoinDialog`), open one, reopen a recent one, or try
the demo.

"Try the demo vault" builds the demo in a temporary folder, reported by ``temp_dir_created`` so that
the app removes it on quit, and shows the build's and the open's progress.  GUI thread only; opening
and creating run on the vault worker.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

from camillo import DEMO_PASSPHRASE, Unlock, Vault, build_demo_vault
from PySide6.QtCore import QSize, Qt, Signal
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from . import icons
from .create_wizard import CreateVaultWizard
from .dialogs import UnlockDialog
from .settings import Settings
from .text import safe_text
from .widgets import muted_label


class WelcomeWindow(QWidget):
    opened = Signal(object)  # the open vault's info
    temp_dir_created = Signal(str)  # a temporary folder to remove on quit (the demo vault's)

    def __init__(self, client: Any, settings: Settings) -> None:
        super().__init__()
        self.client = client
        self.settings = settings
        self.setWindowTitle("Welcome to Camillo")
        self.setWindowIcon(icons.app_icon())
        self.resize(760, 520)
        lay = QHBoxLayout(self)
        left = QVBoxLayout()
        logo = QLabel()
        logo.setPixmap(icons.app_icon().pixmap(QSize(96, 96)))
        left.addWidget(logo)
        title = QLabel("Camillo")
        title.setStyleSheet("font-size: 28px; font-weight: 700;")
        left.addWidget(title)
        left.addWidget(muted_label("Your agents' memory, encrypted, portable, and yours. Every conversation and "
                                   "every fact your agents learn about you, in a vault no host can read."))
        left.addSpacing(12)
        for text, slot, primary in (("Create a vault\u2026", self._create, True),
                                    ("Join an existing vault\u2026", self._join, False),
                                    ("Open a vault folder\u2026", self._open_folder, False),
                                    ("Open a .vmem file\u2026", self._open_file, False),
                                    ("Try the demo vault", self._demo, False)):
            b = QPushButton(text)
            if primary:
                b.setObjectName("Primary")
            b.setMinimumHeight(34)
            b.clicked.connect(slot)
            left.addWidget(b)
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.hide()
        left.addWidget(self.progress)
        self.progress_text = muted_label("")
        left.addWidget(self.progress_text)
        left.addStretch(1)
        lay.addLayout(left, 1)
        right = QVBoxLayout()
        right.addWidget(QLabel("Recent vaults"))
        self.recent = QListWidget()
        self.recent.setAccessibleName("recent vaults")
        for path in settings.recent_vaults():
            name = os.path.basename(path.rstrip("/")) or path
            item = QListWidgetItem(safe_text(f"{name}\n{path}", 600))
            item.setData(Qt.ItemDataRole.UserRole, path)
            self.recent.addItem(item)
        if not self.recent.count():
            right.addWidget(muted_label("Vaults you open appear here."))
        self.recent.itemActivated.connect(lambda item: self._unlock(item.data(Qt.ItemDataRole.UserRole)))
        right.addWidget(self.recent, 1)
        lay.addLayout(right, 1)

    def _unlock(self, path: str) -> None:
        info = UnlockDialog.ask(self.client, path, self)
        if info:
            self.opened.emit(info)

    def _create(self) -> None:
        info = CreateVaultWizard.run(self.client, self)
        if info:
            self.opened.emit(info)

    def _join(self) -> None:
        """This computer becomes a new device of a vault another device of the person shows a code for."""
        from .flows import JoinDialog

        self.join_dialog = dlg = JoinDialog(self.client, self)
        dlg.opened.connect(self.opened.emit)
        dlg.open()

    def _open_folder(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Open a vault folder")
        if path:
            self._unlock(path)

    def _open_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open a .vmem file", "", "VMEM vaults (*.vmem);;All files (*)")
        if path:
            self._unlock(path)

    def _demo(self) -> None:
        base = tempfile.mkdtemp(prefix="camillo-demo-")
        self.temp_dir_created.emit(base)
        path = os.path.join(base, "Demo vault")

        def opener(ctx):
            info = build_demo_vault(path, progress=lambda m: ctx.progress(0, 0, m))
            return Vault.open(path, Unlock.passphrase(DEMO_PASSPHRASE), home=info.homes["desktop"],
                              progress=lambda d, t: ctx.progress(d, t, "Reading the vault"))

        def failed(exc: BaseException) -> None:
            self.setEnabled(True)
            self.progress.hide()
            self.progress_text.setText(safe_text(f"The demo could not be built: {exc}", 600))

        self.setEnabled(False)
        self.progress.setRange(0, 0)
        self.progress.show()
        self.progress_text.setText("Building the demo vault\u2026")
        self.client.open_vault(opener, self.opened.emit, failed, context=self, on_progress=self._progress)

    def _progress(self, done: int, total: int, what: str) -> None:
        if total > 0:
            self.progress.setRange(0, total)
            self.progress.setValue(min(done, total))
        else:
            self.progress.setRange(0, 0)
        self.progress_text.setText(safe_text(what, 200, single_line=True))
