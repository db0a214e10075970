"""The admin console over HTTP, in process (web/console/): its headers on every answer, the
sign-in and its session cookie, CSRF on every POST, Origin checks, who sees which toolkit
(page, fragment, detail, approval), hostile upstream text escaped, the static files.

The browser's own view (scripts that must not run, the cookie script cannot read, focus)
is ``tests/e2e/test_console_browser.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from appliance.gateway import imports
from tests.support import hostile_pages, worlds
from tests.support.clients import modern_tools_call
from tests.support.inprocess import InProcess, served_in_process
from tests.support.resync import dynamic_upstream
from tests.support.servers import import_mcp as cli_import_mcp
from tests.support.servers import sandbox_reading
from tests.support.worlds import KitSpec, World

pytestmark = pytest.mark.inprocess

WORLD = World(
    users=[False, False],  # u0 (ann) and u1 (bob), neither an admin
    agents=[0],
    kits=[
        KitSpec("alpha", "default", owner=0, active=[True, False, False]),
        KitSpec("bravo", "default", owner=1, visibility="published", active=[True, False]),
        KitSpec("charlie", "ops", owner=1, active=[False]),
    ],
)
CSP_PARTS = ("default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'")


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    folder = tmp_path_factory.mktemp("console")
    env = {"TOOLSPOKE_HEALTH_INTERVAL_S": "0", **sandbox_reading(folder / "tools")}
    with served_in_process(folder / "data", env=env) as served:
        built = served.run(worlds.build(served.rt, WORLD))
        served.ctx = built  # type: ignore[attr-defined]
        ann = served.run(worlds.principal(served.rt, built.user_keys[0]))
        spec = json.dumps(hostile_pages.openapi_spec()).encode()
        served.run(imports.import_openapi(served.rt, "request body", slug="hostile", data=spec, importer=ann))
        served.run(
            imports.import_mcp(
                served.rt,
                hostile_pages.mcp_connection(folder / "tools"),
                slug="hostile-mcp",
                approve_new=True,
                importer=ann,
            )
        )
        yield served


def keys(app: InProcess) -> worlds.Built:
    return app.ctx  # type: ignore[attr-defined, no-any-return]


CSRF = re.compile(r'name="csrf" value="([^"]*)"')


def csrf_of(page: httpx.Response) -> str:
    found = CSRF.search(page.text)
    assert found, page.text[:500]
    return found.group(1)


def signed_in(app: InProcess, key: str) -> tuple[httpx.Client, str]:
    """A browser-like client signed in with ``key``, and its session's CSRF token."""
    client = app.client(timeout=10)
    form = client.get("/console/sign-in")
    done = client.post("/console/sign-in", data={"key": key, "csrf": csrf_of(form)})
    assert done.status_code == 303 and done.headers["location"] == "/console/toolkits", done.text[:300]
    page = client.get("/console/toolkits")
    assert page.status_code == 200
    return client, csrf_of(page)


def assert_console_headers(resp: httpx.Response) -> None:
    csp = resp.headers.get("content-security-policy", "")
    assert all(part in csp for part in CSP_PARTS), csp
    assert "unsafe-inline" not in csp and "unsafe-eval" not in csp
    assert resp.headers.get("x-frame-options") == "DENY"
    assert resp.headers.get("x-content-type-options") == "nosniff"
    assert resp.headers.get("referrer-policy") in ("same-origin", "no-referrer")


# -- headers, redirects, the sign-in ------------------------------------------------------------


def test_every_console_answer_carries_its_security_headers(app: InProcess) -> None:
    anonymous = app.client(timeout=10)
    root = anonymous.get("/")
    assert root.status_code == 303 and root.headers["location"] == "/console/"
    answers = [
        anonymous.get("/console/"),
        anonymous.get("/console/toolkits"),
        anonymous.get("/console/sign-in"),
        anonymous.get("/console/static/htmx.min.js"),
        anonymous.get("/console/static/nope.js"),
        anonymous.get("/console/no/such/page/at/all"),
        anonymous.post("/console/sign-out", data={"csrf": "x"}),
    ]
    for resp in answers:
        assert_console_headers(resp)
    assert [r.status_code for r in answers] == [303, 303, 200, 200, 404, 404, 401]
    assert answers[5].headers["content-type"].startswith("text/html")  # a page, not JSON
    assert "cache-control" in answers[2].headers and "no-store" in answers[2].headers["cache-control"]


def test_a_users_key_signs_in_to_an_httponly_strict_cookie_and_a_wrong_or_agent_key_does_not(
    app: InProcess,
) -> None:
    client = app.client(timeout=10)
    form = client.get("/console/sign-in")
    token = csrf_of(form)
    for key, status in (("tsk_wrong-key-0123456789abcdefghijklmnopqr", 401), (keys(app).agent_keys[0], 403)):
        refused = client.post("/console/sign-in", data={"key": key, "csrf": token})
        assert refused.status_code == status
        assert "toolspoke_console" not in refused.headers.get("set-cookie", "")
        assert 'role="alert"' in refused.text
        token = csrf_of(refused)
    done = client.post("/console/sign-in", data={"key": keys(app).user_keys[0], "csrf": token})
    assert done.status_code == 303
    cookie = next(c for c in done.headers.get_list("set-cookie") if c.startswith("toolspoke_console="))
    parts = {p.strip().lower() for p in cookie.split(";")}
    assert {"httponly", "samesite=strict", "path=/console"} <= parts
    assert "secure" not in parts  # plain http: a Secure cookie would never come back
    assert keys(app).user_keys[0] not in cookie


def test_the_session_cookie_is_secure_over_tls(app: InProcess) -> None:
    client = app.client(timeout=10)
    tls = app.base_url.replace("http://", "https://") + "/console/sign-in"
    form = client.get(tls)
    done = client.post(tls, data={"key": keys(app).user_keys[0], "csrf": csrf_of(form)})
    cookie = next(c for c in done.headers.get_list("set-cookie") if c.startswith("toolspoke_console="))
    assert "secure" in {p.strip().lower() for p in cookie.split(";")}


def test_a_sign_in_without_its_form_token_or_from_another_site_opens_nothing(app: InProcess) -> None:
    client = app.client(timeout=10)
    form = client.get("/console/sign-in")
    key = keys(app).user_keys[0]
    no_token = client.post("/console/sign-in", data={"key": key})
    wrong = client.post("/console/sign-in", data={"key": key, "csrf": "forged"})
    elsewhere = client.post(
        "/console/sign-in",
        data={"key": key, "csrf": csrf_of(form)},
        headers={"Origin": "https://evil.example"},
    )
    cross = client.post(
        "/console/sign-in", data={"key": key, "csrf": csrf_of(form)}, headers={"Sec-Fetch-Site": "cross-site"}
    )
    for resp in (no_token, wrong, elsewhere, cross):
        assert resp.status_code == 403
        assert "toolspoke_console" not in resp.headers.get("set-cookie", "")
    assert client.get("/console/toolkits").status_code == 303  # still signed out


def test_signing_out_ends_the_session_for_its_cookie_too(app: InProcess) -> None:
    client, csrf = signed_in(app, keys(app).user_keys[1])
    held = client.cookies.get("toolspoke_console")
    assert held
    out = client.post("/console/sign-out", data={"csrf": csrf})
    assert out.status_code == 303 and out.headers["location"] == "/console/sign-in"
    replay = app.client(timeout=10, cookies={"toolspoke_console": held})
    assert replay.get("/console/toolkits").status_code == 303  # the old cookie opens nothing
    fragment = replay.get("/console/toolkits", headers={"HX-Request": "true"})
    assert fragment.status_code == 401 and fragment.headers["hx-redirect"] == "/console/sign-in"


# -- CSRF ---------------------------------------------------------------------------------------


def _pending(app: InProcess, client: httpx.Client, path: str) -> list[str]:
    page = client.get(path)
    assert page.status_code == 200
    approvals = (
        r'action="[^"]*/approve">\s*<input[^>]*name="csrf"[^>]*>\s*'
        r'<input type="hidden" name="tool" value="([^"]+)"'
    )
    return re.findall(approvals, page.text)


def test_a_post_without_or_with_a_wrong_csrf_token_changes_nothing(app: InProcess) -> None:
    client, csrf = signed_in(app, keys(app).user_keys[0])
    path = "/console/toolkits/default/alpha"
    before = _pending(app, client, path)
    assert before == ["alpha__t1", "alpha__t2"]
    _, other_csrf = signed_in(app, keys(app).user_keys[0])  # another session of the same user
    for data in (
        {"tool": "alpha__t1"},
        {"tool": "alpha__t1", "csrf": "0" * 64},
        {"all": "1", "csrf": other_csrf},
    ):
        refused = client.post(path + "/approve", data=data)
        assert refused.status_code == 403 and "CSRF" in refused.text
        assert_console_headers(refused)
    assert _pending(app, client, path) == before
    done = client.post(path + "/approve", data={"tool": "alpha__t1", "csrf": csrf})
    assert done.status_code == 303 and done.headers["location"] == path + "?done=approved&n=1"
    assert _pending(app, client, path) == ["alpha__t2"]
    assert "Approved 1 tool." in client.get(done.headers["location"]).text


def test_a_post_from_another_origin_changes_nothing_even_with_the_token(app: InProcess) -> None:
    client, csrf = signed_in(app, keys(app).user_keys[0])
    path = "/console/toolkits/default/alpha"
    before = _pending(app, client, path)
    for headers in ({"Origin": "https://evil.example"}, {"Sec-Fetch-Site": "cross-site"}):
        refused = client.post(path + "/approve", data={"all": "1", "csrf": csrf}, headers=headers)
        assert refused.status_code == 403
    assert _pending(app, client, path) == before


def test_the_allow_list_visibility_and_kind_forms_change_what_they_name(app: InProcess) -> None:
    client, csrf = signed_in(app, keys(app).user_keys[0])
    path = "/console/toolkits/default/alpha"
    on = client.post(path + "/allow", data={"tool": "alpha__t0", "allowed": "1", "csrf": csrf})
    assert on.headers["location"] == path + "?done=allowed&n=1"
    page = client.get(on.headers["location"]).text
    assert "Allow-list saved: 1 tool selected." in page and "1 on the allow-list" in page
    assert 'aria-pressed="true"' in page
    off = client.post(path + "/allow", data={"tool": "alpha__t0", "allowed": "0", "csrf": csrf})
    assert "every active tool is callable" in client.get(off.headers["location"]).text
    other = client.post(path + "/allow", data={"tool": "bravo__t0", "allowed": "1", "csrf": csrf})
    assert other.status_code == 404  # a tool of another toolkit is not this one's to select
    published = client.post(path + "/access", data={"visibility": "published", "default": "on", "csrf": csrf})
    assert published.status_code == 303  # a user's form has no default box: the field is ignored
    page = client.get(path).text
    assert '<option value="published" selected>' in page and 'id="default"' not in page
    admin, admin_csrf = signed_in(app, app.key)
    assert "Platform default</dt><dd>no" in admin.get(path).text
    back = client.post(path + "/access", data={"visibility": "private", "csrf": csrf})
    assert back.status_code == 303
    refused = client.post(path + "/kind", data={"tool": "alpha__t0", "kind": "destructive", "csrf": csrf})
    assert refused.status_code == 403  # reclassifying is an admin's
    done = admin.post(path + "/kind", data={"tool": "alpha__t0", "kind": "destructive", "csrf": admin_csrf})
    assert done.status_code == 303
    page = admin.get(path).text
    assert "run_destructive_tool" in page and "(set by hand)" in page
    admin.post(path + "/kind", data={"tool": "alpha__t0", "kind": "auto", "csrf": admin_csrf})
    assert "(set by hand)" not in admin.get(path).text
    not_mcp = client.post(path + "/sync", data={"csrf": csrf})
    assert not_mcp.status_code == 422 and "not an MCP server" in not_mcp.text


def test_a_remote_or_local_mcp_toolkit_re_syncs_from_its_page(app: InProcess) -> None:
    client, csrf = signed_in(app, keys(app).user_keys[0])
    path = "/console/toolkits/default/hostile-mcp"
    assert "Re-sync from the server" in client.get(path).text
    done = client.post(path + "/sync", data={"csrf": csrf})
    assert done.status_code == 303 and "done=synced" in done.headers["location"]
    assert (
        "Re-synced: 0 added, 0 changed (pending approval), 0 removed."
        in client.get(done.headers["location"]).text
    )


def _tool_states(page: str) -> dict[str, str]:
    rows = page.split('id="tools"', 1)[1].split("<tbody>", 1)[1].split("</tbody>", 1)[0].split("</tr>")[:-1]
    return {
        re.search(r"<code>([^<]+)</code>", row).group(1): re.search(r'badge state-(\w+)"', row).group(1)  # type: ignore[union-attr]
        for row in rows
    }


def test_a_remote_mcp_toolkit_over_streamable_http_re_syncs_from_its_page(
    app: InProcess, tmp_path: Path
) -> None:
    with dynamic_upstream(tmp_path, ["alpha", "beta"]) as up:
        assert cli_import_mcp(app, up.url, "--slug", "remote-dyn")["tool_count"] == 2  # type: ignore[arg-type]
        admin, csrf = signed_in(app, app.key)
        path = "/console/toolkits/default/remote-dyn"
        page = admin.get(path).text
        assert "Re-sync from the server" in page and "remote MCP" in page
        assert _tool_states(page) == {"remote-dyn__alpha": "active", "remote-dyn__beta": "active"}
        up.set(["alpha", "gamma"], alpha_v2=True)  # one changed, one new, one gone
        ann, ann_csrf = signed_in(app, keys(app).user_keys[0])
        assert ann.post(path + "/sync", data={"csrf": ann_csrf}).status_code == 404  # not hers
        done = admin.post(path + "/sync", data={"csrf": csrf})
        assert done.status_code == 303
        assert done.headers["location"] == path + "?done=synced&added=1&changed=1&removed=1"
        page = admin.get(done.headers["location"]).text
        assert "Re-synced: 1 added, 1 changed (pending approval), 1 removed." in page
        assert _tool_states(page) == {
            "remote-dyn__alpha": "pending",
            "remote-dyn__beta": "disabled",
            "remote-dyn__gamma": "pending",
        }
        assert "Changed: description" in page and "Echo text, now optionally loudly." in page
        again = admin.post(path + "/sync", data={"csrf": csrf})  # nothing new upstream
        assert again.headers["location"] == path + "?done=synced&added=0&changed=0&removed=0"


def test_an_admin_sets_quota_and_fee_and_a_call_through_mcp_shows_in_the_history(app: InProcess) -> None:
    admin, csrf = signed_in(app, app.key)
    path = "/console/toolkits/default/demo"
    saved = admin.post(
        path + "/quota", data={"fee": "0.5", "daily_limit": "100", "monthly_limit": "0", "csrf": csrf}
    )
    assert saved.status_code == 303 and saved.headers["location"] == path + "?done=quota"
    page = admin.get(saved.headers["location"]).text
    assert "Quota and fee saved." in page and "0.5 credits" in page and 'value="100"' in page
    kinds = {"fee": "0.5", "daily_limit": "100", "monthly_limit": "0", "fee_write": "2", "csrf": csrf}
    assert admin.post(path + "/quota", data=kinds).status_code == 303  # a fee of the write kind
    assert "; write tools 2" in admin.get(path).text and 'id="fee_destructive"' in admin.get(path).text
    assert admin.post(path + "/quota", data={**kinds, "fee_write": ""}).status_code == 303  # removed
    assert "; write tools" not in admin.get(path).text
    wrong = admin.post(
        path + "/quota", data={"fee": "lots", "daily_limit": "1", "monthly_limit": "0", "csrf": csrf}
    )
    assert wrong.status_code == 422 and "&#39;fee&#39;" in wrong.text
    assert "0.5 credits" in admin.get(path).text  # nothing of the refused form was stored
    headers, body = modern_tools_call(app.key, "demo__createNote", {"body": {"title": "from MCP"}})
    answer = app.client(timeout=20).post("/mcp", json=body, headers=headers)
    assert answer.status_code == 200 and answer.json()["result"]["isError"] is False, answer.text
    history = admin.get(path).text
    assert "<code>demo__createNote</code>" in history and "<td>ok</td>" in history
    assert (
        "<code>demo__createNote</code>"
        not in admin.get(path, params={"outcome": "blocked"}).text.split("Call history")[1]
    )
    assert admin.get(path, params={"outcome": "<b>"}).status_code == 422
    ann, ann_csrf = signed_in(app, keys(app).user_keys[0])
    own = "/console/toolkits/default/alpha"
    assert 'id="fee"' not in ann.get(own).text  # a user reads the quota; only an admin sets it
    refused = ann.post(
        own + "/quota", data={"fee": "0", "daily_limit": "0", "monthly_limit": "0", "csrf": ann_csrf}
    )
    assert refused.status_code == 403


# -- who sees what ------------------------------------------------------------------------------


def test_a_user_never_sees_another_users_toolkit_in_a_page_a_fragment_or_a_detail(app: InProcess) -> None:
    client, csrf = signed_in(app, keys(app).user_keys[0])
    page = client.get("/console/toolkits").text
    fragment = client.get("/console/toolkits", headers={"HX-Request": "true"})
    assert fragment.status_code == 200 and "<html" not in fragment.text and 'id="cards"' in fragment.text
    searched = client.get("/console/toolkits", params={"q": "bravo"}).text
    for text in (page, fragment.text):
        assert "/console/toolkits/default/alpha" in text and "hostile" in text
        assert "bravo" not in text and "charlie" not in text
    assert "No toolkit matches." in searched
    assert ">ops<" not in page  # nor the name of a project she has nothing in
    for path in ("/console/toolkits/default/bravo", "/console/toolkits/ops/charlie"):
        hidden = client.get(path)
        assert hidden.status_code == 404
        refused = client.post(path + "/approve", data={"all": "1", "csrf": csrf})
        assert refused.status_code == 404
    bob, _ = signed_in(app, keys(app).user_keys[1])
    assert _pending(app, bob, "/console/toolkits/default/bravo") == ["bravo__t1"]  # unchanged
    assert _pending(app, bob, "/console/toolkits/ops/charlie") == ["charlie__t0"]
    assert "alpha" not in bob.get("/console/toolkits").text


def test_an_admin_sees_every_toolkit(app: InProcess) -> None:
    client, _ = signed_in(app, app.key)
    page = client.get("/console/toolkits").text
    for slug in ("alpha", "bravo", "charlie", "hostile", "demo"):
        assert f'/{slug}"' in page, slug
    assert client.get("/console/toolkits/ops/charlie").status_code == 200


def test_a_bad_filter_is_a_page_naming_the_field(app: InProcess) -> None:
    client, _ = signed_in(app, keys(app).user_keys[0])
    refused = client.get("/console/toolkits", params={"page": "0"})
    assert refused.status_code == 422 and "&#39;page&#39;" in refused.text
    assert client.get("/console/toolkits", params={"type": "<b>"}).status_code == 422


# -- hostile upstream text -----------------------------------------------------------------------


def _assert_inert(text: str) -> None:
    for payload in hostile_pages.PAYLOADS:
        if "<" in payload:
            assert payload not in text
    assert "<script>window" not in text and "<img src=x" not in text and "<svg" not in text
    assert "<iframe" not in text and 'hx-trigger="load"' not in text
    scripts = re.findall(r"<script\b[^>]*>", text)
    ours = ('<script src="/console/static/htmx.min.js?v=', '<script src="/console/static/copy.js?v=')
    assert all(s.startswith(ours) for s in scripts), scripts


def test_hostile_titles_descriptions_and_names_are_shown_as_text(app: InProcess) -> None:
    client, _ = signed_in(app, keys(app).user_keys[0])
    pages = [
        client.get("/console/toolkits").text,
        client.get("/console/toolkits", params={"q": "hostile"}, headers={"HX-Request": "true"}).text,
        client.get("/console/toolkits/default/hostile").text,
        client.get("/console/toolkits/default/hostile-mcp").text,
    ]
    for text in pages:
        _assert_inert(text)
    detail, mcp = pages[2], pages[3]
    assert "&lt;script&gt;window.__pwned = &#39;script&#39;&lt;/script&gt;" in detail  # shown, escaped
    assert "&lt;img src=x onerror=" in mcp
    assert hostile_pages.TEMPLATE in detail and hostile_pages.TEMPLATE in mcp  # never evaluated
    assert ">jinja<" not in detail
    assert 'id="guide"' in detail and "Groups:" in detail  # the guide, from the spec, as text
    assert "Approve all" in mcp  # its tools wait for approval


def test_the_static_files_are_served_with_their_etag_and_nothing_else(app: InProcess) -> None:
    client = app.client(timeout=10)
    htmx = client.get("/console/static/htmx.min.js")
    assert htmx.status_code == 200 and htmx.headers["content-type"].startswith("text/javascript")
    assert "htmx" in htmx.text and len(htmx.content) > 10_000
    again = client.get("/console/static/htmx.min.js", headers={"If-None-Match": htmx.headers["etag"]})
    assert again.status_code == 304
    for name in ("SOURCES.md", "htmx.LICENSE.txt", "..%2F..%2Fconfig.py", "%2e%2e"):
        assert client.get(f"/console/static/{name}").status_code == 404
    css = client.get("/console/static/console.css")
    assert css.headers["content-type"].startswith("text/css") and ":focus-visible" in css.text
