"""``camillo`` commands that re-key or re-encrypt the vault: erase (crypto-erasure), compact, and
recovery reissue (a new recovery phrase).

Runs on the main thread of the CLI process.
"""

from __future__ import annotations

import argparse
import sys

from ..errors import UsageError
from ..values import ReachReport
from .common import Commands, add_credential_options, emit_one, find_id, open_vault, out


def cmd_erase(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        report = vault.erase([find_id(vault, r) for r in args.record])
    emit_one(args, report, ReachReport.to_json, ReachReport.lines)
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        report = vault.compact(prune_now=args.prune_now)
    for line in report.lines():
        out(line)
    return 0


def cmd_recovery(args: argparse.Namespace) -> int:
    if args.action != "reissue":
        raise UsageError("usage: camillo recovery reissue DIR")
    with open_vault(args) as vault:
        phrase = vault.reissue_recovery_phrase().phrase
    sys.stderr.write("Your new recovery phrase is below: write it down. The old one no longer opens this vault\n"
                     "(copies made before now still open with it until they expire).\n\n")
    out(phrase)
    return 0


def register(commands: Commands) -> None:
    p = commands.add("erase", cmd_erase, "erase records for real (crypto-erasure) and report what it reaches")
    p.add_argument("--record", action="append", required=True, metavar="ID")
    p.add_argument("--json", action="store_true")
    p = commands.add("compact", cmd_compact, "re-encrypt many small segments into few large ones")
    p.add_argument("--prune-now", action="store_true",
                   help="single-device vaults: delete the old segments now instead of after 7 days")
    p = commands.plain("recovery", "re-issue the recovery phrase: camillo recovery reissue DIR")
    p.add_argument("action", choices=["reissue"])
    p.add_argument("vault", metavar="DIR")
    add_credential_options(p)
    p.set_defaults(func=cmd_recovery)
