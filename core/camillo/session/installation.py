"""This installation's device key for a vault: where it is kept, and switching to a new one.

The key is kept in the OS keychain (Secret Service, macOS Keychain, Windows Credential Locker)
when one is usable; otherwise its seeds are sealed in the local files under a key derived from
the vault master secret of each generation the device has seen (``device-key.bin``), so it opens
only after the user unlocked the vault with a passphrase or recovery phrase (spec §12.5, §18).
The installation record (``installation.cbor``) says which writer this installation is and where
its key lives.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import os
import platform
import socket
import subprocess
import time
from collections.abc import Sequence
from typing import NamedTuple

from .. import encoding, envelopes, ids, keychain, keys, slots
from ..credentials import Credential, CredentialKind
from ..devicestate import DeviceState
from ..errors import KeychainError, VaultError, WrongCredential
from ..localstate import Installation, VaultLocal, atomic_write, open_local, read_file, seal_local
from ..primitives import CryptoFailure, RecipientKey, constant_time_equal
from ..storage import FolderShelf
from ..values import Notice
from .core import Session


def hostname() -> str:
    try:
        return socket.gethostname() or "this computer"
    except OSError:
        return "this computer"


def platform_label() -> str:
    """This computer's platform as people say it, for its device certificate: "Linux", "macOS
    laptop", "Windows" (a laptop when it has a battery; no kernel version: nobody needs it)."""
    system = {"Darwin": "macOS"}.get(platform.system(), platform.system()) or "unknown platform"
    return f"{system} laptop" if _has_battery(system) else system


def _has_battery(system: str) -> bool:
    try:
        if system == "Linux":
            return any(n.startswith("BAT") for n in os.listdir("/sys/class/power_supply"))
        if system == "macOS":  # the model: "MacBookPro18,1", "Macmini9,1"
            model = subprocess.run(["sysctl", "-n", "hw.model"], capture_output=True, text=True, timeout=2).stdout
            return "book" in model.lower()
    except (OSError, subprocess.SubprocessError):
        return False
    return False


def device_unlock_available(vault_id: bytes, home: str | None = None) -> bool:
    """Does this installation hold a device key for the vault in the OS keychain?"""
    inst = VaultLocal(vault_id, home).load_installation()
    return (inst is not None and inst.keystore == "keychain"
            and keychain.load(vault_id, inst.writer_id) is not None)


# ---------------------------------------------------------------------------------- finding the key


def load_device_credential(session: Session) -> Credential:
    """The device key this installation keeps in the OS keychain (to unlock with it)."""
    inst = session.local.load_installation()
    vid = session.vault_id.hex()[:12]
    if inst is None:
        raise WrongCredential(
            f"this installation holds no device key for vault {vid}; unlock once with your passphrase or "
            "recovery phrase to register it"
        )
    if inst.keystore != "keychain":
        raise WrongCredential(
            f"this installation keeps its device key for vault {vid} sealed under the vault's keys because no "
            "OS keychain was available; unlock with your passphrase or recovery phrase"
        )
    seeds = keychain.load(session.vault_id, inst.writer_id)
    if seeds is None:
        raise KeychainError(
            f"the OS keychain has no device key for vault {vid}; unlock with your passphrase or recovery phrase"
        )
    return Credential.from_seeds(CredentialKind.DEVICE, *seeds)


def find_installation_credential(session: Session) -> Credential | None:
    """After a passphrase or recovery unlock: this installation's own device key, if it has one
    for this vault (checked against the roster by :func:`confirm_actor`)."""
    inst = session.local.load_installation()
    if inst is None:
        return None
    cred = None
    if inst.keystore == "keychain":
        try:
            seeds = keychain.load(session.vault_id, inst.writer_id)
        except KeychainError as exc:
            # Locked or unreachable is not lost: this session reads but does not write, and the
            # installation keeps its key (replacing it would retire a key that still exists).
            session.keychain_problem = exc.message
            return None
        if seeds is not None:
            cred = Credential.from_seeds(CredentialKind.DEVICE, *seeds)
    else:
        cred = load_local_device_key(session, inst.writer_id)
    if cred is None or cred.writer_id != inst.writer_id:
        return None  # lost: a new writer is certified instead (never reuse a writer id blindly)
    return cred


def confirm_actor(session: Session) -> None:
    """The installation's device must be a current writer of this vault; otherwise it does not
    write (a new device is certified on a writable open) and its cache is not trusted."""
    actor, roster = session.actor, session.roster
    if actor is None or actor.kind != CredentialKind.DEVICE:
        return
    if actor.writer_id not in roster.principals or actor.writer_id in roster.revocations:
        session.discard_cache()
        session.actor = None
        return
    if not session.key_from_previous or session.read_only:
        return
    inst = session.local.load_installation()
    if inst is not None and inst.writer_id == actor.writer_id:
        save_local_device_key(session, actor)  # (found under a master secret handed to the current one; the
        session.key_from_previous = False     # older seals go once nothing is left to hand over, repair)


# ---------------------------------------------------------------------------------- the local seal


def _read_seals(session: Session) -> dict[int, bytes]:
    """``device-key.bin``: this installation's seals of its key, by generation ({} when absent or damaged)."""
    data = read_file(session.local.device_key_path)
    if data is None:
        return {}
    try:
        table = encoding.decode(data, "device-key.bin")
    except VaultError:
        return {}
    if not isinstance(table, dict):
        return {}
    return {g: b for g, b in table.items() if isinstance(g, int) and isinstance(b, bytes)}


def load_local_device_key(session: Session, writer: bytes) -> Credential | None:
    """Writer ``writer``'s key (this installation's), from its seal under the current master secret, or
    under an older one a roll handed on (:func:`_through_previous_masters`)."""
    if not session.keyring.unlocked:
        return None
    table = _read_seals(session)
    if not table:
        return None
    generation, vms = session.keyring.generation, session.keyring.master_secret()
    if generation not in table:
        return _through_previous_masters(session, table, writer)
    opened = _open_seal(session, table, generation, seal_key(session.vault_id, vms, generation, writer))
    if opened is not None:
        session.key_from_seal = True
        return opened[0]
    opened = _open_seal(session, table, generation, seal_key(session.vault_id, vms, generation))
    if opened is not None:  # sealed before seals were bound to their writer: sealed again as after a key change
        session.key_from_seal = session.key_from_previous = True
        return opened[0]
    found = _through_previous_masters(session, table, writer)
    if found is not None:
        return found
    if another_master_secret(session, generation):
        # Sealed under the other master secret of this generation (two key changes made at once,
        # spec §16.10 rule 9): not lost.  Replacing it now would retire it on a view that cannot
        # read what it wrote under the other one, and reject those writes once they are joined.
        session.key_waiting = (
            "another device changed the vault's keys at the same time as this one, and this device's key "
            "is sealed under the other change: it reads but does not write until a device holding both "
            "joins them (opening the vault here once with the passphrase last used on this device does it, "
            "or opening it on the other device, when that one holds both)")
        session.notices.append(Notice("waiting-for-join", session.key_waiting))
    return None


class HandedOn(NamedTuple):
    """What the rolls before a master secret handed on to its owner key (spec §16.6 step 5), newest first:
    the previous master secrets (kind 5) and the keys of the local seals under earlier ones (kind 6)."""
    masters: list[tuple[int, bytes]]
    seal_keys: list[tuple[int, bytes, bytes]]  # (generation, writer id, seal key)
    seal_files: list[str]  # the kind-6 envelopes they came from


def handed_on(session: Session, owner: RecipientKey | None = None) -> HandedOn:
    """The envelopes of kinds 5 and 6 addressed to ``owner`` (default: the current owner KEM key):
    empty lists when none is in the folder (a kind-5 one is absent after an erasure's derived roll:
    it hands on no master secret).  The entries of every kind-6 envelope count (two erasures made at
    once from one generation roll to one master secret, and each writes one)."""
    owner = owner if owner is not None else session.keyring.owner_kem
    masters: list[tuple[int, bytes]] | None = None
    sealed: list[tuple[int, bytes, bytes]] = []
    files: list[str] = []
    if owner is None:
        return HandedOn([], [], [])
    rid, shelf = ids.recipient_id(owner.public), session.shelf
    names = shelf.files_in("env") if isinstance(shelf, FolderShelf) else [n for n in shelf.list() if n.startswith("env/")]
    for name in sorted(names):
        try:
            data = shelf.read(name)
            if not envelopes.is_for(data, rid):
                continue
            payload = envelopes.open_envelope(data, name, session.vault_id, owner)
        except (FileNotFoundError, VaultError, CryptoFailure):
            continue
        if payload.recipient_id != rid:
            continue
        if payload.kind == envelopes.EnvelopeKind.PREVIOUS_MASTERS and masters is None:
            masters = envelopes.previous_masters(payload.key)
        elif payload.kind == envelopes.EnvelopeKind.PREVIOUS_SEAL_KEYS:
            sealed += envelopes.seal_keys(payload.key)
            files.append(name)
    return HandedOn(masters or [], list(dict.fromkeys(sealed)), files)


def seal_key(vault_id: bytes, vms: bytes, generation: int, writer: bytes = b"") -> bytes:
    """The key of an installation's local seal of writer ``writer``'s device key under master secret
    ``vms`` of ``generation`` (spec §18.1, purpose ``device-key``): what a kind-6 entry carries.  Bound
    to the writer, so that an entry handed on for one device opens no seal of another key, a retired one
    in a backup least of all.  (Without ``writer``: how seals were keyed before, read for the upgrade.)"""
    return keys.local_key(vms + generation.to_bytes(4, "big") + writer, "device-key", vault_id)


def _through_previous_masters(session: Session, table: dict[int, bytes], writer: bytes) -> Credential | None:
    """This installation's key from its seal under a master secret a roll before the current one made
    (a passphrase changed, an erasure made, on another device while this one was closed): opened with
    the master secret a random roll handed on (kind 5), or with the key of that seal a roll handed on
    (kind 6: an erasure's derived roll hands on no master secret, only the keys of the local seals under
    them).  The seal's AEAD authenticates the key that opens it (a planted envelope opens nothing).
    Once it is confirmed a current owner (:func:`confirm_actor`), the key is sealed under the current
    master secret; the epochs the handed master secrets deliver that the current one lacks are handed
    over (spec §16.10 rule 8, ``ops.repair.wrap_missing_epochs``), and then the older seals go."""
    handed = handed_on(session)
    tries = [*((g, seal_key(session.vault_id, vms, g, writer)) for g, vms in handed.masters),
             *((g, key) for g, w, key in handed.seal_keys if w == writer)]
    for generation, key in tries:
        opened = _open_seal(session, table, generation, key)
        if opened is None:
            continue
        cred = opened[0]
        session.key_from_seal = session.key_from_previous = True
        # what those master secrets deliver that the current one lacks is handed over (rule 8, repair)
        session.previous_owners = [keys.owner_kem(v, session.vault_id, g) for g, v in handed.masters]
        return cred
    return None


def seal_table(session: Session) -> dict[int, bytes]:
    """This installation's seals of its key, by generation: none with an OS keychain (or unreadable)."""
    return _local_seals(session)[1]


def _local_seals(session: Session) -> tuple[bytes, dict[int, bytes]]:
    """This installation's writer id and its seals by generation (b"" and none with an OS keychain)."""
    inst = session.local.load_installation()
    if inst is None or inst.keystore != "local":
        return b"", {}
    return inst.writer_id, _read_seals(session)


def seal_opens(session: Session, table: dict[int, bytes], vms: bytes, generation: int) -> bool:
    """Whether ``table`` (:func:`seal_table`) seals this installation's key under master secret ``vms``."""
    writer = _local_seals(session)[0]
    return any(_open_seal(session, table, generation, seal_key(session.vault_id, vms, generation, w)) is not None
               for w in (writer, b""))


def another_master_secret(session: Session, generation: int) -> bool:
    """Whether a slot of ``generation`` opens under another master secret than this session's (its
    statement does not open under ours)."""
    for h in session.slot_headers(ask_store=False)[0]:
        if h.generation == generation:
            try:
                slots.read_statement(h, session.vault_id, session.keyring.master_secret())
            except VaultError:
                return True
    return False


def key_sealed_elsewhere(session: Session) -> bool:
    """Whether this installation's key, sealed locally and not under the current master secret, may be
    sealed under an older one that the current one did not replace: passphrase or recovery slots of a
    generation it was sealed at are still in the folder.  That is a concurrent change the newest
    generation never saw (two passphrase changes and an erasure before any sync): re-registering here
    would retire the key on a view that cannot read what it wrote under that master secret, losing those
    writes for every device.
    The passphrase this device last opened the vault with opens that master secret, and with it the key
    (see unlock.check_unlocking_credential).  Also true for a while when a sync brings another device's
    key change before the deletion of the old slots; the same passphrase works then too."""
    sealed = seal_table(session)
    if not sealed or not session.keyring.unlocked:
        return False
    current, typed = session.keyring.generation, (slots.SlotType.PASSPHRASE, slots.SlotType.RECOVERY)
    return any(h.generation < current and h.generation in sealed and h.type in typed  # what a person can open
               for h in session.slot_headers(ask_store=False)[0])


DERIVED_AHEAD = 3  # generations an erasure's derived roll can reach before this device next opens
DERIVED_FROM_MAX = 4  # the older generations a seal names as deriving its master secret, at most


def _seal_payload(cred: Credential, derived_from: list[int]) -> bytes:
    """A seal's plaintext: the device seeds and, under key ``from``, the older generations whose master
    secrets derive this one's (erasures' derived rolls, spec §16.4), as far as this device knows."""
    m: dict[str, object] = {"ed25519": cred.signer.seed, "xwing": cred.recipient.seed}
    if derived_from:
        m["from"] = derived_from[-DERIVED_FROM_MAX:]
    return encoding.encode(m)


def _open_seal(session: Session, table: dict[int, bytes], generation: int,
               key: bytes) -> tuple[Credential, list[int]] | None:
    """The key sealed at ``generation`` (:func:`seal_key` of its master secret) and the generations the
    seal names as deriving that master secret: None when absent, not under that key, or damaged."""
    blob = table.get(generation)
    if blob is None:
        return None
    try:
        m = encoding.decode(open_local(key, "device-key", session.vault_id, blob, session.local.device_key_path),
                            "device key")
        cred = Credential.from_seeds(CredentialKind.DEVICE, m["xwing"], m["ed25519"])
    except (VaultError, KeyError, TypeError, AttributeError, ValueError):
        return None
    found = m.get("from")
    return cred, [g for g in found if isinstance(g, int)] if isinstance(found, list) else []


def save_local_device_key(session: Session, cred: Credential, vms: bytes | None = None,
                          generation: int | None = None) -> None:
    """Seal the device seeds under the master secret of ``generation`` (default: the current one),
    and under the master secrets the next erasures would derive from it (spec §16.4): an erasure by
    another device while this one is closed must not make it lose its key (and with it the epoch
    secrets it kept to seal its own writes again, §16.10).  Each seal names the older generations whose
    master secrets derive its own (what the seal already there said, when it opens under the same master
    secret, then the derived ones before it): :func:`forget_older_seals` keeps theirs.  A revocation's
    random roll is not foreseen: after one the device is certified anew (§12.4)."""
    table = _read_seals(session)
    if vms is None or generation is None:
        vms, generation = session.keyring.master_secret(), session.keyring.generation
    writer = cred.writer_id
    opened = _open_seal(session, table, generation, seal_key(session.vault_id, vms, generation, writer))
    derived_from = opened[1] if opened is not None else []
    for _ in range(DERIVED_AHEAD + 1):
        table[generation] = seal_local(seal_key(session.vault_id, vms, generation, writer), "device-key",
                                       session.vault_id, _seal_payload(cred, derived_from))
        derived_from = [*derived_from, generation]
        generation += 1
        vms = keys.next_master(vms, session.vault_id, generation)
    atomic_write(session.local.device_key_path, encoding.encode(table))


def _sealed_ahead(session: Session, cred: Credential) -> bool:
    """Whether this installation's seals already hold ``cred``'s key under the current master secret
    and the ones the next erasures would derive from it, as :func:`save_local_device_key` seals it."""
    table = _read_seals(session)
    vms, generation = session.keyring.master_secret(), session.keyring.generation
    for _ in range(DERIVED_AHEAD + 1):
        opened = _open_seal(session, table, generation, seal_key(session.vault_id, vms, generation, cred.writer_id))
        if opened is None or not (constant_time_equal(opened[0].signer.seed, cred.signer.seed)
                                  and constant_time_equal(opened[0].recipient.seed, cred.recipient.seed)):
            return False
        generation += 1
        vms = keys.next_master(vms, session.vault_id, generation)
    return True


def seal_device_key_for(session: Session, vms: bytes, generation: int) -> None:
    """Before the control records that make master-secret ``generation`` current are written:
    an installation that keeps its device key sealed locally must be able to read it at that
    generation, or a crash right after those records leaves it unable to find its key on the
    next open (it would then certify a new key and retire this one, the key that signed the
    new generation's slots, and no passphrase or recovery slot would count any more)."""
    actor = session.actor
    if actor is not None and actor.kind == CredentialKind.DEVICE:
        inst = session.local.load_installation()
        if inst is not None and inst.keystore == "local" and inst.writer_id == actor.writer_id:
            save_local_device_key(session, actor, vms, generation)


def after_generation_roll(session: Session) -> None:
    """The master secret rolled: keep this installation's sealed device key readable (and no longer
    under the older master secrets, once nothing is left to hand over from them)."""
    actor = session.actor
    if actor is not None and actor.kind == CredentialKind.DEVICE:
        inst = session.local.load_installation()
        if inst is not None and inst.keystore == "local":
            if not _sealed_ahead(session, actor):  # (sealed already before the roll's records: seal_device_key_for)
                save_local_device_key(session, actor)
            if not session.carried:
                forget_older_seals(session)
    session.reader.dirty = True


def forget_older_seals(session: Session) -> None:
    """Delete this installation's seals of its key under generations older than the current one (spec
    §16.10 rule 10): a replaced passphrase with an old slot a host kept opens an older master secret,
    which must not open this device's current key.  Called once nothing held under an older master
    secret is still to be handed over (the session's carried secrets are delivered, rule 8): until then
    the passphrase that opened it must still open the key.  The seals of the generations whose master
    secrets derive the current one (an erasure's roll) stay: whoever holds one computes the current one
    and opens the current seal anyway, and another device's key change concurrent with that erasure,
    made from one of them, hands on its seal key (kind 6, §16.6), the way back to this key."""
    (writer, table), generation = _local_seals(session), session.keyring.generation
    if not session.keyring.unlocked or generation not in table:
        return  # the current seal is not there (its key is not sealed at this generation): keep what is
    opened = _open_seal(session, table, generation, seal_key(session.vault_id, session.keyring.master_secret(),
                                                             generation, writer))
    derived_from = set(opened[1]) if opened is not None else set()
    kept = {g: blob for g, blob in table.items() if g >= generation or g in derived_from}
    if len(kept) != len(table):
        atomic_write(session.local.device_key_path, encoding.encode(kept))


# ---------------------------------------------------------------------------------- new keys


def register_installation(session: Session, device: Credential,
                          counters: dict[bytes, tuple[int, bytes]] | None = None,
                          replaces: bytes | None = None) -> None:
    """Store the device key (keychain, else sealed locally) and create its device state.
    ``replaces``: the key it retires once its certificate is written (see Installation)."""
    st = keychain.status()
    if st.usable:
        keychain.store(session.vault_id, device.writer_id, device.recipient.seed, device.signer.seed)
        keystore = "keychain"
    elif os.environ.get("CAMILLO_KEYCHAIN") == "os":
        raise KeychainError(st.reason)
    else:
        save_local_device_key(session, device)
        keystore = "local"
    session.actor = device
    session.keep_state_for(device)
    session.open_device_state()
    session.save_device_state(DeviceState(counters=dict(counters or {}), manifests=session.erasure_manifests()))
    session.local.save_installation(Installation(device.writer_id, keystore, int(time.time()), replaces))


def switch_key(session: Session, new: Credential, *, seen_manifests: Sequence[bytes] = ()) -> Credential:
    """This installation now writes as ``new`` (stored in the keychain or sealed locally, with a
    fresh device state and cache).  ``seen_manifests``: erasure manifests about to be written that
    the new key has nothing to fear from (it never held what they destroy).  Returns the old
    credential, whose key is deleted by :func:`forget_key` once the new certificate is durable."""
    old = session.actor
    if old is None:
        raise AssertionError("no device to switch from")
    inst = session.local.load_installation()
    keystore = inst.keystore if inst else "local"
    if keystore == "keychain":
        keychain.store(session.vault_id, new.writer_id, new.recipient.seed, new.signer.seed)
    else:
        session.actor = new
        try:
            os.unlink(session.local.device_key_path)  # the old key, under every generation, goes
        except FileNotFoundError:
            pass
        save_local_device_key(session, new)
    session.actor = new
    session.local.save_installation(Installation(new.writer_id, keystore, int(time.time()), old.writer_id))
    # the old key's batches may still need sealing again (spec §16.10): the secrets and segment keys kept
    kept, kept_segments = session.device_state.kept, session.device_state.kept_segments
    session.keep_state_for(new)
    session.open_device_state()
    session.save_device_state(DeviceState(generation=session.keyring.generation,
                                          manifests=sorted({*session.erasure_manifests(), *seen_manifests}),
                                          kept=kept, kept_segments=kept_segments))
    return old


def switch_back(session: Session, old: Credential, new: Credential) -> None:
    """Undo :func:`switch_key` when the new key's first batches could not be written at all (the
    disk is full): this installation writes as ``old`` again, whose device state is still on disk,
    and the new key, which nothing certifies, is forgotten.  Best effort: if this fails too, the
    next open registers the installation anew."""
    try:
        inst = session.local.load_installation()
        keystore = inst.keystore if inst else "local"
        if keystore == "keychain":
            keychain.delete(session.vault_id, new.writer_id)
        else:
            try:
                os.unlink(session.local.device_key_path)
            except FileNotFoundError:
                pass
            save_local_device_key(session, old)
        session.local.save_installation(Installation(old.writer_id, keystore, int(time.time())))
    except VaultError:
        pass
    session.actor = old
    session.keep_state_for(old)
    session.open_device_state()


def forget_key(session: Session, old: Credential) -> None:
    """Delete a retired device key from the keychain (once its successor's certificate is durable)."""
    inst = session.local.load_installation()
    if inst is not None and inst.keystore == "keychain":
        keychain.delete(session.vault_id, old.writer_id)
