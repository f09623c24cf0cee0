"""What a read of segments keeps in memory (camillo.session.reader.Reader.add_segment): the batches'
views hold no record bytes once their records are staged in the state (a cold open of a million
records held them all), and what needs them reads them again: the timeline, search, an erasure. A
batch found twice is still compared: another copy's signatures are a problem, a copy with records
erased is not."""

from __future__ import annotations

import os

from camillo import NewRecord, Unlock, Vault, segments
from camillo.records import Batch
from camillo.session.views import BatchViews
from camillo.storage import segment_name

PASSPHRASE = "correct horse battery staple"


def _cold(path: str, home: str | None = None) -> Vault:
    if home is None:
        return Vault.open(path, Unlock.passphrase(PASSPHRASE), register=False, cache=False)
    return Vault.open(path, Unlock.passphrase(PASSPHRASE), home=home)


def test_a_cold_read_keeps_no_record_bytes_and_the_records_are_still_all_there(new_vault, tmp_path):
    path, vault, _ = new_vault
    for i in range(12):
        vault.append([NewRecord(type="message", conversation="c", role="user", text=f"line {i} garden")])
    vault.lock()
    v = _cold(path, str(tmp_path / "second home"))  # (a new device: a cold read into its local state)
    try:
        views = v.session.reader.batches
        # (once open, only the views of the batches that can move the roster are held: the others
        # are made again from the state when asked for, as after a warm open)
        assert isinstance(views, BatchViews) and views.held
        assert all(view.has_control or bid not in v.session.reader.last_accepted for bid, view in views.held.items())
        assert all(view.batch.header_bytes == b"" for view in views.held.values())  # (read here: in the state)
        assert len(views) >= 12
        assert all(r is None for view in views.values() for r in view.batch.records)
        assert all(len(view.batch.records) == len(view.header.records) for view in views.values())
        texts = sorted(r.text for r in v.timeline(limit=100))
        assert texts == sorted(f"line {i} garden" for i in range(12))
        assert len(v.search("garden")) == 12
        target = next(r.id for r in v.timeline(limit=100) if r.text == "line 3 garden")
        v.erase([target])  # (its segment is read again for the other records of its batches)
        assert "line 3 garden" not in {r.text for r in v.timeline(limit=100)}
        assert v.problems() == []
    finally:
        v.lock()
    again = _cold(path)
    try:
        assert sorted(r.text for r in again.timeline(limit=100)) == sorted(
            f"line {i} garden" for i in range(12) if i != 3)
        assert again.problems() == []
    finally:
        again.lock()


def _copy(vault: Vault, path: str, change, *, first: bool = False) -> tuple[str, bytes]:
    """Another segment holding a changed copy of a message's batch, read after the original (its name
    sorts after it: a read takes the first copy it finds), or before it (``first``).  The original is
    the message segment whose name sorts first (last), so that a name to sort after (before) it is
    found in a few tries."""
    reader = vault.session.reader
    names = [n for n, bids in reader.segment_batches.items() if bids and "segments/" in n
             and any(not reader.batches[b].has_control for b in bids)]
    name = max(names) if first else min(names)
    batch = next(b for b in reader.batches_of_segment(name) if not reader.batches[b.id].has_control)
    cid, eid = reader.segment_epochs[name]
    public = vault.session.roster.epochs[(cid, eid)].public
    while True:  # (a segment's key is random: its name too)
        seg = segments.seal_segment(vault.vault_id, cid, eid, public, segments.encode_payload([change(batch)]))
        copy = segment_name(seg)
        if (copy < name) if first else (copy > name):
            break
    os.makedirs(os.path.join(path, os.path.dirname(copy)), exist_ok=True)
    with open(os.path.join(path, copy), "wb") as f:
        f.write(seg)
    return copy, batch.id


def test_a_batch_read_twice_with_other_signatures_is_a_problem_and_with_records_erased_is_not(new_vault):
    """Spec §9.3: copies that differ are said when neither has erased entries; a copy with erased
    entries is not, whatever its signatures."""
    path, vault, _ = new_vault
    texts = ["twice", "again 1", "again 2", "again 3"]
    for text in texts:
        vault.append([NewRecord(type="message", conversation="c", role="user", text=text)])

    def forged(b: Batch) -> Batch:
        alg, sig = b.sigs[0]
        return Batch(b.id, b.header_bytes, b.header, ((alg, bytes([sig[0] ^ 1]) + sig[1:]),), b.records)

    def erased(b: Batch) -> Batch:
        return Batch(b.id, b.header_bytes, b.header, b.sigs, (None,) * len(b.records))

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
        copy, _ = _copy(v, path, lambda b: erased(forged(b)), first=True)
    finally:
        v.lock()
    v = _cold(path)
    try:
        assert not [p for p in v.problems() if "different contents" in p.message]
    finally:
        v.lock()
    os.remove(os.path.join(path, copy))
    v = _cold(path)
    try:
        copy, bid = _copy(v, path, forged)
    finally:
        v.lock()
    v = _cold(path)
    try:
        said = [p for p in v.problems() if "different contents" in p.message]
        assert said and bid.hex()[:12] in said[0].message
        assert sorted(r.text for r in v.timeline()) == sorted(texts)
    finally:
        v.lock()
