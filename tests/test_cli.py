"""The ``toolspoke`` command as a user runs it: a new process per command, a real data directory.

One data directory per module holds the ``petstore`` toolkit (pointed at a real HTTP
upstream); tests that add toolkits remove them again, so search rankings stay predictable.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from appliance import __version__
from appliance.access import keys
from appliance.db import Database
from appliance.db.migrate import default_migrations_dir
from appliance.search import usage
from tests.support import servers
from tests.support.servers import ADMIN_KEY, FIXTURES, PetstoreUpstream

PETSTORE = FIXTURES / "oai-v3.0-petstore.yaml"
LOCAL = {"ALLOWED_TOOL_CIDRS": "127.0.0.1/32"}
NO_LOCAL = {"ALLOWED_TOOL_CIDRS": ""}
PET_TOOLS = {"listPets", "createPets", "showPetById"}
KEY_LINE = re.compile(r"^tsk_[A-Za-z0-9_-]{40,}$")


def cli(data_dir: Path, *args: str, **options: Any) -> subprocess.CompletedProcess[str]:
    """A new process per command, as a user runs it (elsewhere commands run in the test's process)."""
    return servers.cli(data_dir, *args, process=True, **options)


@pytest.fixture(scope="module")
def upstream() -> Iterator[PetstoreUpstream]:
    with PetstoreUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory, upstream: PetstoreUpstream) -> Path:
    """An initialised data directory with ``petstore`` imported against the real upstream."""
    path = tmp_path_factory.mktemp("cli") / "data"
    done = cli(path, "init")
    assert done.returncode == 0, done.stderr
    done = cli(
        path,
        "import",
        "openapi",
        str(PETSTORE),
        "--slug",
        "petstore",
        "--base-url",
        upstream.base_url,
        env=LOCAL,
    )
    assert done.returncode == 0, done.stderr
    return path


def toolkit_slugs(data: Path) -> list[str]:
    done = cli(data, "toolkits", "--json")
    assert done.returncode == 0, done.stderr
    return [k["slug"] for k in json.loads(done.stdout)]


def remove(data: Path, slug: str) -> None:
    done = cli(data, "toolkits", "remove", slug)
    assert done.returncode == 0, done.stderr


def is_admin_key(data: Path, key: str) -> bool:
    async def main() -> bool:
        db = Database(data / "toolspoke.db")
        await db.open(default_migrations_dir())
        try:
            async with db.read() as conn:
                return (await keys.authenticate(conn, key)).is_admin
        finally:
            await db.close()

    return asyncio.run(asyncio.wait_for(main(), timeout=30))


# -- init, version, settings ---------------------------------------------------------------


def test_init_prints_the_admin_key_once_and_a_second_init_prints_none(tmp_path: Path) -> None:
    first = cli(tmp_path / "d", "init")
    assert first.returncode == 0, first.stderr
    assert KEY_LINE.match(first.stdout.strip()), first.stdout
    assert first.stdout.count("\n") == 1
    assert is_admin_key(tmp_path / "d", first.stdout.strip())

    second = cli(tmp_path / "d", "init")
    assert second.returncode == 0, second.stderr
    assert second.stdout == ""
    assert "tsk_" not in second.stderr


def test_init_installs_the_admin_key_from_the_environment_without_printing_it(tmp_path: Path) -> None:
    done = cli(tmp_path / "d", "init", env={"TOOLSPOKE_ADMIN_KEY": ADMIN_KEY})
    assert done.returncode == 0, done.stderr
    assert ADMIN_KEY not in done.stdout + done.stderr
    assert done.stdout == ""
    assert "TOOLSPOKE_ADMIN_KEY" in done.stderr
    assert is_admin_key(tmp_path / "d", ADMIN_KEY)


def test_a_malformed_admin_key_in_the_environment_is_refused_naming_the_setting(tmp_path: Path) -> None:
    bad = "tsk_short-secret"
    done = cli(tmp_path / "d", "init", env={"TOOLSPOKE_ADMIN_KEY": bad})
    assert done.returncode != 0
    assert "TOOLSPOKE_ADMIN_KEY" in done.stderr
    assert bad not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    # Nothing was installed: a plain init afterwards still generates and shows a key.
    again = cli(tmp_path / "d", "init")
    assert again.returncode == 0, again.stderr
    assert KEY_LINE.match(again.stdout.strip())


def test_version_prints_the_package_version(tmp_path: Path) -> None:
    done = cli(tmp_path / "d", "version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"toolspoke {__version__}"


def test_doctor_reports_the_stdio_sandbox_and_strict_fails_when_servers_would_run_unsandboxed(
    tmp_path: Path,
) -> None:
    done = cli(tmp_path / "d", "doctor", "--json")
    assert done.returncode == 0, done.stderr
    box = json.loads(done.stdout)["stdio_sandbox"]
    assert box["mode"] == "auto"
    assert box["stdio_servers"] == ("sandboxed" if box["available"] else "unsandboxed")
    assert box["limits"]["processes"] == 256 and box["network"].startswith("none")
    proxy = box["egress_proxy"]
    assert proxy["allowed_hosts"] == (
        "available" if box["available"] and proxy["forwarder_python"] else "unavailable (python3 not found)"
    )
    assert "registry.npmjs.org" in proxy["install_hosts"] and proxy["upstream_proxy"] == "none (direct)"
    off = cli(tmp_path / "d", "doctor", "--strict", env={"TOOLSPOKE_STDIO_SANDBOX": "off"})
    assert off.returncode == 1
    assert "stdio servers run as plain processes (mode off)" in off.stdout
    assert "allowed hosts: " in off.stdout and "installs reach: registry.npmjs.org" in off.stdout
    assert "Traceback" not in off.stderr


@pytest.mark.parametrize("args", [("toolkits",), ("init",)])
def test_a_bad_setting_exits_2_naming_the_setting(tmp_path: Path, args: tuple[str, ...]) -> None:
    done = cli(tmp_path / "d", *args, env={"TOOLSPOKE_PORT": "x"})
    assert done.returncode == 2, done.stderr
    assert "TOOLSPOKE_PORT" in done.stderr
    assert "Traceback" not in done.stderr


# -- import ------------------------------------------------------------------------------------


def test_a_dry_run_import_lists_the_tools_and_stores_nothing(data: Path) -> None:
    done = cli(
        data, "import", "openapi", str(PETSTORE), "--slug", "drypets", "--dry-run", "--json", env=LOCAL
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["dry_run"] is True
    assert report["tool_count"] == 3
    assert {t["name"] for t in report["tools"]} == {f"drypets__{n}" for n in PET_TOOLS}
    assert toolkit_slugs(data) == ["demo", "petstore"]  # init installs the demo; nothing more


def test_a_spec_with_no_usable_operation_exits_1_with_the_skipped_report_and_stores_nothing(
    data: Path, tmp_path: Path
) -> None:
    broken = tmp_path / "broken.json"
    bad = {"get": {"parameters": [{"$ref": "#/nope"}], "responses": {"200": {"description": "ok"}}}}
    broken.write_text(
        json.dumps({"openapi": "3.0.3", "info": {"title": "b", "version": "1"}, "paths": {"/a": bad}})
    )
    hooks = FIXTURES / "oai-v3.1-webhook-example.yaml"
    for source, extra in ((hooks, ()), (hooks, ("--dry-run",)), (broken, ()), (broken, ("--dry-run",))):
        args = (
            "import",
            "openapi",
            str(source),
            "--slug",
            "empty",
            "--base-url",
            "https://x.example",
            *extra,
        )
        done = cli(data, *args)
        assert done.returncode == 1, (source, extra, done.stdout)
        assert "no usable operation" in done.stderr
        assert "nothing was stored" in done.stderr
        assert "Traceback" not in done.stderr
        if source == broken:
            assert "skipped GET /a: parameter 0: $ref '#/nope'" in done.stderr
    assert toolkit_slugs(data) == ["demo", "petstore"]


def test_a_dry_run_needs_no_base_url(data: Path, tmp_path: Path) -> None:
    spec = tmp_path / "nobase.json"
    op = {"get": {"operationId": "getA", "responses": {"200": {"description": "ok"}}}}
    spec.write_text(
        json.dumps({"openapi": "3.0.3", "info": {"title": "n", "version": "1"}, "paths": {"/a": op}})
    )
    done = cli(data, "import", "openapi", str(spec), "--slug", "nobase", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "nobase__getA" in done.stdout
    assert "saving this import needs --base-url" in done.stderr
    saved = cli(data, "import", "openapi", str(spec), "--slug", "nobase")
    assert saved.returncode == 1
    assert "--base-url" in saved.stderr
    assert toolkit_slugs(data) == ["demo", "petstore"]


def test_importing_into_an_existing_slug_needs_replace(data: Path, upstream: PetstoreUpstream) -> None:
    args = ("import", "openapi", str(PETSTORE), "--slug", "again", "--base-url", upstream.base_url)
    try:
        assert cli(data, *args, env=LOCAL).returncode == 0
        refused = cli(data, *args, env=LOCAL)
        assert refused.returncode == 1
        assert "--replace" in refused.stderr
        replaced = cli(data, *args, "--replace", "--json", env=LOCAL)
        assert replaced.returncode == 0, replaced.stderr
        assert json.loads(replaced.stdout)["replaced"] is True
    finally:
        cli(data, "toolkits", "remove", "again")


def test_a_loopback_base_url_is_refused_without_allowed_tool_cidrs(data: Path) -> None:
    done = cli(
        data,
        "import",
        "openapi",
        str(PETSTORE),
        "--slug",
        "loopy",
        "--base-url",
        "http://127.0.0.1:9/v1",
        env=NO_LOCAL,
    )
    assert done.returncode == 1
    assert "base_url" in done.stderr
    assert "ALLOWED_TOOL_CIDRS" in done.stderr


class _SpecServer:
    """Serves the petstore fixture at /spec.yaml and counts the requests for it."""

    def __init__(self) -> None:
        body = PETSTORE.read_bytes()
        self.hits: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                outer.hits.append(self.path)
                status, payload = (200, body) if self.path == "/spec.yaml" else (404, b"no")
                self.send_response(status)
                self.send_header("Content-Type", "application/yaml")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/spec.yaml"

    def __enter__(self) -> _SpecServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


def test_import_openapi_fetches_a_spec_from_an_http_url(data: Path) -> None:
    with _SpecServer() as spec:
        try:
            done = cli(data, "import", "openapi", spec.url, "--slug", "fetched", "--json", env=LOCAL)
            assert done.returncode == 0, done.stderr
            report = json.loads(done.stdout)
            assert (report["tool_count"], report["dry_run"], report["source"]) == (3, False, spec.url)
            assert spec.hits == ["/spec.yaml"]
        finally:
            cli(data, "toolkits", "remove", "fetched")


def test_toolkits_remove_removes_the_toolkit_and_its_tools(data: Path, tmp_path: Path) -> None:
    catalog = tmp_path / "c.jsonl"
    catalog.write_text(json.dumps({"toolkit": "t", "name": "zap", "description": "zap", "input_schema": {}}))
    assert cli(data, "import", "catalog", str(catalog), "--slug", "scratch").returncode == 0
    done = cli(data, "toolkits", "remove", "scratch")
    assert done.returncode == 0, done.stderr
    assert "1 tools" in done.stdout
    assert "scratch" not in toolkit_slugs(data)
    again = cli(data, "toolkits", "remove", "scratch")
    assert again.returncode == 1
    assert "scratch" in again.stderr


# -- search, call, eval -----------------------------------------------------------------------


def test_search_ranks_list_pets_first_for_list_all_pets(data: Path) -> None:
    done = cli(data, "search", "list all pets", "--json")
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)["results"]
    assert results[0]["name"] == "petstore__listPets"
    assert results[0]["runner"] == "use_tool"


def test_call_reaches_the_upstream_and_prints_its_json(data: Path, upstream: PetstoreUpstream) -> None:
    seen = len(upstream.requests)
    done = cli(data, "call", "petstore__listPets", "--input", '{"limit": 1}', env=LOCAL)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [{"id": 1, "name": "Rex", "tag": "dog"}]
    sent = upstream.requests[seen:]
    assert [(r.method, r.path, r.query) for r in sent] == [("GET", "/v1/pets", {"limit": ["1"]})]


def test_call_of_an_unknown_tool_exits_1_naming_it(data: Path) -> None:
    done = cli(data, "call", "petstore__nope", env=LOCAL)
    assert done.returncode == 1
    assert "petstore__nope" in done.stderr
    assert done.stdout == ""
    assert "did you mean" not in done.stderr  # nothing is close to "nope"


def test_call_of_a_misspelt_tool_suggests_the_close_names(data: Path) -> None:
    done = cli(data, "call", "petstore__listPet", env=LOCAL)
    assert done.returncode == 1
    assert "did you mean 'petstore__listPets'?" in done.stderr
    slugless = cli(data, "call", "showPetById", env=LOCAL)
    assert "did you mean 'petstore__showPetById'?" in slugless.stderr


@pytest.mark.parametrize("raw", ["[1]", "not json"])
def test_call_with_input_that_is_not_a_json_object_exits_2(
    data: Path, upstream: PetstoreUpstream, raw: str
) -> None:
    seen = len(upstream.requests)
    done = cli(data, "call", "petstore__listPets", "--input", raw, env=LOCAL)
    assert done.returncode == 2
    assert "--input" in done.stderr
    assert len(upstream.requests) == seen


def test_a_catalogue_tool_is_searchable_but_calling_it_says_it_has_no_upstream(
    data: Path, tmp_path: Path
) -> None:
    schema = {"type": "object", "properties": {"city": {"type": "string"}}}
    rows = [
        {
            "toolkit": "weather",
            "name": "current_weather",
            "description": "Weather now in a city",
            "input_schema": schema,
        },
        {
            "toolkit": "weather",
            "name": "forecast",
            "description": "Five-day forecast for a city",
            "input_schema": schema,
        },
        {
            "toolkit": "weather",
            "name": "alerts",
            "description": "Storm alerts for a region",
            "input_schema": {},
        },
    ]
    catalog = tmp_path / "weather.jsonl"
    catalog.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    try:
        done = cli(data, "import", "catalog", str(catalog), "--slug", "weather", "--json")
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["tool_count"] == 3
        found = json.loads(cli(data, "search", "storm alerts", "--json").stdout)["results"]
        assert found[0]["name"] == "weather__alerts"

        called = cli(data, "call", "weather__forecast", "--input", '{"city": "Oslo"}', "--json")
        assert called.returncode == 1
        result = json.loads(called.stdout)
        assert result["isError"] is True
        assert result["meta"]["reason"] == "no_upstream"
        assert "no upstream" in result["content"][0]["text"]
    finally:
        cli(data, "toolkits", "remove", "weather")


def test_eval_prints_recall_ndcg_and_mrr(data: Path, tmp_path: Path) -> None:
    queries = tmp_path / "q.jsonl"
    queries.write_text(
        json.dumps({"id": "a", "query": "list all pets", "gold": ["petstore__listPets"]})
        + "\n"
        + json.dumps({"id": "b", "query": "create a pet", "gold": ["petstore/createPets"]})
        + "\n"
    )
    text = cli(data, "eval", str(queries))
    assert text.returncode == 0, text.stderr
    for metric in ("recall@1", "recall@10", "ndcg@10", "mrr"):
        assert re.search(rf"^\s+{re.escape(metric)}\s+\d\.\d{{3}}$", text.stdout, re.M), text.stdout

    done = cli(data, "eval", str(queries), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["queries"] == 2
    for metric in ("recall@1", "recall@5", "recall@10", "ndcg@10", "mrr"):
        assert 0.0 <= summary[metric] <= 1.0
    assert summary["recall@10"] == 1.0
    assert summary["mrr"] > 0.5


def test_eval_from_usage_scores_the_logged_searches_that_led_to_a_call(data: Path) -> None:
    empty = cli(data, "eval", "--from-usage")
    assert empty.returncode == 1 and "no search that led to a call" in empty.stderr, empty.stderr
    assert cli(data, "eval").returncode == 2  # a queries file or --from-usage, one of them

    async def log() -> None:
        db = Database(data / "toolspoke.db")
        await db.open(default_migrations_dir())
        try:
            found = ["petstore__listPets", "petstore__createPets"]
            rows = [
                usage.Searched(1.0, 1, 2, "a (u)", "list all pets", found, "petstore__listPets", 9, 1),
                usage.Searched(2.0, 1, 2, "a (u)", "create a pet", found, "petstore__createPets", 9, 2),
                usage.Searched(3.0, 1, 2, "a (u)", "<b>nothing</b>", []),
            ]
            await db.writing(lambda w: usage.insert_in(w, rows))
        finally:
            await db.close()

    asyncio.run(log())
    text = cli(data, "eval", "--from-usage")
    assert text.returncode == 0, text.stderr
    assert "from the usage log: 3 searches, 2 led to a call (scored), 1 misses" in text.stdout
    for metric in ("recall@1", "ndcg@10", "mrr"):
        assert re.search(rf"^\s+{re.escape(metric)}\s+\d\.\d{{3}}$", text.stdout, re.M), text.stdout
    summary = json.loads(cli(data, "eval", "--from-usage", "--json").stdout)
    assert summary["queries"] == 2 and summary["usage"] == {"searches": 3, "called": 2, "misses": 1}
    assert summary["recall@10"] == 1.0  # each called tool is found by the current ranking


def test_eval_of_a_malformed_queries_file_exits_2(data: Path, tmp_path: Path) -> None:
    queries = tmp_path / "q.jsonl"
    queries.write_text('{"query": "x"}\n')
    done = cli(data, "eval", str(queries))
    assert done.returncode == 2
    assert "gold" in done.stderr


def test_code_runs_a_script_through_the_pipeline_and_prints_its_logs_and_result(
    data: Path, upstream: PetstoreUpstream, tmp_path: Path
) -> None:
    script = tmp_path / "pets.js"
    script.write_text(
        "const pets = await petstore__listPets({ limit: 1 });\n"
        "console.log('pets', pets.length);\n"
        "return pets.map((p) => p.name);\n",
        encoding="utf-8",
    )
    on = {**LOCAL, "TOOLSPOKE_CODE_TOOLS": "1"}
    seen = len(upstream.requests)
    done = cli(data, "code", str(script), env=on)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "pets 1" and json.loads(
        "\n".join(done.stdout.splitlines()[1:])
    ) == ["Rex"]
    assert [r.path for r in upstream.requests[seen:]] == ["/v1/pets"]
    write = tmp_path / "write.js"
    write.write_text("return await petstore__createPets({});", encoding="utf-8")
    refused = cli(data, "code", str(write), "--json", env=on)
    assert refused.returncode == 1
    value = json.loads(refused.stdout)["structuredContent"]
    assert value["reason"] == "script_error" and value["calls"] == [
        {"tool": "petstore__createPets", "outcome": "wrong_runner"}
    ]
    off = cli(data, "code", str(script), env=LOCAL)
    assert off.returncode == 1 and "unknown tool 'use_code'" in off.stderr  # off unless turned on
    empty = tmp_path / "empty.js"
    empty.write_text("  \n", encoding="utf-8")
    assert cli(data, "code", str(empty), env=on).returncode == 2
