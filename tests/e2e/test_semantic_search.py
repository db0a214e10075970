"""Semantic search end to end: a real appliance, the real CLI, a real SDK client, and either
the bundled local model (offline) or a real OpenAI-compatible endpoint on loopback."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.clients import connect
from tests.support.embeddings_server import EmbeddingsServer
from tests.support.servers import ADMIN_KEY, REPO, Appliance, cli, running_appliance
from tests.support.waits import wait_for

pytestmark = pytest.mark.e2e

TOOLS = [
    ("office", "build_deck", "Build a PowerPoint deck from an outline and save it."),
    ("office", "write_document", "Write a Word document with headings and paragraphs."),
    ("files", "delete_file", "Remove a file from disk."),
    ("weather", "get_forecast", "Weather forecast for a city for the next days."),
    ("crm", "list_contacts", "List the contacts stored in the CRM."),
    ("crm", "create_contact", "Add a new contact to the CRM."),
]
# No word of this query is in the deck tool's text: only the semantic pass can find it.
QUERY = "make slides for the quarterly results meeting"


def catalogue(path: Path, tools: list[tuple[str, str, str]] = TOOLS) -> Path:
    lines = [
        json.dumps({"toolkit": k, "name": n, "description": d, "input_schema": {"type": "object"}})
        for k, n, d in tools
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def provider_env(server: EmbeddingsServer) -> dict[str, str]:
    """An appliance using the loopback embeddings server as its OpenAI-compatible provider."""
    return {
        "TOOLSPOKE_EMBEDDINGS": "openai",
        "TOOLSPOKE_EMBEDDINGS_URL": server.base_url,
        "TOOLSPOKE_EMBEDDINGS_MODEL": "bow",
        "TOOLSPOKE_DEMO": "false",
        "TOOLSPOKE_ADMIN_KEY": ADMIN_KEY,
    }


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


async def search(app: Appliance, query: str = QUERY) -> dict[str, Any]:
    async with connect(app) as client:
        result = await client.call_tool("search_tools", {"query": query})
        assert result.is_error is False, result
        return dict(result.structured_content or {})


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_by_default_the_local_model_serves_hybrid_search_offline_and_the_kill_switch_works_without_restart(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    # TOOLSPOKE_EMBEDDINGS unset: its default, which picks the bundled model installed here
    env = {"TOOLSPOKE_EMBEDDINGS": None, "TOOLSPOKE_DEMO": "false", "TOOLSPOKE_ADMIN_KEY": ADMIN_KEY}
    ok(cli(data, "init", env=env))
    ok(cli(data, "import", "catalog", str(catalogue(tmp_path / "c.jsonl")), "--slug", "kit", env=env))
    with running_appliance(data, env=env) as app:
        # serve embeds the catalogue in the background; searches are lexical until it is done
        found: dict[str, Any] = {}

        def hybrid() -> bool:
            found.update(run(search(app)))
            return found["ranking"] == "hybrid"

        wait_for("the background backfill to make search hybrid", hybrid, timeout=60, pace_s=0.2)
        assert found["results"][0]["name"] == "kit__office_build_deck"
        # A request of two asks (search/asks.py): the local model pools each ask from the
        # request's one run, and each ask's tool is in the first two.
        two = run(
            search(
                app, "I have to make slides for the quarterly results. Also, will it rain in Oslo tomorrow?"
            )
        )
        assert two["ranking"] == "hybrid"
        assert {r["name"] for r in two["results"][:2]} == {
            "kit__office_build_deck",
            "kit__weather_get_forecast",
        }
        said = [line for line in app.output if "embeddings = auto: the bundled local model" in line]
        assert len(said) == 1, said  # once, though serve checks the data directory first
        status = json.loads(ok(cli(data, "semantic", "status", "--json", env=env)))
        assert status["provider"] == "local" and status["model"].startswith("local/all-MiniLM-L6-v2-int8@")
        assert status["query_adapter"] is True

        # The kill switch from the CLI, beside the running server: the next search is lexical.
        assert "semantic search off" in ok(cli(data, "semantic", "off", env=env))
        assert run(search(app))["ranking"] == "lexical"
        # ... and from the admin API, back on.
        with httpx.Client(base_url=app.base_url, headers={"Authorization": f"Bearer {app.key}"}) as api:
            r = api.put("/api/v1/search/semantic", json={"enabled": True}, timeout=30)
            assert r.status_code == 200 and r.json()["enabled"] is True
            assert r.json()["embedded"] == r.json()["tools"] == len(TOOLS)
            bad = api.put("/api/v1/search/semantic", json={"enabled": "no"}, timeout=30)
            assert bad.status_code == 422 and bad.json()["error"]["field"] == "enabled"
        assert run(search(app))["ranking"] == "hybrid"


def test_search_explain_says_lexical_after_semantic_off_and_hybrid_again_after_on(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with EmbeddingsServer() as server:
        env = provider_env(server)
        ok(cli(data, "init", env=env))
        ok(cli(data, "import", "catalog", str(catalogue(tmp_path / "c.jsonl")), "--slug", "kit", env=env))
        ok(cli(data, "backfill", env=env))

        def explain() -> dict[str, Any]:
            return dict(
                json.loads(ok(cli(data, "search", "weather forecast", "--explain", "--json", env=env)))
            )

        assert explain()["ranking"] == "hybrid"
        # the adapter was learned for the bundled model's vectors, not this provider's
        assert json.loads(ok(cli(data, "semantic", "status", "--json", env=env)))["query_adapter"] is False
        # A request of two asks: each row shows what its best ask gave, and the terms add up
        asked = json.loads(
            ok(
                cli(
                    data,
                    "search",
                    "Build a deck from my outline. Then get the weather forecast.",
                    "--explain",
                    "--json",
                    env=env,
                )
            )
        )
        assert asked["ranking"] == "hybrid" and asked["explain"]
        for row in asked["explain"]:
            terms = [row[k] for k in ("lexical_part", "semantic_part", "service_part", "ask_part")]
            assert None not in terms and abs(sum(terms) - row["score"]) < 1e-6
        text = ok(
            cli(
                data,
                "search",
                "Build a deck from my outline. Then get the weather forecast.",
                "--explain",
                env=env,
            )
        )
        assert text.splitlines()[1].split()[-1] == "asks"
        ok(cli(data, "semantic", "off", env=env))
        off = explain()
        assert (off["ranking"], off["reason"]) == ("lexical", "switched_off")
        assert all(row["semantic_rank"] is None for row in off["explain"])
        text = ok(cli(data, "search", "weather forecast", "--explain", env=env))
        assert text.splitlines()[0] == "ranking: lexical (switched_off)"
        ok(cli(data, "semantic", "on", env=env))
        assert explain()["ranking"] == "hybrid"


def test_the_query_adapter_lifts_the_tool_a_request_needs_and_its_setting_turns_it_off(
    tmp_path: Path,
) -> None:
    """The bundled model and the shipped adapter (search/adapter.py) on a real catalogue: the
    public MetaTool set's 199 plugins, one of whose dev requests the adapter learned from.
    Without it the plugin that translates is not first; with it, it is."""
    data = tmp_path / "data"
    env = {"TOOLSPOKE_EMBEDDINGS": "local", "TOOLSPOKE_DEMO": "false", "TOOLSPOKE_ADMIN_KEY": ADMIN_KEY}
    metatool = REPO / "bench" / "data" / "retrieval" / "metatool" / "catalog.jsonl"
    ok(cli(data, "init", env=env))
    ok(cli(data, "import", "catalog", str(metatool), "--slug", "metatool", env=env))
    ok(cli(data, "backfill", env=env))
    query = 'What does the word "sushi" mean in English?'

    def ranked(adapter: str) -> list[str]:
        out = json.loads(
            ok(
                cli(
                    data,
                    "search",
                    query,
                    "--json",
                    "--explain",
                    env={**env, "TOOLSPOKE_SEARCH_QUERY_ADAPTER": adapter},
                )
            )
        )
        assert out["ranking"] == "hybrid"
        return [r["name"] for r in out["results"]]

    moved, raw = ranked("true"), ranked("false")
    for setting, applied in (("true", True), ("false", False)):
        status = ok(
            cli(data, "semantic", "status", "--json", env={**env, "TOOLSPOKE_SEARCH_QUERY_ADAPTER": setting})
        )
        assert json.loads(status)["query_adapter"] is applied
    assert moved[0] == "metatool__speak", (moved[:5], raw[:5])
    assert raw[0] != "metatool__speak", raw[:5]


def test_a_failing_provider_leaves_search_lexical_within_its_deadline_and_opens_the_breaker(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with EmbeddingsServer() as server:
        env = {
            **provider_env(server),
            "TOOLSPOKE_EMBEDDINGS_TIMEOUT_S": "0.5",
            "TOOLSPOKE_EMBEDDINGS_BREAKER_S": "300",
        }
        ok(cli(data, "init", env=env))
        ok(cli(data, "import", "catalog", str(catalogue(tmp_path / "c.jsonl")), "--slug", "kit", env=env))
        ok(cli(data, "backfill", env=env))
        with running_appliance(data, env=env) as app:
            assert run(search(app, "weather forecast"))["ranking"] == "hybrid"
            # A repeated query's vector is remembered: the provider is not asked again.
            before = len(server.requests)
            assert run(search(app, "weather forecast"))["ranking"] == "hybrid"
            assert server.query_requests(before) == 0
            server.mode = "slow"
            before = len(server.requests)
            started = time.monotonic()
            found = run(search(app, "forecast of the weather"))
            first_s = time.monotonic() - started
            assert found["ranking"] == "lexical"
            assert found["results"][0]["name"] == "kit__weather_get_forecast"
            assert first_s < 0.5 + 2.0  # the deadline, plus a client connection on a loaded machine
            # The breaker is open: the next searches do not wait for the provider at all.
            started = time.monotonic()
            for query in ("weather tomorrow", "rain forecast", "forecast for Paris"):
                assert run(search(app, query))["ranking"] == "lexical"
            assert time.monotonic() - started < first_s * 3
            assert server.query_requests(before) == 1
        assert any("embedding provider failed" in line for line in app.output)


def test_a_backfill_killed_mid_way_resumes_and_embeds_no_tool_twice(tmp_path: Path) -> None:
    data = tmp_path / "data"
    tools = [("kit", f"tool_{i}", f"Tool number {i} does thing {i}.") for i in range(20)]
    with EmbeddingsServer(hold_after=2) as server:
        env = provider_env(server)
        ok(cli(data, "init", env=env))
        ok(
            cli(
                data,
                "import",
                "catalog",
                str(catalogue(tmp_path / "c.jsonl", tools)),
                "--slug",
                "kit",
                env=env,
            )
        )
        proc = subprocess.Popen(
            [sys.executable, "-m", "appliance", "backfill", "--batch", "4"],
            env={**os.environ, "TOOLSPOKE_DATA_DIR": str(data), **env},
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            # Two batches answered and stored; the third is in flight when the process dies.
            assert server.held.wait(60), "the backfill never reached its third batch"
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
        server.hold_after = None
        server.release()
        status = json.loads(ok(cli(data, "semantic", "--json", env=env)))
        assert (status["embedded"], status["tools"]) == (8, 20)
        resumed = json.loads(ok(cli(data, "backfill", "--json", "--batch", "4", env=env)))
        assert resumed["embedded"] == 12
        status = json.loads(ok(cli(data, "semantic", "--json", env=env)))
        assert status["embedded"] == status["tools"] == 20
    answered = Counter(server.answered)
    assert len(answered) == 20 and set(answered.values()) == {1}


def test_serve_backfills_in_the_background_and_then_answers_hybrid(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with EmbeddingsServer() as server:
        env = provider_env(server)
        ok(cli(data, "init", env=env))
        ok(cli(data, "import", "catalog", str(catalogue(tmp_path / "c.jsonl")), "--slug", "kit", env=env))
        server.expect_answered = len(TOOLS)
        with running_appliance(data, env=env) as app:
            assert server.reached.wait(60), "the background backfill did not embed the catalogue"
            # The batch is answered before it is committed: the next search may still be lexical
            # for a moment, so search until hybrid, bounded.
            deadline = time.monotonic() + 30
            ranking = run(search(app, "weather forecast"))["ranking"]
            while ranking != "hybrid" and time.monotonic() < deadline:
                ranking = run(search(app, "weather forecast"))["ranking"]
            assert ranking == "hybrid"
