"""The unlocked vault: one :class:`Session` per open vault, below the facade.

A session holds who is acting (this installation's device key, or an agent's grant), the
credential the user unlocked with, the keys (:class:`~camillo.session.keyring.KeyRing`), what was
read (:class:`~camillo.session.reader.Reader`), this actor's durable device state (own counters,
rollback memory, spec §17.5, §18.4) and its disposable cache.  The operations in :mod:`camillo.ops`
take a session; the facade :class:`camillo.Vault` owns one.

Names: *the materialised state* is the SQLite view of records and facts
(``session.reader.materialized``); *the device state* is this actor's sealed memory of the vault
(``session.device_state``, saved by ``session.device_state_store``); *the local files* are this
installation's own files about the vault (``session.local``).

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator, MutableMapping, Sequence
from typing import Any

from .. import ids, slots
from ..cache import Cache, DatabaseError, is_damage
from ..control import BatchView, Level, Roster
from ..credentials import Credential, CredentialKind
from ..devicestate import DeviceState, DeviceStateStore
from ..errors import (
    AccessDenied,
    DamagedFile,
    KeychainError,
    ReadOnlyVault,
    StorageError,
    UsageError,
    VaultError,
)
from ..localstate import VaultLocal
from ..log import Alert, CausalLog, Vouched, check_memory
from ..names import kind_of
from ..packshelf import PackShelf
from ..primitives import KdfParams, RecipientKey, SigningKey, verify_signature
from ..records import Authority, Kind, encode_record
from ..revocation import revocation_body
from ..state import State
from ..storage import FolderShelf
from ..values import Notice, Problem
from .grantfile import GrantFile
from .keyring import KeyRing
from .reader import Reader

FileList = list[tuple[str, bytes]]


class Session:
    def __init__(self, shelf: FolderShelf | PackShelf, vault_id: bytes, home: str | None = None) -> None:
        self.shelf = shelf
        self.vault_id = vault_id
        self.local = VaultLocal(vault_id, home)
        self.read_only = not shelf.writable
        self.verifying = False  # opened read_only on purpose: compare the device memory, never save it
        self.unlocked_with = ""  # what the user unlocked with, for status bars
        self.locked = False
        self.keyring = KeyRing(vault_id)
        self.reader = Reader(shelf, vault_id, self.keyring)
        self.reader.scratch_root = os.path.join(self.local.cache_dir, "scratch")
        self.actor: Credential | None = None  # who writes: this installation's device, or a grant
        self.grant: GrantFile | None = None  # when opened as an agent
        self.grant_scope_ids: dict[str, bytes] = {}
        self.unlocking: Credential | None = None  # the credential the user unlocked with
        self.unlock_slot: slots.SlotHeader | None = None
        self.device_state = DeviceState()
        self.device_state_store: DeviceStateStore | None = None
        # An open with no acting device (verify, a reader that never registered) remembers what it saw
        # under its unlocking credential instead: every open that holds a key notices a rollback.
        self.memory_store: DeviceStateStore | None = None
        self.cache: Cache | None = None
        self.cache_problem = ""
        self.use_cache = True
        self.alerts: list[Alert] = []
        self.notices: list[Notice] = []  # said once to the person (a key rotated, writes sealed again)
        # epoch secrets held before moving to a newer master secret, which its keyring may lack
        self.carried: dict[tuple[bytes, bytes], bytes] = {}
        self.scheduled_check: tuple[float, int] = (0.0, -(1 << 30))  # see ops.rekey.scheduled_epochs
        self.refused_slots: set[str] = set()  # newer slots for this device that no owner vouched for
        # the slot files and the number of epochs announced at the last generation check (catch_up_generation)
        self.known_slot_files: tuple[frozenset[str], int] | None = None
        # the slot files, and the numbers of revocations and epochs, at the last look for other master secrets and
        # for a revoked credential that may hold the current one (a roll's records can arrive after its slots)
        self.branch_checked: tuple[frozenset[str], int, int] | None = None
        # what the facade runs when this session moves to a newer generation mid-work (catch_up_generation)
        self.after_move: Callable[[], object] | None = None
        self.keychain_problem = ""  # the keychain holding this installation's key is locked or unreachable
        # why this installation's key, not lost, cannot be used now: it is sealed under another master secret
        # of this generation (waiting for the join, spec §16.10 rule 9), or under an older one that the
        # current one did not replace (the passphrase this device last opened the vault with opens it)
        self.key_waiting = ""
        # this installation's key came from its local seal under the master secret of this session's
        # unlock (which the seal's AEAD authenticates): see unlock.check_unlocking_credential
        self.key_from_seal = False
        # Argon2id parameters proven for a passphrase (recipient id -> parameters): a re-authentication in this
        # session derived, with them, the key of a passphrase the roster counts (the unlocking credential is
        # asked directly: ops.rekey.trusted_kdf).  A roll issues that passphrase's new slot with them, not with
        # what a slot file says (spec §16.6 step 3)
        self.proven_kdf: dict[bytes, KdfParams] = {}
        self.key_from_previous = False  # found under a master secret a random roll handed on (spec §16.6)
        self.previous_owners: list[RecipientKey] = []  # the owner keys of those master secrets (to hand over)

    def __repr__(self) -> str:
        return f"Session({self.vault_id.hex()[:12]}, {self.shelf.location!r})"

    # ------------------------------------------------------------------------------ what was read

    @property
    def roster(self) -> Roster:
        return self.reader.roster

    @property
    def log(self) -> CausalLog:
        return self.reader.log

    @property
    def batches(self) -> MutableMapping[bytes, BatchView]:
        return self.reader.batches

    @property
    def materialized(self) -> State:
        return self.reader.materialized

    def refresh(self) -> bool:
        """Read what is new in the folder (see :meth:`Reader.refresh`); what moved is collected
        for the next ``self.reader.changes()``."""
        return self.reader.refresh()

    def reset_reading(self) -> None:
        """Forget every key below the master secret and everything read with them."""
        self.keyring.forget_epoch_keys()
        self.reader.reset()
        self.refused_slots = set()
        self.known_slot_files = None
        self.keychain_problem = self.key_waiting = ""
        self.key_from_seal = self.key_from_previous = False
        self.previous_owners = []

    def reread_keys(self, segments: Iterable[str] = (), *, everything: bool = False, remember: bool = True) -> None:
        """Envelopes changed (a new keyring): read every epoch key again, then what the new keys may
        open (segments that could not be read) and ``segments`` (forgotten by the caller); what was
        read stays, as it does not depend on the keys that opened it.  ``everything``: consider every
        file of the folder again (another device's roll, whose files this one did not write).
        ``remember`` False: what this device remembers (its generation among it) is left as it is."""
        self.keyring.forget_epoch_keys()
        self.keyring.epoch_publics.clear()
        if everything:
            self.reader.rescan_all = True
        else:
            self.reader.read_again(segments)
        self.refresh()
        if remember:
            self.update_memory()

    def adopt_master_secret(self, vms: bytes, generation: int, *, remember: bool = True) -> None:
        """Another device rolled the master secret (a credential change, a revocation, an erasure):
        the keys below it are derived again from the envelopes and the folder is read for what
        changed.  What was read stays, as it does not depend on the master secret: an erasure's
        re-sealed batches come back from their new segments, the epochs it destroyed are
        forgotten, and the erased records keep no content in the state (``camillo.erased.scrub``).
        ``remember`` False: a trial, which may go back (its generation is not remembered as seen)."""
        self.keyring.set_master(vms, generation)
        self.known_slot_files = None
        self.keychain_problem = self.key_waiting = ""
        self.reread_keys(everything=True, remember=remember)

    def after_erasure(self) -> None:
        """This device erased and deleted the old segments (their batches were moved to the new
        ones first: :meth:`Reader.resealed`): the keys are read again under the rolled master
        secret.  The erased records' rows were scrubbed and the full-text index and the write-ahead
        log purged when the erasure was read (spec §16.4)."""
        self.refused_slots = set()
        self.known_slot_files = None
        self.reread_keys()

    # ------------------------------------------------------------------------------ compartments

    @property
    def compartments(self) -> dict[str, bytes]:
        """Data compartments by name (what this credential can address)."""
        return {n: c for c, n in sorted(self.roster.compartments.items(), key=lambda x: x[1])}

    def all_compartments(self) -> list[bytes]:
        """The control compartment, then every data compartment."""
        if self.roster.control_id is None:
            raise AssertionError("the roster has no control compartment yet")
        return [self.roster.control_id, *self.roster.compartments]

    def compartment_id(self, name: str) -> bytes:
        cid = self.roster.compartment_id(name)
        if cid is None and self.grant is not None:
            cid = self.grant_scope_ids.get(name)
        if cid is None:
            raise UsageError(
                f"vault {self.vault_id.hex()[:12]} has no compartment '{name}'; it has: "
                f"{', '.join(sorted(self.roster.compartments.values()))}"
            )
        return cid

    def compartment_name(self, cid: bytes) -> str:
        name = next((n for n, c in self.grant_scope_ids.items() if c == cid), None) if self.grant else None
        return name or self.roster.compartment_name(cid)

    # ------------------------------------------------------------------------------ who may do what

    def require_writer(self) -> Credential:
        if self.read_only:
            if isinstance(self.shelf, FolderShelf) and not self.shelf.writable:
                raise ReadOnlyVault(
                    f"the vault folder {self.shelf.location} cannot be written (a read-only mount, or no write "
                    "permission), so the vault is open read-only and nothing was changed: make the folder writable "
                    "and open the vault again")
            raise ReadOnlyVault(
                f"{os.path.basename(self.shelf.location)} is open read-only"
                + (" (a .vmem file: unpack it to change it)" if isinstance(self.shelf, PackShelf) else "")
            )
        if self.actor is None:
            if self.key_waiting:
                raise ReadOnlyVault(f"{self.key_waiting}; nothing was written")
            if self.keychain_problem:
                raise KeychainError(f"{self.keychain_problem}; this installation's device key is kept there, so "
                                    "this session can read but not write: unlock the keychain and open the vault again")
            raise ReadOnlyVault("this vault was opened without a writer; open it again to register this installation")
        return self.actor

    @property
    def is_owner(self) -> bool:
        """The master secret is here and a device of the owner acts (not an agent's grant)."""
        return self.keyring.unlocked and self.actor is not None and self.actor.kind == CredentialKind.DEVICE

    def require_owner(self, what: str) -> Credential:
        if not self.is_owner and self.grant is None:  # an owner's open that cannot write: say why
            self.require_writer()
        if not self.is_owner:
            raise AccessDenied(f"{what} needs the vault owner's credential (a passphrase, recovery phrase or device "
                               "key); an agent grant cannot do it")
        return self.require_writer()

    def require_read(self) -> None:
        """An append-only grant reads nothing (spec §16.1)."""
        g = self.grant
        if g is not None and all(lv == Level.APPEND for lv in g.scopes.values()):
            raise AccessDenied(f"the grant of agent {g.agent} ({g.grant_id.hex()[:12]}) is append-only: it can add "
                               "records but not read any (rule: append grants never read)")

    def check_grant(self, cid: bytes, *, write: bool, read: bool = False, authority: int | None = None,
                    key: str | None = None) -> None:
        """Refuse what the grant in use does not allow, naming the grant and the rule."""
        g = self.grant
        if g is None:
            return
        name = self.roster.compartment_name(cid)
        level = None
        for scope_name, lv in g.scopes.items():
            if self.grant_scope_ids.get(scope_name) == cid:
                level = lv
        who = f"the grant of agent {g.agent} ({g.grant_id.hex()[:12]})"
        if level is None:
            raise AccessDenied(f"{who} gives no access to compartment {name} (rule: a grant covers only its "
                               "compartments)")
        if read and level == Level.APPEND:
            raise AccessDenied(f"{who} is append-only for {name}: it can add records but not read any "
                               "(rule: append grants never read)")
        if write and level == Level.READ:
            raise AccessDenied(f"{who} is read-only for {name} (rule: read grants cannot write)")
        if authority is not None and authority > g.max_class:
            raise AccessDenied(f"{who} may write at most {g.max_class.label} authority, not "
                               f"{Authority(authority).label} (rule: only the user writes with user authority; "
                               "agents stay within their grant's maximum)")
        if key is not None and level == Level.APPEND:
            prefix = f"append/{g.grant_id.hex()}/"
            if not key.startswith(prefix):
                raise AccessDenied(f"{who} may only write keys under {prefix} (rule: appenders write in their own "
                                   "key namespace)")

    # ------------------------------------------------------------------------------ slots

    def slot_headers(self, *, ask_store: bool = True) -> tuple[list[slots.SlotHeader], list[tuple[int | None, Problem]]]:
        """Readable slot headers, and the damaged slots with the credential type they claim.
        ``ask_store=False``: a mirror's slots as its last listing of the store left them."""
        out, damaged = [], []
        # a plain folder lists its slots directory alone (a stat when unchanged), not the whole vault;
        # a mirror of an object store must ask the store first (its list()), unless told otherwise
        shelf = self.shelf
        if isinstance(shelf, FolderShelf) and (type(shelf) is FolderShelf or not ask_store):
            names = sorted(shelf.files_in("slots"))
        else:
            names = shelf.list()
        for name in names:
            if kind_of(name) != "slot":
                continue
            data = b""
            try:
                data = self.shelf.read(name)
                out.append(slots.read_header(data, name))
            except FileNotFoundError:
                continue
            except VaultError as exc:
                damaged.append((data[9] if len(data) > 9 else None, Problem("damaged", name, exc.message)))
        return out, damaged

    def statement_signed(self, signatures: Sequence[Sequence[Any]], message: bytes) -> bool:
        """Is a slot statement signed by a current owner of the vault?"""
        for wid, alg, sig in signatures:
            p = self.roster.principals.get(wid)
            if p is not None and p.is_owner and wid not in self.roster.revocations:
                if verify_signature(alg, p.sig_public, message, sig):
                    return True
        return False

    def current_slots(self, *, ask_store: bool = True) -> Iterator[tuple[slots.SlotHeader, slots.SlotStatement]]:
        """The current generation's slots whose statement opens under the master secret
        (``ask_store``: as :meth:`slot_headers`)."""
        vms = self.keyring.master_secret()
        for h in self.slot_headers(ask_store=ask_store)[0]:
            if h.generation != self.keyring.generation:
                continue
            try:
                yield h, slots.read_statement(h, self.vault_id, vms)
            except VaultError:
                continue

    def build_slot(self, recipient_public: bytes, stype: slots.SlotType, label: str, *,
                   kdf: KdfParams | None = None, signer: Credential | None = None, generation: int | None = None,
                   vms: bytes | None = None) -> tuple[str, bytes]:
        """A slot wrapping the master secret (this generation's, unless given) to a recipient key,
        signed by ``signer`` (this session's writer, unless given)."""
        signer = signer or self.require_writer()
        sid = ids.new_random_id()
        data = slots.build_slot(
            vault_id=self.vault_id, slot_id=sid, slot_type=stype, generation=generation or self.keyring.generation,
            vms=vms or self.keyring.master_secret(), recipient_public=recipient_public,
            recipient_id=ids.recipient_id(recipient_public), kdf=kdf, label=label, signer=signer.signer,
            signer_id=signer.writer_id,
        )
        return slots.file_name(sid), data

    def write_slot(self, cred: Credential, stype: slots.SlotType, label: str) -> str:
        name, data = self.build_slot(cred.recipient.public, stype, label, kdf=cred.kdf)
        self.shelf.write(name, data)
        return name

    # ------------------------------------------------------------------------------ files

    def write_files(self, files: FileList) -> list[str]:
        """Write an operation's new files (key files, re-encrypted segments), which go before the
        control records that announce them.  If one cannot be written (the disk is full, the folder
        became read-only), the ones written so far are deleted again: nothing announces them yet, so
        the failed operation leaves the vault as it found it (as its error message says).  Returns
        the names written, for ``write_batches(undo=...)`` when the records announcing them cannot
        be written either."""
        if isinstance(self.shelf, FolderShelf):
            return self.shelf.write_all(files)  # in parallel, each directory fsynced once
        written: list[str] = []
        try:
            for name, data in files:
                if self.shelf.write(name, data):
                    written.append(name)
        except VaultError:
            self.delete_quietly(reversed(written))
            raise
        return written

    def delete_files(self, names: Iterable[str]) -> None:
        """Delete vault files an operation replaced (a key change's old envelopes, an erasure's or a
        compaction's old segments): in a folder, each directory is fsynced once at the end."""
        if isinstance(self.shelf, FolderShelf):
            self.shelf.delete_all(names)
        else:
            for name in names:
                self.shelf.delete(name)

    def delete_quietly(self, names: Iterable[str]) -> None:
        """Delete files an operation wrote before it failed (nothing announces them)."""
        for name in names:
            try:
                self.shelf.delete(name)
            except VaultError:
                pass

    @contextlib.contextmanager
    def unannounced_files(self, announce: bytes, names: list[str]) -> Iterator[None]:
        """Around an operation that writes vault files before the record ``announce`` that refers
        to them: their names are noted durably in the local files first, so that if a crash comes
        before that record is written the next open deletes them (nothing refers to them) instead of
        leaving them for good (spec §12.4, §16.4).  One such operation at a time per installation."""
        with self.local.operation_lock():
            self.resolve_unannounced()
            self.local.save_pending(announce, names)
            yield
            self.local.clear_pending()

    def finish_unannounced(self) -> None:
        """On a writable open: the files of an operation of this installation that a crash
        interrupted before its announcing record are deleted (unless that operation still runs)."""
        if not isinstance(self.shelf, FolderShelf) or self.local.load_pending() is None:
            return
        with self.local.operation_lock(wait=False) as mine:
            if mine:
                self.resolve_unannounced()

    def resolve_unannounced(self) -> None:
        pending = self.local.load_pending()
        if pending is None:
            return
        announce, names = pending
        if not any(announce in v.header.records for v in self.batches.values()):
            doomed = [n for n in names if self.shelf.exists(n)]
            try:
                for name in doomed:
                    self.shelf.delete(name)
            except VaultError:
                return  # kept for the next writable open
            finally:
                if doomed:
                    self.refresh()
        self.local.clear_pending()

    def folder(self) -> FolderShelf:
        """The vault folder, for writing (a ``.vmem`` file is never written)."""
        if not isinstance(self.shelf, FolderShelf):
            self.read_only = True
            self.require_writer()  # raises, naming the .vmem file
        if not isinstance(self.shelf, FolderShelf):
            raise AssertionError("unreachable")
        return self.shelf

    def unfinished_write(self, ds: DeviceState) -> bool:
        """The last write ``ds`` remembers has a segment not renamed into place yet.  They are renamed
        in order, so the last one's temp file says it (one stat, not one per segment: a bulk write
        stages hundreds, and every open asks)."""
        staged = ds.extra.get("staged") or []
        return (bool(staged) and isinstance(self.shelf, FolderShelf) and not self.read_only
                and self.shelf.is_staged(*staged[-1]))

    def commit_staged(self) -> bool:
        """Finish the last write of this actor if a crash interrupted it after its counter was
        persisted: rename its staged segments into place.  True when one was finished."""
        done = False
        if self.unfinished_write(self.device_state):
            for name, tmp in self.device_state.extra["staged"]:
                if not self.shelf.exists(name):
                    done = self.folder().commit(name, tmp) or done
        return done

    # ------------------------------------------------------------------------------ records

    def revoke_record(self, subject: bytes, reason: str, *, signers: Sequence[SigningKey]) -> bytes:
        """A REVOKE of ``subject`` with what this device has seen of every chain (its pins); its
        author is the last signer (the acting device)."""
        author = ids.writer_id(signers[-1].alg, signers[-1].public)
        return encode_record(Kind.REVOKE, author, body=revocation_body(subject, self.log.chains, reason),
                             signers=list(signers))

    def erasure_manifests(self) -> list[bytes]:
        """The erasures a key made now has nothing to fear from (it never opened what they destroyed)."""
        return sorted(m.record_id for m in self.roster.manifests.values() if m.kind == Kind.ERASURE_MANIFEST)

    # ------------------------------------------------------------------------------ device state

    def open_device_state(self) -> None:
        """Load this actor's device state (and finish a write a crash interrupted)."""
        if self.actor is None:
            raise AssertionError("no actor")
        store = self.device_state_store = DeviceStateStore(self.local.state_path(self.actor.writer_id),
                                                           self.actor.signer.seed, self.vault_id)
        loaded = store.load()
        if loaded is not None:
            self.device_state = loaded
            if self.unfinished_write(loaded):
                with store.locked():
                    self.device_state = store.load() or loaded
                    if self.commit_staged():
                        self.refresh()  # a write a crash interrupted is finished now

    def reader_memory(self) -> tuple[DeviceStateStore, DeviceState] | None:
        """Where an open without an acting device keeps what it saw (local state, never the vault
        folder): the unlocking credential's own memory.  None for a ``.vmem`` (a snapshot: an older
        one is not a rollback) and for an open that holds no user credential."""
        cred = self.unlocking
        if self.memory_store is None and cred is not None and isinstance(self.shelf, FolderShelf):
            self.memory_store = DeviceStateStore(self.local.state_path(cred.writer_id), cred.signer.seed,
                                                 self.vault_id)
        if self.memory_store is None:
            return None
        try:
            return self.memory_store, self.memory_store.load() or DeviceState()
        except VaultError:
            return self.memory_store, DeviceState()  # damaged: start remembering again

    def update_memory(self) -> None:
        """Check the vault against what this device (or, for an open without one, its unlocking
        credential) remembers, then remember the union (spec §17.5), read-only opens included: the
        memory lives in this installation's local state, never in the vault folder."""
        store, ds = self.device_state_store, self.device_state
        me = self.actor.writer_id if self.actor is not None else None
        if store is None and (mine := self.reader_memory()) is not None:
            store, ds = mine
            me = self.unlocking.writer_id if self.unlocking is not None else None
        covered = Vouched(m.batches for m in self.roster.manifests.values())
        known = set(self.roster.epochs) if self.roster.genesis is not None else None
        on_file = self.local.load_generation()
        seen_generation = max(ds.generation, on_file)
        alerts, memory, first = check_memory(ds.remembered, ds.first_missing, seen_generation, self.reader.log_facts(), covered,
                                             self.keyring.generation, int(time.time()), ds.epochs, known, me)
        # An append grant remembers its own writes but can never read them back: no alert there.
        g = self.grant
        unread = {self.grant_scope_ids.get(n) for n, lv in g.scopes.items() if lv == Level.APPEND} if g else set()
        self.alerts = [a for a in alerts if a.compartment_id not in unread]
        generation = max(ds.generation, self.keyring.generation)
        epochs = dict(ds.epochs)
        if known is not None:
            for cid in self.all_compartments():
                current = self.roster.current_epoch(cid)
                if current is not None:
                    epochs[cid] = current.epoch_id
        if store is None:
            return
        if self.keyring.generation > on_file:
            self.local.save_generation(self.keyring.generation)
        if memory == ds.remembered and first == ds.first_missing and generation == ds.generation and epochs == ds.epochs:
            return
        try:
            with store.locked():
                on_disk = store.load() or ds
                on_disk.remembered, on_disk.first_missing, on_disk.generation = memory, first, generation
                on_disk.epochs = epochs
                store.save(on_disk)
                if store is self.device_state_store:
                    self.device_state = on_disk
        except (StorageError, OSError):
            if store is self.device_state_store and not self.read_only:
                raise  # a writer must remember what it saw; a reader just reports what it sees now

    def save_device_state(self, ds: DeviceState) -> None:
        if self.device_state_store is None:
            raise AssertionError("no device state here")
        self.device_state = ds
        self.device_state_store.save(ds)

    def accept_current_state(self) -> None:
        """After the user has looked at a rollback alert: remember the vault as it is now."""
        store = self.device_state_store
        if store is None:
            return
        with store.locked():
            ds = store.load() or self.device_state
            ds.remembered, ds.first_missing, ds.epochs = {}, {}, {}
            ds.generation = self.keyring.generation
            store.save(ds)
            self.device_state = ds
        self.update_memory()

    # ------------------------------------------------------------------------------ the local state

    def open_cache(self, actor: Credential) -> Cache:
        return Cache(self.local.cache_path(actor.writer_id), actor.signer.seed, self.vault_id)

    def load_cache(self) -> None:
        """Keep the state in this actor's local state database, opened in place: resume from what it
        holds, so only new segments are read.  Without an actor, on a read-only or ``cache=False``
        open, or while another process of this installation keeps it, the state stays in memory."""
        self.reader.detach()
        self.cache = None
        if self.actor is None or self.read_only or not self.use_cache:
            return
        cache = self.open_cache(self.actor)
        opened = cache.open(self.keyring.generation)
        if opened is None:
            return
        self.cache = cache
        problem = self.reader.attach(cache, *opened)
        if problem:
            self.cache_problem = problem

    def keep_state_for(self, actor: Credential) -> None:
        """This installation now acts as ``actor`` (registered, or a new key): the state read so far
        moves into its local state database (the previous key's is deleted)."""
        self.cache = None
        if self.read_only or not self.use_cache:
            return
        cache = self.open_cache(actor)
        if not cache.acquire():  # another process keeps it
            self.discard_cache()
            return
        self.reader.move_to(cache)
        self.cache = cache

    def discard_cache(self) -> None:
        """The actor no longer counts: its local state is deleted on close, not trusted again."""
        self.reader.store_doomed = self.reader.store is not None
        self.cache = None

    def guarded(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``method``; a page of the local state that did not authenticate during it raises
        :meth:`state_damaged`'s error instead (the database is never used again)."""
        try:
            return method(*args, **kwargs)
        except DatabaseError as exc:
            raise (self.state_damaged(exc) if is_damage(exc) else exc) from None

    def state_damaged(self, exc: DatabaseError) -> DamagedFile:
        """A page of the local state did not authenticate during a query (SQLite: "file is not a
        database"), or the state cannot go on (``exc`` says why): it is deleted on lock (the vault's
        files are intact) and the error to raise says so."""
        path = self.reader.store.path if self.reader.store is not None else self.local.cache_dir
        self.discard_cache()
        return DamagedFile(f"this installation's local state of the vault ({path}) cannot be used ({exc}: a page "
                           "did not decrypt, or it is damaged); it is deleted and rebuilt from the vault's files: "
                           "lock the vault and open it again. Nothing in the vault was affected", file=path)

    def save_cache(self) -> None:
        """Commit the local state now (an open commits every few seconds, and on lock)."""
        if self.reader.store is None or self.reader.store_doomed:
            return
        self.reader.settle(force=True)

    # ------------------------------------------------------------------------------ closing

    def close(self) -> None:
        """Drop every key and the decrypted state.  The session cannot be used afterwards."""
        if self.locked:
            return
        try:
            self.save_cache()
        except (VaultError, DatabaseError):
            self.reader.store_doomed = True  # the local state is disposable: it is rebuilt next time
        self.keyring.wipe()
        self.carried = {}
        self.unlocking = None
        self.unlock_slot = None
        self.actor = None
        self.grant = None  # an agent's grant file carries its credential's seeds
        self.cache = None  # holds the local cache key
        self.device_state_store = self.memory_store = None  # hold local state keys
        self.device_state = DeviceState()  # its kept epoch secrets go with the session
        self.reader.close()
        self.shelf.close()
        self.locked = True
