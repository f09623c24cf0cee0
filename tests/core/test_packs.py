"""Pack files (camillo.packs) and byte shelves (camillo.storage)."""

from __future__ import annotations

import errno
import hashlib
import io
import os
import random
import stat
import time

import pytest
from camillo import bulksync, descriptor, encoding, packs, packshelf, storage
from camillo.errors import DamagedFile, NotAVault, ReadOnlyVault, StorageError, UnsupportedVersion
from camillo.primitives import sha256
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

PACK_ERRORS = (DamagedFile, NotAVault, UnsupportedVersion)
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def blob(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def slot_name(seed: int) -> str:
    return f"slots/{hashlib.md5(str(seed).encode(), usedforsecurity=False).hexdigest()}.slot"


def env_entry(seed: int, size: int = 4096) -> tuple[str, bytes]:
    data = blob(seed, size)
    return f"env/{sha256(data).hex()}.env", data


def seg_entry(seed: int, size: int = 4096) -> tuple[str, bytes]:
    data = blob(seed, size)
    return storage.segment_name(data), data


DESC = ("VMEM", descriptor.Descriptor(sha256(b"vault")).encode())


def pack_bytes(entries, *, complete_vault: bool = True) -> bytes:
    buf = io.BytesIO()
    size, digest = packs.write_pack(entries, buf, complete_vault=complete_vault)
    data = buf.getvalue()
    assert size == len(data)
    assert digest == sha256(data)
    return data


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    return tmp_path_factory.mktemp("packs")


class PackFile:
    """One scratch file, rewritten for each probe."""

    def __init__(self, directory) -> None:
        self.path = os.path.join(directory, f"probe-{random.getrandbits(64):016x}.vmem")

    def open(self, data: bytes, **kw) -> packs.PackReader:
        with open(self.path, "wb") as fh:
            fh.write(data)
        return packs.PackReader(self.path, **kw)

    def check_rejected(self, data: bytes, **kw) -> BaseException:
        try:
            reader = self.open(data, **kw)
        except PACK_ERRORS as exc:
            return exc
        reader.close()
        raise AssertionError("pack was accepted")


entry_sets = st.builds(
    lambda desc, slot_seeds, env_seeds, seg_seeds, sizes: (
        ([DESC] if desc else [])
        + [(slot_name(s), blob(s, 4096 + sizes % 50)) for s in slot_seeds]
        + [env_entry(s, 4096 + (sizes + s) % 30) for s in env_seeds]
        + [seg_entry(s, 4096 + (sizes * s) % 700) for s in seg_seeds]
    ),
    st.booleans(),
    st.sets(st.integers(0, 10**6), max_size=3),
    st.sets(st.integers(0, 10**6), max_size=3),
    st.sets(st.integers(0, 10**6), max_size=4),
    st.integers(0, 1000),
)


# ---------------------------------------------------------------------------------------------
# Round trips and determinism


@FAST
@given(entries=entry_sets, complete=st.booleans(), rnd=st.randoms(use_true_random=False))
def test_round_trip_and_determinism(workdir, entries, complete, rnd):
    data = pack_bytes(entries, complete_vault=complete)
    shuffled = list(entries)
    rnd.shuffle(shuffled)
    assert pack_bytes(shuffled, complete_vault=complete) == data  # same set, any order: same bytes
    reader = PackFile(workdir).open(data)
    try:
        assert reader.flags == (packs.FLAG_COMPLETE_VAULT if complete else 0)
        assert sorted(e.name for e in reader.entries) == sorted(n for n, _ in entries)
        keys = [(e.type, e.name) for e in reader.entries]
        assert keys == sorted(keys)
        for name, content in entries:
            assert reader.read(name) == content
    finally:
        reader.close()


def test_layout(workdir):
    entries = [DESC, seg_entry(1)]
    data = pack_bytes(entries, complete_vault=True)
    assert data[:8] == b"VMEMPACK"
    assert data[8:12] == b"\x00\x01\x00\x01"
    assert data[-8:] == b"VMEMEND1"
    trailer = data[-56:]
    index_offset = int.from_bytes(trailer[:8], "big")
    index_len = int.from_bytes(trailer[8:12], "big")
    assert int.from_bytes(trailer[12:16], "big") == 2
    assert trailer[16:48] == sha256(data[:-56])
    index = encoding.decode(data[index_offset : index_offset + index_len])
    assert index == [[1, "VMEM", 12, len(DESC[1])], [4, entries[1][0], 12 + len(DESC[1]), 4096]]
    assert pack_bytes(entries, complete_vault=False)[8:12] == b"\x00\x01\x00\x00"


def test_empty_pack(workdir):
    data = pack_bytes([], complete_vault=False)
    reader = PackFile(workdir).open(data)
    assert reader.entries == []
    reader.close()


def test_entry_type_refuses_foreign_names():
    for name in ("packs/x.pack", "enroll/x.req", "other", "vmem"):
        with pytest.raises(ValueError):
            packs.entry_type(name)
    with pytest.raises(ValueError):
        pack_bytes([("notes.txt", b"x" * 4096)])


def test_unverified_open_skips_the_hash(workdir):
    data = bytearray(pack_bytes([DESC, seg_entry(2)]))
    data[100] ^= 1  # inside the segment entry
    reader = PackFile(workdir).open(bytes(data), verify_hash=False)
    assert len(reader.entries) == 2
    reader.close()
    with pytest.raises(DamagedFile, match="checksum does not match"):
        PackFile(workdir).open(bytes(data))


def test_missing_or_unreadable_path(workdir):
    with pytest.raises(NotAVault, match="cannot open"):
        packs.PackReader(os.path.join(workdir, "does-not-exist.vmem"))
    with pytest.raises(NotAVault, match="cannot open"):
        packs.PackReader(str(workdir))  # a directory


# ---------------------------------------------------------------------------------------------
# Damage: every truncation, every flipped byte


def expected_flip_error(data: bytes, i: int, mask: int) -> tuple[type, ...]:
    if i < 8:
        return (NotAVault,)
    if i < 10:
        return (UnsupportedVersion,)
    if i < 12:
        flags = int.from_bytes(data[10:12], "big") ^ (mask << (8 * (11 - i)))
        return (UnsupportedVersion,) if flags & ~packs.FLAG_COMPLETE_VAULT else (DamagedFile,)
    return (DamagedFile,)


@pytest.fixture(scope="module")
def small_pack() -> bytes:
    return pack_bytes([DESC])


@pytest.fixture(scope="module")
def big_pack() -> bytes:
    return pack_bytes([DESC, (slot_name(1), blob(1, 4096)), env_entry(2), seg_entry(3), seg_entry(4, 5000)])


def test_every_single_flipped_byte_small_pack(workdir, small_pack):
    probe = PackFile(workdir)
    for i in range(len(small_pack)):
        for mask in (0x01, 0x80, 0xFF):
            bad = bytearray(small_pack)
            bad[i] ^= mask
            exc = probe.check_rejected(bytes(bad))
            assert isinstance(exc, expected_flip_error(small_pack, i, mask)), (i, mask, exc)


@FAST
@given(data=st.data())
def test_random_flipped_byte_big_pack(workdir, big_pack, data):
    i = data.draw(st.integers(0, len(big_pack) - 1))
    mask = data.draw(st.integers(1, 255))
    bad = bytearray(big_pack)
    bad[i] ^= mask
    exc = PackFile(workdir).check_rejected(bytes(bad))
    assert isinstance(exc, expected_flip_error(big_pack, i, mask))


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_unverified_reader_survives_any_flip_in_index_or_trailer(workdir, big_pack, data):
    """Without the hash, the index parser faces hostile bytes directly: only vault errors."""
    index_offset = int.from_bytes(big_pack[-56:-48], "big")
    i = data.draw(st.sampled_from([*range(0, 12), *range(index_offset, len(big_pack))]))
    mask = data.draw(st.integers(1, 255))
    bad = bytearray(big_pack)
    bad[i] ^= mask
    probe = PackFile(workdir)
    try:
        reader = probe.open(bytes(bad), verify_hash=False)
    except PACK_ERRORS:
        return
    # Accepted (a flip in the stored hash, or a harmless one): entries must still be consistent.
    try:
        for e in reader.entries:
            assert len(reader.read(e.name)) == e.length
    finally:
        reader.close()


def test_every_truncation(workdir, small_pack, big_pack):
    probe = PackFile(workdir)
    big_lengths = sorted({*range(0, 200), *range(0, len(big_pack), 11), *range(len(big_pack) - 200, len(big_pack))})
    for data, lengths in ((small_pack, range(len(small_pack))), (big_pack, big_lengths)):
        for n in lengths:
            exc = probe.check_rejected(data[:n])
            assert isinstance(exc, NotAVault if n < 68 else DamagedFile), (n, exc)


def test_extended_or_prefixed(workdir, big_pack):
    probe = PackFile(workdir)
    for bad in (big_pack + b"\x00", big_pack + big_pack[-56:], b"\x00" + big_pack):
        probe.check_rejected(bad)


# ---------------------------------------------------------------------------------------------
# Hand-built packs: hostile trailers and indexes with a correct hash


def raw_pack(
    datas: list[bytes],
    index: list,
    *,
    flags: int = 0,
    version: int = 1,
    count: int | None = None,
    index_offset: int | None = None,
    index_len: int | None = None,
    index_bytes: bytes | None = None,
) -> bytes:
    body = b"VMEMPACK" + version.to_bytes(2, "big") + flags.to_bytes(2, "big") + b"".join(datas)
    ib = encoding.encode(index) if index_bytes is None else index_bytes
    before = body + ib
    trailer = (
        (len(body) if index_offset is None else index_offset).to_bytes(8, "big")
        + (len(ib) if index_len is None else index_len).to_bytes(4, "big")
        + (len(index) if count is None else count).to_bytes(4, "big")
        + sha256(before)
        + b"VMEMEND1"
    )
    return before + trailer


A = seg_entry(10)
B = seg_entry(11)
(A_NAME, A_DATA), (B_NAME, B_DATA) = sorted([A, B])


def test_raw_pack_helper_builds_valid_packs(workdir):
    data = raw_pack([A_DATA, B_DATA], [[4, A_NAME, 12, 4096], [4, B_NAME, 12 + 4096, 4096]])
    assert data == pack_bytes([A, B], complete_vault=False)
    PackFile(workdir).open(data).close()


@pytest.mark.parametrize(
    "kw, error, message",
    [
        ({"count": 2**32 - 1}, DamagedFile, "claims 4294967295 entries"),
        ({"count": 3}, DamagedFile, "does not list 3 entries"),
        ({"count": 1}, DamagedFile, "does not list 1 entries"),
        ({"index_offset": 2**63}, DamagedFile, "points outside the file"),
        ({"index_offset": 2**64 - 1}, DamagedFile, "points outside the file"),
        ({"index_offset": 0}, DamagedFile, "points outside the file"),
        ({"index_offset": 11}, DamagedFile, "points outside the file"),
        ({"index_len": 2**32 - 1}, DamagedFile, "points outside the file"),
        ({"index_len": 0}, DamagedFile, "points outside the file"),
        ({"version": 2}, UnsupportedVersion, "version 2 pack; a newer Camillo"),
        ({"version": 0}, UnsupportedVersion, "version 0"),
        ({"flags": 2}, UnsupportedVersion, "flags"),
        ({"flags": 0x8000}, UnsupportedVersion, "flags"),
    ],
)
def test_hostile_trailer_or_header(workdir, kw, error, message):
    data = raw_pack([A_DATA, B_DATA], [[4, A_NAME, 12, 4096], [4, B_NAME, 12 + 4096, 4096]], **kw)
    start = time.perf_counter()
    exc = PackFile(workdir).check_rejected(data)
    assert time.perf_counter() - start < 1.0
    assert type(exc) is error and message in str(exc), exc


def test_huge_claimed_count_on_a_small_file_is_rejected_fast(workdir):
    data = raw_pack([], [], count=2**32 - 1)
    start = time.perf_counter()
    with pytest.raises(DamagedFile, match="more than the file can hold"):
        PackFile(workdir).open(data, verify_hash=False)
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize(
    "datas, index, message",
    [
        # B before A: offsets consistent with the file, order wrong
        ([B_DATA, A_DATA], [[4, B_NAME, 12, 4096], [4, A_NAME, 12 + 4096, 4096]], "not sorted"),
        # the same entry twice
        ([A_DATA, A_DATA], [[4, A_NAME, 12, 4096], [4, A_NAME, 12 + 4096, 4096]], "not sorted"),
        # overlapping: B starts inside A
        ([A_DATA, B_DATA], [[4, A_NAME, 12, 4096], [4, B_NAME, 12 + 100, 4096]], "out of place"),
        # gap between entries
        ([A_DATA, b"\x00" * 10, B_DATA], [[4, A_NAME, 12, 4096], [4, B_NAME, 12 + 4106, 4096]], "out of place"),
        # first entry not at the header end
        ([b"\x00", A_DATA], [[4, A_NAME, 13, 4096]], "out of place"),
        # entries do not reach the index
        ([A_DATA, b"\x00" * 5], [[4, A_NAME, 12, 4096]], "do not fill"),
        # lengths overrun the index
        ([A_DATA], [[4, A_NAME, 12, 5000]], "do not fill"),
        # below the minimum entry size
        ([b"x" * 100], [[4, "segments/aa/" + "a" * 64 + ".seg", 12, 100]], "out of place"),
        ([b"x" * 7], [[1, "VMEM", 12, 7]], "out of place"),
        # unknown entry type
        ([A_DATA], [[6, A_NAME, 12, 4096]], "out of place"),
        ([A_DATA], [[0, A_NAME, 12, 4096]], "out of place"),
        # type does not match the name
        ([A_DATA], [[2, A_NAME, 12, 4096]], "wrong type"),
        ([A_DATA], [[5, A_NAME, 12, 4096]], "wrong type"),  # an attachment chunk's type, a segment's name
        ([A_DATA], [[4, "packs/x.pack", 12, 4096]], "wrong type"),
        ([A_DATA], [[4, "README", 12, 4096]], "wrong type"),
        # malformed entries
        ([A_DATA], [[4, A_NAME, 12]], "malformed index entry"),
        ([A_DATA], [[4, A_NAME, 12, 4096, 0]], "malformed index entry"),
        ([A_DATA], [["4", A_NAME, 12, 4096]], "malformed index entry"),
        ([A_DATA], [[4, A_NAME.encode(), 12, 4096]], "malformed index entry"),
        ([A_DATA], [[4, A_NAME, True, 4096]], "malformed index entry"),
        ([A_DATA], [[4, A_NAME, 12, -1]], "malformed index entry|out of place"),
        ([A_DATA], [{4: A_NAME}], "malformed index entry"),
        ([A_DATA], [None], "malformed index entry"),
    ],
)
def test_hostile_index_with_a_correct_hash(workdir, datas, index, message):
    exc = PackFile(workdir).check_rejected(raw_pack(datas, index))
    assert isinstance(exc, DamagedFile)
    assert any(m in str(exc) for m in message.split("|")), exc


@pytest.mark.parametrize(
    "index_bytes, message",
    [
        (encoding.encode({0: []}), "does not list"),
        (b"\xff", "not valid CBOR"),
        (b"\x9f\xff", "not deterministic"),
        (b"\x82\x01", "not valid CBOR"),
        (b"\x81" * 100 + b"\x80", "nested"),
    ],
)
def test_index_that_is_not_a_canonical_list(workdir, index_bytes, message):
    data = raw_pack([A_DATA], [], index_bytes=index_bytes, count=0)
    with pytest.raises(DamagedFile, match=message):
        PackFile(workdir).open(data)


_profile = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**64), 2**64 - 1) | st.binary(max_size=8) | st.text(max_size=8),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.integers(0, 9), c, max_size=3),
    max_leaves=10,
)
_names = st.sampled_from(["VMEM", A_NAME, B_NAME, "slots/x", "env/y", "segments/", "", "packs/z"]) | st.text(max_size=12)
_entries = st.lists(
    st.tuples(st.integers(-1, 6), _names, st.integers(-5, 9000), st.integers(-5, 9000)).map(list) | _profile,
    max_size=4,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index=_entries)
def test_arbitrary_index_with_a_correct_hash(workdir, index):
    """Any index a hostile writer can produce (the hash is recomputed) is refused or self-consistent."""
    probe = PackFile(workdir)
    try:
        reader = probe.open(raw_pack([A_DATA, B_DATA], index))
    except PACK_ERRORS:
        return
    try:
        end = packs.HEADER_LEN
        for e in reader.entries:
            assert e.offset == end and e.length >= packs.MIN_ENTRY[e.type]
            assert len(reader.read(e.name)) == e.length
            end += e.length
        assert end == packs.HEADER_LEN + 2 * 4096
    finally:
        reader.close()


PACK_NAME_BUG = pytest.mark.regression  # was a bug found by fuzzing; fixed


@PACK_NAME_BUG
@pytest.mark.parametrize("name", ["segments/zz", "slots/../../../tmp/x", "env/UPPER.env", "segments/ab/cd.seg"])
def test_index_names_must_be_canonical_vault_names(workdir, name):
    claimed_type = {"segments": packs.TYPE_SEGMENT, "slots": packs.TYPE_SLOT, "env": packs.TYPE_ENVELOPE}[name.split("/")[0]]
    data = raw_pack([A_DATA], [[claimed_type, name, 12, 4096]])
    with pytest.raises(DamagedFile):
        PackFile(workdir).open(data)


# ---------------------------------------------------------------------------------------------
# FolderShelf


@pytest.fixture
def shelf(tmp_path) -> storage.FolderShelf:
    s = storage.FolderShelf(str(tmp_path / "vault"), create=True)
    yield s
    s.close()


def test_create_makes_the_directories(shelf):
    for d in storage.DIRECTORIES:
        assert os.path.isdir(os.path.join(shelf.location, d))
    assert shelf.list() == []
    assert shelf.writable


def test_create_refuses_a_folder_holding_a_vault(shelf):
    shelf.write("VMEM", DESC[1])
    with pytest.raises(StorageError, match="already holds a vault"):
        storage.FolderShelf(shelf.location, create=True)


def test_open_missing_folder(tmp_path):
    with pytest.raises(NotAVault):
        storage.FolderShelf(str(tmp_path / "nope"))
    with pytest.raises(NotAVault):
        packshelf.open_shelf(str(tmp_path / "nope"))


def test_write_read_exists_delete(shelf):
    name, data = seg_entry(20)
    assert not shelf.exists(name)
    assert shelf.write(name, data) is True
    assert shelf.exists(name)
    assert shelf.read(name) == data
    assert shelf.list() == [name]
    shelf.delete(name)
    assert not shelf.exists(name)
    shelf.delete(name)  # deleting a missing file is fine
    with pytest.raises(FileNotFoundError):
        shelf.read(name)


def test_write_is_create_only(shelf):
    name, data = seg_entry(21)
    assert shelf.write(name, data) is True
    assert shelf.write(name, data) is False  # identical bytes already there
    with pytest.raises(StorageError, match="refusing to overwrite"):
        shelf.write(name, data[:-1] + bytes([data[-1] ^ 1]))
    assert shelf.read(name) == data
    slot = slot_name(5)
    shelf.write(slot, b"a" * 4096)
    with pytest.raises(StorageError, match="already exists with different content"):
        shelf.write(slot, b"b" * 4096)


def _all_files(root: str) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs)


def test_write_leaves_no_temp_files(shelf):
    for seed in range(5):
        shelf.write(*seg_entry(30 + seed))
    assert not [f for f in _all_files(shelf.location) if ".tmp-" in f]
    assert len(shelf.list()) == 5


class _OsProxy:
    """``os`` for camillo.storage only, with some calls replaced (patching ``os`` itself would
    disturb pytest)."""

    def __init__(self, **overrides) -> None:
        self.__dict__.update(overrides)

    def __getattr__(self, name):
        return getattr(os, name)


def test_write_is_atomic_when_the_link_fails(shelf, monkeypatch):
    """A failure while the staged file takes its name (here: a failing link) leaves nothing behind:
    neither the file nor a temp file."""
    name, data = seg_entry(40)

    def failing_link(src, dst):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(storage, "os", _OsProxy(link=failing_link))
    with pytest.raises(StorageError, match="cannot write"):
        shelf.write(name, data)
    monkeypatch.undo()
    assert _all_files(shelf.location) == []
    assert shelf.write(name, data) is True


@pytest.mark.parametrize("hard_links", [True, False], ids=["link", "no-hard-links"])
def test_commit_never_replaces_a_file_that_appeared_meanwhile(shelf, monkeypatch, hard_links):
    """Spec §4.4 rules 2 and 3: between staging and commit another writer (or the sync service) may
    create the name; the commit then refuses different bytes and leaves them as they are, and
    accepts identical bytes, with link(2) and, where the file system has no hard links, with the
    non-replacing rename (which rename(2) alone is not)."""
    if not hard_links:
        def no_links(src, dst):
            raise OSError(errno.EPERM, "Operation not permitted")

        monkeypatch.setattr(storage, "os", _OsProxy(link=no_links))
    name, data = seg_entry(42)
    other = data[:-1] + bytes([data[-1] ^ 1])
    path = os.path.join(shelf.location, *name.split("/"))
    tmp = shelf.stage(name, data)
    assert tmp is not None
    with open(path, "wb") as fh:  # appeared after the stage, before the commit
        fh.write(other)
    with pytest.raises(StorageError, match="refusing to overwrite"):
        shelf.commit(name, tmp)
    with open(path, "rb") as fh:
        assert fh.read() == other
    assert not [f for f in _all_files(shelf.location) if ".tmp-" in f]
    os.unlink(path)
    tmp = shelf.stage(name, data)
    assert tmp is not None
    with open(path, "wb") as fh:  # the same bytes, written by another process meanwhile
        fh.write(data)
    assert shelf.commit(name, tmp) is False
    assert not [f for f in _all_files(shelf.location) if ".tmp-" in f]
    os.unlink(path)
    assert shelf.write(name, data) is True  # a free name is taken as usual
    assert shelf.read(name) == data


def test_write_all_syncs_each_directory_once_and_leaves_nothing_on_failure(shelf, monkeypatch):
    """An operation's many files (a key change's envelopes): each file fsynced, each directory once at
    the end (three fsyncs per file before); if one cannot be written, none of them stays."""
    entries = [seg_entry(100 + i, 512) for i in range(24)]
    dirs = {os.path.dirname(n) for n, _ in entries}
    for d in dirs:
        os.makedirs(os.path.join(shelf.location, d), exist_ok=True)
    synced: list[str] = []
    real = storage.fsync_dir
    monkeypatch.setattr(storage, "fsync_dir", lambda d: (synced.append(d), real(d)))
    assert sorted(shelf.write_all(entries)) == sorted(n for n, _ in entries)
    assert sorted(synced) == sorted(os.path.join(shelf.location, d) for d in dirs)
    assert all(shelf.read(n) == d for n, d in entries)
    assert shelf.write_all(entries) == []  # already there with these bytes: nothing written
    synced.clear()
    shelf.delete_all([n for n, _ in entries])
    assert sorted(synced) == sorted(os.path.join(shelf.location, d) for d in dirs)
    assert _all_files(shelf.location) == []

    clash_name, clash = entries[7]
    os.makedirs(os.path.dirname(os.path.join(shelf.location, clash_name)), exist_ok=True)
    with open(os.path.join(shelf.location, clash_name), "wb") as fh:
        fh.write(clash[:-1] + bytes([clash[-1] ^ 1]))  # another writer's bytes under one of the names
    with pytest.raises(StorageError, match="refusing to overwrite"):
        shelf.write_all(entries)
    assert _all_files(shelf.location) == [clash_name], "a failed write_all left files behind"


def test_stage_all_stages_files_together_with_each_directory_synced_once_and_leaves_nothing_on_failure(
        shelf, monkeypatch):
    """stage_all (a key change's segment per compartment, before the counter is saved): each file
    staged under a dot name (none given its name yet), durable, each directory fsynced once, not
    once per file; if one cannot be staged, none stays."""
    entries = [seg_entry(900 + i, 300) for i in range(6)]
    dirs = {os.path.join(shelf.location, os.path.dirname(n)) for n, _ in entries}
    for d in dirs:
        os.makedirs(d, exist_ok=True)
    synced: list[str] = []
    real = storage.fsync_dir
    monkeypatch.setattr(storage, "fsync_dir", lambda d: (synced.append(d), real(d)))
    staged = shelf.stage_all(entries)
    assert sorted(n for n, _ in staged) == sorted(n for n, _ in entries)
    assert sorted(synced) == sorted(dirs)
    assert all("/.tmp-" in f for f in _all_files(shelf.location)) and len(_all_files(shelf.location)) == 6
    for name, tmp in staged:
        assert shelf.commit(name, tmp)
    assert all(shelf.read(n) == d for n, d in entries)

    clash_name, clash = entries[2]
    more = [seg_entry(950 + i, 300) for i in range(4)] + [(clash_name, clash[:-1] + bytes([clash[-1] ^ 1]))]
    with pytest.raises(StorageError, match="refusing to overwrite"):
        shelf.stage_all(more)
    assert not [f for f in _all_files(shelf.location) if "/.tmp-" in f], "a failed stage_all left temp files"



def test_stage_all_into_new_directories_syncs_their_parent_once(shelf, monkeypatch):
    """A key change's segments go to new directories of one parent: each new directory's entry is
    made durable by one fsync of that parent, not one per directory, before anything is staged in
    it; each new directory is then synced once for the files staged in it."""
    entries = [seg_entry(700 + i, 300) for i in range(6)]
    dirs = {os.path.join(shelf.location, os.path.dirname(n)) for n, _ in entries}
    parents = {os.path.dirname(d) for d in dirs}
    assert len(dirs) > 1 and len(parents) == 1 and not any(os.path.isdir(d) for d in dirs)
    synced: list[str] = []
    real = storage.fsync_dir
    monkeypatch.setattr(storage, "fsync_dir", lambda d: (synced.append(d), real(d)))
    staged = shelf.stage_all(entries)
    assert sorted(synced) == sorted(parents | dirs)  # (each once: the parent for all of its new directories)
    assert synced.index(next(iter(parents))) < min(synced.index(d) for d in dirs)
    for name, tmp in staged:
        assert shelf.commit(name, tmp)
    assert all(shelf.read(n) == d for n, d in entries)


def test_write_all_reuses_the_process_writing_threads_and_a_nested_write_runs_inline(shelf):
    """An operation's files are written on the process's pool of writing threads (camillo.iopool),
    started once and kept, not a pool started and joined for each operation (a passphrase change
    started a dozen threads); a job that itself writes files runs them inline, so the pool's threads
    never all wait on one another."""
    import threading

    from camillo import iopool

    def io_threads() -> set[int]:
        return {t.ident or 0 for t in threading.enumerate() if t.name.startswith("camillo-io")}

    shelf.write_all([seg_entry(400 + i, 256) for i in range(iopool.WORKERS)])
    first = io_threads()
    assert first
    shelf.write_all([seg_entry(500 + i, 256) for i in range(iopool.WORKERS)])
    assert io_threads() == first, "a write started threads of its own"

    done: list[int] = []

    def nested(k: int) -> int:
        return sum(iopool.run_all([lambda j=j: (done.append(j), j)[1] for j in range(3)])) + k  # type: ignore[misc]

    outer = threading.Thread(target=lambda: done.append(sum(iopool.run_all(
        [lambda k=k: nested(k) for k in range(iopool.WORKERS * 2)]))))
    outer.start()
    outer.join(30)
    assert not outer.is_alive(), "nested writes deadlocked the pool"
    assert done[-1] == iopool.WORKERS * 2 * 3 + sum(range(iopool.WORKERS * 2))
    failed = iopool.run_all([lambda: 1, lambda: 1 // 0, lambda: 3])
    assert failed[0] == 1 and isinstance(failed[1], ZeroDivisionError) and failed[2] == 3


def test_write_all_of_many_files_syncs_their_file_system_once_before_any_name_appears(shelf, monkeypatch):
    """From SYNC_WHOLE_FILES files on (a merge's copies), where the system has syncfs(2) (Linux 5.8 and
    later): no fsync of each file, but one sync of the file system once every temp file is written and
    before any is given its name, and one after (the directories' entries: not an fsync of each
    directory); without syncfs, an fsync of each; a failure of the sync leaves nothing and is said."""
    real = bulksync.file_system_sync()
    if real is None:
        pytest.skip("this system has no syncfs(2) that reports write-back errors")
    real_fsync, events = os.fsync, []

    def fsync(fd: int) -> None:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            events.append("file")
        real_fsync(fd)

    def whole(directories):
        files = _all_files(shelf.location)
        events.append(("sync", sum("/.tmp-" in f for f in files), sum("/.tmp-" not in f for f in files)))
        real(directories)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(storage, "file_system_sync", lambda: whole)
    n = storage.SYNC_WHOLE_FILES
    entries = [seg_entry(300 + i, 256) for i in range(n)]
    assert sorted(shelf.write_all(entries)) == sorted(name for name, _ in entries)
    # the bytes synced before any name is given, the names' directory entries after every one is
    assert events == [("sync", n, 0), ("sync", 0, n)], "each file fsynced, or a name given before the sync"
    assert all(shelf.read(name) == data for name, data in entries)
    assert _all_files(shelf.location) == sorted(name for name, _ in entries)

    events.clear()
    monkeypatch.setattr(storage, "file_system_sync", lambda: None)
    more = [seg_entry(500 + i, 256) for i in range(n)]
    shelf.write_all(more)
    assert events == ["file"] * n

    def failing(directories):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(storage, "file_system_sync", lambda: failing)
    third = [seg_entry(700 + i, 256) for i in range(n)]
    with pytest.raises(StorageError, match="cannot write to .*Input/output error"):
        shelf.write_all(third)
    assert _all_files(shelf.location) == sorted(name for name, _ in entries + more), "a failed sync left files"


def test_vault_files_and_directories_are_private(tmp_path, monkeypatch):
    """Spec §4.4: vault files are created with mode 0600 and the directories a writer creates with
    0700 (before the umask)."""
    old = os.umask(0o022)
    try:
        shelf = storage.FolderShelf(str(tmp_path / "vault"), create=True)
        name, data = seg_entry(43)
        shelf.write(name, data)
    finally:
        os.umask(old)
    path = os.path.join(shelf.location, *name.split("/"))
    assert os.stat(path).st_mode & 0o777 == 0o600
    for d in (shelf.location, os.path.join(shelf.location, "segments"), os.path.dirname(path)):
        assert os.stat(d).st_mode & 0o777 == 0o700, d


def test_write_disk_full_is_storage_error(shelf, monkeypatch):
    def full(fd, view):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(storage, "os", _OsProxy(write=full))
    with pytest.raises(StorageError, match="disk is full"):
        shelf.write(*seg_entry(41))
    monkeypatch.undo()
    assert _all_files(shelf.location) == []


def test_write_refuses_non_vault_names(shelf):
    for name in ("../escape", "segments/zz", "notes.txt", "slots/../VMEM", ".hidden"):
        with pytest.raises(ValueError, match="not a vault file name"):
            shelf.write(name, b"x")


def test_list_ignores_foreign_names(shelf):
    root = shelf.location
    good_seg, good_data = seg_entry(50)
    shelf.write(good_seg, good_data)
    good_env, env_data = env_entry(51)
    shelf.write(good_env, env_data)
    good_slot = slot_name(52)
    shelf.write(good_slot, blob(52, 4096))
    shelf.write("VMEM", DESC[1])
    h = sha256(good_data).hex()
    wrong_prefix = "cd" if h[:2] != "cd" else "ef"
    foreign = [
        f"segments/{h[:2]}/{h}.sync-conflict-20240101-120000-ABCDEFG.seg",
        f"segments/{h[:2]}/{h}.seg.sync-conflict-20240101-120000-ABCDEFG",
        "VMEM.sync-conflict-20240101-120000-ABCDEFG",
        f"{good_slot[:-5]}.sync-conflict-20240101-120000-ABCDEFG.slot",
        "slots/x.icloud",
        f"slots/.{good_slot[6:]}.icloud",
        f"env/.{good_env[4:]}.icloud",
        ".DS_Store",
        "slots/.DS_Store",
        f"env/.tmp-{'0' * 16}",
        f"segments/{h[:2]}/.tmp-abcdef",
        f"segments/{wrong_prefix}/{h}.seg",
        f"segments/{h[:2]}/{h.upper()}.seg",
        f"segments/{h}.seg",
        f"segments/{h[:2]}/{h}.seg.bak",
        f"segments/{h[:2]}/{h}.seg~",
        "slots/readme.txt",
        f"slots/{'a' * 31}.slot",
        f"slots/{'a' * 33}.slot",
        "env/0123.env",
        "junk.txt",
        "Thumbs.db",
        "desktop.ini",
        "notes/VMEM",
        "vmem",
        "VMEM~",
        f".hidden/{good_slot}",
        f"slots/.trash/{good_slot[6:]}",
        f"segments/.cache/{h[:2]}/{h}.seg",
        "packs/notahash.pack",
        f"enroll/{'a' * 32}.txt",
    ]
    for rel in foreign:
        path = os.path.join(root, *rel.split("/"))
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            fh.write(b"junk")
    assert shelf.list() == sorted([good_seg, good_env, good_slot, "VMEM"])


def test_directories_named_like_files_are_ignored(shelf):
    h = sha256(b"d").hex()
    for rel in (slot_name(1), f"env/{h}.env", f"segments/{h[:2]}/{h}.seg", f"packs/{h}.pack"):
        os.makedirs(os.path.join(shelf.location, *rel.split("/")))
    assert shelf.list() == []


def _store_pack(shelf: storage.FolderShelf, entries) -> str:
    data = pack_bytes(entries, complete_vault=False)
    name = f"packs/{sha256(data).hex()}.pack"
    assert shelf.write(name, data)
    return name


def test_segments_inside_a_pack_are_listed_and_read_as_if_loose(shelf):
    seg1, seg2, loose = seg_entry(60), seg_entry(61, 6000), seg_entry(62)
    pack = _store_pack(shelf, [seg1, seg2])
    shelf.write(*loose)
    # re-open: a fresh shelf finds the pack
    fresh = storage.FolderShelf(shelf.location)
    try:
        assert fresh.list() == sorted([seg1[0], seg2[0], loose[0]])
        assert pack not in fresh.list()
        for name, data in (seg1, seg2, loose):
            assert fresh.exists(name)
            assert fresh.read(name) == data
            assert storage.hash_matches(name, fresh.read(name))
    finally:
        fresh.close()


def test_a_segment_both_loose_and_packed_is_listed_once(shelf):
    seg = seg_entry(63)
    shelf.write(*seg)
    _store_pack(shelf, [seg])
    assert shelf.list() == [seg[0]]


def test_only_segments_are_taken_from_folder_packs(shelf):
    _store_pack(shelf, [seg_entry(64), env_entry(65), (slot_name(66), blob(66, 4096))])
    assert shelf.list() == [seg_entry(64)[0]]


def test_a_damaged_or_partial_pack_is_ignored(shelf):
    data = bytearray(pack_bytes([seg_entry(67)], complete_vault=False))
    data[50] ^= 1
    name = f"packs/{sha256(bytes(data)).hex()}.pack"
    shelf.write(name, bytes(data))
    partial = pack_bytes([seg_entry(68)], complete_vault=False)
    shelf.write(f"packs/{sha256(partial).hex()}.pack", partial[:3000])
    assert shelf.list() == []


@PACK_NAME_BUG
def test_pack_entries_with_foreign_names_are_not_listed(shelf):
    seg = seg_entry(69)
    bad = raw_pack([seg[1]], [[4, "segments/zz", 12, 4096]])
    shelf.write(f"packs/{sha256(bad).hex()}.pack", bad)
    names = shelf.list()
    assert names == []
    for name in names:
        shelf.read(name)  # every listed name must be readable


def test_read_only_folder(tmp_path):
    path = tmp_path / "ro"
    storage.FolderShelf(str(path), create=True).close()
    os.chmod(path, 0o500)
    try:
        shelf = storage.FolderShelf(str(path))
        if os.geteuid() == 0:
            # root ignores directory permissions; force what os.access reports for anyone else
            assert shelf.writable
            shelf.writable = False
        assert shelf.writable is False
        with pytest.raises(ReadOnlyVault, match="read-only; nothing was written"):
            shelf.write(*seg_entry(70))
        with pytest.raises(ReadOnlyVault):
            shelf.delete(seg_entry(70)[0])
        assert _all_files(str(path)) == []
        assert shelf.list() == []
        shelf.close()
    finally:
        os.chmod(path, 0o700)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes through directory permissions")
def test_read_only_subdirectory_is_read_only_vault(tmp_path):
    shelf = storage.FolderShelf(str(tmp_path / "v"), create=True)
    seg_dir = os.path.join(shelf.location, "segments")
    os.chmod(seg_dir, 0o500)
    try:
        name, data = seg_entry(71)
        with pytest.raises(ReadOnlyVault):
            shelf.write(name, data)
    finally:
        os.chmod(seg_dir, 0o700)
        shelf.close()


def test_write_permission_error_is_read_only_vault(shelf, monkeypatch):
    def denied(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(storage, "os", _OsProxy(open=denied))
    with pytest.raises(ReadOnlyVault, match="vault is unchanged"):
        shelf.write(*seg_entry(72))


# ---------------------------------------------------------------------------------------------
# Names


def test_kind_of():
    h = sha256(b"x").hex()
    assert storage.kind_of("VMEM") == "descriptor"
    assert storage.kind_of(f"slots/{'0' * 32}.slot") == "slot"
    assert storage.kind_of(f"env/{h}.env") == "envelope"
    assert storage.kind_of(f"segments/{h[:2]}/{h}.seg") == "segment"
    assert storage.kind_of(f"packs/{h}.pack") == "pack"
    for suffix in ("req", "resp", "ack"):
        assert storage.kind_of(f"enroll/{'f' * 32}.{suffix}") == "enroll"
    other = "00" if h[:2] != "00" else "11"
    for bad in (f"segments/{other}/{h}.seg", "VMEM ", "vmem", f"env/{h}.env.tmp", f"slots/{'0' * 32}.slot/",
                f"enroll/{'f' * 32}.txt", "", "/VMEM", f"./env/{h}.env"):
        assert storage.kind_of(bad) is None, bad


@settings(max_examples=100)
@given(st.binary(max_size=200))
def test_segment_name_and_hash_matches(data):
    name = storage.segment_name(data)
    assert storage.kind_of(name) == "segment"
    assert storage.content_hash_of(name) == sha256(data)
    assert storage.hash_matches(name, data) is True
    assert storage.hash_matches(name, data + b"\x00") is False
    assert storage.hash_matches("VMEM", data) is None
    assert storage.hash_matches(slot_name(1), data) is None


# ---------------------------------------------------------------------------------------------
# PackShelf and open_shelf


def test_pack_shelf_is_read_only(tmp_path):
    entries = [DESC, seg_entry(80), env_entry(81)]
    path = tmp_path / "v.vmem"
    path.write_bytes(pack_bytes(entries))
    shelf = packshelf.open_shelf(str(path))
    try:
        assert isinstance(shelf, packshelf.PackShelf)
        assert shelf.list() == sorted(n for n, _ in entries)
        for name, data in entries:
            assert shelf.exists(name) and shelf.read(name) == data
        assert not shelf.exists("env/x.env")
        with pytest.raises(FileNotFoundError):
            shelf.read(seg_entry(82)[0])
        with pytest.raises(ReadOnlyVault, match="opens read-only"):
            shelf.write(*seg_entry(83))
        with pytest.raises(ReadOnlyVault):
            shelf.delete(entries[1][0])
    finally:
        shelf.close()
    folder = packshelf.open_shelf(str(tmp_path))
    assert isinstance(folder, storage.FolderShelf)
    folder.close()


def test_pack_shelf_on_garbage(tmp_path):
    path = tmp_path / "junk.vmem"
    path.write_bytes(b"not a pack at all, just some text" * 10)
    with pytest.raises(NotAVault, match="does not start with VMEMPACK"):
        packshelf.open_shelf(str(path))
