"""Creating a vault: the genesis record and everything a new vault holds (spec §12.1, §14.2).

The genesis record names the control compartment, the data compartments and the three owner
credentials (this device, the passphrase and the recovery phrase), signed by all three; its hash is
the vault id.  Each compartment gets its first epoch (an EPOCH record, and an envelope wrapping its
secret to the owner KEM key), each credential a slot wrapping the master secret, and each
compartment a first batch carrying the genesis, its EPOCH record(s) and the initial POLICY.

Order of writes: this installation's local files first (its counters must exist before the
segments do), then the vault files, the descriptor last: a folder without it is an unfinished
creation.

Confined to the thread that calls it (it returns a session confined to that thread).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from .. import descriptor, envelopes, ids, keychain, keys, segments, slots
from ..control import owner_entry
from ..credentials import Credential, CredentialKind, from_passphrase, from_recovery_phrase
from ..errors import UsageError
from ..objectstore import open_location
from ..primitives import KdfParams, new_recovery_phrase, random_bytes
from ..records import Batch, BatchHeader, Kind, encode_record, make_batch
from ..storage import segment_name
from .core import Session
from .installation import hostname, platform_label, register_installation
from .unlock import check_unlocking_credential


def create_vault(path: str, passphrase: str, *, compartments: Sequence[str], device_name: str | None = None,
                 kdf: tuple[int, int, int] | None = None, home: str | None = None) -> tuple[Session, str]:
    """Create a vault in an empty folder.  Returns the open session and the recovery phrase, which
    is shown to the user once and never stored."""
    names = [c.strip() for c in compartments]
    if not names or len(set(names)) != len(names) or any(not n or n == "control" for n in names):
        raise UsageError("compartment names must be distinct, non-empty and not 'control'")
    if len(passphrase) < 1:
        raise UsageError("the passphrase is empty")
    shelf = open_location(path, create=True, home=home)
    phrase = new_recovery_phrase()
    device = Credential.generate(CredentialKind.DEVICE)
    keychain.prepare()  # (found while the passphrase is derived: the device key goes there)
    pw = from_passphrase(passphrase, KdfParams.fresh(kdf))
    recovery = from_recovery_phrase(phrase)
    device_name = device_name or hostname()
    control_id = ids.new_random_id()
    comp_ids = {name: ids.new_random_id() for name in names}
    now = int(time.time())
    owners = [
        owner_entry(CredentialKind.DEVICE, device.signer.public, device.recipient.public, device_name,
                    platform_label()),
        owner_entry(CredentialKind.PASSPHRASE, pw.signer.public, pw.recipient.public, "passphrase", ""),
        owner_entry(CredentialKind.RECOVERY, recovery.signer.public, recovery.recipient.public, "recovery phrase", ""),
    ]
    genesis = encode_record(
        Kind.GENESIS,
        device.writer_id,
        body={0: 1, 1: control_id, 2: sorted([cid, n] for n, cid in comp_ids.items()), 3: owners, 4: now},
        signers=[device.signer, pw.signer, recovery.signer],
        ts=now,
    )
    vault_id = ids.vault_id(genesis)
    vms = random_bytes(32)
    owner_kem = keys.owner_kem(vms, vault_id, 1)
    files: list[tuple[str, bytes]] = []
    epoch_records: dict[bytes, bytes] = {}
    epoch_keys: dict[bytes, tuple[bytes, bytes]] = {}
    for cid in [control_id, *comp_ids.values()]:
        secret = random_bytes(32)
        eid = ids.new_random_id()
        epk = keys.epoch_key(secret, vault_id, cid, eid).public
        epoch_records[cid] = encode_record(
            Kind.EPOCH, device.writer_id,
            body={0: cid, 1: eid, 2: None, 3: "genesis", 4: epk, 5: keys.epoch_commit(secret, vault_id, cid, eid),
                  6: 1},
            signers=[device.signer], ts=now,
        )
        epoch_keys[cid] = (eid, epk)
        env = envelopes.build_envelope(
            vault_id=vault_id, kind=envelopes.EnvelopeKind.EPOCH_SECRET, compartment_id=cid, epoch_id=eid,
            recipient_public=owner_kem.public, recipient_id=ids.recipient_id(owner_kem.public), key=secret,
            signer=device.signer, signer_id=device.writer_id,
        )
        files.append((envelopes.file_name(env), env))
    policy = encode_record(Kind.POLICY, device.writer_id, body={0: "enabled", 1: "default", 2: []},
                           signers=[device.signer], ts=now)
    for cred, stype, label in (
        (device, slots.SlotType.DEVICE, device_name),
        (pw, slots.SlotType.PASSPHRASE, "passphrase"),
        (recovery, slots.SlotType.RECOVERY, "recovery phrase"),
    ):
        sid = ids.new_random_id()
        files.append((slots.file_name(sid), slots.build_slot(
            vault_id=vault_id, slot_id=sid, slot_type=stype, generation=1, vms=vms,
            recipient_public=cred.recipient.public, recipient_id=cred.recipient_id, kdf=cred.kdf, label=label,
            signer=device.signer, signer_id=device.writer_id,
        )))
    first_batches: dict[bytes, Batch] = {}
    for cid in [control_id, *comp_ids.values()]:
        recs = [genesis, *(epoch_records.values() if cid == control_id else [epoch_records[cid]]), policy]
        header = BatchHeader(vault_id, cid, device.writer_id, 1, None, (), {device.writer_id: 0},
                             tuple(ids.record_id(r) for r in recs), now)
        batch = make_batch(header, recs, device.signer)
        first_batches[cid] = batch
        eid, epk = epoch_keys[cid]
        seg = segments.seal_segment(vault_id, cid, eid, epk, segments.encode_payload([batch]))
        files.append((segment_name(seg), seg))
    session = Session(shelf, vault_id, home)
    session.actor = device
    session.keyring.set_master(vms, 1, owner_kem=False)
    register_installation(session, device, counters={c: (1, b.id) for c, b in first_batches.items()})
    for name, data in files:
        shelf.write(name, data)
    shelf.write(descriptor.NAME, descriptor.Descriptor(vault_id).encode())
    session.unlocking = pw  # the user just typed it: it re-authenticates irreversible actions
    session.unlocked_with = "passphrase"
    session.keyring.derive_owner_kem()
    session.load_cache()
    session.refresh()
    check_unlocking_credential(session)
    session.update_memory()
    return session, phrase
