"""How the desktop names the OS keychain that keeps this computer's device key (the settings dialog
and the devices view say it the same way).  Pure functions; any thread.
"""

from __future__ import annotations


def keychain_name(backend: str) -> str:
    """A person's name for a keyring backend class (``keyring.backends.SecretService.Keyring``)."""
    if "SecretService" in backend or "libsecret" in backend:
        return "the desktop's Secret Service (GNOME Keyring or KWallet)"
    if "macOS" in backend:
        return "the macOS Keychain"
    if "Windows" in backend:
        return "the Windows Credential Manager"
    if "kwallet" in backend.lower():
        return "KWallet"
    return backend
