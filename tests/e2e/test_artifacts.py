"""Large results kept aside, end to end (issue 22, item 4): the acceptance round trip.

A real ``toolspoke serve``, the official MCP SDK client and a real HTTP upstream
(``tests/support/bulk_upstream.py``). The toolkit's response cap is raised to 4 MiB and a call
returns a 2 MB JSON answer: it is stored, its head and handle answered; a byte range, lines, the
lines matching a text and a JSON path are read back and compared byte for byte with what the
upstream sent; another agent of the same user (who sees the same tool) is told there is no
such result, in the very words a handle nobody holds gets; reading leaves no audit row. The
in-process and unit tests (``tests/rpc/test_artifacts.py``, ``tests/unit/artifacts/``,
``tests/unit/gateway/test_artifacts.py``) cover the bounds, expiry and hostile arguments.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from tests.support.accounts import add_user_keys, admin, as_key, credits_path, open_db, run
from tests.support.bulk_upstream import BulkUpstream, body, spec
from tests.support.clients import connect
from tests.support.servers import Appliance, running_appliance

pytestmark = pytest.mark.e2e

ITEMS = 16000  # about 2 MB of indented JSON
CAP = 4 * 1024 * 1024


@pytest.fixture(scope="module")
def upstream() -> Iterator[BulkUpstream]:
    with BulkUpstream() as up:
        yield up


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory, upstream: BulkUpstream) -> Iterator[Appliance]:
    env = {"TOOLSPOKE_DEMO": "0", "TOOLSPOKE_EMBEDDINGS": "none"}
    with running_appliance(tmp_path_factory.mktemp("artifacts") / "data", env=env) as running:
        r = admin(running, "POST", "/toolkits/openapi", {"slug": "bulk", "spec": spec(upstream.base_url)})
        assert r.status_code == 201, r.text
        r = admin(running, "PUT", "/toolkits/bulk/limits", {"max_response_bytes": CAP})
        assert r.status_code == 200 and r.json()["effective"] == CAP, r.text
        r = admin(running, "PATCH", "/toolkits/bulk/access", {"default": True})  # agents see it
        assert r.status_code == 200, r.text
        yield running


def _texts(result: Any) -> list[str]:
    return [part.text for part in result.content]


def _audit_rows(data_dir: Path) -> int:
    with closing(open_db(data_dir, read_only=True)) as db:
        return int(db.execute("SELECT count(*) FROM audit_log").fetchone()[0])


def test_a_2_mb_result_is_kept_aside_read_back_by_range_line_match_and_path_and_refused_to_another(
    app: Appliance,
) -> None:
    mine, theirs = add_user_keys(app.data_dir, "ada", 2, agents=True)
    assert admin(app, "POST", credits_path(app, "ada"), {"amount": 10}).status_code == 201
    sent = body(ITEMS)
    assert 2_000_000 <= len(sent) < CAP

    async def scenario() -> dict[str, Any]:
        out: dict[str, Any] = {}
        async with connect(as_key(app, mine)) as client:
            called = await client.call_tool("use_tool", {"tool": "bulk__listItems", "input": {"n": ITEMS}})
            out["called"] = called
            out["audit_after_call"] = _audit_rows(app.data_dir)
            handle = called.meta["toolspoke/artifact"]["handle"]
            out["handle"] = handle

            async def read(**args: Any) -> Any:
                answer = await client.call_tool("read_result", {"handle": handle, **args})
                assert not answer.is_error, _texts(answer)
                assert json.loads(answer.content[0].text) == answer.structured_content
                return answer.structured_content

            out["range"] = await read(offset=1_000_000)
            out["lines"] = await read(line=50_001)
            out["match"] = await read(match='"name": "item-12345"')
            out["path"] = await read(path="items[12345].name")
            out["object"] = await read(path="$.items[7]")
            out["audit_after_reads"] = _audit_rows(app.data_dir)
        async with connect(as_key(app, theirs)) as other:
            out["refused"] = await other.call_tool("read_result", {"handle": handle})
            nobody = "res_" + "A" * 24
            out["nobody"] = await other.call_tool("read_result", {"handle": nobody})
        return out

    got = run(scenario())
    called = got["called"]
    assert not called.is_error
    head, note = _texts(called)
    meta = called.meta["toolspoke/artifact"]
    assert meta["bytes"] == len(sent) and meta["lines"] == sent.count(b"\n") + 1
    assert sent.startswith(head.encode()) and meta["head"] == len(head.encode()) <= 4096
    assert got["handle"] in note and f"{len(sent)} bytes" in note
    assert called.structured_content is None  # 2 MB are not sent twice, nor once

    assert got["range"]["offset"] == 1_000_000
    assert got["range"]["text"].encode() == sent[1_000_000:1_016_384]  # one read: the threshold
    assert got["range"]["next_offset"] == 1_016_384

    lines = sent.decode().split("\n")
    read = got["lines"]["lines"]
    assert len(read) > 100 and read == lines[50_000 : 50_000 + len(read)]
    assert sum(len(x) + 1 for x in read) <= 16384 and got["lines"]["next_line"] == 50_001 + len(read)

    [found] = got["match"]["found"]
    assert lines[found["line"] - 1].strip() == '"name": "item-12345",'
    assert got["match"]["end"] is True

    assert got["path"]["value"] == "item-12345"
    assert got["object"]["value"] == {
        "id": 7,
        "name": "item-00007",
        "note": json.loads(sent)["items"][7]["note"],
    }

    # reading is free and unaudited: the one call left one row, the reads none
    assert got["audit_after_reads"] == got["audit_after_call"]

    refused, nobody = got["refused"], got["nobody"]
    assert refused.is_error and nobody.is_error
    words = _texts(refused)[0]
    assert "no kept result" in words
    assert re.sub(r"res_\S+", "H", words) == re.sub(r"res_\S+", "H", _texts(nobody)[0])
    assert "item-" not in words
