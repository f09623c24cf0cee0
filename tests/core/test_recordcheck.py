"""Records checked in a child process beside a read of many segments (camillo.recordcheck, camillo.session.segread):
the same batches, the same problems, with the child, without it, and when it dies half-way."""

from __future__ import annotations

import os

import cbor2
import pytest
from camillo import NewRecord, Unlock, Vault, ids, recordcheck, segments
from camillo.primitives import SigningKey, random_bytes
from camillo.records import (
    CONTROL_KINDS,
    Batch,
    BatchHeader,
    batch_from_cbor,
    checked_batch,
    decode_record,
    make_batch,
)
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
    name = _plant(path, vault_id, cid, epoch, [batch])
    _plant(path, vault_id, cid, epoch, [_unordered_header_batch(vault_id, cid, signer)])
    return path, name, batch.id


def _plant(path, vault_id, cid, epoch, batches):
    seg = segments.seal_segment(vault_id, cid, epoch.epoch_id, epoch.public, segments.encode_payload(batches))
    name = segment_name(seg)
    os.makedirs(os.path.join(path, os.path.dirname(name)), exist_ok=True)
    with open(os.path.join(path, name), "wb") as f:
        f.write(seg)
    return name


def _unordered_header_batch(vault_id, cid, signer):
    """A signed batch of one good record whose header's map is not deterministic CBOR (keys out of order)."""
    writer = ids.writer_id(signer.alg, signer.public)
    raw = cbor2.dumps({0: 1, 1: 3, 2: writer, 3: random_bytes(16), 5: "unordered header", 6: 2, 15: "message"},
                      canonical=True)
    header = BatchHeader(vault_id, cid, writer, 1, None, (), {writer: 0}, (ids.record_id(raw),), 1_700_000_000)
    good = make_batch(header, [raw], signer)
    unordered = cbor2.dumps(dict(reversed(list(header.to_map().items()))))
    return Batch(ids.batch_id(unordered), unordered, good.header, good.sigs, good.records)


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
    assert any("batch header" in m and "deterministic" in m for f, m in here[1] if f != name), here[1]


def _count_decodings(monkeypatch) -> list[str]:
    """The names of the segments this process decodes from now on (segments.decode_payload)."""
    decoded: list[str] = []
    real = segments.decode_payload

    def counted(payload, name):
        decoded.append(name)
        return real(payload, name)

    monkeypatch.setattr(segments, "decode_payload", counted)
    return decoded


def test_segments_the_child_decoded_are_not_decoded_here_again(many, monkeypatch):
    """The child decodes each payload and batch header strictly and sends back the batches' ids and
    header fields: this process decodes again only the segment the child refused (the planted header)."""
    path, _name, _ = many
    decoded = _count_decodings(monkeypatch)
    monkeypatch.setattr(segread, "FORCE", False)
    here = _cold(path)
    assert len(decoded) >= 72
    decoded.clear()
    monkeypatch.setattr(segread, "FORCE", True)
    monkeypatch.setattr(recordcheck, "BEHIND", 10**9)  # (never behind: every segment goes to it whole)
    assert _cold(path)[:2] == here[:2]
    assert len(decoded) == 1, decoded


def test_while_the_child_is_behind_the_reader_decodes_segments_itself_and_the_child_checks_their_records(
        many, monkeypatch):
    """The two halves kept even: a segment sent while the child is behind is decoded here, payload and
    headers, and the child checks its records only; what is read is the same."""
    path, _name, _ = many
    decoded = _count_decodings(monkeypatch)
    monkeypatch.setattr(segread, "FORCE", False)
    here = _cold(path)
    decoded.clear()
    monkeypatch.setattr(segread, "FORCE", True)
    monkeypatch.setattr(recordcheck, "BEHIND", 0)  # (always behind)
    texts, problems, apart = _cold(path)
    assert (texts, problems) == here[:2]
    assert len(decoded) >= 72  # every segment decoded here
    assert apart >= 70  # and its records checked there


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
    monkeypatch.setattr(recordcheck, "FRAME_BYTES", 8)  # (a frame a segment, so that some are in flight)
    # the reader holds ten segments sent before it takes the oldest (else it may take each as soon as the
    # child answers it, and hold none when the child is killed)
    monkeypatch.setattr(recordcheck.RecordChecker, "due", lambda self, ticket: self._sent - ticket[0] > 10 or not self.ready)
    assert _cold(path)[:2] == expected
    assert started and started[0]._proc.returncode is not None
    assert taken > 25


def test_the_child_reads_each_segment_as_this_process_reads_it():
    """Per segment, the ids and headers of its batches (rebuilt here by checked_batch as batch_from_cbor
    decodes them) and the fields of the records of each batch whose records all check; None for a
    batch with a bad record or a wrong id, and for a segment whose batch header does not decode."""
    signer = SigningKey.generate()
    writer = ids.writer_id(signer.alg, signer.public)
    good, other = (cbor2.dumps({0: 1, 1: 3, 2: writer, 3: random_bytes(16), 5: text, 6: 2, 15: "message"}, canonical=True)
                   for text in ("fine", "also fine"))
    bad = _bad_record(writer)
    vault_id, cid = random_bytes(32), random_bytes(16)

    def batch(*raws, ids_=None, seq=1):
        rids = ids_ or tuple(ids.record_id(r) for r in raws)
        prev = None if seq == 1 else random_bytes(32)
        return make_batch(BatchHeader(vault_id, cid, writer, seq, prev, (), {writer: seq - 1, random_bytes(32): 4},
                                      rids, 1), list(raws), signer)

    wrong_id = batch(good, ids_=(random_bytes(32),))
    first = segments.encode_payload([batch(good, seq=3), batch(good, bad), wrong_id])
    second = segments.encode_payload([batch(good, other)])
    refused = segments.encode_payload([_unordered_header_batch(vault_id, cid, signer)])
    fields, fields2 = (record_fields(decode_record(r).fields) for r in (good, other))
    with recordcheck.RecordChecker() as checker:
        assert checker.wait_ready(30)
        tickets = [checker.add(p) for p in (first, second, refused)]
        answers = [checker.verdicts(t) for t in tickets]
    assert [f for _, _, f in answers[0]] == [[fields], None, None]
    assert [f for _, _, f in answers[1]] == [[fields, fields2]]
    assert answers[2] is None
    for payload, answer in zip((first, second), answers):
        for item, (bid, parts, _) in zip(cbor2.loads(payload), answer, strict=True):
            mine, theirs = batch_from_cbor(item), checked_batch(bid, item, parts)
            assert (theirs.id, theirs.header_bytes, theirs.header, theirs.sigs, theirs.records) == (
                mine.id, mine.header_bytes, mine.header, mine.sigs, mine.records)
    # the same verdicts in this process
    frame = recordcheck._U32.pack(2) + b"".join(recordcheck._MODE.pack(0, len(p)) + p for p in (second, refused))
    assert recordcheck.check_frame(frame) == answers[1:]
    # a segment the reader decoded itself: its records only
    frame = recordcheck._U32.pack(2) + b"".join(recordcheck._MODE.pack(1, len(p)) + p for p in (first, second))
    assert recordcheck.check_frame(frame) == [[(b"", None, f) for _, _, f in a] for a in answers[:2]]


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
        ticket = checker.add(segments.encode_payload([b]))
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


def test_a_read_of_many_segments_pauses_the_cyclic_collector(many, monkeypatch):
    """The read makes a view of every batch, which lives as long as the session: the collector would walk
    them again each time they grew by a quarter (about 3.5 s of a cold open of a million records)."""
    import gc

    from camillo.session import reader as reader_mod

    path, _name, _ = many
    seen: list[bool] = []
    real = reader_mod.Reader.add_segment

    def add_segment(self, *args, **kw):
        seen.append(gc.isenabled())
        return real(self, *args, **kw)

    monkeypatch.setattr(reader_mod.Reader, "add_segment", add_segment)
    monkeypatch.setattr(segread, "FORCE", True)
    assert gc.isenabled()
    _cold(path)
    assert len(seen) >= 70 and not any(seen)
    assert gc.isenabled()


@pytest.mark.skipif(not hasattr(__import__("fcntl"), "F_GETPIPE_SZ"), reason="Linux pipes only")
def test_the_childs_pipes_hold_a_megabyte():
    """An answer of several megabytes crosses the pipe in a few parts, not eighty (each a handover of
    the interpreter lock to the receiving thread while the child waits)."""
    import fcntl

    with recordcheck.RecordChecker() as checker:
        assert checker.wait_ready(30)
        for pipe in (checker._proc.stdin, checker._proc.stdout):
            assert fcntl.fcntl(pipe.fileno(), fcntl.F_GETPIPE_SZ) == recordcheck.PIPE_BYTES
