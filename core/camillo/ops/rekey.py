"""New epochs and the keyring: the two mechanisms behind every change of who can read (spec §15, §16).

* **new epochs**: a fresh epoch secret for a compartment, announced by a signed EPOCH record and
  delivered in envelopes to the owner KEM key and to the grants that may still read (the epoch
  public key to appenders).  Revoking anything that could read a compartment starts a new epoch
  there, so what is written afterwards is sealed to keys the revoked party never had;
* **rolling the keyring**: when the vault master secret rolls (a user credential is revoked, or
  erasure), every surviving epoch secret is wrapped again to the new owner KEM key and to the
  grants (a random roll also those another master secret of the same generation delivered, spec
  §16.10 rule 9), every user credential gets a new slot, and every other slot and envelope is deleted.
  New files are written before control records, and old files are deleted last, so a crash at any
  point leaves a vault that opens; running the operation again completes it.

Also here: the slots a retiring owner key leaves behind (:func:`reissue_slots`), the scheduled
epochs (30 days or 1000 batches), and the proof that a new credential holds its keys.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .. import envelopes, ids, keys, slots
from ..control import Level, Principal, pop_message
from ..credentials import Credential, CredentialKind
from ..errors import VaultError
from ..passes import rows_in
from ..primitives import (
    CryptoFailure,
    KdfParams,
    RecipientKey,
    constant_time_equal,
    random_bytes,
    verify_signature,
)
from ..records import BatchHeader, Kind, decode_record, encode_record
from ..session import Session
from ..session.installation import HandedOn, after_generation_roll, handed_on, seal_device_key_for, seal_key
from ..session.unlock import catch_up_generation, epochs_not_here
from ..session.writer import write_batches
from ..storage import FolderShelf
from .grant_trust import trust_files

SCHEDULED_EPOCH_SECONDS = 30 * 86400
SCHEDULED_EPOCH_BATCHES = 1000
USER_KINDS = (CredentialKind.DEVICE, CredentialKind.PASSPHRASE, CredentialKind.RECOVERY, CredentialKind.RECIPIENT)
SLOT_TYPE = {
    CredentialKind.DEVICE: slots.SlotType.DEVICE,
    CredentialKind.PASSPHRASE: slots.SlotType.PASSPHRASE,
    CredentialKind.RECOVERY: slots.SlotType.RECOVERY,
    CredentialKind.RECIPIENT: slots.SlotType.RECIPIENT,
}
FileList = list[tuple[str, bytes]]


@dataclass
class Rekey:
    """The files and records of one access change, applied in a crash-safe order by :func:`apply`."""

    session: Session
    records: dict[bytes, list[bytes]] = field(default_factory=dict)  # compartment -> control records
    files: FileList = field(default_factory=list)  # new envelopes and slots
    delete: list[str] = field(default_factory=list)
    new_secrets: dict[tuple[bytes, bytes], bytes] = field(default_factory=dict, repr=False)
    new_vms: bytes | None = field(default=None, repr=False)
    new_generation: int | None = None
    excluded: set[bytes] = field(default_factory=set)  # grants and credentials this change leaves out
    device_key_sealed: bool = False  # this device's key is sealed under new_vms already (seal_device_key_for)

    def add_records(self, compartments: list[bytes], *raws: bytes) -> None:
        for c in compartments:
            self.records.setdefault(c, []).extend(raws)

    def new_owner_kem(self) -> RecipientKey:
        """The owner KEM key of the rolled master secret."""
        if self.new_vms is None or self.new_generation is None:
            raise AssertionError("the keyring was not rolled")
        return keys.owner_kem(self.new_vms, self.session.vault_id, self.new_generation)


def newest_view(session: Session) -> None:
    """A key change builds on the newest view of the vault: another device's roll first, then every
    file the folder (or the store) holds now.  A REVOKE rejects what the revoked credential signed
    outside its author's frontier (spec §14.6), so a change made on a stale view would also reject what
    this device had merely not read yet: a device that the old passphrase registered a moment before a
    passphrase change would lose its registration and every write it made."""
    catch_up_generation(session)
    session.refresh()


def active_grants(session: Session, exclude: set[bytes]) -> list[Principal]:
    r = session.roster
    return [p for p in r.grants() if p.writer_id not in r.revocations and p.writer_id not in exclude]


def envelope(session: Session, kind: envelopes.EnvelopeKind, cid: bytes, eid: bytes, public: bytes, key: bytes,
             prev: bytes | None = None) -> tuple[str, bytes]:
    actor = session.require_writer()
    data = envelopes.build_envelope(
        vault_id=session.vault_id, kind=kind, compartment_id=cid, epoch_id=eid, recipient_public=public,
        recipient_id=ids.recipient_id(public), key=key, signer=actor.signer, signer_id=actor.writer_id,
        prev_epoch=prev,
    )
    return envelopes.file_name(data), data


def grant_envelopes(session: Session, grant: Principal, cid: bytes, eid: bytes, secret: bytes,
                    prev: bytes | None = None, *, current: bool = True) -> FileList:
    """Envelopes giving a grant its key for one epoch: the secret for read and write grants, the
    public key (current epoch only) for append grants."""
    if grant.grant is None:
        raise AssertionError("not a grant")
    level = grant.grant.scopes.get(cid)
    if level in (Level.READ, Level.WRITE):
        return [envelope(session, envelopes.EnvelopeKind.EPOCH_SECRET, cid, eid, grant.recipient_public, secret)]
    if level == Level.APPEND and current:
        epk = keys.epoch_key(secret, session.vault_id, cid, eid).public
        return [envelope(session, envelopes.EnvelopeKind.EPOCH_PUBLIC, cid, eid, grant.recipient_public, epk, prev)]
    return []


def new_epoch(session: Session, rekey: Rekey, cid: bytes, reason: str, *, exclude: set[bytes],
              owner: RecipientKey | None = None) -> bytes:
    """Start a new epoch in ``cid``: EPOCH record (control + cid) and envelopes to the owner KEM key
    and the remaining grants.  Returns the new epoch id."""
    actor = session.require_writer()
    roster = session.roster
    current = roster.current_epoch(cid)
    secret = random_bytes(32)
    eid = ids.new_random_id()
    epk = keys.epoch_key(secret, session.vault_id, cid, eid).public
    record = encode_record(
        Kind.EPOCH, actor.writer_id,
        body={0: cid, 1: eid, 2: current.epoch_id if current else None, 3: reason, 4: epk,
              5: keys.epoch_commit(secret, session.vault_id, cid, eid),
              # the generation whose owner key receives the secret: a roll's own epochs name the new one,
              # so a reader knows when it has read the roll (spec §14.5, §16.10 rule 8)
              6: rekey.new_generation if rekey.new_generation is not None else session.keyring.generation},
        signers=[actor.signer],
    )
    control = roster.control_id
    if control is None:
        raise AssertionError("no control compartment")
    rekey.add_records([control, cid] if cid != control else [cid], record)
    rekey.new_secrets[(cid, eid)] = secret
    owner_key = owner or session.keyring.owner_kem
    if owner_key is None:
        raise AssertionError("no owner KEM key")
    if rekey.new_vms is None:  # a rolled keyring wraps every secret itself
        rekey.files.append(envelope(session, envelopes.EnvelopeKind.EPOCH_SECRET, cid, eid, owner_key.public, secret))
        prev = current.epoch_id if current else None
        for g in active_grants(session, exclude):
            rekey.files += grant_envelopes(session, g, cid, eid, secret, prev)
    return eid


def anchor_kdf(p: Principal) -> KdfParams | None:
    """A passphrase's slot parameters as its CRED_ANCHOR gives them (body key 2, spec §14.3): None when it has
    none, or they are malformed or outside what a reader derives."""
    if p.anchor_kdf is None:
        return None
    kdf = KdfParams(*p.anchor_kdf)
    try:
        kdf.check_reader_bounds()
    except VaultError:
        return None
    return kdf


SLOT_KDF_CHOICES = 4  # a passphrase's unproven slot parameters a roll keeps, at most (a slot for each)


def trusted_kdf(session: Session, p: Principal) -> KdfParams | None:
    """Passphrase ``p``'s Argon2id parameters when they are known to be right: those this session derived its
    key with (its unlock or a re-authentication: the derived key is the principal's), else those of its
    CRED_ANCHOR (signed by its key).  None for a passphrase set when the vault was made (no anchor) that this
    session did not type."""
    unlocking = session.unlocking
    if (unlocking is not None and unlocking.writer_id == p.writer_id and unlocking.kdf is not None
            and session.roster.active_owner(p.writer_id)):
        return unlocking.kdf
    return session.proven_kdf.get(p.recipient_id) or anchor_kdf(p)


def passphrase_kdfs(session: Session, p: Principal, branches: list[tuple[bytes, RecipientKey]],
                    headers: list[slots.SlotHeader]) -> list[KdfParams]:
    """The Argon2id parameters a roll issues passphrase ``p``'s new slots with (spec §16.6 step 3): the trusted
    ones (:func:`trusted_kdf`), else every distinct set that a passphrase slot of it at the current generation
    carries, of this master secret or of another one of this generation (rule 9), at most
    :data:`SLOT_KDF_CHOICES`, one slot each.  A slot's parameters are what its writer chose: a compromised owner
    device can write a slot for the passphrase with parameters of its own, and a roll that took one slot's
    would make it the passphrase's only one (found by two reviews); keeping each, the right one survives.
    Empty when there is none (a passphrase whose slot is gone)."""
    if (kdf := trusted_kdf(session, p)) is not None:
        return [kdf]
    found: list[KdfParams] = []
    for h, st in sorted(session.current_slots(), key=lambda x: x[0].name):
        if h.type == slots.SlotType.PASSPHRASE and h.kdf is not None and st.recipient_id == p.recipient_id:
            found.append(h.kdf)
    for vms, _ in branches:  # a passphrase another roll of this generation issued keeps a slot too
        for h in sorted(headers, key=lambda h: h.name):
            if h.generation == session.keyring.generation and h.type == slots.SlotType.PASSPHRASE and h.kdf:
                try:
                    named = slots.read_statement(h, session.vault_id, vms).recipient_id
                except VaultError:
                    continue
                if named == p.recipient_id:  # (recipient ids are public)
                    found.append(h.kdf)
    return list(dict.fromkeys(found))[:SLOT_KDF_CHOICES]


def roll_keyring(session: Session, rekey: Rekey, *, exclude: set[bytes],
                 destroyed: set[tuple[bytes, bytes]] | frozenset[tuple[bytes, bytes]] = frozenset(),
                 derived: bool = False, join: bool = False, hand_over: bool = True,
                 issuable: Callable[[Principal], bool] | None = None) -> None:
    """Roll the master secret: new slots for every remaining user credential, every surviving epoch
    secret wrapped to the new owner KEM key and the remaining grants; the older slots and the
    envelopes of the old keyring are deleted after the new ones exist.

    ``derived`` (an erasure, spec §16.4): the next master secret is derived from the current one, so
    that two devices erasing concurrently from one generation roll to the same one.  Otherwise (a
    revocation) it is random: the revoked credential must not be able to compute it.  ``join``: the
    next master secret is derived from the current one and every other one of this generation this
    device opens (spec §16.10 rule 9), so that devices joining them at once arrive at one.
    ``hand_over`` False: no envelope of kind 5 (spec §16.6 step 5), as for a derived roll: the current
    keyring delivered an epoch an applied ERASE destroyed (a roll made before its device read a
    concurrent erasure), so neither it nor what it was handed may follow.  ``issuable``: who may get a
    slot (:func:`may_gain`), judged before the caller swapped this session's key (an erasure's rotation:
    the new key has no slot of the current generation to find the roll by, found by review)."""
    keyring, r = session.keyring, session.roster
    rekey.excluded |= exclude
    headers = session.slot_headers()[0]
    branches = [] if derived else other_branches(session, headers)
    if derived:
        generation = keyring.generation + 1
        new_vms = keys.next_master(keyring.master_secret(), session.vault_id, generation)
    elif join:
        generation = keyring.generation + 1
        new_vms = keys.join_master([keyring.master_secret(), *(v for v, _ in branches)], session.vault_id, generation)
    else:
        generation = max(keyring.generation, max((h.generation for h in headers), default=0)) + 1
        new_vms = random_bytes(32)
    owner = keys.owner_kem(new_vms, session.vault_id, generation)
    rekey.new_vms, rekey.new_generation = new_vms, generation
    erased = r.destroyed_epochs()  # never wrapped again
    # A roll that is not derived (random, or a join) also takes what another master secret of this
    # generation delivered (spec §16.10 rule 9); a derived one must not: whoever held the older master
    # secret can compute it, a credential the other roll revoked included, and would read what only the
    # other roll delivered.
    delivered = [other_branch_secrets(session, [o]) for _, o in branches]  # what each other master secret delivers
    held = {k: v for per in delivered for k, v in per.items()}
    held.update(keyring.secrets())
    secrets = {k: s for k, s in held.items() if k not in destroyed and k not in erased}
    secrets.update(rekey.new_secrets)
    grants = active_grants(session, exclude)
    for (cid, eid), secret in sorted(secrets.items()):
        rekey.files.append(envelope(session, envelopes.EnvelopeKind.EPOCH_SECRET, cid, eid, owner.public, secret))
        info = r.epochs.get((cid, eid))
        current = r.current_epoch(cid)
        is_current = (current is not None and current.epoch_id == eid
                      and not any(c == cid for c, _ in rekey.new_secrets))
        for g in grants:
            rekey.files += grant_envelopes(session, g, cid, eid, secret, info.prev if info else None,
                                           current=is_current)
    handed = handed_on(session)
    if not derived and hand_over and not session.reader.destroyed_delivered:  # hand on those before it (§16.6)
        rekey.files.append(previous_masters_envelope(session, owner.public, branches, handed, join=join))
    sealed = previous_seal_keys_envelope(session, owner.public, branches, handed, rekey.excluded)
    if sealed is not None:
        rekey.files.append(sealed)
    if issuable is None:
        issuable = may_gain(session, headers, [keyring.master_secret(), *(v for v, _ in branches)])
    withheld = False
    for p in r.principals.values():
        if p.kind not in USER_KINDS or p.writer_id in r.revocations or p.writer_id in exclude:
            continue
        if not issuable(p):  # (spec §16.6 step 3: it may be one a roll not read here revoked)
            withheld = True
            continue
        kdfs: list[KdfParams | None] = [None]
        if p.kind == CredentialKind.PASSPHRASE and not (kdfs := [*passphrase_kdfs(session, p, branches, headers)]):
            continue  # an old passphrase whose slot is gone: nothing to re-issue
        rekey.files += [session.build_slot(p.recipient_public, SLOT_TYPE[p.kind], p.name, kdf=kdf, generation=generation,
                                           vms=new_vms) for kdf in kdfs]
    # Deleted after the new files exist: the slots of older generations, and the envelopes found now
    # that are not addressed to the new owner key (a concurrent derived roll's are; they stay).
    new_names = {n for n, _ in rekey.files}
    new_owner = ids.recipient_id(owner.public)
    unread = {ids.recipient_id(o.public) for (_, o), per in zip(branches, delivered) if not roll_read(session, per)}
    if derived or not (unread or epochs_not_here(session) - held.keys()):
        kept = set() if derived else other_rolls_slots(session, headers, [v for v, _ in branches])
        if withheld and not derived:  # a passphrase that counts keeps the slot it opens with (rule 10 issues it one)
            kept |= {h.name for h in headers if h.type in (slots.SlotType.PASSPHRASE, slots.SlotType.RECOVERY)}
        rekey.delete += [h.name for h in headers if h.generation < generation and h.name not in kept]
    # else the older slots stay (spec §16.10 rule 10): a device that holds what this keyring lacks (the sync
    # has not brought its envelopes) hands it over once it opens the older master secret and moves on; an
    # erasure's derived roll always deletes them (the older master secret delivers what it destroys)
    shelf = session.shelf
    listed = shelf.files_in("env") if isinstance(shelf, FolderShelf) else shelf.list()  # not every segment's name
    for name in sorted(listed):
        if name.startswith("env/") and name not in new_names:
            try:
                data = session.shelf.read(name)
            except (FileNotFoundError, VaultError):
                continue
            if not envelopes.is_for(data, new_owner) and not any(envelopes.is_for(data, o) for o in unread):
                rekey.delete.append(name)  # (an unread other roll's stay, with the older slots)


def may_gain(session: Session, headers: list[slots.SlotHeader], masters: list[bytes]) -> Callable[[Principal], bool]:
    """Which user credentials that this roster counts may be given a slot of a master secret newer than the
    current one, by a roll or a re-issue (spec §16.6 step 3, §16.10 rule 10): those that hold the current
    one (:func:`slot_holders`; ``masters``: this keyring's master secret and the other ones of this
    generation this device opens), and those that the roll which made the current generation had not seen
    registered (:func:`unseen_by_roll`): set concurrently with it, it could not give them a slot.  Not one
    that roll had seen and left out: it revoked it, and the slots of a roll can arrive before its records, so
    this roster may count it still (found by review: a phone that received a passphrase change's key files
    but not its records, opened with the old passphrase and revoking a lost device, gave the old passphrase a
    slot of its roll's master secret, which every later write is under)."""
    # Once the roll that made this generation is read whole, this device (rolling with it) holds the master secret,
    # its own slot here or not, and so does every owner device that signed a slot of it.  Not before: a device whose
    # revocation has not arrived, its key copied by a thief, would give itself a slot (found by review).
    read = roll_read_whole(session)
    holders = slot_holders(session, headers, masters, signers=read) | (
        {session.actor.recipient_id} if read and session.actor is not None else set())
    unseen = unseen_by_roll(session)
    return lambda p: p.recipient_id in holders or p.writer_id in unseen


def unseen_by_roll(session: Session) -> set[bytes]:
    """The writer ids of the principals whose registering record the roll that made the current generation
    had not seen (:func:`roll_batches`): its control batch does not cover, by its seq or its frontier
    (§17.2), the control batch carrying the record, or is that batch (the roll registered it: a passphrase
    change's new passphrase, which a sync can bring without its slot, found by review).  A certificate or
    anchor is in the control batch of the write that made it, as in every other compartment's; the copy
    judged is that one, whatever copy this reader kept first (a host picks the order, and a control batch's
    ``heads`` cannot cover the data batches of its own write: found by review), looked for in every control
    chain here (the row the records table kept may be a mirror's, found by review).  A credential whose
    control copy is not here, only its other copies, counts as unseen when every control batch the roll had
    seen is here (:func:`_saw_only_what_is_here`: none of them carries it).  A roll that had not read the
    roll of the generation before it (made where only that roll's slots had arrived) left out whom it could
    not judge: with no gap in the log, those that earlier roll had not seen count too, and so on down,
    one generation at a time, while each roll is here and had not read the one before.  Empty when the
    roll's batch is not here (its slots came before its records, or the generation is the first)."""
    r = session.roster
    made = {p.record_id: p.writer_id for p in r.principals.values() if p.kind in USER_KINDS}
    rolls = roll_batches(session) if made else []
    if not rolls:
        return set()
    copies = _control_copies(session, made)
    elsewhere = _copied_elsewhere(session, made.keys() - copies.keys())  # (not the genesis: every roll saw it)
    unseen: set[bytes] = set()
    generation, gaps = session.keyring.generation, bool(session.reader.log_facts().gaps)
    while rolls:
        unseen |= {made[rid] for rid, h in copies.items() if not any(_covers(roll, h, itself=False) for roll in rolls)}
        if elsewhere and all(_saw_only_what_is_here(session, roll) for roll in rolls):
            unseen |= {made[rid] for rid in elsewhere}
        generation -= 1  # (the generation just before, never one further down: found by review)
        earlier = _rolls_at(session, generation)
        if gaps or not earlier or any(_covers(roll, e) for roll in rolls for e in earlier):
            break
        rolls = earlier
    return unseen


def _copied_elsewhere(session: Session, rids: set[bytes]) -> set[bytes]:
    """Those of ``rids`` (records with no control copy here) that have a copy here in another compartment's
    batch (the same write's: a sync brought it first)."""
    return {rid for (rid,) in rows_in(session.materialized.db, "SELECT DISTINCT id FROM records WHERE id IN ({})", rids)}


def _saw_only_what_is_here(session: Session, roll: BatchHeader) -> bool:
    """Whether every control batch that control batch ``roll`` had seen (its own chain to it, and each other
    chain to its frontier) is here: then a record in none of them is one the roll had not seen, though its
    own control copy has not arrived (found by the key-change hunt: a passphrase change whose data copies
    had arrived before its control batch was withheld by a roll that could not have seen it, and its laptop
    refused every passphrase)."""
    log, control = session.reader.log_facts(), session.roster.control_id
    assert control is not None
    seen = {**roll.frontier, roll.writer_id: roll.seq}
    return all((bid := log.batch_at((w, control), seq)) is not None and bid in session.batches
               for w, top in seen.items() for seq in range(1, top + 1))


def revoked_holds(session: Session) -> bool:
    """Whether a user credential this roster holds revoked may hold the current master secret: none of its
    REVOKEs (not a device key's retirement or re-certification by the key that replaces it; a REVOKE whose
    control batch is not found here is not judged) covers or is covered by any control batch of a roll that
    made the current generation (:func:`_rolls_at`), and this device's own roll of it is here
    (:func:`roll_batches`).  Such a roll, made on a view cut off from the revocation,
    gave it a slot whether this device sees that slot or not (a host can hold the slot back), and may have
    outnumbered the revocation's own roll, onto which this device then moved through its own slot (found by
    review).  The keys are then rolled again, randomly, before anything is handed to that owner key or
    written under it (spec §16.10 rule 9 (c))."""
    r = session.roster
    replaced = {p.replaces for p in r.principals.values() if p.replaces is not None and p.kind == CredentialKind.DEVICE}
    revoked = {rev.record_id: w for w, rev in r.revocations.items() if w not in replaced
               and (p := r.principals.get(w)) is not None and p.kind in USER_KINDS}
    if not revoked or not roll_batches(session):
        return False
    rolls = _rolls_at(session, session.keyring.generation)
    revokes = _revokes_of(session, set(revoked.values()))  # (every REVOKE of each: the roster keeps one)
    copies = _control_copies(session, revokes)
    unplaced = {revokes[rid] for rid in revokes.keys() - copies.keys()}  # (not judged: no control batch found)
    return any(not any(_covers(roll, h) or _covers(h, roll) for roll in rolls
                       for rid, h in copies.items() if revokes[rid] == subject)
               for subject in set(revoked.values()) - unplaced)


# The REVOKE records, read from the index of the control records (cache.SCHEMA's records_control, whose
# condition the query repeats so that SQLite uses it), not by a pass over every record.
REVOKES_QUERY = "SELECT id, raw FROM records WHERE kind >= 16 AND kind = ?"


def _revokes_of(session: Session, subjects: set[bytes]) -> dict[bytes, bytes]:
    """Every REVOKE record naming one of ``subjects``: its id, and the subject.  Two passphrase changes made at
    once each revoke the passphrase both replaced, and a roll that made one of them knew it was revoked though
    the REVOKE the roster keeps is the other one's (found by the key-change hunt)."""
    out = {}
    for rid, raw in session.materialized.db.execute(REVOKES_QUERY, (int(Kind.REVOKE),)):
        if raw is not None and (subject := decode_record(raw).body.get(0)) in subjects:
            out[rid] = subject
    return out


def _roll_records(session: Session, generation: int, *, held: bool) -> set[bytes]:
    """The EPOCH records that name ``generation`` and follow an epoch of an older one (a roll's own epochs);
    ``held``: only those whose secret this keyring holds."""
    r = session.roster
    return {info.record_id for ref, info in r.epochs.items()
            if info.generation == generation and (not held or ref in session.keyring.epoch_secrets)
            and info.prev is not None and (before := r.epochs.get((ref[0], info.prev))) is not None
            and before.generation < generation}


def _rolls_at(session: Session, generation: int) -> list[BatchHeader]:
    """The control batches of every roll to ``generation`` that is here, whoever wrote it."""
    named = _roll_records(session, generation, held=False) if generation > 0 else set()
    return list({(h.writer_id, h.seq): h for h in _control_copies(session, named).values()}.values())


def roll_batches(session: Session) -> list[BatchHeader]:
    """The control batches of the roll that made the current generation: those carrying an EPOCH record
    that names the generation and follows an epoch of an older one, whose secret this keyring holds, written
    by a signer of this device's own slot of the generation, this device included.  Empty when none is here
    (the roll's slots came before its records, or the generation is the first)."""
    actor = session.actor
    if actor is None or session.roster.control_id is None:
        return []
    rollers = {w for _h, st in session.current_slots(ask_store=False) if st.recipient_id == actor.recipient_id
               for w, *_ in st.signatures}
    named = _roll_records(session, session.keyring.generation, held=True)
    return list(_in_control(session, rollers, named).values()) if rollers and named else []


def _covers(later: BatchHeader, earlier: BatchHeader, *, itself: bool = True) -> bool:
    """Whether control batch ``later`` had seen control batch ``earlier`` (its seq, or its frontier,
    §17.2); ``itself`` False: not when they are the same batch."""
    if later.writer_id == earlier.writer_id:
        return later.seq >= earlier.seq if itself else later.seq > earlier.seq
    return later.frontier.get(earlier.writer_id, 0) >= earlier.seq


def _control_copies(session: Session, wanted: Iterable[bytes]) -> dict[bytes, BatchHeader]:
    """Of the records ``wanted`` (their ids), the control batch each is in."""
    if not (wanted := set(wanted)):
        return {}
    control = session.roster.control_id  # every control chain here: the row the records table kept may be
    # another writer's copy (a roster mirror, ops.compartments), whose chain does not hold the control copy
    writers = {w for (w, c), _top, _bid in session.reader.log_facts().tops_here() if c == control}
    return _in_control(session, writers, wanted)


def _in_control(session: Session, writers: Iterable[bytes], wanted: set[bytes]) -> dict[bytes, BatchHeader]:
    """Of the records ``wanted``, those in a control batch of one of ``writers``: each one's batch header
    (control chains are short: control records only)."""
    log, control = session.reader.log_facts(), session.roster.control_id
    found: dict[bytes, BatchHeader] = {}
    assert control is not None
    for w in writers:
        for seq in range(log.max_seq(w, control), 0, -1):
            if len(found) == len(wanted):
                return found
            view = session.batches.get(log.batch_at((w, control), seq) or b"")
            if view is not None:
                for rid in wanted.intersection(view.header.records):
                    found.setdefault(rid, view.header)
    return found


def slot_holders(session: Session, headers: list[slots.SlotHeader], masters: list[bytes], *,
                 signers: bool) -> set[bytes]:
    """The recipient ids that a slot of the current generation names whose statement opens under one of
    ``masters`` (this keyring's master secret, and the other ones of this generation this device opens),
    and (``signers``) those of the unrevoked owner devices whose signature such a statement carries: the credentials that
    hold the current master secret.  Opening proves the slot was written by a holder of that master secret
    (a host can withhold slots, never add one), and a signer wrote it.  The signers count because a device's
    own slot can be missing where its writes are not (found by the key-change hunt, about 1 run in 25: a
    partial sync brought the desktop another device's passphrase change without the desktop's own slot of it;
    the desktop then changed the passphrase, and its roll, then the laptop's roll after it, gave its key no
    slot; it was left at its own generation, reading nothing the laptop wrote after)."""
    holders: set[bytes] = set()
    roster = session.roster
    for h in headers:
        if h.generation != session.keyring.generation:
            continue
        for vms in masters:
            try:
                st = slots.read_statement(h, session.vault_id, vms)
            except VaultError:
                continue
            holders.add(st.recipient_id)
            for wid, alg, sig in st.signatures if signers else ():
                p = roster.principals.get(wid)
                if (p is not None and p.kind == CredentialKind.DEVICE and roster.active_owner(wid)
                        and verify_signature(alg, p.sig_public, st.message, sig)):
                    holders.add(p.recipient_id)
            break
    return holders


def other_rolls_slots(session: Session, headers: list[slots.SlotHeader], branches: list[bytes]) -> set[str]:
    """The slots of the current generation that wrap neither this keyring's master secret nor one of the
    other master secrets of this generation this device opens (``branches``): another device's roll made
    at once from the same generation, which this device has not read yet (spec §16.10 rule 9).  A random
    roll leaves them: one may be the only slot of the passphrase that counts (found by the key-change hunt:
    the laptop's passphrase change, made on a view that held the desktop's concurrent one's slots but not
    its records, deleted them, and once synced no passphrase opened the desktop).  None when an erasure made
    this generation (found by review): a random roll numbered like it was made without reading it (rule 9),
    so its master secret may deliver the epoch the erasure destroyed, and the recovery phrase, which that
    roll gave a slot, would reach it through the folder; those slots go, as before."""
    keyring = session.keyring
    if any(e.reason == "erasure" and e.generation == keyring.generation for e in session.roster.epochs.values()):
        return set()
    masters = [keyring.master_secret(), *branches]
    return {h.name for h in headers if h.generation == keyring.generation and not any(
        _opens_under(session, h, vms) for vms in masters)}


def _opens_under(session: Session, h: slots.SlotHeader, vms: bytes) -> bool:
    try:
        slots.read_statement(h, session.vault_id, vms)
    except VaultError:
        return False
    return True


def previous_masters_envelope(session: Session, owner_public: bytes, branches: list[tuple[bytes, RecipientKey]],
                              handed: HandedOn, *, join: bool = False) -> tuple[str, bytes]:
    """The envelope of kind 5 a random roll or a join addresses to its new owner key (spec §16.6): the
    current master secret (and every other one of this generation this device opens: a join's), then,
    for a random roll, those the current one was handed, back to the last roll that was derived: a device
    without an OS keychain, closed meanwhile, finds its key sealed under one of them, and with it what it
    kept to seal its own writes again (§16.10).  An erasure's derived roll writes none, and deletes the one
    before it: what an erasure destroyed must stay out of reach of the current credentials, and no master
    secret before an erasure's roll is handed on (the erasure's own derived one delivers nothing it
    destroyed).  A join hands on only the master secrets it joins: one of them may be an erasure's, and
    what came before that one must not follow."""
    keyring = session.keyring
    entries = [(keyring.generation, keyring.master_secret()), *((keyring.generation, vms) for vms, _ in branches),
               *([] if join else handed.masters)]
    unique = list(dict.fromkeys(entries))[:envelopes.PREVIOUS_MAX]
    return envelope(session, envelopes.EnvelopeKind.PREVIOUS_MASTERS, b"", b"", owner_public,
                    envelopes.pack_previous_masters(unique))


def previous_seal_keys_envelope(session: Session, owner_public: bytes, branches: list[tuple[bytes, RecipientKey]],
                                handed: HandedOn, exclude: set[bytes]) -> tuple[str, bytes] | None:
    """The envelope of kind 6 every roll addresses to its new owner key (spec §16.6 step 5): for each
    owner device that stays (not revoked, not retired, not ``exclude``), the keys of its local seals
    (§18.1, bound to its writer id) under the current master secret and every other one of this
    generation this device opens, under those they were handed (kind 5), and the entries for it they were
    handed (kind 6), newest generation first.  A device without an OS keychain closed while another made a
    random roll and then an erasure (which hands on no master secret) still finds its key, and with it
    what it kept to seal its own writes again (§16.10).  A seal key is a one-way function of its master
    secret and writer: it opens no slot, envelope or segment in the folder, and no seal of a key that
    retired (a backup of an erasing device's files from before its erasure stays shut).  None when no
    such device is left (the roll's own device seals its new key itself)."""
    keyring, r = session.keyring, session.roster
    writers = sorted(w for w, p in r.principals.items()
                     if p.kind == CredentialKind.DEVICE and w not in r.revocations and w not in exclude)
    stays = set(writers)
    entries: list[tuple[int, bytes, bytes]] = []
    for vms, theirs in [(keyring.master_secret(), handed),
                        *((vms, handed_on(session, owner)) for vms, owner in branches)]:
        masters = [(keyring.generation, vms), *theirs.masters]
        entries += [(g, w, seal_key(session.vault_id, v, g, w)) for g, v in masters for w in writers]
        entries += [e for e in theirs.seal_keys if e[1] in stays]
    ordered = sorted(dict.fromkeys(entries), key=lambda e: -e[0])  # (stable: the current master secret's first)
    if not ordered:
        return None  # (no device stays that this roll knows of: its own new key seals itself)
    return envelope(session, envelopes.EnvelopeKind.PREVIOUS_SEAL_KEYS, b"", b"", owner_public,
                    envelopes.pack_seal_keys(ordered))


def seal_keys_without(session: Session, retired: bytes) -> tuple[FileList, list[str]]:
    """When owner key ``retired`` retires without a keyring roll (key rotation after an erasure, §16.4):
    the kind-6 envelope addressed to the current owner key again without its entries (none when no entry
    is left), and the envelopes it replaces (deleted after the records that retire the key).  Its seals
    in a backup made before the rotation then open with nothing the current credentials reach."""
    owner = session.keyring.owner_kem
    if owner is None:
        return [], []
    handed = handed_on(session)
    kept = [e for e in handed.seal_keys if e[1] != retired]
    if len(kept) == len(handed.seal_keys):
        return [], []
    files = [envelope(session, envelopes.EnvelopeKind.PREVIOUS_SEAL_KEYS, b"", b"", owner.public,
                      envelopes.pack_seal_keys(kept))] if kept else []
    return files, handed.seal_files


def epochs_holding_data_not_here(session: Session) -> set[tuple[bytes, bytes]]:
    """Those of :func:`epochs_not_here` that segments in the folder are sealed under (read before, written
    by this device with the epoch's public key alone, or not readable here): a random roll made now would
    leave those segments readable only through an older master secret."""
    missing = epochs_not_here(session)
    if not missing:
        return set()
    reader = session.reader
    return missing & ({*reader.segment_epochs.values(), *reader.unreadable.values()})


def current_epochs_not_here(session: Session) -> set[tuple[bytes, bytes]]:
    """Those of :func:`epochs_not_here` that are a compartment's current epoch, which writes seal to."""
    missing = epochs_not_here(session)
    if not missing:
        return set()
    r = session.roster
    current = {(c, e.epoch_id) for c in session.all_compartments() if (e := r.current_epoch(c)) is not None}
    return missing & current


def unread_branches(session: Session, branches: list[tuple[bytes, RecipientKey]] | None = None,
                    ) -> list[tuple[bytes, RecipientKey]]:
    """Those of :func:`other_branches` whose roll this device has not read (spec §16.10 rule 9): the roster
    holds no EPOCH record naming the current generation whose secret that master secret delivers, or the
    control compartment has a gap.  The sync brought that roll's slots before the batch announcing its
    epochs: a roll made now could not take them (an epoch secret counts only with its EPOCH record), and
    would delete the envelopes and slots that deliver them."""
    if branches is None:
        branches = other_branches(session, session.slot_headers(ask_store=False)[0])
    return [(vms, owner) for vms, owner in branches if not roll_read(session, other_branch_secrets(session, [owner]))]


def roll_read(session: Session, delivered: Iterable[tuple[bytes, bytes]] | None = None) -> bool:
    """Whether this device has read the records of the roll that made the current master-secret
    generation, and everything they depend on (spec §16.10 rule 8); with ``delivered`` (the epochs
    another master secret of this generation delivers, :func:`other_branch_secrets`), of that other roll
    (rule 9).  Until then an epoch missing from the new keyring may be one the roll destroyed (its ERASE
    travels in the batch with the roll's records, which the sync may bring after the new slots and key
    files), and an epoch the other roll made counts nowhere yet (an epoch secret counts only with its
    EPOCH record).

    The roll's records are the EPOCH records of its new epochs, which name the new generation (key 6)
    and whose secrets that master secret delivers; what they depend on has arrived when the control
    compartment has no gap (every batch a control batch names or claims to have seen is here)."""
    r, generation = session.roster, session.keyring.generation
    refs = session.keyring.epoch_secrets if delivered is None else delivered
    if not any((info := r.epochs.get(ref)) is not None and info.generation == generation for ref in refs):
        return False
    return not any(g.compartment_id == r.control_id for g in session.reader.log_facts().gaps)


def roll_read_whole(session: Session) -> bool:
    """:func:`roll_read` with no gap in any compartment: every REVOKE the roll had seen is in this roster."""
    return roll_read(session) and not session.reader.log_facts().gaps


def other_roll_read(session: Session) -> bool:
    """Whether this device has read a batch of the roll that made the current generation, written by the
    device that rolled (a signer of this device's slot of that generation, not this device): the batch of
    an EPOCH record that names the generation and follows an epoch of an older one, whose secret this
    keyring holds, with no gap in any compartment (spec §16.10 rule 10).  A credential change writes such a
    record in every compartment, in one batch with the REVOKE of the credential it replaces; a sync (or a
    host) can bring its slots without its batches, and until one is read the replaced passphrase still
    counts here.  Later epochs at that generation (a scheduled one, a grant's revocation, a compartment
    added, by any device, this one included) follow an epoch of the same generation: they say nothing of
    the roll's batches."""
    generation, actor = session.keyring.generation, session.actor
    if actor is None or not roll_read_whole(session):
        # (a gap anywhere: a batch held back, below the one that qualifies, may be the roll's, with its REVOKE:
        # a roller's next roll follows its earlier one in every compartment's chain, found by review)
        return False
    rollers = {w for _h, st in session.current_slots() if st.recipient_id == actor.recipient_id
               for w, *_ in st.signatures if w != actor.writer_id}
    named = sorted(_roll_records(session, generation, held=True))
    if not rollers or not named:
        return False
    authors = session.materialized.db.execute(
        f"SELECT author FROM records WHERE id IN ({','.join('?' * len(named))})", named).fetchall()
    return any(author in rollers for (author,) in authors)


def keys_not_here(session: Session) -> str:
    """Why a key change that rolls the master secret must wait ("" when it need not): epochs that segments
    here are sealed under whose keys have not arrived (spec §16.10 rule 10), a compartment's current epoch
    whose key has not arrived (the change itself, and every write after it, seals to that epoch: an
    erasure's key rotation writes a batch in every compartment), or another master secret of this
    generation not joined yet (rule 9).  A roll made now would leave what they protect readable only
    through an older master secret, whose slots it deletes, or hand on what only the other one delivers."""
    missing = epochs_holding_data_not_here(session) | current_epochs_not_here(session)
    if missing:
        names = ", ".join(sorted({session.roster.compartment_name(c) for c, _ in missing}))
        return f"keys that another device made have not arrived here yet ({names})"
    if other_branches(session, session.slot_headers(ask_store=False)[0], vouched=False):
        # (read or not, vouched for or not: joined first, at the next open or refresh; a derived roll made now
        # would hand what only the other master secret delivers to whoever held the current one, a device
        # the other change revoked included, and a random one would issue it a slot if this roster has not
        # read that revocation yet)
        return "another device changed the vault's keys at the same time as this one, and the two changes are " \
               "not joined yet"
    return ""


def other_branches(session: Session, headers: list[slots.SlotHeader], *,
                   vouched: bool = True) -> list[tuple[bytes, RecipientKey]]:
    """The other master secrets of the current generation (two rolls made at once from one generation,
    one of them random: spec §16.10 rule 9) that this device opens, with their owner KEM keys: from a
    slot of that generation for this device's key, signed by an owner (revoked since or not: the
    other roll's device may have retired its key since, an erasure rotates it).  A slot that a host
    planted opens nothing here: no owner signed it.  ``vouched`` False: also those whose signer this
    roster does not know yet (the other roll's device rotated its key after an erasure, and the records
    that certify the new one are sealed under epochs only the other master secret delivers), to read
    that roll with (:func:`ops.repair.read_other_rolls`), never to join it."""
    actor, keyring, r = session.actor, session.keyring, session.roster
    if actor is None or actor.kind != CredentialKind.DEVICE or not keyring.unlocked:
        return []
    found: dict[bytes, RecipientKey] = {}
    for h in headers:
        if h.generation != keyring.generation or h.type != slots.SlotType.DEVICE:
            continue
        try:
            vms = slots.unwrap_vms(h, session.vault_id, actor.recipient)
            st = slots.read_statement(h, session.vault_id, vms)
        except (CryptoFailure, VaultError):
            continue
        if (vms not in found and not constant_time_equal(vms, keyring.master_secret())
                and st.recipient_id == actor.recipient_id
                and (not vouched or r.owner_signed(st.signatures, st.message))):
            found[vms] = keys.owner_kem(vms, session.vault_id, h.generation)
    return sorted(found.items())


def other_branch_secrets(session: Session, owners: list[RecipientKey], *,
                         signed: bool = True) -> dict[tuple[bytes, bytes], bytes]:
    """The epoch secrets delivered to the owner KEM keys of :func:`other_branches`.  A roll that is not
    derived wraps them too, since it deletes every envelope addressed to another owner key: without
    this the epochs only the other roll delivered (an erasure's new epoch, with the batches it
    re-encrypted) would be lost with them.  Each secret must match its EPOCH record and come in an
    envelope an owner signed, as any epoch secret read (§15.3); ``signed`` False: matching its EPOCH
    record is enough (to read the other roll with, whose device's new key this roster does not know yet:
    the commitment in a record the roster verified binds the secret, whoever wrapped it)."""
    r = session.roster
    out: dict[tuple[bytes, bytes], bytes] = {}
    if not owners:
        return out
    shelf = session.shelf
    for name in sorted(shelf.files_in("env") if isinstance(shelf, FolderShelf) else shelf.list()):
        if not name.startswith("env/"):
            continue
        try:
            data = shelf.read(name)
            owner = next((o for o in owners if envelopes.is_for(data, ids.recipient_id(o.public))), None)
            payload = envelopes.open_envelope(data, name, session.vault_id, owner) if owner is not None else None
        except (FileNotFoundError, CryptoFailure, VaultError):
            continue
        if payload is None or payload.kind != envelopes.EnvelopeKind.EPOCH_SECRET:
            continue
        ref = (payload.compartment_id, payload.epoch_id)
        info = r.epochs.get(ref)
        if info is None or not constant_time_equal(keys.epoch_commit(payload.key, session.vault_id, *ref), info.commit):
            continue
        if not signed or r.owner_signed(payload.signatures, payload.message):
            out.setdefault(ref, payload.key)
    return out


def new_epochs_everywhere(session: Session, rekey: Rekey, compartments: list[bytes], reason: str, *,
                          exclude: set[bytes]) -> None:
    """After :func:`roll_keyring`: a new epoch in each compartment, its secret wrapped to the new owner
    KEM key and the remaining grants only, so that nothing written afterwards is readable with a key of
    the old generation (spec §16.3, §16.7)."""
    owner = rekey.new_owner_kem()
    r = session.roster
    for cid in compartments:
        new_epoch(session, rekey, cid, reason, exclude=exclude, owner=owner)
    for (cid, eid), secret in rekey.new_secrets.items():
        rekey.files.append(envelope(session, envelopes.EnvelopeKind.EPOCH_SECRET, cid, eid, owner.public, secret))
        prev = r.current_epoch(cid)
        for g in active_grants(session, exclude):
            rekey.files += grant_envelopes(session, g, cid, eid, secret, prev.epoch_id if prev else None)


def apply(session: Session, rekey: Rekey, *, written_before: list[str] | None = None) -> None:
    """Write new key files (with what append grants need to keep trusting the owners' keys), then
    the control records, then switch keys in memory, then delete.  ``written_before``: new files of
    this change the caller wrote already (deleted with these if the records cannot be written)."""
    before = written_before or []
    try:
        pending = list(dict.fromkeys(raw for raws in rekey.records.values() for raw in raws))
        rekey.files += trust_files(session, pending=pending, everything=rekey.new_vms is not None,
                                   exclude=rekey.excluded)
        written = [*before, *session.write_files(rekey.files)]
    except BaseException:
        session.delete_quietly(reversed(before))  # nothing announces them
        raise
    if rekey.new_vms is not None and rekey.new_generation is not None and not rekey.device_key_sealed:
        seal_device_key_for(session, rekey.new_vms, rekey.new_generation)  # before the records: crash safety
    if rekey.records:  # (what this device remembers is checked once, when the new keys are read below)
        write_batches(session, rekey.records, undo=lambda: session.delete_quietly(reversed(written)),
                      remember=False)
    if rekey.new_vms is not None:
        session.keyring.set_master(rekey.new_vms, rekey.new_generation or session.keyring.generation)
        after_generation_roll(session)
    session.delete_files(rekey.delete)
    session.reread_keys()


def slots_of(session: Session, recipient_id: bytes) -> list[str]:
    """The current generation's slots that wrap the master secret to ``recipient_id``."""
    return [h.name for h, st in session.current_slots() if st.recipient_id == recipient_id]


def reissue_slots(session: Session, retiring: bytes, signer: Credential) -> tuple[FileList, list[str]]:
    """The slots that stop counting when owner key ``retiring`` is retired without a keyring roll
    (re-certification, §12.4; key rotation after an erasure, §16.4): current-generation slots of
    active user credentials whose statement no active owner other than ``retiring`` signed (it
    created the vault, rolled the keyring last, enrolled a device, changed the passphrase).  Returns
    their copies signed by ``signer`` (same credential, master secret and generation; written before
    the records that retire the key) and the originals (deleted after those records)."""
    r = session.roster
    by_recipient = {p.recipient_id: p for p in r.principals.values()
                    if p.kind in USER_KINDS and p.writer_id != retiring and p.writer_id not in r.revocations}
    files: FileList = []
    originals: list[str] = []
    done: set[tuple[bytes, KdfParams | None]] = set()
    for h, st in sorted(session.current_slots(), key=lambda x: x[0].name):
        p = by_recipient.get(st.recipient_id)
        if p is None or SLOT_TYPE[p.kind] != h.type:
            continue
        counts_without = by_retiring = False
        for wid, alg, sig in st.signatures:
            q = r.principals.get(wid)
            if q is None or not q.is_owner or wid in r.revocations or not verify_signature(alg, q.sig_public,
                                                                                             st.message, sig):
                continue
            by_retiring = by_retiring or wid == retiring
            counts_without = counts_without or wid != retiring
        if counts_without or not by_retiring:
            continue
        originals.append(h.name)
        # A passphrase's parameters: the trusted ones when known, else this slot's, each distinct set kept (a
        # slot the retiring key signed may be one it planted for the passphrase with a salt of its own: found
        # by review, when only the first was copied and the real one deleted)
        kdf = (trusted_kdf(session, p) or h.kdf) if p.kind == CredentialKind.PASSPHRASE else None
        if (p.recipient_id, kdf) in done:
            continue
        done.add((p.recipient_id, kdf))
        files.append(session.build_slot(p.recipient_public, h.type, st.label, kdf=kdf, signer=signer,
                                        generation=h.generation))
    return files, originals


def scheduled_epochs(session: Session) -> bool:
    """Start a new epoch where the current one is older than 30 days or holds 1000 batches.
    True when one started."""
    if not session.is_owner or session.keyring.owner_kem is None:
        return False
    now = int(time.time())
    # Checked when a minute passed or a sixteenth of the limit arrived since the last check (the policy
    # is "about 1000 batches or 30 days", not exact); the count is an indexed query, not a walk.
    last_time, last_size = session.scheduled_check
    step = max(1, min(64, SCHEDULED_EPOCH_BATCHES // 16))
    if time.monotonic() - last_time < 60 and len(session.batches) - last_size < step:
        return False
    session.scheduled_check = (time.monotonic(), len(session.batches))
    due = []
    db = session.materialized.cache_db  # every batch read has a row there, indexed by its epoch
    for cid in session.all_compartments():
        epoch = session.roster.current_epoch(cid)
        if epoch is None:
            continue
        count = db.execute("SELECT count(*) FROM cache_batches WHERE epoch = ?", (epoch.epoch_id,)).fetchone()[0]
        if now - epoch.ts >= SCHEDULED_EPOCH_SECONDS or count >= SCHEDULED_EPOCH_BATCHES:
            due.append(cid)
    if not due:
        return False
    rekey = Rekey(session)
    for cid in due:
        new_epoch(session, rekey, cid, "scheduled", exclude=set())
    apply(session, rekey)
    return True


def proof_of_possession(vault_id: bytes, cred: Credential) -> bytes:
    return cred.signer.sign(pop_message(vault_id, cred.signer.public, cred.recipient.public))
