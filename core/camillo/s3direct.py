"""The two requests of every append on an object store (a listing of ``env/`` and a conditional
PUT), made with URLs that botocore signs (query-string SigV4, "presigned") over urllib3 instead of
through botocore's request pipeline, which costs about 4 ms of CPU a request on a slow machine (its
event hooks, endpoint rules, signing and parsing), more than a loopback server takes to answer it.

Only the two answers the caller expects are taken from this path: a listing page that is complete
(not truncated) and parses, and a PUT answered 200 (created) or 412 (the name exists).  Anything
else (an error status, a connection problem, a page that does not parse) returns None, and the
caller makes the same request through botocore, with its retries and error reporting: this path
never decides a failure.  It is not used when a proxy applies to the endpoint (urllib3 would not
go through it) or when ``CAMILLO_S3_DIRECT=0``.

Any thread (the pool and the URL cache are locked); the caller counts the requests.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.parse
import urllib.request
from typing import Any

from .s3listing import parse_listing

LIST_URL_SECONDS = 900  # a listing URL is signed for this long and reused for two thirds of it
PUT_URL_SECONDS = 60


class DirectRequests:
    """Presigned requests to one bucket of one endpoint, with ``client`` (botocore, configured for
    SigV4 query signing) signing them."""

    def __init__(self, client: Any, bucket: str, ca_bundle: str | None = None) -> None:
        self.client, self.bucket, self.ca_bundle = client, bucket, ca_bundle
        self._lock = threading.Lock()
        self._urls: dict[str, tuple[str, float]] = {}  # listing prefix -> (URL, time.monotonic() signed)
        self._pool: Any = None

    @staticmethod
    def usable(endpoint: str) -> bool:
        """Whether requests to ``endpoint`` may go straight to it (no proxy applies, not turned off)."""
        if os.environ.get("CAMILLO_S3_DIRECT", "1") == "0":
            return False
        host = urllib.parse.urlparse(endpoint).hostname or ""
        proxies = urllib.request.getproxies()
        return not (proxies and not urllib.request.proxy_bypass(host))

    def _http(self) -> Any:
        with self._lock:
            if self._pool is None:
                import urllib3
                from botocore.httpsession import get_cert_path

                ca = self.ca_bundle or get_cert_path(True)  # as botocore verifies (its bundle, or the user's)
                self._pool = urllib3.PoolManager(maxsize=4, retries=False, ca_certs=ca, cert_reqs="CERT_REQUIRED",
                                                 timeout=urllib3.Timeout(connect=5, read=30))
            return self._pool

    def close(self) -> None:
        """Close the pool's connections (the shelf is closed)."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.clear()

    def _listing_url(self, prefix: str) -> str:
        now = time.monotonic()
        with self._lock:
            cached = self._urls.get(prefix)
            if cached is not None and now - cached[1] < LIST_URL_SECONDS * 2 / 3:
                return cached[0]
        url: str = self.client.generate_presigned_url(
            "list_objects_v2", Params={"Bucket": self.bucket, "Prefix": prefix, "MaxKeys": 1000},
            ExpiresIn=LIST_URL_SECONDS)
        with self._lock:
            self._urls[prefix] = (url, now)
        return url

    def list_page(self, prefix: str) -> list[tuple[str, int, str, str]] | None:
        """Every object under ``prefix`` as (key, size, ETag, LastModified text), when one page
        holds them all; None otherwise (the caller lists through botocore)."""
        try:
            answer = self._http().request("GET", self._listing_url(prefix), preload_content=True)
        except Exception:  # any failure: botocore makes the request and reports it
            return None
        if answer.status != 200:
            with self._lock:
                self._urls.pop(prefix, None)  # expired keys, a clock step: signed again next time
            return None
        parsed = parse_listing(answer.data)
        if parsed is None or parsed[1]:  # not a listing, or truncated: botocore pages through it
            return None
        return parsed[0]

    def put_if_absent(self, key: str, data: bytes) -> int | None:
        """PUT ``data`` at ``key`` with ``If-None-Match: *``: 200 when created, 412 when the name
        exists, None for any other outcome (the caller asks again through botocore)."""
        try:
            url = self.client.generate_presigned_url(
                "put_object", Params={"Bucket": self.bucket, "Key": key}, ExpiresIn=PUT_URL_SECONDS)
            answer = self._http().request("PUT", url, body=data, headers={
                "If-None-Match": "*", "Content-Length": str(len(data))}, preload_content=True)
        except Exception:  # any failure: botocore makes the request and reports it
            return None
        return answer.status if answer.status in (200, 412) else None
