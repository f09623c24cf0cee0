"""A batch found in several segments (spec §9.3).  Copies of one batch can differ only in their
signatures and erased entries (its id is the hash of its header, which lists its records' ids).
Signatures are not covered by the id, so anyone able to seal a segment to a compartment (an agent
with an append grant holds its public key) can plant a copy of another writer's batch with broken
signatures, retrying until its segment's name sorts first.  A reader keeping the first copy found
would reject the batch and hide its records; the copy kept is the one whose signatures verify.  An
erasure or a compaction that writes the batch anew writes those signatures, not the planted ones."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable

from camillo import NewRecord, Unlock, Vault, ids, segments
from camillo.control import BatchView
from camillo.primitives import random_bytes
from camillo.records import Batch, BatchHeader, Kind, encode_record, verify_batch_signature
from camillo.session.reader import Reader
from camillo.storage import segment_name

PASSPHRASE = "correct horse battery staple"


def _cold(path: str, home: str | None = None) -> Vault:
    if home is None:
        return Vault.open(path, Unlock.passphrase(PASSPHRASE), register=False, cache=False)
    return Vault.open(path, Unlock.passphrase(PASSPHRASE), home=home)


def _plain(view: BatchView) -> bool:
    return not view.has_control


def _copy(vault: Vault, path: str, change: Callable[[Batch], Batch], *, first: bool = False,
          want: Callable[[BatchView], bool] = _plain, after: str = "") -> tuple[str, bytes, str]:
    """Another segment holding a changed copy of a batch ``want`` picks, read after the original (its
    name sorts after it: a read takes the first copy it finds), or before it (``first``).  The original
    is the matching segment whose name sorts first (last), so that a name to sort after (before) it
    is found in a few tries (and after ``after``).  Returns the copy's name, the batch id and the
    original's name."""
    reader = vault.session.reader
    names = [n for n, bids in reader.segment_batches.items() if bids and "segments/" in n
             and any(want(reader.batches[b]) for b in bids)]
    name = max(names) if first else min(names)
    batch = next(b for b in reader.batches_of_segment(name) if want(reader.batches[b.id]))
    cid, eid = reader.segment_epochs[name]
    public = vault.session.roster.epochs[(cid, eid)].public
    while True:  # (a segment's key is random: its name too)
        seg = segments.seal_segment(vault.vault_id, cid, eid, public, segments.encode_payload([change(batch)]))
        copy = segment_name(seg)
        if ((copy < name) if first else (copy > name)) and copy > after:
            break
    os.makedirs(os.path.join(path, os.path.dirname(copy)), exist_ok=True)
    with open(os.path.join(path, copy), "wb") as f:
        f.write(seg)
    return copy, batch.id, name


def forged(b: Batch) -> Batch:
    alg, sig = b.sigs[0]
    return Batch(b.id, b.header_bytes, b.header, ((alg, bytes([sig[0] ^ 1]) + sig[1:]),), b.records)


def erased(b: Batch) -> Batch:
    return Batch(b.id, b.header_bytes, b.header, b.sigs, (None,) * len(b.records))


def _messages(vault: Vault, texts: list[str]) -> None:
    for text in texts:
        vault.append([NewRecord(type="message", conversation="c", role="user", text=text)])


def _said(vault: Vault, copy: str) -> None:
    """The planted copy is named as damaged, and no batch is said to have a bad signature."""
    problems = vault.problems()
    assert [p for p in problems if p.file == copy and "signatures that do not verify" in p.message], problems
    assert not [p for p in problems if "signature that does not verify" in p.message], problems
    assert not [p for p in problems if "different contents" in p.message], problems


def test_a_batch_read_twice_with_other_signatures_is_a_problem_and_with_records_erased_is_not(new_vault):
    """Copies that differ are said when neither has erased entries; a copy with erased entries is
    not, whatever its signatures."""
    path, vault, _ = new_vault
    texts = ["twice", "again 1", "again 2", "again 3"]
    _messages(vault, texts)
    copies = [_copy(vault, path, erased)[0], _copy(vault, path, lambda b: erased(forged(b)))[0]]
    vault.lock()
    v = _cold(path)
    try:
        assert not [p for p in v.problems() if "different contents" in p.message]
        assert sorted(r.text for r in v.timeline()) == sorted(texts)
    finally:
        v.lock()
    for copy in copies:
        os.remove(os.path.join(path, copy))
    v = _cold(path)
    try:  # (the copy with erased entries read first, the original after it: not said either)
        copy, _, _ = _copy(v, path, lambda b: erased(forged(b)), first=True)
    finally:
        v.lock()
    v = _cold(path)
    try:
        assert not [p for p in v.problems() if "different contents" in p.message]
        assert sorted(r.text for r in v.timeline()) == sorted(texts)  # (the original's signatures verify)
    finally:
        v.lock()
    os.remove(os.path.join(path, copy))
    v = _cold(path)
    try:
        copy, bid, _ = _copy(v, path, forged)
    finally:
        v.lock()
    v = _cold(path)
    try:
        said = [p for p in v.problems() if "different contents" in p.message]
        assert said and bid.hex()[:12] in said[0].message
        assert sorted(r.text for r in v.timeline()) == sorted(texts)
    finally:
        v.lock()


def test_a_planted_copy_with_broken_signatures_read_first_hides_nothing(new_vault, tmp_path):
    path, vault, _ = new_vault
    texts = ["the original", "another 1", "another 2"]
    _messages(vault, texts)
    copy, bid, original = _copy(vault, path, forged, first=True)
    vault.lock()
    for home in (None, str(tmp_path / "new device")):  # (without a local state, and into a new one)
        v = _cold(path, home)
        try:
            assert sorted(r.text for r in v.timeline()) == sorted(texts)
            _said(v, copy)
            assert v.session.reader.batches[bid].segment == original
        finally:
            v.lock()
    v = _cold(path, str(tmp_path / "new device"))  # (a warm open of that state: the same)
    try:
        assert sorted(r.text for r in v.timeline()) == sorted(texts)
        assert not [p for p in v.problems() if "signature" in p.message]
    finally:
        v.lock()


def test_a_planted_copy_of_the_genesis_batch_read_first_does_not_break_the_vault(new_vault):
    """The writer's key is then known only from the genesis inside the batch (it is bound to the
    writer id, so a key found there judges the copies soundly)."""
    path, vault, _ = new_vault
    _messages(vault, ["still here"])

    def genesis(view: BatchView) -> bool:
        return any(r is not None and r.kind == Kind.GENESIS for r in view.records)

    copy, _, _ = _copy(vault, path, forged, first=True, want=genesis)
    vault.lock()
    v = _cold(path)
    try:
        assert [r.text for r in v.timeline()] == ["still here"]
        _said(v, copy)
    finally:
        v.lock()


def _arrives_late(path: str, tmp_path, original: str, before: Callable[[Vault], None],
                  after: Callable[[Vault], None]) -> None:
    """A new device opens the vault without the ``original`` segment (``before`` checks what it
    sees), then, in later sessions, with it (``after``, twice)."""
    aside = str(tmp_path / "aside")
    shutil.move(os.path.join(path, original), aside)
    home = str(tmp_path / "new device")
    for check in (before, after, after):
        if check is after and os.path.exists(aside):
            shutil.move(aside, os.path.join(path, original))
        v = _cold(path, home)
        try:
            check(v)
        finally:
            v.lock()


def test_the_good_copy_read_after_the_planted_one_is_taken_when_it_arrives(new_vault, tmp_path):
    """A device that read only the planted copy rejects the batch; when the original arrives (the
    sync brings it later), the next open takes it."""
    path, vault, _ = new_vault
    texts = ["arrives late", "another"]
    _messages(vault, texts)
    copy, bid, original = _copy(vault, path, forged, first=True)
    vault.lock()

    def before(v: Vault) -> None:
        assert bid not in v.session.log.accepted
        assert [p for p in v.problems() if "signature that does not verify" in p.message]

    opens: list[Vault] = []

    def after(v: Vault) -> None:
        assert sorted(r.text for r in v.timeline()) == sorted(texts)
        if not opens:  # (the open that read the original: it names the planted copy)
            _said(v, copy)
        assert not [p for p in v.problems() if "signature that does not verify" in p.message]
        opens.append(v)

    _arrives_late(path, tmp_path, original, before, after)


def test_a_compaction_writes_the_signatures_that_verify_not_the_planted_ones(new_vault):
    path, vault, _ = new_vault
    texts = ["compacted", "another 1", "another 2"]
    _messages(vault, texts)
    copy, bid, _ = _copy(vault, path, forged, first=True)
    vault.refresh()  # (the planted copy read after the original: reported)
    assert [p for p in vault.problems() if "different contents" in p.message]
    vault.compact(prune_now=True)  # (the only device: the old segments go at once)
    assert not os.path.exists(os.path.join(path, copy))
    vault.lock()
    v = _cold(path)
    try:
        reader, roster = v.session.reader, v.session.roster
        held = [b for name in reader.segment_batches for b in reader.batches_of_segment(name) if b.id == bid]
        assert held and all(verify_batch_signature(b, roster.signer_public(b.header.writer_id) or b"")
                            for b in held)
        assert sorted(r.text for r in v.timeline()) == sorted(texts)
        assert not [p for p in v.problems() if "signature" in p.message]
    finally:
        v.lock()


def test_a_planted_copy_with_records_nulled_read_first_hides_nothing(new_vault, tmp_path):
    """A reader of the compartment can also seal to it: a copy with the genuine signatures and every
    record ``null`` (as an erasure leaves them) read first would hide the records as "missing" (no
    ERASE names them).  The bytes another copy holds count (they are checked against the ids the signed
    header lists); a record an ERASE names stays erased though an old copy still holds it."""
    path, vault, _ = new_vault
    texts = ["nulled 1", "nulled 2", "kept"]
    _messages(vault, texts)
    copy, bid, _ = _copy(vault, path, erased, first=True)
    vault.lock()
    for home in (None, str(tmp_path / "new device")):
        v = _cold(path, home)
        try:
            assert sorted(r.text for r in v.timeline()) == sorted(texts)
            assert not [p for p in v.problems() if "missing" in p.message]  # (not said: an erasure looks the same)
        finally:
            v.lock()
    os.remove(os.path.join(path, copy))
    kept = tmp_path / "kept by the host"  # (a host that keeps old files: the erased record's old copy)
    shutil.copytree(os.path.join(path, "segments"), kept)
    v = _cold(path, str(tmp_path / "eraser"))
    try:
        v.erase([next(r.id for r in v.timeline() if r.text == "nulled 2")])
    finally:
        v.lock()
    shutil.copytree(kept, os.path.join(path, "segments"), dirs_exist_ok=True)
    v = _cold(path)
    try:
        assert sorted(r.text for r in v.timeline()) == ["kept", "nulled 1"]
        assert not v.search("nulled 2")
    finally:
        v.lock()


def test_a_copy_with_bytes_that_are_not_the_record_fills_nothing(new_vault):
    """A copy's bytes fill a ``null`` entry only once checked against the id the header lists."""
    path, vault, _ = new_vault
    texts = ["checked", "another"]
    _messages(vault, texts)

    def garbled(b: Batch) -> Batch:
        return Batch(b.id, b.header_bytes, b.header, b.sigs,
                     tuple(None if r is None else r[:-1] + bytes([r[-1] ^ 1]) for r in b.records))

    first, _, _ = _copy(vault, path, erased, first=True)
    _copy(vault, path, garbled, first=True, after=first)  # (read after the first copy, before the original)
    vault.lock()
    v = _cold(path)
    try:
        assert sorted(r.text for r in v.timeline()) == sorted(texts)
    finally:
        v.lock()


def test_the_records_of_a_copy_read_after_a_nulled_one_are_taken_when_they_arrive(new_vault, tmp_path):
    """A device whose local state holds a copy with a record ``null`` (no erasure names it) takes
    the record's bytes from the original when that arrives later, in a later session."""
    path, vault, _ = new_vault
    texts = ["nulled, then whole", "another"]
    _messages(vault, texts)
    _, _, original = _copy(vault, path, erased, first=True)
    vault.lock()

    def before(v: Vault) -> None:
        assert len([r.text for r in v.timeline()]) == 1  # (the nulled one's record is missing)
        # (said also after this device registered and wrote, which judged only its own new batches)
        assert [p for p in v.problems() if "missing but no erasure names it" in p.message]

    def after(v: Vault) -> None:
        assert sorted(r.text for r in v.timeline()) == sorted(texts)
        assert not [p for p in v.problems() if "missing" in p.message]

    _arrives_late(path, tmp_path, original, before, after)


def test_a_compaction_writes_the_records_a_planted_nulled_copy_lacks(new_vault):
    """A compaction that meets a planted copy with its records ``null`` (the genuine signatures)
    writes the records the original holds, and then deletes both: nothing is lost for good."""
    path, vault, _ = new_vault
    texts = ["kept through compaction", "another 1", "another 2"]
    _messages(vault, texts)
    copy, _, original = _copy(vault, path, erased, first=True)
    vault.refresh()
    vault.compact(prune_now=True)
    assert not os.path.exists(os.path.join(path, copy)) and not os.path.exists(os.path.join(path, original))
    vault.lock()
    v = _cold(path)
    try:
        assert sorted(r.text for r in v.timeline()) == sorted(texts)
        assert not [p for p in v.problems() if "missing" in p.message]
    finally:
        v.lock()


def test_a_held_copy_rewritten_under_its_name_is_checked_when_read_again(new_vault, tmp_path):
    """The held copy's segment is read again when another copy is judged: a file changed under its
    name (entries that are not the records the header lists) is checked like any other copy, and the
    open goes on instead of failing."""
    path, vault, _ = new_vault
    texts = ["rewritten under its name", "another"]
    _messages(vault, texts)
    copy, bid, original = _copy(vault, path, erased, first=True)
    reader = vault.session.reader
    batch = next(b for b in reader.batches_of_segment(original) if b.id == bid)
    cid, eid = reader.segment_epochs[original]
    public = vault.session.roster.epochs[(cid, eid)].public
    vault.lock()

    def before(v: Vault) -> None:
        assert len(v.timeline()) == 1  # (holds the planted copy: its record missing)
        garbage = Batch(bid, batch.header_bytes, batch.header, batch.sigs, (b"\xa0",) * len(batch.records))
        with open(os.path.join(path, copy), "wb") as f:  # (after this device read it)
            f.write(segments.seal_segment(v.vault_id, cid, eid, public, segments.encode_payload([garbage])))

    def after(v: Vault) -> None:
        assert sorted(r.text for r in v.timeline()) == sorted(texts)

    _arrives_late(path, tmp_path, original, before, after)


def test_copies_of_a_made_up_writers_batch_force_no_computation(new_vault, tmp_path, monkeypatch):
    """Two planted copies of a batch by a writer nobody certified (whose key is never known) wait
    for that key without making every later refresh compute everything again."""
    path, vault, _ = new_vault
    _messages(vault, ["only this"])
    cid = vault.compartment_id("personal")
    writer = random_bytes(32)
    raw = encode_record(Kind.NOTE, writer, value="hi", authority=0, type="event")
    header = BatchHeader(vault.vault_id, cid, writer, 1, None, (), {writer: 0}, (ids.record_id(raw),), int(time.time()))
    made_up = Batch(ids.batch_id(header.encode()), header.encode(), header, ((1, b"\x01" * 64),), (raw,))
    _copy(vault, path, lambda b: made_up)
    _copy(vault, path, lambda b: Batch(made_up.id, made_up.header_bytes, header, ((1, b"\x02" * 64),), (raw,)))
    vault.refresh()
    computed = []
    real = Reader.recompute
    monkeypatch.setattr(Reader, "recompute", lambda self: computed.append(1) or real(self))
    for _ in range(3):
        vault.refresh()
    assert computed == []
    assert [r.text for r in vault.timeline()] == ["only this"]


def test_an_erasure_writes_the_records_a_planted_nulled_copy_lacks(new_vault):
    """An erasure rewrites every batch of the erased record's epoch: one found twice, once planted
    with its records ``null``, is written with the records no erasure names."""
    path, vault, _ = new_vault
    texts = ["kept through an erasure", "erased", "another"]
    _messages(vault, texts)
    _copy(vault, path, erased, first=True)
    vault.refresh()
    vault.erase([next(r.id for r in vault.timeline() if r.text == "erased")])
    vault.lock()
    v = _cold(path)
    try:
        assert sorted(r.text for r in v.timeline()) == sorted(t for t in texts if t != "erased")
        assert not [p for p in v.problems() if "missing" in p.message]
    finally:
        v.lock()
