"""Search results: the query from the toolbar's search field (Ctrl+F), with field modifiers.

Runs :meth:`camillo.Vault.search` on the worker and shows the matching records in the same table
and detail pane as the timeline.  GUI thread only.
"""

from __future__ import annotations

from typing import Any

from camillo import Changes
from PySide6.QtWidgets import QLabel

from .timeline import RecordListView

HELP = ("Words and \"phrases\", with modifiers: type:message  key:user/home*  agent:planner  compartment:work  "
        "class:user  is:conflict  is:pending  is:hidden  before:2026-01-31  after:2026-01-01")


class SearchView(RecordListView):
    name = "search"
    title = "Search"
    icon = "search"
    shortcut = ""

    def __init__(self, client: Any, window: Any) -> None:
        super().__init__(client, window)
        self.query = ""
        self.count = QLabel("")
        self.count.setObjectName("Muted")
        self.header.addWidget(self.count)
        self.subtitle.setText(HELP)

    def search(self, query: str) -> None:
        self.query = query
        self._stale = False
        self.load()

    def load(self) -> None:
        query = self.query
        if not query.strip():
            self.count.setText("Type in the search field above (Ctrl+F).")
            self._set_ids([])
            return

        def done(views) -> None:
            self.count.setText(f"{len(views)} result{'s' if len(views) != 1 else ''} for \u201c{query}\u201d")
            self.model.set_records(views)
            self.loaded.emit()

        self.client.submit(lambda ctx: ctx.vault.search(query), done, self._failed, context=self, label="searching")

    def _failed(self, exc: BaseException) -> None:
        self.count.setText(str(exc))
        self.model.set_records([])
        self.loaded.emit()

    def relevant(self, changes: Changes) -> bool:
        return changes.timeline or changes.facts
