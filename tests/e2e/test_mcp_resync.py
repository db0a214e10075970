"""Re-sync on a real ``toolspoke serve``, with a real SDK upstream whose tool set the test
changes: a ``tools/list_changed`` notice on the upstream's stream re-syncs the toolkit in the
background, after an import by the CLI as a process.

Re-sync, approval and reclassification through the admin API are tested in process
(tests/web/test_admin_sync.py).
"""

from __future__ import annotations

import asyncio
import json
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.clients import connect
from tests.support.peers import free_port, peer
from tests.support.resync import DYNAMIC, outcome
from tests.support.servers import Appliance, cli, running_appliance

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Appliance]:
    with running_appliance(tmp_path_factory.mktemp("resync") / "data") as running:
        yield running


def import_mcp(app: Appliance, url: str, slug: str) -> dict[str, Any]:
    env = {"ALLOWED_TOOL_CIDRS": "127.0.0.1/32"}
    done = cli(app.data_dir, "import", "mcp", "--json", url, "--slug", slug, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def admin(app: Appliance) -> httpx.Client:
    return httpx.Client(
        base_url=app.base_url + "/api/v1", headers={"Authorization": f"Bearer {app.key}"}, timeout=60
    )


def ok(resp: httpx.Response) -> Any:
    assert resp.status_code == 200, resp.text
    return resp.json()


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=60))


def test_a_tools_list_changed_notification_resyncs_the_toolkit_in_the_background(
    app: Appliance, tmp_path: Path
) -> None:
    port = free_port()
    control = tmp_path / "toolset.json"
    control.write_text(json.dumps({"tools": ["alpha", "mutate"]}))
    argv = [sys.executable, str(DYNAMIC), "--port", str(port), "--sse"]
    with peer(argv, port, tmp_path / "upstream.log", env={"TOOLSET_FILE": str(control)}), admin(app) as api:
        import_mcp(app, f"http://127.0.0.1:{port}/sse", "dyn4")

        async def announce() -> None:
            async with connect(app) as client:
                # The call's answer is not held up by the re-sync its notification triggers.
                called = await outcome(
                    client, "run_tool", {"tool": "dyn4__mutate", "input": {"tools": ["beta", "mutate"]}}
                )
                assert called == (False, "changed")

        run(announce())
        # The scheduler re-syncs about a second (its debounce) after the notice: poll, bounded.
        deadline = time.monotonic() + 20
        while True:
            pending = [p["name"] for p in ok(api.get("/toolkits/dyn4/pending"))["pending"]]
            if pending or time.monotonic() > deadline:
                break
            threading.Event().wait(0.1)
        assert pending == ["dyn4__beta"]
        report = ok(api.post("/toolkits/dyn4/sync"))  # alpha was disabled by the background re-sync
        assert report["removed"] == [] and report["pending"] == ["dyn4__beta"]
        assert ok(api.delete("/toolkits/dyn4"))["deleted"] == "dyn4"  # closes the pooled SSE session
