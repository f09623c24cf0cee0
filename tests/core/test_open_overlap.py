"""An open with a passphrase lists the vault folder while Argon2id derives the key.

The key derivation runs in C without the interpreter lock (64 MiB and a few hundred milliseconds);
listing the folder (100,000 files at a million records) takes about as long and is what the open
does next.  The slots are read first from their own directory's listing, so the whole folder is
listed on this thread while a worker derives: the two must overlap, and the open must see exactly
what it saw before."""

from __future__ import annotations

import os
import threading

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
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
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
