"""Camillo: the reference implementation of VMEM, an open format for user-owned agent memory.

The public API is the vault facade and the value types it takes and returns::

    from camillo import Vault, Unlock, NewRecord
    vault, recovery_phrase = Vault.create("~/Memory", "a long passphrase")
    vault.append([NewRecord(type="fact", key="user/home_city", value="Lisbon")])

The faces (the command line, the MCP server, the importers, the exporters and the desktop app) use
only what this package exports.  This package never imports Qt or the desktop app (an
import-linter contract checks it).
"""

from .changes import Changes

# the faces every other face may call (the desktop imports only this package)
from .demo import DEMO_PASSPHRASE, build_demo_vault
from .errors import (
    AccessDenied,
    Cancelled,
    DamagedFile,
    DeviceRevoked,
    EnrollmentError,
    Incomplete,
    KeychainError,
    NotAVault,
    ReadOnlyVault,
    Revoked,
    RolledBack,
    UnsupportedVersion,
    UsageError,
    VaultError,
    WrongCredential,
)
from .exporters import KINDS as EXPORT_KINDS
from .exporters import run_export
from .importers import KINDS as IMPORT_KINDS
from .importers import ImportReport, run_import
from .keychain import KeychainStatus
from .ops.enrollment import Offer, OfferState
from .records import Authority
from .recordviews import FactView, RecordView
from .values import (
    DEFAULT_COMPARTMENTS,
    ActivityRow,
    CompactionReport,
    ConversationInfo,
    DeviceInfo,
    ErasurePreview,
    GrantCreated,
    GrantInfo,
    HealthReport,
    NewRecord,
    Notice,
    Problem,
    ReachReport,
    RecordContext,
    RecoveryPhrase,
    RevocationReport,
    SearchHit,
    SearchPage,
    SyncStatus,
    Unlock,
    VaultStats,
)
from .vault import Joining, Vault, set_thread_guard

__all__ = [
    "DEFAULT_COMPARTMENTS",
    "DEMO_PASSPHRASE",
    "EXPORT_KINDS",
    "IMPORT_KINDS",
    "AccessDenied",
    "ActivityRow",
    "Authority",
    "Cancelled",
    "Changes",
    "CompactionReport",
    "ConversationInfo",
    "DamagedFile",
    "DeviceInfo",
    "DeviceRevoked",
    "EnrollmentError",
    "ErasurePreview",
    "FactView",
    "GrantCreated",
    "GrantInfo",
    "HealthReport",
    "ImportReport",
    "Incomplete",
    "Joining",
    "KeychainError",
    "KeychainStatus",
    "NewRecord",
    "NotAVault",
    "Notice",
    "Offer",
    "OfferState",
    "Problem",
    "ReachReport",
    "ReadOnlyVault",
    "RecordContext",
    "RecordView",
    "RecoveryPhrase",
    "RevocationReport",
    "Revoked",
    "RolledBack",
    "SearchHit",
    "SearchPage",
    "SyncStatus",
    "Unlock",
    "UnsupportedVersion",
    "UsageError",
    "Vault",
    "VaultError",
    "VaultStats",
    "WrongCredential",
    "build_demo_vault",
    "run_export",
    "run_import",
    "set_thread_guard",
]

# vaults in object stores (s3://bucket/prefix): locations and the keys kept for them in the OS keychain
from .values import (
    forget_object_store_keys,
    is_object_store,
    object_store_keys_kept,
    object_store_url,
    remember_object_store_keys,
)

__all__ += [
    "forget_object_store_keys",
    "is_object_store",
    "object_store_keys_kept",
    "object_store_url",
    "remember_object_store_keys",
]
