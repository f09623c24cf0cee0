"""The bundled ``camillo-desktop`` command: PyInstaller's entry script for the desktop executable.

The installed wheel gets the same command from ``[project.gui-scripts]``; a frozen bundle needs a
real script file.  Runs on the process's main thread, which becomes Qt's GUI thread.
"""

import sys

from camillo_desktop.app import main

if __name__ == "__main__":
    sys.exit(main())
