"""The README's command blocks work when run as written, in order, by a newcomer.

The commands are read out of README.md itself, so the test follows the README: reorder or
change a line there and this runs the new text.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from tests.support.servers import FIXTURES, REPO, cli

README = REPO / "README.md"
TOOLSPOKE = ".venv/bin/toolspoke"


def section_commands(heading: str) -> list[list[str]]:
    """The toolspoke commands of the first ```sh block under ``## heading``, as argv lists."""
    text = README.read_text(encoding="utf-8")
    section = text.split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None, f"no sh block under '## {heading}'"
    commands = [shlex.split(line, comments=True) for line in block.group(1).splitlines()]
    commands = [c for c in commands if c]
    assert commands and all(c[0] == TOOLSPOKE for c in commands), commands
    return [c[1:] for c in commands]


def test_the_readme_grants_block_runs_in_the_order_written(tmp_path: Path) -> None:
    data = tmp_path / "data"
    # What the README has the reader do before this section: init, import the petstore.
    assert cli(data, "init").returncode == 0
    spec = str(FIXTURES / "oai-v3.0-petstore.yaml")
    done = cli(
        data, "import", "openapi", spec, "--slug", "petstore", "--base-url", "https://petstore.example/v1"
    )
    assert done.returncode == 0, done.stderr

    commands = section_commands("Users, agents and grants")
    assert sorted(c[:2] for c in commands) == sorted(
        [
            ["users", "add"],
            ["agents", "add"],
            ["keys", "create"],
            ["toolkits", "access"],
            ["grants", "add"],
            ["search", "list pets"],
        ]
    ), "the block changed: check this test still runs what a newcomer would"
    key = None
    for argv in commands:
        if key is not None:
            argv = [key if a == "tsk_..." else a for a in argv]  # the placeholder: the key just made
        if argv[0] == "search":
            argv = [*argv, "--json"]
        done = cli(data, *argv)
        assert done.returncode == 0, (argv, done.stderr)
        if argv[:2] == ["keys", "create"]:
            key = done.stdout.strip().splitlines()[-1]
            assert key.startswith("tsk_")
    seen = json.loads(done.stdout)
    names = {r["name"] for r in (seen["results"] if isinstance(seen, dict) else seen)}
    assert names == {"petstore__listPets"}  # the grant of one tool is what the key sees


def test_granting_a_private_toolkit_tells_the_operator_to_publish_it_first(tmp_path: Path) -> None:
    data = tmp_path / "data"
    spec = str(FIXTURES / "oai-v3.0-petstore.yaml")
    assert (
        cli(
            data, "import", "openapi", spec, "--slug", "petstore", "--base-url", "https://p.example"
        ).returncode
        == 0
    )
    assert cli(data, "users", "add", "alice").returncode == 0
    assert cli(data, "agents", "add", "helper", "--user", "alice").returncode == 0
    refused = cli(data, "grants", "add", "1", "petstore")
    assert refused.returncode == 1
    assert "private" in refused.stderr and "publish it" in refused.stderr
    missing = cli(data, "grants", "add", "1", "nosuch")
    assert missing.returncode == 1 and "no toolkit named 'nosuch'" in missing.stderr


def test_where_the_readme_shows_the_inspectors_header_it_says_node_22_is_needed() -> None:
    text = README.read_text(encoding="utf-8")
    shown = [m.start() for m in re.finditer(r"inspector --cli .*\n?.*--header", text)]
    assert shown, "the README shows the Inspector with --header"
    for at in shown:
        before = text[max(0, at - 400) : at]
        assert "Node 22 or later" in before, "say the Inspector's --header needs Node 22 beside it"
