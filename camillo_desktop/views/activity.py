"""Activity: who (device or agent) wrote what, when, in which compartment, and how it was verified.

One row per batch, newest first, rejected batches included with the reason (in red).  GUI thread
only.
"""

from __future__ import annotations

from typing import Any

from camillo import ActivityRow
from PySide6.QtGui import QColor

from ..models import Column, ColumnSpec, Sizing, fmt_time
from .base import SelectionMode, TableView

REJECTED = QColor("#b91c1c")


class ActivityColumn(Column):  # a row: a camillo.ActivityRow
    TIME = ColumnSpec("Time", lambda r: fmt_time(r.ts))
    WHO = ColumnSpec("Who", lambda r: f"{r.writer} ({r.writer_kind})")
    COMPARTMENT = ColumnSpec("Compartment", lambda r: r.compartment)
    WHAT = ColumnSpec("What", lambda r: r.summary or f"{r.records} records", sizing=Sizing.STRETCH)
    VERIFIED = ColumnSpec("Verified", lambda r: r.verified)
    STATUS = ColumnSpec("Status", lambda r: r.status)


class ActivityView(TableView):
    name = "activity"
    title = "Activity"
    icon = "activity"
    shortcut = "Ctrl+8"
    depends_on = ("batches",)  # one row per batch
    columns = ActivityColumn
    selection = SelectionMode.ExtendedSelection

    def __init__(self, client: Any, window: Any) -> None:
        super().__init__(client, window)
        self.subtitle.setText("Every change is signed by the device or agent that made it. Rejected writes stay "
                              "visible here with the reason.")

    @staticmethod
    def fetch(vault: Any) -> Any:
        return vault.activity()

    def foreground(self, row: ActivityRow) -> Any:
        return REJECTED if row.status != "accepted" else None

    def show_rows(self, rows: list[ActivityRow]) -> None:
        super().show_rows(rows)
        self.title_label.setText(f"Activity  ({len(rows)} writes)")
