"""End to end, with the real vault worker thread: create, unlock, browse, facts, provenance, search,
lock and auto-lock, clipboard, status bar, and the messages a user sees for a vault that cannot be
opened."""

from __future__ import annotations

import os
import time

import camillo
import pytest
import shiboken6
from camillo import NewRecord, Unlock, Vault
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QDialog, QPushButton, QWizard

from .helpers import call, open_vault, wait_idle

DISPLAY = Qt.ItemDataRole.DisplayRole
PASSPHRASE = "correct horse battery staple"


# --------------------------------------------------------------------------- helpers


def top_level(cls):
    return [w for w in QApplication.topLevelWidgets() if isinstance(w, cls) and w.isVisible()]


def wait_view(qtbot, window, name: str, action, timeout: int = 15_000) -> None:
    with qtbot.waitSignal(window.view_ready, timeout=timeout, check_params_cb=lambda n: n == name):
        action()


def make_unlock_dialog(qtbot, client, path: str):
    from camillo_desktop.dialogs import UnlockDialog

    dlg = UnlockDialog(client, path)
    qtbot.addWidget(dlg)
    dlg.show()
    wait_idle(qtbot, client)  # the device-key check ran on the worker
    return dlg


def try_unlock(qtbot, client, dlg, secret: str | None, *, method: str = "pass") -> None:
    getattr(dlg, f"by_{method}").setChecked(True)
    if secret is not None:
        dlg.secret.edit.setText(secret)
    qtbot.mouseClick(dlg.unlock_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, client, timeout=30_000)


def append_as(qtbot, client, demo, who: str, items, compartment: str = "personal") -> list[bytes]:
    """Write records as an agent (``who`` = a grant name) or as the demo desktop, on the worker."""
    def job(ctx):
        unlock = Unlock.grant(demo.grants[who]) if who in demo.grants else demo.unlock()
        home = demo.homes["planner" if who == "planner" else "desktop"]
        with Vault.open(demo.path, unlock, home=home) as v:
            return v.append(items, compartment=compartment).written

    return call(qtbot, client, job)


class StallMeter:
    """Largest gap between ticks of a 10 ms timer on the GUI thread."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.last = time.perf_counter()
        self.timer = QTimer()
        self.timer.timeout.connect(self._tick)
        self.timer.start(10)

    def _tick(self) -> None:
        now = time.perf_counter()
        self.worst = max(self.worst, now - self.last)
        self.last = now

    def stop(self) -> None:
        self._tick()
        self.timer.stop()


# --------------------------------------------------------------------------- creating a vault


def test_create_a_vault_with_the_wizard_and_land_on_the_timeline(qtbot, client, make_window, tmp_path):
    from camillo_desktop.create_wizard import CreateVaultWizard

    wiz = CreateVaultWizard(client)
    qtbot.addWidget(wiz)
    wiz.show()
    qtbot.waitExposed(wiz)
    nxt = wiz.button(QWizard.WizardButton.NextButton)
    folder = str(tmp_path / "My memory")
    assert not nxt.isEnabled()  # the folder is mandatory
    qtbot.keyClicks(wiz.where.folder, folder)
    assert nxt.isEnabled()
    qtbot.mouseClick(nxt, Qt.MouseButton.LeftButton)
    assert wiz.currentPage() is wiz.passphrase

    qtbot.keyClicks(wiz.passphrase.first.edit, PASSPHRASE)
    qtbot.keyClicks(wiz.passphrase.second.edit, PASSPHRASE[:-1])
    commit = wiz.button(QWizard.WizardButton.CommitButton)
    assert not commit.isEnabled()  # the two fields differ
    qtbot.keyClicks(wiz.passphrase.second.edit, PASSPHRASE[-1])
    assert commit.isEnabled()
    assert "strong" in wiz.passphrase.meter.label.text()
    # The commit button is shown instead of Next: there is no way back after it.
    assert commit.isVisible() and not nxt.isVisible() and commit.text() == "Create the vault"
    qtbot.mouseClick(commit, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: wiz.currentPage() is wiz.phrase_page, timeout=30_000)
    assert not wiz.button(QWizard.WizardButton.BackButton).isEnabled()
    assert os.path.exists(os.path.join(folder, "VMEM"))
    assert wiz.passphrase.first.text() == "" and wiz.passphrase.second.text() == ""  # not kept in the fields

    words = wiz.phrase.split()
    assert len(words) == 24
    assert not nxt.isEnabled()
    wiz.phrase_page.written.setChecked(True)
    assert nxt.isEnabled()
    qtbot.mouseClick(nxt, Qt.MouseButton.LeftButton)
    assert wiz.currentPage() is wiz.check

    finish = wiz.button(QWizard.WizardButton.FinishButton)
    assert len(wiz.check.edits) == 3
    for i, edit in wiz.check.edits:
        assert not finish.isEnabled()
        qtbot.keyClicks(edit, words[i])
    assert finish.isEnabled()
    qtbot.mouseClick(finish, Qt.MouseButton.LeftButton)
    assert wiz.result() == QDialog.DialogCode.Accepted
    assert wiz.phrase == ""  # the phrase does not outlive the wizard
    info = wiz.info
    assert info is not None and info["path"].rstrip("/") == folder and client.is_open

    window = make_window(first_view=None)  # the app's first view: the conversations
    wait_view(qtbot, window, "conversations", lambda: window.vault_opened(info))
    # An empty vault says how to bring history in, with the import buttons.
    conversations = window.current_view()
    assert conversations.name == "conversations"
    assert conversations.pages.currentWidget() is conversations.empty
    assert "Bring your history in" in conversations.empty_text.text()
    assert [b.text() for b in conversations.import_buttons] == ["Import a ChatGPT export\u2026",
                                                                "Import a Claude export\u2026"]
    assert all(b.isVisible() for b in conversations.import_buttons)
    wait_view(qtbot, window, "timeline", lambda: window.show_view("timeline"))
    assert window.pages["timeline"].count.text() == "0 records"
    assert window.windowTitle() == "My memory \u2014 Camillo"

    # The phrase really opens it.
    window.close()
    client.lock()
    wait_idle(qtbot, client)
    open_vault(qtbot, client, folder, Unlock.recovery(" ".join(words)))


def test_wizard_refuses_a_non_empty_folder_and_a_weak_passphrase(qtbot, client, tmp_path):
    from camillo_desktop.create_wizard import CreateVaultWizard

    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    wiz = CreateVaultWizard(client)
    qtbot.addWidget(wiz)
    wiz.show()
    nxt = wiz.button(QWizard.WizardButton.NextButton)
    wiz.where.folder.setText(str(tmp_path / "busy"))
    qtbot.mouseClick(nxt, Qt.MouseButton.LeftButton)
    assert wiz.currentPage() is wiz.where
    assert "not empty" in wiz.where.error.text()
    wiz.where.folder.setText(str(tmp_path / "fresh"))
    qtbot.mouseClick(nxt, Qt.MouseButton.LeftButton)
    assert wiz.currentPage() is wiz.passphrase
    for edit in (wiz.passphrase.first.edit, wiz.passphrase.second.edit):
        edit.setText("abc123")
    qtbot.mouseClick(nxt, Qt.MouseButton.LeftButton)
    assert wiz.currentPage() is wiz.passphrase
    assert "too easy to guess" in wiz.passphrase.error.text()
    wait_idle(qtbot, client)
    assert not os.path.exists(tmp_path / "fresh" / "VMEM")


def test_wizard_check_page_rejects_a_wrong_word(qtbot, client, tmp_path):
    from camillo_desktop.create_wizard import CreateVaultWizard

    wiz = CreateVaultWizard(client)
    qtbot.addWidget(wiz)
    wiz.show()
    nxt = wiz.button(QWizard.WizardButton.NextButton)
    wiz.where.folder.setText(str(tmp_path / "v"))
    nxt.click()
    wiz.passphrase.first.edit.setText(PASSPHRASE)
    wiz.passphrase.second.edit.setText(PASSPHRASE)
    nxt.click()
    qtbot.waitUntil(lambda: wiz.currentPage() is wiz.phrase_page, timeout=30_000)
    words = wiz.phrase.split()
    wiz.phrase_page.written.setChecked(True)
    nxt.click()
    (i0, e0), (i1, e1), (i2, e2) = wiz.check.edits
    e0.setText(words[i0].upper())  # case does not matter
    e1.setText(words[i1])
    e2.setText(words[(i2 + 1) % 24] if words[(i2 + 1) % 24] != words[i2] else "wrong")
    assert not wiz.button(QWizard.WizardButton.FinishButton).isEnabled()
    e2.setText(f"  {words[i2]} ")
    assert wiz.button(QWizard.WizardButton.FinishButton).isEnabled()
    wiz.button(QWizard.WizardButton.FinishButton).click()  # (cancelling here crashes: see the next test)
    assert wiz.result() == QDialog.DialogCode.Accepted


CANCEL_ON_CHECK_PAGE = """
import os, sys
from PySide6.QtWidgets import QApplication, QWizard
app = QApplication([])
from camillo_desktop.worker import VaultClient, install_thread_guard
from camillo_desktop.create_wizard import CreateVaultWizard
install_thread_guard()
client = VaultClient()
wiz = CreateVaultWizard(client)
wiz.show()
nxt = wiz.button(QWizard.WizardButton.NextButton)
wiz.where.folder.setText(sys.argv[1])
nxt.click()
wiz.passphrase.first.edit.setText("correct horse battery staple")
wiz.passphrase.second.edit.setText("correct horse battery staple")
nxt.click()
while wiz.currentPage() is not wiz.phrase_page:
    app.processEvents()
wiz.phrase_page.written.setChecked(True)
nxt.click()
assert wiz.currentPage() is wiz.check
wiz.button(QWizard.WizardButton.CancelButton).click()
print("cancelled", flush=True)
client.shutdown()
"""


def test_cancelling_the_wizard_on_the_check_page_does_not_crash(tmp_path):
    import subprocess
    import sys

    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    proc = subprocess.run([sys.executable, "-c", CANCEL_ON_CHECK_PAGE, str(tmp_path / "v")], env=env,
                          capture_output=True, text=True, timeout=90, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "cancelled" in proc.stdout


def test_wizard_cannot_go_back_to_the_passphrase_once_the_vault_exists(qtbot, client, tmp_path):
    from camillo_desktop.create_wizard import CreateVaultWizard

    wiz = CreateVaultWizard(client)
    qtbot.addWidget(wiz)
    wiz.show()
    nxt = wiz.button(QWizard.WizardButton.NextButton)
    wiz.where.folder.setText(str(tmp_path / "v"))
    nxt.click()
    wiz.passphrase.first.edit.setText(PASSPHRASE)
    wiz.passphrase.second.edit.setText(PASSPHRASE)
    nxt.click()
    qtbot.waitUntil(lambda: wiz.currentPage() is wiz.phrase_page, timeout=30_000)
    back = wiz.button(QWizard.WizardButton.BackButton)
    assert not (back.isVisible() and back.isEnabled())  # the passphrase page is a commit page
    wiz.back()  # not even programmatically
    assert wiz.currentPage() is wiz.phrase_page
    if back.isVisible() and back.isEnabled():
        back.click()
        other = "a completely different passphrase of many words"
        wiz.passphrase.first.edit.setText(other)
        wiz.passphrase.second.edit.setText(other)
        nxt.click()
        wait_idle(qtbot, client)
        client.lock()
        wait_idle(qtbot, client)
        # Whatever the user typed last should open the vault (or the page should not have been reachable).
        open_vault(qtbot, client, str(tmp_path / "v"), Unlock.passphrase(other))


# --------------------------------------------------------------------------- unlocking


def test_unlock_with_the_passphrase(qtbot, client, demo_vault):
    dlg = make_unlock_dialog(qtbot, client, demo_vault.path)
    assert dlg.by_pass.isChecked()
    try_unlock(qtbot, client, dlg, demo_vault.passphrase)
    assert dlg.result() == QDialog.DialogCode.Accepted
    assert dlg.info["credential"] == "passphrase" and dlg.info["name"] == "Demo vault"
    assert dlg.secret.text() == ""  # cleared once used
    assert client.is_open


def test_unlock_with_the_recovery_phrase(qtbot, client, demo_vault):
    dlg = make_unlock_dialog(qtbot, client, demo_vault.path)
    dlg.by_phrase.setChecked(True)
    assert "24 words" in dlg.secret.edit.placeholderText()
    try_unlock(qtbot, client, dlg, demo_vault.recovery_phrase, method="phrase")
    assert dlg.result() == QDialog.DialogCode.Accepted
    assert "recovery" in dlg.info["credential"]


def test_a_wrong_passphrase_says_so_and_the_same_dialog_can_retry(qtbot, client, demo_vault):
    dlg = make_unlock_dialog(qtbot, client, demo_vault.path)
    try_unlock(qtbot, client, dlg, "not the passphrase at all")
    assert dlg.isVisible() and dlg.result() != QDialog.DialogCode.Accepted
    assert dlg.error.text()
    assert "Traceback" not in dlg.error.text() and "Unexpected" not in dlg.error.text()
    assert dlg.unlock_button.isEnabled() and not dlg.progress.isVisible()
    assert dlg.secret.edit.selectedText() == "not the passphrase at all"  # ready to be typed over
    assert not client.is_open
    try_unlock(qtbot, client, dlg, "")
    assert dlg.error.text() == "Type your passphrase."
    try_unlock(qtbot, client, dlg, demo_vault.passphrase)
    assert dlg.result() == QDialog.DialogCode.Accepted
    assert client.is_open


def test_a_wrong_recovery_phrase_is_refused(qtbot, client, demo_vault):
    dlg = make_unlock_dialog(qtbot, client, demo_vault.path)
    words = demo_vault.recovery_phrase.split()
    words[0], words[1] = words[1], words[0]
    try_unlock(qtbot, client, dlg, " ".join(words), method="phrase")
    assert dlg.result() != QDialog.DialogCode.Accepted
    assert dlg.error.text() and "Traceback" not in dlg.error.text()


def test_device_key_is_not_offered_without_a_keychain(qtbot, client, demo_vault):
    # Open once with the passphrase: this installation registers (its key sealed locally, no keychain).
    open_vault(qtbot, client, demo_vault.path, demo_vault.unlock())
    client.lock()
    wait_idle(qtbot, client)
    dlg = make_unlock_dialog(qtbot, client, demo_vault.path)
    assert not dlg.by_device.isEnabled()
    assert dlg.by_pass.isChecked()
    assert dlg.secret.isVisible()


def test_device_key_is_offered_and_preselected_when_available(qtbot, client, demo_vault, monkeypatch):
    import camillo_desktop.dialogs as dialogs

    monkeypatch.setattr(dialogs, "device_key_available", lambda path: True)
    dlg = make_unlock_dialog(qtbot, client, demo_vault.path)
    assert dlg.by_device.isEnabled() and dlg.by_device.isChecked()
    assert not dlg.secret.isVisible()  # no secret to type for the device key


def test_damaged_vault_shows_a_specific_message(qtbot, client, demo_vault):
    vmem = os.path.join(demo_vault.path, "VMEM")
    data = bytearray(open(vmem, "rb").read())
    data[len(data) // 2] ^= 0x01
    with open(vmem, "wb") as fh:
        fh.write(bytes(data))
    dlg = make_unlock_dialog(qtbot, client, demo_vault.path)
    try_unlock(qtbot, client, dlg, demo_vault.passphrase)
    text = dlg.error.text()
    assert text.startswith("This vault cannot be opened:")
    assert "VMEM" in text and "damaged" in text
    assert "Traceback" not in text and "Unexpected" not in text
    assert dlg.result() != QDialog.DialogCode.Accepted


def test_a_folder_that_is_not_a_vault_shows_a_specific_message(qtbot, client, tmp_path):
    folder = tmp_path / "holiday photos"
    folder.mkdir()
    (folder / "beach.jpg").write_bytes(b"\xff\xd8\xff")
    dlg = make_unlock_dialog(qtbot, client, str(folder))
    try_unlock(qtbot, client, dlg, PASSPHRASE)
    text = dlg.error.text()
    assert text.startswith("This vault cannot be opened:")
    assert "not a VMEM vault" in text
    assert "Traceback" not in text and "Unexpected" not in text


def test_a_vmem_of_a_newer_format_shows_a_specific_message(qtbot, client, demo_vault, tmp_path):
    from camillo import descriptor, packshelf, storage
    from camillo.packs import write_pack

    shelf = packshelf.open_shelf(demo_vault.path)
    entries = []
    for name in shelf.list():
        if storage.kind_of(name) in ("descriptor", "slot", "envelope", "segment"):
            data = shelf.read(name)
            if name == descriptor.NAME:
                d = descriptor.decode(data)
                data = descriptor.Descriptor(d.vault_id, version=2, suite=d.suite).encode()
            entries.append((name, data))
    shelf.close()
    out = tmp_path / "from the future.vmem"
    with open(out, "wb") as fh:
        write_pack(entries, fh, complete_vault=True)
    dlg = make_unlock_dialog(qtbot, client, str(out))
    try_unlock(qtbot, client, dlg, demo_vault.passphrase)
    text = dlg.error.text()
    assert text.startswith("This vault cannot be opened:")
    assert "format version 2" in text and "newer Camillo" in text
    assert "Traceback" not in text and "Unexpected" not in text


def test_a_vmem_file_opens_read_only(qtbot, client, demo_vault, tmp_path):
    out = str(tmp_path / "copy.vmem")
    Vault.pack(demo_vault.path, out)
    dlg = make_unlock_dialog(qtbot, client, out)
    try_unlock(qtbot, client, dlg, demo_vault.passphrase)
    assert dlg.result() == QDialog.DialogCode.Accepted, dlg.error.text()
    assert dlg.info["read_only"]


# --------------------------------------------------------------------------- browsing the timeline


def test_timeline_shows_the_demo_with_authority_badges(qtbot, demo_window):
    from camillo_desktop.models import RecordColumn
    from camillo_desktop.widgets import BADGE_ROLE

    view = demo_window.pages["timeline"]
    model = view.model
    assert demo_window.current_view() is view
    assert model.total() > 40
    assert view.count.text() == f"{model.total():,} records"
    badges = [model.data(model.index(r, RecordColumn.AUTHORITY), BADGE_ROLE) for r in range(model.rowCount())]
    assert None not in badges
    assert {"user", "inferred", "observed"} <= set(badges)
    texts = [model.data(model.index(r, RecordColumn.TEXT), DISPLAY) for r in range(model.rowCount())]
    assert any("Lisbon" in t for t in texts)
    assert not any("4921" in t for t in texts)  # the erased PIN message is gone
    assert not any("wrong chat" in t for t in texts)  # the forgotten message is hidden...
    view.show_hidden.setChecked(True)  # ...unless asked for
    qtbot.waitUntil(lambda: any("wrong chat" in (model.data(model.index(r, RecordColumn.TEXT), DISPLAY) or "")
                                for r in range(model.rowCount())), timeout=10_000)


def test_a_long_timeline_is_read_a_page_at_a_time_and_reaches_any_row_date_or_record(qtbot, client, demo_vault,
                                                                                     make_window):
    """Issue 19: in time order the timeline reads the count and its first page only (a million records
    used to list a million ids first: 19 s); every other page is read when scrolled to, and the ends,
    a date and a record far down are reached by their row in the time index."""
    from datetime import datetime

    from PySide6.QtCore import QDate

    from camillo_desktop.models import PAGE

    day, t0 = 86400, 1_600_000_000
    old = [NewRecord(type="message", conversation="diary", role="user", text=f"diary day {i}", ts=t0 + i * day)
           for i in range(2 * PAGE + 50)]
    written = append_as(qtbot, client, demo_vault, "desktop", old)
    window = make_window()
    info = open_vault(qtbot, client, demo_vault.path, demo_vault.unlock(), home=demo_vault.homes["desktop"])
    wait_view(qtbot, window, "timeline", lambda: window.vault_opened(info))
    view, model = window.pages["timeline"], window.pages["timeline"].model
    assert model.paged and model.rowCount() == PAGE  # the first page, shown before the rows are counted
    newest_first = call(qtbot, client, lambda ctx: ctx.vault.timeline_ids(descending=True))
    assert [model.record(r).id for r in range(PAGE)] == newest_first[:PAGE]
    qtbot.waitUntil(lambda: view.count.text() == f"{len(newest_first):,} records", timeout=10_000)
    assert model.total() == len(newest_first) > 2 * PAGE + 50

    def current() -> bytes | None:
        idx = view.table.currentIndex()
        v = model.record(idx.row()) if idx.isValid() else None
        return v.id if v is not None else None

    far = written[PAGE]  # far down, on a page not read yet
    assert model.row_of(far) < 0
    assert view.select_record(far)
    qtbot.waitUntil(lambda: current() == far, timeout=10_000)
    assert view.table.currentIndex().row() == newest_first.index(far)

    QTest.keyClick(view.table, Qt.Key.Key_End, Qt.KeyboardModifier.ControlModifier)  # the oldest record
    qtbot.waitUntil(lambda: current() == newest_first[-1], timeout=10_000)
    assert model.rowCount() == model.total()
    assert [model.record(r).id for r in range(model.total() - 10, model.total())] == newest_first[-10:]
    QTest.keyClick(view.table, Qt.Key.Key_Home, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: current() == newest_first[0], timeout=10_000)

    target = datetime.fromtimestamp(t0 + 123 * day)  # the day of "diary day 123", local time
    view.date.setDate(QDate(target.year, target.month, target.day))
    view.go.click()
    qtbot.waitUntil(lambda: current() == written[123], timeout=10_000)
    assert model.record(view.table.currentIndex().row()).text == "diary day 123"


def test_selecting_a_row_fills_the_detail_pane(qtbot, demo_window):
    from camillo_desktop.models import RecordColumn

    view = demo_window.pages["timeline"]
    model = view.model
    row = next(r for r in range(model.rowCount())
               if model.record(r).type == "fact" and model.record(r).key == "user/diet"
               and model.record(r).writer == "desktop")  # the user's value (an agent proposes another)
    view.table.selectRow(row)
    d = view.detail
    v = model.record(row)
    assert d.record is v
    assert d.fields["Type"].text() == "fact (a value)"
    assert d.fields["Key"].text() == "user/diet"
    assert d.fields["Written by"].text() == "desktop (device)"
    assert d.fields["Compartment"].text() == "personal"
    assert d.claimed.text() == "user" and d.effective.text() == "user"
    assert d.fields["Signature"].text().startswith("verified (Ed25519")
    assert d.fields["Status"].text() == "current"
    assert d.fields["Record id"].text().replace("\n", "") == v.id.hex()
    assert d.text.toPlainText() == "vegetarian"
    assert d.sources_title.isVisibleTo(d)  # it has a source message
    assert model.data(model.index(row, RecordColumn.WRITER), DISPLAY) == "desktop"

    agent_row = next(r for r in range(model.rowCount()) if model.record(r).writer_kind == "agent")
    view.table.selectRow(agent_row)
    assert d.fields["Written by"].text().endswith("(agent)")
    assert d.effective.text() != "user"


def test_agent_text_with_control_and_bidi_characters_is_shown_escaped(qtbot, client, demo_vault, make_window):
    from camillo_desktop.models import RecordColumn

    evil = "Pay \u202eNOW\u202c to \x1b[31mred\x07 bell\x00 nul\nsecond line \u2067iso\u2069"
    (rid,) = append_as(qtbot, client, demo_vault, "planner",
                       [NewRecord(type="message", conversation="c1", role="assistant", text=evil)])
    window = make_window()
    info = open_vault(qtbot, client, demo_vault.path, demo_vault.unlock(), home=demo_vault.homes["desktop"])
    wait_view(qtbot, window, "timeline", lambda: window.vault_opened(info))
    view = window.pages["timeline"]
    assert view.select_record(rid)
    qtbot.waitUntil(lambda: view.detail.record is not None and view.detail.record.id == rid, timeout=10_000)
    shown = view.detail.text.toPlainText()
    for ch in ("\u202e", "\u202c", "\x1b", "\x07", "\x00", "\u2067", "\u2069"):
        assert ch not in shown
    assert "\u27e8U+202E\u27e9" in shown and "\u27e8U+2067\u27e9" in shown
    assert "\u241b[31mred\u2407 bell\u2400 nul" in shown
    assert "\nsecond line" in shown  # newlines stay newlines in the detail pane
    row = view.model.row_of(rid)
    cell = view.model.data(view.model.index(row, RecordColumn.TEXT), DISPLAY)
    assert cell.startswith("assistant: Pay \u27e8U+202E\u27e9NOW")
    assert "\n" not in cell and "\u21b5" in cell  # one line in the table
    for ch in ("\u202e", "\x1b", "\x07", "\x00"):
        assert ch not in cell
    tip = view.model.data(view.model.index(row, RecordColumn.TEXT), Qt.ItemDataRole.ToolTipRole)
    assert "\u202e" not in tip and "\x1b" not in tip
    assert view.detail.fields["Written by"].text() == "agent planner (agent)"
    assert view.model.data(view.model.index(row, RecordColumn.WRITER), DISPLAY) == "agent planner"


def test_an_agent_written_record_type_is_shown_escaped(qtbot, client, demo_vault, make_window, monkeypatch):
    import camillo.records
    import camillo.values

    from camillo_desktop.models import RecordColumn

    # A hostile agent runs its own code: it skips the client-side check of type names.
    monkeypatch.setattr(camillo.records, "check_type_name", lambda name: None)
    monkeypatch.setattr(camillo.values, "check_type_name", lambda name: None)  # NewRecord's own check too
    evil_type = "com.evil/\u202eexe.txt\x1b[2J"
    (rid,) = append_as(qtbot, client, demo_vault, "planner",
                       [NewRecord(type=evil_type, conversation="c1", role="assistant", text="hello")])
    monkeypatch.undo()
    window = make_window()
    info = open_vault(qtbot, client, demo_vault.path, demo_vault.unlock(), home=demo_vault.homes["desktop"])
    wait_view(qtbot, window, "timeline", lambda: window.vault_opened(info))
    view = window.pages["timeline"]
    assert view.select_record(rid)
    qtbot.waitUntil(lambda: view.detail.record is not None and view.detail.record.id == rid, timeout=10_000)
    cell = view.model.data(view.model.index(view.model.row_of(rid), RecordColumn.TYPE), DISPLAY)
    shown = [cell, view.detail.fields["Type"].text(), view.detail.heading.text()]
    for text in shown:
        assert "\u202e" not in text and "\x1b" not in text, repr(text)


def test_a_one_megabyte_message_does_not_freeze_the_window(qtbot, client, demo_vault, make_window):
    from camillo_desktop.models import RecordColumn
    from camillo_desktop.views.detail import TEXT_PREFIX

    big = ("All work and no play makes Jack a dull boy. " * 24_000)[:1_000_000] + "\nTHE END"
    (rid,) = append_as(qtbot, client, demo_vault, "desktop",
                       [NewRecord(type="message", conversation="c9", role="user", text=big)])
    window = make_window()
    info = open_vault(qtbot, client, demo_vault.path, demo_vault.unlock(), home=demo_vault.homes["desktop"])
    wait_view(qtbot, window, "timeline", lambda: window.vault_opened(info))
    view = window.pages["timeline"]
    stalls = StallMeter()
    assert view.select_record(rid)
    qtbot.waitUntil(lambda: view.detail.record is not None and view.detail.record.id == rid, timeout=15_000)
    for _ in range(5):
        view.table.viewport().repaint()
        qtbot.wait(20)
    stalls.stop()
    # The pane shows the first TEXT_PREFIX characters at once, and the rest when asked.
    shown = view.detail.text.toPlainText()
    assert len(shown) == TEXT_PREFIX and big.startswith(shown)
    assert view.detail.truncated and view.detail.more_button.isVisibleTo(view.detail)
    assert f"first {TEXT_PREFIX:,} of {len(big):,} characters" in view.detail.more_label.text()
    cell = view.model.data(view.model.index(view.model.row_of(rid), RecordColumn.TEXT), DISPLAY)
    assert len(cell) <= 240
    print(f"\n1 MB message: largest GUI stall {stalls.worst * 1000:.0f} ms")
    assert stalls.worst < 2.0, f"the GUI froze for {stalls.worst:.2f} s"
    qtbot.mouseClick(view.detail.more_button, Qt.MouseButton.LeftButton)
    assert view.detail.text.toPlainText().endswith("THE END")
    assert not view.detail.truncated
    view.detail.copy_button.click()
    assert QGuiApplication.clipboard().text() == big  # Copy always copies the whole text
    view.table.selectRow(0)  # another record: no leftover "Show all"
    assert not view.detail.truncated or len(view.detail.record.text) > TEXT_PREFIX


def test_a_table_cell_of_a_huge_message_does_not_scan_all_of_it(monkeypatch):
    import unicodedata

    import camillo_desktop.text as text_mod
    from camillo_desktop.models import record_summary

    examined = {"n": 0}

    class CountingUnicodedata:
        @staticmethod
        def category(ch: str) -> str:
            examined["n"] += 1
            return unicodedata.category(ch)

    class V:  # the fields of a RecordView that record_summary reads
        key = None
        role = "user"
        text = "x" * 1_000_000
        type = "message"
        kind_name = "NOTE"
        hidden = False

    monkeypatch.setattr(text_mod, "unicodedata", CountingUnicodedata)
    summary = record_summary(V())
    assert len(summary) <= 240 and summary.startswith("user: xxx")
    assert examined["n"] < 10_000, f"{examined['n']:,} characters examined for a 240-character cell"


# --------------------------------------------------------------------------- facts and provenance


def show_facts(qtbot, window):
    wait_view(qtbot, window, "facts", lambda: window.show_view("facts"))
    return window.pages["facts"]


def test_facts_view_lists_the_demo_facts_with_their_status(qtbot, demo_window):
    from camillo_desktop.models import FactColumn

    view = show_facts(qtbot, demo_window)
    model = view.model
    status = {}
    for s in range(model.rowCount()):
        parent = model.index(s, 0)
        for r in range(model.rowCount(parent)):
            f = model.fact(model.index(r, 0, parent))
            status[f.key] = model.data(model.index(r, FactColumn.STATUS, parent), DISPLAY)
    assert status["user/favorite_coffee"] == "conflict"
    assert status["user/meeting_time"] == "pending"
    assert status["user/home_city"] == "ok"
    assert view.title_label.text() == f"Facts  ({len(status)})"
    assert status["user/diet"] == "ok"  # the user's value binds; an agent's proposal waits beside it
    assert "1 in conflict, 4 waiting" in view.subtitle.text()

    view.select_fact("user/favorite_coffee")
    assert view.status_badge.text() == "conflict"
    assert view.review.isVisibleTo(view) and not view.inbox.isVisibleTo(view)
    view.select_fact("user/meeting_time")
    assert view.inbox.isVisibleTo(view) and not view.review.isVisibleTo(view)
    assert view.authority_badge.text() == "inferred"


def test_a_vault_of_many_facts_lists_them_a_page_at_a_time(qtbot, client, demo_window, monkeypatch):
    """Above WHOLE facts, the Facts view reads the subjects with their counts and a page of the first
    subject's facts; the next pages are read as the person scrolls to the last row read, another
    subject's as they open it; a fact far down a subject is shown in the detail all the same."""
    from camillo_desktop.models import PAGE
    from camillo_desktop.views import facts as facts_view

    monkeypatch.setattr(facts_view, "WHOLE", 100)
    call(qtbot, client, lambda ctx: ctx.vault.append(
        [NewRecord(type="fact", key=f"user/zz{i:04}", value=f"value {i}") for i in range(2 * PAGE + 50)]))
    view = show_facts(qtbot, demo_window)
    model, tree = view.model, view.tree
    user, work = (model.index(model.subject_row(s), 0) for s in ("user", "work"))
    total = 10 + 2 * PAGE + 50
    assert model.total() == total and view.title_label.text() == f"Facts  ({total:,})"
    assert model.data(user, DISPLAY) == f"user  ({total - 1})"
    assert model.rowCount(user) == PAGE and tree.isExpanded(user)  # one page of the subject shown
    assert model.rowCount(work) == 0 and model.hasChildren(work) and not tree.isExpanded(work)
    assert "1 in conflict, 4 waiting" in view.subtitle.text()
    qtbot.wait(300)
    assert model.rowCount(user) == PAGE  # nothing more is read while the last row read is out of sight
    while (n := model.rowCount(user)) < total - 1:  # the person scrolls to the end: the next page comes
        tree.scrollToBottom()
        qtbot.waitUntil(lambda: model.rowCount(user) > n, timeout=10_000)  # (n: this turn's)
    qtbot.waitUntil(lambda: model.rowCount(user) == total - 1, timeout=10_000)
    keys = [model.fact(model.index(r, 0, user)).key for r in range(model.rowCount(user))]
    assert keys == sorted(keys) and len(set(keys)) == total - 1 and not model.can_read_more(user)
    tree.scrollTo(work)
    tree.expand(work)  # another subject: read when it opens
    qtbot.waitUntil(lambda: model.rowCount(work) == 1, timeout=10_000)
    assert model.fact(model.index(0, 0, work)).key == "work/project"

    # what a load reads: a page of the first subject, or of the fact's to select, read on to it
    page = call(qtbot, client, lambda ctx: facts_view.read_facts(ctx.vault, None))
    assert not page.whole and list(page.read) == ["user"] and len(page.read["user"]) == PAGE
    page = call(qtbot, client, lambda ctx: facts_view.read_facts(ctx.vault, "user/zz0440"))
    assert len(page.read["user"]) == total - 1 and "user/zz0440" in [f.key for f in page.read["user"]]
    monkeypatch.setattr(facts_view, "SELECT_PAGES", 1)
    view.clear()  # a fresh list: a fact beyond the pages read is shown in the detail
    tree.scrollToTop()
    view.load()
    qtbot.waitUntil(lambda: model.total() == total, timeout=10_000)
    view.select_fact("user/zz0440")
    qtbot.waitUntil(lambda: view.key_label.text().startswith("user/zz0440"), timeout=10_000)
    assert view.value_label.text() == "value 440" and model.rowCount(model.index(model.subject_row("user"), 0)) == PAGE


def test_the_facts_view_opened_on_a_fact_selects_it(qtbot, demo_window):
    """Opened for the first time with a fact to show (from the Conflicts view, a search hit): the fact
    asked for is selected once the facts arrive, though it was asked for after their read began."""
    wait_view(qtbot, demo_window, "facts", lambda: demo_window.show_view("facts", "work/project"))
    view = demo_window.pages["facts"]
    qtbot.waitUntil(lambda: view.key_label.text().startswith("work/project"), timeout=10_000)
    assert view.model.fact(view.tree.currentIndex()).key == "work/project"


def test_selecting_a_fact_shows_its_history(qtbot, demo_window):
    view = show_facts(qtbot, demo_window)
    view.select_fact("work/project")
    assert view.key_label.text() == "work/project  \u00b7  work"
    assert view.value_label.text() == "Artemis"
    assert view.history.rowCount() == 2
    values = [view.history.data(view.history.index(r, 2), DISPLAY) for r in range(2)]
    assert values == ["Apollo", "Artemis"]
    assert view.history.data(view.history.index(1, 0), DISPLAY).startswith("\u25b6")


def test_why_does_the_agent_believe_this_opens_the_source_message(qtbot, demo_window):
    from camillo_desktop.dialogs import RecordsDialog

    view = show_facts(qtbot, demo_window)
    view.select_fact("user/home_city")
    assert view.value_label.text() == "Porto"
    assert view.why.isVisibleTo(view)
    before = set(top_level(RecordsDialog))
    qtbot.mouseClick(view.why, Qt.MouseButton.LeftButton)
    dialogs = set(top_level(RecordsDialog)) - before
    assert len(dialogs) == 1
    dlg = dialogs.pop()
    qtbot.addWidget(dlg)
    assert "user/home_city" in dlg.windowTitle()
    qtbot.waitUntil(lambda: dlg.model.rowCount() == 1, timeout=10_000)
    source = dlg.model.record(0)
    assert source.type == "message"
    assert source.text == "We finally moved to Porto last week! Now looking for a place with a balcony."
    assert dlg.detail.record is source
    assert "moved to Porto" in dlg.detail.text.toPlainText()


# --------------------------------------------------------------------------- search


def search(qtbot, window, query: str):
    """Type the query in the search field, press Enter, wait for its results (or its error)."""
    view = window.pages["search"]
    window.search.clear()
    qtbot.keyClicks(window.search, query)
    qtbot.keyClick(window.search, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: query in view.count.text(), timeout=15_000)
    return view


def test_the_first_search_reports_ready_only_with_its_results(qtbot, demo_window):
    view = demo_window.pages["search"]
    seen: list[str] = []
    demo_window.view_ready.connect(lambda name: seen.append(view.count.text()) if name == "search" else None)
    qtbot.keyClicks(demo_window.search, "morning")
    qtbot.keyClick(demo_window.search, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: "morning" in view.count.text(), timeout=15_000)
    assert seen and "morning" in seen[0]


def test_search_from_the_search_field(qtbot, demo_window):
    view = search(qtbot, demo_window, "morning")
    assert demo_window.current_view() is view
    assert view.model.rowCount() >= 1
    n = view.model.total
    assert view.count.text() == f"{n} record{'s match' if n != 1 else ' matches'} \u201cmorning\u201d"
    assert view.model.rowCount() == n
    texts = [view.model.record(r).text for r in range(view.model.rowCount())]
    assert any("morning" in t for t in texts)


def test_search_modifiers(qtbot, demo_window):
    view = search(qtbot, demo_window, "type:fact")
    facts = [view.model.record(r) for r in range(view.model.rowCount())]
    assert facts and all(v.type == "fact" for v in facts)
    assert {"Porto", "Artemis"} <= {v.text for v in facts}

    view = search(qtbot, demo_window, "is:pending")  # every proposal, beside a value or not
    keys = {view.model.record(r).key for r in range(view.model.rowCount())}
    # every proposal (spec §19.3), also the one beside the user's diet
    assert keys == {"user/meeting_time", "user/reply_style", "user/partner_name", "user/knee_injury", "user/diet"}


def test_a_bad_search_modifier_shows_its_error(qtbot, demo_window):
    view = search(qtbot, demo_window, "is:bogus")
    assert view.model.rowCount() == 0
    assert "is:bogus" in view.count.text() and "is:pending" in view.count.text()
    assert "Traceback" not in view.count.text()


def test_escape_clears_the_search_field(qtbot, demo_window):
    demo_window.search.setFocus()
    qtbot.keyClicks(demo_window.search, "coffee")
    qtbot.keyClick(demo_window.search, Qt.Key.Key_Escape)
    assert demo_window.search.text() == ""


# --------------------------------------------------------------------------- lock and auto-lock


def timeline_cleared(window) -> bool:
    view = window.pages["timeline"]
    return view.model.rowCount() == 0 and view.detail.record is None


def test_ctrl_l_locks_clears_the_views_and_asks_to_unlock(qtbot, client, demo_window, demo_vault,
                                                          unlock_prompts):
    """Drives the real (modal) unlock dialog the window opens after locking."""
    from camillo_desktop.dialogs import UnlockDialog

    unlock_prompts.real()
    window = demo_window
    window.activateWindow()
    qtbot.waitUntil(lambda: window.isActiveWindow(), timeout=5000)
    seen: dict = {}

    def drive() -> None:
        dialogs = [d for d in top_level(UnlockDialog) if d.isModal() or d.windowModality() != Qt.WindowModality.NonModal]
        if not dialogs or "driven" in seen:
            return
        dlg = dialogs[0]
        seen["driven"] = True
        seen["cleared"] = timeline_cleared(window)
        seen["facts_cleared"] = window.pages["facts"].model.rowCount() == 0
        seen["status"] = window.status_sync.text()
        seen["path"] = dlg.path
        seen["title"] = dlg.windowTitle()
        dlg.secret.edit.setText(demo_vault.passphrase)
        dlg.unlock_button.click()

    driver = QTimer()
    driver.timeout.connect(drive)
    driver.start(20)
    try:
        with qtbot.waitSignal(client.vault_locked, timeout=10_000):
            QTest.keyClick(window, Qt.Key.Key_L, Qt.KeyboardModifier.ControlModifier)
        qtbot.waitUntil(lambda: "driven" in seen, timeout=10_000)
        qtbot.waitUntil(lambda: client.is_open and window.pages["timeline"].model.rowCount() > 0, timeout=20_000)
    finally:
        driver.stop()
    assert seen["cleared"] and seen["facts_cleared"]
    assert seen["status"] == "\u25cf locked"
    assert seen["path"] == demo_vault.path
    assert seen["title"] == "Unlock Demo vault"
    assert window.status_sync.text() == "\u25cf up to date"


def test_lock_then_cancel_leaves_the_window_locked(qtbot, client, demo_window, unlock_prompts):
    from camillo_desktop.actions import Action

    window = demo_window
    with qtbot.waitSignal(client.vault_locked, timeout=10_000):
        window.actions_[Action.LOCK].trigger()
    qtbot.waitUntil(lambda: bool(unlock_prompts.asked), timeout=5000)
    assert unlock_prompts.asked == [window.info["path"]]
    assert timeline_cleared(window)
    assert not client.is_open
    assert window.status_sync.text() == "\u25cf locked"
    # Nothing can be read while locked.
    with pytest.raises(camillo.VaultError):
        call(qtbot, client, lambda ctx: ctx.vault.timeline())


def test_auto_lock_after_inactivity(qtbot, client, demo_window, unlock_prompts):
    window = demo_window
    started = time.monotonic()
    with qtbot.waitSignal(client.vault_locked, timeout=5000):
        window.idle.arm(0.002)  # 0.002 minutes = 120 ms
    assert time.monotonic() - started >= 0.1
    assert not client.is_open
    assert timeline_cleared(window)
    assert window.statusBar().currentMessage() == "Locked after inactivity"
    assert not window.idle.timer.isActive()  # disarmed while locked
    qtbot.waitUntil(lambda: bool(unlock_prompts.asked), timeout=5000)


def test_activity_postpones_the_auto_lock(qtbot, client, demo_window):
    window = demo_window
    window.idle.arm(0.02)  # 1.2 s
    started = time.monotonic()
    qtbot.wait(400)
    assert client.is_open
    before = window.idle.timer.remainingTime()
    # The watcher restarts its timer at most twice a second; pretend the last restart was a while ago.
    window.idle.last_activity -= 1.0
    QTest.keyClick(window.search, Qt.Key.Key_A)
    after = window.idle.timer.remainingTime()
    assert after > before + 200
    with qtbot.waitSignal(client.vault_locked, timeout=10_000):
        pass
    assert time.monotonic() - started >= 1.45  # 0.4 s + a fresh 1.2 s, not the original 1.2 s


def test_input_within_half_a_second_of_the_last_reset_does_not_restart_the_timer(qtbot, client, demo_window):
    """Documents the throttle: the activity filter restarts the timer at most twice a second."""
    window = demo_window
    window.idle.arm(0.02)
    qtbot.wait(100)
    before = window.idle.timer.remainingTime()
    QTest.keyClick(window.search, Qt.Key.Key_A)
    assert window.idle.timer.remainingTime() <= before


# --------------------------------------------------------------------------- clipboard and status bar


def test_copy_text_is_cleared_after_the_countdown(qtbot, demo_window, settings):
    from camillo_desktop.settings import Setting

    settings.set(Setting.CLIPBOARD_SECONDS, 1)
    cb = QGuiApplication.clipboard()
    demo_window.copy_text("the secret I copied")
    assert cb.text() == "the secret I copied"
    assert demo_window.status_clip.text() == "Copied \u2014 the clipboard clears in 1 s"
    qtbot.waitUntil(lambda: cb.text() == "", timeout=5000)
    qtbot.waitUntil(lambda: demo_window.status_clip.text() == "", timeout=2000)


def test_the_clipboard_is_left_alone_if_the_user_copied_something_else(qtbot, demo_window, settings):
    from camillo_desktop.settings import Setting

    settings.set(Setting.CLIPBOARD_SECONDS, 1)
    cb = QGuiApplication.clipboard()
    demo_window.copy_text("from camillo")
    cb.setText("my own clipboard")
    qtbot.waitUntil(lambda: not demo_window.clipboard.pending, timeout=5000)
    assert cb.text() == "my own clipboard"


def test_copy_button_of_the_detail_pane(qtbot, demo_window, settings):
    from camillo_desktop.settings import Setting

    settings.set(Setting.CLIPBOARD_SECONDS, 30)
    view = demo_window.pages["timeline"]
    qtbot.waitUntil(lambda: view.detail.record is not None, timeout=5000)
    assert view.detail.copy_button.isEnabled()
    qtbot.mouseClick(view.detail.copy_button, Qt.MouseButton.LeftButton)
    assert QGuiApplication.clipboard().text() == view.detail.record.text
    demo_window.close()  # closing clears what we copied
    assert QGuiApplication.clipboard().text() == ""


def test_status_bar_shows_vault_credential_and_sync(qtbot, demo_window):
    assert demo_window.status_vault.text() == "Vault: Demo vault"
    assert demo_window.status_cred.text() == "Unlocked with: passphrase"
    assert demo_window.status_sync.text() == "\u25cf up to date"
    assert demo_window.vault_name.text() == "Demo vault"
    assert demo_window.windowTitle() == "Demo vault \u2014 Camillo"


def test_status_bar_of_an_agent_and_of_a_read_only_vault(qtbot, client, demo_vault, make_window, tmp_path):
    window = make_window()
    info = open_vault(qtbot, client, demo_vault.path, Unlock.grant(demo_vault.grants["planner"]),
                      home=demo_vault.homes["planner"])
    wait_view(qtbot, window, "timeline", lambda: window.vault_opened(info))
    assert window.status_cred.text() == "Unlocked with: agent planner"
    out = str(tmp_path / "demo.vmem")
    Vault.pack(demo_vault.path, out)
    info = open_vault(qtbot, client, out, demo_vault.unlock())
    wait_view(qtbot, window, "timeline", lambda: window.vault_opened(info))
    assert window.status_vault.text() == "Vault: demo.vmem (read-only)"


def test_unexpected_job_errors_are_reported_to_the_user(qtbot, client, demo_window, informed):
    with qtbot.waitSignal(client.job_failed, timeout=5000):
        client.submit(lambda ctx: {}["missing"])
    assert informed.unexpected() and "KeyError" in informed.unexpected()[0][1]
    informed.messages.clear()  # expected here


def test_locking_twice_quickly_asks_to_unlock_once(qtbot, client, demo_window, unlock_prompts):
    from camillo_desktop.actions import Action

    locked: list[bool] = []
    client.vault_locked.connect(lambda: locked.append(True))
    demo_window.actions_[Action.LOCK].trigger()
    demo_window.actions_[Action.LOCK].trigger()  # a double press, or auto-lock at the same moment
    wait_idle(qtbot, client)
    qtbot.wait(50)
    assert len(locked) == 1
    assert len(unlock_prompts.asked) == 1


def test_lock_closes_or_clears_record_windows(qtbot, client, demo_window):
    from camillo_desktop.dialogs import RecordsDialog

    view = show_facts(qtbot, demo_window)
    view.select_fact("user/home_city")
    view.why.click()
    (dlg,) = top_level(RecordsDialog)  # a child of the window: closed with it if the test fails
    qtbot.waitUntil(lambda: dlg.model.rowCount() == 1, timeout=10_000)
    dlg.detail.source_requested.emit(dlg.model.record(0).id)  # a source window opened from it
    qtbot.waitUntil(lambda: len(top_level(RecordsDialog)) == 2, timeout=10_000)
    dialogs = top_level(RecordsDialog)
    with qtbot.waitSignal(client.vault_locked, timeout=10_000):
        demo_window.lock()
    assert all(not shiboken6.isValid(d) or not d.isVisible() for d in dialogs)
    assert all(not shiboken6.isValid(d) or (d.model.rowCount() == 0 and d.detail.record is None) for d in dialogs)
    qtbot.wait(50)
    assert not top_level(RecordsDialog)
    assert not any(shiboken6.isValid(d) for d in dialogs)  # closed ones are deleted


def test_lock_clears_search_results(qtbot, client, demo_window):
    view = search(qtbot, demo_window, "morning")
    assert view.model.rowCount() >= 1
    with qtbot.waitSignal(client.vault_locked, timeout=10_000):
        demo_window.lock()
    assert view.model.rowCount() == 0 and view.detail.record is None
    facts = demo_window.pages["facts"]
    assert facts.model.rowCount() == 0 and facts.history.rowCount() == 0 and facts.value_label.text() == ""


def test_a_recovery_phrase_pasted_in_capitals_over_several_lines_works(qtbot, client, demo_vault):
    dlg = make_unlock_dialog(qtbot, client, demo_vault.path)
    dlg.by_phrase.setChecked(True)
    words = demo_vault.recovery_phrase.upper().split()
    pasted = "\n".join(" ".join(words[i:i + 6]) for i in range(0, 24, 6)) + "\n"
    QGuiApplication.clipboard().setText(pasted)
    dlg.secret.edit.paste()
    try_unlock(qtbot, client, dlg, None, method="phrase")
    assert dlg.result() == QDialog.DialogCode.Accepted, dlg.error.text()


# --------------------------------------------------------------------------- welcome and settings


def test_welcome_try_the_demo_opens_it(qtbot, client, settings, tmp_path, monkeypatch):
    import tempfile

    from camillo_desktop.welcome import WelcomeWindow

    monkeypatch.setattr(tempfile, "mkdtemp", lambda prefix="": str(tmp_path / "demo-from-welcome"))
    welcome = WelcomeWindow(client, settings)
    qtbot.addWidget(welcome)
    welcome.show()
    button = next(b for b in welcome.findChildren(QPushButton) if b.text() == "Try the demo vault")
    with qtbot.waitSignal(welcome.opened, timeout=60_000) as blocker:
        qtbot.mouseClick(button, Qt.MouseButton.LeftButton)
        assert not welcome.isEnabled()  # while it builds
    info = blocker.args[0]
    assert info["name"] == "Demo vault" and client.is_open


def test_welcome_lists_recent_vaults(qtbot, client, settings, demo_window):
    from camillo_desktop.welcome import WelcomeWindow

    path = demo_window.info["path"]
    assert settings.recent_vaults()[0] == path  # remembered when it opened
    welcome = WelcomeWindow(client, settings)
    qtbot.addWidget(welcome)
    items = [welcome.recent.item(i).data(Qt.ItemDataRole.UserRole) for i in range(welcome.recent.count())]
    assert items == [path]


def test_settings_dialog_saves_and_reports_the_keychain(qtbot, client, settings):
    from camillo_desktop.dialogs import SettingsDialog
    from camillo_desktop.settings import Setting

    dlg = SettingsDialog(client, settings)
    qtbot.addWidget(dlg)
    wait_idle(qtbot, client)
    assert dlg.keychain.text().startswith("Not in an OS keychain")  # CAMILLO_KEYCHAIN=none
    dlg.auto_lock.setValue(0)
    assert dlg.auto_lock.text() == "never"
    dlg.clipboard.setValue(7)
    dlg.theme.setCurrentIndex(dlg.theme.findData("dark"))
    dlg._save()
    assert settings.get(Setting.AUTO_LOCK_MINUTES) == 0
    assert settings.get(Setting.CLIPBOARD_SECONDS) == 7
    assert settings.get(Setting.THEME) == "dark"


def test_settings_are_isolated_from_the_users_own(settings, _isolated_qsettings):
    from PySide6.QtCore import QSettings

    from camillo_desktop.settings import Setting

    settings.set(Setting.LAST_VIEW, "facts")
    settings.sync()
    assert QSettings("Camillo", "Camillo").fileName().startswith(_isolated_qsettings)
    assert os.path.exists(QSettings("Camillo", "Camillo").fileName())
