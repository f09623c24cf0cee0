"""``camillo`` commands that manage access: devices, grants, revocation and policy.

Registered into :mod:`camillo.cli` at start-up; runs on the main thread of the CLI process.
"""

from __future__ import annotations

import argparse
import calendar
import sys
import time

from . import OfferState, Vault
from .cli import _fmt_time, _json, _open, _out, extra_commands
from .errors import UsageError


def _date(text: str) -> int:
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
    with _open(args) as vault:
        g = vault.create_grant(args.agent, {c: args.level for c in compartments}, args.out,
                               max_class=args.max_class, expires=_date(args.expires) if args.expires else None)
        info = g.grant
        _json({"grant_id": info.grant_id.hex(), "agent": info.agent, "file": args.out,
               "scopes": dict(info.scopes), "max_class": info.max_class})
    sys.stderr.write(f"Wrote {args.out}: give it to the agent and keep it secret; "
                     f"revoke with 'camillo revoke {args.vault} {g.grant.grant_id.hex()[:12]}'.\n")
    return 0


def cmd_grants(args: argparse.Namespace) -> int:
    with _open(args) as vault:
        for g in vault.grants():
            if args.json:
                _json(g.to_json())
                continue
            scopes = ", ".join(f"{c} ({lv})" for c, lv in g.scopes.items())
            state = "revoked" if g.revoked else "active"
            expires = _fmt_time(g.expires) if g.expires else "never"
            used = _fmt_time(g.last_used) if g.last_used else "never"
            _out(f"{g.grant_id.hex()[:12]}  {g.agent:<18} {state:<8} {scopes:<36} max {g.max_class:<9} "
                 f"expires {expires}  last used {used}")
    return 0


def cmd_devices(args: argparse.Namespace) -> int:
    with _open(args) as vault:
        for d in vault.devices():
            if args.json:
                _json({"writer": d.writer_id.hex(), "name": d.name, "platform": d.platform, "enrolled": d.enrolled,
                       "last_seen": d.last_seen, "revoked": d.revoked, "this_device": d.this_device})
                continue
            mark = "*" if d.this_device else " "
            state = "revoked" if d.revoked else "active"
            _out(f"{mark} {d.writer_id.hex()[:12]}  {d.name:<20} {d.platform:<24} {state:<8} "
                 f"enrolled {_fmt_time(d.enrolled)}  last seen {_fmt_time(d.last_seen)}")
    return 0


def cmd_revoke(args: argparse.Namespace) -> int:
    with _open(args) as vault:
        report = vault.revoke(args.id, reason=args.reason or "")
    for line in report.lines():
        _out(line)
    return 0


def cmd_policy(args: argparse.Namespace) -> int:
    with _open(args) as vault:
        if args.erasure:
            vault.set_policy(erasure=args.erasure == "enabled", reason=args.reason or "")
        pol = vault.policy
        _json({"erasure": "enabled" if pol.erasure_enabled else "disabled", "reason": pol.reason,
               "set_by": vault.writer_name(pol.signer) if pol.signer else None, "since": pol.ts})
    return 0


@extra_commands
def register(sub, command) -> None:
    p = command("grant", cmd_grant, "give an agent access to compartments; writes its grant file")
    p.add_argument("--agent", required=True, help="the agent's name, as shown to you later")
    p.add_argument("--compartment", action="append", default=[], help="compartment (repeat, or comma-separated)")
    p.add_argument("--level", required=True, choices=["read", "write", "append"],
                   help="read: read only; write: read and write up to --max-class; append: add without reading")
    p.add_argument("--max-class", default="inferred", choices=["observed", "inferred", "external"],
                   help="the highest authority its records may claim (default: inferred)")
    p.add_argument("--expires", metavar="DATE", help="refuse the grant after this date (YYYY-MM-DD)")
    p.add_argument("--out", required=True, metavar="FILE", help="where to write the grant file")
    p = command("grants", cmd_grants, "list agent grants")
    p.add_argument("--json", action="store_true")
    p = command("devices", cmd_devices, "list the devices of this vault")
    p.add_argument("--json", action="store_true")
    p = command("revoke", cmd_revoke, "revoke a device (a lost laptop) or an agent grant, by id or name")
    p.add_argument("id", metavar="ID")
    p.add_argument("--reason")
    p = command("policy", cmd_policy, "show or set the vault's policy (enterprise vaults can disable erasure)")
    p.add_argument("--erasure", choices=["enabled", "disabled"])
    p.add_argument("--reason")


# ---------------------------------------------------------------------------------------------- enrollment


def _print_qr(text: str) -> None:
    import qrcode

    qr = qrcode.QRCode(error_correction=qrcode.constants.ERROR_CORRECT_M, border=2)
    qr.add_data(text)
    qr.make(fit=True)
    qr.print_ascii(out=sys.stdout, invert=True)


def cmd_enroll_offer(args: argparse.Namespace) -> int:
    with _open(args) as vault:
        offer = vault.offer_device()
        vault.keep_offer(offer)
        if not args.no_qr:
            _print_qr(offer.qr_text)
        _out(offer.qr_text)
        _out(f"code: {offer.typed_code}")
        sys.stderr.write(
            "On the new device: camillo enroll join <its vault folder> --code <the text above> --name <a name>\n"
            f"Then here: camillo enroll confirm {args.vault}   (within {offer.seconds_left // 60} minutes)\n")
    return 0


def cmd_enroll_join(args: argparse.Namespace) -> int:
    join = Vault.join(args.vault, args.code, name=args.name)
    sas = join.start()
    _out(f"code to compare: {sas}")
    sys.stdout.flush()
    sys.stderr.write("Check that the other device shows the same code, and confirm there.\n")
    deadline = time.time() + args.timeout
    while time.time() < deadline:
        vault = join.poll()
        if vault is not None:
            with vault:
                _out(f"enrolled as {join.name} ({(vault.writer_id or b'').hex()[:12]}); "
                     f"this device now unlocks with its own key (--device)")
            return 0
        time.sleep(0.5)
    raise UsageError("the other device did not confirm in time; make a new offer and try again")


def cmd_enroll_confirm(args: argparse.Namespace) -> int:
    with _open(args) as vault:
        offer = vault.resume_offer()
        deadline = time.time() + args.wait
        while offer.poll() == OfferState.WAITING and time.time() < deadline:
            time.sleep(0.5)
            vault.refresh()
        state = offer.state
        for m in offer.messages:
            sys.stderr.write(m + "\n")
        if state != OfferState.REQUESTED:
            if state in (OfferState.EXPIRED, OfferState.REFUSED, OfferState.CANCELLED):
                vault.drop_offer()
            raise UsageError(f"cannot confirm: the enrollment offer is {state.value}")
        assert offer.request is not None
        typed = args.code
        if typed is None:
            if not sys.stdin or not sys.stdin.isatty():
                raise UsageError("give the code the new device shows with --code (no terminal to ask on)")
            sys.stderr.write(f"{offer.request.name} asks to join. Its code should be: {offer.sas}\n")
            answer = input("Does the new device show the same code? [y/N] ").strip().lower()
            if answer not in ("y", "yes"):
                offer.cancel()
                vault.drop_offer()
                raise UsageError("not confirmed; nothing was enrolled")
            typed = offer.sas
        try:
            offer.confirm(typed_sas=typed)
        finally:
            if offer.state != OfferState.CONFIRMED:
                vault.drop_offer()
        vault.keep_offer(offer)
        vault.drop_offer()
        _out(f"confirmed: {offer.request.name} is enrolled")
    return 0


def cmd_erase(args: argparse.Namespace) -> int:
    with _open(args) as vault:
        ids_ = [vault.find_record(r).id for r in args.record]
        report = vault.erase(ids_)
    if args.json:
        _json(report.to_json())
    else:
        for line in report.lines():
            _out(line)
    return 0


def cmd_compact(args: argparse.Namespace) -> int:
    with _open(args) as vault:
        report = vault.compact(prune_now=args.prune_now)
    for line in report.lines():
        _out(line)
    return 0


def cmd_recovery(args: argparse.Namespace) -> int:
    if args.action != "reissue":
        raise UsageError("usage: camillo recovery reissue DIR")
    with _open(args) as vault:
        phrase = vault.reissue_recovery_phrase().phrase
    sys.stderr.write("Your new recovery phrase is below: write it down. The old one no longer opens this vault\n"
                     "(copies made before now still open with it until they expire).\n\n")
    _out(phrase)
    return 0


@extra_commands
def register_more(sub, command) -> None:
    p = sub.add_parser("enroll", help="enroll a second device by QR code or typed code")
    esub = p.add_subparsers(dest="enroll_command", metavar="STEP")
    esub.required = True
    from .cli import _add_credential_options

    q = esub.add_parser("offer", help="on the existing device: show the QR code and the typed code")
    q.add_argument("vault", metavar="DIR")
    q.add_argument("--no-qr", action="store_true", help="print only the codes")
    _add_credential_options(q)
    q.set_defaults(func=cmd_enroll_offer)
    q = esub.add_parser("join", help="on the new device: join with the code, compare the 6-digit code")
    q.add_argument("vault", metavar="DIR")
    q.add_argument("--code", required=True, help="the QR text (VMEM1:...) or the typed code")
    q.add_argument("--name", help="a name for this device (default: the host name)")
    q.add_argument("--timeout", type=float, default=600, help="seconds to wait for the confirmation")
    q.set_defaults(func=cmd_enroll_join)
    q = esub.add_parser("confirm", help="on the existing device: confirm after comparing the codes")
    q.add_argument("vault", metavar="DIR")
    q.add_argument("--code", help="the 6-digit code the new device shows (otherwise you are asked)")
    q.add_argument("--wait", type=float, default=60, help="seconds to wait for the new device's request")
    _add_credential_options(q)
    q.set_defaults(func=cmd_enroll_confirm)

    p = command("erase", cmd_erase, "erase records for real (crypto-erasure) and report what it reaches")
    p.add_argument("--record", action="append", required=True, metavar="ID")
    p.add_argument("--json", action="store_true")
    p = command("compact", cmd_compact, "re-encrypt many small segments into few large ones")
    p.add_argument("--prune-now", action="store_true",
                   help="single-device vaults: delete the old segments now instead of after 7 days")
    p = sub.add_parser("recovery", help="re-issue the recovery phrase: camillo recovery reissue DIR")
    p.add_argument("action", choices=["reissue"])
    p.add_argument("vault", metavar="DIR")
    _add_credential_options(p)
    p.set_defaults(func=cmd_recovery)


def cmd_mcp(args: argparse.Namespace) -> int:
    if not args.grant:
        raise UsageError("camillo mcp needs --grant FILE: the server acts as the agent holding that grant "
                         "(create one with 'camillo grant')")
    from .mcp_server import serve

    return serve(args.vault, args.grant)


@extra_commands
def register_mcp(sub, command) -> None:
    command("mcp", cmd_mcp, "serve the vault over MCP (stdio) to an agent, with exactly its grant's rights")
