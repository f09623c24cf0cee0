"""The local state database (camillo.cache): opened in place, updated incrementally, disposable.

It is never trusted over the vault: a database of another vault or another actor, one that was
tampered with, or a page that does not authenticate met later is deleted and the state is read
again from the vault's files; a process killed at any point of an append or a refresh leaves a
database that is either rebuilt or consistent, never wrong (compared with a full recomputation).
"""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest
from camillo import NewRecord, Unlock, Vault
from camillo.errors import DamagedFile, UsageError
from camillo.records import CONTROL_KINDS, Kind
from camillo.session.reader import Reader
from camillo.session.views import SPECIAL_FLAGS
from hypothesis import given, settings
from hypothesis import strategies as st

from .helpers import switch_home
from .test_incremental import fingerprint, from_scratch

PASSPHRASE = "correct horse battery staple"
PAGE = 4096


def open_vault(path, **kw):
    return Vault.open(path, Unlock.passphrase(PASSPHRASE), **kw)


def _fill(vault, n=30):
    for i in range(n):
        vault.append([NewRecord(type="message", conversation="c", role="user", text=f"garden note {i}")])
    vault.append([NewRecord(type="fact", key="user/city", value="Lisbon")])


def test_the_state_is_opened_in_place_and_only_new_segments_are_read(new_vault, monkeypatch, tmp_path):
    path, vault, _ = new_vault
    _fill(vault)
    store = vault.session.local.cache_path(vault.writer_id)
    legacy = os.path.join(os.path.dirname(store), "cache.bin")
    vault.lock()
    open(legacy, "wb").write(b"an old sealed image")
    expected = from_scratch(path)
    with open_vault(path) as v:
        assert v.session.reader.decryptions == 0, "the state did not come from the local state database"
        assert fingerprint(v) == expected
        assert not os.path.exists(legacy), "the sealed image of earlier versions is deleted"
        v.append([NewRecord(type="message", text="one more garden note")])
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as other:
        other.append([NewRecord(type="message", text="from the laptop")])
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path) as v:
        # the laptop's batch and its certificate mirrored into every compartment: nothing else is read
        assert 0 < v.session.reader.decryptions <= 5
        assert fingerprint(v) == from_scratch(path)


def _six_batches_from_another_device(new_vault, monkeypatch, tmp_path) -> str:
    """A vault this home opened, to which another device then wrote six batches; its path."""
    path, vault, _ = new_vault
    _fill(vault, 4)
    vault.lock()
    with open_vault(path):
        pass
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as other:
        _fill(other, 6)
    switch_home(monkeypatch, tmp_path / "home")
    return path


def test_a_refresh_that_reads_many_segments_widens_the_page_cache_until_its_commit(new_vault, monkeypatch, tmp_path):
    """Another device's many batches (a merge) go to random pages of the indexes of ids: a refresh that
    reads WIDE_SEGMENTS segments or more holds every page it touches in a page cache of
    WIDE_PAGE_CACHE_KIB until its commit, then goes back to PAGE_CACHE_KIB; a refresh of a few keeps
    the narrow one, and the state is the one a cold open computes."""
    from camillo import cache, state

    path = _six_batches_from_another_device(new_vault, monkeypatch, tmp_path)
    sizes: list[int] = []
    real = state.State.commit

    def commit(self):
        sizes.append(self._db.execute("PRAGMA cache_size").fetchone()[0])
        real(self)

    monkeypatch.setattr(state.State, "commit", commit)
    monkeypatch.setattr(cache, "WIDE_SEGMENTS", 5)
    with open_vault(path) as v:
        state_db = v.session.reader.materialized.db
        assert v.session.reader.decryptions >= 5
        widened = sizes[0] if sizes else state_db.execute("PRAGMA cache_size").fetchone()[0]  # (committed yet or not)
        assert widened == -cache.WIDE_PAGE_CACHE_KIB, "the refresh of many segments kept the narrow cache"
        v.session.reader.materialized.commit()
        assert state_db.execute("PRAGMA cache_size").fetchone()[0] == -cache.PAGE_CACHE_KIB
        assert fingerprint(v) == from_scratch(path)
        committed = len(sizes)
        v.append([NewRecord(type="message", text="one more")])
        v.refresh()
    assert set(sizes[committed:]) == {-cache.PAGE_CACHE_KIB}


def test_a_cold_loads_flags_are_written_in_one_pass_before_the_indexes_over_them(new_vault, monkeypatch):
    """Issue 19 item 3: once a cold load's roster and log are computed, the flags of every batch
    (signature verified, vouched for, accepted) are written by one pass over the table in its order,
    joined to them in a temporary table (State.BULK_FLAG_ROWS; row by row, each at a random page of
    the table and of four indexes, it took 5.8 s of a 38 s open at a million records), and the indexes
    over them are built after: the flags stored are those written row by row."""
    from camillo import cache
    from camillo import state as state_mod

    path, vault, _ = new_vault
    _fill(vault)
    vault.lock()
    over_flags = {ddl.split()[5] for ddl in cache.FLAG_INDEX_DDL}
    assert over_flags == {"cache_batches_open", "cache_batches_special_flags", "cache_batches_vouched",
                          "cache_batches_accepted"}

    def indexes(db) -> set[str]:
        return {n for n, in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}

    def stored(v) -> list[tuple]:
        return sorted(v.session.materialized.cache_db.execute("SELECT id, sig_ok, vouched, accepted FROM cache_batches"))

    seen: list[tuple[int, set[str], set[str], bool]] = []  # (rows, indexes over flags before, after, in one pass)
    real = state_mod.State.write_flags

    def watched(self, rows):
        before, statements = over_flags & indexes(self.cache_db), []
        self.cache_db.set_trace_callback(statements.append)
        real(self, rows)
        self.cache_db.set_trace_callback(None)
        seen.append((len(rows), before, over_flags & indexes(self.cache_db),
                     any("NOT INDEXED" in s and "temp.flag_rows" in s for s in statements)))

    monkeypatch.setattr(state_mod.State, "write_flags", watched)
    monkeypatch.setattr(state_mod.State, "BULK_FLAG_ROWS", 1)
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), cache=False) as v:
        bulk = stored(v)
        count = len(v.session.reader.batches)
    # every batch's in one pass, before any index over them; all built after
    assert seen[0] == (count, set(), over_flags, True)
    assert {row[3] for row in bulk} == {1} and {row[1] for row in bulk} == {1}  # accepted, each signature verified
    monkeypatch.setattr(state_mod.State, "BULK_FLAG_ROWS", 1 << 30)
    seen.clear()
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), cache=False) as v:
        assert stored(v) == bulk  # the same as row by row
    assert seen[0] == (count, set(), over_flags, False)


def test_a_cold_load_keeps_its_plain_batches_views_without_their_record_ids(new_vault, monkeypatch):
    """Issue 19 item 2: until the open sheds them, a cold load keeps a view of every batch it read; that
    of a plain batch is kept without its record ids, read back from the batch's stored row when asked
    for (views.StoredIds), with its frontier packed (views.PackedFrontier), and with the ids its header
    names of batches held here shared with their own (at a million records the open's peak, about 480
    -> 435 MiB).  Each header and signature list equals the one read whole; the views hold no dict of
    their own and the headers share one list of signature algorithms (380 -> 370 MiB), and the segments
    sealed under one epoch share one (compartment, epoch) pair.  The state is the one a load that keeps
    them whole gives."""
    from camillo.control import BatchView
    from camillo.session import segread, views

    path, vault, _ = new_vault
    _fill(vault)
    vault.lock()
    monkeypatch.setattr(segread, "LEAN_EVERY", 4)  # (as the read goes, not only at its end)
    held: list[dict] = []
    real = Reader.shed_views

    def shed_views(self):
        held.append(dict(self.batches.held if isinstance(self.batches, views.BatchViews) else self.batches))
        real(self)

    monkeypatch.setattr(Reader, "shed_views", shed_views)
    real_lean = segread.lean_views
    monkeypatch.setattr(segread, "lean_views", lambda *args: None)
    with open_vault(path, cache=False) as v:
        whole = {bid: view.header for bid, view in held[-1].items()}
        whole_sigs = {bid: view.batch.sigs for bid, view in held[-1].items()}
        expected = fingerprint(v)
    monkeypatch.setattr(segread, "lean_views", real_lean)
    with open_vault(path, cache=False) as v:
        lean = held[-1]
        plain = {bid: view for bid, view in lean.items() if type(view) is BatchView}
        assert len(plain) >= 30 and len(plain) < len(lean)  # (those holding a control record kept whole)
        assert all(isinstance(view.header.records, views.StoredIds) for view in plain.values())
        assert not any(isinstance(view.header.records, views.StoredIds) for bid, view in lean.items() if bid not in plain)
        assert all(view.batch.sigs == whole_sigs[bid] for bid, view in lean.items())
        assert not any(hasattr(view, "__dict__") for view in lean.values())  # (slots: no dict a view)
        assert all(isinstance(view.header.frontier, views.PackedFrontier) for view in plain.values()
                   if view.header.frontier)
        assert all(dict(view.header.frontier.items()) == whole[bid].frontier for bid, view in lean.items())
        assert len({id(view.header.sig_algs) for view in lean.values()}) == 1
        # (one (compartment, epoch) pair, and one copy of its ids, for all the segments sealed under it)
        refs = v.session.reader.segment_epochs
        assert len(refs) > len(set(refs.values())) and len({id(r) for r in refs.values()}) == len(set(refs.values()))
        assert len({id(view.epoch_id) for view in lean.values()}) == len({view.epoch_id for view in lean.values()})
        assert all(view.header == whole[bid] and tuple(view.header.records) == tuple(whole[bid].records)
                   for bid, view in lean.items())
        # (a batch read before the one naming it is held when that one is kept lean: segments are read in order)
        named = [view for view in plain.values() if view.header.prev in lean
                 and lean[view.header.prev].segment < view.segment]
        assert named and all(view.header.prev is lean[view.header.prev].id for view in named)
        assert fingerprint(v) == expected


def test_a_packed_frontier_is_the_mapping_it_was_made_from():
    """views.PackedFrontier (a cold load's lean views): equal to its dict whatever is asked of it, its
    writers' tuple shared between frontiers naming the same writers; a frontier it cannot pack (empty,
    too many writers, a seq beyond 8 bytes) is left as it is."""
    import gc

    from camillo.session.views import PackedFrontier, packed

    a, b, c = b"a" * 32, b"b" * 32, b"c" * 32
    plain = {a: 7, b: 300, c: 2**64 - 1}
    p = packed(plain)
    assert isinstance(p, PackedFrontier)
    assert p == plain and plain == p and dict(p) == plain and len(p) == 3 and list(p) == [a, b, c]
    assert dict(p.items()) == plain and sorted(p.values()) == sorted(plain.values())
    assert p[b] == 300 and p.get(c) == 2**64 - 1 and p.get(b"d" * 32, 0) == 0 and p.get(b"d" * 32) is None
    assert b in p and b"d" * 32 not in p
    with pytest.raises(KeyError):
        p[b"d" * 32]
    q = packed({a: 1, b: 2, c: 3})
    writers = [[x for x in gc.get_referents(f) if type(x) is tuple] for f in (p, q)]
    assert isinstance(q, PackedFrontier) and writers[0][0] is writers[1][0]  # (one tuple for the same writers)
    assert packed(p) is p and sum(q.values()) == 6
    for unpackable in ({}, {bytes([i]) * 32: i for i in range(17)}, {a: 2**64}):
        assert packed(unpackable) is unpackable


def test_a_cold_load_builds_the_indexes_after_it_and_a_load_killed_meanwhile_gets_them_back(new_vault, monkeypatch):
    """Issue 19 item 3: a cold open stages every record into an empty state with the secondary indexes
    dropped and builds them once at the end (camillo.cache.indexes_deferred), those over validity once
    the validity pass wrote it, those over the batches' flags once the reader wrote them; the result is
    the state a load with the indexes maintained row by row gives.  A database a kill left without them
    (committed mid-load) gets them back from the schema at the next open.  The load's wide page cache is narrowed
    once its rows are written, before the indexes are built (each sorts in memory beside it)."""
    from camillo import cache
    from camillo import state as state_mod

    path, vault, _ = new_vault
    _fill(vault)
    vault.lock()
    wanted = set(cache._DEFERRED_INDEXES)

    def indexes(db) -> set[str]:
        return {n for n, in db.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}

    dropped: list[set[str]] = []
    loaded: list[set[str]] = []
    real = cache.indexes_deferred
    validity = {ddl.split()[5] for ddl in cache.VALIDITY_INDEX_DDL}
    assert validity == {"records_by_time", "records_by_conversation"}
    live = {"records_key", "records_attachments", "records_with_refs", "records_unlisted", "records_control",
            "records_import"}  # (partial, few rows: kept; the last while no imported record is staged)
    assert not live & wanted

    widths: list[tuple[int, int]] = []  # (page cache during the load, when the indexes are built)

    def watched(db, flush, later):
        def built(ddl, flags):
            widths.append((during, db.execute("PRAGMA cache_size").fetchone()[0]))
            later(ddl, flags)

        with real(db, flush, built):
            dropped.append(wanted - indexes(db))
            assert live <= indexes(db)
            during = db.execute("PRAGMA cache_size").fetchone()[0]
            yield
        loaded.append(wanted - indexes(db))

    monkeypatch.setattr(state_mod, "indexes_deferred", contextlib.contextmanager(watched))
    monkeypatch.setattr(cache, "WIDE_SEGMENTS", 1)  # (this small load widens the page cache too)
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), cache=False) as v:
        assert dropped and dropped[0] == wanted  # dropped during the load
        # those over validity and over the batches' flags not yet built when the load ends
        assert loaded[0] == validity | {ddl.split()[5] for ddl in cache.FLAG_INDEX_DDL}
        assert wanted <= indexes(v.session.materialized.db)  # and all built once it was computed
        assert widths == [(-cache.PAGE_CACHE_KIB, -cache.PAGE_CACHE_KIB)]  # (its index of ids built after it)
        deferred = fingerprint(v)
    monkeypatch.setattr(state_mod, "indexes_deferred", lambda db, flush, later: contextlib.nullcontext())
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), cache=False) as v:
        assert fingerprint(v) == deferred  # the same state as a load that maintains them row by row
    monkeypatch.setattr(state_mod, "indexes_deferred", real)
    with open_vault(path) as v:  # a state database left without them
        db = v.session.materialized.db
        for name in wanted:
            db.execute(f"DROP INDEX {name}")
        db.commit()
    with open_vault(path) as v:
        assert wanted <= indexes(v.session.materialized.db)


def test_a_cold_load_keeps_the_index_of_import_keys_until_it_stages_an_imported_record(new_vault, monkeypatch):
    """A cold load keeps the partial index of import keys while it stages no imported record (its build
    after the load read every row: 0.58 s at a million records, for an index of none), and drops it at the
    first one and builds it after (a vault built by an import can hold a million, each at a random page of
    it).  Either way the index is there after the load and gives what a load maintaining it row by row gives."""
    from camillo import cache
    from camillo import state as state_mod

    path, vault, _ = new_vault
    _fill(vault, n=5)
    vault.lock()
    real = cache.indexes_deferred
    seen: list[tuple[bool, bool]] = []  # (there at the load's start, there at its end before the builds)

    def watched(db, flush, later):
        def there() -> bool:
            return db.execute("SELECT 1 FROM sqlite_master WHERE name = 'records_import'").fetchone() is not None

        with real(db, flush, later):
            start = there()
            yield
            flush()
            seen.append((start, there()))

    monkeypatch.setattr(state_mod, "indexes_deferred", contextlib.contextmanager(watched))

    def imported(v) -> list[tuple[str, bytes]]:
        db = v.session.materialized.db
        plan = " ".join(str(row) for row in db.execute(
            "EXPLAIN QUERY PLAN SELECT import_key, id FROM records WHERE import_key IS NOT NULL ORDER BY import_key"))
        assert "records_import" in plan, plan
        return db.execute("SELECT import_key, id FROM records WHERE import_key IS NOT NULL ORDER BY import_key").fetchall()

    with Vault.open(path, Unlock.passphrase(PASSPHRASE), cache=False) as v:
        assert imported(v) == []
    assert seen == [(True, True)]  # no imported record: kept throughout, nothing to build
    with open_vault(path) as v:
        v.append([NewRecord(type="message", text=f"imported {i}", meta={"import": f"chat-{i}"}) for i in range(3)])
    seen.clear()
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), cache=False) as v:
        loaded = imported(v)
        assert [k for k, _ in loaded] == ["chat-0", "chat-1", "chat-2"]
        fp = fingerprint(v)
    assert seen == [(True, False)]  # dropped at the first imported record staged, built after the load
    monkeypatch.setattr(state_mod, "indexes_deferred", lambda db, flush, later: contextlib.nullcontext())
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), cache=False) as v:
        assert imported(v) == loaded and fingerprint(v) == fp  # as a load maintaining every index row by row


def test_a_cold_load_writes_its_rows_valid_and_its_validity_pass_gives_what_judging_each_row_gives(
        new_vault, monkeypatch):
    """A cold load writes its rows valid (State.loading) and the validity pass over every record that
    follows writes only those that are not: rejected, erased or in a batch the log did not accept.
    Row by row (valid, reason, effective class, hidden), the state is the one a load whose rows start
    not valid gives, and a commit before that pass (which nothing should make) leaves no row valid."""
    from camillo import Authority
    from camillo.state import State

    path, vault, _ = new_vault
    _fill(vault, n=5)
    vault.append([NewRecord(type="message", text="a web page said so", role="web")])
    web = next(r for r in vault.timeline() if r.text == "a web page said so")
    vault.append([NewRecord(type="fact", key="user/bank", value="Evil Bank", authority=Authority.OBSERVED,
                            sources=[web.id])])  # rejected: above its sources
    vault.append([NewRecord(type="fact", key="user/pet", value="cat", authority=Authority.INFERRED)])
    vault.confirm([vault.fact("user/pet").proposed[0].id])
    vault.forget(key="user/city")
    secret = next(r for r in vault.timeline() if r.text == "garden note 3")
    vault.erase([secret.id])
    vault.lock()

    def rows(v) -> list[tuple]:
        return v.session.materialized.db.execute(
            "SELECT id, valid, reason, effective, hidden, erased FROM records ORDER BY id").fetchall()

    before_pass: list[tuple[int, int]] = []  # (rows valid, rows) when the validity pass starts
    real = State.materialize

    def materialize(self, *a, **kw):
        before_pass.append(self.db.execute("SELECT total(valid), count(*) FROM records").fetchone())
        return real(self, *a, **kw)

    monkeypatch.setattr(State, "materialize", materialize)
    with open_vault(path, cache=False) as v:
        presumed, expected = rows(v), fingerprint(v)
    assert before_pass[0][0] == before_pass[0][1] > 0, "the cold load did not write its rows valid"
    assert any(not valid for _, valid, *_ in presumed), "no record the pass found not valid: the test proves nothing"
    assert any(erased for *_, erased in presumed) and any(hidden for *_, hidden, _ in presumed)

    before_pass.clear()
    monkeypatch.setattr(State, "loading", lambda self: contextlib.nullcontext())  # rows start not valid
    with open_vault(path, cache=False) as v:
        assert rows(v) == presumed and fingerprint(v) == expected
    assert before_pass[0][0] == 0

    monkeypatch.undo()

    def commit_first(self, *a, **kw):  # a commit between the load and its validity pass
        self.commit()
        before_pass.append(self.db.execute("SELECT total(valid), count(*) FROM records").fetchone())
        return real(self, *a, **kw)

    before_pass.clear()
    monkeypatch.setattr(State, "materialize", commit_first)
    with open_vault(path, cache=False) as v:
        assert before_pass[0][0] == 0 < before_pass[0][1], "a commit kept rows no pass judged valid"
        assert rows(v) == presumed and fingerprint(v) == expected


def test_the_search_index_a_session_built_is_kept_for_the_next_open(new_vault, monkeypatch, tmp_path):
    """A cold load commits its rows as it goes and leaves the full-text index to the first search (or
    the lock); whichever builds it, the next open finds it complete.  It used to be lost: a lock with
    nothing else changed committed nothing, so every session's first search indexed the whole vault
    again (10 s at a million records)."""
    from camillo import cache

    path, vault, _ = new_vault
    _fill(vault)
    vault.lock()
    monkeypatch.setattr(cache, "COMMIT_AGE", 0.0)  # the cold load's rows are committed as it goes
    switch_home(monkeypatch, tmp_path / "laptop")

    def index_state(v) -> tuple[int, int]:
        state = v.session.reader.materialized
        top = state.db.execute("SELECT max(rowid) FROM records").fetchone()[0]
        return state._indexed, top

    with open_vault(path) as v:  # a cold load: nothing of the index yet
        assert v.session.reader.decryptions > 0
        indexed, top = index_state(v)
        assert indexed < top
    with open_vault(path) as v:
        assert v.session.reader.decryptions == 0
        indexed, top = index_state(v)
        assert indexed == top, "the lock after a cold load left the search index to build"
    monkeypatch.setattr(cache, "COMMIT_AGE", 3600.0)
    with open_vault(path) as v:  # rows staged and the index built by a search, then a lock
        v.session.reader.materialized.db.execute("INSERT INTO search(search) VALUES('delete-all')")
        v.session.reader.materialized._indexed = 0
        assert [r.text for r in v.search("note 7")] == ["garden note 7"]
    with open_vault(path) as v:
        indexed, top = index_state(v)
        assert indexed == top, "the index a search built was not kept"
        assert [r.text for r in v.search("note 7")] == ["garden note 7"]

def _log_as_built(v) -> object:
    """The causal log a full build gives over what this session holds (roster and signed batches
    computed again from its batch views)."""
    from camillo.control import build_roster
    from camillo.log import build_log

    reader = v.session.reader
    roster, signed = build_roster(reader.vault_id, reader.batches)
    return build_log(reader.batches, signed, roster)


def test_a_warm_open_of_an_unchanged_folder_resumes_the_stored_log_and_decodes_no_plain_batch(
        new_vault, monkeypatch, tmp_path):
    """Issue 19: the causal log is kept in the local state on lock; a warm open of an unchanged folder
    resumes it (equal to a full build) instead of building it over every batch, and the batch views
    of messages are not decoded (their writer and flags are stored beside them)."""
    from camillo.session import reader as reader_mod
    from camillo.session.views import CachedView

    path, vault, _ = new_vault
    _fill(vault)
    switch_home(monkeypatch, tmp_path / "laptop")
    vault.lock()
    with open_vault(path) as other:  # a second writer: chains of two devices
        other.append([NewRecord(type="message", text="from the laptop")])
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path):
        pass  # reads the laptop's batches, stores the log on lock
    builds = []
    real = reader_mod.build_log
    monkeypatch.setattr(reader_mod, "build_log", lambda *a: builds.append(1) or real(*a))
    with open_vault(path) as v:
        assert builds == [], "the stored log was not resumed"
        assert v.session.reader.decryptions == 0
        views = list(v.session.reader.batches.values())
        assert views and all(isinstance(view, CachedView) for view in views)
        plain = [view for view in views if not view.has_control]
        assert plain and not any("header" in view.__dict__ for view in plain), "a message's batch was decoded"
        devices, grants = v.devices(), v.grants()  # when each last wrote: a chain's top, not every batch
        assert len(devices) == 2 and all(d.last_seen is not None for d in devices)
        tops = {chain[max(chain)] for chain in v.session.log.chains.values() if chain}
        assert sum("header" in view.__dict__ for view in plain) <= len(tops) < len(plain) / 2
        del grants
        from camillo.recordviews import (
            shown_ts,  # the same as the newest time over every batch of each device
        )
        every = {d.writer_id: max(shown_ts(b.header.ts) or 0 for b in views if b.writer_id == d.writer_id)
                 for d in devices}
        assert {d.writer_id: d.last_seen for d in devices} == every
        assert v.session.log == _log_as_built(v)
        assert fingerprint(v) == from_scratch(path)
        v.append([NewRecord(type="message", text="one more")])  # the stored log goes; the lock stores the new one
    builds.clear()
    with open_vault(path) as v:
        assert builds == []
        assert v.session.log == _log_as_built(v)
        assert fingerprint(v) == from_scratch(path)


def test_a_warm_open_reads_the_stored_log_where_it_asks_without_decoding_it_whole(new_vault, monkeypatch, tmp_path):
    """Issue 19: the stored log keeps each chain's seqs packed with its top.  A warm open of an unchanged
    folder asks whether the batches that can move the roster are accepted (some sit in long chains: a
    compartment's first batch holds its epoch) and what each chain's top is (the rollback memory)
    without making an object of every batch of every chain (100,000 at a million records).  The log,
    when something asks for it whole, equals a full build, and the rollback memory's findings from a
    stored log equal those from the whole log."""
    import random as rnd

    from camillo.log import StoredLog, check_memory, encode_log
    from camillo.session import resume

    def decoded(log):
        head, chains = encode_log(log)
        return StoredLog.decode(head, lambda: chains)

    reads = []
    real_chains = resume.stored_chains
    monkeypatch.setattr(resume, "stored_chains", lambda reader: reads.append(1) or real_chains(reader))
    path, vault, _ = new_vault
    _fill(vault, 30)
    switch_home(monkeypatch, tmp_path / "laptop")
    vault.lock()
    with open_vault(path) as other:
        other.append([NewRecord(type="message", text="from the laptop")])
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path):
        pass  # reads the laptop's batches, stores the log on lock
    reads.clear()
    with open_vault(path) as v:
        reader = v.session.reader
        assert v.timeline(limit=10) and v.session.alerts == []
        assert reader.stored_log is not None and reader._log is None, "the stored log was decoded whole"
        assert reads == [], "the warm open read the stored log's chains"
        stored = reader.stored_log
        assert v.session.log == _log_as_built(v)
        assert reads == [1]
        assert reader.stored_log is None
        log = v.session.log
        assert fingerprint(v) == from_scratch(path)
    assert decoded(log).full() == log and stored.full() == log
    rng = rnd.Random(5)
    entries = [(c, w, seq, bid) for (w, c), ch in log.chains.items() for seq, bid in ch.items()]
    for _ in range(30):
        remembered: dict = {}
        for c, w, seq, bid in rng.sample(entries, 3):
            remembered.setdefault(c, {})[w] = (seq + rng.choice([0, 0, 1]), bid if rng.random() < 0.8 else b"x" * 32)
        whole = check_memory(remembered, {}, 1, log, set(), 1, 1_000_000)
        assert check_memory(remembered, {}, 1, decoded(log), set(), 1, 1_000_000) == whole
        for (w, c), ch in log.chains.items():
            assert all(decoded(log).batch_at((w, c), q) == ch.get(q) for q in range(0, max(ch) + 2))


def test_a_stored_log_of_the_earlier_layout_is_taken_and_stored_again_in_this_one(new_vault, monkeypatch, tmp_path):
    """A local state an earlier version stored keeps its log as one item (format 2: each chain's top
    and its batches together): a warm open takes it, as it did, and stores it again as a head and its
    chains apart, once; the next warm open reads the head alone.  A digest that does not match the
    stored flags sends the warm open to the chains themselves; chains that do not hold what the head
    says are never used."""
    import cbor2
    from camillo.log import _packed
    from camillo.session import resume

    path, vault, _ = new_vault
    _fill(vault, 12)
    vault.lock()
    with open_vault(path) as v:
        log = _log_as_built(v)
        db = v.session.reader.materialized.db
        old = cbor2.dumps([2, [[w, c, max(ch), ch[max(ch)], _packed(sorted(ch)), b"".join(ch[q] for q in sorted(ch))]
                               for (w, c), ch in log.chains.items()],
                           [[b, r] for b, r in log.rejected.items()], [], [], [[c, sorted(h)] for c, h in log.heads.items()]])
        db.execute("UPDATE cache_meta SET value = ? WHERE key = 'log'", (old,))
        db.execute("DELETE FROM cache_meta WHERE key IN ('log_chains', 'log_special')")
        db.commit()
    reads = []
    real_chains = resume.stored_chains
    monkeypatch.setattr(resume, "stored_chains", lambda reader: reads.append(1) or real_chains(reader))
    with open_vault(path) as v:
        assert v.session.reader.decryptions == 0 and v.session.reader.stored_log is not None
        assert v.session.log == _log_as_built(v)
    with open_vault(path) as v:
        db = v.session.reader.materialized.db
        assert cbor2.loads(db.execute("SELECT value FROM cache_meta WHERE key = 'log'").fetchone()[0])[0] == 3
        assert reads == [] and v.session.reader.stored_log is not None
        assert v.session.log == _log_as_built(v) and fingerprint(v) == from_scratch(path)
        db.execute("UPDATE cache_meta SET value = ? WHERE key = 'log_special'", (b"\x00" * 32,))
        db.commit()
    reads.clear()
    with open_vault(path) as v:  # the digest does not match: the chains say, and hold what the flags say
        assert reads == [1] and v.session.reader.decryptions == 0
        assert v.session.log == _log_as_built(v)
        db = v.session.reader.materialized.db
        chains = db.execute("SELECT value FROM cache_meta WHERE key = 'log_chains'").fetchone()[0]
        db.execute("UPDATE cache_meta SET value = ? WHERE key = 'log_chains'", (chains[:-32] + b"\x01" * 32,))
        db.commit()
    with open_vault(path) as v:  # the chains do not hold what the head says: never used
        v.append([NewRecord(type="message", text="after the damage")])
        assert v.session.log == _log_as_built(v) and fingerprint(v) == from_scratch(path)


def test_a_warm_open_derives_no_epoch_key_pair_until_a_segment_is_opened_or_sealed(new_vault, monkeypatch):
    """Issue 19: a warm open learns every epoch's secret from the envelopes but reads no segment: the
    X-Wing key pair of an epoch (an ML-KEM key expansion) is derived when a segment of that epoch is
    opened or sealed, once."""
    from camillo import keys as keys_mod
    from camillo.session import keyring as keyring_mod

    path, vault, _ = new_vault
    _fill(vault, 5)
    vault.lock()
    derived: list[tuple[bytes, bytes]] = []
    real = keys_mod.epoch_key

    def counted(secret, vault_id, compartment_id, epoch_id):
        derived.append((compartment_id, epoch_id))
        return real(secret, vault_id, compartment_id, epoch_id)

    monkeypatch.setattr(keyring_mod.keys, "epoch_key", counted)
    with open_vault(path) as v:
        assert len(v.session.keyring.epoch_secrets) >= 2 and derived == [], derived
        v.append([NewRecord(type="message", text="garden sealed now")])
        v.append([NewRecord(type="message", text="garden sealed again")])
        assert len(derived) == 1, derived
        cid = v.compartment_id("personal")
        ref = (cid, v.session.roster.current_epoch(cid).epoch_id)
        assert derived == [ref] and v.session.keyring.epoch_keys[ref].public == v.session.roster.current_epoch(cid).public
        assert fingerprint(v) == from_scratch(path)


def test_a_warm_open_of_an_unchanged_folder_makes_views_only_of_what_can_move_the_roster(
        new_vault, monkeypatch, tmp_path):
    """Issue 19: a warm open of a folder that did not change since the state was stored computes the
    roster from the batches holding control records and those not accepted (here a lost laptop's batch
    written after its revocation), and makes no view of any other batch (100,000 at a million records):
    the timeline, facts, log, search and the problems reported equal a full recomputation, and the
    session goes on (an append, a fact) as after a full one."""
    import time

    from camillo import ids, segments
    from camillo.records import BatchHeader, Kind, encode_record, make_batch
    from camillo.storage import segment_name

    path, vault, _ = new_vault
    _fill(vault, 20)
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as lap:
        for i in range(5):
            lap.append([NewRecord(type="message", text=f"garden from the laptop {i}")])
        laptop, cid, vid = lap.session.actor, lap.compartment_id("personal"), lap.vault_id
        counter, old_epoch = lap.session.device_state.counters[cid], lap.session.roster.current_epoch(cid)
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path) as v:
        v.revoke(laptop.writer_id.hex()[:12], reason="lost", reauth=Unlock.passphrase(PASSPHRASE))
    raw = encode_record(Kind.NOTE, laptop.writer_id, value={"text": "garden thief"}, authority=3, type="message")
    header = BatchHeader(vid, cid, laptop.writer_id, counter[0] + 1, counter[1], (), {laptop.writer_id: counter[0]},
                         (ids.record_id(raw),), int(time.time()))
    seg = segments.seal_segment(vid, cid, old_epoch.epoch_id, old_epoch.public,
                                segments.encode_payload([make_batch(header, [raw], laptop.signer)]))
    os.makedirs(os.path.dirname(os.path.join(path, segment_name(seg))), exist_ok=True)
    with open(os.path.join(path, segment_name(seg)), "wb") as f:
        f.write(seg)
    with open_vault(path) as v:  # reads the thief's batch (not accepted), stores the log on lock
        assert v.session.reader.decryptions == 1
    with open_vault(path, cache=False, register=False) as fresh:
        problems = sorted((p.kind, p.file, p.message) for p in fresh.problems())
        assert any(p[0] == "rejected" for p in problems)
    for _ in range(2):
        with open_vault(path) as v:
            reader = v.session.reader
            views = reader.batches
            held = dict(views.held)
            assert reader.decryptions == 0
            controls = {b for (b,) in reader.materialized.db.execute("SELECT id FROM cache_batches WHERE control")}
            unaccepted = {b for (b,) in reader.materialized.db.execute("SELECT id FROM cache_batches WHERE NOT accepted")}
            assert len(unaccepted) == 1 and controls
            # (none at all when the roster the last warm open computed from them is kept: rostermemo)
            assert set(held) <= controls | unaccepted, "a view was made of an accepted message's batch"
            assert len(views) >= 26 + len(controls)
            segs = reader.segment_batches  # every segment's name, no list decoded and no epoch read
            assert all(x is None for x in segs._held.values()) and reader.segment_epochs._all is None
            assert sorted((p.kind, p.file, p.message) for p in v.problems()) == problems
            assert v.session.log == _log_as_built(v)
            assert fingerprint(v) == from_scratch(path)
            v.append([NewRecord(type="message", text="garden after the warm open")])
            v.append([NewRecord(type="fact", key="user/city", value="Porto")])
            assert fingerprint(v) == from_scratch(path)


def _dirs_listed(monkeypatch) -> list[str]:
    """The directories of segments listed from the disk (os.scandir) or from the stored listing."""
    from camillo import storage
    from camillo.session import listing

    seen: list[str] = []
    scandir, prime = os.scandir, listing.prime

    def counted_scandir(path):
        if "/segments/" in str(path):
            seen.append("disk:" + str(path).rsplit("/segments/", 1)[1])
        return scandir(path)

    def counted_prime(shelf, db, unread):
        trusted = prime(shelf, db, unread)
        load = shelf._load
        if load is not None:
            def loaded(rel):
                seen.append("kept:" + rel.split("/", 1)[1])
                return load(rel)
            shelf._load = loaded
        return trusted

    monkeypatch.setattr(storage.os, "scandir", counted_scandir)
    monkeypatch.setattr(listing, "prime", counted_prime)
    return seen


_MTIMES = iter(range(10**18, 2 * 10**18, 10**9))


def _aged(path: str) -> None:
    """Every directory of the vault as if last written long ago (a listing made now is kept: it is not
    within its mtime's clock tick), each time at a moment of its own (an mtime never goes back)."""
    when = next(_MTIMES)
    for dirpath, _d, _f in os.walk(path):
        os.utime(dirpath, ns=(when, when))


def _moved(directory: str) -> None:
    when = next(_MTIMES)
    os.utime(directory, ns=(when, when))


def test_a_warm_open_handles_no_segment_name_of_a_directory_that_did_not_move(new_vault, monkeypatch, tmp_path):
    """Issue 19: the directories of segments whose mtime did not move since the local state kept their
    listing are taken on trust: a warm open lists none of them and reads none of their names (100,000 at
    a million records), nor every segment's name from the state.  A directory that moved is compared
    with its kept listing (another device's segment is read); one whose listing was not kept (this
    installation wrote in it) is listed and compared with the segments the state holds there, as is a
    directory missing from the folder.  Each result equals a full read."""
    path, vault, _ = new_vault
    _fill(vault, 40)
    vault.lock()
    copy = str(tmp_path / "other")
    shutil.copytree(path, copy)
    _aged(path)
    with open_vault(path) as v:  # (keeps the listing of every directory)
        pass
    seen = _dirs_listed(monkeypatch)
    with open_vault(path) as v:
        reader = v.session.reader
        assert seen == [], f"a warm open of an unchanged folder listed or read {seen}"
        assert not reader.segment_batches._complete, "every segment's name was read"
        assert fingerprint(v) == from_scratch(path)
        # this installation writes: the directory's listing is kept only once listed after the write
        v.append([NewRecord(type="message", text="garden written here")])
        written = reader.materialized.db.execute(
            "SELECT segment FROM cache_batches ORDER BY rowid DESC LIMIT 1").fetchone()[0]
    seen.clear()
    os.unlink(os.path.join(path, written))  # (gone before this installation saw it go: a restore)
    _moved(os.path.dirname(os.path.join(path, written)))
    where = os.path.dirname(written).split("/", 1)[1]
    with open_vault(path) as v:
        assert "garden written here" not in {r.text for r in v.timeline()}
        assert "disk:" + where in seen and set(seen) <= {"disk:" + where, "kept:" + where}, seen
        assert fingerprint(v) == from_scratch(path)
    # another device's segment, in a directory whose listing was kept
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(copy) as lap:
        lap.append([NewRecord(type="message", text="garden from the laptop")])
    switch_home(monkeypatch, tmp_path / "home")
    arrived = sorted(set(_segment_files(copy)) - set(_segment_files(path)))
    for name in arrived:
        os.makedirs(os.path.dirname(os.path.join(path, name)), exist_ok=True)
        shutil.copy2(os.path.join(copy, name), os.path.join(path, name))
    with open_vault(path) as v:  # (keeps the listing again)
        pass
    _aged(path)
    with open_vault(path) as v:
        pass
    seen.clear()
    extra = os.path.join(path, arrived[0])
    data = open(extra, "rb").read()
    os.unlink(extra)
    _moved(os.path.dirname(extra))
    with open_vault(path) as v:
        where = arrived[0].split("/")[1]
        assert seen == ["kept:" + where, "disk:" + where], seen
        assert fingerprint(v) == from_scratch(path)
    with open(extra, "wb") as f:
        f.write(data)
    _moved(os.path.dirname(extra))
    seen.clear()
    with open_vault(path) as v:
        assert seen == ["kept:" + where, "disk:" + where], seen
        assert "garden from the laptop" in {r.text for r in v.timeline()}
        assert fingerprint(v) == from_scratch(path)
    # a directory of segments missing from the folder (a copy of the vault made before it was written)
    gone = path + "-copy"
    shutil.copytree(path, gone)
    shutil.rmtree(os.path.dirname(os.path.join(gone, written if os.path.exists(os.path.dirname(
        os.path.join(gone, written))) else arrived[0])))
    _aged(gone)
    with open_vault(gone) as v:
        assert fingerprint(v) == from_scratch(gone)


def test_segments_listed_but_not_read_are_read_again_by_a_warm_open(new_vault, monkeypatch, tmp_path):
    """A segment still syncing when the state was stored (its bytes did not match its name) sits in a
    directory whose listing is kept: the state keeps it among those not read, and the next warm open
    reads it again even though its directory did not move (the sync finished writing it in place)."""
    path, vault, _ = new_vault
    _fill(vault, 5)
    vault.lock()
    copy = str(tmp_path / "other")
    shutil.copytree(path, copy)
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(copy) as lap:  # another device writes one message
        lap.append([NewRecord(type="message", text="garden from the laptop")])
    switch_home(monkeypatch, tmp_path / "home")
    new = sorted(set(_vault_files(copy)) - set(_vault_files(path)))
    message = max((n for n in new if n.endswith(".seg")), key=lambda n: os.stat(os.path.join(copy, n)).st_mtime_ns)
    for name in new:  # (the laptop's enrollment, synced)
        os.makedirs(os.path.dirname(os.path.join(path, name)), exist_ok=True)
        shutil.copy2(os.path.join(copy, name), os.path.join(path, name))
    with open(os.path.join(copy, message), "rb") as f:
        data = f.read()
    target = os.path.join(path, message)
    with open(target, "wb") as f:
        f.write(data[: len(data) // 2])  # half synced
    new = [message]
    with open_vault(path) as v:
        assert "garden from the laptop" not in {r.text for r in v.timeline()}
        assert any(p.file == new[0] for p in v.problems())
    _aged(path)
    with open_vault(path) as v:  # (the directory's listing is kept, read after the file appeared)
        pass
    before = os.stat(os.path.dirname(target)).st_mtime_ns
    with open(target, "r+b") as f:  # the sync completes the file in place: the directory does not move
        f.write(data)
    assert os.stat(os.path.dirname(target)).st_mtime_ns == before
    seen = _dirs_listed(monkeypatch)
    with open_vault(path) as v:
        # its directory did not move: its kept listing is read (for the unread name), not the disk
        assert seen == ["kept:" + new[0].split("/")[1]], seen
        assert "garden from the laptop" in {r.text for r in v.timeline()}
        assert not any(p.file == new[0] for p in v.problems())
        assert fingerprint(v) == from_scratch(path)


def _vault_files(path: str) -> list[str]:
    return [os.path.relpath(os.path.join(d, f), path) for d, _s, files in os.walk(path) for f in files]


def _segment_files(path: str) -> list[str]:
    return [n for n in _vault_files(path) if n.endswith(".seg")]


def test_the_segments_holding_batches_or_under_epochs_are_found_without_reading_every_segment(new_vault):
    """After a warm open, which segments hold given batches (the check that erasures are complete, at
    every open) and which are sealed under given epochs (the writes an erasure elsewhere caught) come
    from the database, not from every segment's list: the answers equal those of a pass over every
    segment, before and after segments are added and forgotten in the session."""
    path, vault, _ = new_vault
    _fill(vault, 12)
    vault.lock()
    rng = random.Random(7)
    with open_vault(path) as v:
        reader = v.session.reader

        def asked() -> tuple[list[tuple[set[bytes], list[str]]], list[tuple[set, dict]]]:
            ids = sorted(v.session.batches.keys())
            holding = [(q, sorted(reader.segments_holding(q)))
                       for q in [set(rng.sample(ids, k)) for k in (1, 3, 17)] + [{b"x" * 32}, set(ids)]]
            epochs = {r for r in (reader.segment_ref(n) for n in reader.segment_batches) if r}
            under = [(refs, reader.segments_under(refs)) for refs in [epochs, {min(epochs)}, {max(epochs)}]]
            return holding, under

        def check(holding: list, under: list) -> None:
            lists = dict(reader.segment_batches.items())  # (every list read: the pass it is compared with)
            refs = {n: reader.segment_ref(n) for n in lists}
            for q, found in holding:
                assert found == sorted(n for n, b in lists.items() if not q.isdisjoint(b))
            for epochs, found in under:
                assert found == {n: r for n, r in refs.items() if r in epochs}

        held = reader.segment_batches._held
        assert all(x is None for x in held.values()), "the open read a segment's list"
        one = set(rng.sample(sorted(v.session.batches.keys()), 1))
        assert len(reader.segments_holding(one)) == sum(x is not None for x in held.values()) == 1, \
            "a list other than the one holding the batch was read"
        holding, under = asked()
        check(holding, under)
        plan = " ".join(str(r) for r in reader.materialized.db.execute(
            "EXPLAIN QUERY PLAN SELECT name, compartment, epoch FROM cache_segments WHERE epoch IN (?, ?)", (b"a", b"b")))
        assert "cache_segments_epoch" in plan, plan  # (not a scan of every segment)
        for i in range(2):
            v.append([NewRecord(type="message", text=f"garden in the session {i}")])
        gone = sorted(reader.segment_batches)[:2]
        reader.forget_segments(gone)  # (as a prune's refresh does)
        holding, under = asked()
        check(holding, under)
        assert not set(gone) & set(under[0][1])


def test_a_damaged_list_of_a_segments_batches_met_after_the_open_rebuilds_the_state(new_vault):
    """A warm open decodes which batches a segment holds only when asked (a prune, an erasure): a stored
    list that does not decode then is a damaged local state, which is rebuilt from the vault."""
    path, vault, _ = new_vault
    _fill(vault, 6)
    vault.append([NewRecord(type="message", text="garden to be pruned")])
    name = vault.session.reader.materialized.db.execute(
        "SELECT segment FROM cache_batches ORDER BY rowid DESC LIMIT 1").fetchone()[0]
    vault.lock()
    with open_vault(path) as v:
        db = v.session.reader.materialized.db
        db.execute("UPDATE cache_segments SET batches = ? WHERE name = ?", (b"\xff", name))
        db.commit()
    os.unlink(os.path.join(path, name))  # gone from the folder: the next open forgets its batches
    with open_vault(path) as v:
        assert v.session.reader.decryptions > 0, "the damaged state was used"
        assert "garden to be pruned" not in {r.text for r in v.timeline()}
        assert fingerprint(v) == from_scratch(path)


def test_a_warm_open_extends_the_stored_log_by_what_arrived_and_never_uses_a_damaged_one(
        new_vault, monkeypatch, tmp_path):
    """Another device's batches arrived: the stored state and log are taken, then extended by them as if
    the session had stayed open (plain batches in O(new), a roster change through the recomputation);
    a damaged stored log is never used (built again).  Each result equals a full recomputation."""
    from camillo.session import reader as reader_mod

    path, vault, _ = new_vault
    _fill(vault)
    store = vault.session.local.cache_path(vault.writer_id)
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as other:
        other.append([NewRecord(type="message", text="from the laptop")])
    switch_home(monkeypatch, tmp_path / "home")
    events: list[str] = []  # what an open did: "stored" (took the stored state and log), "extended" (by
    # new plain batches, in O(new)), "resumed" (the stored log, extended at a recomputation), "built" (over
    # every batch)
    R = reader_mod.Reader
    real_stored, real_extend, real_resumed, real_build = R._resume_stored, R.extend, R._resumed_log, reader_mod.build_log
    monkeypatch.setattr(R, "_resume_stored", lambda self: (r := real_stored(self)) and (events.append("stored") or r))
    monkeypatch.setattr(R, "extend", lambda self, new: (r := real_extend(self, new)) and (events.append("extended") or r))
    monkeypatch.setattr(R, "_resumed_log", lambda self, *a: ((r := real_resumed(self, *a)) is not None
                        and events.append("resumed")) or r)
    monkeypatch.setattr(reader_mod, "build_log", lambda *a: events.append("built") or real_build(*a))
    with open_vault(path) as v:  # the laptop joined (control batches) and wrote: the roster changed
        assert v.session.reader.decryptions > 0
        assert events[0] == "stored" and "extended" not in events
        assert v.session.log == _log_as_built(v) and fingerprint(v) == from_scratch(path)
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as other:  # messages only: the stored log is extended by them
        other.append([NewRecord(type="message", text="more from the laptop")])
        other.append([NewRecord(type="message", text="and more")])
    switch_home(monkeypatch, tmp_path / "home")
    events.clear()
    with open_vault(path) as v:
        assert v.session.reader.decryptions > 0 and events == ["stored", "extended"]
        batches = v.session.batches  # views of the control batches, the new ones and the chains they extend
        assert len(batches.held) < len(batches) / 2, "the warm open made a view of every batch"
        assert v.session.log == _log_as_built(v) and fingerprint(v) == from_scratch(path)
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as other:  # a control batch that changes no principal, and messages
        other.rename_device("test laptop", "old laptop")
        other.append([NewRecord(type="message", text="after the rename")])
    switch_home(monkeypatch, tmp_path / "home")
    events.clear()
    with open_vault(path) as v:
        assert events[0] == "stored" and "built" not in events, "the stored log was not extended by a rename"
        assert v.session.log == _log_as_built(v) and fingerprint(v) == from_scratch(path)
        assert "old laptop" in {d.name for d in v.devices()}
    events.clear()
    with open_vault(path) as v:  # stored at the last lock: resumed
        assert events == ["stored"]
        db = v.session.reader.materialized.db
        db.execute("UPDATE cache_meta SET value = ? WHERE key = 'log'", (b"not a log",))
        db.commit()  # (the lock leaves it: this session's log is the one stored, it thinks)
    events.clear()
    with open_vault(path) as v:
        assert events == ["built"], "a damaged stored log was used"
        assert v.session.log == _log_as_built(v) and fingerprint(v) == from_scratch(path)
    events.clear()
    with open_vault(path) as v:  # the log built then replaced it on lock (as one of an earlier format is)
        assert events == ["stored"], "the damaged stored log stayed: every open builds the log again"
        assert v.session.log == _log_as_built(v) and fingerprint(v) == from_scratch(path)
    assert os.path.exists(store)


def test_another_devices_epoch_roll_is_taken_without_a_view_of_every_batch(new_vault, monkeypatch, tmp_path):
    """Another device's writes that roll a compartment's keys (a scheduled epoch: control records that
    change no principal) reach a warm open, and a session already open: the roster is computed from the
    batches that can move it and the new ones (its fingerprint unchanged, every other batch is signed as
    it was), no view is made of the others, and the state, the log and the flags equal a full
    recomputation's."""
    path, vault, _ = new_vault
    _fill(vault, 20)
    vault.lock()
    monkeypatch.setattr("camillo.ops.rekey.SCHEDULED_EPOCH_BATCHES", 5)

    def laptop_writes(n: int, tag: str) -> None:
        switch_home(monkeypatch, tmp_path / "laptop")
        with open_vault(path) as lap:
            for i in range(n):
                lap.append([NewRecord(type="message", text=f"garden {tag} {i}")])
        switch_home(monkeypatch, tmp_path / "home")

    laptop_writes(2, "joined")  # (the laptop's registration: a new principal, read by a full computation)
    with open_vault(path):
        pass
    cid = vault.compartment_id("personal")
    with open_vault(path) as v:
        epochs_before = len(v.session.roster.epochs)
    laptop_writes(8, "rolled")  # a scheduled epoch on the laptop, among its messages
    with open_vault(path) as v:
        reader = v.session.reader
        assert len(v.session.roster.epochs) > epochs_before, "the laptop's writes rolled no epoch"
        assert not reader.batches.every, "a view was made of every batch"
        stored = {b for (b,) in reader.materialized.db.execute("SELECT id FROM cache_batches WHERE control = 0")}
        assert len(reader.batches.held.keys() & stored) <= 10, "views of the older messages were made"
        assert fingerprint(v) == from_scratch(path)
        laptop_writes(8, "rolled again")  # while this session is open
        v.refresh()
        assert not reader.batches.every
        assert v.session.log == _log_as_built(v) and fingerprint(v) == from_scratch(path)
        assert v.session.roster.current_epoch(cid) is not None
    with open_vault(path) as v:  # the flags stored by that session are those a full computation gives
        flags = dict(v.session.reader.materialized.db.execute(
            "SELECT id, sig_ok | vouched << 1 | accepted << 2 FROM cache_batches").fetchall())
    with open_vault(path, cache=False, register=False) as fresh:
        full = {b: x.sig_ok | x.vouched << 1 | (b in fresh.session.log.accepted) << 2
                for b, x in fresh.session.batches.items()}
    assert {b: f & 4 for b, f in flags.items()} == {b: f & 4 for b, f in full.items()}


def _compacted_then_forgotten(vault) -> None:
    """Compact and lock ``vault``, then delete its local state: the next open reads the compacted
    segments alone (their batches accepted on the compaction's signature)."""
    vault.compact(prune_now=True)
    store = vault.session.local.cache_path(vault.writer_id)
    vault.lock()
    for suffix in ("", "-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(store + suffix)


def test_records_accepted_on_a_compactions_signature_say_so_after_a_warm_open(new_vault):
    """A record whose batch was accepted on a COMPACTION record's signature (read from the compacted
    segments only) shows verified "compaction": after a warm open too, from the flag stored beside its
    batch, without a view of the batch being made for the page that shows it."""
    path, vault, _ = new_vault
    _fill(vault, 8)
    _compacted_then_forgotten(vault)
    with open_vault(path) as v:
        first = {r.id: r.verified for r in v.timeline()}
    assert "compaction" in first.values()
    with open_vault(path, cache=False, register=False) as fresh:
        assert {r.id: r.verified for r in fresh.timeline()} == first
    with open_vault(path) as v:
        assert v.session.reader.decryptions == 0
        assert {r.id: r.verified for r in v.timeline()} == first
        assert len(v.session.batches.held) < len(v.session.batches), "the page made a view of every batch"


def test_a_page_of_search_results_is_read_at_its_rowids_with_the_compaction_flag_from_its_own_index(
        new_vault, monkeypatch):
    """Issue 19 (search p50 at a million records, 24.6 -> 17 ms in a script): the records a page of
    results shows are read at the rowids the full-text index gave, not looked up again through the
    index of record ids, and whether each one's batch was accepted on a compaction's signature comes
    from the index of those batches alone (empty in a vault never compacted), not from the table's own
    index and then the batch's row.  The views are those the record ids give, "compaction" included."""
    from camillo.state import State

    path, vault, _ = new_vault
    _fill(vault, 8)
    _compacted_then_forgotten(vault)
    with open_vault(path):
        pass
    with open_vault(path) as v:
        for i in range(3):
            v.append([NewRecord(type="message", text=f"garden after the compaction {i}")])
        state = v.session.materialized
        by_id = State.records

        def not_by_id(self, ids):
            raise AssertionError("a page of search results looked its records up by id")

        monkeypatch.setattr(State, "records", not_by_id)
        found = v.search("garden")
        monkeypatch.setattr(State, "records", by_id)
        assert len(found) == 11
        assert found == state.records([r.id for r in found])
        assert {r.verified for r in found} == {"compaction", "signature"}
        plan = " ".join(str(r) for r in state.db.execute(
            f"EXPLAIN QUERY PLAN SELECT rowid, {State._COLUMNS} FROM records WHERE rowid IN "
            "(SELECT value FROM json_each(?))", ["[1]"]))
        assert "INTEGER PRIMARY KEY" in plan and "COVERING INDEX cache_batches_vouched" in plan, plan


def test_a_state_without_the_writer_seq_compartment_and_control_columns_gets_them(new_vault):
    """A state an older version wrote has no writer, seq, compartment or control columns: the open adds
    them and fills them, and the views read back carry them without decoding a header (what a
    revocation compares for every batch of the revoked writer); the next warm open makes views only of
    the control batches."""
    path, vault, _ = new_vault
    _fill(vault)
    expected = {v.id: (v.writer_id, v.seq, v.compartment_id) for v in vault.session.batches.values()}
    vault.lock()
    with open_vault(path) as v:
        db = v.session.reader.materialized.db
        db.execute("DROP INDEX cache_batches_open")  # (an older version's state has no such indexes)
        db.execute("DROP INDEX cache_batches_special_flags")
        db.execute("DROP INDEX cache_batches_writer")
        for column in ("writer", "seq", "compartment", "control"):
            db.execute(f"ALTER TABLE cache_batches DROP COLUMN {column}")
        db.commit()
    for second in (False, True):  # (filled by the first open, read by the second)
        with open_vault(path) as v:
            assert v.session.reader.decryptions == 0, v.session.cache_problem
            rows = v.session.reader.materialized.db.execute(
                "SELECT count(*), count(writer), count(seq), count(compartment), count(control) "
                "FROM cache_batches").fetchone()
            assert rows[0] == rows[1] == rows[2] == rows[3] == rows[4] > 0
            views = v.session.batches
            if second:
                assert all(x.has_control for x in views.held.values())
            assert {b: (x.writer_id, x.seq, x.compartment_id) for b, x in views.items()} == expected
            assert not any("header" in x.__dict__ for x in views.values() if not x.has_control)
            assert fingerprint(v) == from_scratch(path)
            plan = " ".join(str(r) for r in v.session.reader.materialized.db.execute(
                "EXPLAIN QUERY PLAN " + Reader.BATCHES_QUERY))
            assert "COVERING INDEX cache_batches_open" in plan, plan  # (created by the first open)
            db = v.session.reader.materialized.db
            plan = " ".join(str(r) for r in db.execute("EXPLAIN QUERY PLAN " + SPECIAL_FLAGS))
            assert "COVERING INDEX cache_batches_special_flags" in plan, plan
    with open_vault(path) as v:  # a state of revision 7 to 11: the index of those batches without their flags
        db = v.session.reader.materialized.db
        db.execute("DROP INDEX cache_batches_special_flags")
        db.execute("CREATE INDEX cache_batches_special ON cache_batches(id) WHERE control IS NOT 0 OR accepted = 0")
        db.commit()
    with open_vault(path) as v:
        db = v.session.reader.materialized.db
        assert db.execute("SELECT 1 FROM sqlite_master WHERE name = 'cache_batches_special'").fetchone() is None
        plan = " ".join(str(r) for r in db.execute("EXPLAIN QUERY PLAN " + SPECIAL_FLAGS))
        assert "COVERING INDEX cache_batches_special_flags" in plan, plan
        assert fingerprint(v) == from_scratch(path)


def test_a_warm_open_reads_no_stored_header_and_a_pass_over_every_batch_reads_them_at_once(new_vault, monkeypatch):
    """A warm open reads each batch's columns, not its stored header and signatures (73 MB at a million
    records): a view fetches them when first decoded.  A pass over every batch (the log built again)
    fetches a few one at a time, then the rest in one query."""
    from camillo.session.reader import Reader

    path, vault, _ = new_vault
    for i in range(40):
        vault.append([NewRecord(type="message", conversation="c", role="user", text=f"garden note {i}")])
    vault.lock()
    monkeypatch.setattr(Reader, "SINGLE_READS", 8)
    with open_vault(path) as v:
        assert v.session.reader.decryptions == 0
        plain = [x for x in v.session.batches.values() if not x.has_control]
        assert len(plain) >= 40 and all(x.undecoded for x in plain), "the open read stored headers"
        statements: list[str] = []
        v.session.materialized.db.set_trace_callback(statements.append)
        headers = {x.id: x.header for x in v.session.batches.values()}
        v.session.materialized.db.set_trace_callback(None)
        rows = v.activity(limit=1000)
        single = [q for q in statements if q.startswith("SELECT batch FROM cache_batches WHERE id")]
        whole = [q for q in statements if q.startswith("SELECT id, batch FROM cache_batches")]
        assert len(single) <= 8 + 1 and len(whole) == 1, (len(single), len(whole))
        assert not any(x.undecoded for x in plain)
    with open_vault(path, cache=False) as fresh:
        assert [(r.batch, r.seq, r.writer, r.status) for r in fresh.activity(limit=1000)] == \
               [(r.batch, r.seq, r.writer, r.status) for r in rows]
        assert {b: fresh.session.batches[b].header for b in headers} == headers


def test_the_erasure_preview_reads_the_segments_of_its_record_not_every_segment(new_vault):
    """The erasure preview (what erasing a record would re-encrypt) found the segments holding the record's
    batch, and those under the same epochs, by reading every segment's list of batches and epoch, which the
    session then kept (1.1 s and 31 MiB at a million records).  The database finds them now; the figures are
    those of a pass over every segment."""
    path, vault, _ = new_vault
    for i in range(12):
        vault.append([NewRecord(type="message", text=f"garden note {i}")])
    vault.append([NewRecord(type="message", text="in the work compartment")], compartment="work")
    vault.lock()
    with open_vault(path) as v:
        target = next(r for r in v.timeline() if r.text == "garden note 5")
        statements: list[str] = []
        v.session.materialized.db.set_trace_callback(statements.append)
        preview = v.erasure_preview(target.id)
        v.session.materialized.db.set_trace_callback(None)
        every = [q for q in statements if "FROM cache_segments" in q and "WHERE" not in q.split("FROM cache_segments")[1]]
        assert not every, every
        assert "WHERE compartment IS NOT NULL" not in " ".join(statements)  # (not every segment's epoch)
        reader = v.session.reader
        lists = dict(reader.segment_batches.items())  # (the pass over every segment, as the preview was)
        record = v.session.materialized.record(target.id)
        segs = [n for n, bids in lists.items() if record.batch_id in bids]
        epochs = {reader.segment_epochs[n][1] for n in segs}
        affected = [n for n, (c, e) in reader.segment_epochs.items() if c == record.compartment_id and e in epochs]
        assert (preview.epochs, preview.segments, preview.batches) == (
            len(epochs), len(affected), len({b for n in affected for b in lists[n]}))
        assert preview.segments >= 12 and preview.compartment == "personal"


def test_the_activity_view_makes_the_rows_it_shows_and_decodes_no_other_batch(new_vault, monkeypatch, tmp_path):
    """The activity view lists the newest batches: it made a row of every batch, decoding each header and
    looking up each record one by one (15.4 s and 300 MiB more at a million records, for 500 rows).  It now
    orders the batches by the times of their stored headers, read in one pass that keeps none, and makes the
    rows it shows alone, each batch's records counted in one query; the rows are those of the whole list."""
    from camillo.recordviews import shown_ts

    path, vault, _ = new_vault
    for i in range(30):
        vault.append([NewRecord(type="message", conversation="c", role="user", text=f"garden note {i}")])
    vault.append([NewRecord(type="fact", key="user/city", value="Lisbon"),
                  NewRecord(type="message", text="and a note beside it")])
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as laptop:
        laptop.append([NewRecord(type="message", text="from the laptop")])
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path, cache=False) as fresh:  # (every view decoded: the whole list, as it was computed)
        views = fresh.session.batches
        order = sorted(views, key=lambda b: (-(shown_ts(views[b].header.ts) or 0), b))
        whole = [(r.batch, r.ts, r.writer, r.summary, r.records, r.status) for r in fresh.activity(limit=1000)]
        assert [r[0] for r in whole] == order and len(whole) >= 33
        assert any(r[3] == "1 fact, 1 message" for r in whole) and fresh.activity(limit=6) == fresh.activity()[:6]
    open_vault(path).lock()  # (the laptop's batch read into this installation's state)
    with open_vault(path) as v:
        plain = [x for x in v.session.batches.values() if not x.has_control]
        assert plain and all(x.undecoded for x in plain)
        statements: list[str] = []
        v.session.materialized.db.set_trace_callback(statements.append)
        shown = v.activity(limit=5)
        v.session.materialized.db.set_trace_callback(None)
        assert [(r.batch, r.ts, r.writer, r.summary, r.records, r.status) for r in shown] == whole[:5]
        decoded = [x for x in plain if not x.undecoded]
        assert {x.id for x in decoded} <= {r.batch for r in shown}, "a batch not shown was decoded"
        assert not [q for q in statements if q.startswith("SELECT kind, type FROM records WHERE id = ")]
        assert v.activity(limit=0) == []
        with pytest.raises(UsageError, match="must not be negative"):
            v.activity(limit=-1)


def test_a_warm_open_holds_one_object_for_each_value_many_batches_share(new_vault, monkeypatch, tmp_path):
    """A warm open builds a view per batch (100,000 at a million records) from rows that each bring
    their own copy of the writer, epoch and compartment: the views share one object per distinct
    (writer, epoch, compartment), the segments one (compartment, epoch) pair per distinct pair, and
    a batch without control records holds no stored control bytes and shares its list of absent
    records (62 of the open's 294 MiB at a million records, docs/benchmarks.md).  What they read is
    unchanged."""
    path, vault, _ = new_vault
    _fill(vault, 12)
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as other:  # a second writer
        for i in range(5):
            other.append([NewRecord(type="message", text=f"from the laptop {i}")])
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path):
        pass
    with open_vault(path) as v:
        reader = v.session.reader
        assert reader.decryptions == 0
        views = list(reader.batches.values())
        combos = {(x.writer_id, x.epoch_id, x.compartment_id) for x in views}
        assert len(combos) < len(views) / 2
        for attr in ("writer_id", "epoch_id", "compartment_id"):
            assert len({id(getattr(x, attr)) for x in views}) <= len(combos), f"one {attr} object per batch"
        assert len({x.writer_id for x in views}) >= 2
        refs = list(reader.segment_epochs.values())
        assert len({id(r) for r in refs}) == len(set(refs))
        plain = [x for x in views if not x.has_control]
        assert len(plain) >= 17 and all(x._controls == b"" for x in plain)
        assert len({id(x.records) for x in plain}) == len({len(x.records) for x in plain})
        assert fingerprint(v) == from_scratch(path)


def test_a_revocation_after_a_warm_open_decodes_no_batch_of_the_revoked_device(new_vault, tmp_path, monkeypatch):
    """Which of a revoked device's batches come after its revocation is decided on each batch's seq
    and compartment, which views read back from the state carry: its batches are not decoded (0.8 s of a
    revocation at a million records)."""
    path, vault, _ = new_vault
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as laptop:
        for i in range(8):
            laptop.append([NewRecord(type="message", conversation="c", role="user", text=f"laptop note {i}")])
        laptop_id = laptop.writer_id
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path):  # the laptop's batches read into the state
        pass
    with open_vault(path) as v:  # and read back from it
        v.revoke(v.session.roster.principals[laptop_id].name, reauth=Unlock.passphrase(PASSPHRASE))
        theirs = [x for x in v.session.batches.values() if x.writer_id == laptop_id and not x.has_control]
        decoded = [x for x in theirs if "header" in x.__dict__]  # (the top of its chain: the log's extension)
        assert len(theirs) >= 8 and len(decoded) <= 1, f"the revocation decoded {len(decoded)} of its batches"
        assert fingerprint(v) == from_scratch(path)


def test_a_full_text_index_of_an_earlier_version_is_replaced_and_built_again(new_vault):
    """Earlier versions kept the index with ``contentless_delete`` (deleted entries stayed in its pages
    until an erasure rewrote the whole index).  Such a state is brought to this version in place: the
    old index is dropped and built again when first needed; nothing else is read again."""
    path, vault, _ = new_vault
    _fill(vault)
    state = vault.session.reader.materialized
    db = state.db
    state.ensure_search()
    db.execute("DROP TABLE search")
    db.execute("CREATE VIRTUAL TABLE search USING fts5(body, content = '', contentless_delete = 1, "
               "tokenize = 'unicode61 remove_diacritics 2')")  # (empty, but marked as indexed to the top)
    state.commit()
    vault.lock()
    with open_vault(path) as v:
        assert v.session.reader.decryptions == 0
        sql = v.session.materialized.db.execute("SELECT sql FROM sqlite_master WHERE name = 'search'").fetchone()[0]
        assert "contentless_delete" not in sql
        assert [r.text for r in v.search("note 7")] == ["garden note 7"]


def _flip_pages(path: str, first: int) -> None:
    """Flip one byte in every page of the database from page ``first`` (1-based) on."""
    data = bytearray(open(path, "rb").read())
    for page in range(first - 1, len(data) // PAGE):
        data[page * PAGE + 2000] ^= 0x40
    open(path, "wb").write(bytes(data))


def test_a_tampered_state_is_discarded_and_rebuilt_from_the_vault(new_vault):
    path, vault, _ = new_vault
    _fill(vault)
    store = vault.session.local.cache_path(vault.writer_id)
    vault.lock()
    expected = from_scratch(path)
    _flip_pages(store, 2)  # everything but the first page: the open meets a page that does not authenticate
    with open_vault(path) as v:
        assert v.session.reader.decryptions > 0
        assert fingerprint(v) == expected
    with open_vault(path) as v:
        assert v.session.reader.decryptions == 0, "the rebuilt state was kept"
        assert fingerprint(v) == expected


def test_the_state_pages_are_authenticated_by_hmac_sha256_and_an_earlier_versions_state_is_converted_once(
        new_vault, monkeypatch):
    """The local state's pages carry HMAC-SHA256 tags (as strong as SQLCipher's default HMAC-SHA512,
    twice as fast with the processor's SHA-256 instructions: every page a warm open, a search or a
    commit touches): a reader with SHA-512 cannot open it.  A state an earlier version wrote, with
    HMAC-SHA512 pages, is copied once by the next open into one with HMAC-SHA256 pages (under the same
    page key, nothing read from the vault again), and not again after."""
    from camillo import cache as cache_mod
    from sqlcipher3 import dbapi2 as sqlite

    path, vault, _ = new_vault
    _fill(vault)
    store = vault.session.reader.store
    file, key = store.path, store.page_key
    vault.lock()
    expected = from_scratch(path)

    def reader(hmac: str):
        db = sqlite.connect(file)
        db.execute(f"PRAGMA key = \"x'{key.hex()}'\"")
        db.execute(f"PRAGMA cipher_hmac_algorithm = {hmac}")
        return db

    assert reader("HMAC_SHA256").execute("SELECT count(*) FROM records").fetchone()[0] > 30
    with pytest.raises(cache_mod.DatabaseError):
        reader("HMAC_SHA512").execute("SELECT count(*) FROM records").fetchone()

    # the same state as an earlier version wrote it: HMAC-SHA512 pages
    db = reader("HMAC_SHA256")
    db.execute("ATTACH DATABASE ? AS old KEY ?", (file + ".legacy", f"x'{key.hex()}'"))
    db.execute("PRAGMA old.cipher_hmac_algorithm = HMAC_SHA512")
    db.execute("SELECT sqlcipher_export('old')").fetchall()
    db.execute("DETACH DATABASE old")
    db.close()
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(file + suffix)
    os.replace(file + ".legacy", file)
    assert reader("HMAC_SHA512").execute("SELECT count(*) FROM records").fetchone()[0] > 30
    with open(file + cache_mod._EXPORTING, "wb") as fh:  # what a process killed while converting left
        fh.write(os.urandom(3 * PAGE))
    converted: list[str] = []
    real = cache_mod.Cache._reauthenticated
    monkeypatch.setattr(cache_mod.Cache, "_reauthenticated", lambda self, db: (converted.append(self.path),
                                                                              real(self, db))[1])
    with open_vault(path) as v:
        assert v.session.reader.decryptions == 0, "the earlier version's state was rebuilt, not converted"
        assert fingerprint(v) == expected
        v.append([NewRecord(type="message", text="one more garden note")])
    assert converted == [file]
    with pytest.raises(cache_mod.DatabaseError):
        reader("HMAC_SHA512").execute("SELECT count(*) FROM records").fetchone()
    assert not os.path.exists(file + cache_mod._EXPORTING)
    with open_vault(path) as v:
        assert v.session.reader.decryptions == 0 and "one more garden note" in {r.text for r in v.timeline()}
        assert fingerprint(v) == from_scratch(path)
    assert converted == [file], "converted again"


def test_a_damaged_page_met_after_the_open_is_never_used(new_vault):
    """A page read for the first time by a later query: the query fails naming the local state, the
    database is deleted on lock, and the next open reads the vault's files."""
    path, vault, _ = new_vault
    for i in range(60):  # enough text that the search index spans many pages
        vault.append([NewRecord(type="message", text=f"garden {i} " + "long text of a note " * 40)])
    store = vault.session.local.cache_path(vault.writer_id)
    vault.lock()
    expected = from_scratch(path)
    with open_vault(path) as v:
        assert v.session.reader.decryptions == 0
        v.session.materialized.db.execute("PRAGMA cache_size = 1")  # pages come from the disk again
        _flip_pages(store, 2)
        with pytest.raises(DamagedFile, match="local state .* is damaged"):
            v.search("garden")
    assert not os.path.exists(store)
    with open_vault(path) as v:
        assert v.session.reader.decryptions > 0
        assert fingerprint(v) == expected


def test_a_foreign_state_is_discarded(new_vault, tmp_path, monkeypatch):
    """Another device's database of this vault in its place (another vault's: see
    test_history_scenarios.test_cache_is_disposable_and_checked): its key does not open it, so it
    is deleted and the state is read from the vault."""
    path, vault, _ = new_vault
    _fill(vault, 5)
    store = vault.session.local.cache_path(vault.writer_id)
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as laptop:
        laptop_store = laptop.session.local.cache_path(laptop.writer_id)
    switch_home(monkeypatch, tmp_path / "home")
    shutil.copy(laptop_store, store)
    with open_vault(path) as v:
        assert v.session.reader.decryptions > 0
        assert fingerprint(v) == from_scratch(path)


def test_a_state_with_a_half_made_schema_is_discarded(new_vault):
    """What a process killed while the state database was being made left (a CI failure: the full-text
    index's shadow table without the index): discarded and rebuilt, never an error."""
    from camillo import cache as cache_mod
    from sqlcipher3 import dbapi2 as sqlite

    path, vault, _ = new_vault
    _fill(vault, 5)
    store = vault.session.reader.store
    key = store.page_key
    vault.lock()
    db = sqlite.connect(store.path)
    db.execute(f"PRAGMA key = \"x'{key.hex()}'\"")
    db.execute(f"PRAGMA cipher_hmac_algorithm = {cache_mod.STATE_HMAC}")
    db.execute("DROP TABLE search")
    db.execute("CREATE TABLE search_data(id INTEGER PRIMARY KEY, block BLOB)")
    db.commit()
    db.close()
    with open_vault(path) as v:
        assert v.session.reader.decryptions > 0
        assert fingerprint(v) == from_scratch(path)
        assert v.search("garden")


def test_the_state_database_takes_its_name_only_once_complete(new_vault, monkeypatch, tmp_path):
    """A first registration copies the state read in memory into a new database: made under another
    name and renamed when complete, so that a kill meanwhile leaves nothing to resume.  A new device
    key (an erasure rotates it) takes the old key's database over in place: its page key sealed to the
    new key, then renamed; the next open resumes from it under the new key."""
    from camillo import cache

    path, vault, _ = new_vault
    _fill(vault, 3)
    made = []
    real = cache.os.replace

    def replace(src, dst):  # (os itself: the other atomic writes of the installation come here too)
        if os.path.basename(dst) == "state.db":
            made.append((os.path.basename(src), os.path.exists(dst)))
        return real(src, dst)

    monkeypatch.setattr(cache.os, "replace", replace)
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path):  # registers: the state read so far is exported
        pass
    assert ("state.db.exporting", False) in made, made
    switch_home(monkeypatch, tmp_path / "home")
    made.clear()
    old = vault.session.reader.store.path
    vault.erase([vault.timeline()[0].id])
    new = vault.session.reader.store.path
    assert new != old and made == [("state.db", False)], made  # the old key's database, renamed
    assert not os.path.exists(old) and not os.path.exists(new + ".exporting")
    vault.lock()
    with open_vault(path) as v:
        assert v.session.reader.decryptions == 0, "the re-keyed state did not open under the new key"
        assert fingerprint(v) == from_scratch(path)


def _pages(path: str) -> list[bytes]:
    data = open(path, "rb").read()
    return [data[i:i + PAGE] for i in range(0, len(data), PAGE)]


def test_a_new_device_key_hands_the_state_over_without_re_encrypting_it(new_vault):
    """The state's page key is random and sealed beside the database to the actor's key: an erasure's
    key rotation seals it to the new key instead of re-encrypting every page (21 s at a million
    records).  Pages the erasure did not touch are the same bytes; the old key's sealed copy is
    deleted; a damaged or missing key file makes the state rebuilt from the vault, never an error."""
    path, vault, _ = new_vault
    _fill(vault, 40)
    reader = vault.session.reader
    reader.settle(force=True)
    reader.materialized.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    old = reader.store
    key = old.page_key
    sealed = open(old.path + ".key", "rb").read()
    assert len(key) == 32 and key not in sealed
    from camillo.keys import local_key
    assert key != local_key(vault.session.actor.signer.seed, "state-db", vault.session.vault_id)
    before = _pages(old.path)
    vault.erase([next(r.id for r in vault.timeline() if r.text == "garden note 7")])
    reader.settle(force=True)
    reader.materialized.db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    new = reader.store
    assert new.path != old.path and new.page_key == key, "the page key changed"
    assert not os.path.exists(old.path + ".key") and os.path.exists(new.path + ".key")
    assert open(new.path + ".key", "rb").read() != sealed  # sealed to the new key
    after = set(_pages(new.path))
    unchanged = sum(p in after for p in before)
    assert unchanged >= len(before) // 4, f"{unchanged} of {len(before)} pages unchanged: re-encrypted"
    vault.lock()
    with open_vault(path) as v:
        assert v.session.reader.decryptions == 0
        expected = fingerprint(v)
    for damage in ("flip", "delete"):
        if damage == "flip":
            data = bytearray(open(new.path + ".key", "rb").read())
            data[-5] ^= 1
            open(new.path + ".key", "wb").write(bytes(data))
        else:
            os.unlink(new.path + ".key")
        with open_vault(path) as v:
            assert v.session.reader.decryptions > 0, f"a {damage}d key file: the state was not rebuilt"
            assert "rebuilt" in v.session.cache.problem
            assert fingerprint(v) == expected


def test_a_second_process_of_the_installation_works_in_memory(new_vault):
    """One process at a time keeps an actor's database; another open of the same installation reads
    the vault into memory and leaves the database alone."""
    path, vault, _ = new_vault
    _fill(vault, 5)
    with open_vault(path) as second:
        assert second.session.cache is None and second.session.reader.store is None
        second.append([NewRecord(type="message", text="from the second process")])
    vault.refresh()
    vault.lock()
    with open_vault(path) as v:
        assert fingerprint(v) == from_scratch(path)


def test_no_plaintext_in_the_state_database_or_its_log(new_vault):
    path, vault, _ = new_vault
    marker = "MARKER-c41d-state-db"
    vault.append([NewRecord(type="message", text=f"text {marker}"), NewRecord(type="fact", key="user/x", value=marker)])
    vault.search(marker)  # the full-text index is built
    vault.save_cache()
    store = vault.session.local.cache_path(vault.writer_id)
    for f in (store, store + "-wal"):  # the write-ahead log is encrypted page by page too
        assert os.path.exists(f)
        assert marker.encode() not in open(f, "rb").read()
    vault.lock()


CHILD = textwrap.dedent("""
    import sys
    from camillo import NewRecord, Unlock, Vault, cache
    cache.COMMIT_AGE = float(sys.argv[2])
    v = Vault.open(sys.argv[1], Unlock.passphrase(sys.argv[3]))
    print("ready", flush=True)
    i = 0
    while True:
        i += 1
        v.append([NewRecord(type="message", conversation="c", role="user", text=f"garden kill {i}")])
        if i % 3 == 0:
            v.append([NewRecord(type="fact", key=f"user/k{i % 4}", value=i)])
        if i % 4 == 0:
            v.refresh()
""")


@pytest.mark.slow
def test_the_state_survives_kill_9_at_random_points_of_appends_and_refreshes(new_vault, tmp_path, monkeypatch):
    path, vault, _ = new_vault
    _fill(vault, 5)
    vault.lock()
    rng = random.Random(19)
    for round_ in range(8):
        # another device writes meanwhile, so the killed process also refreshes what it did not write
        switch_home(monkeypatch, tmp_path / "laptop")
        with open_vault(path) as laptop:
            laptop.append([NewRecord(type="message", text=f"laptop garden {round_}")])
            if round_ % 2:
                laptop.append([NewRecord(type="fact", key="user/k1", value=f"laptop {round_}")])
        switch_home(monkeypatch, tmp_path / "home")
        age = rng.choice(["0", "0.05", "2"])
        child = subprocess.Popen([sys.executable, "-c", CHILD, path, age, PASSPHRASE], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        try:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready", child.stderr.read() if child.stderr else ""
            try:
                child.wait(timeout=rng.uniform(0.05, 1.2))
                pytest.fail(f"the writing process ended by itself: {child.stderr.read() if child.stderr else ''}")
            except subprocess.TimeoutExpired:
                os.kill(child.pid, signal.SIGKILL)
        finally:
            child.kill()
            child.wait()
        with open_vault(path) as v:
            got = fingerprint(v)
        assert got == from_scratch(path), f"round {round_} (commit age {age})"


COLD_LOAD_KILLED = textwrap.dedent("""
    import os, signal, sys
    from camillo import Unlock, Vault, cache
    from camillo import state as state_mod
    cache.PAGE_CACHE_KIB = 16  # (four pages: the load's pages go to the write-ahead log before any commit)

    def killed(self, *args, **kwargs):  # the load is written, its rows valid, no validity pass yet
        self.flush()
        assert self._presumed and self.db.execute("SELECT min(valid) FROM records").fetchone()[0] == 1
        os.kill(os.getpid(), signal.SIGKILL)

    state_mod.State.materialize = killed
    Vault.open(sys.argv[1], Unlock.passphrase(sys.argv[2]))
""")


def test_a_cold_load_killed_before_its_validity_pass_leaves_nothing_of_its_rows(new_vault):
    """A cold load into the local state writes its rows valid before the pass that judges them
    (State.loading): a process killed between the two leaves none of them, although their pages
    reached the write-ahead log (the load is one transaction, never committed half-way); the next
    open reads the vault again and computes what a full recomputation does."""
    from camillo import Authority

    path, vault, _ = new_vault
    _fill(vault, 12)
    vault.append([NewRecord(type="message", text="a web page said so", role="web")])
    web = next(r for r in vault.timeline() if r.text == "a web page said so")
    vault.append([NewRecord(type="fact", key="user/bank", value="Evil Bank", authority=Authority.OBSERVED,
                            sources=[web.id])])  # rejected: above its sources
    store = vault.session.local.cache_path(vault.writer_id)
    vault.lock()
    for f in glob.glob(store + "*"):
        os.remove(f)
    child = subprocess.run([sys.executable, "-c", COLD_LOAD_KILLED, path, PASSPHRASE], capture_output=True,
                           text=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert os.path.getsize(store + "-wal") > 8 * PAGE, "the load's pages did not reach the write-ahead log"
    with open_vault(path) as v:
        assert v.session.reader.decryptions > 0  # (nothing of the load was kept: read again)
        assert fingerprint(v) == from_scratch(path)


def _counting_signature_checks(monkeypatch, labels=(b"vmem/v1/control-sig\x00", b"vmem/v1/pop")):
    """Count the Ed25519 verifications of control records' inner signatures (and of proofs of
    possession), wherever they are made from."""
    from camillo import control, primitives, records

    seen: list[bytes] = []
    real = primitives.verify_signature

    def counted(alg, public, message, signature):
        if message.startswith(labels):
            seen.append(message)
        return real(alg, public, message, signature)

    for module in (primitives, records, control):
        monkeypatch.setattr(module, "verify_signature", counted)  # (the memo's: primitives.verify_signature)
    return seen


def test_a_warm_open_verifies_no_inner_signature_of_a_control_record_it_verified_before(
        new_vault, monkeypatch, tmp_path):
    """Issue 19: the roster is rebuilt from the control records at every open; their inner signatures
    that verified once are remembered in the local state (camillo.memos.SignatureMemo), those of the
    control records read from their segments in a session too (session.views.ReadView), so the first
    warm open after the one that read a second device's batches and a grant verifies none of them
    again, and computes the same state as a full recomputation."""
    path, vault, _ = new_vault
    _fill(vault, 3)
    vault.create_grant("helper", {"personal": "read"}, str(tmp_path / "helper.grant"))
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as lap:  # a second device: its certificate and its proof of possession
        lap.append([NewRecord(type="message", text="from the laptop")])
    switch_home(monkeypatch, tmp_path / "home")
    seen = _counting_signature_checks(monkeypatch)
    with open_vault(path) as v:  # reads the laptop's batches, verifying their inner signatures once
        assert v.session.reader.decryptions > 0
    assert seen
    seen.clear()
    with open_vault(path) as v:
        assert v.session.reader.decryptions == 0
        assert len(v.devices()) == 2 and [g.agent for g in v.grants()] == ["helper"]
        assert seen == [], f"{len(seen)} inner signatures verified again"
        assert fingerprint(v) == from_scratch(path)
        stored = v.session.materialized.cache_db.execute("SELECT count(*) FROM cache_signatures").fetchone()[0]
        assert stored >= 4  # the genesis's, the certificate's and its proof of possession, the grant's, ...


def test_the_memo_of_verified_signatures_never_takes_a_changed_key_message_or_signature(monkeypatch):
    """A signature is remembered only once it verified, as a digest of exactly its key, message and
    signature: the same ones are not verified again (by a later open too), and a changed signature,
    message or key is verified for real (and refused).  A memo whose database is replaced reads the
    new one."""
    from camillo import encoding, ids, primitives, records
    from camillo.memos import SignatureMemo
    from camillo.primitives import SIG_ED25519, SigningKey
    from camillo.records import F, Kind
    from camillo.state import State

    state = State()
    signer, other = SigningKey.from_seed(b"\x01" * 32), SigningKey.from_seed(b"\x02" * 32)
    wid = ids.writer_id(signer.alg, signer.public)
    rec = records.decode_record(records.encode_record(Kind.POLICY, wid, body={0: "enabled"}, signers=[signer]))
    message = records.signing_message(records.CONTROL_SIG_LABEL, rec.fields, F.SIGS)
    sig = rec.sigs[0][2]
    calls = []
    real = primitives.verify_signature
    monkeypatch.setattr(primitives, "verify_signature", lambda *a: calls.append(a) or real(*a))

    memo = SignatureMemo(lambda: state.cache_db)
    assert records.verify_inner_signatures(rec, {wid: signer.public}.get, memo.verify) == ([wid], [])
    assert records.verify_inner_signatures(rec, {wid: signer.public}.get, memo.verify) == ([wid], [])
    assert len(calls) == 1
    later = SignatureMemo(lambda: state.cache_db)  # what the next open reads from the local state
    assert later.verify(SIG_ED25519, signer.public, message, sig) and len(calls) == 1

    bad = bytearray(sig)
    bad[0] ^= 1
    fields = dict(rec.fields)
    fields[F.SIGS] = [[wid, SIG_ED25519, bytes(bad)]]
    with pytest.raises(DamagedFile):
        records.verify_inner_signatures(records.decode_record(encoding.encode(fields)), {wid: signer.public}.get,
                                        later.verify)
    fields = dict(rec.fields)
    fields[F.BODY] = {0: "disabled"}
    with pytest.raises(DamagedFile):
        records.verify_inner_signatures(records.decode_record(encoding.encode(fields)), {wid: signer.public}.get,
                                        later.verify)
    assert not later.verify(SIG_ED25519, other.public, message, sig)
    assert not later.verify(SIG_ED25519, signer.public, message + b"x", sig)
    assert not later.verify(SIG_ED25519, signer.public, message, bytes(bad))
    assert len(calls) == 6, "each changed one was verified for real"
    assert state.cache_db.execute("SELECT count(*) FROM cache_signatures").fetchone()[0] == 1, "only what verified"

    # a memo over the reader's state (session.reader): when the state is another database (started
    # again empty), what it remembers is read from that one, and what verifies is written there
    current = [state]
    memo = SignatureMemo(lambda: current[0].cache_db)
    assert memo.verify(SIG_ED25519, signer.public, message, sig) and len(calls) == 6
    current[0] = State()
    assert memo.verify(SIG_ED25519, signer.public, message, sig) and len(calls) == 7
    assert current[0].cache_db.execute("SELECT count(*) FROM cache_signatures").fetchone()[0] == 1


def test_the_memo_of_a_complete_erasure_check_holds_only_for_its_fingerprint_and_notes_every_segment_stored():
    """ErasureMemo: a finding is kept for the fingerprint it was made with (the erasures, the destroyed
    epochs, the epochs whose keys are here, the unreadable segments: any change, and the next check looks
    at every segment); while it is kept, every segment stored (a new one, one stored again) is noted, by
    whatever code stores it; a state that starts again holds none."""
    from camillo.memos import ErasureMemo
    from camillo.state import State

    db = State().cache_db
    memo = ErasureMemo(db)
    comp, erase_id = b"c" * 16, b"e" * 32
    fp = memo.fingerprint([erase_id], [(comp, b"d" * 16)], [(comp, b"k" * 16)], [])
    store = "INSERT OR REPLACE INTO cache_segments(name, batches) VALUES(?, x'80')"
    db.execute(store, ("seg/a",))
    assert memo.since(fp) is None
    memo.found_complete(fp)
    assert memo.since(fp) == set()
    for other in (memo.fingerprint([erase_id, b"f" * 32], [(comp, b"d" * 16)], [(comp, b"k" * 16)], []),
                  memo.fingerprint([erase_id], [], [(comp, b"k" * 16)], []),
                  memo.fingerprint([erase_id], [(comp, b"d" * 16)], [(comp, b"k" * 16), (comp, b"n" * 16)], []),
                  memo.fingerprint([erase_id], [(comp, b"d" * 16)], [(comp, b"k" * 16)], ["seg/u"])):
        assert other != fp and memo.since(other) is None
    db.execute(store, ("seg/b",))
    db.execute(store, ("seg/a",))  # stored again (sealed again under another epoch: a new row)
    assert memo.since(fp) == {"seg/a", "seg/b"}
    memo.found_complete(fp)
    assert memo.since(fp) == set()
    memo.drop()
    db.execute(store, ("seg/c",))
    assert memo.since(fp) is None
    memo.found_complete(fp)
    assert memo.since(fp) == set(), "nothing noted while no finding was kept: the next check looked at every segment"
    assert ErasureMemo(State().cache_db).since(fp) is None


def test_the_certificates_an_append_grant_is_sent_come_from_the_control_batches_alone(new_vault, monkeypatch, tmp_path):
    """Issue 19: a key change (a passphrase change at a million records) sends each append grant the
    chain of owner certificates; it is found among the batches holding control records, with no view
    made of the plain ones (100,000 at a million records: 0.4 s of the passphrase change), and is the
    chain a pass over every batch finds."""
    from camillo.ops.grant_trust import certificate_chain
    from camillo.records import Kind, decode_record

    path, vault, _ = new_vault
    _fill(vault, 20)
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as lap:  # a second owner device: its certificate is in the chain
        lap.append([NewRecord(type="message", text="from the laptop")])
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path):  # (takes the laptop's batches in)
        pass
    with open_vault(path) as v:  # a warm open of an unchanged folder
        batches = v.session.reader.batches
        special = len(batches.held)
        assert not batches.every
        chain = certificate_chain(v.session)
        assert chain and {decode_record(raw).kind for raw in chain} <= {Kind.DEVICE_CERT, Kind.CRED_ANCHOR}
        assert not batches.every and len(batches.held) == special, "views were made of plain batches"
        assert len(batches) > 3 * special
        everything = {v.id: v for v in batches.values()}  # the same chain over every batch
        v.session.reader.batches = everything
        try:
            assert certificate_chain(v.session) == chain
        finally:
            v.session.reader.batches = batches


def test_a_passphrase_change_makes_views_only_of_the_batches_its_new_and_revoked_credential_can_move(
        new_vault, monkeypatch, tmp_path):
    """Issue 19: a passphrase change replaces the passphrase credential and revokes the old one, so
    the roster's fingerprint changes; it is computed again over the batches that can move it and
    those of the writers whose principal or revocation changed (the two credentials': a few control
    batches).  Every other accepted batch keeps its verdict and no view is made of it (at a million
    records, views of 100,000 batches were 0.73 s of the 0.88 s the change took).  The state, the
    log and the flags equal a full computation's, and a later device revocation (whose batches are
    among those looked at) still excludes what came after it."""
    from .test_incremental import from_scratch_with

    new = "a different passphrase entirely"
    path, vault, _ = new_vault
    _fill(vault, 20)
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as lap:  # a second device's plain batches
        for i in range(6):
            lap.append([NewRecord(type="message", text=f"garden from the laptop {i}")])
        laptop_id = lap.writer_id
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path):  # (takes the laptop's batches in)
        pass
    with open_vault(path) as v:  # a warm open of an unchanged folder
        reader = v.session.reader
        plain = {b for (b,) in reader.materialized.db.execute(
            "SELECT id FROM cache_batches WHERE control = 0 AND accepted = 1")}
        assert len(plain) >= 26
        tops = {b for (b,) in reader.materialized.db.execute(  # (each chain's last batch before the change)
            "SELECT id FROM cache_batches c WHERE seq = (SELECT max(seq) FROM cache_batches d "
            "WHERE d.writer = c.writer AND d.compartment = c.compartment)")}
        v.change_passphrase(new, reauth=Unlock.passphrase(PASSPHRASE))
        assert not reader.batches.every, "a view was made of every batch"
        made = reader.batches.held.keys() & plain
        assert made <= tops, "views were made of plain batches nobody moved (but the tops of chains, for the log)"
        assert fingerprint(v) == from_scratch_with(path, new)
        assert v.session.log == _log_as_built(v)
        plan = " ".join(str(r) for r in reader.materialized.db.execute("EXPLAIN QUERY PLAN " + Reader.ACCEPTED_QUERY))
        assert "COVERING INDEX cache_batches_accepted" in plan, plan  # (the accepted ids alone: 125 -> 36 ms at 1M)
    with Vault.open(path, Unlock.passphrase(new)) as v:
        v.revoke(v.session.roster.principals[laptop_id].name, reauth=Unlock.passphrase(new))
        assert fingerprint(v) == from_scratch_with(path, new)
    with Vault.open(path, Unlock.passphrase(new)) as v:  # the flags stored are those a full computation gives
        flags = dict(v.session.reader.materialized.db.execute("SELECT id, accepted FROM cache_batches").fetchall())
    with Vault.open(path, Unlock.passphrase(new), cache=False, register=False) as fresh:
        full = {b: int(b in fresh.session.log.accepted) for b in fresh.session.batches}
    assert flags == full


def test_revoking_the_device_that_compacted_after_a_warm_open_equals_a_full_computation(
        new_vault, monkeypatch, tmp_path):
    """The roster after a key change keeps the verdicts of the batches whose writer did not move only
    while the compactions that vouch for batches are the same (session.resume.moved_writers).
    Revoking the device that compacted, after a warm open, takes away its word for what it listed
    and excludes its own batches: the state, the log and the stored acceptance flags are then those
    a full computation gives."""
    from .test_incremental import from_scratch_with

    path, vault, _ = new_vault
    _fill(vault, 6)
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as lap:  # the laptop writes, then compacts what everyone wrote
        for i in range(5):
            lap.append([NewRecord(type="message", text=f"garden from the laptop {i}")])
        lap.compact(prune_now=True)
        laptop_id = lap.writer_id
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path):  # (takes the compaction in)
        pass
    with open_vault(path) as v:  # a warm open, then the laptop is lost
        assert not v.session.reader.batches.every
        v.revoke(v.session.roster.principals[laptop_id].name, reauth=Unlock.passphrase(PASSPHRASE))
        assert fingerprint(v) == from_scratch_with(path, PASSPHRASE)
        assert v.session.log == _log_as_built(v)
    with open_vault(path) as v:
        flags = dict(v.session.reader.materialized.db.execute("SELECT id, accepted FROM cache_batches").fetchall())
        assert fingerprint(v) == from_scratch_with(path, PASSPHRASE)
    with open_vault(path, cache=False, register=False) as fresh:
        full = {b: int(b in fresh.session.log.accepted) for b in fresh.session.batches}
    assert flags == full


def test_a_wide_commit_leaves_the_copy_of_its_log_to_a_thread_of_its_own(new_vault, monkeypatch, tmp_path):
    """Issue 19 (merge to the first page): a refresh that read many segments commits without copying
    its write-ahead log into the database file (0.5 s of a merge at a million records); a thread of
    its own does, on a connection of its own, after the commit returned, while the owner's
    connection leaves the log alone; the owner waits for it before closing, and its commits
    checkpoint again after it.  The state is the one a cold open computes."""
    import threading

    from camillo import cache, state

    path = _six_batches_from_another_device(new_vault, monkeypatch, tmp_path)
    monkeypatch.setattr(cache, "WIDE_SEGMENTS", 5)
    returned = threading.Event()
    ran: list[tuple[str, bool, object]] = []
    real_commit, real_checkpointer = state.State.commit, cache.Cache.checkpointer

    def commit(self):
        real_commit(self)
        returned.set()

    def checkpointer(self):
        real = real_checkpointer(self)

        def checkpoint():
            committed = returned.wait(30)  # (held until the commit that started it returned)
            ran.append((threading.current_thread().name, committed, real()))

        return checkpoint

    monkeypatch.setattr(state.State, "commit", commit)
    monkeypatch.setattr(cache.Cache, "checkpointer", checkpointer)
    with open_vault(path) as v:
        st = v.session.reader.materialized
        assert v.session.reader.decryptions >= 5
        st.commit()
        st.settle()
        assert len(ran) == 1, ran
        name, committed, row = ran[0]
        assert name != threading.main_thread().name and committed, "the log was copied before the commit returned"
        assert row is not None and row[0] == 0 and row[1] == row[2] > 0, row  # (every page of the log copied)
        assert st.db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == cache.AUTOCHECKPOINT_PAGES
        assert fingerprint(v) == from_scratch(path)
        v.append([NewRecord(type="message", text="one more")])
        v.refresh()
        store = v.session.reader.store
        checkpoint = store.checkpointer()
    assert len(ran) == 1, "a commit of a few rows copied its log on a thread of its own"
    assert st._checkpoint is None, "the closed state still holds the page key (in its checkpointer)"
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(store.path + suffix):
            os.unlink(store.path + suffix)
    assert checkpoint() is None and not os.path.exists(store.path), "a checkpoint made a database that was gone"


def test_a_wide_commit_that_fails_leaves_the_owners_commits_checkpointing():
    """A wide commit turns SQLite's own checkpoint off for the thread it starts; when the commit
    itself fails (a full disk), no thread is started and the owner's commits checkpoint again."""
    from camillo import cache
    from camillo.state import State

    started: list[int] = []

    class FailingCommit:
        """The connection, but for a commit that fails once (as on a full disk)."""

        def __init__(self, db):
            self.db, self.fail = db, False

        def __getattr__(self, name):
            return getattr(self.db, name)

        def commit(self):
            if self.fail:
                self.fail = False
                raise cache.sqlite.OperationalError("database or disk is full")
            self.db.commit()

    db = FailingCommit(cache.memory_database())
    state = State(db, lambda: started.append(1))
    state.widen_page_cache()
    db.execute("INSERT INTO cache_meta(key, value) VALUES('k', x'00')")
    assert db.in_transaction
    db.fail = True
    with pytest.raises(cache.sqlite.OperationalError):
        state.commit()
    assert started == [] and db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == cache.AUTOCHECKPOINT_PAGES
    state.commit()  # (the same rows, on a disk with room again: a thread copies the log)
    state.settle()
    assert started == [1] and db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == cache.AUTOCHECKPOINT_PAGES


def test_a_wide_commit_without_a_thread_to_be_had_checkpoints_on_the_owners_commits(monkeypatch):
    """When no thread can be started for the copy of the log (RuntimeError: the process has none
    left), the commit, which succeeded, returns, and the owner's commits checkpoint again."""
    import threading

    from camillo import cache
    from camillo.state import State

    def no_thread(self):
        raise RuntimeError("can't start new thread")

    started: list[int] = []
    state = State(cache.memory_database(), lambda: started.append(1))
    db = state.db
    state.widen_page_cache()
    db.execute("INSERT INTO cache_meta(key, value) VALUES('k', x'00')")
    monkeypatch.setattr(threading.Thread, "start", no_thread)
    state.commit()
    assert not db.in_transaction and started == []
    assert db.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == cache.AUTOCHECKPOINT_PAGES
    db.execute("INSERT INTO cache_meta(key, value) VALUES('j', x'00')")
    state.commit()
    state.close()


def test_bytes_and_none_are_bound_through_adapters_as_a_blob_and_null():
    """sqlcipher3 binds a bytes or a None parameter through its slow path (an adapter looked for, then
    two missing attributes: 2 us a parameter; a cold load's row inserts at a million records, 25 s -> 13 s)
    unless an adapter is registered for its type; camillo.cache registers one for each that
    returns the value itself, which binds as a blob and NULL, as without it."""
    from camillo import cache

    registered = cache.sqlite.adapters
    assert (bytes, cache.sqlite.PrepareProtocol) in registered
    assert (type(None), cache.sqlite.PrepareProtocol) in registered
    db = cache.memory_database()
    db.execute("CREATE TABLE t(a, b, c)")
    db.execute("INSERT INTO t VALUES(?, ?, ?)", (b"\x00id", None, bytearray(b"x")))
    db.executemany("INSERT INTO t VALUES(?, ?, ?)", [(b"", None, None)])
    assert db.execute("SELECT typeof(a), a, typeof(b), typeof(c) FROM t ORDER BY rowid").fetchall() == [
        ("blob", b"\x00id", "null", "blob"), ("blob", b"", "null", "null")]
    assert db.execute("SELECT count(*) FROM t WHERE a = ? AND b IS ?", (b"\x00id", None)).fetchone() == (1,)


def _fts5_segments(db) -> int:
    """How many segments the full-text index's structure record lists (FTS5's %_data row 10: a 4-byte
    cookie, then the number of levels and of segments as varints)."""
    block = db.execute("SELECT block FROM search_data WHERE id = 10").fetchone()[0]
    pos, numbers = 4, []
    for _ in range(2):
        value = 0
        while True:
            byte = block[pos]
            pos += 1
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        numbers.append(value)
    return numbers[1]


def test_the_search_index_a_cold_load_leaves_to_build_is_built_with_its_own_page_cache(new_vault, monkeypatch):
    """A cold load narrows its page cache once its rows are written (State._loaded) while its commit
    stays a wide one; the full-text index built after it (here the first search of an open without
    local state, which never commits) gets a cache of its own for a build of more than one chunk
    (SEARCH_BUILD_CACHE_KIB: the build was 44.6 s with the narrow one at 1M), not the wide one (the
    session's peak: at 1M, 197 MiB above what the open left, over the open's own peak), and the cache
    it found afterwards."""
    from camillo import cache
    from camillo import state as state_mod

    path, vault, _ = new_vault
    _fill(vault)
    vault.lock()
    monkeypatch.setattr(cache, "WIDE_SEGMENTS", 1)  # (this small load widens the page cache)
    monkeypatch.setattr(state_mod.State, "_INDEX_CHUNK", 5)
    widths: list[int] = []
    real = state_mod.encoding

    class Watched:  # the cache's width each time a chunk of the index is noted
        def __getattr__(self, name):
            return getattr(real, name)

        def encode(self, value):
            widths.append(db.execute("PRAGMA cache_size").fetchone()[0])
            return real.encode(value)

    with open_vault(path, cache=False) as v:
        db = v.session.materialized.cache_db
        assert db.execute("PRAGMA cache_size").fetchone()[0] == -cache.PAGE_CACHE_KIB  # (narrowed after the load)
        monkeypatch.setattr(state_mod, "encoding", Watched())
        assert [r.text for r in v.search("note 7")] == ["garden note 7"]
        assert len(widths) > 1 and set(widths) == {-cache.SEARCH_BUILD_CACHE_KIB}
        assert cache.PAGE_CACHE_KIB < cache.SEARCH_BUILD_CACHE_KIB < cache.WIDE_PAGE_CACHE_KIB
        assert db.execute("PRAGMA cache_size").fetchone()[0] == -cache.PAGE_CACHE_KIB


def test_the_search_index_of_rows_not_in_time_order_is_written_as_one_segment():
    """The full-text index's rowid is a record's time above its row number (cache.SEARCH_KEY); a cold load's
    rows are not in time order, and FTS5 writes out the terms it holds in memory whenever a rowid is not
    above the last one: building the index in the order of the rows made a segment every few rows (the
    lock after a cold open at 1M, which builds it, 45.8 s; 12.9 s with this and a wide page cache).  Built
    in the index's own order, a chunk of rows is one segment."""
    import random

    from camillo.records import Kind
    from camillo.state import State

    state = State()
    times = random.Random(7)
    state.db.executemany(
        "INSERT INTO records(id, batch, idx, compartment, writer, kind, ts, text, raw) VALUES(?,?,?,?,?,?,?,?,?)",
        [(i.to_bytes(32, "big"), b"b" * 32, 0, b"c" * 16, b"w" * 32, int(Kind.NOTE),
          times.randrange(1_600_000_000, 1_700_000_000), f"garden {i % 50} note {i}", b"r") for i in range(5000)])
    state.ensure_search()
    state.db.commit()
    assert _fts5_segments(state.db) == 1
    assert {r for (r,) in state.db.execute("SELECT rowid FROM search WHERE search MATCH 'note'")} == {
        (ts << 30) | row for row, ts in state.db.execute("SELECT rowid, ts FROM records")}


def test_a_cold_load_builds_the_index_of_ids_after_its_rows_and_stages_a_copied_control_record_once(
        new_vault, monkeypatch):
    """Issue 19: a cold load writes its rows with no index of ids beside them (a million random ids written
    into it as they went held about 90 MiB of a cold open's pages) and builds it once after them
    (camillo.cache.build_records_id), with the load's page cache no wider than any other.  A compaction
    copies the control records into its batches: the load stages each once (a million records' compacted
    vault held 202 twice), so the index is built at the first try, not after a pass that deletes the
    second rows; either way the state is the one a load that keeps the index row by row gives."""
    from camillo import cache
    from camillo import state as state_mod

    path, vault, _ = new_vault
    _fill(vault)
    vault.compact(prune_now=True)
    vault.append([NewRecord(type="message", conversation="c", role="user", text="after the compaction")])
    vault.lock()
    monkeypatch.setattr(cache, "WIDE_SEGMENTS", 1)  # (this small load is a wide one)
    real_build, real_flush = cache.build_records_id, state_mod.State.flush
    at_build: list[tuple[int, list[str]]] = []  # (rows of an id already written, unique indexes of records)
    during: list[tuple[list[str], int]] = []  # (indexes of records, page cache) at each write of rows

    def unique_indexes(db) -> list[str]:
        return sorted(r[1] for r in db.execute("PRAGMA index_list(records)") if r[2])

    def build(db):
        if db.execute("SELECT 1 FROM records LIMIT 1").fetchone() is not None:  # (not a new state's schema)
            at_build.append((db.execute("SELECT count(*) - count(DISTINCT id) FROM records").fetchone()[0],
                             unique_indexes(db)))
        real_build(db)

    def flush(self):
        real_flush(self)
        if self._load_controls is not None:  # (inside the load)
            during.append((unique_indexes(self._db), self._db.execute("PRAGMA cache_size").fetchone()[0]))

    monkeypatch.setattr(cache, "build_records_id", build)
    monkeypatch.setattr(state_mod.State, "flush", flush)
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), cache=False) as v:
        db = v.session.materialized.db
        assert unique_indexes(db) == ["records_id"] and cache.records_id_own(db)
        assert db.execute("SELECT count(*) - count(DISTINCT id) FROM records").fetchone()[0] == 0
        expected = fingerprint(v)
    assert at_build == [(0, [])]  # built once, after the rows, at the first try
    assert during and all(d == ([], -cache.PAGE_CACHE_KIB) for d in during)

    # the copies are there: staged twice, the index is built after a pass that keeps the first of each
    at_build.clear()
    monkeypatch.setattr(state_mod, "CONTROL_KINDS", frozenset())
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), cache=False) as v:
        assert fingerprint(v) == expected
    assert at_build and at_build[0][0] > 0
    monkeypatch.undo()
    # a load that keeps the index of ids row by row (INSERT OR IGNORE keeping the first)
    monkeypatch.setattr(state_mod, "indexes_deferred", lambda db, flush, later: contextlib.nullcontext())
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), cache=False) as v:
        assert fingerprint(v) == expected


def _cold_load(schema: str, ops) -> tuple[list, list, list, list, list]:
    """Run ``ops`` as a cold load into an empty state of ``schema``: ("stage", batch, [(id, kind or None
    (erased), refers)]), ("forget", batch), ("flush",), ("fail",) (the load raises there).  The
    records' rows in order, the references, the batches that staged erased entries, and the rows and
    references still staged."""
    from types import SimpleNamespace

    from camillo import cache
    from camillo import state as state_mod

    saved = cache.SCHEMA
    cache.SCHEMA = schema
    try:
        state = state_mod.State(cache.memory_database())
    finally:
        cache.SCHEMA = saved
    state._FLUSH_ROWS = 3
    with contextlib.suppress(RuntimeError), state.loading():
        for op in ops:
            if op[0] == "fail":
                raise RuntimeError("the load fails half-way")
            if op[0] == "flush":
                state.flush()
            elif op[0] == "forget":
                state.forget_batches([op[1]])
            else:
                _, bid, entries = op
                view = SimpleNamespace(id=bid, header=SimpleNamespace(
                    seq=1, frontier={}, compartment_id=b"c", writer_id=b"w", records=[e[0] for e in entries]))
                fields = [None if kind is None else (b"a", kind, "t", None, 1, 5, None, None, "x",
                                                     [b"ref"] if refers else None, None, None, None)
                          for _rid, kind, refers in entries]
                state.stage_fields(view, fields, [None if f is None else b"raw" for f in fields])
    db = state.cache_db  # (nothing flushed after the load: what it left staged is compared too)
    return (db.execute("SELECT id, batch, idx, kind, erased FROM records ORDER BY rowid").fetchall(),
            sorted(db.execute("SELECT record, ref, how FROM refs").fetchall()), sorted(state._staged_erased),
            state._rows, state._refs)


_LOAD_IDS = [bytes([i]) * 4 for i in range(5)]
assert Kind.GRANT in CONTROL_KINDS and Kind.NOTE not in CONTROL_KINDS
_LOAD_STAGE = st.tuples(st.just("stage"), st.sampled_from([b"A", b"B", b"C"]), st.lists(
    st.tuples(st.sampled_from(_LOAD_IDS), st.sampled_from([None, int(Kind.NOTE), int(Kind.GRANT)]), st.booleans()),
    min_size=1, max_size=4))
_LOAD_OPS = st.one_of(_LOAD_STAGE, _LOAD_STAGE, _LOAD_STAGE, st.tuples(st.just("forget"), st.sampled_from([b"A", b"B", b"C"])),
                      st.tuples(st.just("flush")), st.tuples(st.just("fail")))


@settings(max_examples=200, deadline=None)
@given(ops=st.lists(_LOAD_OPS, max_size=10))
def test_a_cold_load_with_its_index_of_ids_built_after_it_gives_what_one_with_the_index_gives(ops):
    """A cold load into this revision's state (the index of ids built after the rows, a control record
    staged once, the rows of an id written twice reduced to the first) leaves the rows, in their order,
    the references and the erased entries that a load into an earlier revision's state leaves (the index
    there all along, INSERT OR IGNORE keeping the first row of an id), whatever is staged twice, erased,
    forgotten and staged again, or fails half-way (found by review: a copied control record's references
    left unwritten, a forgotten batch's rows)."""
    from camillo import cache

    assert _cold_load(cache.SCHEMA, ops) == _cold_load(_earlier_schema(), ops)


def test_the_rows_of_the_batches_and_segments_read_are_written_a_chunk_at_a_time_and_seen_by_any_read(
        new_vault, monkeypatch):
    """Issue 19: a loose vault's segment holds one batch, and a cold open of a million records spent 3.3 s of
    its reading process on a statement for each segment's rows of cache_batches and cache_segments.  They are
    kept and written a chunk at a time (State.store_read, cache.ReadRows); whatever reads those tables (cache_db, db, a
    commit) sees every row read before it, and the state is the one a row-by-row read gives."""
    from camillo import cache
    from camillo import state as state_mod

    path, vault, _ = new_vault
    _fill(vault, 30)  # (a segment for each append)
    vault.lock()
    monkeypatch.setattr(cache.ReadRows, "ROWS", 1)
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), cache=False) as v:
        expected = fingerprint(v)
        segments = v.session.materialized.cache_db.execute("SELECT count(*) FROM cache_segments").fetchone()[0]
        stored = sorted(v.session.materialized.cache_db.execute("SELECT * FROM cache_batches"))
    assert segments > 30
    monkeypatch.setattr(cache.ReadRows, "ROWS", 7)
    writes: list[tuple[int, int]] = []  # (batch rows, segment rows) of each write
    real_write = cache.ReadRows.write

    def write(self, db):
        writes.append((len(self.batches), len(self.segments)))
        real_write(self, db)

    monkeypatch.setattr(cache.ReadRows, "write", write)
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), cache=False) as v:
        assert fingerprint(v) == expected
        assert sorted(v.session.materialized.cache_db.execute("SELECT * FROM cache_batches")) == stored
    assert sum(n for _, n in writes) == segments and len(writes) <= segments // 7 + 3

    # no statement on those tables runs while rows are kept, but the one that writes them (every statement
    # of the open traced; found by review: a check that reads through cache_db writes the rows itself)
    monkeypatch.undo()
    monkeypatch.setattr(cache.ReadRows, "ROWS", 1 << 30)  # (kept until something else writes them)
    states: list[state_mod.State] = []
    met: list[str] = []
    written: list[bool] = []  # (each statement traced: whether it wrote rows of cache_batches)
    real_init = state_mod.State.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        states.append(self)
        def traced(sql, state=self):
            written.append(sql.startswith("INSERT OR REPLACE INTO cache_batches"))
            if state._read and ("cache_batches" in sql or "cache_segments" in sql) and not sql.startswith(
                    "INSERT OR REPLACE INTO cache_"):
                met.append(sql)

        self._db.set_trace_callback(traced)

    monkeypatch.setattr(state_mod.State, "__init__", init)
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), cache=False) as v:
        assert fingerprint(v) == expected
    assert states and any(written) and met == []


def test_the_rows_of_the_batches_and_segments_read_are_written_before_any_access_uses_them(tmp_path):
    """Found by review of the test above (whose reads, through cache_db, write the rows themselves): each
    way into the database writes the rows kept (State.store_read) first: cache_db, db, flush (and so a
    commit), and the flags written over them; and a write that fails keeps them, written by the next
    access (a full disk, simulated by a page limit)."""
    from camillo import cache
    from camillo import state as state_mod

    def held_rows(state, n):
        for i in range(n):
            bid = i.to_bytes(32, "big")
            state.store_read([(bid, f"seg/{i}", b"e", b"h" * 2000, b"c", b"w", 1, b"c", 0)], (f"seg/{i}", b"ids", b"c", b"e"))

    def count(db, table):
        return db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]

    for access in ("cache_db", "db", "flush", "flags"):
        state = state_mod.State(cache.memory_database())
        held_rows(state, 3)
        assert state._read
        if access == "flags":
            state.write_flags([(1, 0, 1, (2).to_bytes(32, "big"))])
        elif access == "flush":
            state.flush()
        db = getattr(state, access) if access in ("cache_db", "db") else state._db
        assert not state._read, access
        assert (count(db, "cache_batches"), count(db, "cache_segments")) == (3, 3), access
        if access == "flags":  # (the flags land on the row written first, not before it)
            assert db.execute("SELECT sig_ok, accepted FROM cache_batches WHERE id = ?",
                              ((2).to_bytes(32, "big"),)).fetchone() == (1, 1)

    path = str(tmp_path / "full.db")
    db = cache.sqlite.connect(path)
    state = state_mod.State(db)
    pages = db.execute("PRAGMA page_count").fetchone()[0]
    db.execute(f"PRAGMA max_page_count = {pages}")  # (no page to spare: a full disk)
    held_rows(state, 50)
    with pytest.raises(cache.DatabaseError):
        state.flush()
    assert len(state._read.batches) == 50 and len(state._read.segments) == 50  # kept
    db.execute("PRAGMA max_page_count = 1000000")
    assert count(state.cache_db, "cache_batches") == 50 and count(state.cache_db, "cache_segments") == 50


def test_the_index_of_ids_built_after_a_load_keeps_the_first_row_of_an_id_written_twice():
    """The rows of an id a load wrote twice (a hostile writer's record in two batches) are what INSERT OR
    IGNORE into the index would have left: the first; the index is unique after it."""
    from camillo import cache

    db = cache.memory_database()
    cache.complete_schema(db)
    db.execute("DROP INDEX records_id")
    a, c = b"a" * 32, b"c" * 32
    db.executemany("INSERT INTO records(id, batch, idx, compartment, writer) VALUES(?, ?, ?, x'00', x'00')",
                   [(a, b"first", 0), (c, b"first", 1), (a, b"second", 0), (a, b"third", 4), (c, b"third", 5)])
    cache.build_records_id(db)
    assert db.execute("SELECT id, batch, idx FROM records ORDER BY rowid").fetchall() == [(a, b"first", 0),
                                                                                         (c, b"first", 1)]
    db.execute("INSERT OR IGNORE INTO records(id, batch, idx, compartment, writer) VALUES(?, 'x', 9, x'00', x'00')",
               (a,))
    assert db.execute("SELECT count(*) FROM records").fetchone()[0] == 2


def _earlier_schema():
    """The state's schema as revision 14 and earlier made it: the records' index of ids the table's own."""
    from camillo import cache

    earlier = cache.SCHEMA.replace("  id BLOB NOT NULL,", "  id BLOB UNIQUE NOT NULL,", 1)
    assert earlier != cache.SCHEMA
    return earlier


def test_a_cold_load_into_an_earlier_revisions_state_grows_its_page_cache_with_the_rows_it_writes(
        new_vault, monkeypatch):
    """In a state an earlier revision wrote, the records' index of ids is the table's own and cannot be
    dropped for a cold load (camillo.cache.records_id_own): a wide load's page cache holds that index,
    which its rows go to at random pages: it starts at LOAD_CACHE_MIN_KIB and grows by
    LOAD_CACHE_BYTES_PER_ROW for each row written, never past WIDE_PAGE_CACHE_KIB (128 MiB held from the
    first row was 30 MiB of a million records' peak it never needed), and is narrowed once the rows are
    written; the state is the one a load gives, and no second index of ids is made beside the table's."""
    from camillo import cache
    from camillo import state as state_mod

    path, vault, _ = new_vault
    _fill(vault)
    vault.lock()
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), cache=False) as v:
        expected = fingerprint(v)
    monkeypatch.setattr(cache, "SCHEMA", _earlier_schema())
    per_row = (cache.WIDE_PAGE_CACHE_KIB << 10) // 12  # (the widest after 12 rows)
    monkeypatch.setattr(cache, "WIDE_SEGMENTS", 1)  # (this small load is a wide one)
    monkeypatch.setattr(state_mod.State, "_FLUSH_ROWS", 4)
    monkeypatch.setattr(state_mod, "LOAD_CACHE_BYTES_PER_ROW", per_row)
    widths: list[tuple[int, int]] = []  # (rows written, page cache) after each write of rows
    real_flush = state_mod.State.flush

    def flush(self):
        real_flush(self)
        widths.append((self._load_rows, self._db.execute("PRAGMA cache_size").fetchone()[0]))

    monkeypatch.setattr(state_mod.State, "flush", flush)
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), cache=False) as v:
        db = v.session.materialized.db
        assert db.execute("PRAGMA cache_size").fetchone()[0] == -cache.PAGE_CACHE_KIB
        assert fingerprint(v) == expected
        assert not cache.records_id_own(db)  # (the table's own index of ids, and no other unique one)
        assert [r[1] for r in db.execute("PRAGMA index_list(records)") if r[2]] == ["sqlite_autoindex_records_1"]
    during = list(itertools.takewhile(lambda e: e[1] != cache.PAGE_CACHE_KIB,  # (until it was narrowed)
                                      [(rows, -width) for rows, width in widths if rows]))
    assert len(during) > 3 and during[-1][0] > 12
    for rows, kib in during:
        assert kib == min(cache.WIDE_PAGE_CACHE_KIB, max(cache.LOAD_CACHE_MIN_KIB, rows * per_row >> 10))
    assert during[0][1] < cache.WIDE_PAGE_CACHE_KIB == during[-1][1]


def test_the_facts_list_reads_the_records_of_a_page_of_facts_together(new_vault, monkeypatch):
    """``Vault.facts()`` read each fact's value, candidates, discarded values, history and proposals in
    five queries a fact (7 s for 30,000 facts): it reads the records of a page of facts together, each
    once, and gives the same facts as the one-fact read."""
    from camillo import state as state_module

    _path, vault, _ = new_vault
    vault.append([NewRecord(type="fact", key=f"user/k{i}", value=f"old {i}") for i in range(0, 60, 2)])
    vault.append([NewRecord(type="fact", key=f"user/k{i}", value=f"value {i}") for i in range(60)])
    calls: list[int] = []
    real_records, real_record = state_module.State.records, state_module.State.record

    def records(self, ids):
        ids = list(ids)
        calls.append(len(ids))
        return real_records(self, ids)

    def record(self, rid):
        calls.append(1)
        return real_record(self, rid)

    monkeypatch.setattr(state_module.State, "records", records)
    monkeypatch.setattr(state_module.State, "record", record)
    facts = vault.facts()
    assert len(facts) == 60 and len(calls) == 1 and calls[0] == 90, calls  # 60 values and 30 older ones, once
    monkeypatch.setattr(state_module.State, "records", real_records)
    monkeypatch.setattr(state_module.State, "record", real_record)
    for f in facts:
        assert f == vault.session.materialized.fact(f.compartment_id, f.key)
        i = int(f.key.removeprefix("user/k"))
        assert f.current.value == f"value {i}"
        assert (f"old {i}" in {h.value for h in f.history}) == (i % 2 == 0)  # the older value, where there is one


def test_the_rules_over_revocations_read_the_revokes_from_the_index_of_control_records(new_vault, tmp_path, monkeypatch):
    """Every open of a vault that has revoked someone judges whether a revoked credential may hold the current
    master secret (ops.rekey.revoked_holds, twice): it read every REVOKE by a pass over every record (0.34 s of
    each warm open at 100,000 records, about ten times that at a million).  It reads them from the index of the
    control records, which a cold load keeps as it goes and a state of an earlier revision gets at its next open."""
    from camillo.ops import rekey

    path, vault, _ = new_vault
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as laptop:
        laptop_id = laptop.writer_id
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path) as v:
        _fill(v, 5)
        v.revoke(v.session.roster.principals[laptop_id].name, reauth=Unlock.passphrase(PASSPHRASE))
    for cold in (False, True):
        with open_vault(path, cache=not cold) as v:
            db = v.session.materialized.db
            statements: list[str] = []
            db.set_trace_callback(statements.append)
            try:
                assert rekey.revoked_holds(v.session) is False
            finally:
                db.set_trace_callback(None)
            assert any(s.startswith(rekey.REVOKES_QUERY.split(" = ")[0]) for s in statements), statements
            for s in statements:
                if " records" in s and s.lstrip().upper().startswith("SELECT"):
                    plan = " ".join(str(r[-1]) for r in db.execute("EXPLAIN QUERY PLAN " + s))
                    assert "SCAN records" not in plan, (s, plan)
            assert set(rekey._revokes_of(v.session, {laptop_id}).values()) == {laptop_id}
            indexed = {k for (k,) in db.execute("SELECT kind FROM records INDEXED BY records_control WHERE kind >= 16")}
            assert indexed and indexed <= set(CONTROL_KINDS) and Kind.REVOKE in indexed, cold
    with open_vault(path) as v:  # a state of an earlier revision, without the index: it gets it at the next open
        v.session.materialized.db.execute("DROP INDEX records_control")
        v.session.materialized.commit()
    with open_vault(path) as v:
        assert v.session.reader.decryptions == 0
        assert v.session.materialized.db.execute(
            "SELECT 1 FROM sqlite_master WHERE name = 'records_control'").fetchone() is not None


def test_the_count_of_valid_records_is_read_from_indexes(new_vault):
    """The vault's statistics (``camillo verify``, the health view) counted the valid records with a pass over
    every row (0.92 s at a million records): they are every row, counted in the table's smallest index, less
    the rows the index of unlisted rows holds not valid (0.07 s)."""
    path, vault, _ = new_vault
    _fill(vault, 12)
    state = vault.session.materialized
    db = state.db
    rows = [r for (r,) in db.execute("SELECT rowid FROM records ORDER BY rowid")]
    db.executemany("UPDATE records SET valid = 0 WHERE rowid = ?", [(r,) for r in rows[1:4]])
    db.executemany("UPDATE records SET hidden = 1 WHERE rowid = ?", [(r,) for r in rows[3:7]])
    assert state.count() == db.execute("SELECT count(*) FROM records WHERE valid = 1").fetchone()[0] == len(rows) - 3
    for q in state.COUNT_QUERIES:
        plan = " ".join(str(r[-1]) for r in db.execute("EXPLAIN QUERY PLAN " + q))
        assert "INDEX" in plan, (q, plan)


@settings(max_examples=200, deadline=None)
@given(ids=st.lists(st.binary(min_size=32, max_size=32), min_size=1, max_size=30),
       edges=st.lists(st.sampled_from([b"\xff" * 32, b"\x00" * 32, b"\xff" * 4 + b"\x00" * 28]), max_size=3),
       pick=st.integers(0, 10**6), length=st.integers(1, 64), upper=st.booleans())
def test_a_record_id_prefix_is_a_range_of_the_index_of_ids(ids, edges, pick, length, upper):
    """A record named by a prefix of its id (``camillo show``) was found by comparing the hex of every id
    (0.15 s at a million records): it is a range of the index of ids, odd lengths and a prefix of f digits
    included, and finds exactly the ids whose hex starts with the prefix."""
    import sqlite3

    from camillo.ops.reports import _ids_with_prefix

    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE records(id BLOB)")
    db.execute("CREATE UNIQUE INDEX records_id ON records(id)")
    every = sorted(set(ids + edges))
    db.executemany("INSERT INTO records(id) VALUES(?)", [(i,) for i in every])
    prefix = every[pick % len(every)].hex()[:length]
    prefix = prefix.upper() if upper else prefix
    statements: list[str] = []
    db.set_trace_callback(statements.append)
    assert sorted(_ids_with_prefix(db, prefix)) == [i for i in every if i.hex().startswith(prefix.lower())]
    db.set_trace_callback(None)
    for statement in statements:  # (what it ran, explained: a range of the index, no hex of every id)
        plan = " ".join(str(r[-1]) for r in db.execute("EXPLAIN QUERY PLAN " + statement))
        assert "SEARCH" in plan and "records_id" in plan, (statement, plan)
    assert statements


def test_a_record_is_found_by_a_prefix_of_its_id(new_vault):
    """What ``camillo show`` and the other commands that name a record accept: its id, or a prefix of at least 8
    hex digits, in either case; a prefix with a letter that is not a hex digit, or with spaces (which bytes.fromhex
    skips: "ea 7f 81" is 8 characters, 6 digits), is named as not an id (found by review)."""
    path, vault, _ = new_vault
    _fill(vault, 5)
    rid = vault.timeline(limit=1)[0].id
    for n in (8, 9, 17, 63, 64):
        assert vault.find_record(rid.hex()[:n].upper()).id == rid
        assert vault.find_record(rid.hex()[:n]).id == rid
    h = rid.hex()
    for bad in (h[:8] + "z", "zz" + h[:8], h[:8] + "_", f"{h[:2]} {h[2:4]} {h[4:6]}", f"{h[:4]}  {h[4:8]}"):
        with pytest.raises(UsageError, match="is not a record id"):
            vault.find_record(bad)


def test_an_open_after_an_erasure_with_nothing_to_seal_again_reads_no_manifests_batches(new_vault):
    """After an erasure every open checks whether batches under the destroyed epoch must be sealed again
    (ops.repair.rescue_batches).  It made, for every segment the erasure removed, the union of the erasure's
    re-encrypted batches with what it had (an erasure of an epoch of 100,000 records removes about 1,000
    segments: a million ids walked, 0.19 s of every later open at 1M).  With nothing to seal again, as after
    one's own erasure, it returns before reading them; when there is something, each manifest's batches are
    made a set once."""
    from dataclasses import replace

    from camillo.ops import repair
    from camillo.records import Kind

    path, vault, _ = new_vault
    _fill(vault, 12)
    vault.erase([next(r.id for r in vault.timeline() if r.text == "garden note 4")])
    vault.lock()

    class Unread:
        def __iter__(self):
            raise AssertionError("the manifest's batches were read")

    with open_vault(path) as v:
        roster = v.session.roster
        manifests = [rid for rid, m in roster.manifests.items() if m.kind == Kind.ERASURE_MANIFEST]
        assert manifests and roster.destroyed_epochs() and v.session.device_state.kept
        for rid in manifests:
            roster.manifests[rid] = replace(roster.manifests[rid], batches=Unread())
        assert repair.rescue_batches(v.session).files_written == 0
