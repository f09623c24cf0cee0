"""Device names: the name a new installation gives itself the first time it opens a vault, and
renaming a device from the Devices view.

:class:`DeviceNameField` is the "This device's name" row of the unlock dialog: hidden until the
vault worker said that this installation has never opened the vault (``Vault.is_new_installation``),
then shown with this computer's host name (``Vault.default_device_name``) as the default; its
:attr:`~DeviceNameField.value` goes to ``Vault.open(device_name=...)``.  :func:`rename_device` asks
for a new name and runs ``Vault.rename_device`` on the worker as a mutation (its Changes name the
devices, so the Devices view reloads).  GUI thread only; every vault call goes to the vault worker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import camillo
from PySide6.QtWidgets import QHBoxLayout, QInputDialog, QLabel, QLineEdit, QWidget

from .text import safe_text


def is_new_installation(path: str, home: str | None = None) -> tuple[bool, str]:
    """On the worker: has this installation never opened ``path`` (so its first open names a new
    device), and the default name for it.  A vault that cannot be read yet is "not new": opening it
    says what is wrong."""
    try:
        new = camillo.Vault.is_new_installation(path, home)
    except (camillo.VaultError, OSError):
        new = False
    return new, camillo.Vault.default_device_name()


class DeviceNameField(QWidget):
    """"This device's name", shown only for an installation that has never opened the vault."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        label = QLabel("This device's name")
        self.edit = QLineEdit()
        self.edit.setMaxLength(64)
        self.edit.setAccessibleName("this device's name")
        self.edit.setToolTip("This computer opens the vault for the first time: your other devices will list it "
                             "under this name.")
        label.setBuddy(self.edit)
        row.addWidget(label)
        row.addWidget(self.edit, 1)
        self.hide()

    def ask_if_new(self, client: Any, path: str, context: Any) -> None:
        """Ask the worker whether this installation is new to ``path``; if so, show the field."""
        client.submit(lambda ctx: is_new_installation(path), self._answered, lambda _e: None, context=context)

    def _answered(self, answer: tuple[bool, str]) -> None:
        new, default = answer
        if new:
            if not self.edit.text():
                self.edit.setText(default)
            self.show()

    @property
    def value(self) -> str | None:
        """The name to register this installation under (None: not asked, or left empty)."""
        return (self.edit.text().strip() or None) if not self.isHidden() else None


def ask_name(parent: QWidget, question: str, current: str) -> str:
    """The name typed in a small dialog ("" when cancelled)."""
    new, ok = QInputDialog.getText(parent, "Rename a device", question, text=current)
    return new.strip() if ok else ""


def rename_device(view: Any, device: camillo.DeviceInfo | None, inform: Callable[[Any, str, str], None]) -> None:
    """Ask for a new name for ``device`` and rename it on the worker; a refusal is said through
    ``inform(parent, title, text)`` (``Ask.inform``: the unlock dialog imports this module)."""
    if device is None:
        inform(view, "Rename a device", "Select the device to rename in the list first.")
        return
    if device.revoked or device.replaced:
        inform(view, "Rename a device", "A revoked or replaced device keeps its name.")
        return
    old = safe_text(device.name, 64, single_line=True)
    new = ask_name(view, f"New name for \u201c{old}\u201d:", device.name)
    if not new or new == device.name:
        return
    writer = device.writer_id.hex()

    def failed(exc: BaseException) -> None:
        inform(view, "Rename a device", safe_text(f"\u201c{old}\u201d was not renamed: {exc}", 1000))

    view.client.mutate(lambda ctx: ctx.vault.rename_device(writer, new), None, failed, context=view)
