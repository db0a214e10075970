"""A PDF's text, page by page, through pypdf (pure Python, BSD-3-Clause): the only pypdf import.

A PDF is hostile input like any other: pypdf bounds its own decompression (``LimitReachedError``
past its output caps) and its object recovery; we bound the pages read and the text kept,
and turn every failure, whatever pypdf raises, into ``PdfUnreadable`` with a reason.
"""

from __future__ import annotations

import io
import logging

MAX_PAGES = 5_000


class PdfUnreadable(ValueError):
    pass


def pages(data: bytes, *, max_chars: int) -> tuple[list[str], str]:
    """Each page's text (at most ``max_chars`` in all) and the document's title, if it has one."""
    from pypdf import PdfReader
    from pypdf.errors import FileNotDecryptedError, PyPdfError

    # pypdf warns through logging about every oddity of a damaged file: not ours to log.
    logging.getLogger("pypdf").setLevel(logging.ERROR)
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise PdfUnreadable("it is an encrypted PDF")
        count = len(reader.pages)
        if count > MAX_PAGES:
            raise PdfUnreadable(f"it has {count} pages, over the limit of {MAX_PAGES}")
        texts: list[str] = []
        total = 0
        for page in reader.pages:
            text = (page.extract_text() or "").strip()
            total += len(text)
            if total > max_chars:
                raise PdfUnreadable(f"its text is over the limit of {max_chars} characters")
            texts.append(text)
        title = ""
        meta = reader.metadata
        if meta is not None and isinstance(meta.title, str):
            title = meta.title
    except PdfUnreadable:
        raise
    except FileNotDecryptedError:
        raise PdfUnreadable("it is an encrypted PDF") from None
    except PyPdfError as exc:
        raise PdfUnreadable(f"it is not a readable PDF ({type(exc).__name__})") from None
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RecursionError, OSError) as exc:
        # pypdf lets plain exceptions out of damaged structures; the file is unreadable all the same
        raise PdfUnreadable(f"it is not a readable PDF ({type(exc).__name__})") from None
    if not any(texts):
        raise PdfUnreadable("it has no text layer (a scanned PDF?)")
    return texts, title
