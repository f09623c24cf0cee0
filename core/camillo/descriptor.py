"""The vault descriptor: the cleartext ``VMEM`` file at the top of a vault folder (spec §4.2).

CBOR map ``{0: "vmem", 1: format version (1), 2: vault_id (32 bytes), 3: suite (1), 4: check}``
where ``check`` is the first 8 bytes of SHA-256 over the canonical CBOR of keys 0-3 (it tells a
damaged descriptor from a wrong passphrase; it is not a security control).  Written
last when a vault is created (a folder without it is an unfinished creation, not a vault) and never
changed.  It is only a hint: after unlocking, a reader checks that the genesis record hashes to the
same vault_id, so a host that edits the descriptor only makes the vault fail to open.

Pure functions; any thread may call them.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import encoding
from .errors import CanonicalError, DamagedFile, UnsupportedVersion
from .primitives import SUITE_VMEM1, sha256

NAME = "VMEM"
FORMAT_VERSION = 1


@dataclass(frozen=True)
class Descriptor:
    vault_id: bytes
    version: int = FORMAT_VERSION
    suite: int = SUITE_VMEM1

    def _fields(self) -> dict[int, object]:
        return {0: "vmem", 1: self.version, 2: self.vault_id, 3: self.suite}

    def check(self) -> bytes:
        """The check value (key 4): the first 8 bytes of SHA-256 over the canonical CBOR of keys 0-3."""
        return sha256(encoding.encode(self._fields()))[:8]

    def encode(self) -> bytes:
        return encoding.encode({**self._fields(), 4: self.check()})


def decode(data: bytes) -> Descriptor:
    try:
        m = encoding.decode(data, "the descriptor (VMEM)", max_len=1024)
    except CanonicalError as exc:
        raise DamagedFile(f"{exc.message}; the file VMEM is damaged", file=NAME) from None
    if not isinstance(m, dict) or m.get(0) != "vmem":
        raise DamagedFile("the file VMEM is not a VMEM descriptor", file=NAME)
    version, vault_id, suite = m.get(1), m.get(2), m.get(3)
    if type(version) is not int or type(suite) is not int:
        raise DamagedFile("the file VMEM lacks a version or suite", file=NAME)
    if version > FORMAT_VERSION:
        raise UnsupportedVersion(
            f"this vault uses VMEM format version {version}; a newer Camillo is required to open it", file=NAME
        )
    if version < 1:
        raise DamagedFile(f"the file VMEM names format version {version}, which does not exist", file=NAME)
    if suite != SUITE_VMEM1:
        raise UnsupportedVersion(f"this vault uses cipher suite {suite:#06x}; a newer Camillo is required", file=NAME)
    if not isinstance(vault_id, bytes) or len(vault_id) != 32:
        raise DamagedFile("the file VMEM has a malformed vault id", file=NAME)
    d = Descriptor(vault_id, version, suite)
    if m.get(4) != d.check():
        raise DamagedFile("the file VMEM is damaged (its check value does not match)", file=NAME)
    return d
