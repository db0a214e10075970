"""Lore toolkits: import time and index size of 1,000 documents; ``search_lore`` latency.

Run from the repo root: ``.venv/bin/python tests/bench/lore.py [documents]``.

The knowledge base is generated: 1,000 documents (70 % Markdown with three levels of
headings, 20 % HTML, 8 % plain text, 2 % PDF), each about 6 kB of sentences drawn from the
public texts in tests/fixtures/lore with a few made-up words of its own, so every document
has terms no other shares (the queries ask for them, as an agent's question would). Import
is ``gateway.lore.import_lore`` from the folder on a fresh data directory (read, parse,
chunk, store and index in one transaction); size is the database growth and the lore tables'
share of it (``dbstat``). ``search_lore`` is timed through the whole call pipeline as the
operator (resolve, validate, quota, dispatch, redaction, the audit row): what an agent's
``use_tool`` costs inside the appliance, without the HTTP hop.
"""

from __future__ import annotations

import asyncio
import random
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appliance import config
from appliance.gateway import lore, pipeline
from appliance.gateway.backfill import backfill
from appliance.gateway.runtime import Runtime
from appliance.models import OPERATOR
from appliance.search import metrics
from tests.support.pdfs import text_pdf

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "lore"


def sentences() -> list[str]:
    text = " ".join(
        p.read_text(errors="ignore") for p in FIXTURES.glob("**/*") if p.suffix in (".md", ".txt")
    )
    text = re.sub(r"<[^>]+>|[#*`]", " ", text)
    return [s.strip() for s in re.split(r"(?<=[.;:])\s+", text) if 30 < len(s.strip()) < 300]


def coined(rng: random.Random) -> str:
    return "".join(rng.choice("bcdfghjklmnpqrstvwz") + rng.choice("aeiou") for _ in range(4))


def write_base(root: Path, n: int, rng: random.Random) -> list[tuple[str, str]]:
    """``n`` documents; returns (a coined word, the path of the one document holding it)."""
    pool = sentences()
    probes: list[tuple[str, str]] = []
    for i in range(n):
        word = coined(rng)
        paras = [" ".join(rng.choices(pool, k=4)) for _ in range(12)]
        paras[rng.randrange(12)] += f" The {word} clause applies here."
        kind = rng.random()
        folder = root / f"part{i % 20:02d}"
        folder.mkdir(exist_ok=True)
        if kind < 0.70:
            path = folder / f"doc{i:04d}.md"
            body = [f"# Document {i}"]
            for j, para in enumerate(paras):
                body += [f"{'##' if j % 4 == 0 else '###'} Part {j}", para]
            path.write_text("\n\n".join(body))
        elif kind < 0.90:
            path = folder / f"doc{i:04d}.html"
            html = "".join(f"<h2>Part {j}</h2><p>{p}</p>" for j, p in enumerate(paras))
            path.write_text(
                f"<html><head><title>Document {i}</title></head>"
                f"<body><h1>Document {i}</h1>{html}</body></html>"
            )
        elif kind < 0.98:
            path = folder / f"doc{i:04d}.txt"
            path.write_text(f"Document {i}\n\n" + "\n\n".join(paras))
        else:
            path = folder / f"doc{i:04d}.pdf"
            words = " ".join(paras[:4]).split()
            lines = [" ".join(words[k : k + 12]) for k in range(0, len(words), 12)][:50]
            lines.append(f"The {word} clause applies here.")
            path.write_bytes(text_pdf(lines, title=f"Document {i}"))
        probes.append((word, path.relative_to(root).as_posix()))
    return probes


async def bench(n: int) -> None:
    rng = random.Random(23)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "kb"
        root.mkdir()
        probes = write_base(root, n, rng)
        raw = sum(p.stat().st_size for p in root.rglob("*") if p.is_file())
        settings = config.load(
            cli={"data_dir": str(Path(tmp) / "data")},
            env={"TOOLSPOKE_DEMO": "0", "TOOLSPOKE_RATE_LIMIT": "1000000", "TOOLSPOKE_EMBEDDINGS": "local"},
        )
        rt = Runtime(settings)
        await rt.open()
        try:
            db_file = Path(tmp) / "data" / "toolspoke.db"
            before = db_file.stat().st_size
            started = time.perf_counter()
            report = await lore.import_lore(rt, str(root), slug="kb")
            seconds = time.perf_counter() - started
            await rt.db.checkpoint()
            grown = db_file.stat().st_size - before
            async with rt.db.read() as conn:
                rows = await conn.all(
                    "SELECT sum(pgsize) AS bytes FROM dbstat"
                    " WHERE name LIKE 'lore%' OR name LIKE 'sqlite_autoindex_lore%'"
                )
            lore_bytes = int(rows[0]["bytes"] or 0)
            assert report.documents is not None
            print(
                f"documents:       {report.documents['count']} ({report.documents['chunks']} chunks),"
                f" {raw / 1e6:.1f} MB of files"
            )
            print(f"import:          {seconds:.2f} s ({report.documents['count'] / seconds:.0f} documents/s)")
            print(
                f"index size:      {lore_bytes / 1e6:.1f} MB in the lore tables;"
                f" the database grew {grown / 1e6:.1f} MB"
            )
            again = time.perf_counter()
            await lore.import_lore(rt, str(root), slug="kb")
            print(f"re-import, none changed: {time.perf_counter() - again:.2f} s")
            await _searches(rt, probes[: min(300, n)], "lexical (passages not embedded yet)")
            started = time.perf_counter()
            embedded = (await backfill(rt)).passages
            seconds = time.perf_counter() - started
            print(f"passage backfill: {embedded} passages in {seconds:.1f} s ({embedded / seconds:.0f}/s)")
            await _searches(rt, probes[: min(300, n)], "hybrid (query embedded, uncached)")
        finally:
            await rt.close()


async def _searches(rt: Runtime, asks: list[tuple[str, str]], label: str) -> None:
    found = 0
    ms: list[float] = []
    for word, path in asks:
        question = f"what does the {word} clause say about liberty?"
        t = time.perf_counter()
        result = await pipeline.call_tool(rt, OPERATOR, "kb__search_lore", {"query": question, "limit": 5})
        ms.append((time.perf_counter() - t) * 1000)
        passages = result.structured["passages"]
        found += bool(passages) and passages[0]["path"] == path
    summary = metrics.latency_summary(ms)
    print(
        f"search_lore, {label}: p50 {summary['p50']:.2f} ms, p95 {summary['p95']:.2f} ms over"
        f" {len(ms)} questions (full call pipeline); the right document first for {found}/{len(asks)}"
    )


if __name__ == "__main__":
    asyncio.run(bench(int(sys.argv[1]) if len(sys.argv) > 1 else 1000))
