"""The roster a warm open computed, kept in the local state (camillo.session.rostermemo).

A warm open of the same batches, with the same flags, takes it instead of computing it again; what
it takes equals what the builder computes, field for field; a change to any batch that can move the
roster (a rename, a revocation, a new compartment) is computed again; a damaged memo, or one of another
layout, is never taken.
"""

from __future__ import annotations

import dataclasses

import cbor2
import pytest
from camillo import NewRecord, Unlock, Vault
from camillo.control import Roster, build_roster
from camillo.session import resume, rostermemo

from .helpers import switch_home
from .test_incremental import fingerprint, from_scratch

PASSPHRASE = "correct horse battery staple"


def open_vault(path, **kw):
    return Vault.open(path, Unlock.passphrase(PASSPHRASE), **kw)


def _counting_builds(monkeypatch) -> list[int]:
    builds: list[int] = []
    real = resume.build_roster
    monkeypatch.setattr(resume, "build_roster", lambda *a, **k: builds.append(1) or real(*a, **k))
    return builds


def _as_built(v) -> Roster:
    """The roster the builder computes over the batches that can move it, in this session."""
    reader = v.session.reader
    roster, _ = build_roster(reader.vault_id, reader.batches.special())
    return roster


def _same(a: Roster, b: Roster) -> None:
    for f in dataclasses.fields(Roster):
        if f.name == "verify":
            continue
        x, y = getattr(a, f.name), getattr(b, f.name)
        if f.name == "genesis":
            assert x.raw == y.raw
        elif f.name == "policies":
            assert {k: (r.raw, e, p) for k, (r, e, p) in x.items()} == {k: (r.raw, e, p) for k, (r, e, p) in y.items()}
        else:
            assert x == y, f.name


def _rich_vault(new_vault, monkeypatch, tmp_path):
    """A vault whose roster has a grant, a second device renamed, a compartment added, a policy, an
    erasure and a revocation: every kind of thing the roster holds."""
    path, vault, _ = new_vault
    for i in range(5):
        vault.append([NewRecord(type="message", conversation="c", role="user", text=f"note {i}")])
    target = vault.append([NewRecord(type="message", text="erase me")]).written[0]
    vault.create_grant("notes-bot", {"personal": "append"}, str(tmp_path / "bot.grant"))
    vault.add_compartment("travel")
    vault.set_policy(erasure=True, reason="mine to erase")
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as lap:
        lap.append([NewRecord(type="message", text="from the laptop")])
        laptop = lap.writer_id
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path) as v:
        v.rename_device(laptop.hex()[:12], "old laptop")
        v.erase([target])
        v.create_grant("reader-bot", {"personal": "read"}, str(tmp_path / "reader.grant"))
        v.revoke("reader-bot", reason="done with it")
    return path, laptop


def test_a_warm_open_of_the_same_batches_takes_the_roster_it_kept(new_vault, monkeypatch, tmp_path):
    path, _laptop = _rich_vault(new_vault, monkeypatch, tmp_path)
    builds = _counting_builds(monkeypatch)
    with open_vault(path):
        pass  # a warm open that computes the roster, and keeps it
    assert builds
    builds.clear()
    with open_vault(path) as v:
        reader = v.session.reader
        assert reader.decryptions == 0
        assert builds == [], "the warm open of the same batches computed the roster again"
        assert not reader.batches.held, "a view was made of a batch the kept roster was computed from"
        kept = reader.roster
        assert kept.revocations and kept.erasures and kept.policies and kept.renames and len(kept.grants()) == 2
        _same(kept, _as_built(v))
        assert kept.verify == reader.batches.signatures.verify
        assert {d.name for d in v.devices()} >= {"old laptop"}
        assert fingerprint(v) == from_scratch(path)


def test_a_change_to_a_batch_that_can_move_the_roster_computes_it_again(new_vault, monkeypatch, tmp_path):
    path, laptop = _rich_vault(new_vault, monkeypatch, tmp_path)
    with open_vault(path):
        pass
    with open_vault(path):
        pass  # the roster kept
    switch_home(monkeypatch, tmp_path / "tablet")
    with open_vault(path) as tablet:  # a new device: its certificate, a control batch the home has not read
        tablet_id = tablet.writer_id
        tablet.rename_device(laptop.hex()[:12], "the laptop, renamed")
    switch_home(monkeypatch, tmp_path / "home")
    builds = _counting_builds(monkeypatch)
    with open_vault(path) as v:  # the kept roster, then the new batches: computed with them
        assert builds
        _same(v.session.reader.roster, _as_built(v))
        assert tablet_id in v.session.reader.roster.principals
        assert {d.name for d in v.devices()} >= {"the laptop, renamed"}
    builds.clear()
    with open_vault(path) as v:  # the batches that can move it changed since it was kept: computed again
        assert builds == [1], "a roster kept for other batches was taken"
        _same(v.session.reader.roster, _as_built(v))
    builds.clear()
    with open_vault(path) as v:
        assert builds == []
        assert tablet_id in v.session.reader.roster.principals
        assert {d.name for d in v.devices()} >= {"the laptop, renamed"}
        assert fingerprint(v) == from_scratch(path)


@pytest.mark.parametrize("damage", ["garbage", "short", "other layout", "another digest"])
def test_a_damaged_or_foreign_memo_is_never_taken(new_vault, monkeypatch, tmp_path, damage):
    path, _laptop = _rich_vault(new_vault, monkeypatch, tmp_path)
    with open_vault(path):
        pass
    with open_vault(path) as v:
        db = v.session.reader.materialized.db
        (value,) = db.execute("SELECT value FROM cache_meta WHERE key = 'roster_kept'").fetchone()
        digest, body = value[:32], cbor2.loads(value[32:])
        if damage == "garbage":
            value = digest + b"\xff\x00 not cbor"
        elif damage == "short":
            value = digest + cbor2.dumps(body[:-1])
        elif damage == "other layout":  # a principal with a field fewer
            body[4][0][1] = body[4][0][1][:-1]
            value = digest + cbor2.dumps(body)
        else:
            value = bytes(32) + value[32:]
        db.execute("UPDATE cache_meta SET value = ? WHERE key = 'roster_kept'", (value,))
        db.commit()
    builds = _counting_builds(monkeypatch)
    with open_vault(path) as v:
        assert builds == [1], "a damaged memo was taken"
        assert v.session.alerts == []
        _same(v.session.reader.roster, _as_built(v))
        assert fingerprint(v) == from_scratch(path)
    builds.clear()
    with open_vault(path):
        assert builds == [], "the roster computed instead was not kept"


def test_the_encoding_gives_back_what_it_was_given_and_refuses_what_the_annotations_do_not_say(
        new_vault, monkeypatch, tmp_path):
    path, _laptop = _rich_vault(new_vault, monkeypatch, tmp_path)
    with open_vault(path) as v:
        roster = v.session.reader.roster
        _same(rostermemo.decode(rostermemo.encode(roster)), roster)
        # a manifest's batches are kept as one byte string (a compacted vault of a million records lists
        # 100,000 in its manifests: read back one by one, they took its warm open 40 ms)
        listed = [m for m in roster.manifests.values() if len(m.batches)]
        assert listed, "the erasure's manifest lists the batches it sealed again"
        for m in listed:
            encoded = rostermemo._encode(m)
            for ids in (m.batches, m.removed):  # (and the segments it replaced: as many again)
                assert bytes(ids) in encoded and list(ids) == sorted(ids)
    for bad in (b"", cbor2.dumps(None), cbor2.dumps([1, 2, 3]), cbor2.dumps({"a": 1})):
        with pytest.raises(ValueError, match="does not decode"):
            rostermemo.decode(bad)
    assert rostermemo.key(b"v" * 32, [(b"a", 1)]) != rostermemo.key(b"v" * 32, [(b"a", 5)])
    assert rostermemo.key(b"v" * 32, [(b"a", 1), (b"b", 1)]) == rostermemo.key(b"v" * 32, [(b"b", 1), (b"a", 1)])
    assert rostermemo.key(b"v" * 32, [(b"a", 1)]) != rostermemo.key(b"w" * 32, [(b"a", 1)])
