"""What every main-window view has, and the table the table views share.

:class:`View`: a name, a title, a load on demand and a reaction to Changes.  Each view declares in
``depends_on`` what it shows, by the names of :class:`camillo.Changes` (``records``, ``keys``,
``grants``, ``timeline`` ...): a Changes that names none of them leaves it alone, one that names
any of them (or says ``reloaded``) reloads it.  Views load lazily (the first time they are shown)
and defer refreshes while hidden (Electrum's ``maybe_defer_update``): a hidden view only marks itself
stale.  ``loaded`` is emitted when the view's data has arrived (the screenshot mode waits for it).
:class:`MovedFacts` tells a view showing one fact whether that fact moved since it was shown.

:class:`Table`: the app's table widget, its columns sized and badged as the model's column enum
(:class:`camillo_desktop.models.Column`) says.  :class:`TableView`: a view around one such table,
whose rows are fetched on the worker at each load (activity, grants, devices; the record views of
:mod:`camillo_desktop.views.timeline` build on it too).  GUI thread only, but for
:meth:`TableView.fetch`, which runs on the vault worker.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from camillo import Changes
from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QTableView,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from ..models import Column, ColumnModel, Sizing, TableModel
from ..widgets import BadgeDelegate

SelectionMode = QAbstractItemView.SelectionMode
RESIZE_MODES = {Sizing.INTERACTIVE: QHeaderView.ResizeMode.Interactive, Sizing.FIXED: QHeaderView.ResizeMode.Fixed,
                Sizing.CONTENTS: QHeaderView.ResizeMode.ResizeToContents,
                Sizing.STRETCH: QHeaderView.ResizeMode.Stretch}


# What a view may depend on: the fields of Changes and its derived properties (timeline, facts, roster).
CHANGE_NAMES = frozenset({f.name for f in dataclasses.fields(Changes) if f.name != "note"}
                         | {name for name, value in vars(Changes).items() if isinstance(value, property)})


class View(QWidget):
    name = "view"
    title = "View"
    icon = "timeline"
    shortcut = ""
    # What the view shows, by the names of Changes: it reloads when a Changes names one of them, and
    # on ``reloaded`` (everything was read again), whatever it declares.
    depends_on: ClassVar[tuple[str, ...]] = ()
    loaded = Signal()
    status_message = Signal(str)
    navigate = Signal(str, object)  # view name, argument (e.g. a record id to select)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        unknown = sorted(set(cls.depends_on) - CHANGE_NAMES)
        if unknown:
            raise TypeError(f"{cls.__name__}.depends_on names what Changes does not have: {unknown}")

    def __init__(self, client: Any, window: Any) -> None:
        super().__init__()
        self.client = client
        self.window_ = window
        self._stale = True
        self.root = QVBoxLayout(self)
        self.root.setContentsMargins(16, 12, 16, 12)
        header = QHBoxLayout()
        self.title_label = QLabel(self.title)
        self.title_label.setObjectName("ViewTitle")
        header.addWidget(self.title_label)
        header.addStretch(1)
        self.header = header
        self.root.addLayout(header)
        self.subtitle = QLabel("")
        self.subtitle.setObjectName("Muted")
        self.subtitle.setWordWrap(True)
        self.root.addWidget(self.subtitle)

    def activate(self, argument: Any = None) -> None:
        """Shown by the user: load if stale."""
        if self._stale:
            self._stale = False
            self.load()
        if argument is not None:
            self.show_argument(argument)

    def show_argument(self, argument: Any) -> None:
        pass

    def load(self) -> None:
        self.loaded.emit()

    def relevant(self, changes: Changes) -> bool:
        """Does ``changes`` name something this view shows?"""
        return changes.reloaded or any(getattr(changes, name) for name in self.depends_on)

    def on_changes(self, changes: Changes) -> None:
        """Reload if ``changes`` concerns this view: now if it is shown, when next shown if not."""
        if not self.relevant(changes):
            return
        if self.isVisible():
            self.load()
        else:
            self._stale = True

    def clear(self) -> None:
        """The vault was locked: forget what is shown."""
        self._stale = True


class MovedFacts:
    """The facts (compartment name, key) that moved since a view last showed its facts, gathered from
    the Changes it was given: a view showing one fact redraws it only when that fact moved."""

    def __init__(self) -> None:
        self._keys: set[tuple[str, str]] | None = None  # None: any fact may have moved

    def add(self, changes: Changes) -> None:
        if changes.reloaded or self._keys is None:
            self._keys = None
        else:
            self._keys |= changes.keys

    def __contains__(self, fact: tuple[str, str]) -> bool:
        return self._keys is None or fact in self._keys

    def shown(self) -> None:
        """The view shows the facts as they are now."""
        self._keys = set()

    def forget(self) -> None:
        """The view shows nothing (it was cleared): anything counts as moved."""
        self._keys = None


# ------------------------------------------------------------------------------------------ tables


def apply_columns(view: QTableView | QTreeView, columns: type[Column]) -> None:
    """Size ``view``'s columns and install the badge painter as each column's spec says.  A
    stretching last column stretches as the header's last section (so the others stay draggable)."""
    header = view.horizontalHeader() if isinstance(view, QTableView) else view.header()
    last = len(columns) - 1
    header.setStretchLastSection(columns(last).spec.sizing is Sizing.STRETCH)
    for col in columns:
        spec = col.spec
        if spec.badge is not None:
            view.setItemDelegateForColumn(col, BadgeDelegate(view))
        stretch_as_last = spec.sizing is Sizing.STRETCH and col == last
        header.setSectionResizeMode(col, QHeaderView.ResizeMode.Interactive if stretch_as_last
                                    else RESIZE_MODES[spec.sizing])
        if spec.width is not None:
            view.setColumnWidth(col, spec.width)


class Table(QTableView):
    """A table of a :class:`~camillo_desktop.models.ColumnModel`: whole rows selected, no row
    numbers, nothing edited in place, columns as the model's column enum says.  ``dense``: a long
    list (no word wrap, 26 px rows)."""

    def __init__(self, model: ColumnModel, *, name: str = "", selection: SelectionMode = SelectionMode.SingleSelection,
                 grid: bool = True, dense: bool = False, alternating: bool = True) -> None:
        super().__init__()
        self.setModel(model)
        self.columns = model.columns
        self.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.setSelectionMode(selection)
        self.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.setAlternatingRowColors(alternating)
        self.setShowGrid(grid)
        self.verticalHeader().hide()
        self.setTabKeyNavigation(False)  # Tab leaves the table (for the detail pane's buttons)
        if dense:
            self.setWordWrap(False)
            self.verticalHeader().setDefaultSectionSize(26)
        if name:
            self.setAccessibleName(name)
        apply_columns(self, self.columns)

    def fit(self) -> None:
        """New rows arrived: the columns without a width take their contents' width (a stretching
        column then takes what is left)."""
        if not any(c.spec.sizing is Sizing.INTERACTIVE and c.spec.width is None for c in self.columns):
            return
        self.resizeColumnsToContents()
        header = self.horizontalHeader()
        for col in self.columns:
            if col.spec.sizing is Sizing.STRETCH and not header.stretchLastSection():
                header.setSectionResizeMode(col, QHeaderView.ResizeMode.Stretch)


class TableView(View):
    """A view whose body is one :class:`Table` of ``columns``.  Each load runs :meth:`fetch` on the
    worker and gives what it returned to :meth:`show_rows` on the GUI thread, then reports
    ``loaded``.  ``self.model`` holds the rows; :meth:`selected` is the current one."""

    columns: ClassVar[type[Column]]
    selection: ClassVar[SelectionMode] = SelectionMode.SingleSelection
    grid: ClassVar[bool] = True
    dense: ClassVar[bool] = False
    table_name: ClassVar[str] = ""  # the table's accessible name (default: the view's name)

    def __init__(self, client: Any, window: Any) -> None:
        super().__init__(client, window)
        self.model = self.make_model()
        self.table = Table(self.model, name=self.table_name or self.name, selection=self.selection, grid=self.grid,
                           dense=self.dense)
        self.root.addWidget(self.body(), 1)

    def make_model(self) -> ColumnModel:
        return TableModel(self.columns, self, foreground=self.foreground)

    def body(self) -> QWidget:
        """The widget under the title that holds the table (the table itself, by default)."""
        return self.table

    def foreground(self, row: Any) -> Any:
        """The colour of a row's text (dimmed, red), or None."""
        return None

    @staticmethod
    def fetch(vault: Any) -> Any:
        """On the vault worker: read the rows (it gets the vault, never the view)."""
        raise NotImplementedError

    def load(self) -> None:
        fetch = self.fetch
        self.client.submit(lambda ctx: fetch(ctx.vault), self._fetched, self.window_.show_error, context=self,
                           label=f"loading {self.name}")

    def _fetched(self, result: Any) -> None:
        self.show_rows(result)
        self.loaded.emit()

    def show_rows(self, rows: Any) -> None:
        """What :meth:`fetch` returned arrived: show it (subclasses add titles and buttons)."""
        self.model.set_rows(rows)
        self.table.fit()

    def selected(self) -> Any:
        index = self.table.currentIndex()
        return self.model.row(index.row()) if index.isValid() else None

    def clear(self) -> None:
        super().clear()
        self.model.set_rows([])
