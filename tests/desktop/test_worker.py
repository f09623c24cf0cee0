"""The vault worker: one thread runs every vault call; results come back on the GUI thread."""

from __future__ import annotations

import threading
import time

import camillo
import pytest
import shiboken6
from camillo import Cancelled
from PySide6.QtCore import QThread
from PySide6.QtWidgets import QWidget

from .helpers import call, wait_idle


def ptr(obj) -> int:
    return shiboken6.getCppPointer(obj)[0]


def test_jobs_run_on_the_worker_thread_in_submission_order(qtbot, qapp, client):
    seen: list[tuple[int, int, int]] = []
    for i in range(20):
        client.submit(lambda ctx, i=i: seen.append((i, ptr(QThread.currentThread()), threading.get_ident())))
    wait_idle(qtbot, client)
    assert [s[0] for s in seen] == list(range(20))
    threads = {s[1] for s in seen}
    assert threads == {ptr(client.thread)}
    assert ptr(qapp.thread()) not in threads
    assert {s[2] for s in seen} != {threading.get_ident()}
    assert len({s[2] for s in seen}) == 1


def test_callbacks_run_on_the_gui_thread(qtbot, qapp, client):
    where: dict[str, int] = {}
    progress: list[int] = []

    def job(ctx):
        ctx.progress(1, 2, "half")
        return threading.get_ident()

    def ok(worker_ident):
        where["ok"] = ptr(QThread.currentThread())
        where["worker"] = worker_ident

    client.submit(job, ok, on_progress=lambda d, t, w: progress.append(ptr(QThread.currentThread())))
    client.submit(lambda ctx: 1 / 0, None, lambda e: where.setdefault("err", ptr(QThread.currentThread())))
    with qtbot.waitSignal(client.job_failed):  # the ZeroDivisionError is also reported as unexpected
        wait_idle(qtbot, client)
    assert where["ok"] == where["err"] == ptr(qapp.thread())
    assert progress == [ptr(qapp.thread())]
    assert where["worker"] != threading.get_ident()


def test_busy_changed_brackets_the_jobs(qtbot, client):
    states: list[bool] = []
    client.busy_changed.connect(states.append)
    gate = threading.Event()
    client.submit(lambda ctx: gate.wait(5))
    client.submit(lambda ctx: None)
    assert states == [True]
    gate.set()
    wait_idle(qtbot, client)
    assert states == [True, False]


@pytest.mark.parametrize("outcome", ["success", "error", "progress"])
def test_callback_of_a_deleted_context_widget_is_dropped(qtbot, client, outcome):
    gate = threading.Event()
    started = threading.Event()
    called: list[str] = []
    context = QWidget()

    def job(ctx):
        started.set()
        gate.wait(5)
        if outcome == "progress":
            ctx.progress(1, 1)
        if outcome == "error":
            raise camillo.VaultError("late failure")
        return "late result"

    client.submit(job, lambda r: called.append("ok"), lambda e: called.append("err"), context=context,
                  on_progress=lambda *a: called.append("progress"))
    assert started.wait(5)
    shiboken6.delete(context)  # the dialog closed while its job was running
    assert not shiboken6.isValid(context)
    gate.set()
    wait_idle(qtbot, client)
    qtbot.wait(20)
    assert called == []


def test_a_live_context_gets_its_callback(qtbot, client):
    context = QWidget()
    qtbot.addWidget(context)
    got = []
    client.submit(lambda ctx: 42, got.append, context=context)
    wait_idle(qtbot, client)
    assert got == [42]


def test_vault_errors_reach_on_error_without_job_failed(qtbot, client):
    errors: list[BaseException] = []
    failed: list[object] = []
    client.job_failed.connect(lambda e, tb: failed.append(e))

    def job(ctx):
        raise camillo.WrongCredential("nope")

    client.submit(job, None, errors.append)
    client.submit(lambda ctx: ctx.vault, None, errors.append)  # no vault open yet
    wait_idle(qtbot, client)
    assert isinstance(errors[0], camillo.WrongCredential)
    assert isinstance(errors[1], camillo.VaultError) and "no vault is open" in str(errors[1])
    assert failed == []


def test_other_exceptions_reach_on_error_and_job_failed_with_a_traceback(qtbot, client):
    errors: list[BaseException] = []

    def job(ctx):
        raise KeyError("bug in a job")

    with qtbot.waitSignal(client.job_failed, timeout=5000) as blocker:
        client.submit(job, None, errors.append)
    exc, tb = blocker.args
    assert isinstance(exc, KeyError)
    assert "KeyError" in tb and "bug in a job" in tb and "Traceback" in tb
    assert errors == [exc]


def test_a_job_without_on_error_still_reports_unexpected_errors(qtbot, client):
    with qtbot.waitSignal(client.job_failed, timeout=5000):
        client.submit(lambda ctx: [][1])
    wait_idle(qtbot, client)


def test_cancel_before_it_runs(qtbot, client):
    gate = threading.Event()
    ran: list[bool] = []
    errors: list[BaseException] = []
    client.submit(lambda ctx: gate.wait(5))
    job = client.submit(lambda ctx: ran.append(True), lambda r: ran.append(False), errors.append)
    job.cancel()
    gate.set()
    wait_idle(qtbot, client)
    assert ran == []
    assert len(errors) == 1 and isinstance(errors[0], Cancelled)


def test_a_long_job_stops_at_its_next_check_or_progress(qtbot, client):
    total = 10_000
    done = {"n": 0}
    errors: list[BaseException] = []
    progress: list[int] = []

    def long_job(ctx):
        for i in range(total):
            time.sleep(0.001)
            done["n"] = i
            if i % 2:
                ctx.check()
            else:
                ctx.progress(i, total, "working")
        return "finished"

    results: list[str] = []
    job = client.submit(long_job, results.append, errors.append, on_progress=lambda d, t, w: progress.append(d))
    qtbot.waitUntil(lambda: len(progress) >= 3, timeout=5000)
    job.cancel()
    wait_idle(qtbot, client)
    assert results == []
    assert len(errors) == 1 and isinstance(errors[0], Cancelled)
    assert done["n"] < total - 1


def test_lock_wipes_the_keys_on_the_worker_and_reports_it(qtbot, client, open_demo, monkeypatch):
    info = open_demo()
    assert client.is_open and info["name"] == "Demo vault"
    vault = call(qtbot, client, lambda ctx: ctx.vault)
    keyring = vault.session.keyring  # the machinery behind the facade: what locking must wipe
    secrets = call(qtbot, client, lambda ctx: list(keyring.epoch_secrets.values()))
    vms = keyring.master
    assert secrets and not any(s.wiped for s in secrets) and not vms.wiped
    lock_threads: list[int] = []
    original = camillo.Vault.lock

    def spy(self):
        lock_threads.append(threading.get_ident())
        return original(self)

    monkeypatch.setattr(camillo.Vault, "lock", spy)
    with qtbot.waitSignal(client.vault_locked, timeout=10_000):
        client.lock()
    assert lock_threads and threading.get_ident() not in lock_threads
    assert vault.locked
    assert all(s.wiped for s in secrets)
    assert vms.wiped
    assert keyring.epoch_secrets == {} and keyring.epoch_keys == {} and keyring.master is None
    assert vault.writer_id is None
    assert not client.is_open
    with pytest.raises(camillo.VaultError, match="no vault is open"):
        call(qtbot, client, lambda ctx: ctx.vault)


def test_lock_cancels_queued_jobs(qtbot, client, open_demo):
    open_demo()
    gate = threading.Event()
    errors: list[BaseException] = []
    client.submit(lambda ctx: gate.wait(5))
    client.submit(lambda ctx: ctx.vault.timeline(), None, errors.append)
    with qtbot.waitSignal(client.vault_locked, timeout=10_000):
        client.lock()
        gate.set()
    assert len(errors) == 1 and isinstance(errors[0], Cancelled)


def test_a_facade_call_on_the_gui_thread_is_refused(qtbot, client, open_demo, demo_vault):
    from camillo_desktop.worker import GuiThreadViolation

    open_demo()
    vault = call(qtbot, client, lambda ctx: ctx.vault)
    with pytest.raises(GuiThreadViolation):
        vault.timeline()
    with pytest.raises(GuiThreadViolation):
        vault.search("coffee")
    with pytest.raises(GuiThreadViolation):
        camillo.Vault.open(demo_vault.path, demo_vault.unlock(), home=demo_vault.homes["desktop"])
    with pytest.raises(GuiThreadViolation):
        camillo.Vault.device_unlock_available(demo_vault.path)
    # The same calls are fine on the worker.
    assert call(qtbot, client, lambda ctx: len(ctx.vault.timeline())) > 0


def test_open_vault_reports_the_vault_and_replaces_the_previous_one(qtbot, client, open_demo):
    opened: list[dict] = []
    client.vault_opened.connect(opened.append)
    info = open_demo()
    first = call(qtbot, client, lambda ctx: ctx.vault)
    assert opened == [info]
    assert info["credential"] == "passphrase" and info["sync"] == "up to date"
    assert set(info["compartments"]) >= {"personal", "work", "health"}
    assert info["is_owner"] and not info["read_only"]
    open_demo()
    assert first.locked  # the worker locked the vault it replaced
    assert call(qtbot, client, lambda ctx: ctx.vault) is not first


def test_shutdown_locks_and_stops_the_thread(qtbot, tmp_path, passphrase):
    from camillo import Vault

    from camillo_desktop.worker import VaultClient, install_thread_guard, remove_thread_guard

    install_thread_guard()
    c = VaultClient()
    try:
        box: dict = {}
        c.open_vault(lambda ctx: Vault.create(str(tmp_path / "v"), passphrase)[0],
                     lambda info: box.setdefault("ok", info), lambda e: box.setdefault("err", e))
        qtbot.waitUntil(lambda: bool(box), timeout=20_000)
        assert "err" not in box
        vault = call(qtbot, c, lambda ctx: ctx.vault)
        c.shutdown()
        assert vault.locked
        assert c.thread.isFinished()
    finally:
        if c.thread.isRunning():
            c.shutdown()
        remove_thread_guard()
