"""The user's devices: their names, renaming one, and acknowledging a device that joined (spec §14.5).

* **Names.**  A device is named when it joins (the person chooses; the host name by default, made
  unique among the active devices).  A DEVICE_NAME record (signed by an owner device, mirrored like
  a certificate) renames it; every copy shows the latest name.
* **"Was this you?"**  A device that joined with a credential (the passphrase on a new installation)
  or with a code shown on another device is *new* on every other owner device until a device the
  vault already trusts acknowledges it with a DEVICE_ACK record.  The vault trusts (*vouches for*)
  the devices that created it, the devices certified by one it vouches for (a code compared there,
  or a key rotation), the new key of a device it vouches for (a replaced key: that device sees
  itself revoked if it was not its own doing) and the devices such a device acknowledged: a thief
  who joined with a stolen passphrase can acknowledge nothing, not even a second installation of
  its own.  An acknowledgement by a device the vault does not vouch for yet counts only on that
  device.  When no active device is vouched for (the first ones were all revoked) the earliest
  active device is.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

from ..changes import Changes
from ..control import MAX_DEVICE_NAME_BYTES, Principal, Roster
from ..credentials import CredentialKind
from ..errors import UsageError
from ..records import Kind, encode_record
from ..session import Session
from ..session.writer import write_control
from .revocation import find_principal

MAX_NAME_CHARS = 64


def check_device_name(name: str) -> str:
    """A device name people can read: non-empty, at most 64 characters, no control characters
    (UsageError naming the problem otherwise).  Returns it with outer white space removed."""
    text = unicodedata.normalize("NFC", " ".join(name.split()))
    if not text:
        raise UsageError("a device name cannot be empty; choose a name such as 'Work laptop'")
    if len(text) > MAX_NAME_CHARS or len(text.encode()) > MAX_DEVICE_NAME_BYTES:
        raise UsageError(f"a device name has at most {MAX_NAME_CHARS} characters; '{text[:20]}…' is longer")
    if any(unicodedata.category(c).startswith("C") for c in text):
        raise UsageError("a device name cannot hold control or invisible characters")
    return text


def unique_name(roster: Roster, base: str) -> str:
    """``base``, or ``base (2)``, ``base (3)``… when an active device already has that name."""
    taken = {p.name.lower() for p in roster.devices() if p.writer_id not in roster.revocations}
    name, n = base, 2
    while name.lower() in taken:
        suffix = f" ({n})"
        name = base[: MAX_NAME_CHARS - len(suffix)] + suffix
        n += 1
    return name


def find_device(session: Session, who: str) -> Principal:
    """An active device by name or id prefix (UsageError when none or several match)."""
    p = find_principal(session, who, what="device", only=lambda q: q.kind == CredentialKind.DEVICE)
    return p


def rename_device(session: Session, who: str, new_name: str) -> Changes:
    """Rename a device (this one or another): a DEVICE_NAME record in every compartment."""
    actor = session.require_owner("renaming a device")
    name = check_device_name(new_name)
    p = find_device(session, who)
    r = session.roster
    if name == p.name:
        return Changes(note=f"the device is already called {name}")
    other = next((q for q in r.devices() if q.name.lower() == name.lower() and q.writer_id != p.writer_id
                  and q.writer_id not in r.revocations), None)
    if other is not None:
        raise UsageError(f"another device is already called '{other.name}'; choose another name")
    live = sorted(n.record_id for n in r.renames.values() if n.subject == p.writer_id)
    record = encode_record(Kind.DEVICE_NAME, actor.writer_id, body={0: p.writer_id, 1: name, 2: live},
                           signers=[actor.signer])
    write_control(session, [record], session.all_compartments())
    return session.reader.changes(note=f"renamed {p.name} to {name}")


def acknowledge(session: Session, whos: Sequence[str]) -> Changes:
    """"Yes, this was me": a DEVICE_ACK of the named devices, signed by this device (in the control
    compartment).  A device that is not new needs none (nothing is written for it)."""
    actor = session.require_owner("acknowledging a device")
    if not whos:
        raise UsageError("name the device to acknowledge (see 'camillo devices')")
    subjects = [find_device(session, who) for who in whos]
    mine = {actor.writer_id}
    fresh = sorted({p.writer_id for p in subjects if is_new(session.roster, p, mine)})
    if not fresh:
        return Changes(note="nothing to acknowledge: " + ", ".join(p.name for p in subjects) + " is not new")
    record = encode_record(Kind.DEVICE_ACK, actor.writer_id, body={0: fresh}, signers=[actor.signer])
    control = session.all_compartments()[0]
    write_control(session, [record], [control])
    return session.reader.changes(note="acknowledged " + ", ".join(session.roster.writer_name(w) for w in fresh))


def vouched(roster: Roster) -> tuple[set[bytes], set[bytes]]:
    """(the devices the vault vouches for, the devices acknowledged everywhere): see the module
    docstring.  Computed as a fixpoint over the roster, so it does not depend on arrival order."""
    devices = roster.devices()
    trusted: set[bytes] = set()
    acked: set[bytes] = set()

    def grow() -> None:
        changed = True
        while changed:
            changed = False
            for p in devices:
                w = p.writer_id
                by_device = [s for s in p.certifiers if s in trusted]
                ackers = [s for s in roster.acks.get(w, ()) if s in trusted and s != w]
                t = p.via == "genesis" or bool(by_device) or bool(ackers) or p.replaces in trusted
                a = p.via == "genesis" or bool(ackers) or p.replaces in acked
                if t and w not in trusted:
                    trusted.add(w)
                    changed = True
                if a and w not in acked:
                    acked.add(w)
                    changed = True

    grow()
    active = [p for p in devices if p.writer_id not in roster.revocations]
    if active and not any(p.writer_id in trusted for p in active):
        first = min(active, key=lambda p: (p.created, p.writer_id))
        trusted.add(first.writer_id)
        acked.add(first.writer_id)
        grow()
    return trusted, acked


def is_new(roster: Roster, p: Principal, mine: set[bytes], acked: set[bytes] | None = None) -> bool:
    """Is device ``p`` new to the device whose keys (now and before) are ``mine``?"""
    if p.kind != CredentialKind.DEVICE or p.writer_id in roster.revocations or p.writer_id in mine:
        return False
    if acked is None:
        acked = vouched(roster)[1]
    if p.writer_id in acked:
        return False
    # it showed its code here, or this device acknowledged it (counts here even when nowhere else)
    return not (mine & (set(p.certifiers) | roster.acks.get(p.writer_id, set())))


def joined_with(roster: Roster, p: Principal) -> str:
    """How a device joined, in words that finish "joined … using …"."""
    names = [roster.writer_name(s) for s in p.certifiers]
    if p.via == "genesis":
        return "the vault's creation"
    if p.via == "enrollment":
        return f"a code shown on {names[0]}" if names else "a code shown on another device"
    if p.via in ("passphrase", "recovery phrase"):
        return f"your {p.via}"
    if p.via == "recovery recipient":
        return f"the recovery key of {names[0]}" if names else "a trusted person's recovery key"
    if p.via == "key rotation":
        return "a new key of the same device"
    return "a credential of this vault"
