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

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from . import encoding, ids, keychain, keys, segments, slots
from .access import (
    USER_KINDS,
    Rekey,
    _active_grants,
    _envelope,
    apply,
    authenticate,
    grant_envelopes,
    new_epoch,
    proof_of_possession,
    reissue_slots,
    require_erasure_allowed,
    roll_keyring,
    write_files,
)
from .control import Level, owner_entry
from .credentials import Credential, CredentialKind
from .envelopes import EnvelopeKind
from .errors import UsageError, VaultError
from .localstate import Installation
from .records import Batch, Kind, encode_record
from .storage import segment_name

if TYPE_CHECKING:
    from .vault import Unlock, Vault

COMPACT_PAYLOAD = 4 * 1024 * 1024


@dataclass
class ReachReport:
    records: list[str]
    compartment: str
    epochs_destroyed: list[str]
    batches_reencrypted: int
    segments_deleted: int
    segments_written: int
    key_files_deleted: int
    generation: int
    exposed: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return dict(self.__dict__)

    def lines(self) -> list[str]:
        out = [
            f"Erased {len(self.records)} record(s) from {self.compartment}: their bytes are gone from the vault and "
            f"the keys of {len(self.epochs_destroyed)} epoch(s) that sealed them were destroyed.",
            f"Re-encrypted {self.batches_reencrypted} surviving batch(es) into {self.segments_written} new segment(s); "
            f"deleted {self.segments_deleted} old segment(s) and {self.key_files_deleted} old key file(s); "
            f"the master secret is now at generation {self.generation} and this device has a new key.",
            "What erasure cannot reach:",
        ]
        out += [f"  - {line}" for line in self.exposed]
        return out


def _exposed(vault: Vault, cid: bytes, rotated: set[bytes]) -> list[str]:
    r = vault.roster
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
    readers = [p.grant.agent for p in _active_grants(vault, set())
               if p.grant.scopes.get(cid) in (Level.READ, Level.WRITE)]
    if readers:
        lines.append(f"Agent grant(s) {', '.join(sorted(readers))} could read this compartment: what they already "
                     "read stays with them, and their keys open old copies until you revoke them.")
    lines.append("Anything a device or an agent already read or copied cannot be recalled.")
    return lines


def _batches_of_segment(vault: Vault, name: str) -> list[Batch]:
    cid, eid = vault._segment_epochs[name]
    data = vault.shelf.read(name)
    payload = segments.open_segment(data, name, vault.vault_id, vault._epoch_keys[(cid, eid)])
    return segments.decode_payload(payload, name)


def reseal(vault: Vault, cid: bytes, eid: bytes, epk: bytes, batches: list[Batch]) -> list[tuple[str, bytes, list[bytes]]]:
    """Pack batches into as few segments as fit, sealed to one epoch key; (name, bytes, batch ids)."""
    out = []
    group: list[Batch] = []
    size = 0
    for b in batches:
        n = len(encoding.encode(b.to_cbor()))
        if group and size + n > COMPACT_PAYLOAD:
            seg = segments.seal_segment(vault.vault_id, cid, eid, epk, segments.encode_payload(group))
            out.append((segment_name(seg), seg, [x.id for x in group]))
            group, size = [], 0
        group.append(b)
        size += n
    if group:
        seg = segments.seal_segment(vault.vault_id, cid, eid, epk, segments.encode_payload(group))
        out.append((segment_name(seg), seg, [x.id for x in group]))
    return out


def rotation_records(vault: Vault, old: Credential, new: Credential) -> list[bytes]:
    """The records that replace this device's key ``old`` by ``new``: a certificate for the new key
    signed by the old one (with the new key's proof of possession), and the old key's retirement.
    The retirement has seen the new key's first batch in every compartment, so the new device's
    first batches (which carry the certificate) count."""
    p = vault.roster.principals[old.writer_id]
    cert = encode_record(
        Kind.DEVICE_CERT, old.writer_id,
        body={0: owner_entry(CredentialKind.DEVICE, new.signer.public, new.recipient.public, p.name, p.platform),
              1: old.writer_id, 2: "key rotation", 3: proof_of_possession(vault.vault_id, new)},
        signers=[old.signer],
    )
    seen: dict[bytes, dict[bytes, int]] = {}
    pins: dict[bytes, bytes] = {}
    for (w, c), chain in vault.log.chains.items():
        if chain:
            seen.setdefault(c, {})[w] = max(chain)
            if w == old.writer_id:
                pins[c] = chain[max(chain)]
    for c in [vault.roster.control_id, *vault.roster.compartments]:
        seen.setdefault(c, {})[new.writer_id] = 1
    retire = encode_record(Kind.REVOKE, old.writer_id,
                           body={0: old.writer_id, 2: seen, 3: pins, 4: "key rotated"}, signers=[old.signer])
    return [cert, retire]


def become(vault: Vault, new: Credential, *, seen_manifests: tuple[bytes, ...] = ()) -> Credential:
    """This installation now writes as ``new`` (stored in the keychain or sealed locally, with a
    fresh device state and cache).  ``seen_manifests``: erasure manifests about to be written that
    the new key has nothing to fear from (it never held what they destroy).  Returns the old
    credential, whose key is deleted by :func:`forget_old_key` once the new certificate is durable."""
    old = vault.actor
    assert old is not None
    inst = vault.local.load_installation()
    keystore = inst.keystore if inst else "local"
    if keystore == "keychain":
        keychain.store(vault.vault_id, new.writer_id, new.recipient.seed, new.signer.seed)
    else:
        vault.actor = new
        import os

        try:
            os.unlink(vault.local.device_key_path)  # the old key, under every generation, goes
        except FileNotFoundError:
            pass
        vault._save_local_device_key(new)
    vault.actor = new
    vault.local.save_installation(Installation(new.writer_id, keystore, int(time.time()), old.writer_id))
    from .cache import Cache
    from .devicestate import DeviceState

    if vault._cache is not None:
        vault._cache.discard()
    vault._cache = Cache(vault.local.cache_path(new.writer_id), new.signer.seed, vault.vault_id)
    vault._cache_dirty = True
    vault._open_state_store()
    vault.device_state = DeviceState(generation=vault._generation,
                                     manifests=sorted({*erasure_manifests(vault), *seen_manifests}))
    assert vault._state_store is not None
    vault._state_store.save(vault.device_state)
    return old


def unbecome(vault: Vault, old: Credential, new: Credential) -> None:
    """Undo :func:`become` when the new key's first batches could not be written at all (the disk is
    full): this installation writes as ``old`` again, whose device state is still on disk, and the new
    key, which nothing certifies, is forgotten.  Best effort: if this fails too, the next open
    registers the installation anew."""
    from .cache import Cache

    try:
        inst = vault.local.load_installation()
        keystore = inst.keystore if inst else "local"
        if keystore == "keychain":
            keychain.delete(vault.vault_id, new.writer_id)
        else:
            import os

            try:
                os.unlink(vault.local.device_key_path)
            except FileNotFoundError:
                pass
            vault._save_local_device_key(old)
        vault.local.save_installation(Installation(old.writer_id, keystore, int(time.time())))
    except VaultError:
        pass
    vault.actor = old
    if vault._cache is not None:
        vault._cache.discard()
    vault._cache = Cache(vault.local.cache_path(old.writer_id), old.signer.seed, vault.vault_id)
    vault._cache_dirty = True
    vault._open_state_store()


def erasure_manifests(vault: Vault) -> list[bytes]:
    """The erasures a key made now has nothing to fear from (it never opened what they destroyed)."""
    return sorted(m.record_id for m in vault.roster.manifests.values() if m.kind == Kind.ERASURE_MANIFEST)


def rotate_if_erasure_seen(vault: Vault) -> bool:
    """A device certified before an erasure replaces its key when it next opens the vault: its old
    key could open the pre-erasure copies (sync history, backups) through its old slot, so it must
    stop existing.  Returns True when it rotated."""
    actor = vault.actor
    if actor is None or actor.kind != CredentialKind.DEVICE:
        return False
    me = vault.roster.principals.get(actor.writer_id)
    seen = set(vault.device_state.manifests)
    unseen = [m for m in vault.roster.manifests.values() if m.kind == Kind.ERASURE_MANIFEST and m.record_id not in seen]
    if me is None or not unseen:
        return False
    new = Credential.generate(CredentialKind.DEVICE)
    records = rotation_records(vault, actor, new)
    old_slots = []
    assert vault._vms is not None
    for h in vault._slot_headers()[0]:
        if h.type == slots.SlotType.DEVICE:
            try:
                st = slots.read_statement(h, vault.vault_id, vault._vms.get())
            except Exception:  # noqa: S112 - a slot we cannot read is not ours to delete
                continue
            if st.recipient_id == actor.recipient_id:
                old_slots.append(h.name)
    # The slots that count only through the old key's signature (it rolled the keyring last, enrolled
    # a device, changed the passphrase) are re-issued under the new key before the old one retires.
    again, originals = reissue_slots(vault, actor.writer_id, new)
    sid = ids.new_random_id()
    files = [(slots.file_name(sid), slots.build_slot(
        vault_id=vault.vault_id, slot_id=sid, slot_type=slots.SlotType.DEVICE, generation=vault._generation,
        vms=vault._vms.get(), recipient_public=new.recipient.public, recipient_id=new.recipient_id, kdf=None,
        label=me.name, signer=new.signer, signer_id=new.writer_id)), *again]
    with vault._unannounced_files(ids.record_id(records[0]), [n for n, _ in files]):
        old = become(vault, new)
        try:
            written = write_files(vault, files)
        except VaultError:
            unbecome(vault, old, new)
            raise

        def undo() -> None:  # nothing announces the new key: this installation keeps the old one
            vault._delete_quietly(reversed(written))
            unbecome(vault, old, new)

        vault._write_batches({c: list(records) for c in [vault.roster.control_id, *vault.roster.compartments]},
                             undo=undo)
    for name in [*old_slots, *originals]:
        vault.shelf.delete(name)
    forget_old_key(vault, old)
    vault._unlocking = new if vault._unlocking is old else vault._unlocking
    return True


def forget_old_key(vault: Vault, old: Credential) -> None:
    inst = vault.local.load_installation()
    if inst is not None and inst.keystore == "keychain":
        keychain.delete(vault.vault_id, old.writer_id)


def _slot_for(vault: Vault, rekey: Rekey, cred: Credential, label: str) -> None:
    assert rekey.new_vms is not None and rekey.new_generation is not None
    sid = ids.new_random_id()
    actor = vault.actor
    assert actor is not None
    rekey.files.append((slots.file_name(sid), slots.build_slot(
        vault_id=vault.vault_id, slot_id=sid, slot_type=slots.SlotType.DEVICE, generation=rekey.new_generation,
        vms=rekey.new_vms, recipient_public=cred.recipient.public, recipient_id=cred.recipient_id, kdf=None,
        label=label, signer=actor.signer, signer_id=actor.writer_id,
    )))


def finish_pending_erasures(vault: Vault) -> int:
    """Delete old segments that a signed ERASURE_MANIFEST replaced but that are still here (an erasure
    interrupted after its manifest was written).  Returns how many were deleted."""
    by_id = {bytes.fromhex(n.rsplit("/", 1)[1][:64]): n for n in vault._segment_batches}
    deleted = 0
    for m in vault.roster.manifests.values():
        if m.kind != Kind.ERASURE_MANIFEST or not all(a in by_id for a in m.added):
            continue
        for seg in m.removed:
            name = by_id.get(seg)
            if name is not None:
                vault.shelf.delete(name)
                deleted += 1
    if deleted:
        vault._refresh()
    return deleted


def erase(vault: Vault, record_ids: list[bytes], *, reauth: Unlock | None = None) -> ReachReport:
    vault._require_owner("erasing")
    vault._require_writer()
    require_erasure_allowed(vault)
    cred = authenticate(vault, reauth)
    vault._finish_unannounced()  # an earlier run a crash stopped before its records: its files go
    finish_pending_erasures(vault)
    r = vault.roster
    views = []
    for rid in record_ids:
        row = vault.state.db.execute("SELECT batch, compartment FROM records WHERE id = ?", (rid,)).fetchone()
        if row is None:
            raise UsageError(f"no record {rid.hex()[:12]} in this vault")
        views.append((rid, row[0], row[1]))
    cids = {c for _, _, c in views}
    if len(cids) != 1:
        raise UsageError("erase records of one compartment at a time")
    cid = cids.pop()
    if cid == r.control_id:
        raise UsageError("control records cannot be erased")
    target_batches = {b for _, b, _ in views}
    affected = {vault._segment_epochs[name][1] for name, bids in vault._segment_batches.items()
                if vault._segment_epochs.get(name, (None,))[0] == cid and target_batches & set(bids)}
    if not affected:
        raise UsageError("the records to erase are not in any readable segment here (already erased?)")
    already = {rid for rid, in vault.state.db.execute(
        f"SELECT id FROM records WHERE erased = 1 AND id IN ({','.join('?' * len(record_ids))})", record_ids)}
    if already == set(record_ids):
        raise UsageError("these records are already erased")
    old_segments = sorted(name for name, (c, e) in vault._segment_epochs.items() if c == cid and e in affected)
    targets = set(record_ids)

    # The erasing device rotates its key: the new key signs every new key file.
    old_actor = vault.actor
    assert old_actor is not None
    new_dev = Credential.generate(CredentialKind.DEVICE)
    rotation = rotation_records(vault, old_actor, new_dev)
    vault.actor = new_dev
    try:
        rekey = Rekey(vault)
        roll_keyring(vault, rekey, exclude={old_actor.writer_id}, destroyed={(cid, e) for e in affected})
        owner = keys.owner_kem(rekey.new_vms, vault.vault_id, rekey.new_generation)
        eid = new_epoch(vault, rekey, cid, "erasure", exclude=set(), owner=owner)
        secret = rekey.new_secrets[(cid, eid)]
        rekey.files.append(_envelope(vault, EnvelopeKind.EPOCH_SECRET, cid, eid, owner.public, secret))
        current = r.current_epoch(cid)
        for g in _active_grants(vault, set()):
            rekey.files += grant_envelopes(vault, g, cid, eid, secret, current.epoch_id if current else None)
        _slot_for(vault, rekey, new_dev, r.principals[old_actor.writer_id].name)
    finally:
        vault.actor = old_actor
    epk = keys.epoch_key(secret, vault.vault_id, cid, eid).public

    # Re-encrypt the affected epochs' batches without the erased records.
    seen: dict[bytes, Batch] = {}
    for name in old_segments:
        for b in _batches_of_segment(vault, name):
            records = tuple(None if rid in targets else raw for rid, raw in zip(b.header.records, b.records))
            prior = seen.get(b.id)
            if prior is not None:  # the same batch in two segments (before compaction pruned one)
                records = tuple(None if x is None or y is None else x for x, y in zip(prior.records, records))
            seen[b.id] = Batch(b.id, b.header_bytes, b.header, b.sigs, records)
    new_segments = reseal(vault, cid, eid, epk, list(seen.values()))

    erase_record = encode_record(Kind.ERASE, cred.writer_id,
                                 body={0: cid, 1: sorted(targets), 2: sorted(affected)},
                                 signers=[cred.signer, old_actor.signer])
    manifest = encode_record(
        Kind.ERASURE_MANIFEST, cred.writer_id,
        body={0: cid, 1: sorted(bytes.fromhex(n.rsplit("/", 1)[1][:64]) for n in old_segments),
              2: sorted(bytes.fromhex(n.rsplit("/", 1)[1][:64]) for n, _, _ in new_segments),
              3: sorted(seen)},
        signers=[cred.signer, old_actor.signer],
    )
    # 1. new key files and the re-encrypted segments (all deleted again if one cannot be written),
    #    their names noted first in the local state: if a crash comes before the control batch that
    #    announces them, the next open deletes them (the new epoch's key would otherwise be lost
    #    with them, leaving them unreadable for good);
    new_files = [*rekey.files, *((name, data) for name, data, _ in new_segments)]
    with vault._unannounced_files(ids.record_id(manifest), [n for n, _ in new_files]):
        written = write_files(vault, new_files)
        # 2. this installation becomes the new device, whose first batches carry its certificate and
        #    the old key's retirement: the control compartment first, so that the erased compartment's
        #    own batch is sealed under the new epoch the control batch announces;
        # (the new key knows this erasure from the start: a crash before the state below is saved must
        # not make it rotate again on the next open and retire the key that signed the new slots)
        become(vault, new_dev, seen_manifests=(ids.record_id(manifest),))
        assert rekey.new_vms is not None and rekey.new_generation is not None
        vault._seal_device_key_for(rekey.new_vms, rekey.new_generation)  # before the records: crash safety
        per = {c: list(rotation) for c in [r.control_id, *r.compartments]}
        for c, raws in rekey.records.items():
            per.setdefault(c, []).extend(raws)
        per[r.control_id] = [*per[r.control_id], erase_record, manifest]

        def undo() -> None:  # the control batch could not be written at all: leave the vault as it was
            vault._delete_quietly(reversed(written))
            unbecome(vault, old_actor, new_dev)

        vault._write_batches({r.control_id: per.pop(r.control_id)}, undo=undo)
    per[cid] = [*per[cid], erase_record, manifest]
    try:
        vault._write_batches(per)
    except VaultError as exc:  # the erasure is announced: it cannot be undone, only completed
        raise type(exc)(f"the erasure was interrupted after its control records were written "
                        f"({exc.message.split(';')[0]}); free some space (or make the folder writable) and erase "
                        "again to complete it", file=exc.file) from None
    assert vault._state_store is not None
    with vault._state_store.locked():  # this device's new key never held the destroyed keys
        ds = vault._state_store.load() or vault.device_state
        ds.manifests = erasure_manifests(vault)
        vault._state_store.save(ds)
        vault.device_state = ds
    # 3. switch to the new master secret, delete old slots and envelopes, then the old segments.
    rekey.records, rekey.files = {}, []
    apply(vault, rekey)
    forget_old_key(vault, old_actor)
    deleted = 0
    for name in old_segments:
        vault.shelf.delete(name)
        deleted += 1
    vault._reset_after_erasure()
    return ReachReport(
        records=[t.hex() for t in sorted(targets)], compartment=r.compartment_name(cid),
        epochs_destroyed=[e.hex() for e in sorted(affected)], batches_reencrypted=len(seen),
        segments_deleted=deleted, segments_written=len(new_segments), key_files_deleted=len(rekey.delete),
        generation=vault._generation, exposed=_exposed(vault, cid, {new_dev.writer_id}),
    )


def reissue_recovery(vault: Vault, *, reauth: Unlock | None = None) -> str:
    """A new recovery phrase replaces the old one (new slot, anchor; the old one is revoked)."""
    from .credentials import from_recovery_phrase
    from .primitives import new_recovery_phrase

    vault._require_owner("re-issuing the recovery phrase")
    actor = vault._require_writer()
    cred = authenticate(vault, reauth)
    phrase = new_recovery_phrase()
    new = from_recovery_phrase(phrase)
    old = [p for p in vault.roster.principals.values()
           if p.kind == CredentialKind.RECOVERY and p.writer_id not in vault.roster.revocations]
    records = [encode_record(
        Kind.CRED_ANCHOR, new.writer_id,
        body={0: owner_entry(CredentialKind.RECOVERY, new.signer.public, new.recipient.public, "recovery phrase", ""),
              1: old[0].writer_id if old else None, 3: proof_of_possession(vault.vault_id, new)},
        signers=[new.signer, cred.signer, actor.signer],
    )]
    signer = new if cred.kind == CredentialKind.RECOVERY else cred
    for p in old:
        records.append(vault._revoke_record(p.writer_id, "recovery phrase re-issued", signers=[signer.signer, actor.signer]))
    old_slots = [h.name for h in vault._slot_headers()[0] if h.type == slots.SlotType.RECOVERY]
    slot = vault._write_slot(new, slots.SlotType.RECOVERY, "recovery phrase")
    vault._write_batches({c: records for c in [vault.roster.control_id, *vault.roster.compartments]},
                         undo=lambda: vault._delete_quietly([slot]))
    for name in old_slots:
        vault.shelf.delete(name)
    return phrase


_ = USER_KINDS
