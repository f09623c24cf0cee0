"""Desktop II end to end, with the real worker thread and real keys: resolve a conflict, confirm and
reject inferences, create and revoke a grant, enroll a second device by QR between two installations
sharing one folder and revoke it as a lost laptop, erase a record and read the reach report; and
the safety rules: irreversible actions always re-authenticate and are never undoable.

GUI thread (pytest-qt); vault work runs on the clients' worker threads.
"""

from __future__ import annotations

import os
import subprocess
import sys

import camillo
import pytest
from camillo import NewRecord, Unlock, Vault
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QKeySequence, QUndoStack
from PySide6.QtWidgets import QApplication, QDialog

from camillo_desktop.views.devices import DeviceColumn
from camillo_desktop.views.grants import GrantColumn

from .helpers import call, cell, no_guard, wait_idle

WRONG = Unlock.passphrase("not the passphrase")


def wait_view(qtbot, window, name: str, argument=None, timeout: int = 20_000):
    with qtbot.waitSignal(window.view_ready, timeout=timeout, check_params_cb=lambda n: n == name):
        window.show_view(name, argument)
    return window.current_view()


def click(qtbot, button) -> None:
    assert button.isVisible() and button.isEnabled(), f"{button.text()!r} cannot be clicked"
    qtbot.mouseClick(button, Qt.MouseButton.LeftButton)


def when_modal(qtbot, cls, act, title: str | None = None) -> dict:
    """Act on the next modal dialog of type ``cls`` (and window ``title``, if given) once ``exec()``
    shows it; returns a box that receives the dialog (so the test can inspect it after)."""
    box: dict = {}

    def poll() -> None:
        dlg = QApplication.activeModalWidget()
        if isinstance(dlg, cls) and (title is None or dlg.windowTitle() == title):
            box["dialog"] = dlg
            act(dlg)
        else:
            QTimer.singleShot(20, poll)

    QTimer.singleShot(0, poll)
    return box


@pytest.fixture
def reauth(monkeypatch):
    """The answers re-authentication gets, in order (an empty queue would open the real dialog)."""
    from camillo_desktop.flows import ReauthDialog

    answers: list = []
    monkeypatch.setattr(ReauthDialog, "next_answers", answers)
    return answers


def ids_of(views) -> list[bytes]:
    return [v.id for v in views]


# ------------------------------------------------------------------------------------------ conflicts


def test_resolve_a_conflict_by_keeping_a_candidate(qtbot, client, demo_window):
    view = wait_view(qtbot, demo_window, "conflicts")
    before = call(qtbot, client, lambda ctx: ctx.vault.conflicts())
    assert before, "the demo vault has a conflict to resolve"
    assert view.list.count() == len(before)
    fact = view._fact
    assert fact is not None and len(fact.candidates) >= 2
    qtbot.waitUntil(lambda: len(view.cards_area.widget().findChildren(type(view.new_button))) >= len(fact.candidates))
    # The review shows every candidate side by side with writer, authority, time and causal context.
    shown = " ".join(w.text() for w in view.cards_area.widget().findChildren(type(view.key_label)))
    for c in fact.candidates:
        assert c.text in shown and c.writer in shown
    assert "It had seen" in shown and "Written by" in shown
    keep = [b for b in view.cards_area.widget().findChildren(type(view.new_button)) if b.accessibleName() == "keep candidate 2"]
    assert keep
    picked = fact.candidates[1]
    click(qtbot, keep[0])
    qtbot.waitUntil(lambda: view.result.text().startswith("Resolved"), timeout=15_000)
    assert picked.text in view.result.text() and f"all {len(fact.candidates)} candidates" in view.result.text()
    after = call(qtbot, client, lambda ctx: ctx.vault.fact(fact.key, fact.compartment))
    assert after.status == "ok" and after.current.value == picked.value
    # The result is one PUT that names every candidate as its predecessor.
    assert set(after.current.pred) >= {c.id for c in fact.candidates}
    assert len(call(qtbot, client, lambda ctx: ctx.vault.conflicts())) == len(before) - 1


def test_resolve_a_conflict_with_a_new_value(qtbot, client, demo_window):
    view = wait_view(qtbot, demo_window, "conflicts")
    fact = view._fact
    view.new_value.setText("Braga")
    click(qtbot, view.new_button)
    qtbot.waitUntil(lambda: "Braga" in view.result.text(), timeout=15_000)
    after = call(qtbot, client, lambda ctx: ctx.vault.fact(fact.key, fact.compartment))
    assert after.status == "ok" and after.current.value == "Braga"
    assert after.current.effective_label == "user"
    assert set(after.current.pred) >= {c.id for c in fact.candidates}


# ------------------------------------------------------------------------------------------- inbox


def test_confirm_one_and_reject_several_inferences(qtbot, client, demo_window):
    view = wait_view(qtbot, demo_window, "inbox")
    pending = call(qtbot, client, lambda ctx: ctx.vault.inbox())
    assert len(pending) >= 2, "the demo vault has agent inferences waiting"
    assert view.model.rowCount() == len(pending)
    assert all(p.effective_label != "user" for p in pending)
    # Confirm one that no value of the user's stands against (the other asks first; test_desktop_iii
    # drives that): a signed CONFIRM makes it the user's own word.
    free = call(qtbot, client, lambda ctx: {p.id for p in ctx.vault.inbox()
                                             if ctx.vault.fact(p.key, p.compartment).current is None})
    row = next(r for r in range(view.model.rowCount()) if view.model.record(r).id in free)
    view.table.selectRow(row)
    first = view.selected_ids()
    assert len(first) == 1
    with qtbot.waitSignal(view.loaded, timeout=15_000):
        click(qtbot, view.confirm_button)
    confirmed = call(qtbot, client, lambda ctx: ctx.vault.record(first[0]))
    assert confirmed.effective_label == "user" and not confirmed.hidden
    # Reject all the others at once: hidden from agents, gone from the inbox.
    view.table.selectAll()
    rest = view.selected_ids()
    assert first[0] not in rest and len(rest) == len(pending) - 1
    with qtbot.waitSignal(view.loaded, timeout=15_000):
        click(qtbot, view.reject_button)
    assert call(qtbot, client, lambda ctx: ctx.vault.inbox()) == []
    assert view.model.rowCount() == 0
    for rid in rest:
        assert call(qtbot, client, lambda ctx, rid=rid: ctx.vault.record(rid)).hidden
    assert not view.confirm_button.isEnabled()


# ------------------------------------------------------------------------------------------- grants


def test_create_a_grant_then_revoke_it(qtbot, client, demo_window, demo_vault, tmp_path, reauth, informed):
    from camillo_desktop.flows import GrantDialog

    view = wait_view(qtbot, demo_window, "grants")
    rows_before = view.model.rowCount()
    grant_file = str(tmp_path / "coding.grant")

    def fill(dlg: GrantDialog) -> None:
        dlg.agent.setText("trip-planner-2")
        combo = dlg.levels["work"]
        combo.setCurrentIndex(combo.findData("write"))
        assert "Write:" in dlg.explain.text()  # each level is explained in plain words
        combo2 = dlg.levels["personal"]
        combo2.setCurrentIndex(combo2.findData("append"))
        assert "cannot read anything" in dlg.explain.text()
        dlg.file.setText(grant_file)
        dlg._ok()

    when_modal(qtbot, GrantDialog, fill)
    with qtbot.waitSignal(view.loaded, timeout=20_000):
        click(qtbot, view.new_button)
    assert os.path.exists(grant_file)
    assert view.model.rowCount() == rows_before + 1
    assert informed.messages[-1][:1] == ("Grant created", )
    row = next(r for r in range(view.model.rowCount()) if cell(view.model, r, GrantColumn.AGENT) == "trip-planner-2")
    assert "work: write" in cell(view.model, row, GrantColumn.ACCESS) and "personal: append" in cell(view.model, row, GrantColumn.ACCESS)
    assert cell(view.model, row, GrantColumn.STATUS) == "active"

    # The agent can use it: it writes to work.
    def agent_writes(ctx):
        with no_guard(), Vault.open(demo_vault.path, Unlock.grant(grant_file)) as agent:
            agent.append([NewRecord(type="message", text="from the new agent")], compartment="work")

    agent_writes(None)
    # Revoke: re-authentication (a wrong passphrase is refused and asked again), then the report.
    view.table.selectRow(row)
    reauth.extend([WRONG, demo_vault.unlock()])
    with qtbot.waitSignal(view.loaded, timeout=30_000):
        click(qtbot, view.revoke_button)
    qtbot.waitUntil(lambda: any(t == "Revoked" for t, _ in informed.messages), timeout=30_000)
    titles = [t for t, _ in informed.messages]
    assert "Not confirmed" in titles and titles.index("Not confirmed") < titles.index("Revoked")
    assert reauth == []
    row = next(r for r in range(view.model.rowCount()) if cell(view.model, r, GrantColumn.AGENT) == "trip-planner-2")
    assert cell(view.model, row, GrantColumn.STATUS) == "revoked"
    with no_guard(), pytest.raises(camillo.VaultError, match="revoked"):
        Vault.open(demo_vault.path, Unlock.grant(grant_file))


def test_revoke_grant_dialog_names_what_the_agent_loses_and_keeps(qtbot, client, demo_window, reauth, monkeypatch):
    from camillo_desktop import flows

    view = wait_view(qtbot, demo_window, "grants")
    seen: dict = {}

    def ask(purpose, details="", parent=None, **kw):
        seen.update(purpose=purpose, details=details)
        return None  # the user cancels

    monkeypatch.setattr(flows.ReauthDialog, "ask", classmethod(lambda cls, *a, **kw: ask(*a, **kw)))
    active = next(r for r in range(view.model.rowCount()) if cell(view.model, r, GrantColumn.STATUS) == "active")
    agent = cell(view.model, active, GrantColumn.AGENT)
    view.table.selectRow(active)
    click(qtbot, view.revoke_button)
    assert agent in seen["purpose"]
    assert "cannot read anything written from now on" in seen["details"]
    assert "keeps whatever it has already read" in seen["details"]
    wait_idle(qtbot, client)
    grants = call(qtbot, client, lambda ctx: ctx.vault.grants())
    assert not next(g for g in grants if g.agent == agent).revoked  # cancel changed nothing


# -------------------------------------------------------------------------- enroll, then a lost laptop


@pytest.fixture
def os_keychain(monkeypatch):
    if not os.environ.get("DBUS_SESSION_BUS_ADDRESS"):
        pytest.skip("no D-Bus session with a Secret Service (run the suite with scripts/test)")
    monkeypatch.setenv("CAMILLO_KEYCHAIN", "os")
    st = camillo.Vault.keychain_status()
    assert st.usable and "SecretService" in st.backend, st.reason


def decode_qr(widget) -> list[str]:
    import zxingcpp
    from PIL import Image
    from PySide6.QtCore import QBuffer, QIODevice

    buf = QBuffer()
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    widget.grab().save(buf, "PNG")
    import io

    return [r.text for r in zxingcpp.read_barcodes(Image.open(io.BytesIO(bytes(buf.data()))))]


def test_enroll_a_second_device_by_qr_then_revoke_it_as_a_lost_laptop(qtbot, qapp, client, demo_window, demo_vault,
                                                                       tmp_path, reauth, informed, os_keychain):
    from camillo_desktop.flows import JoinDialog
    from camillo_desktop.worker import VaultClient

    # On the existing device: Devices -> Add a device shows a QR that decodes to the offer.
    devices = wait_view(qtbot, demo_window, "devices")
    assert "Secret Service (GNOME Keyring" in devices.keychain.text()  # settings/devices say which keychain holds the key
    enroll = wait_view(qtbot, demo_window, "enroll")
    offer = enroll.offer
    assert offer is not None and offer.qr_text.startswith("VMEM1:")
    assert decode_qr(enroll.qr) == [offer.qr_text]
    assert offer.typed_code and enroll.code.text() == offer.typed_code
    qtbot.waitUntil(lambda: "expires in" in enroll.countdown.text(), timeout=5_000)

    # On the new device (its own CAMILLO_HOME, its own worker): Join, with the typed code.
    laptop_home = str(tmp_path / "laptop-home")
    laptop_client = VaultClient()
    try:
        join = JoinDialog(laptop_client, home=laptop_home)
        qtbot.addWidget(join)
        join.folder.setText(demo_vault.path)
        join.code.setText(offer.typed_code)
        join.name.setText("Travel laptop")
        join.show()
        click(qtbot, join.start)
        qtbot.waitUntil(lambda: bool(join.sas.text()), timeout=15_000)
        # The existing device sees the request and shows the same 6-digit code.
        qtbot.waitUntil(lambda: enroll.match.isVisible(), timeout=15_000)
        assert enroll.sas.text() == join.sas.text() and len(join.sas.text().replace(" ", "")) == 6
        assert "Travel laptop" in enroll.state.text()
        broadcasts: list = []
        client.vault_changed.connect(broadcasts.append)
        click(qtbot, enroll.match)
        qtbot.waitUntil(lambda: bool(broadcasts), timeout=15_000)
        # What the offer's confirm returned: a new device, and the batches of its certificate.
        assert broadcasts[0].devices and broadcasts[0].batches
        assert not broadcasts[0].records and not broadcasts[0].grants and not broadcasts[0].reloaded
        qtbot.waitUntil(lambda: join.info is not None, timeout=30_000)
        qtbot.waitUntil(lambda: "Done" in enroll.state.text(), timeout=15_000)
        laptop_id = call(qtbot, laptop_client, lambda ctx: ctx.vault.writer_id)
        vault_id = call(qtbot, laptop_client, lambda ctx: ctx.vault.vault_id)
        # Its device key went to the OS keychain, not to a file.
        import keyring

        assert keyring.get_password("vmem", f"{vault_id.hex()}/{laptop_id.hex()}")
        with no_guard(), Vault.open(demo_vault.path, Unlock.device(), home=laptop_home) as lap:
            assert lap.writer_id == laptop_id
            assert any(r.text for r in lap.timeline())

        # The laptop is lost.  On the desktop: Devices -> revoke, after re-authentication.
        devices = wait_view(qtbot, demo_window, "devices")
        row = next(r for r in range(devices.model.rowCount()) if cell(devices.model, r, DeviceColumn.NAME) == "Travel laptop")
        devices.table.selectRow(row)
        reauth.append(demo_vault.unlock())
        with qtbot.waitSignal(devices.loaded, timeout=60_000):
            click(qtbot, devices.revoke_button)
        qtbot.waitUntil(lambda: any(t == "Device revoked" for t, _ in informed.messages), timeout=60_000)
        summary = dict(informed.messages)["Device revoked"]
        assert "already read stays exposed" in summary
        row = next(r for r in range(devices.model.rowCount()) if cell(devices.model, r, DeviceColumn.NAME) == "Travel laptop")
        assert cell(devices.model, row, DeviceColumn.STATUS) == "revoked"
        call(qtbot, client, lambda ctx: ctx.vault.append([NewRecord(type="message", text="AFTER THE LOSS")]))

        # The thief, with the laptop's vault still open, writes: every other copy rejects it.
        call(qtbot, laptop_client,
             lambda ctx: ctx.vault.append([NewRecord(type="message", text="written by the thief")]))
        texts = {r.text for r in call(qtbot, client, lambda ctx: (ctx.vault.refresh(), ctx.vault.timeline())[1])}
        assert "AFTER THE LOSS" in texts and "written by the thief" not in texts
        assert any(p.kind == "rejected" for p in call(qtbot, client, lambda ctx: ctx.vault.problems()))
        # Its keychain keys no longer open the vault, so it cannot read what was written after.
        with no_guard(), pytest.raises(camillo.WrongCredential):
            Vault.open(demo_vault.path, Unlock.device(), home=laptop_home)
    finally:
        laptop_client.shutdown()
        qapp.processEvents()


def test_joining_with_a_bad_code_says_what_is_wrong(qtbot, client, demo_vault, tmp_path):
    from camillo_desktop.flows import JoinDialog

    join = JoinDialog(client, home=str(tmp_path / "new-device"))
    qtbot.addWidget(join)
    join.folder.setText(demo_vault.path)
    for code, says in (("ABCD-EFGH", "53 characters"), ("VMEM1:not base32!", "damaged")):
        join.code.setText(code)
        join.status.setText("")
        join._start()
        qtbot.waitUntil(lambda: bool(join.status.text()), timeout=10_000)
        assert says in join.status.text() and not join.sas.text()
        assert join._join is None and join.start.isEnabled()


def test_enroll_screenshot_shows_a_qr_that_decodes_to_the_offer(tmp_path):
    """The real app, in its own process, renders the enroll view; the PNG's QR decodes (zxing-cpp) to
    a code a new device can join that vault with."""
    import zxingcpp
    from PIL import Image

    out = str(tmp_path / "enroll.png")
    demo_dir = str(tmp_path / "demo")
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", CAMILLO_HOME=str(tmp_path / "home"))
    proc = subprocess.run([sys.executable, "-m", "camillo_desktop", "--demo", "--demo-dir", demo_dir, "--view", "enroll",
                           "--screenshot", out], env=env, capture_output=True, text=True, timeout=240,
                          stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    texts = [r.text for r in zxingcpp.read_barcodes(Image.open(out))]
    assert len(texts) == 1 and texts[0].startswith("VMEM1:")
    # The code parses, has not expired and names the vault in that folder (joining checks all three).
    joining = Vault.join(os.path.join(demo_dir, "Demo vault"), texts[0], home=str(tmp_path / "new-device"))
    assert not joining.done and joining.sas is None


# ------------------------------------------------------------------------------------------ erasure


def _erasable(qtbot, client) -> bytes:
    views = call(qtbot, client, lambda ctx: ctx.vault.timeline(limit=50))
    return next(v.id for v in views if v.type == "message" and "Lisbon" in v.text)


def test_erase_a_record_and_read_the_reach_report(qtbot, client, demo_window, demo_vault, reauth):
    from camillo_desktop.flows import ReachReportDialog

    rid = _erasable(qtbot, client)
    text = call(qtbot, client, lambda ctx: ctx.vault.record(rid)).text
    reauth.append(demo_vault.unlock())
    box = when_modal(qtbot, ReachReportDialog, lambda dlg: dlg.accept())
    demo_window.erase_record(rid)
    qtbot.waitUntil(lambda: "dialog" in box, timeout=60_000)
    report = _dialog_text(box["dialog"])
    assert "sync" in report.lower()  # what remains exposed: copies made before, such as sync history
    buttons = _button_texts(box["dialog"])
    assert any("passphrase" in b for b in buttons) and any("recovery phrase" in b for b in buttons)
    wait_idle(qtbot, client)
    after = call(qtbot, client, lambda ctx: ctx.vault.record(rid))
    assert after.erased and text not in after.text
    # No search finds it, and its words are in no file of the folder in the clear.
    hits = call(qtbot, client, lambda ctx: ctx.vault.search(text))
    assert rid not in [getattr(h, "id", None) for h in hits]


def _dialog_text(dlg) -> str:
    from PySide6.QtWidgets import QLabel

    return " ".join(lbl.text() for lbl in dlg.findChildren(QLabel))


def _button_texts(dlg) -> set[str]:
    from PySide6.QtWidgets import QPushButton

    return {b.text() for b in dlg.findChildren(QPushButton)}


def test_erasure_is_disabled_with_an_explanation_when_policy_forbids_it(qtbot, client, demo_window, reauth, informed):
    call(qtbot, client, lambda ctx: ctx.vault.set_policy(erasure=False, reason="legal hold until 2027"))
    rid = _erasable(qtbot, client)
    demo_window.erase_record(rid)
    qtbot.waitUntil(lambda: any(t == "Erasure is disabled" for t, _ in informed.messages), timeout=15_000)
    assert "legal hold until 2027" in dict(informed.messages)["Erasure is disabled"]
    assert call(qtbot, client, lambda ctx: ctx.vault.record(rid)) is not None


# ----------------------------------------------------- re-authentication, and nothing on an undo stack


def test_irreversible_actions_always_reauthenticate_and_cancel_changes_nothing(qtbot, client, demo_window, demo_vault,
                                                                            reauth, monkeypatch):
    from camillo_desktop import flows

    asked: list[str] = []
    original = flows.ReauthDialog.ask.__func__

    def ask(cls, purpose, *a, **kw):
        asked.append(purpose)
        return original(cls, purpose, *a, **kw)

    monkeypatch.setattr(flows.ReauthDialog, "ask", classmethod(ask))
    files_before = _vault_files(demo_vault.path)
    rid = _erasable(qtbot, client)
    # Erase: cancel at the re-authentication.
    reauth.append(None)
    demo_window.erase_record(rid)
    qtbot.waitUntil(lambda: len(asked) == 1, timeout=15_000)
    # Revoke a grant: cancel.
    grants = wait_view(qtbot, demo_window, "grants")
    grants.table.selectRow(next(r for r in range(grants.model.rowCount()) if cell(grants.model, r, GrantColumn.STATUS) == "active"))
    reauth.append(None)
    click(qtbot, grants.revoke_button)
    # Revoke a device: cancel (the demo has a laptop).
    devices = wait_view(qtbot, demo_window, "devices")
    devices.table.selectRow(next(r for r in range(devices.model.rowCount())
                                 if cell(devices.model, r, DeviceColumn.STATUS) not in ("this device", "revoked", "old key, replaced")))
    reauth.append(None)
    click(qtbot, devices.revoke_button)
    # Change the passphrase and re-issue the recovery phrase: cancel.
    reauth.append(None)
    flows.reissue_recovery(demo_window)
    wait_idle(qtbot, client)
    assert len(asked) == 4, asked
    assert reauth == []
    assert _vault_files(demo_vault.path) == files_before, "a cancelled action changed the vault"
    assert call(qtbot, client, lambda ctx: ctx.vault.record(rid)) is not None


def test_reissue_the_recovery_phrase_shows_the_new_words_once(qtbot, client, demo_window, demo_vault, reauth,
                                                             tmp_path):
    import re

    from PySide6.QtWidgets import QLabel

    from camillo_desktop import flows
    from camillo_desktop.dialogs import BaseDialog

    broadcasts: list = []
    client.vault_changed.connect(broadcasts.append)
    reauth.append(demo_vault.unlock())
    box = when_modal(qtbot, BaseDialog, lambda dlg: dlg.accept(), title="Your new recovery phrase")
    flows.reissue_recovery(demo_window)
    qtbot.waitUntil(lambda: "dialog" in box, timeout=60_000)
    numbered = [m.groups() for m in (re.fullmatch(r"\s*(\d+)\. (\S+)", label.text())
                                     for label in box["dialog"].findChildren(QLabel)) if m]
    assert [int(n) for n, _ in numbered] == list(range(1, 25))
    phrase = " ".join(w for _, w in numbered)
    wait_idle(qtbot, client)
    assert broadcasts and broadcasts[0].credentials  # the Changes the vault returned with the phrase
    home = str(tmp_path / "elsewhere")  # another installation: the desktop's local state is left alone
    with no_guard(), Vault.open(demo_vault.path, Unlock.recovery(phrase), register=False, home=home) as v:
        assert v.unlocked_with
    with no_guard(), pytest.raises(camillo.WrongCredential):
        Vault.open(demo_vault.path, Unlock.recovery(demo_vault.recovery_phrase), register=False, home=home)


def test_a_wrong_passphrase_is_refused_and_nothing_is_erased(qtbot, client, demo_window, reauth, informed):
    rid = _erasable(qtbot, client)
    reauth.extend([WRONG, None])
    demo_window.erase_record(rid)
    qtbot.waitUntil(lambda: not reauth, timeout=30_000)
    wait_idle(qtbot, client)
    assert any(t == "Not confirmed" and "Nothing was changed" in m for t, m in informed.messages)
    assert call(qtbot, client, lambda ctx: ctx.vault.record(rid)) is not None


def test_irreversible_actions_are_never_on_an_undo_stack(qtbot, client, demo_window, demo_vault, reauth):
    from camillo_desktop.flows import ReachReportDialog

    rid = _erasable(qtbot, client)
    reauth.append(demo_vault.unlock())
    box = when_modal(qtbot, ReachReportDialog, lambda dlg: dlg.accept())
    demo_window.erase_record(rid)
    qtbot.waitUntil(lambda: "dialog" in box, timeout=60_000)
    wait_idle(qtbot, client)
    # No undo stack holds it, and no undo action exists to bring it back.
    for stack in demo_window.findChildren(QUndoStack):
        assert stack.count() == 0 and not stack.canUndo()
    undo = [a for a in demo_window.findChildren(type(demo_window.menuBar().actions()[0]))
            if a.shortcut() == QKeySequence(QKeySequence.StandardKey.Undo) and a.isEnabled()]
    for action in undo:
        action.trigger()
    qtbot.keyClick(demo_window, Qt.Key.Key_Z, Qt.KeyboardModifier.ControlModifier)
    wait_idle(qtbot, client)
    assert call(qtbot, client, lambda ctx: ctx.vault.record(rid)).erased


def _vault_files(path: str) -> dict[str, bytes]:
    out = {}
    for root, _dirs, files in os.walk(path):
        for f in files:
            p = os.path.join(root, f)
            out[os.path.relpath(p, path)] = open(p, "rb").read()
    return out


def test_dialog_modality_sanity(qtbot):
    """The test helper for modal dialogs really drives ``exec()`` (so the flows above are real)."""
    from camillo_desktop.dialogs import BaseDialog

    dlg = BaseDialog(None, "probe")
    when_modal(qtbot, BaseDialog, lambda d: d.accept())
    assert dlg.exec() == QDialog.DialogCode.Accepted
