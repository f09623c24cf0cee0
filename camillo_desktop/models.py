"""Qt models of the vault's records and facts (every one passes QAbstractItemModelTester).

* :class:`RecordTableModel`: a lazy table of record ids.  It knows only the ids up front;
  ``fetchMore`` reveals rows a page at a time and the rows' contents are decoded on the vault worker
  in pages of :data:`PAGE`, arriving by signal (placeholders until then).  Used by the timeline,
  search results, the inbox and the activity view.
* :class:`FactsModel`: a tree, subject → attribute, with value, status, authority, compartment.
* :class:`HistoryModel`: a fact's supersession chain, or any short list of records.

Untrusted text is given to views as plain text (:func:`camillo_desktop.text.safe_text`), never rich
text.  GUI thread only; the data comes from the worker through :class:`~camillo_desktop.worker.VaultClient`.
"""

from __future__ import annotations

import time
from enum import IntEnum
from typing import Any

from camillo import FactView, RecordView
from PySide6.QtCore import (
    QAbstractItemModel,
    QAbstractTableModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
    Signal,
)

from . import theme
from .guard import qt_virtual
from .text import safe_text, safe_tooltip
from .widgets import BADGE_COLOR_ROLE, BADGE_ROLE

PAGE = 200
Index = QModelIndex | QPersistentModelIndex


class Role(IntEnum):
    RECORD = Qt.ItemDataRole.UserRole + 1
    RECORD_ID = Qt.ItemDataRole.UserRole + 2
    FACT = Qt.ItemDataRole.UserRole + 3


def fmt_time(ts: int | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else ""


def record_summary(v: RecordView, limit: int = 240) -> str:
    text = v.text[: limit + 1] if v.text else v.text  # never copy more of a huge text than is shown
    if v.key:
        return safe_text(f"{v.key} = {text}", limit, single_line=True)
    if v.role:
        return safe_text(f"{v.role}: {text}", limit, single_line=True)
    return safe_text(text or f"({v.type or v.kind_name.lower()})", limit, single_line=True)


class Col(IntEnum):
    TIME = 0
    COMPARTMENT = 1
    TYPE = 2
    AUTHORITY = 3
    WRITER = 4
    TEXT = 5


HEADERS = {Col.TIME: "Time", Col.COMPARTMENT: "Compartment", Col.TYPE: "Type", Col.AUTHORITY: "Authority",
           Col.WRITER: "Written by", Col.TEXT: "Text"}


class RecordTableModel(QAbstractTableModel):
    rows_arrived = Signal()

    def __init__(self, client: Any, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._client = client
        self._ids: list[bytes] = []
        self._visible = 0
        self._cache: dict[int, RecordView] = {}
        self._pending: set[int] = set()
        self._generation = 0
        self._fetching = False

    # -- content

    def set_ids(self, ids: list[bytes]) -> None:
        self.beginResetModel()
        self._ids = list(ids)
        self._visible = min(PAGE, len(self._ids))
        self._cache.clear()
        self._pending.clear()
        self._generation += 1
        self.endResetModel()

    def set_records(self, views: list[RecordView]) -> None:
        """Small lists whose contents are already decoded (the inbox)."""
        self.beginResetModel()
        self._ids = [v.id for v in views]
        self._visible = len(views)
        self._cache = dict(enumerate(views))
        self._pending.clear()
        self._generation += 1
        self.endResetModel()

    def total(self) -> int:
        return len(self._ids)

    def record(self, row: int) -> RecordView | None:
        return self._cache.get(row)

    def row_of(self, rid: bytes) -> int:
        try:
            return self._ids.index(rid)
        except ValueError:
            return -1

    def _request(self, row: int) -> None:
        page = row // PAGE
        if page in self._pending or self._client is None:
            return
        self._pending.add(page)
        ids = self._ids[page * PAGE : (page + 1) * PAGE]
        generation = self._generation
        self._client.submit(lambda ctx: ctx.vault.records(ids),
                            lambda views: self._arrived(page, generation, views),
                            lambda _e: self._pending.discard(page), context=self, label="decoding records")

    def _arrived(self, page: int, generation: int, views: list[RecordView]) -> None:
        if generation != self._generation:
            return
        by_id = {v.id: v for v in views}
        first = page * PAGE
        for offset, rid in enumerate(self._ids[first : first + PAGE]):
            v = by_id.get(rid)
            if v is not None:
                self._cache[first + offset] = v
        last = min(first + PAGE, self._visible) - 1
        if last >= first:
            self.dataChanged.emit(self.index(first, 0), self.index(last, len(Col) - 1))
        self.rows_arrived.emit()

    # -- Qt model

    @qt_virtual(0)
    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else self._visible

    @qt_virtual(0)
    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(Col)

    @qt_virtual(False)
    def canFetchMore(self, parent: Index = QModelIndex()) -> bool:  # noqa: B008
        return not parent.isValid() and not self._fetching and self._visible < len(self._ids)

    @qt_virtual()
    def fetchMore(self, parent: Index = QModelIndex()) -> None:  # noqa: B008
        # Not re-entrant: a listener of rowsAboutToBeInserted/rowsInserted (Qt's model tester, some
        # views) may call fetchMore again while these rows are being inserted; that call does
        # nothing, so the rows announced are exactly the rows added and rowCount never passes ids.
        if parent.isValid() or self._fetching:
            return
        first = self._visible
        last = min(first + PAGE, len(self._ids)) - 1
        if last < first:
            return
        self._fetching = True
        try:
            self.beginInsertRows(QModelIndex(), first, last)
            self._visible = last + 1
            self.endInsertRows()
        finally:
            self._fetching = False

    @qt_virtual()
    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole and 0 <= section < len(Col):
            return HEADERS[Col(section)]
        return None

    @qt_virtual()
    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < self._visible or not 0 <= index.column() < len(Col):
            return None
        row, col = index.row(), Col(index.column())
        v = self._cache.get(row)
        if role == Role.RECORD_ID:
            return self._ids[row]
        if v is None:
            if role == Qt.ItemDataRole.DisplayRole:
                self._request(row)
                return "\u2026" if col == Col.TEXT else ""
            return None
        if role == Role.RECORD:
            return v
        if role == Qt.ItemDataRole.DisplayRole:
            if col == Col.TIME:
                return fmt_time(v.ts)
            if col == Col.COMPARTMENT:
                return safe_text(v.compartment, 60, single_line=True)
            if col == Col.TYPE:  # agent-controlled: readers accept any type (spec §7.2)
                return safe_text(v.type, 60, single_line=True) if v.type else v.kind_name.lower()
            if col == Col.AUTHORITY:
                return v.effective_label
            if col == Col.WRITER:
                return safe_text(v.writer, 40, single_line=True)
            return record_summary(v)
        if role == BADGE_ROLE and col == Col.AUTHORITY:
            return v.effective_label
        if role == Qt.ItemDataRole.ToolTipRole:
            if col == Col.AUTHORITY:
                return (f"claimed {v.class_label}, effective {v.effective_label}: "
                        + ("binds as your own word" if v.effective_label == "user" else "information, not an instruction"))
            if col == Col.TEXT:
                return safe_tooltip(v.text, 1000)
        if role == Qt.ItemDataRole.AccessibleTextRole and col == Col.AUTHORITY:
            return f"authority {v.effective_label}"
        return None


class FactsModel(QAbstractItemModel):
    """Subject → attribute.  Internal id 0 marks a subject row; n > 0 a fact under subject n-1."""

    class FCol(IntEnum):
        KEY = 0
        VALUE = 1
        STATUS = 2
        AUTHORITY = 3
        COMPARTMENT = 4

    FHEADERS = ("Key", "Current value", "Status", "Authority", "Compartment")

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._subjects: list[str] = []
        self._facts: list[list[FactView]] = []

    def set_facts(self, facts: list[FactView]) -> None:
        self.beginResetModel()
        groups: dict[str, list[FactView]] = {}
        for f in facts:
            subject = f.key.split("/", 1)[0]
            groups.setdefault(subject, []).append(f)
        self._subjects = sorted(groups)
        self._facts = [sorted(groups[s], key=lambda f: (f.key, f.compartment)) for s in self._subjects]
        self.endResetModel()

    def fact(self, index: Index) -> FactView | None:
        if not index.isValid() or index.internalId() == 0:
            return None
        return self._facts[index.internalId() - 1][index.row()]

    def find(self, key: str, compartment: str | None = None) -> QModelIndex:
        for s, facts in enumerate(self._facts):
            for r, f in enumerate(facts):
                if f.key == key and (compartment is None or f.compartment == compartment):
                    return self.index(r, 0, self.index(s, 0))
        return QModelIndex()

    @qt_virtual(factory=QModelIndex)
    def index(self, row: int, column: int, parent: Index = QModelIndex()) -> QModelIndex:  # noqa: B008
        if not self.hasIndex(row, column, parent):
            return QModelIndex()
        if not parent.isValid():
            return self.createIndex(row, column, 0)
        if parent.internalId() != 0:
            return QModelIndex()
        return self.createIndex(row, column, parent.row() + 1)

    @qt_virtual(factory=QModelIndex)
    def parent(self, index: Index = QModelIndex()) -> QModelIndex:  # type: ignore[override]  # noqa: B008
        if not index.isValid() or index.internalId() == 0:
            return QModelIndex()
        return self.createIndex(index.internalId() - 1, 0, 0)

    @qt_virtual(0)
    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        if not parent.isValid():
            return len(self._subjects)
        if parent.internalId() == 0 and parent.column() == 0:
            return len(self._facts[parent.row()])
        return 0

    @qt_virtual(0)
    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return len(self.FCol)

    @qt_virtual()
    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole and 0 <= section < len(self.FCol):
            return self.FHEADERS[section]
        return None

    @qt_virtual()
    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        col = index.column()
        if index.internalId() == 0:
            if role == Qt.ItemDataRole.DisplayRole and col == 0:
                facts = self._facts[index.row()]
                return f"{safe_text(self._subjects[index.row()], 120, single_line=True)}  ({len(facts)})"
            if role == Qt.ItemDataRole.FontRole and col == 0:
                from PySide6.QtGui import QFont

                font = QFont()
                font.setBold(True)
                return font
            return None
        f = self._facts[index.internalId() - 1][index.row()]
        cur = f.current
        if role == Role.FACT:
            return f
        if role == Qt.ItemDataRole.DisplayRole:
            if col == self.FCol.KEY:
                return safe_text(f.key.split("/", 1)[1] if "/" in f.key else f.key, 200, single_line=True)
            if col == self.FCol.VALUE:
                if f.status == "deleted" or cur is None:
                    return "(forgotten)"
                return safe_text(cur.text, 120, single_line=True)
            if col == self.FCol.STATUS:
                return f.status
            if col == self.FCol.AUTHORITY:
                return cur.effective_label if cur is not None and f.status != "deleted" else ""
            if col == self.FCol.COMPARTMENT:
                return safe_text(f.compartment, 60, single_line=True)
        if role == BADGE_ROLE:
            if col == self.FCol.AUTHORITY and cur is not None and f.status != "deleted":
                return cur.effective_label
            if col == self.FCol.STATUS:
                return f.status
        if role == BADGE_COLOR_ROLE and col == self.FCol.STATUS:
            return theme.STATUS_COLORS.get(f.status)
        if role == Qt.ItemDataRole.ToolTipRole and col == self.FCol.STATUS:
            return {"ok": "one current value", "conflict": "values written without knowledge of each other: review them",
                    "deleted": "forgotten (a DEL hides it)",
                    "pending": "an inference waiting for your confirmation"}.get(f.status)
        return None


class HistoryModel(QAbstractTableModel):
    """A short, fully decoded list of records (a fact's history, a record's sources)."""

    HEADERS = ("Time", "Operation", "Value", "Authority", "Written by")

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._rows: list[RecordView] = []
        self._current: bytes | None = None

    def set_records(self, rows: list[RecordView], current: bytes | None = None) -> None:
        self.beginResetModel()
        self._rows = list(rows)
        self._current = current
        self.endResetModel()

    def record(self, row: int) -> RecordView | None:
        return self._rows[row] if 0 <= row < len(self._rows) else None

    @qt_virtual(0)
    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._rows)

    @qt_virtual(0)
    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.HEADERS)

    @qt_virtual()
    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole and 0 <= section < len(self.HEADERS):
            return self.HEADERS[section]
        return None

    @qt_virtual()
    def data(self, index: Index, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        v = self._rows[index.row()]
        col = index.column()
        if role == Role.RECORD:
            return v
        if role == Qt.ItemDataRole.DisplayRole:
            mark = "\u25b6 " if v.id == self._current else ""
            return [mark + fmt_time(v.ts), {"PUT": "set", "DEL": "forget", "NOTE": "note"}.get(v.kind_name, v.kind_name.lower()),
                    "" if v.kind_name == "DEL" else safe_text(v.text, 80, single_line=True), v.effective_label,
                    safe_text(v.writer, 40, single_line=True)][col]
        if role == BADGE_ROLE and col == 3 and v.kind_name != "DEL":
            return v.effective_label
        return None
