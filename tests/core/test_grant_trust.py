"""Agent grants survive the owner's own key changes, and a revoked grant never comes back (issue 17,
item 7; spec §16.2).

An append grant reads nothing, so it cannot compute the roster: it trusts the owner credentials its
grant file names and follows the chain of owner certificates delivered to it.  These tests use real
keys and files: after an erasure (the erasing device's key rotates), a device replacement (a lost
keychain), a passphrase change and a device that joined after the grant, the agent keeps writing,
and into the current epoch; a lost device's key cannot make it seal to a key of the thief's."""

from __future__ import annotations

import glob
import os

import pytest
from camillo import AccessDenied, NewRecord, Revoked, Unlock, Vault, WrongCredential, envelopes, ids, keys
from camillo.credentials import Credential, CredentialKind
from camillo.ops.rekey import proof_of_possession
from camillo.records import Kind, encode_record
from camillo.session.grantfile import read_grant_file

from .helpers import switch_home

PASSPHRASE = "correct horse battery staple"
NEW_PASSPHRASE = "the new passphrase of the owner"


def open_vault(path, passphrase=PASSPHRASE, **kw):
    return Vault.open(path, Unlock.passphrase(passphrase), **kw)


@pytest.fixture
def appender(new_vault, tmp_path):
    path, vault, _ = new_vault
    grant = str(tmp_path / "appender.grant")
    reader = str(tmp_path / "reader.grant")
    vault.create_grant("appender", {"work": "append"}, grant)
    vault.create_grant("reader", {"work": "read"}, reader)
    vault.lock()
    return path, grant, reader


def agent_appends(path, grant, text, tmp_path, monkeypatch):
    switch_home(monkeypatch, tmp_path / "agent-home")
    with Vault.open(path, Unlock.grant(grant)) as agent:
        agent.append([NewRecord(type="message", text=text)], compartment="work")
    switch_home(monkeypatch, tmp_path / "home")


def sealed_under_current_epoch(path, text, passphrase=PASSPHRASE):
    """The owner reads the agent's record, and it was sealed to the compartment's current epoch (the
    agent trusted the envelope of the newest epoch, whoever wrote it).  Looks at the session's batches
    and roster: which epoch sealed a batch has no public observation."""
    with open_vault(path, passphrase) as v:
        rec = next(r for r in v.timeline() if r.text == text)
        epoch = v.session.batches[rec.batch_id].epoch_id
        current = v.session.roster.current_epoch(v.compartment_id("work"))
        return rec.writer == "agent appender" and epoch == current.epoch_id and v.problems() == []


def test_the_grant_file_trusts_every_owner_credential(appender):
    path, grant, _ = appender
    g, _ = read_grant_file(grant)
    with open_vault(path) as v:
        kinds = {v.session.roster.principals[w].kind for w, _ in g.trusted}
    assert kinds == {CredentialKind.DEVICE, CredentialKind.PASSPHRASE, CredentialKind.RECOVERY}


def test_an_append_grant_keeps_writing_across_the_owners_key_changes(appender, tmp_path, monkeypatch):
    path, grant, reader = appender
    agent_appends(path, grant, "before any change", tmp_path, monkeypatch)

    # 1. an erasure: the erasing device's key rotates, every older envelope is deleted
    with open_vault(path) as v:
        rid = v.append([NewRecord(type="message", text="to erase")], compartment="work").written[0]
        v.erase([rid])
    agent_appends(path, grant, "after an erasure", tmp_path, monkeypatch)
    assert sealed_under_current_epoch(path, "after an erasure")

    # 2. a passphrase change: the keys roll (a random master secret, new epochs everywhere)
    with open_vault(path) as v:
        v.change_passphrase(NEW_PASSPHRASE)
    agent_appends(path, grant, "after a passphrase change", tmp_path, monkeypatch)
    assert sealed_under_current_epoch(path, "after a passphrase change", NEW_PASSPHRASE)

    # 3. a device that joined after the grant starts the next epoch of work (it revokes the reader)
    switch_home(monkeypatch, tmp_path / "second-device")
    with open_vault(path, NEW_PASSPHRASE, device_name="second device") as v:
        v.revoke("reader")
    agent_appends(path, grant, "after a new device's epoch", tmp_path, monkeypatch)
    assert sealed_under_current_epoch(path, "after a new device's epoch", NEW_PASSPHRASE)

    # 4. a device replacement: the first installation lost its key (its sealed local copy is gone),
    #    so its next open certifies a new key that replaces the old one, and that key rolls the keys
    with open_vault(path, NEW_PASSPHRASE) as v:
        old = v.writer_id
        os.unlink(v.session.local.device_key_path)  # the loss has no public trigger
    with open_vault(path, NEW_PASSPHRASE) as v:
        assert v.writer_id != old
        v.reissue_recovery_phrase()
    agent_appends(path, grant, "after a device replacement", tmp_path, monkeypatch)
    assert sealed_under_current_epoch(path, "after a device replacement", NEW_PASSPHRASE)
    with open_vault(path, NEW_PASSPHRASE) as v:
        mine = [r.text for r in v.timeline() if r.writer == "agent appender"]
    assert mine == ["before any change", "after an erasure", "after a passphrase change",
                    "after a new device's epoch", "after a device replacement"]


def envelopes_for(path, recipient_id):
    return [f for f in glob.glob(os.path.join(path, "env", "*.env"))
            if envelopes.is_for(open(f, "rb").read(), recipient_id)]


def test_a_revoked_grant_never_comes_back(appender, tmp_path, monkeypatch):
    path, grant, reader = appender
    g, _ = read_grant_file(grant)
    rid = ids.recipient_id(g.credential.recipient.public)
    with open_vault(path) as v:
        v.revoke("appender")
        v.revoke("reader")
        target = v.append([NewRecord(type="message", text="to erase")], compartment="work").written[0]
        v.erase([target])
        v.change_passphrase(NEW_PASSPHRASE)
    switch_home(monkeypatch, tmp_path / "second-device")
    with open_vault(path, NEW_PASSPHRASE, device_name="second device") as v:
        v.append([NewRecord(type="message", text="a new device writes")], compartment="work")
    # nothing of the keys that came after its revocation was ever addressed to it
    assert envelopes_for(path, rid) == []
    switch_home(monkeypatch, tmp_path / "agent-home")
    with Vault.open(path, Unlock.grant(grant)) as agent, pytest.raises(AccessDenied, match="no key to write"):
        agent.append([NewRecord(type="message", text="I am back")], compartment="work")
    # the reader's old envelopes went with the keys that rolled: it finds nothing it can read
    with pytest.raises((Revoked, WrongCredential), match="revoked"):
        Vault.open(path, Unlock.grant(reader))


def test_a_lost_devices_key_cannot_make_the_agent_seal_to_the_thief(appender, tmp_path, monkeypatch):
    """The thief holds the lost laptop's device key and can still write to the synced folder: it
    certifies a key of its own with it and offers the agent a new epoch under that key, and offers
    one signed by the laptop's key itself.  The agent uses neither: the revocation reached it."""
    path, grant, _ = appender
    switch_home(monkeypatch, tmp_path / "laptop")
    with open_vault(path, device_name="laptop") as lap:
        laptop = lap.session.actor
        vid = lap.vault_id
        work = lap.compartment_id("work")
        current = lap.session.roster.current_epoch(work).epoch_id
    switch_home(monkeypatch, tmp_path / "home")
    with open_vault(path) as v:
        v.revoke("laptop", reason="lost on a train")
    g, _ = read_grant_file(grant)
    # what the thief writes into the folder
    thief = Credential.generate(CredentialKind.DEVICE)
    cert = encode_record(Kind.DEVICE_CERT, laptop.writer_id, signers=[laptop.signer], body={
        0: {0: 1, 1: 1, 2: thief.signer.public, 3: thief.recipient.public, 4: "laptop", 5: "Linux"},
        1: None, 2: "enrollment", 3: proof_of_possession(vid, thief)})
    fake_secret = os.urandom(32)
    stolen = []
    # the smallest epoch ids there are: an agent that trusted them would seal to them (spec §15.2)
    for signer, fake_epoch in ((thief, bytes(16)), (laptop, bytes(15) + b"\x01")):
        epk = keys.epoch_key(fake_secret, vid, work, fake_epoch).public
        stolen.append((fake_epoch, envelopes.build_envelope(
            vault_id=vid, kind=envelopes.EnvelopeKind.EPOCH_PUBLIC, compartment_id=work, epoch_id=fake_epoch,
            recipient_public=g.credential.recipient.public, recipient_id=g.credential.recipient_id, key=epk,
            signer=signer.signer, signer_id=signer.writer_id, prev_epoch=current)))
    stolen.append((None, envelopes.build_envelope(
        vault_id=vid, kind=envelopes.EnvelopeKind.OWNER_CERT, compartment_id=None, epoch_id=None,
        recipient_public=g.credential.recipient.public, recipient_id=g.credential.recipient_id, key=cert,
        signer=laptop.signer, signer_id=laptop.writer_id)))
    for _, data in stolen:
        open(os.path.join(path, envelopes.file_name(data)), "wb").write(data)
    agent_appends(path, grant, "after the laptop was lost", tmp_path, monkeypatch)
    assert sealed_under_current_epoch(path, "after the laptop was lost")
    with open_vault(path) as v:
        rec = next(r for r in v.timeline() if r.text == "after the laptop was lost")
        assert v.session.batches[rec.batch_id].epoch_id not in {e for e, _ in stolen}
