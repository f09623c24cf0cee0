"""A write stages its segments (temp files readers ignore), persists its counter naming them, then
renames them into place; an open or the next write finishes one a crash interrupted.

The device state keeps naming the last write's segments after it completed.  A bulk write stages
hundreds: an open checks the last one's temp file (they are renamed in order), not every segment,
and does not load the device state a second time.  The interrupted write itself is covered by
``tests/reliability/test_crash.py`` (a kill between the renames)."""

from __future__ import annotations

import pytest
from camillo import NewRecord, Unlock, Vault
from camillo.devicestate import DeviceStateStore
from camillo.session import writer
from camillo.storage import FolderShelf

from tests.conftest import PASSPHRASE


@pytest.fixture
def bulk_written(new_vault, monkeypatch):
    path, vault, _ = new_vault
    with monkeypatch.context() as m:  # batches of 2 records, a segment each: many segments in one write
        m.setattr(writer, "BATCH_RECORDS", 2)
        m.setattr(writer, "SEGMENT_PAYLOAD", 1)
        vault.append([NewRecord(type="message", text=f"note {i}") for i in range(40)])
    staged = vault.session.device_state.extra["staged"]
    assert len(staged) >= 20  # (what the device state names after the write)
    vault.lock()
    return path, staged


def _counting(monkeypatch, cls, name):
    calls = []
    original = getattr(cls, name)

    def counted(self, *args, **kwargs):
        calls.append(args)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(cls, name, counted)
    return calls


def test_an_open_after_a_finished_bulk_write_checks_one_file(bulk_written, monkeypatch):
    path, staged = bulk_written
    exists = _counting(monkeypatch, FolderShelf, "exists")
    loads = _counting(monkeypatch, DeviceStateStore, "load")
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        assert len(v.timeline()) == 40
    names = {name for name, _tmp in staged}
    assert not [c for c in exists if c and c[0] in names], "every staged segment was looked up again"
    assert len(loads) == 1, "the device state was loaded again to finish a write that was finished"


def test_a_write_whose_last_segment_is_still_staged_is_finished(bulk_written):
    """The last segment's rename undone (its file back under its temp name): the open renames it."""
    path, staged = bulk_written
    import os

    name, tmp = staged[-1]
    target = os.path.join(path, *name.split("/"))
    os.rename(target, os.path.join(os.path.dirname(target), tmp))
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
        assert len(v.timeline()) == 40
        assert v.session.reader.segment_problems == {}
    assert os.path.exists(target)
