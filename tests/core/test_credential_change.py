"""A changed passphrase or recovery phrase reads nothing written after the change, by cryptography,
not by a reader rule: the attacker here keeps every file the host ever held (old slots included) and
the old credential, skips every check Camillo makes, and decrypts what it can with the keys alone.
Everyone who should still read does: the new credentials, the other devices, the grants."""

from __future__ import annotations

import glob
import os
import shutil

import pytest
from camillo import NewRecord, Unlock, Vault, VaultError, WrongCredential, keys
from camillo import slots as slot_mod
from camillo.credentials import from_passphrase, from_recovery_phrase
from camillo.primitives import CryptoFailure

from .helpers import switch_home
from .test_access import keys_from_files, readable_plaintexts

PASSPHRASE = "correct horse battery staple"
NEW_PASSPHRASE = "a much better passphrase, at last"


def union_copy(sources: list[str], host: str) -> None:
    """What a host that keeps old files holds: every file any of ``sources`` ever had."""
    for src in sources:
        for f in glob.glob(os.path.join(src, "**", "*"), recursive=True):
            if os.path.isfile(f):
                dst = os.path.join(host, os.path.relpath(f, src))
                os.makedirs(os.path.dirname(dst), exist_ok=True)
                if not os.path.exists(dst):
                    shutil.copy2(f, dst)


def attacker_reads(host: str, vault_id: bytes, credential) -> list[bytes]:
    """Every segment plaintext the credential opens from the host's files, without any reader rule:
    each slot it unwraps gives a master secret, hence an owner key, hence every epoch secret wrapped to
    it in any envelope the host kept."""
    recipients = [credential.recipient]
    for f in glob.glob(os.path.join(host, "slots", "*")):
        h = slot_mod.read_header(open(f, "rb").read(), os.path.relpath(f, host))
        try:
            vms = slot_mod.unwrap_vms(h, vault_id, credential.recipient)
        except CryptoFailure:
            continue
        recipients.append(keys.owner_kem(vms, vault_id, h.generation))
    secrets, _ = keys_from_files(host, vault_id, recipients)
    return readable_plaintexts(host, vault_id, secrets)


def old_kdf(path: str, vault_id: bytes):
    for f in glob.glob(os.path.join(path, "slots", "*")):
        h = slot_mod.read_header(open(f, "rb").read(), os.path.relpath(f, path))
        if h.type == slot_mod.SlotType.PASSPHRASE and h.kdf is not None:
            return h.kdf
    raise AssertionError("no passphrase slot")


def test_an_old_passphrase_with_old_files_reads_only_what_came_before(new_vault, tmp_path, monkeypatch):
    path, vault, phrase = new_vault
    vid = vault.vault_id
    vault.append([NewRecord(type="message", text="BEFORE-THE-CHANGE")])
    vault.append([NewRecord(type="message", text="WORK-BEFORE")], compartment="work")
    grant = str(tmp_path / "reader.grant")
    vault.create_grant("reader", {"personal": "read"}, grant)
    old_credential = from_passphrase(PASSPHRASE, old_kdf(path, vid))
    before = str(tmp_path / "before")
    shutil.copytree(path, before)
    vault.change_passphrase(NEW_PASSPHRASE)
    vault.append([NewRecord(type="message", text="AFTER-THE-CHANGE")])
    vault.append([NewRecord(type="message", text="WORK-AFTER")], compartment="work")
    vault.lock()

    host = str(tmp_path / "host")
    union_copy([before, path], host)
    seen = b"".join(attacker_reads(host, vid, old_credential))
    assert b"BEFORE-THE-CHANGE" in seen and b"WORK-BEFORE" in seen  # the honest caveat: the past stays readable
    assert b"AFTER-THE-CHANGE" not in seen and b"WORK-AFTER" not in seen

    # Everyone who should still read does.
    with pytest.raises(WrongCredential):
        Vault.open(path, Unlock.passphrase(PASSPHRASE))
    with Vault.open(path, Unlock.passphrase(NEW_PASSPHRASE)) as v:
        texts = {r.text for r in v.timeline()}
        assert {"BEFORE-THE-CHANGE", "AFTER-THE-CHANGE", "WORK-AFTER"} <= texts
        assert v.problems() == []
    switch_home(monkeypatch, tmp_path / "other-device")
    with Vault.open(path, Unlock.recovery(phrase), device_name="other") as v:
        assert "AFTER-THE-CHANGE" in {r.text for r in v.timeline()}
    switch_home(monkeypatch, tmp_path / "agent")
    with Vault.open(path, Unlock.grant(grant)) as agent:
        assert "AFTER-THE-CHANGE" in {r.text for r in agent.timeline()}


def test_an_old_recovery_phrase_with_old_files_reads_only_what_came_before(new_vault, tmp_path):
    path, vault, phrase = new_vault
    vid = vault.vault_id
    vault.append([NewRecord(type="message", text="BEFORE-REISSUE")])
    before = str(tmp_path / "before")
    shutil.copytree(path, before)
    new_phrase = vault.reissue_recovery_phrase().phrase
    vault.append([NewRecord(type="message", text="AFTER-REISSUE")])
    vault.lock()
    host = str(tmp_path / "host")
    union_copy([before, path], host)
    seen = b"".join(attacker_reads(host, vid, from_recovery_phrase(phrase)))
    assert b"BEFORE-REISSUE" in seen and b"AFTER-REISSUE" not in seen
    with pytest.raises(WrongCredential):
        Vault.open(path, Unlock.recovery(phrase))
    with Vault.open(path, Unlock.recovery(new_phrase), register=False) as v:
        assert "AFTER-REISSUE" in {r.text for r in v.timeline()}


def test_the_change_does_not_touch_the_records(new_vault):
    """No segment is re-encrypted: the change writes key files and one small batch per compartment."""
    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text=f"m{i}") for i in range(200)])
    segments_before = set(glob.glob(os.path.join(path, "segments", "*", "*")))
    changes = vault.change_passphrase(NEW_PASSPHRASE)
    segments_after = set(glob.glob(os.path.join(path, "segments", "*", "*")))
    assert segments_before <= segments_after
    assert len(segments_after - segments_before) <= len(vault.compartments) + 1
    assert changes.files_written < 30


def _vault_files(path: str) -> set[str]:
    return {os.path.relpath(f, path) for f in glob.glob(os.path.join(path, "**", "*"), recursive=True)
            if os.path.isfile(f) and not os.path.basename(f).startswith(".")}


def test_the_new_passphrase_is_derived_while_the_keys_roll_and_a_failure_leaves_nothing(new_vault, monkeypatch):
    """The new passphrase's Argon2id runs on another thread while this one rolls the keys and writes
    the files that do not depend on it; if the derivation fails, those files are deleted again and the
    vault is as it was (the old passphrase opens it, nothing new is announced)."""
    import threading
    import time

    from camillo.ops import credentials as ops_credentials

    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="kept")])
    before = _vault_files(path)
    seen: dict[str, object] = {}
    real = ops_credentials.from_passphrase

    def derive(passphrase, kdf):
        seen["thread"] = threading.current_thread()
        deadline = time.monotonic() + 10  # (the roll's files appear while this derivation is still pending)
        while not (written := _vault_files(path) - before) and time.monotonic() < deadline:
            time.sleep(0.005)
        seen["written while deriving"] = written
        raise MemoryError("no memory for Argon2id")

    monkeypatch.setattr(ops_credentials, "from_passphrase", derive)
    with pytest.raises(MemoryError):
        vault.change_passphrase(NEW_PASSPHRASE)
    assert seen["thread"] is not threading.main_thread()
    assert any(f.startswith("env/") for f in seen["written while deriving"]), "the roll waited for the derivation"
    assert _vault_files(path) == before  # the roll's files written meanwhile were deleted again
    vault.lock()
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        assert [r.text for r in v.timeline()] == ["kept"] and v.problems() == []

    monkeypatch.setattr(ops_credentials, "from_passphrase", real)
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        v.change_passphrase(NEW_PASSPHRASE)
    with pytest.raises(WrongCredential):
        Vault.open(path, Unlock.passphrase(PASSPHRASE))
    with Vault.open(path, Unlock.passphrase(NEW_PASSPHRASE)) as v:
        assert [r.text for r in v.timeline()] == ["kept"] and v.problems() == []


@pytest.mark.parametrize("failing", ["refresh", "numbering"])
def test_a_failure_before_the_records_are_numbered_leaves_nothing_of_the_key_change(new_vault, monkeypatch, failing):
    """Found by review: the records of a key change are numbered on a fresh reading of the folder; when
    that reading or the numbering failed (a folder that cannot be listed, a device restored from a backup),
    the roll's files written before stayed behind, announced by nothing, and the device's counters kept
    the numbers given in memory.  Now they are deleted and the counters forgotten, as for any write
    that did not happen."""
    from camillo.errors import StorageError
    from camillo.session import writer

    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="kept")])
    before = _vault_files(path)
    counters = dict(vault.session.device_state.counters)
    if failing == "refresh":
        real_write, real_refresh = writer.write_batches, type(vault.session).refresh
        inside: list[bool] = []

        def write_batches(*a, **k):
            inside.append(True)
            try:
                return real_write(*a, **k)
            finally:
                inside.pop()

        def refresh(self):
            if inside:
                raise StorageError("cannot list the vault folder: Input/output error")
            return real_refresh(self)

        monkeypatch.setattr("camillo.ops.rekey.write_batches", write_batches)
        monkeypatch.setattr(type(vault.session), "refresh", refresh)
    else:
        def numbering(*a, **k):
            raise StorageError("the numbering failed")

        monkeypatch.setattr(writer, "_number_and_seal", numbering)
    with pytest.raises(StorageError):
        vault.change_passphrase(NEW_PASSPHRASE)
    assert _vault_files(path) == before  # the roll's files written before the records were deleted again
    assert vault.session.device_state.counters == counters
    monkeypatch.undo()
    vault.append([NewRecord(type="message", text="after")])  # (no number skipped: no gap reported below)
    vault.lock()
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        assert [r.text for r in v.timeline()] == ["kept", "after"] and v.problems() == []
        v.change_passphrase(NEW_PASSPHRASE)
    with Vault.open(path, Unlock.passphrase(NEW_PASSPHRASE)) as v:
        assert [r.text for r in v.timeline()] == ["kept", "after"] and v.problems() == []


def test_an_erasure_keeps_the_seal_its_roll_is_derived_from_and_a_random_roll_drops_it(new_vault):
    """After an erasure the device keeps its key's seal under the master secret the erasure's roll was
    derived from (whoever holds it computes the current one, and another device's key change made from it
    hands on its seal key, spec §16.6 kind 6); a random roll (a passphrase change) drops every older seal,
    so a replaced passphrase with an old slot a host kept opens no seal (spec §16.10 rule 10)."""
    from camillo.session import installation

    path, vault, _ = new_vault
    session = vault.session
    before, vms = session.keyring.generation, session.keyring.master_secret()
    vault.erase([vault.append([NewRecord(type="message", text="erased")]).written[0]])
    now = session.keyring.generation
    assert now == before + 1 and keys.next_master(vms, session.vault_id, now) == session.keyring.master_secret()
    assert sorted(installation._read_seals(session)) == [before, *range(now, now + 4)]
    vault.change_passphrase(NEW_PASSPHRASE)
    now = session.keyring.generation
    assert sorted(installation._read_seals(session)) == list(range(now, now + 4))
    vault.lock()
    with Vault.open(path, Unlock.passphrase(NEW_PASSPHRASE)) as v:
        assert v.session.key_from_seal and v.problems() == []


def test_no_seal_key_handed_on_opens_a_retired_key_in_a_backup_of_the_local_files(new_vault):
    """Found by review of the first version of kind 6 (spec §16.6), whose seal keys were not bound to a
    writer: a backup of the device's local files made before an erasure, the files a host kept and the
    current passphrase read the erased record, through the current master secret, a seal key handed on
    for a generation before the erasure, the retired key's seal in the backup, that key's old slot, and
    the master secret that delivered the destroyed epoch.  Seal keys are now bound to their writer and
    handed on only for the devices that stay: no entry opens any seal of the retired key."""
    from camillo import encoding
    from camillo.localstate import open_local
    from camillo.session.installation import handed_on

    path, vault, _ = new_vault
    session, vid = vault.session, vault.vault_id
    erased = vault.append([NewRecord(type="message", text="ERASED-SECRET")]).written[0]
    retired = vault.writer_id
    backup = encoding.decode(open(session.local.device_key_path, "rb").read())  # a backup of the home folder

    def opens_the_backup(entries: list[tuple[int, bytes, bytes]]) -> list[int]:
        opened = []
        for _generation, _writer, key in entries:
            for g, blob in backup.items():
                try:
                    open_local(key, "device-key", vid, blob, "device-key.bin")
                except VaultError:
                    continue
                opened.append(g)
        return opened

    vault.erase([erased])
    vault.change_passphrase(NEW_PASSPHRASE)  # handed on: the new key's seal keys, back past the erasure
    handed = handed_on(session).seal_keys
    assert handed and {w for _g, w, _k in handed} == {vault.writer_id} != {retired}
    assert opens_the_backup(handed) == []
    vault.erase([vault.append([NewRecord(type="message", text="other")]).written[0]])
    assert opens_the_backup(handed_on(session).seal_keys) == []


def test_a_seal_written_before_seals_were_bound_to_their_writer_still_opens_and_is_sealed_again(new_vault):
    """An installation whose key was sealed before seal keys included the writer id (spec §18.1) keeps its
    key: the old seal opens, and the key is sealed again, bound to its writer."""
    from camillo import encoding
    from camillo.localstate import atomic_write, seal_local
    from camillo.session import installation

    path, vault, _ = new_vault
    session, writer = vault.session, vault.writer_id
    vms, generation, cred = session.keyring.master_secret(), session.keyring.generation, session.actor
    payload = encoding.encode({"ed25519": cred.signer.seed, "xwing": cred.recipient.seed})
    old = seal_local(installation.seal_key(vault.vault_id, vms, generation), "device-key", vault.vault_id, payload)
    atomic_write(session.local.device_key_path, encoding.encode({generation: old}))
    vault.lock()
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        assert v.writer_id == writer and v.problems() == []
        assert installation.seal_opens(v.session, installation._read_seals(v.session), vms, generation)
        bound = installation.seal_key(v.vault_id, vms, generation, writer)
        assert installation._open_seal(v.session, installation._read_seals(v.session), generation, bound) is not None
        v.append([NewRecord(type="message", text="still this device")])


def test_a_key_roll_seals_this_devices_key_once_before_its_records_and_rewrites_it_once_after(new_vault,
                                                                                               monkeypatch):
    """The device key sealed locally under the new master secret before the roll's control records (a
    crash right after them must find it) is not sealed a second time after them: only the seals under
    older master secrets are dropped then (spec §16.10 rule 10).  The device keeps its key."""
    from camillo.session import installation

    path, vault, _ = new_vault
    writer = vault.writer_id
    key_file = vault.session.local.device_key_path
    writes: list[str] = []
    real = installation.atomic_write
    monkeypatch.setattr(installation, "atomic_write", lambda p, data: (writes.append(p), real(p, data))[1])
    vault.change_passphrase(NEW_PASSPHRASE)
    assert writes.count(key_file) == 2, writes  # sealed before the records; older seals dropped after
    generation = vault.session.keyring.generation
    assert sorted(installation._read_seals(vault.session)) == list(range(generation, generation + 4))
    vault.lock()
    with Vault.open(path, Unlock.passphrase(NEW_PASSPHRASE)) as v:
        assert v.writer_id == writer and v.session.key_from_seal
        v.append([NewRecord(type="message", text="still this device")])
        assert v.problems() == []
