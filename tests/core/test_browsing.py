"""The reads that browse memory (what the desktop's Conversations, Timeline and Search views show):
the list of conversations, a conversation's messages, the timeline in any order, and search pages
with how many records match in all and a snippet of each."""

from __future__ import annotations

import pytest
from camillo import NewRecord, Unlock, Vault
from camillo.errors import UsageError

from .helpers import switch_home

DAY = 86400
T0 = 1_760_000_000


def msg(conv: str, role: str, text: str, ts: int) -> NewRecord:
    return NewRecord(type="message", conversation=conv, role=role, text=text, ts=ts)


@pytest.fixture
def vault(new_vault):
    _path, v, _phrase = new_vault
    v.append([NewRecord(type="conversation", conversation="trip", title="Planning the trip", ts=T0),
              msg("trip", "user", "Four days in Lisbon, walking and eating.", T0 + 1),
              msg("trip", "assistant", "Alfama is best on foot.", T0 + 2)])
    v.append([msg("bread", "user", "My sourdough starter smells of acetone.", T0 + 5 * DAY),
              msg("bread", "assistant", "It is hungry: feed it twice a day.", T0 + 5 * DAY + 60)])
    v.append([NewRecord(type="conversation", conversation="q3", title="Quarterly report", ts=T0 + 2 * DAY),
              msg("q3", "user", "Tighten the summary, please.", T0 + 2 * DAY + 1)], compartment="work")
    v.append([NewRecord(type="fact", key="user/home_city", value="Porto", ts=T0 + 3 * DAY)])
    return v


def test_conversations_newest_first_with_title_count_writers_and_compartment(vault):
    found = vault.conversations()
    assert [c.conversation for c in found] == ["bread", "q3", "trip"]
    bread, q3, trip = found
    assert trip.title == "Planning the trip" and trip.messages == 2 and trip.compartment == "personal"
    assert (trip.first, trip.last) == (T0, T0 + 2)
    assert trip.writers == ("test laptop",)
    # Without a title record: the start of its first message.
    assert bread.title == "My sourdough starter smells of acetone." and bread.messages == 2
    assert bread.last == T0 + 5 * DAY + 60
    assert q3.compartment == "work" and q3.title == "Quarterly report" and q3.messages == 1


def test_conversations_filtered_by_text_compartment_and_agent(vault, new_vault, tmp_path, monkeypatch):
    assert [c.conversation for c in vault.conversations(text="acetone")] == ["bread"]
    assert [c.conversation for c in vault.conversations(text="trip")] == ["trip"]  # the title matches
    assert [c.conversation for c in vault.conversations(text="lisbon foot")] == []  # both words in one record
    assert [c.conversation for c in vault.conversations(compartment="work")] == ["q3"]
    assert [c.conversation for c in vault.conversations(agent="LAPTOP")] == ["bread", "q3", "trip"]
    assert vault.conversations(agent="planner") == []
    with pytest.raises(UsageError, match="no compartment nowhere"):
        vault.conversations(compartment="nowhere")
    # Another writer joins a conversation: it is named, and the agent filter finds it.
    path = new_vault[0]
    vault.lock()
    switch_home(monkeypatch, tmp_path / "phone")
    with Vault.open(path, Unlock.passphrase("correct horse battery staple"), device_name="phone") as phone:
        phone.append([msg("trip", "user", "And a day in Sintra.", T0 + 9 * DAY)])
        assert [c.conversation for c in phone.conversations(agent="phone")] == ["trip"]
        trip = phone.conversations()[0]
        assert trip.conversation == "trip" and trip.messages == 3 and trip.last == T0 + 9 * DAY
        assert set(trip.writers) == {"test laptop", "phone"}


def test_a_forgotten_message_leaves_the_conversation_unless_asked_for(vault):
    ids = vault.conversation_ids("trip", "personal")
    assert [r.text for r in vault.records(ids)] == ["Four days in Lisbon, walking and eating.", "Alfama is best on foot."]
    vault.forget(record=ids[1])
    assert vault.conversation_ids("trip", "personal") == ids[:1]
    assert vault.conversation_ids("trip", "personal", include_hidden=True) == ids
    assert vault.conversations(text="trip")[0].messages == 1
    assert vault.conversation_ids("trip", "work") == []
    with pytest.raises(UsageError, match="no compartment"):
        vault.conversation_ids("trip", "control")


def test_search_pages_count_every_match_and_mark_the_matched_words(vault):
    vault.append([msg(f"apples-{i // 50}", "user", f"Note {i}: green apples are sour, red apples are sweet.",
                      T0 + 10 * DAY + i) for i in range(260)])
    first = vault.search_page("apples", limit=200)
    assert first.total == 260 and len(first.hits) == 200 and first.offset == 0 and first.order == "relevance"
    rest = vault.search_page("apples", offset=200, limit=200)
    assert rest.total == 260 and len(rest.hits) == 60
    assert not {h.record.id for h in first.hits} & {h.record.id for h in rest.hits}
    assert len(vault.search("apples")) == 200  # the plain search keeps its cap
    snippet = first.hits[0].snippet
    assert [text for text, matched in snippet if matched] == ["apples", "apples"]
    assert "".join(text for text, _ in snippet).startswith("Note ")
    by_time = vault.search_page("apples", order="time", limit=3)
    assert [h.record.ts for h in by_time.hits] == [T0 + 10 * DAY + 259, T0 + 10 * DAY + 258, T0 + 10 * DAY + 257]


def test_a_count_that_reads_each_match_stops_past_the_page_and_says_so(vault, monkeypatch):
    from camillo import search
    monkeypatch.setattr(search, "COUNT_AHEAD", 7)
    vault.append([msg(f"pears-{i // 50}", "user", f"Pear {i}: ripe pears are soft.", T0 + 10 * DAY + i)
                  for i in range(60)])
    plain = vault.search_page("pears", limit=10)  # the index counts its matches alone: exact
    assert (plain.total, plain.total_exact) == (60, True)
    for text in ("pears type:message", "type:message compartment:personal"):  # each match's record is read
        first = vault.search_page(text, limit=10)
        assert (first.total, first.total_exact, len(first.hits)) == (17, False, 10), text
        further = vault.search_page(text, offset=40, limit=10)
        assert (further.total, further.total_exact) == (57, False), text
        last = vault.search_page(text, offset=50, limit=10)
        assert last.total_exact and last.total == (60 if text.startswith("pears") else 64), text
    assert vault.search_page("agent:nobody pears").total_exact  # none: exact


def test_search_pages_without_words_phrases_and_bad_input(vault):
    page = vault.search_page("type:message compartment:personal")
    assert page.total == 4
    assert page.hits[0].snippet == (("It is hungry: feed it twice a day.", False),)
    phrase = vault.search_page('"best on foot"')
    assert phrase.total == 1 and phrase.hits[0].snippet == (("Alfama is ", False), ("best on foot", True), (".", False))
    fact = vault.search_page("porto").hits[0]
    assert fact.record.key == "user/home_city" and fact.snippet == (("Porto", True),)  # not its key and type
    assert vault.search_page("agent:nobody apples").total == 0
    with pytest.raises(UsageError, match="order: use one of relevance, time"):
        vault.search_page("apples", order="random")
    with pytest.raises(UsageError, match="negative"):
        vault.search_page("apples", offset=-1)


def test_the_timeline_in_any_order(vault):
    oldest_first = vault.timeline_ids()
    assert vault.timeline_ids(order="time", descending=True) == oldest_first[::-1]
    types = [r.type for r in vault.records(vault.timeline_ids(order="type"))]
    assert types == sorted(types)
    rows = vault.records(vault.timeline_ids(order="compartment", descending=True))
    assert [r.compartment for r in rows][:2] == ["work", "work"]
    # Ties keep time order.
    personal = [r.ts for r in rows if r.compartment == "personal"]
    assert personal == sorted(personal)
    assert set(vault.timeline_ids(order="writer")) == set(oldest_first)
    assert set(vault.timeline_ids(order="authority", compartments=[vault.compartment_id("work")])) == \
        set(vault.timeline_ids(compartments=[vault.compartment_id("work")]))
    with pytest.raises(UsageError, match="order: use one of time, compartment"):
        vault.timeline_ids(order="colour")


def test_the_attachments_of_messages_by_message(vault, tmp_path):
    ids = vault.conversation_ids("trip", "personal")
    photo = tmp_path / "alfama.jpg"
    photo.write_bytes(b"\xff\xd8 not really a jpeg" * 10)
    vault.attach(str(photo), of=ids[0])
    vault.attach(str(photo), name="again.jpg", of=ids[0])
    vault.attach(str(photo), name="loose.jpg")  # of no record
    found = vault.attachments_of(ids)
    assert set(found) == {ids[0]}
    assert [a.value["name"] for a in found[ids[0]]] == ["alfama.jpg", "again.jpg"]
    assert all(a.type == "attachment" and a.value["size"] == 200 for a in found[ids[0]])
    assert vault.attachments_of([]) == {} and vault.attachments_of([ids[1]]) == {}
    vault.forget(record=found[ids[0]][1].id)
    assert [a.value["name"] for a in vault.attachments_of(ids)[ids[0]]] == ["alfama.jpg"]


def test_the_timeline_a_page_at_a_time_with_counts_and_rows_from_the_time_index(vault):
    """What the desktop's timeline pages through (issue 19): every page, count and row equals the
    full listing, in both orders and with every filter, records without a time included (they sort
    first oldest-first, last newest-first); and each is answered from the time index alone."""
    db = vault.session.materialized.db
    undated = vault.append([NewRecord(type="message", text="no time given"),
                            NewRecord(type="message", text="nor here")]).records
    # (a record without a time: another implementation may write one; the state stores NULL)
    db.executemany("UPDATE records SET ts = NULL WHERE id = ?", [(rid,) for rid in undated])
    forgotten = vault.search("acetone")[0].id
    vault.forget(record=forgotten)
    work = vault.compartment_id("work")
    for filters in ({}, {"include_hidden": True}, {"compartments": [work]}, {"conversation": "trip"}):
        for descending in (False, True):
            full = vault.timeline_ids(descending=descending, **filters)
            assert vault.timeline_count(**filters) == len(full)
            paged = [v.id for start in range(0, len(full) + 3, 3)
                     for v in vault.timeline(start, 3, descending=descending, **filters)]
            assert paged == full, (filters, descending)
            for row, rid in enumerate(full):
                assert vault.timeline_row(rid, descending=descending, **filters) == row
            read_on: list[bytes] = []  # page after page, each after the last row of the one before
            while len(page := vault.timeline(limit=3, after=read_on[-1] if read_on else None,
                                             descending=descending, **filters)) == 3:
                read_on += [v.id for v in page]
            assert read_on + [v.id for v in page] == full, (filters, descending)
            for row, rid in enumerate(full):  # (undated records among them)
                assert [v.id for v in vault.timeline(after=rid, descending=descending, **filters)] == full[row + 1:]
            # after a record the filters do not show: the rows that follow its place in the order
            everything = vault.timeline_ids(include_hidden=True, descending=descending)
            after = set(everything[everything.index(forgotten) + 1:])
            assert [v.id for v in vault.timeline(after=forgotten, descending=descending, **filters)] == \
                [rid for rid in full if rid in after]
            times = [db.execute("SELECT ts FROM records WHERE id = ?", (rid,)).fetchone()[0] for rid in full]
            for day in (T0 - DAY, T0, T0 + 2 * DAY, T0 + 3 * DAY, T0 + 9 * DAY):
                if descending:  # the latest record before the day's end
                    want = next((i for i, t in enumerate(times) if t is None or t < day + DAY), len(full))
                else:  # the first record at or after the day's start
                    want = next((i for i, t in enumerate(times) if t is not None and t >= day), len(full))
                assert vault.timeline_row(day=day, descending=descending, **filters) == want, (filters, day)
    assert vault.timeline_row(forgotten) is None  # not shown without include_hidden
    assert vault.timeline_row(forgotten, include_hidden=True) is not None
    with pytest.raises(UsageError, match="give a record or a day"):
        vault.timeline_row()
    with pytest.raises(UsageError, match=f"no record {'ab' * 32} in this vault"):
        vault.timeline(after=bytes.fromhex("ab" * 32))
    with pytest.raises(UsageError, match="from an offset or after a record, not both"):
        vault.timeline(2, after=forgotten)
    for sql in ("SELECT id FROM records WHERE valid = 1 AND kind IN (1, 3) AND hidden = 0 "
                "ORDER BY ts DESC, lamport DESC, idx DESC, id DESC LIMIT 10 OFFSET 5",
                "SELECT count(*) FROM records WHERE valid = 1 AND kind IN (1, 3) AND hidden = 0 AND compartment IN (?)",
                # a page after a record (camillo log reads on so): a range of the index, not a walk from its start
                "SELECT rowid FROM records WHERE valid = 1 AND kind IN (1, 3) AND hidden = 0 "
                "AND (ts, lamport, idx, id) < (?, ?, ?, ?) ORDER BY ts DESC, lamport DESC, idx DESC, id DESC LIMIT 10",
                "SELECT rowid FROM records WHERE valid = 1 AND kind IN (1, 3) AND hidden = 0 "
                "AND ts IS NULL AND (lamport, idx, id) > (?, ?, ?) ORDER BY ts, lamport, idx, id LIMIT 10"):
        plan = " ".join(str(r[-1]) for r in db.execute("EXPLAIN QUERY PLAN " + sql, [work] * sql.count("?")))
        assert "records_by_time" in plan and "TEMP B-TREE" not in plan, plan
        assert "lamport, idx, id) " not in sql or "SEARCH" in plan, plan  # (after a record: a range, not a walk)


def test_the_conversations_a_page_at_a_time_equal_the_whole_list(vault, monkeypatch):
    from camillo.ops import conversations

    """Issue 19: without a text or agent filter a page of conversations comes from the time index,
    newest first, and only its conversations are summed up (the whole list of a million records took
    27 s); every page equals the same slice of the whole list, ties in last activity included."""
    for i in range(12):  # several conversations with the same last activity, and one updated later
        vault.append([msg(f"tie-{i % 4}", "user", f"tied message {i}", T0 + 7 * DAY)])
    vault.append([msg("trip", "user", "One more thing about Lisbon.", T0 + 8 * DAY)])
    whole = vault.conversations(text="")  # a text filter, even empty, takes the whole-list path
    assert [c.conversation for c in whole[:6]] == ["trip", "tie-0", "tie-1", "tie-2", "tie-3", "bread"]
    assert vault.conversation_count() == len(whole) == 7
    for scan in (conversations.NEWEST_SCAN, 4):  # pages near the top (the time index) and further down
        monkeypatch.setattr(conversations, "NEWEST_SCAN", scan)
        for limit in (1, 2, 3, 5, 7, 10):
            pages = [c for offset in range(0, len(whole) + limit, limit)
                     for c in vault.conversations(offset=offset, limit=limit)]
            assert pages == whole, (scan, limit)
    work = vault.conversations(compartment="work", offset=0, limit=5)
    assert work == vault.conversations(compartment="work") and [c.conversation for c in work] == ["q3"]
    assert vault.conversation_count(compartment="work") == 1
    assert vault.conversations(offset=0, limit=0) == []
    with pytest.raises(UsageError, match="must not be negative"):
        vault.conversations(offset=-1, limit=5)
    db = vault.session.materialized.db
    plan = " ".join(str(r[-1]) for r in db.execute(
        "EXPLAIN QUERY PLAN SELECT compartment, conversation, ts FROM records WHERE valid = 1 AND kind IN (1, 3) "
        "AND hidden = 0 AND conversation IS NOT NULL ORDER BY ts DESC, lamport DESC, idx DESC, id DESC"))
    assert "records_by_time" in plan and "TEMP B-TREE" not in plan, plan
    plan = " ".join(str(r[-1]) for r in db.execute(
        "EXPLAIN QUERY PLAN SELECT count(*) FROM (SELECT DISTINCT conversation, compartment FROM records WHERE "
        "valid = 1 AND kind IN (1, 3) AND hidden = 0 AND conversation IS NOT NULL)"))
    assert "records_by_conversation" in plan, plan
