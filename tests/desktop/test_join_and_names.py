"""Issue 17, desktop items 1 and 2, end to end with real worker threads and real keys: a new
installation joins the demo vault from the welcome screen with the typed code another device shows
(two installations sharing one folder); a new installation names itself on its first open; the
Devices view renames a device and says what kind of computer each one is.

GUI thread (pytest-qt); vault work runs on the clients' worker threads.
"""

from __future__ import annotations

import os

import camillo
import pytest
from camillo import DEMO_PASSPHRASE
from PySide6.QtWidgets import QPushButton

from camillo_desktop.views.devices import DeviceColumn

from .helpers import call, cell, click, no_guard, wait_view
from .test_desktop_ii import os_keychain  # noqa: F401  (the fixture: a D-Bus Secret Service as the OS keychain)


def button(widget, text: str) -> QPushButton:
    return next(b for b in widget.findChildren(QPushButton) if b.text() == text)


def device_names(qtbot, client) -> dict[str, camillo.DeviceInfo]:
    return {d.name: d for d in call(qtbot, client, lambda ctx: (ctx.vault.refresh(), ctx.vault.devices())[1])}


@pytest.mark.usefixtures("os_keychain")
def test_join_from_the_welcome_screen_by_typed_code(qtbot, qapp, client, demo_window, demo_vault, settings, tmp_path):
    from camillo_desktop.welcome import WelcomeWindow
    from camillo_desktop.worker import VaultClient

    # The existing device: Devices -> Add a device shows the typed code.
    enroll = wait_view(qtbot, demo_window, "enroll")
    offer = enroll.offer
    assert offer is not None and offer.typed_code

    # The new installation (this test's CAMILLO_HOME, its own worker) starts on the welcome screen.
    laptop = VaultClient()
    try:
        welcome = WelcomeWindow(laptop, settings)
        qtbot.addWidget(welcome)
        welcome.show()
        click(qtbot, button(welcome, "Join an existing vault\u2026"))
        join = welcome.join_dialog
        qtbot.waitUntil(join.isVisible, timeout=5_000)
        assert join.name.text() == camillo.Vault.default_device_name()  # the host name, unless changed

        # Refusals are said in the dialog and leave it ready for another try.
        vmem = str(tmp_path / "copy.vmem")
        with no_guard():
            camillo.Vault.pack(demo_vault.path, vmem)
        join.folder.setText(vmem)
        join.code.setText(offer.typed_code)
        click(qtbot, join.start)
        assert ".vmem file" in join.status.text() and join.start.isEnabled() and not join.sas.text()
        join.folder.setText(str(tmp_path / "not synced yet"))
        click(qtbot, join.start)
        qtbot.waitUntil(lambda: "not a folder" in join.status.text() or "not a vault" in join.status.text(),
                        timeout=10_000)
        assert join.start.isEnabled() and not join.sas.text()

        # The synced folder and the typed code, spaced as a person types it.
        join.folder.setText(demo_vault.path)
        join.code.setText("  " + offer.typed_code.lower().replace("-", " ") + " ")
        join.name.setText("Travel laptop")
        opened: list = []
        welcome.opened.connect(opened.append)
        click(qtbot, join.start)
        qtbot.waitUntil(lambda: bool(join.sas.text()), timeout=15_000)
        assert "Waiting for its confirmation" in join.status.text() and not join.start.isEnabled()
        qtbot.waitUntil(lambda: enroll.match.isVisible(), timeout=15_000)
        assert enroll.sas.text() == join.sas.text() and len(join.sas.text().replace(" ", "")) == 6
        assert "Travel laptop" in enroll.state.text()
        qtbot.wait(1_500)  # polled meanwhile, on the laptop's worker: nothing opens before the other device confirms
        assert not opened and join.isVisible()

        click(qtbot, enroll.match)
        qtbot.waitUntil(lambda: bool(opened), timeout=30_000)
        info = opened[0]
        assert info["vault_id"] == call(qtbot, client, lambda ctx: ctx.vault.vault_id).hex()
        assert info["credential"] == "device key" and laptop.is_open
        laptop_id = call(qtbot, laptop, lambda ctx: ctx.vault.writer_id)
        # Its device key went to the OS keychain, as every enrollment's does.
        import keyring

        assert keyring.get_password("vmem", f"{info['vault_id']}/{laptop_id.hex()}")
        qtbot.waitUntil(lambda: "Done" in enroll.state.text(), timeout=15_000)
        travel = device_names(qtbot, client)["Travel laptop"]
        assert travel.writer_id == laptop_id and not travel.revoked
    finally:
        laptop.shutdown()
        qapp.processEvents()


def test_rename_a_device(qtbot, demo_window, client, monkeypatch, informed):
    import camillo_desktop.devicenames as names

    devices = wait_view(qtbot, demo_window, "devices")
    rows = range(devices.model.rowCount())
    # Platforms in words: what kind of computer, never a kernel version.
    for r in rows:
        kind = cell(devices.model, r, DeviceColumn.PLATFORM)
        assert kind and not any(ch.isdigit() for ch in kind), kind
    mine = next(r for r in rows if cell(devices.model, r, DeviceColumn.STATUS) == "this device")
    old = cell(devices.model, mine, DeviceColumn.NAME)

    # Nothing selected: say so.
    devices.table.clearSelection()
    devices.table.setCurrentIndex(devices.model.index(-1, 0))
    click(qtbot, devices.rename_button)
    assert informed.messages[-1] == ("Rename a device", "Select the device to rename in the list first.")

    devices.table.selectRow(mine)
    answers = iter(["Kitchen desktop", "x" * 80])
    monkeypatch.setattr(names, "ask_name", lambda parent, question, current: (question, current) and next(answers))
    with qtbot.waitSignal(devices.loaded, timeout=20_000):
        click(qtbot, devices.rename_button)
    now = {cell(devices.model, r, DeviceColumn.STATUS): cell(devices.model, r, DeviceColumn.NAME)
           for r in range(devices.model.rowCount())}
    assert now["this device"] == "Kitchen desktop" != old
    assert device_names(qtbot, client)["Kitchen desktop"].this_device

    # A name the vault refuses: the reason, in a message; nothing renamed.
    devices.table.selectRow(next(r for r in range(devices.model.rowCount())
                                 if cell(devices.model, r, DeviceColumn.NAME) == "Kitchen desktop"))
    count = len(informed.messages)
    click(qtbot, devices.rename_button)
    qtbot.waitUntil(lambda: len(informed.messages) > count, timeout=10_000)
    title, text = informed.messages[-1]
    assert title == "Rename a device" and "at most 64 characters" in text
    assert "Kitchen desktop" in device_names(qtbot, client)


def test_a_new_installation_names_itself_on_its_first_open(qtbot, client, demo_vault):
    from camillo_desktop.dialogs import UnlockDialog

    # This test's CAMILLO_HOME has never opened the demo vault: the dialog asks for a name.
    dlg = UnlockDialog(client, demo_vault.path)
    qtbot.addWidget(dlg)
    dlg.show()
    qtbot.waitUntil(dlg.device_name.isVisible, timeout=10_000)
    assert dlg.device_name.edit.text() == camillo.Vault.default_device_name()
    dlg.device_name.edit.setText("  Office PC ")
    dlg.secret.edit.setText(DEMO_PASSPHRASE)
    dlg.unlock()
    qtbot.waitUntil(lambda: dlg.info is not None, timeout=30_000)
    me = device_names(qtbot, client)["Office PC"]
    assert me.this_device and me.writer_id == call(qtbot, client, lambda ctx: ctx.vault.writer_id)

    # The next open of the same installation does not ask again.
    again = UnlockDialog(client, demo_vault.path)
    qtbot.addWidget(again)
    again.show()
    call(qtbot, client, lambda ctx: None)  # after the dialog's own questions to the worker
    qtbot.wait(50)
    assert not again.device_name.isVisible() and again.device_name.value is None


def test_the_welcome_screen_renders_with_the_join_choice(tmp_path):
    """``--view welcome --screenshot``: the real app, in its own process, renders the welcome screen."""
    import subprocess
    import sys

    from PySide6.QtGui import QImage

    out = tmp_path / "welcome.png"
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", CAMILLO_HOME=str(tmp_path / "home"))
    env.pop("DISPLAY", None)
    proc = subprocess.run([sys.executable, "-m", "camillo_desktop", "--view", "welcome", "--screenshot", str(out)],
                          env=env, capture_output=True, text=True, timeout=90, check=False)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    image = QImage(str(out))
    assert (image.width(), image.height()) == (1280, 800)
    assert len({image.pixel(x, y) for x in range(0, 1280, 16) for y in range(0, 800, 16)}) > 20


def test_the_welcome_screen_offers_to_join(qtbot, client, settings):
    from camillo_desktop.welcome import WelcomeWindow

    welcome = WelcomeWindow(client, settings)
    qtbot.addWidget(welcome)
    texts = [b.text() for b in welcome.findChildren(QPushButton)]
    assert texts.index("Join an existing vault\u2026") == texts.index("Create a vault\u2026") + 1
