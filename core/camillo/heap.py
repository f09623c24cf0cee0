"""Give the C heap's free memory back to the system after a large operation.

A cold open of a million records grows the process by hundreds of MiB: SQLite's page cache for the
load (about 90 MiB, narrowed once the rows are written), the sorts of its index builds, Python's larger
objects.  Freed, that memory stays with the C library's allocator, which returns to the system only
what lies at the top of its heap: after such an open the process kept 359 MiB, of which 113 MiB
free.  :func:`release` asks glibc to return every free page (``malloc_trim(0)``: a few milliseconds
for a heap of 300 MiB).  Elsewhere (another C library, another system) it does nothing.

Any thread may call it (the allocator takes its own locks).
"""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Callable

_trim: Callable[[int], int] | None = None
_looked = False


def _malloc_trim() -> Callable[[int], int] | None:
    global _trim, _looked
    if not _looked:
        _looked = True
        if sys.platform.startswith("linux"):
            try:  # (the C library the interpreter runs on: glibc has malloc_trim, musl has none)
                trim = ctypes.CDLL(None).malloc_trim
                trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
                _trim = trim
            except (OSError, AttributeError):
                _trim = None
    return _trim


def release() -> bool:
    """Return the C heap's free pages to the system; whether anything was returned (False where
    the C library offers no way to)."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False
