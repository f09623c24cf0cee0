"""The installed .deb, used for real: runs packaging/smoke.sh (build the bundle and the .deb, install
it system-wide, run the installed CLI, MCP server and app headless, the device key through the
Secret Service, validators, uninstall).

Takes minutes and needs root (or sudo) and Debian/Ubuntu, so it runs only when
``CAMILLO_PACKAGE_SMOKE=1``.  Plain pytest on the main thread.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_installed_package_smoke():
    if os.environ.get("CAMILLO_PACKAGE_SMOKE") != "1":
        pytest.skip("builds and installs the .deb system-wide (minutes, root): set CAMILLO_PACKAGE_SMOKE=1 to run")
    # a user's environment, not the test run's (CAMILLO_HOME, CAMILLO_KEYCHAIN=none, QT_QPA_PLATFORM...)
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "LC_ALL", "TERM", "USER")}
    proc = subprocess.run(["bash", str(ROOT / "packaging" / "smoke.sh")], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=2300)
    assert proc.returncode == 0, f"{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    assert re.search(r"^smoke: \d+ checks passed$", proc.stdout, re.MULTILINE), proc.stdout[-3000:]
