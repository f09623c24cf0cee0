"""``camillo`` commands between the vault and other software: ``mcp`` serves it to an agent,
``import`` brings ChatGPT, Claude, VaultMem, Portable Memory and PAM data in, ``export`` writes it
out as Portable Memory or PAM.

``camillo import KIND DIR SOURCE [--compartment NAME] [--json]`` prints the report (what came in
per record type, what was skipped and why, the files referenced but not stored, by kind, alternates,
what the importer does not know, how many proposals wait in the inbox).  SOURCE may be a folder
holding the ZIP parts of one export.  A VaultMem vault's
passphrase comes from ``CAMILLO_IMPORT_PASSPHRASE`` or a no-echo prompt.  Importing the same
source twice adds nothing.

``camillo export (portable-memory|pam) DIR OUT`` writes a new or empty folder OUT.  The export is
plaintext: it is the user's to keep safe.

Runs on the main thread of the CLI process (``mcp`` then hands the vault to the server's own thread).
"""

from __future__ import annotations

import argparse
import os
import sys

from ..errors import UsageError
from ..exporters import KINDS as EXPORT_KINDS
from ..exporters import ExportSummary, run_export
from ..importers import KINDS as IMPORT_KINDS
from ..importers import ImportReport, run_import
from .common import Commands, emit_one, open_vault, passphrase


def cmd_mcp(args: argparse.Namespace) -> int:
    if not args.grant:
        raise UsageError("camillo mcp needs --grant FILE: the server acts as the agent holding that grant "
                         "(create one with 'camillo grant')")
    from ..mcp_server import serve  # the MCP SDK loads only for this command

    return serve(args.vault, args.grant)


def cmd_import(args: argparse.Namespace) -> int:
    secret = None
    if args.kind == "vaultmem":
        secret = os.environ.get("CAMILLO_IMPORT_PASSPHRASE") or passphrase(
            "CAMILLO_IMPORT_PASSPHRASE", "Passphrase of the VaultMem vault: ")
    with open_vault(args) as vault:
        report = run_import(vault, args.kind, args.source, compartment=args.compartment, passphrase=secret)
    emit_one(args, report, ImportReport.to_json, ImportReport.lines)
    return 0


def cmd_export(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        summary = run_export(vault, args.format, args.out)

    def line(summary: ExportSummary) -> str:
        counts = ", ".join(f"{v} {k}" for k, v in sorted(summary.items()) if isinstance(v, int))
        return f"wrote {args.format} export to {args.out}" + (f" ({counts})" if counts else "")

    emit_one(args, summary, lambda s: s, line)
    if not args.json:
        sys.stderr.write("The export is plaintext: anyone who gets the folder can read it. Keep it out of synced "
                         "or shared folders and delete it when done.\n")
    return 0


def register(commands: Commands) -> None:
    commands.add("mcp", cmd_mcp, "serve the vault over MCP (stdio) to an agent, with exactly its grant's rights")
    vault_help = "the vault folder"
    p = commands.add("import", cmd_import, "import a ChatGPT or Claude export, a VaultMem vault, a Portable Memory "
                     "bundle or a PAM export (importing twice adds nothing)", vault_arg=False)
    p.add_argument("kind", choices=sorted(IMPORT_KINDS), metavar="KIND",
                   help=f"one of {', '.join(sorted(IMPORT_KINDS))}")
    p.add_argument("vault", metavar="DIR", help=vault_help)
    p.add_argument("source", metavar="SOURCE", help="the export: a ZIP, a folder (also one holding the export's "
                   "ZIP parts) or a JSON file")
    p.add_argument("--compartment", default="personal", help="compartment to import into (default: personal)")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p = commands.add("export", cmd_export, "export the vault's current memory as Portable Memory (.mem) or PAM "
                     "(plaintext; nothing forgotten or erased is included)", vault_arg=False)
    p.add_argument("format", choices=sorted(EXPORT_KINDS), metavar="FORMAT",
                   help=f"one of {', '.join(sorted(EXPORT_KINDS))}")
    p.add_argument("vault", metavar="DIR", help=vault_help)
    p.add_argument("out", metavar="OUT", help="a new or empty folder to write")
    p.add_argument("--json", action="store_true", help="print a summary as JSON")
