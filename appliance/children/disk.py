"""A total disk bound per toolkit: its work directory and its HOME, each a filesystem of its own.

``RLIMIT_FSIZE`` bounds one file; a server writing many files could still fill the disk the
data directory lives on. With ``TOOLSPOKE_STDIO_SANDBOX_DISK_MB`` set, each of a toolkit's
two writable directories is an ext4 filesystem in a sparse image file of that size
(``<data>/stdio/.disk/<owner>.<home|work>.img``), loop-mounted (``nosuid,nodev``) at the
directory's own path before the sandbox binds it: the server sees the same paths, the
gateway reads and writes them as before, and a full one answers ``ENOSPC`` to that toolkit
alone. The image grows with use up to its size; what was in the directory before the first
mount is copied in. Only a root gateway can mount (``probe_disk`` says whether this machine
can); the mounts stay while the gateway runs (a restarted gateway finds them) and are
undone when it stops.

Kernel-enforced, unlike a quota checked now and then, which a fast writer overshoots.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

log = logging.getLogger(__name__)

_TIMEOUT_S = 30.0
_MOUNT_OPTIONS = "loop,nosuid,nodev"


def probe_disk(path: str = "/usr/sbin:/usr/bin:/sbin:/bin") -> str:
    """Why a disk bound cannot be set here, or "" when it can (root, mkfs.ext4, mount)."""
    if os.geteuid() != 0:
        return "a disk bound needs a gateway running as root (loop mounts)"
    missing = [tool for tool in ("mkfs.ext4", "mount", "umount") if shutil.which(tool, path=path) is None]
    if missing:
        return f"{', '.join(missing)} not found (e2fsprogs, mount)"
    if not os.path.exists("/dev/loop-control"):
        return "no loop devices (/dev/loop-control)"
    return ""


class DiskBound:
    """The bounded filesystems of one gateway's toolkits, mounted on first use."""

    def __init__(self, images: Path, megabytes: int) -> None:
        self.images = images
        self.megabytes = megabytes
        self._mine: set[Path] = set()  # mounted by this process: unmounted by it
        self._lock = threading.Lock()  # prepare runs in worker threads

    def ensure(self, owner: str, which: str, path: Path) -> None:
        """Mount ``owner``'s ``which`` image at ``path`` unless it is mounted there already
        (by this gateway, or by another process of it: an import's CLI); a lock on the
        image keeps two processes from mounting one image twice."""
        with self._lock:
            self.images.mkdir(mode=0o700, parents=True, exist_ok=True)
            image = self.images / f"{owner}.{which}.img"
            fd = os.open(self.images / f"{owner}.{which}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                if os.path.ismount(path):
                    return
                fresh = not image.exists()
                if fresh:
                    with open(image, "wb") as f:
                        f.truncate(self.megabytes << 20)  # sparse: disk is used as it is written
                    _run("mkfs.ext4", "-q", "-F", "-m", "0", str(image))
                    if any(path.iterdir()):
                        self._copy_in(image, path)
                _run("mount", "-o", _MOUNT_OPTIONS, str(image), str(path))
                self._mine.add(path)
            finally:
                os.close(fd)  # releases the lock
            if fresh:
                with contextlib.suppress(OSError):
                    (path / "lost+found").rmdir()
            log.info("stdio %s: %s is bounded to %d MiB (%s)", owner, path, self.megabytes, image.name)

    def _copy_in(self, image: Path, path: Path) -> None:
        """What the directory held before it was bounded, copied into its image."""
        with tempfile.TemporaryDirectory(dir=self.images) as staging:
            _run("mount", "-o", _MOUNT_OPTIONS, str(image), staging)
            try:
                _run("cp", "-a", "--", f"{path}/.", staging)
            finally:
                _run("umount", staging)
        for entry in path.iterdir():  # now in the image: nothing stale left beneath it
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()

    def release(self) -> None:
        """Unmount what this process mounted (at shutdown). One still in use (by a server
        another process of the gateway runs) stays mounted, never detached: a detached one
        in use and a new mount of the same image would be two writers of one filesystem."""
        with self._lock:
            for path in sorted(self._mine, reverse=True):
                try:
                    _run("umount", str(path))
                except OSError as exc:
                    log.warning("stdio: %s stays mounted: %s", path, exc.strerror)
            self._mine.clear()


def _run(*argv: str) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, timeout=_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise OSError(0, f"{argv[0]} failed: {exc}") from None
    if done.returncode != 0:
        detail = done.stderr.decode("utf-8", "replace").strip()[:300]
        raise OSError(0, f"{argv[0]} failed: {detail}")
