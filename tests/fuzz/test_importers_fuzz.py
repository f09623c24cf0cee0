"""Fuzzing every importer present in ``camillo.importers`` (ChatGPT, Claude, VaultMem, Portable
Memory, PAM): byte mutations and structure-aware JSON mutations of one member file of a real export
at a time (for Portable Memory, with the manifest's and CHECKSUMS' digests recomputed, so the
mutation gets past the integrity check to the parser), mutated ZIP archives, and mutated VaultMem
vault files.  The reader must produce import units or raise ``ImportFailed`` naming the source;
a sample goes all the way through ``run_import`` into a real vault, where only a ``VaultError`` may
come out.

An importer listed in ``camillo.importers.KINDS`` but not importable is skipped with its reason (the
importers may be written in parallel).  Runs on pytest's main thread.
"""

from __future__ import annotations

import hashlib
import importlib
import io
import json
import shutil
import zipfile
from pathlib import Path
from typing import Any

import pytest
from camillo.errors import VaultError

from . import fuzzlib
from .fuzzlib import Target, check, fuzz_loop, iterations
from .targets import PASSPHRASE, core_environment

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "imports"


def _kind_available(kind: str) -> str | None:
    from camillo import importers

    module = importers.KINDS.get(kind)
    if module is None:
        return f"{kind} is not in camillo.importers.KINDS"
    try:
        importlib.import_module(module)
    except ImportError as exc:
        return f"{module} is not importable ({exc})"
    return None


def _reader(kind: str):
    from camillo.importers import reader_for

    return reader_for(kind)


# -- JSON-aware mutation -----------------------------------------------------------------------------

JSON_ODD: list[Any] = [None, True, 0, -1, 2**63, 2**64, 1e308, -1e308, 1.5, "", "x" * 5000, "\u0000", "\ud800",
                       "../../etc/passwd", [], {}, [[[[[[[[[[[]]]]]]]]]]], {"a": {"b": {"c": None}}},
                       "2024-13-45T99:99:99Z", "user/home_city", {"parts": [None, 5, {"x": 1}]}]


def _json_value(rng) -> Any:
    r = rng.random()
    if r < 0.7:
        return rng.choice(JSON_ODD)
    if r < 0.85:
        return [rng.choice(JSON_ODD) for _ in range(rng.randrange(4))]
    return {rng.choice(["id", "text", "role", "content", "parts", "mapping", "x"]): rng.choice(JSON_ODD)
            for _ in range(rng.randrange(4))}


def json_mutate(rng, raw: bytes) -> bytes:
    """Replace, drop, add or retype one node of the JSON document (or of one JSONL line)."""
    import copy

    lines = raw.split(b"\n") if raw.count(b"\n") > 1 else [raw]
    i = rng.randrange(len(lines))
    try:
        doc = json.loads(lines[i])
    except ValueError:
        return fuzzlib.flip_bits(rng, raw)
    doc = copy.deepcopy(doc)
    paths = fuzzlib._nodes(doc)
    path = rng.choice(paths)
    if not path:
        doc = _json_value(rng)
    else:
        parent = fuzzlib._get(doc, path[:-1])
        op = rng.random()
        if op < 0.6:
            parent[path[-1]] = _json_value(rng)
        elif op < 0.8:
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[rng.choice(["id", "create_time", "parent", "children", "current_node", "x"])] = _json_value(rng)
        else:
            parent.append(_json_value(rng))
    try:
        lines[i] = json.dumps(doc, allow_nan=True).encode("utf-8", "surrogatepass")
    except (TypeError, ValueError):
        return fuzzlib.flip_bits(rng, raw)
    return b"\n".join(lines)


class ExportRunner:
    """A scratch copy of a fixture export; each input replaces one member file."""

    def __init__(self, kind: str, fixture: Path, member: str, work: Path, *, fix_digests: bool = False) -> None:
        self.kind = kind
        self.root = work / f"{kind}-{member.replace('/', '_')}" / fixture.name
        shutil.rmtree(self.root.parent, ignore_errors=True)
        shutil.copytree(fixture, self.root)
        self.member = member
        self.seed = (self.root / member).read_bytes()
        self.fix_digests = fix_digests

    def run(self, data: bytes) -> Any:
        (self.root / self.member).write_bytes(data)
        if self.fix_digests:
            _fix_portable_memory_digests(self.root)
        return list(_reader(self.kind)(str(self.root)))

    def target(self) -> Target:
        return Target(f"import-{self.kind}:{self.member}", self.run, names=[self.root.name])

    def restore(self) -> None:
        (self.root / self.member).write_bytes(self.seed)
        if self.fix_digests:
            _fix_portable_memory_digests(self.root)


def _fix_portable_memory_digests(root: Path) -> None:
    """Recompute what a careful forger would: every file's SHA-256 in the manifest and CHECKSUMS."""
    manifest_path = root / "manifest.json"
    try:
        manifest = json.loads(manifest_path.read_bytes())
        files = manifest["files"]
    except (ValueError, KeyError, TypeError):
        return
    lines = []
    for entry in files if isinstance(files, list) else []:
        if isinstance(entry, dict) and isinstance(entry.get("path"), str) and (root / entry["path"]).is_file():
            raw = (root / entry["path"]).read_bytes()
            entry["sha256"] = hashlib.sha256(raw).hexdigest()
            if "bytes" in entry:
                entry["bytes"] = len(raw)
            lines.append(f"{entry['sha256']}  {entry['path']}")
    sums = ("\n".join(sorted(lines, key=lambda x: x.split("  ", 1)[1])) + "\n").encode()
    if (root / "CHECKSUMS").exists():
        (root / "CHECKSUMS").write_bytes(sums)
        if manifest.get("bundleDigest") is not None:
            manifest["bundleDigest"] = hashlib.sha256(sums).hexdigest()
    manifest_path.write_text(json.dumps(manifest, indent=1))


MEMBERS = [
    ("chatgpt", "chatgpt", "conversations.json", False, 250),
    ("chatgpt", "chatgpt-split/export", "conversations-001.json", False, 120),
    ("chatgpt", "chatgpt-split/export", "conversation_asset_file_names.json", False, 40),
    ("chatgpt", "chatgpt-split/export", "export_manifest.json", False, 40),
    ("claude", "claude", "conversations.json", False, 150),
    ("claude", "claude", "memories.json", False, 80),
    ("claude", "claude", "projects.json", False, 60),
    ("claude", "claude-2026/export", "conversations/c1000000-0000-4000-8000-000000000001.json", False, 120),
    ("claude", "claude-2026/export", "conversations/c2000000-0000-4000-8000-000000000002.json", False, 60),
    ("pam", "pam-example", "memory-store.json", False, 150),
    ("pam", "pam-example", "conversations/conv-001.json", False, 100),
    ("portable-memory", "portable-memory-sample.mem", "items/episode.jsonl", True, 100),
    ("portable-memory", "portable-memory-sample.mem", "items/entity.jsonl", True, 60),
    ("portable-memory", "portable-memory-sample.mem", "manifest.json", False, 80),
]


@pytest.mark.parametrize("kind, fixture, member, fix, budget", MEMBERS, ids=[f"{k}:{m}" for k, _, m, _, _ in MEMBERS])
def test_importer_member_mutations(tmp_path, kind, fixture, member, fix, budget):
    why = _kind_available(kind)
    if why:
        pytest.skip(why)
    runner = ExportRunner(kind, FIX / fixture, member, tmp_path, fix_digests=fix)
    target = runner.target()
    assert check(target, runner.seed) == "accepted"
    rng = fuzzlib.rng_for(target.name)
    failures = []
    for i in range(iterations(budget)):
        data = json_mutate(rng, runner.seed) if i % 2 else fuzzlib.mutate(rng, runner.seed, target, [runner.seed])
        try:
            check(target, data)
        except fuzzlib.ContractBroken as exc:
            failures.append(str(exc))
    runner.restore()
    assert not failures, "\n".join(failures[:20])


def test_mutated_zip_exports(tmp_path):
    why = _kind_available("chatgpt")
    if why:
        pytest.skip(why)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.write(FIX / "chatgpt" / "conversations.json", "export/conversations.json")
    seed = buf.getvalue()
    path = tmp_path / "export.zip"

    def run(data: bytes) -> Any:
        path.write_bytes(data)
        return list(_reader("chatgpt")(str(path)))

    fuzz_loop(Target("import-chatgpt:zip", run, names=["export.zip"],
                     fields=[(-22 + 10, 2), (-22 + 12, 4), (-22 + 16, 4)]), [seed], iterations(150), [seed])


@pytest.fixture(scope="module")
def vaultmem_folder(tmp_path_factory):
    vaultmem = pytest.importorskip("vaultmem")
    from vaultmem import NullEmbedder, VaultSession

    folder = tmp_path_factory.mktemp("vaultmem") / "vm"
    session = VaultSession.create(str(folder), "vaultmem pass", "alice", embedder=NullEmbedder())
    for text in ("I went to the beach yesterday", "I prefer tea in the morning"):
        session.add(text)
    session.close()
    assert vaultmem.__name__ == "vaultmem"
    return folder


@pytest.mark.parametrize("member, budget", [("current.atoms", 10), ("current.vmem", 8), ("meta.json", 8)])
def test_mutated_vaultmem_vaults(vaultmem_folder, member, budget):
    why = _kind_available("vaultmem")
    if why:
        pytest.skip(why)
    path = vaultmem_folder / member
    seed = path.read_bytes()
    original_cost = json.loads((vaultmem_folder / "meta.json").read_bytes())["memory_cost"]

    def run(data: bytes) -> Any:
        path.write_bytes(data)
        if member == "meta.json":  # keep Argon2's cost as it was: the reader caps it at 1 GiB by design
            try:
                meta = json.loads(data)
                if isinstance(meta, dict):
                    meta["memory_cost"] = original_cost
                    path.write_text(json.dumps(meta))
            except ValueError:
                pass
        return list(_reader("vaultmem")(str(vaultmem_folder), passphrase="vaultmem pass"))

    target = Target(f"import-vaultmem:{member}", run, names=["vm", member])
    try:
        fuzz_loop(target, [seed], iterations(budget), [seed])
    finally:
        path.write_bytes(seed)


def test_mutated_exports_through_run_import(tmp_path):
    """A sample of mutated exports goes all the way into a real vault: only VaultError may come out,
    and a refused import leaves the vault unchanged."""
    from camillo import Vault
    from camillo.importers import run_import

    available = [(k, f, m, x) for k, f, m, x, _ in MEMBERS if not _kind_available(k)]
    if not available:
        pytest.skip("no importer is importable yet")
    with core_environment(tmp_path / "home"):
        vault, _ = Vault.create(str(tmp_path / "vault"), PASSPHRASE, home=str(tmp_path / "home"))
        try:
            rng = fuzzlib.rng_for("run-import")
            runners = [ExportRunner(k, FIX / f, m, tmp_path / "exports", fix_digests=x) for k, f, m, x in available]

            def run(data: bytes) -> Any:
                runner = runs["current"]
                (runner.root / runner.member).write_bytes(data)
                if runner.fix_digests:
                    _fix_portable_memory_digests(runner.root)
                before = len(vault.timeline(include_hidden=True))
                try:
                    return run_import(vault, runner.kind, str(runner.root))
                except VaultError:
                    assert len(vault.timeline(include_hidden=True)) == before, "a refused import wrote records"
                    raise

            runs: dict[str, ExportRunner] = {}
            failures = []
            for i in range(iterations(24)):
                runner = runners[i % len(runners)]
                runs["current"] = runner
                data = json_mutate(rng, runner.seed)
                try:
                    check(Target("import-through-vault", run, names=None), data)
                except fuzzlib.ContractBroken as exc:
                    failures.append(str(exc))
                runner.restore()
            assert not failures, "\n".join(failures[:10])
        finally:
            vault.lock()
