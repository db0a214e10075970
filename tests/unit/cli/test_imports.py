"""``toolspoke import examples``: what the operator sees (click's runner, a real data dir)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from appliance.cli import main
from tests.support.chat_server import ChatServer
from tests.support.inprocess import initialise
from tests.support.leaks import assert_no_leak

TOKEN = "cli-token-0123456789abcdef"
API = "http://127.0.0.1:9"


def invoke(data: Path, *args: str, env: dict[str, str] | None = None) -> Result:
    full = {"TOOLSPOKE_DATA_DIR": str(data), "ALLOWED_TOOL_CIDRS": "127.0.0.1/32", **(env or {})}
    return CliRunner().invoke(main, list(args), env=full, catch_exceptions=False)


def examples(tmp_path: Path, text: str) -> str:
    path = tmp_path / "examples.txt"
    path.write_text(text)
    return str(path)


def test_a_dry_run_lists_each_tool_with_what_it_came_from_and_stores_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    initialise(data)
    source = examples(
        tmp_path,
        f"curl -H 'X-API-Key: {TOKEN}' {API}/v1/items/1\ncurl -H 'X-API-Key: {TOKEN}' {API}/v1/items/2\n",
    )
    done = invoke(data, "import", "examples", source, "--slug", "items", "--dry-run")
    assert done.exit_code == 0, done.output
    assert "would import 1 tools into default/items" in done.stdout
    assert (
        "pending  read         items__get_item  GET /v1/items/{item_id}  (from line 1, line 2)" in done.stdout
    )
    assert "credential (header) would be sealed in the vault" in done.stderr
    assert_no_leak(done.output, TOKEN, where="in the CLI's output")
    listed = invoke(data, "toolkits", "--json")
    assert "items" not in [k["slug"] for k in json.loads(listed.stdout)]


def test_a_dry_run_says_which_names_and_descriptions_the_model_gave(tmp_path: Path) -> None:
    data = tmp_path / "data"
    initialise(data)
    source = examples(tmp_path, f"curl -H 'X-API-Key: {TOKEN}' {API}/v1/items/1\n")
    with ChatServer() as chat:
        env = {"TOOLSPOKE_INFER_CHAT_URL": chat.base_url, "TOOLSPOKE_INFER_CHAT_MODEL": "namer"}
        done = invoke(data, "import", "examples", source, "--slug", "items", "--dry-run", env=env)
        sent = chat.sent()
    assert done.exit_code == 0, done.output
    assert (
        "pending  read         items__fetch_get_item  GET /v1/items/{item_id}  "
        "(from line 1; name and description by the model)" in done.stdout
    )
    assert "note: 1 of 1 tool(s) named or described by the model namer" in done.stderr
    assert_no_leak(done.output + sent, TOKEN, where="in the CLI's output or what the model was sent")


def test_an_import_leaves_the_tools_pending_until_approved_by_name(tmp_path: Path) -> None:
    data = tmp_path / "data"
    initialise(data)
    source = examples(tmp_path, f"curl -H 'Authorization: Bearer {TOKEN}' '{API}/v1/items?page=2'\n")
    done = invoke(data, "import", "examples", source, "--slug", "items", "--json")
    assert done.exit_code == 0, done.output
    assert json.loads(done.stdout)["tools"][0]["inferred_from"] == ["line 1"]
    pending = invoke(data, "pending", "items", "--json")
    assert [t["name"] for t in json.loads(pending.stdout)["pending"]] == ["items__list_items"]
    approved = invoke(data, "approve", "items", "--tool", "items__list_items")
    assert approved.stdout.strip() == "approved items__list_items"
    shown = invoke(data, "credentials", "show", "items", "--json")
    assert json.loads(shown.stdout)["scheme"] == "bearer"
    assert_no_leak(done.output + pending.output + shown.output, TOKEN, where="in the CLI's output")


def test_conflicting_examples_exit_1_listing_each_conflict(tmp_path: Path) -> None:
    data = tmp_path / "data"
    initialise(data)
    source = examples(tmp_path, f'curl --json \'{{"a": 1}}\' {API}/x\ncurl --json \'{{"a": "s"}}\' {API}/x\n')
    done = invoke(data, "import", "examples", source, "--slug", "x")
    assert done.exit_code == 1
    assert "conflict in POST /x: body.a" in done.stderr
    assert "nothing was stored" in done.stderr
