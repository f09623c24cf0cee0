"""A large read without local state goes to a scratch database on disk (camillo.cache.scratch_database,
camillo.session.segread.state_for), not memory: ``cache=False``, read-only, a device not yet
registered.  It holds what memory would (the same timeline, facts, search and problems), is encrypted
page by page under a key only its process holds, and is deleted when the session closes; one a killed
process left behind is deleted by the next; a first registration moves it into the device's local state.
"""

from __future__ import annotations

import glob
import os

import pytest
from camillo import NewRecord, Unlock, Vault, cache

from .helpers import switch_home
from .test_incremental import fingerprint

PASSPHRASE = "correct horse battery staple"
MARKER = "MARKER-9e1f-scratch"


def _open(path, **kw):
    return Vault.open(path, Unlock.passphrase(PASSPHRASE), **kw)


def _fill(vault):
    for i in range(12):
        vault.append([NewRecord(type="message", conversation="c", role="user", text=f"garden {i} {MARKER}")])
    vault.append([NewRecord(type="fact", key="user/city", value=f"Lisbon {MARKER}")])


def _in_memory(path) -> dict:
    with _open(path, cache=False, register=False) as v:
        assert not cache.is_scratch(v.session.materialized.cache_db)
        return fingerprint(v)


@pytest.fixture
def small_limit(monkeypatch):
    monkeypatch.setattr(cache, "SCRATCH_SEGMENT_BYTES", 1)


def test_a_large_read_without_local_state_goes_to_an_encrypted_scratch_database_deleted_on_close(
        new_vault, monkeypatch):
    path, vault, _ = new_vault
    _fill(vault)
    vault.lock()
    expected = _in_memory(path)  # (under the limit: memory, as before)
    monkeypatch.setattr(cache, "SCRATCH_SEGMENT_BYTES", 1)
    with _open(path, cache=False, register=False) as v:
        db = v.session.materialized.cache_db
        assert cache.is_scratch(db)
        root = v.session.reader.scratch_root
        (file,) = glob.glob(os.path.join(root, f"{os.getpid()}-*", "state.db"))
        assert fingerprint(v) == expected
        assert [r.text for r in v.search("garden 7")] == [f"garden 7 {MARKER}"]
        v.session.materialized.commit()
        data = open(file, "rb").read()
        assert len(data) > 4096 and MARKER.encode() not in data and not data.startswith(b"SQLite format 3")
        assert not glob.glob(os.path.join(os.path.dirname(file), "state.db-*"))  # no journal or log on disk
    assert not os.path.exists(os.path.dirname(file)), "the scratch database outlived its session"



def test_a_large_read_of_a_vmem_file_goes_to_a_scratch_database_too(new_vault, tmp_path, small_limit):
    """A ``.vmem`` file's shelf knows its entries' sizes (PackShelf.size): a large read of one goes to
    a scratch database as a folder's does, not to memory (it said None, so a packed vault of a
    million records was read into memory)."""
    from camillo.transport import pack_vault

    path, vault, _ = new_vault
    _fill(vault)
    vault.lock()
    with _open(path, cache=False, register=False) as v:
        expected = fingerprint(v)
    packed = str(tmp_path / "v.vmem")
    pack_vault(path, packed)
    with _open(packed, cache=False, register=False) as v:
        assert cache.is_scratch(v.session.materialized.cache_db)
        assert fingerprint(v) == expected

def test_a_scratch_database_a_killed_process_left_is_deleted_by_the_next(new_vault, small_limit):
    path, vault, _ = new_vault
    _fill(vault)
    root = vault.session.reader.scratch_root
    vault.lock()
    dead = os.path.join(root, "999999999-left")  # (no such process)
    alive = os.path.join(root, "1-kept")  # (a process that runs: not touched)
    for d in (dead, alive):
        os.makedirs(d)
        open(os.path.join(d, "state.db"), "wb").write(os.urandom(8192))
    with _open(path, cache=False, register=False) as v:
        assert cache.is_scratch(v.session.materialized.cache_db)
        assert not os.path.exists(dead) and os.path.exists(alive)


def test_a_device_not_yet_registered_reads_into_scratch_and_keeps_it_as_its_local_state(
        new_vault, monkeypatch, tmp_path):
    path, vault, _ = new_vault
    _fill(vault)
    vault.lock()
    expected = _in_memory(path)
    monkeypatch.setattr(cache, "SCRATCH_SEGMENT_BYTES", 1)
    made = []
    real = cache.scratch_database
    monkeypatch.setattr(cache, "scratch_database", lambda root: made.append(root) or real(root))
    switch_home(monkeypatch, tmp_path / "laptop")
    with _open(path) as lap:  # registers: its first read is moved into its new local state
        assert made, "the first read did not go to a scratch database"
        assert not cache.is_scratch(lap.session.materialized.cache_db)
        assert lap.session.reader.store is not None
        assert not glob.glob(os.path.join(lap.session.reader.scratch_root, "*", "state.db"))
        seen = fingerprint(lap)
    assert seen["timeline"] == expected["timeline"] and seen["facts"] == expected["facts"]
    monkeypatch.setattr(cache, "SCRATCH_SEGMENT_BYTES", 1 << 40)
    assert seen == _in_memory(path)  # (the folder with the laptop's own certificate, read in memory)
    with _open(path) as lap:  # a warm open of it
        assert lap.session.reader.decryptions == 0
        assert [r.text for r in lap.search("garden 3")] == [f"garden 3 {MARKER}"]


def test_an_installation_whose_cache_cannot_be_written_reads_in_memory(new_vault, monkeypatch, small_limit):
    path, vault, _ = new_vault
    _fill(vault)
    vault.lock()

    def unwritable(root):
        raise PermissionError(13, "read-only file system", root)

    monkeypatch.setattr(cache, "scratch_database", unwritable)
    with _open(path, cache=False, register=False) as v:
        assert not cache.is_scratch(v.session.materialized.cache_db)
        assert [r.text for r in v.search("garden 7")] == [f"garden 7 {MARKER}"]


def test_a_large_cold_load_into_the_local_state_makes_a_wide_commit_with_a_narrow_page_cache(new_vault, monkeypatch):
    """A registered device without its local state (deleted, damaged) loads every segment into a new
    one: from SCRATCH_SEGMENT_BYTES of segments its commit is a wide one (the checkpoint left to a thread
    of its own); a small load's is not.  Either way the page cache stays narrow while the rows are
    written (they go to the tables' ends, the index of ids built after them: camillo.cache.indexes_deferred;
    an earlier revision's state, whose rows go to random pages of that index, has a test in
    test_state_store.py) and after."""
    from camillo import state as state_mod

    path, vault, _ = new_vault
    _fill(vault)
    store = vault.session.local.cache_path(vault.writer_id)
    vault.lock()
    sizes: list[int] = []  # the page cache while the load's last rows are written
    wide: list[bool] = []  # the commits of the local state: wide ones?
    real, loaded = state_mod.State.commit, state_mod.State._loaded

    def commit(self):
        if self._checkpoint is not None:  # (the local state's, not a state in memory the open replaces)
            wide.append(self._wide)
        real(self)

    def last_rows(self):
        sizes.append(self._db.execute("PRAGMA cache_size").fetchone()[0])
        loaded(self)

    monkeypatch.setattr(state_mod.State, "commit", commit)
    monkeypatch.setattr(state_mod.State, "_loaded", last_rows)
    for limit, expected in ((1 << 40, -cache.PAGE_CACHE_KIB), (1, -cache.PAGE_CACHE_KIB)):
        monkeypatch.setattr(cache, "SCRATCH_SEGMENT_BYTES", limit)
        for f in glob.glob(store + "*"):
            os.remove(f)
        sizes.clear()
        wide.clear()
        with _open(path) as v:
            assert v.session.reader.store is not None and v.session.reader.decryptions > 0
            db = v.session.materialized.db
            assert sizes == [expected]
            assert db.execute("PRAGMA cache_size").fetchone()[0] == -cache.PAGE_CACHE_KIB  # (narrowed after the rows)
            v.session.materialized.commit()
            assert wide[0] == (limit == 1)
            assert db.execute("PRAGMA cache_size").fetchone()[0] == -cache.PAGE_CACHE_KIB  # (narrow again)


def test_a_scratch_database_authenticates_each_page_with_hmac_sha256(tmp_path, monkeypatch):
    """The scratch database's pages are authenticated by HMAC-SHA256 (as strong a tag as SQLCipher's
    default HMAC-SHA512, twice as fast with the processor's SHA-256 instructions: a cold load writes
    and reads each page several times) and are 16 KiB (a page's cipher and tag have a fixed cost): a
    byte changed in a page of its file is refused, not read."""
    key = bytes(range(32))
    monkeypatch.setattr(cache, "random_bytes", lambda n: key[:n])
    db = cache.scratch_database(str(tmp_path / "scratch"))
    (file,) = glob.glob(str(tmp_path / "scratch" / "*" / "state.db"))
    db.execute("CREATE TABLE t(a)")
    db.executemany("INSERT INTO t VALUES(?)", [(f"{MARKER} {i}" * 20,) for i in range(200)])
    db.commit()

    def reader(hmac: str, page: int = cache.SCRATCH_PAGE_BYTES):
        other = cache.sqlite.connect(file)
        other.execute(f"PRAGMA key = \"x'{key.hex()}'\"")
        other.execute(f"PRAGMA cipher_hmac_algorithm = {hmac}")
        other.execute(f"PRAGMA cipher_page_size = {page}")
        return other

    assert cache.SCRATCH_PAGE_BYTES == 16384 and os.path.getsize(file) % 16384 == 0
    assert reader("HMAC_SHA256").execute("SELECT count(*) FROM t").fetchone() == (200,)
    with pytest.raises(cache.DatabaseError):
        reader("HMAC_SHA512").execute("SELECT count(*) FROM t").fetchone()
    with pytest.raises(cache.DatabaseError):
        reader("HMAC_SHA256", 4096).execute("SELECT count(*) FROM t").fetchone()
    data = bytearray(open(file, "rb").read())
    data[2 * 16384 + 100] ^= 1  # (a byte of a page of the table)
    open(file, "wb").write(bytes(data))
    with pytest.raises(cache.DatabaseError):
        reader("HMAC_SHA256").execute("SELECT a FROM t").fetchall()
    db.close()
