"""The operations of the owner-control conformance vectors (``generate_owner_vectors.py``): a recovery
recipient's proof of possession, a slot opened with an X-Wing seed (type 4), a Camillo recipient key
file, and a control record decoded with its inner signatures checked.  ``test_vmem_vectors`` runs
them with the others; like it, this module re-derives what it checks from the JSON and the artefacts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from camillo import encoding, ids, sealed, slots
from camillo.credentials import read_recipient_key, read_recipient_public
from camillo.primitives import RecipientKey, SigningKey, labelled, sha256, verify_signature
from camillo.records import decode_record, verify_inner_signatures

VECTORS = Path(__file__).resolve().parent / "vectors"


def _artefact(ref: dict[str, Any]) -> tuple[Path, bytes]:
    path = VECTORS / ref["file"]
    data = path.read_bytes()
    assert len(data) == ref["length"] and sha256(data).hex() == ref["sha256"], f"{ref['file']} was changed"
    return path, data


def op_derive_recipient_pop(inp: dict[str, Any]) -> dict[str, Any]:
    xwing = RecipientKey.from_seed(bytes.fromhex(inp["xwing_seed"]))
    signer = SigningKey.from_seed(bytes.fromhex(inp["ed25519_seed"]))
    message = labelled("vmem/v1/recipient-pop", signer.public, xwing.public)
    return {"writer_id": ids.writer_id(signer.alg, signer.public).hex(), "recipient_id": ids.recipient_id(xwing.public).hex(),
            "xwing_public": {"sha256": hashlib.sha256(xwing.public).hexdigest(), "first32": xwing.public[:32].hex(),
                             "length": len(xwing.public)},
            "ed25519_public": signer.public.hex(), "message": message.hex(), "signature": signer.sign(message).hex()}


def op_open_slot_seeds(inp: dict[str, Any]) -> dict[str, Any]:
    _, data = _artefact(inp["artefact"])
    vault_id = bytes.fromhex(inp["vault_id"])
    header = slots.read_header(data, inp["name"])
    vms = slots.unwrap_vms(header, vault_id, RecipientKey.from_seed(bytes.fromhex(inp["xwing_seed"])))
    raw = sealed.open_sealed(vms, slots.LABEL, vault_id + header.slot_id + header.generation.to_bytes(4, "big"),
                             data[: slots.BODY_END], slots.HEADER_LEN)
    st, m = slots.read_statement(header, vault_id, vms), encoding.decode(raw)
    signer = bytes.fromhex(inp["signer_public"])
    return {"type": int(header.type), "generation": header.generation, "kdf_bytes_zero": not any(data[30:72]),
            "vms": vms.hex(), "statement_cbor": raw.hex(), "recipient_id": m[4].hex(), "label": m[7],
            "signatures_verify": all(ids.writer_id(alg, signer) == w and verify_signature(alg, signer, st.message, s)
                                     for w, alg, s in st.signatures) and m[6] is None and m[2] == 4}


def op_open_recipient_key_file(inp: dict[str, Any]) -> dict[str, Any]:
    key_path, _ = _artefact(inp["artefact"])
    pub_path, _ = _artefact(inp["public"])
    cred = read_recipient_key(str(key_path), inp["passphrase"])
    xwing, sig_pk, pop, name = read_recipient_public(str(pub_path))  # checks the proof of possession
    return {"writer_id": cred.writer_id.hex(), "recipient_id": cred.recipient_id.hex(), "name": name,
            "public_matches": (xwing, sig_pk) == (cred.recipient.public, cred.signer.public),
            "pop_verifies": verify_signature(1, sig_pk, labelled("vmem/v1/recipient-pop", sig_pk, xwing), pop)}


def op_control_record_decode(inp: dict[str, Any]) -> dict[str, Any]:
    r = decode_record(bytes.fromhex(inp["record"]))
    signer = bytes.fromhex(inp["signer_public"])
    good, _unknown = verify_inner_signatures(r, lambda w: signer if w == ids.writer_id(1, signer) else None)

    def shown(v: Any) -> Any:
        return v.hex() if isinstance(v, bytes) else [shown(x) for x in v] if isinstance(v, list) else v

    return {"record_id": r.id.hex(), "kind": r.kind, "author": r.author.hex(), "ts": r.ts,
            "body": {str(k): shown(v) for k, v in sorted(r.body.items())},
            "signatures_verify": good == [ids.writer_id(1, signer)]}


OPERATIONS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "derive-recipient-pop": op_derive_recipient_pop,
    "open-slot-seeds": op_open_slot_seeds,
    "open-recipient-key-file": op_open_recipient_key_file,
    "control-record-decode": op_control_record_decode,
}
