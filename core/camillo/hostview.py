"""Exactly what a host (a sync service, a cloud drive, a thief of the folder) can see of a vault.

``camillo info`` prints this: for each file its name, size and the cleartext fields of its header,
nothing else (spec §22 lists the same fields normatively).  No key is needed or used.

Pure reading; any thread may call it on its own shelf.
"""

from __future__ import annotations

import os
import time
from typing import NotRequired, Required, TypedDict

from . import descriptor, envelopes, segments, slots
from .errors import VaultError
from .names import kind_of
from .objectstore import ObjectShelf, open_location
from .packs import PackReader
from .storage import FolderShelf, Shelf, hash_matches


class HostKdf(TypedDict):
    """A passphrase slot's cleartext Argon2id parameters."""

    algorithm: str
    memory_kib: int
    time_cost: int
    parallelism: int
    salt: str  # hex


class HostFile(TypedDict, total=False):
    """One file as a host sees it: its name, kind and size, and the cleartext fields of its kind."""

    name: Required[str]
    kind: Required[str | None]
    size: int
    error: str  # unreadable, damaged, or content that does not match its name
    # descriptor
    vault_id: str
    format_version: int
    suite: int
    # slot
    credential_type: str
    slot_id: str
    generation: int
    kdf: HostKdf
    # envelope
    tag: str
    # segment
    compartment_id: str
    epoch_id: str
    # pack (in a vault folder)
    entries: int
    # an object in an object store: what its provider also keeps about it
    modified: str  # when it was written (UTC, ISO 8601)
    etag: str


class HostView(TypedDict):
    location: str
    kind: str  # "folder", ".vmem file" or "object store"
    vault_id: NotRequired[str]  # hex, from the descriptor when it reads
    files: list[HostFile]
    other_objects: NotRequired[int]  # an object store: objects under the prefix that are not vault files


def host_view(path: str) -> HostView:
    shelf = open_location(path)
    try:
        return _view(shelf)
    finally:
        shelf.close()


def _view(shelf: Shelf) -> HostView:
    files: list[HostFile] = []
    vault_id: str | None = None
    for name in shelf.list():
        kind = kind_of(name)
        try:
            data = shelf.read(name)
        except (OSError, VaultError) as exc:
            files.append({"name": name, "kind": kind, "error": str(exc)})
            continue
        entry: HostFile = {"name": name, "kind": kind, "size": len(data)}
        if hash_matches(name, data) is False:
            entry["error"] = "content does not match its name"
        try:
            if kind == "descriptor":
                d = descriptor.decode(data)
                entry["vault_id"] = d.vault_id.hex()
                entry["format_version"] = d.version
                entry["suite"] = d.suite
                vault_id = d.vault_id.hex()
            elif kind == "slot":
                h = slots.read_header(data, name)
                entry["credential_type"] = h.type.name.lower()
                entry["slot_id"] = h.slot_id.hex()
                entry["generation"] = h.generation
                if h.kdf:
                    entry["kdf"] = {"algorithm": "argon2id", "memory_kib": h.kdf.memory_kib, "time_cost": h.kdf.time_cost,
                                    "parallelism": h.kdf.parallelism, "salt": h.kdf.salt.hex()}
            elif kind == "envelope":
                envelopes.check_shape(data, name)
                entry["tag"] = data[8:12].hex()
            elif kind == "segment":
                sh = segments.read_header(data, name)
                entry["compartment_id"] = sh.compartment_id.hex()
                entry["epoch_id"] = sh.epoch_id.hex()
        except VaultError as exc:
            entry["error"] = str(exc)
        files.append(entry)
    if isinstance(shelf, FolderShelf):
        for pack in sorted(n for n in shelf.walk() if kind_of(n) == "pack"):
            try:
                reader = PackReader(f"{shelf.root}/{pack}")
                files.append({"name": pack, "kind": "pack", "entries": len(reader.entries),
                              "size": os.path.getsize(reader.path)})
                reader.close()
            except VaultError as exc:
                files.append({"name": pack, "kind": "pack", "error": str(exc)})
    location, shelf_kind = shelf.location, "folder" if isinstance(shelf, FolderShelf) else ".vmem file"
    view: HostView = {"location": location, "kind": shelf_kind, "files": files}
    if isinstance(shelf, ObjectShelf):  # what the provider keeps about each object besides its bytes
        view["kind"], view["other_objects"] = shelf.kind, shelf.others
        for entry in files:
            listed = shelf.remote.get(entry["name"])
            if listed is not None:
                entry["modified"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(listed.modified))
                entry["etag"] = listed.etag
    if vault_id is not None:
        view["vault_id"] = vault_id
    return view
