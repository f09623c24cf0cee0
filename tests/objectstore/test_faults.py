"""The faults of object stores, injected by a loopback proxy (tests/objectstore/faultproxy.py) between
Camillo and a real SeaweedFS: listings that omit recent objects, 503s and slow answers, truncated
bodies, reordered (and paginated) listings, and a host rollback (newer objects deleted, or the
bucket restored from an older version).  Each ends as the folder cases do (tests/reliability/
test_sync_faults.py): nothing acknowledged is lost; what is missing is named as syncing, then as a
gap or rollback.

Device A writes to the server directly; device B (and fresh readers) go through the proxy.  pytest
main thread (the proxy runs its own threads).
"""

from __future__ import annotations

import os
import re
import time
import urllib.parse

import pytest
from camillo import NewRecord, Unlock, Vault, objectstore
from camillo import log as log_mod
from camillo.errors import StorageError

from .conftest import url

PASSPHRASE = "correct horse battery staple"


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch):
    monkeypatch.setattr(objectstore, "RETRY_BASE", 0.01)


class Setup:
    def __init__(self, server, bucket: str, proxy, tmp_path) -> None:
        self.server, self.bucket, self.proxy, self.tmp = server, bucket, proxy, tmp_path
        self.direct = url(bucket, "v", server.endpoint)
        self.via = url(bucket, "v", proxy.endpoint)
        self.a, _ = Vault.create(self.direct, PASSPHRASE, device_name="A", home=self.home("a"))
        self.open: list[Vault] = [self.a]

    def home(self, who: str) -> str:
        return str(self.tmp / f"home-{who}")

    def device(self, who: str, *, direct: bool = False) -> Vault:
        v = Vault.open(self.direct if direct else self.via, Unlock.passphrase(PASSPHRASE), home=self.home(who),
                       device_name=who)
        self.open.append(v)
        return v

    def keys(self) -> set[str]:
        client = self.server.client()
        return {o["Key"] for page in client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket)
                for o in page.get("Contents", [])}

    def write(self, vault: Vault, text: str) -> str:
        """Append one message; the key of the segment it made."""
        before = self.keys()
        vault.append([NewRecord(type="message", role="user", text=text)])
        (new,) = {k for k in self.keys() - before if "/segments/" in k}
        return new

    def close(self) -> None:
        for v in self.open:
            if not v.locked:
                v.lock()


@pytest.fixture
def setup(s3env, bucket, proxy, tmp_path):
    s = Setup(s3env, bucket, proxy, tmp_path)
    yield s
    s.close()


def texts(vault: Vault) -> set[str]:
    vault.refresh()
    return {v.text for v in vault.timeline()}


def later(monkeypatch, seconds: float) -> None:
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + seconds)


def test_listings_that_omit_recent_objects(setup):
    s, f = setup, setup.proxy.faults
    b = s.device("B")
    s.write(s.a, "m1")
    assert "m1" in texts(b)
    # the listing lags behind the newest write: B does not see it yet, and knows of nothing missing
    f.unlisted = {s.write(s.a, "m2")}
    assert "m2" not in texts(b) and b.sync_status()[0] == "up to date"
    # B's own write while its listing lags: acknowledged, so it is kept (the store still has it)
    f.lag_writes = True
    b.append([NewRecord(type="message", role="user", text="b1")])
    assert "b1" in texts(b)
    assert b.session.shelf.lagging, "the write the listing omits is known to be there"
    assert b.sync_status()[0] == "up to date"
    # a listing that omits an object below newer ones: B sees the gap and names it as syncing
    f.lag_writes, f.unlisted = False, set()
    assert {"m1", "m2", "b1"} <= texts(b)
    k3 = s.write(s.a, "m3")
    s.write(s.a, "m4")
    f.unlisted = {k3}
    seen = texts(b)
    assert "m4" in seen and "m3" not in seen
    status, details = b.sync_status()
    assert status == "syncing", (status, details)
    assert any("has not arrived" in d for d in details), details
    # the listing catches up: everything is there
    f.unlisted = set()
    assert {"m1", "m2", "m3", "m4", "b1"} <= texts(b)
    assert b.sync_status()[0] == "up to date"
    assert {"m1", "m2", "m3", "m4", "b1"} <= texts(s.a)


def test_503s_and_slow_answers(setup):
    s, f = setup, setup.proxy.faults
    f.delay = 0.01
    f.unavailable = 4  # SlowDown four times in a row: retried with backoff
    b = s.device("B")
    b.append([NewRecord(type="message", role="user", text="through the storm")])
    assert s.proxy.count("GET", 503) + s.proxy.count("HEAD", 503) + s.proxy.count("PUT", 503) >= 4
    assert "through the storm" in texts(s.a)
    # a store that keeps answering 503: one clear error naming the vault, nothing acknowledged
    f.always_unavailable = True
    with pytest.raises(StorageError) as err:
        b.append([NewRecord(type="message", role="user", text="not acknowledged")])
    assert f"s3://{s.bucket}/v" in err.value.message and "503" in err.value.message
    with pytest.raises(StorageError):
        s.device("C")
    f.always_unavailable = False
    b.append([NewRecord(type="message", role="user", text="after the storm")])
    seen = texts(b)
    assert {"through the storm", "after the storm"} <= seen
    assert b.sync_status()[0] == "up to date" and not b.problems()
    assert {"through the storm", "after the storm"} <= texts(s.a)


def test_truncated_bodies(setup):
    s, f = setup, setup.proxy.faults
    k1 = s.write(s.a, "m1")
    s.write(s.a, "m2")
    # bodies cut off mid-way (the connection drops): asked for again, everything arrives
    f.truncate, f.truncate_match = 3, "/segments/"
    c = s.device("C")
    assert {"m1", "m2"} <= texts(c) and c.sync_status()[0] == "up to date"
    assert f.truncate == 0
    # bodies cut with a Content-Length that lies: never taken for whole, named as still syncing
    f.truncate, f.truncate_lying, f.truncate_match = 1000, True, k1
    d = s.device("D")
    assert "m1" not in texts(d) and "m2" in texts(d)
    status, details = d.sync_status()
    assert status == "syncing" and any(k1.split("/", 1)[1] in x and "incomplete" in x for x in details), details
    assert any(p.file == k1.split("/", 1)[1] and "does not match its name" in p.message for p in d.problems())
    assert not d.session.shelf.size(k1.split("/", 1)[1]), "a cut body never enters the mirror"
    s.proxy.reset()
    assert {"m1", "m2"} <= texts(d) and d.sync_status()[0] == "up to date"


def test_reordered_paginated_listings(setup, monkeypatch):
    s, f = setup, setup.proxy.faults
    for i in range(4):
        s.write(s.a, f"m{i}")
    monkeypatch.setattr(objectstore, "LIST_PAGE", 3)
    f.reorder = True
    e = s.device("E")
    assert {f"m{i}" for i in range(4)} <= texts(e) and e.sync_status()[0] == "up to date"
    assert s.proxy.count("GET") > len(s.keys()) // 3, "the listing came in several pages"


def test_host_rollback_newer_objects_deleted(setup, monkeypatch):
    s, f = setup, setup.proxy.faults
    b = s.device("B")
    keys = [s.write(s.a, f"m{i}") for i in range(1, 5)]
    assert {"m1", "m2", "m3", "m4"} <= texts(b)
    f.hidden = set(keys[2:])  # the host lost the two newest objects
    seen = texts(b)
    assert "m3" not in seen and "m4" not in seen
    status, details = b.sync_status()
    assert status == "syncing", (status, details)
    assert not b.session.shelf.exists(keys[3].split("/", 1)[1])
    b.lock()
    later(monkeypatch, log_mod.SYNC_GRACE_SECONDS + 5)
    b = s.device("B")
    status, details = b.sync_status()
    assert status == "rollback alert", (status, details)
    assert any("vanished without a signed manifest" in d for d in details)
    f.hidden = set()  # the objects come back (restored by the host): all there, nothing lost
    assert {"m1", "m2", "m3", "m4"} <= texts(b)
    assert b.sync_status()[0] == "up to date"


def test_host_rollback_restored_from_an_older_version(setup):
    s = setup
    c = s.device("C", direct=True)
    lost = c.writer_id.hex()
    c.lock()
    client = s.server.client()
    old = {k: client.get_object(Bucket=s.bucket, Key=k)["Body"].read() for k in s.keys()}  # noqa: SIM118 - Setup.keys lists the bucket
    s.a.refresh()
    s.a.revoke(lost, reason="lost")
    assert s.a.sync_status()[0] == "up to date"
    generation = s.a.session.keyring.generation
    s.a.lock()
    for k in s.keys():  # noqa: SIM118 - the host restores the bucket as it was before the revocation
        client.delete_object(Bucket=s.bucket, Key=k)
    for k, data in old.items():
        client.put_object(Bucket=s.bucket, Key=k, Body=data)
    a = s.device("a", direct=True)
    assert a.session.keyring.generation < generation
    status, details = a.sync_status()
    assert status == "rollback alert", (status, details)
    assert any("old slots were restored" in d for d in details)


def test_an_open_lists_the_store_once_and_downloads_only_what_it_lacks(setup):
    s, proxy = setup, setup.proxy
    s.write(s.a, "m1")

    def requests(method: str, listing: bool = False) -> int:
        """GETs of objects, or full listings (not the one-key listing that checks the bucket)."""
        with proxy.lock:
            return sum(1 for m, path, _ in proxy.faults.log
                       if m == method and not re.search(r"max-keys=1(&|$)", path) and ("list-type=2" in path) == listing)

    b = s.device("B")  # a new installation: the open, then its registration's write, each list once
    assert requests("GET", listing=True) == 2, [p for m, p, _ in proxy.faults.log if "list-type=2" in p]
    assert requests("GET") >= 6  # the descriptor, slots, envelopes and segments
    b.lock()
    proxy.reset()
    b = s.device("B")  # warm: one listing serves the unlock and the first read; only the descriptor is fetched
    assert requests("GET", listing=True) == 1, proxy.faults.log
    assert requests("GET") == 1, proxy.faults.log
    assert "m1" in texts(b)


def test_an_append_lists_only_the_key_files_yet_never_misses_a_key_change(setup, monkeypatch):
    """A plain append does not list the whole bucket (10 pages at 100k records): one small listing
    (the envelopes: every key change writes some) shows whether a key change arrived; only then does
    it read the store again before numbering its batch, so that it seals to the new keys."""
    from camillo.session import writer

    monkeypatch.setattr(writer, "WRITE_SCAN_AGE", 0.0)  # appends further apart than a folder's scan reuse
    monkeypatch.setattr(objectstore, "LIST_REUSE", 0.0)  # and than a listing's (the mirror runs ahead of the reader)
    s, proxy = setup, setup.proxy
    b = s.device("B")

    def listings() -> list[str]:
        with proxy.lock:
            out = []
            for m, path, _ in proxy.faults.log:
                if m == "GET" and "list-type=2" in path and not re.search(r"max-keys=1(&|$)", path):
                    prefix = re.search(r"prefix=([^&]*)", path)
                    out.append(urllib.parse.unquote(prefix.group(1)) if prefix else "")
            return out

    b.refresh()  # B reads back the slot its registration wrote
    proxy.reset()
    for i in range(3):
        b.append([NewRecord(type="message", role="user", text=f"b{i}")])
        s.write(s.a, f"a{i}")  # another writer's batches: concurrent with B's next append, read at its refresh
    assert sorted(set(listings())) == ["v/env/"], listings()
    # B's registration wrote a slot and no envelope: A's appends sealed on, and A knows B at its refresh
    assert "a2" not in {r.text for r in b.timeline()}
    s.a.refresh()
    assert "B" in {p.name for p in s.a.session.roster.principals.values()}
    assert {"a0", "a1", "a2", "b0", "b1", "b2"} <= texts(b)

    # revoking a grant starts new epochs and writes no slot: the envelopes alone show it
    grant = str(s.tmp / "helper.grant")
    s.a.create_grant("helper", {"personal": "read"}, grant)
    b.append([NewRecord(type="message", role="user", text="the helper may read this")])
    helper_epoch = b.session.roster.current_epoch(b.session.roster.compartment_id("personal")).epoch_id
    slots_before = set(filter(lambda k: "/slots/" in k, s.keys()))
    s.a.revoke("helper", reason="done")
    assert set(filter(lambda k: "/slots/" in k, s.keys())) == slots_before
    proxy.reset()
    rid = b.append([NewRecord(type="message", role="user", text="not for the helper")]).written[0]
    assert "v/" in listings(), "the revocation was not read before the append"
    session = b.session
    batch, cid = session.materialized.record_location(rid)
    (segment,) = [n for n, bids in session.reader.segment_batches.items() if batch in bids]
    assert session.reader.segment_epochs[segment] == (cid, session.roster.current_epoch(cid).epoch_id)
    assert session.reader.segment_epochs[segment][1] != helper_epoch  # sealed to the epoch the helper lacks

    s.a.change_passphrase("another passphrase entirely")  # new epochs in every compartment, new envelopes
    proxy.reset()
    personal = b.session.roster.compartment_id("personal")
    seq = b.session.device_state.counters[personal][0]
    # numbered, sealed and staged while env/ was listed; the listing shows the change: that numbering is
    # forgotten (nothing of it was persisted or uploaded) and the batch numbered again on the new keys
    rid = b.append([NewRecord(type="message", role="user", text="after the key change")]).written[0]
    assert "v/" in listings(), "the key change was not read before the append"
    assert b.session.device_state.counters[personal][0] == seq + 1  # its number used again: no gap
    assert not [n for _d, _s, names in os.walk(b.session.shelf.root) for n in names if n.startswith(".")], \
        "the forgotten numbering's staged segment was left behind"
    b.lock()
    b = Vault.open(s.via, Unlock.passphrase("another passphrase entirely"), home=s.home("B"))  # the new keys now
    s.open.append(b)
    session = b.session
    batch, cid = session.materialized.record_location(rid)
    (segment,) = [n for n, bids in session.reader.segment_batches.items() if batch in bids]
    assert session.reader.segment_epochs[segment] == (cid, session.roster.current_epoch(cid).epoch_id)
    assert "after the key change" in texts(b)


def test_an_appends_two_requests_go_straight_to_the_store_and_fall_back_to_botocore(setup, monkeypatch):
    """An append's listing of ``env/`` and its conditional PUT are presigned requests over a bare
    connection (camillo.s3direct), not botocore's request pipeline (about 4 ms of CPU each on a slow
    machine); when one is not answered as expected (a 503 here), botocore makes it again, with its
    retries and errors, and nothing is lost or written twice."""
    from camillo.session import writer

    monkeypatch.setattr(writer, "WRITE_SCAN_AGE", 0.0)
    s, proxy = setup, setup.proxy
    b = s.device("B")
    b.refresh()
    proxy.reset()
    b.append([NewRecord(type="message", role="user", text="straight to the store")])
    with proxy.lock:
        log = list(proxy.faults.log)
    direct = [(m, urllib.parse.unquote(p)) for m, p, st in log if "X-Amz-Signature=" in p and st in (200, 412)]
    assert any(m == "GET" and "list-type=2" in p and "prefix=v/env/" in p for m, p in direct), log
    assert any(m == "PUT" and "/v/segments/" in p and "If-None-Match" not in p for m, p in direct), log
    assert not [p for m, p, _ in log if m == "PUT" and "X-Amz-Signature=" not in p], "botocore wrote too"
    # the condition holds on that path too: an existing name is refused (412), never overwritten
    shelf = b.session.shelf
    name = sorted(shelf.loose_segments())[0]
    proxy.reset()
    with pytest.raises(StorageError, match="already exists"):
        shelf.put_new(name, b"other bytes")
    with proxy.lock:
        assert [(st, "X-Amz-Signature=" in p) for m, p, st in proxy.faults.log if m == "PUT"] == [(412, True)]
    assert shelf.read(name) != b"other bytes"

    proxy.reset()
    proxy.faults.presigned_unavailable = 2  # the direct listing and the direct PUT: botocore makes both
    b.append([NewRecord(type="message", role="user", text="after two refusals")])
    with proxy.lock:
        log = list(proxy.faults.log)
    assert [st for m, p, st in log if m == "PUT" and "X-Amz-Signature=" in p] == [503], log
    assert [st for m, p, st in log if m == "PUT" and "X-Amz-Signature=" not in p] == [200], log
    assert any(m == "GET" and "list-type=2" in p and "X-Amz-Signature=" not in p for m, p, _ in log), log
    assert {"straight to the store", "after two refusals"} <= texts(s.a)
    assert b.sync_status()[0] == "up to date" and not b.problems()

    monkeypatch.setenv("CAMILLO_S3_DIRECT", "0")  # turned off: botocore makes every request
    c = s.device("C")
    proxy.reset()
    c.append([NewRecord(type="message", role="user", text="all through botocore")])
    with proxy.lock:
        assert not [p for _m, p, _s in proxy.faults.log if "X-Amz-Signature=" in p]
    assert "all through botocore" in texts(s.a)
