"""What the local state remembers so that an open does not repeat work an earlier one did (issue 19).

* :class:`SignatureMemo`: the signatures this installation verified good.  The roster is rebuilt
  from the control records at every open, and each control record's inner signatures (spec §14), and
  the owner signatures of the envelopes that delivered the epoch keys (§15.3), were verified again
  every time (360 Ed25519 verifications at a million records).  The memo keeps, for
  each signature that verified, a SHA-256 digest of exactly what was verified: the algorithm, the
  public key, the signature and the message (``cache_signatures``).  A digest found there means this
  key verified this signature over this message before; a changed key, message or signature gives
  another digest, which is verified for real.  Only good verifications are remembered.
* :class:`ErasureMemo`: the check that every applied erasure is complete (no readable segment under a
  live epoch still holds an erased record's bytes, spec §16.10) looked for the erased batches among
  every segment's list of batches (100,000 at a million records) at every open.  The memo keeps, in
  ``cache_meta``, a fingerprint of what a complete check that found nothing depended on besides the
  segments (the applied erasures, the destroyed epochs, the epochs whose keys are here, the segments
  that could not be read); while it is kept, a trigger of the database notes every segment stored
  (``cache_segments_since``: a newly read one, one read once its epoch key arrived, one sealed again),
  and the next check with the same fingerprint looks only at those.

* :class:`EnvelopeMemo`: the envelopes read.  A warm open read every envelope file of the folder and
  opened those addressed to it (275 files and 103 HPKE opens at a million records, about 50 ms: a
  vault's epochs grow with its history).  The memo keeps, for each envelope file name and recipient
  id, the payload the envelope opened to (its decrypted CBOR: an epoch key, with the owner's
  signatures over it), or that it is not addressed to that recipient.  An envelope's name is the
  SHA-256 of its bytes, so a name read once holds the same envelope for ever (a changed file under
  it is a damaged copy, which the memo does not take); the payload's fields are checked again as read
  (:func:`camillo.envelopes.read_payload`; its encoding, checked against the profile when first read,
  is not), and every epoch secret is checked against the roster as
  an envelope's is (:meth:`camillo.session.reader.Reader.check_epoch_keys`).  The secret of an epoch
  an erasure destroyed, or that no owner vouched for, is deleted with the keyring's
  (:meth:`EnvelopeMemo.forget`), and the rows of names gone from the folder with each full listing.

All three live in the local state, which is this installation's own database, encrypted and authenticated
page by page under its key (:mod:`camillo.cache`): trusting them is the trust a warm open already puts
in the stored flags that say a batch's signature verified.  A state that is rebuilt starts without
them.  Confined to the thread that owns the vault.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from . import encoding, primitives
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
    asked, and again when ``db()`` is another database: the reader's state is replaced by the one
    stored, or started again; each new one written beside the state's other changes, committed with
    them)."""

    def __init__(self, db: Callable[[], Connection]) -> None:
        self._db = db
        self._known: set[bytes] | None = None
        self._of: Connection | None = None  # the database _known was read from

    def verify(self, alg: int, public: bytes, message: bytes, signature: bytes) -> bool:
        """:func:`camillo.primitives.verify_signature`, without verifying again what verified before."""
        if alg != SIG_ED25519 or not (type(public) is type(message) is type(signature) is bytes):
            return primitives.verify_signature(alg, public, message, signature)  # (nothing to remember)
        digest = signature_digest(alg, public, message, signature)
        db, known = self._db(), self._known
        if known is None or db is not self._of:
            known, self._of = {d for (d,) in db.execute("SELECT digest FROM cache_signatures")}, db
            self._known = known
        if digest in known:
            return True
        if not primitives.verify_signature(alg, public, message, signature):
            return False
        known.add(digest)
        db.execute("INSERT OR IGNORE INTO cache_signatures(digest) VALUES(?)", (digest,))
        return True


class ErasureMemo:
    """That a complete check found every applied erasure complete, for a fingerprint of what it
    depended on (:meth:`fingerprint`), and the segments stored since (noted by the database's trigger
    ``cache_segments_noted`` while the finding is kept: cache.SCHEMA)."""

    KEY = "erasures_complete"

    def __init__(self, db: Connection) -> None:
        self.db = db

    @staticmethod
    def fingerprint(erasures: Iterable[bytes], destroyed: Iterable[tuple[bytes, bytes]],
                    keys: Iterable[tuple[bytes, bytes]], unreadable: Iterable[str]) -> bytes:
        """The applied ERASE records, the epochs they destroyed, the epochs whose keys are here and the
        segments that could not be read: what else can make an erasure incomplete again."""
        return sha256(encoding.encode([sorted(erasures), sorted(list(r) for r in destroyed),
                                       sorted(list(r) for r in keys), sorted(unreadable)]))

    def since(self, fingerprint: bytes) -> set[str] | None:
        """The segments stored since a complete check found nothing incomplete with this fingerprint
        (None: no such finding is kept, every segment is to be looked at)."""
        row = self.db.execute("SELECT value FROM cache_meta WHERE key = ?", (self.KEY,)).fetchone()
        if row is None or row[0] != fingerprint or self.db.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = 'cache_segments_noted'").fetchone() is None:
            return None
        return {name for (name,) in self.db.execute("SELECT name FROM cache_segments_since")}

    def found_complete(self, fingerprint: bytes) -> None:
        """A check (complete, or of the segments stored since) found nothing incomplete: keep it, and
        note the segments stored from now on."""
        self.db.execute("DELETE FROM cache_segments_since")
        self.db.execute("INSERT OR REPLACE INTO cache_meta(key, value) VALUES(?, ?)", (self.KEY, fingerprint))

    def drop(self) -> None:
        """Something incomplete was found (or could not be looked at): the next check looks at every segment."""
        self.db.execute("DELETE FROM cache_meta WHERE key = ?", (self.KEY,))
        self.db.execute("DELETE FROM cache_segments_since")


class EnvelopeMemo:
    """The envelopes read, by file name and recipient, in the local state ``db()``; what is remembered
    is written beside the state's other changes and committed with them.  Nothing is held in memory
    between calls: the payloads carry epoch secrets, which a locked vault must not keep reachable."""

    def __init__(self, db: Callable[[], Connection]) -> None:
        self._db = db

    def known(self, recipient_id: bytes) -> dict[str, bytes | None]:
        """For each envelope read for ``recipient_id``: the payload it opened to, or None (not for it)."""
        return dict(self._db().execute("SELECT name, payload FROM cache_envelopes WHERE recipient = ?",
                                       (recipient_id,)))

    def remember(self, name: str, recipient_id: bytes, payload: bytes | None,
                 epoch: tuple[bytes, bytes] | None = None) -> None:
        """Envelope ``name`` opened to ``payload`` for ``recipient_id`` (None: it is not addressed to it)."""
        self._db().execute(
            "INSERT OR REPLACE INTO cache_envelopes(name, recipient, compartment, epoch, payload) VALUES(?, ?, ?, ?, ?)",
            (name, recipient_id, *(epoch or (None, None)), payload))

    def forget(self, refs: Iterable[tuple[bytes, bytes]]) -> None:
        """Delete the payloads about these epochs (their secrets are dropped)."""
        db = self._db()  # (looked for first: a warm open asks for every destroyed epoch, and writes nothing)
        rows = [r for r in refs
                if db.execute("SELECT 1 FROM cache_envelopes WHERE compartment = ? AND epoch = ? LIMIT 1", r).fetchone()]
        if rows:
            db.executemany("DELETE FROM cache_envelopes WHERE compartment = ? AND epoch = ?", rows)

    def forget_name(self, name: str) -> None:
        """Delete what was remembered of envelope ``name`` (it is read from its file again)."""
        self._db().execute("DELETE FROM cache_envelopes WHERE name = ?", (name,))

    def keep_only(self, names: Collection[str]) -> None:
        """Delete the rows of envelopes no longer in the folder (``names``: every envelope there)."""
        db = self._db()
        gone = [(n,) for n in {n for (n,) in db.execute("SELECT DISTINCT name FROM cache_envelopes")} if n not in names]
        if gone:
            db.executemany("DELETE FROM cache_envelopes WHERE name = ?", gone)
