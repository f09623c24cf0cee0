"""The ``camillo`` command line: the first face of the vault facade.

Credentials: the passphrase comes from ``CAMILLO_PASSPHRASE`` or a no-echo prompt; ``--recovery``
takes the phrase from ``CAMILLO_RECOVERY_PHRASE`` or a prompt; ``--device`` uses this
installation's key from the OS keychain; ``--grant FILE`` acts as the agent holding that grant.
``CAMILLO_HOME`` moves this installation's local state and caches.

Exit codes: 0 ok, 1 verification problems, 2 usage, 3 wrong credential, 4 damaged or unsupported
vault, 5 refused by a grant.  Errors are one sentence on stderr; ``CAMILLO_DEBUG=1`` adds the
traceback.

Runs on the main thread of its own process.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from importlib import metadata
from typing import Any

from .errors import UsageError, VaultError, WrongCredential
from .vault import NewRecord, Unlock, Vault


def _version() -> str:
    try:
        return metadata.version("camillo")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _out(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def _json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, sort_keys=True) + "\n")


def _prompt_secret(prompt: str) -> str:
    if not sys.stdin or not sys.stdin.isatty():
        raise UsageError(f"{prompt.rstrip(': ')} is needed but there is no terminal to ask on; "
                         "set it in the environment (see camillo --help)")
    return getpass.getpass(prompt)


def _passphrase(env: str = "CAMILLO_PASSPHRASE", prompt: str = "Passphrase: ") -> str:
    value = os.environ.get(env)
    if value:
        return value
    return _prompt_secret(prompt)


def _new_passphrase(env: str) -> str:
    value = os.environ.get(env)
    if value:
        return value
    first = _prompt_secret("New passphrase: ")
    if _prompt_secret("Repeat it: ") != first:
        raise UsageError("the two passphrases differ; nothing was changed")
    return first


def _unlock(args: argparse.Namespace) -> Unlock:
    chosen = [n for n in ("recovery", "device", "grant") if getattr(args, n, None)]
    if len(chosen) > 1:
        raise UsageError("choose one of --recovery, --device and --grant")
    if getattr(args, "grant", None):
        return Unlock.grant(args.grant)
    if getattr(args, "device", False):
        return Unlock.device()
    if getattr(args, "recovery", False):
        phrase = os.environ.get("CAMILLO_RECOVERY_PHRASE") or _prompt_secret("Recovery phrase: ")
        return Unlock.recovery(phrase)
    return Unlock.passphrase(_passphrase())


def _open(args: argparse.Namespace, *, register: bool = True, cache: bool = True, read_only: bool = False) -> Vault:
    return Vault.open(args.vault, _unlock(args), register=register, cache=cache, read_only=read_only)


def _fmt_time(ts: int | None) -> str:
    if ts is None:
        return "-" * 16
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def _one_line(text: str, width: int = 80) -> str:
    cleaned = "".join(c if c.isprintable() else "\u2423" for c in text.replace("\n", " "))
    return cleaned if len(cleaned) <= width else cleaned[: width - 1] + "…"


# ---------------------------------------------------------------------------------------------- commands


def cmd_init(args: argparse.Namespace) -> int:
    passphrase = _new_passphrase("CAMILLO_PASSPHRASE")
    compartments = [c.strip() for c in args.compartments.split(",")] if args.compartments else None
    kwargs = {"compartments": compartments} if compartments else {}
    vault, phrase = Vault.create(args.vault, passphrase, device_name=args.name, **kwargs)
    with vault:
        err = sys.stderr
        err.write(
            "\nVault created. Its recovery phrase is below: write it down and keep it somewhere safe.\n"
            "It is shown only this once. Anyone who has it can open the vault; without it and your\n"
            "passphrase and devices, nobody (not Camillo, not your sync service) can get your memory back.\n\n"
        )
        err.flush()
        _out(phrase)
        err.write(f"\nvault id {vault.vault_id.hex()}\n")
        err.write(f"compartments: {', '.join(vault.compartments)}\n")
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    items: list[NewRecord] = []
    for number, line in enumerate(sys.stdin, 1):
        line = line.strip()
        if not line:
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UsageError(f"line {number} is not JSON ({exc.msg}); nothing was added") from None
        try:
            items.append(NewRecord.from_json(obj))
        except UsageError as exc:
            raise UsageError(f"line {number}: {exc.message}; nothing was added") from None
    if not items:
        raise UsageError("no records on standard input; give one JSON object per line")
    with _open(args) as vault:
        changes = vault.append(items, compartment=args.compartment)
        for rid in changes.written:
            _json({"id": rid.hex()})
    return 0


def cmd_log(args: argparse.Namespace) -> int:
    with _open(args) as vault:
        filters: dict[str, Any] = {"include_hidden": args.all}
        if args.compartment:
            filters["compartments"] = [vault.compartment_id(args.compartment)]
        if args.conversation:
            filters["conversation"] = args.conversation
        for v in vault.timeline(**filters):
            if args.json:
                _json(v.to_json())
            else:
                badge = f"[{v.effective_label}]"
                what = v.type or v.kind_name.lower()
                if v.key:
                    body = f"{v.key} = {_one_line(v.text, 60)}"
                elif v.role:
                    body = f"{v.role}: {_one_line(v.text, 70)}"
                else:
                    body = _one_line(v.text, 80)
                _out(f"{_fmt_time(v.ts)}  {v.id.hex()[:12]}  {v.compartment:<9} {what:<12} {badge:<11} {body}")
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    try:
        vault = _open(args, register=False, cache=False, read_only=True)  # verify never writes
    except WrongCredential:
        raise
    except VaultError as exc:
        problems = [{"kind": "damaged", "file": exc.file or "", "message": exc.message}]
        if args.json:
            _json({"ok": False, "problems": problems})
        else:
            _out(f"problem: {exc.message}")
        return 1
    with vault:
        problems = [p.to_json() for p in vault.problems(full=args.full)]
        if args.json:
            stats = vault.stats()
            _json({"ok": not problems, "problems": problems, "batches": stats.batches, "records": stats.records})
        else:
            for p in problems:
                _out(f"{p['kind']}: {p['message']}" + (f" [{p['file']}]" if p["file"] else ""))
            if not problems:
                stats = vault.stats()
                _out(f"ok: {stats.batches} batches, {stats.records} records verified")
    return 1 if problems else 0


def cmd_pack(args: argparse.Namespace) -> int:
    size, digest = Vault.pack(args.vault, args.out)
    _out(f"wrote {args.out} ({size} bytes, sha256 {digest.hex()})")
    return 0


def cmd_unpack(args: argparse.Namespace) -> int:
    count = Vault.unpack(args.file, args.dir)
    _out(f"unpacked {count} files into {args.dir}")
    return 0


def cmd_passwd(args: argparse.Namespace) -> int:
    with _open(args) as vault:
        new = _new_passphrase("CAMILLO_NEW_PASSPHRASE")
        vault.change_passphrase(new)
    sys.stderr.write("Passphrase changed. Copies of the vault made before now (sync history, backups) still open with\n"
                     "the old passphrase until they expire; the new one opens this vault from now on.\n")
    return 0


def cmd_info(args: argparse.Namespace) -> int:
    view = Vault.host_view(args.vault)
    if args.json:
        _json(view)
        return 0
    _out(f"What a host can see of {view['location']} ({view['kind']}):")
    if "vault_id" in view:
        _out(f"  vault id {view['vault_id']}")
    for f in view["files"]:
        details = {k: v for k, v in f.items() if k not in ("name", "kind", "size")}
        extra = "  ".join(f"{k}={json.dumps(v) if isinstance(v, dict) else v}" for k, v in details.items())
        _out(f"  {f['name']:<90} {f.get('size', ''):>9}  {extra}")
    return 0


# ---------------------------------------------------------------------------------------------- parser


def _add_credential_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("credential (default: passphrase from CAMILLO_PASSPHRASE or a prompt)")
    g.add_argument("--recovery", action="store_true", help="unlock with the recovery phrase (CAMILLO_RECOVERY_PHRASE)")
    g.add_argument("--device", action="store_true", help="unlock with this installation's key in the OS keychain")
    g.add_argument("--grant", metavar="FILE", help="act as the agent holding this grant file")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="camillo",
        description="Camillo: user-owned, encrypted agent memory (VMEM vaults).",
        epilog="Environment: CAMILLO_PASSPHRASE, CAMILLO_NEW_PASSPHRASE, CAMILLO_RECOVERY_PHRASE, CAMILLO_HOME, "
        "CAMILLO_KEYCHAIN (auto|os|none), CAMILLO_DEBUG.",
    )
    parser.add_argument("--version", action="version", version=f"camillo {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    def command(name: str, fn: Callable[[argparse.Namespace], int], help_: str, *, cred: bool = True,
                vault_arg: bool = True) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_, description=help_)
        if vault_arg:
            p.add_argument("vault", metavar="DIR", help="the vault folder (or a .vmem file where reading is enough)")
        if cred:
            _add_credential_options(p)
        p.set_defaults(func=fn)
        return p

    p = command("init", cmd_init, "create a vault in an empty folder and print its recovery phrase once", cred=False)
    p.add_argument("--compartments", help="comma-separated data compartments (default: personal,work,health)")
    p.add_argument("--name", help="a name for this device (default: the host name)")

    p = command("add", cmd_add, "append records read as JSON lines from standard input, as one batch")
    p.add_argument("--compartment", default="personal", help="compartment to write to (default: personal)")

    p = command("log", cmd_log, "show the timeline")
    p.add_argument("--json", action="store_true", help="JSON lines")
    p.add_argument("--compartment", help="only this compartment")
    p.add_argument("--conversation", help="only this conversation")
    p.add_argument("--all", action="store_true", help="include hidden (forgotten) records")

    p = command("verify", cmd_verify, "check every file, signature and link; exit 1 naming each problem")
    p.add_argument("--json", action="store_true")
    p.add_argument("--full", action="store_true", help="re-verify every batch signature, even those vouched for by compaction")

    p = command("pack", cmd_pack, "pack a vault folder into one deterministic .vmem file", cred=False)
    p.add_argument("out", metavar="OUT.vmem")

    p = sub.add_parser("unpack", help="unpack a .vmem file into a new folder")
    p.add_argument("file", metavar="FILE.vmem")
    p.add_argument("dir", metavar="DIR")
    p.set_defaults(func=cmd_unpack)

    command("passwd", cmd_passwd, "change the passphrase (new one from CAMILLO_NEW_PASSPHRASE or a prompt)")

    p = command("info", cmd_info, "show exactly what a host can see of the vault (no key needed)", cred=False)
    p.add_argument("--json", action="store_true")

    for extra in _EXTRA_COMMANDS:
        extra(sub, command)
    return parser


_EXTRA_COMMANDS: list[Callable[..., None]] = []


def extra_commands(fn: Callable[..., None]) -> Callable[..., None]:
    """Later modules register their subcommands here (history, access, agents, imports)."""
    _EXTRA_COMMANDS.append(fn)
    return fn


def main(argv: Sequence[str] | None = None) -> int:
    _load_extensions()
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
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


def _load_extensions() -> None:
    """Import the modules that register further commands (kept out of the base import)."""
    import importlib

    for mod in ("camillo.cli_memory", "camillo.cli_access", "camillo.cli_import"):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name != mod:
                raise


if __name__ == "__main__":
    # Run through the package module, so that subcommand modules register on the same object.
    from camillo.cli import main as package_main

    sys.exit(package_main())
