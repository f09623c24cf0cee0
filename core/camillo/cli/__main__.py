"""``python -m camillo.cli``: the command line (same as the ``camillo`` command); main thread only."""

import sys

from camillo.cli import main

sys.exit(main())
