"""Records checked in a child process beside a read of many segments (camillo.recordcheck, camillo.session.segread):
the same batches, the same problems, with the child, without it, and when it dies half-way."""

from __future__ import annotations

import os

import cbor2
import pytest
from camillo import NewRecord, Unlock, Vault, ids, recordcheck, segments
from camillo.primitives import SigningKey, random_bytes
from camillo.records import CONTROL_KINDS, BatchHeader, decode_record, make_batch
from camillo.rowfields import record_fields
from camillo.session import segread
from camillo.storage import segment_name
from camillo.transport import pack_vault

PASSPHRASE = "correct horse battery staple"


def _bad_record(author: bytes) -> bytes:
    """A NOTE whose map is not deterministic CBOR (its keys out of order); its id is its hash all the same."""
    fields = {15: "message", 1: 3, 0: 1, 2: author, 3: random_bytes(16), 5: "planted", 6: 2}
    return cbor2.dumps(fields)  # (insertion order: not the canonical one)


@pytest.fixture
def many(new_vault):
    """A vault of 70 segments, and one more planted: a signed batch with one good record and one
    that is not deterministic CBOR."""
    path, vault, _ = new_vault
    for i in range(70):
        vault.append([NewRecord(type="message", conversation="c", role="user", text=f"line {i}")])
    cid = vault.compartment_id("personal")
    epoch = vault.session.roster.current_epoch(cid)
    vault_id = vault.vault_id
    vault.lock()
    signer = SigningKey.generate()
    writer = ids.writer_id(signer.alg, signer.public)
    bad = _bad_record(writer)
    header = BatchHeader(vault_id, cid, writer, 1, None, (), {writer: 0}, (ids.record_id(bad),), 1_700_000_000)
    batch = make_batch(header, [bad], signer)
    seg = segments.seal_segment(vault_id, cid, epoch.epoch_id, epoch.public, segments.encode_payload([batch]))
    name = segment_name(seg)
    os.makedirs(os.path.join(path, os.path.dirname(name)), exist_ok=True)
    with open(os.path.join(path, name), "wb") as f:
        f.write(seg)
    return path, name, batch.id


def _cold(path):
    v = Vault.open(path, Unlock.passphrase(PASSPHRASE), register=False, cache=False)
    try:
        texts = sorted(r.text for r in v.timeline(limit=1000))
        problems = sorted((p.file, p.message) for p in v.problems())
        return texts, problems, v.session.reader.checked_apart
    finally:
        v.lock()


def test_a_read_checked_in_a_child_process_finds_what_one_checked_here_finds(many, monkeypatch):
    path, name, bad_batch = many
    monkeypatch.setattr(segread, "FORCE", False)
    here = _cold(path)
    monkeypatch.setattr(segread, "FORCE", True)
    apart = _cold(path)
    assert here[2] == 0
    assert apart[2] >= 70  # every good batch was passed by the child
    assert apart[:2] == here[:2]
    assert len(here[0]) == 70
    planted = [m for f, m in here[1] if f == name]
    assert planted and bad_batch.hex()[:12] in planted[0] and "deterministic CBOR" in planted[0]


def test_a_child_that_dies_half_way_leaves_the_rest_to_this_process(many, monkeypatch):
    path, name, _ = many
    monkeypatch.setattr(segread, "FORCE", False)
    expected = _cold(path)[:2]
    started: list[recordcheck.RecordChecker] = []
    real_start, real_take = recordcheck.start, segread._take

    def start():
        checker = real_start()
        started.append(checker)
        return checker

    taken = 0

    def take(reader, checker, item):
        nonlocal taken
        taken += 1
        if taken == 20:  # the child is killed with frames of it unanswered
            started[0]._proc.kill()
            started[0]._proc.wait()
        return real_take(reader, checker, item)

    monkeypatch.setattr(recordcheck, "start", start)
    monkeypatch.setattr(segread, "_take", take)
    monkeypatch.setattr(segread, "FORCE", True)
    monkeypatch.setattr(recordcheck, "FRAME_RECORDS", 8)  # (several frames, so that some are in flight)
    assert _cold(path)[:2] == expected
    assert started and started[0]._proc.returncode is not None
    assert taken > 20


def test_check_frame_passes_good_batches_and_fails_a_batch_with_one_bad_record():
    signer = SigningKey.generate()
    writer = ids.writer_id(signer.alg, signer.public)
    good = cbor2.dumps({0: 1, 1: 3, 2: writer, 3: random_bytes(16), 5: "fine", 6: 2, 15: "message"}, canonical=True)
    bad = _bad_record(writer)
    vault_id, cid = random_bytes(32), random_bytes(32)

    def batch(*raws, ids_=None):
        rids = ids_ or tuple(ids.record_id(r) for r in raws)
        return make_batch(BatchHeader(vault_id, cid, writer, 1, None, (), {}, rids, 1), list(raws), signer)

    wrong_id = batch(good, ids_=(random_bytes(32),))
    with recordcheck.RecordChecker() as checker:
        assert checker.wait_ready(30)
        t1 = checker.add([batch(good), batch(good, bad), wrong_id])
        t2 = checker.add([batch(good, good)])
        fields = record_fields(decode_record(good).fields)
        assert checker.verdicts(t1) == [[fields], None, None]
        assert checker.verdicts(t2) == [[fields, fields]]
    # the same verdicts in this process
    frame = b"".join(recordcheck._U32.pack(n) for n in (1, 1)) + ids.record_id(bad) + recordcheck._U32.pack(len(bad)) + bad
    assert recordcheck.check_frame(frame) == [None]


def test_a_checker_whose_child_is_gone_says_so():
    checker = recordcheck.RecordChecker()
    try:
        assert checker.wait_ready(30)
        checker._proc.kill()
        checker._proc.wait()
        signer = SigningKey.generate()
        writer = ids.writer_id(signer.alg, signer.public)
        raw = cbor2.dumps({0: 1, 1: 3, 2: writer, 3: random_bytes(16), 5: "x", 6: 2, 15: "message"}, canonical=True)
        b = make_batch(BatchHeader(random_bytes(32), random_bytes(32), writer, 1, None, (), {}, (ids.record_id(raw),), 1),
                       [raw], signer)
        ticket = checker.add([b])
        with pytest.raises(recordcheck.CheckerGone):
            checker.verdicts(ticket)
        assert not checker.ready
    finally:
        checker.close()


def test_no_child_is_started_from_an_app_frozen_into_one_executable(monkeypatch):
    """There ``sys.executable`` is the app itself: starting it would open the app again."""
    monkeypatch.setattr("sys.frozen", True, raising=False)
    assert recordcheck.start() is None


@pytest.mark.parametrize("packed", [False, True])
def test_a_child_is_started_only_for_a_read_large_enough_to_repay_it(many, monkeypatch, tmp_path, packed):
    """A read of at least START_SEGMENTS segments, or START_BYTES bytes of them (of a folder or of a
    ``.vmem`` file, whose entries' sizes it knows), starts a child before its first segment; a
    smaller one checks everything here and starts none (one started after a first segment of a few
    thousand records was never ready in time, and cost a cold open of 10,000 records a tenth)."""
    path, _name, _ = many
    if packed:
        path = str(tmp_path / "v.vmem")
        pack_vault(many[0], path)
    starts: list[int] = []
    monkeypatch.setattr(segread, "FORCE", None)
    monkeypatch.setattr(segread, "_cores", lambda: 2)
    monkeypatch.setattr(recordcheck, "start", lambda: starts.append(1))  # (None: no child; read here)

    def opened(**limits):
        for name, value in limits.items():
            monkeypatch.setattr(segread, name, value)
        starts.clear()
        v = Vault.open(path, Unlock.passphrase(PASSPHRASE), register=False, cache=False)
        try:
            assert len(v.timeline(limit=1000)) == 70
        finally:
            v.lock()
        return len(starts)

    assert opened(START_SEGMENTS=1000, START_BYTES=64 << 20) == 0  # (71 segments of a few KB)
    assert opened(START_SEGMENTS=50, START_BYTES=64 << 20) == 1
    assert opened(START_SEGMENTS=1000, START_BYTES=20_000) == 1


_ROW = ("id, batch, idx, compartment, writer, author, kind, type, key, class, effective, ts, conversation, role, text, "
        "raw, has_refs, erased, import_key, lamport, valid, reason, hidden")


def test_batches_the_child_checked_are_staged_from_what_it_read_as_this_process_stages_them(new_vault, monkeypatch):
    """The child sends back, with its verdict, what the local state stores of each record it checked
    (camillo.rowfields.record_fields); the reader stages a batch without a control record from that,
    without decoding its records again.  Every row and reference is what a read checking everything
    here stores: messages in conversations, a conversation's title, a fact and its new value (pred),
    a fact with sources, an import key, an erased record."""
    from camillo.session import reader as reader_mod

    path, vault, _ = new_vault
    first = vault.append([NewRecord(type="message", text="hello", conversation="c1", role="user"),
                          NewRecord(type="conversation", title="Trip planning", conversation="c1")]).written
    city = vault.append([NewRecord(type="fact", key="user/city", value="Porto", sources=[first[0]])]).written
    vault.append([NewRecord(type="fact", key="user/city", value="Lisbon")])
    vault.append([NewRecord(type="message", text=f"line {i}", conversation="c2", role="assistant",
                            meta={"import": f"chat-{i}"}) for i in range(40)])
    gone = vault.append([NewRecord(type="message", text="to be erased", conversation="c2", role="user")]).written
    vault.erase(gone)
    assert city
    vault.lock()

    def rows(force):
        monkeypatch.setattr(segread, "FORCE", force)
        decoded: list[bytes] = []
        real, real_decode = reader_mod.validated_record, reader_mod.decode_record
        monkeypatch.setattr(reader_mod, "validated_record", lambda raw, rid: decoded.append(raw) or real(raw, rid))
        monkeypatch.setattr(reader_mod, "decode_record", lambda raw, **kw: decoded.append(raw) or real_decode(raw, **kw))
        v = Vault.open(path, Unlock.passphrase(PASSPHRASE), register=False, cache=False)
        try:
            db = v.session.reader.materialized.db
            return (db.execute(f"SELECT {_ROW} FROM records ORDER BY id").fetchall(),
                    sorted(db.execute("SELECT record, ref, how FROM refs").fetchall()),
                    v.session.reader.checked_apart, len(decoded))
        finally:
            v.lock()

    here, apart = rows(False), rows(True)
    assert apart[2] > 0, "the child checked the batches"
    assert here[0] == apart[0] and here[1] == apart[1]
    assert len(here[0]) > 40 and any(r[14] == "Trip planning" for r in here[0]) and here[1]
    assert any(r[17] == 1 for r in here[0]), "the erased record's row"
    control = {r[1] for r in here[0] if r[6] in CONTROL_KINDS}
    plain = sum(1 for r in here[0] if r[1] not in control and r[15] is not None)
    assert here[3] >= sum(1 for r in here[0] if r[15] is not None)  # (no child: every record decoded here)
    assert plain > 40 and apart[3] <= here[3] - plain, "the batches without a control record were not decoded here"
