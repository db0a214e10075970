"""The console's import page (web/console/imports.py over gateway/admin/imports.py), in process:
OpenAPI by URL, upload and paste; MCP by remote URL, local command and a pasted ``.mcp.json``;
each a dry run that lists the tools and the skipped operations before anything is stored
(the catalogue's counts before and after), then a save of exactly the draft the dry run
kept on the server, bound to its session; refusals naming the field; CSRF on every POST;
a local command an admin's only; hostile upstream text escaped. A remote server by URL is a
real SDK server over streamable HTTP on loopback (``ALLOWED_TOOL_CIDRS`` admits it here).
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest

from appliance.catalogue import store
from tests.support import hostile_pages, tiny_stdio, worlds
from tests.support.console_pages import CSRF
from tests.support.console_pages import signed_in as signed_in_at
from tests.support.inprocess import InProcess, served_in_process
from tests.support.resync import dynamic_upstream
from tests.support.servers import sandbox_reading
from tests.support.worlds import World

pytestmark = pytest.mark.inprocess

WORLD = World(users=[False, False], agents=[], kits=[])
UPLOAD_MAX = 256 * 1024  # this app's import bound: a spec over it is refused whole
PAYLOAD = hostile_pages.PAYLOADS[0]
ESCAPED = "&lt;script&gt;window.__pwned = &#39;script&#39;&lt;/script&gt;"


def spec(title: str = "Shop") -> dict[str, Any]:
    return {
        "openapi": "3.0.3",
        "info": {"title": title, "version": "1"},
        "servers": [{"url": "http://127.0.0.1:9/"}],
        "paths": {
            "/items": {
                "get": {
                    "operationId": "listItems",
                    "summary": "List " + PAYLOAD,
                    "responses": {"200": {"description": "ok"}},
                },
                "delete": {
                    "operationId": "dropItems",
                    "summary": "Drop",
                    "responses": {"204": {"description": "ok"}},
                },
            },
            PAYLOAD: "not a path item",
        },
    }


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    folder = tmp_path_factory.mktemp("console-import")
    (folder / "tools").mkdir()
    env = {
        "TOOLSPOKE_HEALTH_INTERVAL_S": "0",
        "TOOLSPOKE_IMPORTS_PER_HOUR": "1000",
        "ALLOWED_TOOL_CIDRS": "127.0.0.1/32",
        "TOOLSPOKE_IMPORT_MAX_BYTES": str(UPLOAD_MAX),
        **sandbox_reading(folder / "tools"),
    }
    with served_in_process(folder / "data", env=env) as served:
        built = served.run(worlds.build(served.rt, WORLD))
        tools = folder / "tools" / "listed.json"
        tools.write_text(json.dumps(hostile_pages.mcp_tools()))
        served.ctx = (built, tools)  # type: ignore[attr-defined]
        yield served


def user_key(app: InProcess, i: int) -> str:
    return app.ctx[0].user_keys[i]  # type: ignore[attr-defined, no-any-return]


DRAFT = re.compile(r'name="draft" value="([^"]*)"')


def signed_in(app: InProcess, key: str) -> tuple[httpx.Client, str]:
    return signed_in_at(app, key, landing="/console/import")


def csrf_of_page(text: str) -> str:
    found = CSRF.search(text)
    assert found
    return found.group(1)


def counts(app: InProcess) -> tuple[int, int]:
    async def both() -> tuple[int, int]:
        async with app.rt.db.read() as conn:
            kits = await conn.one("SELECT count(*) AS n FROM toolkits")
            return int(kits["n"]), await store.tool_count(conn)

    return app.run(both())


def draft_of(page: httpx.Response) -> str:
    found = DRAFT.search(page.text)
    assert found, page.text[:600]
    return found.group(1)


def test_the_import_page_offers_every_source_and_a_local_command_only_to_an_admin(app: InProcess) -> None:
    ann, _ = signed_in(app, user_key(app, 0))
    page = ann.get("/console/import").text
    assert 'href="/console/import"' in page  # the nav link
    for mode in ("openapi", "remote", "json"):
        assert f"/console/import?mode={mode}" in page
    assert "mode=local" not in page
    assert 'id="l-command"' not in ann.get("/console/import", params={"mode": "local"}).text
    admin, _ = signed_in(app, app.key)
    assert 'id="l-command"' in admin.get("/console/import", params={"mode": "local"}).text
    for mode in ("openapi", "remote", "json"):
        form = ann.get("/console/import", params={"mode": mode}).text
        labels = set(re.findall(r'<label for="([^"]+)"', form))
        inputs = set(re.findall(r'<(?:input|select|textarea) id="([^"]+)"', form))
        assert inputs and inputs <= labels, (mode, inputs - labels)  # every control labelled


def test_a_pasted_spec_dry_run_lists_tools_and_skips_stores_nothing_then_saves_exactly_that(
    app: InProcess,
) -> None:
    ann, csrf = signed_in(app, user_key(app, 0))
    before = counts(app)
    preview = ann.post(
        "/console/import/openapi", data={"csrf": csrf, "slug": "shop", "spec_text": json.dumps(spec())}
    )
    assert preview.status_code == 200, preview.text[:500]
    assert counts(app) == before  # a dry run writes nothing to the catalogue
    assert "Nothing has been saved" in preview.text
    assert "<code>shop__listItems</code>" in preview.text and "<code>shop__dropItems</code>" in preview.text
    assert "<code>run_destructive_tool</code>" in preview.text and "destructive" in preview.text
    assert f"List {ESCAPED}" in preview.text and "path item is not a mapping" in preview.text
    assert PAYLOAD not in preview.text
    draft = draft_of(preview)
    bob, bob_csrf = signed_in(app, user_key(app, 1))
    stolen = bob.post("/console/import/save", data={"csrf": bob_csrf, "draft": draft})
    assert stolen.status_code == 404  # a draft is its session's
    no_token = ann.post("/console/import/save", data={"draft": draft})
    assert no_token.status_code == 403
    forged = ann.post("/console/import/save", data={"csrf": csrf, "draft": "x" + draft})
    assert forged.status_code == 404
    assert counts(app) == before
    saved = ann.post("/console/import/save", data={"csrf": csrf, "draft": draft})
    assert saved.status_code == 303
    assert saved.headers["location"] == "/console/toolkits/default/shop?done=imported&n=2&held=0"
    assert counts(app) == (before[0] + 1, before[1] + 2)
    page = ann.get(saved.headers["location"]).text
    assert "Imported 2 tools." in page and "<code>shop__listItems</code>" in page
    again = ann.post("/console/import/save", data={"csrf": csrf, "draft": draft})
    assert again.status_code == 404  # a draft saves once
    assert counts(app) == (before[0] + 1, before[1] + 2)


def test_an_uploaded_spec_and_one_by_url_dry_run_through_the_egress_guard(app: InProcess) -> None:
    ann, csrf = signed_in(app, user_key(app, 0))
    before = counts(app)
    uploaded = ann.post(
        "/console/import/openapi",
        data={"csrf": csrf, "slug": "shop-up"},
        files={"spec_file": ("shop.yaml", json.dumps(spec()).encode(), "application/yaml")},
    )
    assert uploaded.status_code == 200 and "<code>shop-up__listItems</code>" in uploaded.text, re.findall(
        r"role=.alert.[^<]*", uploaded.text
    )
    refused = ann.post(
        "/console/import/openapi",
        data={"csrf": csrf, "slug": "shop-url", "url": "http://169.254.169.254/spec.json"},
    )
    assert refused.status_code == 422 and 'role="alert"' in refused.text
    kept = 'value="http://169.254.169.254/spec.json" aria-invalid="true"'
    assert 'id="o-url"' in refused.text and kept in refused.text  # the field named, the URL kept
    neither = ann.post("/console/import/openapi", data={"csrf": csrf, "slug": "shop-url"})
    assert neither.status_code == 422 and "&#39;url&#39;" in neither.text
    no_slug = ann.post("/console/import/openapi", data={"csrf": csrf, "spec_text": json.dumps(spec())})
    assert no_slug.status_code == 422 and "&#39;slug&#39;" in no_slug.text
    bad_spec = ann.post("/console/import/openapi", data={"csrf": csrf, "slug": "x", "spec_text": "{nope"})
    assert bad_spec.status_code in (400, 422) and 'role="alert"' in bad_spec.text
    assert "{nope" not in bad_spec.text.split('role="alert"')[0].split("<main")[1]  # not echoed in the form
    no_token = ann.post("/console/import/openapi", data={"slug": "x", "spec_text": json.dumps(spec())})
    assert no_token.status_code == 403
    assert counts(app) == before


class _Spec(BaseHTTPRequestHandler):
    body = json.dumps(spec("Served")).encode()
    hits = 0

    def do_GET(self) -> None:
        type(self).hits += 1
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)

    def log_message(self, *args: Any) -> None:
        pass


def test_a_spec_by_url_is_fetched_once_and_saved_from_the_bytes_the_dry_run_read(app: InProcess) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Spec)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/spec.json"
        ann, csrf = signed_in(app, user_key(app, 0))
        preview = ann.post("/console/import/openapi", data={"csrf": csrf, "slug": "served", "url": url})
        assert preview.status_code == 200, preview.text[-800:]
        assert "<code>served__listItems</code>" in preview.text and _Spec.hits == 1
        saved = ann.post("/console/import/save", data={"csrf": csrf, "draft": draft_of(preview)})
        assert saved.status_code == 303
        assert _Spec.hits == 1  # the save imported the bytes the dry run read
        # it came from a URL, so its page re-imports from there
        page = ann.get("/console/toolkits/default/served").text
        again = ann.post("/console/toolkits/default/served/reimport", data={"csrf": csrf_of_page(page)})
        assert again.status_code == 200 and _Spec.hits == 2, again.text[-500:]
        assert "<dt>Unchanged</dt><dd>2</dd>" in again.text
    finally:
        server.shutdown()
        server.server_close()


def test_a_pasted_mcp_json_of_a_command_is_an_admins_and_its_dry_run_lists_the_servers_tools(
    app: InProcess,
) -> None:
    connection = tiny_stdio.connection(app.ctx[1])  # type: ignore[attr-defined]
    doc = json.dumps(
        {"mcpServers": {"words": {"command": connection["command"], "args": connection["args"]}}}
    )
    ann, csrf = signed_in(app, user_key(app, 0))
    refused = ann.post("/console/import/json", data={"csrf": csrf, "slug": "words", "mcp_json": doc})
    assert refused.status_code == 403
    admin, admin_csrf = signed_in(app, app.key)
    before = counts(app)
    preview = admin.post(
        "/console/import/json", data={"csrf": admin_csrf, "slug": "words", "mcp_json": doc, "approve": "on"}
    )
    assert preview.status_code == 200, preview.text[-800:]
    assert counts(app) == before
    assert "<code>words__safe_name</code>" in preview.text and "&lt;img src=x onerror=" in preview.text
    assert "<img src=x" not in preview.text and hostile_pages.TEMPLATE in preview.text
    saved = admin.post("/console/import/save", data={"csrf": admin_csrf, "draft": draft_of(preview)})
    assert saved.status_code == 303 and "done=imported&n=3" in saved.headers["location"]
    assert "Approve all" in admin.get(saved.headers["location"]).text  # held for approval
    several = json.dumps({"mcpServers": {"a": {"command": "x"}, "b": {"command": "y"}}})
    which = admin.post("/console/import/json", data={"csrf": admin_csrf, "slug": "w2", "mcp_json": several})
    assert which.status_code == 422 and "&#39;server&#39;" in which.text
    broken = admin.post("/console/import/json", data={"csrf": admin_csrf, "slug": "w2", "mcp_json": "[1"})
    assert broken.status_code == 422 and "&#39;mcp_json&#39;" in broken.text


def test_a_local_command_dry_run_and_a_changed_server_refuses_the_save(app: InProcess) -> None:
    tools_file = app.ctx[1]  # type: ignore[attr-defined]
    connection = tiny_stdio.connection(tools_file)
    admin, csrf = signed_in(app, app.key)
    form = {
        "csrf": csrf,
        "slug": "local-words",
        "command": connection["command"],
        "args": "\n".join(connection["args"]),
    }
    preview = admin.post("/console/import/local", data=form)
    assert preview.status_code == 200, preview.text[-800:]
    assert "<code>local-words__safe_name</code>" in preview.text
    original = tools_file.read_text()
    tools_file.write_text(
        json.dumps([{"name": "other", "description": "Changed", "inputSchema": {"type": "object"}}])
    )
    try:
        before = counts(app)
        changed = admin.post("/console/import/save", data={"csrf": csrf, "draft": draft_of(preview)})
        assert changed.status_code == 422 and "changed since the dry run" in changed.text
        assert counts(app) == before
    finally:
        tools_file.write_text(original)
    bad_env = admin.post("/console/import/local", data={**form, "env": "NOEQUALS"})
    assert bad_env.status_code == 422 and "&#39;env&#39;" in bad_env.text
    assert "NOEQUALS" not in bad_env.text  # an environment is never echoed
    no_command = admin.post("/console/import/local", data={**form, "command": ""})
    assert no_command.status_code == 422 and "&#39;command&#39;" in no_command.text
    ann, ann_csrf = signed_in(app, user_key(app, 0))
    assert ann.post("/console/import/local", data={**form, "csrf": ann_csrf}).status_code == 403


def test_a_remote_url_dry_run_is_refused_by_the_egress_guard_naming_the_field(app: InProcess) -> None:
    ann, csrf = signed_in(app, user_key(app, 0))
    for url in ("ftp://example.com/mcp", "http://169.254.169.254/mcp"):
        refused = ann.post("/console/import/remote", data={"csrf": csrf, "slug": "remote", "url": url})
        assert refused.status_code == 422, refused.text[-500:]
        assert 'role="alert"' in refused.text and 'id="r-url"' in refused.text
    wrong = ann.post(
        "/console/import/remote",
        data={
            "csrf": csrf,
            "slug": "remote",
            "url": "https://example.com/mcp",
            "transport": "carrier-pigeon",
        },
    )
    assert wrong.status_code == 422 and "&#39;transport&#39;" in wrong.text


def test_a_remote_server_by_url_dry_runs_over_streamable_http_and_saves(
    app: InProcess, tmp_path: Path
) -> None:
    with dynamic_upstream(tmp_path, ["alpha", "beta"]) as up:  # a real SDK server on loopback
        ann, csrf = signed_in(app, user_key(app, 0))
        before = counts(app)
        form = {"csrf": csrf, "slug": "remote-ok", "url": up.url, "transport": "http"}
        preview = ann.post("/console/import/remote", data=form)
        assert preview.status_code == 200, preview.text[-800:]
        assert "Nothing has been saved" in preview.text
        assert (
            "<code>remote-ok__alpha</code>" in preview.text and "<code>remote-ok__beta</code>" in preview.text
        )
        assert counts(app) == before  # the dry run listed the server's tools and stored nothing
        saved = ann.post("/console/import/save", data={"csrf": csrf, "draft": draft_of(preview)})
        assert saved.status_code == 303
        assert saved.headers["location"] == "/console/toolkits/default/remote-ok?done=imported&n=2&held=0"
        assert counts(app) == (before[0] + 1, before[1] + 2)
        page = ann.get(saved.headers["location"]).text
        assert "Imported 2 tools." in page and "remote MCP" in page and "Re-sync from the server" in page
        assert page.count('class="badge state-active"') == 2
        # held for approval, and a server whose tools changed after the dry run is not saved
        held = ann.post(
            "/console/import/remote",
            data={**form, "slug": "remote-held", "transport": "auto", "approve": "on"},
        )
        assert held.status_code == 200 and "<code>remote-held__alpha</code>" in held.text, held.text[-800:]
        up.set(["alpha", "gamma"])
        changed = ann.post("/console/import/save", data={"csrf": csrf, "draft": draft_of(held)})
        assert changed.status_code == 422 and "changed since the dry run" in changed.text
        assert counts(app) == (before[0] + 1, before[1] + 2)
        again = ann.post("/console/import/remote", data={**form, "slug": "remote-held", "approve": "on"})
        saved = ann.post("/console/import/save", data={"csrf": csrf, "draft": draft_of(again)})
        assert saved.headers["location"] == "/console/toolkits/default/remote-held?done=imported&n=2&held=0"
        page = ann.get(saved.headers["location"]).text
        assert "Approve all 2 pending" in page and page.count('class="badge state-pending"') == 2


def test_an_upload_over_the_import_bound_is_refused_and_stores_nothing(app: InProcess) -> None:
    ann, csrf = signed_in(app, user_key(app, 0))
    before = counts(app)
    big = json.dumps({**spec(), "x-padding": "p" * UPLOAD_MAX}).encode()
    refused = ann.post(
        "/console/import/openapi",
        data={"csrf": csrf, "slug": "big"},
        files={"spec_file": ("big.json", big, "application/json")},
    )
    assert refused.status_code in (413, 422) and "bytes" in refused.text, refused.text[-400:]
    assert counts(app) == before
    assert ann.get("/console/import").status_code == 200  # the session goes on
