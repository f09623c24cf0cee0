"""Vault → Open object storage…: a vault in an S3-compatible bucket (docs/storage.md).

The dialog asks for the endpoint, the bucket, the prefix and the keys.  The keys go to the OS
keychain through the core (:func:`camillo.remember_object_store_keys`, on the vault worker: it
blocks on D-Bus), never into the settings: what the recent-vaults list remembers is the location
(``s3://bucket/prefix?endpoint=…``), which holds no secret.  With no keys typed, the core uses this
computer's AWS settings (or keys kept earlier).  Then the usual unlock dialog opens the vault.

GUI thread only; the keychain work runs on the worker.
"""

from __future__ import annotations

from typing import Any

import camillo
from camillo import VaultError
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QVBoxLayout,
    QWidget,
)

from .dialogs import BaseDialog
from .text import safe_text
from .widgets import SecretEdit, muted_label


class ObjectStorageDialog(BaseDialog):
    """Where the vault is (endpoint, region, bucket, prefix) and the keys to reach it."""

    def __init__(self, client: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent, "Open object storage")
        self.client = client
        self.location: str | None = None
        self.setMinimumWidth(520)
        lay = QVBoxLayout(self)
        head = QLabel("Open a vault kept in an S3-compatible bucket")
        head.setObjectName("ViewTitle")
        lay.addWidget(head)
        lay.addWidget(muted_label("Amazon S3, Backblaze B2, Cloudflare R2, MinIO, Garage, SeaweedFS and others. "
                                  "The keys are kept in this computer's keychain, never in a file."))
        form = QFormLayout()
        self.endpoint = QLineEdit()
        self.endpoint.setPlaceholderText("https://s3.example.com (empty for Amazon S3)")
        form.addRow("Server", self.endpoint)
        self.region = QLineEdit()
        self.region.setPlaceholderText("optional, e.g. eu-west-1 or auto")
        form.addRow("Region", self.region)
        self.bucket = QLineEdit()
        self.bucket.setPlaceholderText("my-bucket")
        form.addRow("Bucket", self.bucket)
        self.prefix = QLineEdit()
        self.prefix.setPlaceholderText("optional folder inside the bucket, e.g. memory")
        form.addRow("Folder", self.prefix)
        self.key_id = QLineEdit()
        self.key_id.setPlaceholderText("access key id (empty: use this computer's AWS settings)")
        form.addRow("Access key", self.key_id)
        self.secret = SecretEdit("secret access key")
        form.addRow("Secret key", self.secret)
        lay.addLayout(form)
        self.error = QLabel("")
        self.error.setTextFormat(Qt.TextFormat.PlainText)
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #b91c1c;")
        lay.addWidget(self.error)
        buttons = QDialogButtonBox()
        self.open_button = buttons.addButton("Continue", QDialogButtonBox.ButtonRole.AcceptRole)
        self.open_button.setObjectName("Primary")
        buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.open_storage)
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)

    def open_storage(self) -> None:
        bucket, endpoint = self.bucket.text().strip(), self.endpoint.text().strip()
        key_id, secret = self.key_id.text().strip(), self.secret.text()
        if not bucket:
            self.error.setText("Type the bucket's name.")
            return
        if endpoint and not endpoint.startswith(("http://", "https://")):
            self.error.setText("The server's address starts with https:// (or http:// on your own network).")
            return
        if bool(key_id) != bool(secret):
            self.error.setText("Type both the access key and the secret key, or neither.")
            return
        try:
            location = camillo.object_store_url(bucket, self.prefix.text(), endpoint, self.region.text())
        except VaultError as exc:
            self.error.setText(safe_text(str(exc), 500))
            return
        self.open_button.setEnabled(False)
        self.error.setText("")

        def job(ctx: Any) -> str:
            if key_id:
                camillo.remember_object_store_keys(location, key_id, secret)
            return location

        self.client.submit(job, self._kept, self._failed, context=self, label="keep the object-storage keys")

    def _kept(self, location: str) -> None:
        self.secret.clear()
        self.location = location
        self.accept()

    def _failed(self, exc: BaseException) -> None:
        self.open_button.setEnabled(True)
        if isinstance(exc, camillo.KeychainError):
            self.error.setText(safe_text(f"{exc}. The keys were not kept anywhere: leave them empty to use this "
                                         "computer's AWS settings (AWS_ACCESS_KEY_ID, ~/.aws/credentials).", 800))
        else:
            self.error.setText(safe_text(f"{exc}", 800))

    @classmethod
    def ask(cls, client: Any, parent: QWidget | None = None) -> str | None:
        """The location to open, or None when cancelled."""
        dlg = cls(client, parent)
        return dlg.location if dlg.exec() == QDialog.DialogCode.Accepted else None
