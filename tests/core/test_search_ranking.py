"""Search ranks inside the full-text index and reads only the records of the page it shows.

Relevance ranks the index's matches in windows of ``search.RELEVANCE_WINDOW``, newest first (the
index's rowid is the record's time above its row number, ``cache.SEARCH_KEY``): in each window, the
matches that pass the modifiers by bm25, then newest (a query with a phrase of several words: bm25 with
every part weighted alike, from the records' text, ``phrase_ranks``).  ``search._by_relevance`` scores only the windows
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
QUERIES = ["garden", "basil tomato", "jazz*", '"tax forms"', '"tax forms" record*', '"garden basil" ticket',
           "coffee compartment:work", "garden type:message",
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
    if any(" " in p.strip() for p in q.phrases):  # (ranked from the text: windows of at most TEXT_WINDOW)
        window = min(window, S.TEXT_WINDOW)
    for at in range(0, len(matches), window):
        if any(" " in p.strip() for p in q.phrases):  # ranked outside FTS5: see phrase_ranks
            ranks = phrase_ranks(state, q, matches[at:at + window])
            passing = {sk: (ranks[sk], key) for sk, (_rank, key) in passing.items() if sk in ranks} | {
                sk: p for sk, p in passing.items() if sk not in ranks}
        relevance += [key[-1] for _rank, key in sorted(passing[sk] for sk in matches[at:at + window] if sk in passing)]
    return len(passing), relevance, [key[-1] for _rank, key in sorted(passing.values(), key=lambda p: p[1])]


def phrase_ranks(state, q, window: list[int]) -> dict[int, float]:
    """bm25 of a window's matches as a query with a phrase of several words is ranked (every phrase and
    word weighted alike, the text's length in characters against the window's mean), computed plainly:
    ASCII words, each phrase compared word by word at every position."""
    import re

    texts = {sk: state.db.execute(f"SELECT {cache.SEARCH_BODY} FROM records WHERE rowid = ?",
                                  (sk & cache.SEARCH_ROW_MASK,)).fetchone()[0] for sk in window}
    words = {sk: re.findall(r"[a-z0-9]+", t.lower()) for sk, t in texts.items()}
    mean = sum(len(t) for t in texts.values()) / len(texts)
    parts = [(re.findall(r"[a-z0-9]+", w.rstrip("*").lower()), w.endswith("*")) for w in q.words]
    parts = [([t], pre and i == len(ts) - 1) for ts, pre in parts for i, t in enumerate(ts)]
    parts += [(re.findall(r"[a-z0-9]+", p.lower()), False) for p in q.phrases]
    out = {}
    for sk, ws in words.items():
        score = 0.0
        for tokens, prefix in parts:
            if prefix:
                tf = sum(w.startswith(tokens[0]) for w in ws)
            else:
                tf = sum(ws[i:i + len(tokens)] == tokens for i in range(len(ws) - len(tokens) + 1))
            score += tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len(texts[sk]) / mean))
        out[sk] = -score
    return out


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
    def ids(rowids):  # (the search's rowids are the records')
        return [state.db.execute("SELECT id FROM records WHERE rowid = ?", (r,)).fetchone()[0] for r in rowids]

    assert ids(S._best_of(state.db, window, where, args, 1)) == by_relevance[:1]
    assert ids(S._best_of(state.db, window, where, args, 3)) == by_relevance[:3]


def test_a_phrase_of_several_words_is_ranked_without_counting_every_record_that_holds_it(new_vault, monkeypatch):
    """FTS5's bm25 counts every record holding each phrase, over the whole index, for every statement
    (160-200 ms at a million records for a phrase of common words): a query with a phrase of several
    words takes its window of matches from the index without bm25 and ranks it from the records' text:
    more occurrences first, a shorter text before a longer one; a record holding the words in another
    order is no match."""
    _, vault, _ = new_vault
    filler = " ".join(["words"] * 30)
    texts = {"twice": "tax forms tax forms", "short": "the tax forms", "long": f"tax forms {filler}",
             "reversed": "forms tax", "apart": "tax and forms"}
    vault.append([NewRecord(type="message", text=t, ts=1_700_000_000 + i) for i, t in enumerate(texts.values())])
    state = vault.session.materialized
    statements: list[str] = []
    state.db.set_trace_callback(statements.append)
    found = [r.text for r in vault.search('"tax forms"')]
    state.db.set_trace_callback(None)
    assert found == [texts["twice"], texts["short"], texts["long"]]
    assert not any("bm25" in q for q in statements), "FTS5 ranked the phrase"
    assert [r.text for r in vault.search("tax forms")][:1] == [texts["twice"]]  # (words alone: FTS5's bm25)
    # its count reads the matches up to a cap, as with modifiers, not every match of the phrase
    vault.append([NewRecord(type="message", text=f"more tax forms {i}") for i in range(12)])
    monkeypatch.setattr(S, "COUNT_AHEAD", 5)
    page = vault.search_page('"tax forms"', limit=2)
    assert (page.total, page.total_exact, len(page.hits)) == (7, False, 2)
    assert vault.search_page('"tax forms"', limit=20).total == 15


def test_a_word_prefix_is_searched_as_the_terms_it_stands_for(new_vault, monkeypatch):
    """``word*`` becomes the index's terms that start so (when they are few: FTS5 merges every such
    term's matches before its first result otherwise), with the same matches as FTS5's own prefix query,
    ASCII or not, few terms or many."""
    _, vault, _ = new_vault
    words = ["garden", "gardens", "gardening", "gardener", "gate", "Gärtner", "gärten", "guard", "garlic", "GARDEN"]
    vault.append([NewRecord(type="message", text=f"{w} {v}", ts=1_700_000_000 + i)
                  for i, (w, v) in enumerate((w, v) for w in words for v in ("one", "two"))])
    state = vault.session.materialized
    state.ensure_search()

    def fts5(text: str) -> set[bytes]:
        q = S.parse(text)
        return {rid for (rid,) in state.db.execute(
            f"SELECT r.id FROM search s JOIN records r ON r.rowid = (s.rowid & {cache.SEARCH_ROW_MASK}) "
            "WHERE search MATCH ?", [S._fts_query(q)])}

    for limit in (64, 2):
        monkeypatch.setattr(S, "PREFIX_TERMS", limit)
        for text in ["gard*", "g*", "gä*", "garden*", "gardening*", "zzz*", "two gar*", "garden* one", "Gar*"]:
            expected = fts5(text)
            assert {r.id for r in vault.search(text, limit=1000)} == expected, (text, limit)
            assert vault.search_page(text, limit=0).total == len(expected), (text, limit)
    monkeypatch.setattr(S, "PREFIX_TERMS", 64)
    assert S._expanded(state, S.parse("gard*")) == '("garden" OR "gardener" OR "gardening" OR "gardens")'
    monkeypatch.setattr(S, "PREFIX_TERMS", 2)
    assert S._expanded(state, S.parse("gard*")) == '"gard"*'
