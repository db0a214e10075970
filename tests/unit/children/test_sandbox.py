"""The stdio sandbox's decisions (``children/sandbox.py``): what bwrap is told, and when not."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
from pathlib import Path

import pytest

from appliance import config
from appliance.children import sandbox as sandbox_mod
from appliance.children.processes import StdioPolicy, StdioProcess, StdioSpec
from appliance.children.sandbox import (
    PROXY_PORT,
    PROXY_SOCKET,
    Installed,
    Limits,
    Probe,
    Sandbox,
    from_settings,
    package_install,
    probe,
)
from appliance.children.spec import registry_hosts
from appliance.errors import UpstreamError
from tests.support.sandboxes import local_sandbox

ROOT = os.geteuid() == 0


def make(tmp_path: Path, **changes: object) -> Sandbox:
    values: dict[str, object] = {
        "bwrap": "/usr/bin/bwrap",
        "prlimit": "/usr/bin/prlimit",
        "setpriv": "/usr/bin/setpriv",
        "data_dir": tmp_path / "data",
    }
    values.update(changes)
    return Sandbox(**values)  # type: ignore[arg-type]


def launch_argv(box: Sandbox, tmp_path: Path, *, proxy: Path | None = None) -> list[str]:
    home = tmp_path / "data" / "stdio" / ".home" / "p.kit"
    cwd = tmp_path / "data" / "stdio" / "p.kit"
    return box.launch("p.kit", ["/usr/bin/node", "server.js"], {}, home=home, cwd=cwd, proxy=proxy).argv


@pytest.mark.parametrize(
    ("command", "args", "expected"),
    [
        (
            "npx",
            ["-y", "@modelcontextprotocol/server-memory"],
            ["--package=@modelcontextprotocol/server-memory"],
        ),
        ("/usr/bin/npx", ["--yes", "pkg@1.2.3", "--flag"], ["--package=pkg@1.2.3"]),
        ("npx", ["-p", "a", "--package=b", "-y", "bin", "x"], ["--package=a", "--package=b"]),
        ("npx", ["-y", "--", "pkg"], ["--package=pkg"]),
        ("uvx", ["mcp-server-time", "--local-timezone=UTC"], ["--from", "mcp-server-time"]),
        ("uvx", ["--from", "git+https://x/y", "tool"], ["--from", "git+https://x/y"]),
    ],
)
def test_the_package_an_npx_or_uvx_server_fetches_is_installed_by_a_command_that_does_not_run_it(
    command: str, args: list[str], expected: list[str]
) -> None:
    install = package_install(command, args)
    assert install is not None
    assert install[0] == command
    for part in expected:
        assert part in install
    assert install[-1] in ("true", "pass")  # the server itself is never started


@pytest.mark.parametrize(("command", "args"), [("node", ["x.js"]), ("npx", ["-y"]), ("uvx", [])])
def test_nothing_is_installed_for_a_command_that_fetches_nothing(command: str, args: list[str]) -> None:
    assert package_install(command, args) is None


def test_the_limits_become_prlimit_flags_and_zero_leaves_one_unset() -> None:
    flags = Limits(
        memory_bytes=1 << 30, cpu_s=10, processes=64, open_files=0, file_bytes=1 << 20
    ).prlimit_args()
    assert flags == ["--as=1073741824:1073741824", "--cpu=10:15", "--nproc=64:64", "--fsize=1048576:1048576"]


def test_no_network_and_new_namespaces_always_and_the_proxy_only_behind_the_forwarder(tmp_path: Path) -> None:
    argv = launch_argv(make(tmp_path), tmp_path)
    for flag in ("--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--die-with-parent"):
        assert flag in argv
    assert PROXY_SOCKET not in argv
    socket = tmp_path / "e.sock"
    proxied = launch_argv(make(tmp_path, python="/usr/bin/python3"), tmp_path, proxy=socket)
    assert "--unshare-net" in proxied  # still its own network namespace
    assert proxied[proxied.index(PROXY_SOCKET) - 1] == str(socket)
    server = proxied.index("/usr/bin/node")
    assert proxied[server - 1] == "--" and proxied[server - 7 : server - 5] == ["/usr/bin/python3", "-I"]
    with pytest.raises(OSError, match="python3"):
        launch_argv(make(tmp_path), tmp_path, proxy=socket)  # no forwarder without a python


def test_the_proxy_variables_point_at_the_forwarder_and_only_a_run_is_offline(tmp_path: Path) -> None:
    box = make(tmp_path)
    run_env = box.environment(tmp_path, proxied=True)
    assert run_env["HTTPS_PROXY"] == run_env["npm_config_https_proxy"] == f"http://127.0.0.1:{PROXY_PORT}"
    assert run_env["NO_PROXY"] == "" and run_env["npm_config_offline"] == "true"
    install_env = box.environment(tmp_path, install=True, proxied=True)
    assert "npm_config_offline" not in install_env and "UV_OFFLINE" not in install_env
    assert "HTTPS_PROXY" not in box.environment(tmp_path)


def test_only_the_toolkits_own_directories_are_writable_and_the_data_dir_is_never_bound(
    tmp_path: Path,
) -> None:
    argv = launch_argv(make(tmp_path), tmp_path)
    data = str(tmp_path / "data")
    writable = [argv[i + 1] for i, a in enumerate(argv) if a == "--bind"]
    assert writable == [f"{data}/stdio/.home/p.kit", f"{data}/stdio/p.kit"]
    bound = {argv[i + 1] for i, a in enumerate(argv) if a in ("--bind", "--ro-bind")}
    assert data not in bound and f"{data}/master.key" not in bound
    assert argv[argv.index("--chdir") + 1] == f"{data}/stdio/p.kit"
    # the server comes last, after prlimit (and setpriv, as root)
    assert argv[-2:] == ["/usr/bin/node", "server.js"]
    assert "/usr/bin/prlimit" in argv


def test_a_read_path_holding_the_data_dir_shows_it_empty(tmp_path: Path) -> None:
    argv = launch_argv(make(tmp_path, read_paths=(tmp_path,)), tmp_path)
    data = str(tmp_path / "data")
    ro, hide = argv.index(str(tmp_path)), argv.index(data)
    assert argv[ro - 1] == "--ro-bind" and argv[hide - 1] == "--tmpfs"
    first_bind = argv.index("--bind")
    assert ro < hide < first_bind  # bound, then hidden, then its own directories on top


@pytest.mark.skipif(not ROOT, reason="the uid switch happens only for a root gateway")
def test_a_root_gateway_runs_each_toolkit_as_its_own_unprivileged_uid(tmp_path: Path) -> None:
    box = make(tmp_path)
    uid = box.uid_of("p.kit")
    assert uid is not None and box.uid_base <= uid < box.uid_base + 65536
    assert box.uid_of("p.kit") == uid and box.uid_of("p.other") != uid
    argv = launch_argv(box, tmp_path)
    assert f"--reuid={uid}" in argv and "--clear-groups" in argv
    assert argv.index("/usr/bin/setpriv") < argv.index("/usr/bin/prlimit")
    assert "--unshare-user" not in argv  # privileged bwrap: the kernel counts processes by real uid


@pytest.mark.skipif(not ROOT, reason="chown needs root")
def test_preparing_gives_the_toolkits_tree_to_its_uid_without_following_links(tmp_path: Path) -> None:
    box = make(tmp_path)
    home, cwd = tmp_path / "data" / "stdio" / ".home" / "k", tmp_path / "data" / "stdio" / "k"
    secret = tmp_path / "master.key"
    secret.write_text("key")
    cwd.mkdir(parents=True)
    (cwd / "link").symlink_to(secret)
    (cwd / "sub").mkdir()
    (cwd / "sub" / "file").write_text("x")
    box.prepare("k", home, cwd)
    uid = box.uid_of("k")
    for path in (home, cwd, cwd / "sub", cwd / "sub" / "file"):
        assert path.stat().st_uid == uid, path
    assert os.lstat(cwd / "link").st_uid == uid
    assert secret.stat().st_uid == 0  # the link's target is untouched
    assert oct(home.stat().st_mode & 0o777) == "0o700"


def test_a_missing_bwrap_is_reported_with_how_to_install_it(tmp_path: Path) -> None:
    found = probe(str(tmp_path))
    assert found.available is False and found.bwrap is None
    assert "apt install bubblewrap" in found.detail


def settings(tmp_path: Path, mode: str) -> config.Settings:
    return config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path), "TOOLSPOKE_STDIO_SANDBOX": mode})


def test_the_mode_decides_what_happens_without_a_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = Probe(None, None, None, False, "bwrap not found")
    monkeypatch.setattr(sandbox_mod, "probed", lambda: missing)
    assert from_settings(settings(tmp_path, "off")) == (None, "")
    assert from_settings(settings(tmp_path, "auto")) == (None, "")
    box, refusal = from_settings(settings(tmp_path, "require"))
    assert box is None
    assert "TOOLSPOKE_STDIO_SANDBOX=require" in refusal and "apt install bubblewrap" in refusal


def test_a_required_sandbox_that_is_missing_refuses_the_server_and_spawns_nothing(tmp_path: Path) -> None:
    policy = StdioPolicy(
        workdir_root=tmp_path / "stdio",
        base_env={"PATH": os.environ["PATH"]},
        sandbox_refusal="the stdio sandbox is required but unavailable; apt install bubblewrap",
    )
    proc = StdioProcess("p.kit", StdioSpec(command=sys.executable, args=("-c", "pass")), policy)

    async def scenario() -> None:
        with pytest.raises(UpstreamError, match="apt install bubblewrap"):
            await proc.start()
        assert proc.pid is None
        await proc.aclose()

    asyncio.run(scenario())
    assert not (tmp_path / "stdio" / "p.kit").exists()


@pytest.mark.skipif(not probe().available, reason="no sandbox on this machine")
def test_a_sandboxed_child_answers_and_sees_only_its_own_world(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "master.key").write_text("k")
    box = local_sandbox(data)
    assert box is not None
    policy = StdioPolicy(workdir_root=data / "stdio", base_env={"PATH": "/usr/bin:/bin"}, sandbox=box)
    body = (
        "import json, os, sys; sys.stdin.readline();"
        f"print(json.dumps({{'key': os.path.exists({str(data / 'master.key')!r}), 'home': os.environ['HOME'],"
        " 'offline': os.environ.get('npm_config_offline'), 'pid': os.getpid()}), flush=True)"
    )
    proc = StdioProcess("p.kit", StdioSpec(command=sys.executable, args=("-c", body)), policy)

    async def scenario() -> dict[str, object]:
        try:
            await proc.start()
            await proc.write_line(b"{}")
            return dict(json.loads(await asyncio.wait_for(proc.read_line(), 20)))
        finally:
            await proc.aclose()

    seen = asyncio.run(scenario())
    assert seen == {
        "key": False,
        "home": str(data / "stdio" / ".home" / "p.kit"),
        "offline": "true",
        "pid": 2,
    }


def test_an_install_is_recorded_outside_the_toolkits_directories_and_forgotten_with_its_home(
    tmp_path: Path,
) -> None:
    root = tmp_path / "stdio"
    home = root / ".home" / "p.kit"
    home.mkdir(parents=True)
    installed = Installed(root)
    command = ["npx", "--yes", "--package=pkg", "--", "true"]
    assert not installed.has("p.kit", command, home)
    installed.record("p.kit", command, home)
    assert installed.has("p.kit", command, home)
    assert not installed.has("p.other", command, home) and not installed.has("p.kit", [*command, "x"], home)
    recorded = list((root / ".installed").iterdir())
    assert len(recorded) == 1 and home not in recorded[0].parents
    shutil.rmtree(home)  # the operator deletes the HOME to upgrade: the next start installs again
    (home / ".npm").mkdir(parents=True)
    assert not installed.has("p.kit", command, home)


def test_a_registry_the_childs_environment_names_is_open_to_its_install() -> None:
    env = {
        "npm_config_registry": "https://npm.mirror.example:8443/repo/",
        "UV_INDEX_URL": "https://user:pw@pypi.mirror.example/simple",
        "PIP_INDEX_URL": "http://[2001:db8::5]/simple",
        "UV_DEFAULT_INDEX": "file:///opt/pypi/simple",  # no host: nothing to open
        "OTHER": "https://not.a.registry",
    }
    assert registry_hosts(env) == ["npm.mirror.example:8443", "pypi.mirror.example:443", "[2001:db8::5]:80"]
