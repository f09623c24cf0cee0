"""Merging copies of a vault is the union of their files, and the state depends only on that set.

Property tests over generated histories: two or three replicas (copies of one vault folder, each
opened by its own installation, i.e. its own ``CAMILLO_HOME``) write facts, messages, deletions,
resolutions, confirmations and rejections in two compartments, and exchange random subsets of their
files.  Then:

* (a) feeding the union of every replica's files into a fresh folder in many shuffled arrival orders
  (in random chunks, refreshing after each) always ends in the same state as one cold open;
* (b) ``merge_into`` is commutative, associative and idempotent on the resulting states;
* (c) two replicas that keep writing while exchanging partial sets of files converge after a final
  full exchange, to the state a cold open of the union computes.

Along the way no honest history may ever show a rejected batch, a fork, a damaged file or a bad
signature; gaps, unreadable segments and not-yet-vouched slots are allowed while files are missing.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest
from camillo import Authority, NewRecord, Unlock, Vault
from camillo.errors import DamagedFile, UsageError, WrongCredential
from camillo.storage import kind_of
from camillo.transport import merge_into
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .helpers import fail_the_nth_write

PASSPHRASE = "correct horse battery staple"
KEYS = ("user/city", "user/food", "work/role")
COMPARTMENTS = ("personal", "work")
VALUES = ("Lisbon", "Porto", "Faro", "tea", "coffee", "cat", 7, ["a", "b"])
# Never acceptable for an honest history, not even while files are still missing.
FORBIDDEN = {"rejected", "fork", "damaged", "signature", "revocation"}
ORDERS = 20


def property_settings(examples: int) -> settings:
    # Each example builds its own replicas (a few hundred ms), so few examples, no deadline.
    return settings(max_examples=examples, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


# ---------------------------------------------------------------------------------------------- helpers


@contextlib.contextmanager
def as_home(path: str) -> Iterator[None]:
    """Act as the installation living in ``path`` while opening a vault (the facade reads
    CAMILLO_HOME when a Vault object is made; it keeps its paths afterwards)."""
    old = os.environ.get("CAMILLO_HOME")
    os.environ["CAMILLO_HOME"] = path
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("CAMILLO_HOME", None)
        else:
            os.environ["CAMILLO_HOME"] = old


def vault_files(root: str) -> dict[str, str]:
    """Canonical vault names (descriptor, slots, envelopes, segments) -> absolute paths."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for f in files:
            full = os.path.join(dirpath, f)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if kind_of(rel) in ("descriptor", "slot", "envelope", "segment"):
                out[rel] = full
    return out


def copy_in(src: str, root: str, rel: str) -> None:
    """Deliver one file the way a sync client does: whole, under its final name."""
    dst = os.path.join(root, rel)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    tmp = os.path.join(os.path.dirname(dst), ".incoming")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dst)


def union_folder(folders: list[str], dst: str) -> str:
    files: dict[str, str] = {}
    for f in folders:
        for rel, path in vault_files(f).items():
            files.setdefault(rel, path)
    os.makedirs(dst)
    for rel, path in sorted(files.items()):
        copy_in(path, dst, rel)
    return dst


def kinds(vault: Vault) -> list[str]:
    return sorted(p.kind for p in vault.problems())


def assert_honest(vault: Vault, where: str) -> None:
    bad = [p for p in vault.problems() if p.kind in FORBIDDEN]
    assert not bad, f"{where}: {[(p.kind, p.message) for p in bad]}"


def summary(vault: Vault) -> dict[str, Any]:
    """Everything the materialised state says, in a canonical, comparable form."""
    timeline = [r.id.hex() for r in vault.timeline()]
    return {
        "facts": sorted(
            (f.compartment, f.key, f.status, f.current.id.hex() if f.current else None,
             tuple(sorted(c.id.hex() for c in f.candidates)), tuple(sorted(d.id.hex() for d in f.discarded)),
             tuple(sorted(h.id.hex() for h in f.history)), tuple(h.id.hex() for h in f.history),
             tuple(p.id.hex() for p in f.proposed))
            for f in vault.facts()
        ),
        "timeline": timeline,
        "timeline_set": sorted(timeline),
        "timeline_all": [r.id.hex() for r in vault.timeline(include_hidden=True)],
        "conflicts": [(f.compartment, f.key, tuple(c.id.hex() for c in f.candidates)) for f in vault.conflicts()],
        "inbox": sorted(r.id.hex() for r in vault.inbox()),
        "accepted": sorted(b.hex() for b in vault.session.log.accepted),
        "records": sorted((r.id.hex(), r.valid, r.reason, r.effective_class, r.hidden)
                          for r in vault.session.materialized.all_records()),
        "problems": kinds(vault),
    }


def diff(a: dict[str, Any], b: dict[str, Any]) -> str:
    return ", ".join(k for k in a if a[k] != b.get(k)) or "(none)"


# ---------------------------------------------------------------------------------------------- the lab


class Lab:
    """A scratch directory with ``n`` replicas of one vault, each its own installation."""

    def __init__(self, n: int) -> None:
        self.root = tempfile.mkdtemp(prefix="camillo-merge-")
        self.reader_home = os.path.join(self.root, "reader-home")  # never registered: reads only
        self.folders = [os.path.join(self.root, f"r{i}") for i in range(n)]
        self.homes = [os.path.join(self.root, f"h{i}") for i in range(n)]
        self._n = 0
        with as_home(self.homes[0]):
            first, _ = Vault.create(self.folders[0], PASSPHRASE, device_name="replica 0")
        for folder in self.folders[1:]:
            shutil.copytree(self.folders[0], folder)
        self.vaults = [first]
        for i in range(1, n):
            with as_home(self.homes[i]):
                self.vaults.append(Vault.open(self.folders[i], Unlock.passphrase(PASSPHRASE)))

    def close(self) -> None:
        for v in self.vaults:
            if not v.locked:
                v.lock()
        shutil.rmtree(self.root, ignore_errors=True)

    def scratch(self, name: str) -> str:
        self._n += 1
        return os.path.join(self.root, f"{name}-{self._n}")

    # -- the generated operations

    def apply(self, step: tuple) -> None:
        op, i = step[0], step[1] % len(self.vaults)
        v = self.vaults[i]
        try:
            if op == "put":
                _, _, comp, key, value, klass, typ = step
                v.append([NewRecord(type=typ, key=key, value=value, authority=klass)], compartment=comp)
            elif op == "note":
                _, _, comp, n, assistant = step
                v.append([NewRecord(type="message", conversation=f"c{n % 3}", role="assistant" if assistant else "user",
                                    text=f"message {n}")], compartment=comp)
            elif op == "forget":
                _, _, comp, key = step
                v.forget(key=key, compartment=comp)
            elif op == "hide":
                notes = [r for r in v.timeline() if r.kind_name == "NOTE"]
                if notes:
                    v.forget(record=notes[step[2] % len(notes)].id)
            elif op == "resolve":
                _, _, idx, pick = step
                conflicts = v.conflicts()
                if conflicts:
                    f = conflicts[idx % len(conflicts)]
                    if pick:
                        v.resolve(f.key, compartment=f.compartment, pick=f.candidates[idx % len(f.candidates)].id)
                    else:
                        v.resolve(f.key, compartment=f.compartment, value=f"resolved {idx}", value_given=True)
            elif op in ("confirm", "reject"):
                inbox = v.inbox()
                if inbox:
                    target = inbox[step[2] % len(inbox)].id
                    (v.confirm if op == "confirm" else v.reject)([target])
            elif op == "sync":
                _, _, dst, seed, fraction = step
                self.sync(i, dst % len(self.vaults), random.Random(seed), fraction)
            else:  # pragma: no cover - the strategy makes no other steps
                raise AssertionError(op)
        except UsageError:
            pass  # e.g. forgetting a key this replica has not seen: the user is told, nothing is written
        assert_honest(v, f"replica {i} after {step}")

    def sync(self, src: int, dst: int, rng: random.Random, fraction: float) -> int:
        """Copy a random subset of the files ``src`` has and ``dst`` lacks, then let ``dst`` look."""
        if src == dst:
            return 0
        have = vault_files(self.folders[dst])
        theirs = vault_files(self.folders[src])
        missing = sorted(set(theirs) - set(have))
        chosen = [rel for rel in missing if rng.random() < fraction]
        for rel in chosen:
            copy_in(theirs[rel], self.folders[dst], rel)
        self.vaults[dst].refresh()
        assert_honest(self.vaults[dst], f"replica {dst} after receiving {len(chosen)} files from {src}")
        return len(chosen)

    def full_exchange(self) -> None:
        for _ in range(2):
            for a in range(len(self.vaults)):
                for b in range(len(self.vaults)):
                    self.sync(a, b, random.Random(0), 1.0)

    # -- reading a folder as a fresh reader would

    def cold(self, folder: str) -> dict[str, Any]:
        with as_home(self.reader_home):
            v = Vault.open(folder, Unlock.passphrase(PASSPHRASE), register=False, cache=False)
        try:
            return summary(v)
        finally:
            v.lock()

    def replay(self, union: str, rng: random.Random, *, late_envelopes: bool) -> dict[str, Any]:
        """Deliver the files of ``union`` into a new folder in a shuffled order, in random chunks,
        refreshing after each; return the summary at the end.  The descriptor comes first; slots
        and envelopes come next unless ``late_envelopes``, in which case they are shuffled in with
        the segments.  The vault is opened as soon as enough has arrived to open it."""
        files = vault_files(union)
        folder = self.scratch("order")
        os.makedirs(folder)
        copy_in(files["VMEM"], folder, "VMEM")
        keys = sorted(r for r in files if kind_of(r) in ("slot", "envelope"))
        segs = sorted(r for r in files if kind_of(r) == "segment")
        if late_envelopes:
            rest = keys + segs
            rng.shuffle(rest)
        else:
            for rel in keys:
                copy_in(files[rel], folder, rel)
            rest = segs[:]
            rng.shuffle(rest)
        vault: Vault | None = None
        pos = 0
        while pos < len(rest):
            chunk = rest[pos : pos + rng.randint(1, 6)]
            pos += len(chunk)
            for rel in chunk:
                copy_in(files[rel], folder, rel)
            if vault is None:
                try:
                    with as_home(self.reader_home):
                        vault = Vault.open(folder, Unlock.passphrase(PASSPHRASE), register=False, cache=False)
                except (WrongCredential, DamagedFile):
                    continue  # not enough has arrived to unlock (no slot, envelope or genesis yet)
            else:
                vault.refresh()
            assert_honest(vault, f"arrival order after {pos}/{len(rest)} files")
        assert vault is not None, "the complete set of files never opened"
        try:
            return summary(vault)
        finally:
            vault.lock()
            shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------------------------------------- strategies

replica = st.integers(0, 2)
compartment = st.sampled_from(COMPARTMENTS)
busy_compartment = st.sampled_from(("personal", "personal", "work"))  # more collisions on one key
key = st.sampled_from(KEYS)

put = st.tuples(st.just("put"), replica, busy_compartment, key, st.sampled_from(VALUES),
                st.sampled_from([Authority.USER, Authority.INFERRED]), st.sampled_from(["fact", "fact", "preference"]))
note = st.tuples(st.just("note"), replica, compartment, st.integers(0, 50), st.booleans())
forget_key = st.tuples(st.just("forget"), replica, busy_compartment, key)
hide = st.tuples(st.just("hide"), replica, st.integers(0, 20))
resolve = st.tuples(st.just("resolve"), replica, st.integers(0, 7), st.booleans())
curate = st.tuples(st.sampled_from(["confirm", "reject"]), replica, st.integers(0, 7))
sync = st.tuples(st.just("sync"), replica, replica, st.integers(0, 2**32 - 1), st.sampled_from([0.3, 0.6, 1.0]))

step = st.one_of(put, put, put, note, note, hide, forget_key, resolve, curate, sync, sync, sync)
# A history is a mix of everything, then a tail of concurrent writes (no sync in between), so the
# union usually ends with open conflicts and edits discarded by a concurrent delete.
history = st.builds(lambda body, tail: body + tail, st.lists(step, min_size=6, max_size=24),
                    st.lists(st.one_of(put, put, forget_key), min_size=0, max_size=8))


def run_history(lab: Lab, steps: list[tuple]) -> None:
    for s in steps:
        lab.apply(s)


# ---------------------------------------------------------------------------------------------- (a)


@property_settings(10)
@given(n=st.integers(2, 3), steps=history, order_seed=st.integers(0, 2**32 - 1))
def test_state_is_independent_of_arrival_order(n, steps, order_seed):
    lab = Lab(n)
    try:
        run_history(lab, steps)
        union = union_folder(lab.folders, lab.scratch("union"))
        reference = lab.cold(union)
        assert reference["problems"] == [], reference["problems"]
        for k in range(ORDERS):
            rng = random.Random(order_seed + k)
            got = lab.replay(union, rng, late_envelopes=k % 4 == 3)
            assert got == reference, f"arrival order {k} (seed {order_seed + k}) differs in: {diff(got, reference)}"
    finally:
        lab.close()


# ---------------------------------------------------------------------------------------------- (b)


def merged(lab: Lab, base: str, *others: str) -> str:
    folder = lab.scratch("merge")
    shutil.copytree(base, folder)
    for other in others:
        merge_into(folder, other)
    return folder


@property_settings(12)
@given(steps=history)
def test_merge_is_commutative_associative_and_idempotent(steps):
    lab = Lab(3)
    try:
        run_history(lab, steps)
        for v in lab.vaults:
            v.lock()
        a, b, c = lab.folders
        ab, ba = merged(lab, a, b), merged(lab, b, a)
        assert sorted(vault_files(ab)) == sorted(vault_files(ba))
        s_ab = lab.cold(ab)
        assert s_ab == lab.cold(ba), "A∪B differs from B∪A"
        left = merged(lab, ab, c)
        right = merged(lab, a, merged(lab, b, c))
        s_left = lab.cold(left)
        assert s_left == lab.cold(right), "(A∪B)∪C differs from A∪(B∪C)"
        assert s_left == lab.cold(union_folder(lab.folders, lab.scratch("union")))
        assert s_left["problems"] == []
        aa = merged(lab, a, a)
        assert merge_into(aa, a) == [] and merge_into(left, ab) == []
        assert lab.cold(aa) == lab.cold(a), "A∪A differs from A"
    finally:
        lab.close()


# ---------------------------------------------------------------------------------------------- (c)

two_replicas = st.integers(0, 1)
write = st.one_of(
    st.tuples(st.just("put"), two_replicas, compartment, key, st.sampled_from(VALUES),
              st.sampled_from([Authority.USER, Authority.INFERRED]), st.sampled_from(["fact", "preference"])),
    st.tuples(st.just("note"), two_replicas, compartment, st.integers(0, 50), st.booleans()),
    st.tuples(st.just("forget"), two_replicas, compartment, key),
    st.tuples(st.just("hide"), two_replicas, st.integers(0, 20)),
    st.tuples(st.just("resolve"), two_replicas, st.integers(0, 7), st.booleans()),
    st.tuples(st.sampled_from(["confirm", "reject"]), two_replicas, st.integers(0, 7)),
)
exchange = st.tuples(st.just("exchange"), st.integers(0, 2**32 - 1), st.sampled_from([0.25, 0.5, 0.8]))


@property_settings(15)
@given(steps=st.lists(st.one_of(write, write, exchange), min_size=4, max_size=24))
def test_partial_syncs_converge_after_a_full_exchange(steps):
    lab = Lab(2)
    try:
        for s in steps:
            if s[0] == "exchange":
                rng = random.Random(s[1])
                lab.sync(0, 1, rng, s[2])
                lab.sync(1, 0, rng, s[2])
            else:
                lab.apply(s)
        lab.full_exchange()
        assert sorted(vault_files(lab.folders[0])) == sorted(vault_files(lab.folders[1]))
        s0, s1 = summary(lab.vaults[0]), summary(lab.vaults[1])
        assert s0["problems"] == [] and s1["problems"] == [], (s0["problems"], s1["problems"])
        assert s0 == s1, f"replicas differ in: {diff(s0, s1)}"
        cold = lab.cold(lab.folders[0])
        assert s0 == cold, f"a replica's incremental state differs from a cold open in: {diff(s0, cold)}"
    finally:
        lab.close()


# ---------------------------------------------------------------------------------------------- fixed cases


def test_conflict_delete_and_resurrection_in_every_order():
    """A small hand-written history touching every rule, replayed in many orders."""
    lab = Lab(2)
    try:
        steps = [
            ("put", 0, "personal", "user/city", "Lisbon", Authority.USER, "fact"),
            ("put", 0, "personal", "user/food", "coffee", Authority.USER, "fact"),
            ("sync", 0, 1, 1, 1.0),
            ("put", 0, "personal", "user/city", "Porto", Authority.USER, "fact"),
            ("put", 1, "personal", "user/city", "Faro", Authority.USER, "fact"),
            ("put", 1, "personal", "user/food", "tea", Authority.INFERRED, "fact"),  # a proposal beside coffee
            ("put", 1, "work", "work/role", "editor", Authority.USER, "fact"),
            ("forget", 0, "work", "work/role"),  # no such fact on replica 0 yet: refused
            ("sync", 1, 0, 2, 1.0),
            ("forget", 0, "work", "work/role"),
            ("put", 1, "work", "work/role", "writer", Authority.USER, "fact"),  # concurrent with the DEL
            ("note", 1, "personal", 3, False),
            ("note", 0, "personal", 4, True),
            ("sync", 0, 1, 3, 1.0),
            ("sync", 1, 0, 4, 1.0),
        ]
        run_history(lab, steps)
        f = lab.vaults[0].fact("user/city", "personal")
        assert f.status == "conflict" and {c.value for c in f.candidates} == {"Porto", "Faro"}
        food = lab.vaults[0].fact("user/food", "personal")
        assert (food.status, food.current.value, [p.value for p in food.proposed]) == ("ok", "coffee", ["tea"])
        role = lab.vaults[0].fact("work/role", "work")
        assert role.status == "deleted" and [d.value for d in role.discarded] == ["writer"]
        run_history(lab, [("resolve", 1, 0, False), ("put", 0, "work", "work/role", "chef", Authority.USER, "fact"),
                          ("hide", 0, 0)])
        lab.full_exchange()
        union = union_folder(lab.folders, lab.scratch("union"))
        reference = lab.cold(union)
        assert reference["problems"] == []
        assert summary(lab.vaults[0]) == summary(lab.vaults[1]) == reference
        for k in range(ORDERS):
            got = lab.replay(union, random.Random(k), late_envelopes=k % 2 == 1)
            assert got == reference, f"order {k} differs in: {diff(got, reference)}"
    finally:
        lab.close()


@pytest.mark.parametrize("n", [3])
def test_three_replicas_gossip(n):
    """Replicas that only ever hear from each other through partial gossip still agree at the end."""
    lab = Lab(n)
    try:
        rng = random.Random(7)
        for r in range(12):
            i = r % n
            lab.apply(("put", i, COMPARTMENTS[r % 2], KEYS[r % 3], VALUES[r % len(VALUES)], Authority.USER, "fact"))
            lab.apply(("note", i, "personal", r, r % 2 == 0))
            lab.sync(i, (i + 1) % n, rng, 0.5)
        lab.full_exchange()
        states = [summary(v) for v in lab.vaults]
        assert all(s == states[0] for s in states)
        assert states[0] == lab.cold(lab.folders[0])
        assert states[0]["problems"] == []
    finally:
        lab.close()


@pytest.mark.regression
def test_forgetting_a_message_hides_it_in_every_order():
    """Regression: ``forget(record=<message>)`` writes a DEL without a key (pred names the message).
    It used to be refused by the record validator (CanonicalError: a DEL record lacks field(s) [4])."""
    lab = Lab(2)
    try:
        v0 = lab.vaults[0]
        keep = v0.append([NewRecord(type="message", conversation="c", role="user", text="keep me")]).written[0]
        gone = v0.append([NewRecord(type="message", conversation="c", role="user", text="hide me")]).written[0]
        v0.forget(record=gone)
        assert [r.id for r in v0.timeline()] == [keep]
        assert {r.id for r in v0.timeline(include_hidden=True)} == {keep, gone}
        lab.full_exchange()
        union = union_folder(lab.folders, lab.scratch("union"))
        reference = lab.cold(union)
        assert reference["timeline"] == [keep.hex()] and reference["problems"] == []
        assert summary(lab.vaults[1]) == reference
        for k in range(8):
            assert lab.replay(union, random.Random(k), late_envelopes=k % 2 == 1) == reference
    finally:
        lab.close()


def diverged(new_vault, tmp_path, messages: int) -> tuple[str, str]:
    """The new vault's folder after ``messages`` more one-message batches, and a copy from before."""
    path, vault, _ = new_vault
    copy = str(tmp_path / "copy")
    shutil.copytree(path, copy)
    for i in range(messages):
        vault.append([NewRecord(type="message", conversation="c", role="user", text=f"garden note {i}")])
    vault.lock()
    return path, copy


def test_a_merge_of_two_folders_lists_each_directory_once_and_finds_what_the_shelves_would(new_vault, tmp_path):
    """Between two folders ``merge_into`` finds the missing files from one listing of each directory
    on both sides (transport.loose_missing), not from the shelves' listings of both whole folders:
    the same names, whatever else lies in the folders (dot files, temp files, other programs' files,
    a sync service's conflict copies); with packs on either side, the shelves' listings decide."""
    from camillo import storage, transport

    path, copy = diverged(new_vault, tmp_path, 12)
    seg = next(n for n in storage.FolderShelf(path).list() if kind_of(n) == "segment")
    junk = [".DS_Store", "notes.txt", "segments/.tmp-0123456789abcdef", "segments/" + seg.split("/")[1] + "/x.seg",
            seg + ".sync-conflict-20261205-010203-ABCDEFG", "env/readme", "strange/dir/file"]
    for j in junk:
        os.makedirs(os.path.dirname(os.path.join(path, j)) or path, exist_ok=True)
        with open(os.path.join(path, j), "wb") as fh:
            fh.write(b"not a vault file")
    expected = set(storage.FolderShelf(path).list()) - set(storage.FolderShelf(copy).list())
    assert len(expected) >= 12
    assert sorted(transport.loose_missing(path, copy)) == sorted(expected)
    assert transport.loose_missing(copy, path) == []
    os.makedirs(os.path.join(copy, "packs"), exist_ok=True)
    with open(os.path.join(copy, "packs", "x.pack"), "wb") as fh:
        fh.write(b"a pack")
    assert transport.loose_missing(path, copy) is None
    assert set(merge_into(copy, path)) == {n for n in expected if kind_of(n) != "descriptor"}
    assert set(storage.FolderShelf(copy).list()) >= set(storage.FolderShelf(path).list())


def test_a_merge_writes_in_chunks_with_one_directory_fsync_each_and_loses_nothing(new_vault, tmp_path, monkeypatch):
    """``merge_into`` writes the files it copies a chunk at a time, each file durable before its name
    appears and each directory fsynced once per chunk (not twice per file: 20,000 fsyncs for a merge
    of 10,000 batches); a file that cannot be written stops the merge with the error and leaves no
    file of its chunk behind, and merging again completes it."""
    from camillo import storage, transport
    from camillo.errors import StorageError

    path, copy = diverged(new_vault, tmp_path, 30)
    synced: list[str] = []
    real_sync = storage.fsync_dir
    monkeypatch.setattr(storage, "fsync_dir", lambda d: (synced.append(d), real_sync(d))[1])
    monkeypatch.setattr(transport, "MERGE_CHUNK_FILES", 8)
    real_stage = fail_the_nth_write(monkeypatch, 12)
    before = set(storage.FolderShelf(copy).list())
    with pytest.raises(StorageError, match="No space left"):
        merge_into(copy, path)
    partial = set(storage.FolderShelf(copy).list()) - before
    assert len(partial) == 8, "the chunk that failed left files behind, or an earlier chunk was undone"
    monkeypatch.setattr(storage.FolderShelf, "stage", real_stage)
    synced.clear()
    copied = merge_into(copy, path)
    assert copied and set(storage.FolderShelf(copy).list()) == set(storage.FolderShelf(path).list())
    # each directory the files went into fsynced once per chunk that wrote there (three chunks here),
    # not twice per file
    leaves = {os.path.join(copy, *n.split("/")[:-1]) for n in copied}
    leaf_syncs = sum(synced.count(d) for d in leaves)
    assert leaf_syncs <= len(leaves) + 2 < 2 * len(copied), f"{leaf_syncs} fsyncs of {len(leaves)} directories"
    with Vault.open(copy, Unlock.passphrase(PASSPHRASE), cache=False, register=False) as merged, \
            Vault.open(path, Unlock.passphrase(PASSPHRASE), cache=False, register=False) as original:
        assert [r.id for r in merged.timeline()] == [r.id for r in original.timeline()]
