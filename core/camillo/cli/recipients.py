"""``camillo recipient keygen|add|list|remove``: trusted-person recovery (spec §12.1 kind 4, §12.6).

The trusted person runs ``keygen`` (no vault needed) and keeps the key file; the owner adds its
``.pub``; later, ``--recipient-key FILE`` opens the vault with it on any installation (any command
that opens a vault), and ``camillo passwd DIR --recipient-key FILE`` sets a new passphrase.

Runs on the main thread of the CLI process.
"""

from __future__ import annotations

import argparse
import sys

from ..values import RecipientInfo
from ..vault import Vault
from .common import (
    Commands,
    add_credential_options,
    emit,
    emit_one,
    fmt_time,
    new_passphrase,
    open_vault,
    out,
)


def cmd_keygen(args: argparse.Namespace) -> int:
    made = Vault.make_recipient_key(args.out, new_passphrase("CAMILLO_RECIPIENT_PASSPHRASE"), args.name or "")
    emit_one(args, made, lambda m: m.to_json(), lambda m: [f"key file   {m.path} (keep it, with its passphrase)",
                                                          f"public key {m.public_path} (give it to the vault's owner)",
                                                          f"fingerprint {m.fingerprint}"])
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        vault.add_recipient(args.name, args.key)
    sys.stderr.write(f"{args.name.strip()} can now recover this vault with their key file and its passphrase "
                     f"(camillo ... --recipient-key FILE). Remove them with: camillo recipient remove {args.vault} "
                     f"'{args.name.strip()}'\n")
    return 0


def recipient_line(r: RecipientInfo) -> str:
    state = f"removed {fmt_time(r.revoked_at)}" if r.revoked else "active"
    return f"{r.writer_id.hex()[:12]}  {r.name:<24} added {fmt_time(r.added)}  {state}"


def cmd_list(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        emit(args, vault.recipients(), RecipientInfo.to_json, recipient_line)
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        report = vault.remove_recipient(args.who)
    for line in report.lines():
        out(line)
    return 0


def register(commands: Commands) -> None:
    p = commands.plain("recipient", "trusted-person recovery: a key of their own that can open the vault")
    steps = p.add_subparsers(dest="recipient_command", metavar="STEP")
    steps.required = True
    q = steps.add_parser("keygen", help="for the trusted person: make a key file (protected by their passphrase, "
                         "CAMILLO_RECIPIENT_PASSPHRASE) and OUT.pub")
    q.add_argument("out", metavar="OUT")
    q.add_argument("--name", help="the trusted person's name, written in the files")
    q.add_argument("--json", action="store_true")
    q.set_defaults(func=cmd_keygen)
    q = steps.add_parser("add", help="for the owner: let the holder of this public key recover the vault")
    q.add_argument("vault", metavar="DIR")
    q.add_argument("--name", required=True, help="who they are, as you will see it")
    q.add_argument("--key", required=True, metavar="FILE.pub", help="the public key file they gave you")
    add_credential_options(q)
    q.set_defaults(func=cmd_add)
    q = steps.add_parser("list", help="list the trusted people who can recover the vault")
    q.add_argument("vault", metavar="DIR")
    q.add_argument("--json", action="store_true")
    add_credential_options(q)
    q.set_defaults(func=cmd_list)
    q = steps.add_parser("remove", help="revoke a trusted person's key (the keys roll)")
    q.add_argument("vault", metavar="DIR")
    q.add_argument("who", metavar="WHO", help="their name or id")
    add_credential_options(q)
    q.set_defaults(func=cmd_remove)
