"""The grant file: an agent's credential for one vault, as the owner hands it over (spec §16.2).

An armored, base64 CBOR map holding the vault id, the grant id, the agent's name, its compartments
(id, level, name), its X-Wing and Ed25519 seeds, its maximum class, its expiry and the owner devices
it trusts to sign the epoch keys it seals to.  Written once with mode 0600; read with every field
checked before anything uses it.

Any thread may call these functions (they touch only the file they are given).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .. import encoding
from ..control import Level
from ..credentials import Credential, CredentialKind
from ..errors import UsageError, VaultError
from ..records import Authority

GRANT_ARMOR = ("-----BEGIN VMEM GRANT-----", "-----END VMEM GRANT-----")


@dataclass(frozen=True)
class GrantFile:
    vault_id: bytes
    grant_id: bytes
    agent: str
    scopes: dict[str, Level]
    max_class: Authority
    not_after: int | None
    credential: Credential
    trusted: tuple[tuple[bytes, bytes], ...] = ()  # owner devices (writer id, signing key) at grant time

    def __repr__(self) -> str:
        return f"GrantFile(agent={self.agent!r}, grant={self.grant_id.hex()[:12]})"

    @property
    def writer_id(self) -> bytes:
        return self.credential.writer_id


def write_grant_file(path: str, g: GrantFile, scope_ids: dict[str, bytes]) -> None:
    m = {
        0: "vmem-grant", 1: 1, 2: g.vault_id, 3: g.grant_id, 4: g.agent,
        5: [[scope_ids[n], int(level), n] for n, level in sorted(g.scopes.items())],
        6: g.credential.recipient.seed, 7: g.credential.signer.seed, 8: int(g.max_class), 9: g.not_after,
        10: [list(t) for t in g.trusted],
    }
    body = base64.b64encode(encoding.encode(m)).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    text = "\n".join([
        "# A Camillo grant: the credential of an agent for one vault. Keep it secret, like a password.",
        f"# agent: {g.agent}   vault: {g.vault_id.hex()[:12]}   grant: {g.grant_id.hex()}",
        f"# scopes: {', '.join(f'{n} ({lvl.label})' for n, lvl in sorted(g.scopes.items()))}   max class: {g.max_class.label}",
        GRANT_ARMOR[0], *lines, GRANT_ARMOR[1], "",
    ])
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())


GRANT_NOT_AFTER_MAX = 253_402_300_799  # 9999-12-31T23:59:59Z: beyond it no calendar can show the expiry


def _is_bytes(v: Any, n: int) -> bool:
    return isinstance(v, bytes) and len(v) == n


def _check_grant_map(m: dict[Any, Any]) -> None:
    """Every field of a grant file has its type before anything uses it (spec §16.2); ValueError
    naming the field otherwise."""
    checks: list[tuple[int, Callable[[Any], bool], str]] = [
        (2, lambda v: _is_bytes(v, 32), "vault id"),
        (3, lambda v: _is_bytes(v, 16), "grant id"),
        (4, lambda v: isinstance(v, str) and v.strip() != "", "agent name"),
        (5, lambda v: isinstance(v, list) and v != [] and all(
            isinstance(s, list) and len(s) == 3 and _is_bytes(s[0], 16) and type(s[1]) is int
            and isinstance(s[2], str) for s in v), "scopes"),
        (6, lambda v: _is_bytes(v, 32), "X-Wing seed"),
        (7, lambda v: _is_bytes(v, 32), "Ed25519 seed"),
        (8, lambda v: type(v) is int, "maximum class"),
        (9, lambda v: v is None or (type(v) is int and 0 <= v <= GRANT_NOT_AFTER_MAX), "expiry"),
        (10, lambda v: isinstance(v, list) and all(
            isinstance(t, list) and len(t) == 2 and _is_bytes(t[0], 32) and _is_bytes(t[1], 32) for t in v),
         "trusted owner devices"),
    ]
    for key, ok, what in checks:
        if (key in m or key != 10) and (key not in m or not ok(m[key])):  # 10 is optional (older files)
            raise ValueError(f"its {what} (field {key}) is missing or malformed")


def read_grant_file(path: str) -> tuple[GrantFile, dict[str, bytes]]:
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as exc:
        raise UsageError(f"cannot read the grant file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not a Camillo grant file") from None
    try:
        start = text.index(GRANT_ARMOR[0]) + len(GRANT_ARMOR[0])
        end = text.index(GRANT_ARMOR[1])
        m = encoding.decode(base64.b64decode("".join(text[start:end].split()), validate=True), "grant file")
        if not isinstance(m, dict) or m.get(0) != "vmem-grant" or m.get(1) != 1:
            raise ValueError("not a version 1 grant")
        _check_grant_map(m)
        scopes, scope_ids = {}, {}
        for cid, level, name in m[5]:
            scopes[name] = Level(level)
            scope_ids[name] = cid
        cred = Credential.from_seeds(CredentialKind.GRANT, m[6], m[7])
        trusted = tuple((w, k) for w, k in m.get(10, []))
        return GrantFile(m[2], m[3], m[4], scopes, Authority(m[8]), m[9], cred, trusted), scope_ids
    except (ValueError, KeyError, TypeError, IndexError, VaultError) as exc:
        raise UsageError(f"{path} is not a valid Camillo grant file ({exc})") from None
