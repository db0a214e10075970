"""Lore passage vectors on a real database: what needs one, storing, the nearest passages, and
vectors that go with their passages (re-import, removal) or with a model change."""

from __future__ import annotations

import struct
from pathlib import Path

from appliance.catalogue import store
from appliance.gateway import imports, lore
from appliance.gateway.runtime import Runtime
from appliance.lore import vectors
from tests.support.runtimes import on_runtime


def folder(tmp_path: Path, docs: dict[str, str]) -> Path:
    root = tmp_path / "kb"
    root.mkdir(exist_ok=True)
    for name, text in docs.items():
        (root / name).write_text(text, encoding="utf-8")
    return root


DOCS = {
    "a.md": "# Cats\n\nFelines purr and chase mice.\n",
    "b.md": "# Ovens\n\nThe oven bakes bread at dawn.\n",
    "c.md": "# Rivers\n\nWater runs down to the sea.\n",
}


def blob(*values: float) -> bytes:
    return struct.pack(f"<{len(values)}f", *values)


async def todo(rt: Runtime, model: str) -> list[vectors.Todo]:
    async with rt.db.read() as conn:
        return await conn.batch(lambda r: vectors.todo_in(r, model, limit=100))


async def kit_id(rt: Runtime) -> int:
    async with rt.db.read() as conn:
        return (await store.find_toolkits(conn, "kb"))[0].id


def test_every_passage_needs_a_vector_until_stored_and_the_nearest_come_first(tmp_path: Path) -> None:
    root = folder(tmp_path, DOCS)

    async def work(rt: Runtime) -> None:
        await lore.import_lore(rt, str(root), slug="kb")
        planned = await todo(rt, "m1")
        assert len(planned) == 3
        assert {t.text.split("\n")[0] for t in planned} == {"Cats", "Ovens", "Rivers"}
        assert any("Felines purr" in t.text for t in planned)
        axes = {t.chunk_id: blob(*(1.0 if i == n else 0.0 for i in range(3))) for n, t in enumerate(planned)}
        async with rt.db.write() as tx:
            await vectors.store(tx, "m1", [(t, axes[t.chunk_id]) for t in planned])
        assert await todo(rt, "m1") == []
        kit = await kit_id(rt)
        async with rt.db.read() as conn:
            assert await conn.batch(lambda r: vectors.missing_in(r, "m1")) is False
            near = await conn.batch(lambda r: vectors.nearest_in(r, kit, "m1", blob(0.1, 0.9, 0.2), limit=3))
            assert await conn.batch(lambda r: vectors.embedded_in(r, kit, "m1")) == (3, 3)
            # another dimension is never compared (a provider change mid-way)
            assert await conn.batch(lambda r: vectors.nearest_in(r, kit, "m1", blob(1, 0), limit=3)) == []
        assert [chunk for chunk, _ in near] == [planned[1].chunk_id, planned[2].chunk_id, planned[0].chunk_id]
        assert near[0][1] > near[1][1] > near[2][1] and 0.9 < near[0][1] <= 1.0
        # a model change re-embeds everything
        assert len(await todo(rt, "m2")) == 3

    on_runtime(tmp_path, work)


def test_vectors_go_with_their_passages_and_a_removed_passage_is_never_stored(tmp_path: Path) -> None:
    root = folder(tmp_path, DOCS)

    async def work(rt: Runtime) -> None:
        await lore.import_lore(rt, str(root), slug="kb")
        planned = await todo(rt, "m1")
        async with rt.db.write() as tx:
            await vectors.store(tx, "m1", [(t, blob(1.0, 0.0)) for t in planned])
        (root / "a.md").write_text("# Cats\n\nFelines sleep all afternoon.\n", encoding="utf-8")
        await lore.import_lore(rt, str(root), slug="kb")
        again = await todo(rt, "m1")
        assert len(again) == 1 and "sleep all afternoon" in again[0].text  # only the changed one
        # a passage the re-import replaced: skipped, not stored dangling
        gone = next(t for t in planned if "Felines purr" in t.text)
        async with rt.db.write() as tx:
            await vectors.store(tx, "m1", [(t, blob(0.0, 1.0)) for t in [*again, gone]])
        async with rt.db.read() as conn:
            rows = await conn.all("SELECT chunk_id FROM lore_embeddings ORDER BY chunk_id")
        chunk_ids = {int(r[0]) for r in rows}
        assert len(chunk_ids) == 3 and again[0].chunk_id in chunk_ids and gone.chunk_id not in chunk_ids
        await imports.remove_toolkit(rt, "kb")
        async with rt.db.read() as conn:
            left = await conn.one("SELECT count(*) FROM lore_embeddings")
        assert left[0] == 0

    on_runtime(tmp_path, work)
