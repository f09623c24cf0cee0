"""The passes that follow references, run over a change's reach, equal a pass over everything.

``State.materialize`` with ``affected`` runs the reference, hiding and fact passes only over what a
change can reach (``camillo.passes.reach``): the records of the affected batches, what refers to
them (transitively), what a CONFIRM among them confirms, and the facts of their keys.  Here random
sequences of what changes validity, classes, hiding and facts (derived records citing sources, agent
proposals, confirmations, rejections, forgetting, supersession, erasure of any of them, a batch
whose segment vanishes) are applied, and after every step the state the scoped passes left is
compared, column by column, with what a pass over every record gives.
"""

from __future__ import annotations

import os
import random

import pytest
from camillo import NewRecord, Unlock, Vault
from camillo.errors import VaultError

PASSPHRASE = "correct horse battery staple"


def _snapshot(vault: Vault) -> tuple[list[tuple], list[tuple]]:
    db = vault.session.materialized.db
    records = db.execute("SELECT id, valid, reason, effective, hidden, erased FROM records ORDER BY id").fetchall()
    facts = db.execute("SELECT compartment, key, status, current, candidates, discarded, history, proposed "
                       "FROM facts ORDER BY compartment, key").fetchall()
    return records, facts


def _full_pass(vault: Vault) -> tuple[list[tuple], list[tuple]]:
    reader = vault.session.reader
    reader.materialized.materialize(reader.roster, reader.log, reader.batches, None)
    return _snapshot(vault)


def _step(rng: random.Random, vault: Vault, agent: Vault, vault_path: str) -> str:
    ids = [r.id for r in vault.session.materialized.timeline(include_hidden=True)]
    pick = (lambda: rng.choice(ids)) if ids else (lambda: None)
    what = rng.choice(["note", "note", "fact", "fact", "derived", "agent", "agent", "confirm", "reject",
                       "forget", "forget-key", "supersede", "erase", "vanish", "vanish"])
    keys = ["user/city", "user/diet", "user/pet"]
    if what == "note":
        vault.append([NewRecord(type="message", conversation="c", role="user", text=f"garden note {rng.random()}")])
    elif what == "fact":
        vault.append([NewRecord(type="fact", key=rng.choice(keys), value=rng.choice(["a", "b", "c"]))])
    elif what == "derived" and ids:
        vault.append([NewRecord(type="message", conversation="c", role="assistant", text="a summary",
                                authority=rng.choice(["user", "inferred", "external"]),
                                sources=[pick() for _ in range(rng.randint(1, 2))])])
    elif what == "agent":
        sources = [pick()] if ids and rng.random() < 0.6 else []
        sources = [s for s in sources if s is not None]
        if rng.random() < 0.6:
            item = NewRecord(type="fact", key=rng.choice(keys), value="proposed", authority="inferred", sources=sources)
        else:
            item = NewRecord(type="message", text="agent says", conversation="c", role="assistant",
                             authority="inferred", sources=sources)
        agent.append([item])
        vault.refresh()
    elif what in ("confirm", "reject"):
        inbox = [r.id for r in vault.inbox()]
        if inbox:
            if what == "confirm":
                vault.confirm([rng.choice(inbox)], replace=rng.random() < 0.7)
            else:
                vault.reject([rng.choice(inbox)])
    elif what == "forget" and ids:
        try:
            vault.forget(record=pick())
        except VaultError:
            pass
    elif what == "forget-key":
        try:
            vault.forget(key=rng.choice(keys))
        except VaultError:
            pass
    elif what == "supersede":
        try:
            fact = vault.fact(rng.choice(keys))
        except VaultError:
            fact = None
        if fact is not None and fact.current is not None:
            vault.append([NewRecord(type="fact", key=fact.key, value="newer", pred=[fact.current.id])])
    elif what == "erase" and ids:
        try:
            vault.erase([pick()])
        except VaultError:
            pass
    elif what == "vanish":  # a segment of the agent's goes away (a sync that lost it): its batches are forgotten
        reader = vault.session.reader
        theirs = [n for n, bids in reader.segment_batches.items()
                  if bids and all(reader.batches.get(b) is not None
                                  and reader.batches[b].writer_id == agent.writer_id for b in bids)]
        if theirs:
            os.unlink(os.path.join(vault_path, rng.choice(sorted(theirs))))
            vault.refresh()
    return what


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_the_scoped_passes_equal_a_pass_over_everything_after_every_step(new_vault, tmp_path, seed):
    path, vault, _ = new_vault
    grant = str(tmp_path / "agent.grant")
    vault.create_grant("planner", {"personal": "write"}, grant)
    agent = Vault.open(path, Unlock.grant(grant), home=str(tmp_path / "agent"))
    rng = random.Random(seed)
    done = []
    try:
        for _ in range(40):
            done.append(_step(rng, vault, agent, path))
            agent.refresh()
            scoped = _snapshot(vault)
            assert scoped == _full_pass(vault), f"after {done}"
    finally:
        agent.lock()
    assert {"erase", "confirm", "derived", "agent"} & set(done)
