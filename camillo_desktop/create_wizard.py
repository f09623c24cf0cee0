"""Creating a vault: a folder, a passphrase with strength feedback, then the recovery phrase shown
once (with a warning) and confirmed by re-typing three words chosen at random.

The vault is created on the worker when the user leaves the passphrase page, which is a commit
page: once the vault exists there is no going back to choose another passphrase.  The phrase exists
only in this wizard's memory and is cleared when it closes.  Every override of a QWizard(Page)
virtual is wrapped by :func:`~camillo_desktop.guard.qt_virtual` (an exception escaping one has
crashed the app).  GUI thread only.
"""

from __future__ import annotations

import os
import secrets
from typing import Any

from camillo import Vault
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QVBoxLayout,
    QWizard,
    QWizardPage,
)

from .guard import qt_virtual
from .widgets import SecretEdit, StrengthMeter, muted_label, passphrase_strength, path_field

WARNING = ("Write these 24 words down, in order, and keep them somewhere safe and offline. They are shown only "
           "now. Anyone who has them can open your vault; if you lose them and your passphrase and your devices, "
           "nobody (not Camillo, not your sync service) can get your memory back.")


class WherePage(QWizardPage):
    def __init__(self) -> None:
        super().__init__()
        self.setTitle("Where should your vault live?")
        self.setSubTitle("Choose an empty folder. A folder your sync service already carries (Dropbox, iCloud Drive, "
                         "Syncthing, a NAS) keeps it on all your devices; the service only ever sees ciphertext.")
        lay = QFormLayout(self)
        self.folder, row = path_field(self._browse, placeholder=os.path.expanduser("~/Memory"),
                                      accessible="vault folder")
        lay.addRow("Folder", row)
        self.device = QLineEdit()
        import socket

        self.device.setText(socket.gethostname() or "my computer")
        lay.addRow("This computer's name", self.device)
        self.error = QLabel("")
        self.error.setObjectName("Error")
        lay.addRow("", self.error)
        self.registerField("folder*", self.folder)
        self.folder.textChanged.connect(lambda _t: self.error.setText(""))

    def _browse(self) -> None:
        path = QFileDialog.getExistingDirectory(self, "Choose an empty folder for the vault")
        if path:
            self.folder.setText(path)

    @qt_virtual(False)
    def validatePage(self) -> bool:
        path = os.path.abspath(os.path.expanduser(self.folder.text().strip()))
        if os.path.exists(path) and os.listdir(path):
            self.error.setText("This folder is not empty; choose an empty or a new folder.")
            return False
        self.folder.setText(path)
        return True


class PassphrasePage(QWizardPage):
    def __init__(self, wizard: CreateVaultWizard) -> None:
        super().__init__()
        self.wiz = wizard
        self.setTitle("Choose a passphrase")
        self.setSubTitle("It unlocks the vault on any device. Five or more unrelated words are easy to remember and "
                         "hard to guess.")
        lay = QVBoxLayout(self)
        self.first = SecretEdit("passphrase")
        self.second = SecretEdit("the same passphrase again")
        self.meter = StrengthMeter()
        self.first.edit.textChanged.connect(self._changed)
        self.second.edit.textChanged.connect(self._changed)
        lay.addWidget(self.first)
        lay.addWidget(self.meter)
        lay.addWidget(self.second)
        self.error = QLabel("")
        self.error.setObjectName("Error")
        lay.addWidget(self.error)
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.hide()
        lay.addWidget(self.progress)
        lay.addStretch(1)
        self._created = False
        # Leaving this page creates the vault with this passphrase: Back must not lead here again,
        # where a different passphrase would be accepted and silently ignored.
        self.setCommitPage(True)
        self.setButtonText(QWizard.WizardButton.CommitButton, "Create the vault")

    @qt_virtual()
    def initializePage(self) -> None:
        self.first.setFocus()  # the page asks for a passphrase: typing goes there

    def _changed(self) -> None:
        self.meter.update_for(self.first.text())
        self.error.setText("")
        self.completeChanged.emit()

    @qt_virtual(False)
    def isComplete(self) -> bool:
        return bool(self.first.text()) and self.first.text() == self.second.text()

    def _buttons(self, enabled: bool) -> None:
        for which in (QWizard.WizardButton.NextButton, QWizard.WizardButton.CommitButton,
                      QWizard.WizardButton.BackButton):
            button = self.wiz.button(which)
            if button is not None:
                button.setEnabled(enabled)

    @qt_virtual(False)
    def validatePage(self) -> bool:
        if self._created:
            return True
        if passphrase_strength(self.first.text())[0] < 2:
            self.error.setText("This passphrase is too easy to guess. Add words until the meter says fair or better.")
            return False
        self.progress.show()
        self._buttons(False)
        self.wiz.create_vault(self.first.text(), self._done, self._failed)
        return False  # moves on when the vault exists

    def _done(self) -> None:
        self._created = True
        self.progress.hide()
        self.first.clear()
        self.second.clear()
        self.wiz.next()

    def _failed(self, exc: BaseException) -> None:
        self.progress.hide()
        self._buttons(True)
        self.error.setText(str(exc))


class PhrasePage(QWizardPage):
    def __init__(self, wizard: CreateVaultWizard) -> None:
        super().__init__()
        self.wiz = wizard
        self.setTitle("Your recovery phrase")
        lay = QVBoxLayout(self)
        warn = QLabel(WARNING)
        warn.setWordWrap(True)
        warn.setStyleSheet("color: #b45309; font-weight: 600;")
        lay.addWidget(warn)
        self.grid = QGridLayout()
        lay.addLayout(self.grid)
        self.written = QCheckBox("I have written the 24 words down")
        self.written.toggled.connect(lambda _on: self.completeChanged.emit())
        lay.addWidget(self.written)
        lay.addStretch(1)

    def wipe(self) -> None:
        """Remove the words from the screen."""
        while self.grid.count():
            item = self.grid.takeAt(0)
            if item.widget():
                item.widget().deleteLater()

    @qt_virtual()
    def initializePage(self) -> None:
        self.wipe()
        for i, word in enumerate(self.wiz.phrase.split()):
            label = QLabel(f"{i + 1:>2}. {word}")
            label.setTextFormat(Qt.TextFormat.PlainText)
            label.setStyleSheet("font-family: monospace; font-size: 14px; padding: 2px 10px;")
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
            self.grid.addWidget(label, i % 8, i // 8)

    @qt_virtual(False)
    def isComplete(self) -> bool:
        return self.written.isChecked()


class CheckPage(QWizardPage):
    def __init__(self, wizard: CreateVaultWizard) -> None:
        super().__init__()
        self.wiz = wizard
        self.setTitle("Check your recovery phrase")
        self.setSubTitle("Type the three words asked for, from what you wrote down.")
        self.form = QFormLayout(self)
        self.edits: list[tuple[int, QLineEdit]] = []

    @qt_virtual()
    def initializePage(self) -> None:
        while self.form.rowCount():
            self.form.removeRow(0)
        words = self.wiz.phrase.split()
        picks = sorted(secrets.SystemRandom().sample(range(len(words)), 3))
        self.edits = []
        for i in picks:
            edit = QLineEdit()
            edit.setAccessibleName(f"word {i + 1}")
            edit.textChanged.connect(lambda _t: self.completeChanged.emit())
            self.form.addRow(f"Word {i + 1}", edit)
            self.edits.append((i, edit))
        self.form.addRow(muted_label("Go back if you need to see the words again."))
        self.edits[0][1].setFocus()

    def wipe(self) -> None:
        """Forget the words typed."""
        for _i, edit in self.edits:
            edit.clear()

    @qt_virtual(False)
    def isComplete(self) -> bool:
        # Qt asks again while the wizard closes, after the phrase has been wiped: no words, not complete.
        words = self.wiz.phrase.split()
        return bool(self.edits) and all(i < len(words) and e.text().strip().lower() == words[i]
                                        for i, e in self.edits)


class CreateVaultWizard(QWizard):
    def __init__(self, client: Any, parent: Any = None) -> None:
        super().__init__(parent)
        self.client = client
        self.setWindowTitle("Create a vault")
        self.setWizardStyle(QWizard.WizardStyle.ModernStyle)
        self.setOption(QWizard.WizardOption.NoBackButtonOnStartPage, True)
        self.where = WherePage()
        self.passphrase = PassphrasePage(self)
        self.phrase_page = PhrasePage(self)
        self.check = CheckPage(self)
        for page in (self.where, self.passphrase, self.phrase_page, self.check):
            self.addPage(page)
        self.phrase = ""
        self._pending_phrase = ""
        self.info: dict[str, Any] | None = None
        self.resize(640, 520)

    def create_vault(self, passphrase: str, done, failed) -> None:
        path = self.where.folder.text()
        name = self.where.device.text().strip() or None

        def opener(ctx):
            vault, phrase = Vault.create(path, passphrase, device_name=name)
            self._pending_phrase = phrase
            return vault

        def opened(info):
            self.info = info
            self.phrase = self._pending_phrase
            self._pending_phrase = ""
            done()

        self.client.open_vault(opener, opened, failed, context=self)

    def back(self) -> None:
        """Qt disables the Back button after a commit page; refuse a programmatic back() too."""
        visited = self.visitedIds()
        if len(visited) >= 2 and self.page(visited[-2]).isCommitPage():
            return
        super().back()

    @qt_virtual()
    def done(self, result: int) -> None:
        try:
            super().done(result)
        finally:
            self.phrase = ""
            self._pending_phrase = ""
            self.phrase_page.wipe()
            self.check.wipe()

    @classmethod
    def run(cls, client: Any, parent: Any = None) -> dict[str, Any] | None:
        w = cls(client, parent)
        return w.info if w.exec() and w.info else None
