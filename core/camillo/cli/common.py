"""What every ``camillo`` command shares: the credential options and opening a vault from them,
passphrase prompts, time and text formatting, and printing results as JSON lines or as text.

Runs on the main thread of the CLI process.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from ..changes import Changes
from ..errors import UsageError
from ..values import with_endpoint
from ..vault import Unlock, Vault

T = TypeVar("T")
Handler = Callable[[argparse.Namespace], int]

# ---------------------------------------------------------------------------------------------- output


def out(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def print_json(obj: object) -> None:
    """One JSON line: sorted keys, UTF-8 as is."""
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, sort_keys=True) + "\n")


def emit(args: argparse.Namespace, items: Iterable[T], to_json: Callable[[T], object],
         to_text: Callable[[T], str | Iterable[str]]) -> None:
    """Print each item as one JSON line when the command was given ``--json``, otherwise as its
    text: one line, or several (``to_text`` returns a string or an iterable of lines).  Items are
    printed as they come, so a long listing streams."""
    as_json = bool(getattr(args, "json", False))
    for item in items:
        if as_json:
            print_json(to_json(item))
            continue
        text = to_text(item)
        for line in [text] if isinstance(text, str) else text:
            out(line)


LISTING_PAGE = 500  # rows a listing reads at a time (camillo log, camillo facts)


def pages(fetch: Callable[[T | None, int], list[T]]) -> Iterator[T]:
    """Every row of a listing, read a page of :data:`LISTING_PAGE` at a time: ``fetch(last, limit)``
    gives the rows after ``last`` (None: from the first), so a listing of a million rows holds one
    page, and each page is a range of an index (not an offset walked from the first row)."""
    last: T | None = None
    while True:
        page = fetch(last, LISTING_PAGE)
        yield from page
        if len(page) < LISTING_PAGE:
            return
        last = page[-1]


def emit_one(args: argparse.Namespace, item: T, to_json: Callable[[T], object],
             to_text: Callable[[T], str | Iterable[str]]) -> None:
    """:func:`emit` for a command that prints one result (a report, a summary)."""
    emit(args, [item], to_json, to_text)


def print_written(changes: Changes) -> None:
    """The ids of the records a command wrote, one ``{"id": ...}`` JSON line each."""
    for rid in changes.written:
        print_json({"id": rid.hex()})


def fmt_time(ts: int | None) -> str:
    if ts is None:
        return "-" * 16
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts))


def one_line(text: str, width: int = 80) -> str:
    cleaned = "".join(c if c.isprintable() else "\u2423" for c in text.replace("\n", " "))
    return cleaned if len(cleaned) <= width else cleaned[: width - 1] + "…"


# ---------------------------------------------------------------------------------------------- credentials


def prompt_secret(prompt: str, env: str | None = None) -> str:
    if not sys.stdin or not sys.stdin.isatty():
        where = f"set {env}" if env else "set it in the environment (see camillo --help)"
        raise UsageError(f"{prompt.rstrip(': ')} is needed but there is no terminal to ask on; {where}")
    return getpass.getpass(prompt)


def passphrase(env: str = "CAMILLO_PASSPHRASE", prompt: str = "Passphrase: ") -> str:
    value = os.environ.get(env)
    if value:
        return value
    return prompt_secret(prompt, env)


def new_passphrase(env: str) -> str:
    value = os.environ.get(env)
    if value:
        return value
    first = prompt_secret("New passphrase: ", env)
    if prompt_secret("Repeat it: ", env) != first:
        raise UsageError("the two passphrases differ; nothing was changed")
    return first


def add_credential_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("credential (default: passphrase from CAMILLO_PASSPHRASE or a prompt)")
    g.add_argument("--recovery", action="store_true", help="unlock with the recovery phrase (CAMILLO_RECOVERY_PHRASE)")
    g.add_argument("--device", action="store_true", help="unlock with this installation's key in the OS keychain")
    g.add_argument("--grant", metavar="FILE", help="act as the agent holding this grant file")
    g.add_argument("--recipient-key", metavar="FILE",
                   help="unlock with a trusted person's recovery key file (its passphrase: CAMILLO_RECIPIENT_PASSPHRASE)")
    g.add_argument("--re-register", action="store_true",
                   help="register this installation anew even though another device revoked it")
    g.add_argument("--device-name", metavar="NAME",
                   help="the name of this device, the first time it opens the vault (CAMILLO_DEVICE_NAME; "
                        "asked in a terminal; default: the host name)")


def unlock(args: argparse.Namespace) -> Unlock:
    """The credential the options name (the passphrase when none does)."""
    chosen = [n for n in ("recovery", "device", "grant", "recipient_key") if getattr(args, n, None)]
    if len(chosen) > 1:
        raise UsageError("choose one of --recovery, --device, --grant and --recipient-key")
    grant: str | None = getattr(args, "grant", None)
    if grant:
        return Unlock.grant(grant)
    key_file: str | None = getattr(args, "recipient_key", None)
    if key_file:
        return Unlock.recipient(key_file, passphrase("CAMILLO_RECIPIENT_PASSPHRASE", "Passphrase of the recovery key: "))
    if getattr(args, "device", False):
        return Unlock.device()
    if getattr(args, "recovery", False):
        phrase = os.environ.get("CAMILLO_RECOVERY_PHRASE") or prompt_secret("Recovery phrase: ", "CAMILLO_RECOVERY_PHRASE")
        return Unlock.recovery(phrase)
    return Unlock.passphrase(passphrase())


def open_vault(args: argparse.Namespace, *, register: bool = True, cache: bool = True,
               read_only: bool = False) -> Vault:
    """The vault ``args.vault``, opened with the credential the options name.  What the person
    must be told about this device (its rejected writes, a key an erasure replaced …) goes to stderr,
    one line each; a view still syncing is said by the reading commands (:func:`warn_if_incomplete`)."""
    path: str = args.vault
    how = unlock(args)
    name = device_name(args, how) if register and not read_only else None
    vault = Vault.open(path, how, register=register, cache=cache, read_only=read_only, device_name=name,
                       re_register=bool(getattr(args, "re_register", False)))
    for notice in vault.notices():
        if notice.kind != "incomplete":
            sys.stderr.write(f"camillo: {notice.message}\n")
    if how.method == "recipient" and vault.is_owner and getattr(args, "command", "") != "passwd":
        lead_to_new_passphrase(vault, args)
    return vault


def device_name(args: argparse.Namespace, how: Unlock) -> str | None:
    """This device's name for its first open of the vault: ``--device-name``, else CAMILLO_DEVICE_NAME,
    else asked in a terminal (the host name by default); None leaves the default."""
    given: str | None = getattr(args, "device_name", None) or os.environ.get("CAMILLO_DEVICE_NAME")
    if given or how.method in ("device", "grant") or not sys.stdin or not sys.stdin.isatty():
        return given
    if os.path.isfile(args.vault) or not Vault.is_new_installation(args.vault):
        return None
    default = Vault.default_device_name()
    sys.stderr.write("This is the first time this computer opens the vault: it joins as a new device.\n")
    return input(f"Name for this device [{default}]: ").strip() or default


def lead_to_new_passphrase(vault: Vault, args: argparse.Namespace) -> None:
    """Opened with a trusted person's recovery key: the person has usually lost the passphrase.  Say
    how to set a new one, and offer it in a terminal."""
    sys.stderr.write(f"camillo: you opened the vault with a trusted person's recovery key. If you lost your "
                     f"passphrase, set a new one: camillo passwd {args.vault} --recipient-key {args.recipient_key}\n")
    if not sys.stdin or not sys.stdin.isatty():
        return
    if input("Set a new passphrase now? [Y/n] ").strip().lower() in ("", "y", "yes"):
        vault.change_passphrase(new_passphrase("CAMILLO_NEW_PASSPHRASE"))
        sys.stderr.write("Passphrase changed; the keys rolled. Open the vault with the new passphrase from now on.\n")


def warn_if_incomplete(vault: Vault) -> None:
    """One line on stderr when what a reading command shows may be incomplete or rolled back
    (stdout, JSON included, is unchanged)."""
    state, details = vault.sync_status()
    if state != "up to date":
        detail = f": {details[0]}" if details else ""
        sys.stderr.write(f"camillo: warning: this view of the vault may be incomplete ({state}){detail}; "
                         "run 'camillo verify' for the details\n")


def find_id(vault: Vault, text: str) -> bytes:
    """A record id from its hex form or a unique prefix of at least 8 digits."""
    return vault.find_record(text).id


# ---------------------------------------------------------------------------------------------- the command table


class Commands:
    """The subcommands being added to the ``camillo`` parser: each area of commands adds its own."""

    def __init__(self, parser: argparse.ArgumentParser) -> None:
        self.sub = parser.add_subparsers(dest="command", metavar="COMMAND")
        self.sub.required = True

    def add(self, name: str, fn: Handler, help_: str, *, cred: bool = True,
            vault_arg: bool = True) -> argparse.ArgumentParser:
        """A command ``camillo NAME [DIR] [credential options]`` run by ``fn``."""
        p = self.sub.add_parser(name, help=help_, description=help_)
        if vault_arg:
            p.add_argument("vault", metavar="DIR", help="the vault folder, a .vmem file where reading is enough, or "
                           "an object store: s3://BUCKET/PREFIX")
        if cred:
            add_credential_options(p)
        add_endpoint_option(p)
        p.set_defaults(func=fn)
        return p

    def plain(self, name: str, help_: str) -> argparse.ArgumentParser:
        """A command whose arguments the caller adds (and its ``func``)."""
        p = self.sub.add_parser(name, help=help_)
        add_endpoint_option(p)
        return p


# ---------------------------------------------------------------------------------------------- object stores

LOCATION_ARGS = ("vault", "other", "file", "dir", "out", "source")


def add_endpoint_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--endpoint-url", metavar="URL",
                   help="the S3-compatible server of s3:// locations (default: CAMILLO_S3_ENDPOINT, then the AWS "
                   "configuration)")


FILE_ARGS = (*LOCATION_ARGS, "grant", "recipient_key")  # paths: any bytes the file system takes


def check_text_args(args: argparse.Namespace) -> None:
    """Every argument that is text, not a path, must be valid UTF-8: one the terminal passed as bytes it
    could not decode (Python keeps them as lone surrogates) is refused here, naming it, before anything
    is read (it would fail deep inside, in SQLite or the encoder)."""
    for name, value in vars(args).items():
        if name in FILE_ARGS:
            continue
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str) and any("\ud800" <= c <= "\udfff" for c in text):
                raise UsageError(f"the {name.replace('_', '-')} given is not valid UTF-8 text (bytes the "
                                 "terminal's encoding could not read); nothing was done")


def apply_endpoint(args: argparse.Namespace) -> None:
    """Every s3:// location among the arguments names the server given with ``--endpoint-url``."""
    endpoint = getattr(args, "endpoint_url", None)
    for name in LOCATION_ARGS:
        value = getattr(args, name, None)
        if isinstance(value, str):
            setattr(args, name, with_endpoint(value, endpoint))
