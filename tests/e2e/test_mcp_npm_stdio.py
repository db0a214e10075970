"""npm reference servers over stdio, end to end: server-memory and server-filesystem.

Each is imported with the real CLI as ``node <installed package>`` (``make test`` installs
them in ``tests/peers``; nothing is fetched at test time), the gateway spawns it, and the
official SDK client searches, describes and runs its tools through the bridge. The memory
server keeps its graph in a file of its toolkit's work directory; the filesystem server is
rooted in a folder of its own, which the test reads directly to check what really happened
on disk. Where bubblewrap works (``make test`` installs it), both must run sandboxed
(``children/sandbox.py``): the import says so, and the gateway refuses to run them otherwise.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from appliance.children.sandbox import probe
from tests.support.clients import connect
from tests.support.peers import FILESYSTEM, MEMORY
from tests.support.servers import Appliance, cli, running_appliance

pytestmark = pytest.mark.e2e
# Where the sandbox is available the reference servers must work inside it, not beside it.
SANDBOX = {"TOOLSPOKE_STDIO_SANDBOX": "require"} if probe().available else {}


def run(coro: Any) -> Any:
    return asyncio.run(asyncio.wait_for(coro, timeout=120))


@dataclass
class Fleet:
    app: Appliance
    root: Path  # the filesystem server's only allowed directory
    memory_file: Path


def imported(app: Appliance, *args: str) -> dict[str, Any]:
    done = cli(app.data_dir, "import", "mcp", "--json", *args, env=SANDBOX, timeout=120)
    assert done.returncode == 0, done.stderr
    report = dict(json.loads(done.stdout))
    if SANDBOX:
        assert "sandbox network: none" in " ".join(report["notes"]), report
    return report


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    for package in (MEMORY, FILESYSTEM):
        assert package.exists(), f"{package} is missing: run `make test` (npm install in tests/peers)"
    data = tmp_path_factory.mktemp("npm").resolve() / "data"
    with running_appliance(data, env=SANDBOX) as app:
        # Each server writes in its own toolkit's work directory: in the sandbox nothing
        # else is writable (and it is where the gateway runs it).
        memory_file = data / "stdio" / "default.memory" / "graph.jsonl"
        root = data / "stdio" / "default.files" / "root"
        root.mkdir(parents=True)
        memory = imported(
            app, "--slug", "memory", "--env", f"MEMORY_FILE_PATH={memory_file}", "--", "node", str(MEMORY)
        )
        assert memory["tool_count"] == 9, memory
        files = imported(app, "--slug", "files", "--", "node", str(FILESYSTEM), str(root))
        assert files["tool_count"] >= 13, files
        yield Fleet(app, root, memory_file)


def ok(result: Any) -> Any:
    assert result.is_error is False, result.content
    return result


def text_of(result: Any) -> str:
    return "".join(getattr(part, "text", "") for part in result.content)


def test_search_finds_the_memory_servers_tools_and_the_graph_round_trips(fleet: Fleet) -> None:
    async def scenario() -> None:
        async with connect(fleet.app) as client:
            found = ok(
                await client.call_tool(
                    "search_tools", {"query": "create entities in the knowledge graph", "toolkit": "memory"}
                )
            ).structured_content
            names = [r["name"] for r in found["results"]]
            assert "memory__create_entities" in names[:3], names
            create = next(r for r in found["results"] if r["name"] == "memory__create_entities")
            assert create["runner"] == "run_tool"
            entity = {"name": "Ada", "entityType": "person", "observations": ["wrote the first program"]}
            ok(
                await client.call_tool(
                    "run_tool", {"tool": "memory__create_entities", "input": {"entities": [entity]}}
                )
            )
            graph = ok(await client.call_tool("use_tool", {"tool": "memory__read_graph", "input": {}}))
            assert "Ada" in text_of(graph) and "wrote the first program" in text_of(graph)
        # The server really stored it where we told it to, not in its package folder.
        assert "Ada" in fleet.memory_file.read_text()

    run(scenario())


def test_the_wrong_runner_is_refused_for_a_memory_tool_and_nothing_is_deleted(fleet: Fleet) -> None:
    async def scenario() -> None:
        async with connect(fleet.app) as client:
            entity = {"name": "Grace", "entityType": "person", "observations": ["compilers"]}
            ok(
                await client.call_tool(
                    "run_tool", {"tool": "memory__create_entities", "input": {"entities": [entity]}}
                )
            )
            wrong = await client.call_tool(
                "run_tool", {"tool": "memory__delete_entities", "input": {"entityNames": ["Grace"]}}
            )
            assert wrong.is_error is True
            assert "run_destructive_tool" in text_of(wrong)
            graph = ok(await client.call_tool("use_tool", {"tool": "memory__read_graph", "input": {}}))
            assert "Grace" in text_of(graph)
            ok(
                await client.call_tool(
                    "run_destructive_tool",
                    {"tool": "memory__delete_entities", "input": {"entityNames": ["Grace"]}},
                )
            )
            graph = ok(await client.call_tool("use_tool", {"tool": "memory__read_graph", "input": {}}))
            assert "Grace" not in text_of(graph)

    run(scenario())


def test_a_file_written_through_the_filesystem_server_is_on_disk_and_reads_back(fleet: Fleet) -> None:
    async def scenario() -> None:
        target = fleet.root / "notes" / "hello.txt"
        async with connect(fleet.app) as client:
            found = ok(
                await client.call_tool("search_tools", {"query": "write a file", "toolkit": "files"})
            ).structured_content
            write = next(r for r in found["results"] if r["name"] == "files__write_file")
            assert write["runner"] == "run_destructive_tool"  # it overwrites: destructiveHint true
            ok(
                await client.call_tool(
                    "run_tool",
                    {"tool": "files__create_directory", "input": {"path": str(target.parent)}},
                )
            )
            ok(
                await client.call_tool(
                    write["runner"],
                    {"tool": "files__write_file", "input": {"path": str(target), "content": "hello, disk\n"}},
                )
            )
            assert target.read_text() == "hello, disk\n"
            read = ok(
                await client.call_tool(
                    "use_tool", {"tool": "files__read_text_file", "input": {"path": str(target)}}
                )
            )
            assert "hello, disk" in text_of(read)

    run(scenario())


def test_the_wrong_runner_is_refused_for_a_filesystem_tool_and_the_disk_is_untouched(fleet: Fleet) -> None:
    async def scenario() -> None:
        target = fleet.root / "untouched.txt"
        async with connect(fleet.app) as client:
            for runner in ("use_tool", "run_tool"):
                wrong = await client.call_tool(
                    runner, {"tool": "files__write_file", "input": {"path": str(target), "content": "x"}}
                )
                assert wrong.is_error is True
                assert "run_destructive_tool" in text_of(wrong)
        assert not target.exists()

    run(scenario())


def test_the_filesystem_server_refuses_a_path_outside_its_root_through_the_gateway(fleet: Fleet) -> None:
    async def scenario() -> None:
        outside = fleet.root.parent / "outside.txt"
        async with connect(fleet.app) as client:
            result = await client.call_tool(
                "run_destructive_tool",
                {"tool": "files__write_file", "input": {"path": str(outside), "content": "no"}},
            )
            assert result.is_error is True
            assert "path outside allowed directories" in text_of(result)
        assert not outside.exists()

    run(scenario())


def test_kinds_of_the_npm_servers_tools_follow_their_annotations(fleet: Fleet) -> None:
    async def scenario() -> None:
        expected = {
            "memory__read_graph": ("read", "use_tool"),  # readOnlyHint true
            "memory__create_entities": ("write", "run_tool"),  # destructiveHint false
            "memory__delete_entities": ("destructive", "run_destructive_tool"),
            "files__read_text_file": ("read", "use_tool"),
            "files__create_directory": ("write", "run_tool"),
            "files__write_file": ("destructive", "run_destructive_tool"),
            "files__move_file": ("destructive", "run_destructive_tool"),
        }
        async with connect(fleet.app) as client:
            described = ok(
                await client.call_tool("describe_tools", {"names": list(expected)})
            ).structured_content
        got = {t["name"]: (t["kind"], t["runner"]) for t in described["tools"]}
        assert got == expected

    run(scenario())
