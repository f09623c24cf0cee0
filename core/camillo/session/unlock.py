"""Unlocking: from a credential to an open session (spec §10, §20 steps 1-2 and 5).

* :func:`open_session` reads the descriptor, then unlocks with a passphrase, a recovery phrase or
  this installation's device key (the master secret from a slot, newest generation first), or as an
  agent with a grant file (its epoch keys from envelopes addressed to the grant);
* a slot that unwraps is used only if the vault vouches for it: signed by a current owner, for a
  credential that is a current owner (a planted slot or an old passphrase fails here);
* :func:`catch_up_generation` moves an open session to the new master secret when another device
  rolled it (an erasure, a revocation) and left this device a slot of the new generation, or when
  this device's own roll, which a crash stopped after its records, left it one.

What an open then finishes (an interrupted operation, a key rotation after an erasure, the
registration of a new installation) is in :mod:`camillo.ops.repair` and
:mod:`camillo.ops.registration`, above this layer.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable

from .. import descriptor, keychain, slots
from ..cache import DatabaseError, is_damage
from ..control import Level
from ..credentials import (
    Credential,
    CredentialKind,
    from_passphrase,
    from_recovery_phrase,
    read_recipient_key,
)
from ..errors import (
    DamagedFile,
    Incomplete,
    LimitExceeded,
    NotAVault,
    Revoked,
    RolledBack,
    UsageError,
    VaultError,
    WrongCredential,
)
from ..objectstore import open_location
from ..packshelf import PackShelf
from ..primitives import CryptoFailure, KdfParams, SecretBytes
from ..storage import FolderShelf
from ..values import Notice, Unlock
from .core import Session
from .grantfile import read_grant_file
from .installation import (
    after_generation_roll,
    another_master_secret,
    confirm_actor,
    find_installation_credential,
    load_device_credential,
    seal_opens,
    seal_table,
)
from .reader import Progress


def read_vault_id(path: str, home: str | None = None) -> bytes:
    """The vault id from the descriptor of the vault at ``path`` (a hint: the genesis proves it)."""
    shelf = open_location(path, home=home)
    try:
        return _descriptor(shelf, path)
    finally:
        shelf.close()


def _descriptor(shelf: FolderShelf | PackShelf, path: str) -> bytes:
    try:
        return descriptor.decode(shelf.read(descriptor.NAME)).vault_id
    except FileNotFoundError:
        raise NotAVault(
            f"{path} is not a VMEM vault (it has no VMEM descriptor file); choose the vault's folder"
        ) from None


def open_session(path: str, unlock: Unlock, *, cache: bool = True, home: str | None = None,
                 progress: Progress | None = None, read_only: bool = False) -> Session:
    """Open the vault at ``path`` with ``unlock`` and read it (nothing is written to the vault).
    A page of the local state that does not authenticate (tampered, damaged) is met at most once:
    the local state is deleted and the vault is read again from its files."""
    try:
        return _open_session(path, unlock, cache, home, progress, read_only)
    except DatabaseError as exc:
        if not is_damage(exc):
            raise
    return _open_session(path, unlock, cache, home, progress, read_only)


def _open_session(path: str, unlock: Unlock, cache: bool, home: str | None, progress: Progress | None,
                  read_only: bool) -> Session:
    shelf = open_location(path, home=home)
    session: Session | None = None
    try:
        session = Session(shelf, _descriptor(shelf, path), home)
        session.use_cache = cache
        session.reader.progress = progress
        if read_only:
            session.read_only = session.verifying = True
        if unlock.method == "grant":
            open_with_grant(session, unlock.path or "")
        else:
            unlock_user(session, unlock)
        return session
    except BaseException as exc:
        if session is not None and isinstance(exc, DatabaseError) and is_damage(exc):
            session.discard_cache()
            session.close()
        shelf.close()
        raise


# ---------------------------------------------------------------------------------- owners


def _prepare_keychain(session: Session) -> None:
    """This installation keeps its device key in the OS keychain: find the keychain while the credential is
    derived (:func:`find_installation_credential` reads the key after it).  A damaged installation file is
    left for that reading to report."""
    try:
        inst = session.local.load_installation()
    except VaultError:
        return
    if inst is not None and inst.keystore == "keychain":
        keychain.prepare()


def unlock_user(session: Session, unlock: Unlock) -> None:
    vid = session.vault_id.hex()[:12]
    headers, damaged = session.slot_headers()
    derive: Callable[[slots.SlotHeader], Credential]
    if unlock.method == "passphrase":
        stype, what = slots.SlotType.PASSPHRASE, "passphrase"
        derived: dict[KdfParams, Credential] = {}

        def derive(h: slots.SlotHeader) -> Credential:
            if h.kdf is None:
                raise AssertionError("a passphrase slot without KDF parameters")
            if h.kdf not in derived:
                derived[h.kdf] = from_passphrase(unlock.secret or "", h.kdf)
            return derived[h.kdf]
    elif unlock.method == "recovery":
        stype, what = slots.SlotType.RECOVERY, "recovery phrase"
        recovery = from_recovery_phrase(unlock.secret or "")

        def derive(h: slots.SlotHeader) -> Credential:
            return recovery
    elif unlock.method == "recipient":
        stype, what = slots.SlotType.RECIPIENT, "recovery key"
        holder = read_recipient_key(unlock.path or "", unlock.secret or "")

        def derive(h: slots.SlotHeader) -> Credential:
            return holder
    elif unlock.method == "device":
        stype, what = slots.SlotType.DEVICE, "device key"
        device = unlock.credential or load_device_credential(session)

        def derive(h: slots.SlotHeader) -> Credential:
            return device
    else:
        raise UsageError(f"unknown unlock method {unlock.method}")
    candidates = sorted((h for h in headers if h.type == stype), key=lambda h: (-h.generation, h.name))
    if unlock.method != "device":
        _prepare_keychain(session)
    if (unlock.method == "passphrase" and candidates and type(session.shelf) is FolderShelf
            and not (session.use_cache and session.local.holds_a_state())):
        _list_while_deriving(session.shelf, derive, candidates[0])
    if unlock.method != "device":
        candidates = _own_seal_first(session, candidates, derive)
    refusals: list[VaultError] = []
    for h in candidates:
        try:
            cred = derive(h)
        except LimitExceeded as exc:
            refusals.append(DamagedFile(f"slot {h.name} was refused: {exc.message} (a tampered slot?)",
                                        file=h.name))
            continue
        if not try_slot(session, h, cred):
            continue
        try:
            session.actor = cred if unlock.method == "device" else find_installation_credential(session)
            session.load_cache()
            session.refresh()
            check_unlocking_credential(session)
            confirm_actor(session)
        except (WrongCredential, DamagedFile) as exc:
            # A slot that unwraps but is not vouched for by the vault (planted, or of an
            # unfinished operation): forget what it gave and try the next one.  When every slot is
            # older than the newest generation this installation has seen, old slot files were
            # restored in place of the current ones: a rollback, not a wrong credential.
            seen = session.local.load_generation()
            refusal: VaultError = exc
            if any(x.generation > h.generation for x in headers):
                # newer slots exist: the keys rolled when this credential was replaced or revoked
                refusal = WrongCredential(f"this {what} was replaced or revoked in vault {vid} (it opens only "
                                          f"the keys of generation {h.generation}, before the change); use the "
                                          "current one. Nothing was changed")
            elif all(x.generation < seen for x in headers):
                refusal = RolledBack(
                    f"vault {vid} presents slots of master-secret generation {h.generation}, older than generation "
                    f"{seen} this installation already saw: old slot files were restored (the storage rolled the "
                    "vault back). Nothing was changed; restore the newer slots/ files from another copy or a backup",
                    file=h.name)
            refusals.append(refusal)
            session.reset_reading()
            session.keyring.drop_master()
            session.actor = None
            continue
        break
    else:
        if refusals:
            raise next((r for r in refusals if isinstance(r, RolledBack)), refusals[0])
        broken = [p for t, p in damaged if t in (None, int(stype))]
        if broken and not candidates:
            raise DamagedFile(
                f"the {what} slot of vault {vid} is damaged ({broken[0].file}); unlock with another credential "
                "(recovery phrase, passphrase or a device key)", file=broken[0].file)
        if not candidates and unlock.method == "recipient":
            raise WrongCredential(f"vault {vid} has no trusted person's recovery key; unlock with your passphrase "
                                  "or recovery phrase")
        if not candidates and unlock.method != "device":
            # every vault keeps a passphrase and a recovery slot: another device's key change is arriving
            # (a sync that carries deletions first can leave no slot at all for a while)
            lost = "" if headers else (" If nothing is syncing, the folder lost its slots/ files: restore them "
                                       "from a backup or another copy.")
            raise Incomplete(f"vault {vid} has no {what} slot here yet (another device changed the vault's keys "
                             "and its new key files have not all arrived): wait for the sync to finish, or unlock "
                             f"with another credential.{lost}")
        if not candidates:
            raise WrongCredential(f"vault {vid} has no {what} slot; unlock with another credential")
        if unlock.method == "device":
            raise WrongCredential(
                f"this device's key does not open vault {vid} (it may have been revoked); "
                "unlock with your passphrase or recovery phrase")
        if unlock.method == "recipient":
            raise WrongCredential(f"this recovery key is not one of vault {vid}'s (it was never added, or it was "
                                  "removed); nothing was changed")
        raise WrongCredential(f"wrong {what} for vault {vid}; nothing was changed. Try again.")
    session.unlocked_with = what
    if session.actor is not None:
        session.open_device_state()
    session.update_memory()


def _list_while_deriving(shelf: FolderShelf, derive: Callable[[slots.SlotHeader], Credential],
                         header: slots.SlotHeader) -> None:
    """Derive the passphrase's key (Argon2id, in C without the interpreter lock: 64 MiB and a few
    hundred milliseconds) on a worker thread while this one lists the folder, which the open reads
    next (100,000 files at a million records: about as long).  Not when a local state will likely
    be resumed: it keeps the listing, and the first scan then lists only what moved since
    (:meth:`~camillo.storage.FolderShelf.prime`).  The shelf is this thread's alone; the
    worker only derives (``derive`` keeps what it derived; a failure is met again by the caller)."""
    def work() -> None:
        with contextlib.suppress(Exception):  # (raised again where the caller derives it)
            derive(header)

    worker = threading.Thread(target=work, name="camillo-kdf", daemon=True)
    worker.start()
    try:
        shelf.list()
    finally:
        worker.join()


def _own_seal_first(session: Session, candidates: list[slots.SlotHeader],
                    derive: Callable[[slots.SlotHeader], Credential]) -> list[slots.SlotHeader]:
    """The slot of this credential whose master secret this installation's key is sealed under (no OS
    keychain) first, when the newest one's is not: the credential's older slot is still there after a
    key change this device began and a crash interrupted, or while another device's change is syncing
    (spec §16.10 rule 10).  Opening the newest instead would find no key and register a new one.  Also
    among slots of one generation: two rolls made at once (an erasure beside a revocation) each gave the
    passphrase a slot, and opening the other roll's left this device reading without writing, unable to
    join the two (found by review: about 1 run in 3)."""
    sealed = seal_table(session)
    if len(candidates) < 2 or not sealed:
        return candidates
    for i, h in enumerate(candidates):
        if h.generation not in sealed:
            continue  # (no key derivation for a slot that cannot lead to the seal)
        try:
            vms = slots.unwrap_vms(h, session.vault_id, derive(h).recipient)
        except (CryptoFailure, VaultError):
            continue
        if seal_opens(session, sealed, vms, h.generation):
            return [h, *candidates[:i], *candidates[i + 1:]] if i else candidates
    return candidates


def try_slot(session: Session, header: slots.SlotHeader, cred: Credential) -> bool:
    try:
        vms = slots.unwrap_vms(header, session.vault_id, cred.recipient)
    except CryptoFailure:
        return False
    session.keyring.set_master(vms, header.generation)
    session.unlocking, session.unlock_slot = cred, header
    return True


def check_unlocking_credential(session: Session) -> None:
    """The slot we used must be signed by an owner, and our credential must be a current owner
    of this vault (a planted slot or an old passphrase fails here)."""
    roster, vid = session.roster, session.vault_id.hex()[:12]
    if roster.genesis is None:
        raise Incomplete(
            f"vault {vid} is incomplete or damaged: its genesis record is missing "
            "(wait for the sync to finish, or run 'camillo verify')"
        )
    cred = session.unlocking
    if cred is None:
        raise AssertionError("no unlocking credential")
    p = roster.principals.get(cred.writer_id)
    if (p is None or cred.writer_id in roster.revocations) and opened_own_seal(session):
        # Replaced (or set at the same time as the passphrase that counts, §14.6), but it opened the master
        # secret this installation's key is sealed under: the seal's AEAD authenticates that master secret,
        # and the device, a current owner, acts.  The device then moves to the newest master secret through
        # its own slot and hands over the epochs only this one delivers (spec §16.10 rule 8).
        session.notices.append(Notice("passphrase-replaced", (
            f"the {cred.kind.label} typed was changed on another device (the change made there counts); it still "
            f"opened this device's own key this time: use the {cred.kind.label} set there from now on")))
        return
    if p is None:
        raise WrongCredential(
            f"this {cred.kind.label} opens a slot of vault {vid} that its owners never authorised (a planted or "
            f"unfinished slot, or a {cred.kind.label} set at the same time as another one on another device, "
            "which counts: use that one); nothing was read"
        )
    if cred.writer_id in roster.revocations:
        raise WrongCredential(f"this {cred.kind.label} was replaced or revoked in vault {vid}; use the current one")
    if session.unlock_slot is not None:
        st = slots.read_statement(session.unlock_slot, session.vault_id, session.keyring.master_secret())
        if st.recipient_id == cred.recipient_id and not any(sig[0] in roster.principals for sig in st.signatures):
            # signed by a device whose certificate has not arrived (a new key, after a key change elsewhere)
            raise Incomplete(
                f"vault {vid} is incomplete: slot {session.unlock_slot.name} is signed by a device whose "
                "certificate has not arrived yet (wait for the sync to finish, or run 'camillo verify')",
                file=session.unlock_slot.name)
        if st.recipient_id != cred.recipient_id or not session.statement_signed(st.signatures, st.message):
            raise WrongCredential(
                f"slot {session.unlock_slot.name} is not signed by an owner of this vault; it was not used"
            )


def opened_own_seal(session: Session) -> bool:
    """Whether this session's actor is this installation's device key, taken from its local seal under the
    master secret the unlock gave, a current owner, and that master secret older than the newest (spec §16.10
    rule 10: the device moves on through its own slot), or of the newest while another master secret stands
    beside it (rule 9: the join needs this device), or of the newest while no passphrase that counts has a slot
    of it here: two passphrases set at once, the one set here the one that does not count, this device's key
    sealed only under the rolls it made, and a concurrent erasure elsewhere that replaced the other device's key,
    so that no other device holds both master secrets (found by the key-change hunt).  Otherwise a slot of the
    newest generation for a credential that does not count is not used, even on the device that wrote it.
    (The generation tests read slot files a host can forge or withhold, so a passphrase a modified client minted
    may open this device's key then; whoever minted it held the master secret, which opens the seal anyway, and
    the credential still counts for nothing.  What authenticates is the seal's AEAD.)"""
    actor, used = session.actor, session.unlock_slot
    if not session.key_from_seal or actor is None or actor.kind != CredentialKind.DEVICE or used is None:
        return False
    roster = session.roster
    if not roster.active_owner(actor.writer_id):
        return False
    newest = max((h.generation for h in session.slot_headers(ask_store=False)[0]), default=0)
    if used.generation < newest or another_master_secret(session, used.generation):
        return True
    counting = {p.recipient_id for p in roster.principals.values()
                if p.kind == CredentialKind.PASSPHRASE and p.writer_id not in roster.revocations}
    return not any(h.type == slots.SlotType.PASSPHRASE and st.recipient_id in counting for h, st in session.current_slots())


def catch_up_generation(session: Session) -> bool:
    """Another device rolled the master secret (an erasure, a revocation) while this session was
    open: it left this device a slot of the new generation.  Take the new master secret from it
    and read the vault again, exactly as an open would; if no current owner signed that slot (a
    planted one), go back to the old secret and ignore it.  True when the session moved on."""
    actor, keyring = session.actor, session.keyring
    if actor is None or actor.kind != CredentialKind.DEVICE or not keyring.unlocked or session.read_only:
        return False
    slot_files = session.shelf.files_in("slots") if isinstance(session.shelf, FolderShelf) else frozenset()
    look = (slot_files, len(session.roster.epochs))  # (a roll's records, arriving after its slots, announce epochs)
    if look == session.known_slot_files:
        return False  # no slot appeared or went away, and no epoch was announced, since the last look
    session.known_slot_files = look
    # the slot files just compared are the mirror's as the last listing left them: enough here
    newer = sorted((h for h in session.slot_headers(ask_store=False)[0] if h.type == slots.SlotType.DEVICE
                    and h.generation > keyring.generation and h.name not in session.refused_slots),
                   key=lambda h: (-h.generation, h.name))
    for h in newer:
        try:
            vms = slots.unwrap_vms(h, session.vault_id, actor.recipient)
        except CryptoFailure:
            continue
        old = (SecretBytes(keyring.master_secret()), keyring.generation)
        try:
            st = slots.read_statement(h, session.vault_id, vms)
        except VaultError:
            session.refused_slots.add(h.name)
            continue
        # Signed by this device: its own roll, in flight or stopped by a crash.  Before its records it announced
        # nothing (the master secret of a change that never happened).  After them, the EPOCH records of its new
        # epochs name its generation, and their secrets are wrapped to the new owner key alone (not to this
        # keyring's): only then, and only if that master secret delivers one of them, does the device move on.
        own = any(w == actor.writer_id for w, *_ in st.signatures)
        announced = {ref for ref in epochs_not_here(session)
                     if session.roster.epochs[ref].generation == h.generation} if own else set()
        if own and not announced:
            continue
        held = session.keyring.secrets()  # what the newer keyring may lack (a concurrent change, §16.10)
        session.adopt_master_secret(vms, h.generation, remember=False)  # (a trial: it may go back)
        roster = session.roster
        vouched = st.recipient_id == actor.recipient_id and session.statement_signed(st.signatures, st.message)
        if (vouched and (not own or announced & session.keyring.epoch_secrets.keys())
                and actor.writer_id in roster.principals and actor.writer_id not in roster.revocations):
            session.carried.update(held)
            session.update_memory()  # (kept: remembered before the older seals go)
            after_generation_roll(session)
            session.update_memory()
            if session.after_move is not None:
                session.after_move()  # (a revoked credential may hold it: rolled again first, §16.10 rule 9)
            return True
        if not own:  # (an own roll not announced yet may be once its records are read: looked at again then)
            session.refused_slots.add(h.name)
        session.adopt_master_secret(old[0].get(), old[1], remember=False)
        session.known_slot_files = (slot_files, len(session.roster.epochs))
    return False


def epochs_not_here(session: Session) -> set[tuple[bytes, bytes]]:
    """The epochs an EPOCH record announces, that no ERASE destroyed, whose secret this keyring lacks: the
    sync has not brought their envelopes yet, or only another master secret delivers them."""
    r, held = session.roster, session.keyring.epoch_secrets
    destroyed = r.destroyed_epochs()
    return {ref for ref in r.epochs if ref not in held and ref not in destroyed}


# ---------------------------------------------------------------------------------- agents


def open_with_grant(session: Session, path: str) -> None:
    """Open as the agent holding the grant file at ``path``, with exactly its rights."""
    g, scope_ids = read_grant_file(path)
    vid = session.vault_id.hex()[:12]
    if g.vault_id != session.vault_id:
        raise WrongCredential(f"this grant is for vault {g.vault_id.hex()[:12]}, not vault {vid}")
    if g.not_after is not None and time.time() > g.not_after:
        raise Revoked(f"the grant of agent {g.agent} expired on "
                      f"{time.strftime('%Y-%m-%d', time.gmtime(g.not_after))}; ask the vault's owner for a new one")
    session.actor = g.credential
    session.grant = g
    session.grant_scope_ids = scope_ids
    session.reader.grant_recipient = g.credential.recipient
    session.reader.grant_trusted = dict(g.trusted)
    session.unlocked_with = f"grant of agent {g.agent}"
    session.load_cache()
    session.refresh()
    roster = session.roster
    if roster.genesis is not None:
        p = roster.principals.get(g.writer_id)
        if p is None or p.grant is None or p.grant.grant_id != g.grant_id:
            raise WrongCredential(f"vault {vid} does not know the grant of agent {g.agent} (not synced yet, or "
                                  "not a grant of this vault)")
        rev = roster.revocations.get(g.writer_id)
        if rev is not None:
            when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(rev.ts)) if rev.ts else "an unknown date"
            raise Revoked(f"the grant of agent {g.agent} was revoked on {when}; it can no longer read or write "
                          f"vault {vid}")
    elif any(level != Level.APPEND for level in g.scopes.values()):
        raise WrongCredential(f"the grant of agent {g.agent} finds no readable key in vault {vid} "
                              "(revoked, not synced yet, or not a grant of this vault)")
    session.open_device_state()
    session.update_memory()
