"""Confine a stdio child: a bubblewrap (``bwrap``) argv, its environment and its limits.

Every stdio MCP server is code from elsewhere running on the gateway's machine. In the
sandbox it sees the system read-only (``/usr``, ``/etc``, the ``/bin`` and ``/lib`` links),
a private ``/tmp``, a minimal ``/dev`` and its own ``/proc``, the operator's extra read-only
paths, and two writable directories of its own toolkit: its work directory and its ``HOME``
(which holds its npm, uv and pip caches). Nothing else of the data directory (the database,
``master.key``, other toolkits) exists in its view, and it has no network: a new network
namespace holds only its own loopback. It lives in new pid, ipc, uts and cgroup namespaces
and dies with the gateway (``--die-with-parent``); when the server's first process ends,
the pid namespace ends and takes every descendant with it.

Limits are set by ``prlimit`` (util-linux) just before the server runs. The kernel never
applies ``RLIMIT_NPROC`` to real root, nor to a user namespace whose root is real root. So
a gateway running as root runs bwrap with real privilege and no user namespace, keeping
only the three capabilities ``setpriv`` and ``--chdir`` need, and ``setpriv`` makes the
server an unprivileged uid of its own per toolkit (``stdio_sandbox_uid_base`` + a hash of
the name) before ``prlimit``: the process bound is that toolkit's, and bwrap sets
no-new-privileges, so no set-uid program gives root back. A gateway that is not root runs
bwrap in a new user namespace, where the kernel counts processes per user per namespace:
the bound is that sandbox's own.

The network is never the host's. A toolkit that declares hosts it may reach gets the
gateway's CONNECT proxy for it (``egress/connect_proxy.py``) as a unix socket bound into
the sandbox, and ``forwarder.py``, run by the system's Python before the server, offers it
on ``127.0.0.1:PROXY_PORT`` as ``HTTPS_PROXY`` and the like; the proxy admits what the
allow-list and the egress guard both admit.

``package_install`` is the command that installs an ``npx``/``uvx`` server's package into
the toolkit's caches without running it: it runs once, in the same confinement, before the
first start, its registry traffic through the same proxy (allowed: the registry hosts), so
that at run time (offline) the package is there.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import hashlib
import logging
import os
import secrets
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from appliance.children.disk import DiskBound, probe_disk
from appliance.config import Settings

log = logging.getLogger(__name__)

INSTALL_HINT = "install bubblewrap (Debian/Ubuntu: `apt install bubblewrap`)"
# System directories every program needs; each is a directory bound read-only, or the
# symbolic link it is on merged-/usr systems (recreated as the same link).
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/opt")
_PROBE_TIMEOUT_S = 10.0
# Inside the sandbox: where the proxy's socket and the forwarder are bound, and the port
# the forwarder listens on (its network namespace holds nothing else to collide with).
PROXY_DIR = "/run/toolspoke"
PROXY_SOCKET = f"{PROXY_DIR}/egress.sock"
PROXY_PORT = 3128
_FORWARDER = Path(__file__).with_name("forwarder.py")
_PROXY_VARIABLES = (
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "https_proxy",
    "http_proxy",
    "npm_config_proxy",
    "npm_config_https_proxy",
)


class SandboxMode(enum.StrEnum):
    OFF = "off"  # children run as plain processes (the pre-sandbox behaviour)
    AUTO = "auto"  # sandboxed where bubblewrap works; otherwise plain, with a warning
    REQUIRE = "require"  # no sandbox, no stdio server


@dataclass(frozen=True)
class Limits:
    """Per-sandbox resource limits (0 leaves one unset)."""

    memory_bytes: int = 4 << 30  # RLIMIT_AS: address space, which node reserves generously
    cpu_s: int = 3600  # RLIMIT_CPU over the server's life (it restarts after idling)
    processes: int = 256  # RLIMIT_NPROC inside the user namespace: a fork bomb stops here
    open_files: int = 1024  # RLIMIT_NOFILE
    file_bytes: int = 1 << 30  # RLIMIT_FSIZE: the largest file it may write
    tmp_bytes: int = 64 << 20  # the size of its private /tmp (memory-backed)

    def prlimit_args(self) -> list[str]:
        pairs = (
            ("as", self.memory_bytes),
            ("cpu", self.cpu_s),
            ("nproc", self.processes),
            ("nofile", self.open_files),
            ("fsize", self.file_bytes),
        )
        # CPU: SIGXCPU at the soft limit (a server may log and exit), SIGKILL 5 s of CPU later.
        hard = {"cpu": self.cpu_s + 5}
        return [f"--{flag}={value}:{hard.get(flag, value)}" for flag, value in pairs if value > 0]


@dataclass(frozen=True)
class Launch:
    """What ``spawn`` runs: the argv and its environment."""

    argv: list[str]
    env: dict[str, str]


@dataclass(frozen=True)
class Probe:
    """What this machine offers (``toolspoke doctor`` prints it)."""

    bwrap: str | None
    prlimit: str | None
    setpriv: str | None
    works: bool
    detail: str
    disable_userns: bool = False
    python: str | None = None  # runs the forwarder: without it, no allowed hosts

    @property
    def proxied(self) -> bool:
        """Whether a sandboxed server can be given allowed hosts (through the proxy)."""
        return self.available and self.python is not None

    @property
    def available(self) -> bool:
        return self.works and self.bwrap is not None and self.prlimit is not None


def probe(path: str = "") -> Probe:
    """Find ``bwrap``, ``prlimit`` and (as root) ``setpriv`` on ``path`` and try a sandbox."""
    search = path or "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
    bwrap, prlimit = shutil.which("bwrap", path=search), shutil.which("prlimit", path=search)
    setpriv = shutil.which("setpriv", path=search)
    python = shutil.which("python3", path=search)
    if bwrap is None:
        return Probe(None, prlimit, None, False, f"bwrap not found; {INSTALL_HINT}")
    if prlimit is None or (os.geteuid() == 0 and setpriv is None):
        return Probe(bwrap, prlimit, setpriv, False, "prlimit or setpriv not found (util-linux)")
    true = shutil.which("true", path=search) or "/bin/true"
    base = [bwrap, *_namespaces(), "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev"]
    last = ""
    extras = [[]] if os.geteuid() == 0 else [["--disable-userns"], []]  # bubblewrap >= 0.8 has it
    for extra in extras:
        try:
            done = subprocess.run(
                [*base, *extra, true], capture_output=True, timeout=_PROBE_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return Probe(bwrap, prlimit, setpriv, False, f"bwrap could not run: {exc}")
        if done.returncode == 0:
            works = "bubblewrap works"
            return Probe(bwrap, prlimit, setpriv, True, works, disable_userns=bool(extra), python=python)
        last = done.stderr.decode("utf-8", "replace").strip()[:500]
    return Probe(bwrap, prlimit, setpriv, False, f"bwrap cannot create namespaces here: {last}")


# The first of the unprivileged uids a root gateway's sandboxes run as (one per toolkit):
# no accounts, no files outside the toolkits' directories, which are given to them.
DEFAULT_UID_BASE = 200000
_UID_SPAN = 1 << 16


def _namespaces() -> list[str]:
    # As root there is no user namespace: bwrap mounts with real privilege, setpriv drops it.
    ns = [] if os.geteuid() == 0 else ["--unshare-user"]
    ns += ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try", "--unshare-net"]
    return [*ns, "--die-with-parent"]


def proxy_environment() -> dict[str, str]:
    """The variables that send a sandboxed program's HTTP(S) through the forwarder."""
    url = f"http://127.0.0.1:{PROXY_PORT}"
    return {**dict.fromkeys(_PROXY_VARIABLES, url), "NO_PROXY": "", "no_proxy": ""}


def package_install(command: str, args: Sequence[str]) -> list[str] | None:
    """The command that installs what ``command args`` would fetch, without running it.

    ``npx [-y] [--package P]... PKG ...`` → ``npx --yes --package P... -- true`` (npm puts
    the packages in its cache and ``_npx`` folder, then runs ``true``); ``uvx [--from P] PKG
    ...`` → ``uvx --from P python -c pass`` (uv builds the tool's environment in its cache).
    None for a command that fetches nothing.
    """
    tool = os.path.basename(command)
    if tool not in ("npx", "uvx"):
        return None
    packages, first = _packages(tool, args)
    if tool == "npx":
        packages = packages or ([first] if first else [])
        if not packages:
            return None
        return [command, "--yes", *(f"--package={p}" for p in packages), "--", "true"]
    source = packages[0] if packages else first
    if not source:
        return None
    return [command, "--from", source, "python", "-c", "pass"]


def _packages(tool: str, args: Sequence[str]) -> tuple[list[str], str]:
    """The ``--package``/``--from`` values and the first positional argument."""
    flags = ("--package", "-p") if tool == "npx" else ("--from",)
    packages: list[str] = []
    it = iter(args)
    for arg in it:
        if arg == "--":
            return packages, next(it, "")
        name, eq, value = arg.partition("=")
        if name in flags:
            packages.append(value if eq else next(it, ""))
        elif not arg.startswith("-"):
            return packages, arg
    return packages, ""


@dataclass(frozen=True)
class Sandbox:
    """The confinement of every stdio child of one gateway (built once, from the settings)."""

    bwrap: str
    prlimit: str
    data_dir: Path
    setpriv: str = ""  # needed only when the gateway is root
    limits: Limits = field(default_factory=Limits)
    read_paths: tuple[Path, ...] = ()
    uid_base: int = DEFAULT_UID_BASE  # used only when the gateway is root
    disable_userns: bool = False
    python: str = ""  # the system's python3, for the forwarder (empty: no allowed hosts)
    disk: DiskBound | None = None  # each writable directory a bounded filesystem (root only)

    def uid_of(self, owner: str) -> int | None:
        """The uid ``owner``'s sandbox runs as: its own when we are root, else ours (None).

        A hash, so the same toolkit gets the same uid after a restart; two toolkits share
        one with odds of about n²/2¹⁷ (they would then share a process budget, not files)."""
        if os.geteuid() != 0:
            return None
        digest = hashlib.sha256(owner.encode()).digest()
        return self.uid_base + int.from_bytes(digest[:4], "big") % _UID_SPAN

    def environment(self, home: Path, *, install: bool = False, proxied: bool = False) -> dict[str, str]:
        """The variables that point every tool's caches and state into ``home``."""
        env = {
            "HOME": str(home),
            "TMPDIR": "/tmp",  # noqa: S108 - the sandbox's own, a private tmpfs
            "XDG_CACHE_HOME": str(home / ".cache"),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_DATA_HOME": str(home / ".local" / "share"),
            "XDG_STATE_HOME": str(home / ".local" / "state"),
            "npm_config_cache": str(home / ".npm"),
            "npm_config_update_notifier": "false",
            "UV_CACHE_DIR": str(home / ".cache" / "uv"),
            # The system's trust store, as Debian's node and pip use: a site's mirror or TLS
            # proxy is trusted by uv where it is trusted by everything else (both names: the
            # variable was renamed in uv 0.9).
            "UV_SYSTEM_CERTS": "1",
            "UV_NATIVE_TLS": "1",
            "PIP_CACHE_DIR": str(home / ".cache" / "pip"),
        }
        if not install:
            # No registry at run time: fail at once from the cache instead of asking one.
            env.update(npm_config_offline="true", UV_OFFLINE="1", PIP_NO_INDEX="1")
        if proxied:
            env.update(proxy_environment())
        return env

    def prepare(self, owner: str, home: Path, cwd: Path) -> None:
        """Create the toolkit's directories (0700); as root, give them to its uid."""
        for path in (home, cwd):
            path.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.disk is not None:
            self.disk.ensure(owner, "home", home)
            self.disk.ensure(owner, "work", cwd)
        uid = self.uid_of(owner)
        if uid is not None:
            for path in (home, cwd):
                _own_tree(path, uid)

    def launch(
        self,
        owner: str,
        command: Sequence[str],
        env: Mapping[str, str],
        *,
        home: Path,
        cwd: Path,
        proxy: Path | None = None,
    ) -> Launch:
        """The bwrap argv running ``command`` (absolute executable first) in ``cwd``, confined;
        with ``proxy`` (the socket of the toolkit's CONNECT proxy), behind the forwarder."""
        if proxy is not None and not self.python:
            raise OSError(0, "no python3 on the system for the egress forwarder (allowed hosts)")
        argv = [self.bwrap, *_namespaces()]
        uid = self.uid_of(owner)
        if uid is not None:
            # setpriv's two, and entering the toolkit's 0700 work directory (its uid's) for
            # --chdir; setpriv's change of uid clears all three before the server runs.
            keep = ("CAP_SETUID", "CAP_SETGID", "CAP_DAC_READ_SEARCH")
            argv += ["--cap-drop", "ALL", *(a for cap in keep for a in ("--cap-add", cap))]
        elif self.disable_userns:
            argv.append("--disable-userns")
        argv += self._system()
        argv += ["--proc", "/proc", "--dev", "/dev"]
        # Private tmpfs mounts, sticky and world-writable as everywhere, and bounded.
        for tmp in ("/tmp", "/dev/shm"):  # noqa: S108
            argv += ["--perms", "1777", "--size", str(self.limits.tmp_bytes), "--tmpfs", tmp]
        made: set[Path] = {Path("/")}
        for path in self.read_paths:
            if path.exists():
                argv += [*_ancestors(path, made), "--ro-bind", str(path), str(path)]
        if any(self.data_dir == p or p in self.data_dir.parents for p in self._visible()):
            argv += ["--tmpfs", str(self.data_dir)]  # a bound parent must not show it
            made.add(self.data_dir)
        for path in (home, cwd):
            argv += [*_ancestors(path, made), "--bind", str(path), str(path)]
        if proxy is not None:
            argv += ["--perms", "0755", "--dir", PROXY_DIR, "--bind", str(proxy), PROXY_SOCKET]
            argv += ["--ro-bind", str(_FORWARDER), f"{PROXY_DIR}/forwarder.py"]
            forward = [self.python, "-I", "-S", f"{PROXY_DIR}/forwarder.py", str(PROXY_PORT), PROXY_SOCKET]
            command = [*forward, "--", *command]
        argv += ["--chdir", str(cwd), "--"]
        if uid is not None:
            argv += [
                self.setpriv,
                f"--reuid={uid}",
                f"--regid={uid}",
                "--clear-groups",
                "--inh-caps=-all",
                "--",
            ]
        argv += [self.prlimit, *self.limits.prlimit_args(), "--", *command]
        return Launch(argv, dict(env))

    def hidden(self, path: str) -> bool:
        """Whether an absolute path the server is given is outside its view (a warning)."""
        target = Path(path)
        return not any(target == p or p in target.parents for p in self._visible())

    def _visible(self) -> list[Path]:
        return [Path(d) for d in _SYSTEM_DIRS if os.path.isdir(d)] + list(self.read_paths)

    def _system(self) -> list[str]:
        argv: list[str] = []
        for d in _SYSTEM_DIRS:
            if os.path.islink(d):
                argv += ["--symlink", os.readlink(d), d]
            elif os.path.isdir(d):
                argv += ["--ro-bind", d, d]
        return argv


def _ancestors(path: Path, made: set[Path]) -> list[str]:
    """The directories leading to a mount point, each made searchable (privileged bwrap
    would make them 0700 and root's, a wall for the sandbox's uid); they are empty."""
    argv: list[str] = []
    for parent in reversed(path.parents):
        made_above = any(m in parent.parents for m in made if m != Path("/"))
        system = any(parent == Path(d) or Path(d) in parent.parents for d in _SYSTEM_DIRS)
        if parent not in made and (made_above or not system):
            argv += ["--perms", "0755", "--dir", str(parent)]
            made.add(parent)
    return argv


def _own_tree(root: Path, uid: int) -> None:
    """Chown what is not ``uid``'s yet under ``root``, never through a link: ``fwalk`` holds
    each directory open and every change is made relative to it, so a server that swaps a
    folder of its own for a link to ``/etc`` meanwhile (an import's trial run and the
    serving child share the directories) makes the gateway change nothing outside."""
    for _top, dirs, files, dirfd in os.fwalk(root, follow_symlinks=False):
        st = os.fstat(dirfd)
        if st.st_uid != uid or st.st_gid != uid:
            os.fchown(dirfd, uid, uid)
        for name in dirs + files:
            with contextlib.suppress(FileNotFoundError):
                st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
                if st.st_uid != uid or st.st_gid != uid:
                    os.chown(name, uid, uid, dir_fd=dirfd, follow_symlinks=False)


class Installed:
    """What is installed in which toolkit's caches: one file per toolkit and install command,
    kept beside (never inside) the directories the sandbox can write, so the gateway never
    writes through a server's link. It names the HOME it was made for by a random mark in
    that HOME (read without following links): a HOME deleted (to upgrade) and made again
    is installed into afresh. A server that forges or removes the mark only changes
    whether its own package is installed again."""

    _MARK = ".toolspoke-home"

    def __init__(self, root: Path) -> None:
        self.root = root / ".installed"

    def _file(self, owner: str, command: Sequence[str]) -> Path:
        digest = hashlib.sha256("\0".join(command).encode()).hexdigest()[:24]
        return self.root / f"{owner}-{digest}"

    def has(self, owner: str, command: Sequence[str], home: Path) -> bool:
        try:
            recorded = self._file(owner, command).read_text().split(" ", 1)[0]
        except OSError:
            return False
        return recorded == _read_mark(home / self._MARK)

    def record(self, owner: str, command: Sequence[str], home: Path) -> None:
        mark = _read_mark(home / self._MARK)
        if not mark:
            mark = secrets.token_hex(16)
            fd = os.open(home / self._MARK, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "w") as f:
                f.write(mark)
        self.root.mkdir(mode=0o700, exist_ok=True)
        self._file(owner, command).write_text(f"{mark} {' '.join(command)}\n")


def _read_mark(path: Path) -> str:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as f:
        return f.read(64).decode("ascii", "replace").strip()


@functools.lru_cache(maxsize=1)
def probed() -> Probe:
    """``probe`` once per process: a gateway, or a CLI command, asks the machine once."""
    return probe()


def from_settings(settings: Settings) -> tuple[Sandbox | None, str]:
    """The sandbox the settings ask for, or None and, in ``require`` mode, why not."""
    mode = SandboxMode(settings.stdio_sandbox)
    if mode is SandboxMode.OFF:
        return None, ""
    found = probed()
    if not found.available or found.bwrap is None or found.prlimit is None:
        if mode is SandboxMode.REQUIRE:
            return None, (
                f"the stdio sandbox is required (TOOLSPOKE_STDIO_SANDBOX=require) but unavailable: "
                f"{_with_hint(found.detail)}"
            )
        _warn_once(found.detail)
        return None, ""
    disk = None
    if settings.stdio_sandbox_disk_mb > 0:
        why = probe_disk()
        if why and mode is SandboxMode.REQUIRE:
            return None, f"TOOLSPOKE_STDIO_SANDBOX_DISK_MB is set, but {why}"
        if why:
            _warn_once(f"no disk bound: {why}")
        else:
            disk = DiskBound(
                Path(settings.data_dir).resolve() / "stdio" / ".disk", settings.stdio_sandbox_disk_mb
            )
    limits = Limits(
        memory_bytes=settings.stdio_sandbox_memory_mb << 20,
        cpu_s=settings.stdio_sandbox_cpu_s,
        processes=settings.stdio_sandbox_processes,
        open_files=settings.stdio_sandbox_open_files,
        file_bytes=settings.stdio_sandbox_file_mb << 20,
        tmp_bytes=settings.stdio_sandbox_tmp_mb << 20,
    )
    return (
        Sandbox(
            bwrap=found.bwrap,
            prlimit=found.prlimit,
            setpriv=found.setpriv or "",
            data_dir=Path(settings.data_dir).resolve(),
            limits=limits,
            read_paths=tuple(Path(p).resolve() for p in settings.stdio_sandbox_read_paths),
            uid_base=settings.stdio_sandbox_uid_base,
            disable_userns=found.disable_userns,
            python=found.python or "",
            disk=disk,
        ),
        "",
    )


@functools.lru_cache(maxsize=1)
def _warn_once(detail: str) -> None:
    log.warning("stdio servers run without a sandbox: %s", _with_hint(detail))


def _with_hint(detail: str) -> str:
    """``detail`` and how to install bubblewrap, once (a probe's detail may already say it)."""
    return detail if INSTALL_HINT in detail else f"{detail}; {INSTALL_HINT}"
