"""One conversation as a thread: a bubble per message, loaded a page at a time.

The user's words on the right, the assistant's on the left; tool, system and web content (and
anything else an outside source wrote) full width, collapsed and marked until opened.  Each bubble
shows its time, its writer and its authority badge, and its whole text: Markdown as plain rich text
(:mod:`camillo_desktop.markdown`: nothing the record holds is interpreted as HTML, images are never
loaded, links open only on a click), control and bidirectional characters made visible.  A message
longer than :data:`BUBBLE_LIMIT` characters shows that much and offers the rest in a reader window
(a plain-text editor lays out megabytes without stalling).  A message's attachments show as chips
under it: name, size and "Save…" (the file's exact bytes, verified), and a thumbnail for an
image of at most :data:`THUMBNAIL_BYTES`.

Only the message ids of the conversation are fetched whole; messages are read and rendered on the
vault worker a page (:data:`PAGE`) at a time, around the message asked for (or the latest), and
further pages as the person scrolls towards either end; a page's bubbles are made a few
(:data:`CHUNK`) per turn of the event loop, nearest first, so that no turn stalls the window.  At
most :data:`WINDOW` bubbles exist at once: pages far from what is shown are dropped, and the
scroll position is kept on the message in view while pages come and go.  A message opened from elsewhere is scrolled to and highlighted.

GUI thread only; :func:`prepare` runs on the vault worker.
"""

from __future__ import annotations

import html
import os
import tempfile
from dataclasses import dataclass
from typing import Any

from camillo import RecordView, VaultError
from PySide6.QtCore import (
    QBuffer,
    QByteArray,
    QCoreApplication,
    QEvent,
    QIODevice,
    QObject,
    QSize,
    Qt,
    QTimer,
    QUrl,
    Signal,
)
from PySide6.QtGui import QDesktopServices, QImageReader, QKeySequence, QPixmap, QShortcut
from PySide6.QtWidgets import (
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from .. import theme
from ..guard import qt_virtual
from ..markdown import LINK_SCHEMES, Colors, render
from ..models import fmt_time
from ..text import safe_text
from ..widgets import Badge

PAGE = 40  # messages read and rendered per job
CHUNK = 3  # bubbles made per turn of the event loop (each turn stays short)
WINDOW = 120  # bubbles alive at most
EDGE = 600  # pixels from an end of the scroll range at which the next page is fetched
BUBBLE_LIMIT = 100_000  # characters rendered in a bubble; the rest in the reader window
THUMBNAIL_BYTES = 4 * 1024 * 1024  # an image attachment up to this size is shown as a thumbnail
THUMBNAIL_SIZE = (240, 160)  # at most, in pixels
THUMBNAIL_MAX_PIXELS = 40_000_000  # an image claiming more is not decoded (a decompression bomb)
THUMBNAIL_ALLOCATION_MB = 64  # what Qt may allocate to decode one


def thumbnail(data: bytes) -> QPixmap | None:
    """A thumbnail of an image attachment, decoded with limits: its header must name a format Qt
    reads and dimensions of at most THUMBNAIL_MAX_PIXELS, decoding may allocate at most
    THUMBNAIL_ALLOCATION_MB and is scaled while decoding where the format allows.  None for anything
    else (a truncated, corrupt or hostile image): the chip then shows the name alone."""
    buffer = QBuffer()
    buffer.setData(QByteArray(data))
    if not buffer.open(QIODevice.OpenModeFlag.ReadOnly):
        return None
    reader = QImageReader(buffer)
    reader.setAllocationLimit(THUMBNAIL_ALLOCATION_MB)
    reader.setDecideFormatFromContent(True)
    if not reader.canRead():
        return None
    size = reader.size()
    if not size.isValid() or size.width() <= 0 or size.height() <= 0 \
            or size.width() * size.height() > THUMBNAIL_MAX_PIXELS:
        return None
    reader.setScaledSize(size.scaled(QSize(*THUMBNAIL_SIZE), Qt.AspectRatioMode.KeepAspectRatio))
    image = reader.read()
    if image.isNull():
        return None
    return QPixmap.fromImage(image)

USER_ROLES = frozenset({"user", "human"})
ASSISTANT_ROLES = frozenset({"assistant", "model", "agent", "ai"})
OTHER_LABELS = {"tool": "Tool output", "function": "Tool output", "system": "System message", "web": "Web content",
                "developer": "Instructions to the assistant"}


@dataclass(frozen=True)
class Message:
    """A message ready to show (made on the worker by :func:`prepare`)."""

    record: RecordView
    side: str  # user | assistant | other (collapsed)
    label: str  # who speaks, in words: "You", "Assistant", "Tool output" ...
    html: str  # its text rendered (its first BUBBLE_LIMIT characters)
    truncated: bool  # the text is longer than what html shows
    attachments: tuple[Attachment, ...] = ()


@dataclass(frozen=True)
class Attachment:
    """A file attached to a message: its record (name, media type, size) and, for an image of at
    most THUMBNAIL_BYTES, its bytes (decoded to a thumbnail on the GUI thread)."""

    record: RecordView
    image: bytes | None = None

    @property
    def name(self) -> str:
        return str(self.record.value.get("name") or "attachment")

    @property
    def size(self) -> int:
        size = self.record.value.get("size")
        return size if isinstance(size, int) else 0


def side_of(v: RecordView) -> tuple[str, str]:
    """(side, label) of a message: who speaks, and whether it is shown collapsed."""
    role = (v.role or "").lower()
    if role in USER_ROLES and v.effective_label != "external":
        return "user", "You"
    if role in ASSISTANT_ROLES and v.effective_label != "external":
        model = v.meta.get("model")
        return "assistant", "Assistant" + (f" ({model})" if isinstance(model, str) and model else "")
    if role in OTHER_LABELS:
        return "other", OTHER_LABELS[role]
    if v.effective_label == "external":
        return "other", "Content from an outside source"
    return "other", (role.capitalize() if role else (v.type or "record").capitalize())


def prepare(vault: Any, ids: list[bytes], colors: Colors) -> list[Message]:
    """On the worker: read these messages and their attachments (an image's bytes when small), and
    render each message (only its first BUBBLE_LIMIT characters)."""
    records = vault.records(ids)
    files = vault.attachments_of(ids)
    out = []
    for v in records:
        side, label = side_of(v)
        text = v.text or ("(erased)" if v.erased else "")
        attached = tuple(Attachment(a, image_bytes(vault, a)) for a in files.get(v.id, ()))
        out.append(Message(v, side, label, render(text[:BUBBLE_LIMIT], colors), len(text) > BUBBLE_LIMIT,
                           attached))
    return out


def image_bytes(vault: Any, a: RecordView) -> bytes | None:
    """On the worker: an image attachment's bytes, if it is at most THUMBNAIL_BYTES (else None; a
    file that does not read back whole and verified is shown without its thumbnail)."""
    media, size = a.value.get("media_type"), a.value.get("size")
    if not (isinstance(media, str) and media.startswith("image/") and isinstance(size, int) and size <= THUMBNAIL_BYTES):
        return None
    with tempfile.TemporaryDirectory(prefix="camillo-thumb-") as folder:
        path = os.path.join(folder, "image")
        try:
            vault.save_attachment(a.id, path)
            with open(path, "rb") as f:
                return f.read()
        except (VaultError, OSError):
            return None


def fmt_size(n: int) -> str:
    """A file's size for people: 812 bytes, 3.4 KB, 1.2 MB."""
    size, unit = float(n), "bytes"
    for bigger in ("KB", "MB", "GB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{n:,} bytes" if unit == "bytes" else f"{size:,.1f} {unit}"


def markdown_colors() -> Colors:
    c = theme.current()
    return Colors(code_bg=c["code_bg"], muted=c["muted"], link=c["link"], border=c["border"])


def open_link(url: str) -> None:
    """A link the person clicked: opened in the browser (http, https and mailto only)."""
    if url.lower().startswith(LINK_SCHEMES):
        QDesktopServices.openUrl(QUrl(url))


class MessageText(QLabel):
    """A message's text, word-wrapped: its height for a width is laid out once and remembered (a
    thread lays out every bubble each time a few come in; rich text layout is the costly part)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._heights: dict[int, int] = {}

    def show_html(self, markup: str) -> None:
        """Our own HTML of the message's escaped text (:func:`camillo_desktop.markdown.render`)."""
        self._heights.clear()
        self.setText(markup)

    @qt_virtual(-1)
    def heightForWidth(self, width: int) -> int:
        height = self._heights.get(width)
        if height is None:
            if len(self._heights) > 8:
                self._heights.clear()
            height = self._heights[width] = super().heightForWidth(width)
        return height

    @qt_virtual()
    def changeEvent(self, event: QEvent) -> None:
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self._heights.clear()
        super().changeEvent(event)


class ThreadColumn(QWidget):
    """The widget the thread's scroll area holds.  Its minimum height is 0: the scroll area then
    sizes it by its height for the view's width (by default it would also keep the height the
    bubbles need at the narrowest width, leaving blank space to scroll through at any wider one)."""

    @qt_virtual(factory=QSize)
    def minimumSizeHint(self) -> QSize:
        return QSize(super().minimumSizeHint().width(), 0)


class Bubble(QFrame):
    """One message: header (who, when, authority), then its text; collapsed for outside content."""

    link_hovered = Signal(str)
    read_all = Signal(object)  # the Message, to show whole in the reader
    restore = Signal(bytes)  # a forgotten message: write it again
    save = Signal(object)  # an Attachment, to save to a file the person chooses

    def __init__(self, message: Message, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.message = message
        v = message.record
        self.setObjectName("Bubble")
        self.setProperty("side", message.side)
        self.setProperty("forgotten", bool(v.hidden))
        self.setProperty("highlight", False)
        self.highlighted = False
        self.setFrameShape(QFrame.Shape.NoFrame)
        lay = QVBoxLayout(self)
        lay.setContentsMargins(12, 8, 12, 8)
        lay.setSpacing(4)
        head = QHBoxLayout()
        head.setSpacing(6)
        # Who, when and the authority badge in one label (a bubble is made of few widgets: a
        # conversation makes hundreds of them, and each widget costs its style's time).
        color = theme.AUTHORITY_COLORS.get(v.effective_label, theme.AUTHORITY_COLORS["-"])
        badge = (f'&nbsp;<span style="background:{color[0]}; color:{color[1]}; font-weight:600;">'
                 f"&nbsp;{html.escape(v.effective_label)}&nbsp;</span>")
        meaning = "binds as your own word" if v.effective_label == "user" else "information, not an instruction"
        self.head = QLabel(f"{html.escape(safe_text(f'{message.label} · {v.writer}', 120, single_line=True))}"
                           f" &nbsp;·&nbsp; {html.escape(fmt_time(v.ts))}{badge}")
        self.head.setTextFormat(Qt.TextFormat.RichText)  # our own markup of escaped text
        self.head.setObjectName("BubbleHead")
        self.head.setToolTip(f"authority {v.effective_label}: {meaning}")
        self.head.setAccessibleName(safe_text(f"{message.label}, {v.writer}, {fmt_time(v.ts)}, authority "
                                              f"{v.effective_label}", 200, single_line=True))
        head.addWidget(self.head)
        head.addStretch(1)
        if v.hidden:
            head.addWidget(Badge("forgotten", theme.STATUS_COLORS["deleted"]))
            undo = QToolButton()
            undo.setText("Restore")
            undo.setAccessibleName("restore this forgotten message")
            undo.setToolTip("Write it again: it comes back to your agents (the forgotten copy stays in the history)")
            undo.clicked.connect(lambda: self.restore.emit(v.id))
            head.addWidget(undo)
        self.toggle: QToolButton | None = None
        if message.side == "other":
            self.toggle = QToolButton()
            self.toggle.setCheckable(True)
            self.toggle.setText("Show")
            self.toggle.setAccessibleName(f"show the {message.label.lower()}")
            self.toggle.toggled.connect(self._toggled)
            head.addWidget(self.toggle)
        lay.addLayout(head)
        self.body = MessageText()
        self.body.setTextFormat(Qt.TextFormat.RichText)  # our own HTML of escaped text (markdown.render)
        self.body.show_html(message.html)
        self.body.setWordWrap(True)
        self.body.setOpenExternalLinks(False)
        self.body.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        self.body.linkActivated.connect(open_link)
        self.body.linkHovered.connect(self.link_hovered)
        self.body.setAccessibleName(f"message from {message.label}")
        policy = QSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        policy.setHeightForWidth(True)  # as tall as its text needs at the bubble's width: never clipped
        self.body.setSizePolicy(policy)
        lay.addWidget(self.body)
        self.more: QPushButton | None = None
        if message.truncated:
            self.more = QPushButton(f"Read the whole message ({len(v.text):,} characters)")
            self.more.clicked.connect(lambda: self.read_all.emit(self.message))
            lay.addWidget(self.more)
        for a in message.attachments:
            lay.addWidget(self._chip(a))
        if self.toggle is not None:
            self.body.hide()
            if self.more is not None:
                self.more.hide()

    def _chip(self, a: Attachment) -> QWidget:
        """An attachment: its thumbnail (a small image), its name and size, and Save…"""
        chip = QFrame()
        chip.setObjectName("Chip")
        lay = QVBoxLayout(chip)
        lay.setContentsMargins(8, 4, 8, 4)
        if a.image is not None:
            pixmap = thumbnail(a.image)
            if pixmap is not None:
                thumb = QLabel()
                thumb.setPixmap(pixmap)
                thumb.setAccessibleName(safe_text(f"picture {a.name}", 200, single_line=True))
                lay.addWidget(thumb)
        row = QHBoxLayout()
        name = QLabel(safe_text(f"\U0001f4ce {a.name}  \u00b7  {fmt_size(a.size)}", 200, single_line=True))
        name.setTextFormat(Qt.TextFormat.PlainText)
        row.addWidget(name, 1)
        save = QToolButton()
        save.setText("Save\u2026")
        save.setAccessibleName(safe_text(f"save the attachment {a.name}", 200, single_line=True))
        save.clicked.connect(lambda: self.save.emit(a))
        row.addWidget(save)
        lay.addLayout(row)
        return chip

    def _toggled(self, shown: bool) -> None:
        self.body.setVisible(shown)
        if self.more is not None:
            self.more.setVisible(shown)
        if self.toggle is not None:
            self.toggle.setText("Hide" if shown else "Show")
            self.toggle.setAccessibleName(f"{'hide' if shown else 'show'} the {self.message.label.lower()}")

    @property
    def collapsed(self) -> bool:
        return self.toggle is not None and not self.toggle.isChecked()

    def expand(self) -> None:
        if self.toggle is not None:
            self.toggle.setChecked(True)

    def set_highlight(self, on: bool) -> None:
        """The message asked for: a strong border (the application's style sheet, by property; a
        style sheet per bubble would cost milliseconds each)."""
        changed = bool(self.property("highlight")) != on
        self.setProperty("highlight", on)
        self.highlighted = on
        if changed:
            theme.restyle(self)


class ReaderDialog(QWidget):
    """A message too long for a bubble, whole, as plain text (escaped)."""

    def __init__(self, message: Message, parent: QWidget | None = None) -> None:
        super().__init__(parent, Qt.WindowType.Window)
        self.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        self.setWindowTitle(safe_text(f"{message.label}, {fmt_time(message.record.ts)}", 120, single_line=True))
        self.resize(900, 700)
        lay = QVBoxLayout(self)
        self.text = QPlainTextEdit()
        self.text.setReadOnly(True)
        self.text.setPlainText(safe_text(message.record.text))
        self.text.setAccessibleName("the whole message")
        lay.addWidget(self.text)


class ThreadView(QWidget):
    """The messages of one conversation (see the module docstring)."""

    shown = Signal()  # a conversation's first bubbles are on screen, scrolled to the message asked for
    settled = Signal()  # every bubble of the pages read so far is in
    status_message = Signal(str)
    restore_requested = Signal(bytes)

    def __init__(self, client: Any, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.client = client
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        self.area = QScrollArea()
        self.area.setWidgetResizable(True)
        self.area.setFrameShape(QFrame.Shape.NoFrame)
        self.area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.area.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.area.setAccessibleName("conversation thread")
        self.container = ThreadColumn()
        self.container.setObjectName("Thread")
        self.column = QVBoxLayout(self.container)
        self.column.setContentsMargins(8, 8, 8, 8)
        self.column.setSpacing(10)
        self.top = QLabel("")
        self.top.setObjectName("Muted")
        self.top.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.bottom = QLabel("")
        self.bottom.setObjectName("Muted")
        self.bottom.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.column.addWidget(self.top)
        self.column.addWidget(self.bottom)
        self.column.addStretch(1)
        self.area.setWidget(self.container)
        lay.addWidget(self.area)
        self.area.verticalScrollBar().valueChanged.connect(lambda _v: self._near_an_end())
        self.area.viewport().installEventFilter(self)
        for keys, slot in ((QKeySequence.StandardKey.MoveToEndOfDocument, self.go_to_end),
                           (QKeySequence.StandardKey.MoveToStartOfDocument, self.go_to_start)):
            sc = QShortcut(QKeySequence(keys), self.area)
            sc.setContext(Qt.ShortcutContext.WidgetWithChildrenShortcut)
            sc.activated.connect(slot)
        self.ids: list[bytes] = []
        self.lo = self.hi = 0  # the bubbles shown are messages ids[lo:hi]
        self.bubbles: list[Bubble] = []
        self.key: tuple[str, str] | None = None  # (compartment, conversation)
        self.include_hidden = False
        self.focus_id: bytes | None = None
        self._token = 0  # a newer conversation (or reload) makes older answers stale
        self._loading = False  # a page is being read or put in
        self._queue: list[tuple[list[Message], bool]] = []  # messages to put in: (messages, at the top)
        self._opening = False  # the next bubbles put in are the first of a conversation
        self._stick_bottom = False  # opened at the latest: stay at the end while earlier ones come in
        self._keep_top = True  # past WINDOW bubbles, drop those at the bottom (else at the top)

    # ---------------------------------------------------------------------------- opening

    def show_conversation(self, conversation: str, compartment: str, focus: bytes | None = None, *,
                          include_hidden: bool | None = None) -> None:
        """Show ``conversation``: around the message ``focus`` (scrolled to and highlighted), else its latest."""
        if include_hidden is not None:
            self.include_hidden = include_hidden
        self.key = (compartment, conversation)
        self._token += 1
        token, hidden, colors = self._token, self.include_hidden, markdown_colors()
        self._loading = True

        def job(ctx: Any) -> tuple[list[bytes], int, int, list[Message]]:
            ids = ctx.vault.conversation_ids(conversation, compartment, include_hidden=hidden)
            if focus is not None and focus in ids:
                at = ids.index(focus)
                lo = max(0, min(at - PAGE // 2, len(ids) - PAGE))
            else:
                lo = max(0, len(ids) - PAGE)
            hi = min(len(ids), lo + PAGE)
            return ids, lo, hi, prepare(ctx.vault, ids[lo:hi], colors)

        def done(result: tuple[list[bytes], int, int, list[Message]]) -> None:
            if token != self._token:
                return
            ids, lo, _hi, messages = result
            self._clear_bubbles()
            self.ids = ids
            self.focus_id = focus if focus in ids else None
            at = ids.index(self.focus_id) - lo if self.focus_id is not None else len(messages) - 1
            at = max(0, at)
            # The message asked for (or the latest) first, then its neighbours a few at a time, the
            # view kept on it while they come in.
            self.lo = self.hi = lo + at
            self._stick_bottom = self.focus_id is None
            self._opening = True
            self._queue = [(messages[at:], False), (messages[:at], True)]
            self._drain()

        self.client.submit(job, done, self._failed, context=self, label="opening a conversation")

    def _failed(self, exc: BaseException) -> None:
        self._loading = False
        self._queue = []
        self.status_message.emit(safe_text(str(exc), 300, single_line=True))

    def _opened(self) -> None:
        """The first bubbles are in: scroll to the message asked for (or the end) and say so."""
        self._opening = False
        self._relayout()
        target = self.bubble_of(self.focus_id) if self.focus_id else None
        bar = self.area.verticalScrollBar()
        if target is not None:
            target.expand()
            target.set_highlight(True)
            self._relayout()
            y = target.holder.y()
            bar.setValue(max(0, y - max(0, (self.area.viewport().height() - target.holder.height()) // 3)))
        else:
            bar.setValue(bar.maximum())
        self.shown.emit()

    def clear(self) -> None:
        self._token += 1
        self._loading = False
        self._queue = []
        self._clear_bubbles()
        self.ids, self.lo, self.hi, self.key, self.focus_id = [], 0, 0, None, None
        self._update_ends()

    def _clear_bubbles(self) -> None:
        for b in self.bubbles:
            self.column.removeWidget(b.holder)
            b.holder.deleteLater()
        self.bubbles = []

    # ---------------------------------------------------------------------------- pages

    def _drain(self) -> None:
        """Put the next CHUNK bubbles of the queue in (one turn of the event loop each, so that no
        turn takes long), keeping the message in view where it is; once the queue is empty, drop
        far pages and look whether the view is near an end again."""
        token = self._token
        while self._queue and not self._queue[0][0]:
            self._queue.pop(0)
        if not self._queue:
            self._loading = False
            self._stick_bottom = False
            self._evict()
            self._update_ends()
            self.settled.emit()
            QTimer.singleShot(0, self._near_an_end)
            return
        messages, at_top = self._queue[0]
        if at_top:  # the ones nearest to what is shown first
            chunk, self._queue[0] = messages[-CHUNK:], (messages[:-CHUNK], True)
        else:
            chunk, self._queue[0] = messages[:CHUNK], (messages[CHUNK:], False)
        anchor = None if self._opening else self._anchor()
        self._insert(chunk, at_top=at_top)
        if at_top:
            self.lo -= len(chunk)
        else:
            self.hi += len(chunk)
        self._drop(len(chunk))  # as many far ones go as came in: the work stays spread over the turns
        self._update_ends()
        if self._opening:
            self._opened()
        elif self._stick_bottom:
            self._relayout()
            bar = self.area.verticalScrollBar()
            bar.setValue(bar.maximum())
        else:
            self._restore(anchor)
        QTimer.singleShot(0, lambda: token == self._token and self._drain())

    def _relayout(self) -> None:
        """Lay the thread out now (positions and the scroll range are then those of what is in)."""
        self.container.layout().activate()
        QCoreApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)

    def _insert(self, messages: list[Message], *, at_top: bool) -> None:
        new = []
        for m in messages:
            b = Bubble(m, self.container)
            b.link_hovered.connect(lambda url: self.status_message.emit(safe_text(url, 400, single_line=True)))
            b.read_all.connect(lambda msg: ReaderDialog(msg, self.window()).show())
            b.restore.connect(self.restore_requested)
            b.save.connect(self.save_attachment)
            if m.record.id == self.focus_id:
                b.set_highlight(True)
            new.append(b)
        holders = [self._holder(b) for b in new]
        first_index = 1 if at_top else 1 + len(self.bubbles)  # after the "top" label
        for offset, holder in enumerate(holders):
            self.column.insertWidget(first_index + offset, holder)
            holder.show()  # now, not on a later turn: the layout that follows counts it
        self.bubbles = new + self.bubbles if at_top else self.bubbles + new

    def _holder(self, bubble: Bubble) -> QWidget:
        """The bubble in a row: the user's on the right, the assistant's on the left, others full width."""
        row = QWidget(self.container)
        h = QHBoxLayout(row)
        h.setContentsMargins(0, 0, 0, 0)
        side = bubble.message.side
        if side == "user":
            h.addStretch(1)
        h.addWidget(bubble, 4 if side != "other" else 1)
        if side == "assistant":
            h.addStretch(1)
        bubble.holder = row
        return row

    def save_attachment(self, a: Attachment) -> None:
        """Save… on an attachment: the file the person names gets its exact bytes (verified)."""
        path, _ = QFileDialog.getSaveFileName(self, "Save the attachment", a.name)
        if not path:
            return
        shown = safe_text(a.name, 80, single_line=True)
        self.client.submit(lambda ctx: ctx.vault.save_attachment(a.record.id, path),
                           lambda _f: self.status_message.emit(f"Saved {shown} to {safe_text(path, 200, single_line=True)}."),
                           lambda exc: self.status_message.emit(safe_text(f"{shown} was not saved: {exc}", 300,
                                                                          single_line=True)),
                           context=self, label="saving an attachment")

    @property
    def loading(self) -> bool:
        """A page is being read or put in."""
        return self._loading

    def bubble_of(self, rid: bytes | None) -> Bubble | None:
        return next((b for b in self.bubbles if b.message.record.id == rid), None)

    def _update_ends(self) -> None:
        self.top.setText(f"\u2191 {self.lo:,} earlier message{'s' if self.lo != 1 else ''}" if self.lo else
                         ("Start of the conversation" if self.ids else ""))
        after = len(self.ids) - self.hi
        self.bottom.setText(f"\u2193 {after:,} later message{'s' if after != 1 else ''}" if after > 0 else "")

    def _near_an_end(self) -> None:
        if self._loading or not self.ids:
            return
        bar = self.area.verticalScrollBar()
        if bar.value() < EDGE and self.lo > 0:
            self._load(before=True)
        elif bar.maximum() - bar.value() < EDGE and self.hi < len(self.ids):
            self._load(before=False)

    def _load(self, *, before: bool) -> None:
        lo, hi = (max(0, self.lo - PAGE), self.lo) if before else (self.hi, min(len(self.ids), self.hi + PAGE))
        ids = self.ids[lo:hi]
        token, colors = self._token, markdown_colors()
        self._loading = True
        self._keep_top = before  # past WINDOW bubbles: drop those on the other side (the bottom, for a page above)

        def done(messages: list[Message]) -> None:
            if token != self._token:
                return
            self._queue = [(messages, before)]
            self._drain()

        self.client.submit(lambda ctx: prepare(ctx.vault, ids, colors), done, self._failed, context=self,
                           label="reading messages")

    def _evict(self) -> None:
        """Drop the bubbles farthest from what is shown, past WINDOW (keeping the view where it is)."""
        if len(self.bubbles) > WINDOW:
            anchor = self._anchor()
            self._drop(len(self.bubbles) - WINDOW)
            self._restore(anchor)

    def _drop(self, most: int) -> None:
        """Drop up to ``most`` bubbles past WINDOW, from the side away from the page coming in."""
        for _ in range(min(most, len(self.bubbles) - WINDOW)):
            b = self.bubbles.pop(-1 if self._keep_top else 0)
            if self._keep_top:
                self.hi -= 1
            else:
                self.lo += 1
            self.column.removeWidget(b.holder)
            b.holder.hide()
            b.holder.deleteLater()

    def _anchor(self) -> tuple[Bubble, int] | None:
        """The first bubble in view and its distance from the top of the view."""
        top = self.area.verticalScrollBar().value()
        for b in self.bubbles:
            y = b.holder.y()
            if y + b.holder.height() > top:
                return b, y - top
        return None

    def _restore(self, anchor: tuple[Bubble, int] | None) -> None:
        self._relayout()
        if anchor is not None and anchor[0] in self.bubbles:
            b, offset = anchor
            self.area.verticalScrollBar().setValue(b.holder.y() - offset)

    # ---------------------------------------------------------------------------- moving

    def go_to_end(self) -> None:
        if self.key is not None:
            if self.hi >= len(self.ids):
                bar = self.area.verticalScrollBar()
                bar.setValue(bar.maximum())
            else:
                self.show_conversation(self.key[1], self.key[0])

    def go_to_start(self) -> None:
        if self.key is None or not self.ids:
            return
        if self.lo == 0:
            self.area.verticalScrollBar().setValue(0)
        else:
            self.show_conversation(self.key[1], self.key[0], self.ids[0])

    def reload(self) -> None:
        """The vault changed: show the conversation again, on the message in view (or the latest when
        the end was in view, so that a new message appears)."""
        if self.key is None:
            return
        bar = self.area.verticalScrollBar()
        at_end = self.hi >= len(self.ids) and bar.maximum() - bar.value() < 40
        anchor = self._anchor()
        focus = self.focus_id if self.focus_id else (None if at_end or anchor is None else anchor[0].message.record.id)
        self.show_conversation(self.key[1], self.key[0], focus)

    @qt_virtual(False)
    def eventFilter(self, obj: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Resize:
            QTimer.singleShot(0, self._near_an_end)  # a taller view may need the next page
        return False
