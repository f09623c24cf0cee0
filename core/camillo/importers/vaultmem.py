"""Import a VaultMem vault folder (``pip install vaultmem``, format of vaultmem 0.1–0.3), with its
passphrase.

The format is implemented here from VaultMem's own code (``vaultmem/crypto.py``, ``vault.py``,
``models.py``; the code is VaultMem's specification), without importing it:

1. ``meta.json`` (plain JSON): the ``primary`` credential slot gives the Argon2id salt and the
   wrapped master key (MEK); ``memory_cost`` the Argon2 memory in KiB.
2. KEK = Argon2id(passphrase UTF-8, salt, t=3, m=memory_cost, p=4, 32 bytes); MEK =
   AES-256-GCM-decrypt(KEK, wrapped MEK, AAD ``b"vmem-mek-v1"``).  A failure here means a wrong
   passphrase.
3. ``current.vmem``: a 48-byte header (``struct ">4sHBBBBHIIII16sI"``: magic ``VMEM``, version 1,
   algorithm, KDF, file type, reserved, index offset, index size, atom count, flags, vault UUID,
   reserved) then the index block, AES-256-GCM with the 48 header bytes as AAD, zlib-compressed
   JSON ``{owner, file_id, created_at, schema_version, atom_map: [{id, offset, size}]}``.
4. ``current.atoms``: the blocks at those offsets, each ``[12-byte IV][u32 length][ciphertext]
   [16-byte tag]``, AES-256-GCM with the atom's 16 raw UUID bytes as AAD, zlib-compressed atom JSON.

Every block is decrypted and checked before anything is imported: a wrong passphrase, a modified
header or index, or one tampered atom refuses the whole import, naming the atom.  The source is
only read (VaultMem itself truncates an uncommitted tail of ``current.atoms`` on open; this reader
ignores the tail and writes nothing).  The Argon2 memory cost a ``meta.json`` may ask for is capped
at 1 GiB.

Mapping.  A VaultMem vault holds what its owner added with ``session.add()``, sealed under the
owner's passphrase, so plain atoms come in at authority ``user``:

* ``EPISODIC`` → an ``event`` note;
* ``SEMANTIC`` → a ``fact`` (PUT, key ``user/vaultmem_<8 hex of the atom id's SHA-256>``);
* ``PERSONA`` → a ``preference`` (same key form);
* ``PROCEDURAL`` → an ``instruction`` (same key form);
* ``COMPOSITE`` and ``AFFINITY`` atoms (machine-made aggregates) → ``summary`` notes, ``inferred``.

Churned atoms (``is_churned``) and atoms another atom ``supersedes`` are not imported (counted).
Media files (``media/*.enc``) are not imported: an atom's caption or extracted text is, with
``meta["media_blob_id"]``.  ``ts`` = ``captured_at``, else ``created_at``.  ``meta``:
``vaultmem_type``, ``granularity``, ``significance`` and ``confidence`` (as text: VMEM has no
floats), ``data_class``, ``session_id``, ``content_type`` and ``import`` = ``vaultmem:<atom id>``.

A pure reader (no vault access; Argon2 takes a moment): any thread may call it; :func:`run_import` writes on the vault's thread.
"""

from __future__ import annotations

import base64
import os
import struct
import uuid
import zlib
from collections.abc import Iterator
from typing import Any

from ..values import Authority
from ..vault import NewRecord
from . import ImportFailed, ImportUnit
from .safety import DirSource, as_str, clean_text, clip, parse_json, short, unique_keys, unix_ts

KIND = "vaultmem"
HEADER = struct.Struct(">4sHBBBBHIIII16sI")
AAD_MEK = b"vmem-mek-v1"
MAX_MEMORY_COST = 1024 * 1024  # KiB
MAX_BLOCK = 64 * 1024 * 1024
MAX_INFLATED = 64 * 1024 * 1024
TYPES: dict[object, str] = {"EPISODIC": "event", "SEMANTIC": "fact", "PERSONA": "preference", "PROCEDURAL": "instruction"}


def _b64(slot: dict[str, Any], name: str, size: int | None, where: str) -> bytes:
    try:
        raw = base64.b64decode(slot[name], validate=True)
    except (KeyError, TypeError, ValueError):
        raise ImportFailed(f"{where}: the credential slot has no valid '{name}'") from None
    if size is not None and len(raw) != size:
        raise ImportFailed(f"{where}: '{name}' is {len(raw)} bytes, not {size}")
    return raw


def _block(data: bytes, offset: int, where: str) -> tuple[bytes, bytes]:
    """(iv, ciphertext ‖ tag) of the encrypted block at ``offset``."""
    if offset < 0 or offset + 16 > len(data):
        raise ImportFailed(f"{where}: an encrypted block lies outside the file (damaged or cut short)")
    iv = data[offset:offset + 12]
    (n,) = struct.unpack(">I", data[offset + 12:offset + 16])
    end = offset + 16 + n + 16
    if n > MAX_BLOCK or end > len(data):
        raise ImportFailed(f"{where}: an encrypted block is longer than the file (damaged or cut short)")
    return iv, data[offset + 16:end]


def _inflate(data: bytes, where: str) -> bytes:
    d = zlib.decompressobj()
    try:
        out = d.decompress(data, MAX_INFLATED)
    except zlib.error as exc:
        raise ImportFailed(f"{where}: the decrypted data is not zlib-compressed ({exc})") from None
    if d.unconsumed_tail:
        raise ImportFailed(f"{where}: the decrypted data expands beyond {MAX_INFLATED} bytes; refused")
    return out


def _open_keys(src: DirSource, passphrase: str) -> tuple[bytes, dict[str, Any]]:
    from argon2.low_level import Type, hash_secret_raw
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    where = src.where("meta.json")
    meta = parse_json(src.read("meta.json", 1024 * 1024), where)
    if not isinstance(meta, dict) or not isinstance(meta.get("credential_slots"), list):
        raise ImportFailed(f"{where} does not look like a VaultMem vault's meta.json")
    slot = next((s for s in meta["credential_slots"] if isinstance(s, dict) and s.get("slot_id") == "primary"), None)
    if slot is None:
        raise ImportFailed(f"{where} has no 'primary' credential slot")
    cost = meta.get("memory_cost", 65536)
    if not isinstance(cost, int) or isinstance(cost, bool) or not 8 <= cost <= MAX_MEMORY_COST:
        raise ImportFailed(f"{where} asks for an Argon2 memory cost of {cost!r} KiB; at most {MAX_MEMORY_COST} "
                           "are accepted")
    salt = _b64(slot, "kdf_salt", None, where)
    if not 8 <= len(salt) <= 64:
        raise ImportFailed(f"{where}: the Argon2 salt has an impossible length")
    iv = _b64(slot, "wrapped_mek_iv", 12, where)
    ct = _b64(slot, "wrapped_mek_ct", 32, where)
    tag = _b64(slot, "wrapped_mek_tag", 16, where)
    kek = hash_secret_raw(secret=passphrase.encode("utf-8"), salt=salt, time_cost=3, memory_cost=cost,
                          parallelism=4, hash_len=32, type=Type.ID)
    try:
        mek = AESGCM(kek).decrypt(iv, ct + tag, AAD_MEK)
    except InvalidTag:
        raise ImportFailed(f"wrong passphrase for the VaultMem vault {src.label} "
                           "(set CAMILLO_IMPORT_PASSPHRASE to the vault's passphrase); nothing was imported") from None
    return mek, meta


def _read_atoms(src: DirSource, passphrase: str) -> tuple[list[dict[str, Any]], dict[str, Any], dict[str, Any]]:
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    mek, meta = _open_keys(src, passphrase)
    aes = AESGCM(mek)
    vwhere = src.where("current.vmem")
    vmem = src.read("current.vmem", 256 * 1024 * 1024)
    if len(vmem) < HEADER.size:
        raise ImportFailed(f"{vwhere} is too short to be a VaultMem index")
    magic, version, _algo, _kdf, _ftype, _r1, _r2, index_offset, _isize, atom_count, _flags, file_id, _r3 = \
        HEADER.unpack(vmem[:HEADER.size])
    if magic != b"VMEM":
        raise ImportFailed(f"{vwhere} is not a VaultMem file (magic {magic!r})")
    if version != 1:
        raise ImportFailed(f"{vwhere} is VaultMem format version {version}; only version 1 is known")
    iv, body = _block(vmem, index_offset, vwhere)
    try:
        plain = aes.decrypt(iv, body, vmem[:HEADER.size])
    except InvalidTag:
        raise ImportFailed(f"{vwhere}: the index fails authentication (the header or index was modified); "
                           "nothing was imported") from None
    index = parse_json(_inflate(plain, vwhere), f"{vwhere} (index)")
    if not isinstance(index, dict) or not isinstance(index.get("atom_map"), list):
        raise ImportFailed(f"{vwhere}: the index has no atom map")
    atom_map = index["atom_map"]
    if len(atom_map) != atom_count:
        raise ImportFailed(f"{vwhere}: the header counts {atom_count} atoms, the index {len(atom_map)}")
    awhere = src.where("current.atoms")
    full = os.path.join(src.root, "current.atoms")
    src.resolve("current.atoms")  # refused if it leads outside the folder
    atoms: list[dict[str, Any]] = []
    try:
        fh = open(full, "rb")  # noqa: SIM115 - read block by block below: an atoms file may be large
    except OSError as exc:
        raise ImportFailed(f"{awhere} cannot be read ({exc.strerror or exc})") from None
    with fh:
        size = os.fstat(fh.fileno()).st_size
        for entry in atom_map:
            if not isinstance(entry, dict):
                raise ImportFailed(f"{vwhere}: the atom map holds something that is not an entry")
            aid, offset, length = entry.get("id"), entry.get("offset"), entry.get("size")
            try:
                uid = uuid.UUID(str(aid))
            except ValueError:
                raise ImportFailed(f"{vwhere}: atom id {str(aid)[:60]!r} is not a UUID") from None
            if (not isinstance(offset, int) or not isinstance(length, int) or offset < 0 or length < 32
                    or length > MAX_BLOCK or offset + length > size):
                raise ImportFailed(f"{awhere}: atom {uid} lies outside the file (damaged or cut short); "
                                   "nothing was imported")
            fh.seek(offset)
            block = fh.read(length)
            iv, body = _block(block, 0, f"{awhere} (atom {uid})")
            try:
                plain = aes.decrypt(iv, body, uid.bytes)
            except InvalidTag:
                raise ImportFailed(f"VaultMem atom {uid} in {awhere} fails authentication (it was modified or "
                                   "damaged); nothing was imported") from None
            atom = parse_json(_inflate(plain, f"atom {uid}"), f"{awhere} (atom {uid})")
            if not isinstance(atom, dict) or str(atom.get("id")) != str(aid):
                raise ImportFailed(f"{awhere}: atom {uid} does not carry its own id")
            atoms.append(atom)
    return atoms, index, meta


def read(source_path: str, *, passphrase: str | None = None, **_: Any) -> Iterator[ImportUnit]:
    if not os.path.isdir(source_path):
        raise ImportFailed(f"{source_path} is not a folder: give the VaultMem vault folder (with meta.json)")
    src = DirSource(source_path)
    if not os.path.isfile(os.path.join(src.root, "meta.json")):
        raise ImportFailed(f"{src.label} has no meta.json: is it a VaultMem vault folder?")
    if not passphrase:
        raise ImportFailed(f"the VaultMem vault {src.label} needs its passphrase: set CAMILLO_IMPORT_PASSPHRASE")
    atoms, index, meta = _read_atoms(src, passphrase)
    yield _unit(atoms, index, meta, src.label)


def _text(value: Any) -> str | None:
    return short(value, 100) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else None


def _unit(atoms: list[dict[str, Any]], index: dict[str, Any], vmeta: dict[str, Any], label: str) -> ImportUnit:
    superseded: set[str] = set()
    for atom in atoms:
        if isinstance(atom.get("supersedes"), list):
            superseded |= {str(s) for s in atom["supersedes"]}
    churned = gone = empty = media = 0
    keyed = [str(a.get("id")) for a in atoms if a.get("granularity", "ATOM") == "ATOM" and TYPES.get(a.get("type")) != "event"]
    keys = unique_keys("user/vaultmem_", keyed)
    records: list[NewRecord] = []
    owner = short(index.get("owner") or vmeta.get("owner"), 200)
    for atom in atoms:
        aid = str(atom.get("id"))
        if atom.get("is_churned") is True:
            churned += 1
            continue
        if aid in superseded:
            gone += 1
            continue
        content = clean_text(atom.get("content"))
        if not content or not content.strip():
            empty += 1
            continue
        vtype = as_str(atom.get("type"), "EPISODIC")
        granularity = as_str(atom.get("granularity"), "ATOM")
        meta: dict[str, Any] = {"import": f"{KIND}:{aid}", "source": label, "original_id": aid,
                                "vaultmem_type": vtype[:40], "granularity": granularity[:40]}
        for name in ("significance", "confidence"):
            if _text(atom.get(name)) is not None:
                meta[name] = _text(atom.get(name))
        for name in ("data_class", "session_id", "content_type", "media_blob_id", "language"):
            if isinstance(atom.get(name), str) and atom[name]:
                meta[name] = short(atom[name], 200)
        if owner:
            meta["owner"] = owner
        created = unix_ts(atom.get("created_at"))
        if created:
            meta["original_ts"] = created
        loc = atom.get("location")
        if isinstance(loc, dict) and isinstance(loc.get("place"), str):
            meta["place"] = short(loc["place"], 200)
        if atom.get("media_blob_id"):
            media += 1
        ts = unix_ts(atom.get("captured_at")) or created
        text = clip(content, meta)
        if granularity != "ATOM":
            records.append(NewRecord(type="summary", text=text, authority=Authority.INFERRED, ts=ts, meta=meta))
            continue
        typ = TYPES.get(vtype, "event")
        if typ == "event":
            records.append(NewRecord(type="event", text=text, authority=Authority.USER, ts=ts, meta=meta))
        else:
            records.append(NewRecord(type=typ, key=keys[aid], value=text, authority=Authority.USER, ts=ts, meta=meta))
    notes = []
    if churned:
        notes.append(f"{churned} churned (removed) atom(s) left out")
    if gone:
        notes.append(f"{gone} superseded atom(s) left out")
    if empty:
        notes.append(f"{empty} empty atom(s) left out")
    if media:
        notes.append(f"{media} media file(s) not imported (their caption or extracted text was)")
    return ImportUnit(f"VaultMem vault '{label}'", records, notes=notes, skipped=churned + gone + empty)

