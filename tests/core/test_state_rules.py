"""Derived-state rules of spec §16.3 and §19 at their edges: erased predecessors, invalid sources,
confirmations across compartments, keyless DELs naming keyed records; and strict parsing of a few
fields (CBOR nesting, batch ``ts``, GRANT and REVOKE bodies, enrollment requests)."""

from __future__ import annotations

import pytest
from camillo import Authority, NewRecord, Unlock, Vault
from camillo.records import Kind, encode_record
from camillo.session import unlock
from camillo.session.writer import write_batches, write_control

PASSPHRASE = "correct horse battery staple"


def _write(vault: Vault, compartment: str, *raws: bytes) -> list[bytes]:
    """Write hand-made records as the vault's own device (what another client could write)."""
    cid = vault.compartment_id(compartment)
    written = write_batches(vault.session, {cid: list(raws)})
    return [r for b in written[cid] for r in b.header.records]


def _put(vault: Vault, key: str, value: str, compartment: str = "personal") -> bytes:
    return vault.append([NewRecord(type="fact", key=key, value=value)], compartment=compartment).written[0]


# ---------------------------------------------------------------------------------------------- §16.3 rule 6


def test_erasing_an_earlier_value_keeps_the_later_value_current(new_vault):
    """A pred naming an erased record is accepted: its key cannot be checked any more."""
    path, vault, _ = new_vault
    a = _put(vault, "user/city", "Lisbon")
    b = _put(vault, "user/city", "Porto")
    assert vault.record(b).pred == (a,)
    vault.erase([a])
    for v in (vault, Vault.open(path, Unlock.passphrase(PASSPHRASE), cache=False)):
        rb = v.record(b)
        assert rb.valid, rb.reason
        fact = v.fact("user/city")
        assert fact.status == "ok" and fact.current.id == b
        assert not [p for p in v.problems() if p.kind == "rejected-record"]
        if v is not vault:
            v.lock()


def test_pred_naming_an_erased_record_of_another_compartment_is_still_rejected(new_vault):
    path, vault, _ = new_vault
    a = _put(vault, "user/city", "Lisbon", compartment="work")
    vault.erase([a])
    me = vault.writer_id
    (b,) = _write(vault, "personal", encode_record(Kind.PUT, me, key="user/city", value="Porto", authority=3,
                                                   type="fact", pred=[a]))
    rb = vault.record(b)
    assert not rb.valid and "another key or compartment" in rb.reason


# ---------------------------------------------------------------------------------------------- §16.3 rule 8


def test_an_invalid_source_counts_as_external_even_when_confirmed(new_vault):
    path, vault, _ = new_vault
    me = vault.writer_id
    other = _put(vault, "user/food", "tea")
    # Invalid: its pred names a record of another key (§16.3 rule 6).
    (bad,) = _write(vault, "personal", encode_record(Kind.PUT, me, key="user/city", value="Faro", authority=1,
                                                     type="fact", pred=[other]))
    assert not vault.record(bad).valid
    (confirm,) = _write(vault, "personal", encode_record(Kind.CONFIRM, me, target=bad, signers=[vault.session.actor.signer]))
    assert vault.record(confirm).valid
    (derived,) = _write(vault, "personal", encode_record(Kind.NOTE, me, value={"text": "from bad"}, authority=3,
                                                         type="summary", sources=[bad]))
    rd = vault.record(derived)
    assert not rd.valid and "above its sources (external)" in rd.reason
    # Claiming external is fine.
    (low,) = _write(vault, "personal", encode_record(Kind.NOTE, me, value={"text": "low"}, authority=0,
                                                     type="summary", sources=[bad]))
    assert vault.record(low).valid


# ---------------------------------------------------------------------------------------------- §16.3 rule 7


def test_confirm_of_a_record_in_another_compartment_is_rejected(new_vault):
    path, vault, _ = new_vault
    me = vault.writer_id
    note = vault.append([NewRecord(type="summary", text="an inference", role="assistant")]).written[0]
    assert vault.record(note).effective_class == Authority.INFERRED
    (confirm,) = _write(vault, "work", encode_record(Kind.CONFIRM, me, target=note, signers=[vault.session.actor.signer]))
    rc = vault.record(confirm)
    assert not rc.valid and "another compartment" in rc.reason
    assert vault.record(note).effective_class == Authority.INFERRED
    # A record derived from it may not claim more than the unconfirmed class.
    (derived,) = _write(vault, "personal", encode_record(Kind.NOTE, me, value={"text": "d"}, authority=3,
                                                         type="summary", sources=[note]))
    assert not vault.record(derived).valid
    # The same CONFIRM in the target's compartment raises it.
    vault.confirm([note])
    assert vault.record(note).effective_class == Authority.USER


# ---------------------------------------------------------------------------------------------- §19.6


def test_keyless_del_does_not_hide_a_keyed_put(new_vault):
    """Timeline and facts agree: a keyless DEL hides only keyless records."""
    path, vault, _ = new_vault
    me = vault.writer_id
    a = _put(vault, "user/city", "Lisbon")
    note = vault.append([NewRecord(type="message", text="hello")]).written[0]
    (d,) = _write(vault, "personal", encode_record(Kind.DEL, me, pred=[a, note]))
    assert vault.record(d).valid
    fact = vault.fact("user/city")
    assert fact.status == "ok" and fact.current.id == a
    assert not vault.record(a).hidden
    assert a in {r.id for r in vault.timeline()}
    assert vault.record(note).hidden and note not in {r.id for r in vault.timeline()}
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), cache=False) as v:
        assert a in {r.id for r in v.timeline()} and v.fact("user/city").current.id == a
        assert note not in {r.id for r in v.timeline()}


def test_only_a_confirm_raises_its_target(new_vault, tmp_path):
    """Field 10 (target) on another kind, here an agent's NOTE, raises nothing (§19.2: a valid CONFIRM)."""
    path, vault, _ = new_vault
    note = vault.append([NewRecord(type="summary", text="an inference", role="assistant")]).written[0]
    grant = str(tmp_path / "agent.grant")
    vault.create_grant("agent", {"personal": "write"}, grant)
    vault.lock()
    with Vault.open(path, Unlock.grant(grant)) as agent:
        me = agent.writer_id
        (sneaky,) = _write(agent, "personal", encode_record(Kind.NOTE, me, value={"text": "x"}, authority=1,
                                                            type="event", target=note))
        assert agent.record(sneaky).valid
        assert agent.record(note).effective_class == Authority.INFERRED


# ---------------------------------------------------------------------------------------------- §21.2 step 3


def test_enrollment_request_with_a_low_order_xwing_key_is_refused(new_vault):
    from camillo import encoding
    from camillo.control import pop_message
    from camillo.credentials import Credential, CredentialKind
    from camillo.errors import EnrollmentError
    from camillo.ops.enrollment import Offer, OfferState, _seal

    from .helpers import snapshot

    path, vault, _ = new_vault
    offer = Offer(vault.session)
    dev = Credential.generate(CredentialKind.DEVICE)
    bad_public = dev.recipient.public[:1184] + bytes(32)  # X25519 part: the all-zero, low-order point
    plaintext = encoding.encode({
        0: bad_public, 1: dev.signer.public, 2: "evil", 3: "", 4: bytes(16),
        5: dev.signer.sign(pop_message(vault.vault_id, dev.signer.public, bad_public)),
    })
    vault.session.shelf.write(offer.base + ".req", _seal(offer._k("req"), "vmem/v1/enroll/req", offer.sid, plaintext))
    before = snapshot(path)
    assert offer.poll() == OfferState.REFUSED
    assert any("X-Wing" in m for m in offer.messages), offer.messages
    with pytest.raises(EnrollmentError):
        offer.confirm()
    assert snapshot(path) == before
    assert {d.name for d in vault.devices()} == {"test laptop"}


# ---------------------------------------------------------------------------------------------- §2.2, §2.3


def _empty_arrays(levels: int) -> object:
    v: object = []
    for _ in range(levels - 1):
        v = [v]
    return v


def test_nesting_limit_counts_containers_exactly():
    from camillo import encoding
    from camillo.errors import CanonicalError

    ok = _empty_arrays(64)
    assert encoding.decode(encoding.encode(ok)) == ok
    assert encoding.decode(b"\x81" * 63 + b"\x80") == ok
    assert encoding.decode(b"\xa1\x00" * 63 + b"\xa0") is not None  # 64 maps
    with pytest.raises(CanonicalError, match="nested more than 64"):
        encoding.encode(_empty_arrays(65))
    with pytest.raises(CanonicalError, match="nested more than 64"):
        encoding.decode(b"\x81" * 64 + b"\x80")
    with pytest.raises(CanonicalError, match="nested more than 64"):
        encoding.decode(b"\xa1\x00" * 64 + b"\xa0")


# ---------------------------------------------------------------------------------------------- camillo verify


def test_verify_writes_nothing_even_when_an_erasure_is_unseen(new_vault, tmp_path, monkeypatch, capsys):
    """`camillo verify` never writes to the vault: not the key rotation an unseen erasure asks for
    (§16.4), not a finished write; in local state it writes only what this device has seen (so a
    later rollback is noticed, spec §17.3), never the cache; a second verify writes nothing."""
    import json
    import os

    from camillo import cli

    from .helpers import snapshot, switch_home

    path, vault, _ = new_vault
    home = os.environ["CAMILLO_HOME"]
    device = vault.session.actor
    rid = vault.append([NewRecord(type="message", text="to erase")]).written[0]
    vault.lock()
    switch_home(monkeypatch, tmp_path / "other-device")
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as other:
        other.erase([rid])
    switch_home(monkeypatch, home)
    # `--device` takes this installation's key from the OS keychain; the test has none, so hand it over.
    monkeypatch.setattr(unlock, "load_device_credential", lambda session: device)
    before, before_home = snapshot(path), snapshot(home)
    capsys.readouterr()
    assert cli.main(["verify", path, "--device", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ok"] is True
    assert snapshot(path) == before
    after_home = snapshot(home)
    changed = {k for k in set(before_home) | set(after_home) if before_home.get(k) != after_home.get(k)}
    assert changed and all(k.endswith(("/state.bin", "/state-1.bin", "/generation.cbor")) for k in changed), changed
    # The facade call verify makes: what it saw is already remembered, so nothing changes.
    with Vault.open(path, Unlock.device(), register=False, cache=False, read_only=True) as v:
        assert v.writer_id == device.writer_id and v.problems() == []
    assert snapshot(path) == before and snapshot(home) == after_home
    # An ordinary open still rotates this device's key.
    with Vault.open(path, Unlock.device()) as v:
        assert v.writer_id != device.writer_id
    assert snapshot(path) != before


# ---------------------------------------------------------------------------------------------- strict fields


def test_batch_header_ts_must_be_unsigned():
    from camillo import encoding
    from camillo import ids as id_mod
    from camillo.credentials import Credential, CredentialKind
    from camillo.errors import CanonicalError
    from camillo.records import BatchHeader, batch_from_cbor, make_batch

    dev = Credential.generate(CredentialKind.DEVICE)
    raw = encode_record(Kind.NOTE, dev.writer_id, value={"text": "x"}, authority=3, type="message")

    def batch(ts: int, algs: tuple = (1,)) -> list:
        h = BatchHeader(bytes(32), bytes(16), dev.writer_id, 1, None, (), {dev.writer_id: 0},
                        (id_mod.record_id(raw),), ts, algs)
        return encoding.decode(encoding.encode(make_batch(h, [raw], dev.signer).to_cbor()))

    assert batch_from_cbor(batch(0)).header.ts == 0
    with pytest.raises(CanonicalError, match="ts"):
        batch_from_cbor(batch(-1))
    with pytest.raises(CanonicalError, match="sig_algs"):
        batch_from_cbor(batch(0, (-1,)))


def _control(vault: Vault, body: dict, kind: int = Kind.GRANT) -> bytes:
    from camillo import ids as id_mod

    raw = encode_record(kind, vault.writer_id, body=body, signers=[vault.session.actor.signer])
    write_control(vault.session, [raw], [vault.session.all_compartments()[0]])
    vault.refresh()
    return id_mod.record_id(raw)


def _malformed(vault: Vault, rid: bytes) -> list[str]:
    return [p.message for p in vault.problems() if rid.hex()[:12] in p.message and "malformed" in p.message]


def test_grant_levels_and_classes_are_integers_not_booleans(new_vault):
    from camillo.credentials import Credential, CredentialKind

    path, vault, _ = new_vault
    personal = vault.compartment_id("personal")

    def grant(level, max_class, not_after=None):
        cred = Credential.generate(CredentialKind.GRANT)
        body = {0: bytes(16), 1: "agent", 2: [[personal, level]], 3: cred.signer.public, 4: cred.recipient.public,
                5: max_class, 6: not_after}
        return cred.writer_id, _control(vault, body)

    wid, rid = grant(True, 1)
    assert wid not in vault.session.roster.principals
    assert any("level" in m for m in _malformed(vault, rid))
    wid, rid = grant(1, False)
    assert wid not in vault.session.roster.principals
    assert any("max class" in m for m in _malformed(vault, rid))
    wid, rid = grant(1, 1, True)  # a not_after that is not an integer is read as null
    assert vault.session.roster.principals[wid].grant.not_after is None and not _malformed(vault, rid)
    wid, rid = grant(1, 1)
    assert vault.session.roster.principals[wid].grant.max_class == Authority.INFERRED


def test_revoke_seen_values_must_be_unsigned_integers(new_vault, tmp_path):
    path, vault, _ = new_vault
    vault.create_grant("agent", {"personal": "write"}, str(tmp_path / "agent.grant"))
    (agent,) = [w for w, p in vault.session.roster.principals.items() if p.grant is not None]
    personal = vault.compartment_id("personal")
    for bad in ("5", True, -1):
        rid = _control(vault, {0: agent, 2: {personal: {agent: bad}}, 4: "test"}, Kind.REVOKE)
        assert agent not in vault.session.roster.revocations, bad
        assert any("seen" in m for m in _malformed(vault, rid)), (bad, vault.problems())
    rid = _control(vault, {0: agent, 2: {personal: {agent: 0}}, 4: "test"}, Kind.REVOKE)
    assert agent in vault.session.roster.revocations
