"""Fixtures of tests/sync: a pair of real Syncthing instances on loopback (:mod:`tests.sync.syncthing`).

``syncthing_pair`` gives a test the module's pair (started once per module, ~2 s), reset to a known
state (both running, resumed, unthrottled, quiescent) with ``a.folder`` / ``b.folder`` pointing at a
fresh vault subfolder and ``side.home(name)`` at fresh installations.  If the pair cannot be brought
back after a failed test, a new pair replaces it.  When a test fails, both instances' logs are
printed (pytest shows them with the failure).

Without the ``syncthing`` binary the tests are skipped, except under CI (``CI`` set), where that is
a failure: scripts/setup installs it.

pytest main thread only.
"""

from __future__ import annotations

import os
import re

import pytest

from tests.sync.syncthing import Pair, SyncthingError, syncthing_binary


class Holder:
    def __init__(self, root: str) -> None:
        self.root = root
        self.n = 0
        self.pair: Pair | None = None

    def fresh(self) -> Pair:
        self.close()
        self.n += 1
        self.pair = Pair(os.path.join(self.root, f"pair{self.n}")).start()
        return self.pair

    def close(self) -> None:
        if self.pair is not None:
            self.pair.close()
            self.pair = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, f"rep_{rep.when}", rep)


@pytest.fixture(scope="module")
def _syncthing_holder(tmp_path_factory):
    if syncthing_binary() is None:
        if os.environ.get("CI"):
            pytest.fail("syncthing is not installed; scripts/setup installs it (apt-get install syncthing)")
        pytest.skip("syncthing is not installed (apt-get install syncthing)")
    holder = Holder(str(tmp_path_factory.mktemp("syncthing")))
    try:
        yield holder
    finally:
        holder.close()


@pytest.fixture
def syncthing_pair(_syncthing_holder, request):
    """Two Syncthing instances sharing a folder; ``.a`` and ``.b`` are the sides."""
    holder = _syncthing_holder
    pair = holder.pair
    if pair is None:
        pair = holder.fresh()
    else:
        try:
            pair.reset()
        except (SyncthingError, OSError) as exc:
            print(f"the pair could not be reset ({str(exc).splitlines()[0]}); starting a new one")
            pair = holder.fresh()
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)[:80]
    pair.begin(name)
    yield pair
    call = getattr(request.node, "rep_call", None)
    if call is not None and call.failed:
        print(pair.error(f"syncthing logs after the failure of {request.node.name}"))
