"""Hostile insiders against a whole vault: batches an agent holding a write or append grant (or an
owner device running a broken client) can sign and seal for real, full of generated hostile records,
headers and control statements.  Each must leave a vault that opens, reads and renders (timeline,
facts, search, problems, activity, health, devices, grants, record context, the MCP server's and the
command line's renderings) with the hostile batch at most rejected and named, never a crash, a hang
or a traceback.

Property-based (hypothesis): records and headers are generated, then signed and sealed with the real
keys, so every generated input reaches the roster, the causal log and the materialised state.
Runs on pytest's main thread.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import pytest
from camillo import NewRecord, Unlock, Vault, encoding, ids, segments
from camillo.errors import CanonicalError
from camillo.records import BatchHeader, F, Kind, make_batch, signing_message
from camillo.storage import segment_name
from hypothesis import assume, given
from hypothesis import strategies as st

from . import fuzzlib
from .fuzzlib import hypothesis_settings
from .targets import PASSPHRASE, core_environment

# -- strategies ----------------------------------------------------------------------------------

HUGE = [2**63, 2**64 - 1, 2**62, 2**63 - 1, 2**53, 2**32, 2**31, 0, 1]
HUGE_INTS = st.sampled_from(HUGE)
ints = st.one_of(st.integers(0, 2**16), HUGE_INTS, st.integers(-(2**64), -1))
ids32 = st.one_of(st.binary(min_size=32, max_size=32), st.sampled_from([bytes(32), b"\xff" * 32]))
texts = st.one_of(st.text(max_size=40), st.sampled_from(["user/home_city", "user/e\u0301", "a/b", "../x",
                                                         "\u202eevil", "x" * 600, ""]))
scalars = st.one_of(st.none(), st.booleans(), ints, st.binary(max_size=40), texts)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=8), inner, max_size=4),
        st.dictionaries(st.integers(0, 20), inner, max_size=4),
    ),
    max_leaves=12,
)
bodies = st.dictionaries(st.integers(0, 12), values, max_size=8)
KINDS = [int(k) for k in Kind] + [0, 5, 15, 27, 99, 2**16 - 1]
TYPES = ["message", "conversation", "fact", "preference", "instruction", "summary", "attachment",
         "com.example/bookmark", "x", "a" * 128]


VALID_KEYS = ["user/home_city", "user/food", "work/role", "user/style", f"append/{'0' * 32}/x"]


@st.composite
def hostile_records(draw, author: bytes, known_ids: list[bytes]) -> dict[int, Any]:
    """Mostly records that pass the record checks (so they reach the roster, the log and the state),
    with hostile values, references, metadata, timestamps and unknown fields; sometimes broken."""
    kind = draw(st.sampled_from(KINDS))
    ref = st.one_of(ids32, st.sampled_from(known_ids)) if known_ids else ids32
    m: dict[int, Any] = {F.V: 1, F.KIND: kind, F.AUTHOR: draw(st.one_of(st.just(author), st.just(author), ids32)),
                         F.SALT: draw(st.binary(min_size=16, max_size=16))}
    fields = {
        F.KEY: st.sampled_from(VALID_KEYS),
        F.VALUE: values,
        F.CLASS: st.integers(0, 3),
        F.PRED: st.lists(ref, min_size=1, max_size=4, unique=True).map(sorted),
        F.SOURCES: st.lists(ref, max_size=4, unique=True).map(sorted),
        F.ERASE: st.booleans(),
        F.TARGET: ref,
        F.META: st.dictionaries(st.sampled_from(["import", "source", "frequency", "x"]),
                                st.one_of(texts, st.integers(0, 2**64 - 1), st.booleans(), st.binary(max_size=8)),
                                max_size=3),
        F.BODY: bodies,
        F.TS: st.one_of(HUGE_INTS, st.integers(0, 2**40)),
        F.TYPE: st.sampled_from(TYPES),
    }
    required = {int(Kind.PUT): (F.KEY, F.VALUE, F.CLASS, F.TYPE), int(Kind.NOTE): (F.VALUE, F.CLASS, F.TYPE),
                int(Kind.DEL): (F.PRED,), int(Kind.CONFIRM): (F.TARGET,)}.get(kind, (F.BODY,) if kind >= 16 else ())
    for key in required:
        m[key] = draw(fields[key])
    m[F.TS] = draw(fields[F.TS])
    for key, strategy in fields.items():
        if key not in m and draw(st.integers(0, 4)) == 0:
            m[key] = draw(strategy)
    if draw(st.integers(0, 3)) == 0:
        m[draw(st.integers(16, 40))] = draw(values)  # an unknown field, kept byte for byte
    if draw(st.integers(0, 9)) == 0:  # now and then, break one rule on purpose
        m[draw(st.sampled_from(list(m)))] = draw(values)
    return m


# -- the world -----------------------------------------------------------------------------------


class Insiders:
    """A vault with an owner device, an agent with a write grant and one with an append grant."""

    def __init__(self, root) -> None:
        from camillo.session.grantfile import read_grant_file

        self.root = root
        self.home = root / "home"
        self.path = str(root / "vault")
        with core_environment(self.home):
            v, _ = Vault.create(self.path, PASSPHRASE, device_name="owner", home=str(self.home))
            v.append([NewRecord(type="message", conversation="c1", role="user", text="hello"),
                      NewRecord(type="fact", key="user/home_city", value="Porto")])
            v.append([NewRecord(type="fact", key="work/role", value="engineer")], compartment="work")
            self.grants = {}
            for level in ("write", "append"):
                gpath = str(root / f"{level}.grant")
                v.create_grant(f"agent-{level}", {"work": level}, gpath)
                self.grants[level] = read_grant_file(gpath)[0].credential
            self.owner = v.session.actor
            self.vault_id = v.vault_id
            self.work = v.compartment_id("work")
            epoch = v.session.roster.current_epoch(self.work)
            self.epoch = (epoch.epoch_id, epoch.public)
            self.known_ids = [r.id for r in v.timeline()]
            self.frontier = {}
            self.last = {}
            for (w, c), chain in v.session.log.chains.items():
                if c == self.work and chain:
                    self.frontier[w] = max(chain)
                    self.last[w] = chain[max(chain)]
            self.heads = sorted(v.session.log.heads.get(self.work, set()))
            v.lock()

    def signer(self, who: str):
        return self.owner if who == "owner" else self.grants[who]

    def write_batch(self, who: str, recs: list[dict[int, Any]], header_patch: dict[str, Any], sign_inner: bool
                    ) -> str | None:
        actor = self.signer(who)
        raws = []
        for m in recs:
            try:
                if sign_inner and F.SIGS not in m:
                    m[F.SIGS] = [[actor.writer_id, 1,
                                  actor.signer.sign(signing_message("vmem/v1/control-sig", m, F.SIGS))]]
                raws.append(encoding.encode(m))
            except CanonicalError:
                return None  # outside the CBOR profile: no writer can even encode it
        wid = actor.writer_id
        seq = header_patch.get("seq", self.frontier.get(wid, 0) + 1)  # default: the writer's next batch
        frontier = dict(self.frontier)
        frontier[wid] = seq - 1
        frontier.update(header_patch.get("frontier", {}))
        prev = header_patch.get("prev", self.last.get(wid, b"\x01" * 32))
        header = BatchHeader(self.vault_id, self.work, wid, seq, None if seq == 1 else prev,
                             tuple(header_patch.get("deps", self.heads[-1:])), frontier,
                             tuple(ids.record_id(r) for r in raws), header_patch.get("ts", int(time.time())))
        try:
            batch = make_batch(header, raws, actor.signer)
        except Exception:
            return None
        if header_patch.get("erase_one") and raws:
            from dataclasses import replace

            batch = replace(batch, records=(None, *batch.records[1:]))
        seg = segments.seal_segment(self.vault_id, self.work, *self.epoch, segments.encode_payload([batch]))
        name = segment_name(seg)
        full = os.path.join(self.path, *name.split("/"))
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "wb") as fh:
            fh.write(seg)
        return full

    def read_everything(self) -> dict[str, Any]:
        """Open as the owner and use every reading surface; return what the problems said."""
        from camillo.cli.common import fmt_time as _fmt_time
        from camillo.mcp_server import fact_json, record_json

        with core_environment(self.home):
            v = Vault.open(self.path, Unlock.passphrase(PASSPHRASE), register=False, cache=False,
                           home=str(self.home))
            try:
                views = v.timeline()
                for r in views:
                    json.dumps(r.to_json())
                    json.dumps(record_json(r))
                    _fmt_time(r.ts)
                    v.record_context(r.id)
                for f in v.facts():
                    json.dumps(f.to_json())
                    json.dumps(fact_json(f, detail=True))
                v.conflicts()
                v.inbox()
                v.search("porto")
                v.search("type:fact class:inferred")
                for row in v.activity():
                    _fmt_time(row.ts)
                for g in v.grants():
                    _fmt_time(g.last_used)
                for d in v.devices():
                    _fmt_time(d.last_seen)
                v.health()
                v.sync_status()
                return {"problems": [p.to_json() for p in v.problems()], "records": len(views)}
            finally:
                v.lock()


@pytest.fixture(scope="module")
def insiders(tmp_path_factory):
    return Insiders(tmp_path_factory.mktemp("insiders"))


def _check(insiders: Insiders, path: str | None) -> dict[str, Any]:
    fuzzlib.INPUTS["vault-insider"] += 1
    start = time.perf_counter()
    try:
        out = insiders.read_everything()
    finally:
        if path is not None and os.path.exists(path):
            os.unlink(path)
    elapsed = time.perf_counter() - start
    assert elapsed < 10 * fuzzlib.TIME_BUDGET, f"reading the vault took {elapsed:.1f} s"
    fuzzlib.OUTCOMES["vault-insider"]["opened"] += 1
    return out


@hypothesis_settings(30)
@given(data=st.data())
def test_hostile_records_from_an_agent_or_a_device_never_break_readers(insiders, data):
    who = data.draw(st.sampled_from(["write", "append", "owner"]), label="writer")
    author = insiders.signer(who).writer_id
    recs = data.draw(st.lists(hostile_records(author, insiders.known_ids), min_size=1, max_size=4), label="records")
    patch = data.draw(st.fixed_dictionaries({}, optional={
        "seq": st.one_of(st.integers(1, 4), st.sampled_from([2**31, 2**62, 2**63 - 1])),
        "frontier": st.dictionaries(ids32, st.one_of(st.integers(0, 5), HUGE_INTS), max_size=3),
        "deps": st.lists(ids32, max_size=3, unique=True).map(sorted),
        "ts": st.one_of(HUGE_INTS, st.integers(0, 2**40)),
        "erase_one": st.booleans(),
    }), label="header")
    sign_inner = data.draw(st.booleans(), label="inner signatures")
    path = insiders.write_batch(who, recs, patch, sign_inner)
    assume(path is not None)
    out = _check(insiders, path)
    name = "segments/" + os.path.relpath(path, os.path.join(insiders.path, "segments")).replace(os.sep, "/")
    damaged = [p for p in out["problems"] if p["kind"] == "damaged"]
    assert all(p["file"] for p in damaged), damaged
    assert out["records"] >= 3 or any(p["file"] == name for p in out["problems"]) or who == "owner"


@hypothesis_settings(10)
@given(data=st.data())
def test_hostile_control_records_signed_by_an_owner_device_never_break_readers(insiders, data):
    """Control bodies are parsed once an owner signed them; a broken owner client must still not be
    able to make the vault unreadable (malformed bodies are reported, not applied)."""
    kind = data.draw(st.sampled_from([k for k in Kind if k >= 17]), label="kind")
    body = data.draw(bodies, label="body")
    m = {F.V: 1, F.KIND: int(kind), F.AUTHOR: insiders.owner.writer_id, F.SALT: bytes(16), F.BODY: body,
         F.TS: data.draw(st.one_of(HUGE_INTS, st.integers(0, 2**40)))}
    path = insiders.write_batch("owner", [m], {}, sign_inner=True)
    assume(path is not None)
    _check(insiders, path)


# -- a seeded random loop: many more varied batches per second than the property tests ----------


def random_record(rng, author: bytes, known_ids: list[bytes]) -> dict[int, Any]:
    """A record valid by construction for its kind, with hostile field values; sometimes mutated."""
    kind = rng.choice(KINDS)
    ref = (lambda: rng.choice(known_ids)) if known_ids and rng.random() < 0.6 else (lambda: rng.randbytes(32))
    m: dict[int, Any] = {F.V: 1, F.KIND: kind, F.AUTHOR: author if rng.random() < 0.8 else rng.randbytes(32),
                         F.SALT: rng.randbytes(16), F.TS: rng.choice(HUGE + [1_700_000_000] * 3)}
    value = fuzzlib._random_value(rng)
    if kind in (Kind.PUT, Kind.NOTE):
        m.update({F.VALUE: value, F.CLASS: rng.randrange(4), F.TYPE: rng.choice(TYPES)})
        if kind == Kind.PUT:
            m[F.KEY] = rng.choice(VALID_KEYS)
    elif kind == Kind.DEL:
        m[F.PRED] = sorted({ref() for _ in range(rng.randrange(1, 4))})
    elif kind == Kind.CONFIRM:
        m[F.TARGET] = ref()
    elif kind >= 16:
        m[F.BODY] = {rng.randrange(12): fuzzlib._random_value(rng) for _ in range(rng.randrange(6))}
    if rng.random() < 0.3:
        m[F.SOURCES] = sorted({ref() for _ in range(rng.randrange(1, 4))})
    if rng.random() < 0.3:
        m[F.META] = {"import": rng.choice(["chatgpt:1", "x" * 300]), "frequency": rng.choice(HUGE)}
    if rng.random() < 0.2:
        m[rng.randrange(16, 64)] = value
    if rng.random() < 0.15:
        m = fuzzlib.mutate_tree(rng, m)
    return m if isinstance(m, dict) else {F.V: 1}


def test_random_insider_batches_never_break_readers(insiders):
    rng = fuzzlib.rng_for("vault-insider")
    written = 0
    for _ in range(fuzzlib.iterations(40)):
        who = rng.choice(["write", "append", "owner"])
        author = insiders.signer(who).writer_id
        recs = [random_record(rng, author, insiders.known_ids) for _ in range(rng.randrange(1, 5))]
        patch: dict[str, Any] = {}
        if rng.random() < 0.3:
            patch["seq"] = rng.choice([1, 2, 3, 2**31, 2**62, 2**63 - 1])
        if rng.random() < 0.3:
            patch["frontier"] = {rng.randbytes(32): rng.choice(HUGE) for _ in range(rng.randrange(1, 3))}
        if rng.random() < 0.3:
            patch["ts"] = rng.choice(HUGE)
        if rng.random() < 0.1:
            patch["erase_one"] = True
        path = insiders.write_batch(who, recs, patch, sign_inner=rng.random() < 0.7)
        if path is None:
            continue
        written += 1
        out = _check(insiders, path)
        assert all(p["file"] for p in out["problems"] if p["kind"] == "damaged")
    assert written >= fuzzlib.iterations(40) // 2
