"""Two real Syncthing instances on loopback sharing one folder: the sync engine of tests/sync.

:class:`Pair` generates two Syncthing homes (``syncthing generate``), rewrites each ``config.xml``
so that the instance talks to nothing but the other one (GUI/REST and the sync protocol on
127.0.0.1 at free ports, no discovery, relays, NAT, STUN, usage or crash reporting, upgrades),
shares one folder between them (``sendreceive``, short rescan interval, the file watcher on with a
short delay, permissions ignored, no versioning), starts both (``syncthing serve``) and drives them
through the REST API: pause and resume the folder, throttle, scan, kill -9 and restart.

:meth:`Pair.wait_quiescent` is the one synchronisation point the tests use: both instances up and
connected to each other, both folders idle with nothing needed, each at 100 % completion for the
other, and the two folders holding the same files (relative path -> SHA-256 of every file whose
path has no dot-component: ``.stfolder``, ``.stversions``, ``.syncthing.*.tmp`` and Camillo's own
``.tmp-*`` staging files are left out) for :data:`STABLE_SECONDS`.  Anything failing says what it
waited for and shows the tail of both instances' logs.

Each side's synced folder is ``<base>/<side>/sync``; a test's vault is a subfolder of it (one per
test, so a module can reuse one pair), exposed as ``side.folder``.  ``side.home(name)`` is a
CAMILLO_HOME for one installation on that side.

The processes are started in their own session, with the parent-death signal set to SIGKILL, and
are always killed by :meth:`Pair.close` (the fixture's teardown; also registered with atexit).

pytest main thread only.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import hashlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

FOLDER_ID = "camillo-vault"
STABLE_SECONDS = 0.5  # how long a quiescent state must hold before it counts
RESCAN_S = 2  # the folders' periodic rescan (the watcher and explicit scans are faster)
WATCH_DELAY_S = 1  # the file watcher's aggregation delay (whole seconds in 1.19)
LOG_TAIL = 60  # lines of each instance's log shown when something fails


class SyncthingError(AssertionError):
    """The harness could not get the pair into the state asked for (with both logs attached)."""


class RestError(OSError):
    """A REST call answered with an HTTP error (an OSError: waiting loops treat it as transient)."""


def syncthing_binary() -> str | None:
    return shutil.which("syncthing")


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free loopback ports (all bound at once, so they differ, then released)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """The kernel kills the instance if pytest itself dies (SIGKILL, a crash): no orphans."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class _Hasher:
    """SHA-256 of files, cached by (size, mtime, inode) so polling a folder stays cheap."""

    def __init__(self) -> None:
        self.cache: dict[str, tuple[tuple[int, int, int], str]] = {}

    def tree(self, root: str) -> dict[str, str] | None:
        """Relative path -> SHA-256 of every file without a dot-component; None if the folder
        changed under the walk (a file vanished while being read)."""
        out: dict[str, str] = {}
        for dirpath, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            for f in files:
                if f.startswith("."):
                    continue
                full = os.path.join(dirpath, f)
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                try:
                    st = os.stat(full)
                    key = (st.st_size, st.st_mtime_ns, st.st_ino)
                    hit = self.cache.get(full)
                    if hit is None or hit[0] != key:
                        with open(full, "rb") as fh:
                            hit = (key, hashlib.sha256(fh.read()).hexdigest())
                        self.cache[full] = hit
                except FileNotFoundError:
                    return None
                out[rel] = hit[1]
        return out


def _diff(a: dict[str, str], b: dict[str, str], limit: int = 8) -> str:
    only_a = sorted(set(a) - set(b))
    only_b = sorted(set(b) - set(a))
    differ = sorted(k for k in set(a) & set(b) if a[k] != b[k])
    parts = []
    for label, names in (("only on a", only_a), ("only on b", only_b), ("different", differ)):
        if names:
            more = f" (+{len(names) - limit} more)" if len(names) > limit else ""
            parts.append(f"{label}: {', '.join(names[:limit])}{more}")
    return "; ".join(parts) or "same files"


class Side:
    """One Syncthing instance and its folder (side ``a`` or ``b`` of a :class:`Pair`)."""

    def __init__(self, pair: Pair, name: str, base: str, gui_port: int, listen_port: int) -> None:
        self.pair = pair
        self.name = name
        self.base = base
        self.st_home = os.path.join(base, "syncthing")
        self.sync_root = os.path.join(base, "sync")
        self.log_path = os.path.join(base, "syncthing.log")
        self.homes_root = os.path.join(base, "homes")
        self.gui_port = gui_port
        self.listen_port = listen_port
        self.api_key = secrets.token_hex(16)
        self.device_id = ""
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.folder = self.sync_root  # a test's vault folder (set per test by the fixture)
        os.makedirs(os.path.join(self.sync_root, ".stfolder"), exist_ok=True)
        os.makedirs(self.homes_root, exist_ok=True)

    def __repr__(self) -> str:
        return f"Side({self.name}, {self.folder!r})"

    @property
    def other(self) -> Side:
        return self.pair.b if self is self.pair.a else self.pair.a

    def home(self, name: str) -> str:
        """A CAMILLO_HOME for the installation ``name`` on this side (created on first use)."""
        path = os.path.join(self.homes_root, name)
        os.makedirs(path, exist_ok=True)
        return path

    # ------------------------------------------------------------------ setting up

    def generate(self) -> None:
        out = subprocess.run([self.pair.binary, "generate", f"--home={self.st_home}", "--no-default-folder",
                              "--skip-port-probing"], capture_output=True, text=True, timeout=60,
                             env=self.pair.env, check=False)
        m = re.search(r"Device ID:\s*([A-Z0-9-]{50,})", out.stdout + out.stderr)
        if out.returncode != 0 or not m:
            raise SyncthingError(f"syncthing generate failed for side {self.name} (exit {out.returncode}):\n"
                                 f"{out.stdout}\n{out.stderr}")
        self.device_id = m.group(1)

    def configure(self) -> None:
        """Rewrite config.xml: loopback only, nothing outside the pair, one shared folder."""
        path = os.path.join(self.st_home, "config.xml")
        tree = ET.parse(path)  # noqa: S314 - the file syncthing generate just wrote
        root = tree.getroot()
        gui = root.find("gui")
        assert gui is not None
        gui.set("enabled", "true")
        gui.set("tls", "false")
        _text(gui, "address", f"127.0.0.1:{self.gui_port}")
        _text(gui, "apikey", self.api_key)
        options = root.find("options")
        assert options is not None
        for key, value in {
            "listenAddress": f"tcp://127.0.0.1:{self.listen_port}",
            "globalAnnounceEnabled": "false",
            "localAnnounceEnabled": "false",
            "relaysEnabled": "false",
            "natEnabled": "false",
            "urAccepted": "-1",
            "urSeen": "3",
            "autoUpgradeIntervalH": "0",
            "crashReportingEnabled": "false",
            "startBrowser": "false",
            "announceLANAddresses": "false",
            "stunKeepaliveStartS": "0",
            "stunKeepaliveMinS": "0",
            "reconnectionIntervalS": "1",
            "limitBandwidthInLan": "true",  # loopback is "LAN": without this throttling does nothing
            "maxSendKbps": "0",
            "maxRecvKbps": "0",
            "setLowPriority": "false",
            "minHomeDiskFree": "0",
            "progressUpdateIntervalS": "-1",
            "restartOnWakeup": "false",
        }.items():
            _text(options, key, value)
        for el in options.findall("globalAnnounceServer") + options.findall("stunServer"):
            options.remove(el)
        other = self.other
        for dev in root.findall("device"):
            if dev.get("id") != self.device_id:
                root.remove(dev)
        peer = ET.Element("device", {"id": other.device_id, "name": other.name, "compression": "never",
                                     "introducer": "false", "skipIntroductionRemovals": "false", "introducedBy": ""})
        _text(peer, "address", f"tcp://127.0.0.1:{other.listen_port}")
        _text(peer, "paused", "false")
        _text(peer, "autoAcceptFolders", "false")
        me = next(d for d in root.findall("device") if d.get("id") == self.device_id)
        me.set("name", self.name)
        root.insert(list(root).index(me) + 1, peer)
        for f in root.findall("folder"):
            root.remove(f)
        folder = ET.Element("folder", {
            "id": FOLDER_ID, "label": "vault", "path": self.sync_root, "type": "sendreceive",
            "rescanIntervalS": str(RESCAN_S), "fsWatcherEnabled": "true", "fsWatcherDelayS": str(WATCH_DELAY_S),
            "ignorePerms": "true", "autoNormalize": "true"})
        _text(folder, "filesystemType", "basic")
        for dev_id in (self.device_id, other.device_id):
            ET.SubElement(folder, "device", {"id": dev_id, "introducedBy": ""})
        md = _text(folder, "minDiskFree", "0")
        md.set("unit", "%")
        for key, value in {"order": "random", "ignoreDelete": "false", "pullerPauseS": "1", "maxConflicts": "10",
                           "paused": "false", "markerName": ".stfolder", "disableFsync": "true",
                           "scanProgressIntervalS": "-1", "modTimeWindowS": "0"}.items():
            _text(folder, key, value)
        root.insert(list(root).index(peer) + 1, folder)
        tree.write(path)

    # ------------------------------------------------------------------ the process

    def start(self) -> None:
        """Start the instance and wait until its REST API answers."""
        self.launch()
        self.wait_up()

    def launch(self) -> None:
        if self.running:
            return
        self.starts += 1
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start {self.starts} of side {self.name} =====\n".encode())
            log.flush()
            self.proc = subprocess.Popen(
                [self.pair.binary, "serve", "--no-browser", "--no-restart", "--no-upgrade", "--no-default-folder",
                 "--skip-port-probing", f"--home={self.st_home}", "--logflags=6", "--logfile=-"],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=self.pair.env,
                start_new_session=True, preexec_fn=_die_with_parent)

    def wait_up(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if not self.running:
                raise self.pair.error(f"syncthing on side {self.name} exited at start "
                                      f"(exit {self.proc.returncode if self.proc else '?'})")
            try:
                if self.get("/rest/system/ping").get("ping") == "pong":
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise self.pair.error(f"syncthing on side {self.name} did not answer on 127.0.0.1:{self.gui_port}")
            time.sleep(0.05)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """kill -9 (its whole process group: it is a session leader we started), and reap it."""
        if self.proc is not None:
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass

    def restart(self) -> None:
        """Start again after :meth:`kill` (the same home, config and database)."""
        self.kill()
        self.start()

    def stop(self) -> None:
        """A clean shutdown (REST), kill -9 if it does not exit promptly."""
        if self.running:
            with contextlib.suppress(OSError):
                self.post("/rest/system/shutdown")
            assert self.proc is not None
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.kill()

    # ------------------------------------------------------------------ REST

    def request(self, method: str, path: str, body: Any = None, timeout: float = 30) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"http://127.0.0.1:{self.gui_port}{path}", data=data, method=method,
                                     headers={"X-API-Key": self.api_key, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                text = resp.read()
        except urllib.error.HTTPError as exc:
            raise RestError(f"{method} {path} on side {self.name}: HTTP {exc.code} "
                            f"{exc.read()[:300].decode(errors='replace').strip()}") from None
        return json.loads(text) if text.strip() else None

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, body)

    def patch(self, path: str, body: Any) -> Any:
        return self.request("PATCH", path, body)

    # ------------------------------------------------------------------ what tests do

    def scan(self) -> None:
        """Rescan the folder now (returns when the scan is done)."""
        self.post(f"/rest/db/scan?folder={FOLDER_ID}")

    def pause(self) -> None:
        """Pause the shared folder on this side: nothing is scanned, sent or received for it
        until :meth:`resume` (files written meanwhile go out after)."""
        self.patch(f"/rest/config/folders/{FOLDER_ID}", {"paused": True})
        self._wait_folder(lambda s: s.get("state") in ("", "paused"), "paused")  # 1.19 shows a paused folder as ""

    def resume(self) -> None:
        self.patch(f"/rest/config/folders/{FOLDER_ID}", {"paused": False})
        self._wait_folder(lambda s: s.get("state") not in ("paused", ""), "unpaused")

    @property
    def paused(self) -> bool:
        return bool(self.get(f"/rest/config/folders/{FOLDER_ID}").get("paused"))

    def throttle(self, kbps: int) -> None:
        """Limit this instance's send and receive rate to ``kbps`` KiB/s (0: unlimited)."""
        self.patch("/rest/config/options", {"maxSendKbps": int(kbps), "maxRecvKbps": int(kbps)})

    def status(self) -> dict[str, Any]:
        return dict(self.get(f"/rest/db/status?folder={FOLDER_ID}"))

    def completion(self) -> dict[str, Any]:
        """How complete the other side is, as this side knows it."""
        return dict(self.get(f"/rest/db/completion?folder={FOLDER_ID}&device={self.other.device_id}"))

    def connected(self) -> bool:
        conns = self.get("/rest/system/connections").get("connections", {})
        return bool(conns.get(self.other.device_id, {}).get("connected"))

    def _wait_folder(self, ok: Callable[[dict[str, Any]], bool], what: str, timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while True:
            st = self.status()
            if ok(st):
                return
            if time.monotonic() > deadline:
                raise self.pair.error(f"folder on side {self.name} not {what} after {timeout}s: state {st.get('state')!r}")
            time.sleep(0.05)

    def log_tail(self, n: int = LOG_TAIL) -> str:
        try:
            with open(self.log_path, errors="replace") as fh:
                return "".join(fh.readlines()[-n:])
        except FileNotFoundError:
            return "(no log)"


def _text(parent: ET.Element, tag: str, value: str) -> ET.Element:
    el = parent.find(tag)
    if el is None:
        el = ET.SubElement(parent, tag)
    el.text = value
    return el


@dataclass
class Quiet:
    """What :meth:`Pair.wait_quiescent` saw last (why it is not quiescent yet)."""

    ok: bool
    why: str
    files: dict[str, str] | None = None


class Pair:
    """Two Syncthing instances (``a`` and ``b``) sharing one folder on loopback."""

    def __init__(self, base: str, binary: str | None = None) -> None:
        binary = binary or syncthing_binary()
        if binary is None:
            raise SyncthingError("syncthing is not installed (apt-get install syncthing; scripts/setup does it)")
        self.binary = binary
        self.base = base
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("ST")}
        # STMONITORED: run the syncthing process itself, not a monitor process that forks it (1.19
        # forks one even with --no-restart, and killing the monitor would orphan the real one).
        self.env.update({"STMONITORED": "1", "STNORESTART": "1", "STNOUPGRADE": "1", "STNODEFAULTFOLDER": "1", "STNOUPGRADECHECK": "1",
                         "HOME": os.path.join(base, "st-user-home"), "STTRACE": "",
                         "STHASHING": "minio"})  # no start-up benchmark of the SHA-256 implementations
        os.makedirs(self.env["HOME"], exist_ok=True)
        ports = _free_ports(4)
        self.a = Side(self, "a", os.path.join(base, "a"), ports[0], ports[1])
        self.b = Side(self, "b", os.path.join(base, "b"), ports[2], ports[3])
        self.hasher = _Hasher()
        self.closed = False
        atexit.register(self.close)

    @property
    def sides(self) -> tuple[Side, Side]:
        return self.a, self.b

    def start(self, timeout: float = 30) -> Pair:
        """Generate, configure and start both; return once they are connected and idle."""
        try:
            for s in self.sides:
                s.generate()
            for s in self.sides:
                s.configure()
            for s in self.sides:
                s.launch()
            for s in self.sides:
                s.wait_up()
            self.wait_connected(timeout)
            self.wait_quiescent(timeout)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Kill both instances (idempotent; always safe)."""
        for s in self.sides:
            with contextlib.suppress(Exception):
                s.kill()
        self.closed = True

    def __enter__(self) -> Pair:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def error(self, message: str) -> SyncthingError:
        parts = [message]
        for s in self.sides:
            state = "running" if s.running else f"not running (exit {s.proc.returncode if s.proc else '-'})"
            parts.append(f"----- side {s.name}: syncthing {state}, REST 127.0.0.1:{s.gui_port}, "
                         f"sync 127.0.0.1:{s.listen_port}, log {s.log_path} (last {LOG_TAIL} lines)\n{s.log_tail()}")
        return SyncthingError("\n".join(parts))

    # ------------------------------------------------------------------ waiting

    def wait_connected(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if all(s.connected() for s in self.sides):
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise self.error(f"the two instances did not connect within {timeout}s")
            for s in self.sides:
                if not s.running:
                    raise self.error(f"syncthing on side {s.name} is not running")
            time.sleep(0.05)

    def check_quiet(self) -> Quiet:
        """One look: are both sides connected, idle, complete for each other and the same?"""
        for s in self.sides:
            if not s.running:
                raise self.error(f"syncthing on side {s.name} is not running")
        try:
            for s in self.sides:
                if not s.connected():
                    return Quiet(False, f"side {s.name} is not connected to side {s.other.name}")
            for s in self.sides:
                st = s.status()
                need = st.get("needTotalItems", 0)
                if st.get("state") != "idle" or need or st.get("needBytes", 0):
                    return Quiet(False, f"side {s.name}: folder state {st.get('state')!r}, needs {need} item(s), "
                                        f"{st.get('needBytes', 0)} bytes, errors {st.get('errors', 0)}")
                if st.get("pullErrors") or st.get("errors"):
                    return Quiet(False, f"side {s.name}: {st.get('pullErrors') or st.get('errors')} pull error(s)")
            for s in self.sides:
                c = s.completion()
                if c.get("completion") != 100 or c.get("needItems", 0) or c.get("needBytes", 0) \
                        or c.get("needDeletes", 0) or c.get("remoteState", "valid") not in ("valid", "unknown"):
                    return Quiet(False, f"side {s.name} sees side {s.other.name} at {c.get('completion')}% "
                                        f"(needs {c.get('needItems')} item(s), {c.get('needDeletes')} deletion(s), "
                                        f"remote state {c.get('remoteState')!r})")
        except OSError as exc:
            return Quiet(False, f"REST call failed: {exc}")
        ta = self.hasher.tree(self.a.sync_root)
        tb = self.hasher.tree(self.b.sync_root)
        if ta is None or tb is None:
            return Quiet(False, "files changed while being hashed")
        if ta != tb:
            return Quiet(False, f"the folders differ: {_diff(ta, tb)}")
        return Quiet(True, "quiescent", ta)

    def wait_quiescent(self, timeout: float = 60, *, stable: float = STABLE_SECONDS) -> dict[str, str]:
        """Wait until both sides are connected, idle, 100 % complete for each other, need nothing,
        and hold the same files, unchanged for ``stable`` seconds.  Returns the files (relative
        path -> SHA-256).  Scans both folders first, and again every few seconds, so nothing waits
        for the periodic rescan."""
        start = time.monotonic()
        deadline = start + timeout
        last_scan = 0.0
        since: float | None = None
        seen: dict[str, str] | None = None
        q = Quiet(False, "not looked yet")
        while True:
            now = time.monotonic()
            if now - last_scan > 2.0 and (since is None):
                for s in self.sides:
                    with contextlib.suppress(OSError, SyncthingError):
                        if s.running:
                            s.scan()
                last_scan = time.monotonic()
            q = self.check_quiet()
            if q.ok:
                if since is None or q.files != seen:
                    since, seen = time.monotonic(), q.files
                elif time.monotonic() - since >= stable:
                    assert q.files is not None
                    return q.files
            else:
                since, seen = None, None
            if time.monotonic() > deadline:
                raise self.error(f"not quiescent after {timeout}s: {q.why}")
            time.sleep(0.1)

    def wait_files(self, predicate: Callable[[Side], bool], side: Side, timeout: float = 30, what: str = "") -> None:
        """Wait until ``predicate(side)`` holds (a file appeared, vanished...)."""
        deadline = time.monotonic() + timeout
        while not predicate(side):
            if time.monotonic() > deadline:
                raise self.error(f"side {side.name}: {what or 'condition'} not reached within {timeout}s")
            time.sleep(0.05)

    # ------------------------------------------------------------------ per test

    def reset(self, timeout: float = 30) -> None:
        """Between tests: both running, resumed, unthrottled, connected and quiescent (whatever a
        failed test left behind)."""
        for s in self.sides:
            if not s.running:
                s.start()
        for s in self.sides:
            if s.paused:
                s.resume()
            s.throttle(0)
        self.wait_connected(timeout)
        self.wait_quiescent(timeout)

    def begin(self, name: str) -> None:
        """A test starts: ``a.folder`` and ``b.folder`` become a fresh subfolder ``name`` of the
        shared folder, and ``home()`` gives fresh installations."""
        for s in self.sides:
            s.folder = os.path.join(s.sync_root, name)
            s.homes_root = os.path.join(s.base, "homes", name)


def conflict_copies(root: str) -> list[str]:
    """Syncthing's conflict copies (``*.sync-conflict-*``) under ``root``."""
    return [os.path.relpath(os.path.join(d, f), root) for d, _dirs, files in os.walk(root)
            for f in files if ".sync-conflict-" in f]


def files_under(root: str) -> Iterator[str]:
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for f in files:
            if not f.startswith("."):
                yield os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")
