"""Showing text that agents (or web pages) wrote, safely.

Untrusted text is never rendered as rich text.  Control characters are shown as visible symbols,
bidirectional overrides and isolates (which can make text read backwards: "Trojan Source") are
neutralised and marked, and long text is truncated for lists.  A limited text is cut before it is
escaped, so a table cell of a 1 MB message costs what its 240 characters cost; runs of ordinary
printable characters are copied in bulk (``str.isprintable`` runs in C), so escaping a long text
whole stays cheap too.  Tooltips, which Qt renders as rich text when they look like markup, are
HTML-escaped as well.  Pure functions; any thread.
"""

from __future__ import annotations

import html
import unicodedata

BIDI_CONTROLS = {"\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069",
                 "\u200e", "\u200f", "\u061c"}
_CHUNK = 64  # checked in bulk; a chunk with anything unusual in it is escaped character by character


def _escape_char(ch: str, single_line: bool) -> str:
    if ch in BIDI_CONTROLS:
        return f"\u27e8U+{ord(ch):04X}\u27e9"  # shown, never obeyed
    if ch == "\n":
        return " \u21b5 " if single_line else "\n"
    if ch == "\t":
        return " " if single_line else "\t"
    if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn") and ch != "\u200d":
        code = ord(ch)
        return chr(0x2400 + code) if code < 0x20 else "\ufffd"
    return ch


def _escape(text: str, single_line: bool) -> str:
    # Every character escape_char changes is one str.isprintable() rejects (categories C*, and the
    # newline and tab), so a printable chunk is copied as it is.
    out: list[str] = []
    for start in range(0, len(text), _CHUNK):
        chunk = text[start:start + _CHUNK]
        if chunk.isprintable():
            out.append(chunk)
        else:
            out.extend(_escape_char(ch, single_line) for ch in chunk)
    return "".join(out)


def safe_tooltip(text: str | None, limit: int = 1000) -> str:
    """A tooltip of untrusted text.  Qt renders a tooltip as rich text whenever it looks like
    markup, so the escaped text is given as HTML whose content is exactly that text."""
    shown = safe_text(text, limit)
    if not shown:
        return ""
    return '<p style="white-space: pre-wrap;">' + html.escape(shown, quote=False) + "</p>"


def safe_text(text: str | None, limit: int | None = None, *, single_line: bool = False) -> str:
    """``text`` made safe to show as plain text; with ``limit``, at most that many characters
    (the last one an ellipsis when it was cut)."""
    if not text:
        return ""
    if limit is not None:
        # Every character escapes to at least one, so the first limit + 1 characters decide the
        # result: it is the same as escaping everything and cutting afterwards.
        text = text[: limit + 1]
    result = _escape(text, single_line)
    if limit is not None and len(result) > limit:
        result = result[: limit - 1] + "\u2026"
    return result
