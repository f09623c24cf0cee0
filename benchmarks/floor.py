"""The floor beside each figure: the bare crypto (and, where stated, the one durable write) an
operation cannot avoid, timed on this machine in the same run.

:func:`measure_primitives` times each primitive by calling the libraries Camillo uses directly
(``cryptography`` HPKE with X-Wing, Ed25519 and ML-KEM key derivation, PyNaCl XChaCha20-Poly1305,
``argon2-cffi``, ``hashlib``), never through Camillo.  The ``*_floor`` functions turn counts taken
from the vault itself (segments, envelopes, bytes, signatures) into seconds, component by
component, so a report can say which part of the floor dominates.

Runs on the main thread of the benchmark process.
"""

from __future__ import annotations

import hashlib
import os
import statistics
import time
from typing import Any

from .stats import time_per_call

KIB4 = 4096
MIB4 = 4 * 1024 * 1024


def measure_primitives(kdf: tuple[int, int, int] | None, scratch: str, *, quick: bool = False) -> dict[str, float]:
    """Seconds per operation (or per byte) of every primitive a floor uses."""
    import nacl.bindings as nb
    from argon2.low_level import Type, hash_secret_raw
    from cryptography.hazmat.primitives import hashes, hpke
    from cryptography.hazmat.primitives.asymmetric import ed25519, mlkem, x25519
    from cryptography.hazmat.primitives.kdf.hkdf import HKDFExpand

    loop = 0.05 if quick else 0.2
    out: dict[str, float] = {}
    suite = hpke.Suite(hpke.KEM.MLKEM768_X25519, hpke.KDF.HKDF_SHA256, hpke.AEAD.CHACHA20_POLY1305)

    def xwing(seed: bytes):
        expanded = hashlib.shake_256(seed).digest(96)
        kem = mlkem.MLKEM768PrivateKey.from_seed_bytes(expanded[0:64])
        dh = x25519.X25519PrivateKey.from_private_bytes(expanded[64:96])
        kem.public_key().public_bytes_raw()
        dh.public_key().public_bytes_raw()
        return hpke.MLKEM768X25519PrivateKey(kem, dh), hpke.MLKEM768X25519PublicKey(kem.public_key(), dh.public_key())

    priv, pub = xwing(os.urandom(32))
    info = b"vmem/v1/wrap/segment\x00" + os.urandom(64)
    key = os.urandom(32)
    wrapped = suite.encrypt(key, pub, info=info)
    out["hpke_seal"] = time_per_call(lambda: suite.encrypt(key, pub, info=info), min_seconds=loop)
    out["hpke_open"] = time_per_call(lambda: suite.decrypt(wrapped, priv, info=info), min_seconds=loop)
    seed = os.urandom(32)
    out["xwing_keygen"] = time_per_call(lambda: xwing(seed), min_seconds=loop)

    sk = ed25519.Ed25519PrivateKey.generate()
    pk = sk.public_key()
    msg = b"vmem/v1/batch-sig\x00" + os.urandom(32)
    sig = sk.sign(msg)
    out["ed25519_sign"] = time_per_call(lambda: sk.sign(msg), min_seconds=loop)
    out["ed25519_verify"] = time_per_call(lambda: pk.verify(sig, msg), min_seconds=loop)

    prk = os.urandom(32)
    out["hkdf_expand"] = time_per_call(
        lambda: HKDFExpand(algorithm=hashes.SHA256(), length=88, info=b"vmem/v1/segment\x00" + prk).derive(prk),
        min_seconds=loop)

    k, n, aad = os.urandom(32), os.urandom(24), os.urandom(1300)
    small, big = os.urandom(KIB4), os.urandom(MIB4)
    cs = nb.crypto_aead_xchacha20poly1305_ietf_encrypt(small, aad, n, k)
    cb = nb.crypto_aead_xchacha20poly1305_ietf_encrypt(big, aad, n, k)
    t_seal_s = time_per_call(lambda: nb.crypto_aead_xchacha20poly1305_ietf_encrypt(small, aad, n, k), min_seconds=loop)
    t_seal_b = time_per_call(lambda: nb.crypto_aead_xchacha20poly1305_ietf_encrypt(big, aad, n, k), min_seconds=loop)
    t_open_s = time_per_call(lambda: nb.crypto_aead_xchacha20poly1305_ietf_decrypt(cs, aad, n, k), min_seconds=loop)
    t_open_b = time_per_call(lambda: nb.crypto_aead_xchacha20poly1305_ietf_decrypt(cb, aad, n, k), min_seconds=loop)
    # a + b * bytes through the two sizes (a per file, b per byte)
    for name, ts, tb in (("aead_seal", t_seal_s, t_seal_b), ("aead_open", t_open_s, t_open_b)):
        b = max((tb - ts) / (MIB4 - KIB4), 1e-12)
        out[f"{name}_per_byte"] = b
        out[f"{name}_per_call"] = max(ts - b * KIB4, 0.0)

    h_small = os.urandom(64)
    t_h_small = time_per_call(lambda: hashlib.sha256(h_small).digest(), min_seconds=loop)
    t_h_big = time_per_call(lambda: hashlib.sha256(big).digest(), min_seconds=loop)
    out["sha256_per_byte"] = max((t_h_big - t_h_small) / (MIB4 - 64), 1e-12)
    out["sha256_per_call"] = t_h_small

    if kdf is not None:
        m, t, p = kdf
        salt = os.urandom(16)
        runs = []
        for _ in range(1 if quick else 3):
            t0 = time.perf_counter()
            hash_secret_raw(b"a benchmark passphrase", salt, time_cost=t, memory_cost=m, parallelism=p, hash_len=32,
                            type=Type.ID)
            runs.append(time.perf_counter() - t0)
        out["argon2id"] = min(runs)
        out["argon2id_params"] = float(m * 1_000_000 + t * 1000 + p)  # m, t, p packed for the record

    os.makedirs(scratch, exist_ok=True)
    out["durable_write_4k"] = _durable_write(scratch, KIB4, 5 if quick else 30)
    bulk = _bulk_durable_write(scratch, KIB4, 64 if quick else 512)
    if bulk is not None:
        out["durable_write_bulk_4k"] = bulk
    out["seq_write_per_byte"] = _seq_write(scratch, 4 * 1024 * 1024 if quick else 32 * 1024 * 1024)
    return out


def _durable_write(directory: str, size: int, count: int) -> float:
    """One new file written the way a vault writes it: temp file, fsync, rename, fsync the folder."""
    data = os.urandom(size)
    times = []
    for i in range(count):
        tmp = os.path.join(directory, f".tmp-floor-{i}")
        final = os.path.join(directory, f"floor-{i}.bin")
        t0 = time.perf_counter()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.rename(tmp, final)
        dfd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
        times.append(time.perf_counter() - t0)
        os.unlink(final)
    return statistics.median(times)


def _seq_write(directory: str, size: int) -> float:
    """Seconds per byte of one large sequential write followed by one fsync."""
    data = os.urandom(1024 * 1024)
    path = os.path.join(directory, "floor-seq.bin")
    t0 = time.perf_counter()
    with open(path, "wb") as fh:
        for _ in range(size // len(data)):
            fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    elapsed = time.perf_counter() - t0
    os.unlink(path)
    return elapsed / size


# ---------------------------------------------------------------------------------------------
# Floors: counts from the vault -> seconds, by component


def _aead_open(p: dict[str, float], files: int, nbytes: int) -> float:
    return files * (p["aead_open_per_call"] + p["hkdf_expand"]) + nbytes * p["aead_open_per_byte"]


def _aead_seal(p: dict[str, float], files: int, nbytes: int) -> float:
    return files * (p["aead_seal_per_call"] + p["hkdf_expand"]) + nbytes * p["aead_seal_per_byte"]


def _sha(p: dict[str, float], calls: int, nbytes: int) -> float:
    return calls * p["sha256_per_call"] + nbytes * p["sha256_per_byte"]


def total(components: dict[str, float]) -> float:
    return sum(components.values())


def unlock_floor(p: dict[str, float], c: dict[str, Any]) -> dict[str, float]:
    """Argon2id once, the credential's X-Wing key from its output, and one slot HPKE open."""
    return {"argon2id": p.get("argon2id", 0.0), "xwing_keygen": p["xwing_keygen"], "hpke_open": p["hpke_open"],
            "aead": _aead_open(p, 1, 4096)}


def cold_open_floor(p: dict[str, float], c: dict[str, Any]) -> dict[str, float]:
    """Unlock, open the owner's envelopes (HPKE each, derive each epoch key), open every segment
    (HPKE + AEAD over its bytes), verify every signature not vouched for by a compaction, and hash
    every record (the signed batch header lists record hashes)."""
    f = unlock_floor(p, c)
    f["hpke_open"] += p["hpke_open"] * (c["owner_envelopes"] + c["segments"])
    f["xwing_keygen"] += p["xwing_keygen"] * (1 + c["epoch_keys"])  # owner KEM + epoch keys
    f["aead"] += _aead_open(p, c["owner_envelopes"] + c["segments"], 4096 * c["owner_envelopes"] + c["segment_bytes"])
    f["ed25519_verify"] = p["ed25519_verify"] * c["signature_verifies"]
    f["sha256_records"] = _sha(p, c["records"], c["record_bytes"])
    return f


def warm_open_floor(p: dict[str, float], c: dict[str, Any]) -> dict[str, float]:
    """Unlock and decrypt the local cache (its bytes).  Reading the envelopes again is left out: a
    cache can remember which envelopes it has seen, so a warm open need not open any."""
    f = unlock_floor(p, c)
    f["aead"] += _aead_open(p, 2, c["cache_bytes"] + c.get("state_bytes", 0))
    return f


def new_segments_floor(p: dict[str, float], segments: int, nbytes: int, records: int, record_bytes: int,
                       batches: int) -> dict[str, float]:
    """Reading segments another device wrote: HPKE + AEAD each, verify each batch, hash its records."""
    return {"hpke_open": p["hpke_open"] * segments, "aead": _aead_open(p, segments, nbytes),
            "ed25519_verify": p["ed25519_verify"] * batches, "sha256_records": _sha(p, records, record_bytes)}


def _bulk_durable_write(directory: str, size: int, count: int) -> float | None:
    """Per file, ``count`` new files made durable together, where the system can (Linux's
    syncfs(2)): each written to a temp file, one sync of the file system, then each linked to its
    name, and the folder fsynced once.  None where there is no syncfs."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return None
    try:
        syncfs = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    data = os.urandom(size)
    times = []
    for round_ in range(3):
        names = [(os.path.join(directory, f".tmp-bulk-{round_}-{i}"), os.path.join(directory, f"bulk-{round_}-{i}.bin"))
                 for i in range(count)]
        t0 = time.perf_counter()
        for tmp, _ in names:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        dfd = os.open(directory, os.O_RDONLY)
        try:
            if syncfs(dfd) != 0:
                return None
            for tmp, final in names:
                os.link(tmp, final)
                os.unlink(tmp)
            os.fsync(dfd)
        finally:
            os.close(dfd)
        times.append((time.perf_counter() - t0) / count)
        for _, final in names:
            os.unlink(final)
    return min(times)


def add(*parts: dict[str, float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for part in parts:
        for k, v in part.items():
            out[k] = out.get(k, 0.0) + v
    return out


def append_floor(p: dict[str, float], record_bytes: int, *, fsync: bool) -> dict[str, float]:
    """One interactive batch: sign it, wrap a fresh segment key (HPKE seal), seal 4 KiB, hash the
    record, the header and the file; plus one durable file write when fsync counts."""
    f = {"ed25519_sign": p["ed25519_sign"], "hpke_seal": p["hpke_seal"], "aead": _aead_seal(p, 1, 4096),
         "sha256": _sha(p, 3, record_bytes + 300 + 4096)}
    if fsync:
        f["durable_write"] = p["durable_write_4k"]
    return f


def write_segments_floor(p: dict[str, float], segments: int, nbytes: int, batches: int, records: int,
                         record_bytes: int, *, durable: bool = True) -> dict[str, float]:
    """Writing segments: sign each batch, HPKE-wrap each segment key, seal the bytes, hash records
    and files, and (when durable) one durable write per file plus the bytes at sequential speed."""
    f = {"ed25519_sign": p["ed25519_sign"] * batches, "hpke_seal": p["hpke_seal"] * segments,
         "aead": _aead_seal(p, segments, nbytes), "sha256": _sha(p, records + segments, record_bytes + nbytes)}
    if durable:
        f["durable_write"] = p["durable_write_4k"] * segments + p["seq_write_per_byte"] * nbytes
    return f


def copy_floor(p: dict[str, float], files: int, nbytes: int, *, durable_files: bool) -> dict[str, float]:
    """Packing, unpacking, merging files: hash every byte (content-addressed names) and write the
    bytes once; ``durable_files`` counts each file made durable before its name appears, many
    together where the system can (``durable_write_bulk_4k``), else one by one (else one fsync in
    all)."""
    f = {"sha256": _sha(p, files, nbytes), "write": p["seq_write_per_byte"] * nbytes}
    if durable_files:
        f["durable_write"] = p.get("durable_write_bulk_4k", p["durable_write_4k"]) * files
    return f
