"""Grants: which agent may read, write or append to which compartment; create and revoke.

Revoking says what the agent loses (new keys it cannot read; its later writes rejected) and what
it keeps (whatever it already read), and asks for the passphrase.  GUI thread only.
"""

from __future__ import annotations

import time
from typing import Any

from camillo import Changes
from PySide6.QtCore import Qt
from PySide6.QtGui import QStandardItem, QStandardItemModel
from PySide6.QtWidgets import QAbstractItemView, QHeaderView, QPushButton, QTableView

from ..dialogs import Ask
from ..flows import GrantDialog, protected
from ..models import fmt_time
from ..text import safe_text
from .base import View

COLUMNS = ("Agent", "Access", "Highest authority", "Expires", "Last used", "Status")


class GrantsView(View):
    name = "grants"
    title = "Grants"
    icon = "grants"
    shortcut = "Ctrl+5"

    def __init__(self, client: Any, window: Any) -> None:
        super().__init__(client, window)
        self.subtitle.setText("Agents reach your vault through grants, one compartment at a time. Keep them as "
                              "narrow as the task: an agent keeps whatever it has already read.")
        self.new_button = QPushButton("New grant\u2026")
        self.new_button.setObjectName("Primary")
        self.new_button.clicked.connect(self._new)
        self.revoke_button = QPushButton("Revoke\u2026")
        self.revoke_button.setObjectName("Danger")
        self.revoke_button.clicked.connect(self._revoke)
        self.header.addWidget(self.new_button)
        self.header.addWidget(self.revoke_button)
        self.model = QStandardItemModel(0, len(COLUMNS), self)
        self.model.setHorizontalHeaderLabels(COLUMNS)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.setAlternatingRowColors(True)
        self.table.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.table.setAccessibleName("grants")
        self.root.addWidget(self.table, 1)
        self._grants: list[dict[str, Any]] = []

    def load(self) -> None:
        def done(grants: list[dict[str, Any]]) -> None:
            self._grants = grants
            self.model.removeRows(0, self.model.rowCount())
            now = time.time()
            for g in grants:
                access = ", ".join(f"{c}: {lv}" for c, lv in g["scopes"].items())
                expired = g["expires"] is not None and g["expires"] < now
                status = "revoked" if g["revoked"] else ("expired" if expired else "active")
                row = [g["agent"], access, g["max_class"], fmt_time(g["expires"]) or "never",
                       fmt_time(g["last_used"]) or "never", status]
                # Agent and compartment names are text their creators chose: shown escaped.
                items = [QStandardItem(safe_text(str(x), 200, single_line=True)) for x in row]
                items[0].setData(g["grant_id"], Qt.ItemDataRole.UserRole)
                if g["revoked"]:
                    for it in items:
                        it.setForeground(self.palette().placeholderText())
                self.model.appendRow(items)
            self.table.resizeColumnsToContents()
            self.table.horizontalHeader().setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
            active = sum(1 for g in grants if not g["revoked"])
            self.title_label.setText(f"Grants  ({active} active)")
            self.new_button.setEnabled(bool(self.window_.info.get("is_owner")))
            self.loaded.emit()

        self.client.submit(lambda ctx: ctx.vault.grants(), done, self.window_.show_error, context=self)

    def _selected(self) -> dict[str, Any] | None:
        idx = self.table.currentIndex()
        return self._grants[idx.row()] if idx.isValid() and idx.row() < len(self._grants) else None

    def _new(self) -> None:
        dlg = GrantDialog(self.window_.info.get("compartments", []), self)
        if not dlg.exec() or not dlg.result_:
            return
        r = dlg.result_

        def job(ctx):
            ctx.vault.create_grant(r["agent"], r["scopes"], r["path"], max_class=r["max_class"], expires=r["expires"])
            return Changes(grants=True)

        self.client.mutate(job, lambda _c: Ask.inform(self, "Grant created",
                                                      f"Saved {r['path']}. Give this file to {r['agent']}; it is its "
                                                      "key to your vault, so handle it like a password."),
                           self.window_.show_error, context=self)

    def _revoke(self) -> None:
        g = self._selected()
        if g is None or g["revoked"]:
            return
        access = safe_text(", ".join(f"{c} ({lv})" for c, lv in g["scopes"].items()), 400, single_line=True)
        agent = safe_text(g["agent"], 80, single_line=True)
        details = (f"{agent} loses its access to {access}: new keys are made that it does not have, so it "
                   "cannot read anything written from now on, and anything it writes after this is rejected by "
                   "every copy of your vault.\n\nIt keeps whatever it has already read: revocation cannot recall "
                   "copies an agent made.")
        gid = g["grant_id"]
        protected(self.window_, f"Revoke the grant of {agent}?", details,
                  lambda ctx, unlock: _revoke_job(ctx, gid, unlock),
                  lambda report: Ask.inform(self, "Revoked", safe_text("\n".join(report.lines()), 4000)),
                  confirm_label="Revoke", working="Revoking: making new keys\u2026")

    def relevant(self, changes: Changes) -> bool:
        return changes.roster

    def clear(self) -> None:
        super().clear()
        self._grants = []
        self.model.removeRows(0, self.model.rowCount())


def _revoke_job(ctx: Any, grant_id: str, unlock: Any) -> Any:
    return ctx.vault.revoke(grant_id, reauth=unlock)  # (mutate broadcasts a full Changes for a report)
