"""Every refused tool call leaves its audit row, on every face (issue 16 item 11).

One real ``toolspoke serve``; one agent key per (face, refusal), so each attempt's row is
found by its key prefix. Faces: the ``/mcp`` bridge runners, a direct ``tools/call`` on
``/mcp``, ``/mcp/<slug>``, ``toolspoke stdio`` and ``toolspoke call --key``. Refusals:
an unknown tool, the wrong runner, arguments that fail validation, a toolkit the caller
has no grant for, the rate limit and a toolkit's exhausted quota. Each attempt leaves
exactly one row with the refusal's outcome, naming the toolkit whenever the caller may see
the tool: a throttled attempt too, which used to be filed under no toolkit at all, so an
owner's history filtered by toolkit missed it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.accounts import MeteredUpstream, add_user_keys, admin, credits_path, install, query
from tests.support.clients import modern_tools_call
from tests.support.servers import REPO, Appliance, cli, running_appliance

pytestmark = pytest.mark.e2e

RATE = 3  # calls per window: the rate-limit case spends them, then is refused
ENV = {
    "TOOLSPOKE_DEMO": "0",
    "TOOLSPOKE_HEALTH_INTERVAL_S": "0",
    "TOOLSPOKE_IMPORTS_PER_HOUR": "1000",
    "TOOLSPOKE_RATE_LIMIT": str(RATE),
    "TOOLSPOKE_RATE_LIMIT_WINDOW_S": "3600",
}
LOOPBACK = {**ENV, "ALLOWED_TOOL_CIDRS": "127.0.0.1/32"}  # the CLI and stdio processes too

# case -> (tool as a direct call names it, arguments, expected outcome, toolkit in the row)
CASES: dict[str, tuple[str, dict[str, Any], str, str | None]] = {
    "unknown": ("meter__nope", {}, "invalid", None),
    "invalid": ("meter__need", {}, "invalid", "meter"),
    "no_grant": ("hidden__hit", {}, "invalid", None),  # answered exactly like an unknown name
    "rate_limit": ("meter__hit", {}, "rate_limited", "meter"),
    "quota": ("capped__hit", {}, "quota", "capped"),
}
BRIDGE_ONLY = {"wrong_runner": ("meter__hit", {}, "invalid", "meter")}
FACES = ("bridge", "direct", "slug", "stdio", "cli")


@contextmanager
def refusal_world(
    data: Path, pairs: list[tuple[str, str]]
) -> Iterator[tuple[Appliance, dict[tuple[str, str], str]]]:
    """A serve with the refusals' toolkits (meter; capped, its day spent; hidden, the admin's
    own) and one agent key of a user with credits for each (face, case) pair."""
    upstream = MeteredUpstream()
    try:
        with running_appliance(data, env=ENV) as app:
            install(app, "meter", upstream, fee=1)
            install(app, "capped", upstream, fee=1, daily_limit=1)
            r = admin(app, "POST", "/toolkits/openapi", {"slug": "hidden", "spec": upstream.spec()})
            assert r.status_code == 201, r.text  # the admin's own, private: no grant for others
            made = add_user_keys(data, "caller", len(pairs) + 1, agents=True)
            assert admin(app, "POST", credits_path(app, "caller"), {"amount": 1000}).status_code == 201
            keys = dict(zip(pairs, made, strict=False))
            # Spend the capped toolkit's one call of the day.
            headers, body = modern_tools_call(made[-1], "capped__hit")
            assert "result" in httpx.post(app.mcp_url, json=body, headers=headers, timeout=30).json()
            yield app, keys
    finally:
        upstream.close()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Appliance, dict[tuple[str, str], str]]]:
    pairs = [(f, c) for f in FACES for c in [*CASES, *BRIDGE_ONLY] if c in CASES or f == "bridge"]
    with refusal_world(tmp_path_factory.mktemp("refusals") / "data", pairs) as world:
        yield world


def _request(face: str, case: str, tool: str, arguments: dict[str, Any]) -> tuple[str, dict[str, Any], str]:
    """(endpoint path, tools/call name, arguments) for one face."""
    if face == "bridge":
        runner = "run_destructive_tool" if case == "wrong_runner" else "use_tool"
        return "/mcp", {"tool": tool, "input": arguments}, runner
    if face == "slug":
        kit, _, own = tool.partition("__")
        return f"/mcp/{kit if case != 'unknown' else 'meter'}", arguments, own
    return "/mcp", arguments, tool


def _attempt(app: Appliance, face: str, case: str, key: str, tool: str, arguments: dict[str, Any]) -> None:
    path, args, name = _request(face, case, tool, arguments)
    tries = RATE + 1 if case == "rate_limit" else 1
    if face == "cli":
        for _ in range(tries):
            done = cli(app.data_dir, "call", name, "--input", json.dumps(args), "--key", key, env=LOOPBACK)
            assert done.returncode != 0 or case == "rate_limit", done.stdout + done.stderr
        return
    _, body = modern_tools_call(key, name, args)
    if face == "stdio":
        lines = "".join(json.dumps({**body, "id": i}) + "\n" for i in range(tries))
        done = subprocess.run(
            [sys.executable, "-m", "appliance", "stdio"],
            input=lines,
            capture_output=True,
            text=True,
            timeout=60,
            cwd=REPO,
            env={
                **LOOPBACK,
                "PATH": "/usr/bin:/bin",
                "TOOLSPOKE_DATA_DIR": str(app.data_dir),
                "TOOLSPOKE_API_KEY": key,
            },
            check=False,
        )
        answers = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        assert len(answers) == tries, done.stdout + done.stderr
        return
    headers, _ = modern_tools_call(key, name, args)
    for i in range(tries):
        r = httpx.post(app.base_url + path, json={**body, "id": i}, headers=headers, timeout=30)
        assert r.status_code < 500, r.text


Attempt = Callable[[str, str, str, dict[str, Any]], None]  # (case, key, tool, arguments)


def refusals_without_their_row(
    app: Appliance, keys: dict[tuple[str, str], str], face: str, attempt: Attempt, skip: Callable[[str], bool]
) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """Each case of ``face`` attempted with its own key; the cases whose rows are not exactly
    one refusal row with the expected outcome and toolkit, with the rows found."""
    missing = []
    for case, (tool, arguments, outcome, toolkit) in {**CASES, **BRIDGE_ONLY}.items():
        key = keys.get((face, case))
        if key is None or skip(case):
            continue
        attempt(case, key, tool, arguments)
        rows = query(
            app.data_dir,
            "SELECT outcome, toolkit FROM audit_log WHERE key_prefix = ? ORDER BY id",
            (key[:12],),
        )
        refused = [r for r in rows if r[0] != "ok" and r[0] != "is_error"]
        if [tuple(r) for r in refused] != [(outcome, toolkit)]:
            missing.append((case, rows))
    return missing


@pytest.mark.parametrize("face", FACES)
def test_each_refusal_leaves_one_audit_row_naming_what_the_caller_may_see(
    world: tuple[Appliance, dict[tuple[str, str], str]], face: str
) -> None:
    app, keys = world
    missing = refusals_without_their_row(
        app,
        keys,
        face,
        lambda case, key, tool, arguments: _attempt(app, face, case, key, tool, arguments),
        # Each CLI run is its own process with a full bucket: nothing to throttle.
        skip=lambda case: face == "cli" and case == "rate_limit",
    )
    assert not missing, f"{face}: refusals without their one audit row: {missing}"
