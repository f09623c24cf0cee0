"""The hostile cases the issue names, measured: a pack claiming 2**63 entries, CBOR bombs (huge
declared lengths, 100 000 levels of nested arrays and maps, indefinite-length nesting), indefinite-
length items, duplicate map keys and non-canonical encodings, through every decoder that reads CBOR.

Each must be refused with a specific error, within a time bound, and within a memory bound measured
two ways: ``tracemalloc`` (the peak of Python-level allocations while decoding) in this process, and
a child process whose address space is capped with ``RLIMIT_AS`` (so a C-level allocation of a claimed
length could not succeed silently either).

Runs on pytest's main thread (the child is a separate interpreter).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import pytest
from camillo.errors import CanonicalError, DamagedFile, VaultError

from . import make_corpus
from .fuzzlib import HOSTILE, check, deep, head, load_dir

ROOT = Path(__file__).resolve().parents[2]
WORLD_CBOR = {"enroll-req-plain", "enroll-resp-plain"}
CBOR_PLAIN = [t for t in make_corpus.CBOR_TARGETS if t not in WORLD_CBOR]
TRACED_PEAK_MIB = 48  # Python-level allocations while one bomb is refused
BOMB_SECONDS = 2.0


def _bombs() -> dict[str, bytes]:
    small = {p.stem: p.read_bytes() for p in sorted((HOSTILE / "_cbor").iterdir())}
    return {**small, **make_corpus.large_hostiles()}


@pytest.mark.parametrize("name", sorted(make_corpus.CBOR_TARGETS))
def test_every_cbor_bomb_is_refused_fast_and_small(request, name):
    targets = request.getfixturevalue("world").targets() if name in WORLD_CBOR else request.getfixturevalue("plain")
    target = targets[name]
    for bomb, data in _bombs().items():
        tracemalloc.start()
        start = time.perf_counter()
        try:
            label = check(target, data)
        finally:
            elapsed = time.perf_counter() - start
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        assert label not in ("accepted",), (name, bomb)
        assert elapsed < BOMB_SECONDS, (name, bomb, elapsed)
        assert peak < TRACED_PEAK_MIB * 2**20, (name, bomb, peak / 2**20)


def test_pack_claiming_2_63_entries_is_refused_on_the_claim(plain, tmp_path):
    """The trailer can claim at most 2**32 - 1 entries (u32) and is checked against the file size;
    the index itself (CBOR, under a correct checksum) claims 2**63: refused before any allocation."""
    body, _, _ = _pack_parts()
    from .targets import assemble_pack

    for index, count in ((head(4, 2**63, 8), 2**32 - 1), (head(4, 2**63, 8), 1), (head(4, 2**64 - 1, 8), 0),
                         (head(5, 2**63, 8), 1), (b"\x9f" + head(4, 2**63, 8) + b"\xff", 1)):
        data = assemble_pack(body, index, count=count)
        tracemalloc.start()
        start = time.perf_counter()
        try:
            with pytest.raises((DamagedFile, CanonicalError)) as info:
                plain["pack"].run(data)
        finally:
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
        assert time.perf_counter() - start < BOMB_SECONDS
        assert peak < TRACED_PEAK_MIB * 2**20
        assert "fuzz.vmem" in str(info.value)


def _pack_parts():
    from .targets import pack_parts, real_pack

    return pack_parts(real_pack())


@pytest.mark.parametrize("data, what", [
    (b"\xa2\x00\x01\x00\x02", "duplicate keys"),
    (b"\xbf\x00\x01\xff", "indefinite-length map"),
    (b"\x9f\xff", "indefinite-length array"),
    (b"\x5f\x41\x00\xff", "indefinite-length bytes"),
    (b"\x18\x05", "non-shortest integer"),
    (b"\xa2\x01\x00\x00\x00", "unsorted keys"),
])
def test_non_canonical_encodings_of_real_objects_are_refused(plain, data, what):
    """Beyond the generic items: a real record, batch and descriptor re-encoded with exactly one
    non-canonical construct (so everything else about them is right)."""
    import cbor2

    from .fuzzlib import raw_encode, rng_for

    del data  # the parameter names the construct; the inputs below carry it inside real objects
    rng = rng_for(what)
    for name in ("record", "batch", "descriptor", "segment-payload", "envelope-payload", "slot-statement"):
        seed = load_dir(make_corpus.SEEDS / name)[0]
        obj = cbor2.loads(seed)
        for _ in range(20):
            bad = raw_encode(obj, rng, weird=0.5)
            if bad == seed:
                continue
            label = check(plain[name], bad)
            assert label != "accepted", (name, what, bad[:40])


def test_depth_limit_holds_at_every_nesting_of_100k(plain):
    """Nesting at 64 levels is allowed by the profile, at 65 refused; 100 000 levels are refused as
    fast as 65 (no recursion through the levels)."""
    from camillo import encoding

    assert encoding.decode(deep(63)) is not None
    with pytest.raises(CanonicalError):
        encoding.decode(deep(65))
    for kind in ("array", "map"):
        start = time.perf_counter()
        with pytest.raises(CanonicalError):
            encoding.decode(deep(100_000, kind))
        assert time.perf_counter() - start < 1.0


CHILD = r"""
import json, resource, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from tests.fuzz import make_corpus
from tests.fuzz.fuzzlib import HOSTILE, load_dir, outcome
from tests.fuzz.targets import plain_targets

targets = plain_targets(Path(tempfile.mkdtemp()))
vm = int(next(l for l in open("/proc/self/status") if l.startswith("VmSize")).split()[1]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (vm + int(sys.argv[2]) * 2**20, resource.RLIM_INFINITY))
bombs = load_dir(HOSTILE / "_cbor") + list(make_corpus.large_hostiles().values())
report = {"inputs": 0, "complaints": []}
for name, t in targets.items():
    if name == "vmem-unpack":
        continue  # writes and fsyncs a folder per input: covered in-process by test_corpus
    inputs = load_dir(HOSTILE / name) + (bombs if name in make_corpus.CBOR_TARGETS else [])
    for data in inputs:
        report["inputs"] += 1
        label, complaint = outcome(t, data)
        if complaint:
            report["complaints"].append(f"{name}: {complaint}")
print(json.dumps(report))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs /proc to measure the address space")
def test_hostile_corpus_under_an_address_space_limit(tmp_path):
    """Every hand-made hostile input, through every plain decoder, in a child whose address space
    may grow by at most 256 MiB: a decoder that trusted a claimed length would die of MemoryError
    (reported as a leak) or be killed."""
    env = {**os.environ, "CAMILLO_HOME": str(tmp_path / "home"), "CAMILLO_INSECURE_TEST_KDF": "1",
           "CAMILLO_KEYCHAIN": "none"}
    proc = subprocess.run([sys.executable, "-c", CHILD, str(ROOT), "256"], capture_output=True, text=True,
                          timeout=300, env=env, cwd=str(ROOT))
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    assert report["inputs"] > 300
    assert report["complaints"] == []


def test_an_error_is_a_vault_error_with_a_message():
    """The contract check itself: it refuses to pass a bare exception or an empty message (checked
    with ``outcome``, which judges without saving the input as a crash)."""
    from .fuzzlib import Target, outcome

    def leaks(_: bytes) -> None:
        raise KeyError("x")

    def silent(_: bytes) -> None:
        raise VaultError("")

    def unnamed(_: bytes) -> None:
        raise VaultError("something is wrong")

    for fn in (leaks, silent):
        assert outcome(Target("self-test", fn), b"x")[1] is not None
    complaint = outcome(Target("self-test", unnamed, names=["VMEM"]), b"x")[1]
    assert complaint is not None and "does not name" in complaint
