"""Search over the materialised state: full text with field modifiers, and optional semantic search.

Search is derived, never stored in the vault (spec §19.5).  Full-text search uses the state's SQLite
FTS5 index.  A query is words and quoted phrases (all must match; ``word*`` matches a prefix) plus
modifiers, combined with AND:

=====================  ==========================================================
``type:message``        semantic type (message, fact, preference, a vendor type...)
``key:user/home*``      fact key, ``*`` at the end for a prefix
``agent:NAME``          written by the device or agent grant with this name
``compartment:work``    in this compartment
``class:user``          effective authority class (user, observed, inferred, external)
``is:conflict``         a candidate of an open conflict
``is:pending``          waiting in the inbox for confirmation
``is:hidden``           forgotten (hidden by a DEL)
``before:2026-01-31``   written before this date (UTC); ``after:`` likewise
``conversation:ID``     in this conversation
=====================  ==========================================================

Semantic search is optional, behind the :class:`Embedder` protocol (``embed``, ``dimension``,
``model_id``).  Vectors are derived and disposable: they are kept in the local state database
(encrypted page by page), keyed by the embedder's model id, one byte per dimension (int8 and a
scale), and are recomputed when missing.  They are scored a chunk at a time, keeping only the best:
with numpy installed (the ``semantic`` extra) each chunk is one matrix product, without it a loop
per record.  Ranking blends cosine similarity with recency, and for
``summary`` records with VaultMem's significance ``σ = (1 − e^(−κ·freq))·e^(−λ·days)``.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import calendar
import hashlib
import math
import re
import struct
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, SupportsIndex, runtime_checkable

from .errors import UsageError
from .records import Authority
from .state import RecordView, State

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

MODIFIERS = ("type", "key", "agent", "compartment", "class", "is", "before", "after", "conversation")
_TOKEN = re.compile(r'(\w+):"([^"]*)"|(\w+):(\S+)|"([^"]*)"|(\S+)')


@dataclass
class Query:
    words: list[str]
    phrases: list[str]
    filters: dict[str, list[str]]

    @property
    def has_text(self) -> bool:
        return bool(self.words or self.phrases)


def parse(text: str) -> Query:
    words: list[str] = []
    phrases: list[str] = []
    filters: dict[str, list[str]] = {}
    for m in _TOKEN.finditer(text):
        name = m.group(1) or m.group(3)
        value = m.group(2) if m.group(1) else m.group(4)
        if name is not None and name.lower() in MODIFIERS:
            filters.setdefault(name.lower(), []).append(value)
        elif m.group(5) is not None:
            if m.group(5).strip():
                phrases.append(m.group(5))
        else:
            token = m.group(0)
            if token.strip():
                words.append(token)
    return Query(words, phrases, filters)


def _fts_string(s: str) -> str:
    return '"' + s.replace('"', '""') + '"'


def _fts_query(q: Query) -> str:
    parts = []
    for w in q.words:
        prefix = w.endswith("*")
        core = w.rstrip("*")
        # FTS5 tokenises the indexed text; quote each user word so operators in it are literal.
        tokens = [t for t in re.split(r"[^\w]+", core) if t]
        for i, t in enumerate(tokens):
            parts.append(_fts_string(t) + ("*" if prefix and i == len(tokens) - 1 else ""))
    for p in q.phrases:
        parts.append(_fts_string(p))
    return " AND ".join(parts)


def _day(value: str, name: str) -> int:
    try:
        return calendar.timegm(time.strptime(value, "%Y-%m-%d"))
    except ValueError:
        raise UsageError(f"{name}: expects a date such as 2026-01-31, not '{value}'") from None


def search(state: State, text: str, *, limit: int = 200) -> list[RecordView]:
    """Full-text search with modifiers; results ranked by relevance (bm25), or by time without words."""
    q = parse(text)
    roster = state.roster
    state.ensure_search()
    where = ["r.valid = 1", "r.kind IN (1, 3)"]
    args: list[object] = []
    if "hidden" not in q.filters.get("is", []):
        where.append("r.hidden = 0")
    for value in q.filters.get("type", []):
        where.append("r.type = ?")
        args.append(value)
    # Keys, pending inferences and conflicts are few next to the messages: each of those modifiers
    # picks its candidates from the keyed records (a partial index) or the facts table first, so the
    # time-ordered scan that finds the first page does not walk a million messages to find them.
    for value in q.filters.get("key", []):
        if value.endswith("*"):
            where.append("r.rowid IN (SELECT rowid FROM records WHERE key IS NOT NULL AND key LIKE ? ESCAPE '\\')")
            args.append(value[:-1].replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%")
        else:
            where.append("r.rowid IN (SELECT rowid FROM records WHERE key IS NOT NULL AND key = ?)")
            args.append(value)
    for value in q.filters.get("conversation", []):
        where.append("r.conversation = ?")
        args.append(value)
    for value in q.filters.get("compartment", []):
        cid = roster.compartment_id(value)
        if cid is None:
            raise UsageError(f"compartment:{value}: no such compartment (have {', '.join(roster.compartments.values())})")
        where.append("r.compartment = ?")
        args.append(cid)
    for value in q.filters.get("agent", []):
        needle = value.lower()
        writers = [p.writer_id for p in roster.principals.values()
                   if needle in ((p.grant.agent if p.grant else p.name) or "").lower()]
        if not writers:
            return []
        where.append(f"r.writer IN ({','.join('?' * len(writers))})")
        args += writers
    for value in q.filters.get("class", []):
        where.append("r.effective = ?")
        args.append(int(Authority.parse(value)))
    for value in q.filters.get("before", []):
        where.append("r.ts < ?")
        args.append(_day(value, "before"))
    for value in q.filters.get("after", []):
        where.append("r.ts >= ?")
        args.append(_day(value, "after") + 86400)
    for value in q.filters.get("is", []):
        if value == "conflict":
            where.append("r.rowid IN (SELECT k.rowid FROM facts f JOIN records k ON k.compartment = f.compartment "
                         "AND k.key = f.key WHERE f.status = 'conflict' AND instr(f.candidates, k.id) > 0)")
        elif value == "pending":
            where.append("r.id IN (SELECT id FROM proposals)")
        elif value != "hidden":
            raise UsageError(f"is:{value}: use is:conflict, is:pending or is:hidden")
    if q.has_text:
        sql = (f"SELECT r.id FROM search s JOIN records r ON r.rowid = s.rowid WHERE search MATCH ? AND "
               f"{' AND '.join(where)} ORDER BY bm25(search), r.ts DESC, r.lamport DESC, r.idx DESC, r.id LIMIT ?")
        rows = state.db.execute(sql, [_fts_query(q), *args, limit]).fetchall()
    else:
        sql = f"SELECT r.id FROM records r WHERE {' AND '.join(where)} ORDER BY r.ts DESC, r.lamport DESC, r.idx DESC, r.id LIMIT ?"
        rows = state.db.execute(sql, [*args, limit]).fetchall()
    return state.records(r[0] for r in rows)


# ---------------------------------------------------------------------------------------------
# Semantic search


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors.  Implementations: :class:`HashingEmbedder` (deterministic, no
    model; for tests and benchmarks), :class:`SentenceTransformerEmbedder`, :class:`OllamaEmbedder`."""

    model_id: str
    dimension: int

    def embed(self, texts: Sequence[str]) -> list[list[float]]: ...


class HashingEmbedder:
    """Feature hashing of words and word pairs into a fixed-size, L2-normalised vector.  Needs no
    model and gives the same vectors everywhere; good for tests, benchmarks and comparisons."""

    def __init__(self, dimension: int = 256) -> None:
        self.dimension = dimension
        self.model_id = f"hashing-{dimension}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        out = []
        for text in texts:
            vec = [0.0] * self.dimension
            words = re.findall(r"\w+", text.lower())
            for feature in words + [a + " " + b for a, b in zip(words, words[1:])]:
                h = hashlib.blake2b(feature.encode(), digest_size=8).digest()
                idx = int.from_bytes(h[:4], "big") % self.dimension
                vec[idx] += 1.0 if h[4] & 1 else -1.0
            norm = math.sqrt(sum(x * x for x in vec)) or 1.0
            out.append([x / norm for x in vec])
        return out


class SentenceTransformerEmbedder:
    """A local sentence-transformers model (optional extra: ``pip install sentence-transformers``)."""

    def __init__(self, model: str = "all-MiniLM-L6-v2") -> None:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise UsageError("semantic search with a local model needs: pip install sentence-transformers") from None
        self._model = SentenceTransformer(model)
        self.dimension = int(self._model.get_sentence_embedding_dimension())
        self.model_id = f"sentence-transformers/{model}"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [list(map(float, v)) for v in self._model.encode(list(texts), normalize_embeddings=True)]


class OllamaEmbedder:
    """An Ollama server's embedding endpoint (``/api/embed``), e.g. on localhost."""

    def __init__(self, url: str = "http://localhost:11434", model: str = "all-minilm") -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.model_id = f"ollama/{model}"
        self.dimension = len(self.embed(["dimension probe"])[0])

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        import json
        import urllib.request

        req = urllib.request.Request(  # noqa: S310 - the user chooses the Ollama URL
            f"{self.url}/api/embed", data=json.dumps({"model": self.model, "input": list(texts)}).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:  # noqa: S310
                embeddings: list[list[float]] = json.load(resp)["embeddings"]
                return embeddings
        except OSError as exc:
            raise UsageError(f"the Ollama server at {self.url} did not answer ({exc})") from None


# One byte per dimension: each vector is scaled so its largest component is ±127 and rounded
# (int8), with the scale beside it; a score's error is below 1/127 of the largest component's.
_VECTORS = """
CREATE TABLE IF NOT EXISTS vectors8(model TEXT NOT NULL, record INTEGER NOT NULL, vec BLOB NOT NULL,
                                    scale REAL NOT NULL, PRIMARY KEY(model, record))
"""
_SCORE_ROWS = 8192  # vectors scored at a time: memory does not grow with the vault


def significance(freq: int, days: float, kappa: float = 0.3, lam: float = 0.01) -> float:
    """VaultMem's significance of a recurring pattern: grows with frequency, decays with age."""
    return (1 - math.exp(-kappa * freq)) * math.exp(-lam * days)


def quantize(vec: Sequence[float]) -> tuple[bytes, float]:
    """A vector as stored: int8 components and the scale that multiplies them back."""
    top = max((abs(x) for x in vec), default=0.0)
    if not top or not math.isfinite(top):
        return bytes(len(vec)), 0.0
    return struct.pack(f"<{len(vec)}b", *(max(-127, min(127, round(x * 127 / top))) for x in vec)), top / 127


# A stored vector with what ranking needs: (int8 blob, scale, record id, ts or 0, 1 for a summary record)
_VectorRow = tuple[bytes, float, bytes, int, int]


def _numpy_installed() -> bool:
    """numpy is optional (the "semantic" extra): it is imported where it is used, not at import."""
    try:
        import numpy  # noqa: F401
    except ImportError:
        return False
    return True


def _scores_numpy(rows: Sequence[_VectorRow], query: Sequence[float], now: float,
                  dimension: int) -> NDArray[np.float64]:
    """Cosine plus recency for a chunk of rows, as one matrix product (int8 vectors, float64 sums)."""
    import numpy as np

    blobs, scales, _rids, stamps, _summaries = zip(*rows)
    matrix = np.frombuffer(b"".join(blobs), dtype=np.int8).reshape(len(rows), dimension)
    ts = np.asarray(stamps, dtype=np.float64)
    days = np.maximum(0.0, (now - np.where(ts != 0, ts, now)) / 86400)
    dots = matrix.astype(np.float64) @ np.asarray(query, dtype=np.float64)
    # rounded so that equal vectors tie whatever the chunk (a matrix product's last bits depend on its shape)
    return np.round(dots * np.asarray(scales, dtype=np.float64) + 0.05 * np.exp(-days / 365), 12)


def _scores_python(rows: Sequence[_VectorRow], query: Sequence[float], now: float, dimension: int) -> list[float]:
    """The same without numpy, a loop per record (about 10 µs each at 256 dimensions)."""
    out = []
    fmt = f"<{dimension}b"
    for blob, scale, _rid, ts, _summary in rows:
        cos = math.fsum(a * b for a, b in zip(query, struct.unpack(fmt, blob))) * scale
        days = max(0.0, (now - (ts or now)) / 86400)
        out.append(round(cos + 0.05 * math.exp(-days / 365), 12))
    return out


def semantic_search(state: State, text: str, embedder: Embedder, *, limit: int = 20,
                    now: float | None = None) -> list[tuple[float, RecordView]]:
    """Rank visible records by cosine similarity to ``text`` (blended with recency, and for
    ``summary`` records with significance).  Missing vectors are computed and kept.  The stored
    vectors are scored a chunk at a time, keeping only the best ``limit``."""
    use_numpy = _numpy_installed()
    db = state.db
    db.execute(_VECTORS)
    dim = embedder.dimension
    missing = db.execute(
        "SELECT r.rowid, r.text, coalesce(r.key, '') FROM records r WHERE r.valid = 1 AND r.hidden = 0 "
        "AND r.kind IN (1, 3) AND r.text != '' AND NOT EXISTS (SELECT 1 FROM vectors8 v WHERE v.model = ? "
        "AND v.record = r.rowid AND length(v.vec) = ?)",
        (embedder.model_id, dim),
    )
    while chunk := missing.fetchmany(256):
        vecs = embedder.embed([f"{key} {t}".strip() for _, t, key in chunk])
        db.executemany("INSERT OR REPLACE INTO vectors8(model, record, vec, scale) VALUES(?,?,?,?)",
                       [(embedder.model_id, rowid, *quantize(v)) for (rowid, _, _), v in zip(chunk, vecs)])
    if limit <= 0:
        return []
    query = embedder.embed([text])[0]
    now = time.time() if now is None else now
    cursor = db.execute(
        "SELECT v.vec, v.scale, r.id, coalesce(r.ts, 0), r.type = 'summary' FROM vectors8 v "
        "JOIN records r ON r.rowid = v.record WHERE v.model = ? AND r.valid = 1 AND r.hidden = 0 "
        "AND length(v.vec) = ?",
        (embedder.model_id, dim),
    )
    best: list[tuple[float, bytes]] = []  # the best ``limit`` so far, ties broken by id (the same order everywhere)
    while rows := cursor.fetchmany(_SCORE_ROWS):
        scores = _scores_numpy(rows, query, now, dim) if use_numpy else _scores_python(rows, query, now, dim)
        for i in [i for i, row in enumerate(rows) if row[4]]:
            _, _, rid, ts, _ = rows[i]
            view = state.record(rid)
            freq = view.meta.get("frequency", 1) if view is not None else 1
            days = max(0.0, (now - (ts or now)) / 86400)
            scores[i] += 0.2 * significance(freq if isinstance(freq, int) and freq > 0 else 1, days)
        candidates: Iterable[SupportsIndex]
        if use_numpy and len(rows) > limit:
            candidates = _best_numpy(scores, limit)
        else:
            candidates = range(len(rows))
        best += ((float(scores[i]), rows[i][2]) for i in candidates)
        best = sorted(best, key=lambda x: (-x[0], x[1]))[:limit]
    views = {v.id: v for v in state.records(rid for _, rid in best)}
    return [(s, views[rid]) for s, rid in best if rid in views]


def _best_numpy(scores: NDArray[np.float64] | list[float], limit: int) -> list[np.intp]:
    """The indices of the ``limit`` best scores and of any tied with the last of them."""
    import numpy as np

    kth = np.partition(-np.asarray(scores), limit - 1)[limit - 1]
    return [i for i in np.flatnonzero(-np.asarray(scores) <= kth)]
