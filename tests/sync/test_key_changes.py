"""Key changes while another device writes, over a real sync engine (two Syncthing instances).

Two installations of one vault: "laptop" writes on side A's folder (it creates the vault), "desktop"
on side B's folder (it opens the vault with the passphrase once Syncthing delivered it, which
registers it as a second device).  Each scenario makes the devices write, erase, revoke, change
the passphrase or compact while Syncthing carries the files (or while one side is paused, i.e.
offline), waits until the two folders are quiescent and identical, lets both devices pick up what
arrived, and then checks that every record an append acknowledged (``changes.written``) is readable
on both sides and that ``problems()`` is empty, except what a revocation names as rejected.

The erasure scenarios (b, c, d) failed before the rules of spec §16.10: the other device's writes
became unreadable for good, and two concurrent erasures split the master secret and brought an
erased record back.

pytest main thread only.
"""

from __future__ import annotations

import os
import random
import shutil
import time
from collections.abc import Iterable, Sequence

import pytest
from camillo import NewRecord, Unlock, Vault, WrongCredential
from camillo import log as camillo_log

from tests.sync.syncthing import Pair, conflict_copies, files_under

PASSPHRASE = "correct horse battery staple"
NEW_PASSPHRASE = "a different and longer passphrase"

pytestmark = pytest.mark.syncthing


def note(text: str) -> list[NewRecord]:
    return [NewRecord(type="message", text=text, conversation="sync")]


class Devices:
    """The laptop (side A) and the desktop (side B), each an open vault on its side's folder."""

    def __init__(self, pair: Pair) -> None:
        self.pair = pair
        self.laptop_home = pair.a.home("laptop")
        self.desktop_home = pair.b.home("desktop")
        self.a, _ = Vault.create(pair.a.folder, PASSPHRASE, device_name="laptop", home=self.laptop_home)
        pair.wait_quiescent()
        self.b = Vault.open(pair.b.folder, Unlock.passphrase(PASSPHRASE), home=self.desktop_home,
                            device_name="desktop")
        self.settle()
        assert {d.name for d in self.a.devices()} >= {"laptop", "desktop"}

    def close(self) -> None:
        for v in (self.a, self.b):
            if v is not None and not v.locked:
                v.lock()

    def reopen_b(self, unlock: Unlock | None = None) -> Vault:
        """The desktop opens the vault again (without an OS keychain, CAMILLO_KEYCHAIN=none, its
        device key is sealed in its installation and the passphrase unseals it)."""
        self.b.lock()
        self.b = Vault.open(self.pair.b.folder, unlock or Unlock.passphrase(PASSPHRASE), home=self.desktop_home)
        return self.b

    def reopen_a(self, unlock: Unlock | None = None) -> Vault:
        self.a.lock()
        self.a = Vault.open(self.pair.a.folder, unlock or Unlock.passphrase(PASSPHRASE), home=self.laptop_home)
        return self.a

    def settle(self, rounds: int = 5, vaults: Sequence[Vault] | None = None) -> dict[str, str]:
        """Quiescent, then both refresh; again until a refresh writes nothing (opening or
        refreshing may write: a registration, a key rotation after an erasure)."""
        files = self.pair.wait_quiescent()
        for _ in range(rounds):
            for v in vaults if vaults is not None else (self.a, self.b):
                v.refresh()
            again = self.pair.wait_quiescent()
            if again == files:
                return files
            files = again
        raise AssertionError(f"the vault kept changing after {rounds} refreshes of both devices")


@pytest.fixture
def keychain() -> str:
    """Where installations keep device keys: "none" (sealed in the installation) unless a test
    parametrizes it with "os" (the Secret Service)."""
    return "none"


@pytest.fixture
def devices(syncthing_pair, keychain, monkeypatch):
    monkeypatch.setenv("CAMILLO_KEYCHAIN", keychain)
    if keychain != "none":
        status = Vault.keychain_status()
        if not status.usable:
            pytest.skip(f"no usable OS keychain: {status.reason}")
    d = Devices(syncthing_pair)
    try:
        yield d
    finally:
        d.close()


# ---------------------------------------------------------------------------------------- checks


def unreadable(v: Vault, ids: Iterable[bytes]) -> list[str]:
    """The ids (hex prefixes) of records that are not readable, valid and unerased in ``v``."""
    out = []
    for rid in ids:
        r = v.record(rid)
        if r is None or not r.valid or r.erased:
            out.append(rid.hex()[:12])
    return out


def gone(v: Vault, rid: bytes) -> bool:
    r = v.record(rid)
    return r is None or r.erased


def problems(v: Vault) -> list[str]:
    return [f"{p.kind}: {p.message}" for p in v.problems()]


def assert_has(v: Vault, ids: Iterable[bytes], who: str) -> None:
    ids = list(ids)
    lost = unreadable(v, ids)
    assert not lost, f"{who} cannot read {len(lost)} of {len(ids)} acknowledged record(s) {lost}; problems: {problems(v)}"


def assert_clean(d: Devices) -> None:
    for name, v in (("laptop", d.a), ("desktop", d.b)):
        assert problems(v) == [], f"{name} reports problems"
    assert conflict_copies(d.pair.a.folder) == conflict_copies(d.pair.b.folder) == []


def live_segments(folder: str) -> set[str]:
    return {n for n in files_under(folder) if n.startswith(("segments/", "packs/"))}


# ------------------------------------------------------------------------------------- scenarios


def test_concurrent_writers(devices):
    """a. Both devices append (50 single-record batches each, interleaved, refreshing now and then)
    while Syncthing carries the files both ways."""
    rng = random.Random(1)
    written_a, written_b = [], []
    for i in range(50):
        written_a += devices.a.append(note(f"laptop {i}")).written
        written_b += devices.b.append(note(f"desktop {i}")).written
        if i % 10 == 9:
            devices.a.refresh()
            devices.b.refresh()
        time.sleep(rng.uniform(0, 0.04))
    devices.settle()
    for name, v in (("laptop", devices.a), ("desktop", devices.b)):
        assert_has(v, written_a + written_b, name)
    assert_clean(devices)


def test_erasure_while_the_other_device_is_offline(devices):
    """b. The desktop is offline (its folder paused) and appends 5 records; meanwhile the laptop
    erases an old record of the same compartment.  Back online, the desktop's 5 records are
    readable on both sides and the erased record is gone on both."""
    pair = devices.pair
    old = devices.a.append(note("erase me"))
    keep = devices.a.append(note("keep me")).written
    devices.settle()
    pair.b.pause()
    offline = []
    for i in range(5):
        offline += devices.b.append(note(f"desktop offline {i}")).written
    devices.a.erase(old.written)
    pair.b.resume()
    devices.settle()
    devices.reopen_b()  # the desktop opens the vault again (it rotates its key after the erasure)
    devices.settle()
    for name, v in (("laptop", devices.a), ("desktop", devices.b)):
        assert_has(v, [*keep, *offline], name)
        assert gone(v, old.written[0]), f"{name} still reads the erased record"
    assert_clean(devices)


def test_erasure_while_the_other_device_writes(devices):
    """c. The desktop appends in a loop while the laptop erases an old record, both online."""
    old = devices.a.append(note("erase me")).written
    devices.settle()
    written = []
    for i in range(24):
        written += devices.b.append(note(f"desktop {i}")).written
        if i == 8:
            devices.a.refresh()
            devices.a.erase(old)
        if i % 4 == 3:
            devices.b.refresh()
        time.sleep(0.1)
    devices.settle()
    devices.reopen_b()
    devices.settle()
    for name, v in (("laptop", devices.a), ("desktop", devices.b)):
        assert_has(v, written, name)
        assert gone(v, old[0]), f"{name} still reads the erased record"
    assert_clean(devices)


def test_two_concurrent_erasures(devices):
    """d. Both sides offline from each other; the laptop erases R1 and the desktop R2; back online:
    both gone on both sides, nothing damaged or unreadable, and both devices still write."""
    pair = devices.pair
    r1 = devices.a.append(note("R1")).written[0]
    r2 = devices.b.append(note("R2")).written[0]
    keep_a = devices.a.append(note("kept by the laptop")).written
    keep_b = devices.b.append(note("kept by the desktop")).written
    devices.settle()
    pair.a.pause()
    pair.b.pause()
    devices.a.erase([r1])
    devices.b.erase([r2])
    pair.a.resume()
    pair.b.resume()
    devices.settle()
    devices.reopen_a()
    devices.reopen_b()
    devices.settle()
    after_a = devices.a.append(note("laptop after")).written
    after_b = devices.b.append(note("desktop after")).written
    devices.settle()
    failures = []
    for name, v in (("laptop", devices.a), ("desktop", devices.b)):
        back = [label for label, rid in (("R1", r1), ("R2", r2)) if not gone(v, rid)]
        if back:
            failures.append(f"{name} reads the erased {' and '.join(back)}")
        bad = [p for p in problems(v) if p.startswith(("damaged", "unreadable"))]
        if bad:
            failures.append(f"{name} has {len(bad)} damaged/unreadable file(s): {bad[:3]}")
        lost = unreadable(v, [*keep_a, *keep_b, *after_a, *after_b])
        if lost:
            failures.append(f"{name} cannot read {lost}")
    assert not failures, "; ".join(failures)
    assert_clean(devices)


def test_revocation_while_the_revoked_device_writes(devices):
    """e. The laptop revokes the desktop while the desktop (offline) appends.  Its records the
    laptop had seen stay; those the revocation had not seen (written while it happened and after)
    are rejected, and problems() says so on both sides, naming each of their batches and that the
    writer was revoked; the laptop reports nothing else."""
    pair = devices.pair
    before = []
    for i in range(3):
        before += devices.b.append(note(f"desktop before {i}")).written
    devices.settle()
    pair.b.pause()
    late_batches, late = [], []
    for i in range(4):  # two while the laptop revokes it, two after: none seen by the revocation
        ch = devices.b.append(note(f"desktop offline {i}"))
        late += ch.written
        late_batches += ch.batches
        if i == 1:
            devices.a.revoke("desktop", reason="stolen", reauth=Unlock.passphrase(PASSPHRASE))
    pair.b.resume()
    devices.settle(vaults=[devices.a])
    devices.b.refresh()  # the revoked desktop still looks (it cannot read what comes after)
    for name, v in (("laptop", devices.a), ("desktop", devices.b)):
        assert_has(v, before, name)
        assert all(gone(v, rid) or not v.record(rid).valid for rid in late), f"{name} counts a write after the revocation"
        rejected = [p for p in v.problems() if p.kind == "rejected"]
        for bid in late_batches:
            hits = [p for p in rejected if bid.hex()[:12] in p.message]
            assert hits, f"{name} does not name batch {bid.hex()[:12]} as rejected: {problems(v)}"
            assert all("revoked" in p.message for p in hits), hits
    other = [p for p in problems(devices.a) if not p.startswith("rejected")]
    assert other == [], other
    assert next(d for d in devices.a.devices() if d.name == "desktop").revoked
    assert conflict_copies(pair.a.folder) == conflict_copies(pair.b.folder) == []


@pytest.mark.parametrize("keychain", [
    "none",
    pytest.param("os", marks=[pytest.mark.secretservice, pytest.mark.skipif(
        not os.environ.get("DBUS_SESSION_BUS_ADDRESS"), reason="no D-Bus session (run the suite with scripts/test)")]),
])
def test_passphrase_change_while_the_other_device_writes(devices, keychain):
    """f. The laptop changes the passphrase while the desktop appends: nothing is lost, and the
    desktop still opens as the same device: with its device key from the OS keychain (the Secret
    Service, under scripts/test), and with the new passphrase (without a keychain the passphrase
    unseals the device key kept in its installation); the old passphrase no longer opens."""
    desktop = devices.b.writer_id
    written = []
    for i in range(12):
        written += devices.b.append(note(f"desktop {i}")).written
        if i == 4:
            devices.a.change_passphrase(NEW_PASSPHRASE)
        if i % 4 == 3:
            devices.b.refresh()
        time.sleep(0.1)
    devices.settle()
    for name, v in (("laptop", devices.a), ("desktop", devices.b)):
        assert_has(v, written, name)
    assert_clean(devices)
    if keychain == "os":
        devices.reopen_b(Unlock.device())
        assert devices.b.writer_id == desktop
        assert_has(devices.b, written, "desktop (device key)")
    devices.reopen_b(Unlock.passphrase(NEW_PASSPHRASE))
    assert devices.b.writer_id == desktop, "the desktop opened as a new device"
    assert_has(devices.b, written, "desktop (new passphrase)")
    written += devices.b.append(note("desktop after the change")).written
    devices.settle()
    for name, v in (("laptop", devices.a), ("desktop", devices.b)):
        assert_has(v, written, name)
    assert_clean(devices)
    devices.b.lock()
    with pytest.raises(WrongCredential):
        Vault.open(devices.pair.b.folder, Unlock.passphrase(PASSPHRASE), home=devices.desktop_home)


def test_compaction_while_the_other_device_writes(devices):
    """g. The laptop compacts while the desktop appends: nothing is lost; the old segments stay until
    the desktop has acknowledged the compaction (written after seeing it), then go, on both sides."""
    pair = devices.pair
    written = []
    for i in range(6):
        written += devices.a.append(note(f"laptop {i}")).written
    devices.settle()
    pre = live_segments(pair.a.folder)
    for i in range(10):
        written += devices.b.append(note(f"desktop {i}")).written
        if i == 3:
            devices.a.refresh()
            first = devices.a.compact()
        time.sleep(0.1)
    # Nobody can have acknowledged it yet: nothing was deleted, everything old is kept.
    assert first.segments_written >= 1 and first.pending > 0 and not first.alone, first.lines()
    assert first.segments_deleted == 0, first.lines()
    devices.settle()
    assert live_segments(pair.a.folder) >= pre and live_segments(pair.b.folder) >= pre, "pruned before acknowledged"
    for name, v in (("laptop", devices.a), ("desktop", devices.b)):
        assert_has(v, written, name)
    # The desktop has now seen the compaction: its next write (in the compacted compartment,
    # personal) acknowledges it, and the laptop's next compaction prunes that compartment's old
    # segments.  (Compartments the desktop never writes to, and the control compartment, keep
    # theirs until it writes there or writes a control batch: acknowledgment is per compartment.)
    written += devices.b.append(note("desktop acknowledges")).written
    devices.settle()
    second = devices.a.compact()
    assert second.segments_deleted > 0, second.lines()
    deleted = pre - live_segments(pair.a.folder)
    assert deleted, "no old segment was pruned after the desktop acknowledged"
    devices.settle()
    assert not deleted & live_segments(pair.b.folder)
    for name, v in (("laptop", devices.a), ("desktop", devices.b)):
        assert_has(v, written, name)
    assert_clean(devices)


def test_reverse_partial_delivery_is_syncing_not_a_gap(devices):
    """h. The desktop receives the laptop's batches newest first (copied one by one into its
    paused folder, as a sync service that delivers out of order would): while earlier ones are
    missing it says "syncing" (within the grace period, camillo.log.SYNC_GRACE_SECONDS), never
    "missing batches"; then Syncthing takes over and everything converges."""
    pair = devices.pair
    assert camillo_log.SYNC_GRACE_SECONDS >= 60  # the copies below take seconds, far inside it
    pair.b.pause()
    before = set(files_under(pair.a.folder))
    written = []
    for i in range(5):
        written += devices.a.append(note(f"laptop batch {i}")).written
        time.sleep(0.01)  # distinct modification times
    new = sorted(set(files_under(pair.a.folder)) - before,
                 key=lambda n: os.stat(os.path.join(pair.a.folder, n)).st_mtime_ns, reverse=True)
    assert len(new) >= 5, new
    states = []
    for i, name in enumerate(new):
        src, dst = os.path.join(pair.a.folder, name), os.path.join(pair.b.folder, name)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(src, dst + ".partial-copy")  # whole files appear at once, like a sync client's rename
        os.rename(dst + ".partial-copy", dst)
        devices.b.refresh()
        status = devices.b.sync_status()
        states.append(status.state)
        if i < len(new) - 1:
            assert status.state == "syncing", (name, status)
    assert states[-1] == "up to date", states
    assert_has(devices.b, written, "desktop")
    pair.b.resume()
    devices.settle()
    for name, v in (("laptop", devices.a), ("desktop", devices.b)):
        assert_has(v, written, name)
        assert v.sync_status().state == "up to date"
    assert_clean(devices)
