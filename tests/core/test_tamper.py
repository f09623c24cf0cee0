"""Damaged, truncated, foreign and planted files: each is named, and everything else still reads."""

from __future__ import annotations

import os
import shutil

import pytest
from camillo import DamagedFile, NewRecord, Unlock, Vault, VaultError, WrongCredential, ids, segments, slots
from camillo.credentials import Credential, CredentialKind, from_passphrase
from camillo.errors import LimitExceeded
from camillo.primitives import KdfParams, random_bytes

from .helpers import all_files

PASSPHRASE = "correct horse battery staple"


@pytest.fixture
def filled(new_vault, tmp_path):
    path, vault, phrase = new_vault
    for comp in ("personal", "work"):
        for i in range(3):
            vault.append([NewRecord(type="message", conversation="c", role="user", text=f"{comp} {i}")], compartment=comp)
    vault.lock()
    pristine = tmp_path / "pristine"
    shutil.copytree(path, pristine)
    return path, phrase, str(pristine)


def _rel(path: str, f: str) -> str:
    return os.path.relpath(f, path).replace(os.sep, "/")


def _open_any(path, phrase):
    """Open with the passphrase, falling back to the recovery phrase (a damaged passphrase slot)."""
    try:
        return Vault.open(path, Unlock.passphrase(PASSPHRASE), register=False, cache=False)
    except DamagedFile as exc:
        if "slot" not in exc.message:
            raise
        return Vault.open(path, Unlock.recovery(phrase), register=False, cache=False)


@pytest.mark.parametrize("mode", ["flip", "truncate"])
def test_every_damaged_file_is_named_and_the_rest_reads(filled, mode):
    path, phrase, pristine = filled
    files = [f for f in all_files(pristine)]
    assert len(files) > 15
    for f in files:
        rel = _rel(pristine, f)
        shutil.rmtree(path)
        shutil.copytree(pristine, path)
        target = os.path.join(path, rel)
        data = bytearray(open(target, "rb").read())
        if mode == "flip":
            data[len(data) // 2] ^= 0x40
        else:
            data = data[: len(data) // 2]
        open(target, "wb").write(bytes(data))
        try:
            v = _open_any(path, phrase)
        except VaultError as exc:
            # Only the descriptor may stop the vault from opening, and the error names it.
            assert rel == "VMEM", f"damaging {rel} stopped the vault from opening: {exc}"
            assert "VMEM" in exc.message and isinstance(exc, DamagedFile)
            continue
        with v:
            problems = v.problems()
            named = [p for p in problems if p.file == rel or rel in p.message]
            assert named, f"damaging {rel} was not reported: {problems}"
            texts = {r.text for r in v.timeline()}
            if rel.startswith("segments/") or rel.startswith("env/"):
                # The damaged file's own batch (or epoch) is missing; the other compartment reads.
                assert {"personal 0", "work 0"} & texts
            else:
                assert {"personal 0", "personal 1", "personal 2", "work 0", "work 1", "work 2"} <= texts


def test_damaged_passphrase_slot_says_so_and_recovery_still_opens(filled):
    path, phrase, _ = filled
    for f in all_files(path):
        if "/slots/" in f and slots.read_header(open(f, "rb").read(), _rel(path, f)).type == slots.SlotType.PASSPHRASE:
            data = bytearray(open(f, "rb").read())
            data[100] ^= 1
            open(f, "wb").write(bytes(data))
    with pytest.raises(DamagedFile, match=r"passphrase slot of vault .* is damaged \(slots/"):
        Vault.open(path, Unlock.passphrase(PASSPHRASE))
    with Vault.open(path, Unlock.recovery(phrase)) as v:
        assert len(v.timeline()) == 6


def test_files_from_another_vault_are_ignored_and_named(filled, tmp_path):
    path, _, _ = filled
    other, _ = Vault.create(str(tmp_path / "other"), PASSPHRASE)
    other.append([NewRecord(type="message", text="foreign")])
    other.lock()
    for f in all_files(tmp_path / "other"):
        rel = _rel(str(tmp_path / "other"), f)
        if rel != "VMEM":
            os.makedirs(os.path.dirname(os.path.join(path, rel)), exist_ok=True)
            shutil.copy(f, os.path.join(path, rel))
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), register=False) as v:
        texts = {r.text for r in v.timeline()}
        assert "foreign" not in texts and len(texts) == 6
        unreadable = [p for p in v.problems() if p.kind == "unreadable"]
        assert len(unreadable) >= 1 and all(p.file.startswith("segments/") for p in unreadable)


def test_planted_slot_is_not_used(filled):
    """An insider who knows the passphrase credential's public key plants a newer slot wrapping a
    master secret of their own.  The reader skips it: the roster never vouched for it."""
    path, _, _ = filled
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), register=False) as v:
        cred = v.session.unlocking
        vault_id = v.vault_id
    attacker = Credential.generate(CredentialKind.DEVICE)
    sid = ids.new_random_id()
    planted = slots.build_slot(
        vault_id=vault_id, slot_id=sid, slot_type=slots.SlotType.PASSPHRASE, generation=99, vms=random_bytes(32),
        recipient_public=cred.recipient.public, recipient_id=cred.recipient_id, kdf=cred.kdf, label="planted",
        signer=attacker.signer, signer_id=attacker.writer_id,
    )
    open(os.path.join(path, slots.file_name(sid)), "wb").write(planted)
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), register=False) as v:
        assert len(v.timeline()) == 6
        assert v.session.keyring.generation == 1


def test_planted_slot_alone_is_refused(filled):
    """With the real passphrase slot gone, a planted one does not open anything."""
    path, _, _ = filled
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), register=False) as v:
        cred = v.session.unlocking
        vault_id = v.vault_id
    for f in all_files(path):
        if "/slots/" in f and slots.read_header(open(f, "rb").read(), _rel(path, f)).type == slots.SlotType.PASSPHRASE:
            os.unlink(f)
    attacker = Credential.generate(CredentialKind.DEVICE)
    sid = ids.new_random_id()
    open(os.path.join(path, slots.file_name(sid)), "wb").write(slots.build_slot(
        vault_id=vault_id, slot_id=sid, slot_type=slots.SlotType.PASSPHRASE, generation=1, vms=random_bytes(32),
        recipient_public=cred.recipient.public, recipient_id=cred.recipient_id, kdf=cred.kdf, label="planted",
        signer=attacker.signer, signer_id=attacker.writer_id,
    ))
    with pytest.raises((DamagedFile, WrongCredential)):
        Vault.open(path, Unlock.passphrase(PASSPHRASE), register=False)


def test_oversized_kdf_parameters_are_refused_before_argon2_runs(filled):
    path, _, _ = filled
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), register=False) as v:
        vault_id = v.vault_id
    for f in all_files(path):
        if "/slots/" in f and slots.read_header(open(f, "rb").read(), _rel(path, f)).type == slots.SlotType.PASSPHRASE:
            os.unlink(f)
    huge = KdfParams(4 * 1024 * 1024, 3, 4, random_bytes(16))  # 4 GiB: beyond the reader bound
    cred = Credential.generate(CredentialKind.PASSPHRASE)
    sid = ids.new_random_id()
    data = slots.build_slot(
        vault_id=vault_id, slot_id=sid, slot_type=slots.SlotType.PASSPHRASE, generation=1, vms=random_bytes(32),
        recipient_public=cred.recipient.public, recipient_id=cred.recipient_id, kdf=huge, label="x",
        signer=cred.signer, signer_id=cred.writer_id,
    )
    open(os.path.join(path, slots.file_name(sid)), "wb").write(data)
    with pytest.raises(DamagedFile, match="refused.*Argon2id memory"):
        Vault.open(path, Unlock.passphrase(PASSPHRASE), register=False)
    with pytest.raises(LimitExceeded):
        from_passphrase(PASSPHRASE, huge)


def test_non_canonical_batch_payload_is_named(filled):
    """A writer (holding the epoch key) seals CBOR that is not deterministic: the reader names the
    segment instead of accepting a malleable encoding."""
    path, _, _ = filled
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), register=False) as v:
        cid = v.compartment_id("personal")
        epoch = v.session.roster.current_epoch(cid)
        vault_id = v.vault_id
    payload = b"\x9f\xff"  # an indefinite-length empty array
    seg = segments.seal_segment(vault_id, cid, epoch.epoch_id, epoch.public, payload)
    from camillo.storage import segment_name

    name = segment_name(seg)
    os.makedirs(os.path.join(path, os.path.dirname(name)), exist_ok=True)
    open(os.path.join(path, name), "wb").write(seg)
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), register=False) as v:
        msgs = [p.message for p in v.problems() if p.file == name]
        assert msgs and "deterministic CBOR" in msgs[0]
        assert len(v.timeline()) == 6


def test_sync_conflict_copies_and_temp_files_are_ignored(filled):
    path, _, _ = filled
    seg = next(f for f in all_files(path) if f.endswith(".seg"))
    shutil.copy(seg, seg.replace(".seg", ".sync-conflict-20260101-120000-ABCDEFG.seg"))
    shutil.copy(seg, os.path.join(os.path.dirname(seg), ".tmp-deadbeef"))
    open(os.path.join(path, "segments", "Icon\r"), "wb").write(b"")
    open(os.path.join(path, ".DS_Store"), "wb").write(b"junk")
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), register=False) as v:
        assert len(v.timeline()) == 6 and v.problems() == []



