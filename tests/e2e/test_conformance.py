"""The official MCP conformance suite against the gateway, server mode and client mode.

Server mode: a real appliance with ``tests/support/conformance_server.py`` (the suite's
fixture names, on the official SDK) imported as the toolkit ``conformance``; the suite runs
against ``/mcp/conformance`` (the toolkit under its upstream names) and the bridge ``/mcp``,
at each spec version it knows. The suite cannot send headers, so a loopback forwarder adds
the gateway key and changes nothing else (``tests/support/auth_proxy.py``).

Client mode: the suite's scenario servers, with ``tests/support/conformance_client.py``
(a fresh gateway whose only upstream is the scenario server) as the client under test.

``tests/conformance-baseline.json`` lists what may fail and why (``docs/conformance.md``);
everything else must pass, and a baseline entry that passes is reported as stale. The
counts appear in the terminal summary of every run.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support import conformance as suite
from tests.support.auth_proxy import AuthProxy
from tests.support.peers import free_port, peer
from tests.support.servers import REPO, cli, running_appliance

pytestmark = pytest.mark.e2e
FIXTURE = REPO / "tests" / "support" / "conformance_server.py"
CLIENT = REPO / "tests" / "support" / "conformance_client.py"
ENDPOINTS = {"/mcp/conformance": "/mcp/conformance", "bridge /mcp": "/mcp"}
CLIENT_SCENARIOS = ("initialize", "tools_call", "sse-retry")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, suite.Run]]:
    suite.environment()  # fails early, with the fix, when the npm peers are missing
    work = tmp_path_factory.mktemp("conformance")
    port = free_port()
    argv = [sys.executable, str(FIXTURE), "--port", str(port)]
    results: dict[str, suite.Run] = {}
    with peer(argv, port, work / "fixture.log"), running_appliance(work / "data") as app:
        done = cli(
            app.data_dir,
            "import",
            "mcp",
            f"http://127.0.0.1:{port}/mcp",
            "--slug",
            "conformance",
            env={"ALLOWED_TOOL_CIDRS": "127.0.0.1/32"},
        )
        assert done.returncode == 0, done.stderr
        with AuthProxy(int(app.base_url.rsplit(":", 1)[1]), app.key) as proxy:
            for endpoint, path in ENDPOINTS.items():
                for spec in suite.SPEC_VERSIONS:
                    out = work / f"server{path.replace('/', '-')}-{spec}"
                    args = ["--url", proxy.url(path), "--suite", "all", "--spec-version", spec]
                    run = suite.run_suite("server", endpoint, spec, [*args, "--timeout", "15000"], out)
                    results[run.label] = run
    command = f"{shlex.quote(sys.executable)} {shlex.quote(str(CLIENT))}"
    for scenario in CLIENT_SCENARIOS:
        out = work / f"client-{scenario}"
        args = ["--command", command, "--scenario", scenario, "--timeout", "20000"]
        run = suite.run_suite("client", scenario, "(suite default)", args, out)
        results[run.label] = run
    yield results


def _judged(runs: dict[str, suite.Run], request: pytest.FixtureRequest, mode: str) -> list[Any]:
    baseline = suite.load_baseline()[mode]
    judged = [(run, suite.judge(run, baseline)) for run in runs.values() if run.mode == mode]
    lines = request.config.stash.setdefault(suite.SUMMARY, [])
    lines.extend(suite.summary_line(run, verdict) for run, verdict in judged)
    return judged


def _check(judged: list[Any], baseline: dict[str, Any]) -> None:
    problems = [f"{run.label}: UNEXPECTED {u}" for run, v in judged for u in v.unexpected]
    problems += [f"{run.label}: STALE baseline entry {s}" for run, v in judged for s in v.stale]
    used = set().union(*(v.used for _, v in judged))
    problems += [
        f"baseline entry {key!r} matched no failure in any run" for key in baseline if key not in used
    ]
    assert not problems, "\n".join(problems)


def test_server_scenarios_pass_on_the_toolkit_endpoint_and_the_bridge(
    runs: dict[str, suite.Run], request: pytest.FixtureRequest
) -> None:
    judged = _judged(runs, request, "server")
    assert {(run.endpoint, run.spec) for run, _ in judged} == {
        (e, s) for e in ENDPOINTS for s in suite.SPEC_VERSIONS
    }
    # What a tool gateway owes its own clients, checked by name so the baseline cannot hide it.
    must_pass = {"tools-list", "tools-call-error", "dns-rebinding-protection", "tools-call-simple-text"}
    for run, _ in judged:
        if run.endpoint == "/mcp/conformance":
            for scenario in must_pass:
                assert not run.failing(scenario), f"{run.label}: {scenario} fails"
    _check(judged, suite.load_baseline()["server"])


def test_client_scenarios_pass_with_the_gateway_as_the_client(
    runs: dict[str, suite.Run], request: pytest.FixtureRequest
) -> None:
    judged = _judged(runs, request, "client")
    assert {run.endpoint for run, _ in judged} == set(CLIENT_SCENARIOS)
    for run, _ in judged:
        assert run.returncode == 0, f"{run.label}:\n{run.output[-3000:]}"
    _check(judged, suite.load_baseline()["client"])


def test_the_suite_ran_every_scenario_it_lists(runs: dict[str, suite.Run]) -> None:
    """A scenario that silently stopped running would leave its baseline entry unjudged."""
    for run in runs.values():
        assert run.scenarios, run.label
        for scenario, checks in run.scenarios.items():
            assert checks, f"{run.label}: {scenario} reported no checks"
