"""A record's view (camillo.state.State._view), made from its stored row's map directly, shows what the
decoded record says: checked against a reading through :class:`camillo.records.Record` for every row of a
vault with messages, facts, a conversation's title, a correction, a forgotten fact and an erased record,
and for a record with fields this version does not know."""

from __future__ import annotations

import cbor2
from camillo import NewRecord
from camillo.records import F, Kind, validated_record
from camillo.recordviews import RecordView, shown_ts, value_text


def _reference(state, row) -> RecordView:
    rid, batch, comp, writer, raw, valid, reason, hidden, erased, effective, kind, stored_vouched = row
    roster = state.roster
    p = roster.principals.get(writer)
    writer_kind = "agent" if p is not None and p.grant else (p.kind.label if p else "unknown")
    if raw is None:
        return RecordView(rid, 0, "ERASED", None, comp, roster.compartment_name(comp), writer,
                          roster.writer_name(writer), writer_kind, None, None, None, "", None, None, None, None,
                          (), (), None, {}, batch, "signature", False, reason, bool(hidden), True)
    rec = validated_record(raw, rid)
    value = rec.value
    conversation = value.get("conversation") if isinstance(value, dict) and isinstance(value.get("conversation"), str) else None
    role = value.get("role") if isinstance(value, dict) and isinstance(value.get("role"), str) else None
    text = value_text(value) if rec.kind in (Kind.PUT, Kind.NOTE) else ""
    if rec.type == "conversation" and isinstance(value, dict) and isinstance(value.get("title"), str):
        text = value["title"]
    known = {F.V, F.KIND, F.AUTHOR, F.SALT, F.KEY, F.VALUE, F.CLASS, F.PRED, F.SOURCES, F.ERASE, F.TARGET,
             F.META, F.BODY, F.SIGS, F.TS, F.TYPE}
    return RecordView(
        id=rid, kind=rec.kind, kind_name=rec.kind_name, type=rec.type, compartment_id=comp,
        compartment=roster.compartment_name(comp), writer_id=writer, writer=roster.writer_name(writer),
        writer_kind=writer_kind, ts=shown_ts(rec.ts), key=rec.key, value=value, text=text,
        conversation=conversation, role=role, claimed_class=rec.authority, effective_class=effective,
        sources=tuple(rec.sources), pred=tuple(rec.pred), target=rec.target, meta=dict(rec.meta),
        batch_id=batch, verified="compaction" if stored_vouched else "signature",
        valid=bool(valid), reason=reason, hidden=bool(hidden), erased=bool(erased),
        unknown_fields=tuple(sorted(k for k in rec.fields if k not in known)))


def test_every_rows_view_shows_what_its_record_says(new_vault):
    path, vault, _ = new_vault
    vault.append([NewRecord(type="message", conversation="trip", role="user", text="pack the tent"),
                  NewRecord(type="conversation", conversation="trip", value={"title": "Trip to the hills"}),
                  NewRecord(type="fact", key="user/city", value="Lisbon"),
                  NewRecord(type="fact", key="user/food", value={"likes": ["figs", b"\x01"]})])
    vault.append([NewRecord(type="fact", key="user/city", value="Porto")])
    vault.forget(key="user/food")
    target = vault.append([NewRecord(type="message", text="erase me")]).written[0]
    vault.erase([target])
    state = vault.session.reader.materialized
    rows = state.db.execute(f"SELECT {state._COLUMNS} FROM records").fetchall()
    assert len(rows) >= 7 and any(r[4] is None for r in rows)
    for row in rows:
        assert state._view(row) == _reference(state, row)
        assert state._view(row, {}) == _reference(state, row)
    shown: dict = {}
    assert [state._view(r, shown) for r in rows] == [_reference(state, r) for r in rows]
    # a record with fields this version does not know (a later version's): listed, in order
    row = next(r for r in rows if r[4] is not None)
    m = cbor2.loads(row[4])
    m[40], m[17] = "later", [1, 2]
    strange = (*row[:4], cbor2.dumps(m, canonical=True), *row[5:])
    view = state._view(strange)
    assert view.unknown_fields == (17, 40) and view == _reference(state, strange)
    assert view.to_json()["unknown_fields"] == [17, 40]


def test_a_timeline_page_read_at_its_row_numbers_is_the_page_of_its_ids(new_vault):
    """The timeline's page is read at the row numbers its time index holds (State.records_at): the same
    views, in the same order, as reading the ids the index gives, whatever the order, offset and
    filters."""
    from camillo import timeline
    from camillo.timeline import NEWEST_FIRST, OLDEST_FIRST, visible_where

    path, vault, _ = new_vault
    for i in range(12):
        vault.append([NewRecord(type="message", conversation=f"c{i % 3}", role="user", text=f"note {i}")],
                     compartment="personal" if i % 2 else "work")
    vault.append([NewRecord(type="fact", key="user/city", value="Lisbon")])
    state = vault.session.reader.materialized
    work = vault.compartment_id("work")
    for filters in ({}, {"compartments": [work]}, {"conversation": "c1"}, {"include_hidden": True}):
        for descending in (False, True):
            for offset, limit in ((0, 5), (3, 4), (0, None), (10, 100)):
                where, args = visible_where(**filters)
                order = NEWEST_FIRST if descending else OLDEST_FIRST
                ids = [r[0] for r in state.db.execute(f"SELECT id FROM records WHERE {where} ORDER BY {order} "
                                                      "LIMIT ? OFFSET ?", [*args, -1 if limit is None else limit, offset])]
                page = vault.timeline(offset, limit, descending=descending, **filters)
                assert page == state.records(ids)
                assert len(timeline.page_rowids(state, offset=offset, limit=limit, descending=descending,
                                                **filters)) == len(ids)
