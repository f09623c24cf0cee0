"""Camillo: the reference implementation of VMEM, an open format for user-owned agent memory.

The public API is the vault facade and the value types it returns::

    from camillo import Vault, Unlock, NewRecord
    vault, recovery_phrase = Vault.create("~/Memory", "a long passphrase")
    vault.append([NewRecord(type="fact", key="user/home_city", value="Lisbon")])

This package never imports Qt or the desktop app (an import-linter contract checks it).
"""

from .changes import Changes
from .errors import (
    AccessDenied,
    DamagedFile,
    KeychainError,
    NotAVault,
    ReadOnlyVault,
    UnsupportedVersion,
    UsageError,
    VaultError,
    WrongCredential,
)
from .records import Authority
from .state import FactView, RecordView
from .vault import DEFAULT_COMPARTMENTS, NewRecord, Problem, Unlock, Vault, set_thread_guard

__all__ = [
    "DEFAULT_COMPARTMENTS",
    "AccessDenied",
    "Authority",
    "Changes",
    "DamagedFile",
    "FactView",
    "KeychainError",
    "NewRecord",
    "NotAVault",
    "Problem",
    "ReadOnlyVault",
    "RecordView",
    "Unlock",
    "UnsupportedVersion",
    "UsageError",
    "Vault",
    "VaultError",
    "WrongCredential",
    "set_thread_guard",
]
