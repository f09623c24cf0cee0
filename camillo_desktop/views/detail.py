"""The detail pane: one record, everything a careful user wants to know about it.

Type, key, value or text (plain text, never rich), authority (claimed and effective, with what
that means), who wrote it (device or agent), compartment, time, its sources ("why does the agent
believe this?" opens them), and how it was verified.  Every field a writer chose is shown through
``safe_text``; a very long text shows its first :data:`TEXT_PREFIX` characters at once and the rest
on "Show all", so selecting a 1 MB message does not stall the GUI thread.  GUI thread only.
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

# The detail pane shows at most this much of a record's text at first: escaping and laying out a
# 1 MB message takes a quarter of a second or more on the GUI thread (a single long line is laid out
# whole).  "Show all" shows the rest when the user asks for it.
TEXT_PREFIX = 100_000

# What a record is, in words (never the format's PUT, DEL or NOTE).
KIND_WORDS = {"PUT": "a value", "DEL": "forgotten", "NOTE": "a note", "ERASED": "erased"}

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
    thread_requested = Signal(bytes)  # show this message in its conversation
    restore_requested = Signal(bytes)  # write a forgotten record again

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
        self.more_row = QWidget()
        more = QHBoxLayout(self.more_row)
        more.setContentsMargins(0, 0, 0, 0)
        self.more_label = QLabel("")
        self.more_label.setObjectName("Muted")
        self.more_button = QPushButton("Show all")
        self.more_button.setToolTip("Show the whole text (a very long text takes a moment to lay out)")
        self.more_button.clicked.connect(self.show_all_text)
        more.addWidget(self.more_label, 1)
        more.addWidget(self.more_button)
        self.more_row.hide()
        lay.addWidget(self.more_row)
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
        for name in ("Type", "Key", "Conversation", "Written by", "Compartment", "Time", "Signature", "Record id",
                     "Status"):
            self.fields[name] = plain_label()
            form.addRow(name, self.fields[name])
        lay.addLayout(form)
        self.sources_box = QVBoxLayout()
        self.sources_title = QLabel("Why does the agent believe this?")
        self.sources_title.setObjectName("Muted")
        lay.addWidget(self.sources_title)
        lay.addLayout(self.sources_box)
        row = QHBoxLayout()
        self.thread_button = QPushButton("Open in its conversation")
        self.thread_button.setObjectName("Primary")
        self.thread_button.setToolTip("Show this message in its thread, with the messages around it")
        self.thread_button.clicked.connect(lambda: self._record and self.thread_requested.emit(self._record.id))
        row.addWidget(self.thread_button)
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
        self.restore_button = QPushButton("Restore")
        self.restore_button.setToolTip("Write it again as a new record: your agents see it again (the forgotten one "
                                       "stays in the history)")
        self.restore_button.clicked.connect(lambda: self._record and self.restore_requested.emit(self._record.id))
        row.addWidget(self.forget_button)
        row.addWidget(self.restore_button)
        row.addWidget(self.erase_button)
        row.addStretch(1)
        lay.addLayout(row)
        lay.addStretch(1)
        self._record: RecordView | None = None
        self.show_record(None)

    @property
    def record(self) -> RecordView | None:
        return self._record

    @property
    def truncated(self) -> bool:
        """Only the first TEXT_PREFIX characters of the record's text are shown."""
        return not self.more_row.isHidden()

    def show_all_text(self) -> None:
        if self._record is not None and self._record.text:
            self.text.setPlainText(safe_text(self._record.text))
        self.more_row.hide()

    def show_record(self, v: RecordView | None) -> None:
        self._record = v
        while self.sources_box.count():
            item = self.sources_box.takeAt(0)
            if item.widget() is not None:
                item.widget().deleteLater()
        self.copy_button.setEnabled(v is not None and bool(v.text))
        actionable = v is not None and v.valid and not v.erased and v.kind_name in ("PUT", "NOTE")
        hidden = bool(v is not None and v.hidden)
        self.forget_button.setVisible(not hidden)
        self.forget_button.setEnabled(actionable and not hidden)
        self.restore_button.setVisible(hidden and actionable)
        self.erase_button.setEnabled(actionable)
        self.thread_button.setVisible(bool(v is not None and v.conversation and v.type != "conversation"))
        name = safe_text((v.text if v is not None else "") or "", 40, single_line=True)
        self.forget_button.setAccessibleName(f"forget “{name}”")
        self.restore_button.setAccessibleName(f"restore “{name}”")
        self.erase_button.setAccessibleName(f"erase “{name}” permanently")
        self.more_row.hide()
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
        kind = KIND_WORDS.get(v.kind_name, "record")
        self.heading.setText(safe_text(f"{(v.type or kind).capitalize()}"
                                       + (f" by {v.role}" if v.role else ""), 80, single_line=True))
        if v.text and len(v.text) > TEXT_PREFIX:
            self.text.setPlainText(safe_text(v.text[:TEXT_PREFIX]))
            self.more_label.setText(f"Showing the first {TEXT_PREFIX:,} of {len(v.text):,} characters.")
            self.more_row.show()
        else:
            self.text.setPlainText(safe_text(v.text) if v.text else ("(erased)" if v.erased else ""))
        self.claimed.set(v.class_label)
        self.effective.set(v.effective_label)
        self.meaning.setText(MEANING.get(v.effective_label, ""))
        # Everything a writer chose is shown through safe_text: a record's type is any text an
        # agent wrote (readers accept any type, spec §7.2), so are its key, compartment and writer.
        self.fields["Type"].setText(safe_text(f"{v.type or KIND_WORDS.get(v.kind_name, 'record')}"
                                              f" ({KIND_WORDS.get(v.kind_name, 'record')})", 140, single_line=True))
        self.fields["Key"].setText(safe_text(v.key, 600, single_line=True) if v.key else "-")
        self.fields["Conversation"].setText(safe_text(v.conversation, 200, single_line=True) if v.conversation else "-")
        self.fields["Written by"].setText(safe_text(f"{v.writer} ({v.writer_kind})", 120, single_line=True))
        self.fields["Compartment"].setText(safe_text(v.compartment, 120, single_line=True))
        self.fields["Time"].setText(fmt_time(v.ts) or "-")
        self.fields["Signature"].setText("verified (Ed25519)" if v.verified == "signature"
                                         else "vouched for by one of your devices")
        self.fields["Signature"].setToolTip(
            "its writer's certified key signed it" if v.verified == "signature"
            else "one of your devices checked its writer's signature and signed it again when it tidied up the "
                 "vault's files")
        hexid = v.id.hex()
        self.fields["Record id"].setText("\n".join(hexid[i:i + 16] for i in range(0, 64, 16)))
        self.fields["Record id"].setToolTip(hexid)
        status = "hidden (forgotten)" if v.hidden else ("rejected: " + (v.reason or "") if not v.valid else "current")
        self.fields["Status"].setText(safe_text(status, 400))
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
