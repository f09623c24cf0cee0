"""Vault → Import and Export in the desktop: a ChatGPT export imported on the worker with its
report, memories leading to the inbox, a second import adding nothing, a hostile export refused
with nothing written, and an export to PAM.  GUI thread (pytest-qt); the work runs on the worker."""

from __future__ import annotations

import json
import os
import pathlib

from PySide6.QtCore import Qt

from .helpers import call, wait_idle

FIX = pathlib.Path(__file__).resolve().parent.parent / "fixtures" / "imports"


def _records(qtbot, client) -> int:
    return len(call(qtbot, client, lambda ctx: ctx.vault.timeline_ids()))


def _run(qtbot, dlg) -> None:
    qtbot.mouseClick(dlg.start, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: dlg.report is not None or dlg.error is not None, timeout=60_000)


def test_import_a_chatgpt_export_from_the_menu(qtbot, client, demo_window):
    assert demo_window.import_menu.isEnabled()
    labels = [a.text() for a in demo_window.import_menu.actions()]
    assert any("ChatGPT" in t for t in labels) and any("VaultMem" in t for t in labels)
    before = _records(qtbot, client)
    broadcasts: list = []
    client.vault_changed.connect(broadcasts.append)
    dlg = demo_window.import_from("chatgpt")
    qtbot.addWidget(dlg)
    dlg.source.setText(str(FIX / "chatgpt" / "conversations.json"))
    _run(qtbot, dlg)
    report = dlg.report
    assert report is not None and report.imported > 0 and report.proposals > 0
    # The views were told what the import appended (the report's Changes), not "reload everything".
    assert broadcasts == [report.changes] and broadcasts[0] is report.changes
    assert len(report.changes.written) == report.imported and report.changes.keys and not report.changes.reloaded
    assert f"Imported {report.imported} record(s)" in dlg.result.text()
    assert _records(qtbot, client) > before
    # The memories ChatGPT kept wait in the inbox; the button leads there.
    assert dlg.inbox.isVisible()
    with qtbot.waitSignal(demo_window.view_ready, timeout=20_000, check_params_cb=lambda n: n == "inbox"):
        qtbot.mouseClick(dlg.inbox, Qt.MouseButton.LeftButton)
    inbox = demo_window.current_view()
    texts = [inbox.model.row(r).record.meta.get("import", "") for r in range(inbox.model.rowCount())]
    assert any(t.startswith("chatgpt:") for t in texts)
    # Importing the same export again adds nothing.
    again = demo_window.import_from("chatgpt")
    qtbot.addWidget(again)
    again.source.setText(str(FIX / "chatgpt" / "conversations.json"))
    after_first = _records(qtbot, client)
    _run(qtbot, again)
    assert again.report.imported == 0 and _records(qtbot, client) == after_first
    assert broadcasts[-1] is again.report.changes and again.report.changes.empty  # no view reloads


def test_a_hostile_export_is_refused_and_nothing_is_written(qtbot, client, demo_window, demo_vault, tmp_path):
    bad = tmp_path / "conversations.json"
    bad.write_text("[" * 100_000)  # nesting far beyond any real export
    files = {p: p.read_bytes() for p in pathlib.Path(demo_vault.path).rglob("*") if p.is_file()}
    dlg = demo_window.import_from("chatgpt")
    qtbot.addWidget(dlg)
    dlg.source.setText(str(bad))
    _run(qtbot, dlg)
    assert dlg.report is None and dlg.error is not None
    assert dlg.result.text().startswith("Not imported:") and "conversations.json" in dlg.result.text()
    wait_idle(qtbot, client)
    assert {p: p.read_bytes() for p in pathlib.Path(demo_vault.path).rglob("*") if p.is_file()} == files


def test_a_vaultmem_import_asks_for_its_passphrase(qtbot, client, demo_window, tmp_path):
    dlg = demo_window.import_from("vaultmem")
    qtbot.addWidget(dlg)
    dlg.source.setText(str(tmp_path))
    qtbot.mouseClick(dlg.start, Qt.MouseButton.LeftButton)
    assert "passphrase" in dlg.result.text() and dlg.start.isEnabled()


def test_export_to_pam_says_it_is_plaintext_and_writes_the_store(qtbot, client, demo_window, tmp_path, informed,
                                                                 monkeypatch):
    from camillo_desktop.dialogs import Ask
    from camillo_desktop.importing import export_vault

    out = str(tmp_path / "pam-export")
    os.makedirs(out)
    export_vault(demo_window, "pam", out)  # the confirmation is answered "Cancel" by the test fixture
    assert informed.questions and "not encrypted" in informed.questions[-1][1]
    wait_idle(qtbot, client)
    assert os.listdir(out) == []
    monkeypatch.setattr(Ask, "next_answers", [True])
    export_vault(demo_window, "pam", out)
    qtbot.waitUntil(lambda: any(t == "Exported" for t, _ in informed.messages), timeout=30_000)
    store = json.loads(pathlib.Path(out, "memory-store.json").read_text())
    assert store["memories"]
