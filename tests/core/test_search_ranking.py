"""Search ranks inside the full-text index and reads only the records of the page it shows.

Relevance ranks the index's matches in windows of ``search.RELEVANCE_WINDOW``, newest first (the
index's rowid is the record's time above its row number, ``cache.SEARCH_KEY``): in each window, the
matches that pass the modifiers by bm25, then newest.  ``search._by_relevance`` scores only the windows
up to the page and looks up only the best candidates; time order (``search._newest``) reads the index
newest first and sorts the last second read; ``search._match_count`` counts the index's matches less
the invalid or forgotten ones.  Each must give exactly what the plain plan gives, every match joined
with its record and ordered in Python: ties of equal rank (identical texts) and of equal time (many
records in one second, which the index's order does not sort) ordered newest first, forgotten records
left out, modifiers that drop most of the candidates, time ranges, every offset, windows smaller and
larger than the page.
"""

from __future__ import annotations

import random

import pytest
from camillo import NewRecord, cache
from camillo import search as S
from camillo.errors import DamagedFile

WORDS = ["garden", "basil", "tomato", "coffee", "train", "ticket", "jazz", "record", "tax", "forms"]
QUERIES = ["garden", "basil tomato", "jazz*", '"tax forms"', "coffee compartment:work", "garden type:message",
           "ticket is:hidden", "train conversation:c1", "nothingmatches", "garden before:2023-11-14",
           "basil after:2023-11-13", "tomato after:2023-11-14 before:2023-11-16"]


def reference(state, text: str, window: int) -> tuple[int, list[bytes], list[bytes]]:
    """The plain plan: every match, joined with its record and ordered in Python: (total, by
    relevance, by time)."""
    q = S.parse(text)
    where, args = S._conditions(state, q)
    match = S._fts_query(q)
    passing = {sk: (rank, S._newest_key(ts, lamport, idx, rid)) for sk, rank, ts, lamport, idx, rid in state.db.execute(
        f"SELECT s.rowid, bm25(search), r.ts, r.lamport, r.idx, r.id FROM search s JOIN records r "
        f"ON r.rowid = (s.rowid & {cache.SEARCH_ROW_MASK}) WHERE search MATCH ? AND {' AND '.join(where)}",
        [match, *args])}
    matches = [sk for (sk,) in state.db.execute("SELECT rowid FROM search WHERE search MATCH ?", [match])]
    matches.sort(reverse=True)
    relevance = []
    for at in range(0, len(matches), window):
        relevance += [key[-1] for _rank, key in sorted(passing[sk] for sk in matches[at:at + window] if sk in passing)]
    return len(passing), relevance, [key[-1] for _rank, key in sorted(passing.values(), key=lambda p: p[1])]


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


@pytest.mark.parametrize("window", [7, 50, S.RELEVANCE_WINDOW])
def test_relevance_and_time_pages_equal_the_plain_plan(vault_with_ties, monkeypatch, window):
    vault = vault_with_ties
    monkeypatch.setattr(S, "RELEVANCE_WINDOW", window)
    state = vault.session.materialized
    state.ensure_search()
    for text in QUERIES:
        total, by_relevance, by_time = reference(state, text, window)
        for offset, limit in [(0, 1), (0, 10), (0, 200), (5, 7), (30, 25), (100, 50), (len(by_time), 5)]:
            page = vault.search_page(text, offset=offset, limit=limit)
            assert page.total == total, text
            assert [h.record.id for h in page.hits] == by_relevance[offset:offset + limit], (text, offset, limit)
            page = vault.search_page(text, offset=offset, limit=limit, order="time")
            assert page.total == total, text
            assert [h.record.id for h in page.hits] == by_time[offset:offset + limit], (text, offset, limit)
        assert [r.id for r in vault.search(text, limit=50)] == by_relevance[:50], text


def test_the_index_lists_matches_in_time_order(vault_with_ties):
    """The index's rowid is the record's time above its row: read newest first, the times never rise."""
    state = vault_with_ties.session.materialized
    state.ensure_search()
    rows = state.db.execute(f"SELECT r.ts, s.rowid & {cache.SEARCH_ROW_MASK} = r.rowid FROM search s JOIN records r "
                            f"ON r.rowid = (s.rowid & {cache.SEARCH_ROW_MASK}) WHERE search MATCH 'garden' "
                            "ORDER BY s.rowid DESC").fetchall()
    assert len(rows) > 50 and all(same for _ts, same in rows)
    times = [ts for ts, _same in rows]
    assert times == sorted(times, reverse=True)


def test_an_index_keyed_by_row_is_built_again(vault_with_ties):
    """A state of an earlier version (the index's rowid the record's row, no ``search_key`` mark) has
    its index dropped and built again in time order when first searched."""
    vault = vault_with_ties
    state = vault.session.materialized
    expected = [h.record.id for h in vault.search_page("garden", limit=500).hits]
    db = state.db
    db.execute("INSERT INTO search(search) VALUES('delete-all')")
    db.execute(f"INSERT INTO search(rowid, body) SELECT rowid, {cache.SEARCH_BODY} FROM records WHERE kind IN (1, 3)")
    db.execute("DELETE FROM cache_meta WHERE key = 'search_key'")
    cache.complete_schema(db)
    assert db.execute("SELECT value FROM cache_meta WHERE key = 'indexed'").fetchone() is None
    assert db.execute("SELECT count(*) FROM search WHERE search MATCH 'garden'").fetchone()[0] == 0
    state._indexed = 0  # (what a state read back with that database holds)
    assert [h.record.id for h in vault.search_page("garden", limit=500).hits] == expected


def test_a_state_without_room_in_the_search_key_is_rebuilt(vault_with_ties):
    """Row numbers above 2^30 have no room in the index's rowid: the state is refused as unusable
    (deleted and rebuilt on the next open), never indexed under a key that names another row."""
    vault = vault_with_ties
    state = vault.session.materialized
    state.ensure_search()
    state.db.execute("UPDATE records SET rowid = ? WHERE rowid = (SELECT max(rowid) FROM records)",
                     (cache.SEARCH_ROW_MASK + 1,))
    with pytest.raises(DamagedFile, match="record numbers for the search index.*rebuilt"):
        vault.search("garden")
    assert vault.session.reader.store_doomed


def test_ties_at_the_cut_are_all_read(vault_with_ties):
    """Matches tied in score with the last one wanted are read to the end, whatever order the window
    lists them in (within one second the index's order is the order of storing, not NEWEST's)."""
    state = vault_with_ties.session.materialized
    state.ensure_search()
    where, args = S._conditions(state, S.parse("garden"))
    window = state.db.execute("SELECT rowid, bm25(search) FROM search WHERE search MATCH ?",
                              ['"garden basil tomato jazz"']).fetchall()
    best = min(rank for _sk, rank in window)
    tied = [m for m in window if m[1] == best]
    assert len(tied) > 64  # (more than the first chunk read)
    window = sorted(tied, key=lambda m: m[0])  # the same score, oldest first
    _total, by_relevance, _by_time = reference(state, '"garden basil tomato jazz"', len(window))
    assert S._best_of(state.db, window, where, args, 1) == by_relevance[:1]
    assert S._best_of(state.db, window, where, args, 3) == by_relevance[:3]
