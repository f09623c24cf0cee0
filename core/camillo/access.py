"""Access control: epochs, the keyring of envelopes, grants, revocation and policy (spec §15, §16).

Everything that changes who can read or write goes through two mechanisms:

* **new epochs**: a fresh epoch secret for a compartment, announced by a signed EPOCH record and
  delivered in envelopes to the owner KEM key and to the grants that may still read (the epoch
  public key to appenders).  Revoking anything that could read a compartment starts a new epoch
  there, so what is written afterwards is sealed to keys the revoked party never had;
* **rebuilding the keyring**: when the vault master secret rolls (a user credential is revoked, or
  erasure), every surviving epoch secret is wrapped again to the new owner KEM key and to the
  grants, every user credential gets a new slot, and every other slot and envelope is deleted.
  New files are written before control records, and old files are deleted last, so a crash at any
  point leaves a vault that opens; running the operation again completes it.

Revoking a user credential (a device, the passphrase, the recovery phrase) must be signed by the
passphrase or recovery credential: a stolen device alone cannot revoke the others.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import base64
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import encoding, envelopes, ids, keys, slots
from .control import Level, Principal, owner_entry, pop_message
from .credentials import Credential, CredentialKind, from_passphrase, from_recovery_phrase
from .errors import AccessDenied, ErasureDisabled, Revoked, UsageError, VaultError, WrongCredential
from .primitives import RecipientKey, SecretBytes, SigningKey, random_bytes
from .records import Authority, Kind, encode_record

if TYPE_CHECKING:
    from .vault import Unlock, Vault

SCHEDULED_EPOCH_SECONDS = 30 * 86400
SCHEDULED_EPOCH_BATCHES = 1000
USER_KINDS = (CredentialKind.DEVICE, CredentialKind.PASSPHRASE, CredentialKind.RECOVERY, CredentialKind.RECIPIENT)
SLOT_TYPE = {
    CredentialKind.DEVICE: slots.SlotType.DEVICE,
    CredentialKind.PASSPHRASE: slots.SlotType.PASSPHRASE,
    CredentialKind.RECOVERY: slots.SlotType.RECOVERY,
    CredentialKind.RECIPIENT: slots.SlotType.RECIPIENT,
}


def authenticate(vault: Vault, unlock: Unlock | None) -> Credential:
    """The passphrase or recovery credential that authorises an irreversible action.  Without an
    explicit ``unlock`` the credential the vault was unlocked with is used, if it is one of those."""
    if unlock is None:
        cred = vault._unlocking
        if cred is None or cred.kind not in (CredentialKind.PASSPHRASE, CredentialKind.RECOVERY):
            raise AccessDenied("this needs your passphrase or recovery phrase (re-authentication); "
                               "a device key alone cannot do it")
    elif unlock.method == "passphrase":
        kdfs = [h.kdf for h in vault._slot_headers()[0] if h.type == slots.SlotType.PASSPHRASE and h.kdf]
        cred = None
        for kdf in kdfs:
            candidate = from_passphrase(unlock.secret or "", kdf)
            if vault.roster.active_owner(candidate.writer_id):
                cred = candidate
                break
        if cred is None:
            raise WrongCredential("wrong passphrase; nothing was changed")
    elif unlock.method == "recovery":
        cred = from_recovery_phrase(unlock.secret or "")
    else:
        raise AccessDenied("re-authenticate with your passphrase or recovery phrase")
    if not vault.roster.active_owner(cred.writer_id):
        raise WrongCredential(f"that {cred.kind.label} is not a current credential of this vault; nothing was changed")
    return cred


# ---------------------------------------------------------------------------------------------
# New epochs and the keyring


@dataclass
class Rekey:
    """The files and records of one access change, applied in a crash-safe order by :func:`apply`."""

    vault: Vault
    records: dict[bytes, list[bytes]] = field(default_factory=dict)  # compartment -> control records
    files: list[tuple[str, bytes]] = field(default_factory=list)  # new envelopes and slots
    delete: list[str] = field(default_factory=list)
    new_secrets: dict[tuple[bytes, bytes], bytes] = field(default_factory=dict, repr=False)
    new_vms: bytes | None = field(default=None, repr=False)
    new_generation: int | None = None

    def add_records(self, compartments: list[bytes], *raws: bytes) -> None:
        for c in compartments:
            self.records.setdefault(c, []).extend(raws)


def _active_grants(vault: Vault, exclude: set[bytes]) -> list[Principal]:
    r = vault.roster
    return [p for p in r.grants() if p.writer_id not in r.revocations and p.writer_id not in exclude]


def _envelope(vault: Vault, kind: envelopes.EnvelopeKind, cid: bytes, eid: bytes, public: bytes, key: bytes,
              prev: bytes | None = None) -> tuple[str, bytes]:
    actor = vault.actor
    assert actor is not None
    data = envelopes.build_envelope(
        vault_id=vault.vault_id, kind=kind, compartment_id=cid, epoch_id=eid, recipient_public=public,
        recipient_id=ids.recipient_id(public), key=key, signer=actor.signer, signer_id=actor.writer_id,
        prev_epoch=prev,
    )
    return envelopes.file_name(data), data


def grant_envelopes(vault: Vault, grant: Principal, cid: bytes, eid: bytes, secret: bytes,
                    prev: bytes | None = None, *, current: bool = True) -> list[tuple[str, bytes]]:
    """Envelopes giving a grant its key for one epoch: the secret for read and write grants, the
    public key (current epoch only) for append grants."""
    assert grant.grant is not None
    level = grant.grant.scopes.get(cid)
    if level in (Level.READ, Level.WRITE):
        return [_envelope(vault, envelopes.EnvelopeKind.EPOCH_SECRET, cid, eid, grant.recipient_public, secret)]
    if level == Level.APPEND and current:
        epk = keys.epoch_key(secret, vault.vault_id, cid, eid).public
        return [_envelope(vault, envelopes.EnvelopeKind.EPOCH_PUBLIC, cid, eid, grant.recipient_public, epk, prev)]
    return []


def new_epoch(vault: Vault, rekey: Rekey, cid: bytes, reason: str, *, exclude: set[bytes],
              owner: RecipientKey | None = None) -> bytes:
    """Start a new epoch in ``cid``: EPOCH record (control + cid) and envelopes to the owner KEM key
    and the remaining grants.  Returns the new epoch id."""
    actor = vault.actor
    assert actor is not None
    current = vault.roster.current_epoch(cid)
    secret = random_bytes(32)
    eid = ids.new_random_id()
    epk = keys.epoch_key(secret, vault.vault_id, cid, eid).public
    record = encode_record(
        Kind.EPOCH, actor.writer_id,
        body={0: cid, 1: eid, 2: current.epoch_id if current else None, 3: reason, 4: epk,
              5: keys.epoch_commit(secret, vault.vault_id, cid, eid)},
        signers=[actor.signer],
    )
    rekey.add_records([vault.roster.control_id, cid] if cid != vault.roster.control_id else [cid], record)
    rekey.new_secrets[(cid, eid)] = secret
    owner_key = owner or vault._owner_kem
    assert owner_key is not None
    if rekey.new_vms is None:  # a rolled keyring wraps every secret itself
        rekey.files.append(_envelope(vault, envelopes.EnvelopeKind.EPOCH_SECRET, cid, eid, owner_key.public, secret))
        prev = current.epoch_id if current else None
        for g in _active_grants(vault, exclude):
            rekey.files += grant_envelopes(vault, g, cid, eid, secret, prev)
    return eid


def roll_keyring(vault: Vault, rekey: Rekey, *, exclude: set[bytes], destroyed: set[tuple[bytes, bytes]] = frozenset()) -> None:
    """Roll the master secret: new slots for every remaining user credential, every surviving epoch
    secret wrapped to the new owner KEM key and the remaining grants; every other slot and envelope
    is deleted after the new ones exist."""
    actor = vault.actor
    assert actor is not None and vault._vms is not None
    r = vault.roster
    new_vms = random_bytes(32)
    generation = max(vault._generation, max((h.generation for h in vault._slot_headers()[0]), default=0)) + 1
    owner = keys.owner_kem(new_vms, vault.vault_id, generation)
    rekey.new_vms, rekey.new_generation = new_vms, generation
    erased = {(e.compartment_id, ep) for e in r.erasures.values() for ep in e.epochs}  # never wrapped again
    secrets = {k: s.get() for k, s in vault._epoch_secrets.items() if k not in destroyed and k not in erased}
    secrets.update(rekey.new_secrets)
    grants = _active_grants(vault, exclude)
    for (cid, eid), secret in sorted(secrets.items()):
        rekey.files.append(_envelope(vault, envelopes.EnvelopeKind.EPOCH_SECRET, cid, eid, owner.public, secret))
        info = r.epochs.get((cid, eid))
        current = r.current_epoch(cid)
        is_current = current is not None and current.epoch_id == eid and not any(c == cid for c, _ in rekey.new_secrets)
        for g in grants:
            rekey.files += grant_envelopes(vault, g, cid, eid, secret, info.prev if info else None, current=is_current)
    kdf_by_recipient = {}
    headers = vault._slot_headers()[0]
    for h in headers:
        if h.kdf is not None and h.generation == vault._generation:
            try:
                st = slots.read_statement(h, vault.vault_id, vault._vms.get())
                kdf_by_recipient[st.recipient_id] = h.kdf
            except VaultError:
                continue
    for p in r.principals.values():
        if p.kind not in USER_KINDS or p.writer_id in r.revocations or p.writer_id in exclude:
            continue
        if p.kind == CredentialKind.PASSPHRASE and p.recipient_id not in kdf_by_recipient:
            continue  # an old passphrase whose slot is gone: nothing to re-issue
        sid = ids.new_random_id()
        rekey.files.append((slots.file_name(sid), slots.build_slot(
            vault_id=vault.vault_id, slot_id=sid, slot_type=SLOT_TYPE[p.kind], generation=generation, vms=new_vms,
            recipient_public=p.recipient_public, recipient_id=p.recipient_id,
            kdf=kdf_by_recipient.get(p.recipient_id), label=p.name, signer=actor.signer, signer_id=actor.writer_id,
        )))
    new_names = {n for n, _ in rekey.files}
    for name in vault.shelf.list():
        kind = name.split("/", 1)[0]
        if kind in ("slots", "env") and name not in new_names:
            rekey.delete.append(name)


def write_files(vault: Vault, files: list[tuple[str, bytes]]) -> list[str]:
    """Write an operation's new files (key files, re-encrypted segments), which go before the control
    records that announce them.  If one cannot be written (the disk is full, the folder became
    read-only), the ones written so far are deleted again: nothing announces them yet, so the failed
    operation leaves the vault as it found it (as its error message says).  Returns the names written,
    for ``_write_batches(undo=...)`` when the records announcing them cannot be written either."""
    written: list[str] = []
    try:
        for name, data in files:
            if vault.shelf.write(name, data):
                written.append(name)
    except VaultError:
        vault._delete_quietly(reversed(written))
        raise
    return written


def apply(vault: Vault, rekey: Rekey) -> None:
    """Write new key files, then the control records, then switch keys in memory, then delete."""
    written = write_files(vault, rekey.files)
    if rekey.new_vms is not None and rekey.new_generation is not None:
        vault._seal_device_key_for(rekey.new_vms, rekey.new_generation)  # before the records: crash safety
    if rekey.records:
        vault._write_batches(rekey.records, undo=lambda: vault._delete_quietly(reversed(written)))
    if rekey.new_vms is not None:
        old = vault._vms
        vault._vms = SecretBytes(rekey.new_vms)
        vault._generation = rekey.new_generation or vault._generation
        vault._owner_kem = keys.owner_kem(rekey.new_vms, vault.vault_id, vault._generation)
        if old is not None:
            old.wipe()
        vault._after_generation_roll()
    for name in rekey.delete:
        vault.shelf.delete(name)
    vault._reread_keys()


def slots_of(vault: Vault, recipient_id: bytes) -> list[str]:
    """The current generation's slots that wrap the master secret to ``recipient_id``."""
    assert vault._vms is not None
    out = []
    for h in vault._slot_headers()[0]:
        if h.generation != vault._generation:
            continue
        try:
            if slots.read_statement(h, vault.vault_id, vault._vms.get()).recipient_id == recipient_id:
                out.append(h.name)
        except VaultError:
            continue
    return out


def reissue_slots(vault: Vault, retiring: bytes, signer: Credential) -> tuple[list[tuple[str, bytes]], list[str]]:
    """The slots that stop counting when owner key ``retiring`` is retired without a keyring roll
    (re-certification, §12.4; key rotation after an erasure, §16.4): current-generation slots of
    active user credentials whose statement no active owner other than ``retiring`` signed (it
    created the vault, rolled the keyring last, enrolled a device, changed the passphrase).  Returns
    their copies signed by ``signer`` (same credential, master secret and generation; written before
    the records that retire the key) and the originals (deleted after those records)."""
    from .primitives import verify_signature

    r = vault.roster
    assert vault._vms is not None
    by_recipient = {p.recipient_id: p for p in r.principals.values()
                    if p.kind in USER_KINDS and p.writer_id != retiring and p.writer_id not in r.revocations}
    files: list[tuple[str, bytes]] = []
    originals: list[str] = []
    done: set[bytes] = set()
    for h in sorted(vault._slot_headers()[0], key=lambda h: h.name):
        if h.generation != vault._generation:
            continue
        try:
            st = slots.read_statement(h, vault.vault_id, vault._vms.get())
        except VaultError:
            continue
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
        if p.recipient_id in done:
            continue
        done.add(p.recipient_id)
        sid = ids.new_random_id()
        files.append((slots.file_name(sid), slots.build_slot(
            vault_id=vault.vault_id, slot_id=sid, slot_type=h.type, generation=h.generation, vms=vault._vms.get(),
            recipient_public=p.recipient_public, recipient_id=p.recipient_id, kdf=h.kdf, label=st.label,
            signer=signer.signer, signer_id=signer.writer_id,
        )))
    return files, originals


# ---------------------------------------------------------------------------------------------
# Grants


GRANT_ARMOR = ("-----BEGIN VMEM GRANT-----", "-----END VMEM GRANT-----")


@dataclass(frozen=True)
class GrantFile:
    vault_id: bytes
    grant_id: bytes
    agent: str
    scopes: dict[str, Level]
    max_class: Authority
    not_after: int | None
    credential: Credential
    trusted: tuple[tuple[bytes, bytes], ...] = ()  # owner devices (writer id, signing key) at grant time

    def __repr__(self) -> str:
        return f"GrantFile(agent={self.agent!r}, grant={self.grant_id.hex()[:12]})"

    @property
    def writer_id(self) -> bytes:
        return self.credential.writer_id


def write_grant_file(path: str, g: GrantFile, scope_ids: dict[str, bytes]) -> None:
    m = {
        0: "vmem-grant", 1: 1, 2: g.vault_id, 3: g.grant_id, 4: g.agent,
        5: [[scope_ids[n], int(level), n] for n, level in sorted(g.scopes.items())],
        6: g.credential.recipient.seed, 7: g.credential.signer.seed, 8: int(g.max_class), 9: g.not_after,
        10: [list(t) for t in g.trusted],
    }
    body = base64.b64encode(encoding.encode(m)).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    text = "\n".join([
        "# A Camillo grant: the credential of an agent for one vault. Keep it secret, like a password.",
        f"# agent: {g.agent}   vault: {g.vault_id.hex()[:12]}   grant: {g.grant_id.hex()}",
        f"# scopes: {', '.join(f'{n} ({lvl.label})' for n, lvl in sorted(g.scopes.items()))}   max class: {g.max_class.label}",
        GRANT_ARMOR[0], *lines, GRANT_ARMOR[1], "",
    ])
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


GRANT_NOT_AFTER_MAX = 253_402_300_799  # 9999-12-31T23:59:59Z: beyond it no calendar can show the expiry


def _is_bytes(v: Any, n: int) -> bool:
    return isinstance(v, bytes) and len(v) == n


def _check_grant_map(m: dict) -> None:
    """Every field of a grant file has its type before anything uses it (spec §16.2); ValueError
    naming the field otherwise."""
    checks = [
        (2, lambda v: _is_bytes(v, 32), "vault id"),
        (3, lambda v: _is_bytes(v, 16), "grant id"),
        (4, lambda v: isinstance(v, str) and v.strip() != "", "agent name"),
        (5, lambda v: isinstance(v, list) and v != [] and all(
            isinstance(s, list) and len(s) == 3 and _is_bytes(s[0], 16) and type(s[1]) is int
            and isinstance(s[2], str) for s in v), "scopes"),
        (6, lambda v: _is_bytes(v, 32), "X-Wing seed"),
        (7, lambda v: _is_bytes(v, 32), "Ed25519 seed"),
        (8, lambda v: type(v) is int, "maximum class"),
        (9, lambda v: v is None or (type(v) is int and 0 <= v <= GRANT_NOT_AFTER_MAX), "expiry"),
        (10, lambda v: isinstance(v, list) and all(
            isinstance(t, list) and len(t) == 2 and _is_bytes(t[0], 32) and _is_bytes(t[1], 32) for t in v),
         "trusted owner devices"),
    ]
    for key, ok, what in checks:
        if (key in m or key != 10) and (key not in m or not ok(m[key])):  # 10 is optional (older files)
            raise ValueError(f"its {what} (field {key}) is missing or malformed")


def read_grant_file(path: str) -> tuple[GrantFile, dict[str, bytes]]:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise UsageError(f"cannot read the grant file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not a Camillo grant file") from None
    try:
        start = text.index(GRANT_ARMOR[0]) + len(GRANT_ARMOR[0])
        end = text.index(GRANT_ARMOR[1])
        m = encoding.decode(base64.b64decode("".join(text[start:end].split()), validate=True), "grant file")
        if not isinstance(m, dict) or m.get(0) != "vmem-grant" or m.get(1) != 1:
            raise ValueError("not a version 1 grant")
        _check_grant_map(m)
        scopes, scope_ids = {}, {}
        for cid, level, name in m[5]:
            scopes[name] = Level(level)
            scope_ids[name] = cid
        cred = Credential.from_seeds(CredentialKind.GRANT, m[6], m[7])
        trusted = tuple((w, k) for w, k in m.get(10, []))
        return GrantFile(m[2], m[3], m[4], scopes, Authority(m[8]), m[9], cred, trusted), scope_ids
    except (ValueError, KeyError, TypeError, IndexError, VaultError) as exc:
        raise UsageError(f"{path} is not a valid Camillo grant file ({exc})") from None


def create_grant(vault: Vault, agent: str, scopes: dict[str, Level], max_class: Authority,
                 not_after: int | None, out_path: str) -> GrantFile:
    """Write a GRANT record (control + scoped compartments), the envelopes that give the agent its
    keys, and the grant file (the agent's credential)."""
    vault._require_owner("creating a grant")
    actor = vault._require_writer()
    if not agent.strip():
        raise UsageError("a grant needs an agent name")
    if max_class > Authority.OBSERVED:
        raise UsageError("an agent grant's maximum class is at most observed: only you write with user authority")
    if os.path.exists(out_path):
        raise UsageError(f"{out_path} already exists; choose another file for the grant")
    scope_ids = {name: vault.compartment_id(name) for name in scopes}
    cred = Credential.generate(CredentialKind.GRANT)
    grant_id = ids.new_random_id()
    record = encode_record(
        Kind.GRANT, actor.writer_id,
        body={0: grant_id, 1: agent, 2: sorted([scope_ids[n], int(lv)] for n, lv in scopes.items()),
              3: cred.signer.public, 4: cred.recipient.public, 5: int(max_class), 6: not_after,
              7: int(time.time())},
        signers=[actor.signer],
    )
    principal = Principal(cred.writer_id, CredentialKind.GRANT, cred.signer.alg, cred.signer.public,
                          cred.recipient.public, agent, "agent", int(time.time()), ids.record_id(record))
    from .control import GrantInfo

    principal.grant = GrantInfo(grant_id, agent, {scope_ids[n]: lv for n, lv in scopes.items()}, max_class, not_after,
                                int(time.time()), ids.record_id(record))
    files: list[tuple[str, bytes]] = []
    for name, cid in scope_ids.items():
        current = vault.roster.current_epoch(cid)
        for e in vault.roster.epochs_of(cid):
            secret = vault._epoch_secrets.get((cid, e.epoch_id))
            if secret is None:
                continue
            files += grant_envelopes(vault, principal, cid, e.epoch_id, secret.get(), e.prev,
                                     current=current is not None and e.epoch_id == current.epoch_id)
    trusted = tuple(sorted((p.writer_id, p.sig_public) for p in vault.roster.devices()
                           if p.writer_id not in vault.roster.revocations))
    g = GrantFile(vault.vault_id, grant_id, agent, dict(scopes), max_class, not_after, cred, trusted)
    write_grant_file(out_path, g, scope_ids)
    try:
        written = write_files(vault, files)
        vault._write_batches({c: [record] for c in [vault.roster.control_id, *scope_ids.values()]},
                             undo=lambda: vault._delete_quietly(reversed(written)))
    except BaseException:
        os.unlink(out_path)
        raise
    return g


def open_with_grant(vault: Vault, path: str) -> None:
    """Open ``vault`` as the agent holding the grant file at ``path``, with exactly its rights."""
    g, scope_ids = read_grant_file(path)
    vid = vault.vault_id.hex()[:12]
    if g.vault_id != vault.vault_id:
        raise WrongCredential(f"this grant is for vault {g.vault_id.hex()[:12]}, not vault {vid}")
    if g.not_after is not None and time.time() > g.not_after:
        raise Revoked(f"the grant of agent {g.agent} expired on "
                      f"{time.strftime('%Y-%m-%d', time.gmtime(g.not_after))}; ask the vault's owner for a new one")
    vault.actor = g.credential
    vault.grant = g
    vault._grant_scope_ids = scope_ids
    vault.unlocked_with = f"grant of agent {g.agent}"
    vault._load_cache()
    vault._refresh()
    if vault.roster.genesis is not None:
        p = vault.roster.principals.get(g.writer_id)
        if p is None or p.grant is None or p.grant.grant_id != g.grant_id:
            raise WrongCredential(f"vault {vid} does not know the grant of agent {g.agent} (not synced yet, or "
                                  "not a grant of this vault)")
        rev = vault.roster.revocations.get(g.writer_id)
        if rev is not None:
            when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(rev.ts)) if rev.ts else "an unknown date"
            raise Revoked(f"the grant of agent {g.agent} was revoked on {when}; it can no longer read or write "
                          f"vault {vid}")
    elif any(level != Level.APPEND for level in g.scopes.values()):
        raise WrongCredential(f"the grant of agent {g.agent} finds no readable key in vault {vid} "
                              "(revoked, not synced yet, or not a grant of this vault)")
    vault._open_state_store()
    vault._update_memory()


def check_grant(vault: Vault, cid: bytes, *, write: bool, read: bool = False, authority: int | None = None,
                key: str | None = None) -> None:
    """Refuse what the grant in use does not allow, naming the grant and the rule."""
    g = vault.grant
    if g is None:
        return
    name = vault.roster.compartment_name(cid)
    level = None
    for scope_name, lv in g.scopes.items():
        if vault.compartment_ids_of_grant.get(scope_name) == cid:
            level = lv
    who = f"the grant of agent {g.agent} ({g.grant_id.hex()[:12]})"
    if level is None:
        raise AccessDenied(f"{who} gives no access to compartment {name} (rule: a grant covers only its compartments)")
    if read and level == Level.APPEND:
        raise AccessDenied(f"{who} is append-only for {name}: it can add records but not read any "
                           "(rule: append grants never read)")
    if write and level == Level.READ:
        raise AccessDenied(f"{who} is read-only for {name} (rule: read grants cannot write)")
    if authority is not None and authority > g.max_class:
        raise AccessDenied(f"{who} may write at most {g.max_class.label} authority, not {Authority(authority).label} "
                           "(rule: only the user writes with user authority; agents stay within their grant's maximum)")
    if key is not None and level == Level.APPEND:
        prefix = f"append/{g.grant_id.hex()}/"
        if not key.startswith(prefix):
            raise AccessDenied(f"{who} may only write keys under {prefix} (rule: appenders write in their own "
                               "key namespace)")


# ---------------------------------------------------------------------------------------------
# Revocation


@dataclass(frozen=True)
class RevocationReport:
    subject: str
    kind: str
    compartments: tuple[str, ...]
    new_epochs: int
    generation: int | None
    deleted_files: int

    def lines(self) -> list[str]:
        out = [f"Revoked {self.kind} {self.subject}."]
        out.append(f"New keys for {', '.join(self.compartments)}: it cannot read anything written from now on.")
        out.append("Any batch it writes after this revocation is rejected by every copy of the vault.")
        if self.generation:
            out.append(f"The vault master secret rolled to generation {self.generation}; its old slot was deleted.")
        out.append("What it already read stays exposed: revocation cannot recall copies it made.")
        return out


def find_principal(vault: Vault, text: str) -> Principal:
    """A device or grant by grant id, writer id (or a unique prefix of 8+ hex digits), or name."""
    needle = text.strip().lower()
    r = vault.roster
    matches = []
    for p in r.principals.values():
        ids_ = [p.writer_id.hex()]
        if p.grant is not None:
            ids_.append(p.grant.grant_id.hex())
        if (len(needle) >= 8 and any(i.startswith(needle) for i in ids_)) or needle in (
            p.name.lower(), (p.grant.agent.lower() if p.grant else "")):
            matches.append(p)
    live = [p for p in matches if p.writer_id not in r.revocations]
    if len(live) == 1:
        return live[0]
    if not matches:
        raise UsageError(f"no device or grant '{text}' in this vault (see 'camillo devices' and 'camillo grants')")
    if not live:
        raise UsageError(f"'{text}' is already revoked")
    raise UsageError(f"'{text}' matches several devices or grants; give more of its id")


def revoke(vault: Vault, subject: Principal, *, reason: str = "", reauth: Unlock | None = None) -> RevocationReport:
    vault._require_owner("revoking")
    actor = vault._require_writer()
    r = vault.roster
    if subject.writer_id in r.revocations:
        raise UsageError(f"{subject.name} is already revoked")
    if actor is not None and subject.writer_id == actor.writer_id:
        raise UsageError("this device cannot revoke itself; revoke it from another device or re-enrol")
    signers: list[SigningKey] = [actor.signer]
    is_user = subject.kind in USER_KINDS
    if is_user or reauth is not None:
        cred = authenticate(vault, reauth)  # a user credential's revocation always needs it
        signers = [cred.signer, actor.signer]
        owners_left = [p for p in r.principals.values() if p.kind in USER_KINDS and p.writer_id not in r.revocations
                       and p.writer_id != subject.writer_id]
        if not owners_left:
            raise UsageError("this is the last credential of the vault; it cannot be revoked")
    rekey = Rekey(vault)
    exclude = {subject.writer_id}
    if subject.grant is not None:
        affected = sorted(subject.grant.scopes)
    else:
        affected = [r.control_id, *sorted(r.compartments)]
    owner = None
    if is_user:
        roll_keyring(vault, rekey, exclude=exclude)  # also wraps the new epochs below
        owner = keys.owner_kem(rekey.new_vms, vault.vault_id, rekey.new_generation)
    what = subject.grant.agent if subject.grant else subject.name
    for cid in affected:
        new_epoch(vault, rekey, cid, f"revoked {what}", exclude=exclude, owner=owner)
    if is_user:
        # the new epochs' secrets must be in the rolled keyring too
        for (cid, eid), secret in rekey.new_secrets.items():
            rekey.files.append(_envelope(vault, envelopes.EnvelopeKind.EPOCH_SECRET, cid, eid, owner.public, secret))
            prev = r.current_epoch(cid)
            for g in _active_grants(vault, exclude):
                rekey.files += grant_envelopes(vault, g, cid, eid, secret, prev.epoch_id if prev else None)
    revoke_record = vault._revoke_record(subject.writer_id, reason or f"revoked {what}", signers=signers)
    rekey.add_records([r.control_id, *sorted(r.compartments)], revoke_record)
    apply(vault, rekey)
    if subject.kind == CredentialKind.DEVICE:
        pass  # the revoked device's keychain entry is on that device; nothing to delete here
    return RevocationReport(
        what, "agent grant" if subject.grant else subject.kind.label,
        tuple(r.compartment_name(c) for c in affected), len(affected), rekey.new_generation, len(rekey.delete),
    )


def finish_credential_changes(vault: Vault) -> int:
    """Delete the current generation's dead slots: those of revoked user credentials (the last step
    of a passphrase change or recovery phrase re-issue, spec §16.7, or of a device key's retirement,
    §12.4 and §16.4, when a crash came between the control records and the deletion: such a slot no
    longer counts, but the old secret still unwraps the current master secret from it), and those
    whose every signer is revoked (originals that a retirement re-issued, which can never count
    again).  Returns how many slots were deleted."""
    r = vault.roster
    if vault._vms is None or vault.actor is None or vault.actor.kind != CredentialKind.DEVICE:
        return 0
    dead = {p.recipient_id for p in r.principals.values() if p.writer_id in r.revocations and p.kind in USER_KINDS}
    if not r.revocations:
        return 0
    deleted = 0
    for h in vault._slot_headers()[0]:
        if h.generation != vault._generation:
            continue
        try:
            st = slots.read_statement(h, vault.vault_id, vault._vms.get())
        except VaultError:
            continue
        if st.recipient_id in dead or all(sig[0] in r.revocations for sig in st.signatures):
            vault.shelf.delete(h.name)
            deleted += 1
    return deleted


def set_policy(vault: Vault, *, erasure: bool, reason: str = "") -> None:
    vault._require_owner("changing the vault policy")
    actor = vault._require_writer()
    live = [rid for rid, (_, _, pred) in vault.roster.policies.items()
            if not any(rid in p for (_, _, p) in vault.roster.policies.values())]
    record = encode_record(Kind.POLICY, actor.writer_id, body={0: "enabled" if erasure else "disabled", 1: reason,
                                                               2: sorted(live)}, signers=[actor.signer])
    vault._write_batches({c: [record] for c in [vault.roster.control_id, *vault.roster.compartments]})


def require_erasure_allowed(vault: Vault) -> None:
    pol = vault.roster.policy
    if not pol.erasure_enabled:
        when = time.strftime("%Y-%m-%d", time.gmtime(pol.ts)) if pol.ts else "an unknown date"
        raise ErasureDisabled(
            f"this vault's policy forbids erasure (set by {vault.roster.writer_name(pol.signer or b'')} on {when}"
            + (f": {pol.reason}" if pol.reason else "") + "); 'forget' still hides records from agents"
        )


def scheduled_epochs(vault: Vault) -> None:
    """Start a new epoch where the current one is older than 30 days or holds 1000 batches."""
    if vault.actor is None or vault.actor.kind != CredentialKind.DEVICE or vault._owner_kem is None:
        return
    now = int(time.time())
    # Counting batches per epoch walks every batch: do it when a minute passed or a sixteenth of the
    # limit arrived since the last count (the policy is "about 1000 batches or 30 days", not exact).
    last_time, last_size = getattr(vault, "_epoch_check", (0.0, -(1 << 30)))
    step = max(1, min(64, SCHEDULED_EPOCH_BATCHES // 16))
    if time.monotonic() - last_time < 60 and len(vault.views) - last_size < step:
        return
    vault._epoch_check = (time.monotonic(), len(vault.views))
    due = []
    counts = Counter(v.epoch_id for v in vault.views.values())  # one pass for every compartment
    for cid in [vault.roster.control_id, *vault.roster.compartments]:
        epoch = vault.roster.current_epoch(cid)
        if epoch is None:
            continue
        if now - epoch.ts >= SCHEDULED_EPOCH_SECONDS or counts[epoch.epoch_id] >= SCHEDULED_EPOCH_BATCHES:
            due.append(cid)
    if not due:
        return
    rekey = Rekey(vault)
    for cid in due:
        new_epoch(vault, rekey, cid, "scheduled", exclude=set())
    apply(vault, rekey)


def principal_entry(cred: Credential, name: str, platform: str) -> dict[int, Any]:
    return owner_entry(cred.kind, cred.signer.public, cred.recipient.public, name, platform)


def proof_of_possession(vault_id: bytes, cred: Credential) -> bytes:
    return cred.signer.sign(pop_message(vault_id, cred.signer.public, cred.recipient.public))
