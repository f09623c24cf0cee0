"""``camillo`` commands that read and act on memory: facts, fact, conflicts, resolve, inbox,
confirm, reject, forget, search and merge.

Runs on the main thread of the CLI process.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..errors import UsageError
from ..values import FactView, RecordView, parse_json
from ..vault import Vault
from .common import (
    Commands,
    emit,
    emit_one,
    find_id,
    fmt_time,
    one_line,
    open_vault,
    pages,
    print_written,
    warn_if_incomplete,
)


def fact_line(f: FactView) -> str:
    """The fact's binding value; the proposals beside it are counted, never shown in its place."""
    cur = f.current
    value = "-" if cur is None or cur.kind_name != "PUT" else one_line(cur.text, 50)
    cls = f"[{cur.effective_label}]" if cur is not None and cur.kind_name == "PUT" else ""
    waiting = f"  (+{len(f.proposed)} proposed: camillo inbox)" if f.proposed else ""
    return f"{f.key:<32} {f.compartment:<9} {f.status:<8} {cls:<11} {value}{waiting}"


def proposal_lines(f: FactView) -> list[str]:
    return [f"   proposed {p.id.hex()[:12]} [{p.effective_label:<8}] {p.writer:<16} {one_line(p.text, 40)}"
            for p in f.proposed]


def record_line(v: RecordView) -> str:
    what = v.type or v.kind_name.lower()
    body = f"{v.key} = {one_line(v.text, 50)}" if v.key else one_line(v.text, 70)
    return (f"{fmt_time(v.ts)}  {v.id.hex()[:12]}  {v.compartment:<9} {what:<12} [{v.effective_label:<8}] "
            f"{v.writer:<16} {body}")


def cmd_facts(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        filters: dict[str, Any] = {}
        if args.compartment:
            filters["compartments"] = [vault.compartment_id(args.compartment)]
        if args.subject:
            filters["subject"] = args.subject
        warn_if_incomplete(vault)
        emit(args, pages(lambda last, n: vault.facts(limit=n, after=(last.key, last.compartment_id) if last else None,
                                                     **filters)), FactView.to_json, fact_line)
    return 0


def cmd_fact(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:

        def with_history(f: FactView) -> dict[str, object]:
            return {**f.to_json(), "history_records": [r.to_json() for r in f.history],
                    "sources": {r.id.hex(): [s.to_json() for s in vault.records(r.sources)]
                                for r in f.history if r.sources}}

        def lines(f: FactView) -> list[str]:
            text = [fact_line(f), *proposal_lines(f)]
            for r in f.history:
                mark = "*" if f.current is not None and r.id == f.current.id else " "
                text.append(f" {mark} {fmt_time(r.ts)} {r.id.hex()[:12]} {r.kind_name:<4} [{r.effective_label:<8}] "
                            f"{r.writer:<16} {one_line(r.text, 40)}")
                text += [f"       because of {s.id.hex()[:12]} {s.type}: {one_line(s.text, 50)}"
                         for s in vault.records(r.sources)]
            return text

        warn_if_incomplete(vault)
        emit_one(args, vault.fact(args.key, args.compartment), with_history, lines)
    return 0


def with_candidates(f: FactView) -> dict[str, object]:
    return {**f.to_json(), "candidates_records": [c.to_json() for c in f.candidates]}


def conflict_lines(f: FactView) -> list[str]:
    return [f"{f.key} in {f.compartment}: {len(f.candidates)} concurrent values (preferred first)"] + [
        f"   {c.id.hex()[:12]}  [{c.effective_label:<8}] {c.writer:<16} {one_line(c.text, 50)}" for c in f.candidates]


def cmd_conflicts(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        warn_if_incomplete(vault)
        emit(args, vault.conflicts(), with_candidates, conflict_lines)
    return 0


def cmd_resolve(args: argparse.Namespace) -> int:
    if (args.pick is None) == (args.value is None):
        raise UsageError("give exactly one of --pick RECORD_ID and --value JSON")
    with open_vault(args) as vault:
        if args.pick is not None:
            changes = vault.resolve(args.key, compartment=args.compartment, pick=find_id(vault, args.pick))
        else:
            try:
                value = json.loads(args.value)
            except json.JSONDecodeError:
                value = args.value  # a bare word is taken as text
            except (RecursionError, ValueError):  # JSON too deep, or a number too long: UsageError saying which
                value = parse_json(args.value, "--value")
            changes = vault.resolve(args.key, compartment=args.compartment, value=value, value_given=True)
        print_written(changes)
    return 0


def cmd_inbox(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:

        def value_of(v: RecordView) -> RecordView | None:
            f = vault.fact(v.key, v.compartment) if v.key is not None else None
            return f.current if f is not None and f.current is not None and f.current.kind_name == "PUT" else None

        def with_sources(v: RecordView) -> dict[str, object]:
            cur = value_of(v)
            return {**v.to_json(), "sources_records": [s.to_json() for s in vault.records(v.sources)],
                    "current": cur.to_json() if cur is not None else None}

        def lines(v: RecordView) -> list[str]:
            cur = value_of(v)
            now = f"      now: {one_line(cur.text, 50)} [{cur.effective_label}]" if cur is not None else "      now: -"
            return [record_line(v), now]

        warn_if_incomplete(vault)
        emit(args, vault.inbox(), with_sources, lines)
    return 0


def cmd_confirm(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        print_written(vault.confirm([find_id(vault, r) for r in args.record], replace=args.replace))
    return 0


def cmd_reject(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        print_written(vault.reject([find_id(vault, r) for r in args.record]))
    return 0


def cmd_forget(args: argparse.Namespace) -> int:
    if (args.key is None) == (args.record is None):
        raise UsageError("give exactly one of --key KEY and --record ID")
    with open_vault(args) as vault:
        if args.key is not None:
            changes = vault.forget(key=args.key, compartment=args.compartment)
        else:
            changes = vault.forget(record=find_id(vault, args.record))
        print_written(changes)
    sys.stderr.write("Hidden. It remains in the encrypted history; use 'camillo erase' to destroy it.\n")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        warn_if_incomplete(vault)
        emit(args, vault.search(args.query, limit=args.limit), RecordView.to_json, record_line)
    return 0


def cmd_attach(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        of = find_id(vault, args.to) if args.to else None
        print_written(vault.attach(args.file, compartment=args.compartment or "personal", name=args.name,
                                   media_type=args.media_type, of=of))
    return 0


def cmd_attachment(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        f = vault.save_attachment(find_id(vault, args.record), args.out)
        sys.stderr.write(f"wrote {f.name} ({f.size} bytes, {f.media_type}, SHA-256 {f.sha256}) to {args.out}\n")
    return 0


def cmd_merge(args: argparse.Namespace) -> int:
    copied = Vault.merge(args.vault, args.other)
    with open_vault(args) as vault:
        conflicts = vault.conflicts()
        problems = vault.problems()
        discarded = [f.key for f in vault.facts(status="deleted") if f.discarded]

        def summary(_: object) -> dict[str, object]:
            return {"copied": len(copied), "conflicts": [f.key for f in conflicts], "discarded_edits": discarded,
                    "problems": [p.to_json() for p in problems]}

        def lines(_: object) -> list[str]:
            text = [f"merged: {len(copied)} files copied from {args.other}"]
            text += [f"conflict: {f.key} in {f.compartment} has {len(f.candidates)} concurrent values "
                     f"(resolve with: camillo resolve {args.vault} {f.key} --pick ID)" for f in conflicts]
            text += [f"deleted: {key} was deleted concurrently with an edit; the edit was discarded"
                     for key in discarded]
            text += [f"{p.kind}: {p.message}" for p in problems]
            return text

        emit_one(args, copied, summary, lines)
    return 0


def register(commands: Commands) -> None:
    p = commands.add("facts", cmd_facts, "facts by key: value, authority, status (ok, conflict, deleted, pending)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--compartment")
    p.add_argument("--subject", help="only keys <subject>/...")
    p = commands.add("fact", cmd_fact, "one fact with its history and provenance")
    p.add_argument("key")
    p.add_argument("--compartment")
    p.add_argument("--json", action="store_true")
    p = commands.add("conflicts", cmd_conflicts, "open conflicts and their candidates")
    p.add_argument("--json", action="store_true")
    p = commands.add("resolve", cmd_resolve, "resolve a conflict: pick a candidate or write a new value")
    p.add_argument("key")
    p.add_argument("--pick", metavar="RECORD_ID")
    p.add_argument("--value", metavar="JSON")
    p.add_argument("--compartment")
    p = commands.add("inbox", cmd_inbox, "proposals awaiting confirmation, each beside the value it would replace")
    p.add_argument("--json", action="store_true")
    p = commands.add("confirm", cmd_confirm, "confirm proposals: they become your word (user authority)")
    p.add_argument("record", nargs="+", metavar="RECORD_ID")
    p.add_argument("--replace", action="store_true", help="confirm even where it replaces a value you set")
    p = commands.add("reject", cmd_reject, "reject proposals (hidden; the fact's value stays as it was)")
    p.add_argument("record", nargs="+", metavar="RECORD_ID")
    p = commands.add("forget", cmd_forget, "hide a fact or a message (a DEL; erase destroys)")
    p.add_argument("--key")
    p.add_argument("--record", metavar="ID")
    p.add_argument("--compartment")
    p = commands.add("search", cmd_search, "full-text search with modifiers (type: key: agent: compartment: class: "
                     "is:conflict is:pending before: after:)")
    p.add_argument("query")
    p.add_argument("--json", action="store_true")
    p.add_argument("--limit", type=int, default=200)
    p = commands.add("attach", cmd_attach, "store a file encrypted in the vault (prints the attachment record's id)")
    p.add_argument("file", metavar="FILE")
    p.add_argument("--to", metavar="RECORD_ID", help="the record (a message) the file belongs to")
    p.add_argument("--compartment")
    p.add_argument("--name", help="the file name to show (default: FILE's name)")
    p.add_argument("--media-type", dest="media_type", help="e.g. image/png (default: guessed from the name)")
    p = commands.add("attachment", cmd_attachment, "write an attachment's exact bytes to a new file")
    p.add_argument("record", metavar="RECORD_ID")
    p.add_argument("--out", required=True, metavar="FILE", help="a file that does not exist yet")
    p = commands.add("merge", cmd_merge, "merge another copy (folder or .vmem) of the same vault into DIR")
    p.add_argument("other", metavar="OTHER")
    p.add_argument("--json", action="store_true")
