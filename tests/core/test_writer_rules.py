"""What a writer must write, as the spec states it for a writer written from the spec alone (spec
§9.2, §12.4, §15.2, §17.6): a new installation's first batches, the records of a re-certification,
the frontier of a batch whose writer saw a chain with a gap, the clean-up of a registration
interrupted between its slot and its batches, and the check of an EPOCH record's public key against
its secret before sealing to it.  The writer-side conformance vectors (``writer-registration``,
``writer-recertification``) fix the same rules byte for byte; these tests check that the real code
paths follow them."""

from __future__ import annotations

import glob
import os

import pytest
from camillo import NewRecord, Unlock, Vault, encoding
from camillo.credentials import CredentialKind
from camillo.errors import DamagedFile
from camillo.ops import registration, rekey
from camillo.primitives import RecipientKey
from camillo.records import Kind
from camillo.session.writer import causal_fields
from camillo.slots import read_statement

PASSPHRASE = "correct horse battery staple"


def batches_of(v: Vault, writer: bytes) -> list:
    """This writer's batches, control compartment first, then the data compartments in genesis order."""
    order = v.session.all_compartments()
    views = [b for b in v.session.batches.values() if b.header.writer_id == writer]
    return sorted(views, key=lambda b: (order.index(b.header.compartment_id), b.header.seq))


def control_records(view) -> list[dict]:
    return [encoding.decode(r.raw) for r in view.records if r is not None]


def test_a_new_installation_writes_exactly_its_certificate_first(tmp_path):
    path = str(tmp_path / "v")
    v, _ = Vault.create(path, PASSPHRASE, home=str(tmp_path / "h1"))
    v.lock()
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "h2"), device_name="second") as v:
        new = v.writer_id
        passphrase = next(p for p in v.session.roster.principals.values() if p.kind == CredentialKind.PASSPHRASE)
        mine = batches_of(v, new)
        # one batch per compartment, its first (seq 1), carrying the certificate and nothing else
        assert [b.header.compartment_id for b in mine] == v.session.all_compartments()
        for b in mine:
            assert (b.header.seq, b.header.prev, b.header.frontier[new]) == (1, None, 0)
            assert len(b.header.records) == 1
            (cert,) = control_records(b)
            assert cert[1] == Kind.DEVICE_CERT and cert[2] == passphrase.writer_id
            assert set(cert[12]) == {0, 1, 2} and cert[12][1] is None and cert[12][2] == "passphrase"
            assert [s[0] for s in cert[13]] == [passphrase.writer_id, new]
            assert bool(b.header.heads) == (b.header.compartment_id == v.session.roster.control_id)
        # its slot is signed by the new device key itself (spec §10.2)
        own = [h for h in v.session.slot_headers()[0] if h.type == 1]
        signers = [[s[0] for s in read_statement(h, v.vault_id, v.session.keyring.master.get()).signatures]
                   for h in own]
        assert [new] in signers
        assert v.problems(full=True) == []


def test_re_certification_retires_the_old_key_in_the_same_batches(tmp_path):
    path = str(tmp_path / "v")
    v, _ = Vault.create(path, PASSPHRASE, home=str(tmp_path / "h1"))
    with v:
        v.append([NewRecord(type="message", role="user", text="before")])
        old = v.writer_id
    for f in glob.glob(os.path.join(str(tmp_path / "h1"), "**", "device-key.bin"), recursive=True):
        os.unlink(f)
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "h1")) as v:
        new = v.writer_id
        log = v.session.log
        passphrase = next(p for p in v.session.roster.principals.values() if p.kind == CredentialKind.PASSPHRASE)
        for b in batches_of(v, new):
            cert, revoke = control_records(b)
            assert cert[12][1] == old and [s[0] for s in cert[13]] == [passphrase.writer_id, new]
            assert revoke[1] == Kind.REVOKE and revoke[2] == new and revoke[12][0] == old
            assert revoke[12][4] == registration.REPLACED_REASON
            assert [s[0] for s in revoke[13]] == [passphrase.writer_id, new]
            # seen: every chain's highest accepted seq as the new writer found it (its own not yet)
            for (w, c), chain in log.chains.items():
                if w != new:
                    assert revoke[12][2][c][w] == max(chain)
        assert old in v.session.roster.revocations


def test_the_frontier_names_the_highest_accepted_seq_above_a_gap():
    """Spec §17.6 rule 5: a writer whose copy misses seq 3 of another writer still names seq 4."""
    w, me, cid, data = b"w" * 32, b"m" * 32, b"c" * 16, b"d" * 16
    chains = {(w, cid): {1: b"1" * 32, 2: b"2" * 32, 4: b"4" * 32}, (me, cid): {1: b"a" * 32},
              (w, data): {1: b"x" * 32, 5: b"y" * 32}}
    deps, frontier, heads = causal_fields(chains, [b"4" * 32, b"a" * 32], cid, [data], {w: 2, b"o" * 32: 7})
    assert deps == (b"4" * 32, b"a" * 32)
    assert frontier == {w: 4, me: 1, b"o" * 32: 7}  # raised to the previous batch's entries
    assert heads == {data: {w: 5}}
    assert causal_fields(chains, [], data)[2] == {}  # key 11 only in control batches


def test_a_registration_interrupted_before_its_batches_leaves_a_slot_the_next_open_deletes(tmp_path, monkeypatch):
    """Spec §12.4: the slot written before the certificate's batches is untrusted until the
    installation's next writable open deletes it (a fresh verification meanwhile reports it)."""
    path = str(tmp_path / "v")
    v, _ = Vault.create(path, PASSPHRASE, home=str(tmp_path / "h1"))
    v.lock()
    before = set(os.listdir(os.path.join(path, "slots")))

    def crash(*args, **kwargs):
        raise KeyboardInterrupt  # the process dies between the slot and the batches

    monkeypatch.setattr(registration, "write_control", crash)
    with pytest.raises(KeyboardInterrupt):
        Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "h2"))
    monkeypatch.undo()
    left = set(os.listdir(os.path.join(path, "slots"))) - before
    assert len(left) == 1
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "fresh"), register=False) as v:
        assert [(p.kind, p.file) for p in v.problems()] == [("untrusted", f"slots/{next(iter(left))}")]
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "h2")) as v:
        assert v.session.actor is not None
    assert not left & set(os.listdir(os.path.join(path, "slots")))
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), home=str(tmp_path / "fresh"), register=False) as v:
        assert v.problems(full=True) == []


def test_a_writer_refuses_an_epoch_record_whose_public_key_its_secret_does_not_give(tmp_path, monkeypatch):
    """Spec §9.2, §15.2: a (faulty) owner announced an epoch whose EPOCH record names another public
    key than the one its secret derives; a writer holding the secret must not seal to it (nobody could
    read what it wrote with the epoch's secret)."""
    path = str(tmp_path / "v")
    v, _ = Vault.create(path, PASSPHRASE, home=str(tmp_path / "h1"))
    with v:
        session = v.session
        cid = session.compartment_id("personal")

        class WrongPublic:
            """``keys`` for the faulty writer: the EPOCH record gets someone else's public key."""

            def __getattr__(self, name):
                return getattr(rekey_keys, name)

            @staticmethod
            def epoch_key(*args):
                return RecipientKey.from_seed(b"\x07" * 32)

        rekey_keys = rekey.keys
        monkeypatch.setattr(rekey, "keys", WrongPublic())
        plan = rekey.Rekey(session)
        rekey.new_epoch(session, plan, cid, "scheduled", exclude=set())
        rekey.apply(session, plan)
        monkeypatch.undo()
        segments_before = sorted(glob.glob(os.path.join(path, "segments", "*", "*.seg")))
        with pytest.raises(DamagedFile, match="does not belong to its epoch secret"):
            v.append([NewRecord(type="message", role="user", text="never sealed to the wrong key")],
                     compartment="personal")
        assert sorted(glob.glob(os.path.join(path, "segments", "*", "*.seg"))) == segments_before
        v.append([NewRecord(type="message", role="user", text="other compartments still work")], compartment="work")
