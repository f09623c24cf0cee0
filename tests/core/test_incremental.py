"""The incremental paths give exactly what a full recomputation gives.

An append, or a refresh that finds new batches, extends the log and the state in O(new) when it can
(:meth:`Reader.extend`, :func:`camillo.log.extend_log`, the plain-notes pass of
``State.materialize``), and the folder shelf lists only directories whose mtime changed.  These
tests drive two devices and an agent through interleaved writes, forgetting, conflicts, a merge
from another copy and files vanishing, and after every step compare the vault with one opened from
scratch (``cache=False``, everything recomputed); they also check that the fast path was taken, so
a change that silently disables it fails here.
"""

from __future__ import annotations

import os
import random
import shutil
import time

import pytest
from camillo import NewRecord, Unlock, Vault
from camillo.session import writer
from camillo.session.reader import Reader
from camillo.storage import FolderShelf
from camillo.transport import merge_into

from .helpers import switch_home

PASSPHRASE = "correct horse battery staple"


def fingerprint(v: Vault) -> dict:
    """Everything a user or an agent can observe of the derived state."""
    return {
        "timeline": [(r.id, r.valid, r.hidden, r.effective_class, r.text) for r in v.timeline()],
        "facts": sorted((f.compartment, f.key, f.status, f.current.id if f.current else None,
                         tuple(sorted(c.id for c in f.candidates))) for f in v.facts()),
        "accepted": sorted(v.session.log.accepted),
        "heads": {c: sorted(h) for c, h in v.session.log.heads.items()},
        "chains": {k: dict(c) for k, c in v.session.log.chains.items()},
        # each chain's highest seq as the log keeps it: what an append's frontier claims (writer.causal_fields)
        "tops": {k: t for k, t in v.session.log.tops.items() if v.session.log.chains.get(k)},
        "tops_true": all(v.session.log.tops.get(k) == max(c) for k, c in v.session.log.chains.items() if c),
        "gaps": sorted((g.writer_id, g.compartment_id, g.seq, g.batch_id or b"", g.reason) for g in v.session.log.gaps),
        "forks": sorted((f.writer_id, f.compartment_id, f.seq, f.batch_ids) for f in v.session.log.forks),
        "inbox": [r.id for r in v.inbox()],
        "search": [r.id for r in v.search("garden")],
    }


def from_scratch(path: str) -> dict:
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), cache=False, register=False) as fresh:
        return fingerprint(fresh)


@pytest.fixture
def counted(monkeypatch):
    """Counts the full recomputations and the fast extensions."""
    calls = {"full": 0, "fast": 0}
    full, fast = Reader.recompute, Reader.extend

    def recompute(self):
        calls["full"] += 1
        return full(self)

    def extend(self, new):
        ok = fast(self, new)
        calls["fast"] += bool(ok)
        return ok

    monkeypatch.setattr(Reader, "recompute", recompute)
    monkeypatch.setattr(Reader, "extend", extend)
    return calls


def test_appends_take_the_fast_path_and_match_a_full_recomputation(new_vault, counted):
    path, vault, _ = new_vault
    rng = random.Random(5)
    words = ["garden", "coffee", "train", "book", "walk"]
    counted["full"] = counted["fast"] = 0
    for i in range(30):
        vault.append([NewRecord(type="message", conversation=f"c{i % 3}", role="user",
                                text=" ".join(rng.choice(words) for _ in range(6)))],
                     compartment=rng.choice(["personal", "work"]))
    assert counted["fast"] >= 30 and counted["full"] == 0, counted
    assert fingerprint(vault) == from_scratch(path)


def test_appends_after_a_withheld_batch_take_the_fast_path_and_match(new_vault, tmp_path, monkeypatch, counted):
    """A host withholds one batch of another device: the gap is reported, and this device's appends
    (in that compartment too) still extend the log in O(new), not rebuild it over the whole vault."""
    path, vault, _ = new_vault
    vault.lock()
    switch_home(monkeypatch, tmp_path / "phone")
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), device_name="phone") as phone:
        for i in range(3):
            phone.append([NewRecord(type="message", conversation="c", role="user", text=f"garden from the phone {i}")])
        withheld = phone.session.reader.batches[phone.session.log.chains[
            (phone.session.actor.writer_id, phone.session.roster.compartment_id("personal"))][2]].segment
    os.unlink(os.path.join(path, *withheld.split("/")))
    switch_home(monkeypatch, tmp_path / "laptop")
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), device_name="laptop") as laptop:
        assert [g.seq for g in laptop.session.log.gaps] == [2]
        counted["full"] = counted["fast"] = 0
        for i in range(5):
            laptop.append([NewRecord(type="message", conversation="c", role="user", text=f"garden note {i}")])
        assert counted == {"full": 0, "fast": 5}
        assert fingerprint(laptop) == from_scratch(path)


def test_interleaved_devices_agents_facts_and_forgetting_match(new_vault, tmp_path, monkeypatch, counted):
    path, vault, _ = new_vault
    grant = str(tmp_path / "agent.grant")
    vault.create_grant("planner", {"personal": "write"}, grant)
    vault.lock()
    homes = {"desk": tmp_path / "desk", "lap": tmp_path / "lap"}
    for h in homes.values():  # certify both installations
        switch_home(monkeypatch, h)
        Vault.open(path, Unlock.passphrase(PASSPHRASE)).lock()
    rng = random.Random(11)
    opened: dict[str, Vault] = {}

    def device(name: str) -> Vault:
        switch_home(monkeypatch, homes[name])
        if name not in opened:
            opened[name] = Vault.open(path, Unlock.passphrase(PASSPHRASE))
        opened[name].refresh()
        return opened[name]

    agent = Vault.open(path, Unlock.grant(grant), home=str(tmp_path / "agent"))
    try:
        for step in range(40):
            who = rng.choice(["desk", "lap", "agent"])
            v = agent if who == "agent" else device(who)
            if who == "agent":
                v.refresh()
            roll = rng.random()
            if roll < 0.5:
                v.append([NewRecord(type="message", conversation="c", role="user", text=f"garden note {step}")])
            elif roll < 0.8:
                v.append([NewRecord(type="fact", key=f"user/k{rng.randrange(3)}", value=f"v{step}")])
            elif who != "agent" and v.timeline():
                target = rng.choice(v.timeline())
                if target.key is None:
                    v.forget(record=target.id)
            expected = from_scratch(path)
            for other in (*opened.values(), agent):
                other.refresh()
                got = fingerprint(other)
                if other is agent:
                    continue  # a write grant reads the same records; the roster view differs in names only
                assert got == expected, f"step {step}: incremental state differs from a full recomputation"
        assert counted["fast"] > 10
    finally:
        agent.lock()
        for v in opened.values():
            v.lock()


def test_a_merge_and_vanished_files_fall_back_to_the_full_path(new_vault, tmp_path, monkeypatch, counted):
    path, vault, _ = new_vault
    vault.append([NewRecord(type="fact", key="user/city", value="Lisbon")])
    copy = str(tmp_path / "copy")
    shutil.copytree(path, copy)
    vault.append([NewRecord(type="fact", key="user/city", value="Porto")])
    switch_home(monkeypatch, tmp_path / "other")
    with Vault.open(copy, Unlock.passphrase(PASSPHRASE)) as other:
        other.append([NewRecord(type="fact", key="user/city", value="Faro")])
    merge_into(path, copy)
    vault.refresh()
    assert vault.fact("user/city").status == "conflict"
    assert fingerprint(vault) == from_scratch(path)
    # a segment vanishes (a sync service reverting a file): the full path notices and recomputes
    seg = next(os.path.join(dp, f) for dp, _d, fs in os.walk(os.path.join(path, "segments")) for f in fs)
    os.unlink(seg)
    counted["full"] = 0
    vault.refresh()
    assert counted["full"] == 1
    assert fingerprint(vault) == from_scratch(path)


def test_listing_sees_what_others_add_and_remove(tmp_path):
    from camillo.primitives import sha256

    path = str(tmp_path / "v")
    Vault.create(path, PASSPHRASE)[0].lock()
    shelf = FolderShelf(path)
    names, added, removed = shelf.changes()
    assert added == names and "VMEM" in names and not removed
    assert shelf.changes()[1:] == (set(), set())
    # another process writes a segment and deletes an envelope
    data = b"x" * 100
    h = sha256(data).hex()
    os.makedirs(os.path.join(path, "segments", h[:2]), exist_ok=True)
    with open(os.path.join(path, "segments", h[:2], f"{h}.seg"), "wb") as fh:
        fh.write(data)
    env = next(n for n in names if n.startswith("env/"))
    os.unlink(os.path.join(path, env))
    names2, added, removed = shelf.changes()
    assert added == {f"segments/{h[:2]}/{h}.seg"} and removed == {env}
    assert shelf.list() == sorted(names2)
    # ignored names never appear; a directory whose mtime is unchanged is not listed again
    open(os.path.join(path, "segments", h[:2], "notes.txt"), "w").close()
    assert shelf.changes()[1] == set()


def test_a_change_within_the_same_clock_tick_is_not_missed(tmp_path, monkeypatch):
    """A directory listed within a clock tick of its mtime is listed again next time, so a change
    made in that same tick (which leaves the mtime as it was) is not missed; a directory listed
    long after its last change is not listed again while its mtime stays."""
    path = str(tmp_path / "v")
    Vault.create(path, PASSPHRASE)[0].lock()
    env_dir = os.path.join(path, "env")
    shelf = FolderShelf(path)
    tick = time.time_ns()
    os.utime(env_dir, ns=(tick, tick))  # the directory changed just now
    shelf.changes()
    name = "0" * 64 + ".env"
    open(os.path.join(env_dir, name), "wb").close()
    os.utime(env_dir, ns=(tick, tick))  # ... and again within the same tick: the mtime did not move
    assert f"env/{name}" in shelf.changes()[1]
    # long after its last change, an unchanged directory is trusted and not listed again
    old = tick - 10 * 1_000_000_000
    os.utime(env_dir, ns=(old, old))
    shelf.changes()
    listed: list[str] = []
    real_scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda p: listed.append(p) or real_scandir(p))
    shelf.changes()
    assert env_dir not in listed, listed


def test_a_cache_from_a_fuller_copy_is_corrected(new_vault, tmp_path):
    """Opening a copy that lacks batches this installation's cache holds (a fact changed there):
    the cached state is corrected, the fact falls back, as a full recomputation says."""
    path, vault, _ = new_vault
    vault.append([NewRecord(type="fact", key="user/city", value="Lisbon")])
    vault.append([NewRecord(type="message", text="garden plans")])
    copy = str(tmp_path / "copy")
    shutil.copytree(path, copy)
    vault.append([NewRecord(type="fact", key="user/city", value="Porto")])
    vault.lock()  # the cache now knows Porto
    with Vault.open(copy, Unlock.passphrase(PASSPHRASE)) as v:
        assert v.fact("user/city").current.value == "Lisbon"
        assert fingerprint(v) == from_scratch(copy)


def test_back_to_back_appends_skip_the_scan_until_something_may_have_changed(new_vault, tmp_path, monkeypatch):
    """Appends within WRITE_SCAN_AGE of the last scan number their batches without scanning the
    folder again; an envelope or slot arriving, another process of this installation writing, or
    the scan growing old makes the next append scan first."""
    path, vault, _ = new_vault
    monkeypatch.setattr(writer, "WRITE_SCAN_AGE", 3600.0)
    scans = []
    real_scan = FolderShelf._scan
    monkeypatch.setattr(FolderShelf, "_scan", lambda self: scans.append(1) or real_scan(self))

    def note(text):
        vault.append([NewRecord(type="message", conversation="c", role="user", text=text)])

    past = time.time_ns() - 5_000_000_000
    for d in ("env", "slots"):  # created a moment ago: make them settled, not within a clock tick
        os.utime(os.path.join(path, d), ns=(past, past))
    note("first")  # scans (the folder changed when the vault was created)
    scans.clear()
    for i in range(5):
        note(f"quick {i}")
    assert scans == [], "an append right after a scan scanned again"

    # another process of this installation writes: its counter on disk moved, so the next append
    # scans first and reads that batch before numbering its own (no gap in this writer's chain)
    other = Vault.open(path, Unlock.passphrase(PASSPHRASE))
    other.append([NewRecord(type="message", conversation="c", role="user", text="from the other process")])
    other.lock()
    note("after the other process")
    assert scans, "another process's write was not looked for"
    assert not [p for p in vault.problems() if p.kind in ("missing", "fork")], vault.problems()
    texts = [r.text for r in vault.timeline()]
    assert "from the other process" in texts

    # a file arriving in env/ (a new epoch, a revocation) makes the next append scan
    scans.clear()
    note("settled")
    assert scans == []
    env_dir = os.path.join(path, "env")
    open(os.path.join(env_dir, "0" * 64 + ".env"), "wb").close()
    os.utime(env_dir, ns=(past + 1000, past + 1000))  # moved, and settled
    note("after an envelope arrived")
    assert scans, "an append did not look at a new envelope first"

    # and an old scan is renewed
    monkeypatch.setattr(writer, "WRITE_SCAN_AGE", 0.0)
    scans.clear()
    note("later")
    assert scans
    assert fingerprint(vault) == from_scratch(path)


def test_a_roster_change_rechecks_only_the_principals_it_touched(new_vault, tmp_path, monkeypatch):
    """Changing the passphrase, creating and revoking a grant add, replace or revoke principals:
    only their records (and CONFIRMs) are checked again, not the whole vault, and the result is
    what a full recomputation gives (records of a revoked agent included)."""
    path, vault, _ = new_vault
    grant = str(tmp_path / "agent.grant")
    vault.create_grant("planner", {"personal": "write"}, grant, max_class="inferred")
    agent = Vault.open(path, Unlock.grant(grant), home=str(tmp_path / "agent"))
    agent.append([NewRecord(type="preference", key="user/tea", value="green", authority="inferred")])
    agent.append([NewRecord(type="message", conversation="c", role="assistant", text="agent says hello")])
    agent.lock()
    for i in range(20):
        vault.append([NewRecord(type="message", conversation="c", role="user", text=f"garden {i}")])
    vault.refresh()
    full_checks = []
    real = vault.session.materialized.materialize

    def counting(roster, log, views, affected=None, **kw):
        full_checks.append(affected is None)
        return real(roster, log, views, affected, **kw)

    monkeypatch.setattr(vault.session.materialized, "materialize", counting)
    vault.change_passphrase("a different passphrase entirely")
    assert fingerprint(vault) == from_scratch_with(path, "a different passphrase entirely")
    grant_id = next(g.grant_id.hex() for g in vault.grants() if g.agent == "planner")
    vault.revoke(grant_id)
    assert fingerprint(vault) == from_scratch_with(path, "a different passphrase entirely")
    assert full_checks and not any(full_checks), full_checks


def from_scratch_with(path: str, passphrase: str) -> dict:
    with Vault.open(path, Unlock.passphrase(passphrase), cache=False, register=False) as fresh:
        return fingerprint(fresh)


def test_segments_deleted_by_a_prune_are_forgotten_in_one_pass(new_vault, monkeypatch):
    """A prune deletes thousands of segments at once: the next refresh forgets them together (one
    pass over what remains, not one per segment, which was quadratic at 100k segments) and the
    state is the one a full read gives."""
    path, vault, _ = new_vault
    for i in range(30):
        vault.append([NewRecord(type="message", conversation="c", role="user", text=f"garden {i}")])
    state = vault.session.materialized  # the full-text index not built yet (as after a cold load):
    state.db.execute("INSERT INTO search(search) VALUES('delete-all')")  # forgetting does not build it
    state.db.execute("DELETE FROM cache_meta WHERE key = 'indexed'")
    state._indexed = 0
    calls: list[int] = []
    real = Reader.forget_segments
    monkeypatch.setattr(Reader, "forget_segments", lambda self, names: calls.append(len(names)) or real(self, names))
    report = vault.compact(prune_now=True)
    assert report.segments_deleted >= 30
    assert calls == [report.segments_deleted], calls
    assert vault.session.materialized.indexed == 0, "forgetting batches built the full-text index"
    assert fingerprint(vault) == from_scratch(path)


@pytest.fixture
def reference_passes(monkeypatch):
    """Counts the vault-scale passes: the state's reference pass and rebuilding the causal log."""
    from camillo import state
    from camillo.session import reader

    calls = {"n": 0, "log": 0, "scoped": 0}
    real, real_log = state.check_references, reader.build_log

    def counting(db, roster, views, scope=None):
        calls["n" if scope is None else "scoped"] += 1  # a pass over the whole state, or over a change's reach
        return real(db, roster, views, scope)

    def counting_log(*args):
        calls["log"] += 1
        return real_log(*args)

    monkeypatch.setattr(state, "check_references", counting)
    monkeypatch.setattr(reader, "build_log", counting_log)
    return calls


def test_credential_changes_skip_the_vault_scale_passes_and_match(new_vault, tmp_path, reference_passes):
    """A passphrase change or a new recovery phrase adds control records and changes principals that
    wrote no memory: the log and the state take the O(new) paths, and still equal a full
    recomputation."""
    path, vault, _ = new_vault
    grant = str(tmp_path / "agent.grant")
    vault.create_grant("planner", {"personal": "write"}, grant)
    vault.append([NewRecord(type="fact", key="user/city", value="Lisbon")])
    with Vault.open(path, Unlock.grant(grant), home=str(tmp_path / "agent")) as agent:
        agent.append([NewRecord(type="fact", key="user/city", value="Porto", authority="inferred")])
    vault.refresh()
    first = vault.timeline()[0]
    vault.append([NewRecord(type="message", conversation="c", role="user", text="garden talk",
                            sources=[first.id])])
    new = "a new passphrase for the garden"
    reference_passes["n"] = reference_passes["log"] = 0
    vault.change_passphrase(new, reauth=Unlock.passphrase(PASSPHRASE))
    vault.reissue_recovery_phrase()
    assert reference_passes["n"] == 0, "a credential change re-checked every reference in the vault"
    assert reference_passes["log"] == 0, "a credential change rebuilt the causal log"
    with Vault.open(path, Unlock.passphrase(new), cache=False, register=False) as fresh:
        assert fingerprint(vault) == fingerprint(fresh)
    # a revoked principal that wrote memory: its records, and what refers to them, are judged again
    vault.revoke("planner", reauth=Unlock.passphrase(new))
    assert reference_passes["n"] + reference_passes["scoped"] >= 1
    with Vault.open(path, Unlock.passphrase(new), cache=False, register=False) as fresh:
        assert fingerprint(vault) == fingerprint(fresh)


def test_an_erasure_rechecks_only_what_it_erased_and_matches(new_vault, reference_passes):
    """An erasure adds an ERASE: the batches holding what it names are judged again (and the
    references and facts), not every record; the result equals a full recomputation, including a
    plain note erased (the O(new) pass for notes must not keep it valid)."""
    from camillo import state as state_module

    path, vault, _ = new_vault
    for i in range(30):  # an older epoch, which the erasure does not touch
        vault.append([NewRecord(type="message", conversation="c", role="user", text=f"old garden note {i}")])
    vault.create_grant("planner", {"personal": "read"}, os.path.join(os.path.dirname(path), "planner.grant"))
    vault.revoke("planner")  # a new epoch of personal
    for i in range(4):
        vault.append([NewRecord(type="message", conversation="c", role="user", text=f"garden note {i}")])
    vault.append([NewRecord(type="fact", key="user/city", value="Lisbon")])
    note = next(r.id for r in vault.timeline() if r.text == "garden note 3")
    fact = next(r.id for r in vault.timeline() if r.key == "user/city")
    checked: list[int] = []
    real = state_module.static_check

    def counting(*args):
        checked.append(1)
        return real(*args)

    import pytest as _pytest

    with _pytest.MonkeyPatch.context() as mp:
        mp.setattr(state_module, "static_check", counting)
        vault.erase([note])
    assert 0 < len(checked) < 20, f"{len(checked)} of 35 records judged again for one erasure"
    assert fingerprint(vault) == from_scratch(path)
    assert note not in {r.id for r in vault.timeline()}
    vault.erase([fact])
    assert fingerprint(vault) == from_scratch(path)
    assert "user/city" not in {f.key for f in vault.facts()}


def test_an_erasure_moves_the_resealed_batches_without_reading_them_again(new_vault, monkeypatch):
    """The erasing device wrote the re-encrypted segments itself: their batches are moved to them
    (views, the segment map, the local state's rows), not decrypted and staged again (at 1M records
    that was 25 s of the erasure); the vault equals one read from scratch, then and after a re-open,
    which resumes from the moved rows."""
    from camillo.state import State

    path, vault, _ = new_vault
    for i in range(12):
        vault.append([NewRecord(type="message", conversation="c", role="user", text=f"garden note {i}")])
    vault.append([NewRecord(type="fact", key="user/city", value="Lisbon")])
    note = next(r.id for r in vault.timeline() if r.text == "garden note 5")
    reader = vault.session.reader
    staged: list[bytes] = []
    real_stage = State.stage
    earlier = set(reader.batches)
    before = reader.decryptions
    with monkeypatch.context() as mp:  # (not monkeypatch.undo(): that would also undo the test's home)
        mp.setattr(State, "stage", lambda self, view, records: (staged.append(view.id), real_stage(self, view, records))[1])
        report = vault.erase([note])
    assert report.batches_reencrypted >= 13 and report.segments_written >= 1
    assert reader.decryptions == before, "the erasure decrypted the segments it had just written"
    again = earlier & set(staged)  # (the erasure's own new batches are staged, as any write's)
    assert not again, f"{len(again)} batches staged again"
    on_disk = set(vault.session.shelf.list())
    assert {v.segment for v in reader.batches.values()} <= on_disk
    rows = vault.session.materialized.db.execute("SELECT DISTINCT segment FROM cache_batches").fetchall()
    assert {n for (n,) in rows} <= on_disk
    assert all(name in on_disk for name in reader.segment_batches)
    assert fingerprint(vault) == from_scratch(path)
    assert note not in {r.id for r in vault.timeline()}
    vault.lock()
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as again:
        assert again.session.reader.decryptions == 0, "the open after the erasure read segments again"
        assert fingerprint(again) == from_scratch(path)
