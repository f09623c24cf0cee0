"""REVOKE records: what a revocation accepted, which batches come after it, and how the roster applies
them (spec §14.6).

A revocation's ``seen`` says what its writer had accepted of every chain, and ``pins`` which batch of the
revoked writer ends each of its chains: a batch of the revoked writer beyond that, or off the chain that
leads down from the pin, is rejected on every copy, and the revoked key's signatures count only in
batches the revocation had seen (spec §14.1, §14.6); a batch of it off that chain contributes no control
record from the round after the revocation is found.  A retirement (a key revoking itself) counts only in
the first batch of the key that replaces it, and a key that retired itself more than once (a backup of a
rotated key) counts as retired where every retirement agrees.  One exception, for re-authentication
only: a passphrase (or recovery) signature on the revocation of a *device*, made while another device,
unseen, replaced that passphrase, still counts when neither change had seen the other (the two batches'
frontiers and ``seen`` say so, all signed).  Without it, revoking a lost phone on one device while another
changes the passphrase was dropped for good on every copy.

Pure computation over decrypted batches; confined to the thread that owns the vault (as camillo.control).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Generic, Protocol, TypeVar

from .credentials import CredentialKind
from .errors import CanonicalError, VaultError
from .records import Batch, BatchHeader, Kind, Record, verify_batch_signature, verify_inner_signatures

# Who may re-authenticate an irreversible change (a new credential, a user credential's revocation)
REAUTH_KINDS = (CredentialKind.PASSPHRASE, CredentialKind.RECOVERY, CredentialKind.RECIPIENT)
USER_KINDS = (CredentialKind.DEVICE, *REAUTH_KINDS)


class BatchView(Protocol):
    """What these rules read of a batch (camillo.control.BatchView; a protocol, so that the roster
    module can use this one without a cycle)."""

    id: bytes
    seq: int
    compartment_id: bytes
    writer_id: bytes
    segment: str
    records: Sequence[Record | None]
    signed: bool
    has_control: bool
    stored_flags: int  # (the local state's: sig_ok 1, vouched 2, accepted 4; -1 when not read from it)
    sig_ok: bool

    @property
    def header(self) -> BatchHeader: ...

    @property
    def batch(self) -> Batch: ...

    def verifier(self) -> Callable[[int, bytes, bytes, bytes], bool]: ...


class Roster(Protocol):
    """What applying revocations changes (camillo.control.Roster)."""

    @property
    def principals(self) -> Mapping[bytes, Any]: ...

    revocations: dict[bytes, Revocation]
    problems: list[tuple[str, str, str]]


V = TypeVar("V", bound=BatchView)


@dataclass(frozen=True)
class Revocation:
    subject: bytes
    record_id: bytes
    seen: dict[bytes, dict[bytes, int]]
    pins: dict[bytes, bytes]
    reason: str
    ts: int
    signers: tuple[bytes, ...]
    # (rival retirements combined into this one: a batch any of them did not accept is beyond it)
    rivals: tuple[Revocation, ...] = ()


def revocation_body(subject: bytes, chains: Mapping[tuple[bytes, bytes], Mapping[int, bytes]],
                    reason: str) -> dict[int, Any]:
    """The body of a REVOKE of ``subject`` by a writer whose causal log holds ``chains``
    ((writer, compartment) -> {seq: batch id}, the accepted batches): ``seen`` = for every chain its
    highest accepted seq (the highest, also when a lower seq is missing), ``pins`` = the subject's
    highest accepted batch per compartment (spec §14.6)."""
    seen: dict[bytes, dict[bytes, int]] = {}
    pins: dict[bytes, bytes] = {}
    for (w, c), chain in chains.items():
        if chain:
            top = max(chain)
            seen.setdefault(c, {})[w] = top
            if w == subject:
                pins[c] = chain[top]
    return {0: subject, 2: seen, 3: pins, 4: reason}


def seen_by(rev: Revocation, view: BatchView) -> bool:
    """Whether the revocation had accepted ``view`` (its ``seen`` covers the batch's seq)."""
    # (a view's seq and compartment are attributes: a view read back from the state has them undecoded)
    return rev.seen.get(view.compartment_id, {}).get(view.writer_id, 0) >= view.seq


def retires_into(rec: Record, view: BatchView, certified: Callable[[Record], tuple[bytes, bytes] | None]) -> bool:
    """Whether ``view`` may carry ``rec``, a retirement of its author's key (a REVOKE of the key by that key
    alone, spec §14.6 step 1): a batch written by the key that replaces it, which the same batch certifies
    (a DEVICE_CERT by the retiring key naming it as replaced; ``certified`` gives a certificate's writer id
    and signing key), whose signature verifies under that key, and which the retirement's ``seen`` covers.
    Key rotation writes nothing else; a retirement anywhere else (a batch of the retiring key itself, one
    that claims another writer) counts for nothing, so that whoever holds a backup of the key cannot place
    a second retirement where the first one's ``seen`` seems to cover it.  (The roster's own judgement of
    the batch's signature is not asked: it depends on the retirement, and rival ones would never settle.)"""
    subject = rec.body.get(0)
    if view.writer_id == subject:
        return False
    seen = rec.body.get(2)
    per = seen.get(view.compartment_id) if isinstance(seen, dict) else None
    if not isinstance(per, dict) or not isinstance(n := per.get(view.writer_id), int) or n < view.seq:
        return False
    for r in view.records:
        if r is not None and r.kind == Kind.DEVICE_CERT and r.author == subject and r.body.get(1) == subject:
            new = certified(r)
            if new is not None and new[0] == view.writer_id:
                return view.sig_ok or verify_batch_signature(view.batch, new[1])
    return False


def beyond_revocation(rev: Revocation, views: Iterable[BatchView]) -> dict[bytes, str]:
    """The batches among ``views`` (every batch here of the revoked writer) that ``rev`` or any rival
    retirement combined into it did not accept, each with the reason (:func:`_beyond`)."""
    views = list(views)
    out = _beyond(rev, views)
    for other in rev.rivals:
        for vid, why in _beyond(other, views).items():
            out.setdefault(vid, why)
    return out


def _beyond(rev: Revocation, views: Iterable[BatchView]) -> dict[bytes, str]:
    """The batches among ``views`` (every batch here of the revoked writer) that the revocation did not
    accept, each with the reason (spec §14.6, "Beyond the revocation"): above its ``seen`` seq in their
    compartment; at it but not the pinned batch; or below it but not on the chain that leads, by ``prev``,
    down from the pinned batch.  Where that chain cannot be followed (a batch of it is not here yet), a
    batch below waits if it holds a control record (when the revocation names a pin there: one without
    pins says nothing of which batch) or another batch of the writer stands at its seq (a
    fork: both wait until the chain says which); a plain one alone at its seq is kept, and so is one this
    device's local state holds as accepted (its causal log accepted it on one chain from seq 1).  When no
    batch below is doubtful and no seq is taken twice, the chain is not followed (no header is decoded).
    Without the chain rule a revoked device could write a second batch at a seq the revocation had seen
    and certify a new device with its old key."""
    by_compartment: dict[bytes, list[BatchView]] = {}
    for v in views:
        by_compartment.setdefault(v.compartment_id, []).append(v)
    out: dict[bytes, str] = {}
    for cid, vs in by_compartment.items():
        limit, pin = rev.seen.get(cid, {}).get(rev.subject, 0), rev.pins.get(cid)
        at_seq: dict[int, int] = {}
        for v in vs:
            at_seq[v.seq] = at_seq.get(v.seq, 0) + 1
        chain: dict[int, bytes] = {} if pin is None else {limit: pin}  # seq -> the batch the revocation accepted
        # A batch this device's local state holds as accepted was accepted by its causal log, on one chain from
        # seq 1 (spec §17); the others are doubtful.  (On a warm open the views are only some of the batches:
        # a seq missing here is not a missing link.)
        doubtful = {v.id for v in vs if v.seq <= limit and not (v.stored_flags >= 0 and v.stored_flags & 4)}
        if doubtful or any(n > 1 for s, n in at_seq.items() if 0 < s <= limit):
            # Follow the links from the pin down while they hold (the headers are decoded only then: on a warm
            # open of a folder where nothing of the revoked writer changed, none is).
            here, expected, seq = {v.id: v for v in vs}, pin, limit
            while expected is not None and seq > 0:
                chain[seq] = expected
                link = here.get(expected)
                expected, seq = (link.header.prev if link is not None else None), seq - 1
        for v in vs:
            if v.seq > limit:
                out[v.id] = f"seq {v.seq} is beyond what the revocation accepted"
            elif v.seq in chain and chain[v.seq] != v.id:
                out[v.id] = f"it is not the batch at seq {v.seq} the revocation accepted (a second batch at that seq)"
            elif v.seq not in chain and at_seq[v.seq] > 1:
                out[v.id] = f"its writer wrote two batches at seq {v.seq}; which one the revocation accepted is not known here yet"
            elif v.seq not in chain and v.has_control and v.id in doubtful and pin is not None:
                out[v.id] = (f"the chain its revocation accepted cannot be followed down to seq {v.seq} here (a batch "
                             "of it has not arrived): its control records wait")
    return out


class RevokedWriters(Generic[V]):
    """The batches of revoked writers, judged in each round of a roster against the revocations it found
    (spec §14.6, "Beyond the revocation").  ``views`` are the batches the roster reads; when those are some
    of the batches only (a warm open), ``of_writers`` gives every batch of the writers named, fetched once
    per writer when one of its batches at or below a revocation's seq was not accepted before."""

    def __init__(self, views: Mapping[bytes, V], of_writers: Callable[[set[bytes]], Iterable[V]] | None) -> None:
        self.views, self.of_writers = views, of_writers
        self.by_writer: dict[bytes, list[V]] = {}  # made when a writer is revoked: not a pass per round
        self.fetched: set[bytes] = set()

    def not_accepted(self, revocations: Mapping[bytes, Revocation], name: Callable[[bytes], str],
                     off_chain: set[bytes]) -> dict[bytes, str]:
        """The revoked writers' batches their revocations did not accept, with the reasons; those at or below
        the seq a revocation accepted (a second batch at a seq, off the chain from its pin, waiting for that
        chain) are added to ``off_chain``."""
        views, by_writer = self.views, self.by_writer
        for v in views.values() if revocations and not by_writer else ():
            by_writer.setdefault(v.writer_id, []).append(v)
        # A batch at or below a revocation's seq that the local state did not hold as accepted (a new one, or one
        # rejected before) is judged beside every batch of its writer, not only those that can move the roster
        doubtful = {wid for wid, rev in revocations.items() if wid not in self.fetched for v in by_writer.get(wid, ())
                    if (v.stored_flags < 0 or not v.stored_flags & 4)
                    and v.seq <= rev.seen.get(v.compartment_id, {}).get(wid, 0)} if self.of_writers else set()
        if doubtful and self.of_writers is not None:
            self.fetched.update(doubtful)
            fetched = [v for v in self.of_writers(doubtful) if v.id not in views]
            for v in fetched:
                by_writer.setdefault(v.writer_id, []).append(v)
        out: dict[bytes, str] = {}
        for wid, rev in revocations.items():
            for vid, why in beyond_revocation(rev, by_writer.get(wid, ())).items():
                if (judged := views.get(vid)) is not None:
                    out[vid] = f"{name(wid)} wrote it after it was revoked ({why})"
                    if judged.seq <= rev.seen.get(judged.compartment_id, {}).get(wid, 0):
                        off_chain.add(vid)
        return out


class Concurrency:
    """Whether a batch and a revocation were made without either having seen the other (spec §14.6,
    step 3).  The revocation's copies are found among the batches with control records (it is mirrored
    into every compartment, §14.8); a batch has seen a copy when its frontier, or that of any batch of its
    writer in its compartment up to its seq, covers it.  A batch at a seq where its writer forked (two
    batches, one seq) never counts as concurrent, nor one whose compartment holds no copy to compare."""

    def __init__(self, control_views: Iterable[BatchView], views: Iterable[BatchView]) -> None:
        self._control = control_views
        self._views = views
        self._carriers: dict[bytes, list[BatchView]] | None = None
        self._chains: dict[tuple[bytes, bytes], list[BatchView]] | None = None

    def _carriers_of(self, record_id: bytes) -> list[BatchView]:
        """The signed batches that carry a copy of the record written by its author (a copy another writer
        carries, or one in a batch that does not count, says nothing of what its author had done)."""
        if self._carriers is None:  # (made once, when a revoked re-authenticating signer is first met)
            self._carriers = {}
            for v in self._control:
                for rec in v.records:
                    if rec is not None and rec.is_control and rec.author == v.writer_id and v.signed:
                        self._carriers.setdefault(rec.id, []).append(v)
        return self._carriers.get(record_id, [])

    def _chain(self, view: BatchView) -> list[BatchView]:
        if self._chains is None:
            self._chains = {}
            for v in self._views:
                self._chains.setdefault((v.writer_id, v.compartment_id), []).append(v)
        return self._chains.get((view.writer_id, view.compartment_id), [])

    def concurrent(self, rev: Revocation, view: BatchView, subject: bytes) -> bool:
        """Whether ``view`` and revocation ``rev`` were made without either having seen the other, for a
        REVOKE of ``subject`` that ``view`` carries: never when ``subject`` wrote the revocation (revoking the
        device that made a change, with a ``seen`` that leaves the change out, would undo it)."""
        if seen_by(rev, view):
            return False
        copies = [c for c in self._carriers_of(rev.record_id) if c.compartment_id == view.compartment_id]
        if not copies or any(c.writer_id == subject for c in copies):
            return False
        for other in self._chain(view):
            if other.seq == view.seq and other.id != view.id:
                return False  # a fork: which of the two came first is not for the writer to say
            if other.seq <= view.seq and any(other.header.frontier.get(c.writer_id, 0) >= c.seq for c in copies):
                return False
        return True


def apply_revocations(r: Roster, pending: Iterable[tuple[Record, V, list[bytes]]],
                      owner_signers: Callable[[Record, V], list[bytes]],
                      concurrent_reauth: Callable[[Record, V], list[bytes]],
                      rivals: Mapping[bytes, list[tuple[Record, V]]]) -> None:
    """Apply the REVOKE records ``pending`` ((record, carrier, signers when first met)) to roster ``r`` in
    record-id order (spec §14.6): a revocation signed by a key that an earlier one revoked counts only if
    its carrier was already seen by that earlier one.  ``owner_signers`` judges the valid owners that signed
    it; ``concurrent_reauth`` the revoked re-authenticating credentials whose signature on it still counts
    because neither it nor their revocation had seen the other (a device's revocation only, step 3).

    A REVOKE that only its subject's own signature makes count (a self-retirement, key rotation) is applied
    after all the others (step 1): whoever holds a revoked key could otherwise write a retirement of it with
    a ``seen`` of their choosing, sort it first and so undo the revocation that counts.

    A key retires once.  ``rivals`` maps each key that retired itself more than once to those retirements,
    each with a carrier where it may be (:func:`retires_into`: the first batch of the key replacing it, whose
    signature is checked there, not by the roster's rounds; a retirement's own signature only ever takes power
    away).  Of those, one whose ``seen`` covers another's carrier was written after it, by whoever held the key
    since, and does not count; those left are combined into the smallest ``seen`` of each chain, each keeping
    its own pins (so neither of two rival rotations vouches for its new key), and the vault reports the key as
    in other hands."""
    ordered = sorted(pending, key=lambda t: t[0].id)
    named: dict[bytes, int] = {}
    for rec, _, _ in ordered:
        named[rec.body[0]] = named.get(rec.body[0], 0) + 1
    retirements: dict[bytes, list[tuple[Record, V, list[bytes]]]] = {}
    for rec, view, signers in ordered:
        subject = rec.body[0]
        if _apply_one(r, rec, view, signers, owner_signers, concurrent_reauth, named[subject] > 1 or subject in rivals):
            retirements.setdefault(subject, []).append((rec, view, signers))
    for subject, group in retirements.items():
        for rec, view, signers in group if subject not in rivals else ():
            _apply_one(r, rec, view, signers, owner_signers, concurrent_reauth, False)
    for subject, claimed in sorted(rivals.items()):
        if subject in r.revocations:
            continue  # (another REVOKE, not a retirement, revoked it: that one counts)
        found = [(rev, view) for rec, view in claimed if (rev := _parsed(subject, rec)) is not None]
        first = [rev for rev, _ in found if not any(o is not rev and seen_by(rev, ov) for o, ov in found)]
        if found:
            r.revocations[subject] = _smallest(subject, first or [rev for rev, _ in found])
            r.problems.append(("revocation", found[0][1].segment,
                               f"the key {subject.hex()[:12]} retired itself more than once "
                               f"({', '.join(rev.record_id.hex()[:12] for rev, _ in found)}): its old key is in other "
                               "hands; only what every retirement accepted counts, and a device that replaced "
                               "that key must register again"))


def retirements(control_views: Iterable[V]) -> dict[bytes, dict[bytes, list[tuple[Record, V]]]]:
    """Every REVOKE of a key by that key with one signature, in any of ``control_views`` (batches with
    control records): key -> record id -> [(record, a carrier)], every carrier (where each may be is
    :func:`retires_into`'s).  Made once per roster: the batches do not change between its rounds."""
    found: dict[bytes, dict[bytes, list[tuple[Record, V]]]] = {}
    for v in control_views:
        for rec in v.records:
            if rec is not None and rec.kind == Kind.REVOKE and rec.body.get(0) == rec.author and len(rec.sigs) == 1:
                found.setdefault(rec.author, {}).setdefault(rec.id, []).append((rec, v))
    return found


def rival_retirements(found: Mapping[bytes, Mapping[bytes, list[tuple[Record, V]]]],
                      signer_key: Callable[[bytes], bytes | None],
                      certified: Callable[[Record], tuple[bytes, bytes] | None]) -> dict[bytes, list[tuple[Record, V]]]:
    """The keys that retired themselves more than once: for each, every such retirement among ``found``
    (:func:`retirements`) whose signature verifies with ``signer_key``, with a carrier where it may be
    (:func:`retires_into`; spec §14.6 step 1)."""
    rivals = {}
    for subject, claimed in found.items():
        key = signer_key(subject)
        if len(claimed) < 2 or key is None:
            continue
        good = []
        for carriers in claimed.values():
            rec, v = next(((rec, v) for rec, v in carriers if retires_into(rec, v, certified)), (None, None))
            if rec is None or v is None:
                continue
            try:
                signed_by, _ = verify_inner_signatures(rec, {subject: key}.get, v.verifier())
            except VaultError:
                continue  # (a signature that does not verify: no retirement)
            if subject in signed_by:
                good.append((rec, v))
        if len(good) > 1:
            rivals[subject] = good
    return rivals


def _parsed(subject: bytes, rec: Record) -> Revocation | None:
    """A retirement's revocation as written (None when its ``seen`` or ``pins`` is malformed)."""
    body = rec.body
    try:
        seen = {field_bytes(c, 16, "seen compartment"): {field_bytes(w, 32, "seen writer"): field_uint(n, "seen seq")
                                                         for w, n in field_map(per, "seen entry").items()}
                for c, per in field_map(body.get(2, {}), "seen").items()}
        pins = {field_bytes(c, 16, "pins compartment"): field_bytes(b, 32, "pinned batch")
                for c, b in field_map(body.get(3, {}), "pins").items()}
    except CanonicalError:
        return None
    reason = text if isinstance(text := body.get(4), str) else ""
    return Revocation(subject, rec.id, seen, pins, reason, rec.ts or 0, (subject,))


def _smallest(subject: bytes, revs: list[Revocation]) -> Revocation:
    """One revocation of ``subject`` that accepts only what each of ``revs`` accepts: per chain the smallest
    ``seen`` (absent: 0), named by the smallest record id.  It has no pins of its own: each of ``revs`` keeps
    its own, and a batch beyond any of them is beyond it (:func:`beyond_revocation`)."""
    if len(revs) == 1:
        return revs[0]
    chains = {(c, w) for rev in revs for c, per in rev.seen.items() for w in per}
    seen: dict[bytes, dict[bytes, int]] = {}
    for c, w in chains:
        seen.setdefault(c, {})[w] = min(rev.seen.get(c, {}).get(w, 0) for rev in revs)
    first = min(revs, key=lambda rev: rev.record_id)
    return Revocation(subject, first.record_id, seen, {}, first.reason, first.ts,
                      tuple(sorted({s for rev in revs for s in rev.signers})), rivals=tuple(revs))


def _apply_one(r: Roster, rec: Record, view: V, signers: list[bytes],
               owner_signers: Callable[[Record, V], list[bytes]], concurrent_reauth: Callable[[Record, V], list[bytes]],
               defer_retirement: bool) -> bool:
    """Apply one REVOKE (steps 1 to 5 of spec §14.6); True, having applied nothing, when it is a
    self-retirement and ``defer_retirement`` (another REVOKE names its subject): it is tried again after."""
    # Who signed is judged now that the fixpoint is complete: when the record was first met,
    # an owner that signed it (a new passphrase whose CRED_ANCHOR sorts later) may not have
    # been known yet, and the result must not depend on batch order.
    signers = owner_signers(rec, view) or signers
    body = rec.body
    subject = body[0]
    subject_p = r.principals.get(subject)
    if subject_p is None or subject in r.revocations:
        return False
    live_signers = [s for s in signers if s not in r.revocations or seen_by(r.revocations[s], view)]
    if not live_signers:
        return False
    others = [s for s in live_signers if s != subject]
    if defer_retirement and subject in live_signers and not (
            any(r.principals[s].kind in REAUTH_KINDS for s in others)
            if subject_p.kind in USER_KINDS else others):
        return True  # (a self-retirement: applied after the others, if no other revoked its subject)
    if subject_p.kind in USER_KINDS and subject not in live_signers:
        # Revoking a user credential needs a passphrase, recovery phrase or recovery recipient
        # signature (re-authentication); a credential may always retire itself (key rotation).
        if not any(r.principals[s].kind in REAUTH_KINDS for s in live_signers):
            concurrent = concurrent_reauth(rec, view)
            if subject_p.kind != CredentialKind.DEVICE or not concurrent:
                name = subject_p.name or subject_p.kind.label
                device = subject_p.kind == CredentialKind.DEVICE
                r.problems.append(("revocation", view.segment, (
                    f"revocation {rec.id.hex()[:12]} of {name} lacks a passphrase or recovery signature that "
                    "counts: none confirmed it, or the one that did was replaced before it was written or at the "
                    "same time" + (f" (a passphrase changed on {name} itself counts over it)" if device else "")
                    + ". It does not count" + (f": revoke {name} again with the current passphrase" if device else ""))))
                return False
            live_signers += concurrent
    parsed = _parsed(subject, rec)
    if parsed is None:
        r.problems.append(("damaged", view.segment, f"revocation {rec.id.hex()[:12]} is malformed: its seen or pins "
                                                    "are not maps of the types spec §14.6 gives"))
        return False
    r.revocations[subject] = replace(parsed, signers=tuple(live_signers))
    return False


# Checks of a control record's body fields (camillo.control uses them too)


def field_bytes(v: Any, n: int, what: str) -> bytes:
    if not isinstance(v, bytes) or len(v) != n:
        raise CanonicalError(f"{what} must be {n} bytes")
    return v


def field_uint(v: Any, what: str) -> int:
    if type(v) is not int or v < 0:
        raise CanonicalError(f"{what} must be an unsigned integer")
    return v


def field_map(v: Any, what: str) -> dict[Any, Any]:
    if not isinstance(v, dict):
        raise CanonicalError(f"{what} must be a map")
    return v
