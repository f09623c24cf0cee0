"""Bugs that fuzzing (or reading the decoders for it) found in the core, one named test each,
written before the fix.  Each input is also in the regression corpus or the hostile corpus.

Runs on pytest's main thread.
"""

from __future__ import annotations

import base64
import os
import time

import pytest
from camillo import NewRecord, Unlock, Vault, encoding
from camillo.errors import EnrollmentError, UsageError, VaultError
from camillo.ops.enrollment import Offer, OfferState, _key, _seal, session_id
from camillo.records import Kind, encode_record
from camillo.session.grantfile import read_grant_file
from camillo.session.writer import write_batches

from .targets import PASSPHRASE, armor_grant, grant_map

pytestmark = pytest.mark.regression


# -- B1: a record (or batch frontier) with an integer SQLite cannot hold bricked the vault -----------


@pytest.mark.parametrize("ts", [2**63, 2**64 - 1])
def test_record_timestamp_beyond_sqlite_integers_does_not_brick_the_vault(new_vault, ts):
    """``ts`` is any CBOR uint (spec §8.2, informational).  A writer (any device, or an agent with a
    write or append grant) wrote one record with ts >= 2**63: the materialised state raised
    OverflowError from SQLite, on the writer and on every reader, and the vault no longer opened."""
    path, vault, _ = new_vault
    cid = vault.compartment_id("personal")
    vault.append([NewRecord(type="message", text="before")])
    raw = encode_record(Kind.NOTE, vault.writer_id, value="from the far future", authority=2,
                        type="message", ts=ts)
    write_batches(vault.session, {cid: [raw]})
    vault.lock()
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), register=False, cache=False) as v:
        texts = {r.text: r for r in v.timeline()}
        assert {"before", "from the far future"} <= set(texts)
        assert texts["from the far future"].ts is None  # a time no calendar can show is shown as unknown
        from camillo.mcp_server import record_json

        assert record_json(texts["from the far future"])["time"] is None


def _write_batch(vault, *, seq_offset: int = 1, frontier_extra: dict | None = None, prev=None):
    """Sign and seal one batch of this device with a chosen seq and frontier, as a hostile writer
    (any certified device or agent) can."""
    from camillo import ids, segments
    from camillo.records import BatchHeader, make_batch
    from camillo.storage import segment_name

    cid = vault.compartment_id("personal")
    actor = vault.session.actor
    seq, last = vault.session.device_state.counters[cid]
    seq += seq_offset
    raw = encode_record(Kind.NOTE, actor.writer_id, value="hostile batch", authority=2, type="message")
    frontier = {actor.writer_id: seq - 1, **(frontier_extra or {})}
    header = BatchHeader(vault.vault_id, cid, actor.writer_id, seq, prev or last, (), frontier, (ids.record_id(raw),),
                         int(time.time()))
    batch = make_batch(header, [raw], actor.signer)
    epoch = vault.session.roster.current_epoch(cid)
    seg = segments.seal_segment(vault.vault_id, cid, epoch.epoch_id, epoch.public, segments.encode_payload([batch]))
    vault.session.shelf.write(segment_name(seg), seg)


def test_frontier_claim_of_2_64_batches_neither_hangs_nor_bricks_the_vault(new_vault):
    """A frontier maps writer -> seq (any uint).  Each claimed-but-absent seq was enumerated as its own
    gap (a claim of 2**64 - 1 never finished and exhausted memory), and the frontier's sum (an
    ordering hint) overflowed SQLite."""
    path, vault, _ = new_vault
    _write_batch(vault, frontier_extra={bytes(32): 2**64 - 1, b"\x01" * 32: 2**64 - 1})
    vault.lock()
    start = time.monotonic()
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), register=False, cache=False) as v:
        assert "hostile batch" in {r.text for r in v.timeline()}
        gaps = [p for p in v.problems() if p.kind in ("gap", "syncing")]
        assert 1 <= len(gaps) <= 2 * 65 and any("batches)" in p.message for p in gaps)
    assert time.monotonic() - start < 20


def test_batch_with_a_huge_seq_neither_hangs_nor_bricks_the_vault(new_vault):
    """A writer's chain with a batch at seq 2**62: every seq below it was enumerated as a gap."""
    path, vault, _ = new_vault
    _write_batch(vault, seq_offset=2**62, prev=b"\x07" * 32)
    vault.lock()
    start = time.monotonic()
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), register=False, cache=False) as v:
        v.timeline()
        gaps = [p for p in v.problems() if p.kind in ("gap", "syncing")]
        assert gaps and len(gaps) <= 2 * 65
    assert time.monotonic() - start < 20


def test_batch_frontier_summing_beyond_sqlite_integers_does_not_brick_the_vault(new_vault):
    """A frontier lists writer -> seq with any uint; its sum (the ordering hint) overflowed SQLite."""
    from camillo import ids, segments
    from camillo.records import BatchHeader, make_batch
    from camillo.storage import segment_name

    path, vault, _ = new_vault
    cid = vault.compartment_id("personal")
    actor = vault.session.actor
    seq, prev = vault.session.device_state.counters[cid]
    raw = encode_record(Kind.NOTE, actor.writer_id, value="huge frontier", authority=2, type="message")
    frontier = {actor.writer_id: seq, bytes(32): 2**64 - 1, b"\x01" * 32: 2**64 - 1}
    header = BatchHeader(vault.vault_id, cid, actor.writer_id, seq + 1, prev, (), frontier, (ids.record_id(raw),),
                         int(time.time()))
    batch = make_batch(header, [raw], actor.signer)
    epoch = vault.session.roster.current_epoch(cid)
    seg = segments.seal_segment(vault.vault_id, cid, epoch.epoch_id, epoch.public, segments.encode_payload([batch]))
    vault.session.shelf.write(segment_name(seg), seg)
    vault.lock()
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), register=False, cache=False) as v:
        v.timeline()  # whatever the log decides about the claimed writers, it opens


# -- B2: grant files -----------------------------------------------------------------------------


def _grant(tmp_path, m) -> str:
    p = tmp_path / "g.grant"
    p.write_bytes(armor_grant(encoding.encode(m)))
    return str(p)


@pytest.mark.parametrize("value", [[1, 2], b"x", 7, "vmem-grant"], ids=["list", "bytes", "int", "text"])
def test_grant_file_whose_cbor_is_not_a_map_is_a_usage_error(tmp_path, value):
    with pytest.raises(UsageError, match="not a valid Camillo grant file"):
        read_grant_file(_grant(tmp_path, value))


@pytest.mark.parametrize("patch", [
    {2: 5}, {2: b"short"}, {3: None}, {3: "id"}, {4: b"agent"}, {4: ""}, {5: 7}, {5: [["x", 2, "work"]]},
    {5: [[b"\x00" * 16, 2, 5]]}, {6: b"\x01"}, {6: 5}, {7: "seed"}, {8: True}, {9: "tomorrow"}, {9: 2**64 - 1},
    {9: -1}, {10: 5}, {10: [[b"a", b"b", b"c"]]}, {10: [[1, 2]]}, {10: [[b"\x00" * 32, "key"]]},
], ids=repr)
def test_grant_file_with_wrong_field_types_is_a_usage_error(tmp_path, patch):
    """Fields were used unchecked: an int vault id raised AttributeError in open_with_grant, a text
    or huge not_after raised TypeError or OverflowError, and so on."""
    m = grant_map()
    m.update(patch)
    with pytest.raises(UsageError, match="not a valid Camillo grant file"):
        read_grant_file(_grant(tmp_path, m))


def test_grant_file_with_wrong_field_types_is_refused_by_open(new_vault, tmp_path):
    path, vault, _ = new_vault
    vault.lock()
    m = grant_map()
    m[2] = 5
    with pytest.raises(VaultError):
        Vault.open(path, Unlock.grant(_grant(tmp_path, m)))


# -- B3, B4: enrollment files written by someone who holds the QR code's secret ---------------------


@pytest.fixture
def offer(new_vault):
    path, vault, _ = new_vault
    o = Offer(vault.session, expiry=int(time.time()) + 600)
    return path, vault, o


def _write(vault, name, data):
    try:
        vault.session.shelf.delete(name)
    except VaultError:
        pass
    vault.session.shelf.write(name, data)


@pytest.mark.parametrize("plaintext", [[1, 2], [b"x"], {0: b"\x00" * 32}, {2: b"name"}, "text"],
                         ids=["list", "short-list", "missing-fields", "bytes-name", "text"])
def test_malformed_enrollment_request_is_refused_not_raised(offer, plaintext):
    path, vault, o = offer
    data = _seal(_key(o.secret, vault.vault_id, "req", o.sid), "vmem/v1/enroll/req", o.sid,
                 encoding.encode(plaintext))
    _write(vault, o.base + ".req", data)
    assert o.poll() == OfferState.REFUSED
    assert "enrollment request" in o.messages[-1]


def test_enrollment_request_with_a_low_order_x25519_key_is_refused_before_confirm(offer):
    """The request's X-Wing key was only length-checked: confirm() then failed inside HPKE with an
    internal CryptoFailure instead of refusing the request."""
    from camillo.control import pop_message
    from camillo.primitives import SigningKey, random_bytes

    path, vault, o = offer
    signer = SigningKey.generate()
    good = vault.session.actor.recipient.public
    bad_public = good[:1184] + bytes(32)  # the X25519 part is the identity (a low-order point)
    req = {0: bad_public, 1: signer.public, 2: "attacker", 3: "x", 4: random_bytes(16),
           5: signer.sign(pop_message(vault.vault_id, signer.public, bad_public))}
    _write(vault, o.base + ".req", _seal(_key(o.secret, vault.vault_id, "req", o.sid), "vmem/v1/enroll/req", o.sid,
                                         encoding.encode(req)))
    assert o.poll() == OfferState.REFUSED


@pytest.fixture
def enrolled(new_vault, tmp_path, monkeypatch):
    """A finished enrollment; returns what an attacker holding the QR secret could use."""
    path, vault, _ = new_vault
    o = Offer(vault.session, expiry=int(time.time()) + 600)
    secret, qr = o.secret, o.qr_text
    home = os.environ["CAMILLO_HOME"]
    monkeypatch.setenv("CAMILLO_HOME", str(tmp_path / "laptop"))
    join = Vault.join(path, qr, name="laptop")
    join.start()
    monkeypatch.setenv("CAMILLO_HOME", home)
    o.poll()
    o.confirm()
    monkeypatch.setenv("CAMILLO_HOME", str(tmp_path / "laptop"))
    sid = session_id(secret)
    k_resp = _key(secret, vault.vault_id, "resp", sid)
    from camillo.ops.enrollment import _open

    resp = encoding.decode(_open(k_resp, "vmem/v1/enroll/resp", sid, vault.session.shelf.read(o.base + ".resp")))
    return path, vault, join, qr, k_resp, sid, o.base, resp


@pytest.mark.parametrize("patch", [
    {0: 5}, {0: "x"}, {0: b"\x01\x02"}, {1: None}, {3: 1}, {4: [1]}, {4: {b"c": 5}},
    {4: {b"\x00" * 16: {b"\x00" * 32: 5}}}, {4: {b"\x00" * 16: {b"\x00" * 32: [1]}}}, {5: "x"}, {5: -1},
], ids=repr)
def test_malformed_enrollment_response_is_an_enrollment_error(enrolled, patch):
    """The response's fields were used unchecked: IndexError, AttributeError and ValueError leaked
    from Join.poll, and a malformed frontier or generation was *saved* in the new device's state,
    after which every later open of the vault on that device crashed in check_memory."""
    path, vault, join, qr, k_resp, sid, base, resp = enrolled
    m = dict(resp)
    m.update(patch)
    os.unlink(os.path.join(path, *(base + ".resp").split("/")))
    with open(os.path.join(path, *(base + ".resp").split("/")), "wb") as fh:
        fh.write(_seal(k_resp, "vmem/v1/enroll/resp", sid, encoding.encode(m)))
    try:
        result = join.poll()
    except EnrollmentError:
        return
    if result is not None:  # accepted (a harmless change): the device must still open afterwards
        result.lock()
        Vault.open(path, Unlock.with_device_credential(join.device), register=False).lock()


def test_enrollment_response_that_is_a_list_is_an_enrollment_error(enrolled):
    path, vault, join, qr, k_resp, sid, base, resp = enrolled
    os.unlink(os.path.join(path, *(base + ".resp").split("/")))
    with open(os.path.join(path, *(base + ".resp").split("/")), "wb") as fh:
        fh.write(_seal(k_resp, "vmem/v1/enroll/resp", sid, encoding.encode([1, 2])))
    with pytest.raises(EnrollmentError, match="enrollment response"):
        join.poll()


def test_grant_armor_helper_matches_the_product(tmp_path, new_vault):
    """The fuzz harness's armour is the product's: a real grant file re-armoured reads the same."""
    path, vault, _ = new_vault
    out = str(tmp_path / "real.grant")
    vault.create_grant("coder", {"work": "write"}, out)
    text = open(out).read()
    body = text[text.index("-----BEGIN VMEM GRANT-----") + 26: text.index("-----END VMEM GRANT-----")]
    again = tmp_path / "again.grant"
    again.write_bytes(armor_grant(base64.b64decode("".join(body.split()))))
    assert read_grant_file(str(again))[0].grant_id == read_grant_file(out)[0].grant_id
