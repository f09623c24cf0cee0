"""Property-based fuzzing of ``camillo add`` (issue 15, item 5): arbitrary JSON lines and arbitrary
bytes on standard input end in exit 0 (everything added) or exit 2 (one sentence naming the line,
nothing added), never "internal error", a traceback or "damaged vault".  A refused batch leaves every
file of the vault as it was (compared byte for byte); an accepted one prints one id per line.

The lines are records shaped like the real ones, with each field drawn from valid values and from
the edges of the format: nesting around the 64-level limit and far beyond it, integers and times
around ±2^64, lone surrogates (as JSON escapes and as raw bytes), 4096 and 4097 ``pred`` or
``sources``, wrong types, unknown fields, floats, NaN; and plain bytes.  The same contract holds
from an agent's grant (which may also refuse with exit 5) and with ``--compartment``.

``camillo.cli.main`` runs in this process for speed; a few inputs also go through a real process.
Derandomized in CI (:func:`tests.fuzz.fuzzlib.hypothesis_settings`).  Runs on pytest's main thread.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from camillo import Unlock, Vault
from camillo.values import STANDARD_TYPES
from hypothesis import given
from hypothesis import strategies as st

from ..core.helpers import cli, snapshot
from . import fuzzlib
from .fuzzlib import hypothesis_settings

PASSPHRASE = "fuzz add passphrase"
IDS = [f"{i:064x}" for i in range(4097)]

# -- strategies ----------------------------------------------------------------------------------

ints = st.one_of(
    st.integers(-(2**64) - 2, 2**64 + 1),
    st.integers(-(2**20), 2**20),
    st.sampled_from([2**64 - 1, 2**64, -(2**64), -(2**64) - 1, 2**63, 2**70, -(2**100), 10**40]),
)
texts = st.one_of(
    st.text(max_size=24),
    st.text(st.characters(exclude_categories=()), max_size=8),  # lone surrogates included
    st.sampled_from(["\ud800", "a\udfffb", "\ud83d\ude00", "\x00", "\u202eevil", "e\u0301", "x" * 600]),
)
scalars = st.one_of(st.none(), st.booleans(), ints, st.floats(), texts)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(texts, inner, max_size=4)), max_leaves=10)
keys = st.one_of(st.sampled_from(["user/home_city", "user/food", "work/role", "a/b", "", "nokey", "/x", "user/e\u0301",
                                  "user/" + "k" * 600, "user/\ud800", "\n", "user/a\nb", "user/\u202e"]), texts,
                 values)
types = st.one_of(st.sampled_from([*STANDARD_TYPES, "note", "", "com.example/bookmark", "com.example/" + "t" * 200,
                                   "x\ud800", "x\n", "com.example/a\nb"]), values)
id_lists = st.one_of(
    st.lists(st.one_of(st.sampled_from(IDS[:4]), st.text(max_size=66), values), max_size=4),
    st.sampled_from([IDS[:4096], IDS, IDS[:1] * 5000, []]),
    values,
)
metas = st.one_of(st.dictionaries(texts, st.one_of(texts, ints, st.booleans(), values), max_size=3), values)
HOSTILE_FIELDS = {
    "type": types, "key": keys, "value": values, "text": texts, "conversation": texts, "title": texts,
    "role": st.one_of(st.sampled_from(["user", "assistant", "tool"]), values),
    "class": st.one_of(st.sampled_from(["user", "observed", "inferred", "external", "god", 3, 9]), values),
    "sources": id_lists, "pred": id_lists, "meta": metas, "ts": st.one_of(ints, values), "surprise": values,
}
hostile_records = st.fixed_dictionaries({"type": types},
                                        optional={k: v for k, v in HOSTILE_FIELDS.items() if k != "type"})
plain_text = st.text(st.characters(exclude_categories=("Cs",)), max_size=24)
plain_values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-(2**64), 2**64 - 1), plain_text),
                            lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                    st.dictionaries(plain_text, inner, max_size=3)), max_leaves=6)
valid_records = st.one_of(
    st.fixed_dictionaries({"type": st.just("message"), "text": plain_text},
                          optional={"conversation": plain_text, "role": st.sampled_from(["user", "assistant", "tool"]),
                                    "ts": st.integers(0, 2**64 - 1)}),
    st.fixed_dictionaries({"type": st.sampled_from(["fact", "preference", "instruction"]),
                           "key": st.sampled_from(["user/home_city", "user/food", "work/role", "a/b"]),
                           "value": plain_values.filter(lambda v: v is not None)},
                          optional={"class": st.sampled_from(["inferred", "external", "observed"]),
                                    "sources": st.lists(st.sampled_from(IDS[:8]), max_size=3),
                                    "meta": st.dictionaries(plain_text, st.one_of(plain_text, st.booleans()), max_size=2)}),
    st.fixed_dictionaries({"type": st.sampled_from(["event", "decision", "summary", "com.example/bookmark"]),
                           "value": plain_values}),
)


@st.composite
def records(draw) -> object:
    """A valid record, a valid record with one field made hostile, or a hostile record."""
    kind = draw(st.sampled_from(["valid", "valid", "one-field", "one-field", "hostile"]))
    if kind == "hostile":
        return draw(hostile_records)
    record = dict(draw(valid_records))
    if kind == "one-field":
        name = draw(st.sampled_from(sorted(HOSTILE_FIELDS)))
        record[name] = draw(HOSTILE_FIELDS[name])
    return record


@st.composite
def json_line(draw) -> bytes:
    """One line: a record-shaped object (or any JSON value), as ASCII escapes or raw UTF-8 (a lone
    surrogate then becomes bytes that are not UTF-8), sometimes with a value nested N levels."""
    obj = draw(st.one_of(records(), records(), records(), values))
    if isinstance(obj, dict) and draw(st.integers(0, 4)) == 0:  # nesting around the limit and far beyond
        n = draw(st.one_of(st.integers(60, 68), st.integers(400, 1200)))
        obj["value"] = "\x00DEEP\x00"
        deep = "[" * n + "]" * n if draw(st.booleans()) else '{"a":' * n + "1" + "}" * n
        return json.dumps(obj).replace('"\\u0000DEEP\\u0000"', deep).encode()
    text = json.dumps(obj, ensure_ascii=draw(st.booleans()))
    return text.encode("utf-8", "surrogatepass")


json_input = st.lists(json_line(), max_size=4).map(b"\n".join)
any_input = st.one_of(
    st.binary(max_size=200),
    st.lists(st.one_of(json_line(), st.binary(max_size=40)), max_size=4).map(b"\n".join),
)

# -- the contract ----------------------------------------------------------------------------------


@pytest.fixture
def vault(tmp_path, monkeypatch):
    """A vault with a write grant on personal and work; the passphrase in the environment."""
    monkeypatch.setenv("CAMILLO_PASSPHRASE", PASSPHRASE)
    path = str(tmp_path / "vault")
    v, _ = Vault.create(path, PASSPHRASE, device_name="fuzz laptop")
    with v:
        v.create_grant("fuzzer", {"personal": "write", "work": "write"}, str(tmp_path / "fuzzer.grant"))
    with Vault.open(path, Unlock.grant(str(tmp_path / "fuzzer.grant"))):
        pass  # whatever a grant's first open leaves, before any comparison
    return path


def check_add(vault: str, data: bytes, *extra: str, allowed: tuple[int, ...] = (0, 2)) -> int:
    """Run ``camillo add`` on ``data`` and hold it to the contract; return the exit code."""
    before = snapshot(vault)
    code, out, err = cli("add", vault, *extra, stdin=data)
    fuzzlib.INPUTS["cli-add"] += 1
    fuzzlib.OUTCOMES["cli-add"][f"exit {code}"] += 1
    assert code in allowed, f"exit {code}: {err}"
    assert "internal error" not in err and "Traceback" not in err, err
    assert "damaged" not in err and "unsupported vault" not in err, err
    if code == 0:
        lines = [x for x in data.split(b"\n") if x.strip()]
        assert len(out.splitlines()) == len(lines), (out, err)
    else:
        assert err.startswith("camillo: ") and err.count("\n") == 1, err
        assert "nothing was added" in err or "no records on standard input" in err, err
        assert out == ""
        assert snapshot(vault) == before, "a refused batch changed the vault's files"
    return code


@given(data=json_input)
@hypothesis_settings(40)
def test_add_json_lines_is_exit_0_or_2_and_a_refusal_adds_nothing(vault, data):
    check_add(vault, data)


@given(data=any_input)
@hypothesis_settings(40)
def test_add_arbitrary_bytes_is_exit_0_or_2_and_a_refusal_adds_nothing(vault, data):
    check_add(vault, data)


@given(data=json_input, compartment=st.sampled_from(["work", "health"]))
@hypothesis_settings(15)
def test_add_with_a_compartment_keeps_the_contract(vault, data, compartment):
    check_add(vault, data, "--compartment", compartment)


@given(data=any_input, compartment=st.sampled_from(["personal", "work"]))
@hypothesis_settings(20)
def test_add_from_a_grant_keeps_the_contract(vault, data, compartment):
    """An agent's grant may also refuse (exit 5: a class above its maximum); never anything else."""
    grant = os.path.join(os.path.dirname(vault), "fuzzer.grant")
    check_add(vault, data, "--grant", grant, "--compartment", compartment, allowed=(0, 2, 5))


@given(data=any_input)
@hypothesis_settings(3)
def test_add_in_a_real_process_keeps_the_contract(vault, data):
    before = snapshot(vault)
    env = {**os.environ, "CAMILLO_PASSPHRASE": PASSPHRASE}
    proc = subprocess.run([sys.executable, "-m", "camillo.cli", "add", vault], input=data, capture_output=True,
                          env=env, timeout=120)
    err = proc.stderr.decode("utf-8", "replace")
    fuzzlib.INPUTS["cli-add-process"] += 1
    fuzzlib.OUTCOMES["cli-add-process"][f"exit {proc.returncode}"] += 1
    assert proc.returncode in (0, 2), err
    assert "internal error" not in err and "Traceback" not in err, err
    if proc.returncode == 2:
        assert snapshot(vault) == before
