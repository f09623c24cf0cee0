"""One sync of a file system for many new files, instead of an fsync of each (spec §4.4 asks
that a file's bytes be durable before its name appears: this makes every file written before it
durable at once).  Any thread may call it; the call blocks until the system has written back.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
import sys
from collections.abc import Callable, Iterable

WholeSync = Callable[[Iterable[str]], None]  # makes durable what was written to the directories' file systems


@functools.lru_cache(maxsize=1)
def file_system_sync() -> WholeSync | None:
    """A function that makes every byte written before it to the file systems holding the given
    directories durable, raising OSError when the system reports a failure to write back: Linux's
    ``syncfs(2)``, from kernel 5.8 (before, it did not report write-back errors).  None elsewhere:
    each file is fsynced."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        kernel = tuple(int(x) for x in re.findall(r"\d+", os.uname().release)[:2])
        syncfs = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError, ValueError):
        return None
    if len(kernel) < 2 or kernel < (5, 8):
        return None
    syncfs.argtypes, syncfs.restype = [ctypes.c_int], ctypes.c_int

    def sync(directories: Iterable[str]) -> None:
        by_device = {os.stat(d).st_dev: d for d in directories}  # one call per file system
        for directory in by_device.values():
            fd = os.open(directory, os.O_RDONLY)
            try:
                if syncfs(fd) != 0:  # (ctypes releases the interpreter lock for the call)
                    err = ctypes.get_errno()
                    raise OSError(err, os.strerror(err), directory)
            finally:
                os.close(fd)

    return sync
