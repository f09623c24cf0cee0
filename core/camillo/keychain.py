"""Device keys in the OS keychain (macOS Keychain, Windows Credential Locker, Linux Secret Service).

An installation's device credential is two 32-byte seeds.  They are stored with ``keyring`` under
service ``vmem`` and user ``<vault_id hex>/<writer_id hex>`` as base64 of CBOR
``{"xwing": seed, "ed25519": seed}``.

We refuse backends that would not protect the seeds: ``keyring.backends.fail`` (nothing there),
``keyring.backends.null`` (silently forgets) and every ``keyrings.alt`` file backend (plaintext or
weakly encrypted files, which the ``keyrings.alt`` package silently makes the default).  When the
keychain is refused or unavailable the caller falls back to the installation's local state,
encrypted under the vault's keys, and says so.

``CAMILLO_KEYCHAIN`` chooses: ``auto`` (default: the OS keychain when usable), ``os`` (require it)
or ``none`` (never touch it).  Calls block on D-Bus; the desktop makes them on its worker thread.
Finding the backend (``keyring`` loads every backend it knows, and on Linux looks for macOS's
libraries with a subprocess) takes about 0.1 s once per process: :func:`prepare` starts it on a
thread of its own while a passphrase's Argon2id runs.  Any thread may call this module; one
finds the backend at a time.
"""

from __future__ import annotations

import base64
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

from . import encoding
from .errors import KeychainError

if TYPE_CHECKING:
    from keyring.backend import KeyringBackend

T = TypeVar("T")

SERVICE = "vmem"
_REFUSED_MODULES = ("keyring.backends.fail", "keyring.backends.null", "keyrings.alt")


@dataclass(frozen=True)
class KeychainStatus:
    usable: bool
    backend: str
    reason: str


_FINDING = threading.Lock()  # one search for the backend at a time: the next caller takes its answer


def _backend() -> KeyringBackend:
    import keyring

    with _FINDING:
        return keyring.get_keyring()


def prepare() -> threading.Thread | None:
    """Start finding the keychain's backend on a thread of its own (a vault's creation and an unlock
    that will read the device key call it before their Argon2id, which leaves the interpreter lock
    free), so that :func:`status` finds it found.  Nothing when the keychain is turned off; a
    failure is left for :func:`status` to meet and explain.  Returns the thread started: none when the
    keychain is turned off or this process found its backend already.  A daemon thread: a process that
    ends meanwhile (a wrong passphrase at the command line) does not wait for a search nobody needs."""
    if os.environ.get("CAMILLO_KEYCHAIN", "auto") == "none":
        return None
    core = sys.modules.get("keyring.core")  # (not imported here: that import is part of what takes the time)
    if core is not None and getattr(core, "_keyring_backend", None) is not None:
        return None
    thread = threading.Thread(target=_find_quietly, name="camillo-keychain", daemon=True)
    thread.start()
    return thread


def _find_quietly() -> None:
    try:
        _backend()
    except Exception:  # noqa: S110 - status() asks again and says why (keyring raises many things)
        pass


def _leaf_backends(backend: KeyringBackend) -> list[KeyringBackend]:
    inner = getattr(backend, "backends", None)
    return list(inner) if inner else [backend]


def status() -> KeychainStatus:
    """Which keychain is in use and whether Camillo will store device keys in it."""
    mode = os.environ.get("CAMILLO_KEYCHAIN", "auto")
    if mode == "none":
        return KeychainStatus(False, "none", "the keychain is turned off (CAMILLO_KEYCHAIN=none)")
    try:
        backend = _backend()
    except Exception as exc:  # keyring raises many things when D-Bus is absent
        return KeychainStatus(False, "unavailable", f"the OS keychain could not be reached ({exc})")
    leaves = _leaf_backends(backend)
    good = [b for b in leaves if not type(b).__module__.startswith(_REFUSED_MODULES)]
    name = ", ".join(f"{type(b).__module__}.{type(b).__name__}" for b in leaves) or type(backend).__name__
    if not good:
        plaintext = any(type(b).__module__.startswith("keyrings.alt") for b in leaves)
        if plaintext:
            reason = (
                "the only keychain available is a plaintext file backend (keyrings.alt); "
                "Camillo refuses it because anyone who can read your files could read the device key"
            )
        else:
            reason = (
                "no OS keychain is available (on Linux, start a Secret Service such as gnome-keyring "
                "or KWallet and unlock it)"
            )
        return KeychainStatus(False, name, reason)
    return KeychainStatus(True, name, "device keys are kept in the OS keychain")


def _user(vault_id: bytes, writer_id: bytes) -> str:
    return f"{vault_id.hex()}/{writer_id.hex()}"


def _call(what: str, fn: Callable[[], T]) -> T:
    import keyring.errors

    try:
        return fn()
    except keyring.errors.KeyringLocked:
        raise KeychainError(f"the OS keychain is locked; unlock it and try again ({what})") from None
    except keyring.errors.KeyringError as exc:
        raise KeychainError(f"the OS keychain refused to {what}: {exc}") from None
    except Exception as exc:
        raise KeychainError(f"the OS keychain failed to {what}: {exc}") from None


def store(vault_id: bytes, writer_id: bytes, xwing_seed: bytes, ed25519_seed: bytes) -> None:
    st = status()
    if not st.usable:
        raise KeychainError(st.reason)
    import keyring

    value = base64.b64encode(encoding.encode({"ed25519": ed25519_seed, "xwing": xwing_seed})).decode()
    _call("store the device key", lambda: keyring.set_password(SERVICE, _user(vault_id, writer_id), value))


def load(vault_id: bytes, writer_id: bytes) -> tuple[bytes, bytes] | None:
    """(xwing_seed, ed25519_seed), or None when the keychain holds no key for this device."""
    st = status()
    if not st.usable:
        raise KeychainError(st.reason)
    import keyring

    value = _call("read the device key", lambda: keyring.get_password(SERVICE, _user(vault_id, writer_id)))
    if value is None:
        return None
    try:
        m = encoding.decode(base64.b64decode(value, validate=True), "keychain entry")
        xwing, ed = m["xwing"], m["ed25519"]
        if not (isinstance(xwing, bytes) and isinstance(ed, bytes) and len(xwing) == 32 and len(ed) == 32):
            raise ValueError
    except Exception:
        raise KeychainError(
            f"the keychain entry for this device ({SERVICE} {_user(vault_id, writer_id)[:20]}…) is damaged"
        ) from None
    return xwing, ed


def delete(vault_id: bytes, writer_id: bytes) -> None:
    st = status()
    if not st.usable:
        return
    import keyring
    import keyring.errors

    try:
        keyring.delete_password(SERVICE, _user(vault_id, writer_id))
    except keyring.errors.PasswordDeleteError:
        pass
    except Exception as exc:
        raise KeychainError(f"the OS keychain failed to delete the old device key: {exc}") from None


# ---------------------------------------------------------------------------------- other secrets
# The keys of an object store a vault lives in (camillo.objectstore) are kept here too, each under
# its own service name, never in a settings file.


def store_secret(service: str, user: str, value: str, what: str) -> None:
    """Keep ``value`` under (service, user); KeychainError when no usable keychain can hold it."""
    st = status()
    if not st.usable:
        raise KeychainError(f"{st.reason}, so the {what} cannot be kept there")
    import keyring

    _call(f"store the {what}", lambda: keyring.set_password(service, user, value))


def load_secret(service: str, user: str, what: str) -> str | None:
    """The value kept under (service, user), or None when there is none or no usable keychain."""
    if not status().usable:
        return None
    import keyring

    return _call(f"read the {what}", lambda: keyring.get_password(service, user))


def delete_secret(service: str, user: str, what: str) -> None:
    """Forget what is kept under (service, user), if anything is."""
    if not status().usable:
        return
    import keyring
    import keyring.errors

    try:
        keyring.delete_password(service, user)
    except keyring.errors.PasswordDeleteError:
        pass
    except Exception as exc:
        raise KeychainError(f"the OS keychain failed to delete the {what}: {exc}") from None
