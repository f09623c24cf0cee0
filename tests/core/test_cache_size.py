"""The state database loaded from the encrypted cache can grow like one built from the files.

SQLite keeps a deserialised database in its memdb, which refuses to grow past 1 GiB; a vault of a
million records passes that (the benchmark's bulk import failed with "database or disk is full"
before the cache was copied into an ordinary in-memory database)."""

from __future__ import annotations

from camillo import Unlock, Vault

from ..conftest import PASSPHRASE


def test_a_state_loaded_from_the_cache_grows_past_one_gibibyte(new_vault):
    path, vault, _ = new_vault
    vault.lock()  # saves the cache
    with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as warm:
        assert warm.session.reader.decryptions == 0, "the state did not come from the cache"
        db = warm.session.materialized.db
        db.execute("CREATE TABLE main.ballast(x BLOB)")
        for _ in range(12):  # 1.2 GB of zeros, written by SQLite itself
            db.execute("INSERT INTO main.ballast VALUES(zeroblob(100000000))")
        assert db.execute("SELECT sum(length(x)) FROM main.ballast").fetchone()[0] == 1_200_000_000
        db.execute("DROP TABLE main.ballast")


def _chunks(path: str) -> tuple[bytes, list[bytes]]:
    from camillo import cache

    data = open(path, "rb").read()
    head, rest, parts = data[:cache._HEAD], data[cache._HEAD:], []
    while rest:
        n = int.from_bytes(rest[:4], "big")
        parts.append(rest[: 4 + n])
        rest = rest[4 + n:]
    return head, parts


def test_the_cache_is_sealed_in_chunks_that_cannot_be_moved_dropped_or_repeated(new_vault, monkeypatch):
    """Each 1 MiB chunk is opened on its own (no single AEAD call over a gigabyte holding the
    interpreter lock); a chunk moved, dropped, repeated, or bytes added, and the cache is discarded:
    the vault opens from its files instead."""
    from camillo import NewRecord, cache

    monkeypatch.setattr(cache, "CHUNK", 4096)  # a small vault, several chunks
    path, vault, _ = new_vault
    for i in range(40):
        vault.append([NewRecord(type="message", conversation="c", role="user", text=f"note {i} " * 40)])
    cache_path = vault.session.cache.path
    vault.lock()
    head, parts = _chunks(cache_path)
    assert len(parts) >= 4
    good = open(cache_path, "rb").read()

    def opens_warm(data: bytes) -> bool:
        with open(cache_path, "wb") as fh:
            fh.write(data)
        with Vault.open(path, Unlock.passphrase(PASSPHRASE)) as v:
            assert len(v.timeline()) == 40
            return v.session.reader.decryptions == 0

    assert opens_warm(good)
    swapped = parts[:]
    swapped[1], swapped[2] = swapped[2], swapped[1]
    for bad in (head + b"".join(swapped), head + b"".join(parts[:-1]), head + b"".join([*parts, parts[-1]]),
                head + b"".join([*parts[:1], *parts[:1], *parts[2:]]), good + b"\x00", good[:-10],
                good[:len(cache.MAGIC)] + (len(parts) + 1).to_bytes(4, "big") + good[len(cache.MAGIC) + 4:]):
        assert not opens_warm(bad)
        assert opens_warm(open(cache_path, "rb").read())  # the rebuilt cache is good again


def test_a_cache_claiming_more_than_its_file_holds_is_discarded_before_any_allocation(tmp_path):
    from camillo import cache

    path = str(tmp_path / "cache.bin")
    for count, length in ((1, 1 << 40), (1 << 20, 1 << 40), (0, 10), (2, 10)):
        with open(path, "wb") as fh:
            fh.write(cache.MAGIC + count.to_bytes(4, "big") + length.to_bytes(8, "big") + bytes(64))
        assert cache.Cache(path, b"\x01" * 32, b"\x02" * 16).load(1) is None
        assert not (tmp_path / "cache.bin").exists()  # discarded
