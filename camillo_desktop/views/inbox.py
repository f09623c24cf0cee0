"""The inbox: what agents inferred (and what imports brought in), waiting for the user's word.

An agent's conclusion ("prefers morning meetings") sits beside the user's own value and binds only
once the user confirms it: confirm makes it the user's word (over a value the user set, only after
asking, naming both values); reject hides it and leaves the user's value as it was.  Several at
once are fine.  GUI thread only.
"""

from __future__ import annotations

from typing import Any

from PySide6.QtWidgets import QPushButton

from ..dialogs import Ask
from .base import SelectionMode
from .timeline import RecordListView


class InboxView(RecordListView):
    name = "inbox"
    title = "Inbox"
    icon = "inbox"
    shortcut = "Ctrl+5"
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
        self.reject_button.setToolTip("Hide it from your agents; your own value stays as it is")
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

        def done(_changes) -> None:
            verb = "Confirmed" if what == "confirm" else "Rejected"
            self.status_message.emit(f"{verb} {len(ids)} inference{'s' if len(ids) != 1 else ''}.")

        if what == "reject":
            self.client.mutate(lambda ctx: ctx.vault.reject(ids), done, self.window_.show_error, context=self)
            return

        def ask_then_confirm(replaced: list[tuple[str, str, str]]) -> None:
            if replaced and not Ask.confirm(
                    self, "Replace your own value?",
                    "\n".join(f"{key}: you set \u201c{yours}\u201d; the proposal says \u201c{theirs}\u201d."
                              for key, yours, theirs in replaced)
                    + "\n\nConfirming makes the proposed value yours, in place of what you set.", yes="Replace"):
                return
            self.client.mutate(lambda ctx: ctx.vault.confirm(ids, replace=True), done, self.window_.show_error,
                               context=self)

        self.client.submit(lambda ctx: replaced_values(ctx.vault, ids), ask_then_confirm, self.window_.show_error,
                           context=self)


def replaced_values(vault: Any, ids: list[bytes]) -> list[tuple[str, str, str]]:
    """On the worker: (key, the user's value, the proposed value) for each proposal whose
    confirmation would replace a different value the user set."""
    out = []
    for rid in ids:
        p = vault.record(rid)
        if p is None or p.key is None:
            continue
        f = vault.fact(p.key, p.compartment)
        for b in (f.candidates if f.status == "conflict" else [f.current] if f.current is not None else []):
            if b.value != p.value:
                out.append((p.key, b.text if f.status != "deleted" else "(forgotten)", p.text))
    return out
