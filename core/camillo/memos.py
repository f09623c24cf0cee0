"""What the local state remembers so that an open does not repeat work an earlier one did (issue 19).

* :class:`SignatureMemo`: the signatures this installation verified good.  The roster is rebuilt
  from the control records at every open, and each control record's inner signatures (spec §14), and
  the owner signatures of the envelopes that delivered the epoch keys (§15.3), were verified again
  every time (360 Ed25519 verifications at a million records).  The memo keeps, for
  each signature that verified, a SHA-256 digest of exactly what was verified: the algorithm, the
  public key, the signature and the message (``cache_signatures``).  A digest found there means this
  key verified this signature over this message before; a changed key, message or signature gives
  another digest, which is verified for real.  Only good verifications are remembered.

It lives in the local state, which is this installation's own database, encrypted and authenticated
page by page under its key (:mod:`camillo.cache`): trusting it is the trust a warm open already puts
in the stored flags that say a batch's signature verified.  A state that is rebuilt starts without
it.  Confined to the thread that owns the vault.
"""

from __future__ import annotations

from collections.abc import Callable

from . import primitives
from .cache import Connection
from .primitives import SIG_ED25519, sha256

# How a signature is checked: (algorithm, public key, message, signature) -> it verifies.
Verify = Callable[[int, bytes, bytes, bytes], bool]

_LABEL = b"camillo/local/verified-signature\x00"


def _sized(part: bytes) -> bytes:
    return len(part).to_bytes(4, "big") + part


def signature_digest(alg: int, public: bytes, message: bytes, signature: bytes) -> bytes:
    """What the memo keeps of a signature that verified: one hash over the algorithm, the key, the
    signature (each with its length: no two different tuples hash the same input) and the message."""
    return sha256(_LABEL + alg.to_bytes(4, "big") + _sized(public) + _sized(signature) + message)


class SignatureMemo:
    """The signatures verified good, kept in the local state database ``db()`` (read once, when first
    asked; each new one written beside the state's other changes, committed with them)."""

    def __init__(self, db: Callable[[], Connection]) -> None:
        self._db = db
        self._known: set[bytes] | None = None

    def verify(self, alg: int, public: bytes, message: bytes, signature: bytes) -> bool:
        """:func:`camillo.primitives.verify_signature`, without verifying again what verified before."""
        if alg != SIG_ED25519 or not (type(public) is type(message) is type(signature) is bytes):
            return primitives.verify_signature(alg, public, message, signature)  # (nothing to remember)
        digest = signature_digest(alg, public, message, signature)
        known = self._known
        if known is None:
            known = self._known = {d for (d,) in self._db().execute("SELECT digest FROM cache_signatures")}
        if digest in known:
            return True
        if not primitives.verify_signature(alg, public, message, signature):
            return False
        known.add(digest)
        self._db().execute("INSERT OR IGNORE INTO cache_signatures(digest) VALUES(?)", (digest,))
        return True
