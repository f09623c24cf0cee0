"""A realistic Camillo session for the security tests, with every secret it touches written down.

:func:`run_session` creates a vault, writes to it from its device and from agents (write and append
grants), enrolls a second device by QR code, changes the passphrase, revokes a grant and a device,
erases a record, re-issues the recovery phrase, compacts, packs, unpacks and merges, and provokes
many errors on purpose (wrong passphrase, mistyped recovery phrase, revoked grant, damaged files,
refused writes, bad enrollment codes...).  Along the way it records, from the objects that hold them,
every secret in play: passphrases, recovery phrases, device and grant seeds, each generation's
vault master secret, the owner KEM seeds, every epoch secret, the enrollment secret, and the local
keys of the cache and the device state.

It returns a :class:`Session` with those secrets, the exceptions raised, the objects met (for repr and
str), and the open vault (for the wipe-on-lock test).  Product code runs for real; the only thing the
tests add is observation (an ``observer`` callback, wrappers installed by the nonce test).

Used from pytest's main thread only.
"""

from __future__ import annotations

import contextlib
import io
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PASSPHRASE = "Tr0ub4dor & the correct horse"
NEW_PASSPHRASE = "a brand-new passphrase, 2026"


@dataclass
class Session:
    root: Path
    path: str
    secrets: dict[str, bytes] = field(default_factory=dict)  # label -> secret bytes
    texts: dict[str, str] = field(default_factory=dict)  # label -> secret text (passphrases, phrases)
    errors: list[BaseException] = field(default_factory=list)
    objects: list[Any] = field(default_factory=list)  # things to repr/str
    outputs: list[str] = field(default_factory=list)  # what the command line printed on errors
    vault: Any = None  # the owner's vault, still open at the end

    def add_secret(self, label: str, value: bytes | None) -> None:
        if value:
            self.secrets.setdefault(label, bytes(value))

    def harvest(self, vault: Any, label: str) -> None:
        """Write down every secret the open vault object holds right now."""
        if vault.session.keyring.master is not None and not vault.session.keyring.master.wiped:
            self.add_secret(f"{label}/vms/g{vault.session.keyring.generation}", vault.session.keyring.master.get())
        if vault.session.keyring.owner_kem is not None:
            self.add_secret(f"{label}/owner-kem/g{vault.session.keyring.generation}", vault.session.keyring.owner_kem.seed)
        for (cid, eid), s in vault.session.keyring.epoch_secrets.items():
            if not s.wiped:
                self.add_secret(f"epoch/{cid.hex()[:8]}/{eid.hex()[:8]}", s.get())
        for cred, what in ((vault.session.actor, "actor"), (vault.session.unlocking, "unlocking")):
            if cred is not None:
                self.add_secret(f"{label}/{what}/{cred.kind.label}/x", cred.recipient.seed)
                self.add_secret(f"{label}/{what}/{cred.kind.label}/e", cred.signer.seed)
        if vault.session.cache is not None:
            self.add_secret(f"{label}/cache-key", vault.session.cache.page_key)
        if vault.session.device_state_store is not None:
            self.add_secret(f"{label}/state-key", vault.session.device_state_store._key)
        self.objects.append(vault)

    @contextlib.contextmanager
    def expect(self, *types: type[BaseException]) -> Iterator[None]:
        """Run a step that must fail with one of ``types``; keep the exception."""
        from camillo.errors import VaultError

        types = types or (VaultError,)
        try:
            yield
        except types as exc:
            self.errors.append(exc)
        else:
            raise AssertionError(f"expected {types} to be raised")


@contextlib.contextmanager
def home(path: Path) -> Iterator[None]:
    """Act as the installation living in ``path`` (the test suite's own environment otherwise)."""
    old = os.environ.get("CAMILLO_HOME")
    os.environ["CAMILLO_HOME"] = str(path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("CAMILLO_HOME", None)
        else:
            os.environ["CAMILLO_HOME"] = old


def _cli(s: Session, *argv: str, env: dict[str, str] | None = None) -> int:
    """Run the command line in this process and keep what it printed (stdout and stderr)."""
    from camillo.cli import main

    out, err = io.StringIO(), io.StringIO()
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(list(argv))
            except SystemExit as exc:  # argparse
                rc = exc.code if isinstance(exc.code, int) else 2
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    s.outputs.append(out.getvalue() + err.getvalue())
    return rc


def run_session(root: Path, observer: Callable[[str], None] | None = None) -> Session:
    from camillo import NewRecord, Unlock, Vault, encoding, transport
    from camillo.errors import AccessDenied, EnrollmentError, VaultError, WrongCredential
    from camillo.ops.enrollment import Offer, parse_code
    from camillo.primitives import recovery_entropy
    from camillo.session.grantfile import read_grant_file

    note = observer or (lambda step: None)
    s = Session(root, str(root / "vault"))
    desk, laptop = root / "desk", root / "laptop"

    # -- create, write
    note("create")
    with home(desk):
        vault, phrase = Vault.create(s.path, PASSPHRASE, device_name="desk")
    s.vault = vault
    s.texts["passphrase"] = PASSPHRASE
    s.texts["recovery phrase"] = phrase
    s.add_secret("recovery entropy", recovery_entropy(phrase))
    s.harvest(vault, "desk")
    note("append")
    for i in range(12):
        vault.append([NewRecord(type="message", conversation=f"c{i % 3}", role="user", text=f"message number {i}"),
                      NewRecord(type="message", conversation=f"c{i % 3}", role="assistant", text=f"reply {i}")])
    vault.append([NewRecord(type="fact", key="user/home_city", value="Porto"),
                  NewRecord(type="preference", key="user/style", value="short answers")])
    vault.append([NewRecord(type="fact", key="work/role", value="engineer")], compartment="work")
    vault.append([NewRecord(type="message", text="a health note")], compartment="health")
    s.harvest(vault, "desk")

    # -- agents
    note("grants")
    grants = {}
    for level in ("write", "append", "read"):
        gpath = str(root / f"{level}.grant")
        vault.create_grant(f"agent-{level}", {"work": level}, gpath)
        g = read_grant_file(gpath)[0]
        grants[level] = gpath
        s.add_secret(f"grant-{level}/x", g.credential.recipient.seed)
        s.add_secret(f"grant-{level}/e", g.credential.signer.seed)
        s.objects.append(g)
    s.harvest(vault, "desk")
    note("agent writes")
    with home(root / "agent"):
        agent = Vault.open(s.path, Unlock.grant(grants["write"]))
        agent.append([NewRecord(type="fact", key="work/project", value="camillo", authority=1)], compartment="work")
        with s.expect(AccessDenied):
            agent.append([NewRecord(type="fact", key="user/x", value="y")], compartment="personal")
        with s.expect(AccessDenied):
            agent.append([NewRecord(type="instruction", key="work/rule", value="obey", authority=3)], compartment="work")
        s.harvest(agent, "agent-write")
        s.objects += agent.timeline()
        agent.lock()
        appender = Vault.open(s.path, Unlock.grant(grants["append"]))
        appender.append([NewRecord(type="message", text="appended by an agent")], compartment="work")
        with s.expect(AccessDenied):
            appender.timeline()
        s.harvest(appender, "agent-append")
        appender.lock()
    vault.refresh()

    # -- a second device by QR code
    note("enroll")
    with home(desk):
        offer = Offer(vault.session)
    s.add_secret("enrollment secret", offer.secret)
    s.texts["enrollment QR"] = offer.qr_text
    s.texts["enrollment typed code"] = offer.typed_code.replace("-", "")
    s.objects.append(offer)
    s.objects.append(parse_code(offer.qr_text))
    with s.expect(EnrollmentError):
        parse_code(offer.qr_text[:-4] + "AAAA")
    with s.expect(EnrollmentError):
        parse_code(offer.typed_code[:-1] + ("0" if offer.typed_code[-1] != "0" else "1"))
    with home(laptop):
        join = Vault.join(s.path, offer.qr_text, name="laptop")
        sas = join.start()
        s.objects.append(join)
        s.add_secret("laptop/x", join.device.recipient.seed)
        s.add_secret("laptop/e", join.device.signer.seed)
    with home(desk):
        offer.poll()
        offer.confirm(typed_sas=sas)
    with home(laptop):
        second = join.poll()
        assert second is not None
        s.harvest(second, "laptop")
        second.append([NewRecord(type="message", text="from the laptop")])
        second.lock()
    with home(desk):
        offer.poll()
    vault.refresh()

    # -- credentials change, revocations, erasure
    note("change passphrase")
    vault.change_passphrase(NEW_PASSPHRASE)
    s.texts["new passphrase"] = NEW_PASSPHRASE
    s.harvest(vault, "desk")
    note("revoke")
    s.objects.append(vault.revoke("agent-read"))
    with s.expect(WrongCredential):
        vault.revoke("laptop", reauth=Unlock.passphrase("not the passphrase"))
    s.objects.append(vault.revoke("laptop", reauth=Unlock.passphrase(NEW_PASSPHRASE)))
    s.harvest(vault, "desk")
    note("erase")
    victim = next(r for r in vault.timeline() if r.text == "message number 3")
    s.objects.append(vault.erase([victim.id], reauth=Unlock.passphrase(NEW_PASSPHRASE)))
    s.harvest(vault, "desk")
    note("reissue recovery phrase")
    new_phrase = vault.reissue_recovery_phrase(reauth=Unlock.passphrase(NEW_PASSPHRASE)).phrase
    s.texts["new recovery phrase"] = new_phrase
    s.add_secret("new recovery entropy", recovery_entropy(new_phrase))
    s.harvest(vault, "desk")
    note("compact")
    s.objects.append(vault.compact(prune_now=True))
    s.harvest(vault, "desk")
    s.objects += vault.timeline() + vault.facts() + vault.devices() + vault.problems()
    s.objects += [vault.session.roster, vault.session.log, vault.session.materialized, vault.session.device_state, vault.session.shelf]

    # -- many errors on purpose
    note("errors")
    with home(desk):
        with s.expect(WrongCredential):
            Vault.open(s.path, Unlock.passphrase(PASSPHRASE))  # the old passphrase
        with s.expect(WrongCredential):
            Vault.open(s.path, Unlock.passphrase(NEW_PASSPHRASE + "x"))
        with s.expect(WrongCredential):
            Vault.open(s.path, Unlock.recovery(phrase))  # the re-issued one replaced it
        words = new_phrase.split()
        typo = " ".join([*words[:5], words[5][:-1] + ("q" if words[5][-1] != "q" else "z"), *words[6:]])
        with s.expect(WrongCredential):
            Vault.open(s.path, Unlock.recovery(typo))
        with s.expect(WrongCredential):
            Vault.open(s.path, Unlock.recovery(" ".join([*words[:-1], words[0]])))  # checksum
        with s.expect(WrongCredential):
            Vault.open(s.path, Unlock.recovery(" ".join(words[:23])))
        with s.expect(VaultError):
            Vault.open(s.path, Unlock.grant(grants["read"]))  # revoked
        with s.expect(VaultError):
            Vault.open(s.path, Unlock.device())  # no keychain in this session
        damaged = root / "damaged.grant"
        text = open(grants["write"]).read()
        damaged.write_text(text.replace(text.splitlines()[5][:10], "AAAAAAAAAA"))
        with s.expect(VaultError):
            Vault.open(s.path, Unlock.grant(str(damaged)))
        with s.expect(VaultError):
            vault.append([NewRecord(type="fact", key="bad key", value=1)])
        with s.expect(VaultError):
            vault.append([NewRecord(type="fact", key="user/x", value=1.5)])
        with s.expect(VaultError):
            vault.fact("user/nothing")
        with s.expect(VaultError):
            encoding.decode(b"\xa2\x00\x01\x00\x02", "a duplicate-key map")

    # -- moving the vault
    note("pack, unpack, merge")
    vmem = str(root / "copy.vmem")
    transport.pack_vault(s.path, vmem)
    transport.unpack_vault(vmem, str(root / "unpacked"))
    with home(desk):
        ro = Vault.open(vmem, Unlock.passphrase(NEW_PASSPHRASE))
        s.harvest(ro, "vmem")
        with s.expect(VaultError):
            ro.append([NewRecord(type="message", text="read-only")])
        ro.lock()
    transport.merge_into(str(root / "unpacked"), s.path)
    (root / "not-a-vault").mkdir()
    with s.expect(VaultError):
        transport.merge_into(s.path, str(root / "not-a-vault"))

    # -- the command line, with secrets in its environment
    note("cli")
    env = {"CAMILLO_HOME": str(desk)}
    _cli(s, "facts", s.path, env={**env, "CAMILLO_PASSPHRASE": PASSPHRASE})
    _cli(s, "log", s.path, env={**env, "CAMILLO_PASSPHRASE": NEW_PASSPHRASE})
    _cli(s, "facts", s.path, "--recovery", env={**env, "CAMILLO_RECOVERY_PHRASE": typo})
    _cli(s, "add", s.path, "--grant", grants["read"], env=env)
    _cli(s, "verify", s.path, env={**env, "CAMILLO_PASSPHRASE": NEW_PASSPHRASE})
    _cli(s, "info", s.path, env=env)
    _cli(s, "enroll", "join", s.path, "--code", offer.qr_text[:-6] + "AAAAAA", "--name", "again", env=env)

    vault.refresh()
    s.harvest(vault, "desk")
    s.objects.append(vault.timeline())
    time.sleep(0)  # (a point for observers)
    note("done")
    return s
