"""The roster and writer conformance vectors (``compute-roster``, ``write-registration``), written by
``generate_vectors.py``.

Both kinds are deterministic: every key comes from a fixed seed, every record from a fixed salt and
timestamp, and Ed25519 signatures are deterministic, so a new run writes the same bytes.

* ``compute-roster`` vectors are small sets of decrypted batches, built by hand with the keys each
  party holds, for the places where a reader written from the spec alone can go wrong (spec §14.1,
  §14.3, §14.6, §14.7): when a control record's signers are judged, what "a batch carrying the
  revocation" means for copies of a record, and control batches by a writer the roster does not
  know.  The expected roster is written from what each case *means* (the spec rule that decides),
  then compared with what Camillo computes; a disagreement stops the generator.
* ``write-registration`` vectors are the exact first batches a new writer writes when it registers
  (spec §12.4) and when it replaces its own earlier key (re-certification), from fixed inputs: the
  bytes come from Camillo's writer code.

Runs on the generator's main thread.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from camillo import encoding, ids
from camillo.control import BatchView, Level, build_roster, owner_entry, pop_message
from camillo.credentials import Credential, CredentialKind
from camillo.ops.registration import registration_records
from camillo.records import Authority, Batch, BatchHeader, Kind, decode_record, encode_record, make_batch
from camillo.session.writer import causal_fields

T0 = 1_700_000_000

Vector = Callable[..., None]  # Out.vector


def fixed(label: str, n: int = 32) -> bytes:
    return hashlib.sha256(label.encode("ascii")).digest()[:n]


def credential(kind: CredentialKind, label: str) -> Credential:
    return Credential.from_seeds(kind, fixed(f"{label} x-wing seed"), fixed(f"{label} ed25519 seed"))


def entry(cred: Credential, name: str, platform: str = "") -> dict[int, Any]:
    return owner_entry(cred.kind, cred.signer.public, cred.recipient.public, name, platform)


# ---------------------------------------------------------------------------------------------
# compute-roster


class RosterCase:
    """One vault's worth of hand-made batches: a genesis with three owners (device D, passphrase P1,
    recovery phrase R), a data compartment ``personal``, and whatever the case adds."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.control = fixed(f"{name} control", 16)
        self.personal = fixed(f"{name} personal", 16)
        self.D = credential(CredentialKind.DEVICE, "roster device D")
        self.P1 = credential(CredentialKind.PASSPHRASE, "roster passphrase P1")
        self.R = credential(CredentialKind.RECOVERY, "roster recovery R")
        self.D2 = credential(CredentialKind.DEVICE, "roster device D2")
        self.P2 = credential(CredentialKind.PASSPHRASE, "roster passphrase P2")
        self.U = credential(CredentialKind.DEVICE, "roster device U")
        self.who = {"D": self.D, "P1": self.P1, "R": self.R, "D2": self.D2, "P2": self.P2, "U": self.U}
        self.n = 0
        self.batches: list[tuple[str, Batch]] = []
        self.chains: dict[tuple[bytes, bytes], tuple[int, bytes | None]] = {}
        self.genesis = self.record(Kind.GENESIS, self.D, {
            0: 1, 1: self.control, 2: [[self.personal, "personal"]],
            3: [entry(self.D, "laptop", "Linux 6.8"), entry(self.P1, "passphrase"), entry(self.R, "recovery phrase")],
            4: T0}, [self.D, self.P1, self.R])
        self.vault_id = ids.vault_id(self.genesis)

    def record(self, kind: Kind, author: Credential, body: dict[int, Any], signers: list[Credential]) -> bytes:
        self.n += 1
        return encode_record(kind, author.writer_id, body=body, signers=[s.signer for s in signers],
                             ts=T0 + self.n, salt=fixed(f"{self.name} record {self.n}", 16))

    def record_below(self, kind: Kind, author: Credential, body: dict[int, Any], signers: list[Credential],
                     below: bytes) -> bytes:
        """A record whose id sorts below ``below`` (its salt ground, as an attacker that cannot read the
        record it must precede would: a few leading zero bits cost only hashing)."""
        for k in range(1 << 20):
            raw = encode_record(kind, author.writer_id, body=body, signers=[s.signer for s in signers],
                                ts=T0 + 5000, salt=fixed(f"{self.name} ground {k}", 16))
            if ids.record_id(raw) < below:
                return raw
        raise AssertionError("no salt gives the record id order the case needs")

    def pop(self, cred: Credential) -> bytes:
        return cred.signer.sign(pop_message(self.vault_id, cred.signer.public, cred.recipient.public))

    def batch(self, writer: Credential, compartment: str, records: list[bytes], *,
              below: bytes | None = None, above: bytes | None = None, saw: dict[bytes, int] | None = None,
              seq: int | None = None) -> Batch:
        """The writer's next batch in the compartment (or, with ``seq``, one at that seq: a fork); its
        ``ts`` is chosen (from T0 + 100 on) so that its id sorts below or above a given batch id, which is
        what a case is about.  ``saw`` adds other writers' seqs to its frontier."""
        cid = self.control if compartment == "control" else self.personal
        top, prev = self.chains.get((writer.writer_id, cid), (0, None))
        if seq is None:
            seq = top
        else:  # (a fork: the batch before ``seq`` is the chain's, as written)
            prev, seq = next((b.id for _, b in self.batches if b.header.writer_id == writer.writer_id
                              and b.header.compartment_id == cid and b.header.seq == seq - 1), None), seq - 1
        for k in range(10_000):
            header = BatchHeader(self.vault_id, cid, writer.writer_id, seq + 1, prev, () if prev is None else (prev,),
                                 {**(saw or {}), writer.writer_id: seq}, tuple(ids.record_id(r) for r in records),
                                 T0 + 100 + k)
            batch = make_batch(header, records, writer.signer)
            if (below is None or batch.id < below) and (above is None or batch.id > above):
                break
        else:
            raise AssertionError("no timestamp gives the batch id order the case needs")
        if seq + 1 > top:
            self.chains[(writer.writer_id, cid)] = (seq + 1, batch.id)
        self.batches.append((compartment, batch))
        return batch

    def tablet_cert(self) -> bytes:
        """D's certificate for the device D2 ("tablet")."""
        return self.record(Kind.DEVICE_CERT, self.D, {0: entry(self.D2, "tablet"), 1: None, 2: "enrollment",
                                                      3: self.pop(self.D2)}, [self.D])

    def agent_grant(self, agent: Credential) -> bytes:
        """D's write grant in ``personal`` to ``agent``."""
        return self.record(Kind.GRANT, self.D, {0: fixed("roster grant", 16), 1: "helper",
                                                2: [[self.personal, int(Level.WRITE)]], 3: agent.signer.public,
                                                4: agent.recipient.public, 5: int(Authority.OBSERVED), 6: None}, [self.D])

    def tablet_lost(self, seen: dict[bytes, dict[bytes, int]] | None = None) -> bytes:
        """D2 writes one batch in control, then D revokes it (re-authenticated by P1), having seen that batch
        (and ``seen``), pinned; the REVOKE."""
        pinned = self.batch(self.D2, "control", [self.record(Kind.DEVICE_NAME, self.D2, {0: self.D2.writer_id,
                                                                                       1: "tablet 1", 2: []}, [self.D2])],
                            saw={self.D.writer_id: 1})
        revoke = self.record(Kind.REVOKE, self.D, {0: self.D2.writer_id,
                                                   2: {self.control: {self.D.writer_id: 1, self.D2.writer_id: 1},
                                                       **(seen or {})},
                                                   3: {self.control: pinned.id}, 4: "lost"}, [self.D, self.P1])
        self.batch(self.D, "control", [revoke], saw={self.D2.writer_id: 1})
        return revoke

    def desktop_and_phone_with_a_new_passphrase(self) -> bytes:
        """D's genesis batch certifies D2 ("desktop") and U ("phone"); D2 then changes the passphrase (P1 to
        P2) in one batch, having seen D's.  The REVOKE of P1."""
        certs = [self.record(Kind.DEVICE_CERT, self.D, {0: entry(d, n), 1: None, 2: "enrollment", 3: self.pop(d)},
                             [self.D]) for d, n in ((self.D2, "desktop"), (self.U, "phone"))]
        self.batch(self.D, "control", [self.genesis, *certs])
        anchor = self.record(Kind.CRED_ANCHOR, self.P2, {0: entry(self.P2, "passphrase"), 1: self.P1.writer_id,
                                                         2: [8192, 1, 1, fixed("P2 kdf salt", 16)]},
                             [self.P2, self.P1, self.D2])
        retire = self.record(Kind.REVOKE, self.D2, {0: self.P1.writer_id, 2: {self.control: {self.D.writer_id: 1}},
                                                    3: {}, 4: "passphrase changed"}, [self.P2, self.P1, self.D2])
        self.batch(self.D2, "control", [anchor, retire], saw={self.D.writer_id: 1})
        return retire

    def tablet_rotated_to(self, new_key: Credential) -> tuple[list[Batch], bytes, Batch]:
        """The tablet D2's two batches, then its key rotation to ``new_key`` as Camillo writes it (spec §16.4):
        the new key's first batch carries its certificate, signed by D2, and D2's retirement pinned at seq 2."""
        owned = [self.batch(self.D2, "control", [self.record(Kind.DEVICE_NAME, self.D2, {0: self.D2.writer_id, 1: n, 2: []},
                                                             [self.D2])], saw={self.D.writer_id: 1})
                 for n in ("tablet", "my tablet")]
        rotation = self.record(Kind.DEVICE_CERT, self.D2, {0: entry(new_key, "tablet"), 1: self.D2.writer_id,
                                                           2: "key rotation", 3: self.pop(new_key)}, [self.D2])
        retire = self.record(Kind.REVOKE, self.D2, {0: self.D2.writer_id, 2: {self.control: {
            self.D.writer_id: 1, self.D2.writer_id: 2, new_key.writer_id: 1}}, 3: {self.control: owned[-1].id},
            4: "key rotated"}, [self.D2])
        rotated = self.batch(new_key, "control", [rotation, retire], saw={self.D.writer_id: 1, self.D2.writer_id: 2})
        return owned, retire, rotated

    def thief_cert(self) -> bytes:
        """A certificate for the thief's device U, signed by D2's (revoked) key."""
        return self.record(Kind.DEVICE_CERT, self.D2, {0: entry(self.U, "thief"), 1: None, 2: "enrollment",
                                                       3: self.pop(self.U)}, [self.D2])

    def inputs(self) -> dict[str, Any]:
        return {
            "vault_id": self.vault_id.hex(),
            "compartments": {"control": self.control.hex(), "personal": self.personal.hex()},
            "who": {k: c.writer_id.hex() for k, c in self.who.items()},
            "batches": [{"compartment": c, "batch_id": b.id.hex(), "batch_cbor": encoding.encode(b.to_cbor()).hex()}
                        for c, b in self.batches],
        }

    def expected(self, *, principals: list[str], revoked: dict[str, bytes] | None = None,
                 unsigned: tuple[Batch, ...] = (), excluded: tuple[Batch, ...] = (),
                 policy: tuple[str, bytes | None] = ("enabled", None),
                 manifests: dict[bytes, str] | None = None, problems: tuple[str, ...] = ()) -> dict[str, Any]:
        """What the case means: ``principals`` names the parties the roster holds (``who``),
        ``revoked`` maps a party to the REVOKE record that revokes it, ``manifests`` a manifest
        record to the party that is its signer."""
        unsigned_ids, excluded_ids = {b.id for b in unsigned}, {b.id for b in excluded}
        return {
            "principals": sorted(({"writer_id": self.who[p].writer_id.hex(), "kind": self.who[p].kind.label}
                                  for p in principals), key=lambda p: p["writer_id"]),
            "revoked": sorted(({"subject": self.who[p].writer_id.hex(), "record_id": ids.record_id(r).hex()}
                               for p, r in (revoked or {}).items()), key=lambda r: r["subject"]),
            "signed": sorted(b.id.hex() for _, b in self.batches if b.id not in unsigned_ids | excluded_ids),
            "unsigned": sorted(b.id.hex() for b in unsigned),
            "excluded": sorted(b.id.hex() for b in excluded),
            "policy": {"erasure": policy[0], "record_id": None if policy[1] is None else ids.record_id(policy[1]).hex()},
            "manifests": sorted(({"record_id": ids.record_id(r).hex(), "signer": self.who[p].writer_id.hex()}
                                 for r, p in (manifests or {}).items()), key=lambda m: m["record_id"]),
            "problems": sorted(problems),
        }


def camillo_roster(vault_id: bytes, batches: list[Batch]) -> dict[str, Any]:
    """What Camillo computes from these batches (as its reader hands them over: control records
    decoded, every other record left out)."""
    views = {}
    for b in batches:
        records = [decode_record(raw, expected_id=rid) for rid, raw in zip(b.header.records, b.records) if raw]
        views[b.id] = BatchView(b, f"batch {b.id.hex()}", bytes(16), [r if r.is_control else None for r in records])
    return roster_summary(vault_id, list(views.values()))


def roster_summary(vault_id: bytes, views: list[BatchView]) -> dict[str, Any]:
    """The roster Camillo computes from these batch views, in the vectors' JSON form (the generator's
    expectation and the checker's result are this one function)."""
    roster, signed = build_roster(vault_id, {v.id: v for v in views})
    policy = roster.policy
    return {
        "principals": sorted(({"writer_id": w.hex(), "kind": p.kind.label} for w, p in roster.principals.items()),
                             key=lambda p: p["writer_id"]),
        "revoked": sorted(({"subject": w.hex(), "record_id": r.record_id.hex()} for w, r in roster.revocations.items()),
                          key=lambda r: r["subject"]),
        "signed": sorted(b.hex() for b in signed),
        "unsigned": sorted(v.id.hex() for v in views if v.id not in signed and v.id not in roster.excluded),
        "excluded": sorted(b.hex() for b in roster.excluded),
        "policy": {"erasure": "enabled" if policy.erasure_enabled else "disabled",
                   "record_id": None if policy.record_id is None else policy.record_id.hex()},
        "manifests": sorted(({"record_id": m.record_id.hex(), "signer": m.signer.hex()} for m in roster.manifests.values()),
                            key=lambda m: m["record_id"]),
        "problems": sorted(kind for kind, _, _ in roster.problems),
    }


def roster_vector(vector: Vector, case: RosterCase, description: str, expected: dict[str, Any], notes: str) -> None:
    got = camillo_roster(case.vault_id, [b for _, b in case.batches])
    if got != expected:
        raise AssertionError(f"{case.name}: Camillo computes {got}, the spec says {expected}")
    vector(case.name, description, "compute-roster", case.inputs(), expected=expected, notes=notes)


def roster_vectors(vector: Vector) -> None:
    # A revocation co-signed by a new passphrase whose certificate sits in a batch with a larger id.
    c = RosterCase("roster-revoke-cosigner-certified-later")
    cert_d2 = c.record(Kind.DEVICE_CERT, c.D, {0: entry(c.D2, "tablet"), 1: None, 2: "enrollment", 3: c.pop(c.D2)}, [c.D])
    c.batch(c.D, "control", [c.genesis, cert_d2])
    anchor = c.record(Kind.CRED_ANCHOR, c.P2, {0: entry(c.P2, "passphrase"), 1: c.P1.writer_id,
                                               2: [8192, 1, 1, fixed("P2 kdf salt", 16)]}, [c.P2, c.P1, c.D])
    a = c.batch(c.D, "control", [anchor])
    revoke = c.record(Kind.REVOKE, c.D, {0: c.D2.writer_id, 2: {c.control: {c.D.writer_id: 2}}, 3: {},
                                          4: "revoked tablet"}, [c.D, c.P2])
    c.batch(c.D, "control", [revoke], below=a.id)
    roster_vector(
        vector, c,
        "A REVOKE of a device co-signed by the device and a new passphrase whose CRED_ANCHOR sits in a batch with "
        "a larger id is applied: its signers are judged once the round's certificates are all applied.",
        c.expected(principals=["D", "P1", "R", "D2", "P2"], revoked={"D2": revoke}),
        "Spec 14.6 step 3 and 14.7 step 5. A reader that judged the REVOKE's signers when it first met the "
        "batch carrying it (in ascending batch-id order, before the batch certifying P2) would find only D, "
        "report a missing passphrase signature and leave D2 active.")

    c = RosterCase("roster-revoke-signer-certified-later")
    cert_d2 = c.record(Kind.DEVICE_CERT, c.D, {0: entry(c.D2, "tablet"), 1: None, 2: "enrollment", 3: c.pop(c.D2)}, [c.D])
    c.batch(c.D, "control", [c.genesis, cert_d2])
    anchor = c.record(Kind.CRED_ANCHOR, c.P2, {0: entry(c.P2, "passphrase"), 1: c.P1.writer_id,
                                               2: [8192, 1, 1, fixed("P2 kdf salt", 16)]}, [c.P2, c.P1, c.D])
    a = c.batch(c.D, "control", [anchor])
    revoke = c.record(Kind.REVOKE, c.P2, {0: c.D2.writer_id, 2: {c.control: {c.D.writer_id: 2}}, 3: {},
                                           4: "revoked tablet"}, [c.P2])
    c.batch(c.D, "control", [revoke], below=a.id)
    roster_vector(
        vector, c,
        "A REVOKE signed only by a new passphrase, carried by a batch whose id is smaller than that of the batch "
        "certifying the passphrase, is applied: a control record is tried again until nothing changes.",
        c.expected(principals=["D", "P1", "R", "D2", "P2"], revoked={"D2": revoke}),
        "Spec 14.7 step 3. When the REVOKE's batch is first met no signer is a principal yet; the record is "
        "tried again in every later pass and applies once P2's certificate has.")

    # "carried by B itself": B carries a copy of the revoking record.
    c = RosterCase("roster-revoke-copy-carried")
    c.batch(c.D, "control", [c.genesis])
    revoke = c.record(Kind.REVOKE, c.D, {0: c.P1.writer_id, 2: {c.control: {c.D.writer_id: 1}}, 3: {},
                                          4: "passphrase changed"}, [c.P1, c.D])
    first = c.batch(c.D, "personal", [revoke])
    anchor = c.record(Kind.CRED_ANCHOR, c.P2, {0: entry(c.P2, "passphrase"), 1: c.P1.writer_id,
                                               2: [8192, 1, 1, fixed("P2 kdf salt", 16)]}, [c.P2, c.P1, c.D])
    c.batch(c.D, "control", [anchor, revoke], above=first.id)
    roster_vector(
        vector, c,
        "A passphrase's signature on a new passphrase's CRED_ANCHOR counts in a batch that carries a copy of the "
        "old passphrase's REVOKE, although another batch with a smaller id carried that REVOKE first.",
        c.expected(principals=["D", "P1", "R", "P2"], revoked={"P1": revoke}),
        "Spec 14.1: a revoked owner's signature still counts in any batch that carries a copy (the same record "
        "id) of its revoking record. The REVOKE's seen does not cover the second batch, so only the copy makes "
        "P1 a valid owner there; without P1 the CRED_ANCHOR lacks its passphrase or recovery co-signature.")

    c = RosterCase("roster-revoke-same-batch")
    c.batch(c.D, "control", [c.genesis])
    anchor = c.record(Kind.CRED_ANCHOR, c.P2, {0: entry(c.P2, "passphrase"), 1: c.P1.writer_id,
                                               2: [8192, 1, 1, fixed("P2 kdf salt", 16)]}, [c.P2, c.P1, c.D])
    revoke = c.record(Kind.REVOKE, c.D, {0: c.P1.writer_id, 2: {c.control: {c.D.writer_id: 1}}, 3: {},
                                          4: "passphrase changed"}, [c.P2, c.P1, c.D])
    c.batch(c.D, "control", [anchor, revoke])
    roster_vector(
        vector, c,
        "A passphrase change in one batch (the new passphrase's CRED_ANCHOR and the old passphrase's REVOKE, both "
        "signed by the new and the old passphrase and the device) certifies the new passphrase and revokes the old.",
        c.expected(principals=["D", "P1", "R", "P2"], revoked={"P1": revoke}),
        "Spec 14.1 and 16.7: the old passphrase's signatures count in the batch that carries its revocation.")

    # A device's revocation re-authenticated by a passphrase that another device replaced meanwhile.
    for name in ("roster-revoke-concurrent-passphrase-change", "roster-revoke-after-passphrase-change",
                 "roster-revoke-concurrent-passphrase-fork", "roster-revoke-concurrent-passphrase-credential",
                 "roster-revoke-concurrent-passphrase-subject-copy"):
        c = RosterCase(name)
        retire = c.desktop_and_phone_with_a_new_passphrase()
        subject = c.R if name.endswith("credential") else c.U
        revoke = c.record(Kind.REVOKE, c.D, {0: subject.writer_id, 2: {c.control: {c.D.writer_id: 1}}, 3: {},
                                              4: "lost"}, [c.D, c.P1])
        if name.endswith("after-passphrase-change"):
            c.batch(c.D, "control", [revoke], saw={c.D2.writer_id: 1})
        elif name.endswith("fork"):  # (seq 2 had not seen the change, seq 3 had; the REVOKE is at a second seq 2)
            for n, saw in (("laptop", None), ("my laptop", {c.D2.writer_id: 1})):
                c.batch(c.D, "control", [c.record(Kind.DEVICE_NAME, c.D, {0: c.D.writer_id, 1: n, 2: []}, [c.D])],
                        saw=saw)
            c.batch(c.D, "control", [revoke], seq=2)
        elif name.endswith("subject-copy"):  # (the phone carries a copy of the change, which D then saw)
            thief = c.batch(c.U, "control", [retire], saw={c.D.writer_id: 1})
            c.batch(c.D, "control", [revoke], saw={c.U.writer_id: 1})
        else:
            c.batch(c.D, "control", [revoke])
        applies = name.endswith(("concurrent-passphrase-change", "subject-copy"))
        revoked = {"P1": retire, **({"U": revoke} if applies else {})}
        expected = c.expected(principals=["D", "P1", "R", "D2", "P2", "U"], revoked=revoked,
                              problems=() if applies else ("revocation",),
                              excluded=(thief,) if name.endswith("subject-copy") else ())
        if name.endswith("subject-copy"):
            description = ("The lost phone carries a copy of the other device's passphrase change in a batch of its own, "
                           "which the revoking device had seen: the revocation of the phone still holds (only copies "
                           "its author wrote say what the revoking device had seen) and the phone's batch is excluded.")
            notes = ("Spec 14.6 step 3: the copies compared are those the revocation's author wrote, in signed batches. "
                     "A reader that compared every copy would let the phone cancel its own revocation.")
        elif applies:
            description = (
                "A device's REVOKE signed by a device and a passphrase that another device, unseen, replaced at the same "
                "time (neither batch's frontier covers the other's, and neither REVOKE's seen does) is applied: "
                "the passphrase's signature re-authenticates it.")
            notes = ("Spec 14.6 step 3. A reader that counted a revoked signer only where its revocation had seen the "
                     "batch (14.1) would drop the revocation of the lost phone on every copy and report a missing "
                     "passphrase signature.")
        elif name.endswith("after-passphrase-change"):
            description = ("The same REVOKE carried by a batch whose frontier covers the passphrase change is not "
                           "applied: that device had seen the old passphrase replaced.")
            notes = "Spec 14.6 step 3: the exception is for changes made without either seeing the other."
        elif name.endswith("fork"):
            description = ("The same REVOKE carried by a batch at a seq where its writer forked (its chain's next batch "
                           "saw the passphrase change) is not applied.")
            notes = ("Spec 14.6 step 3: a batch at a forked seq never counts as concurrent (a device that had seen the "
                     "change could otherwise write one that claims it had not).")
        else:
            description = ("A REVOKE of the recovery phrase signed by a device and a passphrase that another device "
                           "replaced at the same time is not applied: the exception covers a device's revocation only.")
            notes = ("Spec 14.6 step 3: an old passphrase cannot revoke the credentials that could replace it; "
                     "change the passphrase again instead.")
        roster_vector(vector, c, description, expected, notes)

    # A revoked device writes a second batch at a seq its revocation had seen, certifying a device of its own.
    c = RosterCase("roster-revoked-writer-fork-below-seen")
    cert_d2 = c.record(Kind.DEVICE_CERT, c.D, {0: entry(c.D2, "tablet"), 1: None, 2: "enrollment", 3: c.pop(c.D2)}, [c.D])
    c.batch(c.D, "control", [c.genesis, cert_d2])
    names = [c.record(Kind.DEVICE_NAME, c.D2, {0: c.D2.writer_id, 1: n, 2: []}, [c.D2]) for n in ("tablet 1", "tablet 2")]
    pinned = [c.batch(c.D2, "control", [n], saw={c.D.writer_id: 1}) for n in names][-1]
    revoke = c.record(Kind.REVOKE, c.D, {0: c.D2.writer_id, 2: {c.control: {c.D.writer_id: 1, c.D2.writer_id: 2}},
                                          3: {c.control: pinned.id}, 4: "lost"}, [c.D, c.P1])
    c.batch(c.D, "control", [revoke], saw={c.D2.writer_id: 2})
    cert_u = c.record(Kind.DEVICE_CERT, c.D2, {0: entry(c.U, "thief"), 1: None, 2: "enrollment", 3: c.pop(c.U)}, [c.D2])
    fork = c.batch(c.D2, "control", [cert_u], saw={c.D.writer_id: 1}, seq=1)
    roster_vector(
        vector, c,
        "A revoked device's second batch at a seq its revocation had seen (seen 2, pinned batch at seq 2, whose prev "
        "is the device's first batch, not this one) is excluded: the device it certifies with its old key is not a "
        "principal, and the device's two accepted batches stay.",
        c.expected(principals=["D", "P1", "R", "D2"], revoked={"D2": revoke}, excluded=(fork,)),
        "Spec 14.6, 'Beyond the revocation': below the seen seq, only the batches on the chain that leads down from "
        "the pinned batch by prev are accepted. A reader that accepted every batch at or below seen would certify "
        "the thief's device U with the revoked key.")

    # An agent that also holds a revoked device's key carries that key's signature into a batch of its own.
    c = RosterCase("roster-revoked-key-in-an-agent-batch")
    agent = credential(CredentialKind.GRANT, "roster agent G")
    c.batch(c.D, "control", [c.genesis, c.tablet_cert(), c.agent_grant(agent)])
    revoke = c.tablet_lost()
    c.batch(agent, "personal", [revoke, c.thief_cert()])
    c.who["G"] = agent
    roster_vector(
        vector, c,
        "An agent's batch that carries a copy of a device's REVOKE and a certificate signed by that revoked device "
        "does not certify anyone: a copy of a revocation carried by another writer than its author does not make "
        "the revoked key's signatures count.",
        c.expected(principals=["D", "P1", "R", "D2", "G"], revoked={"D2": revoke}),
        "Spec 14.1 (valid owner): a revoked credential's signature counts in a batch that carries its REVOKE only "
        "when that batch's writer is the REVOKE's author. A reader without that condition certifies the thief's "
        "device U.")

    # The same thief, with no agent: a new key's first batch carries the copy and the certificate.
    c = RosterCase("roster-revoked-key-certifies-a-new-writer-with-a-copy")
    c.batch(c.D, "control", [c.genesis, c.tablet_cert()])
    revoke = c.tablet_lost()
    thief = c.batch(c.U, "control", [revoke, c.thief_cert()])
    roster_vector(
        vector, c,
        "A new key's first batch carrying a copy of a device's REVOKE and a certificate for itself signed by that "
        "revoked device stays unsigned: the revoked key certifies nobody.",
        c.expected(principals=["D", "P1", "R", "D2"], revoked={"D2": revoke}, unsigned=(thief,)),
        "Spec 14.1 (valid owner): the copy counts only in batches its author (here D) wrote; U's first batch is "
        "signed only through a certificate, which has no valid owner signature.")

    # An agent forks a batch of its own that the revocation had seen.
    c = RosterCase("roster-revoked-key-in-an-agent-fork")
    c.batch(c.D, "control", [c.genesis, c.tablet_cert(), c.agent_grant(agent)])
    c.batch(agent, "personal", [encode_record(Kind.NOTE, agent.writer_id, value={"text": "an agent's note"},
                                              authority=int(Authority.OBSERVED), type="message",
                                              ts=T0 + 50, salt=fixed("agent note", 16))])
    revoke = c.tablet_lost({c.personal: {agent.writer_id: 1}})
    c.batch(agent, "personal", [c.thief_cert()], seq=1)
    c.who["G"] = agent
    roster_vector(
        vector, c,
        "An agent's second batch at a seq the revocation had seen, carrying a certificate signed by the revoked "
        "device, certifies nobody: a revoked key's earlier signatures never count in an agent's batch.",
        c.expected(principals=["D", "P1", "R", "D2", "G"], revoked={"D2": revoke}),
        "Spec 14.1 (valid owner): the exceptions for a revoked credential hold only in batches whose writer no GRANT "
        "record of the previous round names. A reader without it certifies the thief's device U.")

    # The thief of a revoked device writes a retirement of it with a seen of its choosing, sorted first.
    c = RosterCase("roster-revoke-self-retirement-sorted-first")
    c.batch(c.D, "control", [c.genesis, c.tablet_cert()])
    revoke = c.tablet_lost()
    everything = 1 << 40
    retirement = c.record_below(Kind.REVOKE, c.D2, {0: c.D2.writer_id, 2: {c.control: {c.D2.writer_id: everything},
                                                                         c.personal: {c.D2.writer_id: everything}},
                                                    3: {}, 4: "key rotated"}, [c.D2], below=bytes(1) + b"\xff" * 31)
    policy = c.record(Kind.POLICY, c.D2, {0: "disabled", 1: "thief", 2: []}, [c.D2])
    thief = c.batch(c.D2, "control", [retirement, c.thief_cert(), policy])
    roster_vector(
        vector, c,
        "A revoked device's retirement of itself, with a seen that accepts everything and a record id that sorts "
        "before the real revocation, does not replace it: the device's later batch is excluded, the device it "
        "certifies is nobody and erasure stays enabled.",
        c.expected(principals=["D", "P1", "R", "D2"], revoked={"D2": revoke}, excluded=(thief,)),
        "Spec 14.6: a REVOKE that only its subject's own signature makes count is applied after every other "
        "REVOKE, and only if no other one revoked its subject. A reader that applied the first in record-id "
        "order would let the thief's retirement win and accept everything the revoked key signs.")

    # Two sides revoke each other: the user (passphrase change, lost phone) and the phone with the old passphrase.
    c = RosterCase("roster-revocations-that-contradict")
    retire = c.desktop_and_phone_with_a_new_passphrase()
    lost = c.record(Kind.REVOKE, c.D2, {0: c.U.writer_id, 2: {c.control: {c.D.writer_id: 1, c.D2.writer_id: 1}},
                                         3: {}, 4: "lost phone"}, [c.D2, c.P2])
    c.batch(c.D2, "control", [lost], saw={c.D.writer_id: 1})
    first = min(ids.record_id(retire), ids.record_id(lost))
    against = [c.record_below(Kind.REVOKE, c.U, {0: d.writer_id, 2: {c.control: {c.D.writer_id: 1}}, 3: {},
                                                 4: "thief"}, [c.U, c.P1], below=first) for d in (c.D2, c.D)]
    phone = c.batch(c.U, "control", against, saw={c.D.writer_id: 1})
    roster_vector(
        vector, c,
        "The user changes the passphrase and revokes the lost phone; the phone, with the old passphrase, revokes "
        "the user's two devices in a batch that leaves the change out, its records sorted first. The passphrase "
        "change and the phone's revocation hold; the phone's batch is excluded.",
        c.expected(principals=["D", "P1", "R", "D2", "P2", "U"], revoked={"P1": retire, "U": lost}, excluded=(phone,)),
        "Spec 14.7 step 6: the first round, with no revocation known, counts every signature and applies the "
        "phone's revocations; a later round, with the old passphrase revoked, drops them. Each round excludes "
        "what both it and the round before do not accept, so the exclusions of the first round's revocations "
        "do not also drop the batches that drop them (a reader that kept every exclusion of every round would "
        "drop both sides, and one that took only the last round's would not settle).")

    # The documented cost: a stolen phone not yet revoked, with the old passphrase, claims not to have seen the change.
    c = RosterCase("roster-revoke-by-a-device-that-claims-not-to-have-seen-the-change")
    retire = c.desktop_and_phone_with_a_new_passphrase()
    claims = [c.record(Kind.REVOKE, c.U, {0: d.writer_id, 2: {c.control: {c.D.writer_id: 1}}, 3: {}, 4: "thief"},
                       [c.U, c.P1]) for d in (c.D2, c.D)]
    c.batch(c.U, "control", claims, saw={c.D.writer_id: 1})
    roster_vector(
        vector, c,
        "A device not revoked yet (a stolen phone) with the old passphrase revokes the user's two devices in a batch "
        "whose frontier leaves the passphrase change out: the device that made the change stays (reported), the "
        "other is revoked, and its batches, which that REVOKE names no pin for, stay.",
        c.expected(principals=["D", "P1", "R", "D2", "P2", "U"], revoked={"P1": retire, "D": claims[1]},
                   problems=("revocation",)),
        "Spec 14.6 step 3: 'had not seen' is the writer's own signed claim; the cost is documented (revoke a lost "
        "device before changing the passphrase). 'Beyond the revocation': without a pin, a batch alone at its seq "
        "is kept, so such a REVOKE cannot drop the genesis batch and what it certified.")

    # A backup of a rotated key: a second retirement of it, after the first (its seen covers the first's carrier),
    # or a rival one that claims to be concurrent.  The rotation is Camillo's: the new key's first batch carries
    # its certificate, signed by the old key, and the old key's retirement, which has seen that batch (§16.4).
    for name in ("roster-revoke-second-self-retirement", "roster-revoke-rival-self-retirements"):
        c = RosterCase(name)
        new_key, spare = credential(CredentialKind.DEVICE, f"{name} new key"), credential(CredentialKind.DEVICE, f"{name} T")
        c.who.update({"K2": new_key, "T": spare})
        c.batch(c.D, "control", [c.genesis, c.tablet_cert()])
        owned, retire, rotated = c.tablet_rotated_to(new_key)
        after = name.endswith("second-self-retirement")
        if after:  # (in a batch of the old key itself: no retirement, a REVOKE written after the key retired)
            fake = c.record_below(Kind.REVOKE, c.D2, {0: c.D2.writer_id, 2: {c.control: {c.D2.writer_id: 99,
                                                                                         new_key.writer_id: 1}},
                                                      3: {}, 4: "key rotated"}, [c.D2], below=ids.record_id(retire))
            cert_t = c.record(Kind.DEVICE_CERT, c.D2, {0: entry(spare, "thief"), 1: None, 2: "enrollment",
                                                       3: c.pop(spare)}, [c.D2])
            owned.append(c.batch(c.D2, "control", [fake, cert_t]))
            thief = c.batch(spare, "control", [c.record(Kind.DEVICE_NAME, spare, {0: spare.writer_id, 1: "thief",
                                                                                   2: []}, [spare])])
            roster_vector(
                vector, c,
                "A rotated key's second retirement of itself, from a backup of the key, in a batch of the old key with a "
                "certificate of the thief's device; its seen covers the new key's batch that carries the first, and its "
                "id sorts first. It does not count: the new key stays, the backup's batch is excluded and the device it "
                "certifies is nobody.",
                c.expected(principals=["D", "P1", "R", "D2", "K2"], revoked={"D2": retire}, excluded=(owned[-1],),
                           unsigned=(thief,)),
                "Spec 14.6 step 1: a retirement counts only in a batch of the key that replaces it, which the same batch "
                "certifies as replacing it (this one is in the old key's own batch, beyond its retirement); of several "
                "retirements, one whose seen covers another's carrier does not count. A reader that applied the first "
                "in record-id order would let the backup certify the thief's device.")
        else:  # (a rival rotation: the backup certifies a new key of its own, in that key's first batch)
            fake = c.record_below(Kind.REVOKE, c.D2, {0: c.D2.writer_id, 2: {c.control: {spare.writer_id: 1}}, 3: {},
                                                      4: "key rotated"}, [c.D2], below=ids.record_id(retire))
            cert_t = c.record(Kind.DEVICE_CERT, c.D2, {0: entry(spare, "thief"), 1: c.D2.writer_id, 2: "key rotation",
                                                       3: c.pop(spare)}, [c.D2])
            thief = c.batch(spare, "control", [cert_t, fake])
            roster_vector(
                vector, c,
                "Two retirements of one key that neither saw the other (a rival rotation from a backup of the key, "
                "each in the first batch of the new key it certifies) count as one that accepts only what both "
                "accept: neither vouches for its new key, the key's batches beyond that are excluded, and the vault "
                "reports the key as in other hands.",
                c.expected(principals=["D", "P1", "R", "D2"], revoked={"D2": fake}, excluded=tuple(owned),
                           unsigned=(rotated, thief), problems=("revocation",)),
                "Spec 14.6 step 1: the smallest seen of each chain (absent: 0), named by the smallest record id. The "
                "honest new key must register again (with the passphrase); no rival gets in.")

    # A host that withholds a revoked device's real batch below its pin, beside the thief's second one.
    c = RosterCase("roster-revoked-writer-fork-below-a-withheld-batch")
    c.batch(c.D, "control", [c.genesis, c.tablet_cert()])
    genuine = c.batch(c.D2, "control", [c.record(Kind.DEVICE_NAME, c.D2, {0: c.D2.writer_id, 1: "tablet 1", 2: []},
                                                 [c.D2])], saw={c.D.writer_id: 1})
    pinned = c.batch(c.D2, "control", [c.record(Kind.DEVICE_NAME, c.D2, {0: c.D2.writer_id, 1: "tablet 2", 2: []},
                                                [c.D2])], saw={c.D.writer_id: 1})
    revoke = c.record(Kind.REVOKE, c.D, {0: c.D2.writer_id, 2: {c.control: {c.D.writer_id: 1, c.D2.writer_id: 2}},
                                          3: {c.control: pinned.id}, 4: "lost"}, [c.D, c.P1])
    c.batch(c.D, "control", [revoke], saw={c.D2.writer_id: 2})
    fork = c.batch(c.D2, "control", [c.thief_cert()], saw={c.D.writer_id: 1}, seq=1)
    c.batches = [(k, b) for k, b in c.batches if b.id != genuine.id]  # (the host withholds it)
    roster_vector(
        vector, c,
        "A revoked device's second batch at seq 1, the real one withheld by the host: the pinned batch's prev names "
        "the real one, so the second is excluded and the device it certifies is nobody.",
        c.expected(principals=["D", "P1", "R", "D2"], revoked={"D2": revoke}, excluded=(fork,)),
        "Spec 14.6, 'Beyond the revocation': the chain is followed from the pin whenever a batch below it is not one "
        "this reader had accepted; a reader that took every seq holding one batch as the chain's would accept it.")

    # A rotated key's backup hides a second retirement in a fork of the old key below the first one's seen.
    c = RosterCase("roster-revoke-retirement-in-a-fork-of-the-old-key")
    new_key = credential(CredentialKind.DEVICE, "retirement in a fork: new key")
    c.who["K2"] = new_key
    c.batch(c.D, "control", [c.genesis, c.tablet_cert()])
    owned, retire, _ = c.tablet_rotated_to(new_key)
    fake = c.record(Kind.REVOKE, c.D2, {0: c.D2.writer_id, 2: {c.control: {c.D2.writer_id: 1 << 40}}, 3: {},
                                        4: "key rotated"}, [c.D2])
    fork = c.batch(c.D2, "control", [fake], saw={c.D.writer_id: 1}, seq=1)
    policy = c.record(Kind.POLICY, c.D2, {0: "disabled", 1: "thief", 2: []}, [c.D2])
    later = c.batch(c.D2, "control", [c.thief_cert(), policy], saw={c.D.writer_id: 1})
    roster_vector(
        vector, c,
        "A backup of a rotated key writes a second retirement of it (seen: everything of the old key, nothing of the new "
        "one) in a second batch of the old key at seq 1, which the first retirement's seen covers by its seq, then a "
        "batch certifying the thief's device and switching erasure off. The second retirement counts for nothing: the "
        "first stands, the new key stays, both batches are excluded and erasure stays on.",
        c.expected(principals=["D", "P1", "R", "D2", "K2"], revoked={"D2": retire}, excluded=(fork, later)),
        "Spec 14.6 step 1: a retirement counts only in a batch of the key that replaces it, certified by the same "
        "batch, whose signature verifies under that key. A reader that compared every retirement it found by its "
        "seen would take the honest one as written after the thief's, drop it, and let the backup rule the vault.")

    # After the lost-laptop flow, the thief forks the revoked key at the pinned seq with the replaced passphrase.
    for name in ("roster-revoked-key-fork-at-the-pin-revokes-the-revoker",
                 "roster-revoked-key-fork-at-the-pin-withheld"):
        c = RosterCase(name)
        c.batch(c.D, "control", [c.genesis, c.tablet_cert()])
        owned = [c.batch(c.D2, "control", [c.record(Kind.DEVICE_NAME, c.D2, {0: c.D2.writer_id, 1: n, 2: []}, [c.D2])],
                         saw={c.D.writer_id: 1}) for n in ("tablet", "my tablet")]
        revoke = c.record(Kind.REVOKE, c.D, {0: c.D2.writer_id, 2: {c.control: {c.D.writer_id: 1, c.D2.writer_id: 2}},
                                              3: {c.control: owned[-1].id}, 4: "lost"}, [c.D, c.P1])
        c.batch(c.D, "control", [revoke], saw={c.D2.writer_id: 2})
        anchor = c.record(Kind.CRED_ANCHOR, c.P2, {0: entry(c.P2, "passphrase"), 1: c.P1.writer_id,
                                                   2: [8192, 1, 1, fixed("P2 kdf salt", 16)]}, [c.P2, c.P1, c.D])
        retire_p1 = c.record(Kind.REVOKE, c.D, {0: c.P1.writer_id, 2: {c.control: {c.D.writer_id: 2, c.D2.writer_id: 2}},
                                                3: {}, 4: "passphrase changed"}, [c.P2, c.P1, c.D])
        c.batch(c.D, "control", [anchor, retire_p1], saw={c.D2.writer_id: 2})
        withheld = name.endswith("withheld")
        against = c.record_below(Kind.REVOKE, c.D2, {0: c.D.writer_id, 2: {c.control: {c.D.writer_id: 1}},
                                                     3: {}, 4: "thief"}, [c.D2, c.P1], below=ids.record_id(revoke))
        fork = c.batch(c.D2, "control", [against], saw={c.D.writer_id: 1}, seq=2)
        if withheld:
            c.batches = [(k, b) for k, b in c.batches if b.id != owned[-1].id]  # (the host withholds the pinned one)
            roster_vector(
                vector, c,
                "The same second batch at the pinned seq, the pinned batch withheld by the host (no proven fork here): "
                "it is off the chain the revocation accepted, contributes nothing from the round after the "
                "revocation is found, and the roster settles with the device and the old passphrase revoked.",
                c.expected(principals=["D", "P1", "R", "D2", "P2"], revoked={"D2": revoke, "P1": retire_p1},
                           excluded=(owned[0], fork)),
                "Spec 14.6 'Beyond the revocation' and 14.7: a revoked writer's batch at or below the seq its "
                "revocation accepted but off the chain from its pin contributes no control record. A reader that "
                "let its signatures count by their seq alone revoked the honest device every other round.")
        else:
            roster_vector(
                vector, c,
                "After the lost-laptop flow (the tablet revoked, then the passphrase changed), the thief writes a second "
                "tablet batch at the seq the revocation pinned, with a REVOKE of the honest device signed by the tablet's "
                "key and the replaced passphrase (seen: only the device's first batch; its id ground to sort first). It "
                "counts for nothing: the device stays, the tablet and the old passphrase are revoked, the second batch "
                "is excluded.",
                c.expected(principals=["D", "P1", "R", "D2", "P2"], revoked={"D2": revoke, "P1": retire_p1},
                           excluded=(fork,)),
                "Spec 14.1 (off the accepted chain) and 14.7: a revoked writer's batch at the seq its revocation pinned "
                "but not the pinned one contributes no control record from the round after the one that found the "
                "revocation. A reader that let its signatures count by their seq alone revoked the honest device in "
                "every other round and never settled.")

    # Rival retirements of a rotated key, each pinning another batch at one seq, and a host that withholds a batch.
    c = RosterCase("roster-revoke-rival-retirements-keep-each-pin")
    new_key, spare, thief_key = (credential(CredentialKind.DEVICE, f"rivals keep each pin: {n}")
                                 for n in ("new key", "rival key", "thief"))
    c.who.update({"K2": new_key, "T": spare, "U2": thief_key})
    c.batch(c.D, "control", [c.genesis, c.tablet_cert()])
    owned, retire, rotated = c.tablet_rotated_to(new_key)
    fake = c.record(Kind.REVOKE, c.D2, {0: c.D2.writer_id, 2: {c.control: {c.D2.writer_id: 2, spare.writer_id: 1}},
                                        3: {c.control: fixed("another batch at seq 2")}, 4: "key rotated"}, [c.D2])
    rival = c.batch(spare, "control", [c.record(Kind.DEVICE_CERT, c.D2, {
        0: entry(spare, "tablet"), 1: c.D2.writer_id, 2: "key rotation", 3: c.pop(spare)}, [c.D2]), fake])
    cert_u2 = c.record(Kind.DEVICE_CERT, c.D2, {0: entry(thief_key, "thief"), 1: None, 2: "enrollment",
                                                3: c.pop(thief_key)}, [c.D2])
    policy = c.record(Kind.POLICY, c.D2, {0: "disabled", 1: "thief", 2: []}, [c.D2])
    fork = c.batch(c.D2, "control", [cert_u2, policy], saw={c.D.writer_id: 1}, seq=1)
    c.batches = [(k, b) for k, b in c.batches if b.id != owned[0].id]  # (the host withholds the real seq 1)
    first = min((retire, fake), key=ids.record_id)
    roster_vector(
        vector, c,
        "Two rival retirements of one key pin different batches at the same seq; the host withholds the key's real "
        "batch at seq 1 and shows a second one that certifies the thief's device and switches erasure off. Each "
        "retirement's pin still counts: the second batch waits (the chain from the honest pin cannot be followed "
        "to it), and the thief's device is nobody.",
        c.expected(principals=["D", "P1", "R", "D2"], revoked={"D2": first}, unsigned=(rotated, rival),
                   excluded=(owned[1], fork), problems=("revocation",)),
        "Spec 14.6 step 1: rival retirements accept only what every one of them accepts, each with its own pin. A "
        "reader that combined them into one seen one seq lower without a pin kept the thief's batch as a plain "
        "batch alone at its seq, with the old key's signature counting in it.")

    # Rival retirements of a key that registered itself in its own first batch.
    c = RosterCase("roster-revoke-rival-retirements-of-a-self-registered-key")
    laptop, new_key, spare = (credential(CredentialKind.DEVICE, f"self-registered: {n}") for n in ("laptop", "new", "rival"))
    c.who.update({"L": laptop, "K2": new_key, "T": spare})
    c.batch(c.D, "control", [c.genesis])
    registered = c.batch(laptop, "control", [c.record(Kind.DEVICE_CERT, c.P1, {
        0: entry(laptop, "laptop"), 1: None, 2: "passphrase"}, [c.P1, laptop])], saw={c.D.writer_id: 1})
    later = c.batch(laptop, "control", [c.record(Kind.DEVICE_NAME, laptop, {0: laptop.writer_id, 1: "my laptop", 2: []},
                                                 [laptop])])
    retire = c.record(Kind.REVOKE, laptop, {0: laptop.writer_id, 2: {c.control: {
        c.D.writer_id: 1, laptop.writer_id: 2, new_key.writer_id: 1}}, 3: {c.control: later.id}, 4: "key rotated"}, [laptop])
    rotated = c.batch(new_key, "control", [c.record(Kind.DEVICE_CERT, laptop, {
        0: entry(new_key, "laptop"), 1: laptop.writer_id, 2: "key rotation", 3: c.pop(new_key)}, [laptop]), retire],
        saw={c.D.writer_id: 1, laptop.writer_id: 2})
    fake = c.record_below(Kind.REVOKE, laptop, {0: laptop.writer_id, 2: {c.control: {spare.writer_id: 1}}, 3: {},
                                                4: "key rotated"}, [laptop], below=ids.record_id(retire))
    rival = c.batch(spare, "control", [c.record(Kind.DEVICE_CERT, laptop, {
        0: entry(spare, "laptop"), 1: laptop.writer_id, 2: "key rotation", 3: c.pop(spare)}, [laptop]), fake])
    roster_vector(
        vector, c,
        "Rival retirements of a device key that registered itself (its certificate, signed by the passphrase, is in "
        "its own first batch); the rival's seen names nothing of the key. The roster settles: every batch of the key, "
        "the one holding its certificate too, is beyond what both accept, so the key is no principal any more and "
        "neither new key gets in; the key stays revoked.",
        c.expected(principals=["D", "P1", "R"], revoked={"L": fake}, unsigned=(rotated, rival),
                   excluded=(registered, later), problems=("revocation",)),
        "Spec 14.6 step 1 and 14.7: a retirement's signature is verified with the key of its subject as any round "
        "of the fixpoint met it (a writer id names one key). A reader that verified it only with the principals of "
        "the round, where the combination had taken away the batch certifying the key, dropped the revocation in "
        "one round and applied it in the next, never settling; the last round let the rival's new key in.")

    c = RosterCase("roster-revoke-without-reauth")
    cert_d2 = c.record(Kind.DEVICE_CERT, c.D, {0: entry(c.D2, "tablet"), 1: None, 2: "enrollment", 3: c.pop(c.D2)}, [c.D])
    c.batch(c.D, "control", [c.genesis, cert_d2])
    revoke = c.record(Kind.REVOKE, c.D, {0: c.D2.writer_id, 2: {c.control: {c.D.writer_id: 1}}, 3: {},
                                          4: "revoked tablet"}, [c.D])
    c.batch(c.D, "control", [revoke])
    roster_vector(
        vector, c,
        "A REVOKE of another device signed by a device alone is not applied and is reported: revoking a user "
        "credential needs a passphrase or recovery-phrase signature.",
        c.expected(principals=["D", "P1", "R", "D2"], problems=("revocation",)),
        "Spec 14.6 step 3 (re-authentication); the problem kind is 'revocation'.")

    c = RosterCase("roster-cred-anchor-device-only")
    c.batch(c.D, "control", [c.genesis])
    anchor = c.record(Kind.CRED_ANCHOR, c.P2, {0: entry(c.P2, "passphrase"), 1: c.P1.writer_id,
                                               2: [8192, 1, 1, fixed("P2 kdf salt", 16)]}, [c.P2, c.D])
    c.batch(c.D, "control", [anchor])
    roster_vector(
        vector, c,
        "A CRED_ANCHOR for a new passphrase signed by the new passphrase and a device, without the current "
        "passphrase or the recovery phrase, is not applied and not reported.",
        c.expected(principals=["D", "P1", "R"]),
        "Spec 14.3 condition 3: a device alone cannot mint a passphrase credential.")

    # A manifest's signer: its first valid owner signature in field-13 order, judged on the whole round.
    c = RosterCase("roster-manifest-signer-certified-later")
    c.batch(c.D, "control", [c.genesis])
    compaction = c.record(Kind.COMPACTION, c.D, {0: c.personal, 1: [fixed("old segment", 32)],
                                                  2: [fixed("new segment", 32)], 3: [fixed("a batch", 32)]},
                          [c.D2, c.D])
    m = c.batch(c.D, "control", [compaction])
    cert_d2 = c.record(Kind.DEVICE_CERT, c.D, {0: entry(c.D2, "tablet"), 1: None, 2: "enrollment", 3: c.pop(c.D2)}, [c.D])
    c.batch(c.D, "control", [cert_d2], above=m.id)
    roster_vector(
        vector, c,
        "The signer of a COMPACTION signed first by a device whose certificate sits in a batch with a larger id, "
        "then by another device, is the first one: signers are judged once the round's certificates apply.",
        c.expected(principals=["D", "P1", "R", "D2"], manifests={compaction: "D2"}),
        "Spec 14.5 (the signer of a manifest is its first valid owner signature in the order of field 13) and "
        "14.7 step 3. The signer decides whether the manifest vouches for batches (16.5): only while it is not "
        "revoked.")

    # Control batches by a writer the roster does not know and that carry no self-certificate.
    c = RosterCase("roster-unknown-writer-unsigned")
    enabled = c.record(Kind.POLICY, c.D, {0: "enabled", 1: "default", 2: []}, [c.D])
    c.batch(c.D, "control", [c.genesis, enabled])
    disabled = c.record(Kind.POLICY, c.D, {0: "disabled", 1: "retention", 2: [ids.record_id(enabled)]}, [c.D])
    unknown = c.batch(c.U, "control", [disabled])
    roster_vector(
        vector, c,
        "A control batch by a writer the roster does not know, without a certificate for itself, stays unsigned: "
        "its records, even one a valid owner signed, are not applied, and nothing is reported.",
        c.expected(principals=["D", "P1", "R"], unsigned=(unknown,), policy=("enabled", enabled)),
        "Spec 14.7 step 3: such a batch is neither excluded nor reported (a device enrolled by another device "
        "has its certificate in the enrolling device's batch, which may arrive later); it counts once a "
        "certificate for its writer is applied.")

    c = RosterCase("roster-unknown-writer-certified-later")
    enabled = c.record(Kind.POLICY, c.D, {0: "enabled", 1: "default", 2: []}, [c.D])
    c.batch(c.D, "control", [c.genesis, enabled])
    disabled = c.record(Kind.POLICY, c.D, {0: "disabled", 1: "retention", 2: [ids.record_id(enabled)]}, [c.D])
    unknown = c.batch(c.U, "control", [disabled])
    cert_u = c.record(Kind.DEVICE_CERT, c.D, {0: entry(c.U, "phone"), 1: None, 2: "enrollment", 3: c.pop(c.U)}, [c.D])
    c.batch(c.D, "control", [cert_u], above=unknown.id)
    roster_vector(
        vector, c,
        "A control batch by a writer whose certificate sits in another writer's batch with a larger id is signed "
        "once that certificate applies, and its records apply then.",
        c.expected(principals=["D", "P1", "R", "U"], policy=("disabled", disabled)),
        "Spec 14.7 step 3: an unsigned batch is tried again in every pass until nothing changes.")


# ---------------------------------------------------------------------------------------------
# write-registration


def seeds(cred: Credential) -> dict[str, str]:
    return {"xwing_seed": cred.recipient.seed.hex(), "ed25519_seed": cred.signer.seed.hex()}


def registration_vector(vector: Vector, name: str, description: str, *, replaced: Credential | None,
                        chains: dict[tuple[bytes, bytes], dict[int, bytes]], dag_heads: dict[bytes, list[bytes]],
                        notes: str) -> None:
    vault_id = fixed(f"{name} vault id")
    control = fixed(f"{name} control", 16)
    data = [(fixed(f"{name} personal", 16), "personal"), (fixed(f"{name} work", 16), "work")]
    unlocking = credential(CredentialKind.PASSPHRASE, f"{name} passphrase")
    device = credential(CredentialKind.DEVICE, f"{name} new device")
    ts = T0 + 5000
    salts = [fixed(f"{name} record salt {i}", 16) for i in (1, 2)]
    records = registration_records(unlocking, device, "conformance laptop", "Linux 6.8",
                                   replaced=replaced.writer_id if replaced else None, chains=chains, ts=ts, salts=salts)
    data_ids = [cid for cid, _ in data]
    batches = []
    for cid in [control, *data_ids]:
        deps, frontier, heads = causal_fields(chains, dag_heads.get(cid, []), cid,
                                              data_ids if cid == control else None)
        frontier[device.writer_id] = 0
        header = BatchHeader(vault_id, cid, device.writer_id, 1, None, deps, frontier,
                             tuple(ids.record_id(r) for r in records), ts, heads=heads)
        batch = make_batch(header, records, device.signer)
        batches.append({"compartment": cid.hex(), "batch_id": batch.id.hex(),
                        "batch_cbor": encoding.encode(batch.to_cbor()).hex()})
    vector(
        name, description, "write-registration",
        {
            "vault_id": vault_id.hex(),
            "control": control.hex(),
            "data_compartments": [[cid.hex(), n] for cid, n in data],
            "unlocking": {"kind": "passphrase", **seeds(unlocking)},
            "device": {**seeds(device), "name": "conformance laptop", "platform": "Linux 6.8"},
            "replaced": replaced.writer_id.hex() if replaced else None,
            "chains": [{"writer": w.hex(), "compartment": c.hex(), "batches": {str(s): b.hex() for s, b in sorted(ch.items())}}
                       for (w, c), ch in sorted(chains.items())],
            "dag_heads": {c.hex(): sorted(b.hex() for b in hs) for c, hs in sorted(dag_heads.items())},
            "ts": ts,
            "salts": [s.hex() for s in salts[:len(records)]],
        },
        expected={"records": [{"record_id": ids.record_id(r).hex(), "record_cbor": r.hex()} for r in records],
                  "batches": batches},
        notes=notes,
    )


def writer_vectors(vector: Vector) -> None:
    name = "writer-registration"
    creator = credential(CredentialKind.DEVICE, f"{name} creating device").writer_id
    control, personal, work = (fixed(f"{name} {c}", 16) for c in ("control", "personal", "work"))
    b = {k: fixed(f"{name} batch {k}") for k in ("c1", "p1", "p2", "w1")}
    registration_vector(
        vector, name,
        "A new installation's first batches (spec 12.4): one batch in the control compartment, then one in each "
        "data compartment in genesis order, each carrying exactly its DEVICE_CERT, with these exact bytes.",
        replaced=None,
        chains={(creator, control): {1: b["c1"]}, (creator, personal): {1: b["p1"], 2: b["p2"]},
                (creator, work): {1: b["w1"]}},
        dag_heads={control: [b["c1"]], personal: [b["p2"]], work: [b["w1"]]},
        notes="The DEVICE_CERT's author is the unlocking credential; its body is {0: owner entry, 1: null, 2: "
              "'passphrase'} without key 3; its inner signatures are the unlocking credential's, then the new "
              "device's. Each batch: seq 1, prev null, deps = the compartment's DAG heads, frontier = every "
              "chain's highest accepted seq plus the writer itself at 0, key 11 only in the control batch.")

    name = "writer-recertification"
    creator = credential(CredentialKind.DEVICE, f"{name} creating device").writer_id
    old = credential(CredentialKind.DEVICE, f"{name} lost device")
    control, personal, work = (fixed(f"{name} {c}", 16) for c in ("control", "personal", "work"))
    b = {k: fixed(f"{name} batch {k}") for k in ("c1", "p1", "p2", "oc1", "op1", "op2", "op4", "w1")}
    registration_vector(
        vector, name,
        "An installation that lost its key re-certifies (spec 12.4): its first batches carry the DEVICE_CERT naming "
        "the old writer and a REVOKE of it whose seen counts a writer's highest accepted seq above a gap.",
        replaced=old,
        chains={(creator, control): {1: b["c1"]}, (creator, personal): {1: b["p1"], 2: b["p2"]},
                (creator, work): {1: b["w1"]}, (old.writer_id, control): {1: b["oc1"]},
                (old.writer_id, personal): {1: b["op1"], 2: b["op2"], 4: b["op4"]}},
        dag_heads={control: [b["c1"], b["oc1"]], personal: [b["op4"], b["p2"]], work: [b["w1"]]},
        notes="The old writer's chain in personal holds seqs 1, 2 and 4 (3 is missing): seen, pins and the frontier "
              "name seq 4, the highest accepted, not the highest contiguous (spec 14.6, 17.6 rule 5). The REVOKE's "
              "author is the new device; both records are signed by the unlocking credential, then the new device.")
