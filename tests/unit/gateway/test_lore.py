"""Lore imports and tools in process, on a real database: one transaction, updates in place,
refusals that store nothing, answers within the response cap."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any, TypeVar

import orjson
import pytest

from appliance.catalogue import store
from appliance.errors import Conflict, ImportFailed
from appliance.gateway import imports, lore, pipeline
from appliance.gateway.runtime import Runtime
from appliance.models import OPERATOR
from tests.support.runtimes import on_runtime

T = TypeVar("T")
FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
LORE = FIXTURES / "lore"


def knowledge_base(tmp_path: Path) -> Path:
    root = tmp_path / "kb"
    shutil.copytree(LORE, root, ignore=shutil.ignore_patterns("SOURCES.md"))
    return root


async def call(rt: Runtime, name: str, **args: Any) -> Any:
    result = await pipeline.call_tool(rt, OPERATOR, name, args)
    assert not result.is_error, result.content
    return orjson.loads(result.content[0]["text"])


async def counts(rt: Runtime) -> tuple[int, int, int, int]:
    async with rt.db.read() as conn:
        row = await conn.one(
            "SELECT (SELECT count(*) FROM toolkits WHERE source_kind = 'lore') AS k,"
            " (SELECT count(*) FROM lore_documents) AS d, (SELECT count(*) FROM lore_chunks) AS c,"
            " (SELECT count(*) FROM lore_fts) AS f"
        )
    return int(row["k"]), int(row["d"]), int(row["c"]), int(row["f"])


def test_an_import_makes_three_read_tools_that_find_list_and_read(tmp_path: Path) -> None:
    root = knowledge_base(tmp_path)

    async def work(rt: Runtime) -> None:
        report = await lore.import_lore(rt, str(root), slug="kb")
        assert sorted(t["name"] for t in report.tools) == [
            "kb__list_documents",
            "kb__read_document",
            "kb__search_lore",
        ]
        assert {t["kind"] for t in report.tools} == {"read"}
        assert report.documents is not None and report.documents["count"] == 6
        found = await call(rt, "kb__search_lore", query="which rights are unalienable?")
        best = found["passages"][0]
        assert best["path"] == "declaration.html" and best["heading"].endswith("Statement of rights")
        assert "«unalienable»" in best["snippet"]
        pdf = (await call(rt, "kb__search_lore", query="consecrate hallow ground"))["passages"][0]
        assert pdf["path"] == "gettysburg.pdf" and pdf["heading"] == "page 1"
        listed = await call(rt, "kb__list_documents")
        assert [d["path"] for d in listed["documents"]] == [
            "GUIDE.md",
            "constitution.md",
            "declaration.html",
            "gettysburg.pdf",
            "python/zen.md",
            "rfc2119.txt",
        ]
        read = await call(rt, "kb__read_document", id=best["document_id"], offset=best["offset"], length=60)
        assert read["text"].startswith("Statement of rights") and read["length"] == 60
        assert read["next_offset"] == best["offset"] + 60
        async with rt.db.read() as conn:
            kit = (await store.find_toolkits(conn, "kb", project="default"))[0]
        assert kit.source_kind == "lore" and "Cite the document path" in kit.guide
        k, d, c, f = await counts(rt)
        assert (k, d) == (1, 6) and c == f > 6

    on_runtime(tmp_path, work)


def test_a_re_import_updates_in_place(tmp_path: Path) -> None:
    root = knowledge_base(tmp_path)

    async def work(rt: Runtime) -> None:
        await lore.import_lore(rt, str(root), slug="kb")
        async with rt.db.read() as conn:
            before = {r["name"]: r["id"] for r in await conn.all("SELECT id, name FROM tools")}
        assert not (await call(rt, "kb__search_lore", query="xylophonist"))["passages"]
        text = (
            (root / "rfc2119.txt").read_text().replace("truly optional", "truly optional for a xylophonist")
        )
        (root / "rfc2119.txt").write_text(text)
        (root / "python" / "zen.md").unlink()
        report = await lore.import_lore(rt, str(root), slug="kb")
        assert report.documents is not None
        assert report.documents["changed"] == ["rfc2119.txt"] and report.documents["removed"] == [
            "python/zen.md"
        ]
        assert len(report.documents["unchanged"]) == 4 and report.documents["added"] == []
        hit = (await call(rt, "kb__search_lore", query="xylophonist"))["passages"]
        assert [p["path"] for p in hit] == ["rfc2119.txt"]
        assert not (await call(rt, "kb__search_lore", query="Namespaces honking"))["passages"]
        async with rt.db.read() as conn:
            after = {r["name"]: r["id"] for r in await conn.all("SELECT id, name FROM tools")}
        assert after == before  # the tools (and so their grants) are the same rows
        k, d, c, f = await counts(rt)
        assert (k, d) == (1, 5) and c == f

    on_runtime(tmp_path, work)


def test_an_unreadable_file_refuses_the_import_and_stores_nothing(tmp_path: Path) -> None:
    root = knowledge_base(tmp_path)
    (root / "broken.pdf").write_bytes(b"%PDF-1.4 this is no PDF")
    (root / "picture.png").write_bytes(b"\x89PNG\r\n")

    async def work(rt: Runtime) -> None:
        with pytest.raises(ImportFailed) as caught:
            await lore.import_lore(rt, str(root), slug="kb")
        listed = caught.value.data["unreadable"]
        assert [u["where"] for u in listed] == ["broken.pdf", "picture.png"]
        assert "PDF" in listed[0]["reason"] and "nothing was stored" in caught.value.public_message
        assert await counts(rt) == (0, 0, 0, 0)
        dry = await lore.import_lore(rt, str(root), slug="kb", dry_run=True)
        assert [s["where"] for s in dry.skipped] == ["broken.pdf", "picture.png"]
        assert await counts(rt) == (0, 0, 0, 0)
        kept = await lore.import_lore(rt, str(root), slug="kb", skip_unreadable=True)
        assert len(kept.skipped) == 2 and kept.documents is not None and kept.documents["count"] == 6

    on_runtime(tmp_path, work)


def test_a_traversal_archive_is_refused_and_stores_nothing(tmp_path: Path) -> None:
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        z.writestr("ok.md", "# fine")
        z.writestr("../../escape.md", "# out")

    async def work(rt: Runtime) -> None:
        with pytest.raises(ImportFailed, match="climbs out"):
            await lore.import_lore(rt, "upload", slug="kb", data=out.getvalue())
        assert await counts(rt) == (0, 0, 0, 0)

    on_runtime(tmp_path, work)
    assert not (tmp_path / "escape.md").exists()


def test_a_slug_of_another_kind_of_toolkit_is_not_overwritten(tmp_path: Path) -> None:
    root = knowledge_base(tmp_path)
    spec = str(FIXTURES / "openapi" / "oai-v3.0-petstore.yaml")

    async def work(rt: Runtime) -> None:
        await imports.import_openapi(rt, spec, slug="pets", base_url="https://api.example.com/v1")
        with pytest.raises(Conflict, match="not a Lore one"):
            await lore.import_lore(rt, str(root), slug="pets")
        assert await counts(rt) == (0, 0, 0, 0)

    on_runtime(tmp_path, work)


def test_read_document_stays_within_the_response_cap_and_says_where_to_go_on(tmp_path: Path) -> None:
    root = tmp_path / "kb"
    root.mkdir()
    (root / "long.md").write_text("# Long\n\n" + 'ü"x ' * 50_000)  # escapes and 2-byte characters

    async def work(rt: Runtime) -> None:
        await lore.import_lore(rt, str(root), slug="kb")
        async with rt.db.write() as tx:
            kit = await tx.one("SELECT id FROM toolkits WHERE slug = 'kb'")
            await store.set_max_response_bytes(tx, int(kit["id"]), 4096)
        result = await pipeline.call_tool(rt, OPERATOR, "kb__read_document", {"id": 1, "length": 1_000_000})
        assert len(orjson.dumps(result.structured)) <= 4096
        read = result.structured
        assert read["length"] == len(read["text"]) > 500 and read["next_offset"] == read["length"]
        again = await call(rt, "kb__read_document", id=1, offset=read["next_offset"], length=10)
        assert again["offset"] == read["length"] and len(again["text"]) == 10
        missing = await pipeline.call_tool(rt, OPERATOR, "kb__read_document", {"id": 999})
        assert missing.is_error and "no document 999" in missing.content[0]["text"]

    on_runtime(tmp_path, work)


def test_removing_the_toolkit_takes_its_documents_and_index(tmp_path: Path) -> None:
    root = knowledge_base(tmp_path)

    async def work(rt: Runtime) -> None:
        await lore.import_lore(rt, str(root), slug="kb")
        await lore.import_lore(rt, str(root), slug="other")
        await imports.remove_toolkit(rt, "kb")
        k, d, c, f = await counts(rt)
        assert (k, d) == (1, 6) and c == f
        hit = await call(rt, "other__search_lore", query="unalienable")
        assert hit["passages"]  # the other toolkit's index is whole

    on_runtime(tmp_path, work)
