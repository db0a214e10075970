"""`toolspoke learn`: a query adapter learned on this deployment (gateway/learning.py), with the
real CLI, the bundled model and a real public catalogue (MetaTool's 199 plugins): learned from one
half of its dev requests, it raises nDCG@10 on the other half; forgetting it goes back to the
shipped adapter; bad input changes nothing."""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.servers import ADMIN_KEY, REPO, cli

pytestmark = pytest.mark.e2e

METATOOL = REPO / "bench" / "data" / "retrieval" / "metatool"
ENV = {"TOOLSPOKE_EMBEDDINGS": "local", "TOOLSPOKE_DEMO": "false", "TOOLSPOKE_ADMIN_KEY": ADMIN_KEY}


def ok(done: Any) -> str:
    assert done.returncode == 0, done.stderr
    return str(done.stdout)


def halves(tmp: Path) -> tuple[Path, Path]:
    lines = [line for line in (METATOOL / "queries-dev.jsonl").read_text().splitlines() if line]
    parts: tuple[list[str], list[str]] = ([], [])
    for line in lines:
        parts[hashlib.blake2b(json.loads(line)["id"].encode(), digest_size=8).digest()[0] & 1].append(line)
    out = (tmp / "learn.jsonl", tmp / "score.jsonl")
    for path, part in zip(out, parts, strict=True):
        path.write_text("\n".join(part) + "\n")
    return out


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("learn")
    data = root / "data"
    ok(cli(data, "init", env=ENV))
    ok(cli(data, "import", "catalog", str(METATOOL / "catalog.jsonl"), "--slug", "metatool", env=ENV))
    ok(cli(data, "backfill", env=ENV))
    return data


def ndcg(data: Path, queries: Path, **env: str) -> float:
    out = json.loads(ok(cli(data, "eval", str(queries), "--ranking", "hybrid", "--json", env={**ENV, **env})))
    assert out["ranking"] == "hybrid"
    return float(out["ndcg@10"])


def status(data: Path) -> dict[str, Any]:
    return dict(json.loads(ok(cli(data, "semantic", "status", "--json", env=ENV))))


# Five evaluations of 230 requests and a learning: about 25 s alone, more beside the suite.
@pytest.mark.timeout(150)
def test_an_adapter_learned_from_half_the_requests_lifts_the_other_half_and_forgetting_restores_the_shipped(
    data: Path, tmp_path: Path
) -> None:
    learn_on, score_on = halves(tmp_path)
    shipped = ndcg(data, score_on)
    without = ndcg(data, score_on, TOOLSPOKE_SEARCH_QUERY_ADAPTER="false")
    try:
        learned_then_forgotten(data, learn_on, score_on, shipped, without)
    finally:  # the other tests share the data directory
        cli(data, "learn", "--forget", env=ENV)


def learned_then_forgotten(
    data: Path, learn_on: Path, score_on: Path, shipped: float, without: float
) -> None:
    report = json.loads(ok(cli(data, "learn", str(learn_on), "--json", env=ENV)))
    assert report["source"] == "queries" and report["examples"] == len(learn_on.read_text().splitlines())
    assert report["skipped"] == 0 and report["model"].startswith("local/all-MiniLM-L6-v2-int8@")
    held = report["held_out"]
    assert held["queries"] > 0 and held["mrr_with"] > held["mrr_without"], held
    learned = status(data)["learned_adapter"]
    assert learned["examples"] == report["examples"] and learned["source"] == "queries"
    assert status(data)["query_adapter"] is True
    # requests it did not learn from: better than no adapter at all
    with_it = ndcg(data, score_on)
    assert with_it > without + 0.01, (without, with_it)
    # the setting still turns every adapter off
    assert ndcg(data, score_on, TOOLSPOKE_SEARCH_QUERY_ADAPTER="false") == without
    text = ok(cli(data, "learn", "--forget", env=ENV))
    assert "dropped" in text and status(data)["learned_adapter"] is None
    assert ndcg(data, score_on) == shipped
    assert json.loads(ok(cli(data, "learn", "--forget", "--json", env=ENV))) == {"forgotten": False}


def test_bad_input_is_refused_by_name_and_stores_nothing(data: Path, tmp_path: Path) -> None:
    learn_on, _ = halves(tmp_path)
    few = tmp_path / "few.jsonl"
    few.write_text("\n".join(learn_on.read_text().splitlines()[:5]) + "\n")
    done = cli(data, "learn", str(few), env=ENV)
    assert done.returncode == 1 and "5 of 5 requests name a tool of this catalogue" in done.stderr
    unknown = tmp_path / "unknown.jsonl"
    unknown.write_text(
        "".join(json.dumps({"query": f"do thing {i}", "gold": ["nope/none"]}) + "\n" for i in range(30))
    )
    done = cli(data, "learn", str(unknown), env=ENV)
    assert done.returncode == 1 and "0 of 30 requests" in done.stderr
    long = tmp_path / "long.jsonl"
    long.write_text(json.dumps({"query": "x" * 2001, "gold": ["metatool/speak"]}) + "\n")
    done = cli(data, "learn", str(long), env=ENV)
    assert done.returncode == 2 and "line 1: query is 2001 characters long" in done.stderr
    assert cli(data, "learn", env=ENV).returncode == 2
    assert cli(data, "learn", str(few), "--forget", env=ENV).returncode == 2
    done = cli(data, "learn", "--from-usage", env=ENV)
    assert done.returncode == 1 and "no search that led to a call" in done.stderr
    done = cli(data, "learn", str(learn_on), env={**ENV, "TOOLSPOKE_EMBEDDINGS": "none"})
    assert done.returncode == 1 and "needs an embedding provider" in done.stderr
    assert status(data)["learned_adapter"] is None


def test_learning_from_the_usage_log_takes_each_search_that_led_to_a_call(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows as `gateway/usage.py` writes them after a search and a call of one of its results."""
    monkeypatch.setenv("TOOLSPOKE_EMBEDDINGS", "local")
    from appliance.cli.common import settings_for
    from appliance.gateway import learning
    from appliance.gateway.runtime import Runtime
    from appliance.search import usage

    learn_on, _ = halves(tmp_path)
    requests = [json.loads(line) for line in learn_on.read_text().splitlines()]

    async def main() -> dict[str, Any]:
        rt = Runtime(settings_for(None, data_dir=str(data)))
        await rt.open()
        try:
            async with rt.db.read() as conn:
                named = dict(await conn.batch(lambda r: r.all("SELECT upstream_name, name FROM tools")))
            rows = []
            for r in requests:
                name = named[r["gold"][0].split("/", 1)[1]]  # the tool's full name, as a call logs it
                rows.append(usage.Searched(time.time(), 1, None, "admin", r["query"], [name], name, None, 1))
            # and a search that led to no call: not an example
            rows.append(usage.Searched(time.time(), 1, None, "admin", "weather", ["metatool__x"]))
            await rt.db.write_batch(lambda w: usage.insert_in(w, rows))
            return await learning.learn_from_usage(rt)
        finally:
            await rt.close()

    try:
        report = asyncio.run(main())
        assert report["source"] == "usage" and report["examples"] == len(requests)
        assert status(data)["learned_adapter"]["source"] == "usage"
    finally:  # the other tests share the data directory
        ok(cli(data, "learn", "--forget", env=ENV))


def test_a_deployment_on_an_openai_compatible_provider_learns_one_for_that_provider_s_vectors(
    tmp_path: Path,
) -> None:
    """The shipped adapter is for the bundled model only; one learned here is for whatever
    provider embeds this catalogue (a real HTTP endpoint on loopback)."""
    from tests.support.embeddings_server import EmbeddingsServer

    tools = [
        ("office", "build_deck", "Build a slide deck."),
        ("weather", "get_forecast", "Weather forecast."),
    ]
    catalogue = tmp_path / "c.jsonl"
    catalogue.write_text(
        "".join(
            json.dumps({"toolkit": k, "name": n, "description": d, "input_schema": {"type": "object"}}) + "\n"
            for k, n, d in tools
        )
    )
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        "".join(
            json.dumps({"query": f"{verb} please {i}", "gold": [gold]}) + "\n"
            for i in range(15)
            for verb, gold in (
                ("slides for the review", "office/build_deck"),
                ("rain tomorrow", "weather/get_forecast"),
            )
        )
    )
    data = tmp_path / "data"
    with EmbeddingsServer() as server:
        env = {
            **ENV,
            "TOOLSPOKE_EMBEDDINGS": "openai",
            "TOOLSPOKE_EMBEDDINGS_URL": server.base_url,
            "TOOLSPOKE_EMBEDDINGS_MODEL": "bow",
        }
        ok(cli(data, "init", env=env))
        ok(cli(data, "import", "catalog", str(catalogue), "--slug", "kit", env=env))
        ok(cli(data, "backfill", env=env))
        before = json.loads(ok(cli(data, "semantic", "status", "--json", env=env)))
        assert before["query_adapter"] is False and before["learned_adapter"] is None
        report = json.loads(ok(cli(data, "learn", str(queries), "--json", env=env)))
        assert report["model"].startswith("http/bow") and report["examples"] == 30
        after = json.loads(ok(cli(data, "semantic", "status", "--json", env=env)))
        assert after["query_adapter"] is True and after["learned_adapter"]["examples"] == 30
        found = json.loads(ok(cli(data, "search", "slides for the review please", "--json", env=env)))
        assert found["ranking"] == "hybrid" and found["results"][0]["name"] == "kit__office_build_deck"
