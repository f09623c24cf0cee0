"""Conversations: memory as people browse it in ChatGPT, Claude or Signal: a list of conversations
(title, last activity, who took part or where it came from, how many messages, compartment), newest
first, filtered by text, compartment and writer; the selected one as a thread
(:class:`~camillo_desktop.views.thread.ThreadView`).  Without words or a writer to match, the list
is read a page at a time as it is scrolled (the newest conversations of a million records at once)
and counted in the vault's index; with them it is computed whole.

Any message shown elsewhere (the timeline, search results, a fact's provenance, an inbox item's
source) opens here through the main window's ``open_in_thread``: the view finds its conversation,
shows it around that message, scrolled to it and highlighted (selected in the list when that part
of the list was read).  An empty vault says how to bring
history in, with the import buttons.  GUI thread only; the reads run on the vault worker.
"""

from __future__ import annotations

from typing import Any

from camillo import ConversationInfo
from PySide6.QtCore import QModelIndex, Qt, QTimer
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QLineEdit,
    QPushButton,
    QSplitter,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from ..models import PAGE, Column, ColumnSpec, PagedTableModel, Sizing, fmt_time, fmt_when
from ..text import safe_text
from ..widgets import muted_label
from .base import Table, View
from .thread import ThreadView


def who(c: ConversationInfo) -> str:
    """Where a conversation came from, or who wrote in it."""
    if c.source:
        return c.source
    return ", ".join(c.writers[:3]) + (f" +{len(c.writers) - 3}" if len(c.writers) > 3 else "")


class ConversationColumn(Column):  # a row: a camillo.ConversationInfo; titles and names are untrusted
    TITLE = ColumnSpec("Conversation", lambda c: c.title, limit=160, sizing=Sizing.STRETCH,
                       tooltip=lambda c: safe_text(c.title, 400))
    LAST = ColumnSpec("Last", lambda c: fmt_when(c.last), width=84, tooltip=lambda c: f"last activity {fmt_time(c.last)}")
    WHO = ColumnSpec("From", who, limit=60, width=96)
    MESSAGES = ColumnSpec("Msgs", lambda c: f"{c.messages:,}", width=52,
                          align=Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter,
                          accessible=lambda c: f"{c.messages} messages")
    COMPARTMENT = ColumnSpec("Compartment", lambda c: c.compartment, limit=60, width=110)


EMPTY_TEXT = ("No conversations yet. Bring your history in from ChatGPT or Claude (Vault \u2192 Import); your "
              "agents' conversations appear here as they write them.")


class ConversationsView(View):
    name = "conversations"
    title = "Conversations"
    icon = "conversations"
    shortcut = "Ctrl+1"
    depends_on = ("timeline",)  # messages came or went

    def __init__(self, client: Any, window: Any) -> None:
        super().__init__(client, window)
        self.subtitle.setText("Every conversation you and your agents had, newest first. Only \u201cuser\u201d "
                              "authority binds; everything else is information.")
        self.count = QLabel("")
        self.count.setObjectName("Muted")
        self.header.insertWidget(1, self.count)
        filters = QHBoxLayout()
        self.filter = QLineEdit()
        self.filter.setPlaceholderText("Filter by words in the title or the messages")
        self.filter.setClearButtonEnabled(True)
        self.filter.setAccessibleName("filter conversations by text")
        self._typing = QTimer(self)
        self._typing.setSingleShot(True)
        self._typing.setInterval(300)
        self._typing.timeout.connect(self.load)
        self.filter.textChanged.connect(lambda _t: self._typing.start())
        self.compartment = QComboBox()
        self.compartment.setAccessibleName("compartment filter")
        self.compartment.addItem("All compartments", None)
        self.agent = QComboBox()
        self.agent.setAccessibleName("filter by who wrote")
        self.agent.addItem("Anyone", None)
        self.compartment.currentIndexChanged.connect(lambda _i: self.load())
        self.agent.currentIndexChanged.connect(lambda _i: self.load())
        self.new_compartment = QToolButton()
        self.new_compartment.setText("New\u2026")
        self.new_compartment.setToolTip("Create a new compartment (for example travel)")
        self.new_compartment.setAccessibleName("create a new compartment")
        self.new_compartment.clicked.connect(self.create_compartment)
        filters.addWidget(self.filter, 1)
        filters.addWidget(self.compartment)
        filters.addWidget(self.new_compartment)
        filters.addWidget(self.agent)
        self.root.addLayout(filters)

        self.model = PagedTableModel(ConversationColumn, client, self)
        self.table = Table(self.model, name="conversations", dense=True, grid=False)
        self.table.selectionModel().currentRowChanged.connect(self._selected)

        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(10, 0, 0, 0)
        head = QHBoxLayout()
        self.thread_title = QLabel("")
        self.thread_title.setObjectName("ViewTitle")
        self.thread_title.setTextFormat(Qt.TextFormat.PlainText)
        self.thread_title.setWordWrap(True)
        head.addWidget(self.thread_title, 1)
        self.show_hidden = QCheckBox("Show forgotten")
        self.show_hidden.setToolTip("Include messages hidden by \u201cforget\u201d, marked, with Restore")
        self.show_hidden.toggled.connect(self._hidden_toggled)
        head.addWidget(self.show_hidden)
        rl.addLayout(head)
        self.thread_meta = muted_label("")
        rl.addWidget(self.thread_meta)
        self.thread = ThreadView(client, self)
        self.thread.settled.connect(self.loaded)  # ready: every bubble of its first page is in
        self.thread.status_message.connect(self.status_message)
        self.thread.restore_requested.connect(lambda rid: self.window_.restore_record(rid))
        rl.addWidget(self.thread, 1)

        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.addWidget(self.table)
        self.splitter.addWidget(right)
        self.splitter.setStretchFactor(0, 2)
        self.splitter.setStretchFactor(1, 3)
        self.splitter.setSizes([500, 560])

        self.empty = QWidget()
        el = QVBoxLayout(self.empty)
        el.addStretch(1)
        self.empty_text = muted_label(EMPTY_TEXT)
        self.empty_text.setAlignment(Qt.AlignmentFlag.AlignCenter)
        el.addWidget(self.empty_text)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        self.import_buttons: list[QPushButton] = []
        for kind, label in (("chatgpt", "Import a ChatGPT export\u2026"), ("claude", "Import a Claude export\u2026")):
            b = QPushButton(label)
            b.setObjectName("Primary")
            b.clicked.connect(lambda _=False, k=kind: self.window_.import_from(k))
            buttons.addWidget(b)
            self.import_buttons.append(b)
        buttons.addStretch(1)
        el.addLayout(buttons)
        el.addStretch(2)
        self.pages = QStackedWidget()
        self.pages.addWidget(self.splitter)
        self.pages.addWidget(self.empty)
        self.root.addWidget(self.pages, 1)
        self._open_record: bytes | None = None  # a message to show once the list is in
        self._writers: set[str] = set()

    # ---------------------------------------------------------------------------- the list

    def set_compartments(self, names: list[str]) -> None:
        current = self.compartment.currentData()
        self.compartment.blockSignals(True)
        self.compartment.clear()
        self.compartment.addItem("All compartments", None)
        for n in names:
            self.compartment.addItem(safe_text(n, 60, single_line=True), n)
        info = getattr(self.window_, "info", None) or {}
        self.new_compartment.setEnabled(not info.get("read_only") and not info.get("agent"))
        wanted = getattr(self, "_select_after", None) or current
        self._select_after = None
        self.compartment.setCurrentIndex(max(0, self.compartment.findData(wanted)))
        self.compartment.blockSignals(False)

    def create_compartment(self) -> None:
        """Ask for a name, then add the compartment (the vault refuses an existing, empty or reserved
        name, and says why); once added, every compartment picker shows it and this filter selects it."""
        name, ok = QInputDialog.getText(self, "New compartment",
                                        "Name of the new compartment (lower-case letters, digits and dashes, "
                                        "for example travel):")
        name = name.strip()
        if not ok or not name:
            return

        def done(_changes: Any) -> None:
            self._select_after = name

        self._select_after: str | None = None
        self.client.mutate(lambda ctx: ctx.vault.add_compartment(name), done, self.window_.show_error,
                           context=self, label="adding a compartment")

    def filters(self) -> dict[str, str]:
        out = {"text": self.filter.text().strip(), "compartment": self.compartment.currentData(),
               "agent": self.agent.currentData()}
        return {k: v for k, v in out.items() if v}

    def load(self) -> None:
        filters = self.filters()
        filtered = bool(filters)
        # without words or a writer to match, the list is read a page at a time (a million records:
        # the newest conversations first, at once); with them it is computed whole
        paged = "text" not in filters and "agent" not in filters

        def fetch(v: Any, offset: int, limit: int) -> list[ConversationInfo]:
            return v.conversations(offset=offset, limit=limit, **filters)

        def job(ctx: Any) -> tuple[list[ConversationInfo], list[ConversationInfo] | None]:
            found = fetch(ctx.vault, 0, PAGE) if paged else ctx.vault.conversations(**filters)
            return found, (ctx.vault.conversations(offset=0, limit=1) if filtered and not found else None)

        def done(result: tuple[list[ConversationInfo], list[ConversationInfo] | None]) -> None:
            found, unfiltered = result
            if paged:
                self.model.set_pages(fetch, found)
            else:
                self.model.set_rows(found)
            self._show_list(found, unfiltered, filtered=filtered)
            if paged and len(found) >= PAGE:  # more than a page: counted in the index, next
                self._count(filters.get("compartment"), filtered)

        self.client.submit(job, done, self.window_.show_error, context=self, label="loading conversations")

    def _count(self, compartment: str | None, filtered: bool) -> None:
        generation = self.model.generation

        def counted(n: int) -> None:
            if generation == self.model.generation:
                self.count.setText(f"{n:,} conversation{'s' if n != 1 else ''}" + (" match" if filtered else ""))

        self.client.submit(lambda ctx: ctx.vault.conversation_count(compartment=compartment), counted,
                           self.window_.show_error, context=self, label="counting conversations")

    def _show_list(self, found: list[ConversationInfo], unfiltered: list[ConversationInfo] | None, *,
                   filtered: bool) -> None:
        current = self.selected()
        key = (current.compartment, current.conversation) if current is not None else None
        if self._open_record is None and self.thread.key is not None:
            key = self.thread.key
        vault_empty = not found and (not filtered or unfiltered == [])
        self.pages.setCurrentWidget(self.empty if vault_empty else self.splitter)
        more = "+" if self.model.more else ""
        self.count.setText(f"{len(found):,}{more} conversation{'s' if len(found) != 1 else ''}"
                           + (" match" if filtered else ""))
        self._add_writers(found)
        if self._open_record is not None:
            rid, self._open_record = self._open_record, None
            self._open(rid)
            return
        row = next((i for i, c in enumerate(found) if (c.compartment, c.conversation) == key), 0 if found else -1)
        if row >= 0:
            same = key is not None and self.thread.key == key and (found[row].compartment, found[row].conversation) == key
            self.table.selectionModel().blockSignals(True)
            self.table.selectRow(row)
            self.table.selectionModel().blockSignals(False)
            if same:
                self._describe(found[row])
                self.thread.reload()
            else:
                self._show_thread(found[row])
        else:
            self.thread.clear()
            self.thread_title.setText("No conversation matches" if filtered else "")
            self.thread_meta.setText("")
            self.loaded.emit()

    def _add_writers(self, found: list[ConversationInfo]) -> None:
        names = {n for c in found for n in (*c.writers, c.source) if n} - self._writers
        if not names:
            return
        self._writers |= names
        current = self.agent.currentData()
        self.agent.blockSignals(True)
        self.agent.clear()
        self.agent.addItem("Anyone", None)
        for n in sorted(self._writers, key=str.lower):
            self.agent.addItem(safe_text(n, 60, single_line=True), n)
        self.agent.setCurrentIndex(max(0, self.agent.findData(current)))
        self.agent.blockSignals(False)

    def selected(self) -> ConversationInfo | None:
        idx = self.table.currentIndex()
        return self.model.row(idx.row()) if idx.isValid() else None

    def _selected(self, current: QModelIndex, _previous: QModelIndex) -> None:
        c = self.model.row(current.row()) if current.isValid() else None
        if c is not None and self.thread.key != (c.compartment, c.conversation):
            self._show_thread(c)

    def _describe(self, c: ConversationInfo) -> None:
        self.thread_title.setText(safe_text(c.title, 200, single_line=True))
        span = fmt_time(c.first) + (f" \u2013 {fmt_time(c.last)}" if c.last and c.last != c.first else "")
        self.thread_meta.setText(safe_text(f"{c.messages:,} message{'s' if c.messages != 1 else ''} \u00b7 {span} "
                                           f"\u00b7 {c.compartment} \u00b7 {who(c)}", 400, single_line=True))

    def _show_thread(self, c: ConversationInfo, focus: bytes | None = None) -> None:
        self._describe(c)
        self.thread.show_conversation(c.conversation, c.compartment, focus, include_hidden=self.show_hidden.isChecked())

    def _hidden_toggled(self, on: bool) -> None:
        if self.thread.key is not None:
            self.thread.show_conversation(self.thread.key[1], self.thread.key[0], self.thread.focus_id,
                                          include_hidden=on)

    # ---------------------------------------------------------------------------- from elsewhere

    def show_argument(self, argument: Any) -> None:
        if isinstance(argument, bytes):
            if self.model.rowCount() or not self._stale:
                self._open(argument)
            else:
                self._open_record = argument

    def open_record(self, rid: bytes) -> None:
        """Show the message ``rid`` in its thread, scrolled to and highlighted."""
        self._open(rid)

    def _open(self, rid: bytes) -> None:
        filters = self.filters()

        def job(ctx: Any) -> tuple[Any, ConversationInfo | None]:
            v = ctx.vault.record(rid)
            info = ctx.vault.conversation(v.conversation, v.compartment) if v is not None and v.conversation else None
            return v, info

        def done(result: tuple[Any, ConversationInfo | None]) -> None:
            v, info = result
            if v is None or not v.conversation or info is None:
                self.status_message.emit("This record is not part of a conversation.")
                self.loaded.emit()
                return
            key = (v.compartment, v.conversation)
            rows = self.model.rows()  # as read by now (a load asked for before this ran first, on the worker)
            row = next((i for i, c in enumerate(rows) if (c.compartment, c.conversation) == key), -1)
            if row < 0 and filters:
                # Hidden by the filters: clear them (the list reloads, then shows the message).
                self._open_record = rid
                for w in (self.filter, self.compartment, self.agent):
                    w.blockSignals(True)
                self.filter.clear()
                self.compartment.setCurrentIndex(0)
                self.agent.setCurrentIndex(0)
                for w in (self.filter, self.compartment, self.agent):
                    w.blockSignals(False)
                self.load()
                return
            if v.hidden and not self.show_hidden.isChecked():
                self.show_hidden.blockSignals(True)
                self.show_hidden.setChecked(True)
                self.show_hidden.blockSignals(False)
            self.table.selectionModel().blockSignals(True)
            if row >= 0:  # in the rows read so far: selected there
                self.table.selectRow(row)
                self.table.scrollTo(self.model.index(row, 0))
            else:  # further down a long list: shown without reading the list to it
                self.table.clearSelection()
                self.table.setCurrentIndex(QModelIndex())
            self.table.selectionModel().blockSignals(False)
            self._show_thread(info, focus=rid)

        self.client.submit(job, done, self.window_.show_error, context=self, label="opening a conversation")

    def clear(self) -> None:
        super().clear()
        self.model.set_rows([])
        self.thread.clear()
        self.thread_title.setText("")
        self.thread_meta.setText("")
        self._writers = set()
        self._open_record = None
