"""The operations the crash harness interrupts, each in three parts:

* ``build(world)``: in the parent, once: a template world (vault folder, installations' homes,
  another copy to merge, a grant file) that every iteration starts from, copied;
* ``work(world, io)``: in the worker process: open the vault as the acting device, arm the kill
  hook (``io.arm()``), run the operation with the real product code, and report each acknowledged
  result (``io.ack(...)``) only after the call returned;
* ``check(world, acks, ctx)``: in the parent after the worker ended (killed or not): a fresh reader
  (a new installation, no cache, full signature checks) verifies the vault and finds everything
  acknowledged; then the crashed device recovers (opens with its own local state, re-runs the
  operation if it was not acknowledged, writes once more) and a fresh reader verifies again.

A check raises :class:`CheckFailed` naming what is wrong.  Right after a crash a fresh reader may
report only what the format says an unfinished operation leaves: for an interrupted merge, what a
partial sync shows (gaps, records waiting for what they name); for an interrupted erasure, old
segments under destroyed epochs still waiting to be deleted (unreadable); for an interrupted
re-certification, slots of the current generation that its new key signed before its certificate
was written, or that the retired key signed and that it re-issued, until they are deleted (untrusted).
Every other problem (damaged, fork, rollback, signature, rejected, untrusted) is a failure; after
recovery nothing at all may be reported, every active device must be held by some installation, an
erased text must be unreachable with every credential, and a replaced passphrase must unwrap no slot.

Parent side: the pytest main thread.  Worker side: the worker process's main thread.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from camillo import NewRecord, Unlock, Vault
from camillo.errors import VaultError

PASSPHRASE = "correct horse battery staple"
NEW_PASSPHRASE = "a different and longer passphrase"
SETUP_MESSAGES = 4


class CheckFailed(AssertionError):
    pass


@dataclass
class World:
    """Where one iteration's files live: ``root/vault``, ``root/other``, ``root/homes/<device>``."""

    root: str

    @property
    def vault(self) -> str:
        return os.path.join(self.root, "vault")

    @property
    def other(self) -> str:
        return os.path.join(self.root, "other")

    def home(self, name: str) -> str:
        return os.path.join(self.root, "homes", name)

    @property
    def grant(self) -> str:
        return os.path.join(self.root, "grants", "agent.grant")

    @property
    def params_path(self) -> str:
        return os.path.join(self.root, "params.json")

    def params(self) -> dict[str, Any]:
        with open(self.params_path) as fh:
            return json.load(fh)

    def save_params(self, **more: Any) -> None:
        p = self.params() if os.path.exists(self.params_path) else {}
        p.update(more)
        with open(self.params_path, "w") as fh:
            json.dump(p, fh)

    def fresh_home(self) -> str:
        n = 0
        while os.path.exists(self.home(f"fresh-{n}")):
            n += 1
        return self.home(f"fresh-{n}")


@contextlib.contextmanager
def acting_as(home: str) -> Iterator[None]:
    """CAMILLO_HOME for code that reads it from the environment (enrollment's Join)."""
    old = os.environ.get("CAMILLO_HOME")
    os.environ["CAMILLO_HOME"] = home
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("CAMILLO_HOME", None)
        else:
            os.environ["CAMILLO_HOME"] = old


def open_as(world: World, device: str, passphrase: str = PASSPHRASE, path: str | None = None, **kw: Any) -> Vault:
    return Vault.open(path or world.vault, Unlock.passphrase(passphrase), home=world.home(device), **kw)


def message(text: str) -> NewRecord:
    return NewRecord(type="message", conversation="crash", role="user", text=text)


# ---------------------------------------------------------------------------------------------- checks


TOLERATED_WHILE_SYNCING = {"gap", "syncing", "waiting"}


def fresh_reader(world: World, *, path: str | None = None) -> Vault:
    """A new installation opening the vault with the recovery phrase: no memory, no cache, reads
    and verifies every file."""
    phrase = world.params()["phrase"]
    try:
        return Vault.open(path or world.vault, Unlock.recovery(phrase), home=world.fresh_home(), register=False,
                          cache=False)
    except VaultError as exc:
        raise CheckFailed(f"a fresh reader cannot open the vault: {type(exc).__name__}: {exc}") from None


def verify(world: World, *, tolerate: set[str] = frozenset(), path: str | None = None,
           expect: dict[str, str] | None = None, absent: dict[str, str] | None = None,
           stage: str = "after the crash") -> list[str]:
    """Open fresh, check problems and the presence of records; returns the tolerated problem kinds seen."""
    try:
        seen = _verify(world, tolerate, path, expect or {}, absent or {})
        if stage == "after recovery":
            no_orphan_devices(world)
        return seen
    except CheckFailed as exc:
        raise CheckFailed(f"{stage}: {exc}") from None


def no_orphan_devices(world: World) -> None:
    """Every device the roster counts as active is the current writer of some installation: a
    device whose key nobody holds any more can never write, acknowledge a compaction (so old
    segments are kept for good) or rotate after an erasure, yet the devices view lists it."""
    import glob

    from camillo.localstate import VaultLocal

    with fresh_reader(world) as v:
        held = set()
        for home in glob.glob(os.path.join(world.root, "homes", "*")):
            inst = VaultLocal(v.vault_id, home).load_installation()
            if inst is not None:
                held.add(inst.writer_id)
        orphans = [d for d in v.devices() if not d.revoked and d.writer_id not in held]
        if orphans:
            raise CheckFailed("active device(s) whose key no installation holds: "
                              + ", ".join(f"{d.name} {d.writer_id.hex()[:12]}" for d in orphans))


def _verify(world: World, tolerate: set[str], path: str | None, expect: dict[str, str],
            absent: dict[str, str]) -> list[str]:
    with fresh_reader(world, path=path) as v:
        problems = v.problems(full=True)
        bad = [p for p in problems if p.kind not in tolerate]
        if bad:
            raise CheckFailed("verification reports: " + "; ".join(f"{p.kind}: {p.message} [{p.file}]" for p in bad))
        for rid, text in expect.items():
            r = v.record(bytes.fromhex(rid))
            if r is None or not r.valid or r.erased:
                raise CheckFailed(f"acknowledged record {rid[:12]} ({text!r}) is "
                                  + ("missing" if r is None else f"not valid: {r.reason}"))
            if r.text != text:
                raise CheckFailed(f"record {rid[:12]} reads {r.text!r}, not {text!r}")
        for rid, text in absent.items():
            r = v.record(bytes.fromhex(rid))
            if r is not None and not r.erased and r.text == text:
                raise CheckFailed(f"record {rid[:12]} ({text!r}) was acknowledged as erased but is readable")
        return sorted({p.kind for p in problems})


def setup_records(world: World) -> dict[str, str]:
    return dict(world.params()["records"])


# ---------------------------------------------------------------------------------------------- scenarios


@dataclass
class Scenario:
    name: str
    build: Callable[[World], None]
    work: Callable[[World, Any], None]
    check: Callable[[World, list[dict], dict], list[str]]
    prepare: Callable[[World], dict] = field(default=lambda w: {})
    on_line: Callable[[World, dict, dict], None] | None = None


def build_base(world: World) -> None:
    """A vault created by device 'alpha' with a few messages and a fact."""
    vault, phrase = Vault.create(world.vault, PASSPHRASE, device_name="alpha", home=world.home("alpha"))
    records = {}
    with vault:
        for i in range(SETUP_MESSAGES):
            rid = vault.append([message(f"setup {i}")]).written[0]
            records[rid.hex()] = f"setup {i}"
        vault.append([NewRecord(type="fact", key="user/n", value=-1)])
    world.save_params(phrase=phrase, records=records)


def recover_and_write(world: World, device: str = "alpha", passphrase: str = PASSPHRASE,
                      then: Callable[[Vault], None] | None = None) -> dict[str, str]:
    """The crashed device opens with its own local state (and cache), finishes what needs
    finishing, and writes once more.  Returns the record written."""
    try:
        with open_as(world, device, passphrase) as v:
            if then is not None:
                then(v)
            rid = v.append([message("after the crash")]).written[0]
            return {rid.hex(): "after the crash"}
    except VaultError as exc:
        raise CheckFailed(f"device {device} cannot recover after the crash: {type(exc).__name__}: {exc}") from None


# -- append


def work_append(world: World, io: Any) -> None:
    with open_as(world, "alpha") as v:
        io.arm()
        for i in range(6):
            ch = v.append([message(f"append {i}"), NewRecord(type="fact", key="user/n", value=i)])
            io.ack({"i": i, "record": ch.written[0].hex(), "text": f"append {i}"})


def check_append(world: World, acks: list[dict], ctx: dict) -> list[str]:
    expect = setup_records(world) | {a["record"]: a["text"] for a in acks}
    seen = verify(world, expect=expect)
    last = acks[-1]["i"] if acks else -1
    with fresh_reader(world) as v:
        f = v.fact("user/n")
        if f.status != "ok" or f.current is None or f.current.value not in (last, last + 1):
            raise CheckFailed(f"fact user/n is {f.status} {f.current.value if f.current else None!r}, "
                              f"acknowledged {last}")
    after = recover_and_write(world, then=lambda v: v.append([NewRecord(type="fact", key="user/n", value=100)]))
    verify(world, expect=expect | after, stage="after recovery")
    with fresh_reader(world) as v:
        f = v.fact("user/n")
        if f.status != "ok" or f.current.value != 100:
            raise CheckFailed(f"after recovery fact user/n is {f.status} {f.current.value if f.current else None!r}")
    return seen


# -- merge


def build_merge(world: World) -> None:
    import shutil

    build_base(world)
    shutil.copytree(world.vault, world.other)
    theirs = {}
    with open_as(world, "beta", path=world.other, device_name="beta") as v:
        for i in range(3):
            rid = v.append([message(f"beta {i}")]).written[0]
            theirs[rid.hex()] = f"beta {i}"
        v.append([NewRecord(type="fact", key="user/beta", value="yes")])
    world.save_params(theirs=theirs)


def work_merge(world: World, io: Any) -> None:
    from camillo.transport import merge_into

    io.arm()
    copied = merge_into(world.vault, world.other)
    io.ack({"copied": len(copied)})


def check_merge(world: World, acks: list[dict], ctx: dict) -> list[str]:
    from camillo.transport import merge_into

    mine, theirs = setup_records(world), world.params()["theirs"]
    if acks:
        seen = verify(world, expect=mine | theirs)
    else:
        seen = verify(world, expect=mine, tolerate=TOLERATED_WHILE_SYNCING)
    merge_into(world.vault, world.other)
    after = recover_and_write(world)
    verify(world, expect=mine | theirs | after, stage="after recovery")
    return seen


# -- compaction


def build_compact(world: World) -> None:
    build_base(world)
    records = setup_records(world)
    with open_as(world, "alpha") as v:
        for i in range(10):
            rid = v.append([message(f"small {i}")]).written[0]
            records[rid.hex()] = f"small {i}"
    world.save_params(records=records)


def work_compact(world: World, io: Any) -> None:
    with open_as(world, "alpha") as v:
        io.arm()
        report = v.compact(prune_now=True)
        io.ack({"written": report.segments_written, "deleted": report.segments_deleted})


def check_compact(world: World, acks: list[dict], ctx: dict) -> list[str]:
    expect = setup_records(world)
    seen = verify(world, expect=expect)
    after = recover_and_write(world, then=lambda v: v.compact(prune_now=True))
    verify(world, expect=expect | after, stage="after recovery")
    return seen


# -- erasure


def build_erase(world: World) -> None:
    build_base(world)
    with open_as(world, "alpha") as v:
        target = v.append([message("ERASE-TARGET")]).written[0]
        keep = v.append([message("kept after the erasure")]).written[0]
    world.save_params(target=target.hex(), records=setup_records(world) | {keep.hex(): "kept after the erasure"})


def work_erase(world: World, io: Any) -> None:
    with open_as(world, "alpha") as v:
        io.arm()
        v.erase([bytes.fromhex(world.params()["target"])])
        io.ack({"erased": world.params()["target"]})


def reachable_plaintext(world: World, marker: bytes) -> list[str]:
    """Segments of the vault folder whose plaintext contains ``marker`` and that the passphrase or
    the recovery phrase can still decrypt with nothing but the folder's files (any slot of any
    generation, any envelope): where an erasure did not reach."""
    import glob

    from camillo import descriptor, envelopes, keys, segments, slots
    from camillo.credentials import from_passphrase, from_recovery_phrase
    from camillo.primitives import CryptoFailure

    path = world.vault
    vid = descriptor.decode(open(os.path.join(path, "VMEM"), "rb").read()).vault_id
    recovery = from_recovery_phrase(world.params()["phrase"])
    owners = []
    for f in glob.glob(os.path.join(path, "slots", "*.slot")):
        h = slots.read_header(open(f, "rb").read(), "slots/" + os.path.basename(f))
        creds = [recovery] + [from_passphrase(p, h.kdf) for p in (PASSPHRASE, NEW_PASSPHRASE) if h.kdf]
        for cred in creds:
            try:
                owners.append(keys.owner_kem(slots.unwrap_vms(h, vid, cred.recipient), vid, h.generation))
            except CryptoFailure:
                continue
    secrets = {}
    for f in glob.glob(os.path.join(path, "env", "*.env")):
        data = open(f, "rb").read()
        for rk in owners:
            try:
                p = envelopes.open_envelope(data, f, vid, rk)
            except CryptoFailure:
                continue
            if p.kind == envelopes.EnvelopeKind.EPOCH_SECRET:
                secrets[(p.compartment_id, p.epoch_id)] = p.key
    found = []
    for f in glob.glob(os.path.join(path, "segments", "*", "*.seg")):
        data = open(f, "rb").read()
        h = segments.read_header(data, f)
        s = secrets.get((h.compartment_id, h.epoch_id))
        if s is not None:
            plain = segments.open_segment(data, f, vid, keys.epoch_key(s, vid, h.compartment_id, h.epoch_id))
            if marker in plain:
                found.append(os.path.relpath(f, path))
    return found


def _erase_again(world: World) -> Callable[[Vault], None]:
    """What the user does after an interrupted erasure: erase the record again (which finishes the
    interrupted one, then says it is already erased)."""
    from camillo.errors import UsageError

    target = bytes.fromhex(world.params()["target"])

    def finish(v: Vault) -> None:
        try:
            v.erase([target])
        except UsageError as exc:
            if "already erased" not in str(exc):
                raise

    return finish


def check_erase(world: World, acks: list[dict], ctx: dict) -> list[str]:
    target = {world.params()["target"]: "ERASE-TARGET"}
    seen = verify(world, expect=setup_records(world), absent=target if acks else None,
                  tolerate={"unreadable"} if not acks else set())
    if acks and (left := reachable_plaintext(world, b"ERASE-TARGET")):
        raise CheckFailed(f"the erasure was acknowledged but the erased text is still readable in {left}")
    after = recover_and_write(world, then=_erase_again(world))
    verify(world, expect=setup_records(world) | after, absent=target, stage="after recovery")
    if left := reachable_plaintext(world, b"ERASE-TARGET"):
        raise CheckFailed(f"after recovery the erased text is still readable in {left}")
    return seen


# -- revocation of a device and of a grant


def build_revoke_device(world: World) -> None:
    build_base(world)
    with open_as(world, "beta", device_name="beta") as v:
        rid = v.append([message("written by beta")]).written[0]
        beta = v.writer_id.hex()
    world.save_params(beta=beta, records=setup_records(world) | {rid.hex(): "written by beta"})


def work_revoke_device(world: World, io: Any) -> None:
    with open_as(world, "alpha") as v:
        io.arm()
        v.revoke(world.params()["beta"], reason="lost")
        io.ack({"revoked": world.params()["beta"]})


def _revoked(world: World, writer_hex: str) -> bool:
    with fresh_reader(world) as v:
        return bytes.fromhex(writer_hex) in v.session.roster.revocations


def check_revoke_device(world: World, acks: list[dict], ctx: dict) -> list[str]:
    beta = world.params()["beta"]
    seen = verify(world, expect=setup_records(world))
    if acks and not _revoked(world, beta):
        raise CheckFailed("the revocation was acknowledged but beta is not revoked")

    def finish(v: Vault) -> None:
        if bytes.fromhex(beta) not in v.session.roster.revocations:
            v.revoke(beta, reason="lost")

    after = recover_and_write(world, then=finish)
    verify(world, expect=setup_records(world) | after, stage="after recovery")
    if not _revoked(world, beta):
        raise CheckFailed("after recovery beta is still not revoked")
    return seen


def build_revoke_grant(world: World) -> None:
    build_base(world)
    os.makedirs(os.path.dirname(world.grant))
    with open_as(world, "alpha") as v:
        v.create_grant("agent", {"personal": "write"}, world.grant)
    with Vault.open(world.vault, Unlock.grant(world.grant), home=world.home("agent")) as v:
        rid = v.append([message("written by the agent")]).written[0]
        agent = v.writer_id.hex()
    world.save_params(agent=agent, records=setup_records(world) | {rid.hex(): "written by the agent"})


def work_revoke_grant(world: World, io: Any) -> None:
    with open_as(world, "alpha") as v:
        io.arm()
        v.revoke("agent", reason="done")
        io.ack({"revoked": "agent"})


def check_revoke_grant(world: World, acks: list[dict], ctx: dict) -> list[str]:
    from camillo.errors import Revoked

    agent = world.params()["agent"]
    seen = verify(world, expect=setup_records(world))
    if acks:
        if not _revoked(world, agent):
            raise CheckFailed("the revocation was acknowledged but the grant is not revoked")
        try:
            Vault.open(world.vault, Unlock.grant(world.grant), home=world.home("agent")).lock()
            raise CheckFailed("a grant whose revocation was acknowledged still opens the vault")
        except Revoked:
            pass

    def finish(v: Vault) -> None:
        if bytes.fromhex(agent) not in v.session.roster.revocations:
            v.revoke("agent", reason="done")

    after = recover_and_write(world, then=finish)
    verify(world, expect=setup_records(world) | after, stage="after recovery")
    return seen


# -- passphrase change


def work_passwd(world: World, io: Any) -> None:
    with open_as(world, "alpha") as v:
        io.arm()
        v.change_passphrase(NEW_PASSPHRASE)
        io.ack({"passphrase": "new"})


def _opens(world: World, passphrase: str) -> bool:
    from camillo.errors import WrongCredential

    try:
        Vault.open(world.vault, Unlock.passphrase(passphrase), home=world.fresh_home(), register=False).lock()
        return True
    except WrongCredential:
        return False
    except VaultError as exc:
        raise CheckFailed(f"opening with a passphrase fails with {type(exc).__name__}: {exc}") from None


def unwrapping_slots(world: World, passphrase: str) -> list[str]:
    """Slots in the folder that ``passphrase`` unwraps, whatever a reader would then decide: a
    revoked passphrase must not be able to recover the master secret from the live folder."""
    from tests.core.helpers import slots_unwrapped_by

    return [h.name for h in slots_unwrapped_by(world.vault, passphrase)]


def _finish_passwd(v: Vault) -> None:
    """After an interrupted change: change again, unless opening the vault already finished it."""
    if v.session.roster.active_owner(v.session.unlocking.writer_id):
        v.change_passphrase(NEW_PASSPHRASE)


def check_passwd(world: World, acks: list[dict], ctx: dict) -> list[str]:
    seen = verify(world, expect=setup_records(world))
    old, new = _opens(world, PASSPHRASE), _opens(world, NEW_PASSPHRASE)
    if not (old or new):
        raise CheckFailed("neither the old nor the new passphrase opens the vault")
    if acks and (old or not new):
        raise CheckFailed(f"the change was acknowledged but old opens={old}, new opens={new}")
    if acks and (left := unwrapping_slots(world, PASSPHRASE)):
        raise CheckFailed(f"the change was acknowledged but the old passphrase still unwraps {left}")
    if new:
        after = recover_and_write(world, passphrase=NEW_PASSPHRASE)
    else:
        after = recover_and_write(world, then=_finish_passwd)
    verify(world, expect=setup_records(world) | after, stage="after recovery")
    if _opens(world, PASSPHRASE) or not _opens(world, NEW_PASSPHRASE):
        raise CheckFailed("after recovery the passphrase change is not complete")
    if left := unwrapping_slots(world, PASSPHRASE):
        raise CheckFailed(f"after recovery the old passphrase still unwraps the master secret from {left}")
    return seen


# -- re-certification: the installation lost its device key (a deleted device-key.bin, a keychain
#    that lost the entry) and opens with the passphrase; the lost key created the vault, so it
#    signed every slot of the current generation


def build_recertify(world: World) -> None:
    import glob

    build_base(world)
    with open_as(world, "beta", device_name="beta") as v:  # another device, whose slot beta signed itself
        rid = v.append([message("written by beta")]).written[0]
    world.save_params(records=setup_records(world) | {rid.hex(): "written by beta"})
    with open_as(world, "alpha") as v:
        world.save_params(lost=v.writer_id.hex())
    for f in glob.glob(os.path.join(world.home("alpha"), "**", "device-key.bin"), recursive=True):
        os.unlink(f)


def work_recertify(world: World, io: Any) -> None:
    io.arm()
    with open_as(world, "alpha") as v:
        io.ack({"writer": v.writer_id.hex()})


def check_recertify(world: World, acks: list[dict], ctx: dict) -> list[str]:
    # Right after the crash: slots the new key signed before its certificate was written, or the
    # originals it re-issued, signed by the retired key, until they are deleted (never used).
    seen = verify(world, expect=setup_records(world), tolerate={"untrusted"})
    if not _opens(world, PASSPHRASE):
        raise CheckFailed("the passphrase no longer opens the vault")
    if acks and not _revoked(world, world.params()["lost"]):
        raise CheckFailed("the open was acknowledged but the lost key is not retired")
    after = recover_and_write(world)
    with open_as(world, "beta") as v:  # the other device still opens with its own key and writes
        rid = v.append([message("beta again")]).written[0]
    verify(world, expect=setup_records(world) | after | {rid.hex(): "beta again"}, stage="after recovery")
    if not _opens(world, PASSPHRASE):
        raise CheckFailed("after recovery the passphrase no longer opens the vault")
    if not _revoked(world, world.params()["lost"]):
        raise CheckFailed("after recovery the lost key is still an active device")
    return seen


# -- enrollment: the offering device confirms (killed), or the new device finishes joining (killed)


def _offer(world: World) -> dict:
    from camillo.ops.enrollment import Offer

    with open_as(world, "alpha") as v:
        offer = Offer(v.session)
        secret, expiry, qr = offer.secret.hex(), offer.expiry, offer.qr_text
    return {"secret": secret, "expiry": expiry, "qr": qr}


def prepare_enroll_confirm(world: World) -> dict:
    ctx = _offer(world)
    with acting_as(world.home("gamma")):
        join = Vault.join(world.vault, ctx["qr"], name="gamma")
        sas = join.start()
    world.save_params(secret=ctx["secret"], expiry=ctx["expiry"], sas=sas)
    return {"join": join}


def _confirm(world: World, v: Vault) -> None:
    from camillo.ops.enrollment import Offer, OfferState

    p = world.params()
    offer = Offer(v.session, secret=bytes.fromhex(p["secret"]), expiry=p["expiry"])
    if offer.poll() != OfferState.REQUESTED:
        raise VaultError(f"the offer is {offer.state.value}: {offer.messages}")
    offer.confirm(typed_sas=p["sas"])


def work_enroll_confirm(world: World, io: Any) -> None:
    with open_as(world, "alpha") as v:
        io.arm()
        _confirm(world, v)
        io.ack({"confirmed": True})


def _finish_join(world: World, join: Any) -> dict[str, str]:
    from camillo.errors import EnrollmentError

    with acting_as(world.home("gamma")):
        try:
            new = join.poll()
        except EnrollmentError as exc:
            raise CheckFailed(f"the new device cannot finish joining: {exc}") from None
        if new is None:
            raise CheckFailed("the new device cannot finish joining: poll() still waits")
        with new:
            rid = new.append([message("written by gamma")]).written[0]
    return {rid.hex(): "written by gamma"}


def check_enroll_confirm(world: World, acks: list[dict], ctx: dict) -> list[str]:
    seen = verify(world, expect=setup_records(world))
    if not acks:  # the user confirms again on the offering device
        recover_and_write(world, then=lambda v: _confirm(world, v))
    joined = _finish_join(world, ctx["join"])
    after = recover_and_write(world)
    verify(world, expect=setup_records(world) | joined | after, stage="after recovery")
    return seen


def prepare_enroll_join(world: World) -> dict:
    ctx = _offer(world)
    world.save_params(secret=ctx["secret"], expiry=ctx["expiry"], qr=ctx["qr"])
    return {}


def work_enroll_join(world: World, io: Any) -> None:
    p = world.params()
    os.environ["CAMILLO_HOME"] = world.home("gamma")  # this process is the new device
    join = Vault.join(world.vault, p["qr"], name="gamma")
    io.line({"sas": join.start()})
    io.wait_for("go")
    io.arm()
    new = join.poll()
    if new is None:
        raise SystemExit("the enrollment response was not there")
    writer = new.writer_id.hex()
    new.lock()
    io.ack({"writer": writer})


def on_line_enroll_join(world: World, line: dict, ctx: dict) -> None:
    if "sas" in line:
        world.save_params(sas=line["sas"])
        recover_and_write(world, then=lambda v: _confirm(world, v))
        open(os.path.join(world.root, "go"), "w").close()


def check_enroll_join(world: World, acks: list[dict], ctx: dict) -> list[str]:
    seen = verify(world, expect=setup_records(world))
    with open_as(world, "gamma", device_name="gamma") as v:  # whatever it kept, the new device can write
        if acks and (v.session.actor is None or v.writer_id.hex() != acks[0]["writer"]):
            raise CheckFailed("the joined device lost its enrolled key after the crash")
        rid = v.append([message("written by gamma")]).written[0]
    after = recover_and_write(world)
    verify(world, expect=setup_records(world) | {rid.hex(): "written by gamma"} | after, stage="after recovery")
    return seen


SCENARIOS: dict[str, Scenario] = {s.name: s for s in [
    Scenario("append", build_base, work_append, check_append),
    Scenario("merge", build_merge, work_merge, check_merge),
    Scenario("compact", build_compact, work_compact, check_compact),
    Scenario("erase", build_erase, work_erase, check_erase),
    Scenario("revoke-device", build_revoke_device, work_revoke_device, check_revoke_device),
    Scenario("revoke-grant", build_revoke_grant, work_revoke_grant, check_revoke_grant),
    Scenario("passwd", build_base, work_passwd, check_passwd),
    Scenario("recertify", build_recertify, work_recertify, check_recertify),
    Scenario("enroll-confirm", build_base, work_enroll_confirm, check_enroll_confirm, prepare_enroll_confirm),
    Scenario("enroll-join", build_base, work_enroll_join, check_enroll_join, prepare_enroll_join,
             on_line_enroll_join),
]}

