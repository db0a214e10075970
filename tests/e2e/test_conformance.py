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
from pathlib import Path

import pytest

from tests.support import conformance as suite
from tests.support.auth_proxy import AuthProxy
from tests.support.peers import free_port, peer
from tests.support.servers import REPO, cli, running_appliance

pytestmark = pytest.mark.e2e
FIXTURE = REPO / "tests" / "support" / "conformance_server.py"
CLIENT = REPO / "tests" / "support" / "conformance_client.py"
ENDPOINTS = {"/mcp/conformance": "/mcp/conformance", "bridge /mcp": "/mcp"}
# The authorization scenarios (issue 19): the upstream client with its OAuth connector.
AUTH_SCENARIOS = tuple(
    f"auth/{name}"
    for name in (
        "metadata-default",
        "metadata-var1",
        "metadata-var2",
        "metadata-var3",
        "basic-cimd",
        "scope-from-www-authenticate",
        "scope-from-scopes-supported",
        "scope-omitted-when-undefined",
        "scope-step-up",
        "scope-retry-limit",
        "token-endpoint-auth-basic",
        "token-endpoint-auth-post",
        "token-endpoint-auth-none",
        "pre-registration",
        "2025-03-26-oauth-metadata-backcompat",
        "2025-03-26-oauth-endpoint-fallback",
        "resource-mismatch",
        "offline-access-scope",
        "offline-access-not-supported",
        "authorization-server-migration",
        "iss-supported",
        "iss-not-advertised",
        "iss-supported-missing",
        "iss-wrong-issuer",
        "iss-unexpected",
        "iss-normalized",
        "metadata-issuer-mismatch",
        "client-credentials-basic",
        "client-credentials-jwt",
        "wif-jwt-bearer",
        "dpop",
        "dpop-nonce",
        "enterprise-managed-authorization",
    )
)
CLIENT_SCENARIOS = ("initialize", "tools_call", "sse-retry", *AUTH_SCENARIOS)
# Scenarios whose client is expected to stop (the suite allows it): a refusal is the pass.
CLIENT_MAY_FAIL = {
    "auth/scope-retry-limit",
    "auth/resource-mismatch",
    "auth/iss-supported-missing",
    "auth/iss-wrong-issuer",
    "auth/iss-unexpected",
    "auth/iss-normalized",
    "auth/metadata-issuer-mismatch",
}


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[AuthProxy, Path]]:
    """The gateway with the conformance fixture imported, behind the key-adding forwarder."""
    suite.environment()  # fails early, with the fix, when the npm peers are missing
    work = tmp_path_factory.mktemp("conformance")
    port = free_port()
    argv = [sys.executable, str(FIXTURE), "--port", str(port)]
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
            yield proxy, work


class Runs:
    """Each suite run once per module, whichever test asks for it first: one run per test
    keeps every test within the per-test timeout, and the checks across all runs (the
    baseline entries that matched nothing) reuse them."""

    def __init__(self, request: pytest.FixtureRequest, work: Path) -> None:
        self._request = request
        self._work = work
        self._done: dict[tuple[str, str], suite.Run] = {}

    def server(self, endpoint: str, spec: str) -> suite.Run:
        key = (endpoint, spec)
        if key not in self._done:
            proxy, work = self._request.getfixturevalue("served")
            path = ENDPOINTS[endpoint]
            out = work / f"server{path.replace('/', '-')}-{spec}"
            args = ["--url", proxy.url(path), "--suite", "all", "--spec-version", spec]
            self._done[key] = suite.run_suite("server", endpoint, spec, [*args, "--timeout", "15000"], out)
        return self._done[key]

    def client(self, scenario: str) -> suite.Run:
        key = ("client", scenario)
        if key not in self._done:
            out = self._work / f"client-{scenario.replace('/', '-')}"
            command = f"{shlex.quote(sys.executable)} {shlex.quote(str(CLIENT))}"
            args = ["--command", command, "--scenario", scenario, "--timeout", "20000"]
            self._done[key] = suite.run_suite("client", scenario, "(suite default)", args, out)
        return self._done[key]

    def every(self, mode: str) -> list[suite.Run]:
        if mode == "server":
            return [self.server(e, s) for e in ENDPOINTS for s in suite.SPEC_VERSIONS]
        return [self.client(scenario) for scenario in CLIENT_SCENARIOS]


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(request, tmp_path_factory.mktemp("conformance-client"))


def _judged(run: suite.Run, request: pytest.FixtureRequest) -> suite.Verdict:
    verdict = suite.judge(run, suite.load_baseline()[run.mode])
    request.config.stash.setdefault(suite.SUMMARY, []).append(suite.summary_line(run, verdict))
    return verdict


def _check(run: suite.Run, verdict: suite.Verdict) -> None:
    problems = [f"{run.label}: UNEXPECTED {u}" for u in verdict.unexpected]
    problems += [f"{run.label}: STALE baseline entry {s}" for s in verdict.stale]
    assert not problems, "\n".join(problems)


SERVER_RUNS = [pytest.param(e, s, id=f"{e}-{s}") for e in ENDPOINTS for s in suite.SPEC_VERSIONS]


@pytest.mark.parametrize(("endpoint", "spec"), SERVER_RUNS)
def test_server_scenarios_pass_on_the_toolkit_endpoint_and_the_bridge(
    runs: Runs, request: pytest.FixtureRequest, endpoint: str, spec: str
) -> None:
    run = runs.server(endpoint, spec)
    assert (run.endpoint, run.spec) == (endpoint, spec)
    verdict = _judged(run, request)
    # What a tool gateway owes its own clients, checked by name so the baseline cannot hide it.
    must_pass = {"tools-list", "tools-call-error", "dns-rebinding-protection", "tools-call-simple-text"}
    if run.endpoint == "/mcp/conformance":
        for scenario in must_pass:
            assert not run.failing(scenario), f"{run.label}: {scenario} fails"
    _check(run, verdict)


@pytest.mark.parametrize("scenario", CLIENT_SCENARIOS)
def test_client_scenarios_pass_with_the_gateway_as_the_client(
    runs: Runs, request: pytest.FixtureRequest, scenario: str
) -> None:
    run = runs.client(scenario)
    assert run.endpoint == scenario
    verdict = _judged(run, request)
    if scenario not in CLIENT_MAY_FAIL:
        assert run.returncode == 0, f"{run.label}:\n{run.output[-3000:]}"
    _check(run, verdict)


@pytest.mark.parametrize("mode", ["server", "client"])
def test_every_baseline_entry_matches_a_failure_in_some_run(runs: Runs, mode: str) -> None:
    baseline = suite.load_baseline()[mode]
    used = set().union(*(suite.judge(run, baseline).used for run in runs.every(mode)))
    unused = [f"baseline entry {key!r} matched no failure in any run" for key in baseline if key not in used]
    assert not unused, "\n".join(unused)


@pytest.mark.parametrize("mode", ["server", "client"])
def test_the_suite_ran_every_scenario_it_lists(runs: Runs, mode: str) -> None:
    """A scenario that silently stopped running would leave its baseline entry unjudged."""
    for run in runs.every(mode):
        assert run.scenarios, run.label
        for scenario, checks in run.scenarios.items():
            assert checks, f"{run.label}: {scenario} reported no checks"
