"""Desktop III end to end, with the real worker thread and real keys: memory read as conversations
(the list, the thread, a message opened in its thread from the timeline, a search result, a fact's
provenance and an inbox item), a 2,000-word message read to its last word, facts added, edited,
forgotten and restored, a confirmation undone, keyboard-only confirm and reject, another process's
write shown live, another copy merged, the unlock dialog cancelled; and the palette's contrast
ratios and the file format's words in every view.

GUI thread (pytest-qt); vault work runs on the client's worker thread (and, for the live test, in a
second process).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import shiboken6
from camillo import NewRecord, Unlock, Vault
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractButton, QApplication, QFrame, QLabel, QPushButton

from camillo_desktop.models import fmt_time

from .helpers import call, click, copy_demo, jargon_in, visible_texts, wait_idle, wait_view


def in_thread(qtbot, window, act, timeout: int = 20_000):
    """Do ``act`` and wait until the conversations view shows a thread; returns the view."""
    view = window.pages["conversations"]
    with qtbot.waitSignal(view.thread.shown, timeout=timeout):
        act()
    settle(qtbot, view.thread)
    return view


def settle(qtbot, thread, timeout: int = 20_000) -> None:
    """Wait until every bubble of the pages read is in."""
    qtbot.waitUntil(lambda: not thread.loading, timeout=timeout)


def assert_opened_at(window, rid: bytes) -> None:
    """The conversations view is shown, with ``rid`` in its thread, highlighted and in view."""
    view = window.pages["conversations"]
    assert window.current_view() is view
    thread = view.thread
    assert thread.focus_id == rid
    bubble = thread.bubble_of(rid)
    assert bubble is not None and bubble.highlighted and not bubble.collapsed
    top = thread.area.verticalScrollBar().value()
    y = bubble.holder.y()
    assert top <= y + 10 and y < top + thread.area.viewport().height(), "the message is scrolled into view"
    sel = view.selected()
    assert sel is not None and (sel.compartment, sel.conversation) == thread.key


def append_as(qtbot, client, demo, who: str, items, compartment: str = "personal") -> list[bytes]:
    """Write records as an agent (a grant name) or, with ``who="window"``, through the window's own vault."""
    def job(ctx):
        if who == "window":
            return ctx.vault.append(items, compartment=compartment).written
        with Vault.open(demo.path, Unlock.grant(demo.grants[who]), home=demo.homes["planner"]) as v:
            return v.append(items, compartment=compartment).written

    return call(qtbot, client, job)


def message_id(qtbot, client, text: str) -> bytes:
    found = call(qtbot, client, lambda ctx: [v for v in ctx.vault.search(text) if v.type == "message"])
    assert found, text
    return found[0].id


# ------------------------------------------------------------------------------------ conversations


def test_the_conversations_list_is_newest_first_and_filters(qtbot, client, demo_window):
    view = wait_view(qtbot, demo_window, "conversations")
    rows = [view.model.row(r) for r in range(view.model.rowCount())]
    assert len(rows) >= 7
    assert [c.last for c in rows] == sorted((c.last for c in rows), reverse=True)
    assert all(c.title and c.title != c.conversation for c in rows), "titles, not raw ids"
    assert {"personal", "work", "health"} <= {c.compartment for c in rows}
    # The first is shown as a thread.
    assert view.thread.key == (rows[0].compartment, rows[0].conversation)

    # Filter by compartment, then by text.
    with qtbot.waitSignal(view.loaded, timeout=15_000):
        view.compartment.setCurrentIndex(view.compartment.findData("work"))
    work = [view.model.row(r) for r in range(view.model.rowCount())]
    assert work and all(c.compartment == "work" for c in work)
    with qtbot.waitSignal(view.loaded, timeout=15_000):
        view.compartment.setCurrentIndex(0)
    with qtbot.waitSignal(view.loaded, timeout=15_000):
        qtbot.keyClicks(view.filter, "balcony")
    found = [view.model.row(r) for r in range(view.model.rowCount())]
    assert found and len(found) < len(rows)
    assert view.count.text().endswith("match")


def test_a_long_conversation_list_is_read_a_page_at_a_time(qtbot, client, demo_window):
    """Issue 19: the list shows its first page at once (a million records took 27 s to list every
    conversation first), is counted in the index, reads more as it is scrolled, and opens a message of
    a conversation further down than what was read."""
    from camillo_desktop.models import PAGE

    t0 = 1_600_000_000
    old = [NewRecord(type="message", conversation=f"old-{i}", role="user", text=f"old conversation {i}", ts=t0 + i)
           for i in range(2 * PAGE + 30)]
    written = append_as(qtbot, client, None, "window", old)
    view = wait_view(qtbot, demo_window, "conversations")
    model = view.model
    qtbot.waitUntil(lambda: model.rowCount() == PAGE, timeout=15_000)
    whole = call(qtbot, client, lambda ctx: ctx.vault.conversations())
    assert len(whole) > 2 * PAGE + 30
    assert [model.row(r) for r in range(PAGE)] == whole[:PAGE]
    qtbot.waitUntil(lambda: view.count.text() == f"{len(whole):,} conversations", timeout=15_000)
    while model.more:  # scrolled to the end of what was read: the view asks for the next page
        view.table.scrollToBottom()
        if model.canFetchMore():
            model.fetchMore()
        qtbot.waitUntil(lambda: not model.loading, timeout=15_000)
    assert [model.row(r) for r in range(model.rowCount())] == whole

    view.table.scrollToTop()
    with qtbot.waitSignal(view.loaded, timeout=15_000):
        view.load()  # a new list: its first page only again
    assert model.rowCount() == PAGE
    view = in_thread(qtbot, demo_window, lambda: view.open_record(written[0]))
    assert view.thread.key == ("personal", "old-0") and view.thread.focus_id == written[0]
    assert view.selected() is None  # further down than the rows read: shown, not selected
    assert view.thread_title.text() == "old conversation 0"


def test_open_a_conversation_from_the_list_shows_it_as_a_thread(qtbot, client, demo_window):
    view = wait_view(qtbot, demo_window, "conversations")
    row = next(r for r in range(view.model.rowCount()) if view.model.row(r).messages >= 3)
    c = view.model.row(row)
    if view.thread.key == (c.compartment, c.conversation):
        row = next(r for r in range(view.model.rowCount()) if r != row and view.model.row(r).messages >= 2)
        c = view.model.row(row)
    with qtbot.waitSignal(view.thread.shown, timeout=15_000):
        view.table.selectRow(row)
    thread = view.thread
    settle(qtbot, thread)
    ids = call(qtbot, client, lambda ctx: ctx.vault.conversation_ids(c.conversation, c.compartment))
    assert [b.message.record.id for b in thread.bubbles] == ids  # one bubble per message, in order
    assert view.thread_title.text() == c.title
    assert f"{c.messages} message" in view.thread_meta.text()
    sides = {b.message.side for b in thread.bubbles}
    assert {"user", "assistant"} <= sides
    user = next(b for b in thread.bubbles if b.message.side == "user")
    assistant = next(b for b in thread.bubbles if b.message.side == "assistant")
    # The user on the right, the assistant on the left; each with writer, time and authority.
    assert user.mapTo(thread.container, user.rect().topRight()).x() > \
        assistant.mapTo(thread.container, assistant.rect().topRight()).x()
    assert user.mapTo(thread.container, user.rect().topLeft()).x() > \
        assistant.mapTo(thread.container, assistant.rect().topLeft()).x()
    for b in (user, assistant):
        v = b.message.record
        assert v.writer in b.head.text() and fmt_time(v.ts) in b.head.text()
        assert f"&nbsp;{v.effective_label}&nbsp;" in b.head.text()  # the authority badge
        assert b.head.accessibleName().endswith(f"authority {v.effective_label}")
        assert b.body.isVisible() and not b.collapsed
    assert "&nbsp;user&nbsp;" in user.head.text()


def test_tool_and_web_content_is_collapsed_and_html_is_never_interpreted(qtbot, client, demo_window, demo_vault):
    evil = "<b>bold?</b> <img src='http://example.com/x.png'> [a link](http://example.com) \u202eevil"
    ids = append_as(qtbot, client, demo_vault, "window", [
        NewRecord(type="message", conversation="c1", role="user", text="Look this up:\n\n- one\n- two\n\n```\ncode <here>\n```"),
        NewRecord(type="message", conversation="c1", role="tool", text=evil),
    ])
    view = in_thread(qtbot, demo_window, lambda: demo_window.open_in_thread(ids[1]))
    tool = view.thread.bubble_of(ids[1])
    assert tool.message.side == "other" and tool.toggle is not None
    assert tool.message.label == "Tool output"
    html = tool.message.html
    assert "<b>" not in html and "<img" not in html and "&lt;b&gt;" in html  # shown as text
    assert "href=\"http://example.com\"" in html  # a link, shown, opened only on a click
    assert "\u202e" not in html  # the bidi control is made visible, not obeyed
    assert not tool.body.openExternalLinks()
    user = view.thread.bubble_of(ids[0])
    assert "<li>" in user.message.html and "<pre" in user.message.html and "&lt;here&gt;" in user.message.html
    # Outside content opened from elsewhere is expanded; a collapsed one shows on a click.
    assert not tool.collapsed
    tool.toggle.setChecked(False)
    assert tool.collapsed and not tool.body.isVisible()
    click(qtbot, tool.toggle)
    assert tool.body.isVisible()


def test_open_a_message_from_the_timeline(qtbot, client, demo_window):
    timeline = demo_window.pages["timeline"]
    model = timeline.model
    row = next(r for r in range(model.rowCount()) if model.record(r) is not None and model.record(r).type == "message"
               and model.record(r).conversation)
    rid = model.record(row).id
    in_thread(qtbot, demo_window, lambda: timeline.table.doubleClicked.emit(model.index(row, 0)))
    assert_opened_at(demo_window, rid)


def test_open_a_search_result_in_its_thread(qtbot, client, demo_window):
    search = demo_window.pages["search"]
    demo_window.search.setText("balcony")
    with qtbot.waitSignal(demo_window.view_ready, timeout=15_000, check_params_cb=lambda n: n == "search"):
        qtbot.keyClick(demo_window.search, Qt.Key.Key_Return)
    row = next(r for r in range(search.model.rowCount()) if search.model.record(r).type == "message")
    rid = search.model.record(row).id
    search.table.selectRow(row)
    in_thread(qtbot, demo_window, lambda: click(qtbot, search.detail.thread_button))
    assert_opened_at(demo_window, rid)


def test_open_a_facts_provenance_in_its_thread(qtbot, client, demo_window):
    from camillo_desktop.dialogs import RecordsDialog

    facts = wait_view(qtbot, demo_window, "facts")
    facts.select_fact("user/diet")
    assert facts.why.isVisible()
    click(qtbot, facts.why)
    def dialog():
        return next((w for w in QApplication.topLevelWidgets() if isinstance(w, RecordsDialog)
                     and shiboken6.isValid(w) and w.isVisible() and w.detail.record is not None), None)

    qtbot.waitUntil(lambda: dialog() is not None, timeout=15_000)
    dlg = dialog()
    rid = dlg.detail.record.id
    assert "vegetarian" in dlg.detail.record.text
    in_thread(qtbot, demo_window, lambda: click(qtbot, dlg.detail.thread_button))
    assert_opened_at(demo_window, rid)
    assert not shiboken6.isValid(dlg) or not dlg.isVisible()  # it closed


def test_open_an_inbox_items_source_in_its_thread(qtbot, client, demo_window):
    inbox = wait_view(qtbot, demo_window, "inbox")
    row = next(r for r in range(inbox.model.rowCount()) if inbox.model.row(r).record.key == "user/partner_name")
    inbox.table.selectRow(row)
    p = inbox.model.row(row)
    assert p.sources, "the planner named the message it drew this from"
    button = next(b for b in inbox.card_area.widget().findChildren(QPushButton)
                  if b.text() == "Open in its conversation")
    in_thread(qtbot, demo_window, lambda: click(qtbot, button))
    assert_opened_at(demo_window, p.sources[0].id)


def test_a_2000_word_message_is_read_to_its_last_word(qtbot, client, demo_window, demo_vault):
    words = [f"word{i}" for i in range(1999)] + ["finalword"]
    text = "\n\n".join(" ".join(words[i:i + 100]) for i in range(0, 2000, 100))
    (rid,) = append_as(qtbot, client, demo_vault, "window",
                       [NewRecord(type="message", conversation="c2", role="assistant", text=text)])
    view = in_thread(qtbot, demo_window, lambda: demo_window.open_in_thread(rid))
    thread = view.thread
    bubble = thread.bubble_of(rid)
    assert not bubble.message.truncated and bubble.more is None
    assert "finalword" in bubble.body.text()
    body = bubble.body
    # Laid out whole: the label has the height its text needs at its width (nothing clipped) ...
    qtbot.waitUntil(lambda: body.height() >= body.heightForWidth(body.width()) - 2, timeout=5000)
    assert bubble.height() > thread.area.viewport().height(), "a long message, not a box 190 px tall"
    # ... and scrolling reaches its end.
    bar = thread.area.verticalScrollBar()
    end = bubble.holder.y() + bubble.holder.height()
    bar.setValue(end - thread.area.viewport().height())
    assert bar.value() + thread.area.viewport().height() >= end


# ------------------------------------------------------------------------------------------- facts


def test_add_edit_forget_and_restore_a_fact(qtbot, client, demo_window):
    from camillo_desktop.views.facts import FactDialog

    facts = wait_view(qtbot, demo_window, "facts")
    click(qtbot, facts.add_button)
    dlg = facts.findChildren(FactDialog)[-1]
    assert dlg.key.hasFocus() or dlg.key.text() == "user/"
    dlg.key.setText("user/bicycle")
    dlg.value.setPlainText("a blue touring bike")
    with qtbot.waitSignal(facts.loaded, timeout=15_000):
        click(qtbot, dlg.save)
    f = call(qtbot, client, lambda ctx: ctx.vault.fact("user/bicycle", "personal"))
    assert f.status == "ok" and f.current.text == "a blue touring bike" and f.current.effective_label == "user"
    assert facts.key_label.text().startswith("user/bicycle")

    # Edit its value.
    click(qtbot, facts.edit_button)
    dlg = facts.findChildren(FactDialog)[-1]
    assert dlg.value.toPlainText() == "a blue touring bike" and dlg.key.isReadOnly()
    dlg.value.setPlainText("a red road bike")
    with qtbot.waitSignal(facts.loaded, timeout=15_000):
        click(qtbot, dlg.save)
    f = call(qtbot, client, lambda ctx: ctx.vault.fact("user/bicycle", "personal"))
    assert f.current.text == "a red road bike"
    assert facts.value_label.text() == "a red road bike"
    # Each history entry shows its whole value.
    assert facts.history.rowCount() == 2
    facts.history_view.setCurrentIndex(facts.history.index(0, 0))
    assert facts.entry.toPlainText() == "a blue touring bike"

    # Forget it: an undo bar; then restore it from the fact itself.
    with qtbot.waitSignal(facts.loaded, timeout=15_000):
        click(qtbot, facts.forget_button)
    assert call(qtbot, client, lambda ctx: ctx.vault.fact("user/bicycle", "personal")).status == "deleted"
    assert demo_window.undo_bar.pending and "Forgot user/bicycle" in demo_window.undo_bar.label.text()
    demo_window.undo_bar.dismiss()
    assert facts.restore_button.isVisible()
    assert facts.restore_button.accessibleName() == "restore user/bicycle"
    with qtbot.waitSignal(facts.loaded, timeout=15_000):
        click(qtbot, facts.restore_button)
    f = call(qtbot, client, lambda ctx: ctx.vault.fact("user/bicycle", "personal"))
    assert f.status == "ok" and f.current.text == "a red road bike"
    assert len(f.history) == 4  # nothing was rewritten: two values, the forgetting, the value again


def test_forget_undone_from_the_undo_bar(qtbot, client, demo_window):
    facts = wait_view(qtbot, demo_window, "facts")
    facts.select_fact("user/flight_times")
    with qtbot.waitSignal(facts.loaded, timeout=15_000):
        click(qtbot, facts.forget_button)
    assert call(qtbot, client, lambda ctx: ctx.vault.fact("user/flight_times", "personal")).status == "deleted"
    with qtbot.waitSignal(facts.loaded, timeout=15_000):
        click(qtbot, demo_window.undo_bar.button)
    f = call(qtbot, client, lambda ctx: ctx.vault.fact("user/flight_times", "personal"))
    assert f.status == "ok" and f.current.text == "never before 10:00"


# ------------------------------------------------------------------------------------------- inbox


def test_the_inbox_shows_each_proposal_beside_the_users_value(qtbot, client, demo_window):
    inbox = wait_view(qtbot, demo_window, "inbox")
    props = [inbox.model.row(r) for r in range(inbox.model.rowCount())]
    assert [p.record.ts for p in props] == sorted((p.record.ts for p in props), reverse=True)  # newest first
    row = next(r for r, p in enumerate(props) if p.record.key == "user/diet")
    inbox.table.selectRow(row)
    texts = visible_texts(inbox.card_area.widget())
    assert "pescatarian" in texts and "vegetarian" in texts  # proposed, beside the user's value
    assert any("planner" in t for t in texts)
    assert any("replaces it" in t for t in texts)


def test_confirm_then_undo(qtbot, client, demo_window):
    inbox = wait_view(qtbot, demo_window, "inbox")
    row = next(r for r in range(inbox.model.rowCount()) if inbox.model.row(r).record.key == "user/meeting_time")
    inbox.table.selectRow(row)
    with qtbot.waitSignal(inbox.loaded, timeout=15_000):
        click(qtbot, inbox.confirm_button)
    f = call(qtbot, client, lambda ctx: ctx.vault.fact("user/meeting_time", "personal"))
    assert f.status == "ok" and f.current.text == "mornings" and f.current.effective_label == "user"
    assert "user/meeting_time" not in {inbox.model.row(r).record.key for r in range(inbox.model.rowCount())}
    bar = demo_window.undo_bar
    assert bar.pending and bar.label.text().startswith("Confirmed")
    with qtbot.waitSignal(inbox.loaded, timeout=15_000):
        click(qtbot, bar.button)
    f = call(qtbot, client, lambda ctx: ctx.vault.fact("user/meeting_time", "personal"))
    assert f.status in ("pending", "deleted") and f.proposed and f.proposed[0].text == "mornings"
    assert "user/meeting_time" in {inbox.model.row(r).record.key for r in range(inbox.model.rowCount())}
    assert not bar.pending


def test_keyboard_only_confirm_and_reject(qtbot, client, demo_window):
    from camillo_desktop.dialogs import Ask

    inbox = wait_view(qtbot, demo_window, "inbox")
    inbox.table.setFocus()
    keys = [inbox.model.row(r).record.key for r in range(inbox.model.rowCount())]
    first = keys[inbox.table.currentIndex().row()]
    qtbot.keyClick(inbox.table, Qt.Key.Key_Home)
    first = inbox.model.row(inbox.table.currentIndex().row()).record
    Ask.next_answers = [True]  # confirming over a value the user set asks first
    with qtbot.waitSignal(inbox.loaded, timeout=15_000):
        qtbot.keyClick(inbox.table, Qt.Key.Key_Return, Qt.KeyboardModifier.ControlModifier)
    f = call(qtbot, client, lambda ctx: ctx.vault.fact(first.key, first.compartment))
    assert f.current is not None and f.current.value == first.value and f.current.effective_label == "user"

    inbox.table.setFocus()
    qtbot.keyClick(inbox.table, Qt.Key.Key_Home)
    second = inbox.model.row(inbox.table.currentIndex().row()).record
    with qtbot.waitSignal(inbox.loaded, timeout=15_000):
        qtbot.keyClick(inbox.table, Qt.Key.Key_Delete)
    assert call(qtbot, client, lambda ctx: ctx.vault.record(second.id)).hidden
    assert second.id not in {inbox.model.row(r).record.id for r in range(inbox.model.rowCount())}
    # Tab leaves the table for the buttons of the detail.
    inbox.table.setFocus()
    qtbot.keyClick(inbox.table, Qt.Key.Key_Tab)
    assert not inbox.table.hasFocus()


def test_confirming_over_the_users_value_asks_naming_both(qtbot, client, demo_window, informed):
    inbox = wait_view(qtbot, demo_window, "inbox")
    row = next(r for r in range(inbox.model.rowCount()) if inbox.model.row(r).record.key == "user/diet")
    inbox.table.selectRow(row)
    click(qtbot, inbox.confirm_button)
    qtbot.waitUntil(lambda: bool(informed.questions), timeout=10_000)
    title, text = informed.questions[-1]
    assert "vegetarian" in text and "pescatarian" in text
    wait_idle(qtbot, client)
    f = call(qtbot, client, lambda ctx: ctx.vault.fact("user/diet", "personal"))
    assert f.current.text == "vegetarian"  # declined: nothing changed


# ------------------------------------------------------------------------------------ live and merge


WRITER = """
import sys
from camillo import NewRecord, Unlock, Vault
path, grant, home = sys.argv[1:4]
with Vault.open(path, Unlock.grant(grant), home=home) as v:
    v.append([NewRecord(type="message", conversation="c1", role="assistant", text="written by another process")])
"""


def test_a_write_by_another_process_appears_within_two_seconds(qtbot, client, make_window, open_demo, settings,
                                                                 demo_vault):
    from camillo_desktop.settings import Setting

    settings.set(Setting.LIVE, True)
    window = make_window(first_view="conversations")
    with qtbot.waitSignal(window.view_ready, timeout=20_000, check_params_cb=lambda n: n == "conversations"):
        window.vault_opened(open_demo())
    view = window.pages["conversations"]

    def messages_in_c1() -> int:
        return next((c.messages for c in (view.model.row(r) for r in range(view.model.rowCount()))
                     if c.conversation == "c1"), 0)

    before = messages_in_c1()
    assert before > 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", WRITER, demo_vault.path, demo_vault.grants["planner"],
                    demo_vault.homes["planner"]], check=True, env=env, timeout=120)
    written = time.monotonic()
    qtbot.waitUntil(lambda: messages_in_c1() == before + 1, timeout=2000)
    took = time.monotonic() - written
    assert took <= 2.0, f"shown after {took:.2f} s"
    # The list shows it as the latest activity, and the status bar does not claim more than it knows.
    assert view.model.row(0).conversation == "c1"
    qtbot.waitUntil(lambda: not client._jobs, timeout=5000)
    assert "up to date" in window.status_sync.text().lower()


def test_merge_another_copy_reports_what_came_in_and_the_conflicts(qtbot, client, demo_window, demo_vault, tmp_path):
    other = copy_demo(demo_vault, str(tmp_path / "other"))

    def on_the_laptop(ctx):
        with Vault.open(other.path, other.unlock(), home=other.homes["laptop"]) as laptop:
            laptop.append([NewRecord(type="fact", key="user/home_city", value="Braga"),
                           NewRecord(type="message", conversation="c3", role="user", text="Sent from the laptop copy")])

    call(qtbot, client, on_the_laptop)
    append_as(qtbot, client, demo_vault, "window", [NewRecord(type="fact", key="user/home_city", value="Coimbra")])
    dlg = demo_window.merge_copy()
    assert dlg is not None and dlg.focusWidget() is dlg.path
    dlg.path.setText(other.path)
    click(qtbot, dlg.merge)
    qtbot.waitUntil(lambda: dlg.report is not None, timeout=30_000)
    text = dlg.result.text()
    assert "2 new records came in (1 fact or preference, 1 message)." in text
    assert "user/home_city" in text and "Braga" in text and "Coimbra" in text
    assert dlg.review.isVisible()
    assert jargon_in(visible_texts(dlg)) == []
    with qtbot.waitSignal(demo_window.view_ready, timeout=15_000, check_params_cb=lambda n: n == "conflicts"):
        click(qtbot, dlg.review)
    f = call(qtbot, client, lambda ctx: ctx.vault.fact("user/home_city", "personal"))
    assert f.status == "conflict"


# --------------------------------------------------------------------------------- locked, access


def test_cancel_the_unlock_dialog_to_a_locked_screen_with_the_menus(qtbot, make_window, demo_vault):
    from camillo_desktop.actions import Action

    window = make_window()
    window.show_locked(demo_vault.path)
    assert window.stack.currentWidget() is window.locked_page
    assert window.unlock_button.isVisibleTo(window)
    assert window.actions_[Action.LOCK].text() == "&Unlock\u2026"
    assert window.menuBar().isVisible()
    menus = {a.text().replace("&", ""): a for a in window.menuBar().actions()}
    assert "Vault" in menus and menus["Vault"].isEnabled()
    vault_menu = menus["Vault"].menu()
    enabled = {a.text().replace("&", "").rstrip("\u2026") for a in vault_menu.actions() if a.isEnabled() and a.text()}
    assert any("Open" in t for t in enabled) and any("New" in t or "Create" in t for t in enabled)


def test_the_unlock_dialog_puts_the_focus_in_the_passphrase(qtbot, client, demo_vault):
    from camillo_desktop.dialogs import UnlockDialog

    dlg = UnlockDialog(client, demo_vault.path)
    qtbot.addWidget(dlg)
    dlg.show()
    qtbot.waitExposed(dlg)
    qtbot.waitUntil(lambda: dlg.secret.edit.hasFocus() or dlg.secret.hasFocus(), timeout=5000)
    dlg.reject()


def test_the_palette_meets_wcag_aa():
    from camillo_desktop import theme

    for name, c in (("light", theme.LIGHT), ("dark", theme.DARK)):
        for fg in ("text", "muted", "link", "error", "ok", "warn", "disabled_text"):
            for bg in ("base", "window", "alt") if fg != "disabled_text" else ("disabled_bg",):
                ratio = theme.contrast(c[fg], c[bg])
                assert ratio >= 4.5, f"{name}: {fg} on {bg} is {ratio:.2f}:1"
        for bg in ("bubble_user", "bubble_assistant", "bubble_other", "code_bg"):
            for fg in ("text", "muted") + (("link",) if bg != "bubble_other" else ()):
                ratio = theme.contrast(c[fg], c[bg])
                assert ratio >= 4.5, f"{name}: {fg} on {bg} is {ratio:.2f}:1"
        assert theme.contrast(c["highlight_text"], c["accent"]) >= 4.5, f"{name}: selected text"
        for bg in ("base", "window"):
            for ui in ("control", "accent"):
                ratio = theme.contrast(c[ui], bg and c[bg])
                assert ratio >= 3.0, f"{name}: {ui} on {bg} is {ratio:.2f}:1"
    for bg, fg in (*theme.AUTHORITY_COLORS.values(), *((s, "#ffffff") for s in theme.STATUS_COLORS.values())):
        assert theme.contrast(fg, bg) >= 4.5, f"badge {fg} on {bg}"
    assert theme.contrast("#ffffff", theme.DANGER) >= 4.5


@pytest.mark.parametrize("dark", [False, True])
def test_no_view_shows_the_file_formats_words(qtbot, qapp, client, demo_window, dark):
    from camillo_desktop import theme

    theme.apply(qapp, "dark" if dark else "light")
    try:
        seen = []
        for name in [n for n in demo_window.pages if n != "search"]:
            view = demo_window.pages[name]
            demo_window.show_view(name)
            wait_idle(qtbot, client)
            if hasattr(view, "table") and view.model.rowCount():
                view.table.selectRow(0)
            texts = visible_texts(demo_window)
            seen.append(name)
            assert jargon_in(texts) == [], f"{name}: {jargon_in(texts)}"
            model = getattr(view, "model", None)
            if model is not None and hasattr(model, "columnCount"):
                cells = [str(model.data(model.index(r, c)) or "") for r in range(min(model.rowCount(), 60))
                         for c in range(model.columnCount())]
                headers = [str(model.headerData(c, Qt.Orientation.Horizontal)) for c in range(model.columnCount())]
                assert jargon_in(headers) == [], f"{name}: {jargon_in(headers)}"
                assert not [t for t in cells if t == "control"], f"{name} shows the internal compartment"
        assert "conversations" in seen and "inbox" in seen and "facts" in seen
    finally:
        theme.apply(qapp, "light")


# ------------------------------------------------------------------------------------ a long thread


def test_a_long_conversation_loads_in_pages_both_ways_and_ctrl_end_reaches_the_end(qtbot, client, demo_window,
                                                                                    demo_vault):
    from camillo_desktop.views.thread import PAGE, WINDOW

    n = 400
    texts = [f"message {i}: " + ("some words about the garden. " * (1 + i % 9)) for i in range(n)]
    ids = append_as(qtbot, client, demo_vault, "window", [
        NewRecord(type="message", conversation="long", role="user" if i % 2 == 0 else "assistant", text=t,
                  ts=1_700_000_000 + i * 60) for i, t in enumerate(texts)])
    view = in_thread(qtbot, demo_window, lambda: demo_window.open_in_thread(ids[-1]))
    thread = view.thread
    assert len(thread.ids) == n and thread.hi == n and len(thread.bubbles) == PAGE
    assert thread.top.text() == f"\u2191 {n - PAGE} earlier messages"
    worst = 0.0
    # Scroll to the top again and again: earlier pages come in, at most WINDOW bubbles live at once.
    for _ in range(40):
        if thread.lo == 0:
            break
        lo = thread.lo
        t = time.perf_counter()
        thread.area.verticalScrollBar().setValue(0)
        qtbot.waitUntil(lambda lo=lo: thread.lo < lo and not thread.loading, timeout=10_000)
        worst = max(worst, time.perf_counter() - t)
        assert len(thread.bubbles) <= WINDOW
        # The message that was in view stays in view (the scroll position follows the insertion).
        assert thread.area.verticalScrollBar().value() > 0
    assert thread.lo == 0 and thread.top.text() == "Start of the conversation"
    assert thread.bubbles[0].message.record.id == ids[0]
    assert thread.hi < n and thread.bottom.text().startswith("\u2193")
    # Ctrl+End: the real end, not the end of what is loaded.
    thread.area.setFocus()
    with qtbot.waitSignal(thread.shown, timeout=15_000):
        qtbot.keyClick(thread.area, Qt.Key.Key_End, Qt.KeyboardModifier.ControlModifier)
    settle(qtbot, thread)
    assert thread.hi == n and thread.bubbles[-1].message.record.id == ids[-1]
    bar = thread.area.verticalScrollBar()
    assert bar.value() == bar.maximum()


# ------------------------------------------------------------------------------ timeline and search


def test_the_timeline_is_newest_first_with_a_toggle_and_ctrl_end_reaches_the_real_end(qtbot, client, demo_window):
    timeline = demo_window.pages["timeline"]
    model = timeline.model
    ids = call(qtbot, client, lambda ctx: ctx.vault.timeline_ids(order="time", descending=True))
    assert model.total() == len(ids) and model.record(0).id == ids[0]
    assert timeline.newest.isChecked()
    with qtbot.waitSignal(timeline.loaded, timeout=15_000):
        click(qtbot, timeline.newest)
    assert model.record(0).id == ids[-1]  # oldest first now
    timeline.table.setFocus()
    qtbot.keyClick(timeline.table, Qt.Key.Key_End, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: timeline.table.currentIndex().row() == model.total() - 1, timeout=10_000)
    qtbot.waitUntil(lambda: model.record(model.total() - 1) is not None, timeout=10_000)
    assert model.record(model.total() - 1).id == ids[0]


def search_230_notes(qtbot, client, demo_window, demo_vault, word: str, query: str):
    """The search view after 230 notes holding ``word`` were written and ``query`` was searched for."""
    append_as(qtbot, client, demo_vault, "window", [
        NewRecord(type="message", conversation="veg", role="user", text=f"note {i}: the {word} grew again")
        for i in range(230)])
    view = demo_window.pages["search"]
    demo_window.search.setText(query)
    with qtbot.waitSignal(demo_window.view_ready, timeout=15_000, check_params_cb=lambda n: n == "search"):
        qtbot.keyClick(demo_window.search, Qt.Key.Key_Return)
    return view


def test_search_counts_every_match_loads_more_on_scroll_and_marks_the_words(qtbot, client, demo_window, demo_vault):
    from camillo_desktop.models import HTML_ROLE, SearchColumn

    view = search_230_notes(qtbot, client, demo_window, demo_vault, "zucchini", "zucchini")
    assert view.model.total == 230 and view.count.text().startswith("230 records match")
    assert view.model.rowCount() < 230 and view.model.canFetchMore()
    view.table.scrollToBottom()
    view.model.fetchMore()
    qtbot.waitUntil(lambda: view.model.rowCount() == 230, timeout=15_000)
    html = view.model.data(view.model.index(0, SearchColumn.MATCH), HTML_ROLE)
    assert "font-weight: 600;\">zucchini</span>" in html  # the matched word marked
    # The syntax is discoverable: a popover lists the modifiers, and a click adds one.
    click(qtbot, demo_window.search_help_button)
    qtbot.waitUntil(lambda: demo_window.search_help.isVisible(), timeout=5000)
    tokens = [b.text().split()[0] for b in demo_window.search_help.buttons]
    assert {"type:message", "key:user/home*", "is:pending", "compartment:work", "class:user"} <= set(tokens)
    demo_window.search_help.buttons[tokens.index("is:pending")].click()
    assert demo_window.search.text() == "zucchini is:pending" and not demo_window.search_help.isVisible()


def test_a_search_with_modifiers_says_more_than_until_scrolling_counted_every_match(qtbot, client, demo_window,
                                                                                     demo_vault, monkeypatch):
    from camillo import search
    monkeypatch.setattr(search, "COUNT_AHEAD", 20)  # counting stops 20 matches past the page
    view = search_230_notes(qtbot, client, demo_window, demo_vault, "kohlrabi", "kohlrabi type:message")
    assert view.count.text().startswith("More than 220 records match") and not view.model.total_exact
    view.table.scrollToBottom()
    view.model.fetchMore()
    qtbot.waitUntil(lambda: view.model.rowCount() == 230, timeout=15_000)
    assert view.model.total_exact and view.count.text().startswith("230 records match")


# ------------------------------------------------------------------------------------------ sizes


def test_below_900_pixels_the_sidebar_collapses_to_icons(qtbot, demo_window):
    demo_window.resize(1280, 800)
    qtbot.waitUntil(lambda: not demo_window.sidebar_collapsed, timeout=3000)
    demo_window.resize(800, 600)
    qtbot.waitUntil(lambda: demo_window.sidebar_collapsed, timeout=3000)
    item = demo_window.nav.item(0)
    assert item.text() == "" and item.toolTip() == "Conversations" and not item.icon().isNull()
    demo_window.resize(1280, 800)
    qtbot.waitUntil(lambda: not demo_window.sidebar_collapsed, timeout=3000)
    assert demo_window.nav.item(0).text() == "Conversations"


def test_a_dialog_is_never_smaller_than_its_content(qtbot, demo_window):
    from camillo_desktop.merging import MergeDialog

    dlg = MergeDialog(demo_window)
    qtbot.addWidget(dlg)
    dlg.resize(60, 40)  # as a remembered size might be
    dlg.show()
    qtbot.waitExposed(dlg)
    hint = dlg.minimumSizeHint()
    assert dlg.width() >= hint.width() and dlg.height() >= hint.height()
    dlg.reject()


def test_show_forgotten_marks_them_in_the_thread_with_restore(qtbot, client, demo_window):
    hidden = call(qtbot, client, lambda ctx: [v for v in ctx.vault.search("wrong chat is:hidden") if v.hidden])
    assert hidden, "the demo forgot a message in c2"
    rid, comp = hidden[0].id, hidden[0].compartment
    # Opened from elsewhere, a forgotten message shows (the view turns "Show forgotten" on), marked.
    view = in_thread(qtbot, demo_window, lambda: demo_window.open_in_thread(rid))
    assert view.show_hidden.isChecked()
    bubble = view.thread.bubble_of(rid)
    assert bubble is not None and bubble.property("forgotten")
    texts = visible_texts(bubble)
    assert "forgotten" in texts and "Restore" in texts
    restore = next(b for b in bubble.findChildren(QAbstractButton) if b.text() == "Restore")
    before = call(qtbot, client, lambda ctx: ctx.vault.conversation_ids("c2", comp))
    with qtbot.waitSignal(client.vault_changed, timeout=15_000):
        restore.click()
    wait_idle(qtbot, client)
    after = call(qtbot, client, lambda ctx: ctx.vault.conversation_ids("c2", comp))
    (copy,) = set(after) - set(before)  # written again, as a new record; the forgotten one stays forgotten
    assert call(qtbot, client, lambda ctx: ctx.vault.record(rid)).hidden
    # Turned off again, the forgotten one is not shown; the restored copy is.
    with qtbot.waitSignal(view.thread.shown, timeout=15_000):
        view.show_hidden.setChecked(False)
    settle(qtbot, view.thread)
    assert view.thread.bubble_of(rid) is None and view.thread.bubble_of(copy) is not None


def test_a_messages_attachments_show_as_chips_with_a_thumbnail_and_save(qtbot, client, demo_window, tmp_path,
                                                                        monkeypatch):
    from PySide6.QtCore import QBuffer, QByteArray, QIODevice
    from PySide6.QtGui import QColor, QImage

    from camillo_desktop.views import thread as thread_mod

    image = QImage(64, 48, QImage.Format.Format_RGB32)
    image.fill(QColor("#3d5afe"))
    data = QByteArray()
    buffer = QBuffer(data)
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buffer, "PNG")
    picture = tmp_path / "balcony.png"
    picture.write_bytes(bytes(data))
    notes = tmp_path / "lease.txt"
    notes.write_bytes(b"the lease, page 1\n" * 100)
    (rid,) = append_as(qtbot, client, None, "window", [NewRecord(type="message", conversation="c7", role="user",
                                                                 text="Here is the balcony and the lease.")])

    def attach(ctx):
        ctx.vault.attach(str(picture), of=rid)
        ctx.vault.attach(str(notes), of=rid)

    call(qtbot, client, attach)
    view = in_thread(qtbot, demo_window, lambda: demo_window.open_in_thread(rid))
    bubble = view.thread.bubble_of(rid)
    assert [a.name for a in bubble.message.attachments] == ["balcony.png", "lease.txt"]
    png, txt = bubble.message.attachments
    assert png.image == bytes(data) and txt.image is None  # only an image gets a thumbnail
    chips = [w for w in bubble.findChildren(QFrame) if w.objectName() == "Chip"]
    assert len(chips) == 2
    texts = visible_texts(bubble)
    assert any("balcony.png" in t and ("bytes" in t or "KB" in t) for t in texts)
    thumbs = [w for w in chips[0].findChildren(QLabel) if w.pixmap() is not None and not w.pixmap().isNull()]
    assert thumbs and thumbs[0].pixmap().width() <= thread_mod.THUMBNAIL_SIZE[0]
    assert thumbs[0].accessibleName() == "picture balcony.png"
    # Save…: the file the person names gets the exact bytes.
    out = tmp_path / "saved.txt"
    monkeypatch.setattr(thread_mod.QFileDialog, "getSaveFileName", lambda *a, **k: (str(out), ""))
    save = next(b for b in chips[1].findChildren(QAbstractButton) if b.text() == "Save\u2026")
    assert save.accessibleName() == "save the attachment lease.txt"
    save.click()
    qtbot.waitUntil(out.exists, timeout=10_000)
    wait_idle(qtbot, client)
    assert out.read_bytes() == notes.read_bytes()


def test_the_window_is_kept_inside_the_screens_available_area(qtbot, make_window):
    window = make_window()
    area = window.screen().availableGeometry()
    window.resize(area.width() + 900, area.height() + 700)
    window.move(area.right() + 300, area.bottom() + 300)
    window.fit_to_screen()
    frame = window.frameGeometry()
    assert window.width() <= area.width() and window.height() <= area.height()
    assert area.contains(frame.topLeft()) and frame.right() <= area.right() + 1


def _png(width: int, height: int, idat: bytes) -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", idat) + chunk(b"IEND", b""))


def test_a_hostile_image_is_refused_and_never_crashes_the_app(qtbot, client, demo_window, tmp_path):
    """A decompression bomb (a 60,000 × 60,000 PNG whose pixels compress to a few KB), a truncated
    image and random bytes named .png: each is shown as a chip with its name and Save…, without a
    thumbnail, and the app goes on; a real small image still gets one."""
    import zlib

    from camillo_desktop.views import thread as thread_mod

    bomb = _png(60_000, 60_000, zlib.compress(b"\0" * 2_000_000, 9))
    assert len(bomb) < 10_000
    small = _png(2, 2, zlib.compress(b"\0" + b"\x10\x20\x30" * 2 + b"\0" + b"\x40\x50\x60" * 2))
    truncated = small[:40]
    noise = bytes(range(256)) * 8
    assert thread_mod.thumbnail(bomb) is None and thread_mod.thumbnail(truncated) is None
    assert thread_mod.thumbnail(noise) is None
    good = thread_mod.thumbnail(small)
    assert good is not None and not good.isNull()
    files = {"bomb.png": bomb, "cut.png": truncated, "noise.png": noise}
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
    (rid,) = append_as(qtbot, client, None, "window", [NewRecord(type="message", conversation="c8", role="user",
                                                                 text="Three pictures that are not.")])

    def attach(ctx):
        for name in files:
            ctx.vault.attach(str(tmp_path / name), of=rid, media_type="image/png")

    call(qtbot, client, attach)
    view = in_thread(qtbot, demo_window, lambda: demo_window.open_in_thread(rid))
    bubble = view.thread.bubble_of(rid)
    chips = [w for w in bubble.findChildren(QFrame) if w.objectName() == "Chip"]
    assert len(chips) == 3
    for chip in chips:
        assert not [w for w in chip.findChildren(QLabel) if w.pixmap() is not None and not w.pixmap().isNull()]
        assert any(b.text() == "Save\u2026" for b in chip.findChildren(QAbstractButton))
    texts = visible_texts(bubble)
    assert all(any(name in t for t in texts) for name in files)
    assert demo_window.isVisible()


def test_resolve_then_undo(qtbot, client, demo_window):
    """Undo after resolving a conflict, as new records (nothing is rewritten): the value the conflict
    showed first is the user's value again and the other candidate waits beside it in the inbox."""
    view = wait_view(qtbot, demo_window, "conflicts")
    fact = view._fact
    shown, other = fact.current.text, next(c.text for c in fact.candidates if c.id != fact.current.id)
    view.new_value.setText("decaf")
    click(qtbot, view.new_button)
    qtbot.waitUntil(lambda: "decaf" in view.result.text(), timeout=15_000)
    after = call(qtbot, client, lambda ctx: ctx.vault.fact(fact.key, fact.compartment))
    assert after.status == "ok" and after.current.text == "decaf"
    bar = demo_window.undo_bar
    assert bar.pending and bar.label.text().startswith("Resolved")
    before_ids = call(qtbot, client, lambda ctx: {r.id for r in ctx.vault.timeline(include_hidden=True)})
    click(qtbot, bar.button)
    qtbot.waitUntil(lambda: not bar.pending, timeout=15_000)
    wait_idle(qtbot, client)
    undone = call(qtbot, client, lambda ctx: ctx.vault.fact(fact.key, fact.compartment))
    assert undone.status == "ok" and undone.current.text == shown and undone.current.effective_label == "user"
    assert [p.text for p in undone.proposed] == [other]
    waiting = call(qtbot, client, lambda ctx: {(p.key, p.text) for p in ctx.vault.inbox()})
    assert (fact.key, other) in waiting
    still = call(qtbot, client, lambda ctx: {r.id for r in ctx.vault.timeline(include_hidden=True)})
    assert before_ids <= still  # the history keeps every record; the undo only added


def test_create_a_compartment_from_the_compartment_filter(qtbot, client, demo_window, monkeypatch):
    """Issue 17 item 6 in the app: "New…" beside the compartment filter asks for a name and adds the
    compartment; every picker then offers it and the filter selects it; a name that exists is refused
    with the vault's own sentence and nothing is added."""
    from PySide6.QtWidgets import QInputDialog

    view = wait_view(qtbot, demo_window, "conversations")
    assert view.new_compartment.isEnabled()
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: ("travel", True))
    click(qtbot, view.new_compartment)
    qtbot.waitUntil(lambda: view.compartment.findData("travel") >= 0, timeout=15_000)
    assert view.compartment.currentData() == "travel"
    timeline = demo_window.pages["timeline"]
    assert timeline.compartment.findData("travel") >= 0
    assert "travel" in call(qtbot, client, lambda ctx: [c.name for c in ctx.vault.compartment_list()])
    errors: list[str] = []
    monkeypatch.setattr(demo_window, "show_error", lambda exc, *a, **k: errors.append(str(exc)))
    monkeypatch.setattr(QInputDialog, "getText", lambda *a, **k: ("personal", True))
    click(qtbot, view.new_compartment)
    qtbot.waitUntil(lambda: bool(errors), timeout=15_000)
    assert "personal" in errors[0]
    names = call(qtbot, client, lambda ctx: [c.name for c in ctx.vault.compartment_list()])
    assert names.count("personal") == 1
