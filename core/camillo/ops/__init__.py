"""Operations on an unlocked vault: each takes a :class:`~camillo.session.Session` (never the
facade) and returns a :class:`~camillo.changes.Changes`, or a typed report holding one.

* :mod:`.curation`: appending records, confirm, reject, resolve, forget;
* :mod:`.rekey`: new epochs and the keyring; :mod:`.grants`, :mod:`.revocation`,
  :mod:`.credentials`, :mod:`.policy`: who may read and write;
* :mod:`.erasure`, :mod:`.compaction`: destroying records for real, and fewer, larger segments;
* :mod:`.enrollment`: adding a device by QR code; :mod:`.registration`: a new installation;
* :mod:`.repair`: what an open finishes; :mod:`.reports`: problems, devices, activity, health.

Confined to the thread that owns the vault.
"""
