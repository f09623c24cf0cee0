"""Showing text that agents (or web pages) wrote, safely.

Untrusted text is never rendered as rich text.  Control characters are shown as visible symbols,
bidirectional overrides and isolates (which can make text read backwards: "Trojan Source") are
neutralised and marked, and long text is truncated for lists.  Pure functions; any thread.
"""

from __future__ import annotations

import unicodedata

BIDI_CONTROLS = {"\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069",
                 "\u200e", "\u200f", "\u061c"}


def safe_text(text: str | None, limit: int | None = None, *, single_line: bool = False) -> str:
    if not text:
        return ""
    out = []
    for ch in text:
        if ch in BIDI_CONTROLS:
            out.append(f"\u27e8U+{ord(ch):04X}\u27e9")  # shown, never obeyed
        elif ch == "\n":
            out.append(" \u21b5 " if single_line else "\n")
        elif ch == "\t":
            out.append(" " if single_line else "\t")
        elif unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn") and ch not in "\u200d":
            code = ord(ch)
            out.append(chr(0x2400 + code) if code < 0x20 else "\ufffd")
        else:
            out.append(ch)
    result = "".join(out)
    if limit is not None and len(result) > limit:
        result = result[: limit - 1] + "\u2026"
    return result
