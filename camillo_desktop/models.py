"""Qt models of the vault's records, facts and rosters (every one passes QAbstractItemModelTester).

Every model's columns are an enum of :class:`Column`: a member's value is the column's position and
its :class:`ColumnSpec` says everything else about it: the header, how a row's value is shown, the
tooltip, the badge, the alignment, and how wide the column is (applied by
:class:`camillo_desktop.views.base.Table`).  A view declares its columns once, in one place.

* :class:`ColumnModel`: the base of the tables: ``data`` and ``headerData`` from the column enum,
  the rows from :meth:`ColumnModel.row`.
* :class:`TableModel`: rows held in memory (activity, grants, devices).
* :class:`RecordTableModel`: a lazy table of record ids.  It knows only the ids up front;
  ``fetchMore`` reveals rows a page at a time and the rows' contents are decoded on the vault worker
  in pages of :data:`PAGE`, arriving by signal (placeholders until then).  Used by the timeline,
  search results and the inbox.
* :class:`HistoryModel`: a fact's supersession chain, or any short list of records.
* :class:`FactsModel`: a tree, subject → attribute, with value, status, authority, compartment.

Untrusted text is given to views as plain text (:func:`camillo_desktop.text.safe_text`), never rich
text: every cell's text goes through it.  GUI thread only; the data comes from the worker through
:class:`~camillo_desktop.worker.VaultClient`.
"""

from __future__ import annotations

import html
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum, IntEnum, auto
from typing import Any, ClassVar

from camillo import FactView, RecordView, SearchHit, SearchPage
from PySide6.QtCore import (
    QAbstractItemModel,
    QAbstractTableModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
    Signal,
)
from PySide6.QtGui import QFont, QGuiApplication

from . import theme
from .guard import qt_virtual
from .text import safe_text, safe_tooltip
from .widgets import BADGE_COLOR_ROLE, BADGE_ROLE

PAGE = 200
PageFetch = Callable[[Any, int, int], list[RecordView]]  # (vault, offset, limit) -> rows, on the worker
SUMMARY = 240  # characters of a record's text shown in a table cell
Index = QModelIndex | QPersistentModelIndex
DISPLAY = Qt.ItemDataRole.DisplayRole


class Role(IntEnum):
    RECORD = Qt.ItemDataRole.UserRole + 1
    RECORD_ID = Qt.ItemDataRole.UserRole + 2
    FACT = Qt.ItemDataRole.UserRole + 3
    ROW = Qt.ItemDataRole.UserRole + 4  # the row object of a TableModel (a write, a grant, a device)


def fmt_time(ts: int | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else ""


def fmt_when(ts: int | None, now: float | None = None) -> str:
    """A short time for lists: the hour today, the day this year, the date before."""
    if not ts:
        return ""
    t, today = time.localtime(ts), time.localtime(now)
    if t[:3] == today[:3]:
        return time.strftime("%H:%M", t)
    if t.tm_year == today.tm_year:
        return time.strftime("%d %b", t)
    return time.strftime("%Y-%m-%d", t)


def _summary_source(v: RecordView) -> str:
    text = v.text[: SUMMARY + 1] if v.text else v.text  # never copy more of a huge text than is shown
    mark = "(forgotten) " if v.hidden else ""
    if v.key:
        return f"{mark}{v.key} = {text}"
    if v.role:
        return f"{mark}{v.role}: {text}"
    return mark + (text or f"({v.type or 'record'})")


def record_summary(v: RecordView) -> str:
    """A record in one line of at most :data:`SUMMARY` characters, escaped."""
    return safe_text(_summary_source(v), SUMMARY, single_line=True)


# ------------------------------------------------------------------------------------------ columns


class Sizing(Enum):
    """How a column's width is decided (by :class:`camillo_desktop.views.base.Table`)."""

    INTERACTIVE = auto()  # starts at ``width`` (without one: fitted to the contents once loaded); draggable
    FIXED = auto()  # exactly ``width``
    CONTENTS = auto()  # always as wide as its contents
    STRETCH = auto()  # takes the width the others leave


@dataclass(frozen=True)
class ColumnSpec:
    """One column.  ``text`` gives a row's value as text; it is shown escaped, on one line, cut to
    ``limit`` characters (everything a writer chose is untrusted).  The optional functions give the
    tooltip, the text of a badge painted instead of the text (:class:`~camillo_desktop.widgets.BadgeDelegate`),
    its colour, and what a screen reader says."""

    header: str
    text: Callable[[Any], str | None]
    limit: int = 120
    width: int | None = None
    sizing: Sizing = Sizing.INTERACTIVE
    align: Qt.AlignmentFlag | None = None
    tooltip: Callable[[Any], str | None] | None = None
    badge: Callable[[Any], str | None] | None = None
    badge_color: Callable[[Any], str | None] | None = None
    accessible: Callable[[Any], str | None] | None = None


class Column(IntEnum):
    """The base of every column enum: ``NAME = ColumnSpec(...)``, in the order shown.  A member is
    the column's position (an int, so it indexes models directly); ``member.spec`` is its spec."""

    spec: ColumnSpec

    def __new__(cls, spec: ColumnSpec) -> Column:
        position = len(cls.__members__)
        member = int.__new__(cls, position)
        member._value_ = position
        member.spec = spec
        return member


def column_header(columns: type[Column], section: int, orientation: Qt.Orientation, role: int) -> Any:
    if orientation == Qt.Orientation.Horizontal and role == DISPLAY and 0 <= section < len(columns):
        return columns(section).spec.header
    return None


def column_data(col: Column, row: Any, role: int) -> Any:
    """What column ``col`` shows of ``row`` in ``role`` (the roles every column may have)."""
    spec = col.spec
    if role == DISPLAY:
        return safe_text(spec.text(row), spec.limit, single_line=True)
    if role == Qt.ItemDataRole.ToolTipRole and spec.tooltip is not None:
        return spec.tooltip(row)
    if role == BADGE_ROLE and spec.badge is not None:
        return spec.badge(row)
    if role == BADGE_COLOR_ROLE and spec.badge_color is not None:
        return spec.badge_color(row)
    if role == Qt.ItemDataRole.AccessibleTextRole and spec.accessible is not None:
        return spec.accessible(row)
    if role == Qt.ItemDataRole.TextAlignmentRole and spec.align is not None:
        return spec.align
    return None


class ColumnModel(QAbstractTableModel):
    """A table whose columns are ``columns``; subclasses hold the rows.  ``row_role`` gives a row's
    object; a row not available yet shows :meth:`placeholder`."""

    columns: type[Column]
    row_role: ClassVar[int] = Role.ROW

    def __init__(self, columns: type[Column], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.columns = columns

    def row(self, row: int) -> Any:
        """The object of row ``row``, or None (out of range, or not decoded yet)."""
        raise NotImplementedError

    def text(self, item: Any, col: Column) -> str | None:
        """Row ``item``'s value in column ``col`` (not yet escaped)."""
        return col.spec.text(item)

    def foreground(self, item: Any) -> Any:
        """The text colour of a whole row (dimmed, or red), or None for the usual one."""
        return None

    def placeholder(self, row: int, col: Column, role: int) -> Any:
        return None

    @qt_virtual(0)
    def columnCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self.columns)

    @qt_virtual()
    def headerData(self, section: int, orientation: Qt.Orientation, role: int = DISPLAY) -> Any:
        return column_header(self.columns, section, orientation, role)

    @qt_virtual()
    def data(self, index: Index, role: int = DISPLAY) -> Any:
        if not index.isValid() or not 0 <= index.row() < self.rowCount() or not 0 <= index.column() < len(self.columns):
            return None
        col = self.columns(index.column())
        item = self.row(index.row())
        if item is None:
            return self.placeholder(index.row(), col, role)
        if role == self.row_role:
            return item
        if role == DISPLAY:
            return safe_text(self.text(item, col), col.spec.limit, single_line=True)
        if role == Qt.ItemDataRole.ForegroundRole:
            return self.foreground(item)
        return column_data(col, item, role)


class TableModel(ColumnModel):
    """Rows held in memory, all shown at once.  ``foreground(row)`` may colour a whole row."""

    def __init__(self, columns: type[Column], parent: QObject | None = None, *,
                 foreground: Callable[[Any], Any] | None = None) -> None:
        super().__init__(columns, parent)
        self._rows: list[Any] = []
        self._foreground = foreground

    def set_rows(self, rows: Sequence[Any]) -> None:
        self.beginResetModel()
        self._rows = list(rows)
        self.endResetModel()

    def rows(self) -> list[Any]:
        return list(self._rows)

    def row(self, row: int) -> Any:
        return self._rows[row] if 0 <= row < len(self._rows) else None

    def foreground(self, item: Any) -> Any:
        return self._foreground(item) if self._foreground is not None else None

    @qt_virtual(0)
    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._rows)


class PagedTableModel(TableModel):
    """Rows held in memory and read a page at a time: :meth:`set_pages` gives the first page and how
    to read the next ones (``fetch(vault, offset, limit)`` on the worker), which are asked for when the
    view scrolls to the end of the rows read so far (Qt's ``canFetchMore``/``fetchMore``)."""

    def __init__(self, columns: type[Column], client: Any, parent: QObject | None = None, *,
                 foreground: Callable[[Any], Any] | None = None) -> None:
        super().__init__(columns, parent, foreground=foreground)
        self._client = client
        self._fetch: Callable[[Any, int, int], list[Any]] | None = None
        self._loading = False
        self.generation = 0  # changes with every new list: late pages and counts of an older one are dropped

    def set_rows(self, rows: Sequence[Any]) -> None:
        self.generation += 1
        self._fetch, self._loading = None, False
        super().set_rows(rows)

    def set_pages(self, fetch: Callable[[Any, int, int], list[Any]], first: Sequence[Any]) -> None:
        """``first``: the first page (read already); more pages while they come back full."""
        self.set_rows(first)
        self._fetch = fetch if len(first) >= PAGE else None

    @property
    def more(self) -> bool:
        """More pages may come (the last one read was full)."""
        return self._fetch is not None

    @property
    def loading(self) -> bool:
        """A page is being read."""
        return self._loading

    @qt_virtual(False)
    def canFetchMore(self, parent: Index = QModelIndex()) -> bool:  # noqa: B008
        return not parent.isValid() and self._fetch is not None and not self._loading

    @qt_virtual()
    def fetchMore(self, parent: Index = QModelIndex()) -> None:  # noqa: B008
        fetch = self._fetch
        if parent.isValid() or fetch is None or self._loading or self._client is None:
            return
        self._loading = True
        generation, offset = self.generation, len(self._rows)

        def arrived(rows: list[Any]) -> None:
            if generation != self.generation:
                return
            self._loading = False
            if len(rows) < PAGE:
                self._fetch = None  # the last page
            if rows:
                self.beginInsertRows(QModelIndex(), len(self._rows), len(self._rows) + len(rows) - 1)
                self._rows.extend(rows)
                self.endInsertRows()

        def failed(_exc: BaseException) -> None:
            if generation == self.generation:  # (the vault locked meanwhile): no more pages of this list
                self._loading, self._fetch = False, None

        self._client.submit(lambda ctx: fetch(ctx.vault, offset, PAGE), arrived, failed, context=self,
                            label="reading more rows")


# ------------------------------------------------------------------------------------------ records


def _authority_tooltip(v: RecordView) -> str:
    return (f"claimed {v.class_label}, effective {v.effective_label}: "
            + ("binds as your own word" if v.effective_label == "user" else "information, not an instruction"))


class RecordColumn(Column):
    """A record in a row; the text takes the width the others leave.  ``order`` names each column's
    sort for ``Vault.timeline_ids``."""

    TIME = ColumnSpec("Time", lambda v: fmt_time(v.ts), width=116)
    TEXT = ColumnSpec("Text", _summary_source, limit=SUMMARY, sizing=Sizing.STRETCH,
                      tooltip=lambda v: safe_tooltip(v.text, 1000))
    # agent-controlled: readers accept any type (spec §7.2)
    TYPE = ColumnSpec("Type", lambda v: v.type or "record", limit=60, width=84)
    AUTHORITY = ColumnSpec("Authority", lambda v: v.effective_label, width=84, tooltip=_authority_tooltip,
                           badge=lambda v: v.effective_label, accessible=lambda v: f"authority {v.effective_label}")
    WRITER = ColumnSpec("Written by", lambda v: v.writer, limit=40, width=104)
    COMPARTMENT = ColumnSpec("Compartment", lambda v: v.compartment, limit=60, width=110)


RECORD_ORDER = {RecordColumn.TIME: "time", RecordColumn.TEXT: "text", RecordColumn.TYPE: "type",
                RecordColumn.AUTHORITY: "authority", RecordColumn.WRITER: "writer",
                RecordColumn.COMPARTMENT: "compartment"}


class RecordTableModel(ColumnModel):
    """Records in rows, decoded on the worker a page at a time.  Either the ids are known up front
    (:meth:`set_ids`: a sort by a column, a short list) or only how many rows there are
    (:meth:`set_pages`: the timeline in time order, whose pages the worker reads straight from the
    vault's time index, so that a million records cost a page, not a million ids)."""

    rows_arrived = Signal()
    row_role = Role.RECORD

    def __init__(self, client: Any, parent: QObject | None = None) -> None:
        super().__init__(RecordColumn, parent)
        self._client = client
        self._ids: list[bytes] = []
        self._total = 0
        self._fetch: PageFetch | None = None  # set_pages: reads rows (offset, limit) on the worker
        self._visible = 0
        self._cache: dict[int, RecordView] = {}
        self._pending: set[int] = set()
        self._generation = 0
        self._fetching = False

    # -- content

    def _reset(self, ids: list[bytes], total: int, fetch: PageFetch | None, rows: dict[int, RecordView],
               visible: int) -> None:
        self.beginResetModel()
        self._ids, self._total, self._fetch = ids, total, fetch
        self._visible = visible
        self._cache = rows
        self._pending.clear()
        self._generation += 1
        self.endResetModel()

    def set_ids(self, ids: list[bytes]) -> None:
        self._reset(list(ids), len(ids), None, {}, min(PAGE, len(ids)))

    def set_pages(self, total: int, fetch: PageFetch, first: list[RecordView]) -> None:
        """``total`` rows, read by ``fetch(vault, offset, limit)`` on the worker when shown;
        ``first``: the first rows, read already.  The total may be raised later (:meth:`set_total`:
        the first page is shown before the rows are counted)."""
        self._reset([], total, fetch, dict(enumerate(first)), min(PAGE, total))

    def set_total(self, total: int) -> None:
        """How many rows there are, counted after the first page was shown (more can be fetched)."""
        if self._fetch is not None and total > self._total:
            self._total = total

    def set_rows(self, views: list[RecordView]) -> None:
        """Small lists whose contents are already decoded (search results, the inbox)."""
        self._reset([v.id for v in views], len(views), None, dict(enumerate(views)), len(views))

    @property
    def paged(self) -> bool:
        return self._fetch is not None

    def fetcher(self) -> PageFetch | None:
        """How the rows are read (set_pages), to tell one list from the next."""
        return self._fetch

    def total(self) -> int:
        return self._total

    def row(self, row: int) -> RecordView | None:
        return self._cache.get(row)

    def record(self, row: int) -> RecordView | None:
        return self._cache.get(row)

    def row_of(self, rid: bytes) -> int:
        """The row of a record, or -1 (paged: only among the rows read so far)."""
        if self._fetch is not None:
            return next((row for row, v in self._cache.items() if v.id == rid), -1)
        try:
            return self._ids.index(rid)
        except ValueError:
            return -1

    def _id_at(self, row: int) -> bytes | None:
        if self._fetch is None:
            return self._ids[row]
        v = self._cache.get(row)
        return v.id if v is not None else None

    def _request(self, row: int) -> None:
        page = row // PAGE
        if page in self._pending or self._client is None:
            return
        self._pending.add(page)
        generation, fetch = self._generation, self._fetch
        if fetch is not None:
            def job(ctx: Any) -> list[RecordView]:
                return fetch(ctx.vault, page * PAGE, PAGE)
        else:
            ids = self._ids[page * PAGE : (page + 1) * PAGE]

            def job(ctx: Any) -> list[RecordView]:
                return ctx.vault.records(ids)
        self._client.submit(job, lambda views: self._arrived(page, generation, views),
                            lambda _e: self._pending.discard(page), context=self, label="decoding records")

    def _arrived(self, page: int, generation: int, views: list[RecordView]) -> None:
        if generation != self._generation:
            return
        first = page * PAGE
        if self._fetch is not None:  # the page's rows, in order
            for offset, v in enumerate(views[:PAGE]):
                self._cache[first + offset] = v
        else:
            by_id = {v.id: v for v in views}
            for offset, rid in enumerate(self._ids[first : first + PAGE]):
                found = by_id.get(rid)
                if found is not None:
                    self._cache[first + offset] = found
        last = min(first + PAGE, self._visible) - 1
        if last >= first:
            self.dataChanged.emit(self.index(first, 0), self.index(last, len(RecordColumn) - 1))
        self.rows_arrived.emit()

    def placeholder(self, row: int, col: Column, role: int) -> Any:
        if role == Role.RECORD_ID:
            return self._id_at(row)
        if role == DISPLAY:
            self._request(row)
            return "\u2026" if col == RecordColumn.TEXT else ""
        return None

    # -- Qt model

    @qt_virtual(0)
    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else self._visible

    @qt_virtual(False)
    def canFetchMore(self, parent: Index = QModelIndex()) -> bool:  # noqa: B008
        return not parent.isValid() and not self._fetching and self._visible < self._total

    @qt_virtual()
    def fetchMore(self, parent: Index = QModelIndex()) -> None:  # noqa: B008
        # Not re-entrant: a listener of rowsAboutToBeInserted/rowsInserted (Qt's model tester, some
        # views) may call fetchMore again while these rows are being inserted; that call does
        # nothing, so the rows announced are exactly the rows added and rowCount never passes the total.
        if parent.isValid() or self._fetching:
            return
        first = self._visible
        last = min(first + PAGE, self._total) - 1
        if last < first:
            return
        self._fetching = True
        try:
            self.beginInsertRows(QModelIndex(), first, last)
            self._visible = last + 1
            self.endInsertRows()
        finally:
            self._fetching = False

    def reveal(self, row: int) -> None:
        """Show every row up to ``row`` (or the last), in one insertion (Ctrl+End, go to a date)."""
        last = min(row, self._total - 1)
        if last < self._visible or self._fetching:
            return
        self._fetching = True
        try:
            self.beginInsertRows(QModelIndex(), self._visible, last)
            self._visible = last + 1
            self.endInsertRows()
        finally:
            self._fetching = False

    def ids(self) -> list[bytes]:
        """The ids of every row (:meth:`set_ids` and :meth:`set_rows` only)."""
        return self._ids

    @qt_virtual()
    def data(self, index: Index, role: int = DISPLAY) -> Any:
        if role == Role.RECORD_ID and index.isValid() and 0 <= index.row() < self._visible:
            return self._id_at(index.row())
        if role == Qt.ItemDataRole.FontRole and index.isValid():
            v = self._cache.get(index.row())
            if v is not None and v.hidden:
                font = QFont()
                font.setItalic(True)
                return font
        return super().data(index, role)

    def foreground(self, item: Any) -> Any:
        return QGuiApplication.palette().placeholderText() if item.hidden else None


# ------------------------------------------------------------------------------------------ search


HTML_ROLE = Qt.ItemDataRole.UserRole + 60  # our own HTML of escaped text, painted by HtmlDelegate


def snippet_text(hit: SearchHit) -> str:
    return "".join(text for text, _ in hit.snippet) or _summary_source(hit.record)


def query_words(query: str) -> list[str]:
    """The plain words of a search query (not its modifiers), lower case, for marking them."""
    words = []
    for token in re.findall(r'"[^"]*"|\S+', query):
        if ":" in token and not token.startswith('"'):
            continue
        words += [w.lower() for w in re.findall(r"\w+", token)]
    return words


def _marked(text: str, words: list[str], mark: str) -> str:
    """``text`` escaped, the occurrences of ``words`` wrapped in ``mark`` (a format with {})."""
    if not words:
        return html.escape(text)
    pattern = re.compile("|".join(re.escape(w) for w in sorted(set(words), key=len, reverse=True)), re.IGNORECASE)
    out, pos = [], 0
    for m in pattern.finditer(text):
        out.append(html.escape(text[pos:m.start()]))
        out.append(mark.format(html.escape(m.group(0))))
        pos = m.end()
    out.append(html.escape(text[pos:]))
    return "".join(out)


def snippet_html(hit: SearchHit, query: str = "", limit: int = 400) -> str:
    """A search hit's snippet as HTML: every piece escaped (one line), the matched words marked (and
    the query's words in the key or role shown before it)."""
    c = theme.current()
    mark = f'<span style="background: {c["match_bg"]}; color: {c["text"]}; font-weight: 600;">{{}}</span>'
    prefix = "(forgotten) " if hit.record.hidden else ""
    if hit.record.key:
        prefix += hit.record.key + " = "
    elif hit.record.role:
        prefix += hit.record.role + ": "
    out = [_marked(safe_text(prefix, 120, single_line=True), query_words(query), mark)] if prefix else []
    if not hit.snippet:
        out.append(html.escape(safe_text(hit.record.text, limit, single_line=True)))
        return "".join(out)
    left = limit
    for text, matched in hit.snippet:
        if left <= 0:
            break
        shown = html.escape(safe_text(text, left, single_line=True))
        left -= len(text)
        out.append(mark.format(shown) if matched else shown)
    return "".join(out)


class SearchColumn(Column):
    """A search hit in a row: its snippet (the matched words marked) takes the spare width."""

    TIME = ColumnSpec("Time", lambda h: fmt_time(h.record.ts), width=122)
    MATCH = ColumnSpec("Match", snippet_text, limit=400, sizing=Sizing.STRETCH,
                       tooltip=lambda h: safe_tooltip(h.record.text, 1000))
    TYPE = ColumnSpec("Type", lambda h: h.record.type or "record", limit=60, width=90)
    AUTHORITY = ColumnSpec("Authority", lambda h: h.record.effective_label, width=86,
                           tooltip=lambda h: _authority_tooltip(h.record), badge=lambda h: h.record.effective_label,
                           accessible=lambda h: f"authority {h.record.effective_label}")
    WRITER = ColumnSpec("Written by", lambda h: h.record.writer, limit=40, width=112)
    COMPARTMENT = ColumnSpec("Compartment", lambda h: h.record.compartment, limit=60, width=100)


class SearchModel(ColumnModel):
    """A search's hits, a page at a time: the first page comes with the total; scrolling to the end
    asks the worker for the next (``fetchMore``), until every match is shown."""

    rows_arrived = Signal()
    row_role = Role.RECORD

    def __init__(self, client: Any, parent: QObject | None = None) -> None:
        super().__init__(SearchColumn, parent)
        self._client = client
        self._hits: list[SearchHit] = []
        self.total = 0
        self.total_exact = True  # False: more than ``total`` match (counted so far; SearchPage)
        self.query = ""
        self.order = "relevance"
        self._loading = False
        self._generation = 0

    def set_page(self, page: SearchPage) -> None:
        """A new search's first page."""
        self.beginResetModel()
        self._hits = list(page.hits)
        self.total, self.query, self.order = page.total, page.query, page.order
        self.total_exact = page.total_exact
        self._loading = False
        self._generation += 1
        self.endResetModel()
        self.rows_arrived.emit()

    def clear(self) -> None:
        self.set_page(SearchPage(query="", order=self.order, total=0, offset=0, hits=[]))

    def set_rows(self, hits: Sequence[SearchHit]) -> None:
        """Hits already read (no further pages)."""
        self.set_page(SearchPage(query=self.query, order=self.order, total=len(hits), offset=0, hits=list(hits)))

    def row(self, row: int) -> SearchHit | None:
        return self._hits[row] if 0 <= row < len(self._hits) else None

    def record(self, row: int) -> RecordView | None:
        hit = self.row(row)
        return hit.record if hit is not None else None

    def row_of(self, rid: bytes) -> int:
        return next((i for i, h in enumerate(self._hits) if h.record.id == rid), -1)

    @qt_virtual(0)
    def rowCount(self, parent: Index = QModelIndex()) -> int:  # noqa: B008
        return 0 if parent.isValid() else len(self._hits)

    @qt_virtual(False)
    def canFetchMore(self, parent: Index = QModelIndex()) -> bool:  # noqa: B008
        return not parent.isValid() and not self._loading and len(self._hits) < self.total

    @qt_virtual()
    def fetchMore(self, parent: Index = QModelIndex()) -> None:  # noqa: B008
        if parent.isValid() or self._loading or len(self._hits) >= self.total or self._client is None:
            return
        self._loading = True
        query, order, offset, generation = self.query, self.order, len(self._hits), self._generation

        def arrived(page: SearchPage) -> None:
            if generation != self._generation:
                return
            self._loading = False
            hits = [h for h in page.hits if self.row_of(h.record.id) < 0]
            if hits:
                self.beginInsertRows(QModelIndex(), len(self._hits), len(self._hits) + len(hits) - 1)
                self._hits += hits
                self.endInsertRows()
            self.total = page.total if hits else len(self._hits)  # nothing new: the vault changed meanwhile
            self.total_exact = page.total_exact or not hits
            self.rows_arrived.emit()

        def failed(_exc: BaseException) -> None:
            self._loading = False

        self._client.submit(lambda ctx: ctx.vault.search_page(query, offset=offset, limit=PAGE, order=order),
                            arrived, failed, context=self, label="more search results")

    @qt_virtual()
    def data(self, index: Index, role: int = DISPLAY) -> Any:
        if role == HTML_ROLE and index.isValid() and index.column() == SearchColumn.MATCH:
            hit = self.row(index.row())
            return snippet_html(hit, self.query) if hit is not None else None
        if role == Role.RECORD_ID and index.isValid():
            hit = self.row(index.row())
            return hit.record.id if hit is not None else None
        if role == Qt.ItemDataRole.ForegroundRole and index.isValid():
            hit = self.row(index.row())
            return QGuiApplication.palette().placeholderText() if hit is not None and hit.record.hidden else None
        return super().data(index, role)


OPERATIONS = {"PUT": "set", "DEL": "forget", "NOTE": "note"}


def operation(v: RecordView) -> str:
    """What a record of a fact's history did, in words."""
    if v.kind_name == "DEL":
        if v.meta.get("reject") is True:
            return "rejected"
        return "withdrawn" if v.writer_kind == "agent" else "forgot"
    if v.kind_name == "PUT":
        restored = " again" if "restored_from" in v.meta else ""
        if v.effective_label == "user":
            return ("set" if v.class_label == "user" else "confirmed") + restored
        return "proposed" + restored
    return OPERATIONS.get(v.kind_name, v.type or "record")


class HistoryColumn(Column):
    TIME = ColumnSpec("Time", lambda v: fmt_time(v.ts), sizing=Sizing.CONTENTS)
    OPERATION = ColumnSpec("What", operation, sizing=Sizing.CONTENTS)
    VALUE = ColumnSpec("Value", lambda v: "" if v.kind_name == "DEL" else v.text, limit=200, sizing=Sizing.STRETCH,
                       tooltip=lambda v: safe_tooltip(v.text, 4000) if v.kind_name != "DEL" else None)
    AUTHORITY = ColumnSpec("Authority", lambda v: v.effective_label, width=92, sizing=Sizing.FIXED,
                           badge=lambda v: v.effective_label if v.kind_name != "DEL" else None)
    WRITER = ColumnSpec("Written by", lambda v: v.writer, limit=40, sizing=Sizing.CONTENTS)


class HistoryModel(TableModel):
    """A short, fully decoded list of records (a fact's history, a record's sources); ▶ marks the
    current value."""

    row_role = Role.RECORD

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(HistoryColumn, parent)
        self._current: bytes | None = None

    def set_records(self, rows: list[RecordView], current: bytes | None = None) -> None:
        self._current = current
        self.set_rows(rows)

    def record(self, row: int) -> RecordView | None:
        return self.row(row)

    def text(self, item: RecordView, col: Column) -> str | None:
        text = col.spec.text(item)
        return ("\u25b6 " + text) if col == HistoryColumn.TIME and item.id == self._current else text


# ------------------------------------------------------------------------------------------ facts


def _fact_value(f: FactView) -> str | None:
    if f.proposed and (f.status in ("pending", "deleted") or f.current is None):
        return "(not set; proposed: " + f.proposed[0].text + ")"
    if f.status == "deleted" or f.current is None:
        return "(forgotten)"
    return f.current.text + (f"   (+{len(f.proposed)} proposed)" if f.proposed else "")


def _fact_authority(f: FactView) -> str:
    return f.current.effective_label if f.current is not None and f.status != "deleted" else ""


STATUS_TIPS = {"ok": "one current value", "conflict": "values written without knowledge of each other: review them",
               "deleted": "forgotten (a DEL hides it)", "pending": "not set: only proposals, waiting for your confirmation"}


class FactColumn(Column):
    KEY = ColumnSpec("Key", lambda f: f.key.split("/", 1)[1] if "/" in f.key else f.key, limit=200, width=150)
    VALUE = ColumnSpec("Current value", _fact_value, sizing=Sizing.STRETCH, tooltip=lambda f: safe_tooltip(_fact_value(f)))
    STATUS = ColumnSpec("Status", lambda f: f.status, width=84, badge=lambda f: f.status,
                        badge_color=lambda f: theme.STATUS_COLORS.get(f.status),
                        tooltip=lambda f: STATUS_TIPS.get(f.status))
    AUTHORITY = ColumnSpec("Authority", _fact_authority, width=84, badge=lambda f: _fact_authority(f) or None)
    COMPARTMENT = ColumnSpec("Compartment", lambda f: f.compartment, limit=60, width=110)


class FactsModel(QAbstractItemModel):
    """Subject → attribute.  Internal id 0 marks a subject row; n > 0 a fact under subject n-1.  A
    fact's row shows the :class:`FactColumn` columns; a subject's row, its name and count in bold.

    The facts are given whole (:meth:`set_facts`) or a page at a time (:meth:`set_subjects`): the
    subjects with how many facts each has, and the pages read of some; a subject's next page of
    :data:`PAGE` facts is read on the worker when the view asks for it (:meth:`read_more`:
    :class:`~camillo_desktop.views.facts.FactsView` asks when the subject is expanded and as its
    last row read comes into sight).  Not Qt's ``canFetchMore``/``fetchMore``: QTreeView calls
    ``fetchMore`` of every expanded parent at each layout, and each page's rows lay it out again,
    so it would read a subject's every page, in sight or not."""

    columns = FactColumn

    def __init__(self, parent: QObject | None = None, client: Any = None) -> None:
        super().__init__(parent)
        self._client = client
        self._subjects: list[str] = []
        self._counts: list[int] = []  # how many facts each subject has
        self._facts: list[list[FactView]] = []  # those read so far, in order
        self._loading: set[int] = set()  # the subjects whose next page is being read
        self.generation = 0  # changes with every new list: late pages of an older one are dropped

    def set_facts(self, facts: list[FactView]) -> None:
        """Every fact, read already (grouped and sorted here)."""
        groups: dict[str, list[FactView]] = {}
        for f in facts:
            subject = f.key.split("/", 1)[0]
            groups.setdefault(subject, []).append(f)
        self.set_subjects([(s, len(groups[s])) for s in sorted(groups)],
                          {s: sorted(g, key=lambda f: (f.key, f.compartment)) for s, g in groups.items()})

    def set_subjects(self, subjects: Sequence[tuple[str, int]], read: dict[str, list[FactView]]) -> None:
        """The subjects in order with how many facts each has, and the facts read of some of them (the
        first ones of the subject, in the order ``Vault.facts`` gives: the next page follows them)."""
        self.beginResetModel()
        self.generation += 1
        self._subjects = [s for s, _n in subjects]
        self._counts = [n for _s, n in subjects]
        self._facts = [list(read.get(s, ())) for s in self._subjects]
        self._loading = set()
        self.endResetModel()

    def fact(self, index: Index) -> FactView | None:
        if not index.isValid() or index.internalId() == 0:
            return None
        return self._facts[index.internalId() - 1][index.row()]

    def find(self, key: str, compartment: str | None = None) -> QModelIndex:
        """The row of a fact among those read (invalid when it was not read, or is not there)."""
        s = self.subject_row(key.split("/", 1)[0])
        for r, f in enumerate(self._facts[s] if s is not None else ()):
            if f.key == key and (compartment is None or f.compartment == compartment):
                return self.index(r, 0, self.index(s, 0))
        return QModelIndex()

    def subject_row(self, subject: str) -> int | None:
        try:
            return self._subjects.index(subject)
        except ValueError:
            return None

    def total(self) -> int:
        """How many facts there are (read or not)."""
        return sum(self._counts)

    def read(self) -> int:
        """How many facts are held (read so far)."""
        return sum(len(f) for f in self._facts)

    @qt_virtual(False)
    def hasChildren(self, parent: Index = QModelIndex()) -> bool:  # noqa: B008
        if not parent.isValid():
            return bool(self._subjects)
        return parent.internalId() == 0 and parent.column() == 0 and self._counts[parent.row()] > 0

    def can_read_more(self, parent: Index) -> bool:
        """Has this subject facts not read yet (and is none of its pages being read)?"""
        if self._client is None or not parent.isValid() or parent.internalId() != 0 or parent.column() != 0:
            return False
        row = parent.row()
        return row not in self._loading and len(self._facts[row]) < self._counts[row]

    def read_more(self, parent: Index) -> None:
        """Read this subject's next page of facts on the worker (rows inserted when it arrives)."""
        if not self.can_read_more(parent):
            return
        row = parent.row()
        self._loading.add(row)
        generation, subject, have = self.generation, self._subjects[row], self._facts[row]
        after = (have[-1].key, have[-1].compartment_id) if have else None

        def arrived(facts: list[FactView]) -> None:
            if generation != self.generation:
                return
            self._loading.discard(row)
            if len(facts) < PAGE:  # the last page (facts removed since the count: a reload follows)
                self._counts[row] = len(self._facts[row]) + len(facts)
            if facts:
                at = len(self._facts[row])
                self.beginInsertRows(self.index(row, 0), at, at + len(facts) - 1)
                self._facts[row].extend(facts)
                self.endInsertRows()
            self.dataChanged.emit(self.index(row, 0), self.index(row, 0))  # (its count)

        def failed(_exc: BaseException) -> None:
            if generation == self.generation:  # (the vault locked meanwhile): no more pages of this list
                self._loading.discard(row)
                self._counts[row] = len(self._facts[row])

        self._client.submit(lambda ctx: ctx.vault.facts(subject=subject, after=after, limit=PAGE), arrived, failed,
                            context=self, label="reading more facts")

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
        return len(FactColumn)

    @qt_virtual()
    def headerData(self, section: int, orientation: Qt.Orientation, role: int = DISPLAY) -> Any:
        return column_header(FactColumn, section, orientation, role)

    @qt_virtual()
    def data(self, index: Index, role: int = DISPLAY) -> Any:
        if not index.isValid():
            return None
        col = index.column()
        if index.internalId() == 0:
            if role == DISPLAY and col == 0:
                return f"{safe_text(self._subjects[index.row()], 120, single_line=True)}  ({self._counts[index.row()]})"
            if role == Qt.ItemDataRole.FontRole and col == 0:
                font = QFont()
                font.setBold(True)
                return font
            return None
        f = self._facts[index.internalId() - 1][index.row()]
        if role == Role.FACT:
            return f
        return column_data(FactColumn(col), f, role)
