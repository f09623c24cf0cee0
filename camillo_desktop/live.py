"""Live: what another device or an agent writes into the vault folder shows up within two seconds.

A :class:`QFileSystemWatcher` on the vault folder and its subfolders (new subfolders are watched as
they appear) asks for a refresh a moment after anything changes; a poll every
:data:`POLL_MS` milliseconds asks too, because a watcher does not see every change (network
folders, some sync clients, and files replaced while a folder was being listed).  A refresh is a
quiet mutation on the vault worker (``Vault.refresh``): only the views the returned Changes name
reload, and the status bar gets the vault's sync state after it.  At most one refresh is queued at a
time, and none while other work is waiting (the person's actions come first).

A ``.vmem`` file is watched as a file.  GUI thread only; the refresh runs on the vault worker.
"""

from __future__ import annotations

import os
from typing import Any

from PySide6.QtCore import QFileSystemWatcher, QObject, QTimer, Signal

POLL_MS = 1500  # the poll's period; a change is seen within it plus one refresh
SETTLE_MS = 150  # after the watcher's first signal, wait this long for the writer to finish


class FolderWatcher(QObject):
    """Watches one vault location; ``refresh_wanted`` asks the window to refresh (see the module)."""

    refresh_wanted = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.watcher = QFileSystemWatcher(self)
        self.watcher.directoryChanged.connect(self._changed)
        self.watcher.fileChanged.connect(self._changed)
        self.settle = QTimer(self)
        self.settle.setSingleShot(True)
        self.settle.setInterval(SETTLE_MS)
        self.settle.timeout.connect(self.refresh_wanted)
        self.poll = QTimer(self)
        self.poll.setInterval(POLL_MS)
        self.poll.timeout.connect(self.refresh_wanted)
        self.location: str | None = None

    def watch(self, location: str) -> None:
        self.stop()
        self.location = location
        self._add_paths()
        self.poll.start()

    def stop(self) -> None:
        self.location = None
        self.poll.stop()
        self.settle.stop()
        paths = self.watcher.directories() + self.watcher.files()
        if paths:
            self.watcher.removePaths(paths)

    @property
    def active(self) -> bool:
        return self.location is not None

    def _add_paths(self) -> None:
        """The folder and every subfolder (two levels: segments/<xx>/), skipping those watched already."""
        location = self.location
        if location is None:
            return
        if os.path.isfile(location):
            wanted = [location]
        else:
            wanted = [location]
            try:
                for entry in os.scandir(location):
                    if entry.is_dir(follow_symlinks=False):
                        wanted.append(entry.path)
                        wanted += [e.path for e in os.scandir(entry.path) if e.is_dir(follow_symlinks=False)]
            except OSError:
                pass
        have = set(self.watcher.directories()) | set(self.watcher.files())
        new = [p for p in wanted if p not in have]
        if new:
            self.watcher.addPaths(new)

    def _changed(self, _path: str) -> None:
        if self.location is None:
            return
        self._add_paths()  # a new subfolder (a writer's first segment under a new prefix)
        if not self.settle.isActive():
            self.settle.start()


class LiveRefresh(QObject):
    """Runs the refreshes a :class:`FolderWatcher` asks for, one at a time, quietly."""

    def __init__(self, window: Any) -> None:
        super().__init__(window)
        self.window_ = window
        self.watcher = FolderWatcher(self)
        self.watcher.refresh_wanted.connect(self.refresh)
        self._running = False
        self.refreshes = 0  # how many ran (tests and the status bar's tooltip)

    def start(self, location: str) -> None:
        self.watcher.watch(location)

    def stop(self) -> None:
        self.watcher.stop()

    def refresh(self) -> None:
        client = self.window_.client
        if self._running or not client.is_open or client.locking or client.pending_jobs():
            return
        self._running = True

        def done(_result: Any) -> None:
            self._running = False
            self.refreshes += 1
            self.window_.refreshed(_result)

        def failed(exc: BaseException) -> None:
            self._running = False

        client.mutate(self.window_.refresh_job, done, failed, context=self, label="checking for changes", quiet=True)
