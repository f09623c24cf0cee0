"""Small helpers shared by the core tests."""

from __future__ import annotations

import hashlib
import os


def all_files(root: str | os.PathLike) -> list[str]:
    root = str(root)
    if os.path.isfile(root):
        return [root]
    out = []
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            out.append(os.path.join(dirpath, f))
    return sorted(out)


def slots_unwrapped_by(folder: str, passphrase: str) -> list:
    """The slot headers in vault folder ``folder`` from which ``passphrase`` unwraps a master secret,
    whatever a reader would then decide (an attacker with the passphrase and the host's files)."""
    import glob

    from camillo import descriptor, slots
    from camillo.credentials import from_passphrase
    from camillo.primitives import CryptoFailure

    vid = descriptor.decode(open(os.path.join(folder, "VMEM"), "rb").read()).vault_id
    found = []
    for f in sorted(glob.glob(os.path.join(folder, "slots", "*.slot"))):
        h = slots.read_header(open(f, "rb").read(), "slots/" + os.path.basename(f))
        if h.kdf is None:
            continue
        try:
            slots.unwrap_vms(h, vid, from_passphrase(passphrase, h.kdf).recipient)
        except CryptoFailure:
            continue
        found.append(h)
    return found


def snapshot(root: str | os.PathLike) -> dict[str, str]:
    """Path -> SHA-256 of every file under root (to prove nothing changed)."""
    return {p: hashlib.sha256(open(p, "rb").read()).hexdigest() for p in all_files(root)}


def fail_the_nth_write(monkeypatch, n: int = 12) -> object:
    """The folder shelf's ``n``-th staged file fails as a full disk does; returns the real ``stage``
    (set it back with monkeypatch.setattr(storage.FolderShelf, "stage", real))."""
    from camillo import storage
    from camillo.errors import StorageError

    real, calls = storage.FolderShelf.stage, {"n": 0}

    def failing(self, name, data, **kw):
        calls["n"] += 1
        if calls["n"] == n:
            raise StorageError(f"cannot write {name}: No space left on device", file=name)
        return real(self, name, data, **kw)

    monkeypatch.setattr(storage.FolderShelf, "stage", failing)
    return real


def switch_home(monkeypatch, path) -> None:
    """Act as another installation (another device) from here on."""
    monkeypatch.setenv("CAMILLO_HOME", str(path))


def cli(*args: str, stdin: bytes = b"") -> tuple[int, str, str]:
    """``camillo ARGS`` run in this process (``camillo.cli.main``), standard input given as bytes:
    (exit code, stdout, stderr).  Much faster than a process; the credential comes from the
    environment as it would."""
    import io
    import sys
    from contextlib import redirect_stderr, redirect_stdout

    from camillo.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    try:
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # (argparse's usage errors exit 2, as the command does)
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        sys.stdin = saved
    return code, out.getvalue(), err.getvalue()
