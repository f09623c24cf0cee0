"""Search results: the query from the toolbar's search field (Ctrl+F; "?" beside it lists the
modifiers), how many records match in all, best match or newest first.

Runs :meth:`camillo.Vault.search_page` on the worker: the first page comes with the total, and
further pages load as the list is scrolled (no silent cap).  Each row shows a snippet of the text
around the match with the matched words marked; the detail pane (and a double-click) opens a
message in its conversation.  The main window shows this view with the query as its argument, so
the view runs that query (never a stale or empty one first) and reports ``loaded`` only once its
results (or its error) are shown; a result that arrives after a newer query was asked is dropped.
GUI thread only.
"""

from __future__ import annotations

from typing import Any

from camillo import Cancelled, SearchPage
from PySide6.QtWidgets import QComboBox, QLabel

from ..models import HTML_ROLE, SearchColumn, SearchModel
from ..text import safe_text
from ..widgets import HtmlDelegate
from .timeline import RecordListView

HELP = ("Every word must match. Click \u201c?\u201d beside the search field for the modifiers (type:message, "
        "key:user/home*, agent:planner, is:pending, after:2026-01-01 \u2026). Double-click a message to read it in "
        "its conversation.")
ORDERS = (("Best match first", "relevance"), ("Newest first", "time"))


def match_count(total: int, exact: bool) -> str:
    """"3 records match", or "More than 10,200 records match" when counting stopped past the page."""
    if not exact:
        return f"More than {total:,} records match"
    return f"{total:,} record{'s' if total != 1 else ''} match{'' if total != 1 else 'es'}"


class SearchView(RecordListView):
    name = "search"
    title = "Search"
    icon = "search"
    shortcut = ""
    depends_on = ("timeline",)  # records came or went
    columns = SearchColumn

    def __init__(self, client: Any, window: Any) -> None:
        super().__init__(client, window)
        self.query = ""
        self.count = QLabel("")
        self.count.setObjectName("Muted")
        self.count.setAccessibleName("how many records match")
        self.header.insertWidget(1, self.count)
        self.order = QComboBox()
        self.order.setAccessibleName("order of the results")
        for label, value in ORDERS:
            self.order.addItem(label, value)
        self.order.currentIndexChanged.connect(lambda _i: self.query and self.load())
        self.header.addWidget(self.order)
        self.subtitle.setText(HELP)
        self.table.setItemDelegateForColumn(SearchColumn.MATCH, HtmlDelegate(HTML_ROLE, self.table))
        self.model.rows_arrived.connect(self._show_count)  # a later page may count further

    def make_model(self) -> SearchModel:  # type: ignore[override]
        return SearchModel(self.client, self)

    def activate(self, argument: Any = None) -> None:
        if isinstance(argument, str):  # a query from the search field
            self.search(argument)
        else:
            super().activate(argument)

    def search(self, query: str) -> None:
        self.query = query
        self._stale = False
        self.load()

    def load(self) -> None:
        query, order = self.query, self.order.currentData()
        if not query.strip():
            self.count.setText("Type in the search field above (Ctrl+F).")
            self.model.clear()
            self.detail.show_record(None)
            return  # nothing was loaded: no ``loaded``

        def done(page: SearchPage) -> None:
            if query != self.query:
                return  # a newer search is running
            current = self.detail.record.id if self.detail.record is not None else None
            self.model.set_page(page)  # (shows the count: rows_arrived)
            if current is not None and self.model.row_of(current) >= 0:
                self.select_record(current)
            elif page.hits:
                self.table.selectRow(0)
            else:
                self.detail.show_record(None)
            self.loaded.emit()

        def failed(exc: BaseException) -> None:
            if query == self.query:
                self._failed(exc)

        self.client.submit(lambda ctx: ctx.vault.search_page(query, order=order), done, failed, context=self,
                           label="searching")

    def _show_count(self) -> None:
        model = self.model
        if model.query and model.query == self.query:
            shown = safe_text(model.query, 120, single_line=True)
            self.count.setText(match_count(model.total, model.total_exact) + f" \u201c{shown}\u201d")

    def _refresh_detail(self) -> None:
        idx = self.table.currentIndex()
        if idx.isValid() and self.detail.record is None:
            self.detail.show_record(self.model.record(idx.row()))

    def _failed(self, exc: BaseException) -> None:
        if isinstance(exc, Cancelled):
            return
        self.count.setText(safe_text(str(exc), 400, single_line=True))
        self.model.clear()
        self.detail.show_record(None)
        self.loaded.emit()

    def clear(self) -> None:
        super().clear()
        self.query = ""
        self.count.setText("")

    def show_rows(self, rows: Any) -> None:  # the search view loads pages, not rows
        raise NotImplementedError
