"""Control records and the roster: who may sign, read and write in a vault (spec §14).

Control records (kinds 16 and up) are self-signed statements: their authority comes from the inner
signatures (record field 13), not from the batch that carries them, so the same bytes can be mirrored
into every compartment whose readers need them.  The roster is computed from them as a fixpoint that
starts at the genesis record (whose hash is the vault id):

1. the genesis owners are trusted;
2. a batch is *signed* when its writer is a known signer and its signature verifies; a batch whose
   writer is certified by a DEVICE_CERT inside the same batch (a new installation's first batch)
   counts too, once that certificate's owner signature verifies;
3. each control record in a signed batch is applied when its inner signatures include a current
   owner (and, for certificates, the subject itself: proof of possession);
4. repeat until nothing changes (a batch by a writer nobody certified yet, and a record whose
   signers are not principals yet, are tried again in every pass; what is still unsigned at the
   end is neither excluded nor reported); then judge the manifests' signers and the revocations'
   signers against every principal of the round, apply the revocations (spec §14.6) and repeat
   with the revoked writers' later batches excluded, until stable.

The result does not depend on the order in which files arrived.  Pure computation over decrypted
batches; confined to the thread that owns the vault.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import IntEnum
from typing import Any

from . import ids
from .credentials import CredentialKind
from .errors import CanonicalError, VaultError
from .primitives import (
    SIG_ED25519,
    XWING_PK_LEN,
    CryptoFailure,
    check_recipient_public,
    labelled,
    sha256,
    verify_signature,
)
from .records import (
    Authority,
    Batch,
    BatchHeader,
    Kind,
    Record,
    RecordIds,
    decode_record,
    verify_batch_signature,
    verify_batch_signatures,
    verify_inner_signatures,
)
from .revocation import (
    REAUTH_KINDS,
    Concurrency,
    Revocation,
    RevokedWriters,
    apply_revocations,
    field_bytes,
    retirements,
    retires_into,
    rival_retirements,
    seen_by,
)

MAX_DEVICE_NAME_BYTES = 200


class Level(IntEnum):
    """Grant levels, per compartment."""

    READ = 1
    WRITE = 2
    APPEND = 3

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def parse(cls, text: str) -> Level:
        try:
            return cls[text.strip().upper()]
        except KeyError:
            from .errors import UsageError

            raise UsageError(f"unknown grant level '{text}'; use read, write or append") from None


# Owner entry keys (in GENESIS, DEVICE_CERT, CRED_ANCHOR bodies)
class O:
    KIND = 0
    ALG = 1
    SIG_PK = 2
    RECIPIENT_PK = 3
    NAME = 4
    PLATFORM = 5


@dataclass(frozen=True)
class GrantInfo:
    grant_id: bytes
    agent: str
    scopes: dict[bytes, Level]
    max_class: Authority
    not_after: int | None
    created: int
    record_id: bytes


@dataclass
class Principal:
    """A key the vault knows: an owner-role credential or an agent grant."""

    writer_id: bytes
    kind: CredentialKind
    sig_alg: int
    sig_public: bytes
    recipient_public: bytes
    name: str
    platform: str
    created: int
    record_id: bytes
    replaces: bytes | None = None
    grant: GrantInfo | None = None
    certifiers: tuple[bytes, ...] = ()  # the owners whose signatures applied its certificate (not itself)
    via: str = ""  # how it joined: "genesis", or its certificate's body key 2 ("enrollment", "passphrase", …)
    certified_name: str = ""  # the name in its certificate (``name`` is the latest DEVICE_NAME's, if any)
    anchor_kdf: tuple[int, int, int, bytes] | None = None  # a passphrase anchor's body key 2: its slot's m, t, p, salt

    @property
    def is_owner(self) -> bool:
        return self.kind in (CredentialKind.DEVICE, CredentialKind.PASSPHRASE, CredentialKind.RECOVERY, CredentialKind.RECIPIENT)

    @property
    def recipient_id(self) -> bytes:
        return ids.recipient_id(self.recipient_public)


@dataclass(frozen=True)
class EpochInfo:
    compartment_id: bytes
    epoch_id: bytes
    prev: bytes | None
    reason: str
    public: bytes
    commit: bytes
    record_id: bytes
    ts: int
    generation: int = 0  # key 6: the master-secret generation it was first wrapped under (0: not said)


@dataclass(frozen=True)
class Policy:
    erasure_enabled: bool
    record_id: bytes | None
    signer: bytes | None
    ts: int | None
    reason: str = ""


@dataclass(frozen=True)
class ErasureInfo:
    record_id: bytes
    compartment_id: bytes
    targets: frozenset[bytes]
    epochs: tuple[bytes, ...]
    ts: int


@dataclass(frozen=True)
class DeviceName:
    """A DEVICE_NAME record: a device's new name, and the names of it that it replaces."""

    record_id: bytes
    subject: bytes
    name: str
    pred: frozenset[bytes]
    ts: int


@dataclass(frozen=True)
class ManifestInfo:
    """An ERASURE_MANIFEST or COMPACTION: segments that may vanish and batches vouched for."""

    kind: Kind
    record_id: bytes
    compartment_id: bytes
    removed: RecordIds  # (sorted, one byte string: a compaction at a million records lists 100,000 old segments)
    added: frozenset[bytes]
    batches: RecordIds  # (sorted, one byte string: and 100,000 batches)
    signer: bytes
    ts: int


@dataclass(slots=True)  # (slots: a cold open of a million records holds 100,000 views; a dict each was 16 MB)
class BatchView:
    """A decrypted batch with its decoded records, as the roster and the log see it."""

    batch: Batch
    segment: str
    epoch_id: bytes
    records: Sequence[Record | None]  # (a view read back from the state shares one tuple per length)
    signed: bool = False
    vouched: bool = False  # accepted on a COMPACTION record's signature (spec §16)
    sig_ok: bool = False  # the batch signature verified once (a writer id is bound to one key)
    id: bytes = field(init=False, repr=False)  # attributes, not properties: read for every batch
    header: BatchHeader = field(init=False, repr=False)
    writer_id: bytes = field(init=False, repr=False)  # (a view of the local state has it without its header)
    has_control: bool = field(init=False, repr=False)
    stored_flags: int = field(default=-1, repr=False, compare=False)  # the local state's (sig_ok, vouched, accepted)
    seq: int = field(init=False, repr=False, compare=False)
    compartment_id: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.id = self.batch.id
        h = self.header = self.batch.header  # (seq and compartment too: read for every batch of a revoked writer)
        self.writer_id, self.seq, self.compartment_id = h.writer_id, h.seq, h.compartment_id
        self.has_control = any(rec is not None and rec.is_control for rec in self.records)

    def verifier(self) -> Callable[[int, bytes, bytes, bytes], bool]:
        """How its records' inner signatures are checked (read back from the local state: camillo.memos)."""
        return verify_signature


@dataclass
class Roster:
    vault_id: bytes
    genesis: Record | None = None
    control_id: bytes | None = None
    compartments: dict[bytes, str] = field(default_factory=dict)
    principals: dict[bytes, Principal] = field(default_factory=dict)
    epochs: dict[tuple[bytes, bytes], EpochInfo] = field(default_factory=dict)
    revocations: dict[bytes, Revocation] = field(default_factory=dict)
    policies: dict[bytes, tuple[Record, bool, list[bytes]]] = field(default_factory=dict)
    erasures: dict[bytes, ErasureInfo] = field(default_factory=dict)
    manifests: dict[bytes, ManifestInfo] = field(default_factory=dict)
    problems: list[tuple[str, str, str]] = field(default_factory=list)
    excluded: dict[bytes, str] = field(default_factory=dict)  # batch id -> why it does not count
    renames: dict[bytes, DeviceName] = field(default_factory=dict)  # DEVICE_NAME records by record id
    acks: dict[bytes, set[bytes]] = field(default_factory=dict)  # device -> owners that acknowledged it
    compartments_added: dict[bytes, int] = field(default_factory=dict)  # by a COMPARTMENT record, when
    unknown_control: int = 0
    verify: Callable[[int, bytes, bytes, bytes], bool] = field(default=verify_signature, repr=False, compare=False)

    def fingerprint(self) -> bytes:
        """Changes whenever anything that record validity depends on changes."""
        parts = [self.genesis.id if self.genesis else b""]
        parts += sorted(p.record_id + bytes([p.kind]) for p in self.principals.values())
        parts += sorted(r.record_id for r in self.revocations.values())
        parts += sorted(self.erasures)
        parts += sorted(cid + name.encode() for cid, name in self.compartments.items())
        return sha256(b"".join(parts))

    def global_fingerprint(self) -> bytes:
        """The part of :meth:`fingerprint` that every record's validity depends on (the genesis and
        the erasures); the principals are compared one by one (see ``Vault._recompute``)."""
        return sha256(b"".join([self.genesis.id if self.genesis else b"", *sorted(self.erasures)]))

    # -- lookups

    def compartment_name(self, cid: bytes) -> str:
        return "control" if cid == self.control_id else self.compartments.get(cid, cid.hex()[:12])

    def compartment_id(self, name: str) -> bytes | None:
        return self.control_id if name == "control" else next(
            (cid for cid, n in self.compartments.items() if n == name), None)

    def signer_public(self, writer_id: bytes) -> bytes | None:
        return p.sig_public if (p := self.principals.get(writer_id)) else None

    def is_owner(self, writer_id: bytes) -> bool:
        return bool((p := self.principals.get(writer_id)) and p.is_owner)

    def owner_signed(self, signatures: Iterable[Sequence[Any]], message: bytes) -> bool:
        """Signed by an owner-role principal, revoked since or not (what it signed before its
        revocation stays valid: an envelope, a slot of a roll made before an erasure retired it)."""
        return any((p := self.principals.get(w)) is not None and p.is_owner
                   and self.verify(a, p.sig_public, message, s) for w, a, s in signatures)

    def destroyed_epochs(self) -> set[tuple[bytes, bytes]]:
        """Every (compartment, epoch) an applied ERASE destroyed."""
        return {(e.compartment_id, ep) for e in self.erasures.values() for ep in e.epochs}

    def erased_records(self) -> set[bytes]:  # every record an applied ERASE names
        return {t for e in self.erasures.values() for t in e.targets}

    def active_owner(self, writer_id: bytes) -> bool:
        return self.is_owner(writer_id) and writer_id not in self.revocations

    def writer_name(self, writer_id: bytes) -> str:
        p = self.principals.get(writer_id)
        if p is None:
            return f"unknown writer {writer_id.hex()[:12]}"
        return f"agent {p.grant.agent}" if p.grant else (p.name or p.kind.label)

    def devices(self) -> list[Principal]:
        return [p for p in self.principals.values() if p.kind == CredentialKind.DEVICE]

    def grants(self) -> list[Principal]:
        return [p for p in self.principals.values() if p.grant is not None]

    def epochs_of(self, cid: bytes) -> list[EpochInfo]:
        return sorted((e for (c, _), e in self.epochs.items() if c == cid), key=lambda e: (e.ts, e.record_id))

    def epoch_heads(self, cid: bytes) -> list[EpochInfo]:
        """The epochs of ``cid`` no other EPOCH record names as its predecessor (every epoch, if
        each one is named)."""
        mine = [e for (c, _), e in self.epochs.items() if c == cid]
        superseded = {e.prev for e in mine if e.prev is not None}
        return [e for e in mine if e.epoch_id not in superseded] or mine

    def current_epoch(self, cid: bytes) -> EpochInfo | None:
        """The epoch new writes use: a head of the epoch chain; among concurrent heads, the one of the
        highest generation, then the one whose EPOCH record id is smallest (spec §15.2)."""
        heads = self.epoch_heads(cid)
        return min(heads, key=preferred) if heads else None

    @property
    def policy(self) -> Policy:
        live = [(rec, enabled) for rid, (rec, enabled, _) in self.policies.items()
                if not any(rid in pred for (_, _, pred) in self.policies.values())]
        if not live:
            return Policy(True, None, None, None)
        # Concurrent policies: the most restrictive wins (erasure disabled).
        rec, enabled = min(live, key=lambda x: (x[1], x[0].id))
        return Policy(enabled, rec.id, rec.author, rec.ts, str(rec.body.get(1, "")))

    def can_write(self, writer_id: bytes, cid: bytes) -> tuple[bool, str]:
        p = self.principals.get(writer_id)
        if p is None:
            return False, "its writer is not certified in this vault"
        if p.kind == CredentialKind.DEVICE:
            return True, ""
        if p.grant is not None:
            level = p.grant.scopes.get(cid)
            if level in (Level.WRITE, Level.APPEND):
                return True, ""
            if level == Level.READ:
                return False, f"agent {p.grant.agent} holds a read grant for {self.compartment_name(cid)}, which cannot write"
            return False, f"agent {p.grant.agent} has no grant for {self.compartment_name(cid)}"
        return False, f"a {p.kind.label} credential signs control records only, never batches"


def preferred(e: EpochInfo) -> tuple[int, bytes]:
    """The order in which concurrent epoch heads are preferred for new writes (spec §15.2): the newest
    generation first (a join's epoch before those of the two rolls it joins: one of them may be readable
    by a credential the other revoked), then the smallest EPOCH record id."""
    return -e.generation, e.record_id


# Body parsing (each raises CanonicalError on a malformed body)


def _owner_entry(m: Any) -> tuple[CredentialKind, int, bytes, bytes, str, str]:
    if not isinstance(m, dict):
        raise CanonicalError("owner entry must be a map")
    kind_value: Any = m.get(O.KIND)  # untrusted CBOR: the lookup refuses what is not a credential kind
    try:
        kind = CredentialKind(kind_value)
    except ValueError:
        raise CanonicalError("owner entry has an unknown credential kind") from None
    alg, sig_pk, rpk, name, platform = (m.get(k) for k in (O.ALG, O.SIG_PK, O.RECIPIENT_PK, O.NAME, O.PLATFORM))
    if alg != SIG_ED25519 or not isinstance(sig_pk, bytes) or len(sig_pk) != 32:
        raise CanonicalError("owner entry needs an Ed25519 public key")
    if not isinstance(rpk, bytes) or len(rpk) != XWING_PK_LEN:
        raise CanonicalError("owner entry needs a 1216-byte X-Wing public key")
    try:
        check_recipient_public(rpk)
    except CryptoFailure:
        raise CanonicalError("owner entry has an invalid X-Wing public key") from None
    if not isinstance(name, str) or not isinstance(platform, str):
        raise CanonicalError("owner entry needs a name and a platform")
    return kind, alg, sig_pk, rpk, name, platform


def pop_message(vault_id: bytes, sig_public: bytes, recipient_public: bytes) -> bytes:
    """What a new credential signs to prove it holds its keys (its proof of possession)."""
    return labelled("vmem/v1/pop", vault_id, sig_public, recipient_public)


def recipient_pop_message(sig_public: bytes, recipient_public: bytes) -> bytes:
    """What a recovery recipient's key signs when it is made, before it knows any vault (its proof of
    possession; spec §3.9): a trusted person's key can serve several vaults."""
    return labelled("vmem/v1/recipient-pop", sig_public, recipient_public)


def owner_entry(kind: CredentialKind, sig_public: bytes, recipient_public: bytes, name: str,
                platform: str) -> dict[int, int | bytes | str]:
    return {O.KIND: int(kind), O.ALG: SIG_ED25519, O.SIG_PK: sig_public, O.RECIPIENT_PK: recipient_public,
            O.NAME: name, O.PLATFORM: platform}


def _principal_from_entry(entry: Any, record: Record, replaces: bytes | None = None) -> Principal:
    kind, alg, sig_pk, rpk, name, platform = _owner_entry(entry)
    return Principal(ids.writer_id(alg, sig_pk), kind, alg, sig_pk, rpk, name, platform, record.ts or 0, record.id,
                     replaces, certified_name=name)


def certified_key(rec: Record) -> tuple[bytes, bytes] | None:
    """The writer id and signing key a certificate certifies (None when its owner entry is malformed)."""
    try:
        p = _principal_from_entry(rec.body.get(0), rec)
    except CanonicalError:
        return None
    return p.writer_id, p.sig_public


_bytes = field_bytes


def _id_set(v: Any, n: int, what: str) -> frozenset[bytes]:
    if not isinstance(v, list):
        raise CanonicalError(f"{what} must be a list")
    return frozenset(_bytes(x, n, what) for x in v)


# The fixpoint


class _Builder:
    def __init__(self, vault_id: bytes, views: Mapping[bytes, BatchView], excluded: set[bytes],
                 prior: dict[bytes, Revocation], prior_grants: frozenset[bytes] = frozenset(),
                 off_chain: frozenset[bytes] = frozenset()) -> None:
        self.r = Roster(vault_id)
        self.views = views
        self.partition: tuple[list[BatchView], list[BatchView]] | None = None  # (control by id, others)
        self.excluded = excluded
        self.prior = prior  # revocations found by the previous round
        self.prior_grants = prior_grants  # the writers the previous round's GRANT records named (agents)
        self.off_chain = off_chain  # revoked writers' batches off the chains their revocations accepted
        self.known_keys: dict[bytes, bytes] = {}  # (every principal's key any round met: writer id -> key)
        self.grant_named: set[bytes] = set()
        self.applied: set[bytes] = set()
        self.pending_revokes: list[tuple[Record, BatchView, list[bytes]]] = []
        self.manifest_carriers: dict[bytes, tuple[Record, BatchView]] = {}
        self.concurrency: Concurrency | None = None
        self.retirements: Mapping[bytes, Mapping[bytes, list[tuple[Record, BatchView]]]] = {}  # (revocation.retirements)

    def find_genesis(self) -> bool:
        for view in (v for v in self.views.values() if v.has_control):  # (a plain batch holds no genesis)
            for rec in view.records:
                if rec is not None and rec.kind == Kind.GENESIS and ids.vault_id(rec.raw) == self.r.vault_id:
                    return self._apply_genesis(rec, view)
        return False

    def _apply_genesis(self, rec: Record, view: BatchView) -> bool:
        body = rec.body
        try:
            control = _bytes(body.get(1), 16, "control compartment id")
            comps = body.get(2)
            if not isinstance(comps, list):
                raise CanonicalError("compartment list missing")
            compartments = {}
            for item in comps:
                if not isinstance(item, list) or len(item) != 2 or not isinstance(item[1], str):
                    raise CanonicalError("malformed compartment entry")
                compartments[_bytes(item[0], 16, "compartment id")] = item[1]
            owners = [_principal_from_entry(e, rec) for e in body.get(3) or []]
            if not owners:
                raise CanonicalError("genesis lists no owners")
        except CanonicalError as exc:
            self.r.problems.append(("damaged", "genesis", f"the genesis record is malformed: {exc.message}"))
            return False
        table = {p.writer_id: p.sig_public for p in owners}
        try:
            good, unknown = verify_inner_signatures(rec, table.get, view.verifier())
        except Exception:
            good, unknown = [], [b"bad"]
        if set(good) != set(table) or unknown:
            self.r.problems.append(("damaged", "genesis", "the genesis record is not signed by every owner it lists"))
            return False
        self.r.genesis, self.r.verify = rec, view.verifier()  # (envelopes' signatures: as its records')
        self.r.control_id = control
        self.r.compartments = compartments
        for p in owners:
            p.via = "genesis"
            self.r.principals[p.writer_id] = p
        self.applied.add(rec.id)
        return True

    def run(self) -> None:
        if self.partition is None:
            self.partition = (sorted((v for v in self.views.values() if v.has_control), key=lambda v: v.id),
                              [v for v in self.views.values() if not v.has_control])
        (control_all, plain), excluded = self.partition, self.excluded
        control_views = [v for v in control_all if v.id not in excluded and v.id not in self.off_chain]
        other = [v for v in plain if v.id not in excluded] if excluded else plain
        changed = True
        while changed:
            changed = False
            for view in control_views:
                if not view.signed and self._try_sign(view):
                    changed = True
                if view.signed and self._apply_controls(view):
                    changed = True
        self.judge_manifest_signers()
        # Batches a valid owner listed in a COMPACTION record were verified by that owner: accept
        # them on its signature (``camillo verify --full`` checks them again).
        vouched: set[bytes] = set()
        for m in self.r.manifests.values():
            if m.kind == Kind.COMPACTION and m.signer not in self.prior:
                vouched.update(m.batches)
        principals, key = self.r.principals, self.r.signer_public
        todo = [v for v in other if not (v.signed or v.sig_ok or v.id in vouched) and key(v.writer_id)]
        for v, ok in zip(todo, verify_batch_signatures([(v.batch, key(v.writer_id) or b"") for v in todo])):
            v.sig_ok = ok  # (a writer id names one key: verified on every core, judged below)
        for view in other:  # verified once under its writer's key: no call (a million batches)
            if view.sig_ok and view.writer_id in principals:
                view.vouched, view.signed = False, True
            elif not view.signed:
                view.vouched = view.id in vouched and not view.sig_ok
                self._try_sign(view)

    def _try_sign(self, view: BatchView) -> bool:
        wid = view.header.writer_id
        pk = self.r.signer_public(wid)
        if pk is None:
            # Bootstrap: a certificate for this writer inside the batch, signed by an owner.
            for rec in view.records:
                if rec is not None and rec.kind == Kind.DEVICE_CERT:
                    try:
                        p = _principal_from_entry(rec.body.get(0), rec)
                    except CanonicalError:
                        continue
                    if p.writer_id == wid and self._cert_signers(rec, p, view) is not None:
                        pk = p.sig_public
                        break
        if pk is None:
            return False
        if view.vouched or view.sig_ok or verify_batch_signature(view.batch, pk):
            view.sig_ok = view.sig_ok or not view.vouched
            view.signed = True
            return True
        self.r.problems.append(("signature", view.segment, f"batch {view.id.hex()[:12]} has a signature that does not verify"))
        self.excluded.add(view.id)
        return False

    def _valid_owner(self, wid: bytes, view: BatchView) -> bool:
        """An owner whose signature counts in this batch: not revoked, or revoked by a revocation that had
        already seen this batch or that this batch's writer authored and carries (spec §14.1); never in a
        batch of a writer the previous round's GRANT records name."""
        if not self.r.is_owner(wid):
            return False
        rev = self.prior.get(wid)
        if rev is None:
            return True
        # Signatures made before the revocation count: in a batch the revocation had seen, or in the
        # very batch its author wrote it in (records of one batch are written together).  Never in an
        # agent's batch, nor in a copy of the revocation another writer carries: whoever also held the
        # revoked key could otherwise carry its signatures into a batch of their own (spec §14.1).
        if view.writer_id in self.prior_grants:
            return False
        return seen_by(rev, view) or (view.writer_id != wid and any(
            r is not None and r.id == rev.record_id and r.author == view.writer_id for r in view.records))

    def _owner_signers(self, rec: Record, view: BatchView) -> list[bytes]:
        def lookup(wid: bytes) -> bytes | None:
            return self.r.signer_public(wid) if self._valid_owner(wid, view) else None

        try:
            good, _ = verify_inner_signatures(rec, lookup, view.verifier())
        except Exception:
            return []
        return good

    def _cert_signers(self, rec: Record, p: Principal, view: BatchView) -> list[bytes] | None:
        return certificate_signers(self.r.vault_id, rec, p, lambda wid: (
            self.r.signer_public(wid) if self._valid_owner(wid, view) else None), view.verifier())

    def _anchored_by_user_credential(self, rec: Record, p: Principal, view: BatchView) -> bool:
        """A CRED_ANCHOR must also be signed by a current passphrase, recovery phrase or recovery
        recipient (re-authentication)."""
        def lookup(wid: bytes) -> bytes | None:
            q = self.r.principals.get(wid)
            if wid == p.writer_id or q is None or q.kind not in REAUTH_KINDS:
                return None
            return q.sig_public if self._valid_owner(wid, view) else None

        try:
            good, _ = verify_inner_signatures(rec, lookup, view.verifier())
        except Exception:
            return False
        return bool(good)

    def _apply_controls(self, view: BatchView) -> bool:
        changed = False
        for rec in view.records:
            if rec is None or not rec.is_control or rec.id in self.applied:
                continue
            if rec.kind == Kind.GENESIS:
                self.applied.add(rec.id)
                continue
            try:
                if self._apply(rec, view):
                    self.applied.add(rec.id)
                    changed = True
            except CanonicalError as exc:
                self.applied.add(rec.id)
                self.r.problems.append(("damaged", view.segment, f"control record {rec.id.hex()[:12]} is malformed: {exc.message}"))
        return changed

    def _apply(self, rec: Record, view: BatchView) -> bool:
        body = rec.body
        kind = rec.kind
        if kind in (Kind.DEVICE_CERT, Kind.CRED_ANCHOR):
            replaces = body.get(1)
            if replaces is not None:
                _bytes(replaces, 32, "replaced writer id")
            p = _principal_from_entry(body.get(0), rec, replaces)
            if kind == Kind.DEVICE_CERT and p.kind != CredentialKind.DEVICE:
                raise CanonicalError("a DEVICE_CERT must certify a device")
            if kind == Kind.CRED_ANCHOR and p.kind not in (CredentialKind.PASSPHRASE, CredentialKind.RECOVERY,
                                                          CredentialKind.RECIPIENT):
                raise CanonicalError("a CRED_ANCHOR certifies a passphrase, recovery phrase or recipient")
            certifiers = self._cert_signers(rec, p, view)
            if certifiers is None:
                return False
            if kind == Kind.CRED_ANCHOR and not self._anchored_by_user_credential(rec, p, view):
                return False  # a device alone cannot mint a passphrase or recovery credential
            if p.writer_id not in self.r.principals:
                p.certifiers = tuple(certifiers)
                via = body.get(2)
                p.via = via if isinstance(via, str) else ("anchor" if kind == Kind.CRED_ANCHOR else "")
                if kind == Kind.CRED_ANCHOR and isinstance(via, list) and [type(x) for x in via] == [int, int, int, bytes]:
                    p.anchor_kdf = (via[0], via[1], via[2], via[3])
                self.r.principals[p.writer_id] = p
            return True
        signers = self._owner_signers(rec, view)
        if not signers:
            return False
        if kind == Kind.GRANT:
            grant_id = _bytes(body.get(0), 16, "grant id")
            agent = body.get(1)
            scopes_raw = body.get(2)
            if not isinstance(agent, str) or not isinstance(scopes_raw, list) or not scopes_raw:
                raise CanonicalError("a grant needs an agent name and scopes")
            scopes = {}
            for item in scopes_raw:
                if not isinstance(item, list) or len(item) != 2:
                    raise CanonicalError("malformed grant scope")
                if type(item[1]) is not int:
                    raise CanonicalError("grant level must be an integer (1 read, 2 write, 3 append)")
                try:
                    scopes[_bytes(item[0], 16, "compartment id")] = Level(item[1])
                except ValueError:
                    raise CanonicalError("unknown grant level") from None
            sig_pk = _bytes(body.get(3), 32, "grant signing key")
            rpk = _bytes(body.get(4), XWING_PK_LEN, "grant recipient key")
            max_value = body.get(5)
            try:
                if type(max_value) is not int:
                    raise ValueError
                max_class = Authority(max_value)
            except ValueError:
                raise CanonicalError("grant max class must be 0..3") from None
            if max_class > Authority.OBSERVED:
                raise CanonicalError("an agent grant's maximum class is at most observed")
            not_after = body.get(6)
            info = GrantInfo(grant_id, agent, scopes, max_class, not_after if type(not_after) is int else None,
                             rec.ts or 0, rec.id)
            wid = ids.writer_id(SIG_ED25519, sig_pk)
            self.grant_named.add(wid)
            if wid not in self.r.principals:
                self.r.principals[wid] = Principal(wid, CredentialKind.GRANT, SIG_ED25519, sig_pk, rpk, agent, "agent",
                                                   rec.ts or 0, rec.id, grant=info)
            return True
        if kind == Kind.EPOCH:
            cid, eid = _bytes(body.get(0), 16, "compartment id"), _bytes(body.get(1), 16, "epoch id")
            if (prev := body.get(2)) is not None:
                _bytes(prev, 16, "previous epoch id")
            epk = _bytes(body.get(4), XWING_PK_LEN, "epoch public key")
            commit = _bytes(body.get(5), 32, "epoch commitment")
            reason = text if isinstance(text := body.get(3), str) else ""
            if type(generation := body.get(6, 0)) is not int or not 0 <= generation < 2**32:
                raise CanonicalError("epoch generation must be an integer from 0 to 2^32 - 1")
            key = (cid, eid)
            if key not in self.r.epochs or rec.id < self.r.epochs[key].record_id:
                self.r.epochs[key] = EpochInfo(cid, eid, prev, reason, epk, commit, rec.id, rec.ts or 0, generation)
            return True
        if kind == Kind.REVOKE:
            subject = _bytes(body.get(0), 32, "revoked writer id")
            if rec.author == subject and len(rec.sigs) == 1 and not retires_into(rec, view, certified_key):
                return False  # (a retirement only in the first batch of the key replacing it: another copy may be)
            self.pending_revokes.append((rec, view, signers))
            return True
        if kind == Kind.POLICY:
            erasure = body.get(0)
            if erasure not in ("enabled", "disabled"):
                raise CanonicalError("policy erasure must be 'enabled' or 'disabled'")
            pred = body.get(2) or []
            if not isinstance(pred, list):
                raise CanonicalError("policy pred must be a list")
            self.r.policies[rec.id] = (rec, erasure == "enabled", list(pred))
            return True
        if kind == Kind.ERASE:
            cid, targets = _bytes(body.get(0), 16, "compartment id"), _id_set(body.get(1), 32, "erased record ids")
            epochs = tuple(sorted(_id_set(body.get(2) or [], 16, "erased epochs")))
            self.r.erasures[rec.id] = ErasureInfo(rec.id, cid, targets, epochs, rec.ts or 0)
            return True
        if kind in (Kind.ERASURE_MANIFEST, Kind.COMPACTION):
            cid, added = _bytes(body.get(0), 16, "compartment id"), _id_set(body.get(2) or [], 32, "added segments")
            removed = RecordIds(sorted(_id_set(body.get(1) or [], 32, "removed segments")))
            batches = RecordIds(sorted(_id_set(body.get(3) or [], 32, "batch ids")))
            self.r.manifests[rec.id] = ManifestInfo(Kind(kind), rec.id, cid, removed, added, batches, signers[0], rec.ts or 0)
            self.manifest_carriers[rec.id] = (rec, view)
            return True
        if kind == Kind.COMPARTMENT:
            cid = _bytes(body.get(0), 16, "compartment id")
            if not isinstance(name := body.get(1), str) or not name:
                raise CanonicalError("a compartment needs a name")
            if cid not in self.r.compartments and cid != self.r.control_id:
                self.r.compartments[cid] = name
                self.r.compartments_added[cid] = rec.ts or 0
            return True
        if kind == Kind.DEVICE_NAME:
            subject = _bytes(body.get(0), 32, "renamed device")
            if not isinstance(name := body.get(1), str) or not name.strip() or len(name.encode()) > MAX_DEVICE_NAME_BYTES:
                raise CanonicalError(f"a device name must be non-empty text of at most {MAX_DEVICE_NAME_BYTES} bytes")
            pred = _id_set(body.get(2) or [], 32, "replaced names")
            if not (named := self.r.principals.get(subject)) or named.kind != CredentialKind.DEVICE:
                return False  # its certificate may come later in the fixpoint
            self.r.renames[rec.id] = DeviceName(rec.id, subject, name, pred, rec.ts or 0)
            return True
        if kind == Kind.DEVICE_ACK:
            subjects = _id_set(body.get(0), 32, "acknowledged devices")
            if not subjects:
                raise CanonicalError("an acknowledgement names at least one device")
            for subject in subjects:
                self.r.acks.setdefault(subject, set()).update(signers)
            return True
        self.r.unknown_control += 1
        return True

    def judge_manifest_signers(self) -> None:
        """A manifest's signer is its first valid owner signature in the order of field 13, judged
        once every control record of this round is applied (spec §14.5, §14.7): when the record was
        first met, a signer whose certificate sits in a later batch was not known yet, and the
        result must not depend on batch order."""
        for rid, (rec, view) in self.manifest_carriers.items():
            signers = self._owner_signers(rec, view)
            if signers and signers[0] != self.r.manifests[rid].signer:
                self.r.manifests[rid] = replace(self.r.manifests[rid], signer=signers[0])

    def apply_revocations(self) -> None:
        """Apply the REVOKE records met in this round (spec §14.6; camillo.revocation)."""
        apply_revocations(self.r, self.pending_revokes, self._owner_signers, self._concurrent_reauth,
                          rival_retirements(self.retirements, lambda w: self.r.signer_public(w) or self.known_keys.get(w),
                                            certified_key))

    def _concurrent_reauth(self, rec: Record, view: BatchView) -> list[bytes]:
        """The re-authenticating credentials that signed ``rec`` and were revoked by a revocation that
        ``view`` had not seen and that had not seen ``view`` (spec §14.6 step 3)."""
        if rec.author != view.writer_id:
            return []  # (a copy another writer carries: only the author's batches say what it had seen)
        concurrency = self.concurrency = self.concurrency or Concurrency(
            self.partition[0] if self.partition else (), self.views.values())

        def lookup(wid: bytes) -> bytes | None:
            q, rev = self.r.principals.get(wid), self.r.revocations.get(wid) or self.prior.get(wid)
            if q is None or q.kind not in REAUTH_KINDS or rev is None or not concurrency.concurrent(rev, view, rec.body[0]):
                return None
            return q.sig_public

        try:
            good, _ = verify_inner_signatures(rec, lookup, view.verifier())
        except Exception:
            return []
        return good


def _apply_names(r: Roster) -> None:
    """Each device shows its latest name: among the DEVICE_NAME records of it that no other one
    names as replaced, the one with the latest ``ts`` (then the greatest record id)."""
    replaced = {rid for n in r.renames.values() for rid in n.pred}
    for n in sorted((n for n in r.renames.values() if n.record_id not in replaced), key=lambda n: (n.ts, n.record_id)):
        r.principals[n.subject].name = n.name  # in that order: the latest applies last


def certificate_signers(vault_id: bytes, rec: Record, p: Principal, owner_key: Callable[[bytes], bytes | None],
                        verify: Callable[[int, bytes, bytes, bytes], bool] = verify_signature) -> list[bytes] | None:
    """A certificate needs an owner's signature and the subject's proof of possession: either the
    subject's own inner signature, or a signature in body field 3 (spec §14.3; a recovery
    recipient's may be the one its key made for any vault, §3.9).  ``owner_key`` gives the signing key of a
    signer that counts as an owner, ``verify`` checks a signature.  The owners that signed it, or None."""

    def lookup(wid: bytes) -> bytes | None:
        return p.sig_public if wid == p.writer_id else owner_key(wid)

    try:
        good, _ = verify_inner_signatures(rec, lookup, verify)
    except Exception:
        return None
    owners = [w for w in good if w != p.writer_id]
    if not owners:
        return None
    pop = rec.body.get(3)
    messages = [pop_message(vault_id, p.sig_public, p.recipient_public)]
    if p.kind == CredentialKind.RECIPIENT:
        messages.append(recipient_pop_message(p.sig_public, p.recipient_public))
    if p.writer_id in good or (isinstance(pop, bytes)
                               and any(verify(p.sig_alg, p.sig_public, m, pop) for m in messages)):
        return owners
    return None


def grant_trust(vault_id: bytes, roots: dict[bytes, bytes], certificates: Iterable[bytes],
                revocations: Iterable[tuple[bytes, list[Any], bytes]]) -> dict[bytes, bytes]:
    """The owner keys an append grant trusts to sign the epoch keys it seals to (spec §16.2): it cannot
    read the roster, so it follows the chain of owner certificates delivered to it (envelopes of kind
    3) from the owners its grant file names (``roots``, writer id -> signing key).  An owner revoked by
    another credential (an envelope of kind 4, ``(subject, signatures, signed message)``, signed by a
    key of the chain) is not trusted, nor is what only it certified (a lost device cannot certify a
    key of its own).  Returns writer id -> signing key."""
    chain: list[tuple[Record, Principal]] = []
    for raw in certificates:
        try:
            rec = decode_record(raw, expected_id=ids.record_id(raw))
            if rec.kind in (Kind.DEVICE_CERT, Kind.CRED_ANCHOR):
                chain.append((rec, _principal_from_entry(rec.body.get(0), rec)))
        except (VaultError, CanonicalError):
            continue

    def closure(barred: set[bytes]) -> dict[bytes, bytes]:
        keys = {w: k for w, k in roots.items() if w not in barred}
        while new := [p for rec, p in chain if p.writer_id not in keys and p.writer_id not in barred and p.is_owner
                      and certificate_signers(vault_id, rec, p, keys.get) is not None]:
            keys.update((p.writer_id, p.sig_public) for p in new)
        return keys

    reach = closure(set())
    barred = {subject for subject, sigs, message in revocations
              if any(isinstance(s, list) and len(s) == 3 and isinstance(s[0], bytes) and s[0] in reach and type(s[1]) is int
                     and isinstance(s[2], bytes) and verify_signature(s[1], reach[s[0]], message, s[2]) for s in sigs)}
    return closure(barred)


def build_roster(vault_id: bytes, views: Mapping[bytes, BatchView], excluded: Iterable[bytes] = (), *,
                 of_writers: Callable[[set[bytes]], Iterable[BatchView]] | None = None) -> tuple[Roster, set[bytes]]:
    """Compute the roster; return it and the ids of batches that are signed and not excluded.  When ``views``
    are some of the batches only (a warm open: those that can move the roster), ``of_writers`` gives every
    batch of the writers named, for the chains of revoked writers (spec §14.6, "Beyond the revocation")."""
    base = set(excluded)
    excluded_set, forged = set(base), set[tuple[str, str, str]]()  # (signatures that failed, any round)
    failed: set[bytes] = set()  # batches whose signature failed, any round
    found: Mapping[bytes, Mapping[bytes, list[tuple[Record, BatchView]]]] | None = None  # (the self-retirements)
    beyond_before: set[bytes] = set()  # what the previous round's revocations did not accept
    off_before: frozenset[bytes] = frozenset()  # (of those, off the accepted chain: they contribute nothing)
    prior: dict[bytes, Revocation] = {}
    prior_grants: frozenset[bytes] = frozenset()
    partition: tuple[list[BatchView], list[BatchView]] | None = None
    judge = RevokedWriters(views, of_writers)
    known_keys: dict[bytes, bytes] = {}  # every principal's key any round met (rivals verified with them, §14.6)

    reasons: dict[bytes, str] = {}
    for _ in range(16):
        for v in views.values():
            v.signed = False
        b = _Builder(vault_id, views, set(excluded_set), prior, prior_grants, off_before)
        started = set(b.excluded)
        b.partition, b.known_keys = partition, known_keys
        if not b.find_genesis():
            if not b.r.problems:
                b.r.problems.append(("missing", "genesis", "the genesis record was not found; the vault is incomplete"))
            return b.r, set()
        b.run()
        forged |= {p for p in b.r.problems if p[0] == "signature"}  # (the next round excludes their batches)
        failed |= b.excluded - started
        partition = b.partition
        known_keys.update((w, p.sig_public) for w, p in b.r.principals.items())
        if found is None:
            found = retirements(partition[0] if partition else ())
        b.retirements = found
        b.apply_revocations()
        # The next round excludes what both this round's revocations and the previous round's do not accept:
        # not what a revocation that no longer counts excluded (the first round, with no revocation known
        # yet, counts every signature: a revocation it applies may be one a later round drops, and its
        # exclusions alone would take with them the batches that drop it)
        off_now: set[bytes] = set()
        reasons = judge.not_accepted(b.r.revocations, b.r.writer_name, off_now)
        beyond_now = set(reasons)
        new_excluded = base | failed | (beyond_now & beyond_before)
        beyond_before = beyond_now
        revoked = {w: rev.record_id for w, rev in b.r.revocations.items()}
        # (the writers GRANT records name matter only beside revocations: §14.1's exceptions)
        if (new_excluded == excluded_set and revoked == {w: rev.record_id for w, rev in prior.items()}
                and (not b.r.revocations or b.grant_named == prior_grants)):
            break
        excluded_set, prior, prior_grants = new_excluded, b.r.revocations, frozenset(b.grant_named)
        off_before = frozenset(off_now)
    else:
        b.r.problems.append(("damaged", "roster", "the vault's revocations contradict each other and did not settle "
                                                  "after 16 rounds; run 'camillo verify' and revoke the devices again"))
    _apply_names(b.r)
    b.r.excluded.update(reasons)  # (the last round's: its revocations are the roster's)
    signed = {v.id for v in views.values() if v.signed and v.id not in excluded_set}
    b.r.problems += sorted(forged - set(b.r.problems))
    return b.r, signed
