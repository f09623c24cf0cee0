"""``python -m camillo_desktop``: the same as the ``camillo-desktop`` command.  Main thread."""

import sys

from .app import main

sys.exit(main())
