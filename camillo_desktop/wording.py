"""Plain words for what the core reports in the file format's language.

The person never reads "batch", "epoch", "segment", "generation", "PUT", "NOTE", "device_cert" or
the internal ``control`` compartment (tests/desktop/test_access.py scans every view).  The core's
values carry numbers and kinds; this module says what they mean: what a change did (the activity
view), where it went, what a device is (a readable platform, never a kernel string), and, for the
few free-text messages the desktop must pass on (a rejection's reason, an error), the same message
with the format's words replaced.  Pure functions; any thread.
"""

from __future__ import annotations

import re
from typing import Any

# What a record of each kind or type is, (one, many).
RECORD_WORDS: dict[str, tuple[str, str]] = {
    "message": ("message", "messages"), "conversation": ("conversation", "conversations"),
    "fact": ("fact", "facts"), "preference": ("preference", "preferences"),
    "instruction": ("instruction", "instructions"), "event": ("event", "events"),
    "decision": ("decision", "decisions"), "summary": ("summary", "summaries"),
    "genesis": ("vault created", "vault created"), "device_cert": ("device added", "devices added"),
    "cred_anchor": ("passphrase or recovery phrase set", "passphrases or recovery phrases set"),
    "grant": ("agent given access", "agents given access"), "revoke": ("access revoked", "accesses revoked"),
    "epoch": ("set of new keys", "sets of new keys"), "policy": ("erasure policy set", "erasure policies set"),
    "erase": ("erasure", "erasures"), "erasure_manifest": ("erasure record", "erasure records"),
    "compaction": ("files tidied up", "files tidied up"), "compartment": ("compartment made", "compartments made"),
    "confirm": ("confirmation", "confirmations"), "del": ("forgotten", "forgotten"), "put": ("value", "values"),
    "note": ("note", "notes"), "record": ("record", "records"),
}
ACCESS_COMPARTMENT = "vault access and keys"  # what the internal control compartment holds

# Free text from the core: the format's words, and what to say instead (whole words, any case).
_REPLACEMENTS = [
    (r"\bbatch(es)?\b", lambda m: "changes" if m.group(1) else "change"),
    (r"\bepochs?\b", lambda m: "keys"),
    (r"\bsegment files?\b", lambda m: "files"),
    (r"\bsegments?\b", lambda m: "files" if m.group(0).lower().endswith("s") else "file"),
    (r"\bgenerations?\b", lambda m: "version"),
    (r"\bdevice_certs?\b", lambda m: "device certificate"),
    (r"\bPUT\b", lambda m: "value"),
    (r"\bNOTE\b", lambda m: "note"),
    (r"\bcontrol compartment\b", lambda m: ACCESS_COMPARTMENT),
    (r"\bunits?\b", lambda m: "items"),
    (r"\s*\((?:camillo|run) [a-z-]+[^)]*\)", lambda m: ""),  # a command to run: not in the app
    (r"\bcamillo passwd\b", lambda m: "a passphrase change"),
    (r"--[a-z][a-z-]+", lambda m: "the option to do so"),
]


def plain(text: str) -> str:
    """A message of the core with the file format's words replaced by plain ones."""
    for pattern, repl in _REPLACEMENTS:
        text = re.sub(pattern, repl, text, flags=re.IGNORECASE if pattern.islower() else 0)
    return text


def compartment(name: str) -> str:
    """A compartment's name as shown (the internal one in words)."""
    return ACCESS_COMPARTMENT if name == "control" else name


def what_changed(kinds: dict[str, int]) -> str:
    """'2 messages, 1 fact' from counts by kind or type."""
    parts = []
    for kind, n in sorted(kinds.items(), key=lambda x: (-x[1], x[0])):
        one, many = RECORD_WORDS.get(kind.lower(), (kind, kind))
        parts.append(f"{n} {one if n == 1 else many}")
    return ", ".join(parts)


def summary_counts(summary: str) -> dict[str, int]:
    """The counts of an activity row's summary ("2 message, 1 epoch")."""
    out: dict[str, int] = {}
    for part in summary.split(","):
        m = re.match(r"\s*(\d+)\s+(.+?)\s*$", part)
        if m:
            out[m.group(2)] = out.get(m.group(2), 0) + int(m.group(1))
    return out


PLATFORMS = (("darwin", "Mac"), ("mac", "Mac"), ("windows", "Windows PC"), ("linux", "Linux computer"),
             ("android", "Android phone"), ("ios", "iPhone or iPad"), ("freebsd", "FreeBSD computer"),
             ("openbsd", "OpenBSD computer"))


def readable_platform(platform: str) -> str:
    """What kind of computer a device is ("Linux computer", "Mac"), never a kernel version."""
    lowered = platform.strip().lower()
    for prefix, name in PLATFORMS:
        if lowered.startswith(prefix):
            return name
    first = lowered.split()[0] if lowered else ""
    return first.capitalize() + " device" if first.isalpha() else "unknown"


def device_label(name: str, platform: str) -> str:
    """A device by its name and what it is: "laptop (Linux computer)"."""
    return f"{name} ({readable_platform(platform)})"


def revocation_lines(report: Any) -> list[str]:
    """What a revocation did (a camillo.RevocationReport), in plain words."""
    kind = "the agent" if "grant" in report.kind else f"the {report.kind}"
    return [f"Revoked {kind} \u201c{report.subject}\u201d.",
            f"New keys for {', '.join(compartment(c) for c in report.compartments)}: it cannot read anything written "
            "from now on.",
            "Anything it writes after this is refused by every copy of your vault.",
            "What it already read stays exposed: revocation cannot recall copies it made."]


def reach_lines(report: Any) -> list[str]:
    """What an erasure did and could not reach (a camillo.ReachReport), in plain words."""
    n = len(report.records)
    out = [f"Erased {n} record{'s' if n != 1 else ''} from {compartment(report.compartment)}: its bytes are gone from "
           "the vault and the keys that sealed it were destroyed.",
           f"{report.batches_reencrypted} other change{'s' if report.batches_reencrypted != 1 else ''} that shared "
           f"those keys {'were' if report.batches_reencrypted != 1 else 'was'} sealed again under new keys; "
           f"{report.segments_deleted + report.key_files_deleted} old file(s) were deleted, and this device has a new "
           "key.",
           "What erasure cannot reach:"]
    out += [f"  \u2022 {plain(line)}" for line in report.exposed]
    return out
