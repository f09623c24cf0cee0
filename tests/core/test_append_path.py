"""What an interactive append does and does not repeat (the append p50 target of issue 19 depends on
it): it takes its own batches in from what it sealed, without reading, decrypting or verifying them
again, and it opens its device state again only when another process changed the file.  A cold open
then reads and verifies everything the appends wrote.

pytest main thread.
"""

from __future__ import annotations

import copy

from camillo import NewRecord, Unlock, Vault, devicestate
from camillo.storage import FolderShelf

from .helpers import all_files

PASSPHRASE = "correct horse battery staple"


def test_an_append_takes_its_own_batches_in_without_reading_them_back(new_vault, monkeypatch):
    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="warm-up")])
    before = vault.session.reader.decryptions
    segments_before = {f for f in all_files(path) if f.endswith(".seg")}
    reads: list[str] = []
    real_read = FolderShelf.read
    monkeypatch.setattr(FolderShelf, "read", lambda self, name: reads.append(name) or real_read(self, name))
    for i in range(5):
        vault.append([NewRecord(type="message", text=f"m{i}")])
    written = {f for f in all_files(path) if f.endswith(".seg")} - segments_before
    assert len(written) == 5
    assert not [n for n in reads if n.endswith(".seg")], "no segment read back"
    assert vault.session.reader.decryptions == before
    assert {f"m{i}" for i in range(5)} <= {r.text for r in vault.timeline()}
    vault.lock()
    # what was written is what was taken in: a cold open decrypts and verifies every segment
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), cache=False) as cold:
        assert {f"m{i}" for i in range(5)} <= {r.text for r in cold.timeline()}
        assert cold.problems(full=True) == []


def test_the_device_state_is_opened_again_only_when_another_process_changed_it(new_vault, monkeypatch):
    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", text="warm-up")])
    opened: list[str] = []
    real_open = devicestate.open_local
    monkeypatch.setattr(devicestate, "open_local", lambda *a: opened.append(a[-1]) or real_open(*a))
    for i in range(3):
        vault.append([NewRecord(type="message", text=f"m{i}")])
    assert opened == [], "the file held exactly what this process wrote: not decrypted again"
    # another process of this installation writes (a second store over the same file and key)
    other = copy.copy(vault.session.device_state_store)
    other._known = {}
    state = other.load()
    assert len(opened) == 2, "the other store opened both copies of the state"
    state.extra["written elsewhere"] = 1
    other.save(state)
    vault.append([NewRecord(type="message", text="after")])
    assert len(opened) == 3, "the copy the other store changed was opened (and only that one) by the append"
    assert vault.session.device_state.extra.get("written elsewhere") == 1, "the append adopted it"


def test_an_append_does_not_decode_and_check_again_the_records_it_just_encoded(new_vault, monkeypatch):
    """Its records were built by encode_record, which checks their maps as decode_record checks a
    record read: taken in from their bytes without that check again (a tenth of an import).  What
    it shows equals what a cold open, which checks every record, shows."""
    from camillo.session import reader as reader_mod

    path, vault, _ = new_vault
    decoded: list[bytes] = []
    real = reader_mod.decode_record
    monkeypatch.setattr(reader_mod, "decode_record", lambda raw, **kw: decoded.append(raw) or real(raw, **kw))
    items = [NewRecord(type="message", text=f"bulk {i}", conversation="c", role="user") for i in range(300)]
    items.append(NewRecord(type="fact", key="user/city", value="Lisbon"))
    vault.append(items)
    assert decoded == []
    shown = sorted((r.id, r.text, r.effective_class, r.conversation) for r in vault.timeline(limit=1000))
    facts = [(f.key, f.status, f.current.value if f.current else None) for f in vault.facts()]
    vault.lock()
    with Vault.open(path, Unlock.passphrase(PASSPHRASE), cache=False) as cold:
        assert sorted((r.id, r.text, r.effective_class, r.conversation) for r in cold.timeline(limit=1000)) == shown
        assert [(f.key, f.status, f.current.value if f.current else None) for f in cold.facts()] == facts
        assert cold.problems(full=True) == []
