"""Semantic search (``Vault.semantic_search``): ranking by cosine similarity blended with recency,
forgotten records left out, vectors kept compact in the local state, the same order everywhere."""

from __future__ import annotations

import math
import struct
import sys
import time

from camillo import NewRecord, Unlock, Vault
from camillo.search import HashingEmbedder, quantize

from ..conftest import PASSPHRASE


class CountingEmbedder(HashingEmbedder):
    def __init__(self) -> None:
        super().__init__(64)
        self.embedded = 0

    def embed(self, texts):
        self.embedded += len(texts)
        return super().embed(texts)


def add(vault: Vault, text: str, ts: int | None = None) -> bytes:
    vault.append([NewRecord(type="message", conversation="c", role="user", text=text, ts=ts)])
    return next(r.id for r in reversed(vault.timeline()) if r.text == text)


def test_ranking_follows_similarity_and_matches_a_direct_computation(new_vault):
    _, vault, _ = new_vault
    year_ago = int(time.time()) - 365 * 86400
    texts = ["tomatoes in the garden need water", "the train to Porto leaves at nine",
             "garden tomatoes and basil", "quarterly report for the board", "water the basil"]
    for t in texts:
        add(vault, t, ts=year_ago)
    emb = HashingEmbedder(64)
    got = vault.semantic_search("garden tomatoes", emb, limit=3)
    assert [v.text for _, v in got][:2] == ["garden tomatoes and basil", "tomatoes in the garden need water"]
    assert len(got) == 3
    # every score is the cosine of the stored vectors (one byte per dimension, and a scale) plus the
    # recency term (a year: 0.05/e), within 1/127 of the exact cosine
    q = emb.embed(["garden tomatoes"])[0]
    everything = vault.semantic_search("garden tomatoes", emb, limit=10)
    assert sorted(v.text for _, v in everything) == sorted(texts)
    for score, view in everything:
        exact = emb.embed([view.text])[0]
        blob, scale = quantize(exact)
        assert len(blob) == 64
        stored = [x * scale for x in struct.unpack("<64b", blob)]
        expected = sum(a * b for a, b in zip(q, stored)) + 0.05 * math.exp(-1)
        assert math.isclose(score, expected, abs_tol=1e-9), (view.text, score, expected)
        assert abs(score - (sum(a * b for a, b in zip(q, exact)) + 0.05 * math.exp(-1))) < 1 / 127
    assert [s for s, _ in everything] == sorted((s for s, _ in everything), reverse=True)


def test_forgotten_records_are_left_out_and_ties_are_ordered_by_id(new_vault):
    _, vault, _ = new_vault
    a = add(vault, "the same words", ts=1_700_000_000)
    b = add(vault, "the same words", ts=1_700_000_000)
    gone = add(vault, "the same words and a secret", ts=1_700_000_000)
    vault.forget(record=gone)
    got = vault.semantic_search("the same words", HashingEmbedder(64), limit=10)
    ids = [v.id for _, v in got]
    assert gone not in ids
    assert ids[:2] == sorted([a, b])
    assert got[0][0] == got[1][0]


def test_vectors_are_kept_in_the_cache_and_only_new_records_are_embedded(new_vault):
    path, vault, _ = new_vault
    for i in range(20):
        add(vault, f"note number {i} about the garden")
    emb = CountingEmbedder()
    vault.semantic_search("garden", emb)
    assert emb.embedded == 20 + 1  # every record, and the query
    vault.lock()
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as again:
        emb = CountingEmbedder()
        again.semantic_search("garden", emb)
        assert emb.embedded == 1, "the vectors were not kept in the cache"
        add(again, "a new note about the garden")
        top = again.semantic_search("a new note about the garden", emb, limit=1)
        assert emb.embedded == 1 + 1 + 1
        assert top[0][1].text == "a new note about the garden"


def test_an_empty_vault_and_a_zero_limit_give_nothing(new_vault):
    _, vault, _ = new_vault
    assert vault.semantic_search("anything", HashingEmbedder(64)) == []
    add(vault, "something")
    assert vault.semantic_search("something", HashingEmbedder(64), limit=0) == []


def test_without_numpy_the_same_results_come_back(new_vault, monkeypatch):
    _, vault, _ = new_vault
    for i in range(40):
        add(vault, f"note {i} about {'the garden' if i % 3 else 'the train'} and {'tea' if i % 2 else 'coffee'}",
            ts=int(time.time()) - i * 86400)
    emb = HashingEmbedder(64)
    with_numpy = vault.semantic_search("garden tea", emb, limit=7)
    monkeypatch.setitem(sys.modules, "numpy", None)  # import numpy now raises ImportError
    without = vault.semantic_search("garden tea", emb, limit=7)
    assert [v.id for _, v in without] == [v.id for _, v in with_numpy]
    assert all(math.isclose(a, b, abs_tol=1e-9) for (a, _), (b, _) in zip(without, with_numpy))


def test_vectors_are_scored_a_chunk_at_a_time_with_the_same_result(new_vault, monkeypatch):
    """Memory does not grow with the vault: chunks of a few vectors give what one chunk gives,
    including the order of ties."""
    from camillo import search

    _, vault, _ = new_vault
    for i in range(30):
        add(vault, f"note {i % 7} about {'the garden' if i % 3 else 'the train'}", ts=1_700_000_000 + i % 5)
    emb = HashingEmbedder(64)
    whole = vault.semantic_search("garden note", emb, limit=9)
    monkeypatch.setattr(search, "_SCORE_ROWS", 4)
    chunked = vault.semantic_search("garden note", emb, limit=9)
    assert [v.id for _, v in chunked] == [v.id for _, v in whole]
    assert all(math.isclose(a, b, abs_tol=1e-9) for (a, _), (b, _) in zip(chunked, whole))
    monkeypatch.setitem(sys.modules, "numpy", None)
    assert [v.id for _, v in vault.semantic_search("garden note", emb, limit=9)] == [v.id for _, v in whole]


def test_stored_vectors_take_one_byte_per_dimension(new_vault):
    _, vault, _ = new_vault
    add(vault, "a note about the garden")
    vault.semantic_search("garden", HashingEmbedder(64))
    db = vault.session.materialized.db
    assert db.execute("SELECT length(vec) FROM vectors").fetchall() == [(64,)]


def test_a_record_leaving_the_state_takes_its_vector_along(new_vault):
    """Erasure re-seals a record's batch without it: the state forgets the old batch, and the
    vector (which says what the text was about) must not stay behind in the local state."""
    _, vault, _ = new_vault
    keep = add(vault, "a note about the garden")
    secret = add(vault, "the secret diagnosis")
    vault.semantic_search("garden", HashingEmbedder(64))
    state = vault.session.materialized
    batch = state.record_location(secret)[0]
    rowid = state.db.execute("SELECT rowid FROM records WHERE id = ?", (secret,)).fetchone()[0]
    assert state.db.execute("SELECT count(*) FROM vectors WHERE record = ?", (rowid,)).fetchone()[0] == 1
    state.forget_batches([batch])
    assert state.db.execute("SELECT count(*) FROM vectors WHERE record = ?", (rowid,)).fetchone()[0] == 0
    assert state.db.execute("SELECT count(*) FROM vectors").fetchone()[0] == 1
    assert keep in [v.id for _, v in vault.semantic_search("garden", HashingEmbedder(64))]


def test_vectors_quantized_together_are_those_quantized_one_by_one():
    """Issue 19: the vectors of a chunk are quantized in one array operation (a loop in Python over
    every component was 6 s of embedding 100,000 records); the bytes and scales are exactly those of
    :func:`quantize`, ties rounded half to even included, and zero or non-finite vectors alike."""
    import random

    from camillo.search import quantize_all

    rng = random.Random(5)
    vecs = [[rng.uniform(-1, 1) for _ in range(64)] for _ in range(300)]
    vecs += [[0.0] * 64, [float("inf")] + [0.5] * 63, [float("nan")] * 64, [-2.0] + [0.0] * 63,
             [1.0, 0.5 / 127 * 3, -0.5 / 127 * 5, 2.5 / 127] + [0.0] * 60]  # (exact halves: k + 0.5)
    vecs += [HashingEmbedder(64).embed([f"garden note {i}"])[0] for i in range(50)]
    assert quantize_all(vecs) == [quantize(v) for v in vecs]
    assert quantize_all([]) == []


def _hashing_reference(text: str, dimension: int) -> list[float]:
    """The hashing embedder as first written: a loop over the features, no memo, no arrays."""
    import hashlib
    import re

    vec = [0.0] * dimension
    words = re.findall(r"\w+", text.lower())
    for feature in words + [a + " " + b for a, b in zip(words, words[1:])]:
        h = hashlib.blake2b(feature.encode(), digest_size=8).digest()
        vec[int.from_bytes(h[:4], "big") % dimension] += 1.0 if h[4] & 1 else -1.0
    norm = math.sqrt(sum(x * x for x in vec)) or 1.0
    return [x / norm for x in vec]


def test_the_hashing_embedder_gives_the_reference_vectors_bit_for_bit_one_text_or_many(monkeypatch):
    texts = ["", "   ", "garden garden garden", "Tomatoes in the GARDEN need water, tomatoes!",
             "Ünïcödé wörds and 数字 mixed with digits 42 42", "a", "a b a b a b a b",
             *(f"message {i} about the offsite, item {i % 7} of {i % 3}" for i in range(300))]
    for dimension in (64, 256, 7):
        expected = [_hashing_reference(t, dimension) for t in texts]
        emb = HashingEmbedder(dimension)
        batch = emb.embed(texts)  # one array with numpy installed
        assert [list(map(float, row)) for row in batch] == expected
        assert [emb.embed([t])[0] for t in texts] == expected  # one text at a time: lists, from the memo
        small = HashingEmbedder(dimension)
        monkeypatch.setattr(small, "MEMO", 5)  # the memo cleared whole many times over
        assert [list(map(float, row)) for row in small.embed(texts)] == expected
        assert len(small._memo) <= 5 + 2 * 12  # (cleared before a text's new features go in: at most one text's over)
    with monkeypatch.context() as mp:
        mp.setitem(sys.modules, "numpy", None)  # without numpy: lists from the loop
        plain = HashingEmbedder(64).embed(texts)
        assert isinstance(plain, list) and plain == [_hashing_reference(t, 64) for t in texts]
    # and what is stored from them: the same bytes as quantizing the reference one by one
    from camillo.search import quantize_all

    assert quantize_all(HashingEmbedder(64).embed(texts)) == [quantize(_hashing_reference(t, 64)) for t in texts]
