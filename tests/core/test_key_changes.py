"""Key changes under concurrency (spec §16.10), with two folders that a small file-level sync
carries between (deletions propagate, as with Syncthing): an erasure never loses another device's
writes, concurrent erasures converge on one master secret and both erasures hold, and a writer
never writes what it cannot read back.  The same scenarios run against real Syncthing in tests/sync."""

from __future__ import annotations

import os
import shutil

import pytest
from camillo import NewRecord, Unlock, Vault

PASSPHRASE = "correct horse battery staple"


class FolderSync:
    """Two vault folders kept alike file by file: what appeared on one side is copied to the other,
    what was deleted on one side since the last sync is deleted on the other."""

    def __init__(self, a: str, b: str) -> None:
        self.a, self.b = a, b
        self.last: set[str] = set()

    @staticmethod
    def files(root: str) -> set[str]:
        out = set()
        for dirpath, _dirs, names in os.walk(root):
            for n in names:
                if not n.startswith("."):
                    out.add(os.path.relpath(os.path.join(dirpath, n), root))
        return out

    def sync(self) -> None:
        fa, fb = self.files(self.a), self.files(self.b)
        gone = (self.last - fa) | (self.last - fb)
        for rel in gone:
            for root in (self.a, self.b):
                p = os.path.join(root, rel)
                if os.path.exists(p):
                    os.unlink(p)
        for src, dst, have in ((self.a, self.b, fb), (self.b, self.a, fa)):
            for rel in self.files(src) - have - gone:
                os.makedirs(os.path.dirname(os.path.join(dst, rel)), exist_ok=True)
                shutil.copy2(os.path.join(src, rel), os.path.join(dst, rel))
        self.last = self.files(self.a)
        assert self.last == self.files(self.b)


@pytest.fixture
def two_devices(tmp_path):
    """A vault in folder A (the laptop) and its synced copy in folder B (the desktop, registered)."""
    a, b = str(tmp_path / "A"), str(tmp_path / "B")
    homes = {"laptop": str(tmp_path / "home-laptop"), "desktop": str(tmp_path / "home-desktop")}
    vault, _ = Vault.create(a, PASSPHRASE, device_name="laptop", home=homes["laptop"])
    vault.lock()
    os.makedirs(b)
    sync = FolderSync(a, b)
    sync.sync()
    Vault.open(b, Unlock.passphrase(PASSPHRASE), device_name="desktop", home=homes["desktop"]).lock()
    sync.sync()

    def open_(who: str) -> Vault:
        return Vault.open(a if who == "laptop" else b, Unlock.passphrase(PASSPHRASE), home=homes[who])

    return sync, open_


def texts(vault: Vault) -> set[str]:
    return {r.text for r in vault.timeline() if r.text}


def serious(vault: Vault) -> list[str]:
    return [f"{p.kind}: {p.message}" for p in vault.problems() if p.kind not in ("waiting",)]


def test_an_erasure_keeps_the_writes_of_a_device_that_was_offline(two_devices):
    sync, open_ = two_devices
    with open_("laptop") as lap:
        target = lap.append([NewRecord(type="message", text="erase me")]).written[0]
        lap.append([NewRecord(type="message", text="kept from before")])
    sync.sync()
    with open_("desktop") as desk:  # offline: nothing of this reaches the laptop before the erasure
        for i in range(5):
            desk.append([NewRecord(type="message", text=f"offline {i}")])
    with open_("laptop") as lap:
        lap.erase([target])
    sync.sync()
    with open_("desktop") as desk:
        assert {f"offline {i}" for i in range(5)} | {"kept from before"} <= texts(desk)
        assert "erase me" not in texts(desk)
    sync.sync()
    with open_("laptop") as lap:
        assert {f"offline {i}" for i in range(5)} <= texts(lap)
        assert "erase me" not in texts(lap)
        assert serious(lap) == []
    with open_("desktop") as desk:
        assert serious(desk) == []


def test_an_erasure_keeps_the_writes_of_a_device_that_wrote_during_it(two_devices):
    """The desktop's session is open and writing while the laptop erases: the desktop keeps sealing
    to the epoch the erasure destroys until it sees the erasure; then it seals those batches again."""
    sync, open_ = two_devices
    with open_("laptop") as lap:
        target = lap.append([NewRecord(type="message", text="erase me")]).written[0]
    sync.sync()
    desk = open_("desktop")
    try:
        desk.append([NewRecord(type="message", text="before")])
        with open_("laptop") as lap:
            lap.erase([target])
        desk.append([NewRecord(type="message", text="during")])  # still under the destroyed epoch
        sync.sync()
        desk.refresh()  # sees the erasure: adopts the new keys, seals "during" again
        desk.append([NewRecord(type="message", text="after")])
        assert {"before", "during", "after"} <= texts(desk)
        sync.sync()
    finally:
        desk.lock()
    with open_("laptop") as lap:
        assert {"before", "during", "after"} <= texts(lap)
        assert "erase me" not in texts(lap)
        assert serious(lap) == []


def test_two_concurrent_erasures_both_hold_and_the_vault_stays_writable(two_devices):
    sync, open_ = two_devices
    with open_("laptop") as lap:
        r1 = lap.append([NewRecord(type="message", text="secret one")]).written[0]
        r2 = lap.append([NewRecord(type="message", text="secret two")]).written[0]
        lap.append([NewRecord(type="message", text="an ordinary day")])
    sync.sync()
    with open_("laptop") as lap:
        lap.erase([r1])
    with open_("desktop") as desk:
        desk.erase([r2])
    sync.sync()
    for _round in range(3):  # each side completes what the other's erasure left, then both settle
        for who in ("laptop", "desktop"):
            with open_(who) as v:
                v.refresh()
            sync.sync()
    for who in ("laptop", "desktop"):
        with open_(who) as v:
            t = texts(v)
            assert "secret one" not in t and "secret two" not in t, who
            assert "an ordinary day" in t
            v.append([NewRecord(type="message", text=f"written on the {who}")])
        sync.sync()
    for who in ("laptop", "desktop"):
        with open_(who) as v:
            assert {"written on the laptop", "written on the desktop", "an ordinary day"} <= texts(v), who
            assert serious(v) == [], who
