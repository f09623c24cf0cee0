"""Keeping append grants working across the owner's own key changes (spec §11.2, §16.2).

An append grant reads nothing, so it cannot compute the roster: it trusts the owner credentials its
grant file names, and, so that its trust follows the signed roster, every owner credential certified
by them in a chain of certificates delivered to it.  The owner devices deliver, in envelopes
addressed to each active append grant:

* **kind 3**: the certificate record (DEVICE_CERT or CRED_ANCHOR, its exact bytes, signatures and
  proof of possession included) of an owner credential: whenever one joins or replaces another
  (a device registered or enrolled, a key rotated, a passphrase changed, a recipient added), and,
  when the keyring rolls (which deletes every older envelope), the certificates of every active
  owner credential and of the credentials that certified them, back to the vault's creation;
* **kind 4**: the writer id of an owner credential revoked by another one (a lost device), so that
  the grant trusts neither it nor what only it certified.  A credential that was *replaced* (a
  changed passphrase, a rotated or re-certified device key) is not revoked in this sense: the keys
  it certified before stay trusted.

So an append grant keeps working after an erasure (the erasing device's new key), a device
replacement and a passphrase change; a revoked grant gets nothing (it is never an active grant).

Confined to the thread that owns the vault.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from .. import envelopes, ids
from ..control import Level, Principal
from ..credentials import Credential
from ..errors import VaultError
from ..records import Kind, Record, decode_record
from ..session import Session
from ..session.views import with_control

FileList = list[tuple[str, bytes]]
CERT_KINDS = (Kind.DEVICE_CERT, Kind.CRED_ANCHOR)


def append_grants(session: Session, exclude: Iterable[bytes] = ()) -> list[Principal]:
    """The active grants that append to at least one compartment."""
    r, skip = session.roster, set(exclude)
    return [p for p in r.grants() if p.grant is not None and p.writer_id not in r.revocations
            and p.writer_id not in skip and Level.APPEND in p.grant.scopes.values()]


def _decoded(raws: Iterable[bytes]) -> list[Record]:
    out = []
    for raw in raws:
        try:
            out.append(decode_record(raw, expected_id=ids.record_id(raw)))
        except VaultError:
            continue
    return out


def certificate_chain(session: Session, pending: Sequence[Record] = ()) -> list[bytes]:
    """The certificates an append grant needs to trust every active owner credential: theirs, and
    those of the credentials that certified them, back to the genesis (whose owners have none)."""
    r, batches = session.roster, session.batches
    holding = with_control(batches)
    by_id = {rec.id: rec.raw for v in holding for rec in v.records if rec is not None and rec.kind in CERT_KINDS}
    by_id.update({rec.id: rec.raw for rec in pending if rec.kind in CERT_KINDS})
    todo = [p.writer_id for p in r.principals.values() if p.is_owner and p.writer_id not in r.revocations]
    seen: set[bytes] = set()
    out: dict[bytes, bytes] = {}
    while todo:
        w = todo.pop()
        p = r.principals.get(w)
        if w in seen or p is None:
            continue
        seen.add(w)
        if p.via != "genesis" and p.record_id in by_id:
            out[p.record_id] = by_id[p.record_id]
        todo += p.certifiers
    out.update({rec.id: rec.raw for rec in pending if rec.kind in CERT_KINDS})
    return [out[k] for k in sorted(out)]


def revoked_owners(session: Session, pending: Sequence[Record] = ()) -> list[bytes]:
    """Owner credentials revoked by another credential (a lost device), not replaced by a successor."""
    r = session.roster
    replaced = {p.replaces for p in r.principals.values() if p.replaces is not None}
    replaced |= {w for rec in pending if rec.kind in CERT_KINDS and isinstance(w := rec.body.get(1), bytes)}
    out = {w for w, rev in r.revocations.items()
           if r.is_owner(w) and w not in replaced and w not in rev.signers}
    for rec in pending:
        subject = rec.body.get(0)
        if rec.kind == Kind.REVOKE and isinstance(subject, bytes) and r.is_owner(subject) and \
                subject not in replaced and subject not in {s[0] for s in rec.sigs if isinstance(s, list) and s}:
            out.add(subject)
    return sorted(out)


def trust_files(session: Session, *, pending: Iterable[bytes] = (), everything: bool = False,
                signer: Credential | None = None, exclude: Iterable[bytes] = ()) -> FileList:
    """Envelopes for every active append grant: the certificates among ``pending`` (control records
    this operation is about to write), or, with ``everything`` (the keyring rolls and every older
    envelope goes), the whole chain and every revoked owner.  Signed by ``signer`` (this session's
    writer, unless given)."""
    grants = append_grants(session, exclude)
    if not grants:
        return []
    records = _decoded(pending)
    if everything:
        certs, revoked = certificate_chain(session, records), revoked_owners(session, records)
    else:
        certs, revoked = [rec.raw for rec in records if rec.kind in CERT_KINDS], []
    actor = signer or session.require_writer()
    files: FileList = []
    for g in grants:
        items = [(envelopes.EnvelopeKind.OWNER_CERT, raw) for raw in certs if len(raw) <= envelopes.MAX_CERT_BYTES]
        items += [(envelopes.EnvelopeKind.OWNER_REVOKED, w) for w in revoked]
        for kind, key in items:
            data = envelopes.build_envelope(
                vault_id=session.vault_id, kind=kind, compartment_id=None, epoch_id=None,
                recipient_public=g.recipient_public, recipient_id=g.recipient_id, key=key, signer=actor.signer,
                signer_id=actor.writer_id)
            files.append((envelopes.file_name(data), data))
    return files
