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
        assert warm.decryptions == 0, "the state did not come from the cache"
        db = warm.state.db
        db.execute("CREATE TABLE main.ballast(x BLOB)")
        for _ in range(12):  # 1.2 GB of zeros, written by SQLite itself
            db.execute("INSERT INTO main.ballast VALUES(zeroblob(100000000))")
        assert db.execute("SELECT sum(length(x)) FROM main.ballast").fetchone()[0] == 1_200_000_000
        db.execute("DROP TABLE main.ballast")
