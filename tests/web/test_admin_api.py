"""The admin API (``/api/v1``: web/admin.py, web/admin_openapi.py, web/admin_search.py) in
process (tests/support/inprocess.py), with plain httpx.

One app serves the module (ALLOWED_TOOL_CIDRS=127.0.0.1/32, demo on); the read_guide tests
serve their own with the demo off, so that no toolkit has a guide to begin with.

Moved from tests/e2e/test_admin_api.py. The admin API stays covered on a real ``toolspoke
serve`` by every e2e module that sets up its world through ``/api/v1``: tests/e2e/test_access.py
(users, keys, agents, grants, imports) and tests/e2e/test_spend.py (credit and quotas).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.support.clients import INIT
from tests.support.inprocess import InProcess, served_in_process
from tests.support.servers import FIXTURES, PetstoreUpstream

pytestmark = pytest.mark.inprocess
PETSTORE_SPEC: dict[str, Any] = yaml.safe_load((FIXTURES / "oai-v3.0-petstore.yaml").read_text())
PET_TOOLS = {"listPets", "createPets", "showPetById"}


@pytest.fixture(scope="module")
def upstream() -> Iterator[PetstoreUpstream]:
    with PetstoreUpstream() as server:
        yield server


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    # This module imports more than the default ten times an hour with the one admin key; the
    # hourly limit itself is tested in test_access_keys and test_credentials.
    env = {"TOOLSPOKE_IMPORTS_PER_HOUR": "100"}
    with served_in_process(tmp_path_factory.mktemp("admin") / "data", env=env) as served:
        yield served


def admin_client(app: InProcess) -> httpx.Client:
    return app.client(headers={"Authorization": f"Bearer {app.key}"}, timeout=30)


@pytest.fixture
def api(app: InProcess) -> Iterator[httpx.Client]:
    with admin_client(app) as client:
        yield client


def slugs(api: httpx.Client) -> set[str]:
    r = api.get("/api/v1/toolkits")
    assert r.status_code == 200, r.text
    return {k["toolkit"] for k in r.json()["toolkits"]}


def import_body(slug: str, upstream: PetstoreUpstream, **extra: Any) -> dict[str, Any]:
    return {"slug": slug, "spec": PETSTORE_SPEC, "base_url": upstream.base_url, **extra}


def assert_error(r: httpx.Response, status: int, reason: str, field: str | None = None) -> dict[str, Any]:
    assert r.status_code == status, r.text
    error: dict[str, Any] = r.json()["error"]
    assert error["reason"] == reason
    assert error["message"]
    if field is not None:
        assert error["field"] == field
    assert "Traceback" not in r.text
    return error


# -- credentials and liveness -------------------------------------------------------------


def test_health_answers_without_a_key(app: InProcess) -> None:
    r = app.client(timeout=10).get("/health")
    assert r.status_code == 200
    assert r.json()["status"] == "ok"


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer tsk_wrong-key-0123456789abcdefghijklmnopqrstu"},
        {"Authorization": "Bearer not-even-a-key"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
    ],
)
def test_the_admin_api_without_a_valid_key_is_401_with_a_bearer_challenge(
    app: InProcess, headers: dict[str, str]
) -> None:
    anonymous = app.client(timeout=10)
    for method, path in (("GET", "/api/v1/toolkits"), ("DELETE", "/api/v1/toolkits/demo")):
        r = anonymous.request(method, path, headers=headers)
        assert_error(r, 401, "unauthorized")
        assert r.headers["www-authenticate"].startswith("Bearer")
    with admin_client(app) as api:
        assert "demo" in slugs(api)  # the refused DELETE removed nothing


def test_a_foreign_origin_is_refused_even_with_the_admin_key(api: httpx.Client) -> None:
    assert api.get("/api/v1/toolkits", headers={"Origin": "https://evil.example"}).status_code == 403


# -- toolkits -----------------------------------------------------------------------------


def test_listing_toolkits_includes_the_demo(api: httpx.Client) -> None:
    kits = {k["toolkit"]: k for k in api.get("/api/v1/toolkits").json()["toolkits"]}
    assert kits["demo"]["project"] == "default"
    assert kits["demo"]["has_guide"] is True
    assert "demo__listNotes" in kits["demo"]["tools"]


def test_importing_an_inline_spec_stores_its_tools_and_delete_removes_them(
    api: httpx.Client, upstream: PetstoreUpstream
) -> None:
    r = api.post("/api/v1/toolkits/openapi", json=import_body("pets", upstream))
    assert r.status_code == 201, r.text
    report = r.json()
    assert (report["tool_count"], report["dry_run"], report["base_url"]) == (3, False, upstream.base_url)
    kits = {k["toolkit"]: k for k in api.get("/api/v1/toolkits").json()["toolkits"]}
    assert set(kits["pets"]["tools"]) == {f"pets__{n}" for n in PET_TOOLS}

    found = api.get("/api/v1/search", params={"q": "list all pets", "toolkit": "pets"}).json()
    assert found["results"][0]["name"] == "pets__listPets"

    again = api.post("/api/v1/toolkits/openapi", json=import_body("pets", upstream))
    assert_error(again, 409, "conflict")
    replaced = api.post("/api/v1/toolkits/openapi", json=import_body("pets", upstream, replace=True))
    assert replaced.status_code == 201, replaced.text
    assert replaced.json()["replaced"] is True

    gone = api.delete("/api/v1/toolkits/pets")
    assert gone.status_code == 200, gone.text
    assert gone.json() == {"deleted": "pets", "tools_removed": 3}
    assert "pets" not in slugs(api)
    assert api.get("/api/v1/search", params={"q": "pets", "toolkit": "pets"}).json()["results"] == []
    assert_error(api.delete("/api/v1/toolkits/pets"), 404, "not_found")


def test_a_dry_run_import_answers_200_and_stores_nothing(
    api: httpx.Client, upstream: PetstoreUpstream
) -> None:
    r = api.post("/api/v1/toolkits/openapi", json=import_body("drypets", upstream, dry_run=True))
    assert r.status_code == 200, r.text
    report = r.json()
    assert report["dry_run"] is True
    assert {t["name"] for t in report["tools"]} == {f"drypets__{n}" for n in PET_TOOLS}
    assert "drypets" not in slugs(api)


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"hello": "world"}, "/openapi"),
        ({"openapi": "3.0.0", "info": {"title": "x", "version": "1"}, "paths": ["/a"]}, "/paths"),
    ],
)
def test_a_bad_spec_is_422_with_reason_and_field(
    api: httpx.Client, upstream: PetstoreUpstream, spec: dict[str, Any], field: str
) -> None:
    r = api.post(
        "/api/v1/toolkits/openapi", json={"slug": "broken", "spec": spec, "base_url": upstream.base_url}
    )
    assert_error(r, 422, "import_failed", field)
    assert "broken" not in slugs(api)


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_spec_with_no_usable_operation_is_422_with_the_skipped_report_and_a_replace_keeps_the_toolkit(
    api: httpx.Client, upstream: PetstoreUpstream, dry_run: bool
) -> None:
    bad = {"get": {"parameters": [{"$ref": "#/nope"}], "responses": {"200": {"description": "ok"}}}}
    spec = {"openapi": "3.0.3", "info": {"title": "b", "version": "1"}, "paths": {"/a": bad}}
    hooks = yaml.safe_load((FIXTURES / "oai-v3.1-webhook-example.yaml").read_text())
    assert api.post("/api/v1/toolkits/openapi", json=import_body("keep", upstream)).status_code == 201
    try:
        for doc, skipped in (
            (hooks, []),
            (spec, [{"where": "GET /a", "reason": "parameter 0: $ref '#/nope' does not resolve"}]),
        ):
            body = {
                "slug": "keep",
                "spec": doc,
                "base_url": upstream.base_url,
                "replace": True,
                "dry_run": dry_run,
            }
            error = assert_error(
                api.post("/api/v1/toolkits/openapi", json=body), 422, "import_failed", "document"
            )
            assert "no usable operation" in error["message"]
            assert (error["skipped"], error["skipped_count"]) == (skipped, len(skipped))
        kits = {k["toolkit"]: k for k in api.get("/api/v1/toolkits").json()["toolkits"]}
        assert set(kits["keep"]["tools"]) == {f"keep__{n}" for n in PET_TOOLS}
    finally:
        api.delete("/api/v1/toolkits/keep")


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"slug": "x", "source": "/etc/passwd"}, "source"),
        ({"slug": "x", "source": str(FIXTURES / "oai-v3.0-petstore.yaml")}, "source"),
        ({"slug": "x", "source": "file:///etc/passwd"}, "source"),
        ({"slug": "x"}, "source"),
        ({"source": "https://example.com/spec.json"}, "slug"),
        ({"slug": "x", "spec": "openapi: 3.0.0"}, "spec"),
        ({"slug": "Bad Slug!", "spec": PETSTORE_SPEC}, None),
    ],
)
def test_an_import_request_that_is_malformed_is_422_naming_the_member(
    api: httpx.Client, body: dict[str, Any], field: str | None
) -> None:
    r = api.post("/api/v1/toolkits/openapi", json=body)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    if field is not None:
        assert error["field"] == field
    assert "root:" not in r.text  # the server's files are never read into an answer


def test_a_body_that_is_not_json_is_422_naming_body(api: httpx.Client) -> None:
    r = api.post("/api/v1/toolkits/openapi", content=b"{nope", headers={"Content-Type": "application/json"})
    assert_error(r, 422, "invalid_params", "body")


def test_a_source_url_to_a_private_address_is_refused_as_ssrf(api: httpx.Client) -> None:
    """SSRF-01: a spec-import URL to a private address is refused (422 ssrf_blocked)."""
    r = api.post(
        "/api/v1/toolkits/openapi", json={"slug": "internal", "source": "http://10.255.255.1/x.json"}
    )
    error = assert_error(r, 422, "ssrf_blocked", "source")
    assert "10.255.255.1" in error["message"]
    assert "internal" not in slugs(api)


def test_a_base_url_to_a_private_address_is_refused_as_ssrf(api: httpx.Client) -> None:
    """SSRF-01: an OpenAPI base URL to a private address is refused, nothing stored."""
    body = {"slug": "internal", "spec": PETSTORE_SPEC, "base_url": "http://169.254.169.254/latest/"}
    error = assert_error(api.post("/api/v1/toolkits/openapi", json=body), 422, "ssrf_blocked", "base_url")
    assert "169.254.169.254" in error["message"]
    assert "internal" not in slugs(api)


# -- search -------------------------------------------------------------------------------


@pytest.mark.parametrize("query", [{}, {"q": ""}])
def test_search_without_q_is_422_naming_q(api: httpx.Client, query: dict[str, str]) -> None:
    assert_error(api.get("/api/v1/search", params=query), 422, "invalid_params", "q")


def test_search_with_a_non_integer_limit_is_422_naming_limit(api: httpx.Client) -> None:
    r = api.get("/api/v1/search", params={"q": "notes", "limit": "many"})
    assert_error(r, 422, "invalid_params", "limit")


def test_search_finds_demo_tools(api: httpx.Client) -> None:
    r = api.get("/api/v1/search", params={"q": "write a new note", "limit": "3"})
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert 1 <= len(results) <= 3
    assert results[0]["name"] == "demo__createNote"
    assert results[0]["runner"] == "run_tool"


# -- read_guide appears only when some toolkit has a guide -----------------------------------


def mcp_tool_names(app: InProcess) -> set[str]:
    with app.mcp_client() as http:
        r = http.post("/mcp", json=INIT)
        assert r.status_code == 200, r.text
        session = {"Mcp-Session-Id": r.headers["mcp-session-id"]}
        note = http.post(
            "/mcp", headers=session, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
        )
        assert note.status_code == 202
        r = http.post("/mcp", headers=session, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert r.status_code == 200, r.text
        return {t["name"] for t in r.json()["result"]["tools"]}


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    with served_in_process(
        tmp_path_factory.mktemp("bare") / "data", env={"TOOLSPOKE_DEMO": "false"}
    ) as served:
        yield served


def test_read_guide_is_listed_only_once_a_toolkit_has_a_guide(
    bare: InProcess, upstream: PetstoreUpstream
) -> None:
    with admin_client(bare) as api:
        assert slugs(api) == set()
        assert bare.client(timeout=10).get("/demo/api/notes").status_code == 404
        names = mcp_tool_names(bare)
        assert "read_guide" not in names
        assert {"search_tools", "use_tool"} <= names

        # The petstore fixture's info has no description and it has no top-level tags: no guide.
        assert "description" not in PETSTORE_SPEC["info"] and "tags" not in PETSTORE_SPEC
        r = api.post("/api/v1/toolkits/openapi", json=import_body("plain", upstream))
        assert r.status_code == 201, r.text
        assert "read_guide" not in mcp_tool_names(bare)

        described = copy.deepcopy(PETSTORE_SPEC)
        described["info"]["description"] = "A pet shop: list pets, add one, look one up by id."
        r = api.post("/api/v1/toolkits/openapi", json={**import_body("guided", upstream), "spec": described})
        assert r.status_code == 201, r.text
        assert "read_guide" in mcp_tool_names(bare)

        assert api.delete("/api/v1/toolkits/guided").status_code == 200
        assert "read_guide" not in mcp_tool_names(bare)


def test_the_master_key_file_is_readable_only_by_its_owner(bare: InProcess) -> None:
    """VAULT-01: the master key file is 0600."""
    key_file = Path(bare.data_dir) / "master.key"
    assert key_file.stat().st_mode & 0o077 == 0
