"""What a read of segments keeps in memory (camillo.session.reader.Reader.add_segment): the batches'
views hold no record bytes once their records are staged in the state (a cold open of a million
records held them all), and what needs them reads them again: the timeline, search, an erasure.  (A
batch found twice: tests/security/test_batch_copies.py.)"""

from __future__ import annotations

import sys

import pytest
from camillo import NewRecord, Unlock, Vault, heap
from camillo.session.views import BatchViews

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


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc_trim (elsewhere release does nothing)")
def test_the_heap_gives_what_was_freed_back_to_the_system():
    """camillo.heap.release: memory freed to the C library's allocator in the middle of its heap (as
    SQLite's page cache is when a cold load's is narrowed) stays with the process until it is asked
    back: 80 MB freed under a block still in use, then released."""
    blocks = [bytearray(2000) for _ in range(40_000)]  # (from the C heap: above Python's 512 bytes, below mmap's)
    pin = bytearray(2000)  # (allocated after them: the heap's top stays in use, so nothing goes back by itself)
    held = _rss_mib()
    del blocks
    freed = _rss_mib()
    assert heap.release() is True
    released = _rss_mib()
    assert held - freed < 20, (held, freed)  # (kept by the allocator)
    assert freed - released > 40, (freed, released)
    assert len(pin) == 2000


def test_a_cold_open_gives_what_its_load_freed_back_to_the_system(new_vault, tmp_path, monkeypatch):
    """Once a cold open sheds the views it read, what its load freed goes back to the system
    (camillo.heap.release; at a million records the process after the open, 359 -> 246 MiB); a warm
    open, which sheds nothing, does not ask."""
    from camillo.session import resume

    path, vault, _ = new_vault
    for i in range(5):
        vault.append([NewRecord(type="message", conversation="c", role="user", text=f"line {i}")])
    vault.lock()
    calls: list[str] = []
    monkeypatch.setattr(heap, "release", lambda: calls.append("release") or True)
    real = resume.shed_views
    monkeypatch.setattr(resume, "shed_views", lambda reader, fetch: (calls.append("shed"), real(reader, fetch)))
    home = str(tmp_path / "second home")
    v = _cold(path, home)
    v.lock()
    assert calls[calls.index("shed"):].count("release") == 1
    calls.clear()
    _cold(path, home).lock()  # (warm: its state is there)
    assert "release" not in calls[calls.index("shed"):]
