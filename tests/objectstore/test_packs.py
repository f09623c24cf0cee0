"""Packs on an object store (spec §4.7.1, camillo.storepacks), against the real SeaweedFS: a writer
packs its small segments, a new mirror fetches them in a few GETs, a hostile or stale pack brings
nothing in, and deleting a segment (an erasure) deletes the packs that hold it.

pytest main thread (the proxy runs its own threads).
"""

from __future__ import annotations

import io
import os

import pytest
from camillo import NewRecord, Unlock, Vault, storepacks
from camillo.packs import PackReader, write_pack

from .conftest import url

PASSPHRASE = "correct horse battery staple"


@pytest.fixture(autouse=True)
def small_packs(monkeypatch):
    monkeypatch.setattr(storepacks, "PACK_AFTER", 6)
    monkeypatch.setattr(storepacks, "FETCH_AT_LEAST", 3)


class Store:
    def __init__(self, server, bucket: str, proxy, tmp_path) -> None:
        self.server, self.bucket, self.proxy, self.tmp = server, bucket, proxy, tmp_path
        self.client = server.client()
        self.direct = url(bucket, "v", server.endpoint)
        self.via = url(bucket, "v", proxy.endpoint)
        self.open: list[Vault] = []

    def create(self) -> Vault:
        v, _ = Vault.create(self.direct, PASSPHRASE, device_name="A", home=str(self.tmp / "home-a"))
        self.open.append(v)
        return v

    def device(self, who: str) -> Vault:
        v = Vault.open(self.via, Unlock.passphrase(PASSPHRASE), home=str(self.tmp / f"home-{who}"), device_name=who)
        self.open.append(v)
        return v

    def keys(self, under: str = "") -> set[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=f"v/{under}")
        return {o["Key"][2:] for page in pages for o in page.get("Contents", [])}

    def get(self, name: str) -> bytes:
        return self.client.get_object(Bucket=self.bucket, Key=f"v/{name}")["Body"].read()

    def pack_names(self, pack: str) -> set[str]:
        path = str(self.tmp / "a.pack")
        with open(path, "wb") as fh:
            fh.write(self.get(pack))
        reader = PackReader(path)
        try:
            return {e.name for e in reader.entries}
        finally:
            reader.close()

    def put_pack(self, entries: list[tuple[str, bytes]]) -> str:
        out = io.BytesIO()
        _size, digest = write_pack(entries, out, complete_vault=False)
        name = f"packs/{digest.hex()}.pack"
        self.client.put_object(Bucket=self.bucket, Key=f"v/{name}", Body=out.getvalue())
        return name

    def close(self) -> None:
        for v in self.open:
            if not v.locked:
                v.lock()


@pytest.fixture
def store(s3env, bucket, proxy, tmp_path):
    s = Store(s3env, bucket, proxy, tmp_path)
    yield s
    s.close()


def write(vault: Vault, *texts: str) -> None:
    for text in texts:
        vault.append([NewRecord(type="message", role="user", text=text)])


def segment_gets(store: Store) -> int:
    return sum(1 for method, path, _status in store.proxy.faults.log if method == "GET" and "/segments/" in path)


def test_a_writer_packs_its_segments_and_a_new_mirror_fetches_them_in_a_few_gets(store):
    a = store.create()
    texts = [f"note {i}" for i in range(14)]
    write(a, *texts)
    packs = store.keys("packs/")
    assert packs, "enough loose segments were written for a pack"
    segments = store.keys("segments/")
    packed = set().union(*(store.pack_names(p) for p in packs))
    assert packed <= segments, "a pack holds segments the store also holds loose"
    assert len(packed) >= storepacks.PACK_AFTER
    b = store.device("B")
    assert set(texts) <= {r.text for r in b.timeline()}
    assert b.session.shelf.packs.fetched >= 1
    # only the segments in no pack were fetched one by one
    assert segment_gets(store) <= len(segments) - len(packed)
    mirror = b.session.shelf.root
    assert not os.listdir(os.path.join(mirror, "packs")), "a mirror keeps the segments, never the packs"
    from camillo.hostview import host_view  # what the host sees includes the packs (camillo info)

    shown = {f["name"]: f for f in host_view(store.direct)["files"] if f["kind"] == "pack"}
    assert set(shown) == packs and all(f["entries"] >= 2 and f["size"] > 0 for f in shown.values())
    assert b.problems(full=True) == []
    # a mirror that fell behind: the new packs' indexes are read (ranged GETs), then the packs fetched
    fetched, before = b.session.shelf.packs.fetched, len(store.proxy.faults.log)
    more = [f"more {i}" for i in range(3 * storepacks.PACK_AFTER)]
    write(a, *more)
    b.refresh()
    assert set(more) <= {r.text for r in b.timeline()}
    assert b.session.shelf.packs.fetched > fetched
    ranged = [path for method, path, _status in store.proxy.faults.log[before:] if method == "GET" and "/packs/" in path]
    assert len(ranged) >= 3 * (b.session.shelf.packs.fetched - fetched), "trailer, index, then the whole pack"


def test_a_pack_whose_segment_is_not_what_its_name_says_brings_nothing_in(store, monkeypatch):
    monkeypatch.setattr(storepacks, "PACK_AFTER", 1000)  # the forged pack is the only one
    a = store.create()
    write(a, *(f"m{i}" for i in range(4)))
    segments = sorted(store.keys("segments/"))
    # a host (or a writer with write access to the bucket) uploads a pack whose bytes hash to its
    # name, but whose entries carry other bytes under real segment names
    forged = store.put_pack([(n, os.urandom(len(store.get(n)))) for n in segments])
    b = store.device("B")
    assert {f"m{i}" for i in range(4)} <= {r.text for r in b.timeline()}
    assert b.session.shelf.packs.fetched == 1, forged
    assert segment_gets(store) >= len(segments), "every segment came loose, checked against its name"
    assert b.problems(full=True) == []


def test_a_pack_does_not_bring_back_a_segment_the_store_no_longer_holds(store):
    a = store.create()
    write(a, *(f"m{i}" for i in range(3)))
    before = store.keys("segments/")
    write(a, "m3")
    (gone,) = store.keys("segments/") - before  # the last message's segment
    segments = sorted(store.keys("segments/"))
    stale = store.put_pack([(n, store.get(n)) for n in segments])
    # the segment is deleted after the pack was made (an erasure racing a packing step)
    store.client.delete_object(Bucket=store.bucket, Key=f"v/{gone}")
    b = store.device("B")
    assert not os.path.exists(os.path.join(b.session.shelf.root, gone)), "taken only for listed segments"
    assert gone not in b.session.shelf.list()
    # the next packing step drops the stale pack
    write(a, *(f"n{i}" for i in range(storepacks.PACK_AFTER)))
    assert stale not in store.keys("packs/")
    assert store.keys("packs/"), "the live segments were packed again"


def test_an_erasure_deletes_every_pack_holding_a_segment_it_deletes(store):
    a = store.create()
    texts = [f"keep {i}" for i in range(10)]
    write(a, *texts)
    write(a, "erase me")
    write(a, *(f"after {i}" for i in range(6)))
    assert store.keys("packs/")
    (rec,) = [r for r in a.timeline() if r.text == "erase me"]
    before = store.keys("segments/")
    a.erase([rec.id])
    deleted = before - store.keys("segments/")
    assert deleted
    for pack in store.keys("packs/"):
        assert store.pack_names(pack).isdisjoint(deleted), "no pack outlives a segment it holds"
    c = store.device("C")
    seen = {r.text for r in c.timeline()}
    assert "erase me" not in seen and set(texts) <= seen


def test_a_folder_merged_or_unpacked_into_the_store_is_packed_at_once(store, tmp_path):
    from camillo import transport

    folder = str(tmp_path / "laptop")
    laptop, _ = Vault.create(folder, PASSPHRASE, device_name="laptop", home=str(tmp_path / "home-laptop"))
    write(laptop, *(f"laptop {i}" for i in range(2 * storepacks.PACK_AFTER)))
    laptop.lock()
    vmem = str(tmp_path / "laptop.vmem")
    transport.pack_vault(folder, vmem)
    transport.unpack_vault(vmem, store.direct)
    segments = store.keys("segments/")
    packed = set().union(*(store.pack_names(p) for p in store.keys("packs/")))
    assert len(segments - packed) < storepacks.PACK_AFTER, "what is left loose is fewer than one pack's worth"
    # the laptop writes more; merging its folder into the store packs what the merge brought
    laptop = Vault.open(folder, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "home-laptop"))
    write(laptop, *(f"later {i}" for i in range(2 * storepacks.PACK_AFTER)))
    laptop.lock()
    assert transport.merge_into(store.direct, folder)
    segments = store.keys("segments/")
    packed = set().union(*(store.pack_names(p) for p in store.keys("packs/")))
    assert len(segments - packed) < storepacks.PACK_AFTER
    b = store.device("B")
    assert b.session.shelf.packs.fetched >= 2
    assert {f"later {i}" for i in range(2 * storepacks.PACK_AFTER)} <= {r.text for r in b.timeline()}


def test_a_torn_mirror_copy_is_downloaded_again_when_read(store):
    a = store.create()
    write(a, *(f"m{i}" for i in range(8)))
    b = store.device("B")
    shelf = b.session.shelf
    name = sorted(shelf.loose_segments())[0]
    path = os.path.join(shelf.root, name)
    whole = open(path, "rb").read()
    with open(path, "r+b") as fh:  # what a crash while it was written leaves (no temp file, no fsync)
        fh.truncate(len(whole) // 2)
    assert shelf.read(name) == whole  # the copy does not match its name: fetched again from the store
    assert open(path, "rb").read() == whole


def test_packing_downloads_a_torn_mirror_copy_again_instead_of_leaving_it_out(store, monkeypatch):
    monkeypatch.setattr(storepacks, "PACK_AFTER", 1000)
    a = store.create()
    write(a, *(f"m{i}" for i in range(8)))
    shelf = a.session.shelf
    name = sorted(shelf.loose_segments())[0]
    path = os.path.join(shelf.root, name)
    whole = open(path, "rb").read()
    with open(path, "r+b") as fh:
        fh.truncate(len(whole) // 2)
    monkeypatch.setattr(storepacks, "PACK_AFTER", 6)
    shelf.after_write()
    (pack,) = store.keys("packs/")
    assert name in store.pack_names(pack), "the torn segment was fetched again and packed"
    assert open(path, "rb").read() == whole

