"""Health: what deserves the owner's attention, each item with a button to act (KeePassXC's reports).

Open conflicts, pending inferences, grants unused for a long time, devices not seen for a long
time, compartments many agents can read, missing changes and rollback alerts, the erasure policy.
GUI thread only.
"""

from __future__ import annotations

from typing import Any

from camillo import Changes, HealthReport
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QScrollArea, QVBoxLayout, QWidget

from .. import theme
from ..notices import sync_explanation, sync_label
from ..text import safe_text
from .base import View

# Problem kinds (camillo.Problem.kind) in words; the core's messages name files and format terms.
PROBLEM_WORDS = {"damaged": "damaged or partly written files", "rejected": "changes your devices refused",
                 "fork": "a device that wrote two different histories", "unreadable": "files this device has no key "
                 "for yet", "unverified": "changes whose signature could not be checked", "missing": "files missing",
                 "slot": "a damaged credential file"}


class HealthView(View):
    name = "health"
    title = "Health"
    icon = "health"
    shortcut = "Ctrl+9"

    def __init__(self, client: Any, window: Any) -> None:
        super().__init__(client, window)
        self.subtitle.setText("What needs you, and nothing else. Everything green means your memory is consistent, "
                              "complete and only shared as you decided.")
        self.area = QScrollArea()
        self.area.setWidgetResizable(True)
        self.area.setFrameShape(QFrame.Shape.NoFrame)
        self.root.addWidget(self.area, 1)

    def load(self) -> None:
        self.client.submit(lambda ctx: ctx.vault.health(), self._show, self.window_.show_error, context=self)

    def _card(self, ok: bool, title: str, text: str, action: str = "", target: str = "",
              handler: Any = None) -> QFrame:
        title, text = safe_text(title, 200, single_line=True), safe_text(text, 1200)  # names writers chose
        card = QFrame()
        card.setObjectName("Card")
        lay = QHBoxLayout(card)
        dot = QLabel("\u25cf")
        c = theme.current()
        dot.setStyleSheet(f"color: {c['ok'] if ok else c['warn']}; font-size: 18px;")
        lay.addWidget(dot, 0, Qt.AlignmentFlag.AlignTop)
        col = QVBoxLayout()
        t = QLabel(title)
        t.setStyleSheet("font-weight: 600; font-size: 14px;")
        t.setTextFormat(Qt.TextFormat.PlainText)
        col.addWidget(t)
        body = QLabel(text)
        body.setWordWrap(True)
        body.setTextFormat(Qt.TextFormat.PlainText)
        body.setObjectName("Muted")
        col.addWidget(body)
        lay.addLayout(col, 1)
        if action and not ok:
            b = QPushButton(action)
            b.clicked.connect(handler or (lambda: self.navigate.emit(target, None)))
            lay.addWidget(b, 0, Qt.AlignmentFlag.AlignVCenter)
        return card

    def _show(self, h: HealthReport) -> None:
        holder = QWidget()
        lay = QVBoxLayout(holder)
        n = len(h.conflicts)
        lay.addWidget(self._card(not n, f"{n} open conflict{'s' if n != 1 else ''}",
                                 ", ".join(h.conflicts) or "Every fact has one current value.", "Review", "conflicts"))
        n = len(h.pending)
        lay.addWidget(self._card(not n, f"{n} inference{'s' if n != 1 else ''} waiting for you",
                                 ", ".join(h.pending) or "Nothing an agent inferred is waiting.", "Open the inbox",
                                 "inbox"))
        sync = h.sync
        # In the desktop's words, as in the status bar (the core's details use the format's terms).
        lay.addWidget(self._card(sync == "up to date", f"Sync: {sync_label(sync)}", sync_explanation(sync),
                                 "Accept the vault as it is" if sync == "rollback alert" else "Refresh",
                                 handler=self._accept_state if sync == "rollback alert" else self.window_.refresh))
        problems = [p for p in h.problems if p.kind not in ("gap", "rollback", "syncing")]
        kinds: dict[str, int] = {}
        for p in problems:
            kinds[p.kind] = kinds.get(p.kind, 0) + 1
        lay.addWidget(self._card(not problems, f"{len(problems)} problem{'s' if len(problems) != 1 else ''} in the files",
                                 "; ".join(PROBLEM_WORDS.get(k, "something this version cannot check") + f" ({n})"
                                           for k, n in sorted(kinds.items())) or
                                 "Every file, signature and link verifies.", "See activity", "activity"))
        n = len(h.stale_grants)
        lay.addWidget(self._card(not n, f"{n} grant{'s' if n != 1 else ''} unused for 30 days",
                                 ", ".join(h.stale_grants) or f"All {h.grants} active grants are in use.",
                                 "Review grants", "grants"))
        n = len(h.stale_devices)
        lay.addWidget(self._card(not n, f"{n} device{'s' if n != 1 else ''} not seen for 30 days",
                                 ", ".join(h.stale_devices) or f"All {h.devices} devices were seen recently. "
                                 "A device you no longer use should be revoked.", "Review devices", "devices"))
        crowded = h.crowded_compartments
        lay.addWidget(self._card(not crowded, "Compartments many agents can read",
                                 "; ".join(f"{c}: {', '.join(a)}" for c, a in crowded.items()) or
                                 "No compartment is readable by three or more agents.", "Review grants", "grants"))
        lay.addWidget(self._card(True, "Erasure " + ("enabled" if h.erasure_enabled else "disabled by policy"),
                                 "Records can be erased for real from the timeline (\u201cErase permanently\u201d)."
                                 if h.erasure_enabled else
                                 "This vault's policy keeps records (retention); forgetting still hides them."))
        lay.addStretch(1)
        self.area.setWidget(holder)
        issues = sum(1 for v in (h.conflicts, h.pending, h.stale_grants, h.stale_devices, crowded, problems)
                     if v) + (sync != "up to date")
        self.title_label.setText("Health" + (f"  ({issues} to look at)" if issues else "  (all good)"))
        self.loaded.emit()

    def _accept_state(self) -> None:
        """After a rollback alert: remember the vault as it is now.  A mutation broadcasting the Changes
        the vault returned, which name nothing (what this device remembers of the vault is no part
        of it): this view reloads its own sync card, and the window refreshes its status bar."""

        def done(_changes: Changes) -> None:
            self.load()
            self.window_.refresh()

        self.client.mutate(lambda ctx: ctx.vault.accept_current_state(), done, self.window_.show_error, context=self)

    def relevant(self, changes: Changes) -> bool:
        return not changes.empty  # anything that moved may change what needs the owner

    def clear(self) -> None:
        super().clear()
        self.area.setWidget(QWidget())

