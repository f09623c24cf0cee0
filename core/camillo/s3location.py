"""Where an object-store vault lives: ``s3://bucket/prefix`` locations (with an optional endpoint
and region), parsed, displayed and turned into object keys (spec §4.7.1).  Pure values.

Any thread.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import dataclass

from .errors import UsageError

SCHEME = "s3://"
ENDPOINT_ENV = "CAMILLO_S3_ENDPOINT"


def is_object_store(location: str) -> bool:
    """Does ``location`` name an object-store vault (``s3://…``) rather than a folder or file?"""
    return location.startswith(SCHEME)


@dataclass(frozen=True)
class StoreLocation:
    """Where an object-store vault lives: a bucket, a key prefix (no leading or trailing ``/``;
    empty for the whole bucket), and the endpoint and region when they are not the defaults."""

    bucket: str
    prefix: str = ""
    endpoint: str | None = None
    region: str | None = None

    @classmethod
    def parse(cls, location: str) -> StoreLocation:
        if not is_object_store(location):
            raise UsageError(f"{location} is not an object-store location; write s3://BUCKET/PREFIX")
        parts = urllib.parse.urlsplit(location)
        bucket = parts.netloc
        query = urllib.parse.parse_qs(parts.query)
        unknown = sorted(set(query) - {"endpoint", "region"})
        if not bucket or unknown:
            raise UsageError(f"{location} is not a valid object-store location; write s3://BUCKET/PREFIX "
                             "(optionally ?endpoint=URL&region=NAME)")
        endpoint = query.get("endpoint", [None])[-1] or None
        if endpoint is not None and not endpoint.startswith(("http://", "https://")):
            raise UsageError(f"the endpoint in {location} must start with http:// or https://")
        return cls(bucket, parts.path.strip("/"), endpoint, query.get("region", [None])[-1] or None)

    @property
    def display(self) -> str:
        """``s3://bucket/prefix``: how messages name the vault (no endpoint, no keys)."""
        return f"{SCHEME}{self.bucket}/{self.prefix}".rstrip("/")

    @property
    def url(self) -> str:
        """The full location, endpoint and region included (what a face remembers)."""
        query = {k: v for k, v in (("endpoint", self.endpoint), ("region", self.region)) if v}
        return self.display + (f"?{urllib.parse.urlencode(query, safe=':/')}" if query else "")

    def key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    @property
    def key_prefix(self) -> str:
        return f"{self.prefix}/" if self.prefix else ""

    def effective_endpoint(self) -> str | None:
        return self.endpoint or os.environ.get(ENDPOINT_ENV) or None

    def where(self) -> str:
        """The vault and the server it is on, for messages."""
        endpoint = self.effective_endpoint()
        return f"{self.display} (at {endpoint})" if endpoint else self.display


def object_store_url(bucket: str, prefix: str = "", endpoint: str | None = None, region: str | None = None) -> str:
    """The location of a vault in an object store, as a string every ``Vault`` call accepts."""
    return StoreLocation(bucket.strip(), prefix.strip().strip("/"), (endpoint or "").strip() or None,
                         (region or "").strip() or None).url


def with_endpoint(location: str, endpoint: str | None) -> str:
    """``location`` with ``endpoint`` added when it is an object store that names none (the
    command line's ``--endpoint-url``); any other location unchanged."""
    if not endpoint or not is_object_store(location):
        return location
    loc = StoreLocation.parse(location)
    if loc.endpoint:
        return location
    return StoreLocation(loc.bucket, loc.prefix, endpoint, loc.region).url
