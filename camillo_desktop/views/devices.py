"""Devices: the user's computers, when they were enrolled and last seen; add one by QR code;
revoke a lost laptop.

"Revoke a lost laptop" is a guided flow: re-authenticate, learn what happens (new keys it cannot
read, its later writes rejected, what it already read stays exposed), run it on the worker with
progress, then a summary.  GUI thread only.
"""

from __future__ import annotations

import time
from typing import Any

from camillo import Changes
from PySide6.QtCore import Qt
from PySide6.QtGui import QStandardItem, QStandardItemModel
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QLabel, QPushButton, QTableView

from ..dialogs import Ask
from ..flows import protected
from ..keychain import keychain_name
from ..models import fmt_time
from ..text import safe_text
from .base import View

COLUMNS = ("Name", "Platform", "Enrolled", "Last seen", "Status")


class DevicesView(View):
    name = "devices"
    title = "Devices"
    icon = "devices"
    shortcut = "Ctrl+6"

    def __init__(self, client: Any, window: Any) -> None:
        super().__init__(client, window)
        self.subtitle.setText("Every computer that holds a key to this vault. Lost one? Revoke it: it cannot read "
                              "anything written afterwards, and nothing it writes later is accepted.")
        self.add_button = QPushButton("Add a device\u2026")
        self.add_button.setObjectName("Primary")
        self.add_button.clicked.connect(lambda: self.navigate.emit("enroll", None))
        self.revoke_button = QPushButton("Revoke a lost device\u2026")
        self.revoke_button.setObjectName("Danger")
        self.revoke_button.clicked.connect(self._revoke)
        self.header.addWidget(self.add_button)
        self.header.addWidget(self.revoke_button)
        self.model = QStandardItemModel(0, len(COLUMNS), self)
        self.model.setHorizontalHeaderLabels(COLUMNS)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.setAlternatingRowColors(True)
        self.table.setAccessibleName("devices")
        self.root.addWidget(self.table, 1)
        self.keychain = QLabel("")
        self.keychain.setObjectName("Muted")
        self.keychain.setWordWrap(True)
        self.root.addWidget(self.keychain)
        self._devices: list[Any] = []

    def load(self) -> None:
        def job(ctx):
            import camillo

            return ctx.vault.devices(), camillo.keychain.status()

        def done(result) -> None:
            devices, kc = result
            self._devices = devices
            self.model.removeRows(0, self.model.rowCount())
            now = time.time()
            for d in devices:
                if d.replaced:
                    status = "old key, replaced"
                elif d.revoked:
                    status = "revoked"
                elif d.this_device:
                    status = "this device"
                elif d.last_seen and now - d.last_seen > 30 * 86400:
                    status = "not seen for 30 days"
                else:
                    status = "active"
                # A device's name and platform are what its certificate says: shown escaped.
                items = [QStandardItem(safe_text(x, 120, single_line=True))
                         for x in (d.name, d.platform, fmt_time(d.enrolled), fmt_time(d.last_seen) or "never", status)]
                items[0].setData(d.writer_id.hex(), Qt.ItemDataRole.UserRole)
                if d.revoked or d.replaced:
                    for it in items:
                        it.setForeground(self.palette().placeholderText())
                self.model.appendRow(items)
            self.table.resizeColumnsToContents()
            self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
            self.title_label.setText(f"Devices  ({sum(1 for d in devices if not d.revoked and not d.replaced)} active)")
            self.keychain.setText(f"This computer keeps its device key in {keychain_name(kc.backend)}." if kc.usable else
                                  f"This computer has no OS keychain in use ({kc.reason}); its device key is "
                                  "sealed under the vault's keys in its local state.")
            owner = bool(self.window_.info.get("is_owner"))
            self.add_button.setEnabled(owner)
            self.revoke_button.setEnabled(owner)
            self.loaded.emit()

        self.client.submit(job, done, self.window_.show_error, context=self)

    def _revoke(self) -> None:
        idx = self.table.currentIndex()
        if not idx.isValid():
            Ask.inform(self, "Revoke a device", "Select the lost device in the list first.")
            return
        d = self._devices[idx.row()]
        if d.revoked or d.replaced:
            return
        if d.this_device:
            Ask.inform(self, "Revoke a device", "This is the device you are using. Revoke it from another device.")
            return
        name = safe_text(d.name, 80, single_line=True)
        details = (f"What happens to \u201c{name}\u201d:\n"
                   "\u2022 new keys are made for every compartment and the vault master secret rolls: the laptop's "
                   "keys cannot read anything written from now on;\n"
                   "\u2022 its last accepted writes are pinned: anything it writes afterwards is rejected by every "
                   "copy of your vault;\n"
                   "\u2022 what it already read stays exposed: revocation cannot recall copies.\n\n"
                   "Your other devices, your passphrase and your recovery phrase keep working.")
        writer = d.writer_id.hex()

        def job(ctx, unlock):
            return ctx.vault.revoke(writer, reason="lost device", reauth=unlock)

        protected(self.window_, f"Revoke \u201c{name}\u201d?", details, job,
                  lambda report: Ask.inform(self, "Device revoked", safe_text("\n".join(report.lines()), 4000)),
                  confirm_label="Revoke the device", working="Revoking: new keys for every compartment\u2026")

    def relevant(self, changes: Changes) -> bool:
        return changes.roster

    def clear(self) -> None:
        super().clear()
        self._devices = []
        self.model.removeRows(0, self.model.rowCount())
