"""Enrolling a new device by QR code, through the synced folder (spec §21).

A UI-agnostic state machine on both sides (the desktop renders it; the CLI runs it step by step).

* The **existing device E** makes an offer: a one-time 32-byte secret ``S``, a session id
  ``sid = HKDF(S, "vmem/v1/enroll/sid")[:8]`` and an expiry 10 minutes ahead.  The QR text is
  ``VMEM1:`` + base32(version ‖ flags ‖ vault_id ‖ S ‖ expiry ‖ sid), 78 bytes; the camera-less
  fallback is ``S`` typed as 52 Crockford base32 characters plus a check character.
* Keys ``K_x = HKDF(S, salt = vault_id, info = "vmem/v1/enroll/<x>" ‖ 0x00 ‖ sid)`` for x in
  id, req, resp, sas.  The rendezvous files are ``enroll/<hex(K_id[:16])>.req|.resp|.ack``, so the
  host learns nothing from their names and cannot forge or read them (AEAD under keys from ``S``).
* The **new device N** (``join``) generates its device keys and keeps them as this installation's
  device before anything else (keychain, else only the installation record until the master secret
  arrives: a process killed after E certified the key must not leave a device nobody holds), writes
  the request (its public keys, name and a proof of possession) and shows a 6-digit code
  ``SAS = HKDF(S, info = "vmem/v1/enroll/sas" ‖ sid ‖ SHA-256(request)) mod 10^6``.
* E reads the first request only, shows the same code, and after the user confirms they match,
  writes N's device certificate (mirrored into every compartment), a slot wrapping the vault master
  secret to N's key, and the response (slot id and hash, certificate, vault id, E's frontier).
* N checks the slot's hash, unwraps the master secret, opens the vault, checks that its genesis
  hashes to the vault id from the QR (the trust anchor is the QR, not the host), seeds its rollback
  memory from E's frontier and writes an acknowledgement; E then deletes the rendezvous files.

Single use, 10-minute expiry, refused when the request does not decrypt (wrong code, tampering),
when a second request arrives, or when the user says the codes differ.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

import base64
import os
import time
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from .. import descriptor, encoding, ids, keychain, slots
from ..changes import Changes
from ..control import owner_entry, pop_message
from ..credentials import Credential, CredentialKind
from ..errors import EnrollmentError, KeychainError, StorageError, VaultError
from ..keys import local_key
from ..localstate import Installation, VaultLocal, atomic_write, open_local, read_file, seal_local
from ..primitives import (
    CryptoFailure,
    aead_decrypt,
    aead_encrypt,
    check_recipient_public,
    constant_time_equal,
    hkdf,
    labelled,
    random_bytes,
    sha256,
    verify_signature,
)
from ..records import Kind, encode_record
from ..session import Session
from ..session.installation import platform_label, register_installation
from ..session.unlock import open_session
from ..session.writer import write_control
from ..storage import FolderShelf
from ..values import Unlock
from .devices import check_device_name
from .grant_trust import trust_files
from .registration import default_device_name
from .repair import finish_open

QR_PREFIX = "VMEM1:"
OFFER_SECONDS = 600
CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
CROCKFORD_CHECK = CROCKFORD + "*~$=U"


def _key(secret: bytes, vault_id: bytes, name: str, sid: bytes) -> bytes:
    return hkdf(secret, labelled(f"vmem/v1/enroll/{name}", sid), salt=vault_id)


def session_id(secret: bytes) -> bytes:
    return hkdf(secret, labelled("vmem/v1/enroll/sid"))[:8]


def rendezvous(secret: bytes, vault_id: bytes) -> str:
    return "enroll/" + _key(secret, vault_id, "id", session_id(secret))[:16].hex()


def sas_code(secret: bytes, vault_id: bytes, request_plaintext: bytes) -> str:
    sid = session_id(secret)
    okm = hkdf(secret, labelled("vmem/v1/enroll/sas", sid, sha256(request_plaintext)), salt=vault_id)
    return f"{int.from_bytes(okm[:8], 'big') % 1_000_000:06d}"


def _seal(key: bytes, label: str, sid: bytes, payload: bytes) -> bytes:
    nonce = random_bytes(24)
    return nonce + aead_encrypt(key, nonce, labelled(label, sid), payload)


def _open(key: bytes, label: str, sid: bytes, data: bytes) -> bytes:
    if len(data) < 24 + 16:
        raise CryptoFailure("too short")
    return aead_decrypt(key, data[:24], labelled(label, sid), data[24:])


# -- the codes ----------------------------------------------------------------------------------


def qr_text(vault_id: bytes, secret: bytes, expiry: int) -> str:
    raw = bytes([1, 0]) + vault_id + secret + expiry.to_bytes(4, "big") + session_id(secret)
    return QR_PREFIX + base64.b32encode(raw).decode().rstrip("=")


def typed_code(secret: bytes) -> str:
    n = int.from_bytes(secret, "big")
    chars = []
    for _ in range(52):
        chars.append(CROCKFORD[n & 31])
        n >>= 5
    body = "".join(reversed(chars))
    check = CROCKFORD_CHECK[int.from_bytes(secret, "big") % 37]
    text = body + check
    return "-".join(text[i : i + 4] for i in range(0, len(text), 4))


@dataclass(frozen=True)
class ParsedCode:
    secret: bytes = field(repr=False)  # the one-time enrollment secret: never shown
    vault_id: bytes | None  # known from a QR; a typed code relies on the folder's descriptor
    expiry: int | None


def parse_code(text: str) -> ParsedCode:
    """Accept the QR text (``VMEM1:...``) or the typed code (case-insensitive, any separators)."""
    text = text.strip()
    if text.upper().startswith(QR_PREFIX):
        body = text[len(QR_PREFIX) :].strip().upper()
        try:
            raw = base64.b32decode(body + "=" * (-len(body) % 8))
        except ValueError:
            raise EnrollmentError("the enrollment code is damaged (not base32); scan or paste it again") from None
        if len(raw) != 78 or raw[0] != 1:
            raise EnrollmentError("this is not a Camillo enrollment code of a version this Camillo knows")
        vault_id, secret, expiry, sid = raw[2:34], raw[34:66], int.from_bytes(raw[66:70], "big"), raw[70:78]
        if session_id(secret) != sid:
            raise EnrollmentError("the enrollment code is damaged; scan or paste it again")
        return ParsedCode(secret, vault_id, expiry)
    cleaned = "".join(c for c in text.upper() if c.isalnum() or c in "*~$=")
    cleaned = cleaned.replace("O", "0").replace("I", "1").replace("L", "1")
    if len(cleaned) != 53 or any(c not in CROCKFORD for c in cleaned[:52]):
        raise EnrollmentError("a typed enrollment code has 53 characters (letters and digits, in groups of four)")
    n = 0
    for c in cleaned[:52]:
        n = n * 32 + CROCKFORD.index(c)
    if n >= 1 << 256:
        raise EnrollmentError("the typed enrollment code is not valid; check it")
    secret = n.to_bytes(32, "big")
    if CROCKFORD_CHECK[n % 37] != cleaned[52]:
        raise EnrollmentError("the typed enrollment code has a typo (its check character does not match)")
    return ParsedCode(secret, None, None)


# -- the existing device ------------------------------------------------------------------------


class OfferState(Enum):
    WAITING = "waiting for the new device"
    REQUESTED = "compare the codes"
    CONFIRMED = "confirmed; waiting for the new device to finish"
    DONE = "done"
    EXPIRED = "expired"
    CANCELLED = "cancelled"
    REFUSED = "refused"


@dataclass
class Request:
    xwing_public: bytes
    sig_public: bytes
    name: str
    platform: str
    pop: bytes
    plaintext: bytes

    @property
    def writer_id(self) -> bytes:
        return ids.writer_id(1, self.sig_public)


class Offer:
    """The offering side.  ``poll`` advances it; ``confirm`` after the user compared codes."""

    def __init__(self, session: Session, *, secret: bytes | None = None, expiry: int | None = None,
                 state: OfferState = OfferState.WAITING) -> None:
        session.require_owner("enrolling a device")
        self.session = session
        self.secret = secret or random_bytes(32)
        self.expiry = expiry or int(time.time()) + OFFER_SECONDS
        self.sid = session_id(self.secret)
        self.base = rendezvous(self.secret, session.vault_id)
        self.state = state
        self.request: Request | None = None
        self.sas: str | None = None
        self.messages: list[str] = []

    def __repr__(self) -> str:
        return f"Offer({self.state.name}, expires {self.expiry})"

    @property
    def qr_text(self) -> str:
        return qr_text(self.session.vault_id, self.secret, self.expiry)

    @property
    def typed_code(self) -> str:
        return typed_code(self.secret)

    @property
    def seconds_left(self) -> int:
        return max(0, self.expiry - int(time.time()))

    def _k(self, name: str) -> bytes:
        return _key(self.secret, self.session.vault_id, name, self.sid)

    def poll(self) -> OfferState:
        shelf = self.session.shelf
        if self.state in (OfferState.DONE, OfferState.CANCELLED, OfferState.REFUSED):
            return self.state
        if self.state == OfferState.CONFIRMED:
            if shelf.exists(self.base + ".ack"):
                self._cleanup()
                self.state = OfferState.DONE
            return self.state
        if time.time() > self.expiry:
            self.state = OfferState.EXPIRED
            self._cleanup()
            return self.state
        others = [n for n in shelf.list() if n.startswith("enroll/") and n.endswith(".req") and n != self.base + ".req"]
        if others:
            note = (f"{len(others)} enrollment request(s) that do not match this offer were ignored "
                    "(a wrong or old code?)")
            if note not in self.messages:
                self.messages.append(note)
        if self.state == OfferState.WAITING and shelf.exists(self.base + ".req"):
            try:
                data = shelf.read(self.base + ".req")
                plaintext = _open(self._k("req"), "vmem/v1/enroll/req", self.sid, data)
                self.request = self._parse(plaintext)
            except (CryptoFailure, VaultError, ValueError, KeyError, TypeError) as exc:
                self.state = OfferState.REFUSED
                self.messages.append(f"the enrollment request was damaged or tampered with; refused ({exc})")
                return self.state
            self.sas = sas_code(self.secret, self.session.vault_id, self.request.plaintext)
            self.state = OfferState.REQUESTED
        return self.state

    def _parse(self, plaintext: bytes) -> Request:
        m = encoding.decode(plaintext, "enrollment request")
        if not isinstance(m, dict):
            raise ValueError("it is not a map")
        xwing, sig, name, platform, pop = m.get(0), m.get(1), m.get(2), m.get(3), m.get(5)
        if not (isinstance(xwing, bytes) and len(xwing) == 1216 and isinstance(sig, bytes) and len(sig) == 32
                and isinstance(name, str) and isinstance(platform, str) and isinstance(pop, bytes)):
            raise ValueError("malformed keys")
        req = Request(xwing, sig, check_device_name(name), platform[:40], pop, plaintext)
        try:
            check_recipient_public(req.xwing_public)  # what the slot wrap at confirmation needs (spec §3.3)
        except CryptoFailure as exc:
            raise EnrollmentError(f"the new device's X-Wing public key is malformed ({exc})") from None
        if not verify_signature(1, req.sig_public, pop_message(self.session.vault_id, req.sig_public, req.xwing_public),
                                req.pop):
            raise ValueError("its proof of possession does not verify")
        return req

    def confirm(self, typed_sas: str | None = None) -> Changes:
        """The user saw the same code on both screens (or typed the new device's code)."""
        if self.poll() != OfferState.REQUESTED or self.request is None:
            raise EnrollmentError(f"nothing to confirm: the offer is {self.state.value}")
        if typed_sas is not None and not constant_time_equal(typed_sas.strip().replace(" ", "").encode(),
                                                             (self.sas or "").encode()):
            self.state = OfferState.REFUSED
            self._cleanup()
            raise EnrollmentError("the codes do not match: someone else may have used the QR code. Nothing was "
                                  "enrolled; make a new offer")
        session = self.session
        actor = session.require_writer()
        req = self.request
        if session.shelf.exists(self.base + ".resp"):
            # written last by a confirmation of this offer that a crash interrupted: its certificate and
            # slot are durable, so the enrollment is done; anything else is someone else's response
            if req.writer_id not in session.roster.principals:
                self.state = OfferState.REFUSED
                raise EnrollmentError("a response to this offer is already in the vault folder but this device "
                                      "did not write it (someone else saw the code?); nothing was enrolled: make "
                                      "a new offer")
            self.state = OfferState.CONFIRMED
            self.secret = bytes(32)
            return session.reader.changes(note="device enrolled")
        cert = encode_record(
            Kind.DEVICE_CERT, actor.writer_id,
            body={0: owner_entry(CredentialKind.DEVICE, req.sig_public, req.xwing_public, req.name, req.platform),
                  1: None, 2: "enrollment", 3: req.pop},
            signers=[actor.signer],
        )
        slot_name, slot = session.build_slot(req.xwing_public, slots.SlotType.DEVICE, req.name)
        written = session.write_files([(slot_name, slot), *trust_files(session, pending=[cert])])
        write_control(session, [cert], session.all_compartments(), undo=lambda: session.delete_quietly(written))
        frontier = {c: {w: [max(chain), chain[max(chain)]] for (w, cc), chain in session.log.chains.items()
                        if cc == c and chain}
                    for c in session.all_compartments()}
        sid = bytes.fromhex(slot_name.removeprefix("slots/").removesuffix(".slot"))
        resp = encoding.encode({0: sid, 1: sha256(slot), 2: cert, 3: session.vault_id, 4: frontier,
                                5: session.keyring.generation, 6: session.roster.writer_name(actor.writer_id)})
        session.shelf.write(self.base + ".resp", _seal(self._k("resp"), "vmem/v1/enroll/resp", self.sid, resp))
        self.state = OfferState.CONFIRMED
        self.secret = bytes(32)  # S is not needed any more (the .ack is checked by name only)
        return session.reader.changes(files_written=2, note="device enrolled")

    def cancel(self) -> None:
        self.state = OfferState.CANCELLED
        self._cleanup()

    def _cleanup(self) -> None:
        for ext in (".req", ".resp", ".ack"):
            try:
                self.session.shelf.delete(self.base + ext)
            except (StorageError, VaultError):
                pass


# The CLI runs an offer over several processes (offer, then confirm): its state is sealed in the
# installation's local state under the device key and deleted when the offer ends.


def _offer_path(session: Session) -> str:
    return os.path.join(session.local.dir, "enroll-offer.bin")


def _offer_key(session: Session) -> bytes:
    actor = session.require_writer()
    return local_key(actor.signer.seed, "enroll-offer", session.vault_id)


def save_offer(offer: Offer) -> None:
    session = offer.session
    payload = encoding.encode({"expiry": offer.expiry, "secret": offer.secret, "state": offer.state.name})
    atomic_write(_offer_path(session), seal_local(_offer_key(session), "enroll-offer", session.vault_id, payload))


def load_offer(session: Session) -> Offer:
    data = read_file(_offer_path(session))
    if data is None:
        raise EnrollmentError("no enrollment offer is open on this device; start one with 'camillo enroll offer'")
    m = encoding.decode(open_local(_offer_key(session), "enroll-offer", session.vault_id, data, _offer_path(session)),
                        "offer")
    return Offer(session, secret=m["secret"], expiry=m["expiry"], state=OfferState[m["state"]])


def drop_offer(session: Session) -> None:
    try:
        os.unlink(_offer_path(session))
    except FileNotFoundError:
        pass


# -- the new device -----------------------------------------------------------------------------


def _check_response(m: object) -> tuple[bytes, bytes, bytes, dict[bytes, dict[bytes, list[Any]]], int]:
    """The response's fields, each with its type (spec §21), or ValueError: they name a file to read
    and seed the new device's memory, so nothing malformed may pass (a shoulder-surfer who saw the
    QR code can write a response)."""
    if not isinstance(m, dict):
        raise ValueError("it is not a map")
    slot_id, slot_hash, vault_id, frontier, generation = (m.get(k) for k in (0, 1, 3, 4, 5))
    if not (isinstance(slot_id, bytes) and len(slot_id) == 16 and isinstance(slot_hash, bytes)
            and len(slot_hash) == 32 and isinstance(vault_id, bytes) and len(vault_id) == 32
            and type(generation) is int and 1 <= generation < 2**32 and isinstance(frontier, dict)):
        raise ValueError("malformed fields")
    for cid, per in frontier.items():
        if not (isinstance(cid, bytes) and len(cid) == 16 and isinstance(per, dict)):
            raise ValueError("malformed frontier")
        for wid, v in per.items():
            if not (isinstance(wid, bytes) and len(wid) == 32 and isinstance(v, list) and len(v) == 2
                    and type(v[0]) is int and 1 <= v[0] < 2**63 and isinstance(v[1], bytes) and len(v[1]) == 32):
                raise ValueError("malformed frontier entry")
    return slot_id, slot_hash, vault_id, frontier, generation


class JoinState(Enum):
    REQUESTED = "compare the code with the other device"
    DONE = "done"


class Join:
    """The joining side: ``start`` writes the request and gives the code to compare; ``poll``
    finishes once the other device confirmed, returning the opened vault."""

    def __init__(self, path: str, code: str, *, name: str | None = None, home: str | None = None) -> None:
        self.path = path
        self.home = home  # this installation's local state (default: CAMILLO_HOME / the platform's)
        parsed = parse_code(code)
        if parsed.expiry is not None and time.time() > parsed.expiry:
            raise EnrollmentError("this enrollment code has expired; make a new offer on the other device")
        shelf = FolderShelf(path)
        try:
            desc = descriptor.decode(shelf.read(descriptor.NAME))
        except FileNotFoundError:
            raise EnrollmentError(f"{path} is not a vault folder (or it has not synced yet)") from None
        finally:
            shelf.close()
        if parsed.vault_id is not None and parsed.vault_id != desc.vault_id:
            raise EnrollmentError("this folder holds a different vault from the one the code is for")
        self.vault_id = parsed.vault_id or desc.vault_id
        self.secret = parsed.secret
        self.sid = session_id(self.secret)
        self.base = rendezvous(self.secret, self.vault_id)
        self.name = check_device_name(name) if name else default_device_name()
        self.device = Credential.generate(CredentialKind.DEVICE)
        self.state: JoinState | None = None
        self.sas: str | None = None

    def _k(self, name: str) -> bytes:
        return _key(self.secret, self.vault_id, name, self.sid)

    def start(self) -> str:
        d = self.device
        plaintext = encoding.encode({
            0: d.recipient.public, 1: d.signer.public, 2: self.name,
            3: platform_label(), 4: random_bytes(16),
            5: d.signer.sign(pop_message(self.vault_id, d.signer.public, d.recipient.public)),
        })
        shelf = FolderShelf(self.path)
        try:
            if shelf.exists(self.base + ".req"):
                raise EnrollmentError("this enrollment code was already used by another device; make a new offer")
            self._keep_key()
            shelf.write(self.base + ".req", _seal(self._k("req"), "vmem/v1/enroll/req", self.sid, plaintext))
        except StorageError:
            raise EnrollmentError("this enrollment code was already used by another device; make a new offer") from None
        finally:
            shelf.close()
        self.sas = sas_code(self.secret, self.vault_id, plaintext)
        self.state = JoinState.REQUESTED
        return self.sas

    def _keep_key(self) -> None:
        """Before the request exists: this installation becomes the new device (spec §21.2, step 1).
        With a usable keychain the key is stored there now, so a process killed after the other
        device certified it still holds it (the next open finds it, and the device key opens its
        slot).  Without one the seeds can only be sealed under the master secret, which comes with
        the response; the installation names the key already, so if the process dies first, the next
        open with the passphrase or recovery phrase retires the key nobody holds (re-certification,
        §12.4) instead of leaving it an active device."""
        st = keychain.status()
        if st.usable:
            keychain.store(self.vault_id, self.device.writer_id, self.device.recipient.seed, self.device.signer.seed)
            keystore = "keychain"
        elif os.environ.get("CAMILLO_KEYCHAIN") == "os":
            raise KeychainError(st.reason)
        else:
            keystore = "local"
        VaultLocal(self.vault_id, self.home).save_installation(
            Installation(self.device.writer_id, keystore, int(time.time())))

    @property
    def done(self) -> bool:
        return self.state == JoinState.DONE

    @property
    def writer_id(self) -> bytes:
        """The new device's writer id (its key is this installation's from :meth:`start` on)."""
        return self.device.writer_id

    def poll_session(self) -> Session | None:
        """None while the other device has not confirmed; then the open session (for the facade,
        which finishes the open as for any other unlock)."""
        shelf = FolderShelf(self.path)
        try:
            if not shelf.exists(self.base + ".resp"):
                return None
            try:
                m = encoding.decode(_open(self._k("resp"), "vmem/v1/enroll/resp", self.sid,
                                          shelf.read(self.base + ".resp")), "enrollment response")
                slot_id, slot_hash, vault_id, frontier, generation = _check_response(m)
            except (CryptoFailure, VaultError, ValueError) as exc:
                raise EnrollmentError(f"the enrollment response was damaged or tampered with ({exc}); "
                                      "make a new offer") from None
            if vault_id != self.vault_id:
                raise EnrollmentError("the other device answered for a different vault; refused")
            try:
                slot = shelf.read(slots.file_name(slot_id))
            except FileNotFoundError:
                return None  # the slot has not synced yet
            if sha256(slot) != slot_hash:
                raise EnrollmentError("the slot for this device was replaced in transit; refused")
        finally:
            shelf.close()
        try:
            session = open_session(self.path, Unlock.with_device_credential(self.device, enrolling=True),
                                   home=self.home)
        except VaultError:
            return None  # the certificate has not synced yet
        finish_open(session, enrolling=True)
        roster = session.roster
        if roster.genesis is None or ids.vault_id(roster.genesis.raw) != self.vault_id:
            session.close()
            raise EnrollmentError("the vault's genesis does not match the enrollment code; refused")
        if self.device.writer_id not in roster.principals:
            session.close()
            return None
        session.actor = self.device
        register_installation(session, self.device)
        ds = session.device_state
        ds.remembered = {c: {w: (v[0], v[1]) for w, v in per.items()} for c, per in frontier.items()}
        ds.generation = generation
        session.save_device_state(ds)
        session.shelf.write(self.base + ".ack", _seal(self._k("resp"), "vmem/v1/enroll/ack", self.sid, b"ok"))
        self.state = JoinState.DONE
        session.unlocked_with = "device key"
        return session

