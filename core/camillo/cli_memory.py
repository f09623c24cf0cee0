"""``camillo`` commands that read and act on memory: facts, conflicts, the inbox, search, merge.

Registered into :mod:`camillo.cli` at start-up; runs on the main thread of the CLI process.
"""

from __future__ import annotations

import argparse
import json
import sys

from .cli import _fmt_time, _json, _one_line, _open, _out, extra_commands
from .errors import UsageError
from .values import FactView, RecordView
from .vault import Vault


def _id(text: str) -> bytes:
    try:
        raw = bytes.fromhex(text.strip())
    except ValueError:
        raise UsageError(f"'{text}' is not a record id (64 hex digits)") from None
    if len(raw) != 32:
        raise UsageError(f"'{text}' is not a full record id (64 hex digits)")
    return raw


def _resolve_id(vault, text: str) -> bytes:
    return vault.find_record(text).id


def _print_fact(f: FactView) -> None:
    cur = f.current
    value = "-" if cur is None or cur.kind_name != "PUT" else _one_line(cur.text, 50)
    cls = f"[{cur.effective_label}]" if cur is not None and cur.kind_name == "PUT" else ""
    _out(f"{f.key:<32} {f.compartment:<9} {f.status:<8} {cls:<11} {value}")


def _print_record(v: RecordView) -> None:
    what = v.type or v.kind_name.lower()
    body = f"{v.key} = {_one_line(v.text, 50)}" if v.key else _one_line(v.text, 70)
    _out(f"{_fmt_time(v.ts)}  {v.id.hex()[:12]}  {v.compartment:<9} {what:<12} [{v.effective_label:<8}] {v.writer:<16} {body}")


def cmd_facts(args: argparse.Namespace) -> int:
    with _open(args) as vault:
        filters = {}
        if args.compartment:
            filters["compartments"] = [vault.compartment_id(args.compartment)]
        if args.subject:
            filters["subject"] = args.subject
        for f in vault.facts(**filters):
            _json(f.to_json()) if args.json else _print_fact(f)
    return 0


def cmd_fact(args: argparse.Namespace) -> int:
    with _open(args) as vault:
        f = vault.fact(args.key, args.compartment)
        if args.json:
            out = f.to_json()
            out["history_records"] = [r.to_json() for r in f.history]
            out["sources"] = {r.id.hex(): [s.to_json() for s in vault.records(r.sources)] for r in f.history if r.sources}
            _json(out)
            return 0
        _print_fact(f)
        for r in f.history:
            mark = "*" if f.current is not None and r.id == f.current.id else " "
            _out(f" {mark} {_fmt_time(r.ts)} {r.id.hex()[:12]} {r.kind_name:<4} [{r.effective_label:<8}] "
                 f"{r.writer:<16} {_one_line(r.text, 40)}")
            for s in vault.records(r.sources):
                _out(f"       because of {s.id.hex()[:12]} {s.type}: {_one_line(s.text, 50)}")
    return 0


def cmd_conflicts(args: argparse.Namespace) -> int:
    with _open(args) as vault:
        for f in vault.conflicts():
            if args.json:
                out = f.to_json()
                out["candidates_records"] = [c.to_json() for c in f.candidates]
                _json(out)
                continue
            _out(f"{f.key} in {f.compartment}: {len(f.candidates)} concurrent values (preferred first)")
            for c in f.candidates:
                _out(f"   {c.id.hex()[:12]}  [{c.effective_label:<8}] {c.writer:<16} {_one_line(c.text, 50)}")
    return 0


def cmd_resolve(args: argparse.Namespace) -> int:
    if (args.pick is None) == (args.value is None):
        raise UsageError("give exactly one of --pick RECORD_ID and --value JSON")
    with _open(args) as vault:
        if args.pick is not None:
            changes = vault.resolve(args.key, compartment=args.compartment, pick=_resolve_id(vault, args.pick))
        else:
            try:
                value = json.loads(args.value)
            except json.JSONDecodeError:
                value = args.value  # a bare word is taken as text
            changes = vault.resolve(args.key, compartment=args.compartment, value=value, value_given=True)
        for rid in changes.written:
            _json({"id": rid.hex()})
    return 0


def cmd_inbox(args: argparse.Namespace) -> int:
    with _open(args) as vault:
        for v in vault.inbox():
            if args.json:
                out = v.to_json()
                out["sources_records"] = [s.to_json() for s in vault.records(v.sources)]
                _json(out)
            else:
                _print_record(v)
    return 0


def cmd_confirm(args: argparse.Namespace) -> int:
    with _open(args) as vault:
        changes = vault.confirm([_resolve_id(vault, r) for r in args.record])
        for rid in changes.written:
            _json({"id": rid.hex()})
    return 0


def cmd_reject(args: argparse.Namespace) -> int:
    with _open(args) as vault:
        changes = vault.reject([_resolve_id(vault, r) for r in args.record])
        for rid in changes.written:
            _json({"id": rid.hex()})
    return 0


def cmd_forget(args: argparse.Namespace) -> int:
    if (args.key is None) == (args.record is None):
        raise UsageError("give exactly one of --key KEY and --record ID")
    with _open(args) as vault:
        if args.key is not None:
            changes = vault.forget(key=args.key, compartment=args.compartment)
        else:
            changes = vault.forget(record=_resolve_id(vault, args.record))
        for rid in changes.written:
            _json({"id": rid.hex()})
    sys.stderr.write("Hidden. It remains in the encrypted history; use 'camillo erase' to destroy it.\n")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    with _open(args) as vault:
        for v in vault.search(args.query, limit=args.limit):
            _json(v.to_json()) if args.json else _print_record(v)
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    copied = Vault.merge(args.vault, args.other)
    with _open(args) as vault:
        conflicts = vault.conflicts()
        problems = vault.problems()
        summary = {"copied": len(copied), "conflicts": [f.key for f in conflicts],
                   "discarded_edits": [f.key for f in vault.facts(status="deleted") if f.discarded],
                   "problems": [p.to_json() for p in problems]}
        if args.json:
            _json(summary)
        else:
            _out(f"merged: {len(copied)} files copied from {args.other}")
            for f in conflicts:
                _out(f"conflict: {f.key} in {f.compartment} has {len(f.candidates)} concurrent values "
                     f"(resolve with: camillo resolve {args.vault} {f.key} --pick ID)")
            for key in summary["discarded_edits"]:
                _out(f"deleted: {key} was deleted concurrently with an edit; the edit was discarded")
            for p in problems:
                _out(f"{p.kind}: {p.message}")
    return 0


@extra_commands
def register(sub, command) -> None:
    p = command("facts", cmd_facts, "facts by key: value, authority, status (ok, conflict, deleted, pending)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--compartment")
    p.add_argument("--subject", help="only keys <subject>/...")
    p = command("fact", cmd_fact, "one fact with its history and provenance")
    p.add_argument("key")
    p.add_argument("--compartment")
    p.add_argument("--json", action="store_true")
    p = command("conflicts", cmd_conflicts, "open conflicts and their candidates")
    p.add_argument("--json", action="store_true")
    p = command("resolve", cmd_resolve, "resolve a conflict: pick a candidate or write a new value")
    p.add_argument("key")
    p.add_argument("--pick", metavar="RECORD_ID")
    p.add_argument("--value", metavar="JSON")
    p.add_argument("--compartment")
    p = command("inbox", cmd_inbox, "inferences awaiting confirmation")
    p.add_argument("--json", action="store_true")
    p = command("confirm", cmd_confirm, "confirm inferences (a signed CONFIRM raises them to user authority)")
    p.add_argument("record", nargs="+", metavar="RECORD_ID")
    p = command("reject", cmd_reject, "reject inferences (a DEL hides them; an earlier value is restored)")
    p.add_argument("record", nargs="+", metavar="RECORD_ID")
    p = command("forget", cmd_forget, "hide a fact or a message (a DEL; erase destroys)")
    p.add_argument("--key")
    p.add_argument("--record", metavar="ID")
    p.add_argument("--compartment")
    p = command("search", cmd_search, "full-text search with modifiers (type: key: agent: compartment: class: "
                "is:conflict is:pending before: after:)")
    p.add_argument("query")
    p.add_argument("--json", action="store_true")
    p.add_argument("--limit", type=int, default=200)
    p = command("merge", cmd_merge, "merge another copy (folder or .vmem) of the same vault into DIR")
    p.add_argument("other", metavar="OTHER")
    p.add_argument("--json", action="store_true")
