"""Tests over a real sync engine: two Syncthing instances on loopback carry a vault folder between
two installations (docs/testing-sync.md).  Test code runs on the pytest main thread."""
