"""The names of vault files: the strict patterns readers accept (spec §4.1).

Anything that does not match is not a vault file and is ignored (dot-files, temp files,
``*.sync-conflict-*`` copies, ``*.icloud`` placeholders...).  Shared by the folder shelf and the pack
reader, so a pack cannot smuggle in a name a folder would never hold.  Pure; any thread.
"""

from __future__ import annotations

import functools
import re

NAME_PATTERNS = {
    "descriptor": re.compile(r"VMEM"),
    "slot": re.compile(r"slots/[0-9a-f]{32}\.slot"),
    "envelope": re.compile(r"env/[0-9a-f]{64}\.env"),
    "segment": re.compile(r"segments/([0-9a-f]{2})/([0-9a-f]{64})\.seg"),
    "blob": re.compile(r"blobs/([0-9a-f]{2})/([0-9a-f]{64})\.blob"),
    "pack": re.compile(r"packs/[0-9a-f]{64}\.pack"),
    "enroll": re.compile(r"enroll/[0-9a-f]{32}\.(req|resp|ack)"),
}


# the kind whose pattern a name can match, by its first path component (one pattern tried, not seven:
# a warm open names every file of the folder, 100,000 at a million records)
_BY_TOP = {pattern.pattern.partition("/")[0]: kind for kind, pattern in NAME_PATTERNS.items()}


@functools.lru_cache(maxsize=1 << 18)
def kind_of(name: str) -> str | None:
    """The kind of a canonical name, or None for a name readers must ignore."""
    kind = _BY_TOP.get(name.partition("/")[0])
    if kind is None:
        return None
    m = NAME_PATTERNS[kind].fullmatch(name)
    if m is None or (kind in ("segment", "blob") and m.group(1) != m.group(2)[:2]):
        return None
    return kind
