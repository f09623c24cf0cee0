"""The envelopes a warm open read before are taken from the local state (camillo.memos.EnvelopeMemo):
no file read, no HPKE open, the same keys; a new envelope is read, a damaged copy of one read before
changes nothing, and the rows of envelopes gone from the folder go with the next full listing."""

from __future__ import annotations

import os

from camillo import NewRecord, Unlock, Vault, envelopes
from camillo.storage import FolderShelf

from .helpers import switch_home
from .test_incremental import fingerprint, from_scratch

PASSPHRASE = "correct horse battery staple"


def _open(path, **kw):
    return Vault.open(path, Unlock.passphrase(PASSPHRASE), **kw)


def _counting(monkeypatch):
    """Count the envelope files read and the envelopes unwrapped (HPKE opens)."""
    seen = {"read": 0, "unwrapped": 0}
    real_read, real_unwrap = FolderShelf.read, envelopes.unwrap_payload

    def read(self, name):
        if name.startswith("env/"):
            seen["read"] += 1
        return real_read(self, name)

    def unwrap(*args, **kw):
        seen["unwrapped"] += 1
        return real_unwrap(*args, **kw)

    monkeypatch.setattr(FolderShelf, "read", read)
    monkeypatch.setattr(envelopes, "unwrap_payload", unwrap)
    return seen


def _keys(v):
    return {ref: bytes(s) for ref, s in v.session.keyring.secrets().items()}


def test_a_warm_open_reads_no_envelope_it_read_before_and_holds_the_same_keys(new_vault, monkeypatch):
    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="personal note")])
    vault.append([NewRecord(type="message", text="work note")], compartment="work")
    vault.lock()
    with _open(path, cache=False, register=False) as cold:  # every envelope read from its file
        expected = _keys(cold)
    assert len(expected) >= 2
    with _open(path) as v:  # reads them and remembers them
        assert _keys(v) == expected
    seen = _counting(monkeypatch)
    with _open(path) as v:
        assert seen == {"read": 0, "unwrapped": 0}, seen
        assert _keys(v) == expected
        v.append([NewRecord(type="message", text="after the warm open")], compartment="work")
        assert fingerprint(v) == from_scratch(path)
    with _open(path, cache=False, register=False) as cold:
        assert "after the warm open" in [r.text for r in cold.timeline()]


def test_a_new_envelope_is_read_and_a_damaged_copy_of_one_read_before_changes_nothing(
        new_vault, monkeypatch, tmp_path):
    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="personal note")])
    vault.lock()
    with _open(path):
        pass
    switch_home(monkeypatch, tmp_path / "laptop")
    with _open(path) as lap:  # another device makes a compartment: its epoch's envelopes
        lap.add_compartment("garden")
        lap.append([NewRecord(type="message", text="work note")], compartment="garden")
        expected = _keys(lap)
    switch_home(monkeypatch, tmp_path / "home")
    seen = _counting(monkeypatch)
    with _open(path) as v:
        assert seen["unwrapped"] == 1  # the new one addressed to the owner, only
        assert _keys(v) == expected
    seen.update(read=0, unwrapped=0)
    with _open(path) as v:
        assert seen == {"read": 0, "unwrapped": 0}
    remembered = sorted(os.path.join(path, "env", n) for n in os.listdir(os.path.join(path, "env")))
    for f in remembered:  # every envelope file damaged (same size, same name): nothing changes here
        data = bytearray(open(f, "rb").read())
        data[2000] ^= 1
        open(f, "wb").write(bytes(data))
    seen.update(read=0, unwrapped=0)
    with _open(path) as v:
        assert seen == {"read": 0, "unwrapped": 0}
        assert _keys(v) == expected
        assert not [p for p in v.problems() if p.file.startswith("env/")]
        assert sorted(r.text for r in v.timeline()) == ["personal note", "work note"]


def test_the_rows_of_envelopes_gone_from_the_folder_go_with_the_next_full_listing(new_vault, tmp_path):
    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="personal note")], compartment="work")
    vault.create_grant("helper", {"work": "read"}, str(tmp_path / "helper.grant"))  # envelopes to the agent
    vault.lock()
    with _open(path) as v:
        rows = dict(v.session.materialized.cache_db.execute("SELECT name, payload FROM cache_envelopes"))
    names = sorted(n for n in rows if rows[n] is None)  # not addressed to the owner: the agent's
    assert rows and names
    os.remove(os.path.join(path, names[0]))
    with _open(path) as v:
        left = {n for (n,) in v.session.materialized.cache_db.execute("SELECT name FROM cache_envelopes")}
        assert names[0] not in left and left == set(rows) - {names[0]}


def test_a_payload_taken_from_the_state_is_not_checked_against_the_profile_again_but_its_fields_are(
        new_vault, monkeypatch):
    """A payload kept in the state was decoded strictly when first read: a warm open decodes it plainly
    (at a million records 103 payloads, 4 ms), with the same keys; one whose fields are not an envelope's
    (a payload the state holds for another vault) is not taken, and its file is read again."""
    import cbor2
    from camillo import encoding

    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="personal note")])
    vault.lock()
    with _open(path, cache=False, register=False) as cold:
        expected = _keys(cold)
    with _open(path):
        pass
    strict = []
    real = encoding.decode
    monkeypatch.setattr(encoding, "decode", lambda data, what="CBOR item", **kw: (
        strict.append(what) if what.startswith("envelope") else None) or real(data, what, **kw))
    with _open(path) as v:
        assert strict == [], "a payload read before was checked against the profile again"
        assert _keys(v) == expected
        db = v.session.reader.materialized.db
        name, payload = db.execute("SELECT name, payload FROM cache_envelopes WHERE payload IS NOT NULL").fetchone()
        m = cbor2.loads(payload)
        m[next(k for k, x in m.items() if x == v.vault_id)] = bytes(32)  # another vault's
        damaged = cbor2.dumps(m, canonical=True)
        db.execute("UPDATE cache_envelopes SET payload = ? WHERE name = ?", (damaged, name))
        db.commit()
    seen = _counting(monkeypatch)
    for _ in range(2):  # not taken: forgotten, and its file read again (by this open or the next)
        with _open(path) as v:
            row = v.session.reader.materialized.db.execute(
                "SELECT payload FROM cache_envelopes WHERE name = ?", (name,)).fetchone()
            assert row is None or row[0] == payload
            assert not [p for p in v.problems() if p.file.startswith("env/")]
    assert 1 <= seen["read"] <= 2 and seen["read"] == seen["unwrapped"], seen
    seen.update(read=0, unwrapped=0)
    with _open(path) as v:  # and kept again: not read any more
        assert _keys(v) == expected
        assert v.session.reader.materialized.db.execute(
            "SELECT payload FROM cache_envelopes WHERE name = ?", (name,)).fetchone() == (payload,)
    assert seen == {"read": 0, "unwrapped": 0}, seen


def test_a_warm_open_looks_up_no_envelope_name_among_the_segments(new_vault, monkeypatch):
    """The folder's listing brings the envelopes' names to a warm open's refresh (275 at a million
    records): none is looked up among the segments the state holds."""
    from camillo.session.segmap import SegmentBatches

    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="personal note")])
    vault.lock()
    with _open(path):
        pass
    asked = []
    real = SegmentBatches.__contains__
    monkeypatch.setattr(SegmentBatches, "__contains__", lambda self, name: asked.append(name) or real(self, name))
    with _open(path) as v:
        assert v.session.reader.decryptions == 0
        assert not [n for n in asked if not str(n).startswith("segments/")], asked
        assert fingerprint(v) == from_scratch(path)
