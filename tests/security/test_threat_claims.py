"""Claims of docs/security.md that no other test backed: what each party can and cannot do,
including the limits (what VMEM does *not* protect), each shown with real files and real keys.

Runs on pytest's main thread.
"""

from __future__ import annotations

import os
import shutil

import pytest
from camillo import NewRecord, Unlock, Vault, slots
from camillo.credentials import CredentialKind
from camillo.errors import AccessDenied, VaultError
from camillo.primitives import padme
from camillo.session.grantfile import read_grant_file
from camillo.session.writer import write_control
from camillo.storage import kind_of

from ..core.helpers import all_files, switch_home
from ..core.test_access import keys_from_files, readable_plaintexts

PASSPHRASE = "correct horse battery staple"


def _open(path, **kw):
    return Vault.open(path, Unlock.passphrase(PASSPHRASE), **kw)


def _names(path: str) -> list[str]:
    return [os.path.relpath(f, path).replace(os.sep, "/") for f in all_files(path)]


# -- a curious host -------------------------------------------------------------------------------


def test_host_sees_counts_types_and_sizes_but_no_names_or_content(new_vault, tmp_path, monkeypatch):
    """The host learns how many user credentials of each type exist (so how many devices), how many
    segments (so roughly how many writes) and their padded sizes; never a device name, a key name,
    a record or its exact size."""
    path, vault, _ = new_vault
    before = [n for n in _names(path) if kind_of(n) == "segment"]
    for i in range(3):
        vault.append([NewRecord(type="message", text="x" * (100 + 37 * i))])
    after = [n for n in _names(path) if kind_of(n) == "segment"]
    assert len(after) == len(before) + 3  # one segment per write: the write count is visible
    for n in after:
        size = os.path.getsize(os.path.join(path, n))
        assert size >= 4096 and size in {max(4096, padme(s)) for s in range(size - 64, size + 1)}
    vault.lock()
    switch_home(monkeypatch, tmp_path / "second-installation")
    _open(path).lock()  # a second installation registers: one more device slot
    types = []
    for n in _names(path):
        if kind_of(n) == "slot":
            data = open(os.path.join(path, n), "rb").read()
            types.append(slots.read_header(data, n).type)
            assert b"test laptop" not in data and b"passphrase" not in data  # labels are sealed
    assert types.count(slots.SlotType.DEVICE) == 2  # the device count is visible
    assert types.count(slots.SlotType.PASSPHRASE) == 1 and types.count(slots.SlotType.RECOVERY) == 1


def test_a_fresh_reader_cannot_detect_a_rollback_that_happened_before_it_looked(new_vault, tmp_path, monkeypatch):
    """Rollback detection needs memory: a device that saw the newer state alerts; an installation
    that never looked before is shown the old copy without an alert."""
    path, vault, _ = new_vault
    old = str(tmp_path / "old-copy")
    shutil.copytree(path, old)
    vault.append([NewRecord(type="message", text="written after the copy")])
    vault.lock()
    shutil.rmtree(path)
    shutil.copytree(old, path)  # the host serves the old copy
    switch_home(monkeypatch, tmp_path / "fresh")
    with _open(path, register=False) as v:
        assert "written after the copy" not in {r.text for r in v.timeline()}
        assert v.sync_status()[0] == "up to date"


# -- a stolen unlocked device -----------------------------------------------------------------------


def test_an_unlocked_device_alone_reads_writes_and_manages_grants(new_vault, tmp_path):
    """Whoever holds an unlocked device is the owner for everything that does not re-authenticate:
    reading, writing with user authority, creating and revoking agent grants, changing the policy,
    enrolling another device (spec §23, "Re-authentication")."""
    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="private")])
    vault.session.unlocking = None  # as after an unlock with the device key alone
    assert "private" in {r.text for r in vault.timeline()}
    vault.append([NewRecord(type="instruction", key="user/rule", value="written by whoever holds the device")])
    assert vault.fact("user/rule").status == "ok"  # binding: user authority
    vault.create_grant("thief", {"personal": "read"}, str(tmp_path / "thief.grant"))
    vault.revoke("thief")
    vault.set_policy(erasure=False, reason="no more erasing")
    assert not vault.policy.erasure_enabled
    from camillo.ops.enrollment import Offer

    assert Offer(vault.session).qr_text.startswith("VMEM1:")  # and it can enroll another device


def test_revoking_a_user_credential_or_erasing_needs_the_passphrase_or_recovery_phrase(new_vault, tmp_path,
                                                                                        monkeypatch):
    path, vault, _ = new_vault
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    _open(path).lock()
    switch_home(monkeypatch, tmp_path / "home")
    with _open(path) as v:
        rid = (v.append([NewRecord(type="message", text="to erase")]).written or [None])[0]
        v.session.unlocking = None
        laptop = next(d for d in v.devices() if not d.this_device)
        with pytest.raises(AccessDenied, match="passphrase or recovery phrase"):
            v.revoke(laptop.writer_id.hex()[:12])
        with pytest.raises(AccessDenied, match="passphrase or recovery phrase"):
            v.erase([rid])
        with pytest.raises(AccessDenied, match="passphrase or recovery phrase"):
            v.change_passphrase("taken over")


# -- a revoked reader --------------------------------------------------------------------------------


def test_a_revoked_reader_keeps_what_its_old_keys_open_but_nothing_written_afterwards(new_vault, tmp_path):
    """Revocation cannot recall: with the old files and its own keys, a revoked read grant still
    decrypts what was written before; it cannot decrypt what is written after."""
    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="BEFORE-REVOCATION")], compartment="work")
    gpath = str(tmp_path / "r.grant")
    vault.create_grant("reader", {"work": "read"}, gpath)
    cred = read_grant_file(gpath)[0].credential
    old_copy = str(tmp_path / "copy")
    shutil.copytree(path, old_copy)  # what the agent (or a sync history) kept
    vault.revoke("reader")
    vault.append([NewRecord(type="message", text="AFTER-REVOCATION")], compartment="work")
    vid = vault.vault_id
    vault.lock()
    old_secrets, _ = keys_from_files(old_copy, vid, [cred.recipient])
    assert any(b"BEFORE-REVOCATION" in p for p in readable_plaintexts(old_copy, vid, old_secrets))
    now_secrets, _ = keys_from_files(path, vid, [cred.recipient])
    every = {**old_secrets, **now_secrets}
    assert not any(b"AFTER-REVOCATION" in p for p in readable_plaintexts(path, vid, every))
    with pytest.raises(VaultError, match="revoked|no readable key"):
        Vault.open(path, Unlock.grant(gpath))


# -- erasure and sync history ------------------------------------------------------------------------


def test_a_copy_from_before_an_erasure_still_holds_the_erased_record(new_vault, tmp_path):
    """Erasure reaches the vault's files, not copies made before it (sync history, backups)."""
    path, vault, phrase = new_vault
    vault.append([NewRecord(type="message", text="ERASE-ME")])
    rid = next(r.id for r in vault.timeline() if r.text == "ERASE-ME")
    history = str(tmp_path / "sync-history")
    shutil.copytree(path, history)
    report = vault.erase([rid], reauth=Unlock.passphrase(PASSPHRASE))
    assert report is not None
    assert "ERASE-ME" not in {r.text for r in vault.timeline()}
    vault.lock()
    with Vault.open(history, Unlock.recovery(phrase), register=False) as old:
        assert "ERASE-ME" in {r.text for r in old.timeline()}


def test_an_old_copy_of_the_vault_opens_with_the_old_passphrase(new_vault, tmp_path):
    """Changing the passphrase protects the vault from now on; a whole copy made before the change
    (sync history, a backup) still opens with the old one."""
    path, vault, _ = new_vault
    history = str(tmp_path / "backup")
    shutil.copytree(path, history)
    vault.change_passphrase("the new passphrase")
    vault.lock()
    with pytest.raises(VaultError):
        _open(path)
    with Vault.open(history, Unlock.passphrase(PASSPHRASE), register=False) as old:
        assert old.timeline() is not None


# -- hostile copies and agents -----------------------------------------------------------------------


def test_merging_a_hostile_copy_adds_nothing_unauthenticated(new_vault, tmp_path):
    """A copy of the same vault carrying forged files (a batch signed by a stranger and sealed to the
    real epoch key, a planted slot, an envelope to a stranger) merges, but none of it counts, and the
    planted slot is reported.  (A batch by a writer the roster does not know is not counted and not
    reported: its certificate might still be syncing.)"""
    from camillo import envelopes, ids, segments
    from camillo.credentials import Credential, CredentialKind
    from camillo.primitives import random_bytes
    from camillo.records import BatchHeader, Kind, encode_record, make_batch
    from camillo.storage import segment_name
    from camillo.transport import merge_into

    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="genuine")])
    cid = vault.compartment_id("personal")
    epoch = vault.session.roster.current_epoch(cid)
    vid = vault.vault_id
    before = {r.text for r in vault.timeline()}
    vault.lock()
    hostile = str(tmp_path / "hostile")
    shutil.copytree(path, hostile)
    stranger = Credential.generate(CredentialKind.DEVICE)
    raw = encode_record(Kind.NOTE, stranger.writer_id, value={"text": "FORGED"}, authority=3, type="message")
    header = BatchHeader(vid, cid, stranger.writer_id, 1, None, (), {stranger.writer_id: 0}, (ids.record_id(raw),), 1)
    seg = segments.seal_segment(vid, cid, epoch.epoch_id, epoch.public,
                                segments.encode_payload([make_batch(header, [raw], stranger.signer)]))
    sid = ids.new_random_id()
    planted = slots.build_slot(vault_id=vid, slot_id=sid, slot_type=slots.SlotType.RECOVERY, generation=1,
                               vms=random_bytes(32), recipient_public=stranger.recipient.public,
                               recipient_id=stranger.recipient_id, kdf=None, label="x", signer=stranger.signer,
                               signer_id=stranger.writer_id)
    env = envelopes.build_envelope(vault_id=vid, kind=envelopes.EnvelopeKind.EPOCH_SECRET, compartment_id=cid,
                                   epoch_id=ids.new_random_id(), recipient_public=stranger.recipient.public,
                                   recipient_id=stranger.recipient_id, key=random_bytes(32), signer=stranger.signer,
                                   signer_id=stranger.writer_id)
    for name, data in ((segment_name(seg), seg), (envelopes.file_name(env), env), (slots.file_name(sid), planted)):
        target = os.path.join(hostile, *name.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "wb").write(data)
    copied = merge_into(path, hostile)
    assert len(copied) == 3
    with _open(path, register=False) as v:
        assert {r.text for r in v.timeline()} == before
        problems = v.problems()
    assert any(p.file == slots.file_name(sid) for p in problems), problems


def test_an_agent_grant_has_no_write_quota(new_vault, tmp_path):
    """Availability is not protected against an agent inside its grant: it may write as much as it
    likes into the compartments it can write (revoke it to stop it)."""
    path, vault, _ = new_vault
    gpath = str(tmp_path / "w.grant")
    vault.create_grant("chatty", {"work": "write"}, gpath)
    vault.lock()
    with Vault.open(path, Unlock.grant(gpath)) as agent:
        for i in range(20):
            agent.append([NewRecord(type="message", role="assistant", text=f"noise {i}") for _ in range(10)],
                         compartment="work")
    with _open(path, register=False) as v:
        assert sum(1 for r in v.timeline() if r.text.startswith("noise")) == 200


def test_a_device_alone_cannot_mint_a_passphrase_even_at_the_format_level(new_vault):
    """A modified client on a stolen device writes a CRED_ANCHOR for a passphrase of its own, signed
    by the device and the new credential but not by a current passphrase or recovery credential: no
    reader accepts it, so no slot for it would ever be used."""
    from camillo.control import owner_entry
    from camillo.credentials import CredentialKind, from_passphrase
    from camillo.primitives import KdfParams
    from camillo.records import Kind, encode_record

    path, vault, _ = new_vault
    actor = vault.session.actor
    new = from_passphrase("the thief's passphrase", KdfParams.fresh())
    anchor = encode_record(
        Kind.CRED_ANCHOR, new.writer_id,
        body={0: owner_entry(CredentialKind.PASSPHRASE, new.signer.public, new.recipient.public, "passphrase", ""),
              1: None, 2: [new.kdf.memory_kib, new.kdf.time_cost, new.kdf.parallelism, new.kdf.salt]},
        signers=[new.signer, actor.signer],
    )
    write_control(vault.session, [anchor], vault.session.all_compartments())
    vault.session.write_slot(new, slots.SlotType.PASSPHRASE, "passphrase")
    vault.lock()
    with _open(path, register=False) as v:
        assert new.writer_id not in v.session.roster.principals
    with pytest.raises(VaultError):
        Vault.open(path, Unlock.passphrase("the thief's passphrase"), register=False)


def _plant_slots(vault, kinds, slot_id: bytes):
    """A compromised device's slots of the current generation naming the user's credentials of ``kinds``, with
    Argon2id parameters of its own (a random salt), signed by its own key and wrapped to a key of its own; returns
    the passphrase's real parameters."""
    from camillo.credentials import Credential
    from camillo.primitives import KdfParams, random_bytes

    s, junk = vault.session, Credential.generate(CredentialKind.DEVICE)
    real = next(h.kdf for h, _ in s.current_slots() if h.type == slots.SlotType.PASSPHRASE)
    hostile = KdfParams(real.memory_kib, real.time_cost, real.parallelism, random_bytes(16))
    for n, kind in enumerate(kinds):
        target = next(p for p in s.roster.principals.values() if p.kind == kind and p.writer_id not in s.roster.revocations)
        sid = bytes([(slot_id[0] + (n if slot_id[0] < 128 else -n))]) * 16
        s.shelf.write(slots.file_name(sid), slots.build_slot(
            vault_id=s.vault_id, slot_id=sid, slot_type=slots.SlotType.PASSPHRASE, generation=s.keyring.generation,
            vms=s.keyring.master_secret(), recipient_public=junk.recipient.public, recipient_id=target.recipient_id,
            kdf=hostile, label="passphrase", signer=s.actor.signer, signer_id=s.actor.writer_id))
    return real


def _passphrase_and_recovery_still_open(path, recovery, tmp_path, monkeypatch) -> None:
    for where in ("home", "a new device"):
        switch_home(monkeypatch, tmp_path / where)
        with _open(path, register=where == "home"):
            pass
    with Vault.open(path, Unlock.recovery(recovery), register=False):
        pass


@pytest.mark.regression
@pytest.mark.parametrize("slot_id", [b"\x00", b"\xff"])
@pytest.mark.parametrize("reauth", ["passphrase", "recovery phrase"])
def test_a_compromised_device_cannot_poison_the_passphrase_slot_that_the_users_revocation_issues(
        new_vault, tmp_path, monkeypatch, reauth, slot_id):
    """Found by the fifth review of 2026-12-07 (older than that day): a compromised laptop, unlocked, writes two
    slots of the current generation whose statements name the passphrase's and the recovery phrase's recipient
    ids, with Argon2id parameters of its own (a random salt).  The user revokes the laptop.  The revocation's roll
    took each credential's parameters from the last such slot it read: the passphrase's new slot had the thief's
    salt, the recovery phrase's a passphrase block (damaged), the old slots were deleted, and without an OS
    keychain nothing opened the vault any more.  Then (sixth review) a revocation made with the recovery phrase
    took the first such slot: the same.  Now a roll issues a passphrase's slot with the parameters its session
    derived it with, else those of its CRED_ANCHOR, else one slot for each set its slots carry; and a recovery
    phrase's with none."""
    path, vault, recovery = new_vault
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    with _open(path) as lap:
        laptop = lap.session.actor
        real = _plant_slots(lap, (CredentialKind.PASSPHRASE, CredentialKind.RECOVERY), slot_id * 16)
    switch_home(monkeypatch, tmp_path / "home")
    with _open(path) as v:
        with_ = Unlock.passphrase(PASSPHRASE) if reauth == "passphrase" else Unlock.recovery(recovery)
        v.revoke(laptop.writer_id.hex()[:12], reason="compromised", reauth=with_)
        assert real in [h.kdf for h, _ in v.session.current_slots() if h.type == slots.SlotType.PASSPHRASE]
    _passphrase_and_recovery_still_open(path, recovery, tmp_path, monkeypatch)


@pytest.mark.regression
@pytest.mark.parametrize("slot_id", [b"\x00", b"\xff"])
def test_a_compromised_device_cannot_poison_the_passphrase_slot_its_replacement_reissues(
        new_vault, tmp_path, monkeypatch, slot_id):
    """Found by the sixth review of 2026-12-07 (older): the laptop made the vault, so the passphrase's slot is signed
    by its key alone; compromised, it writes a slot naming the passphrase with a salt of its own and drops its
    local seal.  The user opens the laptop with the passphrase: it registers again, replacing its key, and the
    slots only the old key signed are issued again under the new one.  The first by name was copied, the real one
    deleted, and the passphrase opened nothing any more.  Now the passphrase's parameters are those this session
    derived it with."""
    path, vault, recovery = new_vault
    _plant_slots(vault, (CredentialKind.PASSPHRASE,), slot_id * 16)
    seal, old = vault.session.local.device_key_path, vault.writer_id
    vault.lock()
    os.unlink(seal)
    with _open(path) as v:
        assert v.writer_id != old and old in v.session.roster.revocations
    _passphrase_and_recovery_still_open(path, recovery, tmp_path, monkeypatch)


@pytest.mark.regression
def test_revoking_a_lost_laptop_after_a_passphrase_change_holds_in_every_batch_order(tmp_path, monkeypatch):
    """Found by tests/security's session: after a passphrase change, a laptop revoked with the new
    passphrase stayed un-revoked for every reader about one time in three.  The roster froze a
    REVOKE's signers the first time it met the record; when the batch carrying the REVOKE sorted
    before every batch carrying the new passphrase's CRED_ANCHOR, the new passphrase was not yet an
    owner, so the revocation counted as signed by the device alone and was refused ("lacks a
    passphrase or recovery signature").  The test builds vaults until that order occurs."""
    from camillo.records import Kind

    for attempt in range(40):
        root = tmp_path / f"try{attempt}"
        switch_home(monkeypatch, root / "desk")
        path = str(root / "v")
        v, _ = Vault.create(path, PASSPHRASE)
        v.lock()
        switch_home(monkeypatch, root / "laptop")
        _open(path, device_name="laptop").lock()
        switch_home(monkeypatch, root / "desk")
        v = _open(path)
        v.change_passphrase("the new passphrase")
        v.revoke("laptop", reauth=Unlock.passphrase("the new passphrase"))
        first = {}
        for view in v.session.batches.values():
            for r in view.records:
                if r is not None and r.kind in (Kind.CRED_ANCHOR, Kind.REVOKE):
                    what = "anchor" if r.kind == Kind.CRED_ANCHOR else (
                        "laptop" if r.body.get(4) == "revoked laptop" else "other")
                    first[what] = min(first.get(what, view.id), view.id)
        v.lock()
        if first["laptop"] < first["anchor"]:
            break
    else:
        pytest.skip("the adverse batch order did not occur in 40 vaults")
    switch_home(monkeypatch, tmp_path / "fresh")
    with Vault.open(path, Unlock.passphrase("the new passphrase"), register=False, cache=False) as fresh:
        assert next(d for d in fresh.devices() if d.name == "laptop").revoked
        assert not [p for p in fresh.problems() if p.kind == "revocation"]
