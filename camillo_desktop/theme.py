"""Light and dark appearance: follow the system scheme, or force one (settings, --theme).

Uses Qt's Fusion style with a palette per scheme, so the app looks the same on every desktop and
in offscreen screenshots.  Badge colours for authority classes, the sync states' colours and the
notice bar's tones live here too.  GUI thread only.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QGuiApplication, QPalette
from PySide6.QtWidgets import QApplication, QStyleFactory

LIGHT = {
    "window": "#f6f7f9", "base": "#ffffff", "alt": "#f1f3f6", "text": "#1d2330", "muted": "#5d6677",
    "accent": "#3d5afe", "border": "#d9dde5", "sidebar": "#eceff4", "highlight_text": "#ffffff",
    "warn_bg": "#fff4e0", "warn_border": "#f0b45a", "info_bg": "#eaf2fc", "info_border": "#9cc0ea",
}
DARK = {
    "window": "#1d2027", "base": "#23272f", "alt": "#282c35", "text": "#e6e9ef", "muted": "#9aa3b2",
    "accent": "#7c8cff", "border": "#3a3f4b", "sidebar": "#191c22", "highlight_text": "#ffffff",
    "warn_bg": "#3a2c16", "warn_border": "#8a6425", "info_bg": "#1d2c40", "info_border": "#3f638f",
}
AUTHORITY_COLORS = {  # (background, text) per class, readable on both schemes
    "user": ("#1e7d4f", "#ffffff"),
    "observed": ("#2a6fb0", "#ffffff"),
    "inferred": ("#b7791f", "#ffffff"),
    "external": ("#8e3b46", "#ffffff"),
    "-": ("#6b7280", "#ffffff"),
}
STATUS_COLORS = {"ok": "#1e7d4f", "conflict": "#c2410c", "deleted": "#6b7280", "pending": "#b7791f"}
SYNC_COLORS = {"up to date": "#1e7d4f", "syncing": "#2a6fb0", "missing batches": "#c2410c",
               "rollback alert": "#b91c1c"}  # by sync_status().state; any other state is never green
UNKNOWN_SYNC_COLOR = "#c2410c"


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
    p.setColor(QPalette.ColorRole.Link, QColor(c["accent"]))
    p.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text, QColor(c["muted"]))
    p.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.ButtonText, QColor(c["muted"]))
    p.setColor(QPalette.ColorGroup.Disabled, QPalette.ColorRole.WindowText, QColor(c["muted"]))
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
        QPushButton#Danger {{ background: #b91c1c; color: white; border-radius: 6px; padding: 6px 14px;
                             font-weight: 600; }}
        QFrame#Notice[tone="warn"] {{ background: {c['warn_bg']}; border: 1px solid {c['warn_border']};
                                     border-radius: 8px; }}
        QFrame#Notice[tone="info"] {{ background: {c['info_bg']}; border: 1px solid {c['info_border']};
                                     border-radius: 8px; }}
        QFrame#Notice QLabel {{ background: transparent; border: none; }}
        QPlainTextEdit#RecordText {{ border: 1px solid {c['border']}; border-radius: 6px; background: {c['alt']}; }}
    """)
    return dark
