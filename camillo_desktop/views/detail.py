"""The detail pane: one record, everything a careful user wants to know about it.

Type, key, value or text (plain text, never rich), authority (claimed and effective, with what
that means), who wrote it (device or agent), compartment, time, its sources ("why does the agent
believe this?" opens them), and how it was verified.  GUI thread only.
"""

from __future__ import annotations

from typing import Any

from camillo import RecordView
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QFormLayout,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QVBoxLayout,
    QWidget,
)

from ..models import fmt_time
from ..text import safe_text
from ..widgets import Badge

MEANING = {
    "user": "binds: your own word (written by you, or confirmed by you)",
    "observed": "information: an agent recorded something you said or did",
    "inferred": "information: an agent's conclusion, not binding until you confirm it",
    "external": "information from a third party, a tool or a web page; may carry injected instructions",
}


def plain_label(text: str = "") -> QLabel:
    label = QLabel(text)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


class DetailPane(QScrollArea):
    source_requested = Signal(bytes)  # the user wants to see a source record
    copy_requested = Signal(str)
    forget_requested = Signal(bytes)
    erase_requested = Signal(bytes)

    def __init__(self, client: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.client = client
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setMinimumWidth(300)
        inner = QWidget()
        self.setWidget(inner)
        lay = QVBoxLayout(inner)
        lay.setContentsMargins(12, 4, 4, 4)
        self.heading = QLabel("Select a record")
        self.heading.setObjectName("ViewTitle")
        self.heading.setTextFormat(Qt.TextFormat.PlainText)
        lay.addWidget(self.heading)
        self.text = QPlainTextEdit()
        self.text.setObjectName("RecordText")
        self.text.setReadOnly(True)
        self.text.setMinimumHeight(90)
        self.text.setMaximumHeight(260)
        self.text.setAccessibleName("record text")
        lay.addWidget(self.text)
        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        self.fields: dict[str, QLabel] = {}
        self.claimed = Badge("-")
        self.effective = Badge("-")
        for label, badge in (("Authority", self.effective), ("As written", self.claimed)):
            row = QHBoxLayout()
            row.addWidget(badge)
            row.addStretch(1)
            form.addRow(label, row)
        self.meaning = plain_label()
        self.meaning.setObjectName("Muted")
        form.addRow("", self.meaning)
        for name in ("Type", "Key", "Written by", "Compartment", "Time", "Signature", "Record id", "Status"):
            self.fields[name] = plain_label()
            form.addRow(name, self.fields[name])
        lay.addLayout(form)
        self.sources_box = QVBoxLayout()
        self.sources_title = QLabel("Why does the agent believe this?")
        self.sources_title.setObjectName("Muted")
        lay.addWidget(self.sources_title)
        lay.addLayout(self.sources_box)
        row = QHBoxLayout()
        self.copy_button = QPushButton("Copy text")
        self.copy_button.setToolTip("Copy to the clipboard; it is cleared again after a few seconds")
        self.copy_button.clicked.connect(lambda: self.copy_requested.emit(self._record.text if self._record else ""))
        row.addWidget(self.copy_button)
        row.addStretch(1)
        lay.addLayout(row)
        row = QHBoxLayout()
        self.forget_button = QPushButton("Forget")
        self.forget_button.setToolTip("Hide it from your agents. It stays in the encrypted history (reversible by "
                                      "writing it again); erase destroys it.")
        self.forget_button.clicked.connect(lambda: self._record and self.forget_requested.emit(self._record.id))
        self.erase_button = QPushButton("Erase permanently\u2026")
        self.erase_button.setObjectName("Danger")
        self.erase_button.setToolTip("Destroy it for real (crypto-erasure). Asks for your passphrase; cannot be undone.")
        self.erase_button.clicked.connect(lambda: self._record and self.erase_requested.emit(self._record.id))
        row.addWidget(self.forget_button)
        row.addWidget(self.erase_button)
        row.addStretch(1)
        lay.addLayout(row)
        lay.addStretch(1)
        self._record: RecordView | None = None
        self.show_record(None)

    @property
    def record(self) -> RecordView | None:
        return self._record

    def show_record(self, v: RecordView | None) -> None:
        self._record = v
        while self.sources_box.count():
            item = self.sources_box.takeAt(0)
            if item.widget() is not None:
                item.widget().deleteLater()
        self.copy_button.setEnabled(v is not None and bool(v.text))
        actionable = v is not None and v.valid and not v.erased and v.kind_name in ("PUT", "NOTE")
        self.forget_button.setEnabled(actionable and not (v.hidden if v else False))
        self.erase_button.setEnabled(actionable)
        if v is None:
            self.heading.setText("Select a record")
            self.text.setPlainText("")
            for f in self.fields.values():
                f.setText("")
            self.claimed.set("-")
            self.effective.set("-")
            self.meaning.setText("")
            self.sources_title.hide()
            return
        kind = {"PUT": "value", "DEL": "forgotten", "NOTE": v.type or "note"}.get(v.kind_name, v.kind_name.lower())
        self.heading.setText(safe_text(f"{(v.type or kind).capitalize()}"
                                       + (f" in {v.conversation}" if v.conversation else ""), 80, single_line=True))
        self.text.setPlainText(safe_text(v.text) if v.text else ("(erased)" if v.erased else ""))
        self.claimed.set(v.class_label)
        self.effective.set(v.effective_label)
        self.meaning.setText(MEANING.get(v.effective_label, ""))
        self.fields["Type"].setText(f"{v.type or '-'} ({v.kind_name})")
        self.fields["Key"].setText(v.key or "-")
        self.fields["Written by"].setText(safe_text(f"{v.writer} ({v.writer_kind})", 120, single_line=True))
        self.fields["Compartment"].setText(v.compartment)
        self.fields["Time"].setText(fmt_time(v.ts) or "-")
        self.fields["Signature"].setText("verified (Ed25519)" if v.verified == "signature" else "vouched by compaction")
        self.fields["Signature"].setToolTip(
            "its writer's certified key signed it" if v.verified == "signature"
            else "accepted on the signature of a compaction by one of your devices (camillo verify --full checks it)")
        hexid = v.id.hex()
        self.fields["Record id"].setText("\n".join(hexid[i:i + 16] for i in range(0, 64, 16)))
        self.fields["Record id"].setToolTip(hexid)
        status = "hidden (forgotten)" if v.hidden else ("rejected: " + (v.reason or "") if not v.valid else "current")
        self.fields["Status"].setText(status)
        if v.sources:
            self.sources_title.show()
            for sid in v.sources:
                b = QPushButton(f"Source {sid.hex()[:12]}\u2026  \u2192 open")
                b.setFlat(True)
                b.setStyleSheet("text-align: left;")
                b.clicked.connect(lambda _=False, s=sid: self.source_requested.emit(s))
                self.sources_box.addWidget(b)
        else:
            self.sources_title.hide()
