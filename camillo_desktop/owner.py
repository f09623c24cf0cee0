"""What the vault's owner does about who can open it: the "Was this you?" notice for each new
device, the guided steps that finish locking out a lost device (change the passphrase, optionally
re-issue the recovery phrase, each with the sentence that says why), and the Settings section with
those two actions and the trusted people (recovery recipients): list, add from a ``.pub`` file,
remove.

Every irreversible step goes through :func:`camillo_desktop.flows.protected` (re-authentication,
the work on the vault worker).  GUI thread only; the vault is read and changed only in jobs on the
worker.
"""

from __future__ import annotations

import os
from typing import Any

import camillo
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QGroupBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from .dialogs import Ask
from .flows import change_passphrase, protected, reissue_recovery
from .models import fmt_time
from .text import safe_text
from .wording import revocation_lines

NOT_CHANGED_TEXT = ("The passphrase was not changed: whoever knows it can still open the vault, on any "
                      "computer. Change it in Settings (Change the passphrase) as soon as you can.")


# ------------------------------------------------------------------------ finishing a revocation


def finish_lockout(window: Any, report: camillo.RevocationReport, *, passphrase_chosen: bool = False) -> None:
    """After a device was revoked: say what happened, then walk through the next steps the report
    names (change the passphrase; re-issue the recovery phrase), each one with why, each one
    skippable; skipping the passphrase says plainly what that leaves open.  ``passphrase_chosen``:
    the person already chose to change it (the new-device notice's "No"), so it is not asked."""
    Ask.inform(window, "Device revoked", safe_text("\n".join(revocation_lines(report)), 4000))
    steps = iter(report.next_steps())  # one sentence per credential in still_opens, in this order
    passphrase_why = next(steps, "") if "passphrase" in report.still_opens else ""
    recovery_why = next(steps, "") if "recovery phrase" in report.still_opens else ""

    def recovery_step(_changed: bool = True) -> None:
        if not recovery_why:
            return
        if Ask.confirm(window, "Optional: re-issue the recovery phrase", recovery_why,
                       yes="Re-issue the recovery phrase\u2026"):
            reissue_recovery(window)

    def after_passphrase(changed: bool) -> None:
        if not changed:
            Ask.inform(window, "Passphrase not changed", NOT_CHANGED_TEXT)
        recovery_step()

    if not passphrase_why:
        recovery_step()
        return
    if passphrase_chosen or Ask.confirm(window, "Next: change the passphrase", passphrase_why,
                                        yes="Change the passphrase\u2026"):
        change_passphrase(window, then=after_passphrase)
    else:
        after_passphrase(False)


def revoke_device(window: Any, device: camillo.DeviceInfo, *, reason: str, purpose: str, details: str,
                  passphrase_chosen: bool = False) -> None:
    """Revoke ``device`` after re-authentication, then :func:`finish_lockout`."""
    writer = device.writer_id.hex()
    protected(window, purpose, details,
              lambda ctx, unlock: ctx.vault.revoke(writer, reason=reason, reauth=unlock),
              lambda report: finish_lockout(window, report, passphrase_chosen=passphrase_chosen),
              confirm_label="Revoke the device", working="Revoking: new keys for every compartment\u2026")


# ------------------------------------------------------------------------ "Was this you?"


class NewDeviceRow(QFrame):
    """One new device: the question, "Yes" and "No — revoke it and change the passphrase"."""

    def __init__(self, device: camillo.DeviceInfo, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.device = device
        self.setObjectName("Notice")
        self.setProperty("tone", "warn")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(12, 8, 8, 8)
        self.label = QLabel(safe_text(device.was_this_you(), 400))
        self.label.setTextFormat(Qt.TextFormat.PlainText)
        self.label.setWordWrap(True)
        lay.addWidget(self.label, 1)
        self.yes = QPushButton("Yes")
        self.yes.setAccessibleName(f"yes, {safe_text(device.name, 80, single_line=True)} is my device")
        self.no = QPushButton("No \u2014 revoke it and change the passphrase")
        self.no.setObjectName("Danger")
        lay.addWidget(self.yes, 0, Qt.AlignmentFlag.AlignVCenter)
        lay.addWidget(self.no, 0, Qt.AlignmentFlag.AlignVCenter)


class NewDeviceNotices(QFrame):
    """Above the views: one "Was this you?" row per device that joined and that no device of the
    vault acknowledged yet.  Shown to the owner only (only the owner can answer)."""

    def __init__(self, window: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.window_ = window
        self.client = window.client
        self.setAccessibleName("new devices to confirm")
        self._layout = QVBoxLayout(self)
        self._layout.setContentsMargins(16, 4, 16, 6)
        self._layout.setSpacing(6)
        self.rows: list[NewDeviceRow] = []
        self._open = False
        self.client.vault_changed.connect(self._changed)
        self.client.vault_locked.connect(self.clear)
        self.hide()

    def reload(self) -> None:
        """Ask the vault (on the worker) for its new devices, then show them."""
        self._open = True
        if not self.window_.info.get("is_owner"):
            self._show([])
            return

        def job(ctx: Any) -> list[camillo.DeviceInfo]:
            return [d for d in ctx.vault.new_devices() if not d.this_device and not d.revoked]

        self.client.submit(job, self._show, self.window_.show_error, context=self, label="new devices")

    def clear(self, *_: Any) -> None:
        self._open = False
        self._show([])

    def _changed(self, changes: Any) -> None:
        if self._open and (changes.devices or changes.reloaded or changes.credentials):
            self.reload()

    def _show(self, devices: list[camillo.DeviceInfo]) -> None:
        """One row per device, in the vault's order; a device already asked about keeps its row."""
        if not self._open:
            devices = []
        kept = {row.device.writer_id: row for row in self.rows}
        wanted = {d.writer_id for d in devices}
        for writer, row in kept.items():
            if writer not in wanted:
                self._layout.removeWidget(row)
                row.hide()
                row.deleteLater()
        self.rows = []
        for d in devices:
            row = kept.get(d.writer_id)
            if row is None:
                row = NewDeviceRow(d, self)
                row.yes.clicked.connect(lambda _=False, d=d: self._acknowledge(d))
                row.no.clicked.connect(lambda _=False, d=d: self._reject(d))
                self._layout.addWidget(row)
                row.show()  # a child added to a shown parent is not shown by itself
            self.rows.append(row)
        self.setVisible(bool(self.rows))

    def _acknowledge(self, device: camillo.DeviceInfo) -> None:
        writer = device.writer_id.hex()
        self.client.mutate(lambda ctx: ctx.vault.acknowledge_devices([writer]), None, self.window_.show_error,
                           context=self, label="acknowledging a device")

    def _reject(self, device: camillo.DeviceInfo) -> None:
        name = safe_text(device.name, 80, single_line=True)
        details = (f"\u201c{name}\u201d joined using {device.joined_with or 'a credential of this vault'}, so "
                   "whoever set it up knows it. Revoking makes new keys it cannot read and refuses anything it "
                   "writes from now on; what it already read stays exposed. Then change the passphrase, so that "
                   "it cannot simply join again.")
        revoke_device(self.window_, device, reason="not recognised by the owner",
                      purpose=f"Revoke \u201c{name}\u201d?", details=details, passphrase_chosen=True)


# ------------------------------------------------------------------------ Settings: this vault


class VaultSecuritySection(QGroupBox):
    """The Settings section of the open vault: change the passphrase, re-issue the recovery
    phrase, and the trusted people who can recover the vault with their own key."""

    def __init__(self, window: Any, parent: QWidget | None = None) -> None:
        super().__init__("This vault", parent)
        self.window_ = window
        self.client = window.client
        owner = bool(window.info.get("is_owner"))
        lay = QVBoxLayout(self)
        row = QHBoxLayout()
        self.passphrase_button = QPushButton("Change the passphrase\u2026")
        self.passphrase_button.clicked.connect(lambda: change_passphrase(window))
        self.recovery_button = QPushButton("Re-issue the recovery phrase\u2026")
        self.recovery_button.clicked.connect(lambda: reissue_recovery(window))
        for b in (self.passphrase_button, self.recovery_button):
            b.setEnabled(owner)
            row.addWidget(b)
        row.addStretch(1)
        lay.addLayout(row)
        people = QLabel("Trusted people: someone who can open this vault with their own key if you lose "
                        "your passphrase and your recovery phrase. They make their key with "
                        "\u201ccamillo recipient keygen\u201d and send you its .pub file.")
        people.setWordWrap(True)
        people.setObjectName("Muted")
        lay.addWidget(people)
        self.people = QListWidget()
        self.people.setAccessibleName("trusted people")
        self.people.setMaximumHeight(120)
        lay.addWidget(self.people)
        buttons = QHBoxLayout()
        self.add_button = QPushButton("Add a trusted person\u2026")
        self.add_button.clicked.connect(self._add)
        self.remove_button = QPushButton("Remove\u2026")
        self.remove_button.setObjectName("Danger")
        self.remove_button.clicked.connect(self._remove)
        for b in (self.add_button, self.remove_button):
            b.setEnabled(owner)
            buttons.addWidget(b)
        buttons.addStretch(1)
        lay.addLayout(buttons)
        self.recipients: list[camillo.RecipientInfo] = []
        self.reload()

    def reload(self) -> None:
        self.client.submit(lambda ctx: ctx.vault.recipients(), self._show, self.window_.show_error,
                           context=self, label="trusted people")

    def _show(self, recipients: list[camillo.RecipientInfo]) -> None:
        self.recipients = [r for r in recipients if not r.revoked]
        self.people.clear()
        for r in self.recipients:
            item = QListWidgetItem(f"{safe_text(r.name, 80, single_line=True)} \u2014 added {fmt_time(r.added)}")
            item.setData(Qt.ItemDataRole.UserRole, r.writer_id.hex())
            self.people.addItem(item)
        if not self.recipients:
            item = QListWidgetItem("No trusted person yet.")
            item.setFlags(Qt.ItemFlag.NoItemFlags)
            self.people.addItem(item)

    def _add(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "The trusted person's public key", os.path.expanduser("~"),
                                              "Public keys (*.pub);;All files (*)")
        if not path:
            return
        stem = os.path.basename(path).rsplit(".", 1)[0]
        name, ok = QInputDialog.getText(self, "Add a trusted person", "Their name, as this vault shows it:", text=stem)
        name = name.strip()
        if not ok:
            return
        if not name:
            Ask.inform(self, "Add a trusted person", "Type the trusted person's name, then add them again.")
            return
        self.add_person(name, path)

    def add_person(self, name: str, path: str) -> None:
        """Re-authenticate, then add ``name`` with the public key in ``path``."""
        shown = safe_text(name, 80, single_line=True)
        details = (f"\u201c{shown}\u201d will be able to open this vault, everything in it, with their own key "
                   "and its passphrase, without yours. Add only someone you trust with all of it; you can remove "
                   "them later (what they already read stays read).")

        def done(_c: Any) -> None:
            self.reload()
            Ask.inform(self.window_, "Trusted person added", f"\u201c{shown}\u201d can now recover this vault "
                       "with their own key.")

        protected(self.window_, f"Add \u201c{shown}\u201d as a trusted person?", details,
                  lambda ctx, unlock: ctx.vault.add_recipient(name, path, reauth=unlock), done,
                  confirm_label="Add the trusted person", working="Adding the trusted person\u2026")

    def _remove(self) -> None:
        item = self.people.currentItem()
        who = item.data(Qt.ItemDataRole.UserRole) if item is not None else None
        if not who:
            Ask.inform(self, "Remove a trusted person", "Select the trusted person in the list first.")
            return
        shown = safe_text(next(r.name for r in self.recipients if r.writer_id.hex() == who), 80, single_line=True)
        details = (f"New keys are made for every compartment: \u201c{shown}\u201d\u2019s key opens nothing written "
                   "from now on. What they could open before stays open to them (copies cannot be recalled).")

        def done(report: camillo.RevocationReport) -> None:
            self.reload()
            Ask.inform(self.window_, "Trusted person removed",
                       f"\u201c{shown}\u201d\u2019s key opens nothing written from now on.")

        protected(self.window_, f"Remove \u201c{shown}\u201d?", details,
                  lambda ctx, unlock: ctx.vault.remove_recipient(who, reauth=unlock), done,
                  confirm_label="Remove the trusted person", working="Removing: new keys for every compartment\u2026")
