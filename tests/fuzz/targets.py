"""The fuzz targets: every decoder and parser of the core, wired to "bytes in" with fixed test keys.

Two layers per encrypted container:

* an **outer** target takes the file's bytes as a host or a hostile sender would give them (an AEAD,
  a checksum or a signature usually stops a mutation early, which is itself part of the contract);
* an **inner** target takes the *plaintext* a key holder would seal (a segment payload, an envelope
  payload, a slot statement, an enrollment request or response, a cache database, a grant file's
  CBOR map), seals it with the right keys, and hands the sealed bytes to the same product code, so
  mutations reach the parsers behind the cryptography.  That is the position of an insider: an
  append grant holds an epoch public key, a QR-code shoulder-surfer holds the enrollment secret.

Keys and ids are fixed, derived from labels (:class:`Fixed`), so seed files written by
``make_corpus.py`` open in every run.  The vault-level targets (enrollment, grant files opened
against a vault, the cache of a real vault, a slot inside a vault folder) need a real vault:
:class:`World` builds one in a directory it is given.

Used by the tests in this package on pytest's main thread only.
"""

from __future__ import annotations

import base64
import contextlib
import io
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import cbor2
import pytest
from camillo import descriptor, encoding, envelopes, ids, keys, packs, sealed, segments, slots, transport
from camillo.cache import STATE_HMAC, Cache
from camillo.credentials import Credential, CredentialKind
from camillo.devicestate import DeviceState, DeviceStateStore
from camillo.errors import VaultError
from camillo.keys import local_key
from camillo.localstate import VaultLocal, seal_local
from camillo.primitives import (
    ARGON2_TEST,
    CryptoFailure,
    KdfParams,
    SigningKey,
    hpke_wrap,
    labelled,
    random_bytes,
    sha256,
)
from camillo.records import BatchHeader, Kind, batch_from_cbor, decode_record, encode_record, make_batch
from camillo.session.grantfile import read_grant_file
from sqlcipher3 import dbapi2 as sqlcipher

from .fuzzlib import Ignored, Skip, Target

PASSPHRASE = "correct horse battery staple"


def _d(label: str, n: int = 32) -> bytes:
    return sha256(f"camillo-fuzz/{label}".encode())[:n]


class Fixed:
    """Every key and id the non-vault targets use: derived from labels, the same in every run."""

    VAULT = _d("vault")
    CID = _d("compartment", 16)
    EID = _d("epoch", 16)
    PREV_EID = _d("previous epoch", 16)
    EPOCH_SECRET = _d("epoch secret")
    VMS = _d("vault master secret")
    GENERATION = 1
    SLOT_IDS: ClassVar[dict[slots.SlotType, bytes]] = {t: _d(f"slot {t.name}", 16) for t in slots.SlotType}
    OWNER = SigningKey.from_seed(_d("owner signer"))
    WRITER = SigningKey.from_seed(_d("writer signer"))
    DEVICE = Credential.from_seeds(CredentialKind.DEVICE, _d("device xwing"), _d("device ed25519"))
    PASSPHRASE_CRED: Credential  # set below: a passphrase credential carries its KDF parameters
    RECOVERY = Credential.from_seeds(CredentialKind.RECOVERY, _d("recovery xwing"), _d("recovery ed25519"))
    GRANTEE = Credential.from_seeds(CredentialKind.GRANT, _d("grantee xwing"), _d("grantee ed25519"))
    KDF = KdfParams(*ARGON2_TEST, _d("kdf salt", 16))
    ENROLL_SECRET = _d("enrollment secret")
    LOCAL_SECRET = _d("local seed")
    T0 = 1_700_000_000

    @staticmethod
    def owner_id() -> bytes:
        return ids.writer_id(Fixed.OWNER.alg, Fixed.OWNER.public)

    @staticmethod
    def writer_id() -> bytes:
        return ids.writer_id(Fixed.WRITER.alg, Fixed.WRITER.public)

    @staticmethod
    def epoch_key():
        return keys.epoch_key(Fixed.EPOCH_SECRET, Fixed.VAULT, Fixed.CID, Fixed.EID)


_pass = Credential.from_seeds(CredentialKind.PASSPHRASE, _d("pass xwing"), _d("pass ed25519"))
Fixed.PASSPHRASE_CRED = Credential(CredentialKind.PASSPHRASE, _pass.recipient, _pass.signer, Fixed.KDF)
SLOT_CREDENTIALS = {
    slots.SlotType.DEVICE: Fixed.DEVICE,
    slots.SlotType.PASSPHRASE: Fixed.PASSPHRASE_CRED,
    slots.SlotType.RECOVERY: Fixed.RECOVERY,
    slots.SlotType.RECIPIENT: Fixed.GRANTEE,
}


# ---------------------------------------------------------------------------------------------
# Real objects (the seeds): built with the product's own writers


def real_records() -> list[bytes]:
    wid = Fixed.writer_id()
    owner = Fixed.owner_id()
    note = encode_record(Kind.NOTE, wid, value={"conversation": "c1", "role": "user", "text": "I moved to Porto"},
                         authority=2, type="message", ts=Fixed.T0, meta={"import": "chatgpt:1", "source": "x.json"})
    put = encode_record(Kind.PUT, wid, key="user/home_city", value="Porto", authority=1, type="fact", ts=Fixed.T0,
                        sources=[ids.record_id(note)])
    dele = encode_record(Kind.DEL, wid, key="user/home_city", pred=[ids.record_id(put)], ts=Fixed.T0)
    confirm = encode_record(Kind.CONFIRM, owner, target=ids.record_id(put), signers=[Fixed.OWNER], ts=Fixed.T0)
    epoch = encode_record(Kind.EPOCH, owner, body={0: Fixed.CID, 1: Fixed.EID, 2: Fixed.PREV_EID, 3: "scheduled",
                                                   4: Fixed.epoch_key().public, 5: bytes(32), 6: 2},
                          signers=[Fixed.OWNER], ts=Fixed.T0)
    grant = encode_record(Kind.GRANT, owner, body={0: _d("grant id", 16), 1: "coder", 2: [[Fixed.CID, 2]],
                                                   3: Fixed.GRANTEE.signer.public, 4: Fixed.GRANTEE.recipient.public,
                                                   5: 1, 6: None, 7: Fixed.T0}, signers=[Fixed.OWNER], ts=Fixed.T0)
    unknown = encode_record(200, wid, value=[1, b"x", {"k": "v"}], ts=Fixed.T0, extra={99: "future", 100: [1, 2]})
    return [note, put, dele, confirm, epoch, grant, unknown]


def real_batches() -> list[Any]:
    recs = real_records()
    wid = Fixed.writer_id()
    h1 = BatchHeader(Fixed.VAULT, Fixed.CID, wid, 1, None, (), {wid: 0}, tuple(ids.record_id(r) for r in recs[:3]),
                     Fixed.T0)
    b1 = make_batch(h1, recs[:3], Fixed.WRITER)
    other = _d("other writer")
    h2 = BatchHeader(Fixed.VAULT, Fixed.CID, wid, 2, b1.id, (b1.id,), {wid: 1, other: 7},
                     tuple(ids.record_id(r) for r in recs[3:]), Fixed.T0 + 1)
    b2 = make_batch(h2, recs[3:], Fixed.WRITER)
    return [b1, b2]


def real_batch_items() -> list[bytes]:
    return [encoding.encode(b.to_cbor()) for b in real_batches()]


def real_segment_payload() -> bytes:
    return segments.encode_payload(real_batches())


def real_segment() -> bytes:
    return segments.seal_segment(Fixed.VAULT, Fixed.CID, Fixed.EID, Fixed.epoch_key().public, real_segment_payload())


def real_slot(slot_type: slots.SlotType) -> bytes:
    cred = SLOT_CREDENTIALS[slot_type]
    return slots.build_slot(
        vault_id=Fixed.VAULT, slot_id=Fixed.SLOT_IDS[slot_type], slot_type=slot_type, generation=Fixed.GENERATION,
        vms=Fixed.VMS, recipient_public=cred.recipient.public, recipient_id=cred.recipient_id,
        kdf=Fixed.KDF if slot_type == slots.SlotType.PASSPHRASE else None, label=slot_type.name.lower(),
        signer=Fixed.OWNER, signer_id=Fixed.owner_id(),
    )


def slot_statement_plaintext(slot: bytes) -> bytes:
    header = slots.read_header(slot, slots.file_name(slot[10:26]))
    return sealed.open_sealed(Fixed.VMS, slots.LABEL, slots._context(Fixed.VAULT, header.slot_id, header.generation),
                              slot[: slots.BODY_END], slots.HEADER_LEN)


def real_envelope(kind: envelopes.EnvelopeKind) -> bytes:
    key = Fixed.EPOCH_SECRET if kind == envelopes.EnvelopeKind.EPOCH_SECRET else Fixed.epoch_key().public
    return envelopes.build_envelope(
        vault_id=Fixed.VAULT, kind=kind, compartment_id=Fixed.CID, epoch_id=Fixed.EID,
        recipient_public=Fixed.GRANTEE.recipient.public, recipient_id=Fixed.GRANTEE.recipient_id, key=key,
        signer=Fixed.OWNER, signer_id=Fixed.owner_id(),
        prev_epoch=Fixed.PREV_EID if kind == envelopes.EnvelopeKind.EPOCH_PUBLIC else None,
    )


def envelope_payload(kind: envelopes.EnvelopeKind) -> bytes:
    from camillo.records import signing_message

    key = Fixed.EPOCH_SECRET if kind == envelopes.EnvelopeKind.EPOCH_SECRET else Fixed.epoch_key().public
    p: dict[int, Any] = {0: int(kind), 1: Fixed.VAULT, 2: Fixed.CID, 3: Fixed.EID, 4: Fixed.GRANTEE.recipient_id,
                         5: key, 6: Fixed.PREV_EID if kind == envelopes.EnvelopeKind.EPOCH_PUBLIC else None}
    p[13] = [[Fixed.owner_id(), 1, Fixed.OWNER.sign(signing_message(envelopes.SIG_LABEL, p, 13))]]
    return encoding.encode(p)


def pack_entries() -> list[tuple[str, bytes]]:
    """Deterministic stand-ins for the files of a small vault (a pack never opens its entries)."""
    seg = sha256(b"segment").ljust(32) * 128
    env = sha256(b"envelope") * 128
    return [
        ("VMEM", descriptor.Descriptor(Fixed.VAULT).encode()),
        (slots.file_name(Fixed.SLOT_IDS[slots.SlotType.DEVICE]), sha256(b"slot") * 128),
        (envelopes.file_name(env), env),
        (segments_name(seg), seg),
    ]


def segments_name(data: bytes) -> str:
    h = sha256(data).hex()
    return f"segments/{h[:2]}/{h}.seg"


def real_pack(complete: bool = True) -> bytes:
    buf = io.BytesIO()
    packs.write_pack(pack_entries(), buf, complete_vault=complete)
    return buf.getvalue()


def pack_parts(data: bytes) -> tuple[bytes, bytes, bytes]:
    """(header + entries, index bytes, trailer) of a well-formed pack."""
    trailer = data[-packs.TRAILER_LEN:]
    offset = int.from_bytes(trailer[:8], "big")
    return data[:offset], data[offset:-packs.TRAILER_LEN], trailer


def assemble_pack(body: bytes, index: bytes, count: int | None = None, fields: bytes | None = None) -> bytes:
    """A pack with a *correct* checksum around any index (or any trailer fields)."""
    if count is None:
        try:
            obj = cbor2.loads(index)
            count = len(obj) if isinstance(obj, list) else 0
        except Exception:
            count = 0
    before = body + index
    head = fields if fields is not None else (len(body).to_bytes(8, "big") + len(index).to_bytes(4, "big")
                                               + min(count, 2**32 - 1).to_bytes(4, "big"))
    return before + head[:16].ljust(16, b"\x00") + sha256(before) + packs.END


def grant_map(*, vault_id: bytes = Fixed.VAULT, grant_id: bytes = _d("grant id", 16), level: int = 2) -> dict:
    return {0: "vmem-grant", 1: 1, 2: vault_id, 3: grant_id, 4: "coder", 5: [[Fixed.CID, level, "work"]],
            6: Fixed.GRANTEE.recipient.seed, 7: Fixed.GRANTEE.signer.seed, 8: 1, 9: None,
            10: [[Fixed.owner_id(), Fixed.OWNER.public]]}


def armor_grant(cbor_bytes: bytes) -> bytes:
    body = base64.b64encode(cbor_bytes).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return "\n".join(["# A Camillo grant (fuzz seed)", "-----BEGIN VMEM GRANT-----", *lines,
                      "-----END VMEM GRANT-----", ""]).encode()


def enroll_request_plaintext(vault_id: bytes = Fixed.VAULT, device: Credential = Fixed.DEVICE) -> bytes:
    from camillo.control import pop_message

    return encoding.encode({0: device.recipient.public, 1: device.signer.public, 2: "new laptop", 3: "Linux 6",
                            4: _d("request nonce", 16),
                            5: device.signer.sign(pop_message(vault_id, device.signer.public, device.recipient.public))})


def enroll_response_plaintext() -> bytes:
    slot = real_slot_cached(slots.SlotType.DEVICE)
    return encoding.encode({0: Fixed.SLOT_IDS[slots.SlotType.DEVICE], 1: sha256(slot), 2: real_records()[4],
                            3: Fixed.VAULT, 4: {Fixed.CID: {Fixed.writer_id(): [2, _d("batch")]}}, 5: 1, 6: "desk"})


def device_state_map() -> bytes:
    ds = DeviceState(counters={Fixed.CID: (3, _d("b3"))}, remembered={Fixed.CID: {Fixed.writer_id(): (3, _d("b3"))}},
                     epochs={Fixed.CID: Fixed.EID}, generation=1, first_missing={_d("gap"): Fixed.T0},
                     manifests=[_d("manifest")], extra={"note": "x"})
    return encoding.encode(ds.to_map())


def installation_map() -> bytes:
    return encoding.encode({"created": Fixed.T0, "keystore": "local", "writer": Fixed.writer_id()})


# ---------------------------------------------------------------------------------------------
# The plain (vault-free) targets


def _decode_batch_records(batch) -> None:
    for rid, raw in zip(batch.header.records, batch.records):
        if raw is not None:
            decode_record(raw, expected_id=rid)


def run_descriptor(data: bytes) -> Any:
    return descriptor.decode(data)


def run_record(data: bytes) -> Any:
    return decode_record(data)


def run_batch(data: bytes) -> Any:
    batch = batch_from_cbor(encoding.decode(data, "batch"))
    _decode_batch_records(batch)
    return batch


def named_by_caller(exc: VaultError, name: str) -> VaultError:
    """Mark an error whose file the caller names: the vault files batch and record errors under
    the segment as ``Problem(file=segment)`` (checked by test_vault_hostile)."""
    exc.named_by_caller = name  # type: ignore[attr-defined]
    return exc


def run_segment(data: bytes) -> Any:
    name = segments_name(data)
    segments.read_header(data, name)
    payload = segments.open_segment(data, name, Fixed.VAULT, Fixed.epoch_key())
    try:
        for batch in segments.decode_payload(payload, name):
            _decode_batch_records(batch)
    except VaultError as exc:
        raise named_by_caller(exc, name) from None


def run_segment_payload(plaintext: bytes) -> Any:
    try:
        data = segments.seal_segment(Fixed.VAULT, Fixed.CID, Fixed.EID, Fixed.epoch_key().public, plaintext)
    except VaultError:
        return Skip("too large to seal (a writer refuses it)")
    return run_segment(data)


def run_slot(data: bytes) -> Any:
    header = slots.read_header(data, slots.file_name(Fixed.SLOT_IDS[slots.SlotType.DEVICE])
                               if len(data) < 26 else slots.file_name(data[10:26]))
    if header.kdf is not None:
        header.kdf.check_reader_bounds()
    try:
        vms = slots.unwrap_vms(header, Fixed.VAULT, SLOT_CREDENTIALS[header.type].recipient)
    except CryptoFailure:
        return Ignored("not for this key (the reader tries the next slot)")
    return slots.read_statement(header, Fixed.VAULT, vms)


def slot_names(data: bytes) -> list[str]:
    names = [slots.file_name(Fixed.SLOT_IDS[slots.SlotType.DEVICE])]
    if len(data) >= 26:
        names.append(slots.file_name(data[10:26]))
    return names


def seal_slot_statement(plaintext: bytes, slot_type: slots.SlotType = slots.SlotType.PASSPHRASE) -> bytes | None:
    """A slot whose cleartext is real and whose sealed statement is ``plaintext``."""
    base = real_slot_cached(slot_type)
    header = base[: slots.HEADER_LEN]
    sid = base[10:26]
    try:
        body = sealed.seal(Fixed.VMS, slots.LABEL, slots._context(Fixed.VAULT, sid, Fixed.GENERATION), header,
                           plaintext, slots.BODY_END)
    except ValueError:
        return None
    return body + sha256(body)


def _statement_slot_type(plaintext: bytes) -> slots.SlotType:
    """Seal a statement into the slot type it names (so a real statement opens), else a passphrase slot."""
    try:
        return slots.SlotType(cbor2.loads(plaintext).get(slots.S.TYPE))
    except Exception:
        return slots.SlotType.PASSPHRASE


def run_slot_statement(plaintext: bytes) -> Any:
    data = seal_slot_statement(plaintext, _statement_slot_type(plaintext))
    if data is None:
        return Skip("too large to seal")
    return run_slot(data)


_SLOT_CACHE: dict[slots.SlotType, bytes] = {}


def real_slot_cached(slot_type: slots.SlotType) -> bytes:
    """The checked-in seed slot of this type when there is one (its HPKE wrap is fixed there), else
    a fresh one for this process."""
    if slot_type not in _SLOT_CACHE:
        from .fuzzlib import SEEDS

        seed = SEEDS / "slot" / f"{slot_type.name.lower()}.slot"
        _SLOT_CACHE[slot_type] = seed.read_bytes() if seed.exists() else real_slot(slot_type)
    return _SLOT_CACHE[slot_type]


def run_envelope(data: bytes) -> Any:
    name = envelopes.file_name(data)
    envelopes.check_shape(data, name)
    if not envelopes.is_for(data, Fixed.GRANTEE.recipient_id):
        return Ignored("not for this recipient (skipped by its tag)")
    try:
        return envelopes.open_envelope(data, name, Fixed.VAULT, Fixed.GRANTEE.recipient)
    except CryptoFailure:
        return Ignored("not for this key (ignored, as spec Appendix B says)")


def seal_envelope(plaintext: bytes) -> bytes | None:
    envelope_key = random_bytes(32)
    wrap = hpke_wrap(Fixed.GRANTEE.recipient.public, envelope_key, labelled("vmem/v1/wrap/envelope", Fixed.VAULT))
    header = envelopes.MAGIC + envelopes.tag_for(wrap[:1120], Fixed.GRANTEE.recipient_id) + wrap
    try:
        return sealed.seal(envelope_key, envelopes.LABEL, Fixed.VAULT, header, plaintext, envelopes.SIZE)
    except ValueError:
        return None


def run_envelope_payload(plaintext: bytes) -> Any:
    data = seal_envelope(plaintext)
    if data is None:
        return Skip("too large to seal")
    return run_envelope(data)


class PackFile:
    """One scratch file for pack inputs (the reader needs a path)."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = str(directory / "fuzz.vmem")
        self.unpack_dir = directory / "unpacked"

    def run(self, data: bytes) -> Any:
        with open(self.path, "wb") as fh:
            fh.write(data)
        reader = packs.PackReader(self.path)
        try:
            for e in reader.entries:
                reader.read(e.name)
        finally:
            reader.close()

    def run_unpack(self, data: bytes) -> Any:
        with open(self.path, "wb") as fh:
            fh.write(data)
        shutil.rmtree(self.unpack_dir, ignore_errors=True)
        transport.unpack_vault(self.path, str(self.unpack_dir))


def _pack_index_runner(pf: PackFile):
    body, _, _ = pack_parts(real_pack())

    def run(index: bytes) -> Any:
        return pf.run(assemble_pack(body, index))

    return run


def _pack_trailer_runner(pf: PackFile):
    body, index, _ = pack_parts(real_pack())

    def run(fields: bytes) -> Any:
        return pf.run(assemble_pack(body, index, fields=fields))

    return run


def trailer_fields_seed() -> bytes:
    return real_pack()[-packs.TRAILER_LEN:][:16]


class GrantFileRunner:
    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = str(directory / "agent.grant")

    def run_text(self, data: bytes) -> Any:
        with open(self.path, "wb") as fh:
            fh.write(data)
        return read_grant_file(self.path)

    def run_map(self, cbor_bytes: bytes) -> Any:
        return self.run_text(armor_grant(cbor_bytes))


def run_enroll_code(data: bytes) -> Any:
    from camillo.ops.enrollment import parse_code

    return parse_code(data.decode("utf-8", "replace"))


class LocalFiles:
    """Local-state files: the installation record and the sealed device state."""

    def __init__(self, directory: Path) -> None:
        self.local = VaultLocal(Fixed.VAULT, str(directory))
        os.makedirs(self.local.dir, exist_ok=True)
        self.state_path = self.local.state_path(Fixed.writer_id())
        os.makedirs(os.path.dirname(self.state_path), exist_ok=True)
        self.store = DeviceStateStore(self.state_path, Fixed.LOCAL_SECRET, Fixed.VAULT)
        self.cache_path = str(directory / "actors" / "fuzz" / "state.db")

    def run_installation(self, data: bytes) -> Any:
        with open(self.local.installation_path, "wb") as fh:
            fh.write(data)
        return self.local.load_installation()

    def run_device_state(self, data: bytes) -> Any:
        with open(self.state_path, "wb") as fh:
            fh.write(data)
        return self.store.load()

    def run_device_state_plain(self, plaintext: bytes) -> Any:
        key = local_key(Fixed.LOCAL_SECRET, "state", Fixed.VAULT)
        return self.run_device_state(seal_local(key, "state", Fixed.VAULT, plaintext))

    def run_cache(self, data: bytes) -> Any:
        """Hostile bytes as the local state database: it opens (and is then used) or is rebuilt."""
        os.makedirs(os.path.dirname(self.cache_path), exist_ok=True)
        for suffix in ("-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.cache_path + suffix)
        with open(self.cache_path, "wb") as fh:
            fh.write(data)
        cache = Cache(self.cache_path, Fixed.LOCAL_SECRET, Fixed.VAULT)
        opened = cache.open(1)
        try:
            if opened is None:
                return None
            db, resumed = opened
            db.close()
            return resumed
        finally:
            cache.release()

    def run_cache_db(self, raw_db: bytes) -> Any:
        """A hostile database image encrypted with the right key (an insider's local state)."""
        cache = Cache(self.cache_path, Fixed.LOCAL_SECRET, Fixed.VAULT)
        if not install_state_image(cache, raw_db, 1):
            return None
        return self.run_cache(open(self.cache_path, "rb").read())


def install_state_image(cache: Cache, raw_db: bytes, generation: int) -> bool:
    """Make ``raw_db`` (a plaintext SQLite image) ``cache``'s local state database, encrypted with its
    key; False when SQLite cannot read it at all (nothing to encrypt)."""
    from camillo.cache import DatabaseError

    os.makedirs(os.path.dirname(cache.path), exist_ok=True)
    plain = cache.path + ".plain"
    with open(plain, "wb") as fh:
        fh.write(raw_db)
    try:
        src = sqlcipher.connect(plain)
        try:
            src.execute("CREATE TABLE IF NOT EXISTS cache_meta(key TEXT PRIMARY KEY, value BLOB)")
            cache.export(src, generation).close()
        finally:
            src.close()
        return True
    except (DatabaseError, VaultError):
        return False
    finally:
        os.unlink(plain)


def plain_state_image(cache: Cache) -> bytes:
    """``cache``'s local state database decrypted (with its page key) into a plaintext SQLite image
    (a fuzzing seed)."""
    key = cache.page_key
    plain = cache.path + ".plain"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(plain)
    src = sqlcipher.connect(cache.path)
    try:
        src.execute(f"PRAGMA key = \"x'{key.hex()}'\"")
        src.execute(f"PRAGMA cipher_hmac_algorithm = {STATE_HMAC}")
        src.execute("ATTACH DATABASE ? AS plain KEY ''", (plain,))
        src.execute("SELECT sqlcipher_export('plain')").fetchall()
        src.execute("DETACH DATABASE plain")
    finally:
        src.close()
    data = open(plain, "rb").read()
    os.unlink(plain)
    return data


def real_cache_db() -> bytes:
    """A real materialised-state database as a plaintext SQLite image (records of a real batch)."""
    import tempfile

    from camillo.control import BatchView
    from camillo.state import State

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "state.db")
        st = State(sqlcipher.connect(path))
        for b in real_batches():
            view = BatchView(b, "segments/00/x.seg", Fixed.EID, [])
            st.stage(view, [decode_record(r) for r in b.records])
        st.db.executemany("INSERT OR REPLACE INTO cache_meta(key, value) VALUES(?, ?)",
                          [("format", encoding.encode(8)), ("generation", encoding.encode(1)), ("vault", Fixed.VAULT)])
        st.commit()
        st.close()
        return open(path, "rb").read()


def plain_targets(workdir: Path) -> dict[str, Target]:
    """Every target that needs no vault (only a scratch directory for the ones that read files)."""
    pf = PackFile(workdir / "pack")
    gr = GrantFileRunner(workdir / "grant")
    lf = LocalFiles(workdir / "local")
    local_names = [lf.local.installation_path]
    t = [
        Target("descriptor", run_descriptor, names=["VMEM"], cbor=True),
        Target("record", run_record, cbor=True),
        Target("batch", run_batch, cbor=True),
        Target("segment", run_segment, names=lambda d: [segments_name(d)],
               fields=[(8, 2), (10, 2), (segments.HEADER_LEN, 24), (-16, 16)]),
        Target("segment-payload", run_segment_payload, names=lambda d: ["segment "], cbor=True),
        Target("slot", run_slot, names=slot_names,
               fields=[(8, 1), (9, 1), (26, 4), (30, 4), (34, 4), (38, 1), (39, 1), (-32, 32)]),
        Target("slot-statement", run_slot_statement, names=[slots.file_name(i) for i in Fixed.SLOT_IDS.values()],
               cbor=True),
        Target("envelope", run_envelope, names=lambda d: [envelopes.file_name(d)], fields=[(8, 4), (12, 32)]),
        Target("envelope-payload", run_envelope_payload, names=["envelope "], cbor=True),
        Target("pack", pf.run, names=["fuzz.vmem"],
               fields=[(8, 2), (10, 2), (-56, 8), (-48, 4), (-44, 4), (-40, 32)]),
        Target("pack-index", _pack_index_runner(pf), names=["fuzz.vmem"], cbor=True),
        Target("pack-trailer", _pack_trailer_runner(pf), names=["fuzz.vmem"], fields=[(0, 8), (8, 4), (12, 4)]),
        Target("vmem-unpack", pf.run_unpack, names=["fuzz.vmem", "unpacked"],
               fields=[(-56, 8), (-48, 4), (-44, 4)]),
        Target("grant-file", gr.run_text, names=[gr.path], text=True),
        Target("grant-map", gr.run_map, names=[gr.path], cbor=True),
        Target("enroll-code", run_enroll_code, names=["enrollment code"], text=True),
        Target("installation", lf.run_installation, names=local_names, cbor=True),
        Target("device-state", lf.run_device_state, names=[lf.state_path]),
        Target("device-state-plain", lf.run_device_state_plain, names=[lf.state_path], cbor=True),
        # The cache never raises: anything it cannot trust is discarded and rebuilt (load -> None).
        Target("cache", lf.run_cache, expected=()),
        Target("cache-db", lf.run_cache_db, expected=()),
    ]
    return {x.name: x for x in t}


# ---------------------------------------------------------------------------------------------
# The vault-level targets


@contextlib.contextmanager
def core_environment(home: Path) -> Iterator[None]:
    """The environment the test suite runs the core in (own home, test KDF, no OS keychain)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CAMILLO_HOME", str(home))
        mp.setenv("CAMILLO_INSECURE_TEST_KDF", "1")
        mp.setenv("CAMILLO_KEYCHAIN", "none")
        yield


class World:
    """A real vault with a grant of each level and one finished enrollment, plus the secrets needed
    to speak to it as an insider: the enrollment secret, the actor's cache key, the grant files."""

    def __init__(self, root: Path) -> None:
        from camillo import NewRecord, Vault
        from camillo.ops.enrollment import Offer, _key, _open, session_id

        self.root = root
        self.home = root / "home"
        self.path = str(root / "vault")
        with core_environment(self.home):
            vault, self.phrase = Vault.create(self.path, PASSPHRASE, device_name="fuzz desk", home=str(self.home))
            self.vault = vault
            vault.append([NewRecord(type="message", conversation="c1", role="user", text="hello"),
                          NewRecord(type="fact", key="user/home_city", value="Porto")])
            vault.append([NewRecord(type="message", text="work note")], compartment="work")
            self.grants = {}
            for level in ("read", "write", "append"):
                gpath = str(root / f"{level}.grant")
                vault.create_grant(f"agent-{level}", {"work": level}, gpath)
                self.grants[level] = gpath
            self.vault_id = vault.vault_id
            self.actor = vault.session.actor
            # One real enrollment, so the request and response formats are real seeds.
            self.secret = _d("world enrollment secret")
            offer = Offer(vault.session, secret=self.secret, expiry=int(time.time()) + 10**6)
            self.base = offer.base
            self.sid = session_id(self.secret)
            self.k_req = _key(self.secret, self.vault_id, "req", self.sid)
            self.k_resp = _key(self.secret, self.vault_id, "resp", self.sid)
            join = Vault.join(self.path, offer.qr_text, name="fuzz laptop")
            join.start()
            self.request_plain = _open(self.k_req, "vmem/v1/enroll/req", self.sid, vault.session.shelf.read(self.base + ".req"))
            assert offer.poll().name == "REQUESTED"
            offer.confirm()
            self.response_plain = _open(self.k_resp, "vmem/v1/enroll/resp", self.sid,
                                        vault.session.shelf.read(self.base + ".resp"))
            self.enrolled = join.device
            joined = join.poll()
            assert joined is not None
            joined.lock()
            offer.poll()
            vault.save_cache()
            from camillo.ops.enrollment import qr_text

            self.qr = qr_text(self.vault_id, self.secret, int(time.time()) + 10**6)
            self.cache_path = vault.session.local.cache_path(self.actor.writer_id)
            self.cache = Cache(self.cache_path, self.actor.signer.seed, self.vault_id)
            self.generation = vault.session.keyring.generation
            self.slot_names = {}
            for h in vault.session.slot_headers()[0]:
                self.slot_names.setdefault(h.type, h.name)
            self.pristine = {n: vault.session.shelf.read(n) for n in self.slot_names.values()}
            self.grant_maps = {}
            for level, gpath in self.grants.items():
                text = open(gpath).read()
                start = text.index("-----BEGIN VMEM GRANT-----") + len("-----BEGIN VMEM GRANT-----")
                end = text.index("-----END VMEM GRANT-----")
                self.grant_maps[level] = base64.b64decode("".join(text[start:end].split()))
            vault.lock()
            self.cache_db = plain_state_image(self.cache)
        self.owner_vault = None

    # -- helpers

    def open_owner(self):
        from camillo import Unlock, Vault

        return Vault.open(self.path, Unlock.passphrase(PASSPHRASE), register=False, cache=False, home=str(self.home))

    def _env(self):
        return core_environment(self.home)

    # -- enrollment: the existing device reading a request

    def run_enroll_request(self, data: bytes) -> Any:
        from camillo.errors import EnrollmentError
        from camillo.ops.enrollment import Offer, OfferState

        with self._env():
            if self.owner_vault is None:
                from camillo import Unlock, Vault

                self.owner_vault = Vault.open(self.path, Unlock.passphrase(PASSPHRASE), home=str(self.home))
            shelf = self.owner_vault.session.shelf
            for ext in (".req", ".resp", ".ack"):
                shelf.delete(self.base + ext)
            shelf.write(self.base + ".req", data)
            offer = Offer(self.owner_vault.session, secret=self.secret, expiry=int(time.time()) + 600)
            state = offer.poll()
            if state == OfferState.REFUSED:
                raise EnrollmentError(offer.messages[-1])
            return state

    def run_enroll_request_plain(self, plaintext: bytes) -> Any:
        from camillo.ops.enrollment import _seal

        return self.run_enroll_request(_seal(self.k_req, "vmem/v1/enroll/req", self.sid, plaintext))

    # -- enrollment: the new device reading the response

    def run_enroll_response(self, data: bytes) -> Any:
        from camillo import Vault

        # The joining device keeps its local state in a home of its own (as a second machine would).
        with core_environment(self.root / "joiner-home"):
            for ext in (".req", ".resp", ".ack"):
                p = os.path.join(self.path, *(self.base + ext).split("/"))
                if os.path.exists(p):
                    os.unlink(p)
            with open(os.path.join(self.path, *(self.base + ".resp").split("/")), "wb") as fh:
                fh.write(data)
            join = Vault.join(self.path, self.qr, name="fuzz laptop")
            join.device = self.enrolled
            result = join.poll()
            if result is not None:
                result.lock()
            return result

    def run_enroll_response_plain(self, plaintext: bytes) -> Any:
        from camillo.ops.enrollment import _seal

        return self.run_enroll_response(_seal(self.k_resp, "vmem/v1/enroll/resp", self.sid, plaintext))

    # -- grant files opened against the vault

    def run_grant_map(self, cbor_bytes: bytes) -> Any:
        from camillo import Unlock, Vault

        gpath = str(self.root / "fuzz.grant")
        with open(gpath, "wb") as fh:
            fh.write(armor_grant(cbor_bytes))
        with self._env():
            v = Vault.open(self.path, Unlock.grant(gpath), home=str(self.home))
            try:
                v.timeline()
            except VaultError:
                pass
            v.lock()

    # -- the actor's cache, sealed with the right key

    def run_cache_db(self, raw_db: bytes) -> Any:
        if not install_state_image(self.cache, raw_db, self.generation):
            return
        with self._env():
            from camillo import Unlock, Vault

            v = Vault.open(self.path, Unlock.passphrase(PASSPHRASE), register=False, home=str(self.home))
            try:
                v.timeline()
                v.facts()
                v.search("porto")
                v.problems()
            finally:
                v.lock()

    # -- a slot of the vault folder replaced by hostile bytes

    def run_slot_in_vault(self, data: bytes, slot_type: slots.SlotType = slots.SlotType.PASSPHRASE) -> Any:
        from camillo import Unlock, Vault

        name = self.slot_names[slot_type]
        path = os.path.join(self.path, *name.split("/"))
        with open(path, "wb") as fh:
            fh.write(data)
        try:
            with self._env():
                v = Vault.open(self.path, Unlock.passphrase(PASSPHRASE), register=False, cache=False,
                               home=str(self.home))
                v.problems()
                v.lock()
        finally:
            with open(path, "wb") as fh:
                fh.write(self.pristine[name])

    def seeds(self, name: str) -> list[bytes]:
        """Real inputs for the world's targets, made by the product in this run."""
        from camillo.ops.enrollment import _seal

        return {
            "enroll-req": lambda: [_seal(self.k_req, "vmem/v1/enroll/req", self.sid, self.request_plain)],
            "enroll-req-plain": lambda: [self.request_plain],
            "enroll-resp": lambda: [_seal(self.k_resp, "vmem/v1/enroll/resp", self.sid, self.response_plain)],
            "enroll-resp-plain": lambda: [self.response_plain],
            "grant-vault": lambda: list(self.grant_maps.values()),
            "cache-vault": lambda: [self.cache_db],
            "slot-vault": lambda: [self.pristine[self.slot_names[slots.SlotType.PASSPHRASE]]],
        }[name]()

    def close(self) -> None:
        if self.owner_vault is not None and not self.owner_vault.locked:
            self.owner_vault.lock()

    def targets(self) -> dict[str, Target]:
        t = [
            Target("enroll-req", self.run_enroll_request, names=["enrollment"]),
            Target("enroll-req-plain", self.run_enroll_request_plain, names=["enrollment"], cbor=True),
            Target("enroll-resp", self.run_enroll_response, names=["enrollment", "vault", "slot"]),
            Target("enroll-resp-plain", self.run_enroll_response_plain, names=["enrollment", "vault", "slot"],
                   cbor=True),
            Target("grant-vault", self.run_grant_map, names=["grant", "vault"], cbor=True),
            Target("cache-vault", self.run_cache_db),
            Target("slot-vault", self.run_slot_in_vault, names=["slot", "vault", "passphrase"],
                   fields=[(26, 4), (30, 4), (34, 4), (38, 1), (39, 1)]),
        ]
        return {x.name: x for x in t}


def sqlite_ok(data: bytes) -> bool:
    try:
        db = sqlite3.connect(":memory:")
        db.deserialize(data)
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        db.close()
        return True
    except sqlite3.DatabaseError:
        return False
