"""Conformance vectors for the owner's controls (issue 17): recovery recipients (spec §3.9, §12.6, slots
of type 4) and the records COMPARTMENT, DEVICE_NAME and DEVICE_ACK (§14.5, §14.9).

Called by ``generate_vectors.main`` (regenerate only these with ``python -m
tests.conformance.generate_vectors 'derive-recipient-pop' '*recipient*' 'record-*' vault-owner-controls``);
the operations they name are checked by ``owner_operations.py``.  Like the other object vectors they
contain random salts and encapsulations: they are generated once, committed, and then only checked.
"""

from __future__ import annotations

from pathlib import Path

from camillo import NewRecord, Unlock, Vault, ids, sealed, slots, transport
from camillo import records as rec
from camillo.credentials import (
    Credential,
    CredentialKind,
    read_recipient_key,
    recipient_pop,
    write_recipient_key,
)
from camillo.primitives import ARGON2_TEST, SigningKey, labelled
from camillo.session.writer import write_control

from .generate_vectors import (
    OWNER_SEED,
    T0,
    VAULT_ID,
    VAULT_PASSPHRASE,
    VMS,
    Out,
    fixed,
    public_summary,
    read_back,
)

RECIPIENT_XWING = fixed("conformance trusted person x-wing seed")
RECIPIENT_ED25519 = fixed("conformance trusted person ed25519 seed")
RECIPIENT_PASSPHRASE = "the trusted person's own passphrase"
TRAVEL_ID = fixed("conformance travel compartment id", 16)


def recipient_vectors(out: Out, work: Path) -> None:
    alice = Credential.from_seeds(CredentialKind.RECIPIENT, RECIPIENT_XWING, RECIPIENT_ED25519)
    message = labelled("vmem/v1/recipient-pop", alice.signer.public, alice.recipient.public)
    out.vector(
        "derive-recipient-pop",
        "A recovery recipient's proof of possession is its Ed25519 signature over the recipient-pop label, its "
        "signing key and its X-Wing key, and names no vault.",
        "derive-recipient-pop",
        {"xwing_seed": RECIPIENT_XWING.hex(), "ed25519_seed": RECIPIENT_ED25519.hex()},
        expected={"writer_id": alice.writer_id.hex(), "recipient_id": alice.recipient_id.hex(),
                  "xwing_public": public_summary(alice.recipient.public), "ed25519_public": alice.signer.public.hex(),
                  "message": message.hex(), "signature": recipient_pop(alice.signer, alice.recipient.public).hex()},
        notes="Ed25519 signatures are deterministic, so the signature is exact.",
    )

    owner = SigningKey.from_seed(OWNER_SEED)
    owner_id = ids.writer_id(owner.alg, owner.public)
    sid = fixed("conformance recipient slot id", 16)
    slot = slots.build_slot(vault_id=VAULT_ID, slot_id=sid, slot_type=slots.SlotType.RECIPIENT, generation=3,
                            vms=VMS, recipient_public=alice.recipient.public, recipient_id=alice.recipient_id,
                            kdf=None, label="Alice", signer=owner, signer_id=owner_id)
    name = slots.file_name(sid)
    statement = sealed.open_sealed(VMS, slots.LABEL, VAULT_ID + sid + (3).to_bytes(4, "big"),
                                   slot[: slots.BODY_END], slots.HEADER_LEN)
    ref = out.artefact("object-slot-recipient.slot", slot)
    inputs = {"artefact": ref, "name": name, "xwing_seed": RECIPIENT_XWING.hex(), "vault_id": VAULT_ID.hex(),
              "signer_public": owner.public.hex()}
    out.vector(
        "object-slot-recipient",
        "A slot of type 4 opened with the recovery recipient's X-Wing seed yields the vault master secret and "
        "a statement naming the recipient, with no KDF parameters, signed by an owner key.",
        "open-slot-seeds",
        inputs,
        expected={"type": 4, "generation": 3, "kdf_bytes_zero": True, "vms": VMS.hex(),
                  "statement_cbor": statement.hex(), "recipient_id": alice.recipient_id.hex(), "label": "Alice",
                  "signatures_verify": True},
    )
    out.vector(
        "neg-slot-recipient-other-key",
        "A slot of type 4 does not open with another recipient's X-Wing seed.",
        "open-slot-seeds",
        {**inputs, "xwing_seed": fixed("conformance stranger x-wing seed").hex()},
        error="CryptoFailure",
    )

    key = work / "alice.key"
    write_recipient_key(str(key), RECIPIENT_PASSPHRASE, "Alice", ARGON2_TEST)
    key_ref = out.artefact("object-recipient-key.key", key.read_bytes())
    pub_ref = out.artefact("object-recipient-key.pub", (work / "alice.key.pub").read_bytes())
    opened = read_recipient_key(str(key), RECIPIENT_PASSPHRASE)
    out.vector(
        "object-recipient-key-file",
        "A Camillo recipient key file opens with its holder's passphrase and gives the keys its public file "
        "names, whose proof of possession verifies.",
        "open-recipient-key-file",
        {"artefact": key_ref, "public": pub_ref, "passphrase": RECIPIENT_PASSPHRASE},
        expected={"writer_id": opened.writer_id.hex(), "recipient_id": opened.recipient_id.hex(),
                  "name": "Alice", "public_matches": True, "pop_verifies": True},
        test_kdf=True,
        notes="The key files are Camillo's (spec §12.6, informative); the vault format needs only the keys.",
    )
    out.vector(
        "neg-recipient-key-file-wrong-passphrase",
        "A Camillo recipient key file does not open with another passphrase.",
        "open-recipient-key-file",
        {"artefact": key_ref, "public": pub_ref, "passphrase": "not the holder's passphrase"},
        error="WrongCredential", test_kdf=True,
    )


def control_vectors(out: Out, work: Path) -> None:
    """A whole vault with a trusted person, a compartment added after creation, a record in it, a renamed
    and an acknowledged device; its control records as single vectors; and malformed COMPARTMENTs."""
    folder = work / "owner-vault"
    vault, phrase = Vault.create(str(folder), VAULT_PASSPHRASE, device_name="conformance laptop")
    with vault:
        vault.add_recipient("Alice", str(work / "alice.key.pub"))
        vault.add_compartment("travel")
        vault.append([NewRecord(type="message", text="Book the train to Porto.", ts=T0)], compartment="travel")
        vault.rename_device("conformance laptop", "Home desktop")
        session = vault.session
        actor = session.require_writer()
        # malformed or ignored COMPARTMENT records, as a hostile or buggy writer could write them
        bad = [rec.encode_record(rec.Kind.COMPARTMENT, actor.writer_id, body={0: TRAVEL_ID, 1: ""},
                                 signers=[actor.signer], ts=T0),
               rec.encode_record(rec.Kind.COMPARTMENT, actor.writer_id, body={0: session.roster.control_id,
                                                                               1: "shadow"},
                                 signers=[actor.signer], ts=T0)]
        write_control(session, bad, session.all_compartments())
        records = {r.kind: r for v in session.batches.values() for r in v.records
                   if r is not None and r.kind in (rec.Kind.COMPARTMENT, rec.Kind.DEVICE_NAME)
                   and r.body.get(1) not in ("", "shadow")}
        signer = actor.signer.public
    vmem = out.dir / "vault-owner-controls.vmem"
    transport.pack_vault(str(folder), str(vmem))
    ref = out.artefact_ref("vault-owner-controls.vmem")
    expected = read_back(str(vmem), Unlock.passphrase(VAULT_PASSPHRASE))
    assert expected == read_back(str(vmem), Unlock.recovery(phrase))
    assert "travel" in expected["compartments"] and "shadow" not in expected["compartments"]
    out.vector(
        "vault-owner-controls",
        "A vault with a trusted person's recovery key, a compartment added after creation (and a record in it) "
        "and a renamed device opens with exactly this roster and timeline; a COMPARTMENT with an empty name is "
        "reported and one naming the control compartment is ignored.",
        "open-vault",
        {"artefact": ref, "passphrase": VAULT_PASSPHRASE, "recovery_phrase": phrase},
        expected=expected, test_kdf=True,
    )
    for kind, name, description in (
        (rec.Kind.COMPARTMENT, "record-compartment",
         "A COMPARTMENT record names the new compartment's 16-byte id and its name, inner-signed by an owner."),
        (rec.Kind.DEVICE_NAME, "record-device-name",
         "A DEVICE_NAME record names the device, its new name and the names it replaces, inner-signed by an "
         "owner."),
    ):
        r = records[kind]
        out.vector(name, description, "control-record-decode",
                   {"record": r.raw.hex(), "signer_public": signer.hex()},
                   expected={"record_id": r.id.hex(), "kind": int(kind), "author": r.author.hex(), "ts": r.ts,
                             "body": {str(k): (v.hex() if isinstance(v, bytes) else
                                               [x.hex() for x in v] if isinstance(v, list) else v)
                                      for k, v in sorted(r.body.items())},
                             "signatures_verify": True})
    owner = SigningKey.from_seed(OWNER_SEED)
    device = Credential.from_seeds(CredentialKind.DEVICE, fixed("conformance new device x-wing seed"),
                                   fixed("conformance new device ed25519 seed"))
    ack = rec.encode_record(rec.Kind.DEVICE_ACK, ids.writer_id(owner.alg, owner.public),
                            body={0: [device.writer_id]}, signers=[owner], ts=T0)
    decoded = rec.decode_record(ack)
    out.vector("record-device-ack",
               "A DEVICE_ACK record lists the writer ids of the devices an owner device acknowledges, inner-signed "
               "by it.", "control-record-decode",
               {"record": ack.hex(), "signer_public": owner.public.hex()},
               expected={"record_id": decoded.id.hex(), "kind": int(rec.Kind.DEVICE_ACK),
                         "author": decoded.author.hex(), "ts": T0, "body": {"0": [device.writer_id.hex()]},
                         "signatures_verify": True})


def owner_vectors(out: Out, work: Path) -> None:
    recipient_vectors(out, work)
    control_vectors(out, work)

