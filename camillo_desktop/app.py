"""Entry point of ``camillo-desktop`` (the Qt app lands with the desktop issue); runs on the main thread."""

from __future__ import annotations

import sys


def main() -> int:
    sys.stderr.write("camillo-desktop: the desktop app is not built yet; use the camillo command line\n")
    return 2
