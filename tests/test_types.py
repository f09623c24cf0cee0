"""The typed modules of the core pass ``mypy --strict`` with the project's configuration.

``TYPED`` lists the part of ``core/camillo`` that is typed so far (the low layers: bytes, files,
records, the roster, the log, the state, search, importers and exporters).  Widen it module by
module; once it is the whole package, run mypy on the ``files`` of ``[tool.mypy]`` instead.

Modules outside the list are still read (they are imported), but their errors are not reported
(``--follow-imports=silent``).  mypy is a test dependency (the ``test`` extra): without it this
test fails, it is never skipped.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORE = "core/camillo"

TYPED = [
    f"{CORE}/{name}.py"
    for name in (
        "primitives", "encoding", "ids", "keys", "errors", "names", "credentials", "keychain", "transport",
        "storage", "sealed", "segments", "slots", "envelopes", "packs", "descriptor", "hostview", "records",
        "control", "log", "state", "search",
    )
] + [f"{CORE}/importers", f"{CORE}/exporters"]


def test_the_typed_modules_exist():
    missing = [p for p in TYPED if not (ROOT / p).exists()]
    assert not missing, f"TYPED names files that do not exist: {missing}"


def test_the_typed_modules_pass_mypy_strict():
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", "pyproject.toml", "--follow-imports=silent", *TYPED],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, f"mypy --strict found problems:\n{result.stdout}{result.stderr}"
    assert "Success: no issues found" in result.stdout, result.stdout
