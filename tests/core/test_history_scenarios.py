"""The causal log against a lying or lagging host: gaps, forks, restored devices, rollback, the
cache, and records that claim to supersede what their writer never saw."""

from __future__ import annotations

import os
import shutil
import time

import pytest
from camillo import NewRecord, Unlock, Vault
from camillo import ids as id_mod
from camillo import log as log_mod
from camillo.errors import WriterFrozen
from camillo.records import BatchHeader, Kind, encode_record, make_batch
from camillo.segments import encode_payload, seal_segment
from camillo.storage import segment_name

from .helpers import all_files, switch_home

PASSPHRASE = "correct horse battery staple"


def open_vault(path, **kw):
    return Vault.open(path, Unlock.passphrase(PASSPHRASE), **kw)


def segments_of(vault, writer_id, compartment="personal"):
    """Segment names of one writer's batches in a compartment, by seq."""
    cid = vault.compartment_id(compartment)
    chain = vault.session.log.chains[(writer_id, cid)]
    return {seq: vault.session.batches[bid].segment for seq, bid in chain.items()}


def test_gap_is_named_then_syncing_then_missing(new_vault, monkeypatch):
    path, vault, _ = new_vault
    for i in range(4):
        vault.append([NewRecord(type="message", text=f"m{i}")])
    wid = vault.writer_id
    middle = segments_of(vault, wid)[3]
    missing_id = vault.session.log.chains[(wid, vault.compartment_id("personal"))][3]
    vault.lock()
    os.unlink(os.path.join(path, middle))
    with open_vault(path, cache=False) as v:  # within the grace period: still syncing, named
        problems = v.problems()
        assert [p.kind for p in problems] == ["syncing"], problems
        assert missing_id.hex()[:12] in problems[0].message and "seq 3" in problems[0].message
        assert "personal" in problems[0].message
        status, details = v.sync_status()
        assert status == "syncing" and details
        assert {r.text for r in v.timeline()} == {"m0", "m2", "m3"}  # seq 1 is the genesis batch
    # Ten minutes later the gap is no longer "still syncing".
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + log_mod.SYNC_GRACE_SECONDS + 5)
    with open_vault(path, cache=False) as v:
        assert v.sync_status()[0] == "missing batches"
        gaps = [p for p in v.problems() if p.kind == "gap"]
        assert len(gaps) == 1 and missing_id.hex()[:12] in gaps[0].message and "personal" in gaps[0].message


def test_restored_device_refuses_to_write(new_vault, tmp_path):
    """A device whose local state was restored from a backup finds its own later batches in the
    vault and stops, instead of forking its history."""
    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="before the backup")])
    vault.lock()
    home = os.environ["CAMILLO_HOME"]
    shutil.copytree(home, tmp_path / "backup")
    with open_vault(path) as v:
        v.append([NewRecord(type="message", text="after the backup")])
    shutil.rmtree(home)
    shutil.copytree(tmp_path / "backup", home)
    with open_vault(path) as v:
        with pytest.raises(WriterFrozen, match="restored from a backup or copied"):
            v.append([NewRecord(type="message", text="would fork")])
        assert {r.text for r in v.timeline()} == {"before the backup", "after the backup"}


def _forge_batch(vault, cid, seq, prev, text, *, deps=(), frontier=None, pred=()):
    """Write a batch as the vault's own device, bypassing the facade's counters (what a cloned or
    malicious copy of the device could do)."""
    actor = vault.session.actor
    raw = encode_record(Kind.NOTE, actor.writer_id, value={"text": text}, authority=3, type="message", pred=pred) \
        if not pred else encode_record(Kind.PUT, actor.writer_id, key="user/city", value=text, authority=3,
                                       type="fact", pred=pred)
    frontier = dict(frontier or {actor.writer_id: seq - 1})
    header = BatchHeader(vault.vault_id, cid, actor.writer_id, seq, prev, tuple(sorted(deps)), frontier,
                         (id_mod.record_id(raw),), int(time.time()))
    batch = make_batch(header, [raw], actor.signer)
    epoch = vault.session.roster.current_epoch(cid)
    seg = seal_segment(vault.vault_id, cid, epoch.epoch_id, epoch.public, encode_payload([batch]))
    name = segment_name(seg)
    vault.session.shelf.write(name, seg)
    return batch, name


def test_fork_is_proven_and_freezes_the_writer(new_vault):
    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="one")])
    cid = vault.compartment_id("personal")
    wid = vault.writer_id
    chain = vault.session.log.chains[(wid, cid)]
    top = max(chain)
    _forge_batch(vault, cid, top + 1, chain[top], "branch A")
    _forge_batch(vault, cid, top + 1, chain[top], "branch B")
    _forge_batch(vault, cid, top + 2, chain[top], "after the fork")  # prev does not even match
    vault.refresh()
    forks = [p for p in vault.problems() if p.kind == "fork"]
    assert len(forks) == 1 and f"seq {top + 1}" in forks[0].message
    texts = {r.text for r in vault.timeline()}
    assert "one" in texts and not texts & {"branch A", "branch B", "after the fork"}
    with pytest.raises(WriterFrozen):
        vault.append([NewRecord(type="message", text="frozen")])
    # The other compartments of the vault are unaffected.
    vault.lock()
    switch_home_and_write_ok(path)


def switch_home_and_write_ok(path):
    os.environ["CAMILLO_HOME"] = os.environ["CAMILLO_HOME"] + "-other-device"
    with open_vault(path) as v:
        v.append([NewRecord(type="message", text="another device still writes")])
        assert "another device still writes" in {r.text for r in v.timeline()}


def test_pred_outside_the_causal_past_is_rejected(new_vault):
    path, vault, _ = new_vault
    vault.append([NewRecord(type="fact", key="user/city", value="Lisbon")])
    cid = vault.compartment_id("personal")
    lisbon = vault.fact("user/city").current.id
    wid = vault.writer_id
    chain = vault.session.log.chains[(wid, cid)]
    top = max(chain)
    # A batch whose frontier claims it saw nothing of its own chain cannot name Lisbon in pred:
    # craft the claim on a different compartment's key space by lying about the frontier.
    other = vault.compartment_id("work")
    vault.append([NewRecord(type="message", text="in work")], compartment="work")
    work_chain = vault.session.log.chains[(wid, other)]
    batch, name = _forge_batch(vault, other, max(work_chain) + 1, work_chain[max(work_chain)], "Porto",
                               pred=[lisbon], frontier={wid: max(work_chain)})
    vault.refresh()
    rejected = [p for p in vault.problems() if p.kind == "rejected-record"]
    assert rejected and "another key or compartment" in rejected[0].message
    assert vault.fact("user/city").current.value == "Lisbon"
    assert top  # the personal chain is untouched


def test_rollback_alert_after_grace_and_not_for_sync_lag(new_vault, monkeypatch):
    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="seen")])
    vault.append([NewRecord(type="message", text="seen too")])
    wid = vault.writer_id
    latest = segments_of(vault, wid)[max(segments_of(vault, wid))]
    vault.lock()
    saved = open(os.path.join(path, latest), "rb").read()
    os.unlink(os.path.join(path, latest))  # the host serves an older copy of the folder
    with open_vault(path) as v:
        assert v.sync_status()[0] == "syncing"  # could be sync lag: no alarm yet
        assert not [p for p in v.problems() if p.kind == "rollback"]
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + log_mod.SYNC_GRACE_SECONDS + 5)
    with open_vault(path) as v:
        status, details = v.sync_status()
        assert status == "rollback alert"
        assert any("vanished without a signed manifest" in d for d in details)
        assert [p for p in v.problems() if p.kind == "rollback"]
    # The file comes back: no alert.
    open(os.path.join(path, latest), "wb").write(saved)
    with open_vault(path) as v:
        assert v.sync_status()[0] == "up to date"


def test_rollback_is_detected_even_when_the_whole_folder_is_old(new_vault, tmp_path, monkeypatch):
    path, vault, _ = new_vault
    vault.lock()
    shutil.copytree(path, tmp_path / "old-copy")
    with open_vault(path) as v:
        v.append([NewRecord(type="fact", key="user/city", value="Porto")])
    shutil.rmtree(path)
    shutil.copytree(tmp_path / "old-copy", path)
    with open_vault(path) as v:
        assert v.sync_status()[0] == "syncing"  # first noticed now: could still be sync lag
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + log_mod.SYNC_GRACE_SECONDS + 5)
    with open_vault(path) as v:
        assert v.sync_status()[0] == "rollback alert"
        v.accept_current_state()
        assert v.sync_status()[0] == "up to date"


def test_warm_open_reads_only_new_segments(new_vault, tmp_path, monkeypatch):
    path, vault, _ = new_vault
    for i in range(10):
        vault.append([NewRecord(type="message", text=f"m{i}")])
    vault.lock()
    with open_vault(path) as v:
        assert v.session.reader.decryptions == 0  # everything came from the cache
        assert len(v.timeline()) == 10
    # Another device adds three batches.
    switch_home(monkeypatch, tmp_path / "other")
    with open_vault(path) as other:
        for i in range(3):
            other.append([NewRecord(type="message", text=f"other {i}")])
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path) as v:
        # its three batches, plus the new device's certificate mirrored into each compartment
        assert v.session.reader.decryptions == 3 + 4
        assert len(v.timeline()) == 13
    with open_vault(path, cache=False) as v:
        assert v.session.reader.decryptions == len([f for f in all_files(path) if f.endswith(".seg")])


def test_cache_is_disposable_and_checked(new_vault, tmp_path):
    path, vault, _ = new_vault
    vault.append([NewRecord(type="fact", key="user/city", value="Lisbon")])
    wid = vault.writer_id
    cache_path = vault.session.local.cache_path(wid)
    vault.lock()
    assert os.path.exists(cache_path)
    with open_vault(path) as v:
        expected = [(f.key, f.status, f.current.id) for f in v.facts()]
        assert v.session.reader.decryptions == 0
    # tampered (its first page, which every open reads): rebuilt from the files
    data = bytearray(open(cache_path, "rb").read())
    data[200] ^= 1
    open(cache_path, "wb").write(bytes(data))
    with open_vault(path) as v:
        assert v.session.reader.decryptions > 0 and [(f.key, f.status, f.current.id) for f in v.facts()] == expected
    # deleted: nothing lost
    os.unlink(cache_path)
    with open_vault(path) as v:
        assert [(f.key, f.status, f.current.id) for f in v.facts()] == expected
    # a cache of another vault in its place: refused, rebuilt
    other, _ = Vault.create(str(tmp_path / "other"), PASSPHRASE)
    other.append([NewRecord(type="fact", key="user/city", value="Elsewhere")])
    other_cache = other.session.local.cache_path(other.writer_id)
    other.lock()
    shutil.copy(other_cache, cache_path)
    with open_vault(path) as v:
        assert [(f.key, f.status, f.current.id) for f in v.facts()] == expected


def test_concurrent_delete_wins_and_the_edit_is_reported(new_vault, tmp_path, monkeypatch):
    from camillo.transport import merge_into

    path, vault, _ = new_vault
    vault.append([NewRecord(type="fact", key="user/city", value="Lisbon")])
    vault.lock()
    copy = str(tmp_path / "copy")
    shutil.copytree(path, copy)
    with open_vault(path) as v:
        v.forget(key="user/city")
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(copy) as v:
        v.append([NewRecord(type="fact", key="user/city", value="Porto")])
    merge_into(path, copy)
    with open_vault(path) as v:
        f = v.fact("user/city")
        assert f.status == "deleted"
        assert [r.value for r in f.discarded] == ["Porto"]
        v.append([NewRecord(type="fact", key="user/city", value="Faro")])
        f = v.fact("user/city")
        assert f.status == "ok" and f.current.value == "Faro"


def test_a_vanished_batch_a_compaction_vouches_for_is_syncing_and_an_append_walks_no_manifest(new_vault,
                                                                                            monkeypatch):
    """A batch this device saw that is gone but that a signed compaction manifest vouches for is only
    "syncing", even after the grace period (its new copy has not arrived), where an unvouched one is a
    rollback.  The manifests' batch lists are asked about one batch at a time: an append makes no set
    of every batch they list (100,000 in a compacted vault of a million records: 6 ms an append)."""
    import dataclasses

    path, vault, _ = new_vault
    for i in range(12):
        vault.append([NewRecord(type="message", text=f"m{i}")])
    vault.compact(prune_now=True)
    wid = vault.writer_id
    latest = segments_of(vault, wid)[max(segments_of(vault, wid))]
    assert any(m.kind == Kind.COMPACTION for m in vault.session.roster.manifests.values())
    vault.lock()
    saved = open(os.path.join(path, latest), "rb").read()
    os.unlink(os.path.join(path, latest))  # the host has not brought the compacted copy yet
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + log_mod.SYNC_GRACE_SECONDS + 5)
    with open_vault(path) as v:
        status, details = v.sync_status()
        assert status == "syncing", details
        assert not [p for p in v.problems() if p.kind == "rollback"]
    monkeypatch.setattr(time, "time", real)
    open(os.path.join(path, latest), "wb").write(saved)

    walked: list[bytes] = []

    class Watched(frozenset):
        def __iter__(self):
            walked.append(b"")
            return super().__iter__()

    with open_vault(path) as v:
        manifests = v.session.roster.manifests
        for rid, m in list(manifests.items()):
            manifests[rid] = dataclasses.replace(m, batches=Watched(m.batches))
        v.append([NewRecord(type="message", text="one more")])
        assert walked == [], "an append walked the manifests' batch lists"
        assert v.sync_status()[0] == "up to date" and v.problems() == []
