"""The listing of the vault folder at an open.

An open with a passphrase and no local state to resume lists the vault folder while Argon2id
derives the key.  The key derivation runs in C without the interpreter lock (64 MiB and a few
hundred milliseconds); listing the folder (100,000 files at a million records) takes about as long
and is what the open does next.  The slots are read first from their own directory's listing, so
the whole folder is listed on this thread while a worker derives: the two must overlap, and the
open must see exactly what it saw before.

An open that resumes a local state lists only the directories whose mtime moved since the listing
the state keeps (``FolderShelf.prime``), and must see exactly what a full listing sees."""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

from camillo import NewRecord, Unlock, Vault
from camillo.session import unlock as unlock_mod
from camillo.storage import FolderShelf

from tests.conftest import PASSPHRASE


def test_the_folder_is_listed_while_the_key_is_derived(new_vault, monkeypatch):
    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="garden")])
    expected = [r.id for r in vault.timeline()]
    vault.lock()
    deriving, listing = threading.Event(), threading.Event()
    met: dict[str, bool] = {}
    real_derive, real_scan = unlock_mod.from_passphrase, FolderShelf.scan_folder

    def derive(*args, **kwargs):
        deriving.set()
        met.setdefault("the listing ran while deriving", listing.wait(5))
        return real_derive(*args, **kwargs)

    def scan(self):
        listing.set()
        met.setdefault("the key was derived while listing", deriving.wait(5))
        return real_scan(self)

    monkeypatch.setattr(unlock_mod, "from_passphrase", derive)
    monkeypatch.setattr(FolderShelf, "scan_folder", scan)
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), cache=False) as v:  # (no local state to resume)
        assert [r.id for r in v.timeline()] == expected
    assert met == {"the listing ran while deriving": True, "the key was derived while listing": True}


def test_a_directory_listed_before_the_first_scan_holds_what_the_scan_finds(new_vault):
    path, vault, _ = new_vault
    vault.lock()
    slots_dir = os.path.join(path, "slots")
    open(os.path.join(slots_dir, ".tmp-unfinished"), "wb").close()  # (a write in progress: not a file yet)
    open(os.path.join(slots_dir, "notes.txt"), "wb").close()  # (not a vault file name)
    os.mkdir(os.path.join(slots_dir, "sub"))
    before = FolderShelf(path).files_in("slots")
    scanned = FolderShelf(path)
    scanned.list()
    assert before == scanned.files_in("slots") and before and all(n.startswith("slots/") for n in before)
    assert FolderShelf(path).files_in("no-such-directory") == frozenset()


@contextlib.contextmanager
def _listing(monkeypatch) -> Iterator[list[str]]:
    """The directories os.scandir lists meanwhile (the folder's listing, the slots' own)."""
    import camillo.storage as storage_mod

    listed: list[str] = []
    real = os.scandir

    def scandir(path):
        listed.append(os.fspath(path))
        return real(path)

    with monkeypatch.context() as m:
        m.setattr(storage_mod.os, "scandir", scandir)
        yield listed


def test_an_open_that_resumes_its_state_lists_only_the_directories_that_moved(new_vault, monkeypatch, tmp_path):
    from tests.core.helpers import switch_home
    from tests.core.test_incremental import fingerprint, from_scratch

    path, vault, _ = new_vault
    slots = os.path.join(path, "slots")
    for i in range(6):
        vault.append([NewRecord(type="message", text=f"garden {i}")])
    vault.lock()
    os.utime(path, ns=(10**18, 10**18))  # (every directory's mtime well outside the clock's tick)
    for root, dirs, _files in os.walk(path):
        for d in dirs:
            os.utime(os.path.join(root, d), ns=(10**18, 10**18))
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)):
        pass  # the state keeps this listing
    with _listing(monkeypatch) as listed:
        v = Vault.open(path, Unlock.passphrase(PASSPHRASE))
    with v:
        assert v.session.reader.decryptions == 0
        assert listed == [slots], "an unchanged folder was listed again"
        assert fingerprint(v) == from_scratch(path)
    switch_home(monkeypatch, tmp_path / "laptop")
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as other:  # another device writes meanwhile
        other.append([NewRecord(type="message", text="from the laptop")])
    switch_home(monkeypatch, tmp_path / "home")
    moved = {root for root, _d, _f in os.walk(path) if os.stat(root).st_mtime_ns != 10**18} - {slots}
    assert any("segments/" in m for m in moved)
    for m in moved:  # (written a while ago: a listing now is outside their mtime's tick, and kept)
        os.utime(m, ns=(15 * 10**17, 15 * 10**17))
    with _listing(monkeypatch) as listed:
        v = Vault.open(path, Unlock.passphrase(PASSPHRASE))
    with v:
        assert "from the laptop" in [r.text for r in v.timeline()]
        assert set(listed) - {slots} == moved, "not exactly the directories that moved"
        assert fingerprint(v) == from_scratch(path)
    # the listing kept was brought up to date: what this device wrote since (it acknowledged the
    # laptop) is all the next open lists
    written = {root for root, _d, _f in os.walk(path) if os.stat(root).st_mtime_ns not in (10**18, 15 * 10**17)}
    with _listing(monkeypatch) as listed:
        v = Vault.open(path, Unlock.passphrase(PASSPHRASE))
    with v:
        assert set(listed) == written | {slots}
        assert fingerprint(v) == from_scratch(path)


def test_the_listing_kept_leaves_out_directories_listed_within_their_mtimes_tick(tmp_path):
    """A directory listed in the same clock tick as its mtime could change again without its mtime
    moving: its entry is not kept (and one kept before is dropped), so the next open lists it."""
    from camillo.storage import FolderShelf

    os.makedirs(tmp_path / "v" / "env")
    open(tmp_path / "v" / "VMEM", "wb").close()
    name = "env/" + "ab" * 32 + ".env"
    open(tmp_path / "v" / name, "wb").close()
    os.utime(tmp_path / "v", ns=(10**18, 10**18))  # (the folder itself written long ago)
    shelf = FolderShelf(str(tmp_path / "v"))
    shelf.list()
    keep, drop = shelf.listing_changes(every=True)
    assert [rel for rel, *_ in keep] == [""] and drop == ["env"], "a directory just written was kept"
    os.utime(tmp_path / "v" / "env", ns=(10**18, 10**18))
    shelf.list()
    keep, drop = shelf.listing_changes()
    assert [(rel, files) for rel, _m, files, _s in keep] == [("env", frozenset({name}))] and drop == []
    primed = FolderShelf(str(tmp_path / "v"))
    primed.prime([("env", 10**18, frozenset({name, "env/" + "cd" * 32 + ".env"}), frozenset())])
    assert "env/" + "cd" * 32 + ".env" in primed.list(), "the kept entry was not used"
    os.utime(tmp_path / "v" / "env", ns=(15 * 10**17, 15 * 10**17))
    fresh = FolderShelf(str(tmp_path / "v"))
    fresh.prime([("env", 10**18, frozenset({name, "env/" + "cd" * 32 + ".env"}), frozenset())])
    assert fresh.list() == ["VMEM", name], "an entry whose mtime moved was used"


def test_a_directory_listed_again_checks_only_the_names_it_did_not_hold(tmp_path, monkeypatch):
    """Another device's new files move nearly every directory's mtime; listing one again checks the
    names it held before (they passed ``kind_of`` then) only by a set look-up, and each new name as
    before: the names a reader must ignore stay out."""
    import camillo.storage as storage_mod
    from camillo.storage import FolderShelf

    root = tmp_path / "v"
    os.makedirs(root / "env")
    open(root / "VMEM", "wb").close()
    held = {f"env/{c * 64}.env" for c in "abc"}
    for name in held:
        open(root / name, "wb").close()
    os.utime(root / "env", ns=(10**18, 10**18))
    shelf = FolderShelf(str(root))
    shelf.list()
    checked: list[str] = []
    real = storage_mod.kind_of
    monkeypatch.setattr(storage_mod, "kind_of", lambda name: checked.append(name) or real(name))
    new = "env/" + "d" * 64 + ".env"
    open(root / new, "wb").close()
    open(root / "env" / "notes.txt", "wb").close()
    os.utime(root / "env", ns=(2 * 10**17 + 10**18, 2 * 10**17 + 10**18))
    assert shelf.list() == sorted({"VMEM", new} | held)
    assert sorted(checked) == sorted([new, "env/notes.txt"])
    checked.clear()
    primed = FolderShelf(str(root))  # a kept listing whose mtime moved: its names are known too
    primed.prime([("env", 10**18, frozenset(held), frozenset())])
    assert primed.list() == sorted({"VMEM", new} | held)
    assert new in checked and not held & set(checked)
