"""Shared fixtures.  Qt must be told to run offscreen before anything imports PySide6."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import pytest

PASSPHRASE = "correct horse battery staple"


@pytest.fixture(autouse=True)
def camillo_env(tmp_path):
    """Every test gets its own installation (CAMILLO_HOME), tiny test-only Argon2 parameters and,
    unless a test asks for the Secret Service, no OS keychain (the sealed local fallback).  Set with a
    MonkeyPatch of its own: a test's ``monkeypatch.undo()`` (undoing its own patches) leaves these, so
    that what it does next still runs in its own installation, not the user's."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CAMILLO_HOME", str(tmp_path / "home"))
        mp.setenv("CAMILLO_INSECURE_TEST_KDF", "1")
        mp.setenv("CAMILLO_KEYCHAIN", "none")
        for name in ("CAMILLO_PASSPHRASE", "CAMILLO_RECOVERY_PHRASE", "CAMILLO_NEW_PASSPHRASE", "CAMILLO_DEBUG"):
            mp.delenv(name, raising=False)
        yield


@pytest.fixture
def passphrase() -> str:
    return PASSPHRASE


@pytest.fixture
def new_vault(tmp_path):
    """A fresh vault (folder ``vault`` under tmp_path) and its recovery phrase."""
    from camillo import Vault

    path = str(tmp_path / "vault")
    vault, phrase = Vault.create(path, PASSPHRASE, device_name="test laptop")
    yield path, vault, phrase
    if not vault.locked:
        vault.lock()
