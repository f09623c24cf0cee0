"""Light and dark appearance: follow the system scheme, or force one (settings, --theme).

Uses Qt's Fusion style with a palette per scheme, so the app looks the same on every desktop and
in offscreen screenshots.  Badge colours for authority classes, the sync states' colours and the
notice bar's tones live here too.  GUI thread only.
"""

from __future__ import annotations

import os

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication, QStyleFactory, QWidget

CHECK = os.path.join(os.path.dirname(__file__), "resources", "icons", "check.svg").replace(os.sep, "/")

# Every pair of colours text is drawn in meets WCAG AA: 4.5:1 for text (text, muted, link, error, ok and
# warn on base, window and alt; white on the accent and on every badge), 3:1 for controls (the control
# outline and the selection against base and window).  tests/desktop/test_access.py computes them.
LIGHT = {
    "window": "#f6f7f9", "base": "#ffffff", "alt": "#f1f3f6", "text": "#1d2330", "muted": "#5d6677",
    "accent": "#3d5afe", "link": "#3046d9", "border": "#d9dde5", "control": "#7b8391", "sidebar": "#eceff4",
    "highlight_text": "#ffffff", "disabled_bg": "#e3e6eb", "disabled_text": "#5f6672",
    "warn_bg": "#fff4e0", "warn_border": "#f0b45a", "info_bg": "#eaf2fc", "info_border": "#9cc0ea",
    "error": "#b91c1c", "ok": "#1b6e46", "warn": "#a8390a", "code_bg": "#eef0f4",
    "bubble_user": "#e4e9ff", "bubble_assistant": "#ffffff", "bubble_other": "#f1f3f6", "match_bg": "#ffe58a",
}
DARK = {
    "window": "#1d2027", "base": "#23272f", "alt": "#282c35", "text": "#e6e9ef", "muted": "#a2abb9",
    "accent": "#5869e8", "link": "#9aa6ff", "border": "#3a3f4b", "control": "#7d8596", "sidebar": "#191c22",
    "highlight_text": "#ffffff", "disabled_bg": "#30343d", "disabled_text": "#959dab",
    "warn_bg": "#3a2c16", "warn_border": "#8a6425", "info_bg": "#1d2c40", "info_border": "#3f638f",
    "error": "#ff8a80", "ok": "#5fd39b", "warn": "#ffb366", "code_bg": "#1a1d23",
    "bubble_user": "#2c3566", "bubble_assistant": "#23272f", "bubble_other": "#2a2e37", "match_bg": "#7a5d00",
}
AUTHORITY_COLORS = {  # (background, text) per class, readable on both schemes
    "user": ("#1e7d4f", "#ffffff"),
    "observed": ("#2a6fb0", "#ffffff"),
    "inferred": ("#8f5b0a", "#ffffff"),
    "external": ("#8e3b46", "#ffffff"),
    "-": ("#6b7280", "#ffffff"),
}
STATUS_COLORS = {"ok": "#1e7d4f", "conflict": "#c2410c", "deleted": "#6b7280", "pending": "#8f5b0a"}
DANGER = "#b91c1c"
# by sync_status().state: the status bar's text colour in each scheme; any other state is never green
SYNC_STATES = {"up to date": "ok", "syncing": "link", "missing batches": "warn", "rollback alert": "error"}


def sync_color(state: str) -> str:
    """The colour of the status bar's sync state in the current scheme."""
    return current()[SYNC_STATES.get(state, "warn")]


def contrast(a: str, b: str) -> float:
    """WCAG contrast ratio of two colours (#rrggbb)."""

    def luminance(color: str) -> float:
        channels = [int(color[i:i + 2], 16) / 255 for i in (1, 3, 5)]
        lin = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * lin[0] + 0.7152 * lin[1] + 0.0722 * lin[2]

    hi, lo = sorted((luminance(a), luminance(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def restyle(widget: QWidget) -> None:
    """Apply the style sheet again after a widget's object name or property changed."""
    widget.style().unpolish(widget)
    widget.style().polish(widget)


def system_is_dark() -> bool:
    hints = QGuiApplication.styleHints()
    scheme = getattr(hints, "colorScheme", None)
    return bool(scheme is not None and scheme() == Qt.ColorScheme.Dark)


def current() -> dict[str, str]:
    app = QApplication.instance()
    return DARK if app is not None and app.property("camillo_dark") else LIGHT


def apply(app: QApplication, mode: str = "system") -> bool:
    """Apply a scheme; returns True when dark."""
    dark = system_is_dark() if mode == "system" else mode == "dark"
    c = DARK if dark else LIGHT
    app.setStyle(QStyleFactory.create("Fusion"))
    p = QPalette()
    p.setColor(QPalette.ColorRole.Window, QColor(c["window"]))
    p.setColor(QPalette.ColorRole.WindowText, QColor(c["text"]))
    p.setColor(QPalette.ColorRole.Base, QColor(c["base"]))
    p.setColor(QPalette.ColorRole.AlternateBase, QColor(c["alt"]))
    p.setColor(QPalette.ColorRole.Text, QColor(c["text"]))
    p.setColor(QPalette.ColorRole.Button, QColor(c["alt"]))
    p.setColor(QPalette.ColorRole.ButtonText, QColor(c["text"]))
    p.setColor(QPalette.ColorRole.Highlight, QColor(c["accent"]))
    p.setColor(QPalette.ColorRole.HighlightedText, QColor(c["highlight_text"]))
    p.setColor(QPalette.ColorRole.ToolTipBase, QColor(c["base"]))
    p.setColor(QPalette.ColorRole.ToolTipText, QColor(c["text"]))
    p.setColor(QPalette.ColorRole.PlaceholderText, QColor(c["muted"]))
    p.setColor(QPalette.ColorRole.Link, QColor(c["link"]))
    p.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text, QColor(c["muted"]))
    p.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText, QColor(c["muted"]))
    p.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.WindowText, QColor(c["muted"]))
    p.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Button, QColor(c["disabled_bg"]))
    app.setPalette(p)
    app.setProperty("camillo_dark", dark)
    app.setStyleSheet(f"""
        QWidget#Sidebar {{ background: {c['sidebar']}; border: none; }}
        QListWidget#SidebarList {{ background: transparent; border: none; font-size: 13px; outline: none; }}
        QListWidget#SidebarList::item {{ padding: 7px 10px; border-radius: 6px; margin: 1px 6px; }}
        QListWidget#SidebarList::item:selected {{ background: {c['accent']}; color: white; }}
        QLabel#ViewTitle {{ font-size: 18px; font-weight: 600; }}
        QLabel#Muted, QLabel#Hint {{ color: {c['muted']}; }}
        QLabel#VaultName {{ font-weight: 600; font-size: 14px; }}
        QFrame#Card {{ background: {c['base']}; border: 1px solid {c['border']}; border-radius: 8px; }}
        QTableView, QTreeView {{ border: 1px solid {c['border']}; border-radius: 6px; gridline-color: {c['border']}; }}
        QHeaderView::section {{ background: {c['alt']}; border: none; border-bottom: 1px solid {c['border']};
                               padding: 4px 6px; font-weight: 600; }}
        QLineEdit#SearchField {{ border: 1px solid {c['border']}; border-radius: 14px; padding: 4px 12px;
                                background: {c['base']}; min-height: 20px; }}
        QPushButton#Primary {{ background: {c['accent']}; color: white; border-radius: 6px; padding: 6px 14px;
                              font-weight: 600; }}
        QPushButton#Danger {{ background: {DANGER}; color: white; border-radius: 6px; padding: 6px 14px;
                             font-weight: 600; }}
        QFrame#Notice[tone="warn"] {{ background: {c['warn_bg']}; border: 1px solid {c['warn_border']};
                                     border-radius: 8px; }}
        QFrame#Notice[tone="info"] {{ background: {c['info_bg']}; border: 1px solid {c['info_border']};
                                     border-radius: 8px; }}
        QFrame#Notice QLabel {{ background: transparent; border: none; }}
        QPlainTextEdit#RecordText {{ border: 1px solid {c['border']}; border-radius: 6px; background: {c['alt']}; }}
        QPushButton#Primary:disabled, QPushButton#Danger:disabled {{ background: {c['disabled_bg']};
                                                                    color: {c['disabled_text']}; }}
        QLabel#Error {{ color: {c['error']}; }}
        QLabel#Warning {{ color: {c['warn']}; }}
        QLabel#Success {{ color: {c['ok']}; font-weight: 600; }}
        QCheckBox::indicator, QTreeView::indicator, QTableView::indicator {{
            width: 14px; height: 14px; border: 1px solid {c['control']}; border-radius: 3px; background: {c['base']}; }}
        QCheckBox::indicator:checked, QTreeView::indicator:checked, QTableView::indicator:checked {{
            background: {c['accent']}; border-color: {c['accent']}; image: url({CHECK}); }}
        QCheckBox::indicator:disabled {{ border-color: {c['border']}; background: {c['disabled_bg']}; }}
        QLineEdit, QComboBox, QSpinBox, QDateEdit {{ border: 1px solid {c['control']}; border-radius: 4px;
                                                     padding: 3px 6px; background: {c['base']}; }}
        QLineEdit:focus, QComboBox:focus, QSpinBox:focus, QDateEdit:focus {{ border: 2px solid {c['accent']}; }}
        QLabel#SearchCount {{ color: {c['muted']}; }}
        QWidget#Thread {{ background: {c['window']}; }}
        QFrame#Bubble {{ background: {c['bubble_other']}; border: 1px dashed {c['control']}; border-radius: 10px; }}
        QFrame#Bubble[side="user"] {{ background: {c['bubble_user']}; border: 1px solid {c['border']}; }}
        QFrame#Bubble[side="assistant"] {{ background: {c['bubble_assistant']}; border: 1px solid {c['border']}; }}
        QFrame#Bubble[highlight="true"] {{ border: 2px solid {c['accent']}; }}
        QLabel#BubbleHead {{ color: {c['muted']}; }}
        QFrame#Chip {{ background: {c['alt']}; border: 1px solid {c['border']}; border-radius: 6px; }}
        QFrame#UndoBar {{ background: {c['info_bg']}; border: 1px solid {c['info_border']}; border-radius: 8px; }}
        QFrame#UndoBar QLabel {{ background: transparent; }}
        QFrame#Popover {{ background: {c['base']}; border: 1px solid {c['control']}; border-radius: 6px; }}
    """)
    return dark
