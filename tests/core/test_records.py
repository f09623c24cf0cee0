"""Records and batches (camillo.records): schema, round trips, strict decoding, signatures."""

from __future__ import annotations

import marshal
import os
import threading
import tracemalloc
import unicodedata

import cbor2
import pytest
from camillo import encoding, ids, records
from camillo.errors import (
    CanonicalError,
    DamagedFile,
    LimitExceeded,
    UnsupportedVersion,
    UsageError,
    VaultError,
)
from camillo.primitives import SigningKey, sha256
from camillo.records import Authority, Batch, BatchHeader, F, H, Kind
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SIGNER = SigningKey.from_seed(b"\x01" * 32)
OTHER = SigningKey.from_seed(b"\x02" * 32)
WID = ids.writer_id(SIGNER.alg, SIGNER.public)
OTHER_WID = ids.writer_id(OTHER.alg, OTHER.public)
VAULT = sha256(b"vault")
CID = b"\xc1" * 16
RID = [sha256(bytes([i])) for i in range(8)]  # arbitrary 32-byte ids
SORTED_RID = sorted(RID)
SALT = b"\x05" * 16
SIG = [[WID, 1, b"\x00" * 64]]

# ---------------------------------------------------------------------------------------------
# Strategies

_key_part = st.text(
    alphabet=st.characters(categories=["L", "N"], include_characters="_-.@"), min_size=1, max_size=12
).map(lambda s: unicodedata.normalize("NFC", s))
fact_keys = st.builds(lambda a, b: f"{a}/{b}", _key_part, _key_part).filter(
    lambda k: unicodedata.normalize("NFC", k) == k and len(k.encode()) <= 512
)
_scalars = st.none() | st.booleans() | st.integers(-(2**64), 2**64 - 1) | st.binary(max_size=20) | st.text(max_size=20)
profile_values = st.recursive(
    _scalars,
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=12,
)
id_sets = st.sets(st.binary(min_size=32, max_size=32), max_size=5)


# ---------------------------------------------------------------------------------------------
# Round trips per kind


def _round_trip(raw: bytes) -> records.Record:
    rec = records.decode_record(raw)
    assert rec.raw == raw
    assert rec.id == ids.record_id(raw)
    assert records.decode_record(raw, expected_id=rec.id).fields == rec.fields
    if isinstance(rec, records.ListingRecord):  # (its body is decoded when read: not in its fields)
        assert encoding.encode({**rec.fields, F.BODY: rec.body}) == raw
    else:
        assert encoding.encode(rec.fields) == raw
    return rec


@settings(max_examples=100)
@given(
    key=fact_keys,
    value=profile_values,
    authority=st.sampled_from(list(Authority)),
    type_=st.sampled_from(["fact", "preference", "instruction", "com.example/bookmark"]),
    sources=id_sets,
    ts=st.integers(0, 2**63),
    meta=st.dictionaries(st.text(max_size=8), st.text(max_size=8) | st.integers(0, 2**32) | st.booleans(), max_size=3),
)
def test_put_round_trip(key, value, authority, type_, sources, ts, meta):
    raw = records.encode_record(
        Kind.PUT, WID, key=key, value=value, authority=authority, type=type_, sources=sources, ts=ts, meta=meta
    )
    rec = _round_trip(raw)
    assert (rec.kind, rec.kind_name, rec.author, rec.key, rec.authority, rec.type, rec.ts) == (
        Kind.PUT, "PUT", WID, key, int(authority), type_, ts
    )
    assert rec.value == value
    assert rec.sources == sorted(sources)
    assert rec.meta == meta
    assert not rec.is_control and rec.known_kind
    assert len(rec.fields[F.SALT]) == 16


def test_put_is_salted():
    a = records.encode_record(Kind.PUT, WID, key="user/x", value=1, authority=3, type="fact", ts=1)
    b = records.encode_record(Kind.PUT, WID, key="user/x", value=1, authority=3, type="fact", ts=1)
    assert a != b and ids.record_id(a) != ids.record_id(b)


@settings(max_examples=50)
@given(key=fact_keys, pred=id_sets.filter(bool), erase=st.none() | st.booleans())
def test_del_round_trip(key, pred, erase):
    raw = records.encode_record(Kind.DEL, WID, key=key, pred=pred, erase=erase, ts=5)
    rec = _round_trip(raw)
    assert rec.kind == Kind.DEL and rec.pred == sorted(pred) and rec.key == key
    assert rec.erase is bool(erase)
    assert F.VALUE not in rec.fields


@settings(max_examples=50)
@given(value=profile_values, authority=st.sampled_from(list(Authority)), type_=st.sampled_from(records.STANDARD_TYPES))
def test_note_round_trip(value, authority, type_):
    rec = _round_trip(records.encode_record(Kind.NOTE, WID, value=value, authority=authority, type=type_))
    assert rec.kind == Kind.NOTE and rec.value == value and rec.type == type_
    assert rec.key is None and rec.pred == [] and rec.sigs == []


def test_keyless_del_round_trip():
    """A DEL without a key hides the keyless records it names (pred is still required)."""
    rec = _round_trip(records.encode_record(Kind.DEL, WID, pred=[RID[3], RID[1]], ts=5))
    assert rec.kind == Kind.DEL and rec.key is None and rec.pred == sorted([RID[3], RID[1]])
    records.decode_record(rec_bytes(Kind.DEL, f4=...))


def test_note_value_may_be_null():
    rec = _round_trip(records.encode_record(Kind.NOTE, WID, value=None, authority=3, type="message"))
    assert F.VALUE in rec.fields and rec.value is None


def test_confirm_round_trip_and_inner_signatures():
    raw = records.encode_record(Kind.CONFIRM, WID, target=RID[0], signers=[SIGNER, OTHER])
    rec = _round_trip(raw)
    assert rec.kind == Kind.CONFIRM and rec.target == RID[0]
    assert [s[0] for s in rec.sigs] == [WID, OTHER_WID]
    keys = {WID: SIGNER.public, OTHER_WID: OTHER.public}
    assert records.verify_inner_signatures(rec, keys.get) == ([WID, OTHER_WID], [])
    assert records.verify_inner_signatures(rec, {WID: SIGNER.public}.get) == ([WID], [OTHER_WID])


@pytest.mark.parametrize("kind", sorted(records.CONTROL_KINDS))
def test_control_kinds_round_trip(kind):
    body = {0: b"x", 1: "y", 2: [1, 2]}
    rec = _round_trip(records.encode_record(kind, WID, body=body, signers=[SIGNER], ts=7))
    assert rec.kind == kind and rec.body == body and rec.is_control and rec.known_kind
    assert records.verify_inner_signatures(rec, {WID: SIGNER.public}.get) == ([WID], [])


@pytest.mark.parametrize("kind", [Kind.ERASURE_MANIFEST, Kind.COMPACTION])
def test_a_manifest_is_held_as_its_bytes_and_its_lists_decoded_when_read(kind):
    listed = sorted(os.urandom(32) for _ in range(2000))
    body = {0: os.urandom(16), 1: listed, 2: [], 3: listed}
    raw = records.encode_record(kind, WID, body=body, signers=[SIGNER], ts=7)
    for decode in (records.decode_record, lambda r: records.validated_record(r, ids.record_id(r))):
        tracemalloc.start()
        try:
            rec = decode(raw)
            assert rec.body == body and rec.kind == kind and rec.ts == 7 and rec.author == WID
            assert records.verify_inner_signatures(rec, {WID: SIGNER.public}.get) == ([WID], [])
            held = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert isinstance(rec, records.ListingRecord) and F.BODY not in rec.fields
        assert rec.control_message == records.signing_message(records.CONTROL_SIG_LABEL, cbor2.loads(raw), F.SIGS)
        # what the record keeps beyond its bytes: not 4,000 ids as objects (73 bytes each)
        assert held < 20_000, held


def test_inner_signature_that_does_not_verify_is_damaged_file():
    rec = records.decode_record(records.encode_record(Kind.GENESIS, WID, body={0: 1}, signers=[SIGNER]))
    fields = dict(rec.fields)
    sig = bytearray(fields[F.SIGS][0][2])
    sig[0] ^= 1
    fields[F.SIGS] = [[WID, 1, bytes(sig)]]
    tampered = records.decode_record(encoding.encode(fields))
    with pytest.raises(DamagedFile, match="does not verify"):
        records.verify_inner_signatures(tampered, {WID: SIGNER.public}.get)
    # a signer id that does not belong to the key the lookup returns
    with pytest.raises(DamagedFile, match="does not verify"):
        records.verify_inner_signatures(rec, {WID: OTHER.public}.get)
    # the body changed after signing
    fields = dict(rec.fields)
    fields[F.BODY] = {0: 2}
    with pytest.raises(DamagedFile):
        records.verify_inner_signatures(records.decode_record(encoding.encode(fields)), {WID: SIGNER.public}.get)


@pytest.mark.parametrize("alg", [256, 300, -1, 2**64 - 1])
def test_inner_signature_with_out_of_range_algorithm_is_damaged_file(alg):
    m = dict(BASE[Kind.GENESIS])
    m[F.SIGS] = [[WID, alg, b"\x00" * 64]]
    try:
        rec = records.decode_record(encoding.encode(m))
    except CanonicalError:
        return  # refusing the record outright is fine too
    with pytest.raises(DamagedFile):
        records.verify_inner_signatures(rec, {WID: SIGNER.public}.get)


def test_inner_signature_with_reserved_algorithm_is_damaged_file():
    m = dict(BASE[Kind.GENESIS])
    m[F.SIGS] = [[WID, 2, b"\x00" * 64]]
    rec = records.decode_record(encoding.encode(m))
    with pytest.raises(DamagedFile, match="does not verify"):
        records.verify_inner_signatures(rec, {WID: SIGNER.public}.get)
    assert records.verify_inner_signatures(rec, {}.get) == ([], [WID])


def test_unknown_integer_fields_are_preserved():
    extra = {99: "future", 1000: [1, {"a": b"b"}], 16: None}
    raw = records.encode_record(Kind.PUT, WID, key="user/x", value="v", authority=3, type="fact", extra=extra)
    rec = _round_trip(raw)
    for k, v in extra.items():
        assert rec.fields[k] == v


@pytest.mark.parametrize("kind", [0, 5, 15, 29, 999, 2**16 - 1])
def test_unknown_kinds_decode(kind):
    rec = _round_trip(encoding.encode({0: 1, 1: kind, 2: WID, 3: SALT, 99: "x"}))
    assert rec.kind == kind and not rec.known_kind
    assert rec.kind_name == f"UNKNOWN({kind})"


def test_encode_record_validates():
    with pytest.raises(UsageError):
        records.encode_record(Kind.PUT, WID, key="nokey", value=1, authority=3, type="fact")
    with pytest.raises(UsageError, match="unknown record type"):
        records.encode_record(Kind.PUT, WID, key="user/x", value=1, authority=3, type="bogus")
    with pytest.raises(CanonicalError, match="lacks field"):
        records.encode_record(Kind.PUT, WID, key="user/x", value=1, authority=3)
    with pytest.raises(CanonicalError, match=r"class must be 0\.\.3"):
        records.encode_record(Kind.PUT, WID, key="user/x", value=1, authority=4, type="fact")
    with pytest.raises(LimitExceeded, match="limited to"):
        records.encode_record(Kind.NOTE, WID, value="x" * (records.RECORD_MAX_BYTES + 1), authority=3, type="message")
    with pytest.raises(CanonicalError, match="floating-point"):
        records.encode_record(Kind.NOTE, WID, value=1.5, authority=3, type="message")


# ---------------------------------------------------------------------------------------------
# Strict decoding

BASE = {
    Kind.PUT: {0: 1, 1: 1, 2: WID, 3: SALT, 4: "user/x", 5: "v", 6: 3, 14: 1, 15: "fact"},
    Kind.DEL: {0: 1, 1: 2, 2: WID, 3: SALT, 4: "user/x", 7: [RID[0]], 14: 1},
    Kind.NOTE: {0: 1, 1: 3, 2: WID, 3: SALT, 5: "v", 6: 3, 14: 1, 15: "message"},
    Kind.CONFIRM: {0: 1, 1: 4, 2: WID, 3: SALT, 10: RID[0], 13: SIG, 14: 1},
    Kind.GENESIS: {0: 1, 1: 16, 2: WID, 3: SALT, 12: {0: 1}, 13: SIG, 14: 1},
}


def rec_bytes(kind: Kind, **changes) -> bytes:
    m = dict(BASE[kind])
    for k, v in changes.items():
        idx = int(k[1:])
        if v is ...:
            m.pop(idx, None)
        else:
            m[idx] = v
    return encoding.encode(m)


@pytest.mark.parametrize("kind", list(BASE))
def test_base_maps_are_valid(kind):
    records.decode_record(rec_bytes(kind))


BOOL_CONFUSION = pytest.mark.regression  # was a bug found by fuzzing; fixed


@pytest.mark.parametrize(
    "kind, changes, message",
    [
        # version
        (Kind.PUT, {"f0": 0}, "version must be 1"),
        (Kind.PUT, {"f0": 0}, "version must be 1"),
        (Kind.PUT, {"f0": ...}, "version must be 1"),
        (Kind.PUT, {"f0": "1"}, "version must be 1"),
        pytest.param(Kind.PUT, {"f0": True}, "version must be 1", marks=BOOL_CONFUSION),
        # kind / author / salt
        (Kind.PUT, {"f1": ...}, "kind must be"),
        (Kind.PUT, {"f1": -1}, "kind must be"),
        (Kind.PUT, {"f1": 2**16}, "kind must be"),
        (Kind.PUT, {"f1": True}, "kind must be"),
        (Kind.PUT, {"f1": "PUT"}, "kind must be"),
        (Kind.PUT, {"f2": WID[:31]}, "author must be"),
        (Kind.PUT, {"f2": ...}, "author must be"),
        (Kind.PUT, {"f2": WID.hex()}, "author must be"),
        (Kind.PUT, {"f3": SALT[:15]}, "salt must be 16 bytes"),
        (Kind.PUT, {"f3": ...}, "salt must be 16 bytes"),
        # required fields per kind
        (Kind.PUT, {"f4": ...}, "PUT record lacks field(s) [4]"),
        (Kind.PUT, {"f5": ...}, "PUT record lacks field(s) [5]"),
        (Kind.PUT, {"f6": ...}, "PUT record lacks field(s) [6]"),
        (Kind.PUT, {"f15": ...}, "PUT record lacks field(s) [15]"),
        (Kind.DEL, {"f7": ...}, "DEL record lacks"),
        (Kind.DEL, {"f7": []}, "must name what it deletes"),
        (Kind.NOTE, {"f15": ...}, "NOTE record lacks"),
        (Kind.NOTE, {"f5": ...}, "NOTE record lacks"),
        (Kind.CONFIRM, {"f13": ...}, "CONFIRM record lacks field(s) [13]"),
        (Kind.CONFIRM, {"f10": ...}, "CONFIRM record lacks field(s) [10]"),
        (Kind.GENESIS, {"f12": ...}, "GENESIS record lacks"),
        (Kind.GENESIS, {"f13": ...}, "GENESIS record lacks"),
        # key shapes
        (Kind.PUT, {"f4": "nouser"}, "must look like"),
        (Kind.PUT, {"f4": "user/"}, "must look like"),
        (Kind.PUT, {"f4": "/user"}, "must look like"),
        (Kind.PUT, {"f4": " user/x"}, "must look like"),
        (Kind.PUT, {"f4": "user/x "}, "must look like"),
        (Kind.PUT, {"f4": "user/x\n"}, "must look like"),
        (Kind.PUT, {"f4": "user/\x00x"}, "must look like"),
        (Kind.PUT, {"f4": "user/\x7fx"}, "must look like"),
        (Kind.PUT, {"f4": "user/\u200bx"}, "must look like"),  # zero-width space (Cf)
        (Kind.PUT, {"f4": "user/\u202ex"}, "must look like"),  # right-to-left override
        (Kind.PUT, {"f4": "user/e\u0301"}, "not in Unicode NFC"),
        (Kind.PUT, {"f4": "user/" + "a" * 508}, "longer than 512 bytes"),
        (Kind.PUT, {"f4": "user/" + "\u00e9" * 254}, "longer than 512 bytes"),
        (Kind.PUT, {"f4": ""}, "non-empty"),
        (Kind.PUT, {"f4": b"user/x"}, "key must be text"),
        # class
        (Kind.PUT, {"f6": 4}, "class must be 0..3"),
        (Kind.PUT, {"f6": -1}, "class must be 0..3"),
        (Kind.PUT, {"f6": True}, "class must be 0..3"),
        (Kind.PUT, {"f6": "user"}, "class must be 0..3"),
        # pred / sources
        (Kind.DEL, {"f7": [SORTED_RID[1], SORTED_RID[0]]}, "pred must be sorted"),
        (Kind.DEL, {"f7": [RID[0], RID[0]]}, "pred must be sorted"),
        (Kind.DEL, {"f7": [RID[0][:31]]}, "not a 32-byte id"),
        (Kind.DEL, {"f7": [RID[0].hex()]}, "not a 32-byte id"),
        (Kind.DEL, {"f7": RID[0]}, "pred must be a list"),
        (Kind.DEL, {"f7": sorted(sha256(i.to_bytes(4, "big")) for i in range(4097))}, "at most 4096"),
        (Kind.PUT, {"f8": [SORTED_RID[1], SORTED_RID[0]]}, "sources must be sorted"),
        # sigs
        (Kind.CONFIRM, {"f13": []}, "non-empty list"),
        (Kind.CONFIRM, {"f13": SIG * 17}, "at most 16"),
        (Kind.CONFIRM, {"f13": SIG[0]}, "each signature"),
        (Kind.CONFIRM, {"f13": [[WID, 1]]}, "each signature"),
        (Kind.CONFIRM, {"f13": [[WID, 1, b"s", b"x"]]}, "each signature"),
        (Kind.CONFIRM, {"f13": [[WID[:31], 1, b"s"]]}, "each signature"),
        (Kind.CONFIRM, {"f13": [[WID, "1", b"s"]]}, "each signature"),
        (Kind.CONFIRM, {"f13": [[WID, 1, "sig"]]}, "each signature"),
        (Kind.CONFIRM, {"f13": "sig"}, "non-empty list"),
        # other typed fields
        (Kind.DEL, {"f9": 1}, "erase must be true or false"),
        (Kind.CONFIRM, {"f10": RID[0][:16]}, "target must be"),
        (Kind.PUT, {"f11": {1: "x"}}, "meta must be a map with text keys"),
        (Kind.PUT, {"f11": ["x"]}, "meta must be a map"),
        (Kind.PUT, {"f11": {"a": -1}}, "meta values"),
        (Kind.PUT, {"f11": {"a": None}}, "meta values"),
        (Kind.PUT, {"f11": {"a": [1]}}, "meta values"),
        (Kind.GENESIS, {"f12": {"a": 1}}, "body must be a map with integer keys"),
        (Kind.GENESIS, {"f12": [1]}, "body must be a map"),
        (Kind.PUT, {"f14": -1}, "ts must be"),
        (Kind.PUT, {"f14": True}, "ts must be"),
        (Kind.PUT, {"f14": "now"}, "ts must be"),
        (Kind.PUT, {"f15": ""}, "type must be a short text"),
        (Kind.PUT, {"f15": "x" * 129}, "type must be a short text"),
        (Kind.PUT, {"f15": 1}, "type must be a short text"),
    ],
)
def test_decode_rejects(kind, changes, message):
    raw = rec_bytes(kind, **changes)
    with pytest.raises(CanonicalError) as exc_info:
        records.decode_record(raw)
    assert message in str(exc_info.value), exc_info.value


@pytest.mark.parametrize("value", [[1], 1, "record", b"x", None, {"a": 1}])
def test_record_must_be_a_map(value):
    with pytest.raises(CanonicalError):
        records.decode_record(encoding.encode(value))


def test_record_size_limit():
    with pytest.raises(CanonicalError, match="larger than"):
        records.decode_record(b"\x00" * (records.RECORD_MAX_BYTES + 1))


def test_record_bytes_not_matching_expected_id():
    raw = rec_bytes(Kind.PUT)
    with pytest.raises(DamagedFile, match="do not hash to the id") as exc_info:
        records.decode_record(raw, expected_id=RID[0])
    assert type(exc_info.value) is DamagedFile
    # checked before parsing: garbage with the wrong id is reported as an id mismatch too
    with pytest.raises(DamagedFile, match="do not hash"):
        records.decode_record(b"\xff", expected_id=RID[0])


def test_non_canonical_record_bytes():
    raw = rec_bytes(Kind.PUT)
    assert raw[0] == 0xA9  # a map of 9
    # the same map with a non-shortest version integer
    bad = raw[:1] + b"\x00\x18\x01" + raw[3:]
    with pytest.raises(CanonicalError, match="not deterministic"):
        records.decode_record(bad)


def _mutate(data: bytes, ops) -> bytes:
    buf = bytearray(data)
    for op, pos, byte in ops:
        if op == "insert":
            buf.insert(pos % (len(buf) + 1), byte)
        elif buf and op == "flip":
            buf[pos % len(buf)] ^= byte or 1
        elif buf:
            del buf[pos % len(buf)]
    return bytes(buf)


_ops = st.lists(
    st.tuples(st.sampled_from(["flip", "insert", "delete"]), st.integers(0, 10**6), st.integers(0, 255)),
    min_size=1,
    max_size=3,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(list(BASE)), ops=_ops)
def test_mutated_records_only_raise_vault_errors(kind, ops):
    data = _mutate(rec_bytes(kind), ops)
    try:
        rec = records.decode_record(data)
    except (CanonicalError, UnsupportedVersion):
        return
    assert encoding.encode(rec.fields) == data


# ---------------------------------------------------------------------------------------------
# Authority, type names and keys


@pytest.mark.parametrize(
    "text, expected",
    [
        ("user", Authority.USER),
        ("USER", Authority.USER),
        (" Observed ", Authority.OBSERVED),
        ("inferred", Authority.INFERRED),
        ("external", Authority.EXTERNAL),
        (3, Authority.USER),
        (0, Authority.EXTERNAL),
        (Authority.OBSERVED, Authority.OBSERVED),
    ],
)
def test_authority_parse(text, expected):
    assert Authority.parse(text) is expected


@pytest.mark.parametrize("text", ["bogus", "", "users", "3", "user class"])
def test_authority_parse_rejects(text):
    with pytest.raises(UsageError, match="unknown authority class"):
        Authority.parse(text)


@pytest.mark.parametrize("value", [7, -1, 1.5])
def test_authority_parse_rejects_out_of_range_numbers_with_usage_error(value):
    with pytest.raises(UsageError):
        Authority.parse(value)


def test_authority_labels():
    assert [a.label for a in Authority] == ["external", "inferred", "observed", "user"]
    assert max(Authority) is Authority.USER


@pytest.mark.parametrize(
    "name", [*records.STANDARD_TYPES, "com.example/bookmark", "org.x-y/a_b.c", "io.github.me/todo/item"]
)
def test_check_type_name_accepts(name):
    records.check_type_name(name)


@pytest.mark.parametrize(
    "name",
    ["bogus", "", "Message", "com/bookmark", "com.example/", "/bookmark", "com.example/a b", "com.example/a\n",
     "com.example/" + "a" * 120, "com.example/a;b"],
)
def test_check_type_name_rejects(name):
    with pytest.raises(UsageError):
        records.check_type_name(name)


@pytest.mark.parametrize("key", ["user/home_city", "a/b", "user/a/b", "projekt/größe", "user/" + "a" * 507])
def test_check_key_accepts(key):
    records.check_key(key)


@pytest.mark.parametrize(
    "key, error",
    [
        ("", UsageError),
        ("nouser", UsageError),
        ("/x/", UsageError),
        ("user/x\t", UsageError),
        ("user/e\u0301", UsageError),
        ("user/" + "a" * 508, LimitExceeded),
    ],
)
def test_check_key_rejects(key, error):
    with pytest.raises(error):
        records.check_key(key)


@settings(max_examples=100)
@given(fact_keys)
def test_generated_keys_are_valid(key):
    records.check_key(key)


# ---------------------------------------------------------------------------------------------
# Batches


def _raws(n: int = 2) -> list[bytes]:
    return [records.encode_record(Kind.NOTE, WID, value=f"v{i}", authority=3, type="message", ts=1) for i in range(n)]


def make(
    raws: list[bytes] | None = None,
    *,
    seq: int = 1,
    prev: bytes | None = None,
    deps: tuple[bytes, ...] = (),
    frontier: dict | None = None,
    sig_algs: tuple[int, ...] = (1,),
    signer: SigningKey = SIGNER,
) -> Batch:
    raws = _raws() if raws is None else raws
    wid = ids.writer_id(signer.alg, signer.public)
    header = BatchHeader(
        VAULT, CID, wid, seq, prev, deps, {wid: seq - 1} if frontier is None else frontier,
        tuple(ids.record_id(r) for r in raws), 1_700_000_000, sig_algs,
    )
    return records.make_batch(header, raws, signer)


def reparse(batch: Batch) -> Batch:
    return records.batch_from_cbor(encoding.decode(encoding.encode(batch.to_cbor())))


def test_batch_round_trip():
    b = make(_raws(3), seq=5, prev=RID[0], deps=tuple(SORTED_RID[:3]), frontier={WID: 4, OTHER_WID: 9})
    again = reparse(b)
    assert again.id == b.id == ids.batch_id(b.header_bytes)
    assert again.header == b.header
    assert again.header_bytes == b.header_bytes
    assert again.sigs == b.sigs and again.records == b.records
    assert records.verify_batch_signature(again, SIGNER.public)
    for raw, rid in zip(again.records, again.header.records):
        records.decode_record(raw, expected_id=rid)


def test_decoded_headers_without_heads_share_one_empty_map():
    """A cold open keeps a header of every batch: those without heads (all but control batches'), decoded
    here or rebuilt from what the record-check child sent, hold one empty map, not one each."""
    first, second = reparse(make(_raws(2))), reparse(make(_raws(3), seq=2, prev=RID[0]))
    child = marshal.loads(marshal.dumps(records.header_parts(second.header)))  # noqa: S302 - its own bytes
    rebuilt = records.checked_batch(second.id, [second.header_bytes, list(second.sigs), list(second.records)], child)
    assert rebuilt.header == second.header
    assert first.header.heads == {} and first.header.heads is second.header.heads is rebuilt.header.heads


def test_batch_with_erased_record_still_verifies():
    b = make(_raws(3))
    erased = records.batch_from_cbor([b.header_bytes, [list(s) for s in b.sigs], [b.records[0], None, b.records[2]]])
    assert erased.records[1] is None and erased.id == b.id
    assert records.verify_batch_signature(erased, SIGNER.public)


def test_batch_signature_wrong_key():
    assert not records.verify_batch_signature(make(), OTHER.public)
    # signed by OTHER but claiming SIGNER's writer id
    b = make()
    forged = Batch(b.id, b.header_bytes, b.header, ((1, OTHER.sign(records.batch_signing_message(b.id))),), b.records)
    assert not records.verify_batch_signature(forged, SIGNER.public)
    assert not records.verify_batch_signature(forged, OTHER.public)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 63), st.integers(1, 255))
def test_batch_signature_flipped(i, mask):
    b = make()
    sig = bytearray(b.sigs[0][1])
    sig[i] ^= mask
    bad = reparse(Batch(b.id, b.header_bytes, b.header, ((1, bytes(sig)),), b.records))
    assert not records.verify_batch_signature(bad, SIGNER.public)


def test_batch_signature_of_another_batch():
    a, b = make(_raws(1)), make(_raws(1))
    swapped = Batch(b.id, b.header_bytes, b.header, a.sigs, b.records)
    assert not records.verify_batch_signature(swapped, SIGNER.public)


def test_batch_signatures_stripped():
    b = make()
    assert not records.verify_batch_signature(Batch(b.id, b.header_bytes, b.header, (), b.records), SIGNER.public)
    with pytest.raises(CanonicalError, match="1 to 4 signatures"):
        records.batch_from_cbor([b.header_bytes, [], list(b.records)])
    # the header promises Ed25519 and ML-DSA-65; only the Ed25519 signature is present
    both = make(sig_algs=(1, 2))
    assert not records.verify_batch_signature(both, SIGNER.public, (1, 2))


def threads_verifying(monkeypatch):
    """The threads records.verify_batch_signature runs on from here (a set that fills), and the real one."""
    threads: set[int] = set()
    real = records.verify_batch_signature

    def counted(batch, public, *rest):
        threads.add(threading.get_ident())
        return real(batch, public, *rest)

    monkeypatch.setattr(records, "verify_batch_signature", counted)
    return threads, real


def test_many_batch_signatures_are_verified_on_every_core_with_the_verdicts_of_one_by_one(monkeypatch):
    """verify_batch_signatures: from PARALLEL_SIGNATURES batches on, on a pool of threads (Ed25519
    releases the interpreter lock), each verdict the one verify_batch_signature gives alone."""
    good = [make(_raws(1), seq=i + 1) for i in range(records.PARALLEL_SIGNATURES + 8)]
    b = good[5]
    sig = bytearray(b.sigs[0][1])
    sig[3] ^= 1
    flipped = Batch(b.id, b.header_bytes, b.header, ((1, bytes(sig)),), b.records)
    pairs = [(x, SIGNER.public) for x in good] + [(flipped, SIGNER.public), (good[0], OTHER.public)]
    pairs += [(make(sig_algs=(1, 2)), SIGNER.public)]
    threads, real = threads_verifying(monkeypatch)
    assert records.verify_batch_signatures(pairs) == [real(x, pk) for x, pk in pairs]
    assert records.verify_batch_signatures(pairs)[-3:] == [False, False, False]
    if (os.cpu_count() or 1) > 1:
        assert len(threads) > 1, "verified on one thread"


def test_a_roster_over_many_new_batches_signs_each_good_one_and_not_the_forged_one(monkeypatch):
    """The roster's builder verifies the new plain batches of writers it knows together
    (verify_batch_signatures) before its pass over them: each good one is signed, a forged one is
    not and is reported, and the roster is the one a verification one by one gives."""
    from camillo.control import BatchView, build_roster

    from tests.conformance.control_vectors import RosterCase

    case = RosterCase("many signatures")
    case.batch(case.D, "control", [case.genesis])
    plain = [case.batch(case.D, "personal", [records.encode_record(Kind.NOTE, case.D.writer_id, value=f"note {i}",
                                                                   authority=3, type="message", ts=1)])
             for i in range(records.PARALLEL_SIGNATURES + 4)]
    bad = plain[7]
    sig = bytearray(bad.sigs[0][1])
    sig[0] ^= 0x40
    forged = Batch(bad.id, bad.header_bytes, bad.header, ((1, bytes(sig)),), bad.records)

    def roster():
        views = {}
        for _, x in case.batches:
            x = forged if x.id == bad.id else x
            recs = [records.decode_record(raw, expected_id=rid) for rid, raw in zip(x.header.records, x.records)]
            views[x.id] = BatchView(x, f"segment {x.id.hex()[:8]}", bytes(16),
                                    [r if r.is_control else None for r in recs])
        r, signed = build_roster(case.vault_id, views)
        return r, signed, {bid for bid, v in views.items() if v.sig_ok}

    threads, real = threads_verifying(monkeypatch)
    together, signed, ok = roster()
    assert len(threads) > (1 if (os.cpu_count() or 1) > 1 else 0), "the plain batches were not verified together"
    assert signed == {x.id for _, x in case.batches} - {bad.id}
    assert ok == signed
    # said, not only excluded (the round that excludes it starts with no problems of its own)
    assert ("signature", f"segment {bad.id.hex()[:8]}",
            f"batch {bad.id.hex()[:12]} has a signature that does not verify") in together.problems
    monkeypatch.setattr(records, "PARALLEL_SIGNATURES", 10**9)
    alone = roster()
    assert (together.problems, together.excluded, together.principals, signed, ok) == (
        alone[0].problems, alone[0].excluded, alone[0].principals, alone[1], alone[2])


def test_batch_sig_algs_mismatch():
    both = make(sig_algs=(1, 2))
    assert not records.verify_batch_signature(both, SIGNER.public)  # certificate lists (1,) only
    assert not records.verify_batch_signature(make(), SIGNER.public, (1, 2))
    assert not records.verify_batch_signature(make(sig_algs=(2,)), SIGNER.public, (2,))
    # a reserved-algorithm signature that happens to be present is still not accepted
    b = make(sig_algs=(1, 2))
    with_mldsa = Batch(b.id, b.header_bytes, b.header, (*b.sigs, (2, b.sigs[0][1])), b.records)
    assert not records.verify_batch_signature(with_mldsa, SIGNER.public, (1, 2))


def _header_map(**changes) -> dict:
    m = {
        H.V: 1, H.VAULT: VAULT, H.COMPARTMENT: CID, H.WRITER: WID, H.SEQ: 1, H.PREV: None, H.DEPS: [],
        H.FRONTIER: {WID: 0}, H.RECORDS: [RID[0]], H.TS: 1, H.SIG_ALGS: [1],
    }
    for k, v in changes.items():
        idx = int(k[1:])
        if v is ...:
            m.pop(idx, None)
        else:
            m[idx] = v
    return m


def _batch_item(header: dict | bytes, *, sigs=None, recs=None) -> list:
    hb = header if isinstance(header, bytes) else encoding.encode(header)
    n = len(header[H.RECORDS]) if isinstance(header, dict) and isinstance(header.get(H.RECORDS), list) else 1
    return [hb, [[1, b"\x00" * 64]] if sigs is None else sigs, [b"r"] * n if recs is None else recs]


def test_header_map_helper_is_valid():
    records.batch_from_cbor(_batch_item(_header_map()))


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"h4": 1, "h5": RID[0]}, "seq 1) must have prev = null"),
        ({"h4": 2, "h5": None, "h7": {WID: 1}}, "must name its prev"),
        ({"h4": 2, "h5": RID[0][:31], "h7": {WID: 1}}, "must name its prev"),
        ({"h7": {WID: 1}}, "own writer at seq - 1"),
        ({"h7": {OTHER_WID: 0}}, "own writer at seq - 1"),
        ({"h7": {}}, "own writer at seq - 1"),
        ({"h4": 3, "h5": RID[0], "h7": {WID: 1}}, "own writer at seq - 1"),
        ({"h6": sorted(sha256(i.to_bytes(2, "big")) for i in range(65))}, "more than 64 deps"),
        ({"h6": [SORTED_RID[1], SORTED_RID[0]]}, "deps must be sorted"),
        ({"h6": [RID[0], RID[0]]}, "deps must be sorted"),
        ({"h8": [RID[0], RID[0]]}, "same record twice"),
        ({"h8": []}, "1 to 100000 records"),
        ({"h8": [RID[0][:31]]}, "not a 32-byte id"),
        ({"h4": 0}, "malformed"),
        ({"h4": 2**63}, "malformed"),
        ({"h4": True}, "wrong type"),
        ({"h4": ...}, "seq is missing"),
        ({"h1": VAULT[:31]}, "malformed"),
        ({"h2": CID + b"\x00"}, "malformed"),
        ({"h3": WID[:16]}, "malformed"),
        ({"h3": ...}, "writer_id is missing"),
        ({"h0": 0}, "version 1"),
        ({"h0": ...}, "version 1"),
        ({"h10": []}, "sig_algs must list"),
        ({"h10": ["ed25519"]}, "sig_algs must list"),
        ({"h10": [True]}, "sig_algs must list"),
        ({"h10": 1}, "sig_algs is missing"),
        ({"h9": ...}, "ts is missing"),
        ({"h9": "now"}, "ts is missing"),
        ({"h7": {WID: 0, OTHER_WID: -1}}, "frontier entries"),
        ({"h7": {WID: 0, OTHER_WID: "1"}}, "frontier entries"),
        ({"h7": {WID: 0, b"short": 1}}, "frontier entries"),
        ({"h7": {WID: 0, **{sha256(i.to_bytes(2, "big")): 1 for i in range(1024)}}}, "more than 1024 writers"),
        ({"h7": [WID, 0]}, "frontier is missing"),
        ({"h6": None}, "deps is missing"),
    ],
)
def test_batch_header_rules(changes, message):
    with pytest.raises(CanonicalError) as exc_info:
        records.batch_from_cbor(_batch_item(_header_map(**changes)))
    assert message in str(exc_info.value), exc_info.value


@pytest.mark.parametrize(
    "item, message",
    [
        ([], "a batch is [header, sigs, records]"),
        ("batch", "a batch is [header, sigs, records]"),
        ([b"", [], [], []], "a batch is [header, sigs, records]"),
        (["header", [[1, b""]], [b"r"]], "header bytes"),
        (_batch_item(_header_map(), recs=[]), "different number of records"),
        (_batch_item(_header_map(), recs=[b"r", b"s"]), "different number of records"),
        (_batch_item(_header_map(), recs=[1]), "byte strings or null"),
        (_batch_item(_header_map(), recs=["r"]), "byte strings or null"),
        (_batch_item(_header_map(), sigs=[]), "1 to 4 signatures"),
        (_batch_item(_header_map(), sigs=[[1, b""]] * 5), "1 to 4 signatures"),
        (_batch_item(_header_map(), sigs=[[1]]), "[alg, signature]"),
        (_batch_item(_header_map(), sigs=[["1", b""]]), "[alg, signature]"),
        (_batch_item(_header_map(), sigs=[[True, b""]]), "[alg, signature]"),
        (_batch_item(_header_map(), sigs=[[1, "sig"]]), "[alg, signature]"),
        (_batch_item(_header_map(), sigs=[b"sig"]), "[alg, signature]"),
        (_batch_item(b"\xff"), "not valid CBOR"),
        (_batch_item(b"\xa1\x00\x18\x01"), "not deterministic"),
        (_batch_item(encoding.encode([1])), "map with version 1"),
    ],
)
def test_batch_structure_rules(item, message):
    with pytest.raises(CanonicalError) as exc_info:
        records.batch_from_cbor(item)
    assert message in str(exc_info.value), exc_info.value


def test_make_batch_size_limit():
    big = [b"x" * (3 * 1024 * 1024) for _ in range(3)]
    header = BatchHeader(VAULT, CID, WID, 1, None, (), {WID: 0}, tuple(sha256(r + bytes([i])) for i, r in enumerate(big)), 1)
    with pytest.raises(LimitExceeded, match="limited to"):
        records.make_batch(header, big, SIGNER)


def test_every_batch_make_batch_produces_is_readable():
    raws = _raws(4097)
    try:
        b = make(raws)
    except LimitExceeded:
        return  # refusing to write it would be fine too
    assert len(reparse(b).records) == 4097


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=_ops)
def test_mutated_batches_only_raise_canonical_errors(ops):
    data = _mutate(encoding.encode(_BATCH.to_cbor()), ops)
    try:
        item = encoding.decode(data)
    except CanonicalError:
        return
    try:
        b = records.batch_from_cbor(item)
    except (CanonicalError, UnsupportedVersion):  # a version above 1 is named as such (spec §8.2)
        return
    # Accepted: only if the signature still verifies may it be the original batch.
    if records.verify_batch_signature(b, SIGNER.public):
        assert b.header_bytes == _BATCH.header_bytes


_BATCH = make(_raws(2), seq=3, prev=RID[1], deps=(SORTED_RID[0],), frontier={WID: 2, OTHER_WID: 1})


def test_cached_batch_rebuilds_what_was_stored():
    b = make(_raws(3))
    bare = records.cached_batch(b.id, b.header_bytes, [list(x) for x in b.sigs])
    assert bare.id == b.id and bare.header == b.header and bare.sigs == b.sigs
    assert bare.records == (None, None, None)
    assert records.verify_batch_signature(bare, SIGNER.public)
    with_heads = encoding.encode(_header_map(h11={CID: {WID: 4}}))
    assert records.cached_batch(b.id, with_heads, []).header.heads == {CID: {WID: 4}}
    # what this installation never stored (a field missing, a wrong type) is refused, so the local
    # state is rebuilt
    with pytest.raises(KeyError):
        records.cached_batch(b.id, encoding.encode(_header_map(**{f"h{int(H.FRONTIER)}": ...})), [[1, b""]])
    with pytest.raises(TypeError):
        records.cached_batch(b.id, encoding.encode(_header_map(**{f"h{int(H.FRONTIER)}": [1]})), [[1, b""]])


def test_batch_errors_are_vault_errors():
    assert issubclass(CanonicalError, VaultError)


def test_newer_record_and_batch_versions_say_a_newer_camillo_is_required():
    m = encoding.decode(rec_bytes(Kind.NOTE))
    m[0] = 2
    with pytest.raises(UnsupportedVersion, match="newer Camillo"):
        records.decode_record(encoding.encode(m))
