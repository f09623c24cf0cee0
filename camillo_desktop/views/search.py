"""Search results: the query from the toolbar's search field (Ctrl+F), with field modifiers.

Runs :meth:`camillo.Vault.search` on the worker and shows the matching records in the same table
and detail pane as the timeline.  The main window shows this view with the query as its argument,
so the view runs that query (never a stale or empty one first) and reports ``loaded`` only once its
results (or its error) are shown; a result that arrives after a newer query was asked is dropped.
GUI thread only.
"""

from __future__ import annotations

from typing import Any

from camillo import Cancelled
from PySide6.QtWidgets import QLabel

from ..text import safe_text
from .timeline import RecordListView

HELP = ("Words and \"phrases\", with modifiers: type:message  key:user/home*  agent:planner  compartment:work  "
        "class:user  is:conflict  is:pending  is:hidden  before:2026-01-31  after:2026-01-01")


class SearchView(RecordListView):
    name = "search"
    title = "Search"
    icon = "search"
    shortcut = ""
    depends_on = ("timeline",)  # records came or went

    def __init__(self, client: Any, window: Any) -> None:
        super().__init__(client, window)
        self.query = ""
        self.count = QLabel("")
        self.count.setObjectName("Muted")
        self.header.addWidget(self.count)
        self.subtitle.setText(HELP)

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
        query = self.query
        if not query.strip():
            self.count.setText("Type in the search field above (Ctrl+F).")
            self.model.set_rows([])
            self.detail.show_record(None)
            return  # nothing was loaded: no ``loaded``

        def done(views) -> None:
            if query != self.query:
                return  # a newer search is running
            shown = safe_text(query, 120, single_line=True)
            self.count.setText(f"{len(views)} result{'s' if len(views) != 1 else ''} for \u201c{shown}\u201d")
            self.model.set_rows(views)
            self.loaded.emit()

        def failed(exc: BaseException) -> None:
            if query == self.query:
                self._failed(exc)

        self.client.submit(lambda ctx: ctx.vault.search(query), done, failed, context=self, label="searching")

    def _failed(self, exc: BaseException) -> None:
        if isinstance(exc, Cancelled):
            return
        self.count.setText(safe_text(str(exc), 400, single_line=True))
        self.model.set_rows([])
        self.loaded.emit()

    def clear(self) -> None:
        super().clear()
        self.query = ""
        self.count.setText("")
