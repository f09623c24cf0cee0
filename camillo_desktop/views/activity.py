"""Activity: who (device or agent) wrote what, when, in which compartment, and how it was verified.

One row per change, newest first, changes your devices refused included with the reason (in red),
all in plain words (:mod:`camillo_desktop.wording`).  GUI thread only.
"""

from __future__ import annotations

from typing import Any

from camillo import ActivityRow
from PySide6.QtGui import QColor

from .. import theme, wording
from ..models import Column, ColumnSpec, Sizing, fmt_time
from .base import SelectionMode, TableView


def what(r: ActivityRow) -> str:
    return wording.what_changed(wording.summary_counts(r.summary)) or f"{r.records} record{'s' if r.records != 1 else ''}"


def status(r: ActivityRow) -> str:
    return "accepted" if r.status == "accepted" else "refused by your devices"


class ActivityColumn(Column):  # a row: a camillo.ActivityRow, in plain words (never the format's)
    TIME = ColumnSpec("Time", lambda r: fmt_time(r.ts))
    WHO = ColumnSpec("Who", lambda r: f"{r.writer} ({r.writer_kind})")
    COMPARTMENT = ColumnSpec("Where", lambda r: wording.compartment(r.compartment))
    WHAT = ColumnSpec("What", what, sizing=Sizing.STRETCH)
    VERIFIED = ColumnSpec("Verified", lambda r: "signed" if r.verified == "signature" else "vouched for by your device")
    STATUS = ColumnSpec("Status", status, tooltip=lambda r: wording.plain(r.status) if r.status != "accepted" else None)


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
        return QColor(theme.current()["error"]) if row.status != "accepted" else None

    def show_rows(self, rows: list[ActivityRow]) -> None:
        super().show_rows(rows)
        self.title_label.setText(f"Activity  ({len(rows)} changes)")
