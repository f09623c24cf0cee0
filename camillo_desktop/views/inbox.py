"""The inbox: what agents inferred (and what imports brought in), waiting for the user's word.

An agent's conclusion ("prefers morning meetings") binds only once the user confirms it: confirm
writes a signed CONFIRM (its authority becomes ``user``); reject writes a DEL that hides it (an
earlier value, if any, comes back).  Several at once are fine.  GUI thread only.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QPushButton

from .base import SelectionMode
from .timeline import RecordListView


class InboxView(RecordListView):
    name = "inbox"
    title = "Inbox"
    icon = "inbox"
    shortcut = "Ctrl+4"
    depends_on = ("keys",)  # the pending facts
    selection = SelectionMode.ExtendedSelection  # several at once

    def __init__(self, client: Any, window: Any) -> None:
        super().__init__(client, window)
        self.subtitle.setText("Your agents' inferences and imported memories. They are information, not "
                              "instructions, until you confirm them. Select one or several.")
        self.confirm_button = QPushButton("Confirm")
        self.confirm_button.setObjectName("Primary")
        self.confirm_button.setToolTip("Sign a confirmation: it becomes your own word (user authority)")
        self.reject_button = QPushButton("Reject")
        self.reject_button.setToolTip("Hide it from your agents; an earlier value comes back")
        self.confirm_button.clicked.connect(lambda: self._act("confirm"))
        self.reject_button.clicked.connect(lambda: self._act("reject"))
        self.header.addWidget(self.confirm_button)
        self.header.addWidget(self.reject_button)
        self._select_id: bytes | None = None

    def selected_ids(self) -> list[bytes]:
        rows = sorted({i.row() for i in self.table.selectionModel().selectedRows()})
        return [v.id for v in (self.model.record(r) for r in rows) if v is not None]

    @staticmethod
    def fetch(vault: Any) -> Any:
        return vault.inbox()

    def show_rows(self, views: Any) -> None:
        self.title_label.setText(f"Inbox  ({len(views)})")
        super().show_rows(views)
        self.confirm_button.setEnabled(bool(views))
        self.reject_button.setEnabled(bool(views))
        if self._select_id is not None:
            self.select_record(self._select_id)
            self._select_id = None
        elif views:
            self.table.selectRow(0)
        if not views:
            self.detail.show_record(None)
            self.detail.heading.setText("Nothing waits for you.")

    def show_argument(self, argument: Any) -> None:
        if isinstance(argument, bytes):
            self._select_id = argument
            if self.model.total():
                self.select_record(argument)

    def _act(self, what: str) -> None:
        ids = self.selected_ids()
        if not ids:
            return

        def job(ctx):
            return ctx.vault.confirm(ids) if what == "confirm" else ctx.vault.reject(ids)

        def done(_changes) -> None:
            verb = "Confirmed" if what == "confirm" else "Rejected"
            self.status_message.emit(f"{verb} {len(ids)} inference{'s' if len(ids) != 1 else ''}.")

        self.client.mutate(job, done, self.window_.show_error, context=self)
