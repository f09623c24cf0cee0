"""Semantic search (``Vault.semantic_search``): ranking by cosine similarity blended with recency,
forgotten records left out, vectors kept in the encrypted cache, the same order everywhere."""

from __future__ import annotations

import math
import struct
import sys
import time

from camillo import NewRecord, Unlock, Vault
from camillo.search import HashingEmbedder

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
    # every score is the cosine of the stored float32 vectors plus the recency term (a year: 0.05/e)
    q = emb.embed(["garden tomatoes"])[0]
    everything = vault.semantic_search("garden tomatoes", emb, limit=10)
    assert sorted(v.text for _, v in everything) == sorted(texts)
    for score, view in everything:
        vec = struct.unpack("<64f", struct.pack("<64f", *emb.embed([view.text])[0]))
        expected = sum(a * b for a, b in zip(q, vec)) + 0.05 * math.exp(-1)
        assert math.isclose(score, expected, abs_tol=1e-5), (view.text, score, expected)
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
