"""Activity: who (device or agent) wrote what, when, in which compartment, and how it was verified.

One row per batch, newest first, rejected batches included with the reason.  GUI thread only.
"""

from __future__ import annotations

from typing import Any

from camillo import Changes
from PySide6.QtGui import QColor, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QTableView

from ..models import fmt_time
from ..text import safe_text
from .base import View

COLUMNS = ("Time", "Who", "Compartment", "What", "Verified", "Status")


class ActivityView(View):
    name = "activity"
    title = "Activity"
    icon = "activity"
    shortcut = "Ctrl+7"

    def __init__(self, client: Any, window: Any) -> None:
        super().__init__(client, window)
        self.subtitle.setText("Every change is signed by the device or agent that made it. Rejected writes stay "
                              "visible here with the reason.")
        self.model = QStandardItemModel(0, len(COLUMNS), self)
        self.model.setHorizontalHeaderLabels(COLUMNS)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.verticalHeader().hide()
        self.table.setAlternatingRowColors(True)
        self.table.setAccessibleName("activity")
        self.root.addWidget(self.table, 1)

    def load(self) -> None:
        def done(rows: list[dict[str, Any]]) -> None:
            self.model.removeRows(0, self.model.rowCount())
            for r in rows:
                who = f"{r['writer']} ({r['writer_kind']})"
                items = [QStandardItem(safe_text(x, 120, single_line=True)) for x in
                         (fmt_time(r["ts"]), who, r["compartment"], r["summary"] or f"{r['records']} records",
                          r["verified"], r["status"])]
                if r["status"] != "accepted":
                    for it in items:
                        it.setForeground(QColor("#b91c1c"))
                self.model.appendRow(items)
            self.table.resizeColumnsToContents()
            self.table.horizontalHeader().setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
            self.title_label.setText(f"Activity  ({len(rows)} writes)")
            self.loaded.emit()

        self.client.submit(lambda ctx: ctx.vault.activity(), done, self.window_.show_error, context=self)

    def relevant(self, changes: Changes) -> bool:
        return True

    def clear(self) -> None:
        super().clear()
        self.model.removeRows(0, self.model.rowCount())
