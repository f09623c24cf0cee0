"""Add a device: the QR code (painted crisp at any DPI), the typed-code fallback, the expiry
countdown, then the 6-digit code to compare and the confirmation.

It renders :class:`camillo.Offer` (made by :meth:`camillo.Vault.offer_device`), a state machine of
the core; this view only shows its states and polls it on the worker once a second.  Confirming is
a mutation: its job returns the :class:`camillo.Changes` the offer's ``confirm`` returned (a device
and its key were added).  GUI thread only: the offer's methods run on the vault worker, and the view
reads its state (``state``, ``sas``, ``messages``) once a job on it has finished.
"""

from __future__ import annotations

from typing import Any

from camillo import Offer, OfferState
from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from ..text import safe_text
from ..widgets import QRCodeWidget, muted_label
from .base import View


class EnrollView(View):
    name = "enroll"
    title = "Add a device"
    icon = "enroll"
    shortcut = ""
    depends_on = ()  # its own enrollment offer (so only ``reloaded``, like every view)

    def __init__(self, client: Any, window: Any) -> None:
        super().__init__(client, window)
        self.subtitle.setText("On the new device, install Camillo, let your sync service bring the vault's folder, "
                              "choose \u201cJoin an existing vault\u201d and scan this code (or type the code below).")
        body = QHBoxLayout()
        self.qr = QRCodeWidget()
        self.qr.setFixedSize(300, 300)
        body.addWidget(self.qr, 0, Qt.AlignmentFlag.AlignTop)
        side = QVBoxLayout()
        side.addWidget(muted_label("No camera? Type this code on the new device:"))
        self.code = QLabel("")
        self.code.setTextFormat(Qt.TextFormat.PlainText)
        self.code.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.code.setStyleSheet("font-family: monospace; font-size: 15px;")
        self.code.setWordWrap(True)
        self.code.setAccessibleName("typed enrollment code")
        side.addWidget(self.code)
        self.countdown = QLabel("")
        self.countdown.setObjectName("Muted")
        side.addWidget(self.countdown)
        self.state = QLabel("")
        self.state.setWordWrap(True)
        self.state.setTextFormat(Qt.TextFormat.PlainText)
        side.addWidget(self.state)
        self.sas = QLabel("")
        self.sas.setStyleSheet("font-size: 34px; font-weight: 700; letter-spacing: 6px;")
        self.sas.setAccessibleName("code to compare")
        side.addWidget(self.sas)
        buttons = QHBoxLayout()
        self.match = QPushButton("The codes match \u2014 add it")
        self.match.setObjectName("Primary")
        self.mismatch = QPushButton("They differ \u2014 cancel")
        self.cancel = QPushButton("Cancel")
        self.again = QPushButton("New code")
        for b in (self.match, self.mismatch, self.cancel, self.again):
            buttons.addWidget(b)
        buttons.addStretch(1)
        side.addLayout(buttons)
        side.addStretch(1)
        body.addLayout(side, 1)
        holder = QWidget()
        holder.setLayout(body)
        self.root.addWidget(holder, 1)
        self.match.clicked.connect(self._confirm)
        self.mismatch.clicked.connect(self._cancel)
        self.cancel.clicked.connect(self._cancel)
        self.again.clicked.connect(self.load)
        self.timer = QTimer(self)
        self.timer.timeout.connect(self._tick)
        self.offer: Offer | None = None
        self._show_state()

    def load(self) -> None:
        def job(ctx):
            return ctx.vault.offer_device()

        def done(offer: Offer) -> None:
            self.offer = offer
            self.qr.set_text(offer.qr_text)
            self.qr.setToolTip(offer.qr_text)
            self.code.setText(offer.typed_code)
            self.timer.start(1000)
            self._show_countdown(offer)
            self._show_state()
            self.loaded.emit()

        self.client.submit(job, done, self._failed, context=self)

    def _failed(self, exc: BaseException) -> None:
        self.state.setText(safe_text(str(exc), 600))
        self.loaded.emit()

    def _tick(self) -> None:
        offer = self.offer
        if offer is None:
            return
        self._show_countdown(offer)
        self.client.submit(lambda ctx: offer.poll(), lambda _s: self._show_state(), self._failed, context=self)

    def _show_countdown(self, offer: Offer) -> None:
        left = max(0, offer.seconds_left)
        self.countdown.setText(f"This code expires in {left // 60}:{left % 60:02d}.")

    def _show_state(self) -> None:
        o = self.offer
        st = o.state if o else None
        waiting = st == OfferState.WAITING
        self.match.setVisible(st == OfferState.REQUESTED)
        self.mismatch.setVisible(st == OfferState.REQUESTED)
        self.cancel.setVisible(waiting)
        self.again.setVisible(st in (OfferState.EXPIRED, OfferState.CANCELLED, OfferState.REFUSED, OfferState.DONE))
        self.qr.setVisible(waiting or st is None)
        if st == OfferState.REQUESTED and o is not None and o.request is not None:
            self.sas.setText(o.sas or "")
            self.state.setText(f"\u201c{safe_text(o.request.name, 60)}\u201d asks to join. Check that it shows "
                               "exactly this code. If it does not, someone else may have seen your QR code.")
        else:
            self.sas.setText("")
            messages = safe_text(" ".join(o.messages), 600) if o else ""
            self.state.setText({
                None: "Preparing a one-time code\u2026",
                OfferState.WAITING: "Waiting for the new device\u2026",
                OfferState.CONFIRMED: "Added. Waiting for the new device to finish\u2026",
                OfferState.DONE: "Done: the new device has its own key and can open the vault.",
                OfferState.EXPIRED: "This code expired. Make a new one.",
                OfferState.CANCELLED: "Cancelled. Nothing was added.",
                OfferState.REFUSED: "Refused. Nothing was added.",
            }.get(st, "") + (" " + messages if messages else ""))
        if st in (OfferState.DONE, OfferState.EXPIRED, OfferState.CANCELLED, OfferState.REFUSED):
            self.timer.stop()
            self.countdown.setText("")

    def _confirm(self) -> None:
        offer = self.offer
        if offer is None:
            return

        self.client.mutate(lambda ctx: offer.confirm(), lambda _c: self._show_state(), self._failed, context=self)

    def _cancel(self) -> None:
        offer = self.offer
        if offer is not None:
            self.client.submit(lambda ctx: offer.cancel(), lambda _r: self._show_state(), self._failed, context=self)

    def clear(self) -> None:
        super().clear()
        self.timer.stop()
        self.offer = None
        self.qr.set_text("")
