"""The local state survives another device's key change: a passphrase change, a revocation or an
erasure on one device does not make the others read the whole vault again (their state does not
depend on the master secret), yet what an erasure removed leaves their state too, and a folder
that no longer holds an erasure the state was purged for (a rollback, an older copy) rebuilds it.
Each result equals a vault opened from scratch."""

from __future__ import annotations

import os

import pytest
from camillo import NewRecord, Unlock, Vault
from camillo.session.reader import Reader

from ..security.test_erasure_purge import decrypted
from .test_key_changes import PASSPHRASE, FolderSync

NEW = "a brand new passphrase for the garden"


@pytest.fixture
def devices(tmp_path):
    a, b = str(tmp_path / "A"), str(tmp_path / "B")
    homes = {"laptop": str(tmp_path / "home-laptop"), "desktop": str(tmp_path / "home-desktop")}
    vault, _ = Vault.create(a, PASSPHRASE, device_name="laptop", home=homes["laptop"])
    for i in range(30):
        vault.append([NewRecord(type="message", conversation="c", role="user", text=f"garden note {i}")])
    vault.append([NewRecord(type="message", conversation="c", role="user", text="zyxwvut the secret")])
    vault.lock()
    os.makedirs(b)
    sync = FolderSync(a, b)
    sync.sync()
    Vault.open(b, Unlock.passphrase(PASSPHRASE), device_name="desktop", home=homes["desktop"]).lock()
    sync.sync()

    def open_(who: str, passphrase: str = PASSPHRASE, **kw) -> Vault:
        return Vault.open(a if who == "laptop" else b, Unlock.passphrase(passphrase), home=homes[who], **kw)

    return sync, open_, b


@pytest.fixture
def reads(monkeypatch):
    """Counts the segments read."""
    count = {"n": 0}
    real = Reader.read_segment

    def counting(self, name):
        count["n"] += 1
        return real(self, name)

    monkeypatch.setattr(Reader, "read_segment", counting)
    return count


def view(v: Vault) -> list:
    return [(r.id, r.valid, r.hidden, r.text) for r in v.timeline(include_hidden=True)]


def from_scratch(folder: str, passphrase: str) -> list:
    with Vault.open(folder, Unlock.passphrase(passphrase), cache=False, register=False, read_only=True) as v:
        return view(v)


def test_another_devices_passphrase_change_keeps_this_devices_state(devices, reads):
    sync, open_, b = devices
    desk = open_("desktop")
    try:
        with open_("laptop") as lap:
            lap.change_passphrase(NEW)
        sync.sync()
        reads["n"] = 0
        desk.refresh()  # it adopts the rolled master secret
        assert reads["n"] <= 4, f"{reads['n']} segments read: the local state was read again"
        desk.append([NewRecord(type="message", conversation="c", role="user", text="after the change")])
        assert view(desk) == from_scratch(b, NEW)
    finally:
        desk.lock()


def test_a_session_open_during_another_devices_revocation_reads_only_what_changed(devices, reads):
    sync, open_, b = devices
    with open_("laptop") as lap:
        lap.create_grant("planner", {"personal": "read"}, os.path.join(os.path.dirname(b), "planner.grant"))
    sync.sync()
    desk = open_("desktop")
    try:
        with open_("laptop") as lap:
            lap.revoke("planner")
        sync.sync()
        reads["n"] = 0
        desk.refresh()
        assert reads["n"] <= 4, f"{reads['n']} segments read: everything was read again"
        desk.append([NewRecord(type="message", conversation="c", role="user", text="after the revocation")])
        assert view(desk) == from_scratch(b, PASSPHRASE)
    finally:
        desk.lock()


def test_another_devices_erasure_leaves_nothing_in_this_devices_state(devices):
    sync, open_, b = devices
    desk = open_("desktop")
    try:
        desk.search("zyxwvut")  # the full-text index holds it too
        desk.session.reader.settle(force=True)
        cache = desk.session.cache
        assert cache is not None and b"zyxwvut" in decrypted(cache.path, cache.page_key)
        with open_("laptop") as lap:
            secret = next(r.id for r in lap.timeline() if r.text == "zyxwvut the secret")
            lap.erase([secret])
        sync.sync()
        desk.refresh()
        assert "zyxwvut the secret" not in {r.text for r in desk.timeline()}
        assert view(desk) == from_scratch(b, PASSPHRASE)
        desk.session.reader.settle(force=True)
        cache = desk.session.cache
        assert cache is not None
        assert b"zyxwvut" not in decrypted(cache.path, cache.page_key), "the erased text stayed in the local state"
    finally:
        desk.lock()


def test_a_folder_without_an_erasure_the_state_was_purged_for_rebuilds_it(devices, tmp_path, reads):
    sync, open_, b = devices
    before = str(tmp_path / "before")
    import shutil

    shutil.copytree(b, before)
    with open_("laptop") as lap:
        secret = next(r.id for r in lap.timeline() if r.text == "zyxwvut the secret")
        lap.erase([secret])
    sync.sync()
    with open_("desktop") as desk:
        desk.timeline()
    shutil.rmtree(b)
    shutil.copytree(before, b)  # the host rolls the folder back to before the erasure
    with open_("desktop") as desk:
        assert "zyxwvut the secret" in {r.text for r in desk.timeline()}, "the rolled-back folder holds it"
        assert view(desk) == from_scratch(b, PASSPHRASE)
