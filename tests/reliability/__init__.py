"""Reliability tests: crashes (SIGKILL and emulated power cuts), sync-service faults and resource
faults (disk full, read-only folder, missing or locked keychain).  ``scripts/reliability`` runs them
at a larger scale (``CAMILLO_RELIABILITY_SCALE``).  Test code runs on the pytest main thread."""
