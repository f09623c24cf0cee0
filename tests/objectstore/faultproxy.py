"""A small loopback proxy between Camillo and the S3 server that injects the faults of object stores:
listings that omit recent objects, reordered listings, 503 SlowDown answers and slow answers,
truncated bodies (cut off mid-body, or with a Content-Length that lies), objects hidden as if the host
had deleted them (a rollback), and a listing that claims an object is far larger than it is.

Requests are forwarded unchanged (the Host header too, so SigV4 signatures still verify); only
answers are changed.  Runs its own threads; the test thread changes :attr:`FaultProxy.faults`.
"""

from __future__ import annotations

import http.client
import random
import threading
import time
import urllib.parse
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

NS = "{http://s3.amazonaws.com/doc/2006-03-01/}"


@dataclass
class Faults:
    lag_writes: bool = False  # objects written through the proxy meanwhile are left out of listings
    reorder: bool = False  # listings come in a shuffled order
    unlisted: set[str] = field(default_factory=set)  # keys listings omit (still served: a lagging listing)
    hidden: set[str] = field(default_factory=set)  # keys the host "lost": not listed, 404 on GET and HEAD
    unavailable: int = 0  # the next N requests answer 503 SlowDown
    always_unavailable: bool = False
    delay: float = 0.0  # seconds before each answer (a slow store)
    truncate: int = 0  # the next N object GETs are cut in half
    truncate_lying: bool = False  # ... with a Content-Length that says the cut length (else: connection dropped)
    truncate_match: str = ""  # ... only keys containing this
    claimed_size: dict[str, int] = field(default_factory=dict)  # listings claim this size for these keys
    ignore_conditions: bool = False  # a PUT refused by If-None-Match is answered 200, as if it overwrote
    presigned_unavailable: int = 0  # the next N requests signed in their query string (presigned) answer 503
    log: list[tuple[str, str, int]] = field(default_factory=list)  # (method, path, status) of every answer


class FaultProxy:
    def __init__(self, upstream: str) -> None:
        parts = urllib.parse.urlsplit(upstream)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.faults = Faults()
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                proxy.handle(self)

            do_PUT = do_HEAD = do_DELETE = do_POST = do_GET

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="fault-proxy", daemon=True)
        self.thread.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()

    def reset(self) -> None:
        with self.lock:
            self.faults = Faults()

    def count(self, method: str, status: int | None = None) -> int:
        with self.lock:
            return sum(1 for m, _p, s in self.faults.log if m == method and (status is None or s == status))

    # -- one request

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        parts = urllib.parse.urlsplit(h.path)
        query = urllib.parse.parse_qs(parts.query, keep_blank_values=True)
        segments = parts.path.lstrip("/").split("/", 1)
        key = urllib.parse.unquote(segments[1]) if len(segments) > 1 else ""
        is_listing = h.command == "GET" and not key and query.get("list-type") == ["2"]
        with self.lock:
            f = self.faults
            delay = f.delay
            unavailable = f.always_unavailable or f.unavailable > 0
            if f.unavailable > 0:
                f.unavailable -= 1
            if "X-Amz-Signature=" in h.path and f.presigned_unavailable > 0:
                f.presigned_unavailable -= 1
                unavailable = True
            hidden = key in f.hidden and h.command in ("GET", "HEAD")
            if f.lag_writes and h.command == "PUT" and key:
                f.unlisted.add(key)
            cut = (h.command == "GET" and bool(key) and f.truncate > 0 and not hidden and not unavailable
                   and f.truncate_match in key)
            if cut:
                f.truncate -= 1
            lying = f.truncate_lying
        if delay:
            time.sleep(delay)
        if unavailable:
            return self.answer(h, 503, b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>SlowDown</Code>"
                               b"<Message>Please reduce your request rate.</Message></Error>", {})
        if hidden:
            return self.answer(h, 404, b"<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>NoSuchKey</Code>"
                               b"<Message>The specified key does not exist.</Message></Error>", {})
        conn = http.client.HTTPConnection(*self.upstream, timeout=30)
        try:
            headers = {k: v for k, v in h.headers.items() if k.lower() not in ("connection", "keep-alive")}
            conn.request(h.command, h.path, body=body if body or h.command in ("PUT", "POST") else None,
                         headers=headers)
            response = conn.getresponse()
            data = response.read()
            status = response.status
            out = {k: v for k, v in response.getheaders()
                   if k.lower() not in ("content-length", "transfer-encoding", "connection", "keep-alive")}
            head_length = response.getheader("Content-Length")
        finally:
            conn.close()
        if is_listing and status == 200:
            data = self.edit_listing(data)
        with self.lock:
            pretend = self.faults.ignore_conditions
        if pretend and h.command == "PUT" and status == 412:
            status, data = 200, b""
        if h.command == "HEAD":
            return self.answer(h, status, b"", out, length=int(head_length or 0))
        if cut and status == 200 and len(data) > 1:
            half = data[: len(data) // 2]
            if lying:
                return self.answer(h, status, half, out)
            return self.answer(h, status, half, out, length=len(data), drop=True)
        return self.answer(h, status, data, out)

    def answer(self, h: BaseHTTPRequestHandler, status: int, data: bytes, headers: dict[str, str], *,
               length: int | None = None, drop: bool = False) -> None:
        with self.lock:
            self.faults.log.append((h.command, h.path, status))
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(data) if length is None else length))
        if drop:
            h.send_header("Connection", "close")
        h.end_headers()
        if h.command != "HEAD":
            h.wfile.write(data)
        h.wfile.flush()
        if drop:
            h.close_connection = True

    def edit_listing(self, data: bytes) -> bytes:
        ET.register_namespace("", NS.strip("{}"))
        root = ET.fromstring(data)  # noqa: S314 - the answer of the test's own SeaweedFS
        contents = root.findall(f"{NS}Contents")
        with self.lock:
            f = self.faults
            hidden, reorder, claimed = f.hidden | f.unlisted, f.reorder, dict(f.claimed_size)
        drop = {id(c) for c in contents if (c.findtext(f"{NS}Key") or "") in hidden}
        for c in contents:
            root.remove(c)
        kept = [c for c in contents if id(c) not in drop]
        for c in kept:
            k = c.findtext(f"{NS}Key") or ""
            if k in claimed:
                size = c.find(f"{NS}Size")
                if size is not None:
                    size.text = str(claimed[k])
        if reorder:
            random.Random(len(kept)).shuffle(kept)
            kept.reverse()
        insert_at = next((i for i, child in enumerate(list(root)) if child.tag in (f"{NS}CommonPrefixes",
                                                                                  f"{NS}NextContinuationToken")),
                         len(root))
        for offset, c in enumerate(kept):
            root.insert(insert_at + offset, c)
        count = root.find(f"{NS}KeyCount")
        if count is not None:
            count.text = str(len(kept))
        return ET.tostring(root, xml_declaration=True, encoding="UTF-8")
