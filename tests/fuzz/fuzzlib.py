"""The fuzzing toolkit: mutators, the outcome check, input counters and the run profiles.

Every fuzz test feeds bytes to a :class:`Target` (one decoder of the core, wired up in
:mod:`tests.fuzz.targets`) through :func:`check`, which enforces the contract of issue 10:

* the decoder returns, or raises one of the target's expected errors, which are
  :class:`camillo.errors.VaultError` subclasses (a target may also list the core's documented
  "not for this key" signal, ``CryptoFailure``, where the product treats it as "skip this file");
* the error's message is not empty and names the thing (the file, or the object's label);
* nothing else leaks (``KeyError``, ``IndexError``, ``struct.error``, ``RecursionError``,
  ``MemoryError``, ``cbor2`` exceptions...);
* each input finishes within :data:`TIME_BUDGET` seconds.

Inputs that break the contract are saved (see :func:`save_crash`) so they can join the regression
corpus in ``tests/fuzz/corpus/regressions/<target>/``, which :mod:`tests.fuzz.test_corpus` replays.

Profiles: ``CAMILLO_FUZZ=ci`` (default: small, derandomized, a fixed seed) or ``long`` (what
``scripts/fuzz`` sets: ``CAMILLO_FUZZ_SCALE`` times more inputs, a fresh random seed unless
``CAMILLO_FUZZ_SEED`` is set, crashes saved straight into the regression corpus).

Single-threaded: the counters are plain module globals used from pytest's main thread.
"""

from __future__ import annotations

import hashlib
import os
import random
import resource
import struct
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cbor2
from camillo.errors import VaultError
from hypothesis import HealthCheck, settings

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
SEEDS = CORPUS / "seeds"
HOSTILE = CORPUS / "hostile"
REGRESSIONS = CORPUS / "regressions"

PROFILE = os.environ.get("CAMILLO_FUZZ", "ci")
LONG = PROFILE == "long"
SCALE = int(os.environ.get("CAMILLO_FUZZ_SCALE", "50")) if LONG else 1
SEED = int(os.environ.get("CAMILLO_FUZZ_SEED", "0")) or (random.SystemRandom().getrandbits(32) if LONG else 20260101)
TIME_BUDGET = float(os.environ.get("CAMILLO_FUZZ_BUDGET", "3.0"))  # seconds per input (generous: shared CI cores)
RSS_GROWTH_BUDGET_MIB = 256  # the peak RSS may grow by at most this much during one fuzz loop

# Counters, reported by tests/fuzz/conftest.py at the end of the session.
INPUTS: Counter[str] = Counter()
OUTCOMES: dict[str, Counter[str]] = defaultdict(Counter)
CRASHES: dict[str, list[str]] = defaultdict(list)


def iterations(ci: int) -> int:
    """How many mutated inputs a loop tries: ``ci`` in CI, ``ci * CAMILLO_FUZZ_SCALE`` when long."""
    return ci * SCALE


def hypothesis_settings(ci_examples: int) -> settings:
    """Settings for a property-based fuzz test: derandomized and database-free in CI."""
    return settings(
        max_examples=ci_examples * SCALE,
        derandomize=not LONG,
        database=None,
        deadline=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
    )


def rng_for(name: str) -> random.Random:
    """A random generator for one loop: the same sequence in every CI run."""
    return random.Random(f"{SEED}/{name}")


# ---------------------------------------------------------------------------------------------
# Targets and the outcome check


@dataclass
class Target:
    """One decoder of the core, bytes in.

    ``run`` calls the product code; ``expected`` are the errors that count as a clean refusal;
    ``names`` are substrings of which at least one must appear in the message (None when the
    caller of this decoder adds the name, as for records and batches: the vault wraps their errors
    with the segment's name, which the vault-level tests check).  ``fields`` are (offset, size) of
    binary length/count fields that the inflation mutator overwrites (negative: from the end).
    """

    name: str
    run: Callable[[bytes], Any]
    expected: tuple[type[BaseException], ...] = (VaultError,)
    names: Sequence[str] | Callable[[bytes], Sequence[str]] | None = None
    fields: Sequence[tuple[int, int]] = ()
    cbor: bool = False  # the input is (meant to be) one CBOR item
    text: bool = False  # the input is text (a grant file, an enrollment code)
    extra: dict[str, Any] = field(default_factory=dict)

    def names_for(self, data: bytes) -> Sequence[str] | None:
        return self.names(data) if callable(self.names) else self.names


class Skip(str):
    """Returned by a harness that could not even build the input (say, a plaintext too large to
    seal): the product never saw it.  Counted as ``skipped``."""


class Ignored(str):
    """Returned when the product ignores the input by design (an envelope or slot that is not for
    this key, exactly what the reader does with it).  Counted as ``ignored``."""


class ContractBroken(AssertionError):
    """A decoder broke the hostile-input contract on one input."""


def save_crash(target: str, data: bytes) -> Path:
    """Keep a crashing input: in the regression corpus on long runs (commit it), else in a temp dir."""
    digest = hashlib.sha256(data).hexdigest()[:16]
    if LONG or os.environ.get("CAMILLO_FUZZ_SAVE") == "1":
        base = REGRESSIONS / target
    else:
        base = Path(tempfile.gettempdir()) / "camillo-fuzz-crashes" / target
    base.mkdir(parents=True, exist_ok=True)
    path = base / f"{digest}.bin"
    path.write_bytes(data)
    return path


def outcome(target: Target, data: bytes) -> tuple[str, str | None]:
    """Run one input; return (outcome label, complaint or None)."""
    INPUTS[target.name] += 1
    start = time.perf_counter()
    complaint = None
    try:
        result = target.run(data)
        label = "skipped" if isinstance(result, Skip) else "ignored" if isinstance(result, Ignored) else "accepted"
    except target.expected as exc:
        label = type(exc).__name__
        message = str(exc)
        names = target.names_for(data)
        if not message.strip():
            complaint = f"{label} with an empty message"
        elif (isinstance(exc, VaultError) and names is not None and not getattr(exc, "named_by_caller", None)
              and not any(n in message or n == exc.file for n in names)):
            complaint = f"{label} does not name the thing ({list(names)}): {message!r}"
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        label = f"LEAK:{type(exc).__module__}.{type(exc).__name__}"
        import traceback

        where = " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"
                            for f in reversed(traceback.extract_tb(exc.__traceback__)[-4:]))
        complaint = f"leaked {type(exc).__module__}.{type(exc).__name__}: {str(exc)[:300]} at {where}"
    elapsed = time.perf_counter() - start
    if complaint is None and elapsed > TIME_BUDGET:
        complaint = f"took {elapsed:.2f} s (budget {TIME_BUDGET} s)"
    OUTCOMES[target.name][label] += 1
    return label, complaint


def check(target: Target, data: bytes) -> str:
    """Run one input and raise :class:`ContractBroken` (after saving it) when the contract breaks."""
    label, complaint = outcome(target, data)
    if complaint is not None:
        path = save_crash(target.name, data)
        CRASHES[target.name].append(f"{path.name}: {complaint}")
        raise ContractBroken(f"{target.name}: {complaint} (input saved to {path})")
    return label


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fuzz_loop(target: Target, seeds: Sequence[bytes], n: int, pool: Sequence[bytes] = ()) -> Counter[str]:
    """Mutate seeds ``n`` times through :func:`mutate`; fail listing every broken input."""
    assert seeds, f"no seeds for {target.name}"
    rng = rng_for(target.name)
    failures: list[str] = []
    labels: Counter[str] = Counter()
    rss_before = peak_rss_mib()
    for seed in seeds:  # the seeds themselves first
        try:
            labels[check(target, seed)] += 1
        except ContractBroken as exc:
            failures.append(str(exc))
    for _ in range(n):
        data = mutate(rng, rng.choice(seeds), target, pool or seeds)
        try:
            labels[check(target, data)] += 1
        except ContractBroken as exc:
            failures.append(str(exc))
    growth = peak_rss_mib() - rss_before
    assert not failures, f"{len(failures)} input(s) broke the contract:\n" + "\n".join(failures[:20])
    assert growth < RSS_GROWTH_BUDGET_MIB, f"{target.name}: peak RSS grew by {growth:.0f} MiB"
    return labels


# ---------------------------------------------------------------------------------------------
# CBOR helpers: a tolerant head scanner and a deliberately non-canonical encoder

_HEAD_WIDTH = {24: 1, 25: 2, 26: 4, 27: 8}


def cbor_heads(data: bytes, limit: int = 4096) -> list[tuple[int, int, int]]:
    """(offset, major type, head length) of the CBOR heads found scanning ``data`` linearly.
    Tolerant: stops at the first impossible head; string contents are skipped."""
    out = []
    pos = 0
    while pos < len(data) and len(out) < limit:
        b = data[pos]
        major, ai = b >> 5, b & 31
        if ai < 24 or ai == 31:
            arg, width = ai, 0
        elif ai in _HEAD_WIDTH:
            width = _HEAD_WIDTH[ai]
            if pos + 1 + width > len(data):
                break
            arg = int.from_bytes(data[pos + 1 : pos + 1 + width], "big")
        else:
            break
        out.append((pos, major, 1 + width))
        pos += 1 + width
        if major in (2, 3) and ai != 31:
            pos += arg
    return out


def head(major: int, arg: int, width: int | None = None) -> bytes:
    """A CBOR head with ``arg`` encoded on ``width`` extra bytes (None: the shortest form)."""
    if width is None:
        width = 0 if arg < 24 else 1 if arg < 256 else 2 if arg < 65536 else 4 if arg < 2**32 else 8
    if width == 0:
        return bytes([major << 5 | arg])
    ai = {1: 24, 2: 25, 4: 26, 8: 27}[width]
    return bytes([major << 5 | ai]) + arg.to_bytes(width, "big")


def _width(rng: random.Random, arg: int, weird: float) -> int | None:
    if rng.random() >= weird:
        return None
    return rng.choice([w for w in (1, 2, 4, 8) if arg < 256**w] or [8])


def raw_encode(obj: Any, rng: random.Random, weird: float = 0.15) -> bytes:
    """Encode ``obj`` as CBOR, each node non-canonical with probability ``weird``: non-shortest
    heads, indefinite lengths, unsorted or duplicated map keys."""
    if obj is None:
        return b"\xf6"
    if obj is True:
        return b"\xf5"
    if obj is False:
        return b"\xf4"
    if isinstance(obj, int):
        if obj >= 0:
            return head(0, obj, _width(rng, obj, weird)) if obj < 2**64 else b"\xc2" + raw_encode(
                obj.to_bytes((obj.bit_length() + 7) // 8, "big"), rng, 0)
        n = -1 - obj
        return head(1, n, _width(rng, n, weird)) if n < 2**64 else b"\xc3" + raw_encode(
            n.to_bytes((n.bit_length() + 7) // 8, "big"), rng, 0)
    if isinstance(obj, float):
        return b"\xfb" + struct.pack(">d", obj)
    if isinstance(obj, (bytes, str)):
        major = 2 if isinstance(obj, bytes) else 3
        raw = obj if isinstance(obj, bytes) else obj.encode("utf-8", "surrogatepass")
        if len(raw) > 1 and rng.random() < weird / 2:
            cut = rng.randrange(1, len(raw))
            if major == 3:  # keep chunks valid UTF-8 where possible
                while cut < len(raw) and (raw[cut] & 0xC0) == 0x80:
                    cut += 1
            return bytes([major << 5 | 31]) + head(major, cut) + raw[:cut] + head(major, len(raw) - cut) + raw[cut:] + b"\xff"
        return head(major, len(raw), _width(rng, len(raw), weird)) + raw
    if isinstance(obj, (list, tuple)):
        items = b"".join(raw_encode(x, rng, weird) for x in obj)
        if rng.random() < weird / 2:
            return b"\x9f" + items + b"\xff"
        return head(4, len(obj), _width(rng, len(obj), weird)) + items
    if isinstance(obj, dict):
        pairs = [(raw_encode(k, rng, weird), raw_encode(v, rng, weird)) for k, v in obj.items()]
        pairs.sort(key=lambda kv: (len(kv[0]), kv[0]))
        if pairs and rng.random() < weird:
            r = rng.random()
            if r < 0.4:
                i = rng.randrange(len(pairs))
                pairs.insert(rng.randrange(len(pairs) + 1), (pairs[i][0], raw_encode(rng.choice(ODD_VALUES), rng, 0)))
            elif r < 0.7:
                rng.shuffle(pairs)
            else:
                pairs.reverse()
        body = b"".join(k + v for k, v in pairs)
        if rng.random() < weird / 2:
            return b"\xbf" + body + b"\xff"
        return head(5, len(pairs), _width(rng, len(pairs), weird)) + body
    # What a decoded hostile value may still hold: undefined, simple values, tags. cbor2 writes them.
    return cbor2.dumps(obj)


def deep(levels: int, kind: str = "array") -> bytes:
    """``levels`` nested one-element arrays (or single-entry maps) around 0."""
    if kind == "array":
        return b"\x81" * levels + b"\x00"
    return b"\xa1\x00" * levels + b"\x00"


# Values a hostile writer likes: wrong types, boundary integers, odd lengths, nesting.
ODD_VALUES: list[Any] = [
    None, True, False, 0, 1, 23, 24, 255, 256, 2**16, 2**31 - 1, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 1,
    -1, -(2**63), -(2**64), b"", b"\x00", bytes(15), bytes(16), bytes(17), bytes(31), bytes(32), bytes(33),
    bytes(1216), b"\xff" * 64, "", "a", "x" * 600, "user/home_city", "\u0000", "e\u0301", "../../etc/passwd",
    "\u202e\u200b", [], [[]], [b"\x00" * 32], {}, {0: 0}, {"text": "t"}, {b"k": 1}, {0: [0, [0, [0]]]},
    [[[[[[[[[[[[[[[[[[[[0]]]]]]]]]]]]]]]]]]]],
]


def _random_value(rng: random.Random, depth: int = 0) -> Any:
    r = rng.random()
    if r < 0.55 or depth > 3:
        return rng.choice(ODD_VALUES)
    if r < 0.7:
        return rng.randbytes(rng.choice([0, 1, 16, 32, 33, 64, 1216]))
    if r < 0.85:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    key_kind = rng.choice(["int", "str", "bytes"])
    out: dict[Any, Any] = {}
    for _ in range(rng.randrange(4)):
        k = rng.randrange(20) if key_kind == "int" else rng.choice(["a", "text", "role", "b"]) if key_kind == "str" \
            else rng.randbytes(rng.choice([1, 32]))
        out[k] = _random_value(rng, depth + 1)
    return out


def _nodes(obj: Any, path: tuple = ()) -> list[tuple]:
    """Paths to every node of a decoded CBOR tree (list indexes and map keys)."""
    out = [path]
    if isinstance(obj, list):
        for i, x in enumerate(obj):
            out += _nodes(x, (*path, i))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            out += _nodes(v, (*path, k))
    return out


def _get(obj: Any, path: tuple) -> Any:
    for p in path:
        obj = obj[p]
    return obj


def mutate_tree(rng: random.Random, obj: Any) -> Any:
    """Replace, drop, add or retype one node of a decoded CBOR tree (the input is not modified)."""
    import copy

    obj = copy.deepcopy(obj)
    paths = _nodes(obj)
    path = rng.choice(paths)
    op = rng.random()
    if not path:
        return _random_value(rng) if op < 0.3 else [obj] if op < 0.5 else obj
    parent = _get(obj, path[:-1])
    last = path[-1]
    if op < 0.55:
        parent[last] = _random_value(rng)
    elif op < 0.7:
        if isinstance(parent, list):
            del parent[last]
        else:
            parent.pop(last)
    elif op < 0.8 and isinstance(parent, dict):
        k = rng.choice([rng.randrange(32), 2**16, "x", b"k"])
        parent[k] = _random_value(rng)
    elif op < 0.9 and isinstance(parent, list):
        parent.insert(rng.randrange(len(parent) + 1), _random_value(rng))
    else:
        value = parent[last]
        if isinstance(value, bytes):
            parent[last] = value[: rng.randrange(len(value) + 1)] if value and rng.random() < 0.5 else value + rng.randbytes(rng.randrange(1, 40))
        elif isinstance(value, int) and not isinstance(value, bool):
            parent[last] = rng.choice([value + 1, value - 1, 0, 2**63, 2**64 - 1, -value - 1])
        elif isinstance(value, str):
            parent[last] = value * rng.randrange(2, 5) if value else "\u0000"
        else:
            parent[last] = [value]
    return obj


# ---------------------------------------------------------------------------------------------
# Byte mutators

INTERESTING_BYTES = [0x00, 0x01, 0x17, 0x18, 0x1B, 0x1F, 0x3B, 0x5B, 0x5F, 0x7B, 0x7F, 0x80, 0x9B, 0x9F, 0xBB,
                     0xBF, 0xC0, 0xD8, 0xF5, 0xF6, 0xF7, 0xF9, 0xFB, 0xFF]
HUGE = [2**31 - 1, 2**31, 2**32 - 1, 2**63 - 1, 2**63, 2**64 - 1]


def flip_bits(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return bytes([rng.randrange(256)])
    buf = bytearray(data)
    for _ in range(rng.choice([1, 1, 1, 2, 3, 8])):
        buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
    return bytes(buf)


def set_bytes(rng: random.Random, data: bytes) -> bytes:
    if not data:
        return bytes([rng.choice(INTERESTING_BYTES)])
    buf = bytearray(data)
    for _ in range(rng.randrange(1, 4)):
        buf[rng.randrange(len(buf))] = rng.choice(INTERESTING_BYTES) if rng.random() < 0.7 else rng.randrange(256)
    return bytes(buf)


def truncate(rng: random.Random, data: bytes) -> bytes:
    if len(data) < 2:
        return b""
    return data[: rng.randrange(len(data))] if rng.random() < 0.7 else data[rng.randrange(1, len(data)):]


def extend(rng: random.Random, data: bytes) -> bytes:
    r = rng.random()
    if r < 0.4:
        return data + rng.randbytes(rng.randrange(1, 64))
    if r < 0.7:
        return data + data[-rng.randrange(1, max(2, min(len(data), 4096))):]
    return data + bytes(rng.choice([1, 7, 4096]))


def delete_or_duplicate(rng: random.Random, data: bytes) -> bytes:
    if len(data) < 2:
        return data + data
    i = rng.randrange(len(data))
    j = min(len(data), i + rng.randrange(1, 64))
    return data[:i] + data[j:] if rng.random() < 0.5 else data[:j] + data[i:j] + data[j:]


def splice(rng: random.Random, data: bytes, pool: Sequence[bytes]) -> bytes:
    other = rng.choice(pool)
    i = rng.randrange(len(data) + 1)
    j = rng.randrange(len(other) + 1)
    return data[:i] + other[j:] if rng.random() < 0.5 else other[:j] + data[i:]


def inflate_cbor_length(rng: random.Random, data: bytes) -> bytes:
    """Rewrite one CBOR head's argument (a length or count) to a huge value, or make it indefinite."""
    heads = cbor_heads(data)
    if not heads:
        return data
    pos, major, hlen = rng.choice(heads)
    if major in (2, 3, 4, 5) and rng.random() < 0.25:
        new = bytes([major << 5 | 31])
    else:
        new = head(major, rng.choice([*HUGE, 2 ** 16, 10 ** 6]), 8 if rng.random() < 0.5 else None)
    return data[:pos] + new + data[pos + hlen:]


def inflate_field(rng: random.Random, data: bytes, fields: Sequence[tuple[int, int]]) -> bytes:
    """Overwrite one binary length/count field (big-endian) with a boundary value."""
    if not fields or not data:
        return data
    offset, size = rng.choice(fields)
    if offset < 0:
        offset += len(data)
    if not 0 <= offset <= len(data) - size:
        return data
    value = rng.choice([0, 1, 2**(8 * size) - 1, 2**(8 * size - 1), len(data), len(data) + 1, 2**(8 * size - 1) - 1])
    return data[:offset] + (value % 2**(8 * size)).to_bytes(size, "big") + data[offset + size:]


def mutate(rng: random.Random, data: bytes, target: Target, pool: Sequence[bytes]) -> bytes:
    """One to three stacked mutations chosen for the target's kind of input."""
    ops: list[Callable[[bytes], bytes]] = [
        lambda d: flip_bits(rng, d),
        lambda d: set_bytes(rng, d),
        lambda d: truncate(rng, d),
        lambda d: extend(rng, d),
        lambda d: delete_or_duplicate(rng, d),
        lambda d: splice(rng, d, pool),
    ]
    if target.fields:
        ops += [lambda d: inflate_field(rng, d, target.fields)] * 3
    if target.cbor:
        ops += [lambda d: inflate_cbor_length(rng, d)] * 2 + [lambda d: _tree_op(rng, d)] * 4
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        data = rng.choice(ops)(data)
    return data


def _tree_op(rng: random.Random, data: bytes) -> bytes:
    try:
        obj = cbor2.loads(data)
    except Exception:
        return flip_bits(rng, data)
    try:
        return raw_encode(mutate_tree(rng, obj), rng, weird=rng.choice([0.0, 0.0, 0.05, 0.3]))
    except (TypeError, ValueError, RecursionError):
        return flip_bits(rng, data)


def load_dir(directory: Path) -> list[bytes]:
    if not directory.is_dir():
        return []
    return [p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file() and not p.name.startswith(".")]
