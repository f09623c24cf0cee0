"""Fixtures of the reliability suites and the summary they print at the end of a run: kills
survived per operation (crash), scenarios checked (sync faults), cases checked (resources).
``CAMILLO_RELIABILITY_REPORT=FILE`` also writes the summary there as JSON (``scripts/reliability``).

pytest main thread only.
"""

from __future__ import annotations

import json
import os

import pytest

from tests.reliability.harness import Tally

TALLY = Tally()
COUNTS: dict[str, dict[str, int]] = {}  # suite -> what -> how many (sync scenarios, resource cases)


def count(suite: str, what: str, n: int = 1) -> None:
    COUNTS.setdefault(suite, {})
    COUNTS[suite][what] = COUNTS[suite].get(what, 0) + n


@pytest.fixture(scope="session")
def crash_tally() -> Tally:
    return TALLY


@pytest.fixture(scope="session")
def reliability_base(tmp_path_factory) -> str:
    return str(tmp_path_factory.mktemp("reliability"))


def summary_lines() -> list[str]:
    lines = []
    if TALLY.runs:
        lines.append("crash (kills survived per operation):")
        lines += ["  " + line for line in TALLY.lines()]
    for suite, counts in sorted(COUNTS.items()):
        lines.append(f"{suite}: {sum(counts.values())} checked")
        lines += [f"  {what}: {n}" for what, n in sorted(counts.items())]
    return lines


def pytest_terminal_summary(terminalreporter) -> None:
    lines = summary_lines()
    if not lines:
        return
    terminalreporter.section("reliability summary")
    for line in lines:
        terminalreporter.write_line(line)
    path = os.environ.get("CAMILLO_RELIABILITY_REPORT")
    if path:
        with open(path, "w") as fh:
            json.dump({"lines": lines, "counts": COUNTS,
                       "kills": {f"{op} {kind}": n for (op, kind), n in sorted(TALLY.survived.items())},
                       "known": {f"{op}: {name}": n for (op, name), n in sorted(TALLY.known.items())},
                       "failures": [str(f) for f in TALLY.failures]}, fh, indent=1)
