"""Crash injection inside a crash-test worker process: count the file-system calls the product makes,
kill the process just before the N-th one, and optionally emulate a power cut first.

A SIGKILL alone only tests a *process* crash: the kernel still holds every byte the process wrote,
synced or not.  To test what ``fsync`` ordering is for, :class:`FaultFS` also keeps the strict POSIX
account of what is durable, and on a power cut undoes what is not:

* a file's bytes are durable only once the file was fsynced; at the cut an unsynced file keeps its
  last fsynced bytes (``cut="all"``) or a random prefix of what was written (``cut="random"``; a file
  overwritten in place with ``os.pwrite``: the new bytes up to a random point, the old ones after it);
* a directory entry change (create, link, rename, replace, unlink, mkdir) is durable only once its
  directory was fsynced; at the cut the changes not yet covered are undone, all of them
  (``cut="all"``) or a random suffix per directory (``cut="random"``, i.e. each directory kept its
  changes in order up to a random point);
* a new directory's own entry needs an fsync of its parent, like any other entry.

Only paths under the given roots (the vault folder and the installations' homes) are tracked;
everything there before :meth:`FaultFS.install` counts as durable.  Calls through Python's ``open()``
(not ``os.open``) are not tracked and count as durable.

Counted events (the kill points): ``os.open`` that creates a file, ``os.write``, ``os.pwrite``,
``os.ftruncate``, ``os.fsync``,
``os.link``, ``os.rename``, ``os.replace``, ``os.unlink``/``os.remove`` and ``os.mkdir`` under the roots.

Used only by the worker process, on its main thread, around real product code.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import stat
import sys
from dataclasses import dataclass


@dataclass
class _Fd:
    path: str
    inode: tuple[int, int]
    is_dir: bool


class FaultFS:
    def __init__(self, roots: list[str], stash: str, *, kill_at: int | None = None, cut: str = "none",
                 seed: int = 0) -> None:
        if cut not in ("none", "all", "random"):
            raise ValueError(f"unknown cut mode {cut}")
        self.roots = [os.path.abspath(r) for r in roots]
        self.stash = stash
        self.kill_at = kill_at
        self.cut = cut
        self.rng = random.Random(seed)
        self.events = 0
        self.active = False
        self.fds: dict[int, _Fd] = {}
        self.durable: dict[tuple[int, int], bytes] = {}  # inode -> bytes at its last fsync
        self.dirty: set[tuple[int, int]] = set()
        self.overwritten: set[tuple[int, int]] = set()  # files written in place (os.pwrite)
        self.pending: list[tuple] = []  # (directory, op, *args), oldest first
        self._stashed = 0
        self.o: dict[str, object] = {}

    # ------------------------------------------------------------------ installation

    def install(self) -> None:
        os.makedirs(self.stash, exist_ok=True)
        for name in ("open", "write", "pwrite", "ftruncate", "fsync", "close", "link", "rename", "replace", "unlink",
                     "remove", "mkdir"):
            self.o[name] = getattr(os, name)
            setattr(os, name, getattr(self, f"_{name}"))
        self.active = True

    def _tracked(self, path) -> bool:
        if not self.active or not isinstance(path, str):
            return False
        p = os.path.abspath(path)
        return any(p == r or p.startswith(r + os.sep) for r in self.roots)

    def _event(self, what: str) -> None:
        self.events += 1
        if self.kill_at is not None and self.events >= self.kill_at:
            self.crash(what)

    def _stash_copy(self, path: str) -> str | None:
        """A hard link to ``path`` (so an undone unlink or replace can bring it back)."""
        if not os.path.lexists(path) or os.path.isdir(path):
            return None
        self._stashed += 1
        target = os.path.join(self.stash, f"{self._stashed:08d}")
        link = self.o.get("link", os.link)
        link(path, target)  # type: ignore[operator]
        return target

    # ------------------------------------------------------------------ hooks

    def _open(self, path, flags, mode=0o777, *, dir_fd=None):
        if dir_fd is not None or not self._tracked(path):
            return self.o["open"](path, flags, mode, dir_fd=dir_fd)
        creating = bool(flags & os.O_CREAT) and not os.path.lexists(path)
        if creating:
            self._event("create " + path)
        fd = self.o["open"](path, flags, mode)
        st = os.fstat(fd)
        inode = (st.st_dev, st.st_ino)
        is_dir = stat.S_ISDIR(st.st_mode)
        self.fds[fd] = _Fd(os.path.abspath(path), inode, is_dir)
        if creating:
            self.pending.append((os.path.dirname(os.path.abspath(path)), "create", os.path.abspath(path)))
            self.durable[inode] = b""
        elif not is_dir and flags & (os.O_WRONLY | os.O_RDWR) and inode not in self.durable:
            with open(f"/proc/self/fd/{fd}", "rb") as fh:
                self.durable[inode] = fh.read()
        return fd

    def _write(self, fd, data):
        f = self.fds.get(fd)
        if f is None or not self.active:
            return self.o["write"](fd, data)
        self._event("write " + f.path)
        n = self.o["write"](fd, data)
        self.dirty.add(f.inode)
        return n

    def _pwrite(self, fd, data, offset):
        """A write in place (a file overwritten, like the device state's copies): dirty until fsynced."""
        f = self.fds.get(fd)
        if f is None or not self.active:
            return self.o["pwrite"](fd, data, offset)
        self._event("pwrite " + f.path)
        n = self.o["pwrite"](fd, data, offset)
        self.dirty.add(f.inode)
        self.overwritten.add(f.inode)
        return n

    def _ftruncate(self, fd, length):
        f = self.fds.get(fd)
        if f is None or not self.active:
            return self.o["ftruncate"](fd, length)
        self._event("ftruncate " + f.path)
        self.o["ftruncate"](fd, length)
        self.dirty.add(f.inode)
        return None

    def _fsync(self, fd):
        if hasattr(fd, "fileno"):
            fd = fd.fileno()
        f = self.fds.get(fd)
        if f is None or not self.active:
            return self.o["fsync"](fd)
        self._event("fsync " + f.path)
        self.o["fsync"](fd)
        if f.is_dir:
            self.pending = [p for p in self.pending if p[0] != f.path]
        else:
            with open(f"/proc/self/fd/{fd}", "rb") as fh:
                self.durable[f.inode] = fh.read()
            self.dirty.discard(f.inode)
        return None

    def _close(self, fd):
        self.fds.pop(fd, None)
        return self.o["close"](fd)

    def _link(self, src, dst, **kw):
        """A new name for an existing file (the create-only commit of spec §4.4): undone at a power
        cut like a created file until its directory is fsynced."""
        if kw or not self._tracked(dst):
            return self.o["link"](src, dst, **kw)
        self._event(f"link {src} -> {dst}")
        self.o["link"](src, dst)
        self.pending.append((os.path.dirname(os.path.abspath(dst)), "create", os.path.abspath(dst)))
        return None

    def _rename_like(self, which: str, src, dst, **kw):
        if kw or not self._tracked(dst):
            return self.o[which](src, dst, **kw)
        self._event(f"{which} {src} -> {dst}")
        stash = self._stash_copy(dst) if which == "replace" or os.path.lexists(dst) else None
        self.o[which](src, dst)
        self.pending.append((os.path.dirname(os.path.abspath(dst)), "rename", os.path.abspath(src),
                             os.path.abspath(dst), stash))
        return None

    def _rename(self, src, dst, **kw):
        return self._rename_like("rename", src, dst, **kw)

    def _replace(self, src, dst, **kw):
        return self._rename_like("replace", src, dst, **kw)

    def _unlink_like(self, which: str, path, **kw):
        if kw or not self._tracked(path) or not os.path.lexists(path):
            return self.o[which](path, **kw)
        self._event(f"unlink {path}")
        stash = self._stash_copy(path)
        self.o[which](path)
        self.pending.append((os.path.dirname(os.path.abspath(path)), "unlink", os.path.abspath(path), stash))
        return None

    def _unlink(self, path, **kw):
        return self._unlink_like("unlink", path, **kw)

    def _remove(self, path, **kw):
        return self._unlink_like("remove", path, **kw)

    def _mkdir(self, path, mode=0o777, **kw):
        if kw or not self._tracked(path) or os.path.lexists(path):
            return self.o["mkdir"](path, mode, **kw)
        self._event(f"mkdir {path}")
        self.o["mkdir"](path, mode)
        self.pending.append((os.path.dirname(os.path.abspath(path)), "mkdir", os.path.abspath(path)))
        return None

    # ------------------------------------------------------------------ the crash

    def crash(self, what: str = "") -> None:
        """Apply the power cut (if any) and SIGKILL this process.  Never returns."""
        self.active = False
        try:
            if self.cut != "none":
                self._power_cut()
        except BaseException as exc:  # the kill must happen whatever the emulation did
            print(f"faultfs: power-cut emulation failed: {exc!r}", file=sys.stderr, flush=True)
        print(f"faultfs: killed before event {self.events} ({what}) cut={self.cut}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    def _lost_operations(self) -> list[tuple]:
        if self.cut == "all":
            return list(self.pending)
        by_dir: dict[str, list[int]] = {}
        for i, p in enumerate(self.pending):
            by_dir.setdefault(p[0], []).append(i)
        lost: set[int] = set()
        for indices in by_dir.values():
            keep = self.rng.randint(0, len(indices))
            lost.update(indices[keep:])
        return [p for i, p in enumerate(self.pending) if i in lost]

    def _power_cut(self) -> None:
        rename, unlink = self.o["rename"], self.o["unlink"]
        for op in reversed(self._lost_operations()):
            kind = op[1]
            print(f"faultfs: power cut undoes {kind} {' '.join(str(a) for a in op[2:] if a)}", file=sys.stderr)
            if kind == "create" and os.path.lexists(op[2]):
                unlink(op[2])
            elif kind == "rename":
                _, _, src, dst, stash = op
                if os.path.lexists(dst):
                    rename(dst, src)
                if stash:
                    rename(stash, dst)
            elif kind == "unlink" and op[3]:
                rename(op[3], op[2])
            elif kind == "mkdir" and os.path.isdir(op[2]):
                shutil.rmtree(op[2])
        if not self.dirty:
            return
        where: dict[tuple[int, int], str] = {}
        for root in self.roots:
            for dirpath, _dirs, files in os.walk(root):
                for f in files:
                    full = os.path.join(dirpath, f)
                    st = os.lstat(full)
                    where[(st.st_dev, st.st_ino)] = full
        for inode in self.dirty:
            path = where.get(inode)
            if path is None:
                continue
            with open(path, "rb") as fh:
                now = fh.read()
            if self.cut == "all" or self.rng.random() < 0.5:
                content = self.durable.get(inode, b"")
            elif inode in self.overwritten:  # torn: the new bytes up to a point, the old ones after it
                at = self.rng.randint(0, len(now))
                old = self.durable.get(inode, b"")
                content = now[:at] + old[at:]
            else:
                content = now[: self.rng.randint(0, len(now))]
            with open(path, "wb") as fh:
                fh.write(content)
