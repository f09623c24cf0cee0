"""The child process of one measurement: ``python -m benchmarks.child '<json params>'``.

It runs one operation of :mod:`benchmarks.ops` (or of :mod:`benchmarks.vaultmem_cmp`) in a fresh
interpreter, so its peak RSS is its own and no cache or import state leaks between runs, and
prints the result as one line ``BENCH-RESULT {json}``.  Optionally (``"profile": PATH``) it writes
a cProfile of the operation's timed region.  Runs on the main thread of the child process; the parent is
:func:`run_child`.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Any

MARK = "BENCH-RESULT "


def pycache() -> str:
    """Where the children keep their bytecode: under the venv (as ``scripts/test`` does), never in
    the source tree."""
    return os.path.join(sys.prefix, "pycache")


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["CAMILLO_KEYCHAIN"] = "none"  # never touch the user's keychain: device keys stay in the clone
    env.pop("CAMILLO_HOME", None)
    # An installed app runs from bytecode (pip compiles it; a first launch writes it): a child that
    # compiled every module it imports would time the compiler (about 0.17 s of the desktop's launch).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = pycache()
    return env


def compile_code() -> None:
    """Compile the packages the children import, once, before anything is timed (see child_env)."""
    dirs = []
    for package in ("camillo", "camillo_desktop", "benchmarks"):
        spec = importlib.util.find_spec(package)
        dirs += list(spec.submodule_search_locations or []) if spec is not None else []
    subprocess.run([sys.executable, "-m", "compileall", "-q", *dirs], env=child_env(), capture_output=True,
                   check=False)


def run_child(params: dict[str, Any], *, scratch_root: str, timeout: float = 3600,
              module: str = "benchmarks.child", env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run one operation in a fresh interpreter; return its result (raises on failure).  ``env``
    adds to the child's environment (the keychanges group puts older code first on PYTHONPATH)."""
    os.makedirs(scratch_root, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=scratch_root, prefix=f"{params['op']}-") as scratch:
        params = {**params, "scratch": scratch, "launched": time.time()}
        proc = subprocess.run([sys.executable, "-m", module, json.dumps(params)], capture_output=True, text=True,
                              env={**child_env(), **(env or {})}, timeout=timeout, check=False)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    raise RuntimeError(f"benchmark child {params['op']} failed (exit {proc.returncode}):\n"
                       f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")


def main(argv: list[str]) -> int:
    params = json.loads(argv[0])
    name = params["op"]
    if name.startswith("vaultmem_") or name.startswith("camillo_"):
        from .vaultmem_cmp import OPS
    elif name.startswith("s3_"):
        from .objectstore import OPS
    else:
        from .ops import OPS
    fn = OPS[name]
    # import what the operation needs before anything is timed
    import camillo.vault  # noqa: F401

    if params.get("profile"):
        import cProfile

        from . import stats

        stats.PROFILER = cProfile.Profile()  # enabled only inside the operation's timed region
        result = fn(params, params["scratch"])
        stats.PROFILER.dump_stats(params["profile"])
    else:
        result = fn(params, params["scratch"])
    sys.stdout.write(MARK + json.dumps(result, default=str) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
