"""Render the app icon (camillo_desktop/resources/camillo.svg) into the freedesktop hicolor theme.

Writes ``resources/icons/hicolor/<N>x<N>/apps/org.camillo.Camillo.png`` for every size desktops
look for, and copies the SVG to ``hicolor/scalable/apps/org.camillo.Camillo.svg``.  The outputs are
committed; run ``python packaging/make_icons.py`` again after changing the SVG.  Rendering uses
QtSvg with no display (QImage only).  A script: it runs on its own main thread.
"""

from __future__ import annotations

import os
import shutil
import sys

APP_ID = "org.camillo.Camillo"
SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCE = os.path.join(ROOT, "camillo_desktop", "resources", "camillo.svg")
THEME = os.path.join(ROOT, "resources", "icons", "hicolor")


def render(source: str = SOURCE, theme: str = THEME, sizes: tuple[int, ...] = SIZES) -> list[str]:
    """Write the PNGs and the scalable SVG; return the paths written."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    _app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])
    renderer = QSvgRenderer(source)
    if not renderer.isValid():
        raise SystemExit(f"{source}: not a valid SVG")
    written = []
    for size in sizes:
        image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        renderer.render(painter)
        painter.end()
        out = os.path.join(theme, f"{size}x{size}", "apps", f"{APP_ID}.png")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        if not image.convertToFormat(QImage.Format.Format_ARGB32).save(out, "PNG"):
            raise SystemExit(f"{out}: could not be written")
        written.append(out)
    scalable = os.path.join(theme, "scalable", "apps", f"{APP_ID}.svg")
    os.makedirs(os.path.dirname(scalable), exist_ok=True)
    shutil.copyfile(source, scalable)
    written.append(scalable)
    return written


if __name__ == "__main__":
    for path in render():
        print(os.path.relpath(path, ROOT))
