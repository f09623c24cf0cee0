"""The Qt models: they pass Qt's model tester, and the record table decodes rows lazily, a page at a
time, on the worker."""

from __future__ import annotations

import pytest
from camillo import ActivityRow, GrantInfo, NewRecord, Unlock, Vault
from PySide6.QtCore import QModelIndex, Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QTableView

from .helpers import call, no_guard, open_vault, wait_idle

PASSPHRASE = "correct horse battery staple"
DISPLAY = Qt.ItemDataRole.DisplayRole


@pytest.fixture(scope="module")
def big_template(tmp_path_factory) -> str:
    """A vault of 1,200 messages (built once for the module)."""
    path = str(tmp_path_factory.mktemp("big") / "vault")
    with no_guard(), pytest.MonkeyPatch.context() as mp:
        mp.setenv("CAMILLO_INSECURE_TEST_KDF", "1")
        mp.setenv("CAMILLO_KEYCHAIN", "none")
        mp.setenv("CAMILLO_HOME", path + ".home")
        vault, _phrase = Vault.create(path, PASSPHRASE)
        with vault:
            vault.append([NewRecord(type="message", conversation=f"c{i // 10}", role="user",
                                    text=f"message number {i}", ts=1_700_000_000 + i) for i in range(1200)])
    return path


@pytest.fixture
def big_vault(qtbot, client, big_template, tmp_path) -> list[bytes]:
    """Open a copy of the 1,200-message vault on the worker; return its timeline ids."""
    import shutil

    path = str(tmp_path / "vault")
    shutil.copytree(big_template, path)
    open_vault(qtbot, client, path, Unlock.passphrase(PASSPHRASE), home=big_template + ".home")
    return call(qtbot, client, lambda ctx: ctx.vault.timeline_ids())


class SubmitSpy:
    """Counts the decode jobs the model submits (and which ids each asked for)."""

    def __init__(self, client, monkeypatch) -> None:
        self.pages: list[int] = []
        self.client = client
        original = client.submit

        def submit(fn, on_success=None, on_error=None, **kw):
            if kw.get("label") == "decoding records":
                self.pages.append(len(self.pages))
            return original(fn, on_success, on_error, **kw)

        monkeypatch.setattr(client, "submit", submit)

    @property
    def count(self) -> int:
        return len(self.pages)


def decoded_rows(model) -> set[int]:
    return set(model._cache)


def test_record_table_model_empty_and_with_demo_ids(qtbot, qtmodeltester, client, open_demo):
    from camillo_desktop.models import RecordColumn, RecordTableModel, Role
    from camillo_desktop.widgets import BADGE_ROLE

    open_demo()
    ids = call(qtbot, client, lambda ctx: ctx.vault.timeline_ids())
    model = RecordTableModel(client)
    qtmodeltester.check(model)
    assert model.rowCount() == 0 and not model.canFetchMore(QModelIndex())

    model.set_ids(ids)
    # Before any row arrived: placeholders only.
    assert model.rowCount() == len(ids) == model.total()
    assert model.record(0) is None
    assert model.data(model.index(0, RecordColumn.TEXT), DISPLAY) == "\u2026"
    assert model.data(model.index(0, RecordColumn.AUTHORITY), BADGE_ROLE) is None
    assert model.data(model.index(0, 0), Role.RECORD_ID) == ids[0]
    qtmodeltester.check(model)

    with qtbot.waitSignal(model.rows_arrived, timeout=10_000):
        pass
    wait_idle(qtbot, client)
    qtmodeltester.check(model)
    assert all(model.record(r) is not None for r in range(model.rowCount()))
    labels = {model.data(model.index(r, RecordColumn.AUTHORITY), BADGE_ROLE) for r in range(model.rowCount())}
    assert {"user", "inferred"} <= labels
    assert model.data(model.index(0, 0), Role.RECORD).id == ids[0]
    assert model.headerData(RecordColumn.WRITER, Qt.Orientation.Horizontal) == "Written by"
    qtmodeltester.check(model, force_py=True)


def test_record_table_model_with_paging(qtbot, qtmodeltester, client, big_vault):
    from camillo_desktop.models import PAGE, RecordTableModel

    model = RecordTableModel(client)
    model.set_ids(big_vault)
    assert model.rowCount() == PAGE
    qtmodeltester.check(model)  # placeholders; Qt's tester calls fetchMore itself
    assert PAGE < model.rowCount() <= len(big_vault)
    wait_idle(qtbot, client)  # the rows the tester asked for have been decoded meanwhile
    assert model.record(0) is not None
    qtmodeltester.check(model)

    other = RecordTableModel(client)
    other.set_ids(big_vault)
    while other.canFetchMore(QModelIndex()):
        other.fetchMore(QModelIndex())
    assert other.rowCount() == len(big_vault) >= 1200
    qtmodeltester.check(other)
    wait_idle(qtbot, client)
    qtmodeltester.check(other, force_py=True)


def test_fetch_more_with_the_model_tester_attached_never_shows_more_rows_than_ids(qtbot, qtmodeltester, client,
                                                                               big_vault):
    from camillo_desktop.models import RecordTableModel, Role

    model = RecordTableModel(client)
    model.set_ids(big_vault)
    model.fetchMore(QModelIndex())
    qtmodeltester.check(model)  # leaves Qt's tester attached, listening to the model's signals
    while model.canFetchMore(QModelIndex()):
        model.fetchMore(QModelIndex())
    assert model.rowCount() == len(big_vault)
    last = model.rowCount() - 1
    assert model.data(model.index(last, 0), Role.RECORD_ID) == big_vault[last]


def test_facts_model(qtbot, qtmodeltester, client, open_demo):
    from camillo_desktop.models import FactColumn, FactsModel, Role
    from camillo_desktop.widgets import BADGE_COLOR_ROLE, BADGE_ROLE

    open_demo()
    facts = call(qtbot, client, lambda ctx: ctx.vault.facts())
    model = FactsModel()
    qtmodeltester.check(model)
    model.set_facts(facts)
    qtmodeltester.check(model)
    qtmodeltester.check(model, force_py=True)
    subjects = [model.data(model.index(r, 0), DISPLAY) for r in range(model.rowCount())]
    assert subjects == ["user  (9)", "work  (1)"]
    coffee = model.find("user/favorite_coffee")
    assert coffee.isValid()
    assert model.data(coffee.siblingAtColumn(FactColumn.STATUS), DISPLAY) == "conflict"
    assert model.data(coffee.siblingAtColumn(FactColumn.STATUS), BADGE_ROLE) == "conflict"
    assert model.data(coffee.siblingAtColumn(FactColumn.STATUS), BADGE_COLOR_ROLE)
    assert model.data(coffee, Role.FACT).key == "user/favorite_coffee"
    meeting = model.find("user/meeting_time")
    assert model.data(meeting.siblingAtColumn(FactColumn.STATUS), DISPLAY) == "pending"
    assert model.fact(model.index(0, 0)) is None  # a subject row is not a fact
    # read a page at a time: the subjects with their counts, some facts of some (the others not read)
    user = [f for f in facts if f.key.startswith("user/")]
    model.set_subjects([("user", len(user)), ("work", 1)], {"user": user[:3]})
    qtmodeltester.check(model)
    assert [model.data(model.index(r, 0), DISPLAY) for r in range(2)] == ["user  (9)", "work  (1)"]
    assert model.rowCount(model.index(0, 0)) == 3 and model.rowCount(model.index(1, 0)) == 0
    assert model.hasChildren(model.index(1, 0)) and (model.read(), model.total()) == (3, 10)
    assert model.find(user[2].key).isValid() and not model.find(user[5].key).isValid()
    model.set_facts([])
    qtmodeltester.check(model)


def test_history_model(qtbot, qtmodeltester, client, open_demo):
    from camillo_desktop.models import HistoryModel

    open_demo()
    fact = call(qtbot, client, lambda ctx: ctx.vault.fact("work/project"))
    model = HistoryModel()
    qtmodeltester.check(model)
    model.set_records(list(fact.history), fact.current.id)
    qtmodeltester.check(model)
    qtmodeltester.check(model, force_py=True)
    assert model.rowCount() == 2
    values = [model.data(model.index(r, 2), DISPLAY) for r in range(2)]
    assert values == ["Apollo", "Artemis"]
    assert model.data(model.index(1, 0), DISPLAY).startswith("\u25b6 ")  # marks the current value
    assert not model.data(model.index(0, 0), DISPLAY).startswith("\u25b6 ")
    assert model.record(5) is None


def test_lazy_paging_decodes_only_requested_pages(qtbot, client, big_vault, monkeypatch):
    from camillo_desktop.models import PAGE, RecordColumn, RecordTableModel

    spy = SubmitSpy(client, monkeypatch)
    model = RecordTableModel(client)
    model.set_ids(big_vault)
    total = len(big_vault)
    assert total >= 1200
    assert model.rowCount() == PAGE == 200
    assert model.canFetchMore(QModelIndex())
    assert spy.count == 0  # nothing decoded until a row is asked for

    assert model.data(model.index(5, RecordColumn.TEXT), DISPLAY) == "\u2026"
    assert model.data(model.index(150, RecordColumn.TEXT), DISPLAY) == "\u2026"
    assert spy.count == 1  # one job for the whole first page
    with qtbot.waitSignal(model.rows_arrived, timeout=10_000):
        pass
    assert decoded_rows(model) == set(range(PAGE))

    model.fetchMore(QModelIndex())
    assert model.rowCount() == 2 * PAGE
    assert spy.count == 1  # revealing rows does not decode them
    assert model.data(model.index(PAGE + 10, RecordColumn.TEXT), DISPLAY) == "\u2026"
    assert spy.count == 2
    with qtbot.waitSignal(model.rows_arrived, timeout=10_000):
        pass
    assert decoded_rows(model) == set(range(2 * PAGE))
    assert model.data(model.index(PAGE + 10, RecordColumn.TEXT), DISPLAY).startswith("user: message number")

    while model.canFetchMore(QModelIndex()):
        model.fetchMore(QModelIndex())
    assert model.rowCount() == total
    assert spy.count == 2
    last = total - 1
    model.data(model.index(last, RecordColumn.TEXT), DISPLAY)
    with qtbot.waitSignal(model.rows_arrived, timeout=10_000):
        pass
    assert spy.count == 3
    last_page = last // PAGE
    assert decoded_rows(model) == set(range(2 * PAGE)) | set(range(last_page * PAGE, total))


def test_a_view_only_decodes_what_it_shows(qtbot, client, big_vault, monkeypatch):
    from camillo_desktop.models import PAGE, RecordTableModel

    spy = SubmitSpy(client, monkeypatch)
    model = RecordTableModel(client)
    view = QTableView()
    qtbot.addWidget(view)
    view.resize(800, 600)
    view.setModel(model)
    model.set_ids(big_vault)
    view.show()
    qtbot.waitExposed(view)
    qtbot.waitUntil(lambda: model.record(0) is not None, timeout=10_000)
    wait_idle(qtbot, client)
    assert spy.count == 1
    assert model.rowCount() == PAGE
    view.scrollToBottom()  # the view asks for more rows when it reaches the end
    qtbot.waitUntil(lambda: model.rowCount() > PAGE, timeout=5000)
    qtbot.waitUntil(lambda: model.record(model.rowCount() - 1) is not None, timeout=10_000)
    wait_idle(qtbot, client)
    assert model.rowCount() < len(big_vault)
    assert spy.count <= 3
    assert len(decoded_rows(model)) < len(big_vault)


def test_set_ids_drops_pages_of_the_previous_list(qtbot, client, big_vault):
    from camillo_desktop.models import RecordColumn, RecordTableModel

    model = RecordTableModel(client)
    model.set_ids(big_vault)
    model.data(model.index(0, RecordColumn.TEXT), DISPLAY)  # request page 0 of the first list
    model.set_ids(list(reversed(big_vault)))  # replaced before it arrived
    model.data(model.index(0, RecordColumn.TEXT), DISPLAY)
    wait_idle(qtbot, client)
    assert model.record(0).id == big_vault[-1]


# --------------------------------------------------------------------------- the column-enum tables


def row_table_views():
    from camillo_desktop.views.activity import ActivityView
    from camillo_desktop.views.devices import DevicesView
    from camillo_desktop.views.grants import GrantsView

    return {"activity": ActivityView, "grants": GrantsView, "devices": DevicesView}


HEADERS = {
    "activity": ["Time", "Who", "Where", "What", "Verified", "Status"],
    "grants": ["Agent", "Access", "Highest authority", "Expires", "Last used", "Status"],
    "devices": ["Name", "Kind", "Enrolled", "Last seen", "Status"],
}


@pytest.mark.parametrize("name", ["activity", "grants", "devices"])
def test_the_row_tables_pass_the_model_tester(qtbot, qtmodeltester, client, open_demo, name):
    from camillo_desktop.models import Role, TableModel

    cls = row_table_views()[name]
    open_demo()
    fetched = call(qtbot, client, lambda ctx: cls.fetch(ctx.vault))
    rows = fetched[0] if name == "devices" else fetched  # (devices, keychain status)
    assert rows
    model = TableModel(cls.columns)
    qtmodeltester.check(model)
    model.set_rows(rows)
    qtmodeltester.check(model)
    qtmodeltester.check(model, force_py=True)
    assert [model.headerData(c, Qt.Orientation.Horizontal) for c in range(model.columnCount())] == HEADERS[name]
    assert model.rowCount() == len(rows)
    for r in range(model.rowCount()):
        assert model.row(r) is rows[r] and model.data(model.index(r, 0), Role.ROW) is rows[r]
        assert all(isinstance(model.data(model.index(r, c), DISPLAY), str) for c in range(model.columnCount()))
    assert model.row(len(rows)) is None
    model.set_rows([])
    qtmodeltester.check(model)


def test_a_column_enum_member_is_its_position_and_carries_its_spec():
    from camillo_desktop.models import FactColumn, HistoryColumn, RecordColumn, Sizing

    for columns in (RecordColumn, FactColumn, HistoryColumn, *(v.columns for v in row_table_views().values())):
        assert [int(c) for c in columns] == list(range(len(columns)))
        assert all(columns(int(c)) is c and c.spec.header for c in columns)
        assert sum(c.spec.sizing is Sizing.STRETCH for c in columns) == 1  # one column takes the rest
    assert RecordColumn.TEXT.spec.sizing is Sizing.STRETCH and RecordColumn.TIME.spec.width == 116


def test_a_table_sizes_and_badges_its_columns_as_the_specs_say(qtbot, client):
    from PySide6.QtWidgets import QHeaderView

    from camillo_desktop.models import HistoryModel, RecordColumn, RecordTableModel, TableModel
    from camillo_desktop.views.base import Table
    from camillo_desktop.widgets import BadgeDelegate

    records = Table(RecordTableModel(client), dense=True, grid=False)
    qtbot.addWidget(records)
    header = records.horizontalHeader()
    assert [records.columnWidth(c) for c in RecordColumn if c.spec.width] == [116, 84, 84, 104, 110]
    # The text, second, takes the spare width; the others stay draggable.
    assert not header.stretchLastSection()
    assert header.sectionResizeMode(RecordColumn.TEXT) == QHeaderView.ResizeMode.Stretch
    assert all(header.sectionResizeMode(c) == QHeaderView.ResizeMode.Interactive for c in RecordColumn
               if c is not RecordColumn.TEXT)
    assert isinstance(records.itemDelegateForColumn(RecordColumn.AUTHORITY), BadgeDelegate)
    assert not isinstance(records.itemDelegateForColumn(RecordColumn.TEXT), BadgeDelegate)
    assert not records.showGrid() and not records.wordWrap() and records.verticalHeader().isHidden()

    history = Table(HistoryModel())
    qtbot.addWidget(history)
    modes = [history.horizontalHeader().sectionResizeMode(c) for c in range(5)]
    assert modes == [QHeaderView.ResizeMode.ResizeToContents, QHeaderView.ResizeMode.ResizeToContents,
                     QHeaderView.ResizeMode.Stretch, QHeaderView.ResizeMode.Fixed,
                     QHeaderView.ResizeMode.ResizeToContents]
    assert history.columnWidth(3) == 92 and not history.horizontalHeader().stretchLastSection()

    grants = Table(TableModel(row_table_views()["grants"].columns))
    qtbot.addWidget(grants)
    assert grants.horizontalHeader().sectionResizeMode(1) == QHeaderView.ResizeMode.Stretch


def test_rejected_writes_are_red_revoked_grants_and_old_devices_dimmed(qapp):
    import types

    from PySide6.QtGui import QGuiApplication

    from camillo_desktop import theme
    from camillo_desktop.models import Role, TableModel
    from camillo_desktop.views.activity import ActivityView
    from camillo_desktop.views.devices import DevicesView
    from camillo_desktop.views.grants import GrantsView

    def activity(status: str) -> ActivityRow:
        return ActivityRow(batch=b"\1" * 32, ts=1, writer="w", writer_kind="agent", compartment="c", seq=1, records=2,
                           summary="", verified="signature", status=status)

    def grant(revoked: bool) -> GrantInfo:
        return GrantInfo(grant_id=b"\2" * 16, agent="a", writer_id=b"\3" * 32, scopes={"work": "read"},
                         max_class="inferred", expires=None, created=1, revoked=revoked)

    REJECTED = QColor(theme.current()["error"])
    assert ActivityView.foreground(None, activity("rejected: unknown writer")) == REJECTED
    assert ActivityView.foreground(None, activity("accepted")) is None
    dim = QGuiApplication.palette().placeholderText()
    assert GrantsView.foreground(None, grant(True)) == dim and GrantsView.foreground(None, grant(False)) is None
    old = types.SimpleNamespace(revoked=False, replaced=True)
    assert DevicesView.foreground(None, old) == dim
    model = TableModel(ActivityView.columns, foreground=lambda row: REJECTED)
    model.set_rows([activity("rejected")])
    assert model.data(model.index(0, 0), Qt.ItemDataRole.ForegroundRole) == REJECTED
    assert model.data(model.index(0, 3)) == "2 records"
    assert model.data(model.index(0, 0), Role.ROW).status == "rejected"
