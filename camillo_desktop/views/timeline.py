"""The timeline: conversations, their messages and every other record, newest last.

A lazy table of record ids (only ids are loaded up front; rows are decoded on the worker a page
at a time), filters by compartment and for hidden records, and the detail pane of the selected
record.  The search view reuses it with the ids of a search.  GUI thread only.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import QItemSelectionModel, QModelIndex, Qt
from PySide6.QtWidgets import QAbstractItemView, QCheckBox, QComboBox, QLabel, QSplitter, QWidget

from ..models import RecordColumn, RecordTableModel
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
        self._select_after_load: bytes | None = None

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
        self.splitter.setStretchFactor(1, 2)
        self.splitter.setSizes([800, 380])
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
        target = self._select_after_load or current
        self._select_after_load = None
        if target is not None:
            self.select_record(target)
        if not ids:
            self.loaded.emit()

    def _forget(self, rid: bytes) -> None:
        def done(_changes) -> None:
            self.status_message.emit("Forgotten: hidden from your agents (it stays in the encrypted history).")

        self.client.mutate(lambda ctx: ctx.vault.forget(record=rid), done, self.window_.show_error, context=self)

    def select_record(self, rid: bytes) -> bool:
        row = self.model.row_of(rid)
        if row < 0:
            return False
        while row >= self.model.rowCount() and self.model.canFetchMore(QModelIndex()):
            self.model.fetchMore(QModelIndex())
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
        self.compartment = QComboBox()
        self.compartment.setAccessibleName("compartment filter")
        self.compartment.addItem("All compartments", None)
        self.show_hidden = QCheckBox("Show forgotten")
        self.show_hidden.setToolTip("Include records hidden by 'forget' (they stay in the history until erased)")
        self.count = QLabel("")
        self.count.setObjectName("Muted")
        self.header.addWidget(self.count)
        self.header.addWidget(self.compartment)
        self.header.addWidget(self.show_hidden)
        self.compartment.currentIndexChanged.connect(lambda _i: self.load())
        self.show_hidden.toggled.connect(lambda _on: self.load())
        self.subtitle.setText("Every conversation, message and record, oldest first. Badges show authority: only "
                              "\u201cuser\u201d binds; everything else is information.")

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

    def load(self) -> None:
        name = self.compartment.currentData()
        hidden = self.show_hidden.isChecked()

        def job(ctx):
            v = ctx.vault
            filters: dict[str, Any] = {"include_hidden": hidden}
            if name:
                filters["compartments"] = [v.compartment_id(name)]
            return v.timeline_ids(**filters)

        def done(ids: list[bytes]) -> None:
            self.count.setText(f"{len(ids):,} records")
            self._set_ids(ids)

        self.client.submit(job, done, self.window_.show_error, context=self, label="loading the timeline")

    def show_argument(self, argument: Any) -> None:
        if isinstance(argument, bytes):
            if not self.select_record(argument):
                self._select_after_load = argument
