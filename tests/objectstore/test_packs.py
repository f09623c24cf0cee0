"""Packs on an object store (spec §4.7.1, camillo.storepacks), against the real SeaweedFS: a writer
gathers its small segments into packs and deletes the loose copies, a new mirror fetches the packs in
a few GETs, a hostile pack brings nothing in, deleting a segment a pack holds (an erasure) replaces
the pack without losing its other segments, and a deleted segment a pack kept is deleted again.

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


def packed(store: Store) -> set[str]:
    return set().union(*(store.pack_names(p) for p in store.keys("packs/")))


def texts(vault: Vault) -> set[str]:
    return {r.text for r in vault.timeline()}


def segment_gets(store: Store) -> int:
    return sum(1 for method, path, _status in store.proxy.faults.log if method == "GET" and "/segments/" in path)


def test_a_writer_packs_its_segments_and_a_new_mirror_fetches_them_in_a_few_gets(store):
    a = store.create()
    notes = [f"note {i}" for i in range(14)]
    write(a, *notes)
    packs = store.keys("packs/")
    assert packs, "enough loose segments were written for a pack"
    loose = store.keys("segments/")
    assert len(packed(store)) >= storepacks.PACK_AFTER
    assert packed(store).isdisjoint(loose), "the loose objects a pack holds are deleted"
    assert len(loose) < storepacks.PACK_AFTER
    b = store.device("B")
    assert set(notes) <= texts(b)
    assert b.session.shelf.packs.fetched == len(packs)
    assert segment_gets(store) <= len(loose), "only the segments in no pack were fetched one by one"
    mirror = b.session.shelf.root
    assert set(os.listdir(os.path.join(mirror, "packs"))) == {p.split("/")[1] for p in packs}, \
        "the mirror holds the packs as the store does"
    from camillo.hostview import host_view  # what the host sees includes the packs (camillo info)

    shown = {f["name"]: f for f in host_view(store.direct)["files"] if f["kind"] == "pack"}
    assert set(shown) == packs and all(f["entries"] >= 2 and f["size"] > 0 for f in shown.values())
    assert b.problems(full=True) == []
    # B holds loose copies of A's next segments; A packs them and deletes the loose objects: B's
    # refresh brings the packs and drops its loose copies, and nothing goes missing meanwhile
    write(a, "one more")
    b.refresh()
    more = [f"more {i}" for i in range(3 * storepacks.PACK_AFTER)]
    write(a, *more)
    b.refresh()
    assert set(notes) | set(more) | {"one more"} <= texts(b)
    held = set().union(*b.session.shelf.mirror_packs().values())
    assert not held & set(b.session.shelf.loose_segments()), "no loose copy of a packed segment is kept"
    assert b.problems(full=True) == []


def test_a_pack_whose_segment_is_not_what_its_name_says_brings_nothing_in(store, monkeypatch):
    monkeypatch.setattr(storepacks, "PACK_AFTER", 1000)  # the forged pack is the only one
    a = store.create()
    write(a, *(f"m{i}" for i in range(4)))
    segments = sorted(store.keys("segments/"))
    # a host (or a writer with write access to the bucket) uploads a pack whose bytes hash to its
    # name, but whose entries carry other bytes under real segment names
    forged = store.put_pack([(n, os.urandom(len(store.get(n)))) for n in segments])
    b = store.device("B")
    assert {f"m{i}" for i in range(4)} <= texts(b)
    assert forged in b.session.shelf.packs.refused
    assert not os.path.exists(os.path.join(b.session.shelf.root, forged)), "the mirror does not keep it"
    assert segment_gets(store) >= len(segments), "every segment came loose, checked against its name"
    assert b.problems(full=True) == []


def test_a_forged_pack_never_gets_the_loose_copies_deleted(store, monkeypatch, tmp_path):
    from camillo.objectstore import ObjectShelf

    monkeypatch.setattr(storepacks, "PACK_AFTER", 1000)
    a = store.create()
    write(a, *(f"m{i}" for i in range(4)))
    segments = store.keys("segments/")
    store.put_pack([(n, os.urandom(len(store.get(n)))) for n in sorted(segments)])
    shelf = ObjectShelf(store.via, home=str(tmp_path / "home-x"))  # the pack is fetched, not yet read
    try:
        shelf.list()
        assert set().union(*shelf.mirror_packs().values()) == segments
        assert shelf.packs.tidy(at_least=1) == 0, "its copies were read and did not match their names"
    finally:
        shelf.close()
    assert segments <= store.keys("segments/")


def test_only_small_segments_are_packed(store):
    a = store.create()
    write(a, *(f"{i} " + "x" * storepacks.PACK_BELOW for i in range(2 * storepacks.PACK_AFTER)))
    big = {n for n in store.keys("segments/") if len(store.get(n)) >= storepacks.PACK_BELOW}
    assert len(big) == 2 * storepacks.PACK_AFTER, "they stay loose"
    assert packed(store).isdisjoint(big)


def test_a_deleted_segment_a_pack_kept_is_deleted_again(store):
    a = store.create()
    write(a, "keep 0", "erase me", "keep 1")
    before = {n: store.get(n) for n in store.keys("segments/")}
    (rec,) = [r for r in a.timeline() if r.text == "erase me"]
    a.erase([rec.id])
    deleted = sorted(set(before) - store.keys("segments/"))
    assert deleted
    # a packing step that read the old segments before the erasure deleted them puts its pack
    # afterwards (a race between two devices): the erased record's old segment lives on in it
    stale = store.put_pack(sorted(before.items()))
    c = store.device("C")  # sees it, and cannot read it: its epoch's keys were destroyed
    assert "erase me" not in texts(c)
    a.refresh()  # the next owner to read the store deletes it again
    assert stale not in store.keys("packs/")
    kept = packed(store) | store.keys("segments/")
    assert kept.isdisjoint(deleted)
    assert set(before) - set(deleted) <= kept, "the pack's other segments were put back first"
    assert {"keep 0", "keep 1"} <= texts(store.device("D"))


def test_an_erasure_replaces_every_pack_holding_a_segment_it_deletes(store):
    a = store.create()
    keep = [f"keep {i}" for i in range(10)]
    write(a, *keep)
    write(a, "erase me")
    write(a, *(f"after {i}" for i in range(6)))
    assert store.keys("packs/")
    (rec,) = [r for r in a.timeline() if r.text == "erase me"]
    before = packed(store) | store.keys("segments/")
    a.erase([rec.id])
    now = packed(store) | store.keys("segments/")
    deleted = before - now
    assert deleted
    for pack in store.keys("packs/"):
        assert store.pack_names(pack).isdisjoint(deleted), "no pack keeps a segment the erasure deleted"
    c = store.device("C")
    seen = texts(c)
    assert "erase me" not in seen and set(keep) <= seen
    assert c.problems(full=True) == []


def test_a_folder_merged_or_unpacked_into_the_store_is_packed_at_once(store, tmp_path):
    from camillo import transport

    folder = str(tmp_path / "laptop")
    laptop, _ = Vault.create(folder, PASSPHRASE, device_name="laptop", home=str(tmp_path / "home-laptop"))
    write(laptop, *(f"laptop {i}" for i in range(2 * storepacks.PACK_AFTER)))
    laptop.lock()
    vmem = str(tmp_path / "laptop.vmem")
    transport.pack_vault(folder, vmem)
    transport.unpack_vault(vmem, store.direct)
    assert len(store.keys("segments/")) < storepacks.PACK_AFTER, "what is left loose is fewer than one pack's worth"
    # the laptop writes more; merging its folder into the store packs what the merge brought (and
    # deletes the loose copies the merge put of segments a pack already holds)
    laptop = Vault.open(folder, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "home-laptop"))
    write(laptop, *(f"later {i}" for i in range(2 * storepacks.PACK_AFTER)))
    laptop.lock()
    assert transport.merge_into(store.direct, folder)
    loose = store.keys("segments/")
    assert len(loose) < storepacks.PACK_AFTER and loose.isdisjoint(packed(store))
    b = store.device("B")
    assert b.session.shelf.packs.fetched >= 2
    assert {f"later {i}" for i in range(2 * storepacks.PACK_AFTER)} <= texts(b)


def test_loose_copies_of_packed_segments_are_deleted_by_a_later_step(store, monkeypatch):
    monkeypatch.setattr(storepacks, "PACK_AFTER", 1000)
    a = store.create()
    write(a, *(f"m{i}" for i in range(8)))
    # a packing step that stopped after its PUT, before it deleted the loose objects
    segments = sorted(store.keys("segments/"))
    store.put_pack([(n, store.get(n)) for n in segments])
    b = store.device("B")
    assert b.session.shelf.packs.tidy(at_least=1) == len(segments)
    assert store.keys("segments/").isdisjoint(segments)
    assert {f"m{i}" for i in range(8)} <= texts(store.device("C"))


def test_a_listing_that_passed_packs_before_a_pack_was_written_loses_nothing(store):
    a = store.create()
    b = store.device("B")
    a.refresh()  # A packs B's registration with its own first segments (appends read only the envelopes)
    write(a, *(f"m{i}" for i in range(storepacks.PACK_AFTER - 1)))
    b.refresh()
    assert len(b.session.shelf.loose_segments()) == storepacks.PACK_AFTER - 1
    write(a, "the last")  # A packs: the loose objects B holds copies of are deleted
    shelf = b.session.shelf
    full = shelf._list_remote

    def stale_listing(under: str = ""):  # listed packs/ before A's PUT, segments/ after its deletions
        found = full(under)
        return found if under else {n: o for n, o in found.items() if not n.startswith("packs/")}

    names = set(shelf.list())
    shelf._list_remote = stale_listing
    b.refresh()
    assert names <= set(shelf.list()), "no segment went missing, even for a moment"
    assert {f"m{i}" for i in range(storepacks.PACK_AFTER - 1)} | {"the last"} <= texts(b)
    assert shelf.mirror_packs(), "the pack was fetched from the second listing of packs/"
    assert not shelf.lagging and not shelf.pending


def test_a_torn_mirror_copy_is_downloaded_again_when_read(store, monkeypatch):
    monkeypatch.setattr(storepacks, "PACK_AFTER", 1000)
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


def test_a_torn_mirror_pack_is_downloaded_again_when_read(store):
    a = store.create()
    write(a, *(f"m{i}" for i in range(8)))
    b = store.device("B")
    shelf = b.session.shelf
    pack, held = sorted(shelf.mirror_packs().items())[0]
    path = os.path.join(shelf.root, pack)
    whole = open(path, "rb").read()
    name = sorted(held)[0]
    want = a.session.shelf.read(name)
    with open(path, "r+b") as fh:  # the segments' bytes damaged, the index intact
        fh.seek(20)
        fh.write(b"\0" * 64)
    assert shelf.read(name) == want
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
    assert shelf.read(name) == whole


def test_deleting_one_of_two_segments_in_a_pack_puts_the_other_back_loose(store, monkeypatch):
    from camillo import segments

    monkeypatch.setattr(storepacks, "PACK_AFTER", 1000)
    a = store.create()
    before = store.keys("segments/")
    write(a, "erase me")
    (doomed,) = store.keys("segments/") - before
    compartment = segments.read_header(store.get(doomed), doomed).compartment_id
    # a segment of another compartment (the control compartment's), which the erasure leaves alone
    kept = next(n for n in sorted(before) if segments.read_header(store.get(n), n).compartment_id != compartment)
    # the two in one pack, their loose objects gone (as a packing step leaves them)
    pack = store.put_pack([(n, store.get(n)) for n in sorted((kept, doomed))])
    for n in (kept, doomed):
        store.client.delete_object(Bucket=store.bucket, Key=f"v/{n}")
    a.refresh()
    (rec,) = [r for r in a.timeline() if r.text == "erase me"]
    a.erase([rec.id])
    assert pack not in store.keys("packs/")
    assert kept in store.keys("segments/"), "the other segment went back loose before the pack was deleted"
    assert doomed not in store.keys("segments/") | packed(store)
    assert store.device("C").problems(full=True) == []


def test_a_planted_file_too_short_for_a_segment_stays_loose_and_every_pack_reads(store):
    """An object under a segment's name whose bytes hash to it but are shorter than any segment (a
    host's, or a writer's with access to the bucket): a pack holding it would not read (its reader
    refuses such an entry), so the writer leaves it loose and packs the rest."""
    from camillo.storage import segment_name

    a = store.create()
    junk = b"VMEMSEG1" + bytes(100)
    name = segment_name(junk)
    store.client.put_object(Bucket=store.bucket, Key=f"v/{name}", Body=junk)
    a.refresh()
    notes = {f"n{i}" for i in range(2 * storepacks.PACK_AFTER)}
    write(a, *sorted(notes))
    assert store.keys("packs/"), "the writer packed its segments"
    assert name not in packed(store)  # (every pack opens with PackReader)
    assert name in store.keys("segments/")
    assert notes <= texts(store.device("B"))
