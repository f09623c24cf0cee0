"""The vault facade end to end: create, unlock with each credential, append, read back, pack,
change the passphrase, and the promise that no plaintext ever reaches a file."""

from __future__ import annotations

import os

import pytest
from camillo import Authority, NewRecord, ReadOnlyVault, Unlock, Vault, WrongCredential
from camillo.errors import KeychainError, NotAVault, UnsupportedVersion, UsageError
from camillo.transport import pack_vault, unpack_vault

from .helpers import all_files, fail_the_nth_write, snapshot, switch_home

PASSPHRASE = "correct horse battery staple"


def test_create_and_open_with_each_credential(new_vault):
    path, vault, phrase = new_vault
    assert len(phrase.split()) == 24
    assert set(vault.compartments) == {"personal", "work", "health"}
    vid = vault.vault_id
    vault.append([NewRecord(type="message", conversation="c1", role="user", text="hello")])
    vault.lock()
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        assert v.vault_id == vid and [r.text for r in v.timeline()] == ["hello"]
        assert v.unlocked_with == "passphrase"
    with Vault.open(path, Unlock.recovery(phrase.upper().replace(" ", "  "))) as v:
        assert [r.text for r in v.timeline()] == ["hello"]
        assert v.unlocked_with == "recovery phrase"


def test_device_unlock_without_keychain_says_what_to_do(new_vault):
    path, vault, _ = new_vault
    vault.lock()
    with pytest.raises(WrongCredential, match="sealed under the vault's keys"):
        Vault.open(path, Unlock.device())


def test_device_unlock_on_a_new_installation_says_to_register(new_vault, tmp_path, monkeypatch):
    path, vault, _ = new_vault
    vault.lock()
    switch_home(monkeypatch, tmp_path / "other")
    with pytest.raises(WrongCredential, match="holds no device key"):
        Vault.open(path, Unlock.device())


def test_wrong_passphrase_changes_nothing(new_vault):
    path, vault, _ = new_vault
    vault.lock()
    before = snapshot(path)
    with pytest.raises(WrongCredential) as info:
        Vault.open(path, Unlock.passphrase("not it"))
    assert f"wrong passphrase for vault {vault.vault_id.hex()[:12]}" in str(info.value)
    assert info.value.exit_code == 3
    with pytest.raises(WrongCredential, match="recovery phrase"):
        Vault.open(path, Unlock.recovery("abandon " * 23 + "art"))
    assert snapshot(path) == before


def test_records_round_trip_with_authority(new_vault):
    path, vault, _ = new_vault
    changes = vault.append([
        NewRecord(type="conversation", conversation="c1", title="Trip"),
        NewRecord(type="message", conversation="c1", role="user", text="I live in Lisbon"),
        NewRecord(type="message", conversation="c1", role="assistant", text="Noted."),
        NewRecord(type="fact", key="user/home_city", value="Lisbon"),
        NewRecord(type="com.example/bookmark", value={"url": "https://example.org", "n": 3}),
    ])
    assert len(changes.records) == 5 and changes.timeline
    vault.append([NewRecord(type="fact", key="user/employer", value="Acme")], compartment="work")
    vault.lock()
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        rows = {r.text: r for r in v.timeline()}
        assert rows["I live in Lisbon"].effective_class == Authority.USER
        assert rows["Noted."].claimed_class == Authority.INFERRED
        assert rows["Trip"].type == "conversation"
        assert rows["Lisbon"].key == "user/home_city" and rows["Lisbon"].kind_name == "PUT"
        assert rows["Acme"].compartment == "work"
        bookmark = next(r for r in v.timeline() if r.type == "com.example/bookmark")
        assert bookmark.value == {"url": "https://example.org", "n": 3}
        assert all(r.verified == "signature" and r.valid for r in v.timeline())
        assert v.problems() == []


def test_bad_records_are_refused_before_anything_is_written(new_vault):
    path, vault, _ = new_vault
    before = snapshot(path)
    with pytest.raises(UsageError, match="needs a \"key\""):
        vault.append([NewRecord(type="fact", value="x")])
    with pytest.raises(UsageError, match="no compartment 'nope'"):
        vault.append([NewRecord(type="message", text="x")], compartment="nope")
    with pytest.raises(UsageError, match="floating-point"):
        vault.append([NewRecord(type="fact", key="user/height", value=1.83)])
    with pytest.raises(UsageError, match="unknown record type"):
        vault.append([NewRecord(type="bogus", text="x")])
    assert snapshot(path) == before


def test_two_installations_are_two_writers(new_vault, tmp_path, monkeypatch):
    path, vault, _ = new_vault
    first_writer = vault.writer_id
    vault.append([NewRecord(type="message", text="from the first")])
    vault.lock()
    switch_home(monkeypatch, tmp_path / "second")
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        assert v.session.actor is not None and v.writer_id != first_writer
        v.append([NewRecord(type="message", text="from the second")])
        writers = {r.text: r.writer_id for r in v.timeline()}
        assert writers["from the first"] == first_writer
        assert writers["from the second"] == v.writer_id
        assert len(v.session.roster.devices()) == 2
        assert v.problems() == []


def test_pack_is_deterministic_and_opens_read_only(new_vault, tmp_path):
    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="packed")])
    vault.lock()
    a, b = tmp_path / "a.vmem", tmp_path / "b.vmem"
    pack_vault(path, str(a))
    pack_vault(path, str(b))
    assert a.read_bytes() == b.read_bytes()
    with Vault.open(str(a), Unlock.passphrase(PASSPHRASE)) as v:
        assert v.read_only and [r.text for r in v.timeline()] == ["packed"]
        with pytest.raises(ReadOnlyVault, match="unpack it"):
            v.append([NewRecord(type="message", text="no")])
    out = tmp_path / "unpacked"
    unpack_vault(str(a), str(out))
    with Vault.open(str(out), Unlock.passphrase(PASSPHRASE)) as v:
        assert [r.text for r in v.timeline()] == ["packed"]
    pack_vault(str(out), str(tmp_path / "c.vmem"))
    assert (tmp_path / "c.vmem").read_bytes() == a.read_bytes()



def test_a_pack_holds_one_file_at_a_time_not_the_vault(new_vault, tmp_path):
    """Packing reads each file when its turn in the pack comes and lets it go once written: with a
    vault of 12 MB (an attachment's chunks), what the process allocates at its peak is about one
    chunk, not the vault (a .vmem of a million records held its 511 MB)."""
    import tracemalloc

    path, vault, _ = new_vault
    vault.attach([os.urandom(1 << 20) for _ in range(12)], name="big.bin")
    vault.lock()
    total = sum(os.path.getsize(f) for f in all_files(path))
    assert total > 12 << 20
    tracemalloc.start()
    try:
        pack_vault(path, str(tmp_path / "v.vmem"))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 << 20, f"packing {total} bytes allocated {peak} at once"
    with Vault.open(str(tmp_path / "v.vmem"), Unlock.passphrase(PASSPHRASE)) as v:
        (view,) = [r for r in v.timeline() if r.type == "attachment"]
        assert v.attachment_bytes(view.id, 13 << 20)[1][:8]


def test_a_file_too_short_for_its_kind_is_named_and_no_pack_is_left(new_vault, tmp_path):
    """A planted segment whose name matches its bytes but that is shorter than any segment: a pack
    with it would not open (its reader refuses such an entry), so packing refuses it, names it, and
    leaves neither the pack nor a temporary file; without it the vault packs."""
    from camillo.errors import DamagedFile
    from camillo.storage import segment_name

    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="packed")])
    vault.lock()
    junk = b"VMEMSEG1" + bytes(100)
    name = segment_name(junk)
    os.makedirs(os.path.join(path, os.path.dirname(name)), exist_ok=True)
    with open(os.path.join(path, name), "wb") as f:
        f.write(junk)
    out = tmp_path / "packs"
    out.mkdir()
    with pytest.raises(DamagedFile, match=f"{name} is 108 bytes, shorter than any segment file.*camillo verify"):
        pack_vault(path, str(out / "v.vmem"))
    assert os.listdir(out) == []
    os.remove(os.path.join(path, name))
    pack_vault(path, str(out / "v.vmem"))
    with Vault.open(str(out / "v.vmem"), Unlock.passphrase(PASSPHRASE)) as v:
        assert [r.text for r in v.timeline()] == ["packed"]


def test_an_unpack_writes_in_chunks_and_one_cut_short_is_no_vault_and_says_so(new_vault, tmp_path, monkeypatch):
    """``unpack_vault`` writes the files a chunk at a time as a merge does (each durable before its
    name appears, not three fsyncs per file), the descriptor last: a file that cannot be written stops
    it with the error, leaves no file of its chunk and no descriptor (the folder opens as no vault, and
    an unpack into it says what it holds), and unpacking into another folder completes it."""
    from camillo import storage, transport
    from camillo.errors import StorageError

    path, vault, _ = new_vault
    for i in range(20):
        vault.append([NewRecord(type="message", text=f"unpacked note {i}")])
    vault.lock()
    vmem, out = str(tmp_path / "v.vmem"), str(tmp_path / "unpacked")
    pack_vault(path, vmem)
    monkeypatch.setattr(transport, "MERGE_CHUNK_FILES", 8)
    real_stage = fail_the_nth_write(monkeypatch, 12)
    with pytest.raises(StorageError, match="No space left"):
        unpack_vault(vmem, out)
    assert len(all_files(out)) == 8, "the chunk that failed left files behind, or an earlier chunk was undone"
    with pytest.raises(NotAVault):
        Vault.open(out, Unlock.passphrase(PASSPHRASE), cache=False, register=False)
    monkeypatch.setattr(storage.FolderShelf, "stage", real_stage)
    with pytest.raises(StorageError, match="holds part of a vault .*cut short.*delete this one"):
        unpack_vault(vmem, out)
    out = str(tmp_path / "unpacked again")
    assert unpack_vault(vmem, out) == len(all_files(path))
    with Vault.open(out, Unlock.passphrase(PASSPHRASE), cache=False, register=False) as v:
        assert sorted(r.text for r in v.timeline()) == sorted(f"unpacked note {i}" for i in range(20))


def _passphrase_change_files(path: str, vault: Vault, messages: int) -> tuple[int, int, int]:
    for i in range(messages):
        vault.append([NewRecord(type="message", text=f"m{i}")])
    before = set(all_files(path))
    vault.change_passphrase("a brand new passphrase")
    after = set(all_files(path))
    added, removed = after - before, before - after
    assert not any("/segments/" in n for n in removed)  # no record is re-encrypted
    return (len([n for n in added if "/slots/" in n]), len([n for n in added if "/segments/" in n]),
            len(removed))


def test_change_passphrase_is_constant_size(new_vault, tmp_path):
    """The change rolls the keys (spec §16.7): new slots for the three credentials, one control batch
    per compartment (control + 3), the old slots and envelopes removed; the same at 30 and at 300
    records."""
    path, vault, phrase = new_vault
    small = _passphrase_change_files(path, vault, 30)
    assert small[:2] == (3, 4)
    other = str(tmp_path / "bigger")
    bigger, _ = Vault.create(other, PASSPHRASE, device_name="test laptop")
    assert _passphrase_change_files(other, bigger, 300) == small
    bigger.lock()
    vault.lock()
    with pytest.raises(WrongCredential):
        Vault.open(path, Unlock.passphrase(PASSPHRASE))
    with Vault.open(path, Unlock.passphrase("a brand new passphrase")) as v:
        assert len(v.timeline()) == 30 and v.problems() == []
    with Vault.open(path, Unlock.recovery(phrase)) as v:
        assert len(v.timeline()) == 30


def test_old_passphrase_with_an_old_slot_copy_is_refused(new_vault, tmp_path):
    """Restoring the old passphrase slot (a host replaying sync history) does not let the old
    passphrase back in: its credential is revoked in the signed roster."""
    path, vault, _ = new_vault
    old_slots = {n: open(n, "rb").read() for n in all_files(path) if "/slots/" in n}
    vault.change_passphrase("the new one")
    vault.lock()
    for name, data in old_slots.items():
        if not os.path.exists(name):
            with open(name, "wb") as fh:
                fh.write(data)
    with pytest.raises(WrongCredential, match="replaced or revoked"):
        Vault.open(path, Unlock.passphrase(PASSPHRASE))


def test_no_plaintext_reaches_any_file(new_vault, tmp_path):
    path, vault, _ = new_vault
    marker = "MARKER-7f3a9c-plaintext"
    vault.append([
        NewRecord(type="conversation", conversation=f"conv-{marker}", title=f"title {marker}"),
        NewRecord(type="message", conversation=f"conv-{marker}", role="user", text=f"text {marker}"),
        NewRecord(type="fact", key=f"user/{marker}", value=f"value {marker}", meta={"src": marker}),
    ])
    vault.change_passphrase("another passphrase")
    vault.lock()
    with Vault.open(path, Unlock.passphrase("another passphrase")) as v:
        assert any(marker in r.text for r in v.timeline())
    pack_vault(path, str(tmp_path / "out.vmem"))
    needle = marker.encode()
    roots = [path, os.environ["CAMILLO_HOME"], str(tmp_path / "out.vmem")]
    scanned = 0
    for root in roots:
        for f in all_files(root):
            data = open(f, "rb").read()
            scanned += 1
            assert needle not in data, f"plaintext found in {f}"
            assert needle.decode().encode("utf-16-le") not in data
    assert scanned > 10


def test_not_a_vault_and_newer_versions(tmp_path, new_vault):
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotAVault, match="no VMEM descriptor"):
        Vault.open(str(tmp_path / "empty"), Unlock.passphrase("x"))
    with pytest.raises(NotAVault, match="does not exist"):
        Vault.open(str(tmp_path / "missing"), Unlock.passphrase("x"))
    (tmp_path / "junk.vmem").write_bytes(b"hello world" * 10)
    with pytest.raises(NotAVault, match="not a VMEM pack"):
        Vault.open(str(tmp_path / "junk.vmem"), Unlock.passphrase("x"))
    path, vault, _ = new_vault
    vault.lock()
    import cbor2

    desc = os.path.join(path, "VMEM")
    m = cbor2.loads(open(desc, "rb").read())
    m[1] = 2
    open(desc, "wb").write(cbor2.dumps(m, canonical=True))
    with pytest.raises(UnsupportedVersion, match="newer Camillo is required"):
        Vault.open(path, Unlock.passphrase(PASSPHRASE))


def test_creating_over_an_existing_vault_is_refused(new_vault):
    path, vault, _ = new_vault
    from camillo.errors import StorageError

    with pytest.raises(StorageError, match="already holds a vault"):
        Vault.create(path, "another")


def test_a_vault_inside_another_vaults_folder_is_refused(new_vault, tmp_path):
    """A vault made (or unpacked) inside another one's folder would be synced and copied along with
    it: refused, naming the outer vault, and nothing is written."""
    path, vault, _ = new_vault
    from camillo.errors import StorageError

    before = snapshot(path)
    inner = os.path.join(path, "notes", "inner")
    with pytest.raises(StorageError, match=f"inside the vault folder {path}"):
        Vault.create(inner, "another passphrase")
    vmem = str(tmp_path / "copy.vmem")
    pack_vault(path, vmem)
    with pytest.raises(StorageError, match="inside the vault folder"):
        unpack_vault(vmem, os.path.join(path, "unpacked"))
    assert snapshot(path) == before and not os.path.exists(os.path.join(path, "notes"))


def test_locked_vault_refuses_calls_and_drops_keys(new_vault):
    path, vault, _ = new_vault
    secret = next(iter(vault.session.keyring.epoch_secrets.values()))
    master = vault.session.keyring.master
    vault.lock()
    assert secret.wiped and master is not None and master.wiped and vault.session.keyring.master is None
    from camillo.errors import VaultError

    with pytest.raises(VaultError, match="locked"):
        vault.timeline()


def test_keychain_required_but_missing_is_a_clear_error(tmp_path, monkeypatch):
    import keyring.core

    monkeypatch.setenv("CAMILLO_KEYCHAIN", "os")
    monkeypatch.setenv("PYTHON_KEYRING_BACKEND", "keyring.backends.fail.Keyring")
    # keyring chooses its backend once per process; forget an earlier test's choice so the
    # environment above is what this test sees (it is restored afterwards)
    monkeypatch.setattr(keyring.core, "_keyring_backend", None)
    with pytest.raises(KeychainError, match="keychain"):
        Vault.create(str(tmp_path / "v"), PASSPHRASE)
