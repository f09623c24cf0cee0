"""Every test runs in its own installation, whatever it patches and undoes (tests/conftest.py)."""

from __future__ import annotations

import os


def test_a_tests_own_undo_keeps_its_isolated_installation(monkeypatch, tmp_path):
    """A test that undoes its own patches (``monkeypatch.undo()``, used to end a simulated fault) must
    still run in its own CAMILLO_HOME, without the OS keychain and with the test KDF: before, the undo
    also removed those, and what the test did next wrote into the user's own data directory."""
    monkeypatch.setattr(os, "sep", os.sep)
    monkeypatch.undo()
    assert os.environ["CAMILLO_HOME"] == str(tmp_path / "home")
    assert os.environ["CAMILLO_KEYCHAIN"] == "none" and os.environ["CAMILLO_INSECURE_TEST_KDF"] == "1"
