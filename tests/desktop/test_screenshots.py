"""The app run as a user runs it (a subprocess, offscreen): ``--demo --view NAME --screenshot OUT.png``
renders a real, non-blank 1280x800 window and exits 0; plus a PySide6 regression guard."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from PySide6.QtGui import QImage

TIMEOUT = 90


def app_env() -> dict[str, str]:
    env = dict(os.environ)
    env["QT_QPA_PLATFORM"] = "offscreen"
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    return env


def run_app(*args: str, code: str | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "camillo_desktop.app", *args]
    return subprocess.run(cmd, env=app_env(), capture_output=True, text=True, timeout=TIMEOUT, check=False)


def distinct_colours(image: QImage, step: int = 16) -> set[int]:
    return {image.pixel(x, y) for x in range(0, image.width(), step) for y in range(0, image.height(), step)}


def check_png(path) -> QImage:
    assert os.path.exists(path), "no screenshot written"
    image = QImage(str(path))
    assert not image.isNull()
    assert (image.width(), image.height()) == (1280, 800)
    colours = distinct_colours(image)
    assert len(colours) > 20, f"the screenshot is (nearly) a single colour: {len(colours)} colours"
    return image


def luminance(rgb: int) -> float:
    r, g, b = (rgb >> 16) & 255, (rgb >> 8) & 255, rgb & 255
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def mean_luminance(image: QImage) -> float:
    values = [luminance(image.pixel(x, y)) for x in range(0, image.width(), 20) for y in range(0, image.height(), 20)]
    return sum(values) / len(values)


@pytest.mark.parametrize("view", ["timeline", "facts", "search"])
def test_screenshot_of_each_view(tmp_path, view):
    out = tmp_path / f"{view}.png"
    proc = run_app("--demo", "--view", view, "--screenshot", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    image = check_png(out)
    assert mean_luminance(image) > 150  # the default (light) appearance


def test_screenshot_in_the_dark_theme(tmp_path):
    out = tmp_path / "dark.png"
    proc = run_app("--demo", "--view", "timeline", "--theme", "dark", "--screenshot", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    image = check_png(out)
    assert mean_luminance(image) < 110, "the dark theme is not dark"


SPY = """
import sys
import camillo_desktop.mainwindow as mw

class Spy(mw.MainWindow):
    def grab(self, *args):
        view = self.current_view()
        print("VIEW:", view.name, "|", getattr(view, "count", None) and view.count.text(), flush=True)
        return super().grab(*args)

mw.MainWindow = Spy
from camillo_desktop.app import main
sys.exit(main(sys.argv[1:]))
"""


def test_screenshot_of_a_given_search(tmp_path):
    out = tmp_path / "search.png"
    proc = run_app("--demo", "--view", "search", "--search", "coffee", "--screenshot", str(out), code=SPY)
    assert proc.returncode == 0, proc.stderr[-3000:]
    check_png(out)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("VIEW:"))
    assert line.startswith("VIEW: search |")
    assert "match \u201ccoffee\u201d" in line and " 0 records" not in line


def test_the_default_search_screenshot_shows_results(tmp_path):
    """(The default query was once "morning OR coffee", which matches nothing: there is no OR.)"""
    out = tmp_path / "search.png"
    proc = run_app("--demo", "--view", "search", "--screenshot", str(out), code=SPY)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("VIEW:"))
    assert line.startswith("VIEW: search |") and " 0 results" not in line, line


def test_bad_arguments_exit_with_usage():
    proc = run_app("--theme", "purple")
    assert proc.returncode == 2
    assert "usage: camillo-desktop" in proc.stderr


VOID_CALLS = """
from PySide6.QtWidgets import QApplication, QLabel
app = QApplication([])
label = QLabel()
for i in range(20_000):
    label.setText(str(i))
    label.setToolTip(str(i))
    label.update()
    label.setVisible(False)
print("survived", label.text(), flush=True)
"""


def test_many_void_calls_do_not_abort_pyside():
    """Regression guard: PySide6 6.12.0 on Python 3.11 aborts after some thousands of calls of
    void-returning methods (e.g. QLabel.setText in a loop)."""
    proc = subprocess.run([sys.executable, "-c", VOID_CALLS], env=app_env(), capture_output=True, text=True,
                          timeout=TIMEOUT, check=False)
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stderr[-3000:]}"
    assert "survived 19999" in proc.stdout
