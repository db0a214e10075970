"""A one-page PDF with a text layer, written by hand (no PDF library: reportlab and the like
are not dependencies). tests/fixtures/lore/gettysburg.pdf was made with it; the Lore bench
makes its PDFs with it."""

from __future__ import annotations


def _escaped(line: str) -> str:
    return line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def text_pdf(lines: list[str], *, title: str = "") -> bytes:
    """PDF 1.4, Helvetica 10 pt, one line per entry of ``lines`` (ASCII), ``title`` in its Info."""
    content = "BT /F1 10 Tf 14 TL 50 780 Td\n" + "".join(f"({_escaped(s)}) Tj T*\n" for s in lines) + "ET\n"
    objects = [
        "<< /Type /Catalog /Pages 2 0 R >>",
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 842] /Resources << /Font << /F1 5 0 R >> >>"
        " /Contents 4 0 R >>",
        f"<< /Length {len(content.encode())} >>\nstream\n{content}endstream",
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        f"<< /Title ({_escaped(title)}) >>",
    ]
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    trailer = f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R /Info 6 0 R >>\nstartxref\n{xref}\n%%EOF\n"
    return out + trailer.encode()
