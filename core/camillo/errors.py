"""Every error the Camillo core raises, rooted at :class:`VaultError`.

Errors are grouped by meaning, not by where they happen, so the CLI and the desktop can react to
the class alone (exit code, dialog) and show the message as it is.  Each message names the thing
(a file, a record, a grant) and says what the user can do.  Messages never contain key material or
record plaintext; ``repr`` of an error is its class and message only.

Any thread may construct and raise these.
"""

from __future__ import annotations


class VaultError(Exception):
    """Root of every error the core raises on purpose.

    ``exit_code`` is what the command line exits with when this error ends a command.
    """

    exit_code = 4

    def __init__(self, message: str, *, file: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.file = file

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.message!r})"


class UsageError(VaultError):
    """The caller asked for something malformed (a bad argument, an unknown compartment)."""

    exit_code = 2


class WrongCredential(VaultError):
    """The passphrase, recovery phrase, device key or grant does not open this vault."""

    exit_code = 3


class DeviceRevoked(WrongCredential):
    """This installation's device was revoked by another device: it does not register again unless
    asked to (the message says by whom, when, and how; ``who``, ``when`` and ``why`` carry them)."""

    def __init__(self, message: str, *, who: str = "", when: int | None = None, why: str = "") -> None:
        super().__init__(message)
        self.who, self.when, self.why = who, when, why


class KeychainError(VaultError):
    """The OS keychain is missing, locked, or is a backend we refuse (plaintext or fail)."""

    exit_code = 3


class DamagedFile(VaultError):
    """A file of the vault failed an integrity check (hash, AEAD, signature, structure)."""

    exit_code = 4


class Incomplete(DamagedFile):
    """This copy of the vault lacks what the operation needs, most likely because the sync has not
    brought it yet (another device's key change arriving in pieces): nothing was changed; wait for the
    sync and try again (``camillo verify`` names what is missing)."""

    exit_code = 1


class RolledBack(DamagedFile):
    """The storage shows this installation an older state of the vault than it already saw (old slot
    files restored, batches it saw gone beyond the grace period): a rollback by the host or the sync
    service.  Nothing was changed; restore the newer files from another copy."""

    exit_code = 1


class UnsupportedVersion(VaultError):
    """The vault or file uses a format version or suite this Camillo does not know."""

    exit_code = 4


class NotAVault(VaultError):
    """The path is not a VMEM vault (no descriptor) or not a .vmem pack."""

    exit_code = 4


class CanonicalError(DamagedFile):
    """Bytes that should be deterministic CBOR are not (duplicates, floats, tags, wrong order...)."""


class LimitExceeded(VaultError):
    """A record, batch or parameter is larger than VMEM allows."""

    exit_code = 2


class AccessDenied(VaultError):
    """The credential in use (usually an agent grant) does not allow this operation."""

    exit_code = 5


class Revoked(AccessDenied):
    """The credential in use has been revoked in this vault."""


class ErasureDisabled(AccessDenied):
    """The vault's policy forbids erasure (enterprise retention); forgetting still hides records."""


class WriterFrozen(VaultError):
    """This installation must not write: its own batches were found above its counter (a clone or a
    restored backup), or its writer is frozen by a proven fork."""

    exit_code = 4


class ReadOnlyVault(VaultError):
    """The vault was opened read-only (a .vmem file or a read grant) and cannot be changed."""

    exit_code = 2


class StorageError(VaultError):
    """The byte shelf could not read or write a file (disk full, read-only folder, I/O error)."""

    exit_code = 4


class EnrollmentError(VaultError):
    """A device enrollment step was refused (wrong code, expired, reused or tampered exchange)."""

    exit_code = 3


class Cancelled(VaultError):
    """A long operation was cancelled by the caller before it changed anything durable."""

    exit_code = 1
