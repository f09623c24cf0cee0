"""The timeline: every conversation, message and other record, newest first (a toggle turns it).

A lazy table: in time order the first page is read up front, then the rows are counted, and each
page the person scrolls to is read on the worker from the vault's time index (``Vault.timeline``),
so a million records show their first rows as fast as a hundred; sorted by another column (the sort
runs on the worker, ``Vault.timeline_ids(order=...)``) the ids are loaded and rows decoded a page at
a time.  It has filters by compartment and for forgotten records (marked, with Restore), a "go to
date" control and Ctrl+End and Ctrl+Home that reach the real ends (by their row in the time index,
not the ends of the rows loaded so far), and the detail pane of the selected record ("Open in its conversation", or a double-click).  The search
view reuses the record table and the detail pane.  GUI thread only.
"""

from __future__ import annotations

import time
from typing import Any

from PySide6.QtCore import QDate, QEvent, QItemSelectionModel, QModelIndex, QObject, Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDateEdit,
    QLabel,
    QPushButton,
    QSplitter,
    QToolButton,
    QWidget,
)

from ..guard import qt_virtual
from ..models import PAGE, RECORD_ORDER, RecordColumn, RecordTableModel
from ..text import safe_text
from .base import TableView
from .detail import DetailPane


class RecordListView(TableView):
    """A record table with a detail pane; subclasses decide which ids it shows."""

    columns = RecordColumn
    grid = False
    dense = True
    table_name = "records"

    def __init__(self, client: Any, window: Any) -> None:
        super().__init__(client, window)
        self.table.selectionModel().currentRowChanged.connect(self._row_changed)
        self.model.rows_arrived.connect(self._refresh_detail)
        self.table.doubleClicked.connect(self._activated)
        self.table.installEventFilter(self)
        self._select_after_load: bytes | None = None

    def _activated(self, index: QModelIndex) -> None:
        """Double-click: a message opens in its conversation; a fact in Facts."""
        v = self.model.record(index.row())
        if v is None:
            return
        if v.conversation and v.type != "conversation":
            self.window_.open_in_thread(v.id)
        elif v.key:
            self.navigate.emit("facts", v.key)

    @qt_virtual(False)
    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        """Ctrl+End and Ctrl+Home reach the real ends, not the ends of the rows loaded so far."""
        if obj is self.table and event.type() == QEvent.Type.KeyPress and \
                event.modifiers() & Qt.KeyboardModifier.ControlModifier and event.key() in (Qt.Key.Key_End,
                                                                                          Qt.Key.Key_Home):
            self.go_to_row(self.model.total() - 1 if event.key() == Qt.Key.Key_End else 0)
            return True
        return False

    def go_to_row(self, row: int) -> None:
        if not 0 <= row < self.model.total():
            return
        self.model.reveal(row)
        idx = self.model.index(row, 0)
        self.table.selectionModel().setCurrentIndex(
            idx, QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows)
        self.table.scrollTo(idx, QAbstractItemView.ScrollHint.PositionAtCenter)

    def make_model(self) -> RecordTableModel:
        return RecordTableModel(self.client, self)

    def body(self) -> QWidget:
        self.detail = DetailPane(self.client)
        self.detail.source_requested.connect(lambda rid: self.window_.show_record(rid))
        self.detail.copy_requested.connect(lambda text: self.window_.copy_text(text))
        self.detail.forget_requested.connect(self._forget)
        self.detail.erase_requested.connect(lambda rid: self.window_.erase_record(rid))
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.table)
        self.splitter.addWidget(self.detail)
        self.splitter.setStretchFactor(0, 3)
        self.splitter.setStretchFactor(1, 1)
        self.splitter.setSizes([860, 300])
        return self.splitter

    def _row_changed(self, current: QModelIndex, _previous: QModelIndex) -> None:
        self.detail.show_record(self.model.record(current.row()) if current.isValid() else None)

    def _refresh_detail(self) -> None:
        idx = self.table.currentIndex()
        if not idx.isValid() and self.model.rowCount() and self.model.record(0) is not None:
            self.table.selectRow(0)  # show something in the detail pane from the start
            idx = self.table.currentIndex()
        if idx.isValid() and self.detail.record is None:
            self.detail.show_record(self.model.record(idx.row()))
        if self.model.rowCount() and self.model.record(0) is not None:
            self.loaded.emit()

    def _set_ids(self, ids: list[bytes]) -> None:
        current = self.detail.record.id if self.detail.record else None
        self.model.set_ids(ids)
        self._after_load(current)

    def _after_load(self, current: bytes | None) -> None:
        target = self._select_after_load or current
        self._select_after_load = None
        if target is not None:
            self.select_record(target)
        if not self.model.total():
            self.loaded.emit()

    def _forget(self, rid: bytes) -> None:
        def done(_changes) -> None:
            self.status_message.emit("Forgotten: hidden from your agents (it stays in the encrypted history).")

        self.client.mutate(lambda ctx: ctx.vault.forget(record=rid), done, self.window_.show_error, context=self)

    def select_record(self, rid: bytes) -> bool:
        row = self.model.row_of(rid)
        if row < 0:
            return False
        if hasattr(self.model, "reveal"):
            self.model.reveal(row)
        idx = self.model.index(row, 0)
        self.table.selectionModel().setCurrentIndex(
            idx, QItemSelectionModel.SelectionFlag.ClearAndSelect | QItemSelectionModel.SelectionFlag.Rows)
        self.table.scrollTo(idx, QAbstractItemView.ScrollHint.PositionAtCenter)
        return True

    def clear(self) -> None:
        super().clear()
        self.detail.show_record(None)


class TimelineView(RecordListView):
    name = "timeline"
    title = "Timeline"
    icon = "timeline"
    shortcut = "Ctrl+2"
    depends_on = ("timeline",)  # records came or went

    def __init__(self, client: Any, window: Any) -> None:
        super().__init__(client, window)
        self.order = "time"
        self.descending = True  # newest first
        self.compartment = QComboBox()
        self.compartment.setAccessibleName("compartment filter")
        self.compartment.addItem("All compartments", None)
        self.show_hidden = QCheckBox("Show forgotten")
        self.show_hidden.setToolTip("Include records hidden by \u201cforget\u201d: marked, with Restore (they stay in "
                                    "the history until erased)")
        self.newest = QToolButton()
        self.newest.setCheckable(True)
        self.newest.setChecked(True)
        self.newest.setText("Newest first")
        self.newest.setAccessibleName("order: newest first or oldest first")
        self.newest.toggled.connect(self._newest_toggled)
        self.date = QDateEdit(QDate.currentDate())
        self.date.setCalendarPopup(True)
        self.date.setDisplayFormat("yyyy-MM-dd")
        self.date.setAccessibleName("date to go to")
        self.go = QPushButton("Go to date")
        self.go.setToolTip("Show the records of this day (in time order)")
        self.go.clicked.connect(self.go_to_date)
        self.count = QLabel("")
        self.count.setObjectName("Muted")
        self.header.insertWidget(1, self.count)
        for w in (self.newest, self.date, self.go, self.compartment, self.show_hidden):
            self.header.addWidget(w)
        self.compartment.currentIndexChanged.connect(lambda _i: self.load())
        self.show_hidden.toggled.connect(lambda _on: self.load())
        header = self.table.horizontalHeader()
        header.setSectionsClickable(True)
        header.setSortIndicatorShown(True)
        header.setSortIndicator(RecordColumn.TIME, Qt.SortOrder.DescendingOrder)
        header.sortIndicatorChanged.connect(self._sort_changed)
        self.subtitle.setText("Every conversation, message and record. Click a column to sort by it; double-click a "
                              "message to read it in its conversation. Badges show authority: only \u201cuser\u201d "
                              "binds; everything else is information.")

    def set_compartments(self, names: list[str]) -> None:
        current = self.compartment.currentData()
        self.compartment.blockSignals(True)
        self.compartment.clear()
        self.compartment.addItem("All compartments", None)
        for n in names:
            self.compartment.addItem(safe_text(n, 60, single_line=True), n)
        idx = self.compartment.findData(current)
        self.compartment.setCurrentIndex(max(0, idx))
        self.compartment.blockSignals(False)

    def _sort_changed(self, column: int, order: Qt.SortOrder) -> None:
        self.order = RECORD_ORDER[RecordColumn(column)]
        self.descending = order == Qt.SortOrder.DescendingOrder
        self.newest.blockSignals(True)
        self.newest.setChecked(self.order == "time" and self.descending)
        self.newest.setText("Newest first" if self.order != "time" or self.descending else "Oldest first")
        self.newest.blockSignals(False)
        self.go.setEnabled(self.order == "time")
        self.date.setEnabled(self.order == "time")
        self.load()

    def _newest_toggled(self, on: bool) -> None:
        self.table.horizontalHeader().setSortIndicator(
            RecordColumn.TIME, Qt.SortOrder.DescendingOrder if on else Qt.SortOrder.AscendingOrder)

    def load(self) -> None:
        name = self.compartment.currentData()
        hidden = self.show_hidden.isChecked()
        order, descending = self.order, self.descending
        current = self.detail.record.id if self.detail.record else None

        def filters_of(v: Any) -> dict[str, Any]:
            return filters_for(v, name, hidden)

        def show_count(n: int) -> None:
            self.count.setText(f"{n:,} record{'' if n == 1 else 's'}")

        if order == "time":  # the first page, then the count; the rest a page at a time, from the time index
            def fetch(v: Any, offset: int, limit: int) -> list[Any]:
                return v.timeline(offset, limit, descending=descending, **filters_of(v))

            def paged(first: list[Any]) -> None:
                self.model.set_pages(len(first), fetch, first)
                if len(first) < PAGE:
                    show_count(len(first))
                else:  # counted next, in the index (a million records: a third of a second)
                    self.count.setText(f"{len(first):,}+ records")
                    self.client.submit(lambda ctx: ctx.vault.timeline_count(**filters_of(ctx.vault)), counted,
                                       self.window_.show_error, context=self, label="counting the timeline")
                self._after_load(current)
                self._refresh_detail()

            def counted(n: int) -> None:
                if self.model.fetcher() is fetch:  # still the list it counts
                    self.model.set_total(n)
                    show_count(n)

            self.client.submit(lambda ctx: fetch(ctx.vault, 0, PAGE), paged, self.window_.show_error, context=self,
                               label="loading the timeline")
            return

        def job(ctx):
            return ctx.vault.timeline_ids(order=order, descending=descending, **filters_of(ctx.vault))

        def done(ids: list[bytes]) -> None:
            show_count(len(ids))
            self._set_ids(ids)

        self.client.submit(job, done, self.window_.show_error, context=self, label="loading the timeline")

    def select_record(self, rid: bytes) -> bool:
        """Select a record; in time order one not read yet is found by its row in the time index (on
        the worker, then selected)."""
        if super().select_record(rid):
            return True
        if not self.model.paged:
            return False
        name, hidden, descending = self.compartment.currentData(), self.show_hidden.isChecked(), self.descending

        def job(ctx: Any) -> int | None:
            return ctx.vault.timeline_row(rid, descending=descending, **filters_for(ctx.vault, name, hidden))

        def done(row: int | None) -> None:
            if row is not None:
                self.go_to_row(row)

        self.client.submit(job, done, self.window_.show_error, context=self, label="finding a record")
        return True

    def go_to_date(self) -> None:
        """The first record of the chosen day (newest first: its latest): its row is counted in the
        vault's time index on the worker (no record read, whatever the vault's size)."""
        if self.order != "time" or not self.model.total():
            return
        d = self.date.date()
        start = int(time.mktime((d.year(), d.month(), d.day(), 0, 0, 0, 0, 0, -1)))  # local midnight
        name, hidden, descending = self.compartment.currentData(), self.show_hidden.isChecked(), self.descending
        total = self.model.total()

        def job(ctx: Any) -> int | None:
            return ctx.vault.timeline_row(day=start, descending=descending, **filters_for(ctx.vault, name, hidden))

        def done(row: int | None) -> None:
            if row is None or row >= total:
                self.status_message.emit("No record on or " + ("before" if descending else "after") + " that day.")
                row = total - 1
            self.go_to_row(row)

        self.client.submit(job, done, self.window_.show_error, context=self, label="finding a date")

    def show_argument(self, argument: Any) -> None:
        if isinstance(argument, bytes):
            if not self.select_record(argument):
                self._select_after_load = argument


def filters_for(vault: Any, compartment: str | None, include_hidden: bool) -> dict[str, Any]:
    """On the worker: the timeline's filters for ``Vault.timeline`` and its kin (the compartment
    chosen, by name, and whether forgotten records are shown)."""
    return {"include_hidden": include_hidden, **({"compartments": [vault.compartment_id(compartment)]}
                                                   if compartment else {})}
