"""``camillo`` commands that manage who may open the vault and what it holds: grant, grants, devices
(rename, acknowledge), revoke (a lost device: then the passphrase and recovery phrase), policy,
compartments.

Runs on the main thread of the CLI process.
"""

from __future__ import annotations

import argparse
import calendar
import sys
import time

from ..errors import UsageError
from ..values import CompartmentInfo, DeviceInfo, GrantInfo
from .common import Commands, emit, fmt_time, new_passphrase, open_vault, out, print_json

# What ``camillo devices --json`` shows of a device (DeviceInfo.to_json without kind and replaced).
DEVICE_FIELDS = ("writer", "name", "platform", "enrolled", "last_seen", "revoked", "this_device", "new", "joined_with")
# What ``camillo grant`` prints of the grant it created, besides the file it wrote.
NEW_GRANT_FIELDS = ("grant_id", "agent", "scopes", "max_class")


def parse_date(text: str) -> int:
    for fmt in ("%Y-%m-%d", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S"):
        try:
            return calendar.timegm(time.strptime(text, fmt))
        except ValueError:
            continue
    raise UsageError(f"--expires expects a date such as 2026-12-31, not '{text}'")


def cmd_grant(args: argparse.Namespace) -> int:
    compartments = [c.strip() for item in args.compartment for c in item.split(",") if c.strip()]
    if not compartments:
        raise UsageError("name at least one --compartment")
    with open_vault(args) as vault:
        created = vault.create_grant(args.agent, {c: args.level for c in compartments}, args.out,
                                     max_class=args.max_class,
                                     expires=parse_date(args.expires) if args.expires else None)
        info = created.grant.to_json()
        print_json({**{k: info[k] for k in NEW_GRANT_FIELDS}, "file": args.out})
    sys.stderr.write(f"Wrote {args.out}: give it to the agent and keep it secret; "
                     f"revoke with 'camillo revoke {args.vault} {created.grant.grant_id.hex()[:12]}'.\n")
    return 0


def grant_line(g: GrantInfo) -> str:
    scopes = ", ".join(f"{c} ({lv})" for c, lv in g.scopes.items())
    state = "revoked" if g.revoked else "active"
    expires = fmt_time(g.expires) if g.expires else "never"
    used = fmt_time(g.last_used) if g.last_used else "never"
    return (f"{g.grant_id.hex()[:12]}  {g.agent:<18} {state:<8} {scopes:<36} max {g.max_class:<9} "
            f"expires {expires}  last used {used}")


def cmd_grants(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        emit(args, vault.grants(), GrantInfo.to_json, grant_line)
    return 0


def device_json(d: DeviceInfo) -> dict[str, object]:
    info = d.to_json()
    return {k: info[k] for k in DEVICE_FIELDS}


def device_line(d: DeviceInfo) -> str:
    mark = "*" if d.this_device else " "
    state = "NEW" if d.new else "revoked" if d.revoked else "replaced" if d.replaced else "active"
    return (f"{mark} {d.writer_id.hex()[:12]}  {d.name:<20} {d.platform:<14} {state:<8} "
            f"enrolled {fmt_time(d.enrolled)}  last seen {fmt_time(d.last_seen)}")


def cmd_devices(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        if args.rename:
            changes = vault.rename_device(*args.rename)
            sys.stderr.write(f"{changes.note}\n")
        if args.ack:
            changes = vault.acknowledge_devices(args.ack)
            sys.stderr.write(f"{changes.note}\n")
        devices = vault.devices()
        emit(args, devices, device_json, device_line)
        if not args.json:
            for d in (d for d in devices if d.new):
                sys.stderr.write(f"{d.was_this_you()} If yes: camillo devices {args.vault} --ack "
                                 f"{d.writer_id.hex()[:12]}. If not: camillo revoke {args.vault} "
                                 f"{d.writer_id.hex()[:12]}, then change the passphrase.\n")
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    """Revoke; for a device (a lost laptop) go on, as one flow, to what locks its holder out for good:
    a new passphrase (asked in a terminal, or --change-passphrase with CAMILLO_NEW_PASSPHRASE) and, if
    wanted, a new recovery phrase (--reissue-recovery)."""
    with open_vault(args) as vault:
        report = vault.revoke(args.id, reason=args.reason or "")
        steps = report.next_steps()
        for line in report.lines()[:len(report.lines()) - len(steps)]:
            out(line)
        if not report.still_opens:
            return 0
        interactive = bool(sys.stdin) and sys.stdin.isatty()
        if "passphrase" in report.still_opens:
            if args.change_passphrase or (interactive and _yes(steps[0] + " Change it now? [Y/n] ")):
                vault.change_passphrase(new_passphrase("CAMILLO_NEW_PASSPHRASE"))
                out("Passphrase changed and the keys rolled again: the old passphrase opens nothing written from "
                    "now on.")
            else:
                out("The passphrase was NOT changed: whoever knows it can still open the vault, from any computer. "
                    f"Change it with: camillo passwd {args.vault}")
        if "recovery phrase" in report.still_opens:
            if args.reissue_recovery or (interactive and _yes(steps[-1] + " Re-issue it now? [y/N] ", default=False)):
                phrase = vault.reissue_recovery_phrase().phrase
                sys.stderr.write("Your new recovery phrase is below: write it down. The old one opens nothing "
                                 "written from now on.\n\n")
                out(phrase)
            elif not interactive:
                out(steps[-1] + f" (camillo recovery reissue {args.vault})")
    return 0


def _yes(question: str, *, default: bool = True) -> bool:
    answer = input(question).strip().lower()
    return default if not answer else answer in ("y", "yes")


def compartment_line(c: CompartmentInfo) -> str:
    agents = ", ".join(c.agents) or "no agent"
    added = f"added {fmt_time(c.added)}" if c.added else "since the vault was created"
    return f"{c.name:<20} {c.records:>7} records  {agents:<30} {added}"


def cmd_compartments(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        if args.add is not None:
            vault.add_compartment(args.add)
            sys.stderr.write(f"Added compartment {args.add.strip()}: write to it with --compartment "
                             f"{args.add.strip()}, or grant it to an agent.\n")
        emit(args, vault.compartment_list(), CompartmentInfo.to_json, compartment_line)
    return 0


def cmd_policy(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        if args.erasure:
            vault.set_policy(erasure=args.erasure == "enabled", reason=args.reason or "")
        pol = vault.policy
        print_json({"erasure": "enabled" if pol.erasure_enabled else "disabled", "reason": pol.reason,
                    "set_by": vault.writer_name(pol.signer) if pol.signer else None, "since": pol.ts})
    return 0


def register(commands: Commands) -> None:
    p = commands.add("grant", cmd_grant, "give an agent access to compartments; writes its grant file")
    p.add_argument("--agent", required=True, help="the agent's name, as shown to you later")
    p.add_argument("--compartment", action="append", default=[], help="compartment (repeat, or comma-separated)")
    p.add_argument("--level", required=True, choices=["read", "write", "append"],
                   help="read: read only; write: read and write up to --max-class; append: add without reading")
    p.add_argument("--max-class", default="inferred", choices=["observed", "inferred", "external"],
                   help="the highest authority its records may claim (default: inferred)")
    p.add_argument("--expires", metavar="DATE", help="refuse the grant after this date (YYYY-MM-DD)")
    p.add_argument("--out", required=True, metavar="FILE", help="where to write the grant file")
    p = commands.add("grants", cmd_grants, "list agent grants")
    p.add_argument("--json", action="store_true")
    p = commands.add("devices", cmd_devices, "list the devices of this vault; rename one; acknowledge a new one")
    p.add_argument("--json", action="store_true")
    p.add_argument("--rename", nargs=2, metavar=("WHO", "NEW_NAME"), help="rename a device (by name or id)")
    p.add_argument("--ack", action="append", metavar="WHO",
                   help="'yes, this was me': a new device stops being shown as new (repeatable)")
    p = commands.add("revoke", cmd_revoke, "revoke a device (a lost laptop), an agent grant or a trusted person's "
                     "key, by id or name; for a device, go on to change the passphrase")
    p.add_argument("id", metavar="ID")
    p.add_argument("--reason")
    p.add_argument("--change-passphrase", action="store_true",
                   help="after revoking a device, change the passphrase too (CAMILLO_NEW_PASSPHRASE, or asked)")
    p.add_argument("--reissue-recovery", action="store_true",
                   help="after revoking a device, re-issue the recovery phrase too (printed once)")
    p = commands.add("compartments", cmd_compartments, "list the vault's compartments; add one")
    p.add_argument("--json", action="store_true")
    p.add_argument("--add", metavar="NAME", help="create a new compartment")
    p = commands.add("policy", cmd_policy, "show or set the vault's policy (enterprise vaults can disable erasure)")
    p.add_argument("--erasure", choices=["enabled", "disabled"])
    p.add_argument("--reason")
