"""The device state's two copies (camillo.devicestate): saves overwrite the older copy in place, the
newest copy that opens is the state, a save a crash tore leaves the previous one standing, and a
state from the one-file layout is read and carried on."""

from __future__ import annotations

import os

import pytest
from camillo import encoding
from camillo.devicestate import WRITES, DeviceState, DeviceStateStore
from camillo.errors import DamagedFile
from camillo.keys import local_key
from camillo.localstate import seal_local

VAULT = bytes(range(32))
SECRET = bytes(range(32, 64))


def store_in(tmp_path) -> DeviceStateStore:
    return DeviceStateStore(str(tmp_path / "actors" / "ab" / "state.bin"), SECRET, VAULT)


def state(seq: int) -> DeviceState:
    return DeviceState(counters={b"c" * 32: (seq, bytes([seq]) * 32)})


def test_saves_take_turns_in_place_and_the_newest_copy_is_the_state(tmp_path, monkeypatch):
    store = store_in(tmp_path)
    store.save(state(1))
    store.save(state(2))
    assert all(os.path.exists(p) for p in store.paths)
    inodes = [os.stat(p).st_ino for p in store.paths]
    made: list[str] = []
    real_open, real_replace = os.open, os.replace
    monkeypatch.setattr(os, "open", lambda p, f, *a, **k: (made.append(p) if f & os.O_CREAT and not
                                                            p.endswith(".lock") else None) or real_open(p, f, *a, **k))
    monkeypatch.setattr(os, "replace", lambda *a, **k: made.append(str(a)) or real_replace(*a, **k))
    for seq in range(3, 8):
        store.save(state(seq))
        fresh = store_in(tmp_path)  # (another process: nothing cached)
        assert fresh.load().counters[b"c" * 32][0] == seq
    assert made == [], "a save made a new file or renamed one"
    assert [os.stat(p).st_ino for p in store.paths] == inodes, "the copies are the same files, overwritten"


def test_a_first_save_killed_before_it_wrote_a_byte_is_no_state_not_damage(tmp_path):
    """Found by the crash campaign (tests/reliability, a re-certification killed 0.03 s in): the first save
    of a new key's state creates its file and is killed before writing to it.  The empty file made the
    device refuse to open ("not a Camillo local-state file"); it is now no state, as if never created,
    and the next save writes it."""
    store = store_in(tmp_path)
    os.makedirs(os.path.dirname(store.path))
    open(store.path, "wb").close()
    assert store_in(tmp_path).load() is None
    store_in(tmp_path).save(state(1))
    assert store_in(tmp_path).load().counters[b"c" * 32][0] == 1


def test_a_torn_save_leaves_the_previous_state_standing(tmp_path):
    store = store_in(tmp_path)
    store.save(state(1))
    store.save(state(2))
    store.save(state(3))  # the third save went to the first copy again (counts 0, 1, 2)
    newest = store.paths[0]
    with open(newest, "r+b") as fh:  # a power cut in the middle of overwriting it
        data = fh.read()
        fh.seek(len(data) // 2)
        fh.write(b"\0" * (len(data) - len(data) // 2))
    fresh = store_in(tmp_path)
    assert fresh.load().counters[b"c" * 32][0] == 2, "the other copy (the save before) is the state"
    fresh.save(state(4))  # and the next save overwrites the torn one: it is the older copy now
    assert store_in(tmp_path).load().counters[b"c" * 32][0] == 4
    os.truncate(store.paths[1], 10)  # the other copy torn now: the one just written stands
    assert store_in(tmp_path).load().counters[b"c" * 32][0] == 4


def test_neither_copy_opening_is_damage_named_by_file(tmp_path):
    store = store_in(tmp_path)
    store.save(state(1))
    store.save(state(2))
    for p in store.paths:
        with open(p, "r+b") as fh:
            fh.seek(40)
            fh.write(b"\xff" * 8)
    with pytest.raises(DamagedFile) as info:
        store_in(tmp_path).load()
    assert "state" in str(info.value) and info.value.file in store.paths


def test_a_state_from_the_one_file_layout_is_read_and_carried_on(tmp_path):
    store = store_in(tmp_path)
    os.makedirs(os.path.dirname(store.path))
    raw = encoding.encode(state(5).to_map())  # no write count: what the one-file layout wrote
    assert WRITES not in state(5).to_map()
    with open(store.path, "wb") as fh:
        fh.write(seal_local(local_key(SECRET, "state", VAULT), "state", VAULT, raw))
    loaded = store_in(tmp_path).load()
    assert loaded is not None and loaded.counters[b"c" * 32][0] == 5
    store.save(state(6))
    assert os.path.exists(store.paths[1]), "the first save made the second copy, the old file kept"
    assert store_in(tmp_path).load().counters[b"c" * 32][0] == 6
    os.unlink(store.paths[1])  # (that copy lost: the old file still holds the state before it)
    assert store_in(tmp_path).load().counters[b"c" * 32][0] == 5


def test_a_save_under_the_lock_and_one_without_it_agree(tmp_path):
    """Every save holds the lock (a save outside it takes it); within one hold, a save follows the
    load it was made from, and a second store (another process) sees each save."""
    store, other = store_in(tmp_path), store_in(tmp_path)
    store.save(state(1))
    with store.locked():
        ds = store.load()
        ds.counters[b"c" * 32] = (2, b"\2" * 32)
        store.save(ds)
        with store.locked():  # re-entrant within the store
            store.save(state(3))
    assert other.load().counters[b"c" * 32][0] == 3
    other.save(state(4))
    assert store.load().counters[b"c" * 32][0] == 4
    store.save(state(5))  # its count read again under the lock: not a stale one that would lose
    assert other.load().counters[b"c" * 32][0] == 5


def test_a_forgotten_secret_is_left_in_neither_copy(tmp_path):
    """An epoch secret kept for sealing again (spec §16.10) is forgotten once an erasure destroyed
    that epoch: the older copy must not keep it for a thief with the device key to read."""
    from camillo.localstate import open_local

    store = store_in(tmp_path)
    secret = b"S" * 32
    held = state(1)
    held.kept = {b"c" * 32: {b"e" * 32: secret}}
    store.save(held)
    store.save(held)  # both copies hold it
    forgot = state(2)
    store.save(forgot)
    key = local_key(SECRET, "state", VAULT)
    for p in store.paths:
        with open(p, "rb") as fh:
            plain = open_local(key, "state", VAULT, fh.read(), p)
        assert secret not in plain, f"{os.path.basename(p)} still holds the forgotten secret"
    assert store_in(tmp_path).load().counters[b"c" * 32][0] == 2
