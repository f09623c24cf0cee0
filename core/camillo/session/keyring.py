"""The keys an unlocked session holds below the user's credential (spec §9, §15).

* the vault master secret of the current generation, and the owner KEM key derived from it;
* the epoch secrets (and the X-Wing keys derived from them) that envelopes delivered to the owner
  KEM key or to this session's grant, with the envelope each came from (its signatures are checked
  against the roster once the control records are read);
* for an append grant, the epoch *public* keys delivered to it (it seals but never opens).

Nothing else in the session holds a secret of the vault.  :meth:`KeyRing.wipe` drops them all.

Confined to the thread that owns the vault.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from .. import keys
from ..envelopes import EnvelopeKind, EnvelopePayload
from ..primitives import RecipientKey, SecretBytes

EpochRef = tuple[bytes, bytes]  # (compartment id, epoch id)


class EpochKeys(Mapping[EpochRef, RecipientKey]):
    """Each held epoch's X-Wing key pair, derived from its secret when first asked for (to open or
    seal a segment of that epoch): deriving one expands an ML-KEM key (0.2 ms), and a warm open
    learns every epoch of the vault (a hundred at a million records) but reads no segment."""

    def __init__(self, vault_id: bytes, secrets: dict[EpochRef, SecretBytes]) -> None:
        self._vault_id, self._secrets = vault_id, secrets
        self._derived: dict[EpochRef, RecipientKey] = {}

    def __getitem__(self, ref: EpochRef) -> RecipientKey:
        key = self._derived.get(ref)
        if key is None:
            key = self._derived[ref] = keys.epoch_key(self._secrets[ref].get(), self._vault_id, *ref)
        return key

    def __contains__(self, ref: object) -> bool:
        return ref in self._secrets

    def __iter__(self) -> Iterator[EpochRef]:
        return iter(self._secrets)

    def __len__(self) -> int:
        return len(self._secrets)

    def forget(self, ref: EpochRef | None = None) -> None:
        """Drop the key derived for ``ref`` (None: every one); its secret goes with the caller's."""
        if ref is None:
            self._derived.clear()
        else:
            self._derived.pop(ref, None)


class KeyRing:
    def __init__(self, vault_id: bytes) -> None:
        self.vault_id = vault_id
        self.master: SecretBytes | None = None
        self.generation = 0
        self.owner_kem: RecipientKey | None = None
        self.epoch_secrets: dict[EpochRef, SecretBytes] = {}
        self.epoch_keys = EpochKeys(vault_id, self.epoch_secrets)  # (derived when first asked for)
        self.epoch_publics: dict[EpochRef, bytes] = {}
        self.envelope_sources: dict[EpochRef, EnvelopePayload] = {}
        self.borrowed: set[EpochRef] = set()  # held from another master secret of this generation (hold)
        self.seen_envelopes: set[str] = set()

    # ------------------------------------------------------------------------------ master secret

    @property
    def unlocked(self) -> bool:
        """The master secret is here (an owner's session; an agent's grant has none)."""
        return self.master is not None

    def master_secret(self) -> bytes:
        if self.master is None:
            raise AssertionError("no vault master secret in this session")
        return self.master.get()

    def set_master(self, vms: bytes, generation: int, *, owner_kem: bool = True) -> None:
        """Hold ``vms`` as the master secret of ``generation`` (the previous one is wiped).  With
        ``owner_kem`` the owner KEM key is derived from it at once."""
        if self.master is not None:
            self.master.wipe()
        self.master, self.generation = SecretBytes(vms), generation
        self.owner_kem = keys.owner_kem(vms, self.vault_id, generation) if owner_kem else None

    def derive_owner_kem(self) -> None:
        self.owner_kem = keys.owner_kem(self.master_secret(), self.vault_id, self.generation)

    def drop_master(self) -> None:
        if self.master is not None:
            self.master.wipe()
        self.master = None
        self.owner_kem = None

    # ------------------------------------------------------------------------------ epoch keys

    def learn(self, payload: EnvelopePayload) -> bool:
        """Keep what an envelope delivered (the first envelope for an epoch wins).  True when new."""
        key = (payload.compartment_id, payload.epoch_id)
        if payload.kind == EnvelopeKind.EPOCH_SECRET:
            if key in self.epoch_secrets:
                return False
            self.epoch_secrets[key] = SecretBytes(payload.key)
        elif payload.kind == EnvelopeKind.EPOCH_PUBLIC:
            if key in self.epoch_publics:
                return False
            self.epoch_publics[key] = payload.key
        else:
            return False
        self.envelope_sources[key] = payload
        return True

    def hold(self, ref: EpochRef, secret: bytes, *, borrowed: bool = False) -> None:
        """An epoch secret this session made itself (a new epoch it is announcing), or, ``borrowed``, one
        another master secret of this generation delivers, held only to read that other roll with (spec
        §16.10 rule 9): never wrapped again by a roll, nor carried to another generation, from here."""
        if ref not in self.epoch_secrets:
            self.epoch_secrets[ref] = SecretBytes(secret)
            if borrowed:
                self.borrowed.add(ref)

    def forget(self, refs: Iterable[EpochRef]) -> None:
        """Drop these epochs' secrets (an erasure destroyed them, or no owner vouched for them)."""
        for ref in refs:
            secret = self.epoch_secrets.pop(ref, None)
            if secret is not None:
                secret.wipe()
            self.epoch_keys.forget(ref)
            self.envelope_sources.pop(ref, None)
            self.borrowed.discard(ref)

    def forget_epoch_keys(self) -> None:
        """Drop every epoch key and forget which envelopes were read (they are read again)."""
        for secret in self.epoch_secrets.values():
            secret.wipe()
        self.epoch_secrets.clear()
        self.epoch_keys.forget()
        self.epoch_publics.clear()
        self.envelope_sources.clear()  # the payloads carry the epoch secrets they delivered
        self.seen_envelopes.clear()
        self.borrowed.clear()

    def secrets(self) -> dict[EpochRef, bytes]:
        """Every epoch secret held, as bytes (for wrapping them again), but those borrowed (:meth:`hold`)."""
        return {k: s.get() for k, s in self.epoch_secrets.items() if k not in self.borrowed}

    def secret(self, ref: EpochRef) -> bytes | None:
        """An epoch secret held (None when not, or only borrowed: :meth:`hold`; what a writer keeps, wraps
        to a grant or derives a key from, never one borrowed from another master secret)."""
        if ref in self.borrowed:
            return None
        s = self.epoch_secrets.get(ref)
        return s.get() if s is not None else None

    def wipe(self) -> None:
        """Drop every key (the session locks)."""
        self.forget_epoch_keys()
        self.drop_master()

    def __repr__(self) -> str:
        return f"KeyRing(generation={self.generation}, epochs={len(self.epoch_secrets)})"
