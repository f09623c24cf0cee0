"""``python -m benchmarks --records N [--out DIR] [--runs R]``: the benchmark command
(:mod:`benchmarks.cli`).  Runs on the main thread."""

import sys

from .cli import main

sys.exit(main())
