"""Reports about an open vault, for people: problems, sync state, devices, grants, activity, health,
what an erasure would do, a record's causal context; and the reads that browse memory: the
conversations, a conversation's messages, the timeline in any order, a page of search results.

Each returns a value of :mod:`camillo.values`; nothing here writes.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import heapq
import os
import time
from collections.abc import Iterable

from .. import search, slots
from ..cache import Connection
from ..credentials import CredentialKind
from ..errors import UsageError, VaultError
from ..names import kind_of
from ..packs import PackReader
from ..passes import rows_in
from ..records import Kind, verify_batch_signature
from ..recordviews import RecordView, shown_ts
from ..revocation import Revocation
from ..session import Session
from ..session.views import BatchViews, batch_times
from ..state import UNEXPLAINED, UNEXPLAINED_ROWS, visible_where
from ..storage import FolderShelf
from ..values import (
    ActivityRow,
    DeviceInfo,
    ErasurePreview,
    GrantInfo,
    HealthReport,
    Notice,
    Problem,
    RecordContext,
    SearchHit,
    SearchPage,
    SyncStatus,
    VaultStats,
    describe_platform,
)
from .devices import is_new, joined_with, vouched


def sync_status(session: Session) -> SyncStatus:
    """For status bars: "up to date", "syncing", "missing batches" or "rollback alert", with details."""
    reader = session.reader
    kinds = {a.kind for a in session.alerts}
    details = [a.message for a in session.alerts]
    details += [f"{name} is incomplete (still syncing, or damaged)" for name in sorted(reader.incomplete)]
    if "rollback" in kinds:
        return SyncStatus("rollback alert", details)
    if "missing" in kinds:
        return SyncStatus("missing batches", details)
    if "syncing" in kinds or reader.incomplete or (reader.unreadable and session.keyring.owner_kem is not None):
        return SyncStatus("syncing", details)
    return SyncStatus("up to date", details)


def stats(session: Session) -> VaultStats:
    return VaultStats(batches=len(session.log.accepted), records=session.materialized.count())


def find_record(session: Session, prefix: str) -> RecordView:
    """A record by its hex id or a unique prefix of at least 8 digits."""
    text = prefix.strip().lower()
    state = session.materialized
    if not all(c in "0123456789abcdef" for c in text):  # (bytes.fromhex skips spaces: "ea 7f 81" is not 8 digits)
        raise UsageError(f"'{prefix}' is not a record id (hex digits)")
    try:
        if len(text) == 64:
            v = state.record(bytes.fromhex(text))
            if v:
                return v
        elif len(text) >= 8:
            found = _ids_with_prefix(state.db, text)
            if len(found) == 1:
                one = state.record(found[0])
                if one is not None:
                    return one
            if len(found) > 1:
                raise UsageError(f"record id prefix {prefix} is ambiguous; give more digits")
    except ValueError:
        raise UsageError(f"'{prefix}' is not a record id (hex digits)") from None
    raise UsageError(f"no record {prefix} in vault {session.vault_id.hex()[:12]}")


def _ids_with_prefix(db: Connection, hex_prefix: str) -> list[bytes]:
    """Record ids starting with these hex digits (either case; ValueError: not hex digits): a range of the
    index of ids, not the hex of every id computed (0.15 s at a million records; 0.1 ms)."""
    odd = len(hex_prefix) % 2
    low = bytes.fromhex(hex_prefix + "0" * odd)
    end = int.from_bytes(low, "big") + (16 if odd else 1)  # (the first value past the prefix, if it has one)
    high = [end.to_bytes(len(low), "big")] if end < 256 ** len(low) else []
    return [r[0] for r in db.execute(f"SELECT id FROM records WHERE id >= ?{' AND id < ?' * len(high)}", [low, *high])]


def _kinds_of(db: Connection, record_ids: Iterable[bytes]) -> dict[str, int]:
    """How many of these records there are of each kind of content (message, fact, epoch ...)."""
    kinds: dict[str, int] = {}
    for kind, rtype in rows_in(db, "SELECT kind, type FROM records WHERE id IN ({})", list(record_ids)):
        name = rtype or Kind(kind).name.lower() if Kind.known(kind) else "record"
        kinds[name] = kinds.get(name, 0) + 1
    return kinds


# ---------------------------------------------------------------------------------- problems


def problems(session: Session, *, full: bool = False) -> list[Problem]:
    """Everything wrong or incomplete about this copy: damaged files, unverifiable batches,
    gaps, forks and rejected records."""
    reader, roster, log = session.reader, session.roster, session.log
    out = list(reader.segment_problems.values())
    out += slot_problems(session)
    if isinstance(session.shelf, FolderShelf):
        for name in session.shelf.walk():
            if kind_of(name) == "pack":
                try:
                    PackReader(os.path.join(session.shelf.root, name)).close()
                except VaultError as exc:
                    out.append(Problem("damaged", name, exc.message))
    for kind, file, message in roster.problems:
        out.append(Problem(kind, file, message))
    for rid, bid in session.materialized.db.execute(UNEXPLAINED_ROWS, (UNEXPLAINED,)).fetchall():
        held = session.batches.get(bid)  # (as the state judged it last, not only in the last computation)
        out.append(Problem("damaged", held.segment if held else "",
                           f"record {rid.hex()[:12]} is missing but no erasure names it"))
    for bid, why in sorted({**roster.excluded, **log.rejected}.items()):
        v = session.batches.get(bid)
        out.append(Problem("rejected", v.segment if v else "", f"batch {bid.hex()[:12]} was rejected: {why}"))
    now = int(time.time())
    for a in session.alerts:
        if a.kind == "rollback":
            out.append(Problem("rollback", "", a.message))
            continue
        who = roster.writer_name(a.writer_id) if a.writer_id else "a writer"
        where = roster.compartment_name(a.compartment_id) if a.compartment_id else "the vault"
        if a.kind == "syncing":  # within the grace period: the sync may still bring it
            out.append(Problem("syncing", "", f"{a.message} ({who}, {where}; missing for "
                               f"{_duration(now - a.since)}, still syncing?)"))
        else:
            out.append(Problem("gap", "", f"{a.message} ({who}, {where}; missing for {_duration(now - a.since)})"))
    for f in log.forks:
        out.append(Problem("fork", "", (
            f"{roster.writer_name(f.writer_id)} wrote two different batches at seq {f.seq} in "
            f"{roster.compartment_name(f.compartment_id)} ({', '.join(b.hex()[:12] for b in f.batch_ids)}); "
            "its later batches are frozen until it is revoked and re-enrolled")))
    for name, (_cid, eid) in sorted(reader.unreadable.items()):
        if session.keyring.owner_kem is not None:
            out.append(Problem("unreadable", name, f"segment {name} is sealed under epoch {eid.hex()[:12]}, "
                               "whose key is not (yet) here"))
    for rec in session.materialized.rejected():
        if (rec.reason or "").startswith("waiting"):
            out.append(Problem("waiting", "", f"record {rec.id.hex()[:12]} is not applied yet: "
                               f"{(rec.reason or '')[9:]}"))
        else:
            out.append(Problem("rejected-record", "", f"record {rec.id.hex()[:12]} was rejected: {rec.reason}"))
    if full:
        for bid in sorted(log.accepted):
            view = session.batches[bid]
            pk = roster.signer_public(view.header.writer_id)
            if pk is None or not verify_batch_signature(view.batch, pk):
                out.append(Problem("signature", view.segment,
                                   f"batch {bid.hex()[:12]} fails full signature verification"))
    return out


def _duration(seconds: int) -> str:
    if seconds < 90:
        return f"{max(0, seconds)} s"
    if seconds < 5400:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h"


def slot_problems(session: Session) -> list[Problem]:
    headers, damaged = session.slot_headers()
    out = [p for _, p in damaged]
    if not session.keyring.unlocked:
        return out
    for h in headers:
        if h.generation != session.keyring.generation:
            continue
        try:
            st = slots.read_statement(h, session.vault_id, session.keyring.master_secret())
        except VaultError as exc:  # (not only damage: a roll another device made at once, spec §16.10 rule 9)
            out.append(Problem("damaged", h.name, (
                f"slot {h.name} does not open under this device's keys of generation {h.generation}: another "
                "device changed the vault's keys at the same time (the two changes are joined when a device that "
                f"holds both opens the vault), or the slot is damaged or tampered ({exc.message})")))
            continue
        if not session.statement_signed(st.signatures, st.message):
            out.append(Problem("untrusted", h.name, f"slot {h.name} is not signed by an owner of this vault "
                               "(planted, or left by an unfinished operation); it is never used"))
    return out


# ---------------------------------------------------------------------------------- who


def last_seen(session: Session) -> dict[bytes, int]:
    """When each writer last wrote, by writer id: the time its latest batch claims, the top of each of
    its chains (and any batch of it refused or excluded: a revoked laptop still trying).  A handful of
    headers, not the vault's every batch (a million records: 2 s of decoding, on the devices view)."""
    log, views = session.log, session.batches
    latest = [chain[log.tops.get(key) or max(chain)] for key, chain in log.chains.items() if chain]
    last: dict[bytes, int] = {}
    for bid in (*latest, *log.rejected, *session.roster.excluded):
        v = views.get(bid)
        if v is not None:
            last[v.writer_id] = max(last.get(v.writer_id, 0), shown_ts(v.header.ts) or 0)
    return last


def devices(session: Session) -> list[DeviceInfo]:
    """The user's devices: name, platform, when enrolled, when last seen writing, revoked, and
    whether it is new here (joined, and not acknowledged yet: see :mod:`camillo.ops.devices`)."""
    roster = session.roster
    last = last_seen(session)
    me = session.actor.writer_id if session.actor is not None else None
    mine = lineage(session) if session.is_owner else set()
    acked = vouched(roster)[1]
    replaced = {p.replaces for p in roster.principals.values() if p.replaces is not None}
    out = [DeviceInfo(p.writer_id, p.name, describe_platform(p.platform), p.kind.label, p.created,
                      last.get(p.writer_id), p.writer_id in roster.revocations, p.writer_id == me,
                      p.writer_id in replaced, new=is_new(roster, p, mine, acked),
                      joined_with=joined_with(roster, p), platform_recorded=p.platform)
           for p in roster.principals.values() if p.kind == CredentialKind.DEVICE]
    return sorted(out, key=lambda d: (d.replaced, d.revoked, d.enrolled, d.name))


def grants(session: Session) -> list[GrantInfo]:
    """Agent grants: agent, compartments and levels, maximum class, expiry, last used, revoked."""
    roster = session.roster
    last = last_seen(session)
    out = []
    for p in roster.grants():
        g = p.grant
        if g is None:
            continue
        rev = roster.revocations.get(p.writer_id)
        out.append(GrantInfo(
            grant_id=g.grant_id, agent=g.agent, writer_id=p.writer_id,
            scopes={roster.compartment_name(c): lv.label for c, lv in sorted(g.scopes.items())},
            max_class=g.max_class.label, expires=g.not_after, created=g.created,
            last_used=last.get(p.writer_id), revoked=rev is not None, revoked_at=rev.ts if rev else None,
        ))
    return sorted(out, key=lambda g: (g.revoked, g.created))


def own_grant(session: Session) -> GrantInfo | None:
    """The grant this session acts under (an agent's), as far as the grant file and roster tell."""
    g = session.grant
    if g is None:
        return None
    roster = session.roster
    rev = roster.revocations.get(g.writer_id)
    return GrantInfo(grant_id=g.grant_id, agent=g.agent, writer_id=g.writer_id,
                     scopes={n: lv.label for n, lv in sorted(g.scopes.items())}, max_class=g.max_class.label,
                     expires=g.not_after, created=0, revoked=rev is not None, revoked_at=rev.ts if rev else None)


# ---------------------------------------------------------------------------------- overviews


def forgotten(session: Session) -> list[tuple[RecordView, int | None]]:
    """Forgotten records (messages and values, hidden but not erased), with when they were forgotten,
    in time order: the rows the timeline leaves out for being hidden, found by the index of those rows
    (a pass over the timeline with and without them made a view of every record twice: an export of
    100,000 records held 200 MB for it)."""
    state = session.materialized
    out = []
    where, args = visible_where(include_hidden=True)
    hidden = [r[0] for r in state.db.execute(
        f"SELECT id FROM records WHERE {where} AND hidden = 1 ORDER BY ts, lamport, idx, id", args)]
    for v in state.records(hidden):
        when = state.forgotten_at(v.id)
        if when is None and v.key is not None:
            fv = state.fact(v.compartment_id, v.key)
            if fv is not None and fv.status == "deleted" and fv.current is not None:
                when = fv.current.ts
        out.append((v, when))
    return out


def record_context(session: Session, rid: bytes) -> RecordContext:
    """The causal context of a record: its batch, writer and what that writer had seen."""
    v = session.materialized.record(rid)
    if v is None:
        raise UsageError(f"no record {rid.hex()[:12]}")
    view = session.batches.get(v.batch_id)
    if view is None:
        return RecordContext(writer=v.writer)
    h, roster = view.header, session.roster
    seen = {roster.writer_name(w): s for w, s in h.frontier.items() if s and w != h.writer_id}
    return RecordContext(writer=v.writer, seq=h.seq, ts=shown_ts(h.ts), seen=seen, segment=view.segment,
                         compartment=roster.compartment_name(h.compartment_id))


def activity(session: Session, limit: int = 500) -> list[ActivityRow]:
    """Who wrote what, when, where, and how it was verified: one row per batch, newest first, the ``limit``
    newest.  The batches' times come from one pass over the stored headers (:func:`batch_times`), and only
    the rows shown are made, each batch's records counted by kind in one query: it made a row of every batch,
    and looked up each of their records one by one (15.4 s and 300 MiB at a million records; now 0.75 s)."""
    if limit < 0:
        raise UsageError("the number of batches to list must not be negative")
    roster, log, state = session.roster, session.log, session.materialized
    batches = session.batches
    if isinstance(batches, BatchViews):
        newest = heapq.nsmallest(limit, ((-(shown_ts(ts) or 0), bid) for bid, ts in batch_times(state.cache_db)
                                         if bid not in batches.gone))
    else:  # (a session without local state holds every view, each with its header)
        newest = heapq.nsmallest(limit, ((-(shown_ts(v.header.ts) or 0), bid) for bid, v in batches.items()))
    rows = []
    for _, bid in newest:
        view = batches[bid]
        h = view.header
        kinds = _kinds_of(state.db, h.records)
        p = roster.principals.get(h.writer_id)
        status = ("accepted" if bid in log.accepted else
                  f"rejected: {log.rejected.get(bid) or roster.excluded.get(bid) or 'not verified'}")
        rows.append(ActivityRow(
            batch=bid, ts=shown_ts(h.ts) or 0, writer=roster.writer_name(h.writer_id),
            writer_kind="agent" if p is not None and p.grant else (p.kind.label if p else "unknown"),
            compartment=roster.compartment_name(h.compartment_id), seq=h.seq, records=len(h.records),
            summary=", ".join(f"{n} {k}" for k, n in sorted(kinds.items())),
            verified="compaction signature" if view.vouched else "signature", status=status,
        ))
    return rows


def health(session: Session, *, stale_days: int = 30, many_agents: int = 3) -> HealthReport:
    """What deserves the owner's attention (the KeePassXC reports idea)."""
    now = int(time.time())
    state = session.materialized
    status, details = sync_status(session)
    live_grants = [g for g in grants(session) if not g.revoked]
    stale_grants = [g for g in live_grants if (g.last_used or g.created) < now - stale_days * 86400]
    live_devices = [d for d in devices(session) if not d.revoked]
    stale_devices = [d for d in live_devices
                     if not d.this_device and (d.last_seen or d.enrolled) < now - stale_days * 86400]
    readers: dict[str, list[str]] = {}
    for g in live_grants:
        for comp, level in g.scopes.items():
            if level in ("read", "write"):
                readers.setdefault(comp, []).append(g.agent)
    return HealthReport(
        conflicts=state.fact_keys(status="conflict"),  # (the keys alone: no record read)
        pending=state.fact_keys(proposed=True),
        stale_grants=[g.agent for g in stale_grants],
        stale_devices=[d.name for d in stale_devices],
        crowded_compartments={c: a for c, a in readers.items() if len(a) >= many_agents},
        sync=status, sync_details=details,
        problems=[p for p in problems(session) if p.kind not in ("waiting",)],
        erasure_enabled=session.roster.policy.erasure_enabled,
        devices=len(live_devices), grants=len(live_grants), records=state.count(),
    )


def erasure_preview(session: Session, rid: bytes) -> ErasurePreview:
    """What erasing ``rid`` will do, in numbers, before anything is done."""
    reader = session.reader
    v = session.materialized.record(rid)
    if v is None:
        raise UsageError(f"no record {rid.hex()[:12]}")
    # (the segments holding its batch found by the database, and those under their epochs by the index of epochs:
    # not every segment's list and epoch read, and kept for the session, 1.1 s and 31 MiB at a million records)
    segs = reader.segments_holding({v.batch_id})
    epochs = {reader.segment_epochs[n][1] for n in segs if n in reader.segment_epochs}
    affected = reader.segments_under({(v.compartment_id, e) for e in epochs})
    batches = {b for n in affected for b in reader.segment_batches.get(n, [])}
    readers = [g.agent for g in grants(session) if not g.revoked and g.scopes.get(v.compartment) in ("read", "write")]
    policy = session.roster.policy
    return ErasurePreview(record=v, compartment=v.compartment, epochs=len(epochs), segments=len(affected),
                          batches=len(batches),
                          other_devices=[d.name for d in devices(session) if not d.revoked and not d.this_device],
                          readers=readers, allowed=policy.erasure_enabled, policy_reason=policy.reason)


# ---------------------------------------------------------------------------------- notices


def lineage(session: Session) -> set[bytes]:
    """The writer ids this installation has written as: its key now, and the keys it replaced."""
    roster = session.roster
    out: set[bytes] = set()
    inst = session.local.load_installation()
    start = [w for w in (session.actor.writer_id if session.actor else None,
                         inst.writer_id if inst else None, inst.replaces if inst else None) if w is not None]
    for first in start:
        w: bytes | None = first
        while w is not None and w not in out:
            out.add(w)
            p = roster.principals.get(w)
            w = p.replaces if p is not None else None
    return out


def installation_revocation(session: Session) -> Revocation | None:
    """The revocation of this installation's device by another credential (a lost laptop found
    again), if there is one; a key this installation retired itself (a rotation) does not count."""
    inst = session.local.load_installation()
    if inst is None:
        return None
    rev = session.roster.revocations.get(inst.writer_id)
    if rev is None or inst.writer_id in rev.signers:
        return None
    return rev


def revoker_names(session: Session, rev: Revocation) -> str:
    return " and ".join(session.roster.writer_name(s) for s in rev.signers)


def revoked_message(session: Session, rev: Revocation) -> str:
    roster = session.roster
    name = roster.writer_name(rev.subject)
    who = revoker_names(session, rev) or "another device"
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(rev.ts)) if rev.ts else "an unknown date"
    why = f" ({rev.reason})" if rev.reason else ""
    return (f"this device ({name}) was revoked by {who} on {when}{why}: every copy of the vault rejects what it "
            "writes from then on")


def notices(session: Session) -> list[Notice]:
    """What the person should be told about this device (one-time notices of this session first)."""
    out = list(session.notices)
    roster, log = session.roster, session.log
    mine = lineage(session)
    rejected: dict[str, list[tuple[bytes, str]]] = {}
    for bid, why in sorted({**roster.excluded, **log.rejected}.items()):
        v = session.batches.get(bid)
        if v is not None and v.header.writer_id in mine:
            rejected.setdefault(roster.compartment_name(v.header.compartment_id), []).append((bid, why))
    for comp, items in sorted(rejected.items()):
        reasons = sorted({why for _, why in items})
        ids_ = ", ".join(b.hex()[:12] for b, _ in items[:5]) + (" …" if len(items) > 5 else "")
        out.append(Notice("rejected-writes", f"{len(items)} write(s) of this device in {comp} were rejected "
                          f"({'; '.join(reasons)}): batches {ids_}", count=len(items), compartment=comp,
                          why="; ".join(reasons)))
    rev = installation_revocation(session)
    if rev is not None:
        out.append(Notice("revoked", revoked_message(session, rev), who=revoker_names(session, rev), when=rev.ts,
                          why=rev.reason))
    status = sync_status(session)
    if status.state != "up to date":
        detail = f": {status.details[0]}" if status.details else ""
        out.append(Notice("incomplete", f"this view of the vault may be incomplete ({status.state}){detail}"))
    return out


# ---------------------------------------------------------------------------------- browsing memory

TIMELINE_ORDERS = ("time", "compartment", "type", "authority", "writer", "text")


def timeline_ids(session: Session, *, order: str = "time", descending: bool = False, include_hidden: bool = False,
                 compartments: Iterable[bytes] | None = None, conversation: str | None = None) -> list[bytes]:
    """The timeline's record ids sorted by one of :data:`TIMELINE_ORDERS` (time, then ties in time
    order); ``descending`` reverses the sort (newest first for time)."""
    if order not in TIMELINE_ORDERS:
        raise UsageError(f"order: use one of {', '.join(TIMELINE_ORDERS)}, not '{order}'")
    state, roster = session.materialized, session.roster
    if order == "time":
        ids = state.timeline_ids(include_hidden=include_hidden, compartments=compartments, conversation=conversation)
        return ids[::-1] if descending else ids
    column = {"compartment": "compartment", "type": "coalesce(type, '')", "authority": "coalesce(effective, -1)",
              "writer": "writer", "text": "lower(substr(text, 1, 80))"}[order]
    where, args = visible_where(include_hidden, compartments, conversation)
    rows = state.db.execute(f"SELECT id, {column} FROM records WHERE {where} ORDER BY ts, lamport, idx, id",
                            args).fetchall()
    if order in ("compartment", "writer"):
        name = roster.compartment_name if order == "compartment" else roster.writer_name
        names: dict[bytes, str] = {}
        keyed = [(rid, names.get(k) or names.setdefault(k, name(k).lower())) for rid, k in rows]
        keyed.sort(key=lambda r: r[1], reverse=descending)
        return [rid for rid, _ in keyed]
    rows.sort(key=lambda r: r[1] if r[1] is not None else "", reverse=descending)
    return [r[0] for r in rows]


def attachments_of(session: Session, of: Iterable[bytes]) -> dict[bytes, list[RecordView]]:
    """The attachments (not forgotten, readable here) of these records, by record, oldest first."""
    wanted = {rid.hex(): rid for rid in of}
    out: dict[bytes, list[RecordView]] = {}
    if not wanted:
        return out
    where, args = visible_where()
    ids = [r[0] for r in session.materialized.db.execute(
        f"SELECT id FROM records WHERE {where} AND type = 'attachment' ORDER BY ts, lamport, idx, id", args)]
    for v in session.materialized.records(ids):
        target = v.value.get("of") if isinstance(v.value, dict) else None
        if isinstance(target, str) and target in wanted:
            out.setdefault(wanted[target], []).append(v)
    return out


def conversation_ids(session: Session, conversation: str, compartment: str, *,
                     include_hidden: bool = False) -> list[bytes]:
    """The messages of one conversation (its title record left out), oldest first."""
    cid = session.roster.compartment_id(compartment)
    if cid is None or cid == session.roster.control_id:
        raise UsageError(f"no compartment {compartment}")
    where, args = visible_where(include_hidden, [cid], conversation)
    rows = session.materialized.db.execute(
        f"SELECT id FROM records WHERE {where} AND (type IS NULL OR type != 'conversation') "
        "ORDER BY ts, lamport, idx, id", args)
    return [r[0] for r in rows]


def search_page(session: Session, text: str, *, offset: int = 0, limit: int = 200,
                order: str = "relevance") -> SearchPage:
    """One page of a full-text search, with how many records match in all and a snippet of each."""
    total, exact, found = search.search_page(session.materialized, text, offset=offset, limit=limit, order=order)
    return SearchPage(query=text, order=order, total=total, offset=offset,
                      hits=[SearchHit(record=v, snippet=snippet) for v, snippet in found], total_exact=exact)
