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

    def __init__(self, client: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.client = client
        self.setWidgetResizable(True)
        self.setFrameShape(QFrame.Shape.NoFrame)
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
        self.text.setAccessibleName("record text")
        lay.addWidget(self.text, 1)
        form = QFormLayout()
        form.setLabelAlignment(Qt.AlignmentFlag.AlignRight)
        self.fields: dict[str, QLabel] = {}
        badges = QHBoxLayout()
        self.claimed = Badge("-")
        self.effective = Badge("-")
        badges.addWidget(QLabel("claimed"))
        badges.addWidget(self.claimed)
        badges.addWidget(QLabel("effective"))
        badges.addWidget(self.effective)
        badges.addStretch(1)
        form.addRow("Authority", badges)
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
        lay.addStretch(0)
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
        self.fields["Signature"].setText(
            "verified (Ed25519, by its writer's certified key)" if v.verified == "signature"
            else "accepted on the signature of a compaction by your device")
        self.fields["Record id"].setText(v.id.hex())
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
