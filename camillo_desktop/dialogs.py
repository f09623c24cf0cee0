"""Dialogs: unlock, settings, record lists, and the one message-box wrapper tests can answer.

Every dialog derives from :class:`BaseDialog` (remembers its geometry by class name, Esc closes)
and exposes a classmethod tests can drive.  Vault work runs on the worker through the client.
GUI thread only.
"""

from __future__ import annotations

import os
from typing import Any, ClassVar

import camillo
from camillo import Unlock, Vault, VaultError
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QButtonGroup,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QRadioButton,
    QSpinBox,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from . import theme
from .devicenames import DeviceNameField
from .guard import qt_virtual
from .keychain import keychain_name
from .models import HistoryModel
from .settings import Setting, Settings
from .text import safe_text
from .views.detail import DetailPane
from .widgets import SecretEdit, muted_label


class BaseDialog(QDialog):
    """Window-modal when parented; remembers its geometry (Picard's PicardDialog)."""

    def __init__(self, parent: QWidget | None = None, title: str = "") -> None:
        super().__init__(parent)
        self.setWindowTitle(title)
        if parent is not None:
            self.setWindowModality(Qt.WindowModality.WindowModal)
        geometry = QSettings("Camillo", "Camillo").value(f"dialogs/{type(self).__name__}")
        if geometry:
            self.restoreGeometry(geometry)

    @qt_virtual()
    def showEvent(self, event) -> None:
        """Never smaller than the content needs (a remembered size included), never off the screen."""
        super().showEvent(event)
        self.fit()

    def fit(self) -> None:
        layout = self.layout()
        if layout is not None:
            layout.activate()
        wanted = self.size().expandedTo(self.minimumSizeHint())
        screen = self.screen()
        if screen is not None:
            area = screen.availableGeometry()
            wanted = wanted.boundedTo(area.size())
        if wanted != self.size():
            self.resize(wanted)

    @qt_virtual()
    def done(self, result: int) -> None:
        try:
            QSettings("Camillo", "Camillo").setValue(f"dialogs/{type(self).__name__}", self.saveGeometry())
        finally:
            super().done(result)


class Ask:
    """All questions to the user go through here; tests set ``next_answers``."""

    next_answers: ClassVar[list[bool]] = []

    @classmethod
    def confirm(cls, parent: QWidget | None, title: str, text: str, *, yes: str = "Continue",
                destructive: bool = False) -> bool:
        if cls.next_answers:
            return cls.next_answers.pop(0)
        box = QMessageBox(parent)
        box.setIcon(QMessageBox.Icon.Warning if destructive else QMessageBox.Icon.Question)
        box.setWindowTitle(title)
        box.setTextFormat(Qt.TextFormat.PlainText)
        box.setText(text)
        ok = box.addButton(yes, QMessageBox.ButtonRole.AcceptRole)
        box.addButton("Cancel", QMessageBox.ButtonRole.RejectRole)
        box.setDefaultButton(QMessageBox.StandardButton.Cancel if destructive else ok)
        box.exec()
        return box.clickedButton() is ok

    @classmethod
    def inform(cls, parent: QWidget | None, title: str, text: str) -> None:
        if cls.next_answers:
            cls.next_answers.pop(0)
            return
        box = QMessageBox(parent)
        box.setWindowTitle(title)
        box.setTextFormat(Qt.TextFormat.PlainText)
        box.setText(text)
        box.exec()


def device_key_available(path: str) -> bool:
    """On the worker: does this installation hold a device key for the vault at ``path``?"""
    return Vault.device_unlock_available(path)


REVOKED_TEXT = ("Another of your devices revoked this one, so your other devices refuse what it writes. Nothing "
                "was written. If this computer is still yours, you can register it again: it joins the vault as a "
                "new device, with a new key.")


class UnlockDialog(BaseDialog):
    """Passphrase, recovery phrase, or this device's key (offered when the keychain holds one).
    A wrong credential says so and lets the user retry; a damaged vault names the file.  A device
    another device revoked is never registered again unless the person chooses it: the dialog says
    what happened and offers "Register this device again" (the same credential, ``re_register=True``)
    or "Cancel"."""

    def __init__(self, client: Any, path: str, parent: QWidget | None = None) -> None:
        name = os.path.basename(path.split("?")[0].rstrip("/")) if camillo.is_object_store(path) else \
            os.path.basename(path.rstrip("/"))
        super().__init__(parent, f"Unlock {safe_text(name or path, 80, single_line=True)}")
        self.client = client
        self.path = path
        self.setMinimumWidth(480)
        lay = QVBoxLayout(self)
        head = QLabel(f"Unlock the vault\n{safe_text(path, 300, single_line=True)}")
        head.setTextFormat(Qt.TextFormat.PlainText)
        head.setObjectName("ViewTitle")
        lay.addWidget(head)
        self.methods = QButtonGroup(self)
        row = QHBoxLayout()
        self.by_pass = QRadioButton("Passphrase")
        self.by_phrase = QRadioButton("Recovery phrase")
        self.by_device = QRadioButton("This device's key")
        self.by_device.setEnabled(False)
        self.by_device.setToolTip("Available once this computer has been registered (it keeps its key in the OS keychain)")
        for i, b in enumerate((self.by_pass, self.by_phrase, self.by_device)):
            self.methods.addButton(b, i)
            row.addWidget(b)
        self.by_pass.setChecked(True)
        lay.addLayout(row)
        self.secret = SecretEdit("passphrase")
        self.secret.returnPressed.connect(self.unlock)
        lay.addWidget(self.secret)
        self.device_name = DeviceNameField()  # shown only when this installation is new to the vault
        lay.addWidget(self.device_name)
        self.methods.idToggled.connect(self._method_changed)
        self.error = QLabel("")
        self.error.setTextFormat(Qt.TextFormat.PlainText)
        self.error.setWordWrap(True)
        self.error.setObjectName("Error")
        lay.addWidget(self.error)
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.hide()
        lay.addWidget(self.progress)
        self.buttons = buttons = QDialogButtonBox()
        self.unlock_button = buttons.addButton("Unlock", QDialogButtonBox.ButtonRole.AcceptRole)
        self.unlock_button.setObjectName("Primary")
        buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.unlock)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        # Shown instead of the buttons above when this device was revoked (DeviceRevoked).
        self.revoked_buttons = QDialogButtonBox()
        self.register_again_button = self.revoked_buttons.addButton("Register this device again",
                                                                    QDialogButtonBox.ButtonRole.AcceptRole)
        self.register_again_button.setObjectName("Primary")
        self.register_again_button.setToolTip("Open the vault with the same credential and register this computer "
                                              "as a new device")
        self.revoked_buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        self.revoked_buttons.accepted.connect(self.register_again)
        self.revoked_buttons.rejected.connect(self.reject)
        self.revoked_buttons.hide()
        lay.addWidget(self.revoked_buttons)
        self._revoked_unlock: Unlock | None = None  # the credential that was refused as revoked
        self.info: dict[str, Any] | None = None
        self.secret.setFocus()  # whenever the dialog asks for a passphrase, the field has the focus
        client.submit(lambda ctx: device_key_available(path), self._device_available, lambda _e: None, context=self)
        self.device_name.ask_if_new(client, path, self)

    def _device_available(self, available: bool) -> None:
        self.by_device.setEnabled(bool(available))
        if available:
            self.by_device.setChecked(True)

    def _method_changed(self, method: int, checked: bool) -> None:
        if not checked:
            return
        self.secret.setVisible(method != 2)
        self.secret.edit.setPlaceholderText(["passphrase", "the 24 words of your recovery phrase", ""][method])
        self.secret.clear()
        self.error.setText("")
        (self.secret if method != 2 else self.unlock_button).setFocus()

    def unlock(self) -> None:
        method = self.methods.checkedId()
        secret = self.secret.text()
        if method != 2 and not secret:
            self.error.setText("Type your " + ("passphrase." if method == 0 else "recovery phrase."))
            return
        unlock = [Unlock.passphrase, Unlock.recovery, lambda _s: Unlock.device()][method](secret)
        self._open(unlock, re_register=False)

    def register_again(self) -> None:
        """The person chose to register this revoked device again: the same credential, once more,
        with ``re_register=True``."""
        unlock = self._revoked_unlock
        if unlock is None:
            return
        self._open(unlock, re_register=True)

    def _open(self, unlock: Unlock, *, re_register: bool) -> None:
        self.unlock_button.setEnabled(False)
        self.register_again_button.setEnabled(False)
        self.progress.show()
        self.error.setText("")
        path, device_name = self.path, self.device_name.value

        def opener(ctx):
            return Vault.open(path, unlock, re_register=re_register, device_name=device_name,
                              progress=lambda d, t: ctx.progress(d, t, "reading the vault"))

        def failed(exc: BaseException) -> None:
            self._failed(exc, unlock)

        self.client.open_vault(opener, self._opened, failed, context=self, on_progress=self._progress)

    def _show_revoked(self, unlock: Unlock | None) -> None:
        """Ask whether to register this revoked device again (``unlock`` None: back to the form)."""
        self._revoked_unlock = unlock
        revoked = unlock is not None
        for w in (self.by_pass, self.by_phrase, self.by_device, self.secret, self.buttons):
            w.setVisible(not revoked and (w is not self.secret or self.methods.checkedId() != 2))
        self.revoked_buttons.setVisible(revoked)
        self.register_again_button.setEnabled(revoked)
        if revoked:
            self.register_again_button.setFocus()

    def _progress(self, done: int, total: int, _what: str) -> None:
        if total:
            self.progress.setRange(0, total)
            self.progress.setValue(done)

    def _opened(self, info: dict[str, Any]) -> None:
        self.info = info
        self.secret.clear()
        self._revoked_unlock = None
        self.accept()

    def _failed(self, exc: BaseException, unlock: Unlock | None = None) -> None:
        self.progress.hide()
        self.progress.setRange(0, 0)
        self.unlock_button.setEnabled(True)
        self._show_revoked(None)
        # Messages name files of the vault folder, whose names anyone with access to it chose.
        if isinstance(exc, camillo.DeviceRevoked):
            # Its message speaks the command line's language ("--re-register"): the desktop's own words.
            self.error.setText(REVOKED_TEXT)
            self._show_revoked(unlock)
        elif isinstance(exc, camillo.WrongCredential):
            self.error.setText(safe_text(f"{exc}", 1000))
            self.secret.edit.selectAll()
            self.secret.setFocus()
        elif isinstance(exc, VaultError):
            self.error.setText(safe_text(f"This vault cannot be opened: {exc}", 1000))
        else:
            self.error.setText(safe_text(f"Unexpected error: {type(exc).__name__}: {exc}", 1000))

    @qt_virtual()
    def done(self, result: int) -> None:
        self._revoked_unlock = None  # the credential is not kept once the dialog closes
        super().done(result)

    @classmethod
    def ask(cls, client: Any, path: str, parent: QWidget | None = None) -> dict[str, Any] | None:
        dlg = cls(client, path, parent)
        return dlg.info if dlg.exec() == QDialog.DialogCode.Accepted else None


class SettingsDialog(BaseDialog):
    def __init__(self, client: Any, settings: Settings, parent: QWidget | None = None) -> None:
        super().__init__(parent, "Settings")
        self.settings = settings
        lay = QVBoxLayout(self)
        form = QFormLayout()
        self.auto_lock = QSpinBox()
        self.auto_lock.setRange(0, 240)
        self.auto_lock.setSuffix(" min")
        self.auto_lock.setSpecialValueText("never")
        self.auto_lock.setValue(settings.get(Setting.AUTO_LOCK_MINUTES))
        form.addRow("Lock after inactivity", self.auto_lock)
        self.clipboard = QSpinBox()
        self.clipboard.setRange(5, 300)
        self.clipboard.setSuffix(" s")
        self.clipboard.setValue(settings.get(Setting.CLIPBOARD_SECONDS))
        form.addRow("Clear the clipboard after", self.clipboard)
        self.theme = QComboBox()
        for label, value in (("Follow the system", "system"), ("Light", "light"), ("Dark", "dark")):
            self.theme.addItem(label, value)
        self.theme.setCurrentIndex(max(0, self.theme.findData(settings.get(Setting.THEME))))
        form.addRow("Appearance", self.theme)
        self.keychain = QLabel("checking\u2026")
        self.keychain.setWordWrap(True)
        self.keychain.setTextFormat(Qt.TextFormat.PlainText)
        form.addRow("Device keys", self.keychain)
        lay.addLayout(form)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._save)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        client.submit(lambda ctx: Vault.keychain_status(), self._keychain, lambda e: self.keychain.setText(str(e)),
                      context=self)

    def _keychain(self, st: camillo.KeychainStatus) -> None:
        if st.usable:
            self.keychain.setText(f"Kept in {keychain_name(st.backend)} ({st.backend}).")
        else:
            theme.restyle(self.keychain)
            self.keychain.setText(f"Not in an OS keychain: {st.reason}. This computer's device key is sealed in "
                                  "its local state under the vault's keys, so it cannot unlock the vault by itself.")
            self.keychain.setObjectName("Warning")

    def _save(self) -> None:
        self.settings.set(Setting.AUTO_LOCK_MINUTES, self.auto_lock.value())
        self.settings.set(Setting.CLIPBOARD_SECONDS, self.clipboard.value())
        self.settings.set(Setting.THEME, self.theme.currentData())
        self.accept()


class RecordsDialog(BaseDialog):
    """A few records (the sources of a value, one record) with the detail pane.  The main window
    closes every one of them when the vault locks (they show decrypted records); a closed one is
    deleted."""

    def __init__(self, client: Any, ids: list[bytes], title: str, parent: Any = None) -> None:
        title = safe_text(title, 160, single_line=True)  # it may quote a key or a value an agent wrote
        super().__init__(parent, title)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.resize(900, 520)
        lay = QVBoxLayout(self)
        lay.addWidget(muted_label(title))
        self.model = HistoryModel(self)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.verticalHeader().hide()
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.detail = DetailPane(client)
        self.detail.source_requested.connect(self._open_source)
        if parent is not None and hasattr(parent, "copy_text"):
            self.detail.copy_requested.connect(parent.copy_text)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.table)
        split.addWidget(self.detail)
        split.setSizes([420, 460])
        lay.addWidget(split, 1)
        close = QPushButton("Close")
        close.clicked.connect(self.accept)
        lay.addWidget(close, 0, Qt.AlignmentFlag.AlignRight)
        self.table.selectionModel().currentRowChanged.connect(
            lambda cur, _p: self.detail.show_record(self.model.record(cur.row())))
        self.table.setTabKeyNavigation(False)
        self.detail.thread_requested.connect(self._open_thread)
        if parent is not None and hasattr(parent, "restore_record"):
            self.detail.restore_requested.connect(parent.restore_record)
        self.client = client
        client.submit(lambda ctx: ctx.vault.records(ids), self._loaded,
                      lambda e: self.detail.heading.setText(safe_text(str(e), 300, single_line=True)), context=self)

    def _loaded(self, views: list[Any]) -> None:
        self.model.set_records(views)
        if views:
            self.table.selectRow(0)
        else:
            self.detail.heading.setText("These records are not readable here (another compartment, or erased).")

    def _open_thread(self, rid: bytes) -> None:
        """A source message, in its conversation (the main window shows it; this window closes)."""
        window = self.parent()
        if window is not None and hasattr(window, "open_in_thread"):
            window.open_in_thread(rid)
            self.accept()

    def _open_source(self, rid: bytes) -> None:
        RecordsDialog(self.client, [rid], "Source record", self.parent()).show()

    def wipe(self) -> None:
        """The vault was locked: forget the records shown."""
        self.model.set_records([])
        self.detail.show_record(None)
