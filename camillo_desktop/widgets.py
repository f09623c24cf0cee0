"""Small widgets shared by the views: authority badges, the QR code, secret fields, the clipboard.

GUI thread only.
"""

from __future__ import annotations

import math
from typing import Any

from PySide6.QtCore import QModelIndex, QObject, QRect, QRectF, QSize, Qt, QTimer, Signal
from PySide6.QtGui import (
    QAbstractTextDocumentLayout,
    QColor,
    QFont,
    QGuiApplication,
    QPainter,
    QPalette,
    QTextDocument,
)
from PySide6.QtWidgets import (
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from . import theme
from .guard import qt_virtual

BADGE_ROLE = Qt.ItemDataRole.UserRole + 50  # text of a badge to paint instead of the display text
BADGE_COLOR_ROLE = Qt.ItemDataRole.UserRole + 51


def paint_badge(painter: QPainter, rect: QRect, text: str, background: str, foreground: str = "#ffffff") -> None:
    painter.save()
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    font = QFont(painter.font())
    font.setPointSizeF(max(7.0, font.pointSizeF() * 0.85))
    font.setBold(True)
    painter.setFont(font)
    fm = painter.fontMetrics()
    width = fm.horizontalAdvance(text) + 12
    height = fm.height() + 4
    badge = QRectF(rect.left() + 4, rect.center().y() - height / 2 + 0.5, width, height)
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(QColor(background))
    painter.drawRoundedRect(badge, height / 2, height / 2)
    painter.setPen(QColor(foreground))
    painter.drawText(badge, Qt.AlignmentFlag.AlignCenter, text)
    painter.restore()


def paint_empty_cell(delegate: QStyledItemDelegate, painter: QPainter, option: QStyleOptionViewItem,
                     index: QModelIndex) -> QStyleOptionViewItem:
    """Paint a cell's background, selection and focus without its text (a delegate draws that);
    returns the cell's style option."""
    opt = QStyleOptionViewItem(option)
    delegate.initStyleOption(opt, index)
    opt.text = ""
    style = opt.widget.style() if opt.widget else None
    if style is not None:
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, opt.widget)
    return opt


class BadgeDelegate(QStyledItemDelegate):
    """Paints the cell's BADGE_ROLE text as a coloured pill (authority classes, statuses)."""

    @qt_virtual()
    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex) -> None:
        text = index.data(BADGE_ROLE)
        if not text:
            super().paint(painter, option, index)
            return
        paint_empty_cell(self, painter, option, index)
        color = index.data(BADGE_COLOR_ROLE) or theme.AUTHORITY_COLORS.get(text, theme.AUTHORITY_COLORS["-"])[0]
        paint_badge(painter, option.rect, text, color)

    @qt_virtual(factory=QSize)
    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex) -> QSize:
        size = super().sizeHint(option, index)
        return QSize(max(size.width(), 92), max(size.height(), 24))


class HtmlDelegate(QStyledItemDelegate):
    """Paints a cell's HTML_ROLE text (the app's own HTML of escaped text: a search snippet with its
    matched words marked) on one line, clipped to the cell."""

    def __init__(self, role: int, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.role = role

    @qt_virtual()
    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex) -> None:
        markup = index.data(self.role)
        if not markup:
            super().paint(painter, option, index)
            return
        opt = paint_empty_cell(self, painter, option, index)
        doc = QTextDocument()
        doc.setDefaultFont(opt.font)
        doc.setDocumentMargin(2)
        doc.setHtml(markup)
        rect = option.rect.adjusted(2, 0, -2, 0)
        painter.save()
        painter.translate(rect.left(), rect.top() + max(0.0, (rect.height() - doc.size().height()) / 2))
        painter.setClipRect(QRectF(0, 0, rect.width(), rect.height()))
        context = QAbstractTextDocumentLayout.PaintContext()
        selected = bool(option.state & QStyle.StateFlag.State_Selected)
        context.palette.setColor(QPalette.ColorRole.Text, option.palette.color(
            QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text))
        doc.documentLayout().draw(painter, context)
        painter.restore()


class Badge(QLabel):
    """A coloured pill with a short label (for detail panes)."""

    def __init__(self, text: str = "", color: str | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.set(text, color)

    def set(self, text: str, color: str | None = None) -> None:
        bg = color or theme.AUTHORITY_COLORS.get(text, theme.AUTHORITY_COLORS["-"])[0]
        self.setText(text)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setStyleSheet(f"background: {bg}; color: white; border-radius: 9px; padding: 1px 9px; font-weight: 600;")
        self.setSizePolicy(self.sizePolicy().horizontalPolicy(), self.sizePolicy().verticalPolicy())
        self.setAccessibleName(f"authority {text}" if text in theme.AUTHORITY_COLORS else text)


class QRCodeWidget(QWidget):
    """Paints a QR code's module matrix itself, so it is crisp at any size and DPI (Electrum)."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._matrix: list[list[bool]] = []
        self.setMinimumSize(240, 240)
        self.setAccessibleName("enrollment QR code")
        self.set_text(text)

    def set_text(self, text: str) -> None:
        import qrcode

        self._text = text
        if not text:
            self._matrix = []
        else:
            qr = qrcode.QRCode(error_correction=qrcode.constants.ERROR_CORRECT_M, border=4)
            qr.add_data(text)
            qr.make(fit=True)
            self._matrix = qr.get_matrix()
        self.update()

    def text(self) -> str:
        return self._text

    @qt_virtual()
    def paintEvent(self, event) -> None:
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor("#ffffff"))
        if not self._matrix:
            return
        n = len(self._matrix)
        side = min(self.width(), self.height())
        module = max(1, math.floor(side / n))
        size = module * n
        x0 = (self.width() - size) // 2
        y0 = (self.height() - size) // 2
        black = QColor("#000000")
        for y, row in enumerate(self._matrix):
            run_start = None
            for x, dark in enumerate([*row, False]):
                if dark and run_start is None:
                    run_start = x
                elif not dark and run_start is not None:
                    painter.fillRect(x0 + run_start * module, y0 + y * module, (x - run_start) * module, module, black)
                    run_start = None
        painter.end()


class SecretEdit(QWidget):
    """A password field with a reveal toggle; hidden by default."""

    returnPressed = Signal()

    def __init__(self, placeholder: str = "", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.edit = QLineEdit()
        self.edit.setEchoMode(QLineEdit.EchoMode.Password)
        self.edit.setPlaceholderText(placeholder)
        self.edit.returnPressed.connect(self.returnPressed)
        self.toggle = QToolButton()
        self.toggle.setText("Show")
        self.toggle.setCheckable(True)
        self.toggle.setAccessibleName("show or hide the secret")
        self.toggle.toggled.connect(self._reveal)
        lay = QHBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.edit, 1)
        lay.addWidget(self.toggle)
        self.setFocusProxy(self.edit)

    def _reveal(self, on: bool) -> None:
        self.edit.setEchoMode(QLineEdit.EchoMode.Normal if on else QLineEdit.EchoMode.Password)
        self.toggle.setText("Hide" if on else "Show")

    def text(self) -> str:
        return self.edit.text()

    def clear(self) -> None:
        # Best effort: overwrite the buffer before clearing (Electrum's PasswordLineEdit).
        self.edit.setText("\0" * len(self.edit.text()))
        self.edit.clear()


def passphrase_strength(text: str) -> tuple[int, str]:
    """A rough strength score 0..4 and a word for it: length and character variety, with a
    penalty for repetition.  Encourages long passphrases over clever short passwords."""
    if not text:
        return 0, "empty"
    pools = sum(bool(any(f(c) for c in text)) for f in (str.islower, str.isupper, str.isdigit,
                                                          lambda c: not c.isalnum()))
    alphabet = {1: 26, 2: 52, 3: 62, 4: 90}.get(pools, 26)
    unique = len(set(text)) / len(text)
    bits = len(text) * math.log2(alphabet) * (0.5 + 0.5 * unique)
    words = len(text.split())
    if words >= 4:
        bits = max(bits, words * 11)
    score = 0 if bits < 28 else 1 if bits < 45 else 2 if bits < 60 else 3 if bits < 80 else 4
    return score, ["very weak", "weak", "fair", "strong", "very strong"][score]


class StrengthMeter(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.bar = QProgressBar()
        self.bar.setRange(0, 4)
        self.bar.setTextVisible(False)
        self.bar.setMaximumHeight(8)
        self.label = QLabel()
        self.label.setObjectName("Hint")
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.addWidget(self.bar)
        lay.addWidget(self.label)
        self.update_for("")

    def update_for(self, text: str) -> int:
        score, word = passphrase_strength(text)
        self.bar.setValue(score)
        color = ["#b91c1c", "#c2410c", "#b7791f", "#1e7d4f", "#1e7d4f"][score]
        self.bar.setStyleSheet(f"QProgressBar::chunk {{ background: {color}; border-radius: 3px; }}")
        self.label.setText(f"Strength: {word}. A passphrase of five or more unrelated words is best.")
        return score


class Clipboard:
    """Copies text and clears it again after a countdown, but only if it still holds what we
    copied (so we never erase something the user copied since).

    Give it a ``parent`` (the main window): its timer is then owned by Qt and destroyed on the GUI
    thread.  A parentless timer dies with this Python object, which the cyclic garbage collector may
    free on the vault worker's thread: Qt cannot stop a running timer from there, and its next tick
    reaches a deleted object (a crash)."""

    def __init__(self, seconds: int = 15, parent: QObject | None = None) -> None:
        self.seconds = seconds
        self._copied: str | None = None
        self._timer = QTimer(parent)
        self._timer.setSingleShot(True)
        self._timer.timeout.connect(self.clear_if_ours)

    def copy(self, text: str) -> None:
        QGuiApplication.clipboard().setText(text)
        self._copied = text
        self._timer.start(max(1, self.seconds) * 1000)

    @property
    def pending(self) -> bool:
        return self._timer.isActive()

    def clear_if_ours(self) -> None:
        self._timer.stop()
        cb = QGuiApplication.clipboard()
        if self._copied is not None and cb.text() == self._copied:
            cb.clear()
        self._copied = None


def path_field(on_browse: Any, *, placeholder: str = "", accessible: str = "") -> tuple[QLineEdit, QHBoxLayout]:
    """A path typed in, or chosen with a "Choose…" button that calls ``on_browse``: (edit, row)."""
    edit = QLineEdit()
    if placeholder:
        edit.setPlaceholderText(placeholder)
    if accessible:
        edit.setAccessibleName(accessible)
    browse = QPushButton("Choose\u2026")
    browse.clicked.connect(on_browse)
    row = QHBoxLayout()
    row.addWidget(edit, 1)
    row.addWidget(browse)
    return edit, row


def muted_label(text: str) -> QLabel:
    label = QLabel(text)
    label.setTextFormat(Qt.TextFormat.PlainText)  # never rich text, whatever it contains
    label.setObjectName("Muted")
    label.setWordWrap(True)
    return label
