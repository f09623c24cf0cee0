"""Markdown as plain rich text, for the conversation view: paragraphs, headings, lists, quotes, code
blocks, tables, emphasis and links, and nothing else.

A message's text is untrusted.  :func:`render` escapes every character of it and emits only the few
tags it builds itself: no HTML from the record is ever interpreted (``<b>`` in a message shows as
``<b>``), no image is ever loaded (``![alt](url)`` shows as text naming the URL), and a link is an
``<a>`` only for http, https and mailto, shown with its address beside its text whenever the two
differ, and opened only when the person clicks it (the view decides how).  Control characters and
bidirectional overrides are made visible first (:func:`camillo_desktop.text.safe_text`), so the
text cannot reorder itself on screen.

Pure functions over strings; any thread (the conversation view renders on the vault worker).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

from .text import safe_text

LINK_SCHEMES = ("http://", "https://", "mailto:")


@dataclass(frozen=True)
class Colors:
    """The colours the rendered text uses (from the current theme)."""

    code_bg: str = "#f1f3f6"
    muted: str = "#5d6677"
    link: str = "#3d5afe"
    border: str = "#d9dde5"


def esc(text: str) -> str:
    return html.escape(text, quote=True)


# ------------------------------------------------------------------------------------------ inline

_INLINE = re.compile(
    r"(?P<code>`+)(?P<code_text>.+?)(?P=code)"  # `code`
    r"|!\[(?P<img_alt>[^\]\n]*)\]\((?P<img_url>[^)\s]*)(?:\s+\"[^\"]*\")?\)"  # ![alt](url): never loaded
    r"|\[(?P<link_text>[^\]\n]+)\]\((?P<link_url>[^)\s]+)(?:\s+\"[^\"]*\")?\)"  # [text](url)
    r"|<(?P<angle>(?:https?://|mailto:)[^>\s]+)>"  # <https://...>
    r"|(?P<bare>(?:https?://|www\.)[^\s<>()\[\]]*[^\s<>()\[\].,;:!?'\"])"  # a bare address
    r"|(?P<strong>\*\*|__)(?P<strong_text>\S(?:.*?\S)?)(?P=strong)"  # **strong**
    r"|(?P<strike>~~)(?P<strike_text>\S(?:.*?\S)?)~~"  # ~~struck~~
    r"|(?<![\w*])\*(?P<em_text>[^\s*](?:[^*]*?[^\s*])?)\*(?![\w*])"  # *em*
    r"|(?<![\w_])_(?P<em2_text>[^\s_](?:[^_]*?[^\s_])?)_(?![\w_])"  # _em_
)


def _link(url: str, text: str | None, colors: Colors) -> str:
    """A link (http, https, mailto only), its address shown beside its text when they differ."""
    href = url if not url.startswith("www.") else "https://" + url
    if not href.lower().startswith(LINK_SCHEMES):
        shown = f"{text} ({url})" if text and text != url else url
        return esc(shown)
    label = text if text is not None else url
    out = f'<a href="{esc(href)}" style="color: {colors.link};">{_inline(label, colors, links=False)}</a>'
    if text is not None and text.strip() != url:
        out += f' <span style="color: {colors.muted};">({esc(url)})</span>'
    return out


def _inline(text: str, colors: Colors, *, links: bool = True) -> str:
    out: list[str] = []
    pos = 0
    for m in _INLINE.finditer(text):
        if not links and (m.group("link_text") or m.group("angle") or m.group("bare")):
            continue
        out.append(esc(text[pos:m.start()]))
        pos = m.end()
        if m.group("code"):
            out.append(f'<code style="background: {colors.code_bg};">{esc(m.group("code_text"))}</code>')
        elif m.group("img_url") is not None:
            alt = m.group("img_alt") or "image"
            out.append(f'<span style="color: {colors.muted};">[{esc(alt)}: {esc(m.group("img_url"))}]</span>')
        elif m.group("link_text"):
            out.append(_link(m.group("link_url"), m.group("link_text"), colors))
        elif m.group("angle"):
            out.append(_link(m.group("angle"), None, colors))
        elif m.group("bare"):
            out.append(_link(m.group("bare"), None, colors))
        elif m.group("strong"):
            out.append(f"<b>{_inline(m.group('strong_text'), colors, links=links)}</b>")
        elif m.group("strike"):
            out.append(f"<s>{_inline(m.group('strike_text'), colors, links=links)}</s>")
        else:
            inner = m.group("em_text") or m.group("em2_text")
            out.append(f"<i>{_inline(inner, colors, links=links)}</i>")
    out.append(esc(text[pos:]))
    return "".join(out)


# ------------------------------------------------------------------------------------------ blocks

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})\s*([^`\s]*)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^(\s*)([-*+])\s+(.*)$")
_NUMBER = re.compile(r"^(\s*)(\d{1,9})[.)]\s+(.*)$")
_QUOTE = re.compile(r"^ {0,3}>\s?(.*)$")
_RULE = re.compile(r"^ {0,3}([-*_])(\s*\1){2,}\s*$")
_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
HEADING_SIZES = {1: "150%", 2: "130%", 3: "115%", 4: "105%", 5: "100%", 6: "100%"}


def _cells(line: str) -> list[str]:
    line = line.strip()
    if line.startswith("|"):
        line = line[1:]
    if line.endswith("|"):
        line = line[:-1]
    return [c.strip() for c in line.split("|")]


def _list_html(items: list[tuple[int, bool, str]], colors: Colors) -> str:
    """Nested lists from (indent, ordered, text) items."""
    out: list[str] = []
    stack: list[tuple[int, str]] = []  # (indent, tag)
    for indent, ordered, text in items:
        tag = "ol" if ordered else "ul"
        while stack and indent < stack[-1][0]:
            out.append(f"</li></{stack.pop()[1]}>")
        if stack and indent == stack[-1][0] and tag != stack[-1][1]:  # a list of the other kind follows
            out.append(f"</li></{stack.pop()[1]}>")
        if not stack or indent > stack[-1][0]:
            out.append(f'<{tag} style="margin-top: 2px; margin-bottom: 2px;">')
            stack.append((indent, tag))
        else:
            out.append("</li>")
        out.append(f"<li>{_inline(text, colors)}")
    while stack:
        out.append(f"</li></{stack.pop()[1]}>")
    return "".join(out)


def render(text: str, colors: Colors | None = None) -> str:
    """``text`` (Markdown, untrusted) as the HTML of plain rich text (see the module docstring)."""
    colors = colors or Colors()
    lines = safe_text(text).replace("\r\n", "\n").replace("\r", "\n").split("\n")
    out: list[str] = []
    para: list[str] = []

    def flush() -> None:
        if para:
            out.append("<p>" + "<br>".join(_inline(line.strip(), colors) for line in para) + "</p>")
            para.clear()

    i = 0
    while i < len(lines):
        line = lines[i]
        fence = _FENCE.match(line)
        if fence:
            flush()
            mark = fence.group(1)
            body: list[str] = []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(mark[0] * len(mark)):
                body.append(lines[i])
                i += 1
            i += 1  # the closing fence (or the end)
            language = f'<span style="color: {colors.muted};">{esc(fence.group(2))}</span><br>' if fence.group(2) else ""
            out.append(f'<table width="100%" cellpadding="6" style="background: {colors.code_bg};"><tr><td>'
                       f'{language}<pre style="margin: 0;">{esc(chr(10).join(body))}</pre></td></tr></table>')
            continue
        if not line.strip():
            flush()
            i += 1
            continue
        heading = _HEADING.match(line)
        if heading:
            flush()
            level = len(heading.group(1))
            out.append(f'<p style="font-size: {HEADING_SIZES[level]}; font-weight: 600;">'
                       f"{_inline(heading.group(2), colors)}</p>")
            i += 1
            continue
        if _RULE.match(line) and not para:
            out.append("<hr>")
            i += 1
            continue
        if "|" in line and i + 1 < len(lines) and _TABLE_SEP.match(lines[i + 1]) and not para:
            header = _cells(line)
            i += 2
            rows = []
            while i < len(lines) and "|" in lines[i] and lines[i].strip():
                rows.append(_cells(lines[i]))
                i += 1
            cells = "".join(f"<th>{_inline(c, colors)}</th>" for c in header)
            body_rows = "".join("<tr>" + "".join(f"<td>{_inline(c, colors)}</td>" for c in r) + "</tr>" for r in rows)
            out.append(f'<table border="1" cellspacing="0" cellpadding="4" style="border-color: {colors.border};">'
                       f"<tr>{cells}</tr>{body_rows}</table>")
            continue
        quote = _QUOTE.match(line)
        if quote:
            flush()
            quoted = []
            while i < len(lines) and (q := _QUOTE.match(lines[i])):
                quoted.append(q.group(1))
                i += 1
            inner = render("\n".join(quoted), colors) if quoted else ""
            out.append(f'<table cellpadding="0" cellspacing="0"><tr><td style="border-left: 3px solid {colors.border}; '
                       f'padding-left: 8px; color: {colors.muted};">{inner}</td></tr></table>')
            continue
        if (_BULLET.match(line) or _NUMBER.match(line)) and not para:
            items: list[tuple[int, bool, str]] = []
            while i < len(lines):
                b, n = _BULLET.match(lines[i]), _NUMBER.match(lines[i])
                m = b or n
                if m:
                    items.append((len(m.group(1).expandtabs(4)), n is not None and b is None, m.group(3)))
                elif lines[i].strip() and items and lines[i].startswith((" ", "\t")):
                    indent, ordered, previous = items[-1]
                    items[-1] = (indent, ordered, previous + " " + lines[i].strip())
                else:
                    break
                i += 1
            out.append(_list_html(items, colors))
            continue
        para.append(line)
        i += 1
    flush()
    return "".join(out)


def plain(text: str) -> str:
    """What :func:`render` shows, as plain text (for tests and screen readers): tags dropped, entities decoded."""
    return html.unescape(re.sub(r"<br>|</p>|</li>|</tr>", "\n", re.sub(r"<(?!br>|/p>|/li>|/tr>)[^>]+>", "", text)))
