"""``camillo import`` and ``camillo export``: bring ChatGPT, Claude, VaultMem, Portable Memory and
PAM data into a vault, and write a vault out as Portable Memory or PAM.

``camillo import KIND DIR SOURCE [--compartment NAME] [--json]`` prints the report (what was
imported, what was skipped and why, how many proposals wait in the inbox).  A VaultMem vault's
passphrase comes from ``CAMILLO_IMPORT_PASSPHRASE`` or a no-echo prompt.  Importing the same
source twice adds nothing.

``camillo export (portable-memory|pam) DIR OUT`` writes a new or empty folder OUT.  The export is
plaintext: it is the user's to keep safe.

Registered into :mod:`camillo.cli` at start-up; runs on the main thread of the CLI process.
"""

from __future__ import annotations

import argparse
import os
import sys

from .cli import _json, _open, _out, _passphrase, extra_commands
from .exporters import KINDS as EXPORT_KINDS
from .exporters import run_export
from .importers import KINDS as IMPORT_KINDS
from .importers import run_import


def cmd_import(args: argparse.Namespace) -> int:
    passphrase = None
    if args.kind == "vaultmem":
        passphrase = os.environ.get("CAMILLO_IMPORT_PASSPHRASE") or _passphrase(
            "CAMILLO_IMPORT_PASSPHRASE", "Passphrase of the VaultMem vault: ")
    with _open(args) as vault:
        report = run_import(vault, args.kind, args.source, compartment=args.compartment, passphrase=passphrase)
    if args.json:
        _json(report.to_json())
    else:
        for line in report.lines():
            _out(line)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    with _open(args) as vault:
        summary = run_export(vault, args.format, args.out)
    if args.json:
        _json(summary)
    else:
        counts = ", ".join(f"{v} {k}" for k, v in sorted(summary.items()) if isinstance(v, int))
        _out(f"wrote {args.format} export to {args.out}" + (f" ({counts})" if counts else ""))
        sys.stderr.write("The export is plaintext: anyone who gets the folder can read it. Keep it out of synced "
                         "or shared folders and delete it when done.\n")
    return 0


@extra_commands
def register(sub, command) -> None:
    vault_help = "the vault folder"
    p = command("import", cmd_import, "import a ChatGPT or Claude export, a VaultMem vault, a Portable Memory "
                "bundle or a PAM export (importing twice adds nothing)", vault_arg=False)
    p.add_argument("kind", choices=sorted(IMPORT_KINDS), metavar="KIND",
                   help=f"one of {', '.join(sorted(IMPORT_KINDS))}")
    p.add_argument("vault", metavar="DIR", help=vault_help)
    p.add_argument("source", metavar="SOURCE", help="the export: a ZIP, a folder or a JSON file")
    p.add_argument("--compartment", default="personal", help="compartment to import into (default: personal)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p = command("export", cmd_export, "export the vault's current memory as Portable Memory (.mem) or PAM "
                "(plaintext; nothing forgotten or erased is included)", vault_arg=False)
    p.add_argument("format", choices=sorted(EXPORT_KINDS), metavar="FORMAT",
                   help=f"one of {', '.join(sorted(EXPORT_KINDS))}")
    p.add_argument("vault", metavar="DIR", help=vault_help)
    p.add_argument("out", metavar="OUT", help="a new or empty folder to write")
    p.add_argument("--json", action="store_true", help="print a summary as JSON")
