"""The whole core (``core/camillo``, the ``files`` of ``[tool.mypy]`` in pyproject.toml) passes
``mypy --strict``, and the facade's public methods return no ``Any``.

mypy is a test dependency (the ``test`` extra): without it this test fails, it is never skipped.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
def test_the_core_passes_mypy_strict():
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml"],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, f"mypy --strict found problems:\n{result.stdout}{result.stderr}"
    assert "Success: no issues found" in result.stdout, result.stdout


def test_the_public_api_returns_no_any():
    import typing

    from camillo import Joining, Vault

    loose = []
    for cls in (Vault, Joining):
        for name in dir(cls):
            if name.startswith("_"):
                continue
            attr = getattr(cls, name)
            target = attr.fget if isinstance(attr, property) else attr
            if not callable(target):
                continue
            hints = typing.get_type_hints(target)
            if "return" in hints and _mentions_any(hints["return"]):
                loose.append(f"{cls.__name__}.{name} -> {hints['return']}")
    assert not loose, loose


def _mentions_any(tp: object) -> bool:
    import typing

    if tp is typing.Any:
        return True
    return any(_mentions_any(a) for a in typing.get_args(tp))
