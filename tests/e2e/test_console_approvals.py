"""An approval out of band (issue 20) in a real browser: Debian's headless Chromium, driven by
Playwright, against a real ``toolspoke serve`` and a real HTTP upstream that counts requests.

The upstream's ``need`` tool is made destructive and its toolkit's destructive tools need
approval. An agent's call waits (nothing sent, nothing charged); the admin approves it on the
console's queue, where its arguments (a script among them) show as text; the agent's retry
with the approval's id runs exactly once (one request upstream, one fee). A second use, a
retry with changed arguments, another agent's retry and a retry after the approval expired
are refused with nothing sent and nothing charged. The same flow in process, on every face,
is ``tests/rpc/test_approvals.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import closing
from typing import Any

import httpx
import pytest
from playwright import sync_api

from tests.e2e import test_console_browser
from tests.e2e.test_console_browser import Watched
from tests.support.accounts import MeteredUpstream, admin, install, open_db, query
from tests.support.clients import modern_tools_call
from tests.support.servers import Appliance, running_appliance

pytestmark = pytest.mark.e2e

ENV = {"TOOLSPOKE_DEMO": "0", "TOOLSPOKE_HEALTH_INTERVAL_S": "0"}
HOSTILE = "<img src=x onerror=window.__pwned=1>"
expect = sync_api.expect
browser = test_console_browser.browser  # Chromium, started the one way the console tests start it


@pytest.fixture(scope="module")
def upstream() -> Iterator[MeteredUpstream]:
    served = MeteredUpstream()
    try:
        yield served
    finally:
        served.close()


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, upstream: MeteredUpstream) -> Iterator[Appliance]:
    with running_appliance(tmp_path_factory.mktemp("console-approvals") / "data", env=ENV) as running:
        install(running, "gate", upstream, fee=1)
        for method, path, body in (
            ("POST", "/tools/gate__need/kind", {"kind": "destructive"}),
            ("PUT", "/toolkits/gate/policy", {"kind": "destructive", "action": "approve"}),
            ("POST", "/users", {"name": "pat"}),
        ):
            assert admin(running, method, path, body).status_code in (200, 201)
        yield running


def keys_of(app: Appliance) -> dict[str, str]:
    uid = int(query(app.data_dir, "SELECT id FROM users WHERE name = 'pat'")[0][0])
    assert admin(app, "POST", f"/users/{uid}/credits", {"amount": 10}).status_code == 201
    keys = {}
    for name in ("bot", "other"):
        agent = admin(app, "POST", "/agents", {"name": name, "user_id": uid}).json()["id"]
        keys[name] = admin(app, "POST", "/keys", {"agent_id": agent}).json()["key"]
    return keys


def call(app: Appliance, key: str, q: str, approval: str | None = None) -> dict[str, Any]:
    headers, body = modern_tools_call(key, "gate__need", {"q": q})
    if approval is not None:
        body["params"]["_meta"]["toolspoke/approval"] = approval
    answer = httpx.post(app.mcp_url, json=body, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()["result"]
    return result


def reason(result: dict[str, Any]) -> Any:
    return result.get("_meta", {}).get("toolspoke/reason")


def balance(app: Appliance) -> int:
    rows = query(
        app.data_dir,
        "SELECT coalesce(sum(amount_milli), 0) FROM ledger_entries WHERE user_id = (SELECT id FROM users"
        " WHERE name = 'pat')",
    )
    return int(rows[0][0])


def approve_in_console(app: Appliance, page: Any, approval: str) -> None:
    page.goto(app.base_url + "/console/approvals")
    row = page.locator(f"tr[id='{approval}']")
    expect(row).to_contain_text("gate__need")
    page.get_by_role("button", name=f"Approve gate__need ({approval})").click()
    expect(page.get_by_role("status")).to_contain_text("Approved")


def test_a_pending_destructive_call_approved_in_the_console_runs_exactly_once_and_no_other_retry_runs(
    app: Appliance, upstream: MeteredUpstream, browser: Any
) -> None:
    keys = keys_of(app)
    watched = Watched(browser)
    page = watched.page
    try:
        waiting = call(app, keys["bot"], HOSTILE)
        assert waiting["isError"] and reason(waiting) == "approval_required", waiting
        approval = waiting["_meta"]["toolspoke/approval"]["id"]
        assert waiting["_meta"]["toolspoke/approval"]["url"] == f"/console/approvals#{approval}"
        assert upstream.paths["/need"] == 0 and balance(app) == 10_000

        page.goto(app.base_url + "/")
        page.get_by_label("Your API key").fill(app.key)
        page.get_by_role("button", name="Sign in").click()
        page.wait_for_url("**/console/toolkits")
        page.get_by_role("link", name="Approvals", exact=True).click()
        row = page.locator(f"tr[id='{approval}']")
        expect(row.locator("pre.arguments")).to_have_text(f'{{"q":"{HOSTILE}"}}')  # text, never markup
        expect(row).to_contain_text("agent bot of pat")
        approve_in_console(app, page, approval)
        watched.assert_nothing_ran()

        # before it runs: changed arguments and another agent are refused, and use nothing up
        refusals = {
            "approval_mismatch": call(app, keys["bot"], "other words", approval),
            "approval_unknown": call(app, keys["other"], HOSTILE, approval),
        }
        ran = call(app, keys["bot"], HOSTILE, approval)
        assert ran["isError"] is False, ran
        assert upstream.paths["/need"] == 1 and balance(app) == 9_000  # one request, one fee
        refusals["approval_used"] = call(app, keys["bot"], HOSTILE, approval)
        # an approval that expires between the yes and the retry
        late = call(app, keys["bot"], "later")["_meta"]["toolspoke/approval"]["id"]
        approve_in_console(app, page, late)
        with closing(open_db(app.data_dir)) as db, db:
            db.execute("UPDATE approvals SET expires_at = ? WHERE id = ?", (time.time() - 1, late))
        refusals["approval_expired"] = call(app, keys["bot"], "later", late)
        for expected, result in refusals.items():
            assert result["isError"] and reason(result) == expected, (expected, result)
        assert upstream.paths["/need"] == 1 and balance(app) == 9_000  # nothing sent, nothing charged

        page.goto(app.base_url + "/console/toolkits/default/gate")
        history = page.locator("section[aria-labelledby=history]")
        for shown in ("approval_granted", "approval_used", "approval_expired"):
            expect(history).to_contain_text(shown)
        watched.assert_nothing_ran()
    finally:
        page.close()
