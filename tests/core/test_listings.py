"""Listings of a vault of any size a page at a time (issue 19, item 2): the facts read after a fact
or from an offset, counted and grouped by subject in the state's tables; ``camillo facts`` and
``camillo log`` reading page after page, holding one page however many rows they print.
"""

from __future__ import annotations

import hashlib
import io
import json
import tracemalloc
from contextlib import redirect_stdout

import pytest
from camillo import Authority, NewRecord

from .helpers import cli


def fact(key: str, value: str, **kw: object) -> NewRecord:
    return NewRecord(type="fact", key=key, value=value, **kw)


@pytest.fixture
def facts_vault(new_vault):
    """Facts in two compartments (the same key in both), of several subjects whose names are prefixes
    of each other's or differ in case, one forgotten, one with a proposal beside it, one with only a proposal."""
    _path, vault, _phrase = new_vault
    vault.append([fact(f"user/k{i:02}", f"value {i}") for i in range(25)]
                 + [fact("username/handle", "ada"), fact("user-x/a", "dash"), fact("User/capital", "case"),
                    fact("agent/tone", "plain"), fact("/odd/key", "no subject")])
    vault.append([fact("user/k03", "at work"), fact("work/desk", "by the window")], compartment="work")
    vault.forget(key="user/k07")
    vault.append([fact("user/k09", "proposed", authority=Authority.OBSERVED),
                  fact("user/only_proposed", "maybe", authority=Authority.OBSERVED)])
    return vault


def identity(facts) -> list[tuple[str, bytes, str]]:
    return [(f.key, f.compartment_id, f.status) for f in facts]


def test_the_facts_a_page_at_a_time_equal_the_whole_list(facts_vault):
    vault = facts_vault
    work = vault.compartment_id("work")
    for filters in ({}, {"subject": "user"}, {"compartments": [work]}, {"forgotten": False}, {"status": "deleted"},
                    {"proposed": True}):
        whole = vault.facts(**filters)
        assert whole, filters
        by_offset = [f for start in range(0, len(whole) + 4, 4) for f in vault.facts(offset=start, limit=4, **filters)]
        assert identity(by_offset) == identity(whole), filters
        read_on: list = []
        while len(page := vault.facts(limit=4, after=(read_on[-1].key, read_on[-1].compartment_id) if read_on
                                      else None, **filters)) == 4:
            read_on += page
        assert identity(read_on + page) == identity(whole), filters
        assert [f.to_json() for f in read_on + page] == [f.to_json() for f in whole]  # (the same views)
        counts = vault.fact_counts(**filters)
        assert counts == {s: n for s in ("ok", "conflict", "deleted", "pending")
                          if (n := sum(1 for f in whole if f.status == s))}, filters
    keys = [f.key for f in vault.facts()]
    assert keys == sorted(keys) and keys.count("user/k03") == 2
    # a subject is the keys "<subject>/...", compared exactly: not "username/..." nor "user-x/..." nor "User/..."
    assert {f.key for f in vault.facts(subject="user")} == {f"user/k{i:02}" for i in range(25)} | {"user/only_proposed"}
    assert [f.key for f in vault.facts(subject="User")] == ["User/capital"]
    assert [f.key for f in vault.facts(subject="")] == ["/odd/key"]
    assert "user/k07" not in [f.key for f in vault.facts(forgotten=False)]
    assert vault.fact_subjects() == [("", 1), ("User", 1), ("agent", 1), ("user", 27), ("user-x", 1),
                                     ("username", 1), ("work", 1)]
    assert vault.fact_subjects(compartments=[work]) == [("user", 1), ("work", 1)]
    assert sum(n for _s, n in vault.fact_subjects()) == len(keys)
    assert vault.fact_counts()["pending"] == 1 and vault.fact_counts()["deleted"] == 1


def test_a_page_of_facts_is_a_range_of_the_index_of_keys(facts_vault):
    """After a fact, a page is a range of the index of keys (not a walk of the table from its start
    nor a sort of every fact)."""
    db = facts_vault.session.materialized.db
    for sql in ("SELECT key FROM facts WHERE (key, compartment) > (?, ?) ORDER BY key, compartment LIMIT 10",
                "SELECT key FROM facts WHERE key >= ? AND key < ? AND (key, compartment) > (?, ?) "
                "ORDER BY key, compartment LIMIT 10"):
        plan = " ".join(str(r[-1]) for r in db.execute("EXPLAIN QUERY PLAN " + sql, ["user"] * sql.count("?")))
        assert "SEARCH facts USING COVERING INDEX facts_by_key" in plan and "TEMP B-TREE" not in plan, plan


@pytest.fixture
def cli_vault(new_vault, monkeypatch):
    path, vault, _phrase = new_vault
    for start in range(0, 600, 200):
        vault.append([fact(f"user/k{i:04}", f"value {i} " + "words " * 170) for i in range(start, start + 200)])
        vault.append([NewRecord(type="message", conversation="c", role="user", text=f"note {i} " + "words " * 170)
                      for i in range(start, start + 200)])
    vault.lock()
    monkeypatch.setenv("CAMILLO_PASSPHRASE", "correct horse battery staple")
    return path


@pytest.mark.parametrize("command", ["facts", "log"])
def test_camillo_facts_and_log_print_every_row_holding_a_page(cli_vault, monkeypatch, command):
    """``camillo facts`` and ``camillo log`` print every row, as the whole listing gives them, reading
    a page at a time: with 600 facts and 600 messages of 1 KB, what the listing allocates at its peak
    past the open is a page of 25, not every row (before: 1.8 MB for the facts and 3.9 MB for the log; about
    150 KB each with pages of 25)."""
    from camillo.cli import common, main

    code, whole, err = cli(command, cli_vault, "--json")
    assert code == 0, err
    rows = [json.loads(line) for line in whole.splitlines()]
    assert len(rows) == (600 if command == "facts" else 1200)
    if command == "facts":
        assert [r["key"] for r in rows] == [f"user/k{i:04}" for i in range(600)]
    monkeypatch.setattr(common, "LISTING_PAGE", 25)
    code, paged, err = cli(command, cli_vault, "--json")
    assert code == 0 and paged == whole, err
    code, text, err = cli(command, cli_vault)  # (the text lines: short, what the output itself holds is small)
    assert code == 0 and len(text.splitlines()) >= len(rows), err
    opened = {}

    def measured_open(*args, **kwargs):
        vault = real_open(*args, **kwargs)
        opened["at"] = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        return vault

    real_open = common.open_vault
    monkeypatch.setattr(f"camillo.cli.{'memory' if command == 'facts' else 'vault_cmds'}.open_vault", measured_open)
    printed = Printed()
    tracemalloc.start()
    try:
        with redirect_stdout(printed):  # (what is printed is hashed, not kept)
            code = main([command, cli_vault])
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 0 and printed.digest.hexdigest() == hashlib.sha256(text.encode()).hexdigest()
    assert peak - opened["at"] < 600_000, f"the listing allocated {peak - opened['at']} bytes past the open"


class Printed(io.TextIOBase):
    """Standard output that keeps a digest of what is written, not the text."""

    def __init__(self) -> None:
        self.digest = hashlib.sha256()

    def write(self, text: str) -> int:
        self.digest.update(text.encode())
        return len(text)
