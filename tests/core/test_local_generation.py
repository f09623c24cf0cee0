"""The newest master-secret generation an installation has seen (camillo.localstate.VaultLocal): an
append asks for it after every write, so it is read again only when the file changed; a change made
by another process of the installation (a save replaces the file) is seen at once, and a damaged file
counts as none."""

from __future__ import annotations

import os

from camillo.localstate import VaultLocal


def test_the_generation_is_read_again_when_another_process_changed_it(tmp_path):
    vault_id = bytes(range(16))
    mine, other = VaultLocal(vault_id, str(tmp_path)), VaultLocal(vault_id, str(tmp_path))
    assert mine.load_generation() == 0  # (none recorded)
    os.makedirs(mine.dir, exist_ok=True)
    other.save_generation(3)
    assert mine.load_generation() == 3
    assert mine.load_generation() == 3  # (unchanged: from memory)
    other.save_generation(5)  # (another process of this installation rolled the keys)
    assert mine.load_generation() == 5
    with open(other.generation_path, "wb") as f:  # (damaged in place)
        f.write(b"\xff\xff")
    assert mine.load_generation() == 0
    os.unlink(other.generation_path)
    assert mine.load_generation() == 0
