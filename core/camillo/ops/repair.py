"""What an open (and a refresh) finishes: the work a crash or another device left for this installation.

Run by the facade after every writable unlock, in this order:

1. files of an operation of this installation that a crash stopped before the record announcing
   them are deleted (spec §12.4, §16.4);
2. batches that sit only in segments sealed under an epoch another device's erasure destroyed
   (they were written concurrently with it) are sealed again under the current epoch, with the
   epoch secrets this writer kept for that purpose, or the keys of the segments it sealed without
   their epoch's secret (spec §16.10);
3. a device certified before an erasure it has not seen replaces its key (its old key could open
   the pre-erasure copies through its old slot, §16.4);
4. dead slots are deleted: those of revoked credentials and older generations' passphrase and
   recovery slots, whose deletion a
   crash interrupted (the last step of a credential change, §16.7);
5. an erasure that another device's concurrent erasure left incomplete (a copy of an erased record
   under a key that erasure did not destroy) is completed (spec §16.10);
6. old segments an applied erasure manifest replaced that are still here (an erasure interrupted
   before it deleted them, or a copy an object store's pack kept, spec §4.7.1) are deleted;

and, first, a user credential this roster counts that holds no slot of the current generation, because
the roll that made it had not seen it registered (a device registered while another device revoked), is
issued one (spec §16.6 step 3); and, after step 2, the live epoch secrets this device holds that the
current keyring lacks (another device rolled the master secret concurrently, without them) are delivered
to the current owner key, unless a revoked credential may hold it (rule 9 (c): the keys roll again first).
A refresh that finds new files runs steps 2, 5 and 6 again.  Confined to the thread that owns the vault.
"""

from __future__ import annotations

from .. import keys, segments
from ..changes import Changes
from ..envelopes import EnvelopeKind
from ..errors import Incomplete, VaultError
from ..memos import ErasureMemo
from ..primitives import RecipientKey, constant_time_equal
from ..records import Batch, Kind
from ..session import Session
from ..session.installation import forget_older_seals
from ..session.keyring import EpochRef
from ..session.unlock import catch_up_generation
from ..session.writer import sealing_key
from ..storage import FolderShelf
from ..values import Notice
from .credentials import finish_credential_changes, issue_missed_slots, keep_unlocking_slot
from .erasure import (
    erase,
    finish_pending_erasures,
    reseal,
    rotate_if_erasure_seen,
    segment_id,
    without_erased,
)
from .rekey import (
    Rekey,
    active_grants,
    apply,
    envelope,
    grant_envelopes,
    new_epochs_everywhere,
    other_branch_secrets,
    other_branches,
    revoked_holds,
    roll_keyring,
    roll_read,
    unread_branches,
)


def finish_open(session: Session, *, enrolling: bool = False) -> None:
    """``enrolling``: the device's only slot was made after every erasure so far (it just joined),
    so it has no pre-erasure key to rotate away."""
    if session.read_only or not session.keyring.unlocked:
        return
    session.finish_unannounced()
    if session.actor is None:
        return
    if catch_up_generation(session):  # unlocked by an older credential that opened this device's key (§16.10)
        keep_unlocking_slot(session)
    issue_missed_slots(session)
    rescue_batches(session)
    wrap_missing_epochs(session)
    roll_again(session)
    if not enrolling:
        rotate_if_erasure_seen(session)
    finish_credential_changes(session)
    complete_erasures(session)
    if session.is_owner:
        finish_pending_erasures(session)


def after_refresh(session: Session) -> Changes:
    """What a refresh that found something new finishes (steps 2 and 5 above)."""
    if session.read_only or session.actor is None:
        return Changes()
    changes = rescue_batches(session)
    if session.is_owner:
        changes |= wrap_missing_epochs(session)
        changes |= roll_again(session)
        changes |= complete_erasures(session)
        changes |= Changes(files_removed=finish_pending_erasures(session))
    return changes


# ---------------------------------------------------------------------------------- step 2


def destroyed_epochs(session: Session) -> set[EpochRef]:
    """Every (compartment, epoch) an applied ERASE destroyed."""
    return session.roster.destroyed_epochs()


def rescue_batches(session: Session) -> Changes:
    """Seal again, under the compartment's current epoch, every batch found only in segments sealed
    under an epoch an erasure destroyed, when this writer kept that epoch's secret (it sealed its own
    batches to it) or the segment's own key (it sealed the segment without holding the epoch's secret):
    the batches of writers that did not know of the erasure yet.  A copy that an erasure
    replaced (its manifest lists the segment as removed, and the batch) is never sealed again: it may hold
    what that erasure erased, and the erasure's new segment holds the batch.  Only that manifest vouches
    for it: an erasure's own new segment, sealed under the epoch it started, holds the only copy of what
    it re-encrypted, and an erasure made elsewhere without that segment can destroy its epoch.  A record
    an applied ERASE names is never sealed again (its bytes become null, as the erasure's do).
    Then the old segments, which nobody can read any more, are deleted, and the kept secret with them."""
    kept, kept_segments = session.device_state.kept, session.device_state.kept_segments
    if session.read_only or not (kept or kept_segments) or session.actor is None:
        return Changes()
    reader, roster = session.reader, session.roster
    destroyed = destroyed_epochs(session)
    if not destroyed and not kept_segments:
        return Changes()
    if kept_segments:
        _settle_kept_segments(session, destroyed)
        kept, kept_segments = session.device_state.kept, session.device_state.kept_segments
    if not destroyed:
        return Changes()
    candidates = sorted((name, ref) for name, ref in reader.segments_under(destroyed).items()
                        if ref[1] in kept.get(ref[0], {}) or name in kept_segments)
    if not candidates:  # (every open after an erasure, once its old segments are gone: nothing more to do)
        _drop_kept(session, destroyed, set(), set())
        return Changes()
    replaced: dict[bytes, frozenset[bytes]] = {}  # segment id -> the batches the erasure removing it re-encrypted
    for m in roster.manifests.values():  # (each manifest's batches made a set once, not once per segment:
        if m.kind == Kind.ERASURE_MANIFEST:  # an erasure of an epoch of 100,000 records removes 1,000 of them)
            these = frozenset(m.batches)
            for seg in m.removed:
                replaced[seg] = replaced[seg] | these if seg in replaced else these
    erased = roster.erased_records()
    alive_holders: dict[bytes, set[str]] = {}  # batch id -> readable segments under live epochs
    for name, bids in reader.segment_batches.items():
        ref = reader.segment_epochs.get(name)
        if ref is not None and ref not in destroyed and name not in reader.unreadable:
            for b in bids:
                alive_holders.setdefault(b, set()).add(name)
    rescue: dict[bytes, dict[bytes, Batch]] = {}  # compartment -> batches to seal again
    settled: list[str] = []  # old segments whose every batch is covered or safe elsewhere
    for name, (cid, eid) in candidates:
        try:
            data = session.shelf.read(name)
            if eid in kept.get(cid, {}):
                payload = segments.open_segment(data, name, session.vault_id,
                                                keys.epoch_key(kept[cid][eid], session.vault_id, cid, eid))
            else:  # a segment this writer sealed without the epoch's secret: its own key opens it
                payload = segments.open_segment_with(data, name, session.vault_id, kept_segments[name])
            batches = segments.decode_payload(payload, name)
        except (FileNotFoundError, VaultError):
            continue
        covered = replaced.get(segment_id(name), frozenset())
        for batch in batches:
            if batch.id not in covered and not alive_holders.get(batch.id):
                rescue.setdefault(cid, {})[batch.id] = without_erased(batch, erased)
        settled.append(name)
    written = 0
    for cid, found in sorted(rescue.items()):
        eid, epk = sealing_key(session, cid)
        ordered = sorted(found.values(), key=lambda b: (b.header.writer_id, b.header.seq))
        # The epoch's secret is kept as a write keeps it (rule 2), or, when it is not here, each new
        # segment's own key, durably before the new segments are written: a later erasure made where
        # they have not arrived yet may destroy this epoch too, and they are then sealed again in turn
        # (nothing kept, nobody could open them again, nor seal them again or delete them)
        secret = session.keyring.secret((cid, eid))
        keep: dict[str, bytes] | None = {} if secret is None else None
        files = [(n, d) for n, d, _ in reseal(session, cid, eid, epk, ordered, keep=keep)]
        if keep or secret is not None:
            _update_kept_segments(session, add=keep, add_epochs=None if secret is None else {(cid, eid): secret})
        written += len(session.write_files(files))
    if written:
        session.refresh()
    removed = 0
    for name in settled:
        try:
            session.shelf.delete(name)
            removed += 1
        except VaultError:
            continue
    if removed:
        session.refresh()
    _drop_kept(session, destroyed, {ref for name, ref in candidates if name not in settled}, set(settled))
    count = sum(len(found) for found in rescue.values())
    if count:
        session.notices.append(Notice("sealed-again", f"{count} write(s) made while another device erased records "
                                      "were sealed again under the new keys, so every device can read them",
                                      count=count))
    return session.reader.changes(files_written=written, files_removed=removed,
                                            note="batches written during another device's erasure sealed again"
                                            if written else "")


def _drop_kept(session: Session, destroyed: set[EpochRef], still_needed: set[EpochRef], settled: set[str]) -> None:
    """Forget the kept secrets of destroyed epochs, and the kept keys of segments sealed again, once
    nothing here is left to seal again."""
    ds = session.device_state
    drop = [(c, e) for c, per in ds.kept.items() for e in per if (c, e) in destroyed and (c, e) not in still_needed]
    if not drop and not settled & ds.kept_segments.keys():
        return
    _update_kept_segments(session, drop=settled, drop_epochs=drop)


def _update_kept_segments(session: Session, *, add: dict[str, bytes] | None = None, drop: set[str] | None = None,
                          drop_epochs: list[EpochRef] | None = None,
                          add_epochs: dict[EpochRef, bytes] | None = None) -> None:
    """Change what the device state keeps to seal again (spec §16.10 rule 2), durably, under its lock."""
    store = session.device_state_store
    if store is None:
        return
    with store.locked():
        on_disk = store.load() or session.device_state
        on_disk.kept_segments.update(add or {})
        for name in drop or ():
            on_disk.kept_segments.pop(name, None)
        for (c, e), secret in (add_epochs or {}).items():
            on_disk.kept.setdefault(c, {}).setdefault(e, secret)
        for c, e in drop_epochs or ():
            on_disk.kept.get(c, {}).pop(e, None)
        on_disk.kept = {c: per for c, per in on_disk.kept.items() if per}
        session.save_device_state(on_disk)


def _settle_kept_segments(session: Session, destroyed: set[EpochRef]) -> None:
    """The kept key of a segment sealed without its epoch's secret is needed no longer once that secret
    is here (it is kept instead, as for a segment sealed with it) or the segment is gone."""
    keyring, kept_segments = session.keyring, session.device_state.kept_segments
    done: set[str] = set()
    secrets: dict[EpochRef, bytes] = {}
    for name in kept_segments:
        ref = session.reader.segment_ref(name)
        if ref is None:
            done.add(name)
        elif ref not in destroyed and (secret := keyring.secret(ref)) is not None:
            secrets[ref] = secret
            done.add(name)
    if done:
        _update_kept_segments(session, drop=done, add_epochs=secrets)


# ---------------------------------------------------------------------------------- live epochs a roll missed


def wrap_missing_epochs(session: Session) -> Changes:
    """Deliver to the current owner key every live epoch secret this device holds that the current
    keyring lacks: another device rolled the master secret without knowing an epoch this one made or
    received concurrently (spec §16.10 rule 8).  The secrets come from the keyring this session held
    before it moved to the newer master secret, and from the epochs this writer kept; each must match
    its signed EPOCH record."""
    owner = session.keyring.owner_kem
    if not session.is_owner or session.read_only or owner is None or not roll_read(session):
        return Changes()  # (the carried secrets stay until the roll's records arrive)
    if revoked_holds(session):
        return Changes()  # (a revoked credential holds this owner key: the keys are rolled again first)
    roster, keyring = session.roster, session.keyring
    destroyed = destroyed_epochs(session)
    offered: dict[EpochRef, bytes] = dict(session.carried)
    if session.previous_owners:  # the key was found under master secrets a random roll handed on (spec §16.6)
        offered.update((ref, s) for ref, s in other_branch_secrets(session, session.previous_owners).items()
                       if ref not in offered)
        session.previous_owners = []
    for cid, per in session.device_state.kept.items():
        for eid, secret in per.items():
            offered.setdefault((cid, eid), secret)
    rekey = Rekey(session)
    for ref, secret in sorted(offered.items()):
        info = roster.epochs.get(ref)
        if ref in keyring.epoch_secrets or ref in destroyed or info is None:
            continue
        if not constant_time_equal(keys.epoch_commit(secret, session.vault_id, *ref), info.commit):
            continue
        cid, eid = ref
        rekey.files.append(envelope(session, EnvelopeKind.EPOCH_SECRET, cid, eid, owner.public, secret))
        current = roster.current_epoch(cid)
        for g in active_grants(session, set()):
            rekey.files += grant_envelopes(session, g, cid, eid, secret, info.prev,
                                           current=current is not None and current.epoch_id == eid)
    carried = {ref: s for ref, s in session.carried.items() if ref not in roster.epochs}
    written = session.write_files(rekey.files) if rekey.files else []
    session.carried = carried
    if not carried and session.key_from_seal:
        forget_older_seals(session)  # nothing older is left to hand over (spec §16.10 rule 10)
    if not written:
        return Changes()
    session.reread_keys()
    return session.reader.changes(files_written=len(written), note="keys another device's change missed were added")


def roll_again_if_revoked_holds(session: Session) -> None:
    """Called when this session moves to a newer generation in the middle of its work (an append, a key
    change's newest view): roll the keys again at once if a revoked credential may hold the new master
    secret (spec §16.10 rule 9 (c)), before anything is written under it or derived from it (found by
    review: an open session appended under it, and an erasure derived the next master secret from it)."""
    if session.is_owner and not session.read_only and session.actor is not None and revoked_holds(session):
        session.branch_checked = None
        roll_again(session)


def roll_again(session: Session) -> Changes:
    """Roll the keys again (spec §16.10 rule 9) when this device opens another master secret of its
    current generation (two rolls made at once, one of them random: a passphrase change or a
    revocation concurrent with another roll), or when its current keyring delivers an epoch an applied
    ERASE destroyed (a roll made before its device read a concurrent erasure wrapped it).  With other
    master secrets the roll joins them: derived from all of them (devices doing this at once arrive at
    one; a credential one roll revoked lacks that one's secret), every epoch any of them delivered
    wrapped again; otherwise it is random, as a revocation's.  It wraps no destroyed epoch, starts a
    new epoch everywhere (naming the new generation, rule 8) and deletes every envelope addressed to an
    older owner key, grants' included.  Looked for when the slot files changed, and at open."""
    reader, keyring = session.reader, session.keyring
    if not session.is_owner or session.read_only or session.actor is None or not keyring.unlocked:
        return Changes()
    shelf = session.shelf
    files = shelf.files_in("slots") if isinstance(shelf, FolderShelf) else None
    slot_files = None if files is None else (files, len(session.roster.revocations), len(session.roster.epochs))
    if not reader.destroyed_delivered and slot_files is not None and slot_files == session.branch_checked:
        return Changes()
    headers = session.slot_headers(ask_store=False)[0]
    if any(h.generation > keyring.generation for h in headers):
        return Changes()  # a newer generation came: this device moves to it first
    reading = other_branches(session, headers, vouched=False)
    if reading:  # read first: the records that vouch for the other roll's slot may be sealed in it
        read_other_rolls(session, reading)
    branches = other_branches(session, headers)
    if branches and unread_branches(session, branches):
        return Changes()  # the other roll's records have not all arrived: joined at a refresh that brings them
    session.branch_checked = slot_files
    # (c): a revoked credential may hold the current master secret; with other master secrets of this
    # generation, it may hold every one of them, and a join derived from them would be its to compute
    revoked = not reader.destroyed_delivered and revoked_holds(session)
    if not branches and not reader.destroyed_delivered and not revoked:
        return Changes()
    tainted, reader.destroyed_delivered = reader.destroyed_delivered, False
    rekey = Rekey(session)
    roll_keyring(session, rekey, exclude=set(), join=bool(branches) and not revoked, hand_over=not tainted)
    new_epochs_everywhere(session, rekey, session.all_compartments(), "keys rolled again", exclude=set())
    apply(session, rekey)
    changes = session.reader.changes(
        files_written=len(rekey.files), files_removed=len(rekey.delete),
        note="keys rolled again: a key change made without seeing a revocation had given the revoked credential the keys"
        if revoked else "keys rolled again: two key changes were made at once" if branches
        else "keys rolled again: a key change made during an erasure had kept a destroyed key")
    return changes | wrap_missing_epochs(session) if revoked else changes  # (what was held back for it)


OTHER_ROLL_DEPTH = 16  # rolls of the other branch read through, at most


def read_other_rolls(session: Session, branches: list[tuple[bytes, RecipientKey]]) -> None:
    """Hold the epoch secrets the other master secrets of this generation deliver (each matching the
    commitment of its EPOCH record, which the roster verified; none an ERASE destroyed) and read what they
    open, until nothing new comes (spec §16.10 rule 9, "read the other roll"): the batch that announces a
    roll's epochs is sealed under the epochs before it, and when the other device changed its keys twice
    while this one did too, those are the other device's previous roll's epochs, which only the other
    master secret delivers; and when the other roll was an erasure, the records that certify its
    device's new key, which signed the other roll's slots and envelopes, are among them.  Without this
    the other roll was never read, and the two were never joined.  A slot a host planted for this
    device's key gives a master secret whose envelopes deliver no secret matching a verified EPOCH record:
    nothing is held from it."""
    owners = [o for _, o in branches]
    for _ in range(OTHER_ROLL_DEPTH):
        destroyed = destroyed_epochs(session)
        new = {ref: s for ref, s in other_branch_secrets(session, owners, signed=False).items()
               if ref not in session.keyring.epoch_secrets and ref not in destroyed}
        if not new:
            return
        for ref, secret in sorted(new.items()):
            session.keyring.hold(ref, secret, borrowed=True)  # (to read with only: no roll wraps it from here)
        session.reader.read_again(sorted(session.reader.unreadable))
        session.refresh()


# ---------------------------------------------------------------------------------- step 5


def incomplete_erasures(session: Session) -> dict[bytes, set[bytes]]:
    """Per compartment, the records an applied ERASE names that still have a copy here (a readable
    segment under a live epoch holds their bytes): left by a concurrent erasure elsewhere.  Once a
    check found none, the local state keeps that (camillo.memos.ErasureMemo) and, while the erasures,
    the destroyed epochs, the epochs whose keys are here and the unreadable segments stay the same,
    the next checks look only at the segments stored since (a newly read one can hold an erased
    batch: a device that compacted without having seen the erasure), not at every segment's list."""
    reader, state = session.reader, session.materialized
    if not session.roster.erasures:
        return {}
    destroyed = destroyed_epochs(session)
    memo = ErasureMemo(state.db)
    fingerprint = memo.fingerprint(session.roster.erasures, destroyed, session.keyring.epoch_keys, reader.unreadable)
    since = memo.since(fingerprint)
    if since is not None and not since:
        return {}  # (nothing stored since the last check found none)
    located = [(e.compartment_id, target, where[0]) for e in session.roster.erasures.values()
               for target in e.targets if (where := state.record_location(target)) is not None]
    wanted = {batch_id for _, _, batch_id in located}
    holders: dict[bytes, list[str]] = {}
    # (not every segment's list decoded: SegmentBatches.holding; or only those stored since the last check)
    holding = reader.segments_holding(wanted) if since is None else [
        name for name in sorted(since) if name in reader.segment_batches and not wanted.isdisjoint(reader.segment_batches[name])]
    unsure = False  # a segment that could not be looked at: no finding is kept
    for name in holding:
        bids = reader.segment_batches[name]
        ref = reader.segment_epochs.get(name)
        if ref is None or ref in destroyed or name in reader.unreadable or ref not in session.keyring.epoch_keys:
            continue
        for b in bids:
            holders.setdefault(b, []).append(name)
    out: dict[bytes, set[bytes]] = {}
    for compartment_id, target, batch_id in located:
        for name in holders.get(batch_id, []):
            if (name, target) in reader.erasure_checked:
                continue
            holds = _holds_bytes(session, name, batch_id, target)
            if holds:
                out.setdefault(compartment_id, set()).add(target)
            elif holds is None:
                unsure = True  # (looked at again by the next check)
            else:
                reader.erasure_checked.add((name, target))
    if out or unsure:
        memo.drop()
    else:
        memo.found_complete(fingerprint)
    return out


def _holds_bytes(session: Session, name: str, batch_id: bytes, target: bytes) -> bool | None:
    """Whether this segment holds the record's bytes (None: it could not be read)."""
    try:
        batches = session.reader.batches_of_segment(name)
    except (FileNotFoundError, VaultError, KeyError):
        return None
    for b in batches:
        if b.id == batch_id:
            return any(rid == target and raw is not None for rid, raw in zip(b.header.records, b.records))
    return False


def complete_erasures(session: Session) -> Changes:
    """Erase again, here, what an applied ERASE names and a segment under a live epoch still holds."""
    if not session.is_owner or session.read_only:
        return Changes()
    changes = Changes()
    for _cid, targets in sorted(incomplete_erasures(session).items()):
        try:
            report = erase(session, sorted(targets), follow_up=True)
        except Incomplete:  # a segment vanished meanwhile (the sync is bringing a change): the next refresh
            continue
        changes |= report.changes
    return changes
