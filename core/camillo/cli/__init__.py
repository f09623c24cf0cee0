"""The ``camillo`` command line: the first face of the vault facade.

Credentials: the passphrase comes from ``CAMILLO_PASSPHRASE`` or a no-echo prompt; ``--recovery``
takes the phrase from ``CAMILLO_RECOVERY_PHRASE`` or a prompt; ``--device`` uses this
installation's key from the OS keychain; ``--grant FILE`` acts as the agent holding that grant;
``--recipient-key FILE`` uses a trusted person's recovery key (its passphrase from
``CAMILLO_RECIPIENT_PASSPHRASE`` or a prompt).  A new installation's device name comes from
``--device-name``, ``CAMILLO_DEVICE_NAME`` or a prompt in a terminal.
``CAMILLO_HOME`` moves this installation's local state and caches.

Exit codes: 0 ok, 1 verification problems, 2 usage, 3 wrong credential, 4 damaged or unsupported
vault, 5 refused by a grant.  Errors are one sentence on stderr; ``CAMILLO_DEBUG=1`` adds the
traceback.

This package assembles the parser from one module per area of commands: :mod:`.vault_cmds` (init,
add, log, verify, pack, unpack, passwd, info), :mod:`.memory` (facts, fact, conflicts, resolve,
inbox, confirm, reject, forget, search, merge), :mod:`.access` (grant, grants, devices, revoke,
compartments, policy), :mod:`.enroll` (enroll offer, join, confirm), :mod:`.recipients` (recipient
keygen, add, list, remove), :mod:`.upkeep` (erase, compact, recovery) and :mod:`.interop` (mcp,
import, export); :mod:`.common` holds what they share.  The order they are
added in is the order ``camillo --help`` lists them.

Runs on the main thread of its own process.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from importlib import metadata

from ..errors import VaultError
from . import access, enroll, interop, memory, recipients, upkeep, vault_cmds
from .common import Commands, Handler, apply_endpoint, check_text_args


def version() -> str:
    try:
        return metadata.version("camillo")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="camillo",
        description="Camillo: user-owned, encrypted agent memory (VMEM vaults).",
        epilog="Environment: CAMILLO_PASSPHRASE, CAMILLO_NEW_PASSPHRASE, CAMILLO_RECOVERY_PHRASE, "
        "CAMILLO_RECIPIENT_PASSPHRASE, CAMILLO_DEVICE_NAME, CAMILLO_HOME, CAMILLO_KEYCHAIN (auto|os|none), CAMILLO_DEBUG; "
        "for s3:// vaults CAMILLO_S3_ENDPOINT and the AWS variables (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
        "AWS_PROFILE, AWS_REGION).",
    )
    parser.add_argument("--version", action="version", version=f"camillo {version()}")
    commands = Commands(parser)
    for area in (vault_cmds, memory, access, enroll, recipients, upkeep, interop):
        area.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Handler = args.func
    try:
        check_text_args(args)
        apply_endpoint(args)
        return handler(args)
    except VaultError as exc:
        sys.stderr.write(f"camillo: {exc.message}\n")
        if os.environ.get("CAMILLO_DEBUG"):
            raise
        return exc.exit_code
    except KeyboardInterrupt:
        sys.stderr.write("camillo: interrupted; nothing acknowledged was lost\n")
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:  # a bug: say so in one line, never a traceback by default
        if os.environ.get("CAMILLO_DEBUG"):
            raise
        sys.stderr.write(f"camillo: internal error ({type(exc).__name__}: {exc}); "
                         "please report it (CAMILLO_DEBUG=1 shows the traceback)\n")
        return 70


__all__ = ["build_parser", "main", "version"]
