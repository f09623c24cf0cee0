"""Property-based, structure-aware fuzzing: hypothesis rewrites real objects field by field.

For every decoder that reads CBOR, the seed object (a real record, batch, segment payload, slot
statement, envelope payload, pack index, grant map, descriptor, device state, enrollment request or
response) is decoded into its tree, and hypothesis keeps, drops, retypes or replaces each field
with a hostile value (boundary integers, wrong-length byte strings, odd text, nesting), adds unknown
keys, and descends into embedded CBOR byte strings (a batch's header and records).  The result is
encoded deterministically, so the decoder's own field checks are what is exercised, and the
hostile-input contract of :mod:`tests.fuzz.fuzzlib` must hold.  Derandomized in CI.

Runs on pytest's main thread.
"""

from __future__ import annotations

from typing import Any

import cbor2
import pytest
from camillo import encoding
from camillo.errors import CanonicalError
from hypothesis import given
from hypothesis import strategies as st

from .fuzzlib import SEEDS, check, hypothesis_settings, load_dir, raw_encode, rng_for

HOSTILE_SCALARS = st.one_of(
    st.sampled_from([None, True, False, 0, 1, 2**16, 2**31, 2**32, 2**63 - 1, 2**63, 2**64 - 1, -1, -(2**64),
                     b"", bytes(15), bytes(16), bytes(17), bytes(31), bytes(32), bytes(33), bytes(1216),
                     "", "x", "vmem", "vmem-grant", "\u0000", "e\u0301", "x" * 300]),
    st.integers(-(2**64), 2**64 - 1),
    st.binary(max_size=48),
    st.text(max_size=24),
)
HOSTILE = st.recursive(HOSTILE_SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(st.integers(0, 16), inner, max_size=3),
    st.dictionaries(st.text(max_size=6), inner, max_size=3)), max_leaves=8)


def _embedded(value: bytes) -> Any:
    """A byte string that is itself a CBOR map or array (a batch header, a record), or None."""
    if len(value) < 3 or value[0] >> 5 not in (4, 5):
        return None
    try:
        return cbor2.loads(value)
    except Exception:
        return None


@st.composite
def variant(draw, obj: Any, depth: int = 0) -> Any:
    action = draw(st.sampled_from(["keep", "keep", "keep", "replace", "recurse", "recurse"]))
    if action == "keep":
        return obj
    if action == "replace" or depth > 4:
        return draw(HOSTILE)
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            what = draw(st.sampled_from(["keep", "keep", "drop", "vary"]))
            if what == "keep":
                out[k] = v
            elif what == "vary":
                out[k] = draw(variant(v, depth + 1))
        for _ in range(draw(st.integers(0, 2))):
            key = draw(st.one_of(st.integers(0, 20), st.sampled_from(list(obj) or [0])))
            out[key] = draw(HOSTILE)
        return out
    if isinstance(obj, list):
        out = [draw(variant(x, depth + 1)) if draw(st.booleans()) else x for x in obj]
        if out and draw(st.integers(0, 4)) == 0:
            del out[draw(st.integers(0, len(out) - 1))]
        if draw(st.integers(0, 4)) == 0:
            out.append(draw(HOSTILE))
        return out
    if isinstance(obj, bytes):
        inner = _embedded(obj)
        if inner is not None:
            changed = draw(variant(inner, depth + 1))
            try:
                return encoding.encode(changed)
            except CanonicalError:
                return raw_encode(changed, rng_for("embedded"), weird=0.0)
    return draw(HOSTILE)


def _encode(obj: Any) -> bytes:
    try:
        return encoding.encode(obj)
    except CanonicalError:  # outside the profile (mixed keys, huge ints): still valid CBOR
        return raw_encode(obj, rng_for("properties"), weird=0.0)


def _seeds(name: str) -> list[Any]:
    return [cbor2.loads(d) for d in load_dir(SEEDS / name)]


PLAIN = ["descriptor", "record", "batch", "segment-payload", "slot-statement", "envelope-payload", "pack-index",
         "grant-map", "device-state-plain", "installation"]


@pytest.mark.parametrize("name", PLAIN)
@hypothesis_settings(120)
@given(data=st.data())
def test_field_level_variants_of_real_objects(plain, name, data):
    seed = data.draw(st.sampled_from(_seeds(name)), label="seed")
    check(plain[name], _encode(data.draw(variant(seed), label="variant")))


@pytest.mark.parametrize("name", ["enroll-req-plain", "enroll-resp-plain", "grant-vault"])
@hypothesis_settings(40)
@given(data=st.data())
def test_field_level_variants_against_a_real_vault(world, name, data):
    seed = cbor2.loads(data.draw(st.sampled_from(world.seeds(name)), label="seed"))
    check(world.targets()[name], _encode(data.draw(variant(seed), label="variant")))


@hypothesis_settings(150)
@given(st.text(max_size=200))
def test_any_text_as_an_enrollment_code(plain, text):
    check(plain["enroll-code"], text.encode("utf-8", "surrogatepass"))


@hypothesis_settings(150)
@given(st.text(alphabet=st.sampled_from("ABCDEFGHJKMNPQRSTVWXYZ0123456789-*~$=U oilOIL"), min_size=40,
               max_size=70))
def test_typed_code_lookalikes(plain, text):
    check(plain["enroll-code"], text.encode())


@hypothesis_settings(100)
@given(st.lists(st.tuples(st.integers(0, 5), st.text(max_size=80), st.integers(0, 2**64 - 1),
                          st.integers(0, 2**64 - 1)), max_size=6))
def test_arbitrary_pack_index_under_a_correct_checksum(plain, entries):
    """Complements tests/core/test_packs.py (which draws canonical names): any text as a name, and
    offsets and lengths up to 2**64 - 1."""
    check(plain["pack-index"], _encode([list(e) for e in entries]))


def test_the_harness_re_encodes_whatever_cbor2_decoded_from_an_embedded_value() -> None:
    # CI once drew a grant's 32-byte field whose bytes happened to decode as an array holding CBOR's
    # "undefined"; varying it must re-encode that value, not fail the harness.
    value = [b"\x02L\xd7#\x7f\xc1\xb9", cbor2.undefined, cbor2.CBORSimpleValue(99), cbor2.CBORTag(999, 2)]
    assert cbor2.loads(raw_encode(value, rng_for("embedded"), weird=0.0)) == value
