"""Views refresh only what changed: each view declares what it shows by the names of
:class:`camillo.Changes`, and a mutation's Changes (the ones the vault returned) reload exactly the
views they name: the shown view at once, a hidden one when it is next shown (it is marked stale).
With the real worker and a real vault; reloads are counted on each view's ``load``."""

from __future__ import annotations

from collections import Counter

import pytest
from camillo import Changes, NewRecord
from PySide6.QtCore import Qt

from .helpers import call, wait_idle

ALL = {"timeline", "facts", "conflicts", "inbox", "grants", "devices", "enroll", "activity", "health", "search"}
NOT_SHOWN_YET = {"enroll"}  # stale from the start (showing it makes an enrollment offer)


def wait_view(qtbot, window, name: str, argument=None):
    """Show a page; wait for its data if it loads (a page already loaded is just shown)."""
    page = window.pages[name]
    if not page._stale and argument is None:
        window.show_view(name)
        return page
    with qtbot.waitSignal(window.view_ready, timeout=20_000, check_params_cb=lambda n: n == name):
        window.show_view(name, argument)
    return page


class Loads:
    """Counts the loads of every page of ``window`` from now on."""

    def __init__(self, window, monkeypatch) -> None:
        self.counts: Counter[str] = Counter()
        self.window = window
        for name, page in window.pages.items():
            monkeypatch.setattr(page, "load", self._counting(name, page.load))

    def _counting(self, name, load):
        def counted():
            self.counts[name] += 1
            return load()

        return counted

    def stale(self) -> set[str]:
        return {name for name, page in self.window.pages.items() if page._stale}


@pytest.fixture
def window(qtbot, demo_window):
    """The demo window with every page loaded once (so that none is stale), back on the timeline."""
    for name in ("facts", "conflicts", "inbox", "grants", "devices", "activity", "health"):
        wait_view(qtbot, demo_window, name)
    wait_view(qtbot, demo_window, "search", "coffee")
    wait_view(qtbot, demo_window, "timeline")
    wait_idle(qtbot, demo_window.client)
    assert {n for n, p in demo_window.pages.items() if p._stale} == NOT_SHOWN_YET
    return demo_window


def mutate(qtbot, client, fn) -> Changes:
    """Run ``fn(ctx)`` as a mutation; wait for it and for the reloads it caused; return what was broadcast
    (the very Changes the vault returned, when it returned one)."""
    box: dict = {}
    with qtbot.waitSignal(client.vault_changed, timeout=30_000) as blocker:
        client.mutate(fn, lambda r: box.setdefault("ok", r), lambda e: box.setdefault("err", e))
    wait_idle(qtbot, client)
    if "err" in box:
        raise box["err"]
    broadcast = blocker.args[0]
    returned = box["ok"] if isinstance(box["ok"], Changes) else getattr(box["ok"], "changes", None)
    assert returned is None or broadcast is returned
    return broadcast


def append(qtbot, client, *records: NewRecord, compartment: str = "personal") -> Changes:
    return mutate(qtbot, client, lambda ctx: ctx.vault.append(list(records), compartment=compartment))


MESSAGE = NewRecord(type="message", conversation="c-new", role="user", text="a new message about the garden")


# ------------------------------------------------------------------------------------------ appends


def test_an_append_reloads_the_timeline_and_leaves_the_grants_and_devices_alone(qtbot, client, window,
                                                                               monkeypatch):
    loads = Loads(window, monkeypatch)
    timeline = window.pages["timeline"]
    before = timeline.model.total()
    changes = append(qtbot, client, MESSAGE)
    assert changes.records and changes.batches and not changes.reloaded and not changes.roster
    assert loads.counts == {"timeline": 1}  # the one shown, at once
    assert timeline.model.total() == before + 1
    # Hidden: what shows records, batches or anything is marked stale; the rest is left alone.
    assert loads.stale() == NOT_SHOWN_YET | {"search", "activity", "health"}


def test_the_grants_view_is_not_reloaded_after_an_append(qtbot, client, window, monkeypatch):
    wait_view(qtbot, window, "grants")
    loads = Loads(window, monkeypatch)
    append(qtbot, client, MESSAGE)
    assert loads.counts["grants"] == 0 and not window.pages["grants"]._stale
    assert sum(loads.counts.values()) == 0
    assert {"timeline", "search", "activity", "health"} <= loads.stale()


def test_the_activity_view_reloads_after_an_append_it_shows(qtbot, client, window, monkeypatch):
    activity = wait_view(qtbot, window, "activity")
    rows = activity.model.rowCount()
    loads = Loads(window, monkeypatch)
    append(qtbot, client, MESSAGE)
    assert loads.counts == {"activity": 1}
    assert activity.model.rowCount() == rows + 1


def test_a_fact_written_reloads_the_facts_the_inbox_and_conflicts_not_the_roster(qtbot, client, window, monkeypatch):
    loads = Loads(window, monkeypatch)
    changes = append(qtbot, client, NewRecord(type="fact", key="user/pet", value="a cat"))
    assert ("personal", "user/pet") in changes.keys
    assert loads.counts == {"timeline": 1}
    assert loads.stale() == NOT_SHOWN_YET | {"search", "activity", "health", "facts", "inbox", "conflicts"}


# ------------------------------------------------------------------------------------------ one fact


def test_the_facts_view_redraws_the_selected_fact_only_when_it_moved(qtbot, client, window, monkeypatch):
    facts = wait_view(qtbot, window, "facts")
    facts.select_fact("user/home_city")
    assert facts.value_label.text() == "Porto"
    facts.history_view.selectRow(0)  # the user looks at the first value
    shown: list[str] = []
    original = facts._show
    monkeypatch.setattr(facts, "_show", lambda f: (shown.append(f.key if f else None), original(f)))
    loads = Loads(window, monkeypatch)

    # Another fact moved: the tree reloads (with it), the selected fact's detail stays as it was.
    with qtbot.waitSignal(facts.loaded, timeout=20_000):
        changes = append(qtbot, client, NewRecord(type="fact", key="user/pet", value="a cat"))
    assert ("personal", "user/home_city") not in changes.keys
    assert loads.counts == {"facts": 1}
    assert facts.model.find("user/pet").isValid()
    assert shown == []
    assert facts._fact.key == "user/home_city" and facts.value_label.text() == "Porto"
    assert facts.history_view.selectionModel().isRowSelected(0)  # not reset under the user

    # The selected fact moved: its detail is drawn again, with the new value.
    with qtbot.waitSignal(facts.loaded, timeout=20_000):
        changes = append(qtbot, client, NewRecord(type="fact", key="user/home_city", value="Braga"))
    assert ("personal", "user/home_city") in changes.keys
    assert loads.counts == {"facts": 2}
    assert shown == ["user/home_city"]
    assert facts.value_label.text() == "Braga" and facts.history.rowCount() == 3


# ------------------------------------------------------------------------------------------ the roster


# A roster change writes control records, a copy in every compartment, in batches of their own: the
# vault's Changes name their ``batches`` (new rows of the activity view) but not the records, which
# are no timeline records: they speak through devices, grants, credentials and policy.
CONTROL_BATCHES = {"activity", "health"}


def change_passphrase(demo_vault):
    return lambda ctx: ctx.vault.change_passphrase("a brand new passphrase of words", reauth=demo_vault.unlock())


def test_a_new_passphrase_reloads_the_devices_not_the_facts(qtbot, client, window, demo_vault, monkeypatch):
    devices = wait_view(qtbot, window, "devices")
    loads = Loads(window, monkeypatch)
    changes = mutate(qtbot, client, change_passphrase(demo_vault))
    assert changes.credentials and changes.batches and not changes.keys and not changes.reloaded
    assert loads.counts == {"devices": 1}  # the devices view lists the credentials too
    assert devices.model.rowCount() > 0
    assert loads.stale() == NOT_SHOWN_YET | CONTROL_BATCHES


def test_a_new_passphrase_leaves_the_timeline_the_devices_and_the_grants_alone(qtbot, client, window, demo_vault):
    changes = mutate(qtbot, client, change_passphrase(demo_vault))
    assert changes.credentials and changes.batches
    assert not changes.timeline and not changes.records and not changes.grants and not changes.devices


def test_a_policy_change_reloads_the_health_view_not_the_grants(qtbot, client, window, monkeypatch):
    wait_view(qtbot, window, "grants")
    loads = Loads(window, monkeypatch)
    changes = mutate(qtbot, client, lambda ctx: ctx.vault.set_policy(erasure=False, reason="legal hold"))
    assert changes.policy and changes.roster and not changes.grants and not changes.devices
    assert sum(loads.counts.values()) == 0  # the grants view shown is not reloaded
    assert loads.stale() == NOT_SHOWN_YET | CONTROL_BATCHES
    health = wait_view(qtbot, window, "health")
    assert loads.counts == {"health": 1}
    assert any("disabled by policy" in label.text() for label in health.area.widget().findChildren(type(health.subtitle)))


# ------------------------------------------------------------------------------------------ reloaded


def test_a_result_without_changes_reloads_every_view(qtbot, client, window, monkeypatch):
    loads = Loads(window, monkeypatch)
    changes = mutate(qtbot, client, lambda ctx: "a report that names nothing")
    assert changes == Changes(reloaded=True)
    assert loads.counts == {"timeline": 1}
    assert loads.stale() == ALL - {"timeline"}


def test_nothing_new_on_refresh_reloads_nothing(qtbot, client, window, monkeypatch):
    loads = Loads(window, monkeypatch)
    with qtbot.waitSignal(client.vault_changed, timeout=20_000) as blocker:
        window.refresh()
    wait_idle(qtbot, client)
    assert blocker.args[0].empty
    assert sum(loads.counts.values()) == 0
    assert loads.stale() == NOT_SHOWN_YET


# ------------------------------------------------------------------------------------------ the jobs


def test_the_desktops_jobs_broadcast_the_changes_the_vault_returned(qtbot, client, window):
    def broadcast(act) -> Changes:
        with qtbot.waitSignal(client.vault_changed, timeout=30_000) as blocker:
            act()
        wait_idle(qtbot, client)
        return blocker.args[0]

    inbox = wait_view(qtbot, window, "inbox")
    free = call(qtbot, client, lambda ctx: {p.id for p in ctx.vault.inbox()
                                             if ctx.vault.fact(p.key, p.compartment).current is None})
    inbox.table.selectRow(next(r for r in range(inbox.model.rowCount()) if inbox.model.record(r).id in free))
    assert len(inbox.selected_ids()) == 1
    confirmed = broadcast(lambda: qtbot.mouseClick(inbox.confirm_button, Qt.MouseButton.LeftButton))
    assert confirmed.keys and confirmed.records and not confirmed.reloaded

    conflicts = wait_view(qtbot, window, "conflicts")
    wait_idle(qtbot, client)
    fact = conflicts._fact
    resolved = broadcast(lambda: conflicts.resolve(fact, value="Braga"))
    assert (fact.compartment, fact.key) in resolved.keys and not resolved.reloaded
    qtbot.waitUntil(lambda: "Braga" in conflicts.result.text(), timeout=10_000)

    timeline = wait_view(qtbot, window, "timeline")
    rid = timeline.detail.record.id
    forgotten = broadcast(timeline.detail.forget_button.click)
    assert forgotten.records and not forgotten.reloaded and not forgotten.roster
    assert call(qtbot, client, lambda ctx: ctx.vault.record(rid)).hidden


def test_accepting_a_rollback_broadcasts_what_the_vault_returned_and_redraws_the_health_view(
        qtbot, client, make_window, open_demo, demo_vault, monkeypatch, tmp_path):
    import shutil

    import camillo.log
    from PySide6.QtWidgets import QLabel, QPushButton

    monkeypatch.setattr(camillo.log, "SYNC_GRACE_SECONDS", -1)  # a batch that vanished is a rollback at once
    before = str(tmp_path / "before")
    shutil.copytree(demo_vault.path, before)
    open_demo()
    call(qtbot, client, lambda ctx: ctx.vault.append([MESSAGE]))  # this device sees a batch ...
    with qtbot.waitSignal(client.vault_locked, timeout=10_000):
        client.lock()
    shutil.rmtree(demo_vault.path)
    shutil.copytree(before, demo_vault.path)  # ... which the storage then rolls back
    window = make_window()
    with qtbot.waitSignal(window.view_ready, timeout=20_000, check_params_cb=lambda name: name == "timeline"):
        window.vault_opened(open_demo())
    assert window.status_sync.text() == "\u25cf rollback alert"
    health = wait_view(qtbot, window, "health")

    def titles() -> list[str]:
        return [label.text() for label in health.area.widget().findChildren(QLabel)]

    assert "Sync: rollback alert" in titles()
    (accept,) = [b for b in health.area.widget().findChildren(QPushButton) if b.text() == "Accept the vault as it is"]
    broadcasts: list[Changes] = []
    client.vault_changed.connect(broadcasts.append)
    with qtbot.waitSignal(health.loaded, timeout=20_000):
        qtbot.mouseClick(accept, Qt.MouseButton.LeftButton)
    wait_idle(qtbot, client)
    # What the vault returned (it names nothing: what this device remembers is no part of the vault),
    # then the refresh's; the health view redrew its sync card all the same, and the status bar.
    assert broadcasts[0].empty and "remembered" in broadcasts[0].note
    assert "Sync: up to date" in titles()
    assert window.status_sync.text() == "\u25cf up to date"


# ------------------------------------------------------------------------------------------ declared


EXPECTED = [  # (the Changes, the views it concerns)
    (Changes(), set()),
    (Changes(records=(b"r",), batches=(b"b",), compartments=frozenset({"personal"})),
     {"timeline", "search", "activity", "health"}),
    (Changes(keys=frozenset({("personal", "user/x")})), {"facts", "inbox", "conflicts", "health"}),
    (Changes(batches=(b"b",)), {"activity", "health"}),
    (Changes(devices=True), {"devices", "health"}),
    (Changes(credentials=True), {"devices", "health"}),
    (Changes(grants=True), {"grants", "health"}),
    (Changes(policy=True), {"health"}),
    (Changes(files_removed=3), {"health"}),
    (Changes(reloaded=True), ALL),
]


@pytest.mark.parametrize(("changes", "concerned"), EXPECTED)
def test_what_each_view_depends_on(make_window, changes, concerned):
    window = make_window(show=False)
    assert set(window.pages) == ALL
    assert {name for name, page in window.pages.items() if page.relevant(changes)} == concerned


def test_a_view_may_only_depend_on_what_changes_name():
    from camillo_desktop.views.base import View

    with pytest.raises(TypeError, match="records_moved"):
        type("Broken", (View,), {"depends_on": ("records_moved",)})
