"""Devices: the user's computers, when they were enrolled and last seen; add one by QR code;
revoke a lost laptop.

"Revoke a lost laptop" is a guided flow: re-authenticate, learn what happens (new keys it cannot
read, its later writes rejected, what it already read stays exposed), run it on the worker with
progress, then a summary and the next steps (:func:`camillo_desktop.owner.finish_lockout`).
GUI thread only.
"""

from __future__ import annotations

import time
from typing import Any

import camillo
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QLabel, QPushButton

from ..devicenames import rename_device
from ..dialogs import Ask
from ..keychain import keychain_name
from ..models import Column, ColumnSpec, Sizing, fmt_time
from ..owner import revoke_device
from ..text import safe_text
from ..wording import readable_platform
from .base import TableView


def device_status(d: camillo.DeviceInfo) -> str:
    if d.replaced:
        return "old key, replaced"
    if d.revoked:
        return "revoked"
    if d.this_device:
        return "this device"
    if d.last_seen and time.time() - d.last_seen > 30 * 86400:
        return "not seen for 30 days"
    return "active"


class DeviceColumn(Column):  # a row: a camillo.DeviceInfo; its name and platform are what its certificate says
    NAME = ColumnSpec("Name", lambda d: d.name, sizing=Sizing.STRETCH)
    PLATFORM = ColumnSpec("Kind", lambda d: readable_platform(d.platform))
    ENROLLED = ColumnSpec("Enrolled", lambda d: fmt_time(d.enrolled))
    LAST_SEEN = ColumnSpec("Last seen", lambda d: fmt_time(d.last_seen) or "never")
    STATUS = ColumnSpec("Status", device_status)


class DevicesView(TableView):
    name = "devices"
    title = "Devices"
    icon = "devices"
    shortcut = "Ctrl+7"
    depends_on = ("devices", "credentials")  # the devices, and where their keys are kept
    columns = DeviceColumn

    def __init__(self, client: Any, window: Any) -> None:
        super().__init__(client, window)
        self.subtitle.setText("Every computer that holds a key to this vault. Lost one? Revoke it: it cannot read "
                              "anything written afterwards, and nothing it writes later is accepted.")
        self.add_button = QPushButton("Add a device\u2026")
        self.add_button.setObjectName("Primary")
        self.add_button.clicked.connect(lambda: self.navigate.emit("enroll", None))
        self.rename_button = QPushButton("Rename\u2026")
        self.rename_button.clicked.connect(lambda: rename_device(self, self.selected(), Ask.inform))
        self.revoke_button = QPushButton("Revoke a lost device\u2026")
        self.revoke_button.setObjectName("Danger")
        self.revoke_button.clicked.connect(self._revoke)
        self.header.addWidget(self.add_button)
        self.header.addWidget(self.rename_button)
        self.header.addWidget(self.revoke_button)
        self.keychain = QLabel("")
        self.keychain.setObjectName("Muted")
        self.keychain.setWordWrap(True)
        self.root.addWidget(self.keychain)

    @staticmethod
    def fetch(vault: Any) -> Any:
        return vault.devices(), camillo.Vault.keychain_status()

    def foreground(self, d: Any) -> Any:
        return QGuiApplication.palette().placeholderText() if d.revoked or d.replaced else None

    def show_rows(self, result: Any) -> None:
        devices, kc = result
        super().show_rows(devices)
        self.title_label.setText(f"Devices  ({sum(1 for d in devices if not d.revoked and not d.replaced)} active)")
        self.keychain.setText(f"This computer keeps its device key in {keychain_name(kc.backend)}." if kc.usable else
                              f"This computer has no OS keychain in use ({kc.reason}); its device key is "
                              "sealed under the vault's keys in its local state.")
        owner = bool(self.window_.info.get("is_owner"))
        self.add_button.setEnabled(owner)
        self.rename_button.setEnabled(owner)
        self.revoke_button.setEnabled(owner)

    def _revoke(self) -> None:
        d = self.selected()
        if d is None:
            Ask.inform(self, "Revoke a device", "Select the lost device in the list first.")
            return
        if d.revoked or d.replaced:
            return
        if d.this_device:
            Ask.inform(self, "Revoke a device", "This is the device you are using. Revoke it from another device.")
            return
        name = safe_text(d.name, 80, single_line=True)
        details = (f"What happens to \u201c{name}\u201d:\n"
                   "\u2022 new keys are made for every compartment and the vault's master key changes: its keys "
                   "cannot read anything written from now on;\n"
                   "\u2022 what it wrote so far stays: anything it writes afterwards is refused by every copy of "
                   "your vault;\n"
                   "\u2022 what it already read stays exposed: revocation cannot recall copies.\n\n"
                   "Your other devices, your passphrase and your recovery phrase keep working.")
        revoke_device(self.window_, d, reason="lost device", purpose=f"Revoke \u201c{name}\u201d?", details=details)
