"""``toolspoke serve`` writes each log line once, in its own format (Sanic's loggers go through
the root handler only, not a second handler of Sanic's own)."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import httpx
import pytest

from tests.support.servers import running_appliance

pytestmark = pytest.mark.e2e
# "2026-12-02 00:27:26,216 INFO sanic.server: Worker ready [7380]" (Sanic's own format was
# "Main  2026-12-02 00:27:26 +0000 INFO: Worker ready [7380]"): the message after the level.
MESSAGE = re.compile(r"\b(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)(?: [\w.]+)?: (.*)$")


def test_every_log_message_of_serve_appears_once(tmp_path: Path) -> None:
    with running_appliance(tmp_path / "data") as app:
        assert httpx.get(app.base_url + "/healthz", timeout=30).status_code == 200
        headers = {"Authorization": f"Bearer {app.key}"}
        assert httpx.get(app.base_url + "/api/v1/toolkits", headers=headers, timeout=30).status_code == 200
    # Out of the block: serve has stopped and its whole output is read.
    messages = [m.group(1) for line in app.output if (m := MESSAGE.search(line.rstrip()))]
    assert any(m.startswith("Worker ready") for m in messages), app.output  # Sanic's lines are there
    assert any(m.startswith("Stopping worker") for m in messages), app.output
    twice = {m: n for m, n in Counter(messages).items() if n > 1}
    assert twice == {}, "".join(app.output)
    assert not any(line.startswith("Main ") for line in app.output), "Sanic's own format leaked through"
