"""The passes of the materialised state that follow references (spec §19): validity by references,
effective classes, hiding, and facts; over the whole state, or over what one change can reach.

:meth:`camillo.state.State.materialize` first judges each record alone (its batch, its writer, its
class), then runs these passes.  Over the whole state they scale with the vault (every record that
refers to another, every keyed record: seconds at a million records).  After a change limited to some
batches (an append, a refresh, an erasure, a roster change that touched a few principals) they run
over its **reach** instead (:func:`reach`): the records of those batches, every record that refers to
one of them (transitively: a derived record's class depends on its sources'), the records a CONFIRM
among them confirms (their effective class), what a DEL among them names (its hiding), and the facts
of every key those records carry.  Every other record keeps what the last pass gave it, which is what a
pass over everything would give it again (``tests/core/test_scoped_passes.py`` compares both, column by
column, after every step of random histories; ``tests/core/test_incremental.py`` the whole vault).

Reference rows: ``refs(record, ref, how)`` with ``how`` one of :data:`REF_PRED`, :data:`REF_SOURCE`,
:data:`REF_TARGET`.

Confined to the thread that owns the vault (the state's connection).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Set
from typing import Any

from . import encoding
from .cache import Connection
from .control import BatchView, Level, Roster
from .credentials import CredentialKind
from .facts import FactRow, decide
from .facts import binds as binds_rule
from .log import precedes
from .records import Authority, Kind, decode_record, validated_record, verify_inner_signatures

REF_PRED = 1
REF_SOURCE = 2
REF_TARGET = 3

Key = tuple[bytes, str]  # (compartment, key)
# What the reference checks know of a record: batch, idx, kind, class, key, compartment, writer.
_RefInfo = tuple[bytes, int, int | None, int | None, str | None, bytes, bytes]
_CHUNK = 500  # ids per ``IN (…)`` list (SQLite's limit on bound parameters is far above)


def static_check(roster: Roster, view: BatchView, writer: bytes, author: bytes | None, kind: int | None,
                 klass: int | None, key: str | None, raw: bytes | None) -> str | None:
    """Why a record of an accepted batch is not valid by itself (None: it is): the authority rules
    that need only the record and its writer (``raw``: read for a CONFIRM alone).  A pass over every
    record calls it only for the rows :func:`unjudged_rows` gives, whose condition states the rows this
    returns None for without looking: a rule added here that can fault such a row must narrow it too."""
    if kind is None:
        return None
    if kind >= 16:
        return None  # control records: the roster decided what they mean
    if author != writer:
        return "its author is not the writer who signed the batch"
    p = roster.principals.get(writer)
    if p is None:
        return "its writer is unknown"
    is_device = p.kind == CredentialKind.DEVICE
    if kind == Kind.CONFIRM:
        if not is_device:
            return "only the owner's devices can confirm"
        rec = decode_record(raw) if raw is not None else None
        if rec is None:
            return "its signature does not verify"
        try:
            good, _ = verify_inner_signatures(rec, lambda w: roster.signer_public(w) if roster.is_owner(w) else None)
        except Exception:
            return "its signature does not verify"
        if writer not in good:
            return "it is not signed by its author"
        return None
    if klass is not None and klass == Authority.USER and not is_device:
        return f"it claims user authority but was written by {roster.writer_name(writer)}"
    if p.grant is not None:
        if klass is not None and klass > p.grant.max_class:
            return (f"it claims {Authority(klass).label} authority, above the maximum "
                    f"({p.grant.max_class.label}) of the grant of agent {p.grant.agent}")
        level = p.grant.scopes.get(view.header.compartment_id)
        if level == Level.APPEND and kind in (Kind.PUT, Kind.DEL) and key is not None:
            prefix = f"append/{p.grant.grant_id.hex()}/"
            if not key.startswith(prefix):
                return f"an append grant may only write keys under {prefix}"
    return None


# The temporary tables of unjudged_rows: the batches not accepted, the records erasures name, the owner's devices
_JUDGED = ("judged_unaccepted", "judged_erased", "judged_devices")


def unjudged_rows(db: Connection, roster: Roster, accepted: Set[bytes], erased: Iterable[bytes]) -> str:
    """The SQL condition of the records table's rows that a pass over every record must judge one by
    one (``State.materialize``): every row but those that are valid by :func:`static_check` without
    looking, in an accepted batch (``accepted``), not erased and not named by an ERASE (``erased``), and a
    control record, or not a CONFIRM by its own writer, an owner's device without a grant (no class it
    can claim is above it, no compartment is append-only to it).  For every other row ``static_check``
    returns None (reading every row into Python for the few that are not: the pass over a million
    records, 3.4 -> 1.4 s).  The batches not accepted are those of the rows (the index of batches, in its order)
    that ``accepted`` lacks: few, where every accepted one would be 100,000 ids held at a million records.
    Fills the temporary tables the condition reads (on ``db``, the state's connection), which
    :func:`unjudged_done` empties once the rows are read."""
    unaccepted = (b for (b,) in db.execute("SELECT DISTINCT batch FROM records") if b not in accepted)
    devices = (w for w, p in roster.principals.items() if p.kind == CredentialKind.DEVICE and p.grant is None)
    for table, ids in zip(_JUDGED, (list(unaccepted), erased, devices)):
        db.execute(f"CREATE TEMP TABLE IF NOT EXISTS {table}(id BLOB PRIMARY KEY) WITHOUT ROWID")
        db.execute(f"DELETE FROM temp.{table}")
        db.executemany(f"INSERT OR IGNORE INTO temp.{table}(id) VALUES(?)", ((i,) for i in ids))
    plain = (f"kind IS NULL OR kind >= 16 OR (kind IS NOT {int(Kind.CONFIRM)} AND author IS writer "
             "AND writer IN temp.judged_devices)")
    return (f"batch IN temp.judged_unaccepted OR NOT coalesce(erased = 0 AND id NOT IN temp.judged_erased "
            f"AND ({plain}), 0)")


def unjudged_done(db: Connection) -> None:
    """Empty the temporary tables :func:`unjudged_rows` filled."""
    for table in _JUDGED:
        db.execute(f"DELETE FROM temp.{table}")


def chunks(ids: Iterable[bytes]) -> Iterator[tuple[str, list[bytes]]]:
    """``ids`` in lists of at most 500, each with its ``?,?,…`` marks."""
    items = list(ids)
    for i in range(0, len(items), _CHUNK):
        part = items[i:i + _CHUNK]
        yield ",".join("?" * len(part)), part


def rows_in(db: Connection, sql: str, ids: Iterable[bytes], *after: object) -> list[Any]:
    """Run ``sql``, whose ``{}`` stands for the marks of an ``IN`` list, over ``ids`` in chunks;
    ``after`` are the parameters that follow the list."""
    out: list[Any] = []
    for marks, part in chunks(ids):
        out += db.execute(sql.format(marks), (*part, *after)).fetchall()
    return out


def reach(db: Connection, seeds: set[bytes]) -> set[bytes]:
    """The records a change to ``seeds`` can move: the seeds, every record that refers to one of the
    records reached, and the records a CONFIRM among them confirms (their effective class), to a
    fixpoint.  (What a DEL among them hides, and the facts of their keys, follow from them: :func:`hide`,
    :func:`keys_of`.)"""
    reached = set(seeds)
    frontier = set(seeds)
    while frontier:
        citing = {r for (r,) in rows_in(db, "SELECT record FROM refs WHERE ref IN ({})", frontier)}
        named = {r for (r,) in rows_in(db, "SELECT ref FROM refs WHERE record IN ({}) AND how = ?", frontier,
                                       REF_TARGET)}
        frontier = (citing | named) - reached
        reached |= frontier
    return reached


def keys_of(db: Connection, ids: Iterable[bytes]) -> set[Key]:
    """The (compartment, key) of those of these records that carry a key."""
    return {(c, k) for c, k in rows_in(db, "SELECT compartment, key FROM records WHERE id IN ({}) AND key IS NOT NULL",
                                       ids)}


# ------------------------------------------------------------------------------- references

def check_references(db: Connection, roster: Roster, views: Mapping[bytes, BatchView],
                     scope: set[bytes] | None = None) -> None:
    """``pred`` inside the record's causal past, CONFIRM targets, sources (iterated, because a CONFIRM
    can raise a source and a rejection can lower one).  The records of ``scope`` (None: all) start
    from what the record-by-record checks gave them; the others are as the last pass left them."""
    cols = "id, batch, idx, kind, class, key, compartment, writer"
    if scope is None:
        rows = db.execute(f"SELECT {cols} FROM records WHERE has_refs = 1 AND valid = 1").fetchall()
        if not rows:
            return
        info: dict[bytes, _RefInfo] = {}
        for where in ("id IN (SELECT ref FROM refs)", "has_refs = 1"):  # (by their indexes: no scan of every record)
            for rid, *rest in db.execute(f"SELECT {cols} FROM records WHERE {where}"):
                info[rid] = tuple(rest)
        refs: dict[bytes, list[tuple[bytes, int]]] = defaultdict(list)
        for rec, ref, how in db.execute("SELECT record, ref, how FROM refs"):
            refs[rec].append((ref, how))
        # (confirming record, target, its kind, its validity now or None: judged in this pass)
        targets: list[tuple[bytes, bytes, int | None, bool | None]] = [(rec, ref, info[rec][2] if rec in info else None, None) for rec, ref in db.execute(
            "SELECT record, ref FROM refs WHERE how = ?", (REF_TARGET,))]
    else:
        rows = rows_in(db, f"SELECT {cols} FROM records WHERE id IN ({{}}) AND has_refs = 1 AND valid = 1",
                       scope)
        refs = defaultdict(list)
        for rec, ref, how in rows_in(db, "SELECT record, ref, how FROM refs WHERE record IN ({})", scope):
            refs[rec].append((ref, how))
        named = {ref for lst in refs.values() for ref, _ in lst}
        info = {rid: tuple(rest) for rid, *rest in rows_in(db, f"SELECT {cols} FROM records WHERE id IN ({{}})",
                                                            scope | named)}
        targets = [(rec, ref, kind, None if rec in scope else bool(valid)) for rec, ref, kind, valid in rows_in(
            db, "SELECT refs.record, refs.ref, c.kind, c.valid FROM refs JOIN records c ON c.id = refs.record "
                "WHERE refs.ref IN ({}) AND refs.how = ?", scope, REF_TARGET)]

    def precedes_rec(a: bytes, b: bytes) -> bool:
        ba, ia = info[a][0], info[a][1]
        bb, ib = info[b][0], info[b][1]
        if ba == bb:
            return ia < ib
        va, vb = views.get(ba), views.get(bb)
        return va is not None and vb is not None and precedes(va, vb)

    invalid: dict[bytes, str] = {}
    # pred and CONFIRM rules do not depend on classes.
    for rid, batch, idx, kind, klass, key, comp, writer in rows:
        for ref, how in refs[rid]:
            if how == REF_PRED:
                if ref not in info:
                    invalid[rid] = (f"waiting: it supersedes record {ref.hex()[:12]}, which has not arrived "
                                    "(still syncing, or withheld)")
                    break
                rb, ri, rkind, rklass, rkey, rcomp, rwriter = info[ref]
                # An erased record (no bytes, so no kind) has no key any more: it is not compared.
                if rcomp != comp or (key is not None and rkind is not None and rkey != key):
                    invalid[rid] = f"it supersedes record {ref.hex()[:12]} of another key or compartment"
                    break
                if not precedes_rec(ref, rid):
                    invalid[rid] = (f"it supersedes record {ref.hex()[:12]}, which its writer could not "
                                    "have seen (not in its causal past)")
                    break
                p = roster.principals.get(writer)
                if p is not None and p.grant is not None and p.grant.scopes.get(comp) == Level.APPEND and rwriter != writer:
                    invalid[rid] = "an append grant may only supersede its own records"
                    break
            elif how == REF_TARGET and kind == Kind.CONFIRM:
                if ref not in info:
                    invalid[rid] = (f"waiting: it confirms record {ref.hex()[:12]}, which has not arrived "
                                    "(still syncing, or withheld)")
                elif info[ref][5] != comp:
                    invalid[rid] = f"it confirms record {ref.hex()[:12]} of another compartment"
    # effective classes and sources, to a fixpoint
    valid_now = {rid for rid, *_ in rows if rid not in invalid}
    while True:
        effective: dict[bytes, int] = {}
        for rec, ref, kind, valid in targets:
            if (rec in valid_now if valid is None else valid) and ref in info and kind == Kind.CONFIRM:
                effective[ref] = Authority.USER
        changed = False
        for rid, batch, idx, kind, klass, key, comp, writer in rows:
            if rid in invalid or klass is None:
                continue
            sources = [ref for ref, how in refs[rid] if how == REF_SOURCE]
            if not sources:
                continue
            floor = min(_effective_of(db, s, effective, valid_now, scope) for s in sources)
            if klass > floor:
                invalid[rid] = (f"it claims {Authority(klass).label} authority, above its sources "
                                f"({Authority(floor).label})")
                valid_now.discard(rid)
                changed = True
        if not changed:
            break
    db.executemany("UPDATE records SET valid = 0, reason = ? WHERE id = ?", [(r, i) for i, r in invalid.items()])
    db.executemany("UPDATE records SET effective = ? WHERE id = ?", [(e, i) for i, e in effective.items()])


def _effective_of(db: Connection, rid: bytes, effective: dict[bytes, int], valid_now: set[bytes],
                  scope: set[bytes] | None) -> int:
    # A source that is missing, invalid or classless counts as external, confirmed or not (§16.3 rule 8).
    row = db.execute("SELECT class, valid, has_refs, effective FROM records WHERE id = ?", (rid,)).fetchone()
    if row is None or row[0] is None or not row[1]:
        return Authority.EXTERNAL
    if scope is not None and rid not in scope:  # judged by an earlier pass, unchanged since
        return int(row[3] if row[3] is not None else row[0])
    if row[2] and rid not in valid_now:
        return Authority.EXTERNAL
    claimed: int = row[0]
    return effective.get(rid, claimed)


# ------------------------------------------------------------------------------- hiding

def hide(db: Connection, scope: set[bytes] | None = None) -> None:
    """Hidden keyless records: a keyless DEL names them in ``pred``.  A keyed value or deletion named
    there is not hidden (such a DEL takes no part in facts, so the timeline follows the fact; facts
    hide what they forget, :func:`compute_facts`)."""
    hidden_by_del = (f"EXISTS (SELECT 1 FROM refs JOIN records d ON d.id = refs.record WHERE refs.ref = records.id "
                     f"AND refs.how = {REF_PRED} AND d.kind = {int(Kind.DEL)} AND d.key IS NULL AND d.valid = 1)")
    not_fact = f"(kind IS NULL OR kind NOT IN ({int(Kind.PUT)}, {int(Kind.DEL)}) OR key IS NULL)"
    if scope is None:
        db.execute("UPDATE records SET hidden = 0 WHERE hidden = 1")  # writes only the rows that were hidden
        db.execute(f"UPDATE records SET hidden = 1 WHERE {not_fact} AND id IN (SELECT refs.ref FROM refs "
                   f"JOIN records d ON d.id = refs.record WHERE refs.how = {REF_PRED} AND d.kind = {int(Kind.DEL)} "
                   "AND d.key IS NULL AND d.valid = 1)")
        return
    named = {r for (r,) in rows_in(db, "SELECT ref FROM refs WHERE record IN ({}) AND how = ?", scope, REF_PRED)}
    for marks, part in chunks(scope | named):
        db.execute(f"UPDATE records SET hidden = {hidden_by_del} WHERE id IN ({marks}) AND {not_fact} "
                   f"AND hidden IS NOT {hidden_by_del}", part)


# ------------------------------------------------------------------------------- facts

def compute_facts(db: Connection, roster: Roster, views: Mapping[bytes, BatchView],
                  keys: set[Key] | None = None) -> set[Key]:
    """Facts per (compartment, key) by the rules of :mod:`camillo.facts`, for ``keys`` (None: every
    key); what a fact forgets is hidden.  Returns the keys whose value, status, proposals or history
    moved (or that appeared or went away)."""
    cols = "compartment, key, id, batch, idx, kind, effective, writer, raw"
    fact_cols = "compartment, key, status, current, candidates, discarded, history, proposed"
    if keys is None:
        rows = db.execute(f"SELECT {cols} FROM records WHERE key IS NOT NULL AND valid = 1 AND kind IN (?, ?)",
                          (Kind.PUT, Kind.DEL)).fetchall()
        before = {(r[0], r[1]): r[2:] for r in db.execute(f"SELECT {fact_cols} FROM facts")}
        db.execute("DELETE FROM facts")
        db.execute("DELETE FROM proposals")
    else:
        rows, before = [], {}
        for comp, key in sorted(keys):
            rows += db.execute(f"SELECT {cols} FROM records WHERE compartment = ? AND key = ? AND valid = 1 "
                               "AND kind IN (?, ?)", (comp, key, Kind.PUT, Kind.DEL)).fetchall()
            old = db.execute(f"SELECT {fact_cols} FROM facts WHERE compartment = ? AND key = ?", (comp, key)).fetchone()
            if old is not None:
                before[(comp, key)] = old[2:]
                db.execute("DELETE FROM facts WHERE compartment = ? AND key = ?", (comp, key))
                db.executemany("DELETE FROM proposals WHERE id = ?", [(p,) for p in encoding.decode(old[7])])
            # what the fact forgot is judged again below
            db.execute("UPDATE records SET hidden = 0 WHERE compartment = ? AND key = ? AND kind IN (?, ?) "
                       "AND hidden = 1", (comp, key, Kind.PUT, Kind.DEL))
    by_key: dict[Key, list[FactRow]] = defaultdict(list)
    for comp, key, rid, batch, idx, kind, eff, writer, raw in rows:
        rejection = False
        if kind == Kind.DEL and raw is not None:
            rejection = validated_record(raw, rid).meta.get("reject") is True
        p = roster.principals.get(writer)
        owner_device = p is not None and p.kind == CredentialKind.DEVICE
        binding = binds_rule(kind, eff, by_owner_device=owner_device, rejection=rejection)
        by_key[(comp, key)].append(FactRow(rid, batch, idx, kind, eff, binding))
    preds: dict[bytes, set[bytes]] = defaultdict(set)
    if keys is None:
        pred_rows = db.execute("SELECT record, ref FROM refs WHERE how = ?", (REF_PRED,)).fetchall()
    else:
        pred_rows = rows_in(db, "SELECT record, ref FROM refs WHERE record IN ({}) AND how = ?",
                            [r[2] for r in rows], REF_PRED)
    for rec, ref in pred_rows:
        preds[rec].add(ref)

    def supersedes(s: FactRow, r: FactRow) -> bool:
        if s.id == r.id:
            return False
        if r.id in preds.get(s.id, ()):
            return True
        if s.batch == r.batch:
            return r.idx < s.idx
        vs, vr = views.get(s.batch), views.get(r.batch)
        return vr is not None and vs is not None and precedes(vr, vs)

    out: list[tuple[bytes, str, str, bytes | None, bytes, bytes, bytes, bytes]] = []
    forgotten: list[bytes] = []
    proposals: list[tuple[bytes, bytes, str]] = []
    for (comp, key), recs in by_key.items():
        d = decide(recs, supersedes, lambda r: order_key(r, views))
        forgotten += d.forgotten
        proposals += [(p, comp, key) for p in d.proposed]
        out.append((comp, key, d.status, d.current, encoding.encode(d.candidates), encoding.encode(d.discarded),
                    encoding.encode(d.history), encoding.encode(d.proposed)))
    db.executemany(f"INSERT INTO facts({fact_cols}) VALUES(?,?,?,?,?,?,?,?)", out)
    db.executemany("INSERT INTO proposals(id, compartment, key) VALUES(?,?,?)", proposals)
    db.executemany("UPDATE records SET hidden = 1 WHERE id = ?", [(r,) for r in forgotten])
    after = {(r[0], r[1]): r[2:] for r in out}
    return {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}


def order_key(r: FactRow, views: Mapping[bytes, BatchView]) -> tuple[int, int, int, bytes]:
    v = views.get(r.batch)
    ts = v.header.ts if v else 0
    return (sum(v.header.frontier.values()) + v.header.seq if v else 0, ts, r.idx, r.id)
