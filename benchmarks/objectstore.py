"""The ``objectstore`` group: vaults in an S3-compatible object store (issue 20), against a SeaweedFS
the parent starts on loopback for the group (tests/objectstore/seaweed.py), beside the folder figures.

* ``s3_append``: ``Vault.append([one message])`` on the lived-in vault (packed, as its writers leave
  it) opened from ``s3://``; each append is durable on the store (its conditional PUT answered)
  before it returns.  The store's own round trips are timed first with a bare client (a listing of
  ``slots/`` and a conditional PUT of 4 KiB, 30 each): an append's floor counts one of each (the
  listings of ``slots/`` and ``env/`` are made at once, then the PUT).
* ``s3_warm_open``: open the same from ``s3://`` with the desktop's cache and a full mirror, then the
  first timeline page; the parent compares it with ``warm_open`` of the same fixture as a folder.
* ``s3_download``: a new mirror of the whole vault (list, parallel GETs, checks, writes), as a first
  open does before it reads: bytes per second.  Variant ``lived-in`` is the lived-in vault as its
  writers leave it on a store (packed: camillo.storepacks); ``loose`` the same uploaded file by file
  by another tool, with no pack (what the first Camillo write there packs).
* ``s3_first_open``: a first open of the ``lived-in`` vault to the first timeline page by the
  desktop's installation with no mirror yet (download, then the open with its cache).

Each child uploads its clone of the fixture under a prefix of its own first (not timed), so no run
sees another's appends.  Runs on the main thread of the child process (the uploads use a thread pool).
"""

from __future__ import annotations

import concurrent.futures
import os
import time
from collections.abc import Callable
from typing import Any

from .corpus import Fixture
from .ops import _clone, messages, timed_appends
from .stats import Meter

OPS: dict[str, Callable[[dict[str, Any], str], dict[str, Any]]] = {}


def op(name: str):
    def register(fn):
        OPS[name] = fn
        return fn

    return register


def _client(params: dict[str, Any]) -> Any:
    import botocore.session
    from botocore.config import Config

    s3 = params["s3"]
    return botocore.session.get_session().create_client(
        "s3", endpoint_url=s3["endpoint"], region_name="us-east-1", aws_access_key_id=s3["key"],
        aws_secret_access_key=s3["secret"],
        config=Config(s3={"addressing_style": "path"}, max_pool_connections=32,
                      request_checksum_calculation="when_required", signature_version="s3v4"))


def _keys_in_env(params: dict[str, Any]) -> None:
    s3 = params["s3"]
    os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = s3["key"], s3["secret"]
    os.environ["AWS_REGION"] = "us-east-1"


def _upload(params: dict[str, Any], fx: Fixture, scratch: str) -> tuple[str, int, int]:
    """Put the clone's vault files under a new prefix; (location, files, bytes)."""
    from camillo import object_store_url

    client = _client(params)
    bucket = params["s3"]["bucket"]
    prefix = f"{os.path.basename(scratch)}-{os.getpid()}"
    files = []
    for dirpath, _d, names in os.walk(fx.vault):
        for n in names:
            if not n.startswith("."):
                path = os.path.join(dirpath, n)
                files.append((os.path.relpath(path, fx.vault).replace(os.sep, "/"), path))

    def put(item: tuple[str, str]) -> int:
        name, path = item
        with open(path, "rb") as fh:
            data = fh.read()
        client.put_object(Bucket=bucket, Key=f"{prefix}/{name}", Body=data)
        return len(data)

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        sizes = list(pool.map(put, files))
    _keys_in_env(params)
    return object_store_url(bucket, prefix, params["s3"]["endpoint"]), len(files), sum(sizes)


def _upload_variant(params: dict[str, Any], scratch: str) -> tuple[Any, str, int, int]:
    """The variant's vault on the store: ``lived-in`` is ``loose`` as its writers leave it there (the
    packing steps their appends would have made, made at once by a writer's installation, which
    deletes the loose objects the packs hold: camillo.storepacks); the other variants exactly as their
    folder holds them, uploaded file by file."""
    from camillo.objectstore import ObjectShelf

    variant = params.get("variant", "loose")
    fx = _clone(params, "loose" if variant == "lived-in" else variant, scratch)
    location, files, size = _upload(params, fx, scratch)
    if variant == "lived-in":
        shelf = ObjectShelf(location, home=os.path.join(scratch, "writer-home"))
        shelf.list()
        shelf.after_write(all_due=True)
        files = len(shelf.host_details())  # objects on the store; ``size`` stays the vault's bytes (a mirror's)
        shelf.close()
    return fx, location, files, size


def _warm_client(location: str) -> None:
    """botocore's import and its S3 model are loaded once per process (about 0.4 s), like the imports
    every figure leaves out: made here, before the timed region."""
    from camillo import objectstore

    objectstore._client(objectstore.StoreLocation.parse(location))


def _open(location: str, home: str, **kw: Any) -> Any:
    from camillo.demo import DEMO_PASSPHRASE
    from camillo.vault import Unlock, Vault

    return Vault.open(location, Unlock.passphrase(DEMO_PASSPHRASE), home=home, **kw)


@op("s3_append")
def s3_append(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """Interactive appends of one message each on the lived-in vault opened from the store."""
    from camillo.vault import NewRecord

    fx, location, _files, _bytes = _upload_variant({**params, "variant": "lived-in"}, scratch)
    count, warmup, budget = params.get("count", 200), 5, params.get("seconds", 6.0)
    items = messages(count + warmup, seed=43, now=int(time.time()), conversation_prefix="interactive")
    recs = [NewRecord(type="message", conversation=x.conversation, role=x.role, text=x.text) for x in items]
    v = _open(location, fx.homes["desktop"])
    for rec in recs[:warmup]:
        v.append([rec])
    shelf = v.session.shelf
    trips = _round_trips(params, location)
    before = shelf.requests  # the measured appends' requests only
    m, samples, cpu = timed_appends(v, recs[warmup:], 0, budget)
    requests = shelf.requests - before
    v.lock()
    return {"meter": m.to_json(), "samples": samples, "samples_cpu": cpu,
            "requests_per_append": requests / max(1, len(samples)), **trips}


def _round_trips(params: dict[str, Any], location: str, n: int = 30) -> dict[str, float]:
    """The store's own round trips on this machine now (the floor's request part): the median of
    ``n`` one-key listings and of ``n`` conditional PUTs of 4 KiB (to names no reader looks at,
    deleted after), each a request signed beforehand (a presigned URL) sent over a bare urllib3 pool,
    so that no client's per-request CPU is counted (botocore's is about 4 ms a request on a slow
    machine; Camillo's append makes its two requests that way, camillo.s3direct)."""
    import urllib3
    from camillo.objectstore import StoreLocation

    client, bucket = _client(params), params["s3"]["bucket"]
    prefix = StoreLocation.parse(location).key_prefix
    http = urllib3.PoolManager(retries=False)
    body = os.urandom(4096)
    listing = client.generate_presigned_url("list_objects_v2", ExpiresIn=600,
                                            Params={"Bucket": bucket, "Prefix": f"{prefix}env/", "MaxKeys": 1000})
    puts_signed = [client.generate_presigned_url("put_object", ExpiresIn=600,
                                                 Params={"Bucket": bucket, "Key": f"{prefix}.bench-probe-{i}"})
                   for i in range(n)]
    lists, puts = [], []
    for i in range(n):
        t = time.perf_counter()
        answer = http.request("GET", listing)
        lists.append(time.perf_counter() - t)
        t = time.perf_counter()
        created = http.request("PUT", puts_signed[i], body=body, headers={"If-None-Match": "*"})
        puts.append(time.perf_counter() - t)
        if answer.status != 200 or created.status != 200:
            raise RuntimeError(f"the store answered {answer.status} / {created.status} to the floor's requests")
    for i in range(n):
        client.delete_object(Bucket=bucket, Key=f"{prefix}.bench-probe-{i}")
    return {"list_p50": sorted(lists)[n // 2], "put_p50": sorted(puts)[n // 2]}


@op("s3_warm_open")
def s3_warm_open(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """Open from the store with the desktop's cache and a complete mirror, then the first page."""
    fx, location, files, size = _upload_variant({**params, "variant": "lived-in"}, scratch)
    home = fx.homes["desktop"]
    _open(location, home).lock()  # the mirror is complete and the cache current
    with Meter() as m:
        v = _open(location, home)
        rows = v.timeline(limit=100)
    out = {"meter": m.to_json(), "rows": len(rows), "files": files, "bytes": size,
           "decryptions": v.session.reader.decryptions}
    v.lock()
    return out


@op("s3_download")
def s3_download(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """A new mirror of the whole vault: what a first open downloads, in bytes per second."""
    from camillo.objectstore import ObjectShelf

    _fx, location, files, size = _upload_variant(params, scratch)
    home = os.path.join(scratch, "new-home")
    _warm_client(location)
    with Meter() as m:
        shelf = ObjectShelf(location, home=home)
        names = shelf.list()
    requests, packs = shelf.requests, shelf.packs.fetched
    shelf.close()
    return {"meter": m.to_json(), "files": files, "bytes": size, "listed": len(names), "requests": requests,
            "packs_fetched": packs, "mb_per_s": size / 1e6 / m.seconds}


@op("s3_first_open")
def s3_first_open(params: dict[str, Any], scratch: str) -> dict[str, Any]:
    """The desktop's installation opens the vault from the store for the first time (no mirror):
    everything is downloaded, then the open resumes from its cache; to the first page."""
    fx, location, files, size = _upload_variant(params, scratch)
    _warm_client(location)
    with Meter() as m:
        v = _open(location, fx.homes["desktop"])
        rows = v.timeline(limit=100)
    out = {"meter": m.to_json(), "rows": len(rows), "files": files, "bytes": size}
    v.lock()
    return out
