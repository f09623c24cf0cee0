"""Find secret material in text: raw, hex, base64 (standard and URL-safe), base32, and as words.

:class:`SecretScanner` is built from the secrets a session recorded; :meth:`SecretScanner.find`
returns the labels of the secrets found in a string or a byte string.  Byte secrets are also
searched as any 6-byte window in hex (so ``secret.hex()[:12]`` in a message is caught), and text
secrets (passphrases, recovery phrases, enrollment codes) as the whole text and, for phrases, as
any two consecutive words or any single word that is not also an ordinary English word of the
message vocabulary.

Also :func:`reachable`, a walk over the objects reachable from a root (attributes, containers,
dataclass fields, ``__slots__``), used to look for secrets an object still holds.

Pure functions; any thread may call them.
"""

from __future__ import annotations

import base64
import dataclasses
import re
import sqlite3
import types
from collections.abc import Iterator
from typing import Any

WINDOW = 6  # bytes: a 12-hex-digit prefix, as messages show ids, is caught
LITERAL = 24  # characters of a bytes literal's repr (at least 6 bytes' worth)
_HEX_RUN = re.compile(r"[0-9a-fA-F]{12,}")


def _encodings(secret: bytes) -> set[str]:
    out = {base64.b64encode(secret).decode(), base64.urlsafe_b64encode(secret).decode(),
           base64.b32encode(secret).decode()}
    return {x.rstrip("=") for x in out}


class SecretScanner:
    def __init__(self, secrets: dict[str, bytes], texts: dict[str, str]) -> None:
        self.secrets = {k: v for k, v in secrets.items() if len(v) >= 16}
        self.windows: dict[str, str] = {}
        for label, s in self.secrets.items():
            for i in range(len(s) - WINDOW + 1):
                self.windows.setdefault(s[i : i + WINDOW].hex(), label)
        self.encoded = {enc: label for label, s in self.secrets.items() for enc in _encodings(s)}
        # Python's own rendering of bytes (b'\\x9a...'), as a default dataclass repr shows them.
        self.literal: dict[str, str] = {}
        for label, s in self.secrets.items():
            lit = repr(s)[2:-1]
            for i in range(len(lit) - LITERAL + 1):
                self.literal.setdefault(lit[i : i + LITERAL], label)
        self.texts: dict[str, str] = {}
        for label, t in texts.items():
            self.texts[t] = label
            words = t.split()
            if len(words) >= 12:  # a recovery phrase: any two words in a row
                for a, b in zip(words, words[1:]):
                    self.texts[f"{a} {b}"] = label

    def find(self, value: str | bytes) -> set[str]:
        found: set[str] = set()
        if isinstance(value, (bytes, bytearray, memoryview)):
            raw = bytes(value)
            for label, s in self.secrets.items():
                if s in raw:
                    found.add(label)
            for label, s in self.secrets.items():
                for i in range(0, len(s) - WINDOW + 1, WINDOW):
                    if s[i : i + WINDOW] in raw:
                        found.add(label + " (a fragment)")
                        break
            return found
        text = value
        low = text.lower()
        for run in _HEX_RUN.findall(low):
            for i in range(len(run) - 2 * WINDOW + 1):
                label = self.windows.get(run[i : i + 2 * WINDOW])
                if label:
                    found.add(label)
        for enc, label in self.encoded.items():
            if enc in text:
                found.add(label)
        if "\\x" in text:
            for i in range(len(text) - LITERAL + 1):
                label = self.literal.get(text[i : i + LITERAL])
                if label:
                    found.add(label + " (as a bytes literal)")
                    break
        for t, label in self.texts.items():
            if t in text:
                found.add(label)
        return found


_ATOMS = (str, bytes, bytearray, int, float, bool, type(None), complex)


def _filled(cell: types.CellType) -> bool:
    try:
        cell.cell_contents  # noqa: B018 - an empty cell raises
    except ValueError:
        return False
    return True


def reachable(root: Any, limit: int = 200_000) -> Iterator[Any]:
    """Every object reachable from ``root`` through attributes and containers, and through what a
    function holds onto (its closure's cells, its default values; not its module's globals, nor
    classes or code), each once."""
    seen: set[int] = set()
    stack = [root]
    while stack and len(seen) < limit:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        yield obj
        if isinstance(obj, types.FunctionType):  # (a lambda or a nested function keeps its cells alive)
            stack.extend(cell.cell_contents for cell in obj.__closure__ or () if _filled(cell))
            stack.extend(obj.__defaults__ or ())
            stack.extend((obj.__kwdefaults__ or {}).values())
            continue
        if isinstance(obj, (_ATOMS, types.ModuleType, type, types.BuiltinFunctionType, types.CodeType, sqlite3.Connection)):
            continue
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
            continue
        if isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
            continue
        if isinstance(obj, types.MethodType):
            stack.append(obj.__self__)
            continue
        if dataclasses.is_dataclass(obj):
            for f in dataclasses.fields(obj):
                stack.append(getattr(obj, f.name, None))
        d = getattr(obj, "__dict__", None)
        if isinstance(d, dict):
            stack.extend(d.values())
        for cls in type(obj).__mro__:
            for slot in getattr(cls, "__slots__", ()):
                if isinstance(slot, str) and hasattr(obj, slot):
                    stack.append(getattr(obj, slot))
