"""What the desktop tells the person about this device ("nothing disappears silently"), with the real
worker and real vaults shared by two installations (the laptop's and the desktop's, each its own
home): after another device's erasure replaced this device's key, a notice appears in the notice
bar once, and stays dismissed; a device revoked while open is told so; a device another device
revoked is not registered again unless the person chooses it in the unlock dialog; the status bar
follows ``sync_status()`` (never "up to date" otherwise); and nothing of this shows the file
format's words."""

from __future__ import annotations

import os

import pytest
from camillo import NewRecord, Notice, Unlock, Vault
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialog

from .helpers import call, jargon_in, open_vault, visible_texts, wait_idle

PASSPHRASE = "correct horse battery staple"


def message(text: str) -> NewRecord:
    return NewRecord(type="message", text=text)


@pytest.fixture
def two_homes(tmp_path, qtbot, client):
    """A vault created by the laptop (its own home) and registered by the desktop, whose home is
    this test's CAMILLO_HOME (so the unlock dialog, which names no home, opens as the desktop).
    Returns (path, laptop's home)."""
    path, laptop = str(tmp_path / "vault"), str(tmp_path / "home-laptop")

    def setup(ctx):
        vault, _phrase = Vault.create(path, PASSPHRASE, device_name="laptop", home=laptop)
        vault.lock()
        Vault.open(path, Unlock.passphrase(PASSPHRASE), device_name="desktop").lock()

    call(qtbot, client, setup)
    return path, laptop


def as_laptop(qtbot, client, path: str, laptop: str, fn):
    """Run ``fn(vault)`` with the laptop's installation, on the worker (the desktop's vault, if one
    is open there, is left alone: its own object)."""
    def job(ctx):
        with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=laptop) as v:
            return fn(v)

    return call(qtbot, client, job)


def open_window(qtbot, make_window, client, path: str):
    window = make_window()
    info = open_vault(qtbot, client, path, Unlock.passphrase(PASSPHRASE))
    with qtbot.waitSignal(window.view_ready, timeout=20_000, check_params_cb=lambda n: n == "timeline"):
        window.vault_opened(info)
    return window


def folder_files(path: str) -> dict[str, int]:
    out = {}
    for dirpath, _dirs, names in os.walk(path):
        for n in names:
            p = os.path.join(dirpath, n)
            out[os.path.relpath(p, path)] = os.stat(p).st_mtime_ns
    return out


# --------------------------------------------------------------------------- the notice bar


def test_a_key_an_erasure_on_another_device_replaced_is_told_once(qtbot, client, make_window, two_homes):
    from camillo_desktop.notices import notice_text

    path, laptop = two_homes
    target = as_laptop(qtbot, client, path, laptop, lambda v: v.append([message("erase me")]).written[0])
    as_laptop(qtbot, client, path, laptop, lambda v: v.erase([target]))
    window = open_window(qtbot, make_window, client, path)  # the open rotates this device's key
    said = notice_text("key-rotated")[1]
    assert window.notice_bar.isVisible() and window.notice_bar.texts() == [said]
    # Asked again after every refresh and every change: still one row, not a second.
    window.refresh()
    wait_idle(qtbot, client)
    reports = []
    client.status_reported.connect(reports.append)
    client.mutate(lambda ctx: ctx.vault.append([message("after the erasure")]))
    wait_idle(qtbot, client)
    assert reports and any(n.kind == "key-rotated" for n in reports[-1]["notices"])  # the core still says it
    assert window.notice_bar.texts() == [said]
    # Dismissed, it stays dismissed, though the session still reports it.
    (row,) = window.notice_bar.rows
    qtbot.mouseClick(row.dismiss, Qt.MouseButton.LeftButton)
    assert window.notice_bar.texts() == [] and not window.notice_bar.isVisible()
    window.refresh()
    wait_idle(qtbot, client)
    assert window.notice_bar.texts() == []
    # The next session does not say it again (the core says it once, in the session that rotated).
    with qtbot.waitSignal(client.vault_locked, timeout=10_000):
        client.lock()
    info = open_vault(qtbot, client, path, Unlock.passphrase(PASSPHRASE))
    window.vault_opened(info)
    assert not any(n.kind == "key-rotated" for n in info["notices"])
    assert window.notice_bar.texts() == []


def test_notices_not_dismissed_are_hidden_while_locked_and_back_on_unlock(qtbot, client, make_window, two_homes):
    path, laptop = two_homes
    target = as_laptop(qtbot, client, path, laptop, lambda v: v.append([message("erase me")]).written[0])
    as_laptop(qtbot, client, path, laptop, lambda v: v.erase([target]))
    window = open_window(qtbot, make_window, client, path)
    shown = window.notice_bar.texts()
    assert len(shown) == 1
    with qtbot.waitSignal(client.vault_locked, timeout=10_000):
        client.lock()
    assert not window.notice_bar.isVisible() and window.notice_bar.texts() == []
    info = open_vault(qtbot, client, path, Unlock.passphrase(PASSPHRASE))
    window.vault_opened(info)
    assert window.notice_bar.texts() == shown  # not said again by the core, still not read by the person


def test_each_kind_has_the_desktops_own_sentence_and_incomplete_goes_to_the_status_bar(qtbot):
    from camillo_desktop.notices import NOTICE_TEXT, UNKNOWN_NOTICE, NoticeBar

    bar = NoticeBar()
    qtbot.addWidget(bar)
    core = [Notice("rejected-writes", "2 write(s) of this device in personal were rejected (revoked): batches 0a1b"),
            Notice("rejected-writes", "1 write(s) of this device in work were rejected (revoked): batches 2c3d"),
            Notice("sealed-again", "3 write(s) made while another device erased records were sealed again"),
            Notice("key-rotated", "this device's key was replaced: an erasure on laptop destroyed keys"),
            Notice("revoked", "this device (desktop) was revoked by laptop on 2026-12-01 09:00 UTC (lost)"),
            Notice("incomplete", "this view of the vault may be incomplete (syncing): batch 0a1b has not arrived"),
            Notice("something-new", "epoch 0a1b generation 3")]
    bar.show_notices("v1", core)
    bar.show()
    # One row per sentence, a revocation first (it explains refused changes); incomplete is not the bar's.
    assert bar.texts() == [NOTICE_TEXT[k][1] for k in ("revoked", "rejected-writes", "sealed-again", "key-rotated")] \
        + [UNKNOWN_NOTICE[1]]
    bar.show_notices("v1", core)  # reported again: nothing added
    assert len(bar.rows) == 5
    assert jargon_in(visible_texts(bar)) == []
    bar.dismiss(NOTICE_TEXT["rejected-writes"][1])
    bar.show_notices("v1", core[:2])
    assert NOTICE_TEXT["rejected-writes"][1] not in bar.texts()
    bar.show_notices("v1", [Notice("rejected-writes", "3 write(s) of this device in personal were rejected")])
    assert NOTICE_TEXT["rejected-writes"][1] in bar.texts()  # something new about them: said again
    bar.show_notices("v2", [])  # another vault: its own notices only
    assert bar.texts() == [] and not bar.isVisible()
    # the key-change notices (spec §16.10 rules 9 and 10) have their own sentences, in the person's words
    keys = [Notice(k, "format words: master secret, generation 3, slot 0a1b")
            for k in ("waiting-for-join", "key-sealed-elsewhere", "passphrase-replaced")]
    bar.show_notices("v3", keys)
    assert bar.texts() == [NOTICE_TEXT[n.kind][1] for n in keys] and UNKNOWN_NOTICE[1] not in bar.texts()
    assert jargon_in(visible_texts(bar)) == []


# --------------------------------------------------------------------------- the status bar


@pytest.mark.parametrize("state", ["up to date", "syncing", "missing batches", "rollback alert", "something else"])
def test_the_status_bar_says_the_sync_state_in_plain_words(make_window, state):
    window = make_window()
    window._update_status({"name": "v", "sync": state, "sync_details": ["batch 0a1b (seq 3) has not arrived"]})
    text = window.status_sync.text()
    assert ("up to date" in text) == (state == "up to date")
    assert jargon_in([text, window.status_sync.toolTip()]) == []


def test_the_status_bar_follows_sync_status_after_a_change(qtbot, client, make_window, two_homes, tmp_path):
    """A batch of the laptop that has not arrived yet: the window opens on "syncing" (what
    sync_status says), and the change that brings it (a refresh) turns it "up to date"."""
    path, laptop = two_homes
    written = {}
    for i in range(3):
        before = set(folder_files(path))
        as_laptop(qtbot, client, path, laptop, lambda v, i=i: v.append([message(f"m{i}")]))
        written[i] = set(folder_files(path)) - before
    (middle,) = written[1]  # the second append's one new file: its batch
    aside = str(tmp_path / "aside")
    os.rename(os.path.join(path, middle), aside)  # the desktop's sync has not brought it yet
    window = open_window(qtbot, make_window, client, path)
    state = call(qtbot, client, lambda ctx: ctx.vault.sync_status().state)
    assert state != "up to date"
    assert "up to date" not in window.status_sync.text()
    assert jargon_in(visible_texts(window.statusBar())) == []
    os.rename(aside, os.path.join(path, middle))
    window.refresh()
    wait_idle(qtbot, client)
    assert call(qtbot, client, lambda ctx: ctx.vault.sync_status().state) == "up to date"
    assert window.status_sync.text() == "\u25cf up to date"


# --------------------------------------------------------------------------- a revoked device


def revoke_the_desktop(qtbot, client, path: str, laptop: str) -> None:
    as_laptop(qtbot, client, path, laptop, lambda v: v.revoke("desktop", reason="lost on a train"))


def unlock_dialog(qtbot, client, path: str):
    from camillo_desktop.dialogs import UnlockDialog

    dlg = UnlockDialog(client, path)
    qtbot.addWidget(dlg)
    dlg.show()
    wait_idle(qtbot, client)
    dlg.by_pass.setChecked(True)
    dlg.secret.edit.setText(PASSPHRASE)
    qtbot.mouseClick(dlg.unlock_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, client, timeout=30_000)
    return dlg


def devices(qtbot, client, path: str, laptop: str) -> list[tuple[bytes, str, bool]]:
    return as_laptop(qtbot, client, path, laptop, lambda v: sorted((d.writer_id, d.name, d.revoked)
                                                                    for d in v.devices()))


def test_a_revoked_device_is_asked_and_cancelling_registers_nothing(qtbot, client, two_homes):
    path, laptop = two_homes
    revoke_the_desktop(qtbot, client, path, laptop)
    roster, files = devices(qtbot, client, path, laptop), folder_files(path)
    dlg = unlock_dialog(qtbot, client, path)
    assert dlg.isVisible() and not client.is_open
    assert dlg.register_again_button.isVisible() and dlg.register_again_button.text() == "Register this device again"
    assert not dlg.unlock_button.isVisible() and not dlg.secret.isVisible()
    assert "revoked" in dlg.error.text() and "register it again" in dlg.error.text()
    assert jargon_in(visible_texts(dlg)) == [] and "--re-register" not in dlg.error.text()
    (cancel,) = [b for b in dlg.revoked_buttons.buttons() if b is not dlg.register_again_button]
    qtbot.mouseClick(cancel, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, client)
    assert dlg.result() == QDialog.DialogCode.Rejected and not client.is_open
    assert devices(qtbot, client, path, laptop) == roster  # nothing registered
    assert folder_files(path) == files  # nothing written at all


def test_a_revoked_device_registers_again_when_the_person_chooses_it(qtbot, client, make_window, two_homes):
    path, laptop = two_homes
    revoke_the_desktop(qtbot, client, path, laptop)
    before = devices(qtbot, client, path, laptop)
    dlg = unlock_dialog(qtbot, client, path)
    assert dlg.register_again_button.isVisible()
    qtbot.mouseClick(dlg.register_again_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, client, timeout=30_000)
    assert dlg.result() == QDialog.DialogCode.Accepted and client.is_open, dlg.error.text()
    me = call(qtbot, client, lambda ctx: [d for d in ctx.vault.devices() if d.this_device])
    assert len(me) == 1 and not me[0].revoked and me[0].writer_id not in {w for w, _n, _r in before}
    window = make_window()
    with qtbot.waitSignal(window.view_ready, timeout=20_000, check_params_cb=lambda n: n == "timeline"):
        window.vault_opened(dlg.info)
    assert jargon_in(visible_texts(window.notice_bar) + visible_texts(window.statusBar())) == []


def test_a_device_revoked_while_open_is_told_in_the_notice_bar(qtbot, client, make_window, two_homes):
    from camillo_desktop.notices import notice_text

    path, laptop = two_homes
    window = open_window(qtbot, make_window, client, path)
    assert window.notice_bar.texts() == []
    revoke_the_desktop(qtbot, client, path, laptop)
    window.refresh()
    wait_idle(qtbot, client)
    assert notice_text("revoked")[1] in window.notice_bar.texts()
    assert jargon_in(visible_texts(window.notice_bar)) == []


def test_a_wrong_passphrase_of_a_revoked_device_is_only_a_wrong_passphrase(qtbot, client, two_homes):
    path, laptop = two_homes
    revoke_the_desktop(qtbot, client, path, laptop)
    from camillo_desktop.dialogs import UnlockDialog

    dlg = UnlockDialog(client, path)
    qtbot.addWidget(dlg)
    dlg.show()
    wait_idle(qtbot, client)
    dlg.secret.edit.setText("not the passphrase")
    qtbot.mouseClick(dlg.unlock_button, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, client, timeout=30_000)
    assert not dlg.register_again_button.isVisible() and dlg.unlock_button.isVisible()
    assert dlg.error.text() and "register" not in dlg.error.text()
