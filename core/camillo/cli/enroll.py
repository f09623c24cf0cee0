"""``camillo enroll offer|join|confirm``: add a second device to a vault by QR code or typed code
(spec §21), the existing device offering and confirming, the new one joining.

Runs on the main thread of the CLI process.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from .. import OfferState
from ..errors import UsageError
from ..vault import Vault
from .common import Commands, add_credential_options, open_vault, out


def print_qr(text: str) -> None:
    import qrcode

    qr = qrcode.QRCode(error_correction=qrcode.constants.ERROR_CORRECT_M, border=2)
    qr.add_data(text)
    qr.make(fit=True)
    qr.print_ascii(out=sys.stdout, invert=True)


def cmd_offer(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
        offer = vault.offer_device()
        vault.keep_offer(offer)
        if not args.no_qr:
            print_qr(offer.qr_text)
        out(offer.qr_text)
        out(f"code: {offer.typed_code}")
        sys.stderr.write(
            "On the new device: camillo enroll join <its vault folder> --code <the text above> --name <a name>\n"
            f"Then here: camillo enroll confirm {args.vault}   (within {offer.seconds_left // 60} minutes)\n")
    return 0


def cmd_join(args: argparse.Namespace) -> int:
    join = Vault.join(args.vault, args.code, name=args.name or os.environ.get("CAMILLO_DEVICE_NAME"))
    sas = join.start()
    out(f"code to compare: {sas}")
    sys.stdout.flush()
    sys.stderr.write("Check that the other device shows the same code, and confirm there.\n")
    deadline = time.time() + args.timeout
    while time.time() < deadline:
        vault = join.poll()
        if vault is not None:
            with vault:
                out(f"enrolled as {join.name} ({(vault.writer_id or b'').hex()[:12]}); "
                    f"this device now unlocks with its own key (--device)")
            return 0
        time.sleep(0.5)
    raise UsageError("the other device did not confirm in time; make a new offer and try again")


def cmd_confirm(args: argparse.Namespace) -> int:
    with open_vault(args) as vault:
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
        out(f"confirmed: {offer.request.name} is enrolled")
    return 0


def register(commands: Commands) -> None:
    p = commands.plain("enroll", "enroll a second device by QR code or typed code")
    steps = p.add_subparsers(dest="enroll_command", metavar="STEP")
    steps.required = True
    q = steps.add_parser("offer", help="on the existing device: show the QR code and the typed code")
    q.add_argument("vault", metavar="DIR")
    q.add_argument("--no-qr", action="store_true", help="print only the codes")
    add_credential_options(q)
    q.set_defaults(func=cmd_offer)
    q = steps.add_parser("join", help="on the new device: join with the code, compare the 6-digit code")
    q.add_argument("vault", metavar="DIR")
    q.add_argument("--code", required=True, help="the QR text (VMEM1:...) or the typed code")
    q.add_argument("--name", "--device-name", dest="name",
                   help="a name for this device (CAMILLO_DEVICE_NAME; default: the host name)")
    q.add_argument("--timeout", type=float, default=600, help="seconds to wait for the confirmation")
    q.set_defaults(func=cmd_join)
    q = steps.add_parser("confirm", help="on the existing device: confirm after comparing the codes")
    q.add_argument("vault", metavar="DIR")
    q.add_argument("--code", help="the 6-digit code the new device shows (otherwise you are asked)")
    q.add_argument("--wait", type=float, default=60, help="seconds to wait for the new device's request")
    add_credential_options(q)
    q.set_defaults(func=cmd_confirm)
