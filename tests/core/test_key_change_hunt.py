"""Writes, erasures, passphrase changes and partial syncs in any interleaving, on two devices without an
OS keychain: a property test too slow for the default run (about 10 s an example).  Of the examples pinned
below, two failed until spec §16.10 rule 10 (each also has a test of its own in test_key_changes.py); the
one nearest the function failed every time until a random roll handed its previous master secrets to the
new one (spec §16.6 step 5; an offline write lost to an erasure followed by a passphrase change: its
comment says why); two more failed every time until a roll handed on the seal keys of the master
secrets before it for the devices that stay (kind 6), and until a device read the other roll through the
epochs the other master secret delivers (rule 9).

Known and not covered (spec §16.10 "Not covered"; found by a run of 25 with seed 2026, failing every
time, on the code before too), so not pinned: the desktop erases, which replaces its key, while the
laptop changes the passphrase and erases::

    [("write", "laptop", 0), ("write", "desktop", 0), ("erase", "desktop", 0), ("passwd", "laptop", 0),
     ("erase", "laptop", 0)]

The desktop's new key is sealed under its own erasure's master secret, which the laptop's rolls never saw,
and their seal keys name only the keys they knew (handing one on for the desktop's old key would open that
retired key's seals in a backup made before its erasure, found by review).  The desktop reads with the
passphrase it last used; its erasure's new epoch, holding the rest of that compartment, reaches no other
device.

Also known, not pinned (found on 2026-12-07 by a run of 60 with seed 9001, after that day's changes; it also fails
on the code before them, six replays of six on each): the same family as the first, the laptop changing the
passphrase and erasing while the desktop erases (unreadable segments on both)::

    [("write", "laptop", 0), ("write", "laptop", 0), ("sync", 1.0, 0), ("passwd", "laptop", 0), ("erase", "laptop", 0),
     ("erase", "desktop", 0)]

Two more of this family (found on 2026-12-07 by a run of 30 with seed 2027; both fail every time on the code
before that day too, four replays of four): the desktop changes the passphrase and erases while the laptop
erases, before any sync::

    [("write", "laptop", 0), ("write", "laptop", 0), ("write", "desktop", 0), ("write", "desktop", 0),
     ("erase", "laptop", 0), ("erase", "laptop", 0), ("passwd", "desktop", 0), ("erase", "desktop", 0)]
    [("write", "laptop", 0), ("passwd", "desktop", 0), ("write", "laptop", 0), ("erase", "laptop", 0),
     ("write", "desktop", 0), ("erase", "laptop", 0), ("erase", "desktop", 0)]

And two more (found on 2026-12-08 by a run of 60 with seed 44; they fail on the code before 2026-12-07's last key
rules too, `37385ac`, four replays of four each, and seven of eight on the code that found them): the same, after
syncs; the laptop reports an erased record shown, acknowledged writes lost, or its own batches as written after
a revocation::

    [("write", "desktop", 54), ("erase", "laptop", 83), ("write", "laptop", 12), ("sync", 0.31785493672028947, 1736),
     ("sync", 0.5, 548), ("erase", "laptop", 44), ("write", "desktop", 34), ("passwd", "desktop", 36),
     ("erase", "desktop", 98)]
    [("write", "desktop", 54), ("erase", "laptop", 83), ("write", "laptop", 12), ("write", "laptop", 0),
     ("sync", 0.31785493672028947, 1736), ("erase", "laptop", 83), ("write", "desktop", 34), ("passwd", "desktop", 36),
     ("erase", "desktop", 98)]

Not part of the default run: ``CAMILLO_KEYCHANGE_HUNT=EXAMPLES`` turns it on, e.g.::

    CAMILLO_KEYCHANGE_HUNT=40 .venv/bin/python -m pytest -q -p no:cacheprovider tests/core/test_key_change_hunt.py

Found so far (fixed): two passphrase changes at once lost the writes of the device whose key was sealed
under the other change (spec §16.10 rule 9); a passphrase change beside an erasure kept a destroyed
key and lost what the erasure re-encrypted; and two passphrase changes then an erasure, before any sync,
lost the writes of the device whose passphrase the erasure never saw (it registered a new key on a view
that could not read them), or left no passphrase that opens the vault on a new device; and key changes made
on a copy that a sync had brought a key change's records but not all its key files lost what was sealed
under the missing keys.

Also found (the write loss fixed; it failed about 1 run in 3, random ids decide, and still fails about 1 in 5
in its other way, below): a passphrase change on the desktop
concurrent with an erasure on the laptop, partial syncs, then the desktop joined the two master secrets
before the batch announcing the erasure's new key arrived, leaving that key out and deleting what
delivered it; the laptop's write under it was lost for every device (test_key_changes.py has the case;
spec §16.10 rule 9 "read the other roll").  It then failed in its other way (fixed too): a segment the
laptop's erasure wrote, its own batch under its new epoch, which a later erasure of the desktop destroyed
before that segment arrived, stayed unreadable on both copies, or was sealed again and rejected (the
laptop's key, sealed under its erasure's master secret, was lost to the desktop's join and the erasure
after it, and the kept secret with it); an erasure now waits for the batch announcing each epoch it destroys
(test_key_changes.py has the case).  The ops::

    [("passwd", "desktop", 72), ("write", "laptop", 2), ("write", "laptop", 2), ("erase", "laptop", 94),
     ("sync", 0.811085851963012, 17792), ("sync", 0.4047447167234153, 1833), ("erase", "desktop", 14)]

Also found (on 2026-12-07 with seed 20261207, failing about 1 run in 25, on the code of earlier rounds too; fixed):
a partial sync brought the desktop the laptop's passphrase change without the desktop's own slot of it; the
desktop's passphrase change, then the laptop's roll after it, gave its key no slot, and it read nothing the
laptop wrote after (test_key_changes.py::test_a_device_whose_own_slot_has_not_arrived_keeps_one_through_the_
rolls_after_it; spec §16.6 step 3: the acting device and the signers of a slot hold its master secret)::

    [("passwd", "laptop", 31), ("write", "laptop", 23), ("write", "desktop", 39), ("sync", 0.6866, 11654),
     ("passwd", "desktop", 64)]

Also found (by the default run's interleaving test of writes and erasures, in about half its runs of
one sequence; fixed): an erasure made on a device that another erasure's new segment had not reached
destroyed the epoch that segment is sealed under, and the device that kept it deleted the segment instead
of sealing it again (its own manifest listed the batches): test_key_changes.py has the case.
"""

from __future__ import annotations

import os
import random

import pytest
from camillo import Incomplete, NewRecord, ReadOnlyVault, Unlock, Vault, WrongCredential
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from .test_key_changes import (
    PASSPHRASE,
    _destroyed_secrets_on_disk,
    _summary,
    laptop_and_desktop,
    open_as_a_person,
    serious,
)

EXAMPLES = int(os.environ.get("CAMILLO_KEYCHANGE_HUNT", "0") or 0)
pytestmark = pytest.mark.skipif(EXAMPLES <= 0, reason="the hunt runs only with CAMILLO_KEYCHANGE_HUNT=EXAMPLES")

op = st.one_of(
    st.tuples(st.just("write"), st.sampled_from(["laptop", "desktop"]), st.integers(0, 99)),
    st.tuples(st.just("erase"), st.sampled_from(["laptop", "desktop"]), st.integers(0, 99)),
    st.tuples(st.just("passwd"), st.sampled_from(["laptop", "desktop"]), st.integers(0, 99)),
    st.tuples(st.just("sync"), st.floats(0.2, 1.0), st.integers(0, 2**16)),
)
PHRASES = [PASSPHRASE] + [f"passphrase number {i} of the hunt" for i in range(1, 12)]


@settings(max_examples=max(EXAMPLES, 1), deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=3, max_size=9))
# failed until this device's key, sealed under the passphrase set on it, was no longer replaced on a view
# that could not read what it wrote (it waits for that passphrase, notice key-sealed-elsewhere)
@example(ops=[("passwd", "laptop", 55), ("write", "laptop", 52), ("write", "laptop", 49), ("passwd", "desktop", 41),
              ("write", "desktop", 99), ("write", "laptop", 0), ("write", "laptop", 52), ("write", "laptop", 69),
              ("erase", "desktop", 63)])
# failed until key changes waited for keys a partial sync had not brought: the laptop's passphrase change
# arrived without all its envelopes; the desktop sealed to an epoch it had only the public key of, then its
# passphrase change or erasure rolled to a master secret that delivered no copy of it (lost for every device),
# or its key replacement's revocation, made on that view, rejected its old key's batches
@example(ops=[("erase", "laptop", 60), ("passwd", "laptop", 22), ("erase", "laptop", 88), ("sync", 0.799075251374509, 0),
              ("write", "desktop", 53), ("erase", "laptop", 33), ("passwd", "desktop", 47), ("erase", "laptop", 33),
              ("erase", "desktop", 73)])
# lost a write in about 1 run in 3 until a join waited for the other roll's records (spec §16.10 rule 9); then
# failed in about 1 run in 4 (10 of 32 replays) until an erasure waited for the batch that announced each epoch
# it destroys (rule 2): the desktop destroyed the epoch of the laptop's erasure before that erasure's own batch
# arrived, and the laptop's key (with the kept secret) was lost to the desktop's join and erasure
@example(ops=[("passwd", "desktop", 72), ("write", "laptop", 2), ("write", "laptop", 2), ("erase", "laptop", 94),
              ("sync", 0.811085851963012, 17792), ("sync", 0.4047447167234153, 1833), ("erase", "desktop", 14)])
# failed in about 1 run in 12 (2 of 24, 1 of 30 and 1 of 16 replays; found by a random run of the hunt, no erasure
# in it) until a device waited, before replacing its key, for the records and key files of the roll that made
# its current generation (spec §16.10 rule 8; 0 of 40 since): three passphrase changes and partial syncs; the
# laptop, its key sealed under a master secret the partial view could not reach, replaced it on a view that
# could not read its own batches, and readers rejected them as written after the revocation.
@example(ops=[("passwd", "desktop", 18), ("write", "laptop", 28), ("sync", 0.3333333333333333, 527),
              ("sync", 0.5674917546648084, 291), ("sync", 0.6446906483727974, 1716), ("sync", 0.75, 4067),
              ("passwd", "desktop", 94), ("sync", 0.8315802986433545, 20), ("passwd", "laptop", 88)])
# failed every time (found on 2026-12-06 by a run of 200 with seed 424242; on the code before too) until a device's
# own passphrase opened its key at the newest generation beside another master secret, and a device read the other
# roll before its signer was known (spec §16.10 rules 9 and 10; test_key_changes.py::
# test_a_passphrase_change_beside_another_change_and_an_erasure_is_joined_by_the_device_that_set_it)
@example(ops=[("passwd", "laptop", 0), ("passwd", "desktop", 0), ("write", "laptop", 0), ("passwd", "laptop", 0),
              ("write", "desktop", 0), ("erase", "desktop", 0)])
# failed in about 1 run in 4 to 1 in 12 (found on 2026-12-06 by a run of 40 with seed 8080; 3 of 12 replays on the
# code before that day, 1 of 12 and 3 of 16 on the day's; 0 of 16 since) until a key change waited for the current
# epoch of every compartment (spec §16.10 rule 10; test_key_changes.py::
# test_a_key_change_waits_for_the_current_key_of_every_compartment): a partial sync brought the desktop the laptop's
# passphrase change without one compartment's new envelopes; the desktop's erasure sealed its key rotation there to
# that epoch's public key and rolled the keys without its secret
@example(ops=[("passwd", "laptop", 8), ("erase", "desktop", 94), ("sync", 0.5, 25711), ("passwd", "desktop", 33),
              ("sync", 0.404813861074122, 40184), ("write", "laptop", 94), ("sync", 0.5, 581), ("write", "laptop", 99),
              ("erase", "desktop", 94)])
# failed every time (found on 2026-12-06 by a run of 40 with seed 5150; on the code before too) until a device read
# the other roll through the epochs the other master secret delivers (spec §16.10 rule 9; test_key_changes.py::
# test_two_passphrase_changes_on_each_device_at_once_are_joined): two passphrase changes on each device before any
# sync were never joined, each side's writes unreadable on the other
@example(ops=[("passwd", "laptop", 0), ("passwd", "laptop", 0), ("passwd", "desktop", 0), ("passwd", "desktop", 0)])
# failed every time (found on 2026-12-06 by a run of 25 with seed 2026, and on the code before that day's changes
# too) until every roll handed on the seal keys of the master secrets before it, for the devices that stay (spec
# §16.6, kind 6; test_key_changes.py::test_an_offline_write_survives_a_passphrase_change_then_an_erasure_on_another_
# device): the desktop's offline write, sealed under the epoch the laptop's erasure destroyed after its passphrase
# change, was lost with the key the desktop could no longer find
@example(ops=[("write", "laptop", 32), ("passwd", "laptop", 46), ("write", "desktop", 40), ("erase", "laptop", 40),
              ("erase", "laptop", 62)])
# failed every time (found on 2026-12-06 by a run of 40 with seed 31337; on the code before that day's changes too)
# until a device not yet on the newest generation deleted no slot (spec §16.7; test_key_changes.py::
# test_a_device_not_yet_on_the_newest_keys_keeps_its_way_back_to_its_key): the laptop writes and erases that record;
# the desktop, before any sync, changes the passphrase twice. Once synced, the laptop, opened with the passphrase it
# last used at its erasure's generation, cleared that generation's slot of the replaced passphrase, its only way back
# to its key, and never handed over the epoch its erasure made, which the desktop's later roll lacked.
@example(ops=[("write", "laptop", 0), ("erase", "laptop", 0), ("passwd", "desktop", 0), ("passwd", "desktop", 0)])
# failed every time until a random roll handed its previous master secrets to the new one (spec §16.6 step 5,
# test_key_changes.py::test_an_offline_write_survives_an_erasure_then_a_passphrase_change_on_another_device):
# the laptop writes while offline; the desktop erases in the same compartment (the laptop's write is sealed
# under the epoch it destroys; the laptop keeps that secret to seal the write again, §16.10) and then changes
# the passphrase. That random roll left no seal of the laptop's key (no keychain) under any master secret a
# slot still wraps: the laptop registered a new key, and the kept secret, in the old key's device state,
# went with the old key. The write was lost.
@example(ops=[("write", "laptop", 0), ("write", "desktop", 0), ("erase", "desktop", 0), ("passwd", "desktop", 0)])
# failed about 1 run in 2 (found on 2026-12-07 by a run of 60 with seed 9001; on the code before that day too) until
# a passphrase set on this device that does not count opened its key at the newest generation while no passphrase
# that counts has a slot there, and a roll issued the one that counts a slot from its CRED_ANCHOR (spec §16.10 rules
# 9 and 10; test_key_changes.py::test_a_passphrase_set_here_that_does_not_count_still_opens_this_devices_key_at_the_
# newest_generation): when the desktop's passphrase won, the laptop read under it at an older generation, replaced its
# key there, and what only its own rolls delivered stayed unreadable, beside a rollback alert (generation 3 against 5)
@example(ops=[("write", "desktop", 28), ("erase", "desktop", 56), ("passwd", "desktop", 81), ("passwd", "laptop", 22),
              ("passwd", "laptop", 35), ("passwd", "laptop", 45), ("erase", "desktop", 56), ("passwd", "laptop", 94),
              ("sync", 0.7264370288827424, 27935)])
# hid the laptop's writes in 2 to 3 replays of 6 (found on 2026-12-07 by a run of 60 with seed 31337; on the code
# before that day too) until the notice waiting-for-join said what it needs: the desktop's passphrase counted, the
# laptop opened with it read only (its key sealed under its own change's master secret of the same generation), and
# the notice sent the person to the other device, whose key, replaced by its erasure, opens only one of the two; the
# laptop joins them when opened once with the passphrase last used on it, which the notice now says (and the person
# here, open_as_a_person, does)
@example(ops=[("erase", "desktop", 33), ("write", "desktop", 8), ("write", "laptop", 58), ("erase", "desktop", 16),
              ("passwd", "laptop", 22), ("passwd", "laptop", 22), ("write", "desktop", 16), ("passwd", "desktop", 3),
              ("write", "laptop", 8)])
def test_key_changes_in_any_interleaving_lose_nothing(tmp_path_factory, ops):
    roots, homes, sync = laptop_and_desktop(tmp_path_factory.mktemp("hunt"))
    used = [PASSPHRASE]

    def open_(who: str) -> tuple[Vault, str]:
        return open_as_a_person(roots[who], homes[who], used)

    written: dict[bytes, str] = {}
    erased: set[bytes] = set()
    for step in ops:
        try:  # a refusal (incomplete copy, a credential another change replaced, waiting for a join) acknowledges nothing
            if step[0] == "write":
                v, _ = open_(step[1])
                with v:
                    written[v.append([NewRecord(type="message", text=f"{step[1]} {step[2]}")]).written[0]] = step[1]
            elif step[0] == "erase":
                v, _ = open_(step[1])
                with v:
                    mine = sorted(r.id for r in v.timeline() if r.id in written and r.id not in erased)
                    if mine:
                        target = mine[step[2] % len(mine)]
                        v.erase([target])
                        erased.add(target)
            elif step[0] == "passwd":
                v, phrase = open_(step[1])
                with v:
                    v.change_passphrase(PHRASES[len(used)], reauth=Unlock.passphrase(phrase))
                used.append(PHRASES[len(used)])
            else:
                sync.partial(random.Random(step[2]), step[1])
        except (Incomplete, WrongCredential, ReadOnlyVault):
            pass
    for _ in range(4):
        sync.sync()
        for who in ("laptop", "desktop"):
            v, _ = open_(who)
            with v:
                v.refresh()
            sync.sync()
    states = {}
    for who in ("laptop", "desktop"):
        v, _ = open_(who)
        with v:
            states[who] = _summary(v)
            shown = {r.id for r in v.timeline()}
            assert not set(written) - erased - shown, f"{who} lost acknowledged writes: {serious(v)}"
            assert not erased & shown, f"{who} shows an erased record"
            assert _destroyed_secrets_on_disk(roots[who], v) == set(), f"{who} delivers a destroyed key"
            assert serious(v) == [], who
    assert states["laptop"] == states["desktop"]
