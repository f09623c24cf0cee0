"""``camillo`` commands that manage who may open the vault: grant, grants, devices, revoke, policy.

Runs on the main thread of the CLI process.
"""

from __future__ import annotations

import argparse
import calendar
import sys
import time

from ..errors import UsageError
from ..values import DeviceInfo, GrantInfo
from .common import Commands, emit, fmt_time, open_vault, out, print_json

# What ``camillo devices --json`` shows of a device (DeviceInfo.to_json without kind and replaced).
DEVICE_FIELDS = ("writer", "name", "platform", "enrolled", "last_seen", "revoked", "this_device")
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
    state = "revoked" if d.revoked else "active"
    return (f"{mark} {d.writer_id.hex()[:12]}  {d.name:<20} {d.platform:<24} {state:<8} "
            f"enrolled {fmt_time(d.enrolled)}  last seen {fmt_time(d.last_seen)}")


def cmd_devices(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        emit(args, vault.devices(), device_json, device_line)
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        report = vault.revoke(args.id, reason=args.reason or "")
    for line in report.lines():
        out(line)
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
    p = commands.add("devices", cmd_devices, "list the devices of this vault")
    p.add_argument("--json", action="store_true")
    p = commands.add("revoke", cmd_revoke, "revoke a device (a lost laptop) or an agent grant, by id or name")
    p.add_argument("id", metavar="ID")
    p.add_argument("--reason")
    p = commands.add("policy", cmd_policy, "show or set the vault's policy (enterprise vaults can disable erasure)")
    p.add_argument("--erasure", choices=["enabled", "disabled"])
    p.add_argument("--reason")
