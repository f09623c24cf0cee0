"""Erasure purges the erasing device's local state, page by page (spec §16.4, "devices purge caches").

The local state database is SQLCipher: scanning its file for plaintext proves nothing, since every
page is encrypted.  These tests decrypt every page of the database and of its write-ahead log with
the device's own state key (as a thief holding the laptop and its keychain could) and look for the
erased text, in live rows, in the free space of pages and in free pages alike.  Before the erasure
the same scan finds it (the check is not vacuous).
"""

from __future__ import annotations

import os

from camillo import NewRecord
from camillo.erased import purge
from camillo.search import HashingEmbedder
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

PAGE = 4096
RESERVE = 80  # SQLCipher 4: a 16-byte IV and a 64-byte HMAC at the end of every page
SECRET = "zyxwvut diagnosis of the quarrelsome kidney"
TOKEN = b"quarrelsome"


def _decrypt_page(page: bytes, key: bytes, first: bool) -> bytes:
    iv = page[PAGE - RESERVE:PAGE - RESERVE + 16]
    start = 16 if first else 0  # page 1 begins with the salt, in the clear
    decryptor = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
    return decryptor.update(page[start:PAGE - RESERVE]) + decryptor.finalize()


def decrypted(path: str, key: bytes) -> bytes:
    """Every page of the state database and of its write-ahead log, decrypted."""
    out = []
    if os.path.exists(path):
        data = open(path, "rb").read()
        out += [_decrypt_page(data[i:i + PAGE], key, i == 0) for i in range(0, len(data) - PAGE + 1, PAGE)]
    wal = path + "-wal"
    if os.path.exists(wal):
        data = open(wal, "rb").read()
        for i in range(32, len(data) - 24 - PAGE + 1, 24 + PAGE):  # a 32-byte header, then 24-byte frame headers
            number = int.from_bytes(data[i:i + 4], "big")
            out.append(_decrypt_page(data[i + 24:i + 24 + PAGE], key, number == 1))
    return b"".join(out)


def test_the_erasing_device_keeps_no_page_of_the_erased_text(new_vault):
    _, vault, _ = new_vault
    words = ["garden", "basil", "train", "coffee", "jazz", "record"]
    for i in range(12):  # enough rows, index segments and merges that freed pages exist
        vault.append([NewRecord(type="message", conversation=f"c{i % 3}", role="user",
                                text=" ".join(words[(i + j) % 6] for j in range(40)))])
    vault.append([NewRecord(type="message", conversation="c0", role="user", text=SECRET)])
    secret = next(r.id for r in vault.timeline() if r.text == SECRET)
    assert vault.search("quarrelsome")  # the full-text index holds it
    vault.semantic_search("kidney", HashingEmbedder(64))  # and a vector
    vault.session.reader.settle(force=True)
    cache = vault.session.cache
    assert cache is not None
    assert TOKEN in decrypted(cache.path, cache.page_key), "the scan does not see the state's plaintext"

    vault.erase([secret], reauth=None)
    vault.session.reader.settle(force=True)
    cache = vault.session.cache  # the erasing device's key changed: so did its state's
    assert cache is not None
    plain = decrypted(cache.path, cache.page_key)
    assert len(plain) > 10 * PAGE
    assert TOKEN not in plain and b"zyxwvut" not in plain, "the erased text is still in the local state"
    assert vault.search("quarrelsome") == [] and vault.search("garden")
    vault.lock()


def test_a_copy_of_an_erased_record_keeps_no_content_in_the_state(new_vault):
    """A copy of an erased record can still be read here (a segment under a live epoch that another
    device's erasure has not reached yet, spec §16.10): the state marks it erased and keeps nothing
    of it, in the row, the index, the vectors or any page."""
    from types import SimpleNamespace

    _, vault, _ = new_vault
    vault.append([NewRecord(type="message", conversation="c0", role="user", text="ordinary garden talk")])
    vault.append([NewRecord(type="message", conversation="c0", role="user", text=SECRET)])
    secret = next(r.id for r in vault.timeline() if r.text == SECRET)
    vault.semantic_search("kidney", HashingEmbedder(64))
    session = vault.session
    state, roster = session.materialized, session.roster
    erasure = SimpleNamespace(targets={secret}, compartment_id=state.record_location(secret)[1], epochs=set())
    roster.erasures = {b"e" * 32: erasure}  # as the roster has it once the other device's ERASE arrives
    result = state.materialize(roster, session.log, session.batches)
    assert result.scrubbed == 1
    row = state.db.execute("SELECT raw, text, key, type, erased, valid FROM records WHERE id = ?", (secret,)).fetchone()
    assert row == (None, None, None, None, 1, 0)
    assert state.db.execute("SELECT count(*) FROM search WHERE search MATCH 'quarrelsome'").fetchone()[0] == 0
    assert state.materialize(roster, session.log, session.batches).scrubbed == 0  # once
    session.reader.dirty = True
    session.reader.settle(force=True)
    purge(state)
    cache = session.cache
    assert cache is not None
    plain = decrypted(cache.path, cache.page_key)
    assert b"ordinary garden" in plain and TOKEN not in plain and b"zyxwvut" not in plain
    vault.lock()


def test_an_erasure_before_the_index_is_built_does_not_build_it_and_leaves_nothing(new_vault):
    """The full-text index is built when first needed, not by an open.  An erasure (or batches whose
    segments went away) before then deletes from the index only the rows it holds, instead of
    building it for every record first (seconds at a million records); the erased text is in no page,
    and the index built later holds the rest and not it."""
    path, vault, _ = new_vault
    for i in range(12):
        vault.append([NewRecord(type="message", conversation="c0", role="user", text=f"garden basil note {i}")])
    vault.append([NewRecord(type="message", conversation="c0", role="user", text=SECRET)])
    secret = next(r.id for r in vault.timeline() if r.text == SECRET)
    state = vault.session.materialized
    state.db.execute("INSERT INTO search(search) VALUES('delete-all')")  # as a cold load leaves it
    state.db.execute("DELETE FROM cache_meta WHERE key = 'indexed'")
    state._indexed = 0
    vault.erase([secret], reauth=None)
    state = vault.session.materialized
    assert state.indexed == 0, "the erasure built the full-text index"
    vault.session.reader.settle(force=True)  # (a lock completes the index)
    assert state.indexed > 0
    assert vault.search("quarrelsome") == [] and len(vault.search("basil")) == 12
    cache = vault.session.cache
    assert cache is not None
    plain = decrypted(cache.path, cache.page_key)
    assert TOKEN not in plain and b"zyxwvut" not in plain
    vault.lock()


def test_the_secret_of_an_epoch_an_erasure_destroyed_is_in_no_page_of_the_state(new_vault, passphrase):
    """The local state remembers the envelopes a warm open read (camillo.memos.EnvelopeMemo), epoch
    secrets included: the erasure deletes the destroyed epoch's, from every page and the log."""
    from camillo import Unlock, Vault

    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", conversation="c0", role="user", text=SECRET)])
    vault.append([NewRecord(type="message", conversation="c0", role="user", text="ordinary garden talk")])
    vault.lock()
    vault = Vault.open(path, Unlock.passphrase(passphrase))  # the envelopes read, and remembered
    try:
        secret = next(r.id for r in vault.timeline() if r.text == SECRET)
        held = dict(vault.session.keyring.secrets())
        vault.session.reader.settle(force=True)
        cache = vault.session.cache
        plain = decrypted(cache.path, cache.page_key)
        assert any(s in plain for s in held.values()), "the scan does not see the remembered epoch secrets"

        vault.erase([secret], reauth=None)
        vault.session.reader.settle(force=True)
        destroyed = vault.session.roster.destroyed_epochs() & held.keys()
        assert destroyed
        cache = vault.session.cache
        plain = decrypted(cache.path, cache.page_key)
        assert not any(held[ref] in plain for ref in destroyed), "a destroyed epoch's secret is in the local state"
        assert [r.text for r in vault.timeline()] == ["ordinary garden talk"]
    finally:
        vault.lock()
