"""The admin API's OpenAPI document stays true: every route documented, every operation real,
and Schemathesis finds no server error and no response that breaks the document.

Schemathesis runs its CLI against a real ``toolspoke serve`` with the admin key, bounded by
``--max-examples`` per operation, in parts that each fit the per-test timeout: the coverage
phase over two groups of operations, the fuzzing phase over six (both are per operation), and
the stateful phase (which follows links between operations, so over all of them). ``--max-time``
is not used: Schemathesis 4 spends the whole budget repeating the fuzzing, which made one
run take the budget whatever it found. ``POST /api/v1/toolkits/openapi``, ``/mcp`` and
``/infer`` are left out of the runs only: their URLs make the appliance resolve and connect to
arbitrary hosts; the import tests cover them (``tests/web/test_admin_infer.py`` the last).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from appliance import config
from appliance.web.admin_openapi import document
from appliance.web.app import create_app
from tests.support.servers import Appliance, running_appliance

pytestmark = pytest.mark.e2e
SCHEMATHESIS = Path(sys.executable).parent / "schemathesis"
# A part runs in 5 to 15 s on this machine's kind, even under load; the bound fails it
# clearly before the per-test timeout does.
PART_TIMEOUT_S = 27
# Fuzzing is per operation: six groups (toolkit routes or the others, by method) of about
# eight operations each; together they are every operation of the run, each in one group.
_KITS = r"^/api/v1/(toolkits|toolsets)"
_METHODS = {"get": "GET", "post": "POST", "writes": "PATCH|PUT|DELETE"}
FUZZED_GROUPS = {
    f"{where}-{name}": [
        f"--{'include' if where == 'toolkits' else 'exclude'}-path-regex",
        _KITS,
        "--include-method-regex",
        f"^({methods})$",
    ]
    for where in ("toolkits", "others")
    for name, methods in _METHODS.items()
}
PARTS = [
    *(
        pytest.param(["--phases", "examples,coverage", f"--{way}-path-regex", _KITS], id=f"coverage-{where}")
        for where, way in (("toolkits", "include"), ("others", "exclude"))
    ),
    *(
        pytest.param(["--phases", "fuzzing", *args], id=f"fuzzing-{name}")
        for name, args in FUZZED_GROUPS.items()
    ),
    pytest.param(["--phases", "stateful"], id="stateful"),
]
CHECKS = ",".join(
    [
        "not_a_server_error",
        "status_code_conformance",
        "content_type_conformance",
        "response_schema_conformance",
        "response_headers_conformance",
    ]
)


def _served(tmp_path: Path) -> set[tuple[str, str]]:
    app = create_app(config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path)}), name="openapi-routes")
    out = set()
    for route in app.router.routes:
        if route.path.startswith("api/v1/"):
            path = "/" + re.sub(r"<(\w+)(?::\w+)?>", r"{\1}", route.path)
            out |= {(method.lower(), path) for method in route.methods}
    return out


def test_every_admin_route_is_documented_and_every_documented_operation_exists(tmp_path: Path) -> None:
    documented = {
        (method, path)
        for path, item in document()["paths"].items()
        for method in item
        if method in ("get", "post", "patch", "put", "delete")
    }
    served = _served(tmp_path)
    assert served - documented == set(), "routes missing from /api/v1/openapi.json"
    assert documented - served == set(), "documented operations the server does not have"


def test_every_operation_has_a_unique_stable_operation_id() -> None:
    ops = [
        (method, path, op)
        for path, item in document()["paths"].items()
        for method, op in item.items()
        if method in ("get", "post", "patch", "put", "delete")
    ]
    ids = [op.get("operationId") for _, _, op in ops]
    assert all(isinstance(i, str) and re.fullmatch(r"[a-z][a-z0-9_]*", i) for i in ids), ids
    assert len(set(ids)) == len(ids), "operationIds must be unique"
    # Stable: derived from the route, so the same document names them the same way again.
    assert ids == [
        o.get("operationId")
        for item in document()["paths"].values()
        for m, o in item.items()
        if m in ("get", "post", "patch", "put", "delete")
    ]
    named = {(m, p): op["operationId"] for m, p, op in ops}
    assert named[("get", "/api/v1/toolkits/{slug}/calls")] == "get_toolkits_by_slug_calls"
    assert named[("get", "/api/v1/toolsets/{slug}/calls")] == "get_toolsets_by_slug_calls"  # an alias


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Appliance]:
    with running_appliance(tmp_path_factory.mktemp("schemathesis") / "data") as running:
        yield running


def test_the_document_is_served_without_a_key(app: Appliance) -> None:
    r = httpx.get(app.base_url + "/api/v1/openapi.json", timeout=30)
    assert r.status_code == 200 and r.json()["openapi"] == "3.1.0"
    assert httpx.get(app.base_url + "/api/v1/users", timeout=30).status_code == 401


@pytest.mark.parametrize("part", PARTS)
def test_schemathesis_finds_no_server_error_and_no_response_that_breaks_the_document(
    app: Appliance, tmp_path: Path, part: list[str]
) -> None:
    assert SCHEMATHESIS.exists(), "schemathesis is in the test extra: pip install -e '.[test]'"
    done = subprocess.run(
        [
            str(SCHEMATHESIS),
            "run",
            app.base_url + "/api/v1/openapi.json",
            "--header",
            f"Authorization: Bearer {app.key}",
            "--checks",
            CHECKS,
            "--max-examples",
            "15",
            *part,
            "--exclude-path",
            "/api/v1/toolkits/openapi",
            "--exclude-path",
            "/api/v1/toolkits/mcp",
            "--exclude-path",
            "/api/v1/toolkits/infer",
            "--seed",
            "4",
        ],
        capture_output=True,
        text=True,
        timeout=PART_TIMEOUT_S,
        check=False,
        cwd=tmp_path,  # its example cache goes there, not into the repo
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    assert "passed" in done.stdout
    # the run did not lock the admin out (revoking the key in use is refused)
    me = httpx.get(app.base_url + "/api/v1/me", headers={"Authorization": f"Bearer {app.key}"}, timeout=30)
    assert me.status_code == 200
