"""Learn the shipped query adapter (``appliance/search/adapter.py``) from the bench's dev queries.

Run from the repo root: ``.venv/bin/python tests/bench/train_adapter.py [--data ROOT]``. For each
set in ``bench/data/retrieval/`` it imports the catalogue and embeds it with the bundled model
through the real CLI (as ``retrieval.py`` does; ``--data ROOT`` reuses ROOT/<set> data
directories made so), takes every dev query's vector from the same provider the search uses,
learns A with the module's defaults and writes ``appliance/search/learned/query-adapter.npz``:
the matrix (float16), the model it was learned for and how it was learned. Only dev queries are
read: the held-out part of each set never reaches this script. Deterministic for a given model
file; about a minute, most of it the catalogues' embedding.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from pathlib import Path

import numpy as np
import retrieval_cv
from retrieval import BENCH, SETS, toolspoke

from appliance.search import adapter


def _model_prefix(model_id: str) -> str:
    """``local/all-MiniLM-L6-v2-int8@<file hash>/128`` -> ``local/all-MiniLM-L6-v2-int8@``: int8
    results differ slightly between CPUs and builds, which moves the hash, not the model."""
    return model_id.split("@", 1)[0] + "@"


async def _model_id(data: str) -> str:
    from appliance.cli.common import settings_for
    from appliance.gateway.runtime import Runtime

    rt = Runtime(settings_for(None, data_dir=data))
    await rt.open()
    try:
        model_id = rt.semantic.model_id
        assert model_id is not None
        return model_id
    finally:
        await rt.close()


def learn(root: Path) -> Path:
    gathered: dict[str, retrieval_cv.SetData] = {}
    for name in SETS:
        gathered.update(asyncio.run(retrieval_cv.gather(str(root / name), [name], adapter=None)))
    sets = [retrieval_cv.examples(gathered[name], None) for name in SETS]
    matrix, loss = adapter.train(sets)
    model = _model_prefix(asyncio.run(_model_id(str(root / SETS[0]))))
    adapter.ADAPTER_FILE.parent.mkdir(exist_ok=True)
    np.savez_compressed(
        adapter.ADAPTER_FILE,
        matrix=matrix.astype(np.float16),
        model=np.array(model),
        learned_from=np.array([f"{n}:{len(s.gold)}" for n, s in zip(SETS, sets, strict=True)]),
        decay=np.array(adapter.DECAY),
        steps=np.array(adapter.STEPS),
        temperature=np.array(adapter.TEMPERATURE),
        loss=np.array(loss),
    )
    print(
        f"learned from {', '.join(f'{n} ({len(s.gold)} queries)' for n, s in zip(SETS, sets, strict=True))}"
    )
    print(f"final loss {loss:.4f}, |A| {float(np.linalg.norm(matrix)):.3f}, model {model}")
    print(f"wrote {adapter.ADAPTER_FILE}")
    return adapter.ADAPTER_FILE


def main(argv: list[str]) -> None:
    if argv[:1] == ["--data"] and len(argv) == 2:
        learn(Path(argv[1]))
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for name in SETS:
            data = str(root / name)
            toolspoke(data, "import", "catalog", str(BENCH / name / "catalog.jsonl"), "--slug", name)
            toolspoke(data, "backfill", "--json")
        learn(root)


if __name__ == "__main__":
    main(sys.argv[1:])
