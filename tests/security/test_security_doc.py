"""docs/security.md backs every claim with a test: each ``file::test`` it names must exist.

The names are collected with ``ast`` (module-level ``def test_*`` and ``async def test_*``), so a
renamed or deleted test fails here until the document follows.  References into
``tests/reliability/`` may point at a file that does not exist yet (another helper writes it); once
the file exists, its names are checked like any other.

Runs on pytest's main thread.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "security.md"
REF = re.compile(r"`(tests/[\w/]+\.py)::(\w+)`")
ALLOWED_MISSING_DIRS = ("tests/reliability/",)


def references() -> list[tuple[str, str]]:
    return REF.findall(DOC.read_text())


def test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and n.name.startswith("test")}


test_functions.__test__ = False  # a helper, not a test


def test_the_document_names_many_tests():
    refs = references()
    assert len(refs) >= 60
    assert len({f for f, _ in refs}) >= 15


def test_every_referenced_test_exists():
    missing, cache = [], {}
    for file, name in references():
        path = ROOT / file
        if not path.exists():
            if not file.startswith(ALLOWED_MISSING_DIRS):
                missing.append(f"{file} (no such file)")
            continue
        if file not in cache:
            cache[file] = test_functions(path)
        if name not in cache[file]:
            missing.append(f"{file}::{name}")
    assert not missing, "docs/security.md names tests that do not exist:\n" + "\n".join(missing)


def test_every_party_of_the_threat_model_is_covered():
    text = DOC.read_text().lower()
    for party in ("curious host", "malicious host", "sync service", "lost or stolen device", "revoked",
                  "read grant", "write grant", "append grant", "hostile", "prompt injection", "passphrase",
                  "not guaranteed", "metadata", "sync history", "unlocked"):
        assert party in text, party
