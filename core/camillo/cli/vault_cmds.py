"""``camillo`` commands on the vault as a whole: init, add, log, verify, pack, unpack, passwd, info.

Runs on the main thread of the CLI process.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from typing import Any

from ..errors import AccessDenied, LimitExceeded, UsageError, VaultError, WrongCredential
from ..values import DEFAULT_COMPARTMENTS, Authority, Problem, RecordView, parse_json
from ..vault import NewRecord, Vault
from .common import (
    Commands,
    emit,
    emit_one,
    fmt_time,
    new_passphrase,
    one_line,
    open_vault,
    out,
    pages,
    print_written,
    warn_if_incomplete,
)


def cmd_init(args: argparse.Namespace) -> int:
    passphrase = new_passphrase("CAMILLO_PASSPHRASE")
    compartments = [c.strip() for c in args.compartments.split(",")] if args.compartments else DEFAULT_COMPARTMENTS
    vault, phrase = Vault.create(args.vault, passphrase, compartments=compartments, device_name=args.name)
    with vault:
        err = sys.stderr
        err.write(
            "\nVault created. Its recovery phrase is below: write it down and keep it somewhere safe.\n"
            "It is shown only this once. Anyone who has it can open the vault; without it and your\n"
            "passphrase and devices, nobody (not Camillo, not your sync service) can get your memory back.\n\n"
        )
        err.flush()
        out(phrase)
        err.write(f"\nvault id {vault.vault_id.hex()}\n")
        err.write(f"compartments: {', '.join(vault.compartments)}\n")
    return 0


def read_records(lines: Iterable[bytes | str]) -> list[tuple[int, NewRecord]]:
    """The records of ``camillo add`` with their line numbers: one JSON object per line, all checked
    before any vault is opened, so a refused line (UsageError naming it) refuses them all and nothing
    is written."""
    items: list[tuple[int, NewRecord]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = parse_json(line, f"line {number}")
        except (UsageError, LimitExceeded) as exc:
            raise UsageError(f"{exc.message.rstrip('.')}; nothing was added") from None
        try:
            items.append((number, NewRecord.from_json(obj)))
        except (UsageError, LimitExceeded) as exc:
            raise UsageError(f"line {number}: {exc.message.rstrip('.')}; nothing was added") from None
    if not items:
        raise UsageError("no records on standard input; give one JSON object per line")
    return items


def check_sources(vault: Vault, items: list[tuple[int, NewRecord]]) -> None:
    """Refuse (UsageError naming the line) a record of the owner's that claims more authority than
    one of its sources holds, which every reader would reject (spec §16.3 rule 8: a source this vault
    does not have counts as external).  Not for an agent's grant: it may cite records of compartments
    it cannot read, which other readers hold."""
    if vault.agent_grant is not None:
        return
    for number, item in items:
        if not item.sources:
            continue
        claim = item.default_authority()
        known = {r.id: r for r in vault.records(item.sources)}
        for source in item.sources:
            r = known.get(source)
            held = Authority(r.effective_class) if r is not None and r.valid and r.effective_class is not None \
                else Authority.EXTERNAL
            if claim > held:
                why = "is not in this vault" if r is None else f"holds {held.label} authority"
                raise UsageError(f"line {number}: claims {claim.label} authority, but its source {source.hex()[:12]} "
                                 f"{why}, so every reader would reject the record (a record may not claim more than "
                                 f"its sources); give \"class\": \"{held.label}\" or cite other records; "
                                 "nothing was added")


def cmd_add(args: argparse.Namespace) -> int:
    stdin = sys.stdin  # its bytes (UTF-8 is checked line by line), or the text a caller put in its place
    numbered = read_records(getattr(stdin, "buffer", stdin) if stdin is not None else [])
    items = [item for _, item in numbered]
    with open_vault(args) as vault:
        check_sources(vault, numbered)
        try:
            changes = vault.append(items, compartment=args.compartment)
        except (UsageError, LimitExceeded, AccessDenied) as exc:  # refused before anything was written
            raise type(exc)(f"{exc.message.rstrip('.')}; nothing was added", file=exc.file) from None
        print_written(changes)
    return 0


def timeline_line(v: RecordView) -> str:
    badge = f"[{v.effective_label}]"
    what = v.type or v.kind_name.lower()
    if v.key:
        body = f"{v.key} = {one_line(v.text, 60)}"
    elif v.role:
        body = f"{v.role}: {one_line(v.text, 70)}"
    else:
        body = one_line(v.text, 80)
    return f"{fmt_time(v.ts)}  {v.id.hex()[:12]}  {v.compartment:<9} {what:<12} {badge:<11} {body}"


def cmd_log(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        filters: dict[str, Any] = {"include_hidden": args.all}
        if args.compartment:
            filters["compartments"] = [vault.compartment_id(args.compartment)]
        if args.conversation:
            filters["conversation"] = args.conversation
        warn_if_incomplete(vault)
        emit(args, pages(lambda last, n: vault.timeline(limit=n, after=last.id if last else None, **filters)),
             RecordView.to_json, timeline_line)
    return 0


def problem_line(p: Problem) -> str:
    return f"{p.kind}: {p.message}" + (f" [{p.file}]" if p.file else "")


def cmd_verify(args: argparse.Namespace) -> int:
    try:
        vault = open_vault(args, register=False, cache=False, read_only=True)  # verify never writes
    except WrongCredential:
        raise
    except VaultError as exc:
        damaged = Problem("damaged", exc.file or "", exc.message)
        emit_one(args, damaged, lambda p: {"ok": False, "problems": [p.to_json()]},
                 lambda p: f"problem: {p.message}")
        return 1
    with vault:
        problems = vault.problems(full=args.full)

        def report(problems: list[Problem]) -> dict[str, object]:
            stats = vault.stats()
            return {"ok": not problems, "problems": [p.to_json() for p in problems], "batches": stats.batches,
                    "records": stats.records}

        def lines(problems: list[Problem]) -> list[str]:
            if problems:
                return [problem_line(p) for p in problems]
            stats = vault.stats()
            return [f"ok: {stats.batches} batches, {stats.records} records verified"]

        emit_one(args, problems, report, lines)
    return 1 if problems else 0


def cmd_pack(args: argparse.Namespace) -> int:
    size, digest = Vault.pack(args.vault, args.out, replace=args.force)
    out(f"wrote {args.out} ({size} bytes, sha256 {digest.hex()})")
    return 0


def cmd_unpack(args: argparse.Namespace) -> int:
    count = Vault.unpack(args.file, args.dir)
    out(f"unpacked {count} files into {args.dir}")
    return 0


def cmd_passwd(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        new = new_passphrase("CAMILLO_NEW_PASSPHRASE")
        vault.change_passphrase(new)
    sys.stderr.write("Passphrase changed. Copies of the vault made before now (sync history, backups) still open with\n"
                     "the old passphrase until they expire; the new one opens this vault from now on.\n")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    view = Vault.host_view(args.vault)

    def lines(_: object) -> list[str]:
        text = [f"What a host can see of {view['location']} ({view['kind']}):"]
        if "vault_id" in view:
            text.append(f"  vault id {view['vault_id']}")
        for f in view["files"]:
            details = {k: v for k, v in f.items() if k not in ("name", "kind", "size")}
            extra = "  ".join(f"{k}={json.dumps(v) if isinstance(v, dict) else v}" for k, v in details.items())
            text.append(f"  {f['name']:<90} {f.get('size', ''):>9}  {extra}")
        return text

    emit_one(args, view, lambda v: v, lines)
    return 0


def register(commands: Commands) -> None:
    p = commands.add("init", cmd_init, "create a vault in an empty folder and print its recovery phrase once",
                     cred=False)
    p.add_argument("--compartments", help="comma-separated data compartments (default: personal,work,health)")
    p.add_argument("--name", help="a name for this device (default: the host name)")

    p = commands.add("add", cmd_add, "append records read as JSON lines from standard input, as one batch")
    p.add_argument("--compartment", default="personal", help="compartment to write to (default: personal)")

    p = commands.add("log", cmd_log, "show the timeline")
    p.add_argument("--json", action="store_true", help="JSON lines")
    p.add_argument("--compartment", help="only this compartment")
    p.add_argument("--conversation", help="only this conversation")
    p.add_argument("--all", action="store_true", help="include hidden (forgotten) records")

    p = commands.add("verify", cmd_verify, "check every file, signature and link; exit 1 naming each problem")
    p.add_argument("--json", action="store_true")
    p.add_argument("--full", action="store_true",
                   help="re-verify every batch signature, even those vouched for by compaction")

    p = commands.add("pack", cmd_pack, "pack a vault folder into one deterministic .vmem file (a new file outside "
                     "any vault folder)", cred=False)
    p.add_argument("out", metavar="OUT.vmem")
    p.add_argument("--force", action="store_true", help="replace OUT.vmem if it exists")

    p = commands.plain("unpack", "unpack a .vmem file into a new folder")
    p.add_argument("file", metavar="FILE.vmem")
    p.add_argument("dir", metavar="DIR")
    p.set_defaults(func=cmd_unpack)

    commands.add("passwd", cmd_passwd, "change the passphrase (new one from CAMILLO_NEW_PASSPHRASE or a prompt)")

    p = commands.add("info", cmd_info, "show exactly what a host can see of the vault (no key needed)", cred=False)
    p.add_argument("--json", action="store_true")
