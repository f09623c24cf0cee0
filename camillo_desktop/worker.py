"""The vault worker: one QThread owns the unlocked vault; the GUI submits jobs to it.

Every vault call (I/O, crypto, SQLite) runs on this one thread, in submission order.  The GUI
thread calls :meth:`VaultClient.submit` with a function that takes a :class:`JobContext`; the
result or the error comes back through queued signals and is delivered to the callbacks on the
GUI thread, unless the widget given as ``context`` has been destroyed meanwhile (then it is
dropped, as KeePassXC's AsyncTask does).  Long jobs report progress through the context and can be
cancelled: :meth:`JobContext.check` raises :class:`camillo.Cancelled` once the GUI asked.

After every open and every job that changes the vault (:meth:`VaultClient.mutate`, refreshing
included), the worker asks the vault what the person must be told (:func:`report`: its sync state
and ``Vault.notices()``) and the client reports it through ``status_reported`` (the open's is in
the info that ``vault_opened`` carries).

Locking runs on the worker too: it drops the vault's keys there (``Vault.lock`` wipes them) and
then reports ``vault_locked``.  :meth:`VaultClient.lock` is idempotent: from the call until
``vault_locked`` the client is ``locking``, and a second call (a double press, auto-lock at the same
moment) only adds its callback.  :meth:`VaultClient.shutdown` is idempotent too.  The thread guard
installed by :func:`install_thread_guard` makes any facade call from the GUI thread fail loudly (the
desktop's one threading rule).

Threads: :class:`VaultClient` on the GUI thread only; :class:`VaultWorker` and job functions on the
worker thread only.
"""

from __future__ import annotations

import gc
import itertools
import os
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import camillo
import shiboken6
from camillo import Cancelled
from PySide6.QtCore import QCoreApplication, QObject, QThread, Signal, Slot

_ids = itertools.count(1)


class GuiThreadViolation(AssertionError):
    """A vault call was made on the GUI thread (a bug)."""


def install_thread_guard() -> None:
    """Make every facade call fail when made on the GUI thread."""

    def guard() -> None:
        app = QCoreApplication.instance()
        if app is not None and QThread.currentThread() is app.thread():
            raise GuiThreadViolation("a vault call ran on the GUI thread; submit it to the vault worker")

    camillo.set_thread_guard(guard)


def remove_thread_guard() -> None:
    camillo.set_thread_guard(None)


@dataclass
class Job:
    fn: Callable[[JobContext], Any]
    on_success: Callable[[Any], None] | None = None
    on_error: Callable[[BaseException], None] | None = None
    on_progress: Callable[[int, int, str], None] | None = None
    context: QObject | None = None
    label: str = ""
    id: int = field(default_factory=lambda: next(_ids))
    cancelled: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        self.cancelled.set()


@dataclass(frozen=True)
class Changed:
    """A job's result that carries the :class:`camillo.Changes` the vault returned (which
    :meth:`VaultClient.mutate` broadcasts) and, in ``value``, what else the job's caller needs."""

    changes: camillo.Changes
    value: Any = None


class JobContext:
    """What a job function gets on the worker thread."""

    def __init__(self, worker: VaultWorker, job: Job) -> None:
        self._worker = worker
        self._job = job

    @property
    def vault(self) -> camillo.Vault:
        if self._worker.vault is None:
            raise camillo.VaultError("no vault is open (it was locked)")
        return self._worker.vault

    def set_vault(self, vault: camillo.Vault | None) -> None:
        old = self._worker.vault
        try:
            if old is not None and old is not vault and not old.locked:
                old.lock()
        finally:
            self._worker.vault = vault  # dropped even if wiping its keys failed

    def check(self) -> None:
        if self._job.cancelled.is_set():
            raise Cancelled("cancelled")

    def progress(self, done: int, total: int, what: str = "") -> None:
        self.check()
        self._worker.progress_made.emit(self._job.id, done, total, what)

    def report(self) -> dict[str, Any] | None:
        """:func:`report` of the open vault; None when none is open (the job locked it) or when the
        vault cannot say (the job's own result stands: it happened)."""
        vault = self._worker.vault
        if vault is None or vault.locked:
            return None
        try:
            return report(vault)
        except camillo.VaultError:
            return None


class VaultWorker(QObject):
    result_ready = Signal(int, object)
    error_raised = Signal(int, object, str)
    progress_made = Signal(int, int, int, str)

    def __init__(self) -> None:
        super().__init__()
        self.vault: camillo.Vault | None = None

    @Slot(object)
    def run_job(self, job: Job) -> None:
        if job.cancelled.is_set():
            self.error_raised.emit(job.id, Cancelled("cancelled before it started"), "")
            return
        try:
            result = job.fn(JobContext(self, job))
        except BaseException as exc:  # delivered to the GUI, which decides how to show it
            self.error_raised.emit(job.id, exc, traceback.format_exc())
            return
        self.result_ready.emit(job.id, result)


class VaultClient(QObject):
    """The GUI side.  Signals are past-tense events the views listen to."""

    vault_changed = Signal(object)  # camillo.Changes
    vault_opened = Signal(object)  # a dict describing the open vault
    vault_locked = Signal()
    status_reported = Signal(object)  # report(): sync state and notices, after every mutation
    busy_changed = Signal(bool)
    job_failed = Signal(object, str)  # unexpected errors (bugs), for a log or a dialog
    _submit = Signal(object)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._thread = QThread()
        self._thread.setObjectName("camillo-vault-worker")
        self._worker = VaultWorker()
        self._worker.moveToThread(self._thread)
        self._submit.connect(self._worker.run_job)
        self._worker.result_ready.connect(self._on_result)
        self._worker.error_raised.connect(self._on_error)
        self._worker.progress_made.connect(self._on_progress)
        self._jobs: dict[int, Job] = {}
        self.is_open = False
        self.info: dict[str, Any] = {}
        self._lock_callbacks: list[Callable[[], None]] | None = None  # not None while locking
        self._shut_down = False
        self._thread.start()

    @property
    def locking(self) -> bool:
        """A lock was asked for and has not finished yet."""
        return self._lock_callbacks is not None

    @property
    def thread(self) -> QThread:
        return self._thread

    def submit(self, fn: Callable[[JobContext], Any], on_success: Callable[[Any], None] | None = None,
               on_error: Callable[[BaseException], None] | None = None, *, context: QObject | None = None,
               on_progress: Callable[[int, int, str], None] | None = None, label: str = "") -> Job:
        job = Job(fn, on_success, on_error, on_progress, context, label)
        self._jobs[job.id] = job
        if len(self._jobs) == 1:
            self.busy_changed.emit(True)
        self._submit.emit(job)
        return job

    def mutate(self, fn: Callable[[JobContext], Any], on_success: Callable[[Any], None] | None = None,
               on_error: Callable[[BaseException], None] | None = None, **kw: Any) -> Job:
        """A job that changes the vault: its result (the Changes the vault returned, or an object
        carrying them in ``.changes``, such as :class:`Changed`) is broadcast to every view through
        ``vault_changed``; each view reloads only if it shows something the Changes name.  The
        desktop's jobs return exactly what the vault returned (a Changes, a report or an
        :class:`~camillo.ImportReport` holding one, or :class:`Changed`), never a Changes of their
        own.  A result without Changes broadcasts ``Changes(reloaded=True)``: every view reloads.
        Then the vault's :func:`report` (asked on the worker after ``fn``) goes out through
        ``status_reported``."""

        def job(ctx: JobContext) -> tuple[Any, dict[str, Any] | None]:
            return fn(ctx), ctx.report()

        def done(outcome: tuple[Any, dict[str, Any] | None]) -> None:
            result, status = outcome
            changes = result if isinstance(result, camillo.Changes) else getattr(result, "changes", None)
            self.vault_changed.emit(changes if changes is not None else camillo.Changes(reloaded=True))
            if status is not None:
                self.status_reported.emit(status)
            if on_success is not None:
                on_success(result)

        return self.submit(job, done, on_error, **kw)

    def _alive(self, job: Job) -> bool:
        return job.context is None or shiboken6.isValid(job.context)

    def _finish(self, job_id: int) -> Job | None:
        job = self._jobs.pop(job_id, None)
        if not self._jobs:
            self.busy_changed.emit(False)
        return job

    @Slot(int, object)
    def _on_result(self, job_id: int, result: Any) -> None:
        job = self._finish(job_id)
        if job is not None and job.on_success is not None and self._alive(job):
            job.on_success(result)

    @Slot(int, object, str)
    def _on_error(self, job_id: int, exc: BaseException, tb: str) -> None:
        job = self._finish(job_id)
        if job is None or not self._alive(job):
            return
        if not isinstance(exc, (camillo.VaultError, Cancelled)):
            self.job_failed.emit(exc, tb)
        if job.on_error is not None:
            job.on_error(exc)

    @Slot(int, int, int, str)
    def _on_progress(self, job_id: int, done: int, total: int, what: str) -> None:
        job = self._jobs.get(job_id)
        if job is not None and job.on_progress is not None and self._alive(job):
            job.on_progress(done, total, what)

    def open_vault(self, opener: Callable[[JobContext], camillo.Vault], on_success: Callable[[Any], None],
                   on_error: Callable[[BaseException], None], *, context: QObject | None = None,
                   on_progress: Callable[[int, int, str], None] | None = None) -> Job:
        """Run ``opener`` on the worker; the vault it returns becomes the worker's vault."""

        def job(ctx: JobContext) -> dict[str, Any]:
            # Opening allocates the vault's objects by the million (at 1M records).  Each full
            # collection meanwhile would walk the growing heap holding the GIL, stalling the GUI
            # thread for a second and more: collections wait until the open is over, and the new
            # objects, which live as long as the vault, are then frozen out of their way.
            enabled = gc.isenabled()
            gc.disable()
            opened = False
            try:
                vault = opener(ctx)
                ctx.set_vault(vault)
                info = describe(vault)
                opened = True
                return info
            finally:
                if opened:
                    gc.freeze()
                if enabled:
                    gc.enable()

        def done(info: dict[str, Any]) -> None:
            self.is_open = True
            self.info = info
            self.vault_opened.emit(info)
            on_success(info)

        return self.submit(job, done, on_error, context=context, on_progress=on_progress, label="opening the vault")

    def lock(self, on_done: Callable[[], None] | None = None) -> None:
        """Cancel what is queued, wipe the keys on the worker, then report ``vault_locked`` (once,
        however many times this is called before the lock finished)."""
        if self._lock_callbacks is not None:  # already locking: one lock job, one vault_locked
            if on_done is not None:
                self._lock_callbacks.append(on_done)
            return
        self._lock_callbacks = [on_done] if on_done is not None else []
        for job in list(self._jobs.values()):
            job.cancel()

        def job(ctx: JobContext) -> None:
            ctx.set_vault(None)

        def done(_: Any) -> None:
            callbacks, self._lock_callbacks = self._lock_callbacks or [], None
            self.is_open = False
            self.vault_locked.emit()
            for callback in callbacks:
                callback()

        # Cancelled (shut down before it ran) or failed: either way the worker no longer holds the vault.
        self.submit(job, done, lambda _e: done(None), label="locking")

    def shutdown(self) -> None:
        """Lock, stop the thread and wait for it (on quit).  A second call returns at once."""
        if self._shut_down or not self._thread.isRunning():
            self._shut_down = True
            return
        self._shut_down = True
        for job in list(self._jobs.values()):
            job.cancel()
        done = threading.Event()

        def job(ctx: JobContext) -> None:
            try:
                ctx.set_vault(None)
            finally:
                done.set()

        self._submit.emit(Job(job))
        done.wait(10)
        self._thread.quit()
        self._thread.wait(10_000)


def report(vault: camillo.Vault) -> dict[str, Any]:
    """What the person must be told about the open vault now (worker thread): its sync state for
    the status bar (``sync``, ``sync_details``) and ``Vault.notices()`` (``notices``, a list of
    ``camillo.Notice``) for the notice bar, with the ``vault_id`` they concern."""
    sync = vault.sync_status()
    return {"vault_id": vault.vault_id.hex(), "sync": sync.state, "sync_details": list(sync.details),
            "notices": list(vault.notices())}


def describe(vault: camillo.Vault) -> dict[str, Any]:
    """What the status bar and the views need to know about the open vault, its :func:`report`
    included (worker thread)."""
    grant = vault.agent_grant
    return {
        "path": vault.location,
        "name": os.path.basename(vault.location.split("?")[0].rstrip("/")) or vault.location,
        "vault_id": vault.vault_id.hex(),
        "credential": vault.unlocked_with,
        "read_only": vault.read_only,
        "agent": grant.agent if grant is not None else None,
        "compartments": list(vault.compartments),
        "is_owner": vault.is_owner,
        **report(vault),
    }
