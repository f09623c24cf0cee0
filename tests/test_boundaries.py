"""House rules that the code itself must keep: the core never imports Qt or the desktop app, and
every module opens with a docstring saying what it is for and which thread may call it."""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_core_never_imports_qt_or_the_desktop():
    lint = pathlib.Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run([str(lint), "--config", str(ROOT / "pyproject.toml")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "KEPT" in proc.stdout and "BROKEN" not in proc.stdout


def test_core_imports_without_qt_installed_in_sys_modules():
    code = "import sys, camillo, camillo.cli, camillo.vault; assert not [m for m in sys.modules if m.startswith(('PySide6', 'shiboken6', 'camillo_desktop'))]"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_every_module_has_a_purpose_and_threading_docstring():
    missing, no_thread = [], []
    for package in ("core/camillo", "camillo_desktop"):
        for path in sorted((ROOT / package).rglob("*.py")):
            doc = ast.get_docstring(ast.parse(path.read_text()))
            rel = os.path.relpath(path, ROOT)
            if not doc:
                missing.append(rel)
            elif path.name != "__init__.py" and "thread" not in doc.lower():
                no_thread.append(rel)
    assert not missing, f"modules without a docstring: {missing}"
    assert not no_thread, f"module docstrings that do not say which thread may call them: {no_thread}"
