"""The vault facade: the one public way to create, open, read and change a VMEM vault.

The command line, the MCP server and the desktop app all go through :class:`Vault`; none of them
touches files, keys or records directly.  Every mutation returns a :class:`~camillo.changes.Changes`.

Opening a vault runs the reader pipeline of spec §20:

1. read the descriptor (a hint: the vault id) and the slots;
2. unlock: derive the credential (Argon2id for a passphrase) and unwrap the master secret from a
   slot, or use this installation's device key, or an agent grant;
3. open the envelopes addressed to the owner KEM key (or the grant) to get epoch secrets;
4. decrypt every segment whose epoch key is known; batches are deduplicated by id;
5. compute the roster from the control records, starting at the genesis record whose hash must be
   the vault id; check that the slot used and the unlocking credential are authenticated by it and
   that every epoch secret matches the commitment in its signed EPOCH record;
6. build the causal log (forks, gaps, authorisation) and the materialised state.

Threading: a Vault is confined to one thread (the desktop's vault worker).  The desktop installs a
guard with :func:`set_thread_guard` that raises when a facade method runs on the GUI thread.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import platform
import socket
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import cbor2

from . import descriptor, encoding, envelopes, ids, keychain, keys, segments, slots
from .cache import Cache
from .changes import Changes
from .control import BatchView, Roster, build_roster, owner_entry
from .credentials import Credential, CredentialKind, from_passphrase, from_recovery_phrase
from .devicestate import DeviceState, DeviceStateStore
from .errors import (
    AccessDenied,
    DamagedFile,
    KeychainError,
    LimitExceeded,
    NotAVault,
    ReadOnlyVault,
    StorageError,
    UsageError,
    VaultError,
    WriterFrozen,
    WrongCredential,
)
from .localstate import Installation, VaultLocal, atomic_write, open_local, read_file, seal_local
from .log import Alert, CausalLog, build_log, check_memory, extend_log
from .primitives import (
    CryptoFailure,
    KdfParams,
    RecipientKey,
    SecretBytes,
    constant_time_equal,
    new_recovery_phrase,
    random_bytes,
)
from .records import (
    KEYED_TYPES,
    Authority,
    Batch,
    BatchHeader,
    Kind,
    Record,
    batch_without_records,
    decode_record,
    encode_record,
    make_batch,
    validated_record,
)
from .state import FactView, RecordView, State, shown_ts
from .storage import FolderShelf, PackShelf, hash_matches, kind_of, open_shelf, segment_name

DEFAULT_COMPARTMENTS = ("personal", "work", "health")

_thread_guard: Callable[[], None] | None = None


def set_thread_guard(guard: Callable[[], None] | None) -> None:
    """Install a check run at the start of every facade call (the desktop asserts it is not on
    the GUI thread).  Pass None to remove it."""
    global _thread_guard
    _thread_guard = guard


def _api(method):
    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if _thread_guard is not None:
            _thread_guard()
        if getattr(self, "_locked", False):
            raise VaultError("the vault is locked; unlock it again to continue")
        return method(self, *args, **kwargs)

    return wrapper


@dataclass(frozen=True)
class Unlock:
    """How to open a vault.  Build one with the class methods; the secret is never shown."""

    method: str  # passphrase | recovery | device | grant
    secret: str | None = field(default=None, repr=False)
    path: str | None = None
    credential: Any = field(default=None, repr=False)  # a device credential held in memory (enrollment)
    enrolling: bool = False  # that credential was certified just now, after every erasure so far

    @classmethod
    def passphrase(cls, text: str) -> Unlock:
        return cls("passphrase", text)

    @classmethod
    def recovery(cls, phrase: str) -> Unlock:
        return cls("recovery", phrase)

    @classmethod
    def device(cls) -> Unlock:
        return cls("device")

    @classmethod
    def grant(cls, path: str) -> Unlock:
        return cls("grant", path=path)

    @classmethod
    def with_device_credential(cls, credential: Any, *, enrolling: bool = False) -> Unlock:
        """A device key already in memory (a device finishing its enrollment: ``enrolling=True``
        says its only slot was made after every erasure the vault has seen, so it has no
        pre-erasure key to rotate away)."""
        return cls("device", credential=credential, enrolling=enrolling)


@dataclass
class NewRecord:
    """One record to append, in the terms people and agents use (the CLI's JSON lines).

    ``type`` decides the operation: fact, preference and instruction are keyed PUTs; everything
    else is a NOTE.  ``authority`` defaults by role: what the user wrote is ``user``, what an
    assistant wrote is ``inferred``, tool, system and web content is ``external``.
    """

    type: str
    key: str | None = None
    value: Any = None
    text: str | None = None
    conversation: str | None = None
    role: str | None = None
    title: str | None = None
    authority: Authority | None = None
    sources: Sequence[bytes] = ()
    pred: Sequence[bytes] | None = None
    meta: dict[str, Any] | None = None
    ts: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.authority, str):  # "inferred", as in the CLI's JSON (UsageError if unknown)
            self.authority = Authority.parse(self.authority)

    def default_authority(self) -> Authority:
        if self.authority is not None:
            return self.authority
        if self.role in ("assistant", "model", "agent"):
            return Authority.INFERRED
        if self.role in ("tool", "system", "web", "function"):
            return Authority.EXTERNAL
        return Authority.USER

    @classmethod
    def from_json(cls, obj: Any) -> NewRecord:
        """Parse one JSON object of ``camillo add`` (raises UsageError naming the problem)."""
        if not isinstance(obj, dict):
            raise UsageError("each line must be a JSON object such as {\"type\": \"message\", \"text\": \"...\"}")
        typ = obj.get("type")
        if not isinstance(typ, str):
            raise UsageError("each record needs a \"type\" (message, conversation, fact, preference, instruction, ...)")
        known = {"type", "key", "value", "text", "conversation", "role", "title", "class", "sources", "pred",
                 "meta", "ts"}
        unknown = sorted(set(obj) - known)
        if unknown:
            raise UsageError(f"unknown field(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}")
        klass = obj.get("class")
        authority = Authority.parse(klass) if klass is not None else None

        def id_list(name: str) -> list[bytes]:
            v = obj.get(name) or []
            try:
                out = [bytes.fromhex(x) for x in v]
            except (TypeError, ValueError):
                raise UsageError(f"\"{name}\" must be a list of hex record ids") from None
            if any(len(x) != 32 for x in out):
                raise UsageError(f"\"{name}\" must list 64-digit hex record ids")
            return out

        meta = obj.get("meta")
        if meta is not None:
            if not isinstance(meta, dict) or not all(
                isinstance(v, (str, bool)) or (isinstance(v, int) and v >= 0) for v in meta.values()
            ):
                raise UsageError("\"meta\" must map names to text, non-negative integers or booleans")
        ts = obj.get("ts")
        if ts is not None and (not isinstance(ts, int) or isinstance(ts, bool) or ts < 0):
            raise UsageError("\"ts\" must be a Unix time in seconds")
        for name in ("text", "conversation", "role", "title", "key"):
            if obj.get(name) is not None and not isinstance(obj[name], str):
                raise UsageError(f"\"{name}\" must be text")
        return cls(
            type=typ, key=obj.get("key"), value=obj.get("value"), text=obj.get("text"),
            conversation=obj.get("conversation"), role=obj.get("role"), title=obj.get("title"),
            authority=authority, sources=id_list("sources"), pred=id_list("pred") if "pred" in obj else None,
            meta=meta, ts=ts,
        )


@dataclass(frozen=True)
class Problem:
    kind: str
    file: str
    message: str

    def to_json(self) -> dict[str, str]:
        return {"kind": self.kind, "file": self.file, "message": self.message}


def _hostname() -> str:
    try:
        return socket.gethostname() or "this computer"
    except OSError:
        return "this computer"


def _platform() -> str:
    return f"{platform.system()} {platform.release()}".strip()


def _json_to_cbor(v: Any, path: str = "value") -> Any:
    """JSON values into the CBOR profile (integers only: VMEM has no floats)."""
    if isinstance(v, float):
        if v.is_integer():
            return int(v)
        raise UsageError(f"{path}: VMEM stores no floating-point numbers; write {v!r} as text")
    if isinstance(v, list):
        return [_json_to_cbor(x, path) for x in v]
    if isinstance(v, dict):
        return {str(k): _json_to_cbor(x, path) for k, x in v.items()}
    return v


class Vault:
    """An open vault.  Use :meth:`create` or :meth:`open`; close with :meth:`lock`."""

    # ------------------------------------------------------------------------------ construction

    def __init__(self, shelf: FolderShelf | PackShelf, vault_id: bytes, home: str | None = None) -> None:
        self.shelf = shelf
        self.vault_id = vault_id
        self.local = VaultLocal(vault_id, home)
        self.read_only = not shelf.writable
        self.unlocked_with = ""  # what the user unlocked with, for status bars
        self._locked = False
        self._vms: SecretBytes | None = None
        self._generation = 0
        self._owner_kem: RecipientKey | None = None
        self._unlocking: Credential | None = None
        self._unlock_slot: slots.SlotHeader | None = None
        self.actor: Credential | None = None  # who writes: this installation's device, or a grant
        self.grant: Any = None  # the access.GrantFile when opened as an agent
        self._grant_scope_ids: dict[str, bytes] = {}
        self._state_store: DeviceStateStore | None = None
        self._cache: Cache | None = None
        self._cache_dirty = False
        self._cache_problem = ""
        self._use_cache = True
        self._verifying = False  # opened read_only on purpose: compare the device memory, never save it
        self._progress: Callable[[int, int], None] | None = None
        self.alerts: list[Alert] = []
        self.device_state = DeviceState()
        self.decryptions = 0  # segments decrypted by this object (tests count warm opens with it)
        self._reset_reading()

    def _reset_reading(self) -> None:
        """Forget every key below the master secret and everything read with them."""
        for s in getattr(self, "_epoch_secrets", {}).values():
            s.wipe()
        self._epoch_secrets: dict[tuple[bytes, bytes], SecretBytes] = {}
        self._epoch_keys: dict[tuple[bytes, bytes], RecipientKey] = {}
        self._epoch_publics: dict[tuple[bytes, bytes], bytes] = {}
        self._envelope_sources: dict[tuple[bytes, bytes], envelopes.EnvelopePayload] = {}
        self._seen_envelopes: set[str] = set()
        self.views: dict[bytes, BatchView] = {}
        self._segment_batches: dict[str, list[bytes]] = {}
        self._segment_epochs: dict[str, tuple[bytes, bytes]] = {}  # segment -> (compartment, epoch)
        self._segment_problems: dict[str, Problem] = {}
        self._unreadable: dict[str, tuple[bytes, bytes]] = {}
        self._incomplete: set[str] = set()  # content-addressed files not matching their names (yet)
        self._rescan_all = True  # the next refresh considers every file (not only what changed)
        self._scanned_at = -math.inf  # time.monotonic() of the last folder scan (see _write_batches)
        self._refused_slots: set[str] = set()  # newer slots for this device that no owner vouched for
        self._known_slot_files: frozenset[str] | None = None  # the slot files at the last generation check
        self._keychain_problem = ""  # the keychain holding this installation's key is locked or unreachable
        self.roster = Roster(self.vault_id)
        self.log = CausalLog()
        if getattr(self, "state", None) is not None:
            self.state.db.close()
        self.state = State()
        self._materialize_problems: list[tuple[str, str, str]] = []
        self._roster_fingerprint = b""
        # (global fingerprint, principals) of the last recompute in this session: a roster change
        # that only adds, replaces or revokes principals re-checks only their records
        self._roster_snapshot: tuple[bytes, dict[bytes, Any]] | None = None
        self._last_accepted: set[bytes] = set()
        self._pending_batches: set[bytes] = set()
        self._moved_keys: set[tuple[bytes, str]] = set()  # facts that moved since the last Changes

    def __repr__(self) -> str:
        return f"Vault({self.vault_id.hex()[:12]}, {self.shelf.location!r})"

    @classmethod
    def create(
        cls,
        path: str,
        passphrase: str,
        *,
        compartments: Sequence[str] = DEFAULT_COMPARTMENTS,
        device_name: str | None = None,
        kdf: tuple[int, int, int] | None = None,
        home: str | None = None,
    ) -> tuple[Vault, str]:
        """Create a vault in an empty folder.  Returns the open vault and the recovery phrase,
        which is shown to the user once and never stored."""
        names = [c.strip() for c in compartments]
        if not names or len(set(names)) != len(names) or any(not n or n == "control" for n in names):
            raise UsageError("compartment names must be distinct, non-empty and not 'control'")
        if len(passphrase) < 1:
            raise UsageError("the passphrase is empty")
        shelf = FolderShelf(path, create=True)
        phrase = new_recovery_phrase()
        device = Credential.generate(CredentialKind.DEVICE)
        pw = from_passphrase(passphrase, KdfParams.fresh(kdf))
        recovery = from_recovery_phrase(phrase)
        device_name = device_name or _hostname()
        control_id = ids.new_random_id()
        comp_ids = {name: ids.new_random_id() for name in names}
        now = int(time.time())
        owners = [
            owner_entry(CredentialKind.DEVICE, device.signer.public, device.recipient.public, device_name, _platform()),
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
                body={0: cid, 1: eid, 2: None, 3: "genesis", 4: epk, 5: keys.epoch_commit(secret, vault_id, cid, eid)},
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
        # Local state first (the counters must exist before the segments do), then the vault files,
        # the descriptor last: a folder without it is an unfinished creation.
        vault = cls(shelf, vault_id, home)
        vault.actor = device
        vault._vms, vault._generation = SecretBytes(vms), 1
        vault._register_installation(device, counters={c: (1, b.id) for c, b in first_batches.items()})
        for name, data in files:
            shelf.write(name, data)
        shelf.write(descriptor.NAME, descriptor.Descriptor(vault_id).encode())
        vault._unlocking = pw  # the user just typed it: it re-authenticates irreversible actions
        vault.unlocked_with = "passphrase"
        vault._owner_kem = owner_kem
        vault._load_cache()
        vault._refresh()
        vault._check_unlocking_credential()
        vault._update_memory()
        return vault, phrase

    @classmethod
    def open(cls, path: str, unlock: Unlock, *, register: bool = True, cache: bool = True, home: str | None = None,
             progress: Callable[[int, int], None] | None = None, device_name: str | None = None,
             read_only: bool = False) -> Vault:
        """Open a vault folder or ``.vmem`` file.  ``register`` certifies this installation as a
        writer on first use when the folder is writable (spec §12.4).  ``cache=False`` reads and
        verifies every file instead of resuming from the local cache (``camillo verify``).
        ``read_only=True`` writes nothing at all: no vault file (no registration, no key rotation
        after an erasure, no finishing of an interrupted write or credential change), no cache and
        no device memory (which is still compared, so rollback alerts are reported; ``camillo verify``).
        ``home`` overrides CAMILLO_HOME for this vault object.  ``progress(done, total)`` is
        called while segments are read; raising :class:`~camillo.errors.Cancelled` from it stops
        the open before anything is written."""
        if _thread_guard is not None:
            _thread_guard()
        shelf = open_shelf(path)
        try:
            try:
                desc = descriptor.decode(shelf.read(descriptor.NAME))
            except FileNotFoundError:
                raise NotAVault(
                    f"{path} is not a VMEM vault (it has no VMEM descriptor file); choose the vault's folder"
                ) from None
            vault = cls(shelf, desc.vault_id, home)
            vault._use_cache = cache
            vault._progress = progress
            if read_only:
                vault.read_only = vault._verifying = True
            if unlock.method == "grant":
                from .access import open_with_grant

                open_with_grant(vault, unlock.path or "")
            else:
                vault._unlock_user(unlock)
                if (register and shelf.writable and not read_only and vault.actor is None
                        and not vault._keychain_problem):
                    vault._certify_installation(device_name)
            return vault
        except BaseException:
            shelf.close()
            raise

    @staticmethod
    def device_unlock_available(path: str, home: str | None = None) -> bool:
        """Does this installation hold a device key for the vault at ``path`` in the OS keychain?
        (Blocks on the keychain: call it off the GUI thread.)"""
        if _thread_guard is not None:
            _thread_guard()
        try:
            shelf = open_shelf(path)
            try:
                vault_id = descriptor.decode(shelf.read(descriptor.NAME)).vault_id
            finally:
                shelf.close()
            inst = VaultLocal(vault_id, home).load_installation()
            return (inst is not None and inst.keystore == "keychain"
                    and keychain.load(vault_id, inst.writer_id) is not None)
        except (VaultError, FileNotFoundError, OSError):
            return False

    # ------------------------------------------------------------------------------ unlocking

    def _slot_headers(self) -> tuple[list[slots.SlotHeader], list[tuple[int | None, Problem]]]:
        """Readable slot headers, and the damaged slots with the credential type they claim."""
        out, damaged = [], []
        for name in self.shelf.list():
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

    def _unlock_user(self, unlock: Unlock) -> None:
        vid = self.vault_id.hex()[:12]
        headers, damaged = self._slot_headers()
        derive: Callable[[slots.SlotHeader], Credential]
        if unlock.method == "passphrase":
            stype, what = slots.SlotType.PASSPHRASE, "passphrase"
            derived: dict[KdfParams, Credential] = {}

            def derive(h: slots.SlotHeader) -> Credential:
                assert h.kdf is not None
                if h.kdf not in derived:
                    derived[h.kdf] = from_passphrase(unlock.secret or "", h.kdf)
                return derived[h.kdf]
        elif unlock.method == "recovery":
            stype, what = slots.SlotType.RECOVERY, "recovery phrase"
            recovery = from_recovery_phrase(unlock.secret or "")

            def derive(h: slots.SlotHeader) -> Credential:
                return recovery
        elif unlock.method == "device":
            stype, what = slots.SlotType.DEVICE, "device key"
            device = unlock.credential or self._load_device_credential()

            def derive(h: slots.SlotHeader) -> Credential:
                return device
        else:
            raise UsageError(f"unknown unlock method {unlock.method}")
        candidates = sorted((h for h in headers if h.type == stype), key=lambda h: (-h.generation, h.name))
        refusals: list[VaultError] = []
        for h in candidates:
            try:
                cred = derive(h)
            except LimitExceeded as exc:
                refusals.append(DamagedFile(f"slot {h.name} was refused: {exc.message} (a tampered slot?)", file=h.name))
                continue
            if not self._try_slot(h, cred):
                continue
            try:
                self._owner_kem = keys.owner_kem(self._vms.get(), self.vault_id, self._generation)
                self.actor = cred if unlock.method == "device" else self._find_installation_credential()
                self._load_cache()
                self._refresh()
                self._check_unlocking_credential()
                self._confirm_actor()
            except (WrongCredential, DamagedFile) as exc:
                # A slot that unwraps but is not vouched for by the vault (planted, or of an
                # unfinished operation): forget what it gave and try the next one.
                refusals.append(exc)
                self._reset_reading()
                self._vms = None
                self.actor = None
                continue
            break
        else:
            if refusals:
                raise refusals[0]
            broken = [p for t, p in damaged if t in (None, int(stype))]
            if broken and not candidates:
                raise DamagedFile(
                    f"the {what} slot of vault {vid} is damaged ({broken[0].file}); unlock with another credential "
                    "(recovery phrase, passphrase or a device key)", file=broken[0].file)
            if not candidates:
                raise WrongCredential(f"vault {vid} has no {what} slot; unlock with another credential")
            if unlock.method == "device":
                raise WrongCredential(
                    f"this device's key does not open vault {vid} (it may have been revoked); "
                    "unlock with your passphrase or recovery phrase")
            raise WrongCredential(f"wrong {what} for vault {vid}; nothing was changed. Try again.")
        self.unlocked_with = what
        if self.actor is not None:
            self._open_state_store()
        self._update_memory()
        if not self.read_only and self._vms is not None:
            self._finish_unannounced()
        if self.actor is not None and not self.read_only and self._vms is not None and not unlock.enrolling:
            from .erasure import rotate_if_erasure_seen

            rotate_if_erasure_seen(self)
        if self.actor is not None and not self.read_only and self._vms is not None:
            from .access import finish_credential_changes

            finish_credential_changes(self)

    def _try_slot(self, header: slots.SlotHeader, cred: Credential) -> bool:
        try:
            vms = slots.unwrap_vms(header, self.vault_id, cred.recipient)
        except CryptoFailure:
            return False
        self._vms, self._generation = SecretBytes(vms), header.generation
        self._unlocking, self._unlock_slot = cred, header
        return True

    def _check_unlocking_credential(self) -> None:
        """The slot we used must be signed by an owner, and our credential must be a current owner
        of this vault (a planted slot or an old passphrase fails here)."""
        if self.roster.genesis is None:
            raise DamagedFile(
                f"vault {self.vault_id.hex()[:12]} is incomplete or damaged: its genesis record is missing "
                "(wait for the sync to finish, or run 'camillo verify')"
            )
        cred = self._unlocking
        assert cred is not None
        p = self.roster.principals.get(cred.writer_id)
        if p is None:
            raise WrongCredential(
                f"this {cred.kind.label} opens a slot of vault {self.vault_id.hex()[:12]} that its owners never "
                "authorised (a planted or unfinished slot); nothing was read"
            )
        if cred.writer_id in self.roster.revocations:
            raise WrongCredential(
                f"this {cred.kind.label} was replaced or revoked in vault {self.vault_id.hex()[:12]}; use the current one"
            )
        if self._unlock_slot is not None:
            st = slots.read_statement(self._unlock_slot, self.vault_id, self._vms.get())
            if st.recipient_id != cred.recipient_id or not self._statement_signed(st.signatures, st.message):
                raise WrongCredential(
                    f"slot {self._unlock_slot.name} is not signed by an owner of this vault; it was not used"
                )

    def _statement_signed(self, signatures: list, message: bytes) -> bool:
        from .primitives import verify_signature

        for wid, alg, sig in signatures:
            p = self.roster.principals.get(wid)
            if p is not None and p.is_owner and wid not in self.roster.revocations:
                if verify_signature(alg, p.sig_public, message, sig):
                    return True
        return False

    # ------------------------------------------------------------------------------ installation

    def _load_device_credential(self) -> Credential:
        inst = self.local.load_installation()
        vid = self.vault_id.hex()[:12]
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
        seeds = keychain.load(self.vault_id, inst.writer_id)
        if seeds is None:
            raise KeychainError(
                f"the OS keychain has no device key for vault {vid}; unlock with your passphrase or recovery phrase"
            )
        return Credential.from_seeds(CredentialKind.DEVICE, *seeds)

    def _find_installation_credential(self) -> Credential | None:
        """After a passphrase or recovery unlock: this installation's own device key, if it has
        one for this vault (checked against the roster by :meth:`_confirm_actor`)."""
        inst = self.local.load_installation()
        if inst is None:
            return None
        cred = None
        if inst.keystore == "keychain":
            try:
                seeds = keychain.load(self.vault_id, inst.writer_id)
            except KeychainError as exc:
                # Locked or unreachable is not lost: this session reads but does not write, and the
                # installation keeps its key (replacing it would retire a key that still exists).
                self._keychain_problem = exc.message
                return None
            if seeds is not None:
                cred = Credential.from_seeds(CredentialKind.DEVICE, *seeds)
        else:
            cred = self._load_local_device_key()
        if cred is None or cred.writer_id != inst.writer_id:
            return None  # lost: a new writer is certified instead (never reuse a writer id blindly)
        return cred

    def _confirm_actor(self) -> None:
        """The installation's device must be a current writer of this vault; otherwise it does not
        write (a new device is certified on a writable open) and its cache is not trusted."""
        if self.actor is None or self.actor.kind != CredentialKind.DEVICE:
            return
        if self.actor.writer_id not in self.roster.principals or self.actor.writer_id in self.roster.revocations:
            if self._cache is not None:
                self._cache.discard()
            self._cache = None
            self.actor = None

    # ------------------------------------------------------------------------------ cache

    def _load_cache(self) -> None:
        """Resume from this actor's encrypted cache, so only new segments are read."""
        self._cache = None
        if self.actor is None or self.read_only:
            return
        if not self._use_cache:
            return
        self._cache = Cache(self.local.cache_path(self.actor.writer_id), self.actor.signer.seed, self.vault_id)
        db = self._cache.load(self._generation)
        if db is None:
            return
        try:
            views = {}
            for bid, segment, epoch, blob, controls, sig_ok, vouched in db.execute(
                "SELECT id, segment, epoch, batch, controls, sig_ok, vouched FROM cache_batches"
            ):
                # sealed by this actor after strict checks: decoded again without repeating them
                header_bytes, sigs = cbor2.loads(blob)
                batch = batch_without_records(header_bytes, sigs)
                recs = [None if raw is None else validated_record(raw, ids.record_id(raw))
                        for raw in cbor2.loads(controls)]
                views[bid] = BatchView(batch, segment, epoch, recs, sig_ok=bool(sig_ok), vouched=bool(vouched))
            seg_map, seg_epochs = {}, {}
            for name, b, comp, epoch in db.execute("SELECT name, batches, compartment, epoch FROM cache_segments"):
                seg_map[name] = list(cbor2.loads(b))
                seg_epochs[name] = (comp, epoch)
        except (VaultError, ValueError, TypeError) as exc:
            db.close()
            self._cache.discard()
            self._cache_problem = f"the local cache was damaged and is rebuilt ({exc})"
            return
        meta = dict(db.execute("SELECT key, value FROM cache_meta"))
        self.state.db.close()
        self.state = State(db)
        self.views = views
        self._segment_batches = seg_map
        self._segment_epochs = seg_epochs
        self._roster_fingerprint = meta.get("roster", b"")
        self._last_accepted = set(encoding.decode(meta["accepted"], "cached accepted set")) if "accepted" in meta else set()
        self._cache_dirty = False

    def save_cache(self) -> None:
        """Seal the materialised state into this actor's cache (done on lock when it changed)."""
        if self._cache is None or not self._cache_dirty:
            return
        self.state.ensure_search()  # the cache holds a complete search index
        db = self.state.db
        db.executemany("UPDATE cache_batches SET sig_ok = ?, vouched = ? WHERE id = ?",
                       [(int(v.sig_ok), int(v.vouched), bid) for bid, v in self.views.items()])
        db.executemany("INSERT OR REPLACE INTO cache_meta(key, value) VALUES(?, ?)",
                       [("roster", self._roster_fingerprint),
                        ("accepted", encoding.encode(sorted(self._last_accepted)))])
        self._cache.save(db, self._generation)
        self._cache_dirty = False

    def _local_key_blob_key(self, vms: bytes, generation: int) -> bytes:
        return keys.local_key(vms + generation.to_bytes(4, "big"), "device-key", self.vault_id)

    def _load_local_device_key(self) -> Credential | None:
        data = read_file(self.local.device_key_path)
        if data is None or self._vms is None:
            return None
        try:
            table = encoding.decode(data, "device-key.bin")
            blob = table.get(self._generation)
            if blob is None:
                return None
            raw = open_local(self._local_key_blob_key(self._vms.get(), self._generation), "device-key",
                             self.vault_id, blob, self.local.device_key_path)
            m = encoding.decode(raw, "device key")
            return Credential.from_seeds(CredentialKind.DEVICE, m["xwing"], m["ed25519"])
        except (VaultError, KeyError, TypeError, AttributeError):
            return None

    def _save_local_device_key(self, cred: Credential, vms: bytes | None = None, generation: int | None = None) -> None:
        """Seal the device seeds under the master secret of ``generation`` (default: the current one)."""
        data = read_file(self.local.device_key_path)
        table: dict[int, bytes] = {}
        if data is not None:
            try:
                table = dict(encoding.decode(data, "device-key.bin"))
            except VaultError:
                table = {}
        if vms is None or generation is None:
            assert self._vms is not None
            vms, generation = self._vms.get(), self._generation
        payload = encoding.encode({"ed25519": cred.signer.seed, "xwing": cred.recipient.seed})
        table[generation] = seal_local(self._local_key_blob_key(vms, generation), "device-key", self.vault_id, payload)
        atomic_write(self.local.device_key_path, encoding.encode(table))

    def _seal_device_key_for(self, vms: bytes, generation: int) -> None:
        """Before the control records that make master-secret ``generation`` current are written:
        an installation that keeps its device key sealed locally must be able to read it at that
        generation, or a crash right after those records leaves it unable to find its key on the
        next open (it would then certify a new key and retire this one, the key that signed the
        new generation's slots, and no passphrase or recovery slot would count any more)."""
        if self.actor is not None and self.actor.kind == CredentialKind.DEVICE:
            inst = self.local.load_installation()
            if inst is not None and inst.keystore == "local" and inst.writer_id == self.actor.writer_id:
                self._save_local_device_key(self.actor, vms, generation)

    def _register_installation(self, device: Credential, counters: dict[bytes, tuple[int, bytes]] | None = None,
                               replaces: bytes | None = None) -> None:
        """Store the device key (keychain, else sealed locally) and create its device state.
        ``replaces``: the key it retires once its certificate is written (see Installation)."""
        st = keychain.status()
        if st.usable:
            keychain.store(self.vault_id, device.writer_id, device.recipient.seed, device.signer.seed)
            keystore = "keychain"
        elif os.environ.get("CAMILLO_KEYCHAIN") == "os":
            raise KeychainError(st.reason)
        else:
            self._save_local_device_key(device)
            keystore = "local"
        self.actor = device
        self._cache = Cache(self.local.cache_path(device.writer_id), device.signer.seed, self.vault_id)
        self._cache_dirty = True
        self._open_state_store()
        from .erasure import erasure_manifests

        self.device_state = DeviceState(counters=dict(counters or {}), manifests=erasure_manifests(self))
        self._state_store.save(self.device_state)
        self.local.save_installation(Installation(device.writer_id, keystore, int(time.time()), replaces))

    def _certify_installation(self, device_name: str | None = None) -> None:
        """First open of a writable vault from this installation: a new device writer, certified by
        the credential that unlocked it, with its own slot."""
        assert self._unlocking is not None and self._vms is not None
        device = Credential.generate(CredentialKind.DEVICE)
        name = device_name or _hostname()
        # An installation whose earlier key cannot be read any more (its local seal predates a
        # master-secret roll, or the keychain lost it) replaces that key: the old writer retires.
        # So does one whose earlier replacement or key rotation a crash interrupted before its
        # certificate was written (the installation names the uncertified key and what it replaces).
        inst = self.local.load_installation()
        replaced = None
        if inst is not None and self._unlocking.kind in (CredentialKind.PASSPHRASE, CredentialKind.RECOVERY):
            replaced = next((w for w in (inst.writer_id, inst.replaces) if w is not None
                             and self.roster.active_owner(w)
                             and self.roster.principals[w].kind == CredentialKind.DEVICE), None)
        cert = encode_record(
            Kind.DEVICE_CERT, self._unlocking.writer_id,
            body={0: owner_entry(CredentialKind.DEVICE, device.signer.public, device.recipient.public, name,
                                 _platform()), 1: replaced, 2: self._unlocking.kind.label},
            signers=[self._unlocking.signer, device.signer],
        )
        records = [cert]
        sid = ids.new_random_id()
        files = [(slots.file_name(sid), slots.build_slot(
            vault_id=self.vault_id, slot_id=sid, slot_type=slots.SlotType.DEVICE, generation=self._generation,
            vms=self._vms.get(), recipient_public=device.recipient.public, recipient_id=device.recipient_id,
            kdf=None, label=name, signer=device.signer, signer_id=device.writer_id))]
        dead: list[str] = []
        if replaced is not None:
            records.append(self._revoke_record(replaced, "its installation could no longer read its key; replaced",
                                               signers=[self._unlocking.signer, device.signer]))
            # The slots that count only through the retired key's signature (it created the vault,
            # or rolled the keyring last) are re-issued under the new key first (spec §12.4).
            from .access import reissue_slots, slots_of

            again, dead = reissue_slots(self, replaced, device)
            files += again
            dead += slots_of(self, self.roster.principals[replaced].recipient_id)
        with self._unannounced_files(ids.record_id(cert), [n for n, _ in files]):
            self._register_installation(device, replaces=replaced)
            from .access import write_files

            written = write_files(self, files)
            self._append_control(records, self._all_compartments(),
                                 undo=lambda: self._delete_quietly(reversed(written)))
        self._delete_quietly(dead)

    # ------------------------------------------------------------------------------ unannounced files

    @contextlib.contextmanager
    def _unannounced_files(self, announce: bytes, names: list[str]) -> Iterator[None]:
        """Around an operation that writes vault files before the record ``announce`` that refers
        to them: their names are noted durably in the local state first, so that if a crash comes
        before that record is written the next open deletes them (nothing refers to them) instead of
        leaving them for good (spec §12.4, §16.4).  One such operation at a time per installation."""
        with self.local.operation_lock():
            self._resolve_unannounced()
            self.local.save_pending(announce, names)
            yield
            self.local.clear_pending()

    def _finish_unannounced(self) -> None:
        """On a writable open: the files of an operation of this installation that a crash
        interrupted before its announcing record are deleted (unless that operation still runs)."""
        if not isinstance(self.shelf, FolderShelf) or self.local.load_pending() is None:
            return
        with self.local.operation_lock(wait=False) as mine:
            if mine:
                self._resolve_unannounced()

    def _resolve_unannounced(self) -> None:
        pending = self.local.load_pending()
        if pending is None:
            return
        announce, names = pending
        if not any(announce in v.header.records for v in self.views.values()):
            doomed = [n for n in names if self.shelf.exists(n)]
            try:
                for name in doomed:
                    self.shelf.delete(name)
            except VaultError:
                return  # kept for the next writable open
            finally:
                if doomed:
                    self._refresh()
        self.local.clear_pending()

    def _open_state_store(self) -> None:
        assert self.actor is not None
        self._state_store = DeviceStateStore(self.local.state_path(self.actor.writer_id), self.actor.signer.seed,
                                             self.vault_id)
        loaded = self._state_store.load()
        if loaded is not None:
            self.device_state = loaded
            if loaded.extra.get("staged") and not self.read_only:
                with self._state_store.locked():
                    self.device_state = self._state_store.load() or loaded
                    if self._commit_staged():
                        self._refresh()  # a write a crash interrupted is finished now

    # ------------------------------------------------------------------------------ reading

    def _refresh(self) -> Changes:
        """Read what is new in the vault folder and recompute what depends on it.  The shelf says
        which names appeared and went away since the last call, so a refresh that finds nothing new
        costs a stat per directory, and one that finds a batch costs that batch."""
        self._scanned_at = time.monotonic()
        names, added, removed = self.shelf.changes()
        if self._rescan_all:  # first read, or keys were forgotten: consider every file again
            self._rescan_all = False
            added = set(names)
            removed = {n for n in self._segment_batches if n not in names}
        for name in self._incomplete - names:  # an incomplete file that went away: nothing to report
            self._incomplete.discard(name)
            self._segment_problems.pop(name, None)
        retry = [n for n in self._incomplete if n in names]  # still syncing: look again
        new_keys = self._read_envelopes(sorted({n for n in (*added, *retry) if kind_of(n) == "envelope"}))
        new_batches: list[bytes] = []
        todo = sorted({n for n in (*added, *retry) if kind_of(n) == "segment"
                       and (n not in self._segment_batches or n in self._unreadable)})
        last_report = 0.0
        for done, name in enumerate(todo):
            if self._progress is not None and (now := time.monotonic()) - last_report >= 0.05:
                last_report = now
                self._progress(done, len(todo))  # about 20 reports a second, whatever the segment sizes
            new_batches += self._read_segment(name)
        if self._progress is not None and todo:
            self._progress(len(todo), len(todo))
        if new_keys:
            for name in list(self._unreadable):
                new_batches += self._read_segment(name)
        vanished = sorted(n for n in removed if n in self._segment_batches)
        if vanished:
            self._forget_segments(vanished)
        if not new_batches and not vanished and not new_keys and self.roster.genesis is not None:
            return Changes()
        if vanished or new_keys or not self._extend(new_batches):
            self._recompute()
        return Changes(records=tuple(r for b in new_batches if b in self.views for r in self.views[b].header.records),
                       batches=tuple(new_batches), keys=self._take_moved_keys(), reloaded=bool(new_keys or vanished))

    def _take_moved_keys(self) -> frozenset[tuple[str, str]]:
        moved, self._moved_keys = self._moved_keys, set()
        return frozenset((self.roster.compartment_name(c), k) for c, k in moved)

    def _forget_segments(self, names: Sequence[str]) -> None:
        """Segments that went away (a prune deletes thousands at once): their batches are forgotten
        unless another segment still holds them, in one pass over what remains."""
        dropped: list[bytes] = []
        for name in names:
            dropped += self._segment_batches.pop(name, [])
            self._segment_epochs.pop(name, None)
            self._unreadable.pop(name, None)
        still = {b for other in self._segment_batches.values() for b in other} if dropped else set()
        gone = list(dict.fromkeys(b for b in dropped if b not in still))
        for b in gone:
            self.views.pop(b, None)
        self.state.forget_batches(gone)
        self.state.db.executemany("DELETE FROM cache_segments WHERE name = ?", [(n,) for n in names])
        self.state.db.executemany("DELETE FROM cache_batches WHERE id = ?", [(b,) for b in gone])
        self._cache_dirty = True

    def _read_envelopes(self, names: list[str]) -> bool:
        recipient = self._owner_kem if self._owner_kem is not None else (self.actor.recipient if self.actor else None)
        if recipient is None:
            return False
        rid = ids.recipient_id(recipient.public)
        found = False
        for name in names:
            if name in self._seen_envelopes:
                continue
            try:
                data = self.shelf.read(name)
            except (FileNotFoundError, StorageError):
                continue
            if hash_matches(name, data) is False:
                # still syncing, or damaged: try again next time, and say so meanwhile
                self._segment_problems[name] = Problem(
                    "damaged", name, f"envelope {name} does not match its name (still syncing, or damaged)")
                self._incomplete.add(name)
                continue
            self._incomplete.discard(name)
            self._segment_problems.pop(name, None)
            self._seen_envelopes.add(name)
            try:
                envelopes.check_shape(data, name)
                if not envelopes.is_for(data, rid):
                    continue
                payload = envelopes.open_envelope(data, name, self.vault_id, recipient)
            except CryptoFailure:
                continue
            except VaultError as exc:
                self._segment_problems[name] = Problem("damaged", name, exc.message)
                continue
            if payload.recipient_id != rid:
                self._segment_problems[name] = Problem("damaged", name, f"envelope {name} names another recipient")
                continue
            key = (payload.compartment_id, payload.epoch_id)
            if payload.kind == envelopes.EnvelopeKind.EPOCH_SECRET and key not in self._epoch_secrets:
                self._epoch_secrets[key] = SecretBytes(payload.key)
                self._epoch_keys[key] = keys.epoch_key(payload.key, self.vault_id, *key)
                self._envelope_sources[key] = payload
                found = True
            elif payload.kind == envelopes.EnvelopeKind.EPOCH_PUBLIC and key not in self._epoch_publics:
                if not self._trusted_by_grant(payload):
                    self._segment_problems[name] = Problem(
                        "untrusted", name, f"envelope {name} gives an epoch key signed by no owner device this grant "
                        "knows; it is not used")
                    continue
                self._epoch_publics[key] = payload.key
                self._envelope_sources[key] = payload
                found = True
        return found

    def _trusted_by_grant(self, payload: envelopes.EnvelopePayload) -> bool:
        """An append grant cannot read the roster: it trusts the owner devices listed in its grant
        file, so nobody else (say, a reader of the compartment) can make it seal to a key of theirs."""
        from .primitives import verify_signature

        trusted = dict(self.grant.trusted) if self.grant is not None else {}
        if not trusted:
            return self.grant is None
        return any(w in trusted and verify_signature(a, trusted[w], payload.message, sig)
                   for w, a, sig in payload.signatures)

    def _read_segment(self, name: str) -> list[bytes]:
        try:
            data = self.shelf.read(name)
        except FileNotFoundError:
            return []
        except StorageError as exc:
            self._segment_problems[name] = Problem("unreadable", name, exc.message)
            return []
        if hash_matches(name, data) is False:
            self._segment_problems[name] = Problem(
                "damaged", name, f"segment {name} does not match its name (still syncing, or damaged)")
            self._incomplete.add(name)
            return []
        self._incomplete.discard(name)
        try:
            header = segments.read_header(data, name)
        except VaultError as exc:
            self._segment_problems[name] = Problem("damaged", name, exc.message)
            return []
        key = self._epoch_keys.get((header.compartment_id, header.epoch_id))
        if key is None:
            self._unreadable[name] = (header.compartment_id, header.epoch_id)
            self._segment_batches.setdefault(name, [])
            return []
        self._unreadable.pop(name, None)
        self._segment_problems.pop(name, None)
        try:
            payload = segments.open_segment(data, name, self.vault_id, key)
            self.decryptions += 1
            batches = segments.decode_payload(payload, name)
        except VaultError as exc:
            self._segment_problems[name] = Problem("damaged", name, exc.message)
            self._segment_batches[name] = []
            return []
        added = []
        for batch in batches:
            problem = self._check_batch_shape(batch, header, name)
            if problem:
                self._segment_problems[f"{name}#{batch.id.hex()[:12]}"] = Problem("damaged", name, problem)
                continue
            existing = self.views.get(batch.id)
            if existing is not None:
                if existing.batch.to_cbor() != batch.to_cbor() and not any(r is None for r in batch.records + existing.batch.records):
                    self._segment_problems[f"{name}#dup"] = Problem(
                        "damaged", name, f"batch {batch.id.hex()[:12]} appears with different contents in {existing.segment}")
                continue
            records: list[Record | None] = []
            try:
                for rid, raw in zip(batch.header.records, batch.records):
                    records.append(None if raw is None else decode_record(raw, expected_id=rid))
            except VaultError as exc:
                self._segment_problems[f"{name}#{batch.id.hex()[:12]}"] = Problem(
                    "damaged", name, f"batch {batch.id.hex()[:12]}: {exc.message}")
                continue
            view = BatchView(batch, name, header.epoch_id, [r if r is not None and r.is_control else None
                                                             for r in records])
            self.views[batch.id] = view
            self.state.stage(view, records)
            self.state.cache_db.execute(
                "INSERT OR REPLACE INTO cache_batches(id, segment, epoch, batch, controls) VALUES(?,?,?,?,?)",
                (batch.id, name, header.epoch_id,
                 encoding.encode([batch.header_bytes, [list(x) for x in batch.sigs]]),
                 encoding.encode([r.raw if r is not None else None for r in view.records])),
            )
            added.append(batch.id)
            self._pending_batches.add(batch.id)
        self._segment_batches[name] = [b.id for b in batches]
        self._segment_epochs[name] = (header.compartment_id, header.epoch_id)
        self.state.cache_db.execute(
            "INSERT OR REPLACE INTO cache_segments(name, batches, compartment, epoch) VALUES(?, ?, ?, ?)",
            (name, encoding.encode([b.id for b in batches]), header.compartment_id, header.epoch_id))
        self._cache_dirty = True
        return added

    def _check_batch_shape(self, batch: Batch, header: segments.SegmentHeader, name: str) -> str | None:
        h = batch.header
        if h.vault_id != self.vault_id:
            return f"batch {batch.id.hex()[:12]} belongs to another vault"
        if h.compartment_id != header.compartment_id:
            return f"batch {batch.id.hex()[:12]} claims another compartment than its segment"
        return None

    def _extend(self, new: list[bytes]) -> bool:
        """New batches that change nothing but the log's chains (no control record, by writers the
        roster knows, each the next link of its chain, seeing only what is here): verify them and
        extend the log and the state in O(new) instead of recomputing everything.  False when the
        general path is needed (it then gives the same result)."""
        from .records import verify_batch_signature

        if self.roster.genesis is None or not new:
            return False
        verified = []
        for bid in new:
            v = self.views.get(bid)
            if v is None or any(r is not None for r in v.records):
                return False
            pk = self.roster.signer_public(v.header.writer_id)
            if pk is None:
                return False
            if not (v.sig_ok or verify_batch_signature(v.batch, pk)):
                return False
            verified.append(v)
        if not extend_log(self.log, self.views, list(new), self.roster):
            return False
        for v in verified:
            v.signed = v.sig_ok = True
        result = self.state.materialize(self.roster, self.log, self.views, self._pending_batches | set(new))
        self._last_accepted |= set(new)
        self._pending_batches = set()
        self._materialize_problems = result.problems
        self._moved_keys |= result.keys
        return True

    def _recompute(self) -> None:
        roster, signed = build_roster(self.vault_id, self.views)
        bad_epochs = self._check_epoch_keys(roster)
        if bad_epochs:
            for key in bad_epochs:
                self._epoch_secrets.pop(key, None)
                self._epoch_keys.pop(key, None)
                self._envelope_sources.pop(key, None)
            self._seen_envelopes.clear()  # another envelope may carry the genuine key: read them again
            self._rescan_all = True
            bad = [name for name, bids in self._segment_batches.items()
                   if any(self.views.get(b) and (self.views[b].header.compartment_id, self.views[b].epoch_id)
                          in bad_epochs for b in bids)]
            self._forget_segments(bad)
            for name in bad:
                self._segment_problems[name] = Problem(
                    "damaged", name, f"segment {name} is sealed under an epoch key no owner vouched for")
            roster, signed = build_roster(self.vault_id, self.views)
        self.roster = roster
        self._forget_erased_epochs()
        self.log = build_log(self.views, signed, roster)
        fingerprint = roster.fingerprint()
        global_fp = roster.global_fingerprint()
        writers: set[bytes] = set()
        affected: set[bytes] | None = self._pending_batches | (self.log.accepted ^ self._last_accepted)
        if fingerprint != self._roster_fingerprint:
            old = self._roster_snapshot
            if old is None or old[0] != global_fp:
                affected = None  # everything is checked again
            else:  # principals added, replaced or revoked (acceptance changes are in ``affected``)
                writers = {w for w in old[1].keys() | roster.principals.keys()
                           if old[1].get(w) != roster.principals.get(w)}
        result = self.state.materialize(roster, self.log, self.views, affected, writers=writers)
        self._roster_snapshot = (global_fp, dict(roster.principals))
        self._roster_fingerprint = fingerprint
        self._last_accepted = set(self.log.accepted)
        self._pending_batches = set()
        self._materialize_problems = result.problems
        self._moved_keys |= result.keys

    def _catch_up_generation(self) -> bool:
        """Another device rolled the master secret (an erasure, a revocation) while this session was
        open: it left this device a slot of the new generation.  Take the new master secret from it
        and read the vault again, exactly as an open would; if no current owner signed that slot (a
        planted one), go back to the old secret and ignore it.  True when the session moved on."""
        actor = self.actor
        if actor is None or actor.kind != CredentialKind.DEVICE or self._vms is None or self.read_only:
            return False
        slot_files = self.shelf.files_in("slots") if isinstance(self.shelf, FolderShelf) else frozenset()
        if slot_files == self._known_slot_files:
            return False  # no slot appeared or went away since the last look (a stat per directory)
        self._known_slot_files = slot_files
        newer = sorted((h for h in self._slot_headers()[0] if h.type == slots.SlotType.DEVICE
                        and h.generation > self._generation and h.name not in self._refused_slots),
                       key=lambda h: (-h.generation, h.name))
        for h in newer:
            try:
                vms = slots.unwrap_vms(h, self.vault_id, actor.recipient)
            except CryptoFailure:
                continue
            old = (SecretBytes(self._vms.get()), self._generation)
            try:
                st = slots.read_statement(h, self.vault_id, vms)
            except VaultError:
                self._refused_slots.add(h.name)
                continue
            if any(w == actor.writer_id for w, *_ in st.signatures):
                continue  # written by this device: its own operation in flight, or one a crash interrupted
            self._adopt_master_secret(vms, h.generation)
            vouched = st.recipient_id == actor.recipient_id and self._statement_signed(st.signatures, st.message)
            if vouched and actor.writer_id in self.roster.principals and actor.writer_id not in self.roster.revocations:
                self._after_generation_roll()
                self._update_memory()
                return True
            self._refused_slots.add(h.name)
            self._adopt_master_secret(old[0].get(), old[1])
        return False

    def _adopt_master_secret(self, vms: bytes, generation: int) -> None:
        """Read everything again under this master secret (keys below it are re-derived)."""
        if self._vms is not None:
            self._vms.wipe()
        self._vms, self._generation = SecretBytes(vms), generation
        self._owner_kem = keys.owner_kem(vms, self.vault_id, generation)
        refused = self._refused_slots
        self._reset_reading()
        self._refused_slots = refused
        self._refresh()

    def _forget_erased_epochs(self) -> None:
        """An ERASE destroyed these epochs' secrets: a session that held them (it was open while
        another device erased) drops them too, so nothing it writes later (a keyring roll) can
        wrap them again."""
        for e in self.roster.erasures.values():
            for epoch_id in e.epochs:
                key = (e.compartment_id, epoch_id)
                secret = self._epoch_secrets.pop(key, None)
                if secret is not None:
                    secret.wipe()
                self._epoch_keys.pop(key, None)
                self._envelope_sources.pop(key, None)

    def _check_epoch_keys(self, roster: Roster) -> set[tuple[bytes, bytes]]:
        """Every epoch secret we used must match its signed EPOCH record, and the envelope that
        delivered it must be signed by an owner (spec §15.3)."""
        from .primitives import verify_signature

        bad = set()
        if roster.genesis is None:
            return bad
        for key, secret in self._epoch_secrets.items():
            info = roster.epochs.get(key)
            if info is None:
                continue  # its EPOCH record has not arrived yet: segments stay unverified below
            if not constant_time_equal(keys.epoch_commit(secret.get(), self.vault_id, *key), info.commit):
                bad.add(key)
                continue
            payload = self._envelope_sources.get(key)
            if payload is not None and not any(
                (p := roster.principals.get(w)) is not None and p.is_owner and verify_signature(a, p.sig_public, payload.message, s)
                for w, a, s in payload.signatures
            ):
                bad.add(key)
        return bad

    def _update_memory(self) -> None:
        """Check the vault against what this device remembers, then remember the union (spec §17.5)."""
        if self._state_store is None or (self.read_only and not self._verifying):
            self.alerts = []
            return
        ds = self.device_state
        covered = {b for m in self.roster.manifests.values() for b in m.batches}
        known = set(self.roster.epochs) if self.roster.genesis is not None else None
        alerts, memory, first = check_memory(ds.remembered, ds.first_missing, ds.generation, self.log, covered,
                                             self._generation, int(time.time()), ds.epochs, known)
        self.alerts = alerts
        generation = max(ds.generation, self._generation)
        epochs = dict(ds.epochs)
        if known is not None:
            for cid in [self.roster.control_id, *self.roster.compartments]:
                current = self.roster.current_epoch(cid)
                if current is not None:
                    epochs[cid] = current.epoch_id
        if self._verifying:
            return
        if memory != ds.remembered or first != ds.first_missing or generation != ds.generation or epochs != ds.epochs:
            with self._state_store.locked():
                on_disk = self._state_store.load() or ds
                on_disk.remembered, on_disk.first_missing, on_disk.generation = memory, first, generation
                on_disk.epochs = epochs
                self._state_store.save(on_disk)
                self.device_state = on_disk

    @_api
    def sync_status(self) -> tuple[str, list[str]]:
        """For status bars: "up to date", "syncing", "missing batches" or "rollback alert", with details."""
        kinds = {a.kind for a in self.alerts}
        details = [a.message for a in self.alerts]
        details += [f"{name} is incomplete (still syncing, or damaged)" for name in sorted(self._incomplete)]
        if "rollback" in kinds:
            return "rollback alert", details
        if "missing" in kinds:
            return "missing batches", details
        if "syncing" in kinds or self._incomplete or (self._unreadable and self._owner_kem is not None):
            return "syncing", details
        return "up to date", details

    @_api
    def accept_current_state(self) -> None:
        """After the user has looked at a rollback alert: remember the vault as it is now."""
        if self._state_store is None:
            return
        with self._state_store.locked():
            ds = self._state_store.load() or self.device_state
            ds.remembered, ds.first_missing, ds.epochs = {}, {}, {}
            ds.generation = self._generation
            self._state_store.save(ds)
            self.device_state = ds
        self._update_memory()

    # ------------------------------------------------------------------------------ public reading

    @_api
    def refresh(self) -> Changes:
        """Pick up files other devices and agents wrote since the last look."""
        if self._catch_up_generation():
            return Changes(reloaded=True)
        changes = self._refresh()
        self._update_memory()
        return changes

    @property
    def compartments(self) -> dict[str, bytes]:
        """Data compartments by name (what this credential can address)."""
        return {n: c for c, n in sorted(self.roster.compartments.items(), key=lambda x: x[1])}

    def _all_compartments(self) -> list[bytes]:
        assert self.roster.control_id is not None
        return [self.roster.control_id, *self.roster.compartments]

    @property
    def compartment_ids_of_grant(self) -> dict[str, bytes]:
        """For a vault opened with a grant: its compartments by name (from the grant file)."""
        return dict(self._grant_scope_ids) if self.grant is not None else {}

    def compartment_id(self, name: str) -> bytes:
        cid = self.roster.compartment_id(name)
        if cid is None and self.grant is not None:
            cid = self._grant_scope_ids.get(name)
        if cid is None:
            raise UsageError(
                f"vault {self.vault_id.hex()[:12]} has no compartment '{name}'; it has: "
                f"{', '.join(sorted(self.roster.compartments.values()))}"
            )
        return cid

    @_api
    def timeline(self, offset: int = 0, limit: int | None = None, **filters: Any) -> list[RecordView]:
        self._require_read()
        return self.state.timeline(offset, limit, **filters)

    @_api
    def timeline_ids(self, **filters: Any) -> list[bytes]:
        self._require_read()
        return self.state.timeline_ids(**filters)

    @_api
    def records(self, ids_: Iterable[bytes]) -> list[RecordView]:
        self._require_read()
        return self.state.records(ids_)

    @_api
    def record(self, rid: bytes) -> RecordView | None:
        self._require_read()
        return self.state.record(rid)

    @_api
    def find_record(self, prefix: str) -> RecordView:
        """A record by its hex id or a unique prefix of at least 8 digits."""
        text = prefix.strip().lower()
        try:
            if len(text) == 64:
                v = self.state.record(bytes.fromhex(text))
                if v:
                    return v
            elif len(text) >= 8:
                bytes.fromhex(text if len(text) % 2 == 0 else text[:-1])
                rows = self.state.db.execute("SELECT id FROM records WHERE hex(id) LIKE ?", (text.upper() + "%",)).fetchall()
                if len(rows) == 1:
                    return self.state.record(rows[0][0])
                if len(rows) > 1:
                    raise UsageError(f"record id prefix {prefix} is ambiguous; give more digits")
        except ValueError:
            raise UsageError(f"'{prefix}' is not a record id (hex digits)") from None
        raise UsageError(f"no record {prefix} in vault {self.vault_id.hex()[:12]}")

    @_api
    def facts(self, **filters: Any) -> list[FactView]:
        self._require_read()
        return self.state.facts(**filters)

    @_api
    def fact(self, key: str, compartment: str | None = None) -> FactView:
        self._require_read()
        cids = [self.compartment_id(compartment)] if compartment else list(self.roster.compartments)
        found = [f for f in (self.state.fact(c, key) for c in cids) if f is not None]
        if not found:
            raise UsageError(f"no fact '{key}' in vault {self.vault_id.hex()[:12]}")
        if len(found) > 1:
            raise UsageError(f"'{key}' exists in several compartments ({', '.join(f.compartment for f in found)}); "
                             "name one with --compartment")
        return found[0]

    @_api
    def problems(self, *, full: bool = False) -> list[Problem]:
        """Everything wrong or incomplete about this copy: damaged files, unverifiable batches,
        gaps, forks and rejected records."""
        out = list(self._segment_problems.values())
        out += self._slot_problems()
        if isinstance(self.shelf, FolderShelf):
            from .packs import PackReader

            for name in self.shelf._walk():
                if kind_of(name) == "pack":
                    try:
                        PackReader(os.path.join(self.shelf.location, name)).close()
                    except VaultError as exc:
                        out.append(Problem("damaged", name, exc.message))
        for kind, file, message in self.roster.problems + self._materialize_problems:
            out.append(Problem(kind, file, message))
        for bid, why in sorted({**self.roster.excluded, **self.log.rejected}.items()):
            v = self.views.get(bid)
            out.append(Problem("rejected", v.segment if v else "", f"batch {bid.hex()[:12]} was rejected: {why}"))
        for a in self.alerts:
            if a.kind == "rollback":
                out.append(Problem("rollback", "", a.message))
        for g in self.log.gaps:
            who = self.roster.writer_name(g.writer_id) if g.writer_id else "a writer"
            where = self.roster.compartment_name(g.compartment_id) if g.compartment_id else "the vault"
            what = f"batch {g.batch_id.hex()[:12]}" if g.batch_id else "a batch"
            seq = f" (seq {g.seq})" if g.seq else ""
            out.append(Problem("gap", "", f"{what}{seq} from {who} in {where} is missing: {g.reason}"))
        for f in self.log.forks:
            out.append(Problem("fork", "", (
                f"{self.roster.writer_name(f.writer_id)} wrote two different batches at seq {f.seq} in "
                f"{self.roster.compartment_name(f.compartment_id)} ({', '.join(b.hex()[:12] for b in f.batch_ids)}); "
                "its later batches are frozen until it is revoked and re-enrolled")))
        for name, (cid, eid) in sorted(self._unreadable.items()):
            if self._owner_kem is not None:
                out.append(Problem("unreadable", name, f"segment {name} is sealed under epoch {eid.hex()[:12]}, "
                                   "whose key is not (yet) here"))
        for v in self.state.rejected():
            if (v.reason or "").startswith("waiting"):
                out.append(Problem("waiting", "", f"record {v.id.hex()[:12]} is not applied yet: {v.reason[9:]}"))
            else:
                out.append(Problem("rejected-record", "", f"record {v.id.hex()[:12]} was rejected: {v.reason}"))
        if full:
            from .records import verify_batch_signature

            for bid in sorted(self.log.accepted):
                view = self.views[bid]
                pk = self.roster.signer_public(view.header.writer_id)
                if pk is None or not verify_batch_signature(view.batch, pk):
                    out.append(Problem("signature", view.segment, f"batch {bid.hex()[:12]} fails full signature verification"))
        return out

    def _slot_problems(self) -> list[Problem]:
        headers, damaged = self._slot_headers()
        out = [p for _, p in damaged]
        if self._vms is None:
            return out
        for h in headers:
            if h.generation != self._generation:
                continue
            try:
                st = slots.read_statement(h, self.vault_id, self._vms.get())
            except VaultError as exc:
                out.append(Problem("damaged", h.name, exc.message))
                continue
            if not self._statement_signed(st.signatures, st.message):
                out.append(Problem("untrusted", h.name, f"slot {h.name} is not signed by an owner of this vault "
                                   "(planted, or left by an unfinished operation); it is never used"))
        return out

    # ------------------------------------------------------------------------------ writing

    def _require_writer(self) -> Credential:
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
            if self._keychain_problem:
                raise KeychainError(f"{self._keychain_problem}; this installation's device key is kept there, so "
                                    "this session can read but not write: unlock the keychain and open the vault again")
            raise ReadOnlyVault("this vault was opened without a writer; open it again to register this installation")
        return self.actor

    def _require_owner(self, what: str) -> None:
        if self._vms is None or self.actor is None or self.actor.kind != CredentialKind.DEVICE:
            raise AccessDenied(f"{what} needs the vault owner's credential (a passphrase, recovery phrase or device key); "
                               "an agent grant cannot do it")

    def _authority_for(self, item: NewRecord) -> Authority:
        """What a new record claims: as given, else by role; an agent's defaults are one step lower
        (what the user said becomes ``observed``, the rest ``inferred`` or ``external``)."""
        if item.authority is not None or self.grant is None:
            return item.default_authority()
        if item.role in ("tool", "system", "web", "function"):
            return Authority.EXTERNAL
        if item.role == "user":
            return min(Authority.OBSERVED, self.grant.max_class)
        return min(Authority.INFERRED, self.grant.max_class)

    def _encode_new(self, item: NewRecord, cid: bytes, author: bytes) -> bytes:
        from .access import check_grant

        typ = item.type
        authority = self._authority_for(item)
        check_grant(self, cid, write=True, authority=authority, key=item.key)
        item = NewRecord(**{**item.__dict__, "authority": authority})
        if typ in KEYED_TYPES:
            if not item.key:
                raise UsageError(f"a {typ} needs a \"key\" such as user/home_city")
            value = _json_to_cbor(item.value if item.value is not None else item.text)
            if value is None:
                raise UsageError(f"the {typ} '{item.key}' needs a \"value\"")
            pred = list(item.pred) if item.pred is not None else self._live_ids(cid, item.key)
            return encode_record(Kind.PUT, author, key=item.key, value=value, authority=item.default_authority(),
                                 pred=pred, sources=item.sources, meta=item.meta, type=typ, ts=item.ts)
        value: Any
        if item.value is not None:
            value = _json_to_cbor(item.value)
        else:
            value = {}
            if item.text is not None:
                value["text"] = item.text
            if item.conversation is not None:
                value["conversation"] = item.conversation
            if item.role is not None:
                value["role"] = item.role
            if item.title is not None:
                value["title"] = item.title
            if typ == "message" and "text" not in value:
                raise UsageError("a message needs a \"text\"")
        if item.key is not None:
            raise UsageError(f"a {typ} record has no key; keys belong to facts, preferences and instructions")
        return encode_record(Kind.NOTE, author, value=value, authority=item.default_authority(),
                             sources=item.sources, meta=item.meta, type=typ, ts=item.ts)

    def _live_ids(self, cid: bytes, key: str) -> list[bytes]:
        f = self.state.fact(cid, key)
        if f is None:
            return []
        if f.status == "conflict":
            return sorted(r.id for r in f.candidates)
        return [f.current.id] if f.current else []

    @_api
    def append(self, items: Sequence[NewRecord], compartment: str = "personal") -> Changes:
        """Append records as one batch; returns once the batch is durable on disk."""
        if not items:
            raise UsageError("nothing to add")
        self._catch_up_generation()  # another device rolled the keys: write under the new ones
        actor = self._require_writer()
        cid = self.compartment_id(compartment)
        raws = [self._encode_new(item, cid, actor.writer_id) for item in items]
        from .access import scheduled_epochs

        scheduled_epochs(self)
        return self._append_records(cid, raws)

    def _append_records(self, cid: bytes, raws: list[bytes]) -> Changes:
        batches = self._write_batches({cid: raws}, quick=True)[cid]
        return Changes(records=tuple(r for b in batches for r in b.header.records),
                       batches=tuple(b.id for b in batches), keys=self._take_moved_keys(),
                       compartments=frozenset({self.roster.compartment_name(cid)}))

    def _append_control(self, raws: list[bytes], compartments: Iterable[bytes], *,
                        undo: Callable[[], None] | None = None) -> dict[bytes, list[Batch]]:
        return self._write_batches({c: raws for c in compartments}, undo=undo)

    BATCH_RECORDS = 2000
    # A plain append numbers its batches after a scan of the folder, unless the last scan is
    # younger than this, this installation's last batch is read (no other process of it wrote
    # since), and no envelope or slot arrived (a new epoch, a revocation, a rotation): then
    # ``deps`` and ``frontier`` name what was seen up to this long ago, which the format allows
    # (they are what the writer had seen).  A scan costs a stat per segment directory (up to
    # 256), which back-to-back appends would otherwise each pay.
    WRITE_SCAN_AGE = 0.5
    BATCH_BYTES = 2 * 1024 * 1024
    SEGMENT_PAYLOAD = 4 * 1024 * 1024

    def _chunks(self, raws: list[bytes]) -> list[list[bytes]]:
        """Split records into batches of at most BATCH_RECORDS records and about BATCH_BYTES."""
        out: list[list[bytes]] = [[]]
        size = 0
        for raw in raws:
            if out[-1] and (len(out[-1]) >= self.BATCH_RECORDS or size + len(raw) > self.BATCH_BYTES):
                out.append([])
                size = 0
            out[-1].append(raw)
            size += len(raw)
        return out

    def _write_batches(self, per_compartment: dict[bytes, list[bytes]], *,
                       undo: Callable[[], None] | None = None, quick: bool = False) -> dict[bytes, list[Batch]]:
        """Sign, seal and durably write the records as batches (one for an interactive write; as
        many as needed for a bulk import, several per segment), then read them back in.  ``undo``
        runs if they could not be written at all (nothing of them will ever appear): the caller
        deletes the files it wrote for them.  ``quick`` (plain appends only; never a write that
        follows files this process just wrote, like a compaction's or an erasure's) lets a recent
        scan stand in for a new one (WRITE_SCAN_AGE)."""
        actor = self._require_writer()
        assert self._state_store is not None
        written: dict[bytes, list[Batch]] = {}
        files: list[tuple[str, bytes]] = []
        with self._state_store.locked():
            on_disk = self._state_store.load()
            if on_disk is not None:
                self.device_state = on_disk
            finished = self._commit_staged()
            # this installation's last batch in each compartment not read yet: another process wrote it
            tips = [self.device_state.counters.get(cid, (0, None))[1] for cid in per_compartment]
            own_tips_read = all(tip is None or tip in self.views for tip in tips)
            if finished or not quick or not own_tips_read or not self._recently_scanned():
                self._refresh()  # see what other processes and devices wrote before numbering
            for cid, raws in per_compartment.items():
                epoch_id, public = self._sealing_key(cid)
                seq, prev = self.device_state.counters.get(cid, (0, None))
                on_vault = self.log.max_seq(actor.writer_id, cid)
                if on_vault > seq:
                    raise WriterFrozen(
                        f"this installation's batches go up to seq {on_vault} in "
                        f"{self.roster.compartment_name(cid)} but it only remembers {seq}: it was restored from a "
                        "backup or copied. It will not write (that would fork its history); revoke this device and "
                        "register it again"
                    )
                if any(f.writer_id == actor.writer_id for f in self.log.forks):
                    raise WriterFrozen("this writer is frozen by a proven fork; revoke it and register again")
                deps = tuple(sorted(self.log.heads.get(cid, set()))[-64:])
                chain_writers = {w for (w, c) in self.log.chains if c == cid}
                frontier = {w: self.log.max_seq(w, cid) for w in chain_writers}
                # never behind the previous batch's (written by another process of this installation
                # that may have seen more): readers reject a frontier that goes backwards
                prev_view = self.views.get(prev) if prev is not None else None
                if prev_view is not None:
                    for w, s in prev_view.batch.header.frontier.items():
                        if frontier.get(w, 0) < s:
                            frontier[w] = s
                group: list[Batch] = []
                group_size = 0
                batches: list[Batch] = []
                for chunk in self._chunks(raws):
                    seq += 1
                    frontier[actor.writer_id] = seq - 1
                    header = BatchHeader(self.vault_id, cid, actor.writer_id, seq, prev, deps, dict(frontier),
                                         tuple(ids.record_id(r) for r in chunk), int(time.time()))
                    batch = make_batch(header, chunk, actor.signer)
                    size = sum(len(r) for r in chunk) + 512
                    if group and group_size + size > self.SEGMENT_PAYLOAD:
                        seg = segments.seal_segment(self.vault_id, cid, epoch_id, public, segments.encode_payload(group))
                        files.append((segment_name(seg), seg))
                        group, group_size = [], 0
                    group.append(batch)
                    group_size += size
                    batches.append(batch)
                    prev, deps = batch.id, (batch.id,)
                seg = segments.seal_segment(self.vault_id, cid, epoch_id, public, segments.encode_payload(group))
                files.append((segment_name(seg), seg))
                self.device_state.counters[cid] = (seq, prev)
                # remembered with the counter (one save): the rollback memory of this writer's own chain
                self.device_state.remembered.setdefault(cid, {})[actor.writer_id] = (seq, prev)
                written[cid] = batches
            # The segments are staged (complete, fsynced, under dot names readers ignore) before the
            # counter is persisted and renamed into place after it, and the counter remembers them:
            # a crash in between is finished by the next open or write instead of leaving a
            # number skipped for good (a gap every reader would report as missing).
            staged: list[tuple[str, str]] = []
            try:
                for name, data in files:
                    tmp = self.shelf.stage(name, data)
                    if tmp is not None:
                        staged.append((name, tmp))
                self.device_state.extra["staged"] = [[n, t] for n, t in staged]
                self._state_store.save(self.device_state)  # durable before any segment exists
            except BaseException:
                for name, tmp in staged:
                    self.shelf.unstage(name, tmp)
                try:  # forget the counters and memory advanced above: nothing was written
                    self.device_state = self._state_store.load() or DeviceState()
                except VaultError:
                    pass
                if undo is not None:
                    undo()
                raise
            for name, tmp in staged:
                self.shelf.commit(name, tmp)
        # Read back exactly what was written (the folder was scanned just before numbering; what
        # others write meanwhile arrives with the next refresh).
        new: list[bytes] = []
        for name, _data in files:
            if name not in self._segment_batches:
                new += self._read_segment(name)
        if new and not self._extend(new):
            self._recompute()
        self._update_memory()
        return written

    def _recently_scanned(self) -> bool:
        """The folder was scanned less than WRITE_SCAN_AGE ago and no envelope or slot arrived since."""
        return (time.monotonic() - self._scanned_at < self.WRITE_SCAN_AGE and isinstance(self.shelf, FolderShelf)
                and self.shelf.unchanged("env", "slots"))

    def _commit_staged(self) -> bool:
        """Finish the last write of this actor if a crash interrupted it after its counter was
        persisted: rename its staged segments into place.  True when one was finished."""
        done = False
        if isinstance(self.shelf, FolderShelf) and not self.read_only:
            for name, tmp in self.device_state.extra.get("staged") or []:
                if not self.shelf.exists(name):
                    done = self.shelf.commit(name, tmp) or done
        return done

    def _sealing_key(self, cid: bytes) -> tuple[bytes, bytes]:
        """(epoch id, epoch public key) new segments of ``cid`` are sealed to."""
        epoch = self.roster.current_epoch(cid)
        if epoch is not None:
            return epoch.epoch_id, epoch.public
        # An append grant cannot read EPOCH records: it follows the chain of public keys delivered to it.
        mine = {e: p for (c, e), p in self._epoch_publics.items() if c == cid}
        if not mine:
            name = next((n for n, c in self.compartment_ids_of_grant.items() if c == cid),
                        self.roster.compartment_name(cid))
            if self.grant is not None:
                raise AccessDenied(
                    f"the append grant of agent {self.grant.agent} finds no key to write to compartment {name} signed "
                    "by an owner device it trusts: those devices changed their keys since the grant was made (after an "
                    "erasure, or when devices were replaced). Ask the vault's owner for a new grant file")
            raise AccessDenied(f"no key to write to compartment {name} is available here")
        prevs = {self._envelope_sources[(cid, e)].prev_epoch for e in mine}
        heads = sorted(e for e in mine if e not in prevs) or sorted(mine)
        return heads[0], mine[heads[0]]

    def _after_generation_roll(self) -> None:
        """The master secret rolled: keep this installation's sealed device key readable."""
        if self.actor is not None and self.actor.kind == CredentialKind.DEVICE:
            inst = self.local.load_installation()
            if inst is not None and inst.keystore == "local":
                self._save_local_device_key(self.actor)
        self._cache_dirty = True

    def _reread_keys(self) -> None:
        """Envelopes changed (a new keyring): read every epoch key again, then the folder."""
        for secret in self._epoch_secrets.values():
            secret.wipe()
        self._epoch_secrets.clear()
        self._epoch_keys.clear()
        self._epoch_publics.clear()
        self._envelope_sources.clear()
        self._seen_envelopes.clear()
        self._rescan_all = True
        self._refresh()
        self._update_memory()

    def _delete_quietly(self, names: Iterable[str]) -> None:
        """Delete files an operation wrote before it failed (nothing announces them)."""
        for name in names:
            try:
                self.shelf.delete(name)
            except VaultError:
                pass

    def _write_slot(self, cred: Credential, stype: slots.SlotType, label: str, generation: int | None = None,
                    vms: bytes | None = None) -> str:
        actor = self._require_writer()
        assert self._vms is not None
        sid = ids.new_random_id()
        data = slots.build_slot(
            vault_id=self.vault_id, slot_id=sid, slot_type=stype, generation=generation or self._generation,
            vms=vms or self._vms.get(), recipient_public=cred.recipient.public, recipient_id=cred.recipient_id,
            kdf=cred.kdf, label=label, signer=actor.signer, signer_id=actor.writer_id,
        )
        name = slots.file_name(sid)
        self.shelf.write(name, data)
        return name

    @_api
    def search(self, text: str, *, limit: int = 200) -> list[RecordView]:
        """Full-text search with field modifiers (see :mod:`camillo.search`)."""
        self._require_read()
        from .search import search

        return search(self.state, text, limit=limit)

    @_api
    def semantic_search(self, text: str, embedder: Any, *, limit: int = 20) -> list[tuple[float, RecordView]]:
        self._require_read()
        from .search import semantic_search

        self._cache_dirty = True  # new vectors are kept in the (encrypted) cache
        return semantic_search(self.state, text, embedder, limit=limit)

    # ------------------------------------------------------------------------------ access

    @dataclass(frozen=True)
    class DeviceInfo:
        writer_id: bytes
        name: str
        platform: str
        kind: str
        enrolled: int
        last_seen: int | None
        revoked: bool
        this_device: bool
        replaced: bool = False  # an old key of a device that rotated its key (after an erasure, or re-certified)

    @_api
    def devices(self) -> list[Vault.DeviceInfo]:
        """The user's devices: name, platform, when enrolled, when last seen writing, revoked."""
        last: dict[bytes, int] = {}
        for v in self.views.values():
            w = v.header.writer_id
            last[w] = max(last.get(w, 0), shown_ts(v.header.ts) or 0)
        me = self.actor.writer_id if self.actor is not None else None
        replaced = {p.replaces for p in self.roster.principals.values() if p.replaces is not None}
        out = [Vault.DeviceInfo(p.writer_id, p.name, p.platform, p.kind.label, p.created, last.get(p.writer_id),
                                p.writer_id in self.roster.revocations, p.writer_id == me, p.writer_id in replaced)
               for p in self.roster.principals.values() if p.kind == CredentialKind.DEVICE]
        return sorted(out, key=lambda d: (d.replaced, d.revoked, d.enrolled, d.name))

    @_api
    def grants(self) -> list[dict[str, Any]]:
        """Agent grants: agent, compartments and levels, maximum class, expiry, last used, revoked."""
        last: dict[bytes, int] = {}
        for v in self.views.values():
            w = v.header.writer_id
            last[w] = max(last.get(w, 0), shown_ts(v.header.ts) or 0)
        out = []
        for p in self.roster.grants():
            g = p.grant
            rev = self.roster.revocations.get(p.writer_id)
            out.append({
                "grant_id": g.grant_id.hex(), "agent": g.agent, "writer": p.writer_id.hex(),
                "scopes": {self.roster.compartment_name(c): lv.label for c, lv in sorted(g.scopes.items())},
                "max_class": g.max_class.label, "expires": g.not_after, "created": g.created,
                "last_used": last.get(p.writer_id), "revoked": rev is not None, "revoked_at": rev.ts if rev else None,
            })
        return sorted(out, key=lambda g: (g["revoked"], g["created"]))

    @_api
    def create_grant(self, agent: str, scopes: dict[str, str | Any], out_path: str, *, max_class: Any = "inferred",
                     expires: int | None = None) -> Any:
        """Give an agent access: ``scopes`` maps compartment names to read, write or append.  Writes
        the grant file (the agent's credential, mode 0600) and returns it."""
        from .access import create_grant
        from .control import Level

        levels = {name: lv if isinstance(lv, Level) else Level.parse(lv) for name, lv in scopes.items()}
        return create_grant(self, agent, levels, Authority.parse(max_class) if isinstance(max_class, str)
                            else Authority(max_class), expires, out_path)

    @_api
    def revoke(self, who: str, *, reason: str = "", reauth: Unlock | None = None) -> Any:
        """Revoke a device (a lost laptop) or an agent grant, by name or id.  Returns a report."""
        from .access import find_principal, revoke

        report = revoke(self, find_principal(self, who), reason=reason, reauth=reauth)
        return report

    @_api
    def set_policy(self, *, erasure: bool, reason: str = "") -> Changes:
        from .access import set_policy

        set_policy(self, erasure=erasure, reason=reason)
        return Changes(policy=True, note="policy changed")

    @property
    def policy(self) -> Any:
        return self.roster.policy

    def _require_read(self) -> None:
        """An append-only grant reads nothing (spec §16.1)."""
        g = self.grant
        if g is not None and all(lv.label == "append" for lv in g.scopes.values()):
            raise AccessDenied(f"the grant of agent {g.agent} ({g.grant_id.hex()[:12]}) is append-only: it can add "
                               "records but not read any (rule: append grants never read)")

    # ------------------------------------------------------------------------------ overviews

    @_api
    def record_context(self, rid: bytes) -> dict[str, Any]:
        """The causal context of a record: its batch, writer and what that writer had seen."""
        self._require_read()
        v = self.state.record(rid)
        if v is None:
            raise UsageError(f"no record {rid.hex()[:12]}")
        view = self.views.get(v.batch_id)
        if view is None:
            return {"writer": v.writer}
        h = view.header
        seen = {self.roster.writer_name(w): s for w, s in h.frontier.items() if s and w != h.writer_id}
        return {"writer": v.writer, "seq": h.seq, "ts": shown_ts(h.ts), "seen": seen,
                "segment": view.segment, "compartment": self.roster.compartment_name(h.compartment_id)}

    @_api
    def activity(self, limit: int = 500) -> list[dict[str, Any]]:
        """Who wrote what, when, where, and how it was verified: one row per batch, newest first."""
        self._require_read()
        rows = []
        for bid, view in self.views.items():
            h = view.header
            kinds: dict[str, int] = {}
            for rid in h.records:
                r = self.state.db.execute("SELECT kind, type FROM records WHERE id = ?", (rid,)).fetchone()
                if r is None:
                    continue
                from .records import Kind as _Kind

                name = r[1] or _Kind(r[0]).name.lower() if r[0] in _Kind._value2member_map_ else "record"
                kinds[name] = kinds.get(name, 0) + 1
            p = self.roster.principals.get(h.writer_id)
            status = ("accepted" if bid in self.log.accepted else
                      f"rejected: {self.log.rejected.get(bid) or self.roster.excluded.get(bid) or 'not verified'}")
            rows.append({
                "batch": bid, "ts": shown_ts(h.ts) or 0, "writer": self.roster.writer_name(h.writer_id),
                "writer_kind": "agent" if p is not None and p.grant else (p.kind.label if p else "unknown"),
                "compartment": self.roster.compartment_name(h.compartment_id), "seq": h.seq,
                "records": len(h.records), "summary": ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())),
                "verified": "compaction signature" if view.vouched else "signature", "status": status,
            })
        rows.sort(key=lambda r: (-r["ts"], r["batch"]))
        return rows[:limit]

    @_api
    def health(self, *, stale_days: int = 30, many_agents: int = 3) -> dict[str, Any]:
        """What deserves the owner's attention (the KeePassXC reports idea)."""
        now = int(time.time())
        facts = self.state.facts()
        status, details = self.sync_status()
        last: dict[bytes, int] = {}
        for v in self.views.values():
            last[v.header.writer_id] = max(last.get(v.header.writer_id, 0), shown_ts(v.header.ts) or 0)
        grants = [g for g in self.grants() if not g["revoked"]]
        stale_grants = [g for g in grants if (g["last_used"] or g["created"]) < now - stale_days * 86400]
        devices = [d for d in self.devices() if not d.revoked]
        stale_devices = [d for d in devices if not d.this_device and (d.last_seen or d.enrolled) < now - stale_days * 86400]
        readers: dict[str, list[str]] = {}
        for g in grants:
            for comp, level in g["scopes"].items():
                if level in ("read", "write"):
                    readers.setdefault(comp, []).append(g["agent"])
        return {
            "conflicts": [f.key for f in facts if f.status == "conflict"],
            "pending": [f.key for f in facts if f.status == "pending"],
            "stale_grants": [g["agent"] for g in stale_grants],
            "stale_devices": [d.name for d in stale_devices],
            "crowded_compartments": {c: a for c, a in readers.items() if len(a) >= many_agents},
            "sync": status, "sync_details": details,
            "problems": [p.to_json() for p in self.problems() if p.kind not in ("waiting",)],
            "erasure_enabled": self.roster.policy.erasure_enabled,
            "devices": len(devices), "grants": len(grants), "records": self.state.count(),
        }

    @_api
    def erasure_preview(self, rid: bytes) -> dict[str, Any]:
        """What erasing ``rid`` will do, in numbers, before anything is done."""
        self._require_read()
        v = self.state.record(rid)
        if v is None:
            raise UsageError(f"no record {rid.hex()[:12]}")
        segs = [n for n, bids in self._segment_batches.items() if v.batch_id in bids]
        epochs = {self._segment_epochs[n][1] for n in segs if n in self._segment_epochs}
        affected = [n for n, (c, e) in self._segment_epochs.items() if c == v.compartment_id and e in epochs]
        batches = {b for n in affected for b in self._segment_batches.get(n, [])}
        readers = [g["agent"] for g in self.grants() if not g["revoked"]
                   and g["scopes"].get(v.compartment) in ("read", "write")]
        return {"record": v, "compartment": v.compartment, "epochs": len(epochs), "segments": len(affected),
                "batches": len(batches), "other_devices": [d.name for d in self.devices()
                                                           if not d.revoked and not d.this_device],
                "readers": readers, "allowed": self.roster.policy.erasure_enabled,
                "policy_reason": self.roster.policy.reason}

    # ------------------------------------------------------------------------------ curation

    def _write_per_compartment(self, per: dict[bytes, list[bytes]], note: str) -> Changes:
        written = self._write_batches(dict(per))
        records = tuple(r for bs in written.values() for b in bs for r in b.header.records)
        return Changes(records=records, batches=tuple(b.id for bs in written.values() for b in bs),
                       keys=self._take_moved_keys(),
                       compartments=frozenset(self.roster.compartment_name(c) for c in written), note=note)

    @_api
    def conflicts(self) -> list[FactView]:
        self._require_read()
        return self.state.facts(status="conflict")

    @_api
    def inbox(self) -> list[RecordView]:
        """Proposals awaiting the user: the current values of pending facts, preferences and
        instructions (agents' inferences and imported assistant memories)."""
        self._require_read()
        return [f.current for f in self.state.facts(status="pending") if f.current is not None]

    @_api
    def confirm(self, record_ids: Sequence[bytes]) -> Changes:
        self._require_owner("confirming an inference")
        actor = self._require_writer()
        from .curate import confirm_records

        return self._write_per_compartment(confirm_records(self.state, record_ids, actor.writer_id, actor.signer),
                                           f"confirmed {len(record_ids)}")

    @_api
    def reject(self, record_ids: Sequence[bytes]) -> Changes:
        self._require_owner("rejecting an inference")
        actor = self._require_writer()
        from .curate import reject_records

        return self._write_per_compartment(reject_records(self.state, record_ids, actor.writer_id),
                                           f"rejected {len(record_ids)}")

    @_api
    def resolve(self, key: str, *, compartment: str | None = None, pick: bytes | None = None,
                value: Any = None, value_given: bool = False) -> Changes:
        self._require_owner("resolving a conflict")
        actor = self._require_writer()
        from .curate import resolve_conflict

        fact = self.fact(key, compartment)
        raw = resolve_conflict(fact, actor.writer_id, pick=pick, value=_json_to_cbor(value), value_given=value_given)
        return self._write_per_compartment({fact.compartment_id: [raw]}, f"resolved {key}")

    @_api
    def forget(self, *, key: str | None = None, compartment: str | None = None,
               record: bytes | None = None) -> Changes:
        """Hide a fact (DEL of its key) or a message.  It stays in the history, unreadable to
        no one who could read it before; erase it to destroy it."""
        actor = self._require_writer()
        from .curate import forget

        cid = None
        if key is not None:
            cid = self.fact(key, compartment).compartment_id
        cid, raw = forget(self.state, actor.writer_id, compartment_id=cid, key=key, record=record)
        return self._write_per_compartment({cid: [raw]}, "forgotten")

    @_api
    def change_passphrase(self, new_passphrase: str, *, kdf: tuple[int, int, int] | None = None,
                          reauth: Unlock | None = None) -> Changes:
        """Replace the passphrase credential: one new slot and one certificate, O(1) in vault size.
        Needs the current passphrase or the recovery phrase (the credential the vault was unlocked
        with, or ``reauth``): a device key alone cannot mint a passphrase.  Copies of the old slot
        (sync history, backups) still open with the old passphrase; the spec's security section
        says so."""
        self._require_owner("changing the passphrase")
        actor = self._require_writer()
        if not new_passphrase:
            raise UsageError("the new passphrase is empty")
        from .access import authenticate

        cred = authenticate(self, reauth)
        old = [p for p in self.roster.principals.values()
               if p.kind == CredentialKind.PASSPHRASE and p.writer_id not in self.roster.revocations]
        new = from_passphrase(new_passphrase, KdfParams.fresh(kdf))
        records = [encode_record(
            Kind.CRED_ANCHOR, new.writer_id,
            body={0: owner_entry(CredentialKind.PASSPHRASE, new.signer.public, new.recipient.public, "passphrase", ""),
                  1: old[0].writer_id if old else None,
                  2: [new.kdf.memory_kib, new.kdf.time_cost, new.kdf.parallelism, new.kdf.salt]},
            signers=[new.signer, cred.signer, actor.signer],
        )]
        for p in old:
            records.append(self._revoke_record(p.writer_id, "passphrase changed",
                                               signers=[new.signer, cred.signer, actor.signer]))
        old_slots = [h.name for h in self._slot_headers()[0] if h.type == slots.SlotType.PASSPHRASE]
        slot = self._write_slot(new, slots.SlotType.PASSPHRASE, "passphrase")
        self._append_control(records, self._all_compartments(), undo=lambda: self._delete_quietly([slot]))
        for name in old_slots:
            self.shelf.delete(name)
        if self._unlocking is not None and self._unlocking.kind == CredentialKind.PASSPHRASE:
            self._unlocking = new
        return Changes(credentials=True, note="passphrase changed")

    def _revoke_record(self, subject: bytes, reason: str, *, signers: Sequence) -> bytes:
        """A REVOKE of ``subject`` with what this device has seen of every chain (its pins)."""
        seen: dict[bytes, dict[bytes, int]] = {}
        pins: dict[bytes, bytes] = {}
        for (w, c), chain in self.log.chains.items():
            if chain:
                seen.setdefault(c, {})[w] = max(chain)
                if w == subject:
                    pins[c] = chain[max(chain)]
        author = ids.writer_id(signers[-1].alg, signers[-1].public)
        return encode_record(Kind.REVOKE, author, body={0: subject, 2: seen, 3: pins, 4: reason}, signers=list(signers))

    def _reset_after_erasure(self) -> None:
        """Erasure destroyed keys and segments: forget everything read with them and read the
        vault again; the cache of the old state is deleted (spec §16.4, "devices purge caches")."""
        if self._cache is not None:
            self._cache.discard()
        cache, self._cache = self._cache, None
        self._reset_reading()
        self._cache = cache
        self._cache_dirty = True
        self._roster_fingerprint = b""
        self._roster_snapshot = None
        self._last_accepted = set()
        self._refresh()
        self._update_memory()

    @_api
    def compact(self, *, prune_now: bool = False) -> Any:
        """Re-encrypt small segments into large ones (see :mod:`camillo.compaction`)."""
        from .compaction import compact

        return compact(self, prune_now=prune_now)

    @_api
    def erase(self, record_ids: Sequence[bytes], *, reauth: Unlock | None = None) -> Any:
        """Erase records for real (crypto-erasure).  Returns the reach report."""
        from .erasure import erase

        return erase(self, list(record_ids), reauth=reauth)

    @_api
    def reissue_recovery_phrase(self, *, reauth: Unlock | None = None) -> str:
        """A new recovery phrase replaces the old one; returned once, never stored."""
        from .erasure import reissue_recovery

        return reissue_recovery(self, reauth=reauth)

    # ------------------------------------------------------------------------------ closing

    def lock(self) -> None:
        """Drop every key and the decrypted state.  The object cannot be used afterwards."""
        if _thread_guard is not None:
            _thread_guard()
        if self._locked:
            return
        try:
            self.save_cache()
        except VaultError:
            pass  # the cache is disposable; failing to save it loses nothing
        for s in self._epoch_secrets.values():
            s.wipe()
        if self._vms is not None:
            self._vms.wipe()
        self._epoch_secrets.clear()
        self._epoch_keys.clear()
        self._epoch_publics.clear()
        self._envelope_sources.clear()  # the payloads carry the epoch secrets they delivered
        self._owner_kem = None
        self._unlocking = None
        self._unlock_slot = None
        self.actor = None
        self.grant = None  # an agent's grant file carries its credential's seeds
        self._cache = None  # holds the local cache key
        self._state_store = None  # holds the local device-state key
        self.views = {}
        try:
            self.state.db.close()
        except Exception:  # noqa: S110 - closing a dropped in-memory database cannot lose data
            pass
        self.shelf.close()
        self._locked = True

    @property
    def locked(self) -> bool:
        return self._locked

    def __enter__(self) -> Vault:
        return self

    def __exit__(self, *exc: object) -> None:
        self.lock()


__all__ = [
    "DEFAULT_COMPARTMENTS",
    "NewRecord",
    "Problem",
    "Unlock",
    "Vault",
    "set_thread_guard",
]
