"""A document's bytes → its text, its title and its chunks, each chunk under its heading path.

Pure: no storage, no I/O. Markdown and plain text are kept as they are (offsets count the
characters of the stored text, so ``read_document`` returns exactly what was searched);
HTML becomes text through the standard library's parser (script, style and template
dropped, headings kept as lines of their own); PDF text comes from ``lore/pdf.py``, one
section per page. Every step is one pass over its input: a document of any size costs
time in proportion to its size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Literal

from appliance.lore import pdf

Format = Literal["markdown", "text", "html", "pdf"]
SUFFIXES: dict[str, Format] = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".text": "text",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
}
HEADING_SEPARATOR = " > "
_TITLE_MAX = 200
_HEADING_MAX = 200
_MIN_CHUNK = 200  # below this a cut on a paragraph or a space is not worth it: cut hard
# No lazy group before a trailing run here ("(.+?)[ #]*$" backtracks quadratically on a line
# of spaces): the closing hashes are stripped afterwards.
_ATX = re.compile(r"^ {0,3}(#{1,6})[ \t]+(\S.*)$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_SPACES = re.compile(r"[ \t\r\f\v]+")


class Unreadable(ValueError):
    """A file that cannot be read as a document; the message says why (for the report)."""


@dataclass(frozen=True)
class Chunk:
    heading: str  # the heading path, ' > '-joined; '' before the first heading
    start: int  # offset into the document's text
    length: int


@dataclass(frozen=True)
class Document:
    path: str
    title: str
    format: Format
    body: str
    chunks: tuple[Chunk, ...]


# A heading found in a text: (offset of its line, level 1-6, its words).
Heading = tuple[int, int, str]


def format_of(path: str) -> Format | None:
    dot = path.rfind(".")
    return SUFFIXES.get(path[dot:].lower()) if dot > path.rfind("/") else None


def parse(path: str, data: bytes, *, chunk_chars: int, max_chars: int) -> Document:
    """The document ``path`` holds; ``Unreadable`` when it cannot be one."""
    kind = format_of(path)
    if kind is None:
        raise Unreadable("not a format Lore reads (Markdown .md, text .txt, HTML .html, PDF .pdf)")
    if kind == "pdf":
        body, headings, title = _pdf(data, max_chars)
    else:
        text = _decode(data)
        if kind == "html":
            body, headings, title = _html(text)
        else:
            body = text
            headings = _markdown_headings(text) if kind == "markdown" else []
            title = ""
    if len(body) > max_chars:
        raise Unreadable(f"its text is {len(body)} characters, over the limit of {max_chars}")
    if not body.strip():
        raise Unreadable("it holds no text")
    title = _clip(title or _first_heading(headings) or _first_line(body) or path, _TITLE_MAX)
    return Document(path, title, kind, body, tuple(chunks(body, headings, chunk_chars)))


def _decode(data: bytes) -> str:
    if b"\x00" in data:
        raise Unreadable("it is binary, not text (a NUL byte)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise Unreadable(f"it is not UTF-8 text (byte {exc.start})") from None


def _pdf(data: bytes, max_chars: int) -> tuple[str, list[Heading], str]:
    try:
        pages, title = pdf.pages(data, max_chars=max_chars)
    except pdf.PdfUnreadable as exc:
        raise Unreadable(str(exc)) from None
    parts: list[str] = []
    headings: list[Heading] = []
    offset = 0
    for number, page in enumerate(pages, 1):
        headings.append((offset, 1, f"page {number}"))
        parts.append(page)
        offset += len(page) + 2
    return "\n\n".join(parts), headings, title


def _markdown_headings(text: str) -> list[Heading]:
    """ATX headings (``#`` to ``######``) outside fenced code, with their line offsets."""
    found: list[Heading] = []
    fence: str | None = None
    offset = 0
    for line in text.splitlines(keepends=True):
        stripped = line.rstrip("\r\n")
        opened = _FENCE.match(stripped)
        if opened is not None:
            fence = None if fence == opened.group(1) else (fence or opened.group(1))
        elif fence is None and (m := _ATX.match(stripped)):
            title = m.group(2).rstrip(" \t#") or m.group(2)
            found.append((offset, len(m.group(1)), _clip(title, _HEADING_MAX)))
        offset += len(line)
    return found


def chunks(body: str, headings: list[Heading], size: int) -> list[Chunk]:
    """Sections from heading to heading, each cut into pieces of at most ``size`` characters.

    A piece ends at the last blank line, else line break, else space within its window, so
    a passage is rarely cut mid-sentence; each window is scanned once, so the whole is linear.
    """
    out: list[Chunk] = []
    path: list[tuple[int, str]] = []
    bounds = [*headings, (len(body), 0, "")]
    previous = 0
    for i, (offset, level, title) in enumerate(bounds):
        if offset > previous:
            label = HEADING_SEPARATOR.join(t for _, t in path)
            out.extend(_pieces(body, previous, offset, label, size))
        if i < len(headings):
            while path and path[-1][0] >= level:
                path.pop()
            path.append((level, title))
            previous = offset
    return out


def _pieces(body: str, start: int, end: int, heading: str, size: int) -> list[Chunk]:
    pieces: list[Chunk] = []
    while start < end:
        while start < end and body[start].isspace():
            start += 1
        if start >= end:
            break
        stop = min(end, start + size)
        if stop < end:
            floor = start + min(_MIN_CHUNK, size // 2)
            for mark in ("\n\n", "\n", " "):
                cut = body.rfind(mark, floor, stop)
                if cut > start:
                    stop = cut + len(mark)
                    break
        length = len(body[start:stop].rstrip())
        if length:
            pieces.append(Chunk(heading, start, length))
        start = stop
    return pieces


def _first_heading(headings: list[Heading]) -> str:
    return next((t for _, level, t in headings if level == 1), "")


def _first_line(body: str) -> str:
    for line in body.splitlines():
        if line.strip():
            return line.strip().lstrip("#").strip()
    return ""


def _clip(text: str, limit: int) -> str:
    text = _SPACES.sub(" ", text[: 8 * limit]).strip()  # a title from a 10 MB line costs nothing
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- HTML ---------------------------------------------------------------------------------

_DROPPED = frozenset({"script", "style", "template", "noscript", "head"})
_BLOCKS = frozenset(
    {"p", "div", "br", "li", "tr", "table", "ul", "ol", "section", "article", "pre", "blockquote", "dd", "dt"}
)
_HEADINGS = {f"h{n}": n for n in range(1, 7)}


class _Text(HTMLParser):
    """Text of an HTML page: dropped elements skipped, blocks as lines, headings recorded."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.size = 0
        self.headings: list[Heading] = []
        self.title = ""
        self._dropped = 0  # depth inside dropped elements
        self._in_title = False
        self._heading: tuple[int, list[str]] | None = None  # level, its words so far

    def _emit(self, text: str) -> None:
        self.parts.append(text)
        self.size += len(text)

    def _line(self) -> None:
        if self.parts and not self.parts[-1].endswith("\n"):
            self._emit("\n")

    def handle_starttag(self, tag: str, attrs: object) -> None:
        if tag == "title":
            self._in_title = True
        if tag in _DROPPED:
            self._dropped += 1
        elif tag in _HEADINGS and not self._dropped:
            self._line()
            self._heading = (_HEADINGS[tag], [])
        elif tag in _BLOCKS:
            self._line()

    def handle_startendtag(self, tag: str, attrs: object) -> None:
        if tag in _BLOCKS:
            self._line()

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        if tag in _DROPPED:
            self._dropped = max(0, self._dropped - 1)
        elif tag in _HEADINGS and self._heading is not None:
            level, words = self._heading
            self._heading = None
            title = _clip("".join(words), _HEADING_MAX)
            if title:
                self._line()
                self.headings.append((self.size, level, title))
                self._emit(title + "\n")
        elif tag in _BLOCKS:
            self._line()

    def handle_data(self, data: str) -> None:
        if self._in_title and not self.title:
            self.title = _clip(data, _TITLE_MAX)
        if self._dropped:
            return
        text = _SPACES.sub(" ", data.replace("\n", " "))
        if self._heading is not None:
            self._heading[1].append(text)
        elif text.strip() or (self.parts and not self.parts[-1].endswith((" ", "\n"))):
            self._emit(text.lstrip() if not self.parts or self.parts[-1].endswith("\n") else text)


def _html(text: str) -> tuple[str, list[Heading], str]:
    parser = _Text()
    parser.feed(text)
    parser.close()
    return "".join(parser.parts), parser.headings, parser.title
