"""The bundled ``camillo`` command: PyInstaller's entry script for the CLI executable.

The installed wheel gets the same command from ``[project.scripts]``; a frozen bundle needs a real
script file.  Runs on the process's main thread.
"""

import sys

from camillo.cli import main

if __name__ == "__main__":
    sys.exit(main())
