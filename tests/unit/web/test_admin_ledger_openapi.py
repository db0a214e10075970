"""The ledger's OpenAPI path items describe exactly the ledger's routes."""

from __future__ import annotations

import re
from pathlib import Path

from appliance import config
from appliance.web import admin_ledger
from appliance.web.admin_ledger_openapi import PATHS
from appliance.web.app import create_app
from tests.support.servers import TEST_DEFAULTS


def test_every_ledger_route_is_described_and_every_description_is_a_route(tmp_path: Path) -> None:
    app = create_app(
        config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path), **TEST_DEFAULTS}), name="ledger-openapi"
    )
    served = set()
    for route in app.router.routes:
        if route.name.split(".")[1] == admin_ledger.bp.name:
            path = "/" + re.sub(r"<(\w+)(?::\w+)?>", r"{\1}", route.path)
            served |= {(method.lower(), path) for method in route.methods}
    described = {(method, path) for path, item in PATHS.items() for method in item}
    assert served == described
