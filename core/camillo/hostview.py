"""Exactly what a host (a sync service, a cloud drive, a thief of the folder) can see of a vault.

``camillo info`` prints this: for each file its name, size and the cleartext fields of its header,
nothing else (spec §22 lists the same fields normatively).  No key is needed or used.

Pure reading; any thread may call it on its own shelf.
"""

from __future__ import annotations

from typing import Any

from . import descriptor, envelopes, segments, slots
from .errors import VaultError
from .packs import PackReader
from .storage import FolderShelf, PackShelf, hash_matches, kind_of, open_shelf


def host_view(path: str) -> dict[str, Any]:
    shelf = open_shelf(path)
    try:
        return _view(shelf)
    finally:
        shelf.close()


def _view(shelf: FolderShelf | PackShelf) -> dict[str, Any]:
    files: list[dict[str, Any]] = []
    out: dict[str, Any] = {"location": shelf.location, "kind": "folder" if isinstance(shelf, FolderShelf) else ".vmem file"}
    for name in shelf.list():
        kind = kind_of(name)
        try:
            data = shelf.read(name)
        except (OSError, VaultError) as exc:
            files.append({"name": name, "kind": kind, "error": str(exc)})
            continue
        entry: dict[str, Any] = {"name": name, "kind": kind, "size": len(data)}
        if hash_matches(name, data) is False:
            entry["error"] = "content does not match its name"
        try:
            if kind == "descriptor":
                d = descriptor.decode(data)
                entry.update(vault_id=d.vault_id.hex(), format_version=d.version, suite=d.suite)
                out["vault_id"] = d.vault_id.hex()
            elif kind == "slot":
                h = slots.read_header(data, name)
                entry.update(credential_type=h.type.name.lower(), slot_id=h.slot_id.hex(), generation=h.generation)
                if h.kdf:
                    entry["kdf"] = {"algorithm": "argon2id", "memory_kib": h.kdf.memory_kib, "time_cost": h.kdf.time_cost,
                                    "parallelism": h.kdf.parallelism, "salt": h.kdf.salt.hex()}
            elif kind == "envelope":
                envelopes.check_shape(data, name)
                entry.update(tag=data[8:12].hex())
            elif kind == "segment":
                h = segments.read_header(data, name)
                entry.update(compartment_id=h.compartment_id.hex(), epoch_id=h.epoch_id.hex())
        except VaultError as exc:
            entry["error"] = str(exc)
        files.append(entry)
    if isinstance(shelf, FolderShelf):
        for pack in sorted(n for n in shelf._walk() if kind_of(n) == "pack"):
            try:
                reader = PackReader(f"{shelf.location}/{pack}")
                files.append({"name": pack, "kind": "pack", "entries": len(reader.entries)})
                reader.close()
            except VaultError as exc:
                files.append({"name": pack, "kind": "pack", "error": str(exc)})
    out["files"] = files
    return out
