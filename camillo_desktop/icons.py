"""Icons: the SVG files in ``camillo_desktop/resources`` (crisp at any DPI).  GUI thread only."""

from __future__ import annotations

import os
from functools import cache

from PySide6.QtGui import QIcon

RESOURCES = os.path.join(os.path.dirname(__file__), "resources")


@cache
def icon(name: str) -> QIcon:
    path = os.path.join(RESOURCES, "icons", f"{name}.svg")
    return QIcon(path) if os.path.exists(path) else QIcon()


@cache
def app_icon() -> QIcon:
    return QIcon(os.path.join(RESOURCES, "camillo.svg"))
