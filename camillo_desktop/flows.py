"""The irreversible flows and their dialogs: re-authentication, erasure, revoking a device or a
grant, creating a grant, joining a vault from a new device (:meth:`camillo.Vault.join`).

Every irreversible action goes through :func:`protected` (Electrum's ``@protected``): the user
re-authenticates with the passphrase or the recovery phrase, the dialog says exactly what will
happen and what will not, the work runs on the vault worker with progress, and a summary says what
happened.  Nothing here is on an undo stack: these actions cannot be undone, and the dialogs say so.
Each job returns what the vault returned (a report carrying its Changes), which the client
broadcasts.  GUI thread only; the jobs (and a :class:`camillo.Joining`) run on the vault worker.
"""

from __future__ import annotations

import os
from typing import Any

import camillo
from camillo import ErasurePreview, ReachReport, RecoveryPhrase, Unlock
from PySide6.QtCore import QDate, Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QDateEdit,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QRadioButton,
    QVBoxLayout,
    QWidget,
)

from .dialogs import Ask, BaseDialog
from .text import safe_text
from .widgets import SecretEdit, muted_label, path_field
from .wording import reach_lines

LEVEL_TEXT = {
    "none": "No access.",
    "read": "Read: the agent can read everything in this compartment, and nothing else. It cannot write.",
    "write": "Write: read, plus add and change records here, up to the maximum authority below. Its inferences "
             "wait in your inbox.",
    "append": "Append: the agent can add records here but cannot read anything, not even what it wrote. For "
              "agents you do not trust with your memory.",
}


class ReauthDialog(BaseDialog):
    """Ask for the passphrase or the recovery phrase before an irreversible action."""

    def __init__(self, purpose: str, details: str = "", parent: QWidget | None = None, *,
                 confirm_label: str = "Continue", danger: bool = True) -> None:
        super().__init__(parent, "Confirm with your passphrase")
        self.setMinimumWidth(520)
        lay = QVBoxLayout(self)
        head = QLabel(purpose)
        head.setObjectName("ViewTitle")
        head.setWordWrap(True)
        head.setTextFormat(Qt.TextFormat.PlainText)
        lay.addWidget(head)
        if details:
            body = QLabel(details)
            body.setWordWrap(True)
            body.setTextFormat(Qt.TextFormat.PlainText)
            lay.addWidget(body)
        lay.addWidget(muted_label("This cannot be undone. To continue, type your passphrase or your recovery phrase."))
        row = QHBoxLayout()
        self.group = QButtonGroup(self)
        self.by_pass = QRadioButton("Passphrase")
        self.by_phrase = QRadioButton("Recovery phrase")
        self.by_pass.setChecked(True)
        for i, b in enumerate((self.by_pass, self.by_phrase)):
            self.group.addButton(b, i)
            row.addWidget(b)
        row.addStretch(1)
        lay.addLayout(row)
        self.secret = SecretEdit("passphrase")
        lay.addWidget(self.secret)
        self.secret.setFocus()  # the dialog asks for it: typing goes there
        self.error = QLabel("")
        self.error.setObjectName("Error")
        self.error.setWordWrap(True)
        lay.addWidget(self.error)
        buttons = QDialogButtonBox()
        self.ok = buttons.addButton(confirm_label, QDialogButtonBox.ButtonRole.AcceptRole)
        self.ok.setObjectName("Danger" if danger else "Primary")
        buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._accept)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.unlock: Unlock | None = None

    def _accept(self) -> None:
        if not self.secret.text():
            self.error.setText("Type your passphrase or recovery phrase.")
            return
        text = self.secret.text()
        self.unlock = Unlock.passphrase(text) if self.group.checkedId() == 0 else Unlock.recovery(text)
        self.secret.clear()
        self.accept()

    # Tests answer re-authentication without a dialog by queueing Unlock values here.
    next_answers: list[Unlock | None] = []  # noqa: RUF012 - a test hook, like Ask.next_answers

    @classmethod
    def ask(cls, purpose: str, details: str = "", parent: QWidget | None = None, **kw: Any) -> Unlock | None:
        if cls.next_answers:
            return cls.next_answers.pop(0)
        dlg = cls(purpose, details, parent, **kw)
        return dlg.unlock if dlg.exec() == QDialog.DialogCode.Accepted else None


class ProgressDialog(BaseDialog):
    """A modal "working" dialog for the few operations that must block (erasure, revocation)."""

    def __init__(self, text: str, parent: QWidget | None = None) -> None:
        super().__init__(parent, "Working")
        lay = QVBoxLayout(self)
        self.label = QLabel(text)
        self.label.setWordWrap(True)
        lay.addWidget(self.label)
        bar = QProgressBar()
        bar.setRange(0, 0)
        lay.addWidget(bar)
        self.setMinimumWidth(380)


def protected(window: Any, purpose: str, details: str, job, on_done, *, confirm_label: str = "Continue",
              working: str = "Working\u2026") -> bool:
    """Re-authenticate, then run ``job(ctx, unlock)`` on the worker as a mutation; a wrong
    credential asks again; ``on_done(result)`` gets the result.  Cancel does nothing at all (and
    returns False; True once the job is on its way)."""
    unlock = ReauthDialog.ask(purpose, details, window, confirm_label=confirm_label)
    if unlock is None:
        return False
    progress = ProgressDialog(working, window)
    progress.show()

    def done(result: Any) -> None:
        progress.close()
        on_done(result)

    def failed(exc: BaseException) -> None:
        progress.close()
        message = safe_text(str(exc), 2000)
        if isinstance(exc, camillo.WrongCredential):
            Ask.inform(window, "Not confirmed", f"{message}\nNothing was changed.")
            protected(window, purpose, details, job, on_done, confirm_label=confirm_label, working=working)
        else:
            Ask.inform(window, "Not done", f"{message}\nNothing irreversible happened unless the message says so.")

    window.client.mutate(lambda ctx: job(ctx, unlock), done, failed, context=window, label=purpose)
    return True


# -------------------------------------------------------------------------------------------- erasure


def erase_record(window: Any, rid: bytes) -> None:
    """From any record: "Erase permanently", distinct from hiding it."""

    def preview(info: ErasurePreview) -> None:
        v = info.record
        if not info.allowed:
            Ask.inform(window, "Erasure is disabled",
                       "This vault's policy forbids erasure (an enterprise retention rule"
                       + (f": {info.policy_reason}" if info.policy_reason else "")
                       + "). You can still forget the record, which hides it from agents.")
            return
        text = safe_text(v.text, 300, single_line=True)
        what = safe_text(f"{v.type or 'record'} in {info.compartment}", 200, single_line=True)
        others = safe_text(", ".join(info.other_devices), 400, single_line=True)
        readers = safe_text(", ".join(info.readers), 400, single_line=True)
        details = (
            f"\u201c{text}\u201d ({what}) will be destroyed.\n\n"
            f"The {info.batches} change(s) that shared its keys are sealed again under new keys, the old keys "
            f"and the {info.segments} file(s) holding it are deleted, the vault's master key changes and this "
            "device gets a new key.\n\n"
            "What it will not reach: copies of the vault made before now (your sync service's version history, "
            "backups) stay readable with your current passphrase and recovery phrase until you change them"
            + (f", with your other devices ({others}) until they next open the vault" if info.other_devices else "")
            + (f", and by agents that could read this compartment ({readers})" if info.readers else "")
            + ". Anything already read cannot be recalled."
        )

        def done(report: ReachReport) -> None:
            ReachReportDialog(window, report).exec()

        protected(window, "Erase this record permanently?", details,
                  lambda ctx, unlock: ctx.vault.erase([rid], reauth=unlock), done,
                  confirm_label="Erase permanently", working="Erasing: re-encrypting and destroying old keys\u2026")

    window.client.submit(lambda ctx: ctx.vault.erasure_preview(rid), preview, window.show_error, context=window)


class ReachReportDialog(BaseDialog):
    def __init__(self, window: Any, report: ReachReport) -> None:
        super().__init__(window, "Erased")
        self.window_ = window
        self.setMinimumWidth(620)
        lay = QVBoxLayout(self)
        title = QLabel("The record was erased")
        title.setObjectName("ViewTitle")
        lay.addWidget(title)
        body = QLabel(safe_text("\n".join(reach_lines(report)), 8000))
        body.setWordWrap(True)
        body.setTextFormat(Qt.TextFormat.PlainText)
        body.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        lay.addWidget(body)
        row = QHBoxLayout()
        passwd = QPushButton("Change the passphrase\u2026")
        passwd.clicked.connect(lambda: change_passphrase(window))
        reissue = QPushButton("Re-issue the recovery phrase\u2026")
        reissue.clicked.connect(lambda: reissue_recovery(window))
        close = QPushButton("Close")
        close.clicked.connect(self.accept)
        for b in (passwd, reissue):
            row.addWidget(b)
        row.addStretch(1)
        row.addWidget(close)
        lay.addLayout(row)


def change_passphrase(window: Any, then: Any = None) -> None:
    """Ask for the new passphrase (twice), re-authenticate, change it.  ``then(changed)``, if
    given, runs afterwards: True once the new passphrase is in place, False if the person cancelled."""
    dlg = BaseDialog(window, "Change the passphrase")
    lay = QVBoxLayout(dlg)
    lay.addWidget(muted_label("The new passphrase opens this vault from now on. Copies made before (sync history, "
                              "backups) still open with the old one until they expire."))
    first, second = SecretEdit("new passphrase"), SecretEdit("the new passphrase again")
    lay.addWidget(first)
    lay.addWidget(second)
    first.setFocus()
    err = QLabel("")
    err.setObjectName("Error")
    lay.addWidget(err)
    buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
    lay.addWidget(buttons)
    buttons.rejected.connect(dlg.reject)

    def ok() -> None:
        if not first.text() or first.text() != second.text():
            err.setText("The two passphrases differ.")
            return
        dlg.accept()

    buttons.accepted.connect(ok)
    if dlg.exec() != QDialog.DialogCode.Accepted:
        if then is not None:
            then(False)
        return
    new = first.text()
    first.clear()
    second.clear()

    def changed(_c: Any) -> None:
        Ask.inform(window, "Passphrase changed", "The new passphrase opens this vault from now on.")
        if then is not None:
            then(True)

    if not protected(window, "Change the passphrase?", "Confirm with the current passphrase (or the recovery phrase).",
                     lambda ctx, unlock: ctx.vault.change_passphrase(new, reauth=unlock), changed,
                     confirm_label="Change the passphrase", working="Changing the passphrase\u2026") and then:
        then(False)


def reissue_recovery(window: Any) -> None:
    def done(recovery: RecoveryPhrase) -> None:
        phrase = recovery.phrase
        dlg = BaseDialog(window, "Your new recovery phrase")
        lay = QVBoxLayout(dlg)
        lay.addWidget(muted_label("Write these words down now; they are shown only once. The old phrase no longer "
                                  "opens this vault (copies made before still open with it until they expire)."))
        grid = QGridLayout()
        for i, w in enumerate(phrase.split()):
            label = QLabel(f"{i + 1:>2}. {w}")
            label.setStyleSheet("font-family: monospace; font-size: 14px;")
            grid.addWidget(label, i % 8, i // 8)
        lay.addLayout(grid)
        close = QPushButton("I have written it down")
        close.clicked.connect(dlg.accept)
        lay.addWidget(close)
        dlg.exec()

    protected(window, "Re-issue the recovery phrase?", "A new phrase replaces the old one.",
              lambda ctx, unlock: ctx.vault.reissue_recovery_phrase(reauth=unlock), done,
              confirm_label="Re-issue", working="Writing the new recovery phrase\u2026")


# -------------------------------------------------------------------------------------------- grants


class GrantDialog(BaseDialog):
    """New grant: an agent, a level per compartment (explained in plain words), a maximum authority,
    an optional expiry, and where to save the grant file."""

    def __init__(self, compartments: list[str], parent: QWidget | None = None) -> None:
        super().__init__(parent, "Give an agent access")
        self.setMinimumWidth(640)
        lay = QVBoxLayout(self)
        form = QFormLayout()
        self.agent = QLineEdit()
        self.agent.setPlaceholderText("e.g. coding-assistant")
        form.addRow("Agent", self.agent)
        lay.addLayout(form)
        lay.addWidget(muted_label("What may it do in each compartment?"))
        self.levels: dict[str, QComboBox] = {}
        grid = QGridLayout()
        self.explain = QLabel("")
        self.explain.setWordWrap(True)
        self.explain.setObjectName("Muted")
        for i, name in enumerate(compartments):
            combo = QComboBox()
            for level in ("none", "read", "write", "append"):
                combo.addItem(level, level)
            combo.setAccessibleName(f"access to {safe_text(name, 60, single_line=True)}")
            combo.currentIndexChanged.connect(lambda _i, c=combo: self.explain.setText(LEVEL_TEXT[c.currentData()]))
            self.levels[name] = combo
            label = QLabel(safe_text(name, 60, single_line=True))
            label.setTextFormat(Qt.TextFormat.PlainText)
            grid.addWidget(label, i, 0)
            grid.addWidget(combo, i, 1)
        lay.addLayout(grid)
        lay.addWidget(self.explain)
        form2 = QFormLayout()
        self.max_class = QComboBox()
        for label, value in (("inferred (its conclusions; the default)", "inferred"),
                             ("observed (it may record what you said or did)", "observed"),
                             ("external (third-party content only)", "external")):
            self.max_class.addItem(label, value)
        form2.addRow("Highest authority it may claim", self.max_class)
        self.expires_on = QCheckBox("Expires on")
        self.expires = QDateEdit(QDate.currentDate().addDays(30))
        self.expires.setCalendarPopup(True)
        self.expires.setEnabled(False)
        self.expires_on.toggled.connect(self.expires.setEnabled)
        row = QHBoxLayout()
        row.addWidget(self.expires_on)
        row.addWidget(self.expires)
        row.addStretch(1)
        form2.addRow("", row)
        self.file, file_row = path_field(self._browse, placeholder="where to save the grant file")
        form2.addRow("Grant file", file_row)
        lay.addLayout(form2)
        lay.addWidget(muted_label("The grant file is the agent's credential: give it to the agent only, and keep it "
                                  "secret like a password. You can revoke it at any time."))
        self.error = QLabel("")
        self.error.setObjectName("Error")
        lay.addWidget(self.error)
        buttons = QDialogButtonBox()
        ok = buttons.addButton("Create grant", QDialogButtonBox.ButtonRole.AcceptRole)
        ok.setObjectName("Primary")
        buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._ok)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.result_: dict[str, Any] | None = None

    def _browse(self) -> None:
        name = (self.agent.text().strip() or "agent") + ".grant"
        path, _ = QFileDialog.getSaveFileName(self, "Save the grant file", os.path.expanduser(f"~/{name}"),
                                              "Camillo grants (*.grant)")
        if path:
            self.file.setText(path)

    def _ok(self) -> None:
        scopes = {n: c.currentData() for n, c in self.levels.items() if c.currentData() != "none"}
        if not self.agent.text().strip():
            self.error.setText("Name the agent.")
            return
        if not scopes:
            self.error.setText("Give access to at least one compartment.")
            return
        if not self.file.text().strip():
            self.error.setText("Choose where to save the grant file.")
            return
        expires = None
        if self.expires_on.isChecked():
            import calendar

            d = self.expires.date()
            expires = calendar.timegm((d.year(), d.month(), d.day(), 23, 59, 59, 0, 0, 0))
        self.result_ = {"agent": self.agent.text().strip(), "scopes": scopes, "max_class": self.max_class.currentData(),
                        "expires": expires, "path": os.path.abspath(os.path.expanduser(self.file.text().strip()))}
        self.accept()


# -------------------------------------------------------------------------------------------- joining


class JoinDialog(BaseDialog):
    """On the new device: choose the synced folder, paste the code (or open a picture of the QR),
    compare the 6-digit code with the other device, done."""

    opened = Signal(object)

    def __init__(self, client: Any, parent: QWidget | None = None, *, home: str | None = None) -> None:
        super().__init__(parent, "Join an existing vault")
        self.client = client
        self.home = home  # where this installation keeps its state (None: CAMILLO_HOME or the default)
        self.setMinimumWidth(600)
        lay = QVBoxLayout(self)
        lay.addWidget(muted_label("On a device that already has the vault, open Devices \u2192 Add a device. It "
                                  "shows a QR code and a typed code. Your sync service must already carry the "
                                  "vault's folder to this computer."))
        form = QFormLayout()
        self.folder, row = path_field(lambda: self.folder.setText(
            QFileDialog.getExistingDirectory(self, "The vault folder") or self.folder.text()))
        form.addRow("Vault folder", row)
        code_row = QHBoxLayout()
        self.code = QLineEdit()
        self.code.setPlaceholderText("VMEM1:\u2026 or XXXX-XXXX-\u2026")
        image = QPushButton("Open a picture of the QR\u2026")
        image.clicked.connect(self._from_image)
        code_row.addWidget(self.code, 1)
        code_row.addWidget(image)
        form.addRow("Code", code_row)
        self.name = QLineEdit(camillo.Vault.default_device_name())  # this computer's host name
        form.addRow("This device's name", self.name)
        lay.addLayout(form)
        self.sas = QLabel("")
        self.sas.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.sas.setStyleSheet("font-size: 34px; font-weight: 700; letter-spacing: 6px;")
        self.sas.setAccessibleName("code to compare")
        lay.addWidget(self.sas)
        self.status = QLabel("")
        self.status.setWordWrap(True)
        self.status.setTextFormat(Qt.TextFormat.PlainText)
        lay.addWidget(self.status)
        buttons = QDialogButtonBox()
        self.start = buttons.addButton("Join", QDialogButtonBox.ButtonRole.AcceptRole)
        self.start.setObjectName("Primary")
        buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._start)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.timer = QTimer(self)
        self.timer.timeout.connect(self._poll)
        self._join: camillo.Joining | None = None
        self.info: dict[str, Any] | None = None
        self.finished.connect(self.timer.stop)  # cancelled while waiting: stop asking

    def _from_image(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "A picture of the QR code", "", "Images (*.png *.jpg *.jpeg)")
        if not path:
            return
        text = decode_qr_image(path)
        if text:
            self.code.setText(text)
        else:
            self.status.setText("No Camillo QR code was found in that picture; paste the typed code instead.")

    def _start(self) -> None:
        folder, code, name = self.folder.text().strip(), self.code.text().strip(), self.name.text().strip()
        if not folder or not code:
            self.status.setText("Choose the vault folder and paste the code.")
            return
        if os.path.isfile(folder):
            self.status.setText("A .vmem file cannot carry the request to your other device. Choose the vault's "
                                "folder that your sync service keeps on this computer.")
            return
        home = self.home

        def job(ctx: Any) -> tuple[camillo.Joining, str]:
            joining = camillo.Vault.join(folder, code, name=name or None, home=home)  # EnrollmentError: a bad code
            return joining, joining.start()

        def started(result: tuple[camillo.Joining, str]) -> None:
            self._join, sas = result
            self.sas.setText(sas)
            self.status.setText("Check that the other device shows exactly this code, then confirm there. "
                                "Waiting for its confirmation\u2026")
            self.start.setEnabled(False)
            self.timer.start(1000)

        self.client.submit(job, started, lambda e: self.status.setText(safe_text(str(e), 1000)), context=self)

    def _poll(self) -> None:
        join = self._join
        if join is None:
            return

        def opener(ctx: Any) -> camillo.Vault:
            vault = join.poll()
            if vault is None:
                raise camillo.VaultError("not yet")
            return vault

        def waiting(exc: BaseException) -> None:
            if str(exc) != "not yet":
                self.timer.stop()
                self.status.setText(safe_text(str(exc), 1000))

        def done(info) -> None:
            self.timer.stop()
            self.info = info
            self.accept()
            self.opened.emit(info)

        self.timer.stop()
        self.client.open_vault(opener, done, lambda e: (waiting(e), self.timer.start(1000) if str(e) == "not yet"
                                                        else None), context=self)


def decode_qr_image(path: str) -> str | None:
    """The VMEM1: text in a picture of a QR code (zxing-cpp), or None."""
    try:
        import zxingcpp
        from PIL import Image
    except ImportError:
        return None
    try:
        for result in zxingcpp.read_barcodes(Image.open(path)):
            if result.text.startswith("VMEM1:"):
                return result.text
    except OSError:
        return None
    return None
