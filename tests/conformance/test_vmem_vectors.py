"""Check every VMEM v1 conformance vector in ``vectors/`` against the current code.

The vectors were written by ``generate_vectors.py``; ``vectors/README.md`` describes their format.
This file deliberately re-derives everything from the JSON and the artefacts alone (it shares no
code with the generator), as another implementation would.

* derivation vectors must match exactly;
* object vectors must open to exactly the expected outputs;
* negative vectors must fail with the named error (or the named non-exception outcome);
* the tiny vault must open from its ``.vmem`` file (read-only) and show exactly the expected
  timeline, facts and problems.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import unicodedata
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from camillo import (
    Unlock,
    Vault,
    descriptor,
    encoding,
    envelopes,
    errors,
    ids,
    keys,
    packs,
    primitives,
    sealed,
    segments,
    slots,
)
from camillo.control import BatchView
from camillo.credentials import Credential, CredentialKind, from_passphrase, from_recovery_phrase
from camillo.ops.registration import registration_records
from camillo.primitives import (
    CryptoFailure,
    KdfParams,
    RecipientKey,
    hkdf,
    labelled,
    normalize_passphrase,
    recovery_entropy,
    sha256,
    verify_signature,
)
from camillo.records import BatchHeader, batch_from_cbor, decode_record, make_batch, verify_batch_signature
from camillo.session.writer import causal_fields
from camillo.storage import hash_matches, segment_name
from owner_operations import OPERATIONS as OWNER_OPERATIONS

VECTORS = Path(__file__).resolve().parent / "vectors"
VECTOR_FILES = sorted(VECTORS.glob("*.json"))


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text(encoding="ascii"))


def _b(hexstr: str) -> bytes:
    return bytes.fromhex(hexstr)


def _artefact(ref: dict[str, Any]) -> tuple[Path, bytes]:
    path = VECTORS / ref["file"]
    data = path.read_bytes()
    assert len(data) == ref["length"] and sha256(data).hex() == ref["sha256"], f"{ref['file']} was changed"
    return path, data


def _jsonable(v: Any) -> Any:
    if isinstance(v, bytes):
        return {"bytes": v.hex()}
    if isinstance(v, list):
        return [_jsonable(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    return v


def _public(public: bytes) -> dict[str, Any]:
    return {"sha256": sha256(public).hex(), "first32": public[:32].hex(), "length": len(public)}


def _kdf(kdf: KdfParams) -> dict[str, Any]:
    return {"memory_kib": kdf.memory_kib, "time_cost": kdf.time_cost, "parallelism": kdf.parallelism,
            "salt": kdf.salt.hex()}


def _credential(cred: Credential, ikm: bytes) -> dict[str, Any]:
    # The two seeds are HKDF(ikm, label || 0x00) with an empty salt: check that spelled out too.
    assert cred.recipient.seed == hkdf(ikm, b"vmem/v1/cred/xwing\x00")
    assert cred.signer.seed == hkdf(ikm, b"vmem/v1/cred/ed25519\x00")
    return {
        "ikm": ikm.hex(),
        "xwing_seed": cred.recipient.seed.hex(),
        "ed25519_seed": cred.signer.seed.hex(),
        "xwing_public": _public(cred.recipient.public),
        "ed25519_public": cred.signer.public.hex(),
        "writer_id": cred.writer_id.hex(),
        "recipient_id": cred.recipient_id.hex(),
    }


# ---------------------------------------------------------------------------------------------
# One function per operation: returns what the vector's "expected" must equal, or raises.


def op_derive_passphrase(inp: dict[str, Any]) -> dict[str, Any]:
    passphrase = inp["passphrase"]
    assert passphrase.encode("utf-8").hex() == inp["passphrase_utf8"]
    assert normalize_passphrase(passphrase).hex() == inp["normalized_utf8"]
    k = inp["kdf"]
    kdf = KdfParams(k["memory_kib"], k["time_cost"], k["parallelism"], _b(k["salt"]))
    result = _credential(from_passphrase(passphrase, kdf), primitives.argon2id(passphrase, kdf))
    nfc = unicodedata.normalize("NFC", passphrase)
    if nfc != passphrase:
        assert _credential(from_passphrase(nfc, kdf), primitives.argon2id(nfc, kdf)) == result
    return result


def op_derive_recovery_phrase(inp: dict[str, Any]) -> dict[str, Any]:
    entropy = recovery_entropy(inp["phrase"])
    ikm = hkdf(entropy, labelled("vmem/v1/cred/recovery"))
    return {"entropy": entropy.hex(), **_credential(from_recovery_phrase(inp["phrase"]), ikm)}


def op_derive_owner_kem(inp: dict[str, Any]) -> dict[str, Any]:
    key = keys.owner_kem(_b(inp["vms"]), _b(inp["vault_id"]), inp["generation"])
    return {"xwing_seed": key.seed.hex(), "xwing_public": _public(key.public),
            "recipient_id": ids.recipient_id(key.public).hex()}


def op_derive_master_secrets(inp: dict[str, Any]) -> dict[str, Any]:
    vms, other, vid, g = _b(inp["vms"]), _b(inp["other_vms"]), _b(inp["vault_id"]), inp["generation"]
    join = keys.join_master([vms, other], vid, g)
    assert keys.join_master([other, vms], vid, g) == join, "a join does not depend on the order"
    return {"next": keys.next_master(vms, vid, g).hex(), "join": join.hex()}


def op_derive_epoch_key(inp: dict[str, Any]) -> dict[str, Any]:
    args = (_b(inp["epoch_secret"]), _b(inp["vault_id"]), _b(inp["compartment_id"]), _b(inp["epoch_id"]))
    key = keys.epoch_key(*args)
    return {"xwing_seed": key.seed.hex(), "xwing_public": _public(key.public), "commit": keys.epoch_commit(*args).hex()}


def op_derive_body_keys(inp: dict[str, Any]) -> dict[str, Any]:
    bk = primitives.derive_body_keys(_b(inp["prk"]), inp["label"], _b(inp["salt"]), _b(inp["context"]))
    return {"key": bk.key.hex(), "nonce": bk.nonce.hex(), "commitment": bk.commitment.hex()}


_ID_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "vault_id": lambda genesis_record: ids.vault_id(genesis_record).hex(),
    "record_id": lambda record: ids.record_id(record).hex(),
    "batch_id": lambda header: ids.batch_id(header).hex(),
    "file_id": lambda data: ids.file_id(data).hex(),
    "writer_id": lambda alg, public: ids.writer_id(alg, public).hex(),
    "recipient_id": lambda public: ids.recipient_id(public).hex(),
    "envelope_tag": lambda enc, recipient_id: envelopes.tag_for(enc, recipient_id).hex(),
    "segment_name": lambda data: segment_name(data),
    "envelope_name": lambda data: envelopes.file_name(data),
    "slot_name": lambda slot_id: slots.file_name(slot_id),
}


def op_derive_ids(inp: dict[str, Any]) -> dict[str, Any]:
    outputs = []
    for case in inp["cases"]:
        args = {k: (v if isinstance(v, int) else _b(v)) for k, v in case["inputs"].items()}
        out = _ID_FUNCTIONS[case["function"]](**args)
        if case["label"] is not None:
            # SHA-256(label || 0x00 || inputs in order), the algorithm id as one byte
            parts = b"".join(bytes([v]) if isinstance(v, int) else v for v in args.values())
            spelled = hashlib.sha256(case["label"].encode() + b"\x00" + parts).digest()
            n = len(out) // 2
            assert spelled[:n].hex() == out, case["function"]
        outputs.append(out)
    return {"outputs": outputs}


def op_padme(inp: dict[str, Any]) -> dict[str, Any]:
    return {"padme": [primitives.padme(n) for n in inp["lengths"]],
            "segment_sizes": [segments.segment_size(n) for n in inp["segment_payload_lengths"]]}


def op_slot_read_header(inp: dict[str, Any]) -> dict[str, Any]:
    _, data = _artefact(inp["artefact"])
    header = slots.read_header(data, inp["name"])
    return {"type": int(header.type), "slot_id": header.slot_id.hex()}


def op_slot_unwrap(inp: dict[str, Any]) -> dict[str, Any]:
    _, data = _artefact(inp["artefact"])
    header = slots.read_header(data, inp["name"])
    assert header.kdf is not None
    cred = from_passphrase(inp["passphrase"], header.kdf)
    return {"vms": slots.unwrap_vms(header, _b(inp["vault_id"]), cred.recipient).hex()}


def op_open_slot(inp: dict[str, Any]) -> dict[str, Any]:
    _, data = _artefact(inp["artefact"])
    vault_id = _b(inp["vault_id"])
    header = slots.read_header(data, inp["name"])
    assert header.kdf is not None
    cred = from_passphrase(inp["passphrase"], header.kdf)
    vms = slots.unwrap_vms(header, vault_id, cred.recipient)
    st = slots.read_statement(header, vault_id, vms)
    context = vault_id + header.slot_id + header.generation.to_bytes(4, "big")
    raw = sealed.open_sealed(vms, slots.LABEL, context, data[: slots.BODY_END], slots.HEADER_LEN)
    m = encoding.decode(raw)
    signer = _b(inp["signer_public"])
    verifies = all(ids.writer_id(alg, signer) == wid and verify_signature(alg, signer, st.message, sig)
                   for wid, alg, sig in st.signatures)
    return {
        "header": {"version": data[8], "type": int(header.type), "slot_id": header.slot_id.hex(),
                   "generation": header.generation, "kdf": _kdf(header.kdf), "wrap_sha256": sha256(header.wrap).hex()},
        "credential": {"writer_id": cred.writer_id.hex(), "recipient_id": cred.recipient_id.hex()},
        "vms": vms.hex(),
        "statement_cbor": raw.hex(),
        "statement": {
            "vault_id": m[0].hex(), "slot_id": m[1].hex(), "type": m[2], "generation": m[3],
            "recipient_id": m[4].hex(), "wrap_hash": m[5].hex(),
            "kdf": {"memory_kib": m[6][0], "time_cost": m[6][1], "parallelism": m[6][2], "salt": m[6][3].hex()},
            "label": m[7],
            "signatures": [{"writer_id": w.hex(), "alg": a, "signature": s.hex()} for w, a, s in m[13]],
        },
        "signatures_verify": verifies,
    }


def op_open_envelope(inp: dict[str, Any]) -> dict[str, Any]:
    _, data = _artefact(inp["artefact"])
    vault_id = _b(inp["vault_id"])
    recipient = RecipientKey.from_seed(_b(inp["recipient_xwing_seed"]))
    rid = ids.recipient_id(recipient.public)
    assert envelopes.file_name(data) == inp["name"]
    envelopes.check_shape(data, inp["name"])
    assert envelopes.is_for(data, rid)
    payload = envelopes.open_envelope(data, inp["name"], vault_id, recipient)
    key = primitives.hpke_unwrap(recipient, data[12 : 12 + primitives.WRAP_LEN], labelled("vmem/v1/wrap/envelope", vault_id))
    raw = sealed.open_sealed(key, envelopes.LABEL, vault_id, data, envelopes.HEADER_LEN)
    signer = _b(inp["signer_public"])
    verifies = all(ids.writer_id(alg, signer) == wid and verify_signature(alg, signer, payload.message, sig)
                   for wid, alg, sig in payload.signatures)
    fields = {"kind": int(payload.kind), "vault_id": encoding.decode(raw)[1].hex(),
              "compartment_id": payload.compartment_id.hex(), "epoch_id": payload.epoch_id.hex(),
              "recipient_id": payload.recipient_id.hex(), "key": payload.key.hex(),
              "prev_epoch": None if payload.prev_epoch is None else payload.prev_epoch.hex(),
              "keys": sorted(encoding.decode(raw)),
              "signer_ids": [s[0].hex() for s in payload.signatures]}
    if payload.kind == envelopes.EnvelopeKind.PREVIOUS_MASTERS:
        fields["previous_masters"] = [[g, vms.hex()] for g, vms in envelopes.previous_masters(payload.key)]
    if payload.kind == envelopes.EnvelopeKind.PREVIOUS_SEAL_KEYS:
        fields["previous_seal_keys"] = [[g, w.hex(), k.hex()] for g, w, k in envelopes.seal_keys(payload.key)]
    return {
        "recipient_id": rid.hex(),
        "tag": data[8:12].hex(),
        "envelope_key": key.hex(),
        "payload_cbor": raw.hex(),
        "payload": fields,
        "signatures_verify": verifies,
    }


def _batch(batch: Any) -> dict[str, Any]:
    hd = batch.header
    assert batch.id == ids.batch_id(batch.header_bytes)
    return {
        "batch_id": batch.id.hex(),
        "header_cbor": batch.header_bytes.hex(),
        "vault_id": hd.vault_id.hex(),
        "compartment_id": hd.compartment_id.hex(),
        "writer_id": hd.writer_id.hex(),
        "seq": hd.seq,
        "prev": None if hd.prev is None else hd.prev.hex(),
        "deps": [d.hex() for d in hd.deps],
        "frontier": {w.hex(): s for w, s in sorted(hd.frontier.items())},
        "record_ids": [r.hex() for r in hd.records],
        "ts": hd.ts,
        "sig_algs": list(hd.sig_algs),
        "signatures": [{"alg": a, "signature": s.hex()} for a, s in batch.sigs],
        "records": [None if r is None else r.hex() for r in batch.records],
    }


def op_open_segment(inp: dict[str, Any]) -> dict[str, Any]:
    _, data = _artefact(inp["artefact"])
    vault_id, cid, eid = _b(inp["vault_id"]), _b(inp["compartment_id"]), _b(inp["epoch_id"])
    epoch = keys.epoch_key(_b(inp["epoch_secret"]), vault_id, cid, eid)
    header = segments.read_header(data, inp["name"])
    payload = segments.open_segment(data, inp["name"], vault_id, epoch)
    batches = segments.decode_payload(payload, inp["name"])
    assert segment_name(data) == inp["name"]
    for b in batches:
        for rid, raw in zip(b.header.records, b.records):
            assert raw is None or ids.record_id(raw) == rid
    key = primitives.hpke_unwrap(epoch, data[44 : 44 + primitives.WRAP_LEN],
                                 labelled("vmem/v1/wrap/segment", vault_id, cid, eid))
    writer = _b(inp["writer_public"])
    return {
        "header": {"suite": int.from_bytes(data[8:10], "big"), "flags": int.from_bytes(data[10:12], "big"),
                   "compartment_id": header.compartment_id.hex(), "epoch_id": header.epoch_id.hex(),
                   "size": header.size},
        "segment_key": key.hex(),
        "payload": payload.hex(),
        "batches": [_batch(b) for b in batches],
        "signatures_verify": all(verify_batch_signature(b, writer) for b in batches),
    }


def op_open_attachment_chunk(inp: dict[str, Any]) -> dict[str, Any]:
    """Open a chunk with the key its attachment record carries; derive that key again from the epoch
    secret and the chunk (a writer's way) and seal the chunk again: the same file."""
    from camillo import attachments

    _, data = _artefact(inp["artefact"])
    assert attachments.chunk_name(data) == inp["name"]
    vault_id, carried = _b(inp["vault_id"]), _b(inp["chunk_key"])
    chunk = attachments.open_chunk(data, inp["name"], vault_id, carried)
    key = attachments.convergent_key(_b(inp["epoch_secret"]), vault_id, _b(inp["compartment_id"]),
                                     _b(inp["epoch_id"]), chunk)
    again = attachments.seal_chunk(vault_id, key, chunk, convergent=True)
    return {"chunk": chunk.hex(), "derived_key": key.hex(), "size": len(data), "rewritten_equal": again == data}


def op_hash_matches_name(inp: dict[str, Any]) -> dict[str, Any]:
    _, data = _artefact(inp["artefact"])
    return {"matches": hash_matches(inp["name"], data)}


def op_hpke_unwrap(inp: dict[str, Any]) -> dict[str, Any]:
    recipient = RecipientKey.from_seed(_b(inp["recipient_xwing_seed"]))
    return {"key": primitives.hpke_unwrap(recipient, _b(inp["wrap"]), _b(inp["info"])).hex()}


def op_read_pack(inp: dict[str, Any]) -> dict[str, Any]:
    path, data = _artefact(inp["artefact"])
    reader = packs.PackReader(str(path))
    try:
        entries = []
        contents = []
        for e in reader.entries:
            blob = reader.read(e.name)
            contents.append((e.name, blob))
            entries.append({"type": e.type, "name": e.name, "offset": e.offset, "length": e.length,
                            "sha256": sha256(blob).hex()})
        flags = reader.flags
    finally:
        reader.close()
    rebuilt = io.BytesIO()
    packs.write_pack(contents, rebuilt, complete_vault=bool(flags & packs.FLAG_COMPLETE_VAULT))
    assert rebuilt.getvalue() == data, "writing the same entries again gives other bytes"
    trailer = data[-packs.TRAILER_LEN :]
    index_offset = int.from_bytes(trailer[0:8], "big")
    index_len = int.from_bytes(trailer[8:12], "big")
    assert trailer[48:56] == packs.END
    return {
        "version": int.from_bytes(data[8:10], "big"),
        "flags": flags,
        "entries": entries,
        "index_offset": index_offset,
        "index_length": index_len,
        "index_cbor": data[index_offset : index_offset + index_len].hex(),
        "count": int.from_bytes(trailer[12:16], "big"),
        "checksum": trailer[16:48].hex(),
    }


def op_batch_decode(inp: dict[str, Any]) -> dict[str, Any]:
    batch = batch_from_cbor(encoding.decode(_b(inp["batch_cbor"]), "batch"))
    return {"batch_id": batch.id.hex()}


def op_batch_verify_signature(inp: dict[str, Any]) -> dict[str, Any]:
    batch = batch_from_cbor(encoding.decode(_b(inp["batch_cbor"]), "batch"))
    return {"batch_id": batch.id.hex(), "signature_verifies": verify_batch_signature(batch, _b(inp["writer_public"]))}


def op_cbor_decode(inp: dict[str, Any]) -> dict[str, Any]:
    data = _b(inp["cbor"])
    return {"reencodes_identically": encoding.encode(encoding.decode(data)) == data}


def op_descriptor_decode(inp: dict[str, Any]) -> dict[str, Any]:
    data = _b(inp["descriptor"])
    d = descriptor.decode(data)
    return {"version": d.version, "vault_id": d.vault_id.hex(), "suite": d.suite,
            "check": encoding.decode(data)[4].hex()}


def _read_vault(path: Path, unlock: Unlock) -> dict[str, Any]:
    with Vault.open(str(path), unlock, register=False) as v:
        assert v.read_only
        timeline = [{
            "id": r.id.hex(), "kind": r.kind_name, "type": r.type, "compartment": r.compartment,
            "class": r.class_label, "effective_class": r.effective_label, "writer_id": r.writer_id.hex(),
            "ts": r.ts, "key": r.key, "value": _jsonable(r.value), "text": r.text,
            "conversation": r.conversation, "role": r.role, "pred": [p.hex() for p in r.pred],
        } for r in v.timeline()]
        facts = [{
            "key": f.key, "compartment": f.compartment, "status": f.status,
            "value": _jsonable(f.current.value) if f.current else None,
            "current": f.current.id.hex() if f.current else None,
            "history": [r.id.hex() for r in f.history],
            "candidates": [r.id.hex() for r in f.candidates],
            "discarded": [r.id.hex() for r in f.discarded],
        } for f in v.facts()]
        return {
            "vault_id": v.vault_id.hex(),
            "compartments": sorted(v.compartments),
            "principals": sorted(({"writer_id": p.writer_id.hex(), "kind": p.kind.label}
                                  for p in v.session.roster.principals.values()), key=lambda p: p["writer_id"]),
            "timeline": timeline,
            "facts": facts,
            "problems": sorted([p.kind, p.file] for p in v.problems()),
        }


def op_open_vault(inp: dict[str, Any]) -> dict[str, Any]:
    path, _ = _artefact(inp["artefact"])
    results = []
    if "passphrase" in inp:
        results.append(_read_vault(path, Unlock.passphrase(inp["passphrase"])))
    if "recovery_phrase" in inp:
        results.append(_read_vault(path, Unlock.recovery(inp["recovery_phrase"])))
    assert results and all(r == results[0] for r in results), "the unlock methods disagree"
    _artefact(inp["artefact"])  # opening read-only changed nothing
    return results[0]


def _views(inp: dict[str, Any]) -> list[BatchView]:
    """The vector's batches as a reader hands them to the roster: structure checked, every record
    checked against its id, control records decoded."""
    views = []
    for item in inp["batches"]:
        batch = batch_from_cbor(encoding.decode(_b(item["batch_cbor"]), "batch"))
        assert batch.id.hex() == item["batch_id"]
        assert batch.header.compartment_id.hex() == inp["compartments"][item["compartment"]]
        records = [decode_record(raw, expected_id=rid) for rid, raw in zip(batch.header.records, batch.records)]
        views.append(BatchView(batch, f"batch {batch.id.hex()}", bytes(16), [r if r.is_control else None for r in records]))
    return views


def _roster(vault_id: bytes, views: list[BatchView]) -> dict[str, Any]:
    from tests.conformance.control_vectors import roster_summary

    return roster_summary(vault_id, views)


def op_compute_roster(inp: dict[str, Any]) -> dict[str, Any]:
    """The roster of these batches, which must not depend on the order they arrive in: computed
    for the listed order, the reverse and a few shuffles."""
    views = _views(inp)
    results = []
    for seed in range(4):
        order = list(views) if seed == 0 else list(reversed(views)) if seed == 1 else random.Random(seed).sample(views, len(views))
        for v in views:  # a fresh reader: nothing judged yet
            v.signed = v.vouched = v.sig_ok = False
        results.append(_roster(_b(inp["vault_id"]), order))
    assert all(r == results[0] for r in results), "the roster depends on the order of the batches"
    return results[0]


def _check_registration_shape(inp: dict[str, Any], records: list[bytes], batches: list[Any]) -> None:
    """The normative shape (spec §12.4, §17.6), checked on the decoded bytes without Camillo's writer."""
    unlocking = Credential.from_seeds(CredentialKind.PASSPHRASE, _b(inp["unlocking"]["xwing_seed"]),
                                      _b(inp["unlocking"]["ed25519_seed"]))
    device = Credential.from_seeds(CredentialKind.DEVICE, _b(inp["device"]["xwing_seed"]), _b(inp["device"]["ed25519_seed"]))
    cert = encoding.decode(records[0])
    assert cert[1] == 17 and cert[2] == unlocking.writer_id and cert[14] == inp["ts"]
    assert set(cert[12]) == {0, 1, 2}, "key 3 is absent: the new key's own signature is its proof of possession"
    assert cert[12][0] == {0: 1, 1: 1, 2: device.signer.public, 3: device.recipient.public,
                           4: inp["device"]["name"], 5: inp["device"]["platform"]}
    replaced = None if inp["replaced"] is None else _b(inp["replaced"])
    assert cert[12][1] == replaced and cert[12][2] == inp["unlocking"]["kind"]
    assert [sig[0] for sig in cert[13]] == [unlocking.writer_id, device.writer_id]
    if replaced is None:
        assert len(records) == 1
    else:
        revoke = encoding.decode(records[1])
        assert len(records) == 2 and revoke[1] == 20 and revoke[2] == device.writer_id
        assert [sig[0] for sig in revoke[13]] == [unlocking.writer_id, device.writer_id]
        body = revoke[12]
        assert body[0] == replaced and body[4] == "its installation could no longer read its key; replaced"
        seen: dict[bytes, dict[bytes, int]] = {}
        for chain in inp["chains"]:  # the highest accepted seq of every chain, gaps below it included
            seen.setdefault(_b(chain["compartment"]), {})[_b(chain["writer"])] = max(int(s) for s in chain["batches"])
        assert body[2] == seen
        assert body[3] == {_b(c["compartment"]): _b(c["batches"][str(max(int(s) for s in c["batches"]))])
                           for c in inp["chains"] if _b(c["writer"]) == replaced}
    order = [inp["control"], *(cid for cid, _ in inp["data_compartments"])]
    assert [b.header.compartment_id.hex() for b in batches] == order, "control first, then genesis order"
    for b in batches:
        h = b.header
        cid = h.compartment_id.hex()
        assert (h.writer_id, h.seq, h.prev, h.ts) == (device.writer_id, 1, None, inp["ts"])
        assert list(h.records) == [ids.record_id(r) for r in records] and list(b.records) == records
        assert list(h.deps) == sorted(_b(x) for x in inp["dag_heads"].get(cid, []))[-64:]
        expected_frontier = {_b(c["writer"]): max(int(s) for s in c["batches"]) for c in inp["chains"]
                             if c["compartment"] == cid}
        assert h.frontier == {**expected_frontier, device.writer_id: 0}
        expected_heads: dict[bytes, dict[bytes, int]] = {}
        if cid == inp["control"]:  # key 11: what the writer had seen of every data compartment
            data = {_b(x) for x, _ in inp["data_compartments"]}
            for c in inp["chains"]:
                if _b(c["compartment"]) in data:
                    expected_heads.setdefault(_b(c["compartment"]), {})[_b(c["writer"])] = max(int(s) for s in c["batches"])
        assert h.heads == expected_heads
        assert verify_batch_signature(b, device.signer.public)


def op_write_registration(inp: dict[str, Any]) -> dict[str, Any]:
    """What Camillo's writer writes from these inputs (the records, then one batch per compartment),
    whose shape is checked against the spec's rules independently of that code."""
    unlocking = Credential.from_seeds(CredentialKind(_KIND_BY_LABEL[inp["unlocking"]["kind"]]),
                                      _b(inp["unlocking"]["xwing_seed"]), _b(inp["unlocking"]["ed25519_seed"]))
    device = Credential.from_seeds(CredentialKind.DEVICE, _b(inp["device"]["xwing_seed"]), _b(inp["device"]["ed25519_seed"]))
    chains = {(_b(c["writer"]), _b(c["compartment"])): {int(s): _b(b) for s, b in c["batches"].items()}
              for c in inp["chains"]}
    dag_heads = {_b(c): [_b(x) for x in hs] for c, hs in inp["dag_heads"].items()}
    records = registration_records(unlocking, device, inp["device"]["name"], inp["device"]["platform"],
                                   replaced=None if inp["replaced"] is None else _b(inp["replaced"]), chains=chains,
                                   ts=inp["ts"], salts=[_b(x) for x in inp["salts"]])
    data = [_b(cid) for cid, _ in inp["data_compartments"]]
    batches = []
    for cid in [_b(inp["control"]), *data]:
        deps, frontier, heads = causal_fields(chains, dag_heads.get(cid, []), cid,
                                              data if cid == _b(inp["control"]) else None)
        frontier[device.writer_id] = 0
        header = BatchHeader(_b(inp["vault_id"]), cid, device.writer_id, 1, None, deps, frontier,
                             tuple(ids.record_id(r) for r in records), inp["ts"], heads=heads)
        batches.append(make_batch(header, records, device.signer))
    _check_registration_shape(inp, records, batches)
    return {"records": [{"record_id": ids.record_id(r).hex(), "record_cbor": r.hex()} for r in records],
            "batches": [{"compartment": b.header.compartment_id.hex(), "batch_id": b.id.hex(),
                         "batch_cbor": encoding.encode(b.to_cbor()).hex()} for b in batches]}


_KIND_BY_LABEL = {"passphrase": 2, "recovery phrase": 3}


OPERATIONS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "derive-passphrase": op_derive_passphrase,
    "derive-recovery-phrase": op_derive_recovery_phrase,
    "derive-owner-kem": op_derive_owner_kem,
    "derive-master-secrets": op_derive_master_secrets,
    "derive-epoch-key": op_derive_epoch_key,
    "derive-body-keys": op_derive_body_keys,
    "derive-ids": op_derive_ids,
    "padme": op_padme,
    "slot-read-header": op_slot_read_header,
    "slot-unwrap": op_slot_unwrap,
    "open-slot": op_open_slot,
    "open-envelope": op_open_envelope,
    "open-segment": op_open_segment,
    "hash-matches-name": op_hash_matches_name,
    "open-attachment-chunk": op_open_attachment_chunk,
    "hpke-unwrap": op_hpke_unwrap,
    "read-pack": op_read_pack,
    "batch-decode": op_batch_decode,
    "batch-verify-signature": op_batch_verify_signature,
    "cbor-decode": op_cbor_decode,
    "descriptor-decode": op_descriptor_decode,
    "open-vault": op_open_vault,
    "compute-roster": op_compute_roster,
    "write-registration": op_write_registration,
    **OWNER_OPERATIONS,  # recovery recipients and the owner's control records (owner_operations.py)
}

# Rejections that are an outcome rather than an exception: (operation, check on its result).
OUTCOMES: dict[str, tuple[str, Callable[[dict[str, Any]], bool]]] = {
    "signature does not verify": ("batch-verify-signature", lambda r: r["signature_verifies"] is False),
    "name does not match content hash": ("hash-matches-name", lambda r: r["matches"] is False),
}


def _error_class(name: str) -> type[BaseException]:
    if name == "CryptoFailure":
        return CryptoFailure
    cls = getattr(errors, name)
    assert issubclass(cls, errors.VaultError)
    return cls


class _NoHpke:
    """Stands in for the HPKE suite: a length check must refuse a wrap before HPKE runs."""

    def decrypt(self, *args: Any, **kwargs: Any) -> bytes:
        raise AssertionError("HPKE ran on a wrap of the wrong length")


# ---------------------------------------------------------------------------------------------
# Tests


def test_vectors_exist():
    assert len(VECTOR_FILES) >= 30


@pytest.mark.parametrize("path", VECTOR_FILES, ids=[p.stem for p in VECTOR_FILES])
def test_vector(path: Path, monkeypatch):
    v = _load(path)
    op = OPERATIONS[v["operation"]]
    inp = v["inputs"]
    if v["expect"] == "success":
        assert op(inp) == v["expected"]
        return
    assert v["expect"] == "reject"
    error = v["error"]
    if isinstance(error, str) and error in OUTCOMES:
        operation, rejected = OUTCOMES[error]
        assert v["operation"] == operation
        assert rejected(op(inp))
        return
    if v["operation"] == "hpke-unwrap":
        monkeypatch.setattr(primitives, "_HPKE_SUITE", _NoHpke())
    names = [error] if isinstance(error, str) else error
    with pytest.raises(tuple(_error_class(n) for n in names)) as caught:
        op(inp)
    detail = v.get("camillo_detail")
    if detail:
        assert detail in str(caught.value), f"{v['name']} failed for another reason: {caught.value}"


def test_every_vector_is_well_formed():
    names = set()
    for path in VECTOR_FILES:
        v = _load(path)
        assert v["name"] == path.stem
        assert v["operation"] in OPERATIONS
        d = v["description"]
        assert isinstance(d, str) and d.endswith(".") and "\n" not in d and len(d) > 30, path.name
        assert isinstance(v["test_kdf"], bool)
        if v["expect"] == "success":
            assert "error" not in v and isinstance(v["expected"], dict)
        else:
            assert v["expect"] == "reject"
            assert "expected" not in v
            errs = [v["error"]] if isinstance(v["error"], str) else v["error"]
            for e in errs:
                assert e in OUTCOMES or _error_class(e)
        names.add(v["name"])
    assert len(names) == len(VECTOR_FILES)


def _artefacts(obj: Any) -> list[str]:
    if isinstance(obj, dict):
        if set(obj) == {"file", "sha256", "length"}:
            return [obj["file"]]
        return [f for x in obj.values() for f in _artefacts(x)]
    if isinstance(obj, list):
        return [f for x in obj for f in _artefacts(x)]
    return []


def test_every_file_is_referenced_by_a_vector():
    referenced = {f for p in VECTOR_FILES for f in _artefacts(_load(p))}
    present = {p.name for p in VECTORS.iterdir() if p.is_file()}
    vectors = {p.name for p in VECTOR_FILES}
    assert referenced <= present, f"missing artefacts: {sorted(referenced - present)}"
    assert present - vectors - referenced == {"README.md"}, f"unreferenced files: {sorted(present - vectors - referenced - {'README.md'})}"
