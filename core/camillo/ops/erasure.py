"""Erasure for real: crypto-erasure of records, and the honest account of what it reaches (spec §16.4).

To erase records of compartment ``c``:

1. find every epoch of ``c`` whose segments hold a batch carrying a target record;
2. start a new epoch ``e*`` and roll the vault master secret: every *surviving* epoch secret is
   wrapped to the new owner KEM key and the grants, every remaining user credential gets a new
   slot, and the erasing device rotates its own key;
3. re-encrypt every batch of the affected epochs under ``e*``: the original header and signature
   stay (they list record hashes), the erased records' bytes become ``null``;
4. write the ERASE record, the EPOCH record of ``e*`` and an ERASURE_MANIFEST (old segments removed,
   new segments added, batches vouched for), which also keeps other devices from raising a rollback
   alert when the old segments vanish;
5. delete the old segments, every old slot and envelope (so no current file holds a path to the
   destroyed epoch secrets), and purge this device's cache.

What it cannot reach is reported, never hidden: copies made before (sync-service version history,
backups) can still be opened with a credential that could open them then and still exists, namely
the passphrase and recovery phrase until they are changed, other devices until they next open the
vault and rotate their keys, and agent grants that could read the compartment.

Every step checks what is already done, so running ``erase`` again after a crash completes it; the new
files of a run a crash stopped before its records (noted first in the local state) are deleted by
the next open, since nothing announces them.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

from .. import encoding, ids, keys, segments, slots
from ..changes import Changes
from ..control import Level, owner_entry
from ..credentials import Credential, CredentialKind
from ..envelopes import EnvelopeKind
from ..errors import Incomplete, UsageError, VaultError
from ..records import Batch, Kind, encode_record
from ..revocation import revocation_body
from ..session import Session
from ..session.copies import kept_signatures, merge_entries
from ..session.installation import forget_key, seal_device_key_for, switch_back, switch_key
from ..session.writer import write_batches
from ..storage import segment_name
from ..values import Notice, ReachReport, Unlock
from . import attachments
from .credentials import authenticate
from .grant_trust import trust_files
from .policy import require_erasure_allowed
from .rekey import (
    FileList,
    Rekey,
    active_grants,
    apply,
    envelope,
    grant_envelopes,
    keys_not_here,
    may_gain,
    new_epoch,
    newest_view,
    proof_of_possession,
    reissue_slots,
    roll_keyring,
    seal_keys_without,
    unread_branches,
)

COMPACT_PAYLOAD = 4 * 1024 * 1024


def segment_id(name: str) -> bytes:
    """The content hash a segment's file name carries."""
    return bytes.fromhex(name.rsplit("/", 1)[1][:64])


def _exposed(session: Session, cid: bytes, rotated: set[bytes]) -> list[str]:
    r = session.roster
    lines = [
        "Copies of the vault made before now (your sync service's version history, backups) still hold the "
        "erased record, sealed under the destroyed keys, for as long as they are kept.",
        "Your passphrase opens those old copies until you change it (camillo passwd).",
        "Your recovery phrase opens them until you re-issue it (camillo recovery reissue).",
    ]
    others = [p.name for p in r.devices() if p.writer_id not in r.revocations and p.writer_id not in rotated]
    if others:
        lines.append(f"Your other device(s) {', '.join(sorted(others))} open them until each next opens the vault "
                     "(it then rotates its key), or until you revoke it.")
    readers = [p.grant.agent for p in active_grants(session, set())
               if p.grant is not None and p.grant.scopes.get(cid) in (Level.READ, Level.WRITE)]
    if readers:
        lines.append(f"Agent grant(s) {', '.join(sorted(readers))} could read this compartment: what they already "
                     "read stays with them, and their keys open old copies until you revoke them.")
    lines.append("Anything a device or an agent already read or copied cannot be recalled.")
    return lines


def without_erased(batch: Batch, erased: set[bytes] | frozenset[bytes]) -> Batch:
    """``batch`` with the bytes of the records in ``erased`` (record ids) set to null (spec §16.4 step 5)."""
    if erased.isdisjoint(batch.header.records):
        return batch
    records = tuple(None if rid in erased else raw for rid, raw in zip(batch.header.records, batch.records))
    return Batch(batch.id, batch.header_bytes, batch.header, batch.sigs, records)


class Sealer:
    """Packs batches, given one at a time, into segments of up to :data:`COMPACT_PAYLOAD`, sealed to
    one epoch key: :meth:`add` returns the segments a batch filled, :meth:`finish` the last one; each
    (name, bytes, batch ids).  What it holds at once is one segment's batches (a compaction of a million
    records seals them as it reads them, :mod:`camillo.ops.compaction`).  ``keep`` receives each
    segment's own key by name (spec §16.10 rule 2)."""

    def __init__(self, session: Session, cid: bytes, eid: bytes, epk: bytes, *,
                 keep: dict[str, bytes] | None = None) -> None:
        self._session, self._cid, self._eid, self._epk, self._keep = session, cid, eid, epk, keep
        self._group: list[Batch] = []
        self._size = 0

    def add(self, batch: Batch) -> list[tuple[str, bytes, list[bytes]]]:
        n = len(encoding.encode(batch.to_cbor()))
        out = self._seal() if self._group and self._size + n > COMPACT_PAYLOAD else []
        self._group.append(batch)
        self._size += n
        return out

    def finish(self) -> list[tuple[str, bytes, list[bytes]]]:
        return self._seal() if self._group else []

    def _seal(self) -> list[tuple[str, bytes, list[bytes]]]:
        group, self._group, self._size = self._group, [], 0
        seg, key = segments.seal_segment_keyed(self._session.vault_id, self._cid, self._eid, self._epk,
                                               segments.encode_payload(group))
        name = segment_name(seg)
        if self._keep is not None:
            self._keep[name] = key
        return [(name, seg, [x.id for x in group])]


def reseal(session: Session, cid: bytes, eid: bytes, epk: bytes, batches: list[Batch], *,
           keep: dict[str, bytes] | None = None) -> list[tuple[str, bytes, list[bytes]]]:
    """Pack batches into as few segments as fit, sealed to one epoch key; (name, bytes, batch ids).
    ``keep`` receives each segment's own key by name (spec §16.10 rule 2)."""
    sealer = Sealer(session, cid, eid, epk, keep=keep)
    out = [sealed for b in batches for sealed in sealer.add(b)]
    return out + sealer.finish()


def rotation_records(session: Session, old: Credential, new: Credential) -> list[bytes]:
    """The records that replace this device's key ``old`` by ``new``: a certificate for the new key
    signed by the old one (with the new key's proof of possession), and the old key's retirement.
    The retirement has seen the new key's first batch in every compartment, so the new device's
    first batches (which carry the certificate) count."""
    p = session.roster.principals[old.writer_id]
    cert = encode_record(
        Kind.DEVICE_CERT, old.writer_id,
        body={0: owner_entry(CredentialKind.DEVICE, new.signer.public, new.recipient.public, p.name, p.platform),
              1: old.writer_id, 2: "key rotation", 3: proof_of_possession(session.vault_id, new)},
        signers=[old.signer],
    )
    body = revocation_body(old.writer_id, session.log.chains, "key rotated")
    seen, pins = body[2], body[3]
    # What this device wrote itself counts even where this view cannot accept it yet (a batch of its
    # own still syncing, or sealed to an epoch a concurrent erasure destroyed): every one was its own.
    if session.actor is old and session.device_state_store is not None:
        for c, (seq, bid) in session.device_state.counters.items():
            if seq > seen.get(c, {}).get(old.writer_id, 0):
                seen.setdefault(c, {})[old.writer_id], pins[c] = seq, bid
    for c in session.all_compartments():
        seen.setdefault(c, {})[new.writer_id] = 1
    retire = encode_record(Kind.REVOKE, old.writer_id, body=body, signers=[old.signer])
    return [cert, retire]


def rotate_if_erasure_seen(session: Session) -> bool:
    """A device certified before an erasure replaces its key when it next opens the vault: its old
    key could open the pre-erasure copies (sync history, backups) through its old slot, so it must
    stop existing.  Returns True when it rotated."""
    actor = session.actor
    if actor is None or actor.kind != CredentialKind.DEVICE:
        return False
    me = session.roster.principals.get(actor.writer_id)
    seen = set(session.device_state.manifests)
    unseen = [m for m in session.roster.manifests.values()
              if m.kind == Kind.ERASURE_MANIFEST and m.record_id not in seen]
    if me is None or not unseen:
        return False
    if unread_branches(session):  # its old key's slot opens the other roll's master secret: joined first (rule 9)
        return False
    new = Credential.generate(CredentialKind.DEVICE)
    records = rotation_records(session, actor, new)
    old_slots = [h.name for h, st in session.current_slots()
                 if h.type == slots.SlotType.DEVICE and st.recipient_id == actor.recipient_id]
    # The slots that count only through the old key's signature (it rolled the keyring last, enrolled
    # a device, changed the passphrase) are re-issued under the new key before the old one retires.
    again, originals = reissue_slots(session, actor.writer_id, new)
    sealed_again, replaced = seal_keys_without(session, actor.writer_id)  # the old key's seal keys go (§16.6)
    files = [session.build_slot(new.recipient.public, slots.SlotType.DEVICE, me.name, signer=new), *again,
             *sealed_again, *trust_files(session, pending=records)]  # append grants follow the new key
    with session.unannounced_files(ids.record_id(records[0]), [n for n, _ in files]):
        old = switch_key(session, new)
        try:
            written = session.write_files(files)
        except VaultError:
            switch_back(session, old, new)
            raise

        def undo() -> None:  # nothing announces the new key: this installation keeps the old one
            session.delete_quietly(reversed(written))
            switch_back(session, old, new)

        write_batches(session, {c: list(records) for c in session.all_compartments()}, undo=undo)
    for name in [*old_slots, *originals, *replaced]:
        session.shelf.delete(name)
    forget_key(session, old)
    session.unlocking = new if session.unlocking is old else session.unlocking
    carriers = {m.record_id for m in unseen}
    by = sorted({session.roster.writer_name(v.header.writer_id) for v in session.batches.values()
                 if carriers & set(v.header.records)} or {"another device"})
    session.notices.append(Notice("key-rotated", f"this device's key was replaced: an erasure on {', '.join(by)} "
                                  "destroyed keys the old one held (it can no longer open old copies of the vault)",
                                  who=", ".join(by)))
    return True


def finish_pending_erasures(session: Session) -> int:
    """Delete old segments that a signed ERASURE_MANIFEST replaced but that are still here (an erasure
    interrupted after its manifest was written, or a copy an object store's pack kept while the
    erasure ran, spec §4.7.1), once its new segments are all here.  Returns how many were deleted."""
    reader = session.reader

    def name(seg: bytes) -> str:
        return f"segments/{seg.hex()[:2]}/{seg.hex()}.seg"

    def readable(seg: bytes) -> bool:
        return name(seg) in reader.segment_batches and name(seg) not in reader.unreadable

    old = sorted({name(seg) for m in session.roster.manifests.values()
                  if m.kind == Kind.ERASURE_MANIFEST and all(readable(a) for a in m.added)
                  for seg in m.removed if name(seg) in reader.segment_batches or name(seg) in reader.unreadable})
    if old:
        session.delete_files(old)
        session.refresh()
    return len(old)


def _not_reachable_yet(session: Session, cid: bytes, views: list[tuple[bytes, bytes, bytes]]) -> None:
    """Raise Incomplete when the targets' copies here wait for another device: sealed under an epoch
    an earlier erasure destroyed (their writer had not seen it; it seals them again under the new
    epoch when it syncs, spec §16.10), or under a key that has not arrived yet."""
    reader, roster = session.reader, session.roster
    destroyed = {e for x in roster.erasures.values() if x.compartment_id == cid for e in x.epochs}
    for rid, bid, _ in views:
        epochs = {reader.segment_epochs[name][1] for name, bids in reader.segment_batches.items()
                  if bid in bids and name in reader.segment_epochs}
        if not epochs:
            continue
        view = reader.batches.get(bid)
        who = roster.writer_name(view.header.writer_id) if view is not None else "the device that wrote it"
        if epochs & destroyed:
            raise Incomplete(
                f"record {rid.hex()[:12]} cannot be erased from this copy yet: its copy here is sealed under a key "
                f"an earlier erasure destroyed, and {who}, which wrote it before it saw that erasure, seals it "
                "again under the new key when it next syncs. Nothing was changed: let the sync finish, then erase it")
        raise Incomplete(
            f"record {rid.hex()[:12]} cannot be erased from this copy yet: the key that opens its copy here has not "
            "arrived. Nothing was changed: let the sync finish, then erase it")


def _wait_for_announcing_batches(session: Session, cid: bytes, affected: set[bytes]) -> None:
    """Raise Incomplete when an epoch this erasure would destroy was announced in the control compartment
    but the batch of ``cid`` that carries the same EPOCH record (its maker's first batch there, sealed under
    that epoch: an erasure's own batch, with its ERASE and key rotation) has not arrived (spec §16.10 rule
    2).  Destroyed now, that batch could be sealed again only by its writer, from the secret it kept; a key
    that writer loses to a roll it did not foresee (no keychain, a concurrent passphrase change and the
    join that follows) takes that secret with it, and the segment stays unreadable on every device."""
    roster, log, batches = session.roster, session.log, session.batches
    for eid in sorted(affected):
        info = roster.epochs.get((cid, eid))
        where = session.materialized.record_location(info.record_id) if info is not None else None
        view = batches.get(where[0]) if where is not None else None
        if info is None or view is None:
            continue
        chain = log.chains.get((view.header.writer_id, cid), {})
        if any((b := batches.get(bid)) is not None and info.record_id in b.header.records for bid in chain.values()):
            continue
        raise Incomplete(
            f"the batch that {roster.writer_name(view.header.writer_id)} wrote into compartment "
            f"{roster.compartment_name(cid)} when it started the key this erasure would destroy has not arrived "
            "here yet (it is sealed under that key). Nothing was changed: let the sync finish, then erase again")


def erase(session: Session, record_ids: list[bytes], *, reauth: Unlock | None = None,
          follow_up: bool = False) -> ReachReport:
    """Erase records for real.  ``follow_up``: complete an erasure the vault already records (its
    targets still have a copy here, under a key it did not destroy: two devices erased concurrently,
    spec §16.10); it needs no re-authentication and is signed by this device alone."""
    session.require_owner("erasing")
    newest_view(session)
    cred = None
    if not follow_up:
        require_erasure_allowed(session)
        cred = authenticate(session, reauth)
        waiting = keys_not_here(session)
        if waiting:  # its roll could not deliver them, and deletes the older slots (spec §16.10 rules 9, 10)
            raise Incomplete(f"{waiting}: erasing now would leave part of the vault readable only with the old "
                             "keys. Nothing was changed: let the sync finish, then try again")
    session.finish_unannounced()  # an earlier run a crash stopped before its records: its files go
    finish_pending_erasures(session)
    r, reader = session.roster, session.reader
    record_ids = sorted(set(record_ids) | attachments.attachments_of(session, set(record_ids)))  # files go along
    views = []
    for rid in record_ids:
        where = session.materialized.record_location(rid)
        if where is None:
            raise UsageError(f"no record {rid.hex()[:12]} in this vault")
        views.append((rid, *where))
    cids = {c for _, _, c in views}
    if len(cids) != 1:
        raise UsageError("erase records of one compartment at a time")
    cid = cids.pop()
    if cid == r.control_id:
        raise UsageError("control records cannot be erased")
    target_batches = {b for _, b, _ in views}
    held = session.keyring.epoch_keys
    affected = {reader.segment_epochs[name][1] for name, bids in reader.segment_batches.items()
                if name not in reader.unreadable and reader.segment_epochs.get(name, (None, None))[0] == cid
                and (cid, reader.segment_epochs[name][1]) in held and target_batches & set(bids)}
    if not affected:
        _not_reachable_yet(session, cid, views)
        raise UsageError("the records to erase are not in any readable segment here (already erased?)")
    if not follow_up and session.materialized.erased(record_ids) == set(record_ids):
        raise UsageError("these records are already erased")
    _wait_for_announcing_batches(session, cid, affected)
    old_segments = sorted(name for name, (c, e) in reader.segment_epochs.items()
                          if c == cid and e in affected and name not in reader.unreadable)
    targets = set(record_ids)
    target_keys = {(r.compartment_name(cid), k) for k in session.materialized.keys_of(targets)}
    chunks = attachments.chunks_named(session, targets)  # deleted at the end unless another record names them

    # The affected epochs' batches without the erased records, read before anything is built or written:
    # a segment that vanishes meanwhile (another device's erasure arriving through the sync) stops the
    # erasure with nothing changed.
    seen: dict[bytes, Batch] = {}
    gone = targets | r.erased_records()
    for name in old_segments:
        try:
            batches = reader.batches_of_segment(name)
        except FileNotFoundError:
            raise Incomplete(f"the file {name} vanished while this device was erasing (the sync service is "
                             "bringing another device's change): nothing was erased; wait for the sync and "
                             "erase again", file=name) from None
        for b in batches:
            b = without_erased(b, targets)
            prior = seen.get(b.id)
            if prior is not None:  # the same batch in two segments (before compaction pruned one)
                # (null where an erasure, this one or an applied one, names the record; else either's bytes)
                records = merge_entries(b.header.records, prior.records, b.records, gone)
                b = Batch(b.id, b.header_bytes, b.header, kept_signatures(session.batches, prior, b), records)
            seen[b.id] = b

    # The erasing device rotates its key: the new key signs every new key file.
    old_actor = session.require_writer()
    new_dev = Credential.generate(CredentialKind.DEVICE)
    rotation = rotation_records(session, old_actor, new_dev)
    issuable = may_gain(session, session.slot_headers()[0], [session.keyring.master_secret()])  # (by the old key)
    session.actor = new_dev
    try:
        rekey = Rekey(session)
        roll_keyring(session, rekey, exclude={old_actor.writer_id}, destroyed={(cid, e) for e in affected},
                     derived=True, issuable=issuable)
        owner = rekey.new_owner_kem()
        eid = new_epoch(session, rekey, cid, "erasure", exclude=set(), owner=owner)
        secret = rekey.new_secrets[(cid, eid)]
        rekey.files.append(envelope(session, EnvelopeKind.EPOCH_SECRET, cid, eid, owner.public, secret))
        current = r.current_epoch(cid)
        for g in active_grants(session, set()):
            rekey.files += grant_envelopes(session, g, cid, eid, secret, current.epoch_id if current else None)
        rekey.files.append(session.build_slot(new_dev.recipient.public, slots.SlotType.DEVICE,
                                              r.principals[old_actor.writer_id].name,
                                              generation=rekey.new_generation, vms=rekey.new_vms))
        # every older envelope goes: append grants get the whole chain again, the new key's included
        rekey.files += trust_files(session, pending=rotation, everything=True, exclude=rekey.excluded)
    finally:
        session.actor = old_actor
    epk = keys.epoch_key(secret, session.vault_id, cid, eid).public

    new_segments = reseal(session, cid, eid, epk, list(seen.values()))

    signer = cred or old_actor
    signers = [cred.signer, old_actor.signer] if cred is not None else [old_actor.signer]
    erase_record = encode_record(Kind.ERASE, signer.writer_id,
                                 body={0: cid, 1: sorted(targets), 2: sorted(affected)}, signers=signers)
    manifest = encode_record(
        Kind.ERASURE_MANIFEST, signer.writer_id,
        body={0: cid, 1: sorted(segment_id(n) for n in old_segments),
              2: sorted(segment_id(n) for n, _, _ in new_segments), 3: sorted(seen)},
        signers=signers,
    )
    # 1. new key files and the re-encrypted segments (all deleted again if one cannot be written),
    #    their names noted first in the local state: if a crash comes before the control batch that
    #    announces them, the next open deletes them (the new epoch's key would otherwise be lost
    #    with them, leaving them unreadable for good);
    new_files: FileList = [*rekey.files, *((name, data) for name, data, _ in new_segments)]
    control = session.all_compartments()[0]
    with session.unannounced_files(ids.record_id(manifest), [n for n, _ in new_files]):
        written = session.write_files(new_files)
        # 2. this installation becomes the new device, whose first batches carry its certificate and
        #    the old key's retirement: the control compartment first, so that the erased compartment's
        #    own batch is sealed under the new epoch the control batch announces;
        # (the new key knows this erasure from the start: a crash before the state below is saved must
        # not make it rotate again on the next open and retire the key that signed the new slots)
        switch_key(session, new_dev, seen_manifests=(ids.record_id(manifest),))
        if rekey.new_vms is None or rekey.new_generation is None:
            raise AssertionError("the keyring was not rolled")
        seal_device_key_for(session, rekey.new_vms, rekey.new_generation)  # before the records: crash safety
        per = {c: list(rotation) for c in session.all_compartments()}
        for c, raws in rekey.records.items():
            per.setdefault(c, []).extend(raws)
        per[control] = [*per[control], erase_record, manifest]

        def undo() -> None:  # the control batch could not be written at all: leave the vault as it was
            session.delete_quietly(reversed(written))
            switch_back(session, old_actor, new_dev)

        write_batches(session, {control: per.pop(control)}, undo=undo)
    for ref, new_secret in rekey.new_secrets.items():  # the epochs it announced: the writes below seal to them
        session.keyring.hold(ref, new_secret)
    per[cid] = [*per[cid], erase_record, manifest]
    try:
        write_batches(session, per)
    except VaultError as exc:  # the erasure is announced: it cannot be undone, only completed
        raise type(exc)(f"the erasure was interrupted after its control records were written "
                        f"({exc.message.split(';')[0]}); free some space (or make the folder writable) and erase "
                        "again to complete it", file=exc.file) from None
    store = session.device_state_store
    if store is None:
        raise AssertionError("no device state")
    with store.locked():  # this device's new key never held the destroyed keys
        ds = store.load() or session.device_state
        ds.manifests = session.erasure_manifests()
        session.save_device_state(ds)
    # the batches of the old segments live on in the new ones, without the erased records (whose rows
    # in the local state were scrubbed when the erasure was read): moved, not read again (before the
    # keys that open the new segments are read, which would decrypt them for nothing)
    session.reader.resealed(old_segments, [(name, bids) for name, _, bids in new_segments], (cid, eid))
    # 3. switch to the new master secret, delete old slots and envelopes, then the old segments.
    files_written = len(new_files)
    rekey.records, rekey.files = {}, []
    apply(session, rekey)
    forget_key(session, old_actor)
    session.delete_files(old_segments)
    deleted = len(old_segments)
    changes = session.reader.changes()
    session.after_erasure()
    chunks -= attachments.chunks_named(session)
    session.delete_files(sorted(chunks))
    session.reader.forget_changes()  # (what reading the keys again moved: nothing the report does not name already)
    return ReachReport(
        records=[t.hex() for t in sorted(targets)], compartment=r.compartment_name(cid),
        epochs_destroyed=[e.hex() for e in sorted(affected)], batches_reencrypted=len(seen),
        segments_deleted=deleted, segments_written=len(new_segments), key_files_deleted=len(rekey.delete),
        attachment_chunks_deleted=len(chunks),
        generation=session.keyring.generation, exposed=_exposed(session, cid, {new_dev.writer_id}),
        changes=Changes(records=tuple(sorted(targets)) + changes.records, batches=changes.batches, keys=changes.keys | target_keys,
                        compartments=changes.compartments | {r.compartment_name(cid)}, devices=True,
                        credentials=True, files_written=files_written,
                        files_removed=deleted + len(rekey.delete), note="erased"),
    )
