"""The harness itself, with plain files: Syncthing carries a write, a deletion, holds back while
paused and delivers on resume, and loses nothing when one side is killed (-9) and restarted.

pytest main thread only.
"""

from __future__ import annotations

import os
import time

import pytest

from tests.sync.syncthing import conflict_copies

pytestmark = pytest.mark.syncthing


def write(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as fh:
        fh.write(data)


def read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except FileNotFoundError:
        return None


def test_write_and_delete_propagate(syncthing_pair):
    a, b = syncthing_pair.a, syncthing_pair.b
    write(os.path.join(a.folder, "segments", "ab", "one.seg"), b"one" * 1000)
    syncthing_pair.wait_files(lambda s: read(os.path.join(s.folder, "segments", "ab", "one.seg")) == b"one" * 1000,
                              b, what="one.seg arrives")
    files = syncthing_pair.wait_quiescent()
    assert any(name.endswith("segments/ab/one.seg") for name in files)

    os.unlink(os.path.join(a.folder, "segments", "ab", "one.seg"))
    syncthing_pair.wait_files(lambda s: not os.path.exists(os.path.join(s.folder, "segments", "ab", "one.seg")),
                              b, what="one.seg is deleted")
    syncthing_pair.wait_quiescent()
    # and the other way round
    write(os.path.join(b.folder, "from-b"), b"b")
    syncthing_pair.wait_quiescent()
    assert read(os.path.join(a.folder, "from-b")) == b"b"


def test_pause_holds_back_and_resume_delivers(syncthing_pair):
    a, b = syncthing_pair.a, syncthing_pair.b
    b.pause()
    write(os.path.join(a.folder, "while-paused"), b"a")
    write(os.path.join(b.folder, "b-while-paused"), b"b")
    a.scan()
    time.sleep(2.5)  # more than the watcher's delay and a rescan interval: it would have arrived by now
    assert read(os.path.join(b.folder, "while-paused")) is None
    assert read(os.path.join(a.folder, "b-while-paused")) is None
    b.resume()
    syncthing_pair.wait_quiescent()
    assert read(os.path.join(b.folder, "while-paused")) == b"a"
    assert read(os.path.join(a.folder, "b-while-paused")) == b"b"


def test_kill_and_restart_lose_nothing(syncthing_pair):
    a, b = syncthing_pair.a, syncthing_pair.b
    for i in range(20):
        write(os.path.join(a.folder, "batch", f"{i:02d}"), os.urandom(2000))
    b.kill()  # -9 while A's files may be in flight
    for i in range(20, 30):
        write(os.path.join(a.folder, "batch", f"{i:02d}"), os.urandom(2000))
    write(os.path.join(b.folder, "written-while-b-was-down"), b"b")
    b.restart()
    files = syncthing_pair.wait_quiescent()
    assert sum(1 for name in files if "/batch/" in name) == 30
    assert read(os.path.join(a.folder, "written-while-b-was-down")) == b"b"
    # and killing the other side while B writes
    for i in range(10):
        write(os.path.join(b.folder, "from-b", f"{i:02d}"), os.urandom(2000))
    a.kill()
    a.restart()
    files = syncthing_pair.wait_quiescent()
    assert sum(1 for name in files if "/from-b/" in name) == 10
    assert conflict_copies(a.sync_root) == conflict_copies(b.sync_root) == []


def test_throttle_slows_delivery(syncthing_pair):
    a, b = syncthing_pair.a, syncthing_pair.b
    b.throttle(128)  # KiB/s, after a burst of 512 KiB (Syncthing's rate limiter bucket)
    data = os.urandom(896 * 1024)
    write(os.path.join(a.folder, "big"), data)
    a.scan()
    t0 = time.monotonic()
    syncthing_pair.wait_files(lambda s: read(os.path.join(s.folder, "big")) == data, b, what="big arrives")
    assert time.monotonic() - t0 > 1.5  # (896 - 512) KiB at 128 KiB/s: 3 s
    b.throttle(0)
    syncthing_pair.wait_quiescent()
