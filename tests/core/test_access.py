"""Access with real keys: grants at each level, a revoked laptop, authority, erasure that reaches
what it says, compaction, policy and scheduled epochs."""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import time

import pytest
from camillo import (
    AccessDenied,
    Authority,
    NewRecord,
    Unlock,
    Vault,
    WrongCredential,
    envelopes,
    ids,
    keys,
    segments,
)
from camillo import state as state_module
from camillo.errors import ErasureDisabled, Revoked, UsageError
from camillo.ops.erasure import segment_id
from camillo.ops.rekey import SCHEDULED_EPOCH_BATCHES
from camillo.primitives import CryptoFailure
from camillo.records import BatchHeader, Kind, encode_record, make_batch
from camillo.session.writer import write_batches
from camillo.storage import segment_name

from .helpers import all_files, switch_home

PASSPHRASE = "correct horse battery staple"


def open_vault(path, **kw):
    return Vault.open(path, Unlock.passphrase(PASSPHRASE), **kw)


def keys_from_files(path, vault_id, recipients):
    """Every epoch secret or public key any of ``recipients`` (X-Wing keys) can get from the
    envelopes of a vault folder, with nothing but the files and those keys."""
    secrets, publics = {}, {}
    for f in glob.glob(os.path.join(path, "env", "*.env")):
        data = open(f, "rb").read()
        for rk in recipients:
            try:
                p = envelopes.open_envelope(data, f, vault_id, rk)
            except CryptoFailure:
                continue
            if p.kind == envelopes.EnvelopeKind.EPOCH_SECRET:
                secrets[(p.compartment_id, p.epoch_id)] = p.key
            else:
                publics[(p.compartment_id, p.epoch_id)] = p.key
    return secrets, publics


def readable_plaintexts(path, vault_id, secrets):
    """Decrypted payloads of every segment those epoch secrets open."""
    out = []
    for f in glob.glob(os.path.join(path, "segments", "*", "*.seg")):
        data = open(f, "rb").read()
        h = segments.read_header(data, f)
        s = secrets.get((h.compartment_id, h.epoch_id))
        if s is not None:
            out.append(segments.open_segment(data, f, vault_id, keys.epoch_key(s, vault_id, h.compartment_id, h.epoch_id)))
    return out


# ------------------------------------------------------------------------------------------ grants


@pytest.fixture
def granted(new_vault, tmp_path):
    path, vault, phrase = new_vault
    vault.append([NewRecord(type="message", text="PERSONAL-SECRET")])
    vault.append([NewRecord(type="message", text="work note")], compartment="work")
    files = {}
    for level in ("read", "write", "append"):
        files[level] = str(tmp_path / f"{level}.grant")
        vault.create_grant(f"agent-{level}", {"work": level}, files[level])
    vid = vault.vault_id
    vault.lock()
    return path, vid, files


def test_grant_file_is_private_and_names_its_scope(granted):
    path, vid, files = granted
    assert oct(os.stat(files["read"]).st_mode & 0o777) == "0o600"
    text = open(files["read"]).read()
    assert "agent: agent-read" in text and "work (read)" in text


def test_read_grant_reads_only_its_compartment(granted, tmp_path, monkeypatch):
    path, vid, files = granted
    switch_home(monkeypatch, tmp_path / "agent")
    with Vault.open(path, Unlock.grant(files["read"])) as v:
        assert [r.text for r in v.timeline()] == ["work note"]
        with pytest.raises(AccessDenied, match=r"read-only for work \(rule: read grants cannot write\)"):
            v.append([NewRecord(type="message", text="x")], compartment="work")
        with pytest.raises(AccessDenied, match="gives no access to compartment personal"):
            v.append([NewRecord(type="message", text="x")], compartment="personal")
        grant_key = v.session.actor.recipient
    # With its own key and the files, it cannot decrypt anything of "personal".
    secrets, publics = keys_from_files(path, vid, [grant_key])
    assert secrets and not publics
    plaintexts = readable_plaintexts(path, vid, secrets)
    assert plaintexts and not any(b"PERSONAL-SECRET" in p for p in plaintexts)


def test_append_grant_adds_but_cannot_read(granted, tmp_path, monkeypatch):
    path, vid, files = granted
    switch_home(monkeypatch, tmp_path / "agent")
    with Vault.open(path, Unlock.grant(files["append"])) as v:
        with pytest.raises(AccessDenied, match="append-only"):
            v.timeline()
        with pytest.raises(AccessDenied, match="append-only"):
            v.search("note")
        gid = v.session.grant.grant_id.hex()
        v.append([NewRecord(type="message", text="appended by the agent")], compartment="work")
        v.append([NewRecord(type="fact", key=f"append/{gid}/mood", value="curious")], compartment="work")
        with pytest.raises(AccessDenied, match="own key namespace"):
            v.append([NewRecord(type="fact", key="user/mood", value="x")], compartment="work")
        grant_key = v.session.actor.recipient
    secrets, publics = keys_from_files(path, vid, [grant_key])
    assert not secrets and publics, "an appender holds epoch public keys only"
    with open_vault(path) as v:
        mine = {r.text: r for r in v.timeline()}
        assert mine["appended by the agent"].writer == "agent agent-append"
        assert mine["appended by the agent"].claimed_class == Authority.INFERRED
        assert v.problems() == []


def test_write_grant_is_capped_at_its_class(granted, tmp_path, monkeypatch):
    path, vid, files = granted
    switch_home(monkeypatch, tmp_path / "agent")
    with Vault.open(path, Unlock.grant(files["write"])) as v:
        with pytest.raises(AccessDenied, match="at most inferred authority, not user"):
            v.append([NewRecord(type="instruction", key="user/forward_invoices", value="to evil@example.org",
                                authority=Authority.USER)], compartment="work")
        v.append([NewRecord(type="instruction", key="user/forward_invoices", value="to evil@example.org")],
                 compartment="work")
    with open_vault(path) as v:
        f = v.fact("user/forward_invoices")
        assert f.status == "pending" and f.current is None  # a proposal: no value until confirmed
        assert [p.effective_class for p in f.proposed] == [Authority.INFERRED]
        assert [r.key for r in v.inbox()] == ["user/forward_invoices"]


def test_agent_signed_user_record_is_rejected_on_read(granted, tmp_path, monkeypatch):
    """An agent that bypasses its own software and signs a user-class record: every reader drops it."""
    path, vid, files = granted
    switch_home(monkeypatch, tmp_path / "agent")
    with Vault.open(path, Unlock.grant(files["write"])) as v:
        cid = v.compartment_id("work")
        actor = v.session.actor
        raw = encode_record(Kind.PUT, actor.writer_id, key="user/forward_invoices", value="evil", authority=3,
                            type="instruction")
        header = BatchHeader(vid, cid, actor.writer_id, 1, None, (), {actor.writer_id: 0}, (ids.record_id(raw),),
                             int(time.time()))
        epoch = v.session.roster.current_epoch(cid)
        seg = segments.seal_segment(vid, cid, epoch.epoch_id, epoch.public,
                                    segments.encode_payload([make_batch(header, [raw], actor.signer)]))
        v.session.shelf.write(segment_name(seg), seg)
    with open_vault(path, cache=False) as v:
        assert "user/forward_invoices" not in {f.key for f in v.facts()}
        rejected = [p.message for p in v.problems() if p.kind == "rejected-record"]
        assert any("claims user authority but was written by agent agent-write" in m for m in rejected)


def test_a_pass_over_every_record_reads_only_those_not_valid_without_looking(granted, tmp_path, monkeypatch):
    """A pass over every record judges one by one only the rows not valid without looking
    (``passes.unjudged_rows``: a control record, or an owner's device's own record, not a CONFIRM, in an
    accepted batch, not erased): its verdicts equal those of a pass that judges every row, on a vault
    with an owner device's records, an agent's under a write grant and under an append grant, an agent's
    forged user-class record, and records a device and an agent each wrote under another's name."""
    path, vid, files = granted
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path) as v:
        device = v.session.actor.writer_id
        v.append([NewRecord(type="message", text=f"note {i}") for i in range(5)])
        v.append([NewRecord(type="fact", key="user/city", value="Lyon")], compartment="work")
        cid = v.compartment_id("work")
        forged = encode_record(Kind.NOTE, os.urandom(32), value="under another's name", authority=Authority.USER,
                               type="message")
        write_batches(v.session, {cid: [forged]})
    switch_home(monkeypatch, tmp_path / "agent")
    with Vault.open(path, Unlock.grant(files["write"])) as v:
        actor = v.session.actor
        v.append([NewRecord(type="fact", key="user/diet", value="vegan")], compartment="work")
        write_batches(v.session, {cid: [
            encode_record(Kind.PUT, actor.writer_id, key="user/forward_invoices", value="evil", authority=3,
                          type="instruction"),
            encode_record(Kind.NOTE, device, value="as the owner's device", authority=Authority.USER, type="message")]})
    with Vault.open(path, Unlock.grant(files["append"])) as v:
        v.append([NewRecord(type="message", text="appended by the agent")], compartment="work")
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path, cache=False) as v:
        reader, state = v.session.reader, v.session.materialized
        judged: list[bytes] = []
        check = state_module.static_check
        monkeypatch.setattr(state_module, "static_check", lambda *a: judged.append(a[2]) or check(*a))

        def full_pass():
            judged.clear()
            state.materialize(reader.roster, reader.log, reader.batches, None)
            return state.db.execute("SELECT id, valid, reason, effective, hidden FROM records ORDER BY id").fetchall()

        skipping = full_pass()
        judged_then = list(judged)
        monkeypatch.setattr(state_module, "unjudged_rows", lambda *a: "1")  # every row, one by one
        assert full_pass() == skipping
        reasons = {r for _, valid, r, _, _ in skipping if not valid}
        assert {"its author is not the writer who signed the batch"} <= reasons
        assert any(r and "claims user authority" in r for r in reasons)
        # of the device's rows, only the one under another's name was read one by one (all, with every row)
        assert judged_then.count(device) == 1 and judged.count(device) > 7
        assert len(judged_then) < len(judged)


def test_derived_record_above_its_sources_is_rejected(new_vault):
    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="a web page said so", role="web")])
    web = next(r for r in vault.timeline() if r.text == "a web page said so")
    assert web.claimed_class == Authority.EXTERNAL
    vault.append([NewRecord(type="fact", key="user/bank", value="Evil Bank", authority=Authority.OBSERVED,
                            sources=[web.id])])
    assert "user/bank" not in {f.key for f in vault.facts()}
    assert any("above its sources (external)" in p.message for p in vault.problems())
    vault.append([NewRecord(type="fact", key="user/bank", value="Evil Bank", authority=Authority.EXTERNAL,
                            sources=[web.id])])
    assert [p.claimed_class for p in vault.fact("user/bank").proposed] == [Authority.EXTERNAL]


def test_revoked_grant_is_refused_and_its_later_batches_rejected(granted, tmp_path, monkeypatch):
    path, vid, files = granted
    switch_home(monkeypatch, tmp_path / "agent")
    with Vault.open(path, Unlock.grant(files["write"])) as v:
        v.append([NewRecord(type="message", text="before revocation")], compartment="work")
        agent_state = v  # keep its keys to misbehave later
        cid = v.compartment_id("work")
        old_epoch = v.session.roster.current_epoch(cid)
        actor = v.session.actor
        counter = v.session.device_state.counters[cid]
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path) as v:
        report = v.revoke("agent-write")
        assert "cannot read anything written from now on" in " ".join(report.lines())
        v.append([NewRecord(type="message", text="AFTER-REVOCATION")], compartment="work")
    switch_home(monkeypatch, tmp_path / "agent")
    with pytest.raises(Revoked, match="was revoked on"):
        Vault.open(path, Unlock.grant(files["write"]))
    # The agent still holds the old epoch key: what it writes now is rejected everywhere...
    raw = encode_record(Kind.NOTE, actor.writer_id, value={"text": "written after revocation"}, authority=1,
                        type="message")
    header = BatchHeader(vid, cid, actor.writer_id, counter[0] + 1, counter[1], (), {actor.writer_id: counter[0]},
                         (ids.record_id(raw),), int(time.time()))
    seg = segments.seal_segment(vid, cid, old_epoch.epoch_id, old_epoch.public,
                                segments.encode_payload([make_batch(header, [raw], actor.signer)]))
    open(os.path.join(path, segment_name(seg)), "wb").write(seg) if os.makedirs(
        os.path.dirname(os.path.join(path, segment_name(seg))), exist_ok=True) is None else None
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path, cache=False) as v:
        texts = {r.text for r in v.timeline()}
        assert "before revocation" in texts and "written after revocation" not in texts
        assert any((p.kind == "rejected" and "revocation" in p.message) or p.kind == "rejected"
                   for p in v.problems())
    # ...and with only its keys it cannot read what was written after the revocation.
    secrets, _ = keys_from_files(path, vid, [actor.recipient])
    assert not any(b"AFTER-REVOCATION" in p for p in readable_plaintexts(path, vid, secrets))
    del agent_state


# ------------------------------------------------------------------------------------------ devices


def test_revoke_a_lost_laptop(new_vault, tmp_path, monkeypatch):
    path, vault, _ = new_vault
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as lap:
        laptop = lap.session.actor
        lap_vms, lap_generation = lap.session.keyring.master.get(), lap.session.keyring.generation
        lap.append([NewRecord(type="message", text="written on the laptop")])
        cid = lap.compartment_id("personal")
        counter = lap.session.device_state.counters[cid]
        old_epoch = lap.session.roster.current_epoch(cid)
        vid = lap.vault_id
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path) as v:
        assert {d.name for d in v.devices()} >= {"test laptop"}
        with pytest.raises(AccessDenied, match="passphrase or recovery phrase"):
            v.session.unlocking = None
            v.revoke(laptop.writer_id.hex()[:12])
    with open_vault(path) as v:
        report = v.revoke(laptop.writer_id.hex()[:12], reason="lost on a train")
        lines = " ".join(report.lines())
        assert "master secret rolled" in lines and "already read stays exposed" in lines
        v.append([NewRecord(type="message", text="AFTER-THE-LAPTOP-WAS-LOST")])
        assert next(d for d in v.devices() if d.writer_id == laptop.writer_id).revoked
    # The laptop's keys, with every file of the vault: no slot opens, and the old master secret
    # leads to no envelope of the new epochs.
    from camillo import slots as slot_mod

    for f in glob.glob(os.path.join(path, "slots", "*.slot")):
        h = slot_mod.read_header(open(f, "rb").read(), os.path.relpath(f, path))
        with pytest.raises(CryptoFailure):
            slot_mod.unwrap_vms(h, vid, laptop.recipient)
    old_owner = keys.owner_kem(lap_vms, vid, lap_generation)
    secrets, _ = keys_from_files(path, vid, [laptop.recipient, old_owner])
    assert not any(b"AFTER-THE-LAPTOP-WAS-LOST" in p for p in readable_plaintexts(path, vid, secrets))
    # Batches it writes afterwards with what it still knows are rejected by every other device.
    from camillo.credentials import Credential

    assert isinstance(laptop, Credential)
    raw = encode_record(Kind.NOTE, laptop.writer_id, value={"text": "thief was here"}, authority=3, type="message")
    header = BatchHeader(vid, cid, laptop.writer_id, counter[0] + 1, counter[1], (), {laptop.writer_id: counter[0]},
                         (ids.record_id(raw),), int(time.time()))
    seg = segments.seal_segment(vid, cid, old_epoch.epoch_id, old_epoch.public,
                                segments.encode_payload([make_batch(header, [raw], laptop.signer)]))
    target = os.path.join(path, segment_name(seg))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    open(target, "wb").write(seg)
    switch_home(monkeypatch, tmp_path / "third-device")
    with open_vault(path) as v:
        texts = {r.text for r in v.timeline()}
        assert "written on the laptop" in texts and "thief was here" not in texts
        assert any(p.kind == "rejected" for p in v.problems())
    # The laptop itself can no longer unlock with its device key.
    switch_home(monkeypatch, tmp_path / "laptop")
    with pytest.raises(WrongCredential):
        Vault.open(path, Unlock.with_device_credential(laptop))


def laptop_that_wrote(new_vault, tmp_path, monkeypatch) -> Vault:
    """The vault of ``new_vault`` opened on a second device, the laptop (its own home), which has written one
    message ("written on the laptop"); the first device's session is locked."""
    path, vault, _ = new_vault
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    lap = open_vault(path)
    lap.append([NewRecord(type="message", text="written on the laptop")])
    return lap


def _seal_batch(path: str, vid: bytes, cid: bytes, epoch, header: BatchHeader, raws: list[bytes], signer) -> None:
    """Write one batch, sealed to ``epoch`` (an epoch the writer knows), as a segment file of the vault."""
    seg = segments.seal_segment(vid, cid, epoch.epoch_id, epoch.public,
                                segments.encode_payload([make_batch(header, raws, signer)]))
    target = os.path.join(path, segment_name(seg))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    open(target, "wb").write(seg)


def test_a_revoked_device_cannot_rewrite_a_batch_its_revocation_had_accepted(new_vault, tmp_path, monkeypatch):
    """Found by review (2026-12-06): the thief of a revoked laptop writes, with the laptop's old key, a second
    batch at seq 1 of its control chain (a seq the revocation had seen, below its pinned batch) certifying a
    device of the thief's own, whose batch then writes with user authority.  Every batch at or below the
    revocation's seq used to count, so every copy accepted the thief's device and its record, and rejected the
    laptop's real later batches as beyond a fork.  Now below the pin only the chain that leads down from it
    counts (spec §14.6): the second batch is rejected, the thief's device is nobody, the laptop's records stay."""
    from camillo.control import owner_entry, pop_message
    from camillo.credentials import Credential, CredentialKind

    path = new_vault[0]
    with laptop_that_wrote(new_vault, tmp_path, monkeypatch) as lap:
        laptop = lap.session.actor
        for name in ("laptop one", "laptop two"):  # (two more batches in its control chain)
            lap.rename_device(lap.writer_id.hex()[:12], name)
        vid, control, personal = lap.vault_id, lap.session.roster.control_id, lap.compartment_id("personal")
        epochs = {c: lap.session.roster.current_epoch(c) for c in (control, personal)}
        assert lap.session.log.max_seq(laptop.writer_id, control) == 3
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path) as v:
        v.revoke(laptop.writer_id.hex()[:12], reason="stolen")
    assert isinstance(laptop, Credential)
    thief = Credential.generate(CredentialKind.DEVICE)
    cert = encode_record(Kind.DEVICE_CERT, laptop.writer_id, signers=[laptop.signer], body={
        0: owner_entry(CredentialKind.DEVICE, thief.signer.public, thief.recipient.public, "spare laptop", ""),
        1: None, 2: "enrollment", 3: thief.signer.sign(pop_message(vid, thief.signer.public, thief.recipient.public))})
    _seal_batch(path, vid, control, epochs[control], BatchHeader(
        vid, control, laptop.writer_id, 1, None, (), {laptop.writer_id: 0}, (ids.record_id(cert),), int(time.time())),
        [cert], laptop.signer)
    note = encode_record(Kind.NOTE, thief.writer_id, value={"text": "thief was here"}, authority=3, type="message")
    _seal_batch(path, vid, personal, epochs[personal], BatchHeader(
        vid, personal, thief.writer_id, 1, None, (), {thief.writer_id: 0}, (ids.record_id(note),), int(time.time())),
        [note], thief.signer)
    switch_home(monkeypatch, tmp_path / "third-device")
    with open_vault(path) as v:
        texts = {r.text for r in v.timeline()}
        assert "written on the laptop" in texts and "thief was here" not in texts
        assert thief.writer_id not in v.session.roster.principals
        assert [d.name for d in v.devices() if d.writer_id == laptop.writer_id] == ["laptop two"]  # (its renames stay)
        rejected = [p.message for p in v.problems() if p.kind == "rejected"]
        assert len(rejected) == 1 and "not the batch at seq 1 the revocation accepted" in rejected[0]
        assert not [p for p in v.problems() if p.kind == "fork"]


def test_a_revoked_devices_second_batch_is_rejected_on_a_warm_open_too(new_vault, tmp_path, monkeypatch):
    """Found by review: a warm open computes the roster from the batches that can move it (control batches and
    those not accepted), without the revoked laptop's accepted plain batches, so its second batch at a seq the
    revocation had seen (below the pin, certifying the thief's device) was the only one at its seq there and
    was accepted by the device that had read the real one, while a new device rejected it.  Now such a batch is
    judged beside every batch of its writer (spec §14.6): both opens reject it and keep the real note."""
    from camillo.control import owner_entry, pop_message
    from camillo.credentials import Credential, CredentialKind

    path, vault, _ = new_vault
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as lap:
        laptop = lap.session.actor
        for i in range(3):
            lap.append([NewRecord(type="message", text=f"laptop note {i}")])
        vid, personal = lap.vault_id, lap.compartment_id("personal")
        epoch = lap.session.roster.current_epoch(personal)
        first = lap.session.log.batch_at((laptop.writer_id, personal), 1)
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path) as v:
        v.revoke(laptop.writer_id.hex()[:12], reason="stolen")
    with open_vault(path) as v:  # (the local state now holds the laptop's batches as accepted)
        assert "laptop note 1" in {r.text for r in v.timeline()}
    assert isinstance(laptop, Credential)
    thief = Credential.generate(CredentialKind.DEVICE)
    cert = encode_record(Kind.DEVICE_CERT, laptop.writer_id, signers=[laptop.signer], body={
        0: owner_entry(CredentialKind.DEVICE, thief.signer.public, thief.recipient.public, "spare laptop", ""),
        1: None, 2: "enrollment", 3: thief.signer.sign(pop_message(vid, thief.signer.public, thief.recipient.public))})
    _seal_batch(path, vid, personal, epoch, BatchHeader(vid, personal, laptop.writer_id, 2, first, (first,),
                                                        {laptop.writer_id: 1}, (ids.record_id(cert),), int(time.time())),
                [cert], laptop.signer)
    seen = {}
    for who in ("home", "third device"):  # a warm open, then a new device's cold one
        switch_home(monkeypatch, tmp_path / who)
        with open_vault(path) as v:
            texts = {r.text for r in v.timeline()}
            seen[who] = (thief.writer_id in v.session.roster.principals, "laptop note 1" in texts)
    assert seen == {"home": (False, True), "third device": (False, True)}


def test_a_backup_of_a_rotated_key_cannot_retire_it_again_to_certify_a_device(new_vault, tmp_path, monkeypatch):
    """Found by the second review: the laptop rotates its key after another device's erasure (its old key retires
    itself).  A thief with a backup of the laptop from before writes, with the old key, a second retirement of it
    (its id ground to sort first, its seen covering the thief's own batch) and a certificate for a device of its
    own.  The retirements used to be applied in record-id order, so the thief's won and certified its device on
    every copy.  Then (third review) a second retirement placed where the first one's seen covered it by its seq
    made the honest one look later and dropped it.  Now a retirement counts only in the first batch of the key
    that replaces it (spec §14.6 step 1): in a batch of the old key it counts for nothing, the laptop's new key
    stays.  A rival rotation in that shape (the backup certifies a key of its own, in that key's first batch)
    counts as one with the first that accepts only what both accept: nobody's new key is vouched for by the old
    one, the vault says the key is in other hands, and the laptop, opened with the passphrase, writes again under
    a key of its own."""
    from camillo.control import owner_entry, pop_message
    from camillo.credentials import Credential, CredentialKind

    path, vault, _ = new_vault
    target = vault.append([NewRecord(type="message", text="ERASE ME")]).written[0]
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as lap:  # the backup is of this moment: the old key, the old control epoch
        old = lap.session.actor
        vid, control = lap.vault_id, lap.session.roster.control_id
        epoch = lap.session.roster.current_epoch(control)
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path) as v:
        v.erase([target])
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as lap:
        rotated = lap.writer_id
        assert rotated != old.writer_id  # (rotated)
        honest = lap.session.roster.revocations[old.writer_id]
        top = lap.session.log.max_seq(old.writer_id, control)
        prev = lap.session.log.batch_at((old.writer_id, control), top)
    assert isinstance(old, Credential)
    thief, spare = Credential.generate(CredentialKind.DEVICE), Credential.generate(CredentialKind.DEVICE)

    def retirement(seen: dict[bytes, int]) -> bytes:
        for _ in range(1 << 20):
            fake = encode_record(Kind.REVOKE, old.writer_id, signers=[old.signer],
                                 body={0: old.writer_id, 2: {control: seen}, 3: {}, 4: "key rotated"})
            if ids.record_id(fake) < honest.record_id:
                return fake
        raise AssertionError("no id below the honest retirement's")

    def cert(new: Credential, replaces: bytes | None) -> bytes:
        return encode_record(Kind.DEVICE_CERT, old.writer_id, signers=[old.signer], body={
            0: owner_entry(CredentialKind.DEVICE, new.signer.public, new.recipient.public, "spare laptop", ""),
            1: replaces, 2: "key rotation" if replaces else "enrollment",
            3: new.signer.sign(pop_message(vid, new.signer.public, new.recipient.public))})

    fake = retirement({old.writer_id: top + 5})
    _seal_batch(path, vid, control, epoch, BatchHeader(
        vid, control, old.writer_id, top + 1, prev, (prev,), {old.writer_id: top},
        (ids.record_id(fake), ids.record_id(c := cert(thief, None))), int(time.time())), [fake, c], old.signer)
    for who in ("home", "third device"):  # a warm open, then a new device's cold one
        switch_home(monkeypatch, tmp_path / who)
        with open_vault(path) as v:
            assert thief.writer_id not in v.session.roster.principals, who
            assert v.session.roster.active_owner(rotated), who  # (the honest retirement stands)
            assert not any("retired itself more than once" in p.message for p in v.problems()), who
    # The rival rotation, in the shape key rotation writes: the spare key's first batch, certified by the old key.
    rival = retirement({spare.writer_id: 1})
    _seal_batch(path, vid, control, epoch, BatchHeader(
        vid, control, spare.writer_id, 1, None, (), {spare.writer_id: 0, old.writer_id: top},
        (ids.record_id(c := cert(spare, old.writer_id)), ids.record_id(rival)), int(time.time())), [c, rival],
        spare.signer)
    for who in ("home", "fourth device"):
        switch_home(monkeypatch, tmp_path / who)
        with open_vault(path) as v:
            assert not {thief.writer_id, spare.writer_id} & set(v.session.roster.principals), who
            assert any("retired itself more than once" in p.message for p in v.problems()), who
            assert not any(p.kind == "damaged" for p in v.problems()), who  # (the roster settles)
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as lap:
        lap.append([NewRecord(type="message", text="the laptop writes again")])
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path) as v:
        assert "the laptop writes again" in {r.text for r in v.timeline()}


def test_a_revoked_devices_batch_with_a_copy_of_its_own_certificate_is_still_beyond_its_revocation(
        new_vault, tmp_path, monkeypatch):
    """Found by the fourth review (2026-12-07), brought in by the third's fixes the same day (b483162): the batch
    carrying a revoked device's own certificate was never beyond its revocation by its seq, and whether a batch
    carried it was judged by the record's id.  The thief copied the certificate, a public record, into a batch
    written after the revocation, with a note: every device showed the note under the laptop's name.  Now no
    batch is exempt: the revocation's seen and pins alone say what it accepted."""
    path = new_vault[0]
    with laptop_that_wrote(new_vault, tmp_path, monkeypatch) as lap:
        laptop = lap.session.actor
        vid, personal = lap.vault_id, lap.compartment_id("personal")
        seq, prev = lap.session.device_state.counters[personal]
        epoch = lap.session.roster.current_epoch(personal)
        cert = lap.session.materialized.raw_record(lap.session.roster.principals[laptop.writer_id].record_id)
        frontier = dict(lap.session.device_state.extra["frontiers"][personal])
    assert cert is not None
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path) as v:
        v.revoke(laptop.writer_id.hex()[:12], reason="stolen")
    note = encode_record(Kind.NOTE, laptop.writer_id, value={"text": "the thief's note"}, authority=3, type="message")
    _seal_batch(path, vid, personal, epoch, BatchHeader(
        vid, personal, laptop.writer_id, seq + 1, prev, (prev,), {**frontier, laptop.writer_id: seq},
        (ids.record_id(cert), ids.record_id(note)), int(time.time())), [cert, note], laptop.signer)
    for who in ("home", "third device"):  # a warm open, then a new device's cold one
        switch_home(monkeypatch, tmp_path / who)
        with open_vault(path) as v:
            texts = {r.text for r in v.timeline()}
            assert "the thief's note" not in texts and "written on the laptop" in texts, who
            assert any(p.kind == "rejected" and "after it was revoked" in p.message for p in v.problems()), who


def test_a_revoked_devices_second_batch_cannot_undo_the_passphrase_change_it_made(new_vault, tmp_path, monkeypatch):
    """Found by the fourth review (2026-12-07), brought in by the third's fixes the same day (b483162): the laptop
    changes the passphrase; later it is stolen and revoked with the new passphrase.  The thief writes, with its
    key, a second batch at the seq of the passphrase change in every compartment, then one certifying a device of
    its own and switching erasure off.  A rule that a batch at a forked seq contributes nothing took the
    passphrase change with it in the first round of the roster, before the revocation that pins it was known:
    the new passphrase was never certified, the revocation lacked its re-authentication, and the thief's device
    and policy counted on every copy.  Now a fork below a revocation's pin is judged by the chain from the pin
    alone: the second batches are beyond it, the change and the revocation stand."""
    from camillo.control import owner_entry, pop_message
    from camillo.credentials import Credential, CredentialKind

    path, vault, recovery = new_vault
    vault.lock()
    new = "a brand new passphrase 42"
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as lap:
        laptop = lap.session.actor
        lap.change_passphrase(new, reauth=Unlock.passphrase(PASSPHRASE))
        vid, control = lap.vault_id, lap.session.roster.control_id
        seq, prev = lap.session.device_state.counters[control]
        frontier = dict(lap.session.device_state.extra["frontiers"][control])
        epoch = lap.session.roster.current_epoch(control)
        tips = {c: (s, lap.session.batches[b].batch.header, lap.session.roster.current_epoch(c))
                for c, (s, b) in lap.session.device_state.counters.items()}
    switch_home(monkeypatch, tmp_path / "home")
    with Vault.open(path, Unlock.passphrase(new)) as v:
        v.revoke(laptop.writer_id.hex()[:12], reason="stolen", reauth=Unlock.passphrase(new))
    assert isinstance(laptop, Credential)
    thief = Credential.generate(CredentialKind.DEVICE)
    note = encode_record(Kind.NOTE, laptop.writer_id, value={"text": "fork"}, authority=3, type="message")
    for c, (s, h, ep) in tips.items():  # at the passphrase change's seq in every compartment (it is mirrored)
        _seal_batch(path, vid, c, ep, BatchHeader(vid, c, laptop.writer_id, s, h.prev, h.deps, h.frontier,
                                                  (ids.record_id(note),), int(time.time())), [note], laptop.signer)
    cert = encode_record(Kind.DEVICE_CERT, laptop.writer_id, signers=[laptop.signer], body={
        0: owner_entry(CredentialKind.DEVICE, thief.signer.public, thief.recipient.public, "spare laptop", ""),
        1: None, 2: "enrollment", 3: thief.signer.sign(pop_message(vid, thief.signer.public, thief.recipient.public))})
    policy = encode_record(Kind.POLICY, laptop.writer_id, body={0: "disabled", 1: "thief", 2: []}, signers=[laptop.signer])
    _seal_batch(path, vid, control, epoch, BatchHeader(
        vid, control, laptop.writer_id, seq + 1, prev, (prev,), {**frontier, laptop.writer_id: seq},
        (ids.record_id(cert), ids.record_id(policy)), int(time.time())), [cert, policy], laptop.signer)
    for who in ("home", "third device"):
        switch_home(monkeypatch, tmp_path / who)
        with Vault.open(path, Unlock.passphrase(new)) as v:  # (the new passphrase still opens the vault)
            r = v.session.roster
            assert laptop.writer_id in r.revocations and thief.writer_id not in r.principals, who
            assert r.policy.erasure_enabled, who
        with pytest.raises(WrongCredential):
            Vault.open(path, Unlock.passphrase(PASSPHRASE))


def test_the_last_credential_cannot_be_revoked_and_self_revocation_is_refused(new_vault):
    path, vault, _ = new_vault
    with pytest.raises(UsageError, match="cannot revoke itself"):
        vault.revoke(vault.writer_id.hex()[:12])


# ------------------------------------------------------------------------------------------ erasure


def test_erasure_reaches_what_it_says(new_vault, tmp_path, monkeypatch):
    path, vault, _ = new_vault
    marker = "ERASE-ME-7c1d"
    vault.append([NewRecord(type="message", text="keep this")])
    target = vault.append([NewRecord(type="message", text=f"{marker} my diagnosis")]).written[0]
    vault.append([NewRecord(type="fact", key="user/city", value="Lisbon")])
    vault.lock()
    pre = str(tmp_path / "pre-erasure-copy")
    shutil.copytree(path, pre)
    with open_vault(path) as v:
        report = v.erase([target])
        text = "\n".join(report.lines())
        assert "passphrase opens those old copies" in text and "recovery phrase" in text
        assert "sync service" in text
        assert report.generation == 2 and report.epochs_destroyed
        after_device = v.session.actor
        assert {r.text for r in v.timeline()} == {"keep this", "Lisbon"}
        assert v.problems() == []
        vid = v.vault_id
        v.create_grant("later-agent", {"personal": "read"}, str(tmp_path / "later.grant"))
    # A device enrolled after the erasure, and the grant created after it.
    switch_home(monkeypatch, tmp_path / "new-device")
    with open_vault(path) as v:
        new_device = v.session.actor
    from camillo.session.grantfile import read_grant_file

    later_grant = read_grant_file(str(tmp_path / "later.grant"))[0].credential
    # The pre-erasure copy does not give up the erased record to any key that exists now.
    from camillo import slots as slot_mod

    for cred in (after_device, new_device, later_grant):
        for f in glob.glob(os.path.join(pre, "slots", "*.slot")):
            h = slot_mod.read_header(open(f, "rb").read(), os.path.relpath(f, pre))
            with pytest.raises(CryptoFailure):
                slot_mod.unwrap_vms(h, vid, cred.recipient)
        secrets, _ = keys_from_files(pre, vid, [cred.recipient])
        assert not any(marker.encode() in p for p in readable_plaintexts(pre, vid, secrets))
    # Nothing under the vault or any CAMILLO_HOME holds the erased plaintext.
    for root in (path, str(tmp_path / "home"), str(tmp_path / "new-device")):
        for f in all_files(root):
            assert marker.encode() not in open(f, "rb").read(), f
    # The passphrase still opens the old copy (the honest caveat the report states).
    switch_home(monkeypatch, tmp_path / "forensics")
    with Vault.open(pre, Unlock.passphrase(PASSPHRASE), register=False) as old:
        assert any(marker in r.text for r in old.timeline())


def test_erasure_can_be_disabled_by_policy_and_forget_still_hides(new_vault):
    path, vault, _ = new_vault
    rid = vault.append([NewRecord(type="message", text="retained by law")]).written[0]
    vault.set_policy(erasure=False, reason="legal hold")
    with pytest.raises(ErasureDisabled, match="legal hold"):
        vault.erase([rid])
    vault.forget(record=rid)
    assert "retained by law" not in {r.text for r in vault.timeline()}
    assert "retained by law" in {r.text for r in vault.timeline(include_hidden=True)}
    vault.set_policy(erasure=True)
    vault.erase([rid])
    assert "retained by law" not in {r.text for r in vault.timeline(include_hidden=True)}


def test_erasing_twice_says_already_erased(new_vault):
    path, vault, _ = new_vault
    rid = vault.append([NewRecord(type="message", text="gone")]).written[0]
    vault.erase([rid])
    with pytest.raises(UsageError, match="already erased"):
        vault.erase([rid])


def test_recovery_phrase_reissue(new_vault):
    path, vault, phrase = new_vault
    new_phrase = vault.reissue_recovery_phrase().phrase
    assert new_phrase != phrase and len(new_phrase.split()) == 24
    vault.lock()
    with pytest.raises(WrongCredential):
        Vault.open(path, Unlock.recovery(phrase))
    with Vault.open(path, Unlock.recovery(new_phrase)) as v:
        assert v.problems() == []


# ------------------------------------------------------------------------------------------ compaction


def test_compaction_reduces_files_and_keeps_everything(new_vault):
    path, vault, _ = new_vault
    for i in range(60):
        vault.append([NewRecord(type="message", text=f"m{i}")], compartment=("personal", "work")[i % 2])
    vault.lock()
    before = len(glob.glob(os.path.join(path, "segments", "*", "*.seg")))
    with open_vault(path, cache=False) as v:
        cold_before = v.session.reader.decryptions
        report = v.compact()  # one device: old segments kept for the grace period
        assert report.pending > 0 and report.segments_deleted == 0
        report = v.compact(prune_now=True)
        assert report.segments_deleted > 0
    after = len(glob.glob(os.path.join(path, "segments", "*", "*.seg")))
    assert after < before / 5
    with open_vault(path, cache=False) as v:
        assert v.session.reader.decryptions == after < cold_before
        assert len(v.timeline()) == 60
        assert sum(1 for view in v.session.batches.values() if view.vouched) >= 60
        assert v.problems() == [] and v.problems(full=True) == []



def _many_small_segments(new_vault, monkeypatch, count: int = 40) -> str:
    """A vault of ``count`` messages in its own small segment each, and compaction settings that
    make several new segments of them, each written as soon as it is sealed."""
    from camillo.ops import compaction, erasure

    path, vault, _ = new_vault
    for i in range(count):
        vault.append([NewRecord(type="message", text=f"m{i} " + "words " * 80)])
    vault.lock()
    monkeypatch.setattr(erasure, "COMPACT_PAYLOAD", 8192)
    monkeypatch.setattr(compaction, "WRITE_BYTES", 1)
    return path


def test_compaction_seals_as_it_reads_in_the_order_of_writer_and_seq(new_vault, monkeypatch):
    """A compaction reads each small segment when its order (writer id, then seq: spec §16.5) reaches
    the segment's batches, and writes each new segment once it is sealed: what it holds at once is
    about one new segment's batches, not the compartment's (at a million records it held every batch
    and every new segment, 1.1 GiB).  Every batch lands in one new segment, in that order across them,
    and each COMPACTION names the old segments its batches came from."""
    path = _many_small_segments(new_vault, monkeypatch)
    events: list[tuple[str, object]] = []
    with open_vault(path) as v:
        reader, session = v.session.reader, v.session
        personal = v.compartment_id("personal")
        small = {n: list(reader.segment_batches[n]) for n, (c, _e) in reader.segment_epochs.items() if c == personal}
        read, write = reader.batches_of_segment, session.write_files
        monkeypatch.setattr(reader, "batches_of_segment", lambda name: (events.append(("read", name)), read(name))[1])
        monkeypatch.setattr(session, "write_files", lambda files: (events.append(("write", [n for n, _ in files])),
                                                                   write(files))[1])
        report = v.compact(prune_now=True)
        new = [n for kind, names in events if kind == "write" for n in names]
        assert report.segments_written == len(new) >= 4
        reads = [i for i, (kind, _) in enumerate(events) if kind == "read"]
        writes = [i for i, (kind, _) in enumerate(events) if kind == "write"]
        assert len(reads) == len(small) and writes[0] < reads[-1], "every segment was read before one was written"
        order = [bid for n in new for bid in reader.segment_batches[n]]
        assert sorted(order) == sorted(b for bids in small.values() for b in bids)  # each batch once
        keys = [(session.batches[b].header.writer_id, session.batches[b].header.seq) for b in order]
        assert keys == sorted(keys)
        held_by = {b: n for n, bids in small.items() for b in bids}
        compactions = [m for m in session.roster.manifests.values() if m.kind == Kind.COMPACTION]
        assert len(compactions) == len(new)
        for m in compactions:
            (added,) = m.added
            (name,) = [n for n in new if segment_id(n) == added]
            assert sorted(m.removed) == sorted({segment_id(held_by[b]) for b in reader.segment_batches[name]})
        assert len(v.timeline()) == 40 and v.problems() == []



def test_a_refresh_meeting_a_copy_of_every_batch_keeps_no_view_of_them(new_vault, monkeypatch):
    """The refresh after a compaction (this device's, or another's read by every other device) meets
    a second copy of every batch it compacted: it compares each with the stored one and lets the view
    go (it kept one for each, 100,000 at a million records, for the rest of the session)."""
    path = _many_small_segments(new_vault, monkeypatch)
    with open_vault(path) as v:
        batches = v.session.batches
        before = set(batches.held)
        report = v.compact()  # (one device, within the grace period: both copies stay)
        assert report.batches >= 40 and report.pending > 0
        kept = {b for b in set(batches.held) - before if not batches.held[b].has_control}
        assert len(kept) < 5, f"{len(kept)} views of plain batches kept after the compaction's refresh"
        assert len(v.timeline()) == 40 and v.problems() == []


@pytest.mark.parametrize("failing", ["write", "read"])
def test_a_compaction_that_fails_midway_leaves_the_vault_as_it_was(new_vault, monkeypatch, failing):
    """A new segment that cannot be written (the disk is full), or a small segment that cannot be read,
    after some new segments were written: those are deleted again (nothing announces them), the error
    names what failed, and the vault is as it was."""
    from camillo.errors import StorageError

    path = _many_small_segments(new_vault, monkeypatch)
    before = all_files(path)
    with open_vault(path) as v:
        reader, session = v.session.reader, v.session
        calls = {"read": 0, "write": 0}
        read, write = reader.batches_of_segment, session.write_files

        def counted(kind, real):
            def call(arg):
                calls[kind] += 1
                if kind == failing and calls[kind] == (3 if kind == "write" else 30):
                    raise StorageError(f"cannot {kind} the segment: no space left on the device")
                return real(arg)
            return call

        monkeypatch.setattr(reader, "batches_of_segment", counted("read", read))
        monkeypatch.setattr(session, "write_files", counted("write", write))
        with pytest.raises(StorageError, match="no space left"):
            v.compact(prune_now=True)
        assert calls["write"] >= 2, "no new segment was written before the failure"
        assert all_files(path) == before
    with open_vault(path, cache=False) as v:
        assert len(v.timeline()) == 40 and v.problems() == []


def _laptop_then_ten_messages_at_home(new_vault, tmp_path, monkeypatch) -> str:
    """Two devices: the laptop writes one message, then the home device (left current) ten."""
    path, vault, _ = new_vault
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as v:
        v.append([NewRecord(type="message", text="laptop")])
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path) as v:
        for i in range(10):
            v.append([NewRecord(type="message", text=f"m{i}")])
    return path


def test_compaction_waits_for_other_devices(new_vault, tmp_path, monkeypatch):
    path = _laptop_then_ten_messages_at_home(new_vault, tmp_path, monkeypatch)
    with open_vault(path) as v:
        personal = v.compartment_id("personal")
        compacted = {n for n, (c, _e) in v.session.reader.segment_epochs.items() if c == personal}
        report = v.compact(prune_now=True)
        assert report.segments_deleted == 0 and report.pending > 0  # the laptop has not seen it yet
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as v:  # an ordinary append in the compacted compartment acknowledges it
        v.append([NewRecord(type="message", text="laptop saw the compaction")], compartment="personal")
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path) as v:
        report = v.compact()
        assert report.segments_deleted > 0
        assert not compacted & set(v.session.reader.segment_epochs), "the personal segments compacted first are still there"
        texts = {r.text for r in v.timeline()}
        assert {f"m{i}" for i in range(10)} | {"laptop", "laptop saw the compaction"} <= texts
        assert v.problems() == []


def test_the_prune_finds_a_compactions_carriers_without_reading_every_batch(new_vault, tmp_path, monkeypatch):
    """Whether the other devices acknowledged a compaction is read from the batches carrying its
    records, found among those holding a control record, and from the top of each device's chain: a
    warm open's prune makes no view of any other plain batch (a pass over every batch's records held a
    million records decoded for the rest of the session)."""
    from camillo.ops import compaction

    path = _laptop_then_ten_messages_at_home(new_vault, tmp_path, monkeypatch)
    with open_vault(path) as v:
        assert v.compact(prune_now=True).pending > 0  # (the laptop has not seen it)
    with open_vault(path) as v:
        batches = v.session.batches
        total = len(batches)
        held = set(batches.held)
        deleted, pending = compaction.prune(v.session, prune_now=True)
        assert deleted == 0 and pending > 0  # (still not acknowledged)
        made = {b for b in set(batches.held) - held if not batches.held[b].has_control}
        log = v.session.log
        tops = {chain[log.tops[key]] for key, chain in log.chains.items() if key in log.tops}
        assert not batches.every and made <= tops, "a plain batch was read that is no chain's top"
        assert len(batches.held) < total


def test_compacting_again_before_the_prune_copies_nothing_twice(new_vault, tmp_path, monkeypatch):
    """A second compaction (by either device) while the first one's old segments wait for their
    prune leaves them alone: every batch stays in exactly one live segment plus its old copy."""
    path = _laptop_then_ten_messages_at_home(new_vault, tmp_path, monkeypatch)
    with open_vault(path) as v:
        first = v.compact(prune_now=True)
        assert first.segments_written > 0 and first.pending > 0
        again = v.compact(prune_now=True)
        assert again.segments_written == 0 and again.batches == 0, again
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as v:
        other = v.compact(prune_now=True)  # the laptop has seen the first compaction
        assert other.segments_written == 0, other
        copies: dict[bytes, int] = {}
        for name, bids in v.session.reader.segment_batches.items():
            for b in bids:
                copies[b] = copies.get(b, 0) + 1
        assert max(copies.values()) <= 2  # the old segment and the compacted one, never a third


def test_scheduled_epoch_after_many_batches(new_vault, monkeypatch):
    path, vault, _ = new_vault
    monkeypatch.setattr("camillo.ops.rekey.SCHEDULED_EPOCH_BATCHES", 5)
    cid = vault.compartment_id("personal")
    first = vault.session.roster.current_epoch(cid).epoch_id
    for i in range(6):
        vault.append([NewRecord(type="message", text=f"m{i}")])
    assert vault.session.roster.current_epoch(cid).epoch_id != first
    assert vault.session.roster.current_epoch(cid).reason == "scheduled"
    assert len(vault.timeline()) == 6 and vault.problems() == []
    assert SCHEDULED_EPOCH_BATCHES == 1000


def test_other_devices_rotate_their_keys_after_an_erasure(new_vault, tmp_path, monkeypatch):
    path, vault, _ = new_vault
    marker = "ERASED-ON-ANOTHER-DEVICE"
    target = vault.append([NewRecord(type="message", text=marker)]).written[0]
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as lap:
        old_laptop = lap.session.actor
    pre = str(tmp_path / "pre")
    shutil.copytree(path, pre)
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path) as v:
        report = v.erase([target])
        assert any("rotates its key" in line for line in report.lines())
        vid = v.vault_id
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path) as lap:
        assert lap.writer_id != old_laptop.writer_id, "the laptop replaced its key on its next open"
        assert lap.problems() == []
        new_laptop = lap.session.actor
        assert next(d for d in lap.devices() if d.writer_id == old_laptop.writer_id).revoked
    # the old key is gone from this installation; the new one opens nothing in the old copy
    assert not any(old_laptop.signer.seed in open(f, "rb").read() for f in all_files(tmp_path / "laptop"))
    secrets, _ = keys_from_files(pre, vid, [new_laptop.recipient])
    assert not any(marker.encode() in p for p in readable_plaintexts(pre, vid, secrets))
    with Vault.open(path, Unlock.with_device_credential(new_laptop), register=False) as v:
        assert marker not in {r.text for r in v.timeline()}


def test_the_erasing_device_does_not_rotate_again_on_its_next_open(new_vault):
    path, vault, _ = new_vault
    rid = vault.append([NewRecord(type="message", text="gone")]).written[0]
    vault.erase([rid])
    after = vault.writer_id
    vault.lock()
    with open_vault(path) as v:
        assert v.writer_id == after
    with open_vault(path) as v:
        assert v.writer_id == after and v.problems() == []


def test_a_session_open_during_another_devices_erasure_never_brings_its_keys_back(new_vault, tmp_path, monkeypatch):
    """A laptop whose session was open while the desktop erased a record still holds the erased
    epoch's secret in memory; when that stale session later rolls the keyring (it revokes a grant),
    it must not wrap the destroyed secret into the new envelopes."""
    path, vault, _ = new_vault
    marker = "ERASED-WHILE-THE-LAPTOP-WAS-OPEN"
    target = vault.append([NewRecord(type="message", text=marker)]).written[0]
    vault.create_grant("reader", {"work": "read"}, str(tmp_path / "reader.grant"))
    cid = vault.compartment_id("personal")
    erased_epoch = vault.session.roster.current_epoch(cid).epoch_id
    vault.lock()
    switch_home(monkeypatch, tmp_path / "laptop")
    lap = open_vault(path)  # stays open across the erasure
    assert (cid, erased_epoch) in lap.session.keyring.epoch_secrets
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path) as v:
        v.erase([target])
        v.append([NewRecord(type="message", text="written after the erasure")])
    switch_home(monkeypatch, tmp_path / "laptop")
    lap.refresh()
    assert (cid, erased_epoch) not in lap.session.keyring.epoch_secrets, "the stale session still holds the erased epoch's key"
    # the session moved to the new master secret and reads what was written under the new keys
    texts = {r.text for r in lap.timeline()}
    assert "written after the erasure" in texts and marker not in texts
    assert lap.problems() == []
    lap.revoke("reader")  # rolls the keyring from the session
    lap.lock()
    switch_home(monkeypatch, tmp_path / "third")
    with open_vault(path) as fresh:
        assert (cid, erased_epoch) not in fresh.session.keyring.epoch_secrets
        assert marker not in {r.text for r in fresh.timeline()}
        assert fresh.problems() == []


def test_a_planted_newer_slot_does_not_move_an_open_session(new_vault, tmp_path, monkeypatch):
    """A host plants a slot of a newer generation for this device (its public key is no secret),
    wrapping a master secret of its own: the open session does not adopt it and keeps working."""
    from camillo import ids as ids_mod
    from camillo import slots as slot_mod
    from camillo.primitives import SigningKey, random_bytes

    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="before the plant")])
    actor, generation = vault.session.actor, vault.session.keyring.generation
    evil = SigningKey.from_seed(random_bytes(32))
    sid = ids_mod.new_random_id()
    planted = slot_mod.build_slot(
        vault_id=vault.vault_id, slot_id=sid, slot_type=slot_mod.SlotType.DEVICE, generation=generation + 1,
        vms=random_bytes(32), recipient_public=actor.recipient.public, recipient_id=actor.recipient_id, kdf=None,
        label="planted", signer=evil, signer_id=ids_mod.writer_id(1, evil.public))
    with open(os.path.join(path, slot_mod.file_name(sid)), "wb") as fh:
        fh.write(planted)
    vault.refresh()
    assert vault.session.keyring.generation == generation
    vault.append([NewRecord(type="message", text="after the plant")])
    assert {"before the plant", "after the plant"} <= {r.text for r in vault.timeline()}


def test_the_compaction_report_says_what_it_did_and_why_old_segments_wait():
    from camillo import CompactionReport

    alone = CompactionReport(5, 1, 0, 1, 5, alone=True).lines()
    assert alone[0] == "Compacted 1 batch from 5 small segments into 1 large segment; deleted 0 old segments."
    assert "7-day grace period" in alone[1] and "--prune-now" in alone[1]
    shared = CompactionReport(40, 2, 3, 38, 37).lines()
    assert shared[0].startswith("Compacted 38 batches from 40 small segments into 2 large segments; deleted 3")
    assert "other devices" in shared[1] and "grace" not in shared[1]
    assert CompactionReport(0, 0, 0, 0, 0).lines() == [
        "Compacted 0 batches from 0 small segments into 0 large segments; deleted 0 old segments."]


def test_an_agents_open_reads_no_segment_it_cannot_read_again(granted, tmp_path, monkeypatch):
    """An agent's grant opens its compartments alone: the other compartments' segments stay unreadable to it.
    Every open of its session read each of them twice: once as a segment not read yet, and again because the
    open had just read its keys, all of them new to it (at 1M records, 33,662 files twice: 1.4 s of each warm
    open).  A segment set aside as unreadable is read again only when the key of its epoch is among those, and
    the local state keeps it with its epoch, so a warm open reads none of them (0.86 s with one read each)."""
    from camillo.session import segread
    from camillo.storage import FolderShelf

    path, vid, files = granted
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as owner:
        for i in range(4):
            owner.append([NewRecord(type="message", text=f"personal {i}")])
    switch_home(monkeypatch, tmp_path / "agent")
    # (no directory listed within its mtime's clock tick, which the next open lists again whole: the owner
    # wrote a moment ago, as a test does, not minutes before, as a person does)
    monkeypatch.setattr(FolderShelf, "RACY_NS", 0)
    monkeypatch.setattr(FolderShelf, "FINE_RACY_NS", 0)
    real = segread.decrypt_segment
    unreadable: list[dict] = []
    for _ in range(2):  # the first open, and a warm one
        read: list[str] = []
        monkeypatch.setattr(segread, "decrypt_segment", lambda reader, name, read=read: read.append(name) or real(reader, name))
        with Vault.open(path, Unlock.grant(files["read"])) as v:
            assert [r.text for r in v.timeline()] == ["work note"]
            unreadable.append(dict(v.session.reader.unreadable))
            assert v.session.reader.unreadable.keys() <= v.session.reader.segment_batches.keys()  # (held as read ones)
        assert len(read) == len(set(read)), sorted(n for n in set(read) if read.count(n) > 1)
    assert len(unreadable[0]) >= 5 and unreadable[1] == unreadable[0]  # (kept, with their epochs)
    assert not set(read) & unreadable[0].keys(), "the warm open read a segment it cannot read again"


def _garden_not_yet_readable_on_the_desktop(tmp_path, monkeypatch):
    """The laptop adds a compartment and writes in it; the sync brings the desktop its segments and slots, not
    its envelopes.  The two folders, the sync and the two homes."""
    from .test_key_changes import FolderSync, _laptop_and_desktop

    sync, open_ = _laptop_and_desktop(tmp_path, FolderSync)
    a, b, homes = sync.a, sync.b, open_.homes
    with open_("laptop") as v:
        v.add_compartment("garden")
        for text in ("tomatoes by the wall", "beans by the gate"):
            v.append([NewRecord(type="message", text=text)], compartment="garden")
    for rel in sorted(FolderSync.files(a) - FolderSync.files(b)):
        if not rel.startswith("env"):  # (the segments and slots first, not the envelopes)
            os.makedirs(os.path.dirname(os.path.join(b, rel)), exist_ok=True)
            shutil.copy2(os.path.join(a, rel), os.path.join(b, rel))
    sync.last = FolderSync.files(a) & FolderSync.files(b)  # (carried: synced, so a deletion on one side goes)
    return a, b, sync, homes


@pytest.mark.parametrize("listing", ["kept", "racy"])
def test_a_segment_kept_as_unreadable_is_read_once_its_epochs_key_arrives(tmp_path, monkeypatch, listing):
    """The other side of the test above: a device that has a segment but not yet its epoch's key (the sync
    brought the segment first) keeps it as unreadable; once the envelope that delivers the key arrives, its
    next open reads it, though it is not new in the folder.  One that goes away meanwhile is forgotten, also
    when its directory's listing was not kept (``racy``: listed within its mtime's clock tick, a coarse-clock
    folder; found by review: it stayed "waiting for its key" at every open)."""
    from camillo.storage import FolderShelf

    racy = 0 if listing == "kept" else 3_600_000_000_000
    monkeypatch.setattr(FolderShelf, "RACY_NS", racy)
    monkeypatch.setattr(FolderShelf, "FINE_RACY_NS", racy)
    a, b, sync, homes = _garden_not_yet_readable_on_the_desktop(tmp_path, monkeypatch)
    for _ in range(2):
        with Vault.open(b, Unlock.passphrase(PASSPHRASE), home=homes["desktop"]) as v:
            assert not {"tomatoes by the wall", "beans by the gate"} & {r.text for r in v.timeline()}
            kept = dict(v.session.reader.unreadable)
            assert len(kept) >= 2 and {ref[0] for ref in kept.values()} == {v.compartment_id("garden")}
    gone, *stay = sorted(kept)
    moved = os.path.join(tmp_path, "moved.seg")
    shutil.move(os.path.join(b, *gone.split("/")), moved)
    for _ in range(2):
        with Vault.open(b, Unlock.passphrase(PASSPHRASE), home=homes["desktop"]) as v:  # (gone: forgotten)
            assert set(v.session.reader.unreadable) == set(stay)
            assert not [p for p in v.problems() if p.file == gone]
    shutil.move(moved, os.path.join(b, *gone.split("/")))
    sync.sync()  # (the envelopes now)
    with Vault.open(b, Unlock.passphrase(PASSPHRASE), home=homes["desktop"]) as v:
        assert {"tomatoes by the wall", "beans by the gate"} <= {r.text for r in v.timeline()}
        assert not v.session.reader.unreadable


def test_a_segment_kept_as_unreadable_that_another_devices_key_change_deletes_is_forgotten(tmp_path, monkeypatch):
    """Found by review: the desktop, open on its local state with a garden segment kept as unreadable, refreshes
    after a sync that brings the laptop's erasure (a roll: every key read again, every file considered) and its
    deletion of that segment.  The segment stayed among the unreadable ones for good, and the erasure's manifest
    had every open after "delete" it again."""
    from camillo.ops.erasure import finish_pending_erasures
    from camillo.storage import FolderShelf

    monkeypatch.setattr(FolderShelf, "RACY_NS", 0)
    monkeypatch.setattr(FolderShelf, "FINE_RACY_NS", 0)
    a, b, sync, homes = _garden_not_yet_readable_on_the_desktop(tmp_path, monkeypatch)
    Vault.open(b, Unlock.passphrase(PASSPHRASE), home=homes["desktop"]).lock()
    desk = Vault.open(b, Unlock.passphrase(PASSPHRASE), home=homes["desktop"])  # (its unreadable ones from the state)
    assert desk.session.reader.unreadable
    with Vault.open(a, Unlock.passphrase(PASSPHRASE), home=homes["laptop"]) as v:
        target = next(r.id for r in v.timeline() if r.text == "tomatoes by the wall")
        v.erase([target])
    sync.sync()
    with desk:
        desk.refresh()
        assert all(os.path.exists(os.path.join(b, *n.split("/"))) for n in desk.session.reader.unreadable)
        assert [r.text for r in desk.timeline() if r.text.endswith("gate")] == ["beans by the gate"]
    for _ in range(2):
        with Vault.open(b, Unlock.passphrase(PASSPHRASE), home=homes["desktop"]) as v:
            assert not v.session.reader.unreadable and not [p for p in v.problems() if p.kind == "unreadable"]
            assert finish_pending_erasures(v.session) == 0
            assert "tomatoes by the wall" not in {r.text for r in v.timeline()}


def test_the_unreadable_segments_kept_beside_a_list_an_older_version_rewrote_are_read_again(tmp_path, monkeypatch):
    """Found by review: the epochs were kept by position in the list of segments not read, which an older
    version rewrites without them.  A later open gave the segments of another compartment, added meanwhile,
    the epochs of the first, and never read them once their keys arrived.  The positions are kept beside the
    list's digest: beside another list, they are not used, and every segment of that list is read again."""
    from camillo.session import listing
    from camillo.storage import FolderShelf

    from .test_key_changes import FolderSync

    monkeypatch.setattr(FolderShelf, "RACY_NS", 0)
    monkeypatch.setattr(FolderShelf, "FINE_RACY_NS", 0)
    a, b, sync, homes = _garden_not_yet_readable_on_the_desktop(tmp_path, monkeypatch)
    with Vault.open(b, Unlock.passphrase(PASSPHRASE), home=homes["desktop"]) as v:  # (kept with their epochs)
        kept_before = dict(v.session.reader.unreadable)
    envelopes = {n for n in FolderSync.files(a) if n.startswith("env")}
    with Vault.open(a, Unlock.passphrase(PASSPHRASE), home=homes["laptop"]) as v:
        v.add_compartment("orchard")
        for text in ("apples by the shed", "pears by the pond"):
            v.append([NewRecord(type="message", text=text)], compartment="orchard")
    orchard_envelopes = {n for n in FolderSync.files(a) if n.startswith("env")} - envelopes
    for rel in sorted(FolderSync.files(a) - FolderSync.files(b)):
        if not rel.startswith("env"):
            os.makedirs(os.path.dirname(os.path.join(b, rel)), exist_ok=True)
            shutil.copy2(os.path.join(a, rel), os.path.join(b, rel))
    syncing = os.path.join(b, "segments", "00", "00" * 32 + ".seg")  # (a file still syncing, first in the list)
    os.makedirs(os.path.dirname(syncing), exist_ok=True)
    with open(syncing, "wb") as fh:
        fh.write(b"half a segment")
    real = listing.store

    def older(shelf, db, every, unread, unreadable):  # (an older version: the list alone, the positions left)
        real(shelf, db, every, unread, {})
        db.execute("DELETE FROM cache_meta WHERE key = 'unread_epochs'")
        db.execute("INSERT INTO cache_meta(key, value) SELECT 'unread_epochs', value FROM temp.kept")
        assert db.execute("SELECT count(*) FROM cache_meta WHERE key = 'unread_epochs'").fetchone()[0] == 1
        stored.append(sorted(unread))

    stored: list[list[str]] = []
    with Vault.open(b, Unlock.passphrase(PASSPHRASE), home=homes["desktop"]) as v:
        db = v.session.materialized.db
        db.execute("CREATE TEMP TABLE kept AS SELECT value FROM cache_meta WHERE key = 'unread_epochs'")
        monkeypatch.setattr(listing, "store", older)
        v.refresh()
        v.session.reader.dirty = True
    monkeypatch.setattr(listing, "store", real)
    assert stored and len(stored[-1]) > len(kept_before), "the older version's list is not the one the epochs were kept beside"
    for rel in sorted(orchard_envelopes):  # (the orchard's keys arrive, not the garden's)
        shutil.copy2(os.path.join(a, rel), os.path.join(b, rel))
    with Vault.open(b, Unlock.passphrase(PASSPHRASE), home=homes["desktop"]) as v:
        texts = {r.text for r in v.timeline()}
        assert {"apples by the shed", "pears by the pond"} <= texts
        assert not {"tomatoes by the wall", "beans by the gate"} & texts
        garden = v.compartment_id("garden")
        assert v.session.reader.unreadable and {c for c, _ in v.session.reader.unreadable.values()} == {garden}
        for name, ref in v.session.reader.unreadable.items():
            with open(os.path.join(b, *name.split("/")), "rb") as fh:
                header = segments.read_header(fh.read(), name)
            assert ref == (header.compartment_id, header.epoch_id), name


def test_the_epochs_of_unreadable_segments_are_used_only_beside_the_list_they_were_kept_with():
    """What the local state kept of the unreadable segments' epochs is used only in the form this version
    writes and beside the very list of segments not read it was written with; anything else (another
    version's form, a list rewritten, a position twice or outside the list) reads every one again, which is
    always right, instead of discarding the whole local state (a state of the withdrawn first attempt, with
    positions alone, was rebuilt from the vault at its next open: 98 s for an agent at 1M records)."""
    from camillo import encoding
    from camillo.primitives import sha256
    from camillo.session import listing

    names = [f"segments/{i:02x}/{i:02x}{'0' * 62}.seg" for i in range(4)]
    listed = encoding.encode(names)
    garden, orchard = (b"g" * 16, b"1" * 16), (b"o" * 16, b"2" * 16)

    def meta(groups, digest=None):
        return {"unread": listed, "unread_epochs": encoding.encode([digest or sha256(listed)[:16], groups])}

    kept = meta([[*garden, [0, 2]], [*orchard, [3]]])
    assert listing.unreadable_of(kept, names) == {names[0]: garden, names[2]: garden, names[3]: orchard}
    for other in (meta([[*garden, [0, 2]]], digest=b"\0" * 16),  # beside another list
                  {"unread": listed, "unread_epochs": encoding.encode([[*garden, [0, 2]]])},  # the first attempt's
                  meta([[*garden, [0, 2]], [*orchard, [2]]]),  # a segment twice
                  meta([[*garden, [0, 4]]]), meta([[*garden, [-1]]]), meta([[*garden, [True]]]),
                  meta([[garden[0], 5, [0]]]), {"unread": listed},
                  {"unread": listed, "unread_epochs": b"\xff"}, {"unread": listed, "unread_epochs": b"\xf9\x3c\x00"}):
        assert listing.unreadable_of(other, names) == {}


def _reader_view(v) -> dict:
    r = v.session.reader
    return {"texts": sorted(x.text for x in v.timeline()), "unreadable": dict(r.unreadable),
            "known": set(r.segment_batches.keys()),
            "problems": sorted((p.kind, p.file) for p in v.problems() if p.kind == "unreadable")}


@pytest.mark.parametrize("which", ["unreadable", "readable"])
def test_segments_a_folder_pack_holds_are_not_taken_for_gone_by_a_warm_open(granted, tmp_path, monkeypatch, which):
    """Found by review: segments of a vault folder held in a pack (spec §13), their loose directory absent.  A
    warm open compared that directory, missing from the folder, with the segments the state holds (or keeps as
    unreadable) and forgot them all: the agent's kept unreadable ones came and went from one open to the next
    (11, 0, 11), and its readable ones (with the control records) left it no key (on the code before too)."""
    import io
    from hashlib import sha256

    from camillo.packs import write_pack
    from camillo.storage import FolderShelf

    monkeypatch.setattr(FolderShelf, "RACY_NS", 0)
    monkeypatch.setattr(FolderShelf, "FINE_RACY_NS", 0)
    path, vid, files = granted
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as owner:
        for i in range(4):
            owner.append([NewRecord(type="message", text=f"personal {i}")])
    switch_home(monkeypatch, tmp_path / "agent")
    with Vault.open(path, Unlock.grant(files["read"])) as v:
        first = _reader_view(v)
        readable = first["known"] - first["unreadable"].keys()
    moved = sorted(first["unreadable"] if which == "unreadable" else readable)
    entries = []
    for name in moved:
        with open(os.path.join(path, *name.split("/")), "rb") as fh:
            entries.append((name, fh.read()))
    out = io.BytesIO()
    write_pack(entries, out, complete_vault=False)
    os.makedirs(os.path.join(path, "packs"), exist_ok=True)
    with open(os.path.join(path, "packs", sha256(out.getvalue()).hexdigest() + ".pack"), "wb") as fh:
        fh.write(out.getvalue())
    for name in moved:  # (each directory they leave empty goes)
        os.unlink(os.path.join(path, *name.split("/")))
        with contextlib.suppress(OSError):
            os.rmdir(os.path.dirname(os.path.join(path, *name.split("/"))))
    with Vault.open(path, Unlock.grant(files["read"]), cache=False) as v:
        cold = _reader_view(v)
    assert cold["unreadable"] == first["unreadable"] and cold["texts"] == first["texts"]
    for _ in range(3):
        with Vault.open(path, Unlock.grant(files["read"])) as v:
            assert _reader_view(v) == cold


def test_a_segment_kept_as_unreadable_deleted_behind_an_unmoved_directory_is_forgotten_once_its_key_is_here(
        tmp_path, monkeypatch):
    """Found by review: a host deletes a segment kept as unreadable and puts its directory's modification time
    back (or a file system does not move it).  A warm open takes the directory on trust, as it does for the
    segments it read; but once the key of its epoch arrived the segment stayed "waiting for its key" for good
    (the read of it found no file, and nothing forgot it).  It is forgotten then: what a cold open shows."""
    from camillo.storage import FolderShelf

    from .test_key_changes import FolderSync

    monkeypatch.setattr(FolderShelf, "RACY_NS", 0)
    monkeypatch.setattr(FolderShelf, "FINE_RACY_NS", 0)
    a, b, sync, homes = _garden_not_yet_readable_on_the_desktop(tmp_path, monkeypatch)
    with Vault.open(b, Unlock.passphrase(PASSPHRASE), home=homes["desktop"]) as v:
        kept = dict(v.session.reader.unreadable)
    gone = os.path.join(b, *sorted(kept)[0].split("/"))
    before = os.stat(os.path.dirname(gone))
    os.unlink(gone)
    os.utime(os.path.dirname(gone), ns=(before.st_atime_ns, before.st_mtime_ns))
    for rel in sorted(FolderSync.files(a) - FolderSync.files(b)):  # (the envelopes arrive)
        if rel.startswith("env"):
            shutil.copy2(os.path.join(a, rel), os.path.join(b, rel))
    with Vault.open(b, Unlock.passphrase(PASSPHRASE), home=homes["desktop"], cache=False) as v:
        cold = _reader_view(v)
    for _ in range(2):
        with Vault.open(b, Unlock.passphrase(PASSPHRASE), home=homes["desktop"]) as v:
            assert _reader_view(v) == cold
