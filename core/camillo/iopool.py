"""One process-wide pool of threads for file writes and fsyncs (an operation's files, directories).

An operation that writes several files (a key change's envelopes and slots, an erasure's segments)
hands their writes and fsyncs to these threads, which wait on the disk, not the processor, and waits
for its own jobs before it returns.  The threads are started once, on first use, and kept: starting
a dozen threads for each operation cost a passphrase change about 4 ms.

Any thread may call :func:`run_all`; a job that itself calls it (a nested write) runs its jobs
inline, so the pool's threads never wait on one another.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

WORKERS = 8  # threads writing (and fsyncing) the files of one operation at once

T = TypeVar("T")
_lock = threading.Lock()
_pool: concurrent.futures.ThreadPoolExecutor | None = None
_here = threading.local()


def _mark() -> None:
    _here.worker = True


def _shared() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = concurrent.futures.ThreadPoolExecutor(WORKERS, thread_name_prefix="camillo-io", initializer=_mark)
        return _pool


def run_all(jobs: Sequence[Callable[[], T]]) -> list[T | BaseException]:
    """Run ``jobs`` on the pool (inline when there is one, or when called from the pool) and wait for
    all of them; each one's result, or the exception it raised, in order."""
    if len(jobs) < 2 or getattr(_here, "worker", False):
        return [_call(job) for job in jobs]
    pool = _shared()
    futures = [pool.submit(job) for job in jobs]
    out: list[T | BaseException] = []
    for f in futures:
        try:
            out.append(f.result())
        except BaseException as exc:  # (handed back: the caller raises the first)
            out.append(exc)
    return out


def _call(job: Callable[[], T]) -> T | BaseException:
    try:
        return job()
    except BaseException as exc:
        return exc
