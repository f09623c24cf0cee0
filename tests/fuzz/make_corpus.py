"""Write the fuzz seed corpus: real objects (``corpus/seeds/<target>/``) and the hand-made hostile
cases the issue requires (``corpus/hostile/<target>/``).  Run from the repository root::

    .venv/bin/python -m tests.fuzz.make_corpus            # (re)write both sets
    .venv/bin/python -m tests.fuzz.make_corpus --check    # exit 1 if the checked-in corpus differs

Deterministic: the core's randomness (``random_bytes``: salts, nonces, ids, segment and envelope
keys) is replaced by a counter-mode DRBG seeded with a constant while the corpus is written, and
keys come from labels (:class:`tests.fuzz.targets.Fixed`).  The one exception is HPKE: its
encapsulation randomness lives inside OpenSSL, so the whole-file seeds that carry a key wrap
(``slot``, ``envelope``, ``segment``, :data:`HPKE_SEEDS`) are written only when missing (or with
``--force``), and ``--check`` only checks that they exist; ``tests/fuzz/test_corpus.py`` checks that
they still open.  The cache database seed follows Camillo's internal cache schema
(:data:`SCHEMA_SEEDS`): ``--check`` only requires it to exist.

Crashing inputs found by fuzzing live in ``corpus/regressions/`` and are never written here.

Single-threaded script; the tests call :func:`build` from pytest's main thread.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import sys
from collections.abc import Iterator

import cbor2
from camillo import descriptor, encoding, envelopes, slots
from camillo.ops.enrollment import qr_text, typed_code

from . import targets as T
from .fuzzlib import SEEDS, deep, head

HPKE_SEEDS = {"slot", "envelope", "segment"}
# the envelope kinds the fuzz targets open as a reader (the owner-certificate kinds 3 and 4 go only to
# append grants, whose own tests cover them: tests/core/test_grant_trust.py)
EPOCH_KINDS = (envelopes.EnvelopeKind.EPOCH_SECRET, envelopes.EnvelopeKind.EPOCH_PUBLIC)
# Seeds that follow Camillo's internal cache schema rather than the format: --check only requires them
# to exist (a schema change regenerates them; the cache is disposable by design).
SCHEMA_SEEDS = {"seeds/cache-db"}


@contextlib.contextmanager
def deterministic_randomness(seed: bytes = b"camillo-fuzz-corpus") -> Iterator[None]:
    """Replace ``random_bytes`` in every loaded camillo module by a SHA-256 counter DRBG."""
    import camillo.primitives as prim

    original = prim.random_bytes
    counter = [0]

    def drbg(n: int) -> bytes:
        out = b""
        while len(out) < n:
            counter[0] += 1
            out += hashlib.sha256(seed + counter[0].to_bytes(8, "big")).digest()
        return out[:n]

    patched = []
    for name, mod in list(sys.modules.items()):
        if name.startswith("camillo") and getattr(mod, "random_bytes", None) is original:
            mod.random_bytes = drbg
            patched.append(mod)
    try:
        yield
    finally:
        for mod in patched:
            mod.random_bytes = original


# ---------------------------------------------------------------------------------------------
# Generic CBOR hostiles: the required cases, fed to every target that reads CBOR

CBOR_TARGETS = ("descriptor", "record", "batch", "segment-payload", "slot-statement", "envelope-payload",
                "pack-index", "grant-map", "enroll-req-plain", "enroll-resp-plain", "device-state-plain",
                "installation")


def large_hostiles() -> dict[str, bytes]:
    """The 100 000-level bombs: made by code when the tests run (too big to check in)."""
    return {
        "bomb-deep-array-100k": deep(100_000),
        "bomb-deep-map-100k": deep(100_000, "map"),
        "bomb-deep-indefinite-100k": b"\x9f" * 100_000 + b"\xff" * 100_000,
        "bomb-deep-tagged-100k": b"\xc0\x81" * 50_000 + b"\x00",
    }


def cbor_hostiles() -> dict[str, bytes]:
    """Small hostile CBOR items; written once to ``corpus/hostile/_cbor`` and fed to every target
    in :data:`CBOR_TARGETS` (the replay test does that)."""
    big = 2**63
    return {
        "bomb-deep-65": deep(65),
        "bomb-array-2p63": head(4, big, 8),
        "bomb-map-2p63": head(5, big, 8),
        "bomb-bytes-2p63": head(2, big, 8),
        "bomb-text-2p64m1": head(3, 2**64 - 1, 8),
        "bomb-array-2p32-short-body": head(4, 2**32 - 1, 4) + b"\x00" * 64,
        "bomb-bytes-1GiB-claimed": head(2, 2**30, 4) + b"\x00" * 16,
        "bomb-nested-claims": head(4, 2**31, 4) + head(5, 2**31, 4) + head(2, 2**31, 4),
        "indefinite-array": b"\x9f\x01\x02\xff",
        "indefinite-map": b"\xbf\x00\x01\xff",
        "indefinite-bytes": b"\x5f\x41\x00\x41\x01\xff",
        "indefinite-text": b"\x7f\x61a\x61b\xff",
        "indefinite-unterminated": b"\x9f\x01\x02",
        "duplicate-keys-int": b"\xa2\x00\x01\x00\x02",
        "duplicate-keys-text": b"\xa2\x61a\x01\x61a\x01",
        "unsorted-keys": b"\xa2\x01\x00\x00\x00",
        "non-shortest-int": b"\x1b" + bytes(7) + b"\x01",
        "non-shortest-length": b"\x98\x01\x00",
        "float": b"\xfb\x3f\xf0\x00\x00\x00\x00\x00\x00",
        "undefined": b"\xf7",
        "tag-bignum": b"\xc2\x49\x01" + bytes(8),
        "tag-self-describe": b"\xd9\xd9\xf7\xa0",
        "trailing-bytes": b"\xa0\x00",
        "empty": b"",
        "lone-break": b"\xff",
        "invalid-utf8": b"\x62\xff\xfe",
    }


def _hostile_records() -> dict[str, bytes]:
    """Records that are canonical CBOR but say hostile things."""
    wid = T.Fixed.writer_id()
    base = {0: 1, 1: 3, 2: wid, 3: bytes(16), 5: "x", 6: 2, 15: "message"}
    out = {}
    for name, patch in {
        "ts-2p64m1": {14: 2**64 - 1},
        "ts-2p63": {14: 2**63},
        "kind-2p16": {1: 2**16},
        "version-2": {0: 2},
        "class-4": {6: 4},
        "sigs-17": {13: [[wid, 1, b"s"]] * 17},
        "pred-unsorted": {7: [b"\x02" * 32, b"\x01" * 32]},
        "meta-negative": {11: {"a": -1}},
        "key-not-nfc": {1: 1, 4: "user/e\u0301", 6: 1, 15: "fact"},
        "type-129-bytes": {15: "a" * 129},
        "value-deep-64": {5: encoding.decode(deep(60))},
    }.items():
        m = dict(base)
        m.update(patch)
        try:
            out[f"record-{name}"] = encoding.encode(m)
        except Exception:
            out[f"record-{name}"] = cbor2.dumps(m, canonical=True)
    return out


def build() -> dict[str, dict[str, bytes]]:
    """{"seeds/<target>": {file: bytes}, "hostile/<target>": {...}} for every deterministic file."""
    out: dict[str, dict[str, bytes]] = {}

    def put(kind: str, target: str, name: str, data: bytes) -> None:
        out.setdefault(f"{kind}/{target}", {})[name] = data

    with deterministic_randomness():
        recs = T.real_records()
        for i, r in enumerate(recs):
            put("seeds", "record", f"real-{i}.cbor", r)
        for i, b in enumerate(T.real_batch_items()):
            put("seeds", "batch", f"real-{i}.cbor", b)
        put("seeds", "segment-payload", "real-2-batches.cbor", T.real_segment_payload())
        put("seeds", "descriptor", "real.cbor", descriptor.Descriptor(T.Fixed.VAULT).encode())
        for st in (slots.SlotType.DEVICE, slots.SlotType.PASSPHRASE):
            put("seeds", "slot-statement", f"{st.name.lower()}.cbor",
                T.slot_statement_plaintext(T.real_slot_cached(st)))
        for kind in EPOCH_KINDS:
            put("seeds", "envelope-payload", f"{kind.name.lower()}.cbor", T.envelope_payload(kind))
        pack = T.real_pack()
        put("seeds", "pack", "small.vmem", pack)
        put("seeds", "pack", "segments-only.pack", T.real_pack(complete=False))
        put("seeds", "vmem-unpack", "small.vmem", pack)
        put("seeds", "pack-index", "real.cbor", T.pack_parts(pack)[1])
        put("seeds", "pack-trailer", "real.bin", T.trailer_fields_seed())
        gmap = encoding.encode(T.grant_map())
        put("seeds", "grant-map", "write.cbor", gmap)
        put("seeds", "grant-map", "append.cbor", encoding.encode(T.grant_map(level=3)))
        put("seeds", "grant-file", "write.grant", T.armor_grant(gmap))
        put("seeds", "enroll-code", "qr.txt", qr_text(T.Fixed.VAULT, T.Fixed.ENROLL_SECRET, 1_900_000_000).encode())
        put("seeds", "enroll-code", "typed.txt", typed_code(T.Fixed.ENROLL_SECRET).encode())
        put("seeds", "enroll-req-plain", "real.cbor", T.enroll_request_plaintext())
        put("seeds", "enroll-resp-plain", "real.cbor", T.enroll_response_plaintext())
        put("seeds", "device-state-plain", "real.cbor", T.device_state_map())
        put("seeds", "installation", "real.cbor", T.installation_map())
        put("seeds", "cache-db", "real.sqlite", T.real_cache_db())

        # -- the required hostile cases
        for name, data in cbor_hostiles().items():
            put("hostile", "_cbor", f"{name}.cbor", data)
        for name, data in _hostile_records().items():
            put("hostile", "record", f"{name}.cbor", data)
        body, index, _ = T.pack_parts(pack)
        # A pack whose index claims 2**63 entries (and whose trailer claims the most a u32 can), with
        # a correct checksum, so the reader has to refuse it on the claim itself.
        put("hostile", "pack", "index-claims-2p63-entries.vmem",
            T.assemble_pack(body, head(4, 2**63, 8), count=2**32 - 1))
        put("hostile", "pack", "index-claims-2p32-entries.vmem",
            T.assemble_pack(body, head(4, 2**32 - 1, 4), count=2**32 - 1))
        put("hostile", "pack", "index-deep-1000.vmem", T.assemble_pack(body, deep(1000), count=1))
        put("hostile", "pack", "index-indefinite.vmem", T.assemble_pack(body, b"\x9f" + index[1:] + b"\xff", count=4))
        put("hostile", "pack", "index-duplicate-entry.vmem", T.assemble_pack(
            body, encoding.encode(encoding.decode(index)[:1] * 2), count=2))
        put("hostile", "pack", "trailer-offset-2p63.vmem", T.assemble_pack(
            body, index, fields=(2**63).to_bytes(8, "big") + len(index).to_bytes(4, "big") + (4).to_bytes(4, "big")))
        put("hostile", "pack-trailer", "count-2p32m1.bin", T.trailer_fields_seed()[:12] + b"\xff" * 4)
        put("hostile", "pack-trailer", "offset-2p64m1.bin", b"\xff" * 8 + T.trailer_fields_seed()[8:])
        put("hostile", "pack-trailer", "index-len-0.bin", T.trailer_fields_seed()[:8] + bytes(8))
        put("hostile", "pack-index", "claims-2p63.cbor", head(4, 2**63, 8))
        put("hostile", "grant-file", "no-armor.grant", b"hello")
        put("hostile", "grant-file", "not-base64.grant", b"-----BEGIN VMEM GRANT-----\n!!!\n-----END VMEM GRANT-----\n")
        put("hostile", "grant-file", "not-utf8.grant", b"\xff\xfe\x00")
        put("hostile", "grant-file", "list.grant", T.armor_grant(encoding.encode([1, 2, 3])))
        put("hostile", "grant-file", "deep.grant", T.armor_grant(deep(1000)))
        for name, m in {
            "vault-id-int": {2: 5}, "vault-id-short": {2: b"\x01"}, "not-after-text": {9: "tomorrow"},
            "not-after-2p64m1": {9: 2**64 - 1}, "seed-short": {6: b"\x01"}, "scopes-int": {5: 7},
            "scope-id-text": {5: [["x", 1, "work"]]}, "agent-bytes": {4: b"x"}, "trusted-int": {10: 5},
            "trusted-triples": {10: [[b"a", b"b", b"c"]]}, "class-9": {8: 9}, "grant-id-none": {3: None},
        }.items():
            g = T.grant_map()
            g.update(m)
            put("hostile", "grant-map", f"{name}.cbor", encoding.encode(g))
        for name, m in {
            "list": [1, 2], "short-list": [T.Fixed.DEVICE.recipient.public], "keys-swapped": {0: b"\x00" * 32},
            "name-bytes": {2: b"x"},
        }.items():
            put("hostile", "enroll-req-plain", f"{name}.cbor", encoding.encode(m))
        resp = encoding.decode(T.enroll_response_plaintext())
        for name, patch in {
            "slot-id-int": {0: 5}, "slot-id-text": {0: "x"}, "frontier-list": {4: [1]},
            "frontier-bad-entry": {4: {T.Fixed.CID: {T.Fixed.writer_id(): 5}}}, "generation-text": {5: "x"},
            "vault-int": {3: 1},
        }.items():
            m = dict(resp)
            m.update(patch)
            put("hostile", "enroll-resp-plain", f"{name}.cbor", encoding.encode(m))
        put("hostile", "enroll-resp-plain", "list.cbor", encoding.encode([1, 2]))
        put("hostile", "enroll-code", "huge.txt", b"VMEM1:" + b"A" * 10_000)
        put("hostile", "enroll-code", "typed-overflow.txt", b"ZZZZ-" * 13 + b"Z")
        put("hostile", "enroll-code", "nul.txt", b"VMEM1:\x00")
    return out


def write(force: bool = False, check: bool = False) -> list[str]:
    """Write (or, with ``check``, compare) the corpus; return the differences found."""
    diffs: list[str] = []
    root = SEEDS.parent
    for target, makers in hpke_makers().items():  # first: the derived seeds below read them
        directory = SEEDS / target
        for name, maker in makers.items():
            path = directory / name
            if check:
                if not path.exists():
                    diffs.append(str(path.relative_to(root)))
                continue
            if force or not path.exists():
                directory.mkdir(parents=True, exist_ok=True)
                path.write_bytes(maker())
                T._SLOT_CACHE.clear()
    for rel, files in build().items():
        directory = root / rel
        for name, data in sorted(files.items()):
            path = directory / name
            if check:
                if not path.exists() or (rel not in SCHEMA_SEEDS and path.read_bytes() != data):
                    diffs.append(str(path.relative_to(root)))
                continue
            directory.mkdir(parents=True, exist_ok=True)
            if not path.exists() or path.read_bytes() != data:
                path.write_bytes(data)
    return diffs


def hpke_makers():
    return {
        "slot": {f"{t.name.lower()}.slot": (lambda t=t: T.real_slot(t))
                 for t in (slots.SlotType.DEVICE, slots.SlotType.PASSPHRASE, slots.SlotType.RECOVERY)},
        "envelope": {f"{k.name.lower()}.env": (lambda k=k: T.real_envelope(k)) for k in EPOCH_KINDS},
        "segment": {"real.seg": T.real_segment},
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="compare with the checked-in corpus; write nothing")
    ap.add_argument("--force", action="store_true", help="also rewrite the HPKE-bearing seeds")
    args = ap.parse_args(argv)
    diffs = write(force=args.force, check=args.check)
    if args.check and diffs:
        print("corpus differs from make_corpus output:", *diffs, sep="\n  ")
        return 1
    print("corpus up to date" if args.check else f"corpus written under {SEEDS.parent}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
