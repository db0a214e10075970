"""Issue 21: an ``npx``/``uvx`` server's package is installed in its sandbox, through the guard.

The install runs with no network of its own (``--unshare-net``, like the server): its
registry traffic goes through the gateway's CONNECT proxy, which admits the registry hosts
(``TOOLSPOKE_STDIO_INSTALL_HOSTS``) only where the egress guard admits their addresses.
This machine reaches npm and PyPI through a mirror on a reserved address, so the tests
open exactly the addresses the registries resolve to in ALLOWED_TOOL_CIDRS, as an operator
with such a mirror would; without that, or with the registry not among the install hosts,
the install is refused and the error says which host and why.

Needs the registries (skipped where their names do not resolve) and a few seconds each.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.children.sandbox import probe
from tests.support.servers import SANDBOX_READ_PATHS, cli

pytestmark = pytest.mark.e2e
REGISTRIES = ("registry.npmjs.org", "pypi.org", "files.pythonhosted.org")
MEMORY = "@modelcontextprotocol/server-memory@2026.8.31"  # the version tests/peers pins

if not probe().available:
    pytest.skip(f"no sandbox here: {probe().detail}", allow_module_level=True)


def _addresses() -> list[str]:
    found: list[str] = []
    for host in REGISTRIES:
        try:
            found += [str(info[4][0]) for info in socket.getaddrinfo(host, 443, type=socket.SOCK_STREAM)]
        except OSError:
            pytest.skip(f"{host} does not resolve here: the install tests need the registries")
    return list(dict.fromkeys(found))


def _opening(addresses: list[str]) -> str:
    """ALLOWED_TOOL_CIDRS opening the registries' addresses where the guard would refuse them."""
    private = [a for a in addresses if not ipaddress.ip_address(a).is_global]
    return ",".join(["127.0.0.1/32", *(f"{a}/{32 if ':' not in a else 128}" for a in private)])


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("installs") / "data"
    done = cli(folder, "init")
    assert done.returncode == 0, done.stderr
    return folder


def import_server(
    data: Path, slug: str, *command: str, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return cli(
        data,
        "import",
        "mcp",
        "--json",
        "--slug",
        slug,
        "--",
        *command,
        env={
            "TOOLSPOKE_STDIO_SANDBOX": "require",
            "TOOLSPOKE_STDIO_SANDBOX_READ_PATHS": SANDBOX_READ_PATHS,
            # uvx from the test environment (the uv wheel of the test extra), npx from the system
            "PATH": f"{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
            **env,
        },
        timeout=28,
    )


def test_an_npx_server_is_installed_through_the_guard_and_then_runs_offline(data: Path) -> None:
    cidrs = _opening(_addresses())
    done = import_server(data, "memory", "npx", "-y", MEMORY, env={"ALLOWED_TOOL_CIDRS": cidrs})
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["tool_count"] == 9 and "sandbox network: none" in " ".join(report["notes"]), report
    # In the toolkit's own cache: the server ran from there, with no network at all.
    assert any((data / "stdio" / ".home" / "default.memory" / ".npm").iterdir())


def test_a_uvx_server_is_installed_through_the_guard_and_then_runs_offline(data: Path) -> None:
    cidrs = _opening(_addresses())
    done = import_server(data, "time", "uvx", "mcp-server-time", env={"ALLOWED_TOOL_CIDRS": cidrs})
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert {t["name"] for t in report["tools"]} == {"time__get_current_time", "time__convert_time"}
    assert (data / "stdio" / ".home" / "default.time" / ".cache" / "uv").is_dir()


def test_an_install_the_allow_list_or_the_guard_refuses_fails_naming_the_host_and_why(data: Path) -> None:
    addresses = _addresses()
    npx = ("npx", "-y", MEMORY)
    unlisted = import_server(
        data,
        "unlisted",
        *npx,
        env={"ALLOWED_TOOL_CIDRS": _opening(addresses), "TOOLSPOKE_STDIO_INSTALL_HOSTS": "pypi.org"},
    )
    assert unlisted.returncode != 0
    assert (
        "egress proxy refused registry.npmjs.org:443: not in the toolkit's allowed hosts" in unlisted.stderr
    )
    if all(ipaddress.ip_address(a).is_global for a in addresses):
        return  # public registries: the guard admits them, as it should
    guarded = import_server(data, "guarded", *npx, env={"ALLOWED_TOOL_CIDRS": "127.0.0.1/32"})
    assert guarded.returncode != 0
    assert "egress proxy refused registry.npmjs.org:443: registry.npmjs.org resolves to" in guarded.stderr
    assert "ALLOWED_TOOL_CIDRS" in guarded.stderr
