"""The Lore upload route (``POST /api/v1/toolkits/lore``), in process: what it refuses before
reading an archive, naming the field, and a dry run that stores nothing."""

from __future__ import annotations

import io
import zipfile
from collections.abc import Iterator

import httpx
import pytest

from tests.support.inprocess import InProcess, served_in_process

pytestmark = pytest.mark.inprocess


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    env = {"TOOLSPOKE_DEMO": "0", "TOOLSPOKE_IMPORTS_PER_HOUR": "1000"}
    with served_in_process(tmp_path_factory.mktemp("lore") / "data", env=env) as served:
        yield served


@pytest.fixture
def api(app: InProcess) -> Iterator[httpx.Client]:
    with app.client(headers={"Authorization": f"Bearer {app.key}"}, timeout=60) as c:
        yield c


def archive(files: dict[str, str]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as z:
        for name, text in files.items():
            z.writestr(name, text)
    return out.getvalue()


@pytest.mark.parametrize(
    ("query", "body", "headers", "field"),
    [
        ("", archive({"a.md": "# a"}), {}, "slug"),
        ("?slug=kb", b"", {}, "body"),
        ("?slug=kb", b'{"files": []}', {"Content-Type": "application/json"}, "body"),
        ("?slug=kb&dry_run=perhaps", archive({"a.md": "# a"}), {}, "dry_run"),
        ("?slug=Not+A+Slug", archive({"a.md": "# a"}), {}, "slug"),
        ("?slug=kb", b"PK\x03\x04 not a zip", {}, "source"),
    ],
)
def test_a_bad_request_is_refused_naming_the_field(
    api: httpx.Client, query: str, body: bytes, headers: dict[str, str], field: str
) -> None:
    r = api.post(f"/api/v1/toolkits/lore{query}", content=body, headers=headers)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == field
    assert all(k["slug"] != "kb" for k in api.get("/api/v1/toolkits").json()["toolkits"])


def test_a_dry_run_reports_and_stores_nothing_then_the_import_stores(api: httpx.Client) -> None:
    data = archive({"a.md": "# Alpha\n\nwords", "b.bin": "x", ".hidden/c.md": "# c"})
    dry = api.post("/api/v1/toolkits/lore?slug=dry&dry_run=true", content=data)
    assert dry.status_code == 200, dry.text
    report = dry.json()
    assert report["dry_run"] and report["documents"]["added"] == ["a.md"]
    assert [s["where"] for s in report["skipped"]] == ["b.bin"]
    assert any(".hidden/c.md" in n for n in report["notes"])
    assert all(k["slug"] != "dry" for k in api.get("/api/v1/toolkits").json()["toolkits"])
    stored = api.post("/api/v1/toolkits/lore?slug=dry&skip_unreadable=1", content=data)
    assert stored.status_code == 201, stored.text
    assert stored.json()["tool_count"] == 3
