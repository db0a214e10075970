"""``POST /api/v1/toolkits/infer`` in process: a dry run shows the tools and stores nothing;
an import stores every tool pending (invisible to search) with the examples' credential
sealed; bad examples are refused with a clear report and store nothing; admins only."""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.support.accounts import add_user_keys
from tests.support.inprocess import InProcess, served_in_process
from tests.support.leaks import assert_no_leak

pytestmark = pytest.mark.inprocess
API = "http://127.0.0.1:9"  # never called here: only the shapes are imported


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    env = {"TOOLSPOKE_DEMO": "0", "TOOLSPOKE_IMPORTS_PER_HOUR": "1000", "ALLOWED_TOOL_CIDRS": "127.0.0.1/32"}
    with served_in_process(tmp_path_factory.mktemp("infer") / "data", env=env) as served:
        yield served


@pytest.fixture
def api(app: InProcess) -> Iterator[httpx.Client]:
    with app.client(headers={"Authorization": f"Bearer {app.key}"}, timeout=60) as c:
        yield c


def curl_lines(token: str) -> str:
    auth = f"-H 'Authorization: Bearer {token}'"
    return "\n".join(
        [
            f"curl {auth} '{API}/v1/notes?limit=5'",
            f"curl {auth} {API}/v1/notes/3",
            f"curl {auth} -X DELETE {API}/v1/notes/4",
            f'curl {auth} --json \'{{"title": "t", "tags": ["a"]}}\' {API}/v1/notes',
        ]
    )


def slugs(api: httpx.Client) -> list[str]:
    return [k["toolkit"] for k in api.get("/api/v1/toolkits").json()["toolkits"]]


def test_a_dry_run_shows_each_tool_and_what_it_came_from_and_stores_nothing(
    api: httpx.Client, app: InProcess
) -> None:
    token = f"tok-{secrets.token_hex(16)}"
    r = api.post(
        "/api/v1/toolkits/infer", json={"slug": "dry", "examples": curl_lines(token), "dry_run": True}
    )
    assert r.status_code == 200, r.text
    report = r.json()
    by_name = {t["name"]: t for t in report["tools"]}
    assert sorted(by_name) == ["dry__create_note", "dry__delete_note", "dry__get_note", "dry__list_notes"]
    assert by_name["dry__get_note"]["inferred_from"] == ["line 2"]
    assert by_name["dry__get_note"]["path"] == "/v1/notes/{note_id}"
    assert by_name["dry__list_notes"]["input_schema"]["properties"] == {"limit": {"type": "integer"}}
    assert all(t["state"] == "pending" for t in report["tools"])
    assert "credential (bearer) would be sealed in the vault" in report["notes"]
    assert_no_leak(r.text, token, where="in the dry run's report")
    assert "dry" not in slugs(api)


def test_an_import_stores_the_tools_pending_and_seals_the_credential(
    api: httpx.Client, app: InProcess
) -> None:
    token = f"tok-{secrets.token_hex(16)}"
    r = api.post("/api/v1/toolkits/infer", json={"slug": "notes", "examples": curl_lines(token)})
    assert r.status_code == 201, r.text
    assert_no_leak(r.text, token, where="in the import's report")
    pending = api.get("/api/v1/toolkits/notes/pending").json()["pending"]
    assert sorted(t["name"] for t in pending) == [
        "notes__create_note",
        "notes__delete_note",
        "notes__get_note",
        "notes__list_notes",
    ]
    assert all("Authorization" not in json.dumps(t["input_schema"]) for t in pending)
    assert api.get("/api/v1/search", params={"q": "notes"}).json()["results"] == []
    cred = api.get("/api/v1/toolkits/notes/credentials").json()
    assert cred["set"] is True and cred["scheme"] == "bearer"
    approved = api.post("/api/v1/toolkits/notes/approve", json={"tools": ["notes__get_note"]}).json()
    assert approved["approved"] == ["notes__get_note"]
    found = [t["name"] for t in api.get("/api/v1/search", params={"q": "get note"}).json()["results"]]
    assert found == ["notes__get_note"]  # the others still wait
    db = b"".join(p.read_bytes() for p in app.data_dir.iterdir() if p.name.startswith("toolspoke.db"))
    assert_no_leak(db.decode("latin-1"), token, where="in the database files")


@pytest.mark.parametrize(
    ("examples", "fmt", "says", "field"),
    [
        ("{this is not json", "har", "the HAR file is not JSON", "document"),
        (
            {"log": {"entries": [{"response": {}}]}},
            "auto",
            "entry 1: an entry is an object with a 'request'",
            "entry 1",
        ),
        (
            f"curl --json '{{\"a\": 1}}' {API}/x\ncurl --json '{{\"a\": [1]}}' {API}/x",
            "auto",
            "examples with conflicting shapes: POST /x: body.a has conflicting shapes: "
            "integer in line 1, array in line 2",
            "line 1",
        ),
        (f"curl -H 'X-API-Key: short' {API}/x", "auto", "cannot be kept: 'value' is too short", "line 1"),
        ("curl /v1/x", "curl", "the examples name no host; pass --base-url", "base_url"),
    ],
)
def test_bad_examples_get_a_clear_report_and_store_nothing(
    api: httpx.Client, examples: Any, fmt: str, says: str, field: str
) -> None:
    r = api.post("/api/v1/toolkits/infer", json={"slug": "bad", "examples": examples, "format": fmt})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert says in error["message"] and error["field"] == field
    assert "bad" not in slugs(api)


def test_the_conflict_report_lists_every_conflict(api: httpx.Client) -> None:
    text = "\n".join(
        [
            f'curl --json \'{{"a": 1, "b": "x"}}\' {API}/x',
            f'curl --json \'{{"a": "one", "b": {{}}}}\' {API}/x',
        ]
    )
    r = api.post("/api/v1/toolkits/infer", json={"slug": "bad2", "examples": text})
    assert r.status_code == 422
    conflicts = r.json()["error"]["conflicts"]
    assert conflicts == [
        {"tool": "POST /x", "where": "body.a", "kinds": {"integer": "line 1", "string": "line 2"}},
        {"tool": "POST /x", "where": "body.b", "kinds": {"string": "line 1", "object": "line 2"}},
    ]


def test_only_admins_may_infer(app: InProcess) -> None:
    (key,) = add_user_keys(app.data_dir, "infer-user", 1)
    with app.client(headers={"Authorization": f"Bearer {key}"}) as c:
        r = c.post("/api/v1/toolkits/infer", json={"slug": "mine", "examples": f"curl {API}/x"})
    assert r.status_code == 403, r.text


def test_the_body_is_checked_field_by_field(api: httpx.Client) -> None:
    cases = [
        ({"slug": "x"}, "examples"),
        ({"slug": "x", "examples": 3}, "examples"),
        ({"slug": "x", "examples": "curl http://127.0.0.1:9/a", "dry_run": "yes"}, "dry_run"),
        ({"slug": "x", "examples": "curl http://127.0.0.1:9/a", "format": "yaml"}, "format"),
        ({"slug": "Bad Slug", "examples": "curl http://127.0.0.1:9/a"}, "slug"),
    ]
    for doc, field in cases:
        r = api.post("/api/v1/toolkits/infer", json=doc)
        assert r.status_code in (400, 422), r.text
        assert r.json()["error"]["field"] == field, (doc, r.text)


def test_inferred_tools_are_approved_one_by_one_and_a_changed_one_is_reviewed_again(
    api: httpx.Client,
) -> None:
    first = f"curl '{API}/v1/items?page=1'\ncurl {API}/v1/items/1"
    assert api.post("/api/v1/toolkits/infer", json={"slug": "review", "examples": first}).status_code == 201
    every = api.post("/api/v1/toolkits/review/approve", json={"all": True})
    assert every.status_code == 422 and every.json()["error"]["field"] == "tools"
    assert "approve them one by one" in every.json()["error"]["message"]
    for name in ("review__list_items", "review__get_item"):
        assert api.post("/api/v1/toolkits/review/approve", json={"tools": [name]}).json()["approved"] == [
            name
        ]
    # The list's examples now show another query parameter: that tool waits for review again.
    again = f"curl '{API}/v1/items?page=1&sort=name'\ncurl {API}/v1/items/1"
    r = api.post("/api/v1/toolkits/infer", json={"slug": "review", "examples": again, "replace": True})
    assert r.status_code == 201, r.text
    assert r.json()["changes"]["pending"] == ["review__list_items"]
    pending = api.get("/api/v1/toolkits/review/pending").json()["pending"]
    assert [t["name"] for t in pending] == ["review__list_items"]
