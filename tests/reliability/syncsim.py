"""A simulated folder sync between two device copies of one vault, with the faults real sync
services have: files delivered late and out of order, partially (a file observed while it is still
being written, under its final name), duplicated under conflict names (Dropbox, Syncthing, Google
Drive, OneDrive, iCloud placeholders), deletions, and reverts to an older copy (rollback).

:class:`Upstream` is what device A wrote after a common baseline (its new files, in write order,
with the truth about each: record ids and texts, the fact value it sets).  :class:`Replica` is
device B's copy plus B's open vault: every fault is applied to B's folder with plain file writes
(what a sync client does), then B refreshes and :meth:`Replica.check` compares what B shows with
what it may show given what was really delivered.

pytest main thread only.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field

from camillo import NewRecord, Unlock, Vault

from tests.reliability.scenarios import PASSPHRASE

KEY = "user/city"
BASE_CITY = "Lisbon"

CONFLICT_STYLES = {
    "dropbox": "{stem} (conflicted copy 2026-11-29){ext}",
    "dropbox-named": "{stem} (Alice's conflicted copy 2026-11-29){ext}",
    "syncthing": "{stem}.sync-conflict-20261129-101010-ABCDEFG{ext}",
    "gdrive": "{stem} (1){ext}",
    "onedrive": "{stem}-DESKTOP-4F2K9{ext}",
    "icloud-placeholder": ".{stem}{ext}.icloud",
    "icloud-dup": "{stem} 2{ext}",
    "nextcloud": "{stem} (conflicted copy 2026-11-29 101010){ext}",
}


@dataclass
class UpFile:
    name: str  # vault file name (segments/xx/<hash>.seg)
    data: bytes
    index: int  # 1-based write order
    seq: int
    batch: bytes
    records: dict[str, str]  # record id hex -> text (messages) or "" (facts)
    city: str | None  # the fact value this batch sets, if any
    put: str | None = None  # id hex of that PUT record
    pred: str | None = None  # id hex of the record its pred names (the previous value)


@dataclass
class Upstream:
    files: list[UpFile]
    base_records: dict[str, str]

    def present(self, delivered: set[int]) -> set[str]:
        return set(self.base_records) | {r for f in self.files if f.index in delivered for r in f.records}

    def waiting(self, delivered: set[int]) -> set[str]:
        """PUTs delivered whose pred has not arrived: they do not count yet (spec §19.1 rule 6)."""
        have = self.present(delivered)
        return {f.put for f in self.files if f.index in delivered and f.put and f.pred not in have}

    def city_after(self, delivered: set[int]) -> str:
        waiting = self.waiting(delivered)
        sets = [f for f in self.files if f.index in delivered and f.city is not None and f.put not in waiting]
        return max(sets, key=lambda f: f.index).city if sets else BASE_CITY


def vault_files(path: str) -> set[str]:
    out = set()
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            rel = os.path.relpath(os.path.join(dirpath, f), path).replace(os.sep, "/")
            out.add(rel)
    return out


def build(base: str) -> tuple[str, str, Upstream]:
    """Device A creates the vault; device B joins a copy of it and syncs; then A writes four
    batches (one segment each) that B has not received.  Returns (B's folder, B's home, upstream)."""
    a, b = os.path.join(base, "a"), os.path.join(base, "b")
    home_a, home_b = os.path.join(base, "home-a"), os.path.join(base, "home-b")
    vault, _ = Vault.create(a, PASSPHRASE, device_name="A", home=home_a)
    with vault:
        base_records = {vault.append([NewRecord(type="message", text="base")]).written[0].hex(): "base"}
        last_put = vault.append([NewRecord(type="fact", key=KEY, value=BASE_CITY)]).written[0].hex()
        base_records[last_put] = ""
    shutil.copytree(a, b)
    Vault.open(b, Unlock.passphrase(PASSPHRASE), home=home_b, device_name="B").lock()
    from camillo.transport import merge_into

    merge_into(a, b)
    with Vault.open(b, Unlock.passphrase(PASSPHRASE), home=home_b) as v:  # B has seen A's registration of B
        v.refresh()
    plan = [
        ([NewRecord(type="message", text="m1"), NewRecord(type="fact", key=KEY, value="Porto")], "Porto"),
        ([NewRecord(type="fact", key=KEY, value="Braga")], "Braga"),
        ([NewRecord(type="message", text="m3")], None),
        ([NewRecord(type="message", text="m4"), NewRecord(type="fact", key=KEY, value="Faro")], "Faro"),
    ]
    files = []
    with Vault.open(a, Unlock.passphrase(PASSPHRASE), home=home_a) as v:
        cid = v.compartment_id("personal")
        for i, (items, city) in enumerate(plan, 1):
            before = vault_files(a)
            ch = v.append(items)
            new = sorted(n for n in vault_files(a) - before if n.endswith(".seg"))
            assert len(new) == 1, new
            bid = ch.batches[0]
            seq = v.session.batches[bid].header.seq
            recs = {r.hex(): (it.text or "") for r, it in zip(ch.written, items)}
            data = open(os.path.join(a, new[0]), "rb").read()
            put = next((r.hex() for r, it in zip(ch.written, items) if it.key == KEY), None)
            f = UpFile(new[0], data, i, seq, bid, recs, city, put, last_put if put else None)
            assert put is None or list(v.record(bytes.fromhex(put)).pred) == [bytes.fromhex(last_put)]
            last_put = put or last_put
            files.append(f)
        assert all(v.session.batches[f.batch].header.compartment_id == cid for f in files)
    return b, home_b, Upstream(files, base_records)


def conflict_name(name: str, style: str) -> str:
    directory, base = name.rsplit("/", 1)
    stem, ext = base.rsplit(".", 1)
    return f"{directory}/" + CONFLICT_STYLES[style].format(stem=stem, ext="." + ext)


@dataclass
class Replica:
    """B's folder, B's open vault and what was delivered to it so far."""

    path: str
    home: str
    up: Upstream
    vault: Vault | None = None
    complete: set[int] = field(default_factory=set)
    partial: set[int] = field(default_factory=set)
    best_city_seen: int = 0  # index in the upstream of the newest city B has shown
    observations: int = 0

    def open(self) -> None:
        self.vault = Vault.open(self.path, Unlock.passphrase(PASSPHRASE), home=self.home)

    def close(self) -> None:
        if self.vault is not None:
            self.vault.lock()
            self.vault = None

    def reopen(self) -> None:
        self.close()
        self.open()

    def _write(self, name: str, data: bytes) -> None:
        target = os.path.join(self.path, *name.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "wb") as fh:
            fh.write(data)

    # -- what the sync service does

    def deliver(self, i: int) -> None:
        f = self.up.files[i - 1]
        self._write(f.name, f.data)
        self.partial.discard(i)
        self.complete.add(i)

    def deliver_partial(self, i: int, n: int) -> None:
        f = self.up.files[i - 1]
        assert 0 <= n < len(f.data)
        self._write(f.name, f.data[:n])
        self.complete.discard(i)
        self.partial.add(i)

    def conflict_copy(self, i: int, style: str, n: int | None = None) -> None:
        f = self.up.files[i - 1]
        self._write(conflict_name(f.name, style), f.data if n is None else f.data[:n])

    def delete(self, i: int) -> None:
        f = self.up.files[i - 1]
        try:
            os.unlink(os.path.join(self.path, *f.name.split("/")))
        except FileNotFoundError:
            pass
        self.complete.discard(i)
        self.partial.discard(i)

    # -- what B may show

    def check(self, *, rolled_back: bool = False) -> tuple[str, list[str]]:
        """Refresh B and check it against the delivery; returns B's sync status."""
        v = self.vault
        assert v is not None
        v.refresh()
        self.observations += 1
        up = self.up
        expected = dict(up.base_records)
        for f in up.files:
            if f.index in self.complete:
                expected.update(f.records)
        waiting = up.waiting(self.complete)
        for rid in waiting:
            r = v.record(bytes.fromhex(rid))
            assert r is not None and not r.valid and (r.reason or "").startswith("waiting"), \
                f"PUT {rid[:12]} whose pred has not arrived counts: {r and r.reason}"
        for rid, text in expected.items():
            if rid in waiting:
                continue
            r = v.record(bytes.fromhex(rid))
            assert r is not None and r.valid, (f"record {rid[:12]} ({text!r}) of a delivered file is not shown"
                                               + (f": {r.reason}" if r is not None else ""))
            if text:
                assert r.text == text, f"record {rid[:12]} shows {r.text!r}, not {text!r}"
        undelivered = {rid for f in up.files if f.index not in self.complete for rid in f.records}
        leaked = {rid for rid in undelivered if v.record(bytes.fromhex(rid)) is not None}
        assert not leaked, f"records of files not (completely) delivered are shown: {sorted(leaked)}"
        texts = {r.text for r in v.timeline()}
        assert not {t for f in up.files if f.index not in self.complete for t in f.records.values() if t} & texts
        fact = v.fact(KEY)
        want = up.city_after(self.complete)
        assert fact.status == "ok", f"fact {KEY} is {fact.status} (one writer, one chain: it never conflicts)"
        assert fact.current.value == want, f"fact {KEY} is {fact.current.value!r}, expected {want!r}"
        status, details = v.sync_status()
        problems = v.problems()
        shown_index = max([f.index for f in up.files if f.city == want and f.index in self.complete
                           and f.put not in waiting] or [0])
        went_back = shown_index < self.best_city_seen
        self.best_city_seen = max(self.best_city_seen, shown_index)
        top = max(self.complete, default=0)
        holes = [f for f in up.files if f.index < top and f.index not in self.complete]
        partial = [up.files[i - 1] for i in sorted(self.partial)]
        text = "\n".join(details)
        if not rolled_back:
            bad = [p for p in problems if p.kind not in ("gap", "syncing", "damaged", "waiting")
                   or (p.kind == "damaged" and "does not match its name" not in p.message)]
            assert not bad, f"unexpected problems: {[(p.kind, p.message) for p in bad]}"
            damaged = {p.file for p in problems if p.kind == "damaged"}
            assert damaged == {f.name for f in partial}, f"damaged {damaged} but partial {[f.name for f in partial]}"
            assert len([p for p in problems if p.kind == "waiting"]) == len(waiting)
            if holes or partial:
                assert status == "syncing", f"status {status!r} with holes {[f.seq for f in holes]} and " \
                                            f"partial files {[f.name for f in partial]}"
                for f in holes:
                    assert f"seq {f.seq}" in text or f.batch.hex()[:12] in text, \
                        f"the status details do not name missing batch seq {f.seq}: {details}"
                for f in partial:
                    assert f.name in text, f"the status details do not name the incomplete file {f.name}: {details}"
            else:
                assert status == "up to date", f"status {status!r} ({details}) with everything delivered"
        if went_back:
            assert status != "up to date", "B shows an older fact than it already showed, and says it is up to date"
        return status, details
