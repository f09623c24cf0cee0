"""The vault facade: the one public way to create, open, read and change a VMEM vault.

The command line, the MCP server, the importers, the exporters and the desktop app all go through
:class:`Vault` and the values of :mod:`camillo.values`; none of them touches files, keys or records
directly.  Every mutation returns a :class:`~camillo.changes.Changes`, or a typed report holding
one in ``.changes``, naming exactly what moved.

The facade holds one :class:`~camillo.session.Session` and delegates: opening to
:mod:`camillo.session.unlock`, :mod:`camillo.ops.repair` and :mod:`camillo.ops.registration` (spec
§20); reading memory to :class:`~camillo.reading.Reading` (mixed in), the session's reader and
:mod:`camillo.ops.reports`; writing to :mod:`camillo.ops`.

Threading: a Vault is confined to one thread (the desktop's vault worker; :func:`set_thread_guard`
installs a check that raises when a facade method runs on another; :mod:`camillo.facade`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from . import hostview, keychain, transport
from .changes import Changes
from .control import Level
from .errors import VaultError
from .facade import _check_thread, checked, set_thread_guard, thread_guard  # noqa: F401 (the facade's guard, re-exported)
from .hostview import HostView
from .keychain import KeychainStatus
from .ops import (
    attachments,
    compaction,
    compartments,
    credentials,
    curation,
    devices,
    enrollment,
    erasure,
    grants,
    policy,
    recipients,
    registration,
    repair,
    reports,
)
from .ops.enrollment import Offer
from .ops.revocation import find_principal, revoke
from .reading import Reading
from .records import Authority
from .session import Session
from .session.genesis import create_vault
from .session.installation import device_unlock_available
from .session.unlock import catch_up_generation, open_session, read_vault_id
from .values import (
    DEFAULT_COMPARTMENTS,
    ActivityRow,
    CompactionReport,
    CompartmentInfo,
    DeviceInfo,
    ErasurePreview,
    GrantCreated,
    GrantInfo,
    HealthReport,
    NewRecord,
    Notice,
    Policy,
    Problem,
    ReachReport,
    RecipientInfo,
    RecordContext,
    RecoveryPhrase,
    RevocationReport,
    SyncStatus,
    Unlock,
    VaultStats,
)


class Vault(Reading):
    """An open vault (:meth:`create`, :meth:`open`; :meth:`lock` closes it); ``session`` is for core tests."""

    def __init__(self, session: Session) -> None:
        self.session = session
        session.after_move = lambda: repair.roll_again_if_revoked_holds(session)
        session.reader.forget_changes()  # what the open read is where changes start from, not a change
        session.reader.shed_views()  # (what a cold open read stays in the state, not in memory)

    def __repr__(self) -> str:
        return f"Vault({self.vault_id.hex()[:12]}, {self.location!r})"

    # ------------------------------------------------------------------------------ opening

    @classmethod
    def create(cls, path: str, passphrase: str, *, compartments: Sequence[str] = DEFAULT_COMPARTMENTS,
               device_name: str | None = None, kdf: tuple[int, int, int] | None = None,
               home: str | None = None) -> tuple[Vault, str]:
        """Create a vault in an empty folder: the open vault and the recovery phrase (shown once)."""
        _check_thread()
        session, phrase = create_vault(path, passphrase, compartments=compartments, device_name=device_name,
                                       kdf=kdf, home=home)
        return cls(session), phrase

    @classmethod
    def open(cls, path: str, unlock: Unlock, *, register: bool = True, cache: bool = True, home: str | None = None,
             progress: Callable[[int, int], None] | None = None, device_name: str | None = None,
             read_only: bool = False, re_register: bool = False) -> Vault:
        """Open a vault folder or ``.vmem`` file.  ``register``: certify this installation as a writer on
        first use (§12.4).  ``cache=False`` verifies every file.  ``read_only``: no vault file or cache is
        written, only what this device saw (§17.5); a large read keeps its state in a scratch file of the
        cache directory, deleted on close, as any open without local state does.  ``home`` overrides CAMILLO_HOME.  ``progress(done,
        total)`` while reading (Cancelled stops it).  A revoked device re-registers only with ``re_register``."""
        _check_thread()
        session = open_session(path, unlock, cache=cache, home=home, progress=progress, read_only=read_only)
        try:
            if unlock.method != "grant":
                repair.finish_open(session, enrolling=unlock.enrolling)
                if register and not read_only:
                    registration.register_on_open(session, device_name, re_register=re_register)
        except BaseException:
            session.close()
            raise
        return cls(session)

    @staticmethod
    def device_unlock_available(path: str, home: str | None = None) -> bool:
        """Does the OS keychain hold this installation's device key for ``path``?  (Blocks: not on the GUI.)"""
        _check_thread()
        try:
            return device_unlock_available(read_vault_id(path), home)
        except (VaultError, FileNotFoundError, OSError):
            return False

    @staticmethod
    def is_new_installation(path: str, home: str | None = None) -> bool:
        """Has this installation never written to ``path`` (its first open registers it: ask for a name)?"""
        return registration.is_new_installation(read_vault_id(path, home), home)

    default_device_name = staticmethod(registration.default_device_name)
    make_recipient_key = staticmethod(recipients.make_key)  # (path, passphrase, name) -> RecipientKeyFile

    @staticmethod
    def join(path: str, code: str, *, name: str | None = None, home: str | None = None) -> Joining:
        """Join as a new device with the code another device of the owner shows (spec §21; :class:`Joining`)."""
        _check_thread()
        return Joining(path, code, name=name, home=home)

    @staticmethod
    def pack(path: str, out_path: str, *, replace: bool = True) -> tuple[int, bytes]:
        """Pack the vault into a ``.vmem`` file outside any vault folder (existing: ``replace``): (size, hash)."""
        return transport.pack_vault(path, out_path, replace=replace)

    # files, no keys: unpacking a ``.vmem`` file -> files written, copying what another copy has and this
    # folder lacks -> files copied, whether the OS keychain can hold device keys (blocks: off the GUI
    # thread), what the folder's host sees
    unpack: Callable[[str, str], int] = staticmethod(transport.unpack_vault)
    merge: Callable[[str, str], list[str]] = staticmethod(transport.merge_into)
    keychain_status: Callable[[], KeychainStatus] = staticmethod(keychain.status)
    host_view: Callable[[str], HostView] = staticmethod(hostview.host_view)

    # ------------------------------------------------------------------------------ what it is

    @property
    def vault_id(self) -> bytes:
        return self.session.vault_id

    @property
    def location(self) -> str:
        """The vault folder or ``.vmem`` file."""
        return self.session.shelf.location

    @property
    def read_only(self) -> bool:
        return self.session.read_only

    @property
    def locked(self) -> bool:
        return self.session.locked

    @property
    def unlocked_with(self) -> str:
        """What the user unlocked with, for status bars (passphrase, device key, grant of agent X)."""
        return self.session.unlocked_with

    @property
    def writer_id(self) -> bytes | None:
        """The writer this session writes as (this installation's device, or the agent's grant)."""
        return self.session.actor.writer_id if self.session.actor is not None else None

    @property
    def is_owner(self) -> bool:
        """Opened by the owner with a device that writes (not an agent, not read-only)."""
        return self.session.is_owner and not self.session.read_only

    @property
    def agent_grant(self) -> GrantInfo | None:
        """For a vault opened with a grant: that grant (agent, compartments and levels, revoked)."""
        return reports.own_grant(self.session)

    @property
    def compartments(self) -> dict[str, bytes]:
        """Data compartments by name (what this credential can address)."""
        return self.session.compartments

    @property
    def compartment_ids_of_grant(self) -> dict[str, bytes]:
        """For a vault opened with a grant: its compartments by name (from the grant file)."""
        return dict(self.session.grant_scope_ids) if self.session.grant is not None else {}

    def compartment_id(self, name: str) -> bytes:
        return self.session.compartment_id(name)

    @property
    def policy(self) -> Policy:
        return self.session.roster.policy

    def writer_name(self, writer_id: bytes) -> str:
        """A device's name, or an agent's, as the roster knows it."""
        return self.session.roster.writer_name(writer_id)

    # ------------------------------------------------------------------------------ reading

    @checked
    def refresh(self) -> Changes:
        """Pick up files other devices and agents wrote since the last look."""
        if catch_up_generation(self.session):
            changes = Changes(reloaded=True, note="another device changed the vault's keys")
        else:
            reloaded = self.session.refresh()
            self.session.update_memory()
            changes = self.session.reader.changes(reloaded=reloaded)
        if changes.empty:
            return changes
        return changes | repair.after_refresh(self.session)

    # ------------------------------------------------------------------------------ reports

    @checked
    def problems(self, *, full: bool = False) -> list[Problem]:
        """Everything wrong or incomplete about this copy: damaged files, gaps, forks, rejections."""
        return reports.problems(self.session, full=full)

    @checked
    def notices(self) -> list[Notice]:
        """What to tell the person about this device (refused or resealed writes, revocation, syncing)."""
        return reports.notices(self.session)

    @checked
    def stats(self) -> VaultStats:
        return reports.stats(self.session)

    @checked
    def sync_status(self) -> SyncStatus:
        """For status bars: "up to date", "syncing", "missing batches" or "rollback alert", with details."""
        return reports.sync_status(self.session)

    @checked
    def accept_current_state(self) -> Changes:
        """After the user has looked at a rollback alert: remember the vault as it is now."""
        self.session.accept_current_state()
        return Changes(note="the vault as it is now is remembered")

    @checked
    def devices(self) -> list[DeviceInfo]:
        """The user's devices: name, platform, when enrolled, when last seen writing, revoked."""
        return reports.devices(self.session)

    @checked
    def new_devices(self) -> list[DeviceInfo]:
        """Devices that joined and that no trusted device acknowledged yet ("was this you?")."""
        return [d for d in reports.devices(self.session) if d.new]

    @checked
    def recipients(self) -> list[RecipientInfo]:
        """Trusted people (recovery recipients) whose own key opens the vault, added or removed."""
        return recipients.recipients(self.session)

    @checked
    def compartment_list(self) -> list[CompartmentInfo]:
        """The data compartments: name, id, records, the agents granted each, when added."""
        return compartments.list_compartments(self.session)

    @checked
    def grants(self) -> list[GrantInfo]:
        """Agent grants: agent, compartments and levels, maximum class, expiry, last used, revoked."""
        return reports.grants(self.session)

    @checked
    def record_context(self, rid: bytes) -> RecordContext:
        """The causal context of a record: its writer, and what that writer had seen."""
        self.session.require_read()
        return reports.record_context(self.session, rid)

    @checked
    def activity(self, limit: int = 500) -> list[ActivityRow]:
        """Who wrote what, when, where, and how it was verified: one row per batch, newest first."""
        self.session.require_read()
        return reports.activity(self.session, limit)

    @checked
    def health(self, *, stale_days: int = 30, many_agents: int = 3) -> HealthReport:
        """What deserves the owner's attention (the KeePassXC reports idea)."""
        return reports.health(self.session, stale_days=stale_days, many_agents=many_agents)

    @checked
    def erasure_preview(self, rid: bytes) -> ErasurePreview:
        """What erasing ``rid`` will do, in numbers, before anything is done."""
        self.session.require_read()
        return reports.erasure_preview(self.session, rid)

    # ------------------------------------------------------------------------------ writing

    @checked
    def append(self, items: Sequence[NewRecord], compartment: str = "personal") -> Changes:
        """Append records as one batch; returns once the batch is durable on disk."""
        return curation.append(self.session, items, compartment)

    @checked
    def confirm(self, record_ids: Sequence[bytes], *, replace: bool = False) -> Changes:
        """Make proposals the user's word; over a different value of theirs only with ``replace``."""
        return curation.confirm(self.session, record_ids, replace)

    @checked
    def reject(self, record_ids: Sequence[bytes]) -> Changes:
        """Withdraw proposals (hidden); the fact's value stays as it was."""
        return curation.reject(self.session, record_ids)

    @checked
    def resolve(self, key: str, *, compartment: str | None = None, pick: bytes | None = None,
                value: Any = None, value_given: bool = False) -> Changes:
        """Settle a conflict: keep one candidate (``pick``), or write a new value."""
        return curation.resolve(self.session, key, compartment=compartment, pick=pick, value=value,
                                value_given=value_given)

    @checked
    def forget(self, *, key: str | None = None, compartment: str | None = None,
               record: bytes | None = None) -> Changes:
        """Hide a fact (DEL of its key) or a message.  It stays in the history; erase it to destroy it."""
        return curation.forget_memory(self.session, key=key, compartment=compartment, record=record)

    @checked
    def attach(self, source: str | Iterable[bytes], *, compartment: str = "personal", name: str | None = None,
               media_type: str | None = None, of: bytes | None = None) -> Changes:
        """Store a file (a path, or its bytes in pieces) encrypted in chunks, as an attachment of ``of``."""
        return attachments.attach(self.session, source, compartment=compartment, name=name, media_type=media_type, of=of)

    @checked
    def save_attachment(self, record_id: bytes, out_path: str) -> attachments.StoredFile:
        """Write an attachment's exact bytes to a new file, checked chunk by chunk and whole."""
        return attachments.read_attachment(self.session, record_id, out_path)

    @checked
    def attachment_bytes(self, record_id: bytes, limit: int) -> tuple[attachments.StoredFile, bytes]:
        """An attachment's exact bytes, checked, if it has at most ``limit`` bytes."""
        return attachments.attachment_bytes(self.session, record_id, limit)

    @checked
    def erase(self, record_ids: Sequence[bytes], *, reauth: Unlock | None = None) -> ReachReport:
        """Erase records for real (crypto-erasure).  Returns the reach report."""
        return erasure.erase(self.session, list(record_ids), reauth=reauth)

    @checked
    def compact(self, *, prune_now: bool = False) -> CompactionReport:
        """Re-encrypt small segments into large ones (see :mod:`camillo.ops.compaction`)."""
        return compaction.compact(self.session, prune_now=prune_now)

    # ------------------------------------------------------------------------------ access

    @checked
    def create_grant(self, agent: str, scopes: Mapping[str, str | Level], out_path: str, *,
                     max_class: str | int = "inferred", expires: int | None = None) -> GrantCreated:
        """Give an agent access (``scopes``: compartment → read, write or append); writes its grant file."""
        levels = {name: lv if isinstance(lv, Level) else Level.parse(lv) for name, lv in scopes.items()}
        klass = Authority.parse(max_class) if isinstance(max_class, str) else Authority(max_class)
        return grants.create_grant(self.session, agent, levels, klass, expires, out_path)

    @checked
    def revoke(self, who: str, *, reason: str = "", reauth: Unlock | None = None) -> RevocationReport:
        """Revoke a device (a lost laptop) or an agent grant, by name or id."""
        return revoke(self.session, find_principal(self.session, who), reason=reason, reauth=reauth)

    @checked
    def rename_device(self, who: str, new_name: str) -> Changes:
        """Rename a device (by name or id; this one included): a signed record every copy shows."""
        return devices.rename_device(self.session, who, new_name)

    @checked
    def acknowledge_devices(self, whos: Sequence[str]) -> Changes:
        """"Yes, this was me": the new devices named (by name or id) are no longer new."""
        return devices.acknowledge(self.session, whos)

    @checked
    def add_recipient(self, name: str, public_key_path: str, *, reauth: Unlock | None = None) -> Changes:
        """Let a trusted person recover the vault with their key (their ``.pub``); needs a credential."""
        return recipients.add_recipient(self.session, name, public_key_path, reauth=reauth)

    @checked
    def remove_recipient(self, who: str, *, reauth: Unlock | None = None) -> RevocationReport:
        """Revoke a trusted person's recovery key (the keys roll: it opens nothing written afterwards)."""
        return recipients.remove_recipient(self.session, who, reauth=reauth)

    @checked
    def add_compartment(self, name: str) -> Changes:
        """A new data compartment (its first epoch, and a copy of the roster for its future readers)."""
        return compartments.add_compartment(self.session, name)

    @checked
    def set_policy(self, *, erasure: bool, reason: str = "") -> Changes:
        return policy.set_policy(self.session, erasure=erasure, reason=reason)

    @checked
    def change_passphrase(self, new_passphrase: str, *, kdf: tuple[int, int, int] | None = None,
                          reauth: Unlock | None = None) -> Changes:
        """Replace the passphrase and roll the keys; needs a credential (after a recovery key, call this next)."""
        return credentials.change_passphrase(self.session, new_passphrase, kdf=kdf, reauth=reauth)

    @checked
    def reissue_recovery_phrase(self, *, reauth: Unlock | None = None) -> RecoveryPhrase:
        """A new recovery phrase replaces the old one (the keys roll); returned once, never stored."""
        return credentials.reissue_recovery(self.session, reauth=reauth)

    @checked
    def offer_device(self) -> Offer:
        """Start adding a device by QR code (spec §21): the offer shows the code, then confirms."""
        return Offer(self.session)

    @checked
    def resume_offer(self) -> Offer:
        """The offer this installation saved with :meth:`keep_offer` (the CLI runs it over commands)."""
        return enrollment.load_offer(self.session)

    @checked
    def keep_offer(self, offer: Offer) -> None:
        enrollment.save_offer(offer)

    @checked
    def drop_offer(self) -> None:
        enrollment.drop_offer(self.session)

    # ------------------------------------------------------------------------------ closing

    def save_cache(self) -> None:
        """Seal the materialised state into this actor's cache (done on lock when it changed)."""
        _check_thread()
        if not self.session.locked:
            self.session.save_cache()

    def lock(self) -> None:
        """Drop every key and the decrypted state.  The object cannot be used afterwards."""
        _check_thread()
        self.session.close()

    def __enter__(self) -> Vault:
        return self

    def __exit__(self, *exc: object) -> None:
        self.lock()


class Joining(enrollment.Join):
    """A new device joining a vault (the other side of :meth:`Vault.offer_device`): :meth:`start`
    gives the six digits to compare (``sas``), :meth:`poll` None until confirmed, then the open vault;
    ``device``: its credential (for :meth:`Unlock.with_device_credential`; never shown)."""

    def start(self) -> str:
        _check_thread()
        return super().start()

    def poll(self) -> Vault | None:
        _check_thread()
        session = self.poll_session()
        return Vault(session) if session is not None else None


__all__ = ["DEFAULT_COMPARTMENTS", "Joining", "NewRecord", "Problem", "Unlock", "Vault", "set_thread_guard"]
