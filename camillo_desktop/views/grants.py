"""Grants: which agent may read, write or append to which compartment; create and revoke.

Revoking says what the agent loses (new keys it cannot read; its later writes rejected) and what
it keeps (whatever it already read), and asks for the passphrase.  GUI thread only.
"""

from __future__ import annotations

import time
from typing import Any

from camillo import GrantCreated, GrantInfo
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QPushButton

from ..dialogs import Ask
from ..flows import GrantDialog, protected
from ..models import Column, ColumnSpec, Sizing, fmt_time
from ..text import safe_text
from ..wording import revocation_lines
from .base import TableView


def grant_status(g: GrantInfo) -> str:
    expired = g.expires is not None and g.expires < time.time()
    return "revoked" if g.revoked else ("expired" if expired else "active")


class GrantColumn(Column):  # a row: a camillo.GrantInfo; agent and compartment names are their creators'
    AGENT = ColumnSpec("Agent", lambda g: g.agent, limit=200)
    ACCESS = ColumnSpec("Access", lambda g: ", ".join(f"{c}: {lv}" for c, lv in g.scopes.items()), limit=200,
                        sizing=Sizing.STRETCH)
    MAX_CLASS = ColumnSpec("Highest authority", lambda g: g.max_class, limit=200)
    EXPIRES = ColumnSpec("Expires", lambda g: fmt_time(g.expires) or "never", limit=200)
    LAST_USED = ColumnSpec("Last used", lambda g: fmt_time(g.last_used) or "never", limit=200)
    STATUS = ColumnSpec("Status", grant_status, limit=200)


class GrantsView(TableView):
    name = "grants"
    title = "Grants"
    icon = "grants"
    shortcut = "Ctrl+6"
    depends_on = ("grants",)
    columns = GrantColumn

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

    @staticmethod
    def fetch(vault: Any) -> Any:
        return vault.grants()

    def foreground(self, g: GrantInfo) -> Any:
        return QGuiApplication.palette().placeholderText() if g.revoked else None

    def show_rows(self, grants: list[GrantInfo]) -> None:
        super().show_rows(grants)
        active = sum(1 for g in grants if not g.revoked)
        self.title_label.setText(f"Grants  ({active} active)")
        self.new_button.setEnabled(bool(self.window_.info.get("is_owner")))

    def _new(self) -> None:
        dlg = GrantDialog(self.window_.info.get("compartments", []), self)
        if not dlg.exec() or not dlg.result_:
            return
        r = dlg.result_

        def job(ctx):  # the GrantCreated the vault returns (mutate broadcasts its .changes)
            return ctx.vault.create_grant(r["agent"], r["scopes"], r["path"], max_class=r["max_class"],
                                          expires=r["expires"])

        def done(created: GrantCreated) -> None:
            Ask.inform(self, "Grant created", f"Saved {created.path}. Give this file to {created.grant.agent}; it is "
                       "its key to your vault, so handle it like a password.")

        self.client.mutate(job, done, self.window_.show_error, context=self)

    def _revoke(self) -> None:
        g = self.selected()
        if g is None or g.revoked:
            return
        access = safe_text(", ".join(f"{c} ({lv})" for c, lv in g.scopes.items()), 400, single_line=True)
        agent = safe_text(g.agent, 80, single_line=True)
        details = (f"{agent} loses its access to {access}: new keys are made that it does not have, so it "
                   "cannot read anything written from now on, and anything it writes after this is rejected by "
                   "every copy of your vault.\n\nIt keeps whatever it has already read: revocation cannot recall "
                   "copies an agent made.")
        gid = g.grant_id.hex()
        protected(self.window_, f"Revoke the grant of {agent}?", details,
                  lambda ctx, unlock: _revoke_job(ctx, gid, unlock),
                  lambda report: Ask.inform(self, "Revoked", safe_text("\n".join(revocation_lines(report)), 4000)),
                  confirm_label="Revoke", working="Revoking: making new keys\u2026")


def _revoke_job(ctx: Any, grant_id: str, unlock: Any) -> Any:
    return ctx.vault.revoke(grant_id, reauth=unlock)  # the RevocationReport (mutate broadcasts its .changes)
