"""Generate the VMEM v1 conformance vectors in ``tests/conformance/vectors/``.

Run from the repository root::

    .venv/bin/python -m tests.conformance.generate_vectors

Every vector is one pretty-printed JSON file (bytes as lowercase hex) and, for whole files (slots,
envelopes, segments, packs, ``.vmem`` vaults), a binary artefact next to it.  ``vectors/README.md``
describes the format; ``test_vmem_vectors.py`` checks every vector against the current code.

* Derivation vectors are deterministic: running the generator again gives the same bytes.
* Object vectors (and the negative vectors built from them) contain HPKE encapsulations, random
  salts and random ids, so every run produces new artefacts.  They are generated once, committed,
  and from then on only checked.  Regenerate them only on purpose, and commit the whole directory.

The generator uses the insecure test-only Argon2id parameters (``CAMILLO_INSECURE_TEST_KDF=1``), a
throw-away ``CAMILLO_HOME`` and no OS keychain (``CAMILLO_KEYCHAIN=none``); it never touches the
user's own installation.
"""

from __future__ import annotations

import fnmatch
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
import unicodedata
from pathlib import Path
from typing import Any

from camillo import (
    NewRecord,
    Unlock,
    Vault,
    VaultError,
    descriptor,
    encoding,
    envelopes,
    ids,
    keys,
    packs,
    sealed,
    segments,
    slots,
    transport,
)
from camillo import records as rec
from camillo.credentials import Credential, CredentialKind, from_passphrase, from_recovery_phrase
from camillo.primitives import (
    ARGON2_DEFAULT,
    ARGON2_TEST,
    SUITE_VMEM1,
    WRAP_LEN,
    XWING_ENC_LEN,
    KdfParams,
    RecipientKey,
    SigningKey,
    aead_encrypt,
    argon2id,
    derive_body_keys,
    hkdf,
    hpke_unwrap,
    hpke_wrap,
    labelled,
    padme,
    random_bytes,
    recovery_entropy,
    sha256,
)
from camillo.session.installation import seal_key
from camillo.storage import segment_name

from .control_vectors import roster_vectors, writer_vectors

VECTORS = Path(__file__).resolve().parent / "vectors"
KEEP = {"README.md"}

VAULT_PASSPHRASE = "vmem conformance"
DERIVE_PASSPHRASE = "correct horse battery staple"
FIXED_SALT = b"vmem-conformance"  # 16 bytes
T0 = 1_700_000_000  # record timestamps of the generated objects and of the tiny vault


def fixed(label: str, n: int = 32) -> bytes:
    """A fixed, random-looking test input: the first ``n`` bytes of SHA-256(label)."""
    return hashlib.sha256(label.encode("ascii")).digest()[:n]


# Fixed inputs shared by several object vectors.
VAULT_ID = fixed("conformance vault id")
COMPARTMENT_ID = fixed("conformance compartment id", 16)
EPOCH_ID = fixed("conformance epoch id", 16)
EPOCH_SECRET = fixed("conformance epoch secret")
VMS = fixed("conformance vault master secret")
WRITER_SEED = fixed("conformance writer ed25519 seed")
OWNER_SEED = fixed("conformance owner ed25519 seed")
RECIPIENT_SEED = fixed("conformance recipient x-wing seed")
SLOT_ID = fixed("conformance slot id", 16)


def h(b: bytes | None) -> str | None:
    return None if b is None else b.hex()


def jsonable(v: Any) -> Any:
    """A decoded CBOR value as JSON: byte strings become {"bytes": hex}."""
    if isinstance(v, bytes):
        return {"bytes": v.hex()}
    if isinstance(v, list):
        return [jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): jsonable(x) for k, x in v.items()}
    return v


def kdf_json(kdf: KdfParams) -> dict[str, Any]:
    return {"memory_kib": kdf.memory_kib, "time_cost": kdf.time_cost, "parallelism": kdf.parallelism,
            "salt": kdf.salt.hex()}


def public_summary(public: bytes) -> dict[str, Any]:
    """An X-Wing public key is 1216 bytes: vectors give its SHA-256 and its first 32 bytes."""
    return {"sha256": sha256(public).hex(), "first32": public[:32].hex(), "length": len(public)}


class Out:
    """Writes vectors and artefacts, and remembers their names."""

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.names: list[str] = []

    def clean(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        for p in self.dir.iterdir():
            if p.name not in KEEP and p.is_file():
                p.unlink()

    def artefact(self, filename: str, data: bytes) -> dict[str, Any]:
        (self.dir / filename).write_bytes(data)
        return {"file": filename, "sha256": sha256(data).hex(), "length": len(data)}

    def artefact_ref(self, filename: str) -> dict[str, Any]:
        data = (self.dir / filename).read_bytes()
        return {"file": filename, "sha256": sha256(data).hex(), "length": len(data)}

    def vector(
        self,
        name: str,
        description: str,
        operation: str,
        inputs: dict[str, Any],
        *,
        expected: dict[str, Any] | None = None,
        error: str | list[str] | None = None,
        camillo_detail: str | None = None,
        test_kdf: bool = False,
        notes: str | None = None,
    ) -> None:
        assert name not in self.names, name
        v: dict[str, Any] = {
            "name": name,
            "description": description,
            "operation": operation,
            "expect": "reject" if error is not None else "success",
        }
        if error is not None:
            v["error"] = error
        if camillo_detail is not None:
            v["camillo_detail"] = camillo_detail
        v["test_kdf"] = test_kdf
        v["inputs"] = inputs
        if expected is not None:
            v["expected"] = expected
        if notes:
            v["notes"] = notes
        text = json.dumps(v, indent=2, ensure_ascii=True) + "\n"
        (self.dir / f"{name}.json").write_text(text, encoding="ascii")
        self.names.append(name)


# ---------------------------------------------------------------------------------------------
# Derivations (deterministic)


def credential_outputs(cred: Credential, ikm: bytes) -> dict[str, Any]:
    return {
        "ikm": ikm.hex(),
        "xwing_seed": cred.recipient.seed.hex(),
        "ed25519_seed": cred.signer.seed.hex(),
        "xwing_public": public_summary(cred.recipient.public),
        "ed25519_public": cred.signer.public.hex(),
        "writer_id": cred.writer_id.hex(),
        "recipient_id": cred.recipient_id.hex(),
    }


def passphrase_vector(out: Out, name: str, passphrase: str, params: tuple[int, int, int], description: str,
                      *, test_kdf: bool) -> dict[str, Any]:
    kdf = KdfParams(*params, FIXED_SALT)
    cred = from_passphrase(passphrase, kdf)
    expected = credential_outputs(cred, argon2id(passphrase, kdf))
    out.vector(
        name, description, "derive-passphrase",
        {
            "passphrase": passphrase,
            "passphrase_utf8": passphrase.encode("utf-8").hex(),
            "normalized_utf8": unicodedata.normalize("NFC", passphrase).encode("utf-8").hex(),
            "kdf": kdf_json(kdf),
        },
        expected=expected, test_kdf=test_kdf,
    )
    return expected


def derivations(out: Out) -> None:
    passphrase_vector(
        out, "derive-passphrase-test-kdf", DERIVE_PASSPHRASE, ARGON2_TEST,
        "A passphrase and Argon2id test-only parameters (m=8192 KiB, t=1, p=1) derive the passphrase "
        "credential's Argon2id output, X-Wing and Ed25519 seeds and public keys, writer id and recipient id.",
        test_kdf=True,
    )
    passphrase_vector(
        out, "derive-passphrase-default-kdf", DERIVE_PASSPHRASE, ARGON2_DEFAULT,
        "The same passphrase with the writer default Argon2id parameters (m=262144 KiB, t=3, p=4) derives "
        "a different passphrase credential.",
        test_kdf=False,
    )
    nfd = unicodedata.normalize("NFD", "Crème brûlée à São Paulo")
    assert nfd != unicodedata.normalize("NFC", nfd)
    passphrase_vector(
        out, "derive-passphrase-nfc", nfd, ARGON2_TEST,
        "A passphrase typed in Unicode NFD form is normalized to NFC before Argon2id, so it derives the "
        "same credential as its NFC spelling.",
        test_kdf=True,
    )

    entropy = fixed("conformance recovery entropy")
    from mnemonic import Mnemonic

    phrase = Mnemonic("english").to_mnemonic(entropy)
    assert recovery_entropy(phrase) == entropy and len(phrase.split()) == 24
    cred = from_recovery_phrase(phrase)
    out.vector(
        "derive-recovery-phrase",
        "A 24-word BIP39 recovery phrase derives, through its 256-bit entropy and HKDF, the recovery "
        "credential's X-Wing and Ed25519 keys, writer id and recipient id.",
        "derive-recovery-phrase",
        {"phrase": phrase},
        expected={"entropy": entropy.hex(), **credential_outputs(cred, hkdf(entropy, labelled("vmem/v1/cred/recovery")))},
    )

    owner = keys.owner_kem(VMS, VAULT_ID, 1)
    out.vector(
        "derive-owner-kem",
        "A vault master secret, the vault id and generation 1 derive the owner KEM key (an X-Wing key) "
        "that epoch secrets are wrapped to.",
        "derive-owner-kem",
        {"vms": VMS.hex(), "vault_id": VAULT_ID.hex(), "generation": 1},
        expected={"xwing_seed": owner.seed.hex(), "xwing_public": public_summary(owner.public),
                  "recipient_id": ids.recipient_id(owner.public).hex()},
    )

    other_vms = fixed("conformance other master secret")
    out.vector(
        "derive-master-secrets",
        "The master secret an erasure rolls to is derived from the current one; the one that joins two "
        "master secrets of one generation is derived from both, whatever their order.",
        "derive-master-secrets",
        {"vms": VMS.hex(), "other_vms": other_vms.hex(), "vault_id": VAULT_ID.hex(), "generation": 2},
        expected={"next": keys.next_master(VMS, VAULT_ID, 2).hex(),
                  "join": keys.join_master([VMS, other_vms], VAULT_ID, 2).hex()},
    )

    epk = keys.epoch_key(EPOCH_SECRET, VAULT_ID, COMPARTMENT_ID, EPOCH_ID)
    out.vector(
        "derive-epoch-key",
        "An epoch secret with the vault, compartment and epoch ids derives the epoch's X-Wing key pair and "
        "the commitment published in its EPOCH record.",
        "derive-epoch-key",
        {"epoch_secret": EPOCH_SECRET.hex(), "vault_id": VAULT_ID.hex(), "compartment_id": COMPARTMENT_ID.hex(),
         "epoch_id": EPOCH_ID.hex()},
        expected={"xwing_seed": epk.seed.hex(), "xwing_public": public_summary(epk.public),
                  "commit": keys.epoch_commit(EPOCH_SECRET, VAULT_ID, COMPARTMENT_ID, EPOCH_ID).hex()},
    )

    prk = fixed("conformance segment key")
    salt = fixed("conformance body salt", 24)
    context = VAULT_ID + COMPARTMENT_ID + EPOCH_ID
    bk = derive_body_keys(prk, segments.LABEL, salt, context)
    out.vector(
        "derive-body-keys-segment",
        "A segment key, the label vmem/v1/segment, a 24-byte salt and the context vault_id||compartment_id||"
        "epoch_id derive the XChaCha20-Poly1305 key, nonce and key commitment of a segment body.",
        "derive-body-keys",
        {"prk": prk.hex(), "label": segments.LABEL, "salt": salt.hex(), "context": context.hex()},
        expected={"key": bk.key.hex(), "nonce": bk.nonce.hex(), "commitment": bk.commitment.hex()},
    )

    signer = SigningKey.from_seed(WRITER_SEED)
    recipient = RecipientKey.from_seed(RECIPIENT_SEED)
    genesis = encoding.encode({0: 1, 1: 16, 2: "genesis record bytes"})
    record = encoding.encode({0: 1, 1: 3, 2: "record bytes"})
    header = encoding.encode({0: 1, 4: 1, 9: T0})
    data = b"any file bytes\n"
    enc = fixed("conformance enc", 32) * (XWING_ENC_LEN // 32)
    cases = [
        {"function": "vault_id", "label": "vmem/v1/genesis", "inputs": {"genesis_record": genesis.hex()},
         "output": ids.vault_id(genesis).hex()},
        {"function": "record_id", "label": "vmem/v1/record", "inputs": {"record": record.hex()},
         "output": ids.record_id(record).hex()},
        {"function": "batch_id", "label": "vmem/v1/batch", "inputs": {"header": header.hex()},
         "output": ids.batch_id(header).hex()},
        {"function": "file_id", "label": None, "inputs": {"data": data.hex()}, "output": ids.file_id(data).hex()},
        {"function": "writer_id", "label": "vmem/v1/writer-id", "inputs": {"alg": signer.alg, "public": signer.public.hex()},
         "output": ids.writer_id(signer.alg, signer.public).hex()},
        {"function": "recipient_id", "label": "vmem/v1/recipient-id", "inputs": {"public": recipient.public.hex()},
         "output": ids.recipient_id(recipient.public).hex()},
        {"function": "envelope_tag", "label": "vmem/v1/env-tag",
         "inputs": {"enc": enc.hex(), "recipient_id": ids.recipient_id(recipient.public).hex()},
         "output": envelopes.tag_for(enc, ids.recipient_id(recipient.public)).hex()},
        {"function": "segment_name", "label": None, "inputs": {"data": data.hex()}, "output": segment_name(data)},
        {"function": "envelope_name", "label": None, "inputs": {"data": data.hex()},
         "output": envelopes.file_name(data)},
        {"function": "slot_name", "label": None, "inputs": {"slot_id": SLOT_ID.hex()},
         "output": slots.file_name(SLOT_ID)},
    ]
    out.vector(
        "derive-ids",
        "Every identifier and file name is a (tagged) SHA-256 of exact bytes: vault, record, batch, file, "
        "writer and recipient ids, the envelope tag and the segment, envelope and slot file names.",
        "derive-ids",
        {"cases": [{k: c[k] for k in ("function", "label", "inputs")} for c in cases]},
        expected={"outputs": [c["output"] for c in cases]},
        notes="A tagged hash is SHA-256(label || 0x00 || inputs concatenated in the order listed); "
              "writer_id hashes the algorithm id as one byte.  file_id and the file names are untagged SHA-256.",
    )

    lengths = [0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 63, 65, 100, 127, 129, 255, 257, 1000, 1024,
               1025, 3000, 4096, 4097, 5000, 65535, 65536, 65636, 100000, 1000000, 1048577, 8 * 1024 * 1024 + 1]
    payloads = [0, 1, 100, 2700, 2808, 2809, 2810, 5000, 65536, 1000000]
    out.vector(
        "padme",
        "Padme padding lengths (PURBs Algorithm 1) and the segment file sizes max(4096, padme(1212 + 76 + "
        "payload length)) that follow from them.",
        "padme",
        {"lengths": lengths, "segment_payload_lengths": payloads},
        expected={"padme": [padme(n) for n in lengths],
                  "segment_sizes": [segments.segment_size(n) for n in payloads]},
        notes="76 = 24 (salt) + 32 (commitment) + 16 (AEAD tag) + 4 (u32 payload length).",
    )


# ---------------------------------------------------------------------------------------------
# Objects (randomized: generated once, then only checked)


def note(author: bytes, text: str, ts: int) -> bytes:
    return rec.encode_record(rec.Kind.NOTE, author, value={"text": text, "conversation": "conformance", "role": "user"},
                             authority=rec.Authority.USER, type="message", ts=ts)


def make_chain(signer: SigningKey, count: int) -> list[rec.Batch]:
    """``count`` batches of one writer in the conformance compartment, seq 1..count."""
    wid = ids.writer_id(signer.alg, signer.public)
    out: list[rec.Batch] = []
    prev = None
    for seq in range(1, count + 1):
        raws = [note(wid, f"batch {seq} message", T0 + seq)]
        if seq == 1:
            raws.append(rec.encode_record(rec.Kind.PUT, wid, key="user/home_city", value="Lisbon",
                                          authority=rec.Authority.USER, type="fact", ts=T0 + seq))
        header = rec.BatchHeader(VAULT_ID, COMPARTMENT_ID, wid, seq, prev, (), {wid: seq - 1},
                                 tuple(ids.record_id(r) for r in raws), T0 + seq)
        batch = rec.make_batch(header, raws, signer)
        out.append(batch)
        prev = batch.id
    return out


def batch_json(batch: rec.Batch) -> dict[str, Any]:
    hd = batch.header
    return {
        "batch_id": batch.id.hex(),
        "header_cbor": batch.header_bytes.hex(),
        "vault_id": hd.vault_id.hex(),
        "compartment_id": hd.compartment_id.hex(),
        "writer_id": hd.writer_id.hex(),
        "seq": hd.seq,
        "prev": h(hd.prev),
        "deps": [d.hex() for d in hd.deps],
        "frontier": {w.hex(): s for w, s in sorted(hd.frontier.items())},
        "record_ids": [r.hex() for r in hd.records],
        "ts": hd.ts,
        "sig_algs": list(hd.sig_algs),
        "signatures": [{"alg": a, "signature": s.hex()} for a, s in batch.sigs],
        "records": [h(r) for r in batch.records],
    }


def seal_segment_with_padding(payload: bytes, epoch_public: bytes, bad_offset: int) -> bytes:
    """A segment sealed exactly like segments.seal_segment / sealed.seal, except that one padding
    byte of the plaintext (``bad_offset`` after the payload) is 0x01."""
    segment_key = random_bytes(32)
    header = (segments.MAGIC + SUITE_VMEM1.to_bytes(2, "big") + bytes(2) + COMPARTMENT_ID + EPOCH_ID
              + hpke_wrap(epoch_public, segment_key,
                          labelled("vmem/v1/wrap/segment", VAULT_ID, COMPARTMENT_ID, EPOCH_ID)))
    assert len(header) == segments.HEADER_LEN
    salt = random_bytes(sealed.SALT_LEN)
    bk = derive_body_keys(segment_key, segments.LABEL, salt, VAULT_ID + COMPARTMENT_ID + EPOCH_ID)
    prefix = header + salt + bk.commitment
    total = segments.segment_size(len(payload))
    plaintext_len = total - len(prefix) - 16
    padding = bytearray(plaintext_len - 4 - len(payload))
    padding[bad_offset] = 0x01
    plaintext = len(payload).to_bytes(4, "big") + payload + bytes(padding)
    data = prefix + aead_encrypt(bk.key, bk.nonce, prefix, plaintext)
    assert len(data) == total
    return data


def segment_inputs(name: str) -> dict[str, Any]:
    return {"name": name, "vault_id": VAULT_ID.hex(), "compartment_id": COMPARTMENT_ID.hex(),
            "epoch_id": EPOCH_ID.hex(), "epoch_secret": EPOCH_SECRET.hex()}


def envelope_vector(out: Out, name: str, description: str, recipient: RecipientKey, owner: SigningKey,
                    owner_id: bytes, kind: envelopes.EnvelopeKind, key: bytes,
                    epoch: tuple[bytes, bytes] | None = None, extra: dict[str, Any] | None = None) -> None:
    """An ``open-envelope`` vector: an envelope of ``kind`` carrying ``key`` (about ``epoch``, a compartment
    and epoch id, for kinds 1 and 2), its artefact ``<name>.env``, and what opening it yields."""
    rid = ids.recipient_id(recipient.public)
    cid, eid = epoch if epoch is not None else (None, None)
    env = envelopes.build_envelope(vault_id=VAULT_ID, kind=kind, compartment_id=cid, epoch_id=eid,
                                   recipient_public=recipient.public, recipient_id=rid, key=key, signer=owner,
                                   signer_id=owner_id)
    env_key = hpke_unwrap(recipient, env[12 : 12 + WRAP_LEN], labelled("vmem/v1/wrap/envelope", VAULT_ID))
    env_raw = sealed.open_sealed(env_key, envelopes.LABEL, VAULT_ID, env, envelopes.HEADER_LEN)
    out.vector(
        name, description, "open-envelope",
        {"artefact": out.artefact(f"{name}.env", env), "name": envelopes.file_name(env),
         "recipient_xwing_seed": RECIPIENT_SEED.hex(), "vault_id": VAULT_ID.hex(), "signer_public": owner.public.hex()},
        expected={
            "recipient_id": rid.hex(),
            "tag": env[8:12].hex(),
            "envelope_key": env_key.hex(),
            "payload_cbor": env_raw.hex(),
            "payload": {"kind": int(kind), "vault_id": VAULT_ID.hex(), "compartment_id": cid.hex() if cid else "",
                        "epoch_id": eid.hex() if eid else "", "recipient_id": rid.hex(), "key": key.hex(),
                        "prev_epoch": None, "keys": sorted(encoding.decode(env_raw)),
                        "signer_ids": [owner_id.hex()], **(extra or {})},
            "signatures_verify": True,
        },
    )


def objects_and_negatives(out: Out) -> None:
    writer = SigningKey.from_seed(WRITER_SEED)
    owner = SigningKey.from_seed(OWNER_SEED)
    owner_id = ids.writer_id(owner.alg, owner.public)
    epoch = keys.epoch_key(EPOCH_SECRET, VAULT_ID, COMPARTMENT_ID, EPOCH_ID)

    # -- slot
    kdf = KdfParams(*ARGON2_TEST, FIXED_SALT)
    pw = from_passphrase(VAULT_PASSPHRASE, kdf)
    slot = slots.build_slot(
        vault_id=VAULT_ID, slot_id=SLOT_ID, slot_type=slots.SlotType.PASSPHRASE, generation=1, vms=VMS,
        recipient_public=pw.recipient.public, recipient_id=pw.recipient_id, kdf=kdf, label="passphrase",
        signer=owner, signer_id=owner_id,
    )
    slot_name = slots.file_name(SLOT_ID)
    sh = slots.read_header(slot, slot_name)
    st_raw = sealed.open_sealed(VMS, slots.LABEL, VAULT_ID + SLOT_ID + (1).to_bytes(4, "big"), slot[: slots.BODY_END],
                                slots.HEADER_LEN)
    st = encoding.decode(st_raw)
    slot_ref = out.artefact("object-slot-passphrase.slot", slot)
    out.vector(
        "object-slot-passphrase",
        "A passphrase slot opened with its passphrase and the vault id yields the vault master secret and a "
        "statement, signed by an owner key, that repeats the slot's cleartext fields.",
        "open-slot",
        {"artefact": slot_ref, "name": slot_name, "passphrase": VAULT_PASSPHRASE, "vault_id": VAULT_ID.hex(),
         "signer_public": owner.public.hex()},
        expected={
            "header": {"version": 1, "type": int(sh.type), "slot_id": sh.slot_id.hex(), "generation": sh.generation,
                       "kdf": kdf_json(kdf), "wrap_sha256": sha256(sh.wrap).hex()},
            "credential": {"writer_id": pw.writer_id.hex(), "recipient_id": pw.recipient_id.hex()},
            "vms": VMS.hex(),
            "statement_cbor": st_raw.hex(),
            "statement": {
                "vault_id": st[0].hex(), "slot_id": st[1].hex(), "type": st[2], "generation": st[3],
                "recipient_id": st[4].hex(), "wrap_hash": st[5].hex(),
                "kdf": {"memory_kib": st[6][0], "time_cost": st[6][1], "parallelism": st[6][2], "salt": st[6][3].hex()},
                "label": st[7],
                "signatures": [{"writer_id": w.hex(), "alg": a, "signature": s.hex()} for w, a, s in st[13]],
            },
            "signatures_verify": True,
        },
        test_kdf=True,
    )
    other_id = fixed("conformance other slot id", 16)
    out.vector(
        "neg-slot-renamed",
        "A slot file stored under the name of another slot id is refused when its header is read.",
        "slot-read-header",
        {"artefact": slot_ref, "name": slots.file_name(other_id)},
        error="DamagedFile", camillo_detail="carries the id of another slot",
    )
    other_vault = fixed("conformance other vault id")
    out.vector(
        "neg-slot-other-vault",
        "A slot's wrap does not open for another vault id, because the vault id is part of the HPKE info.",
        "slot-unwrap",
        {"artefact": slot_ref, "name": slot_name, "passphrase": VAULT_PASSPHRASE, "vault_id": other_vault.hex()},
        error="CryptoFailure", test_kdf=True,
    )

    # -- envelope
    recipient = RecipientKey.from_seed(RECIPIENT_SEED)
    envelope_vector(
        out, "object-envelope",
        "An envelope opened with the recipient's X-Wing seed and the vault id yields an owner-signed payload "
        "carrying the epoch secret of one compartment and epoch, with key 6 (previous epoch) present and null.",
        recipient, owner, owner_id, envelopes.EnvelopeKind.EPOCH_SECRET, EPOCH_SECRET, (COMPARTMENT_ID, EPOCH_ID))
    previous = [(7, fixed("conformance vms of generation 7")), (6, fixed("conformance vms of generation 6"))]
    envelope_vector(
        out, "object-envelope-previous-masters",
        "An envelope of kind 5, which a random roll addresses to its new owner KEM key (spec §16.6 step 5): "
        "keys 2, 3 and 6 absent; key 5 two entries u32(generation) || VMS, newest first.",
        recipient, owner, owner_id, envelopes.EnvelopeKind.PREVIOUS_MASTERS, envelopes.pack_previous_masters(previous),
        extra={"previous_masters": [[g, vms.hex()] for g, vms in previous]})
    device = fixed("conformance writer id of a device that stays")
    seal_keys = [(g, device, hkdf(vms + g.to_bytes(4, "big") + device, labelled("vmem/v1/local/device-key", VAULT_ID)))
                 for g, vms in previous]
    assert seal_keys == [(g, device, seal_key(VAULT_ID, vms, g, device)) for g, vms in previous]  # the spec's = the code's
    envelope_vector(
        out, "object-envelope-previous-seal-keys",
        "An envelope of kind 6, which every roll addresses to its new owner KEM key (spec §16.6 step 5): keys 2, "
        "3 and 6 absent; key 5 two entries u32(generation) || writer_id || seal key, newest first, each seal key "
        "HKDF(VMS || u32(generation) || writer_id, labelled(\"vmem/v1/local/device-key\", vault_id)) of the master "
        "secrets of object-envelope-previous-masters, for one owner device.",
        recipient, owner, owner_id, envelopes.EnvelopeKind.PREVIOUS_SEAL_KEYS, envelopes.pack_seal_keys(seal_keys),
        extra={"previous_seal_keys": [[g, w.hex(), k.hex()] for g, w, k in seal_keys]})

    # -- segment and batches
    chain = make_chain(writer, 3)
    payload = segments.encode_payload([chain[0]])
    seg = segments.seal_segment(VAULT_ID, COMPARTMENT_ID, EPOCH_ID, epoch.public, payload)
    seg_name = segment_name(seg)
    seg_key = hpke_unwrap(epoch, seg[44 : 44 + WRAP_LEN],
                          labelled("vmem/v1/wrap/segment", VAULT_ID, COMPARTMENT_ID, EPOCH_ID))
    seg_ref = out.artefact("object-segment.seg", seg)
    out.vector(
        "object-segment",
        "A segment opened with its epoch secret and the vault id yields its exact payload, a CBOR list holding "
        "one signed batch of two records.",
        "open-segment",
        {"artefact": seg_ref, **segment_inputs(seg_name), "writer_public": writer.public.hex()},
        expected={
            "header": {"suite": SUITE_VMEM1, "flags": 0, "compartment_id": COMPARTMENT_ID.hex(),
                       "epoch_id": EPOCH_ID.hex(), "size": len(seg)},
            "segment_key": seg_key.hex(),
            "payload": payload.hex(),
            "batches": [batch_json(chain[0])],
            "signatures_verify": True,
        },
    )

    def negative_segment(name: str, description: str, data: bytes, detail: str) -> None:
        # Named by its own hash, as a host would store it, so only the cryptographic check fails.
        out.vector(name, description, "open-segment",
                   {"artefact": out.artefact(f"{name}.seg", data), **segment_inputs(segment_name(data))},
                   error="DamagedFile", camillo_detail=detail)

    flipped = bytearray(seg)
    flipped[12] ^= 0x01  # first byte of the compartment id
    negative_segment(
        "neg-segment-header-flip",
        "A segment with one flipped bit in its cleartext header (the compartment id, part of the HPKE info "
        "and of the AEAD associated data) does not open.",
        bytes(flipped), "damaged or tampered",
    )
    altered = bytearray(seg)
    altered[1236] ^= 0x80  # first byte of the key commitment
    negative_segment(
        "neg-segment-commitment",
        "A segment whose key commitment bytes were altered is refused before any decryption.",
        bytes(altered), "key commitment does not match",
    )
    ct = bytearray(seg)
    ct[len(ct) - 1] ^= 0x01  # last byte of the Poly1305 tag
    negative_segment(
        "neg-segment-ciphertext-flip",
        "A segment with one flipped bit in its authentication tag does not decrypt.",
        bytes(ct), "authentication tag does not verify",
    )
    negative_segment(
        "neg-segment-nonzero-padding",
        "A segment whose plaintext padding holds a 0x01 byte is refused although it decrypts correctly.",
        seal_segment_with_padding(payload, epoch.public, 100), "padding bytes are not zero",
    )
    wrong_name = segment_name(b"not this segment")
    out.vector(
        "neg-segment-name-not-hash",
        "A segment stored under a name that is not the SHA-256 of its bytes does not match its name.",
        "hash-matches-name",
        {"artefact": seg_ref, "name": wrong_name},
        error="name does not match content hash",
    )

    # -- wraps
    info = labelled("vmem/v1/wrap/segment", VAULT_ID, COMPARTMENT_ID, EPOCH_ID)
    wrap = seg[44 : 44 + WRAP_LEN]
    for n, data in ((1167, wrap[:-1]), (1169, wrap + b"\x00")):
        out.vector(
            f"neg-wrap-length-{n}",
            f"A wrap of {n} bytes instead of 1168 is refused on its length, before HPKE runs.",
            "hpke-unwrap",
            {"wrap": data.hex(), "recipient_xwing_seed": epoch.seed.hex(), "info": info.hex()},
            error="CryptoFailure", camillo_detail=f"not {n}",
        )

    # -- pack
    pack_entries = [(seg_name, seg)]
    for batch in chain[1:]:
        s = segments.seal_segment(VAULT_ID, COMPARTMENT_ID, EPOCH_ID, epoch.public, segments.encode_payload([batch]))
        pack_entries.append((segment_name(s), s))
    buf = io.BytesIO()
    size, digest = packs.write_pack(pack_entries, buf, complete_vault=False)
    pack = buf.getvalue()
    assert size == len(pack) and digest == sha256(pack)
    trailer = pack[-packs.TRAILER_LEN :]
    index_offset = int.from_bytes(trailer[0:8], "big")
    index_len = int.from_bytes(trailer[8:12], "big")
    by_name = dict(pack_entries)
    entries = []
    offset = packs.HEADER_LEN
    for name in sorted(by_name):
        entries.append({"type": packs.TYPE_SEGMENT, "name": name, "offset": offset, "length": len(by_name[name]),
                        "sha256": sha256(by_name[name]).hex()})
        offset += len(by_name[name])
    out.vector(
        "object-pack",
        "A pack of three segments (flag 0, as inside a vault folder) lists them in a sorted CBOR index with "
        "their offsets and lengths, and its trailer checksums every byte before it.",
        "read-pack",
        {"artefact": out.artefact("object-pack.pack", pack)},
        expected={
            "version": 1,
            "flags": 0,
            "entries": entries,
            "index_offset": index_offset,
            "index_length": index_len,
            "index_cbor": pack[index_offset : index_offset + index_len].hex(),
            "count": len(entries),
            "checksum": sha256(pack[: -packs.TRAILER_LEN]).hex(),
        },
        notes="Packs are deterministic: writing the same entries again must give the same bytes.",
    )

    # -- an attachment chunk (spec 9.5): deterministic for a writer holding the epoch secret
    from camillo import attachments

    chunk = b"An attached file's first (and only) chunk: " + bytes(range(256))
    chunk_key = attachments.convergent_key(EPOCH_SECRET, VAULT_ID, COMPARTMENT_ID, EPOCH_ID, chunk)
    blob = attachments.seal_chunk(VAULT_ID, chunk_key, chunk, convergent=True)
    out.vector(
        "object-attachment-chunk",
        "An attachment chunk written by a writer holding its compartment's epoch secret: its key is derived "
        "from that secret and the chunk's SHA-256, its salt from its key, so the file (sealed body, padded like "
        "a segment, named by its hash under blobs/) is byte for byte the same wherever it is written.",
        "open-attachment-chunk",
        {"artefact": out.artefact("object-attachment-chunk.blob", blob), "vault_id": VAULT_ID.hex(),
         "compartment_id": COMPARTMENT_ID.hex(), "epoch_id": EPOCH_ID.hex(), "epoch_secret": EPOCH_SECRET.hex(),
         "name": attachments.chunk_name(blob), "chunk_key": chunk_key.hex()},
        expected={"chunk": chunk.hex(), "derived_key": chunk_key.hex(), "size": len(blob), "rewritten_equal": True},
        notes="chunk_key is what the attachment record's body carries for this chunk (spec 9.5).",
    )

    # -- batches
    good = chain[0]
    out.vector(
        "batch-valid",
        "A well-formed batch decodes, its id is the tagged hash of its header bytes, and its Ed25519 "
        "signature verifies against the writer's public key.",
        "batch-verify-signature",
        {"batch_cbor": encoding.encode(good.to_cbor()).hex(), "writer_public": writer.public.hex()},
        expected={"batch_id": good.id.hex(), "signature_verifies": True},
    )
    sig = bytearray(good.sigs[0][1])
    sig[0] ^= 0x01
    bad_sig = rec.Batch(good.id, good.header_bytes, good.header, ((good.sigs[0][0], bytes(sig)),), good.records)
    out.vector(
        "neg-batch-bad-signature",
        "A structurally valid batch whose signature has one flipped bit does not verify against its writer's key.",
        "batch-verify-signature",
        {"batch_cbor": encoding.encode(bad_sig.to_cbor()).hex(), "writer_public": writer.public.hex()},
        error="signature does not verify",
    )
    stripped = good.to_cbor()
    stripped[1] = []
    out.vector(
        "neg-batch-no-signatures",
        "A batch whose signature list was stripped to an empty list is refused as malformed.",
        "batch-decode",
        {"batch_cbor": encoding.encode(stripped).hex()},
        error="CanonicalError", camillo_detail="1 to 4 signatures",
    )
    wid = ids.writer_id(writer.alg, writer.public)
    raws = [note(wid, "malformed batch", T0)]
    rids = tuple(ids.record_id(r) for r in raws)
    for name, description, header, detail in (
        ("neg-batch-seq2-prev-null",
         "A batch with seq 2 but a null prev is refused as malformed.",
         rec.BatchHeader(VAULT_ID, COMPARTMENT_ID, wid, 2, None, (), {wid: 1}, rids, T0), "must name its prev"),
        ("neg-batch-frontier-self",
         "A batch whose frontier does not list its own writer at seq - 1 is refused as malformed.",
         rec.BatchHeader(VAULT_ID, COMPARTMENT_ID, wid, 1, None, (), {wid: 1}, rids, T0), "own writer at seq - 1"),
    ):
        batch = rec.make_batch(header, raws, writer)  # signed: only its structure is wrong
        out.vector(name, description, "batch-decode", {"batch_cbor": encoding.encode(batch.to_cbor()).hex()},
                   error="CanonicalError", camillo_detail=detail)

    # -- CBOR
    for name, description, hexdata in (
        ("neg-cbor-duplicate-keys", "A CBOR map with a duplicate key is not deterministic CBOR.", "a2010101 02"),
        ("neg-cbor-unsorted-keys", "A CBOR map whose keys are not in bytewise order is not deterministic CBOR.",
         "a2020101 02"),
        ("neg-cbor-indefinite-array", "An indefinite-length CBOR array is not deterministic CBOR.", "9f0102ff"),
        ("neg-cbor-indefinite-string", "An indefinite-length CBOR text string is not deterministic CBOR.",
         "7f616161 62ff"),
        ("neg-cbor-float", "A CBOR floating-point number (here 1.5 as a map value) is outside the VMEM profile.",
         "a100f93e00"),
        ("neg-cbor-tag", "A CBOR tag (here tag 1, an epoch timestamp) is outside the VMEM profile.", "c11a6553f100"),
        ("neg-cbor-undefined", "The CBOR simple value undefined is outside the VMEM profile.", "f7"),
        ("neg-cbor-non-shortest-int", "An integer not encoded in its shortest form is not deterministic CBOR.",
         "1801"),
        ("neg-cbor-trailing-bytes", "Bytes after the single CBOR item are refused.", "0100"),
    ):
        out.vector(name, description, "cbor-decode", {"cbor": hexdata.replace(" ", "")}, error="CanonicalError")
    out.vector(
        "cbor-canonical",
        "Deterministic CBOR inside the VMEM profile (integers, byte and text strings, arrays, maps, booleans, "
        "null) decodes.",
        "cbor-decode",
        {"cbor": encoding.encode({0: [1, -1, 24, 2**32, True, False, None], 1: b"\x00\xff", 2: "vmem",
                                  3: {"a": 1, "bb": 2}}).hex()},
        expected={"reencodes_identically": True},
    )

    # -- descriptor
    good_desc = descriptor.Descriptor(VAULT_ID).encode()
    out.vector(
        "descriptor",
        "A vault descriptor (the cleartext VMEM file) names the format version, the vault id and the suite, "
        "with a check value over them.",
        "descriptor-decode",
        {"descriptor": good_desc.hex()},
        expected={"version": 1, "vault_id": VAULT_ID.hex(), "suite": SUITE_VMEM1,
                  "check": sha256(encoding.encode({0: "vmem", 1: 1, 2: VAULT_ID, 3: SUITE_VMEM1}))[:8].hex()},
    )
    out.vector(
        "neg-descriptor-version-2",
        "A descriptor naming format version 2 (with a correct check value) is refused as a newer, unsupported "
        "format.",
        "descriptor-decode",
        {"descriptor": descriptor.Descriptor(VAULT_ID, version=2).encode().hex()},
        error="UnsupportedVersion",
    )


# ---------------------------------------------------------------------------------------------
# A whole tiny vault


def read_back(path: str, unlock: Unlock) -> dict[str, Any]:
    """What a fresh installation reads from the .vmem at ``path``."""
    with Vault.open(path, unlock, register=False) as v:
        timeline = []
        for r in v.timeline():
            timeline.append({
                "id": r.id.hex(), "kind": r.kind_name, "type": r.type, "compartment": r.compartment,
                "class": r.class_label, "effective_class": r.effective_label, "writer_id": r.writer_id.hex(),
                "ts": r.ts, "key": r.key, "value": jsonable(r.value), "text": r.text,
                "conversation": r.conversation, "role": r.role, "pred": [p.hex() for p in r.pred],
            })
        facts = []
        for f in v.facts():
            facts.append({
                "key": f.key, "compartment": f.compartment, "status": f.status,
                "value": jsonable(f.current.value) if f.current else None,
                "current": f.current.id.hex() if f.current else None,
                "history": [r.id.hex() for r in f.history],
                "candidates": [r.id.hex() for r in f.candidates],
                "discarded": [r.id.hex() for r in f.discarded],
            })
        principals = sorted(
            ({"writer_id": p.writer_id.hex(), "kind": p.kind.label} for p in v.session.roster.principals.values()),
            key=lambda p: p["writer_id"],
        )
        return {
            "vault_id": v.vault_id.hex(),
            "compartments": sorted(v.compartments),
            "principals": principals,
            "timeline": timeline,
            "facts": facts,
            "problems": sorted([p.kind, p.file] for p in v.problems()),
        }


def tiny_vault(out: Out, work: Path) -> None:
    folder = work / "tiny-vault"
    vault, phrase = Vault.create(str(folder), VAULT_PASSPHRASE, device_name="conformance laptop")
    with vault:
        vault.append([
            NewRecord(type="conversation", conversation="porto", title="A weekend in Porto", ts=T0),
            NewRecord(type="message", conversation="porto", role="user", text="Can you plan a weekend in Porto?",
                      ts=T0 + 10),
            NewRecord(type="message", conversation="porto", role="assistant",
                      text="Saturday in Ribeira, Sunday at Serralves.", ts=T0 + 20),
        ], compartment="personal")
        vault.append([NewRecord(type="fact", key="user/home_city", value="Lisbon", ts=T0 + 30)], compartment="personal")
        vault.append([NewRecord(type="fact", key="user/home_city", value="Porto", ts=T0 + 40)], compartment="personal")
        vault.append([NewRecord(type="message", conversation="standup", role="user",
                                text="The quarterly report is due on Friday.", ts=T0 + 50)], compartment="work")
        vault_id = vault.vault_id
    vmem = out.dir / "tiny-vault.vmem"
    transport.pack_vault(str(folder), str(vmem))

    # Read back as a fresh installation that has never seen this vault.
    os.environ["CAMILLO_HOME"] = str(work / "reader-home")
    expected = read_back(str(vmem), Unlock.passphrase(VAULT_PASSPHRASE))
    assert expected == read_back(str(vmem), Unlock.recovery(phrase))
    assert expected["vault_id"] == vault_id.hex()
    assert expected["problems"] == [], expected["problems"]
    ref = out.artefact_ref("tiny-vault.vmem")
    out.vector(
        "vault-tiny",
        "A whole vault in one .vmem file opens read-only with its passphrase or its recovery phrase and shows "
        "exactly this timeline, these facts and no problems.",
        "open-vault",
        {"artefact": ref, "passphrase": VAULT_PASSPHRASE, "recovery_phrase": phrase},
        expected=expected, test_kdf=True,
        notes="The timeline lists records of kind NOTE and PUT ordered by (ts, record id); a fact's history "
              "lists its PUT records oldest first.  Both unlock methods must give the same result.",
    )

    # The same vault with its passphrase slot replaced by one a non-owner planted.
    planted_dir = work / "planted"
    transport.unpack_vault(str(vmem), str(planted_dir))
    kdf = None
    for p in sorted((planted_dir / "slots").iterdir()):
        header = slots.read_header(p.read_bytes(), f"slots/{p.name}")
        if header.type == slots.SlotType.PASSPHRASE:
            kdf = header.kdf
            p.unlink()
    assert kdf is not None
    cred = from_passphrase(VAULT_PASSPHRASE, kdf)
    attacker = Credential.generate(CredentialKind.DEVICE)
    sid = ids.new_random_id()
    (planted_dir / slots.file_name(sid)).write_bytes(slots.build_slot(
        vault_id=vault_id, slot_id=sid, slot_type=slots.SlotType.PASSPHRASE, generation=1, vms=random_bytes(32),
        recipient_public=cred.recipient.public, recipient_id=cred.recipient_id, kdf=kdf, label="planted",
        signer=attacker.signer, signer_id=attacker.writer_id,
    ))
    planted = out.dir / "tiny-vault-planted-slot.vmem"
    transport.pack_vault(str(planted_dir), str(planted))
    try:
        Vault.open(str(planted), Unlock.passphrase(VAULT_PASSPHRASE), register=False).lock()
    except VaultError as exc:
        print(f"  planted slot refused with {type(exc).__name__}: {exc.message}")
    else:
        print("  WARNING: the planted slot was not refused", file=sys.stderr)
    planted_ref = out.artefact_ref("tiny-vault-planted-slot.vmem")
    out.vector(
        "neg-vault-planted-passphrase-slot",
        "The tiny vault with its passphrase slot replaced by one that a non-owner planted (it wraps another "
        "master secret to the passphrase credential) does not open with the passphrase.",
        "open-vault",
        {"artefact": planted_ref, "passphrase": VAULT_PASSPHRASE, "planted_slot": slots.file_name(sid)},
        error=["DamagedFile", "WrongCredential"], test_kdf=True,
    )
    recovered = read_back(str(planted), Unlock.recovery(phrase))
    out.vector(
        "vault-planted-slot-recovery",
        "The vault with the planted passphrase slot still opens with its recovery phrase, shows the same "
        "timeline and facts, and reports the planted slot as a problem.",
        "open-vault",
        {"artefact": planted_ref, "recovery_phrase": phrase},
        expected=recovered,
    )


def selected(out: Out, patterns: list[str]) -> set[str]:
    """The vectors named by ``patterns`` (names or shell patterns such as ``roster-*``), plus every
    vector that shares an artefact with one of them (its artefact is written again too)."""
    names = {n for n in out.names if any(fnmatch.fnmatch(n, p) for p in patterns)}
    unknown = [p for p in patterns if not any(fnmatch.fnmatch(n, p) for n in out.names)]
    if unknown:
        raise SystemExit(f"no vector is named {', '.join(unknown)}; the vectors are: {', '.join(sorted(out.names))}")
    files = {n: set(_artefact_files(json.loads((out.dir / f"{n}.json").read_text(encoding="ascii"))))
             for n in out.names}
    while True:
        shared = {n for n in out.names if files[n] & {f for m in names for f in files[m]}} - names
        if not shared:
            return names
        names |= shared


def _artefact_files(obj: Any) -> list[str]:
    if isinstance(obj, dict):
        if set(obj) == {"file", "sha256", "length"}:
            return [obj["file"]]
        return [f for x in obj.values() for f in _artefact_files(x)]
    if isinstance(obj, list):
        return [f for x in obj for f in _artefact_files(x)]
    return []


def main(argv: list[str] | None = None) -> int:
    """Write every vector, or (with names or patterns) only those, leaving the others as they are.
    Object vectors change on every run, so regenerate only what changed and commit it."""
    patterns = sys.argv[1:] if argv is None else argv
    with tempfile.TemporaryDirectory(prefix="vmem-vectors-") as tmp:
        work = Path(tmp)
        os.environ["CAMILLO_INSECURE_TEST_KDF"] = "1"
        os.environ["CAMILLO_KEYCHAIN"] = "none"
        os.environ["CAMILLO_HOME"] = str(work / "writer-home")
        out = Out(work / "vectors" if patterns else VECTORS)
        out.clean()
        derivations(out)
        objects_and_negatives(out)
        roster_vectors(out.vector)
        writer_vectors(out.vector)
        tiny_vault(out, work)
        from tests.conformance.generate_owner_vectors import (
            owner_vectors,  # recipients, compartments, devices
        )

        owner_vectors(out, work)
        if not patterns:
            print(f"wrote {len(out.names)} vectors to {VECTORS}")
            return 0
        names = selected(out, patterns)
        for name in sorted(names):
            shutil.copyfile(out.dir / f"{name}.json", VECTORS / f"{name}.json")
            for f in _artefact_files(json.loads((out.dir / f"{name}.json").read_text(encoding="ascii"))):
                shutil.copyfile(out.dir / f, VECTORS / f)
    print(f"wrote {', '.join(sorted(names))} to {VECTORS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
