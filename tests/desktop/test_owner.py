"""The owner's flows (issue 17, desktop items 3-5), on the real worker and real vault copies: the
"Was this you?" notice for a device that joined with the passphrase on a second installation
("Yes" acknowledges it, "No" revokes it and changes the passphrase), the lost-laptop flow from
"Revoke a lost device" through the passphrase change and the recovery phrase re-issue (and what
skipping the passphrase says), and trusted people added and removed in Settings.
"""

from __future__ import annotations

import camillo
import pytest
from camillo import Unlock, Vault

from .helpers import call, cell, click, no_guard, wait_idle, wait_view

NEW_PASSPHRASE = "a brand new passphrase for the test"


@pytest.fixture
def reauth(monkeypatch):
    """The answers re-authentication gets, in order (an empty queue would open the real dialog)."""
    from camillo_desktop.flows import ReauthDialog

    answers: list = []
    monkeypatch.setattr(ReauthDialog, "next_answers", answers)
    return answers


@pytest.fixture
def answers(monkeypatch, informed):
    """The person's answer to each question box, by its title (unlisted: Cancel); each asked is recorded."""
    from camillo_desktop.dialogs import Ask

    by_title: dict[str, bool] = {}

    def confirm(cls, parent, title, text, **kw):
        informed.questions.append((title, text))
        return by_title.get(title, False)

    monkeypatch.setattr(Ask, "confirm", classmethod(confirm))
    return by_title


def answer_modal(qtbot, title: str, act) -> list:
    """When a modal dialog titled ``title`` opens, ``act(dialog)`` answers it (as the person would)."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QApplication

    seen: list = []
    timer = QTimer()
    timer.setInterval(30)

    def tick() -> None:
        w = QApplication.activeModalWidget()
        if w is not None and w.windowTitle() == title and not seen:
            seen.append(w)
            timer.stop()
            act(w)

    timer.timeout.connect(tick)
    timer.start()
    _timers.append(timer)  # kept alive until the test ends
    return seen


_timers: list = []


@pytest.fixture(autouse=True)
def _stop_timers():
    yield
    for t in _timers:
        t.stop()
    _timers.clear()


def type_new_passphrase(dialog) -> None:
    from PySide6.QtWidgets import QDialogButtonBox

    from camillo_desktop.widgets import SecretEdit

    first, second = dialog.findChildren(SecretEdit)
    first.edit.setText(NEW_PASSPHRASE)
    second.edit.setText(NEW_PASSPHRASE)
    dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok).click()


def titles(informed) -> list[str]:
    return [t for t, _ in informed.messages]


def join_with_passphrase(demo_vault, home: str, name: str) -> bytes:
    """A second installation opens the vault with the passphrase: it registers itself as a new device."""
    with no_guard(), Vault.open(demo_vault.path, demo_vault.unlock(), home=home, device_name=name) as v:
        return v.writer_id


def wait_notice(qtbot, window, name: str):
    window.refresh()
    qtbot.waitUntil(lambda: any(name in r.label.text() for r in window.new_devices.rows), timeout=30_000)
    wait_idle(qtbot, window.client)
    assert window.new_devices.isVisible()
    return next(r for r in window.new_devices.rows if name in r.label.text())


def test_was_this_you_yes_acknowledges_the_new_device(qtbot, client, demo_window, demo_vault, tmp_path):
    # The demo's laptop joined with the passphrase and nobody confirmed it: it is asked about already.
    qtbot.waitUntil(lambda: any("'laptop'" in r.label.text() for r in demo_window.new_devices.rows), timeout=15_000)
    writer = join_with_passphrase(demo_vault, str(tmp_path / "pc-home"), "Study PC")
    row = wait_notice(qtbot, demo_window, "Study PC")
    assert "using your passphrase" in row.label.text() and row.label.text().endswith("Was this you?")
    assert row.no.text() == "No \u2014 revoke it and change the passphrase"
    click(qtbot, row.yes)
    qtbot.waitUntil(lambda: not any("Study PC" in r.label.text() for r in demo_window.new_devices.rows), timeout=30_000)
    assert [r.device.name for r in demo_window.new_devices.rows] == ["laptop"]  # one answer, one device
    assert writer not in {d.writer_id for d in call(qtbot, client, lambda ctx: ctx.vault.new_devices())}
    devices = call(qtbot, client, lambda ctx: ctx.vault.devices())
    assert not next(d for d in devices if d.writer_id == writer).revoked


def test_was_this_you_no_revokes_the_device_and_changes_the_passphrase(qtbot, client, demo_window, demo_vault,
                                                                       tmp_path, reauth, answers, informed):
    home = str(tmp_path / "stranger-home")
    writer = join_with_passphrase(demo_vault, home, "Unknown laptop")
    row = wait_notice(qtbot, demo_window, "Unknown laptop")
    reauth += [demo_vault.unlock(), demo_vault.unlock()]  # revoke, then change the passphrase
    typed = answer_modal(qtbot, "Change the passphrase", type_new_passphrase)
    click(qtbot, row.no)
    qtbot.waitUntil(lambda: "Passphrase changed" in titles(informed), timeout=60_000)
    assert typed, "the change-passphrase dialog was not shown"
    assert titles(informed).index("Device revoked") < titles(informed).index("Passphrase changed")
    # "No" already chose the passphrase change: it is not asked again; the recovery phrase is offered.
    asked = [t for t, _ in informed.questions]
    assert "Next: change the passphrase" not in asked
    assert "Optional: re-issue the recovery phrase" in asked
    qtbot.waitUntil(lambda: not any("Unknown laptop" in r.label.text() for r in demo_window.new_devices.rows),
                    timeout=30_000)
    wait_idle(qtbot, client)
    devices = call(qtbot, client, lambda ctx: ctx.vault.devices())
    assert next(d for d in devices if d.writer_id == writer).revoked
    # The keys rolled: the stranger's installation, and the old passphrase, open nothing now.
    with no_guard():
        with pytest.raises(camillo.WrongCredential):
            Vault.open(demo_vault.path, Unlock.device(), home=home)
        with pytest.raises(camillo.WrongCredential):
            Vault.open(demo_vault.path, demo_vault.unlock(), home=str(tmp_path / "third-home"))
        with Vault.open(demo_vault.path, Unlock.passphrase(NEW_PASSPHRASE), home=str(tmp_path / "mine")) as v:
            assert v.timeline()


def lost_laptop_row(devices) -> int:
    from camillo_desktop.views.devices import DeviceColumn

    return next(r for r in range(devices.model.rowCount())
                if cell(devices.model, r, DeviceColumn.STATUS) not in ("this device", "revoked", "old key, replaced"))


def test_the_lost_laptop_flow_revokes_changes_the_passphrase_and_reissues_the_recovery_phrase(
        qtbot, client, demo_window, demo_vault, tmp_path, reauth, answers, informed):
    from PySide6.QtWidgets import QLabel, QPushButton

    devices = wait_view(qtbot, demo_window, "devices")
    devices.table.selectRow(lost_laptop_row(devices))
    lost = devices.selected()
    answers["Next: change the passphrase"] = True
    answers["Optional: re-issue the recovery phrase"] = True
    reauth += [demo_vault.unlock(), demo_vault.unlock(), Unlock.passphrase(NEW_PASSPHRASE)]
    typed = answer_modal(qtbot, "Change the passphrase", type_new_passphrase)
    words: list[str] = []

    def write_down(dialog) -> None:
        words.extend(lab.text().split(". ", 1)[1] for lab in dialog.findChildren(QLabel) if ". " in lab.text()
                     and lab.text().split(".", 1)[0].strip().isdigit())
        next(b for b in dialog.findChildren(QPushButton) if b.text() == "I have written it down").click()

    shown = answer_modal(qtbot, "Your new recovery phrase", write_down)
    click(qtbot, devices.revoke_button)
    qtbot.waitUntil(lambda: bool(shown), timeout=90_000)
    assert typed
    assert titles(informed)[:2] == ["Device revoked", "Passphrase changed"]
    summary = dict(informed.messages)["Device revoked"]
    assert "already read stays exposed" in summary
    # Each step said why, in the report's own sentence.
    questions = dict(informed.questions)
    assert "still opens the vault for whoever knows it" in questions["Next: change the passphrase"]
    assert "re-issue it too" in questions["Optional: re-issue the recovery phrase"]
    assert len(words) >= 12
    wait_idle(qtbot, client)
    states = {d.writer_id: d for d in call(qtbot, client, lambda ctx: ctx.vault.devices())}
    assert states[lost.writer_id].revoked
    with no_guard():
        for old in (demo_vault.unlock(), Unlock.recovery(demo_vault.recovery_phrase)):
            with pytest.raises(camillo.WrongCredential):
                Vault.open(demo_vault.path, old, home=str(tmp_path / "elsewhere"))
        for new in (Unlock.passphrase(NEW_PASSPHRASE), Unlock.recovery(" ".join(words))):
            with Vault.open(demo_vault.path, new, home=str(tmp_path / "elsewhere")) as v:
                assert v.timeline()


def test_skipping_the_passphrase_change_says_who_can_still_open_the_vault(qtbot, client, demo_window, demo_vault,
                                                                         tmp_path, reauth, answers, informed):
    devices = wait_view(qtbot, demo_window, "devices")
    devices.table.selectRow(lost_laptop_row(devices))
    reauth.append(demo_vault.unlock())
    click(qtbot, devices.revoke_button)
    qtbot.waitUntil(lambda: "Passphrase not changed" in titles(informed), timeout=60_000)
    assert "whoever knows it can still open the vault" in dict(informed.messages)["Passphrase not changed"]
    assert [t for t, _ in informed.questions] == ["Next: change the passphrase",
                                                   "Optional: re-issue the recovery phrase"]
    with no_guard(), Vault.open(demo_vault.path, demo_vault.unlock(), home=str(tmp_path / "elsewhere")) as v:
        assert v.timeline()  # as the message says: the old passphrase still opens it


def test_settings_offers_the_passphrase_the_recovery_phrase_and_trusted_people(qtbot, client, demo_window):
    from camillo_desktop.owner import VaultSecuritySection

    found: list = []

    def look(dialog) -> None:
        found.append(dialog.findChild(VaultSecuritySection))
        dialog.reject()

    answer_modal(qtbot, "Settings", look)
    demo_window._settings()
    assert found and found[0] is not None
    section = found[0]
    assert section.passphrase_button.text() == "Change the passphrase\u2026"
    assert section.recovery_button.text() == "Re-issue the recovery phrase\u2026"


def test_add_and_remove_a_trusted_person(qtbot, client, demo_window, demo_vault, tmp_path, reauth, informed,
                                         monkeypatch):
    from PySide6.QtWidgets import QFileDialog, QInputDialog

    from camillo_desktop.owner import VaultSecuritySection

    with no_guard():
        key = Vault.make_recipient_key(str(tmp_path / "alice.key"), "alice's own passphrase", "Alice")
    section = VaultSecuritySection(demo_window)
    qtbot.addWidget(section)
    section.show()
    qtbot.waitUntil(lambda: section.people.count() == 1, timeout=15_000)
    assert section.people.item(0).text() == "No trusted person yet."
    monkeypatch.setattr(QFileDialog, "getOpenFileName", staticmethod(lambda *a, **k: (key.public_path, "")))
    monkeypatch.setattr(QInputDialog, "getText", staticmethod(lambda *a, **k: ("Alice Example", True)))
    reauth.append(Unlock.passphrase("not the passphrase"))  # a wrong one is refused and asked again
    reauth.append(demo_vault.unlock())
    click(qtbot, section.add_button)
    qtbot.waitUntil(lambda: "Trusted person added" in titles(informed), timeout=60_000)
    assert titles(informed).index("Not confirmed") < titles(informed).index("Trusted person added")
    qtbot.waitUntil(lambda: section.people.item(0).text().startswith("Alice Example \u2014 added"), timeout=15_000)
    with no_guard(), Vault.open(demo_vault.path, Unlock.recipient(key.path, "alice's own passphrase"),
                                home=str(tmp_path / "alice-home")) as v:
        assert v.timeline()

    # Adding the same key again is refused with the core's own reason.
    reauth.append(demo_vault.unlock())
    click(qtbot, section.add_button)
    qtbot.waitUntil(lambda: "Not done" in titles(informed), timeout=60_000)
    assert "already" in dict(informed.messages)["Not done"]

    section.people.setCurrentRow(0)
    reauth.append(demo_vault.unlock())
    click(qtbot, section.remove_button)
    qtbot.waitUntil(lambda: "Trusted person removed" in titles(informed), timeout=60_000)
    qtbot.waitUntil(lambda: section.people.item(0).text() == "No trusted person yet.", timeout=15_000)
    people = call(qtbot, client, lambda ctx: ctx.vault.recipients())
    assert [(p.name, p.revoked) for p in people] == [("Alice Example", True)]
    with no_guard(), pytest.raises(camillo.WrongCredential):
        Vault.open(demo_vault.path, Unlock.recipient(key.path, "alice's own passphrase"),
                   home=str(tmp_path / "alice-home-2"))
