"""Search ranks inside the full-text index and reads only the records of the page it shows.

``search._by_relevance`` takes the best-ranked matches from FTS5 alone and looks up only those;
``search._match_count`` counts the index's matches less the invalid or forgotten ones.  Both must
give exactly what one ``ORDER BY bm25(search), newest`` join over every match gives: ties of equal
rank (identical texts) ordered newest first, forgotten records left out, modifiers that drop most
of the candidates (so that more are taken), every offset.
"""

from __future__ import annotations

import random

import pytest
from camillo import NewRecord
from camillo import search as S

WORDS = ["garden", "basil", "tomato", "coffee", "train", "ticket", "jazz", "record", "tax", "forms"]
QUERIES = ["garden", "basil tomato", "jazz*", '"tax forms"', "coffee compartment:work", "garden type:message",
           "ticket is:hidden", "train conversation:c1", "nothingmatches"]


def reference(state, text: str) -> tuple[int, list[bytes]]:
    """The plain plan: join every match, count and order in SQL."""
    q = S.parse(text)
    where, args = S._conditions(state, q)
    base = f"FROM search s JOIN records r ON r.rowid = s.rowid WHERE search MATCH ? AND {' AND '.join(where)}"
    match = S._fts_query(q)
    total = state.db.execute(f"SELECT count(*) {base}", [match, *args]).fetchone()[0]
    ids = [r[0] for r in state.db.execute(f"SELECT r.id {base} ORDER BY bm25(search), {S.NEWEST}", [match, *args])]
    return total, ids


@pytest.fixture
def vault_with_ties(new_vault):
    _, vault, _ = new_vault
    rng = random.Random(7)
    for batch in range(6):
        recs = []
        for i in range(60):
            # a third of the texts repeat exactly: equal ranks, ordered by time
            text = "garden basil tomato jazz" if i % 3 == 0 else " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9)))
            recs.append(NewRecord(type="message", conversation=f"c{i % 4}", role="user", text=text,
                                  ts=1_700_000_000 + rng.randrange(5)))  # many equal timestamps too
        vault.append(recs, compartment="work" if batch % 3 == 0 else "personal")
    for r in vault.timeline()[:40:3]:
        vault.forget(record=r.id)
    return vault


def test_relevance_pages_and_totals_equal_the_full_join(vault_with_ties):
    vault = vault_with_ties
    state = vault.session.materialized
    state.ensure_search()
    for text in QUERIES:
        total, expected = reference(state, text)
        for offset, limit in [(0, 1), (0, 10), (0, 200), (5, 7), (30, 25), (100, 50), (len(expected), 5)]:
            page = vault.search_page(text, offset=offset, limit=limit)
            assert page.total == total, text
            assert [h.record.id for h in page.hits] == expected[offset:offset + limit], (text, offset, limit)
        assert [r.id for r in vault.search(text, limit=50)] == expected[:50], text


def test_forgotten_matches_are_not_counted(vault_with_ties):
    vault = vault_with_ties
    before = vault.search_page("garden").total
    hit = vault.search("garden", limit=1)[0]
    vault.forget(record=hit.id)
    assert vault.search_page("garden").total == before - 1
    assert hit.id not in [h.record.id for h in vault.search_page("garden", limit=500).hits]
