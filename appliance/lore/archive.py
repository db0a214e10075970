"""The files of a knowledge base: a folder, a .zip or a .tar(.gz) archive, read within bounds.

Nothing is extracted to disk: members are read into memory, each read capped at what is
left of the budget, so a header that lies about a size (a zip bomb) costs at most the cap.
An unsafe archive is refused as a whole (a path that climbs out, an absolute path, a link,
a device, a name twice), because an archive built to escape is not one to take a part of;
hidden files (a name starting with '.') are set aside and listed, never silently dropped.
"""

from __future__ import annotations

import io
import os
import stat
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from appliance.errors import ImportFailed


@dataclass(frozen=True)
class Limits:
    max_files: int  # documents (regular files) in all
    max_bytes: int  # their bytes in all, uncompressed
    max_file_bytes: int  # one file's bytes


@dataclass
class Collected:
    files: dict[str, bytes] = field(default_factory=dict)  # '/'-separated path → bytes
    hidden: list[str] = field(default_factory=list)  # set aside: listed in the report
    unreadable: list[tuple[str, str]] = field(default_factory=list)  # (path, why)
    total: int = 0


class _Budget:
    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.out = Collected()
        self.entries = 0

    def entry(self) -> None:
        # Directories and set-aside entries count too, at a wider cap: walking headers is work.
        self.entries += 1
        if self.entries > 4 * self.limits.max_files + 100:
            raise _refuse(f"it has more than {4 * self.limits.max_files + 100} entries")

    def room(self, path: str, declared: int) -> int:
        """How many bytes ``path`` may be read to (one more than allowed, to see it is over)."""
        if path in self.out.files:
            raise _refuse(f"{path!r} appears twice")
        if len(self.out.files) >= self.limits.max_files:
            raise _refuse(f"it has more than {self.limits.max_files} files")
        if declared > self.limits.max_file_bytes:
            raise _refuse(f"{path!r} is {declared} bytes, over the limit of {self.limits.max_file_bytes}")
        left = self.limits.max_bytes - self.out.total
        if declared > left:
            raise _refuse(f"its files are over the limit of {self.limits.max_bytes} bytes in all")
        return min(self.limits.max_file_bytes, left) + 1

    def add(self, path: str, data: bytes, room: int) -> None:
        if len(data) >= room:  # more than its header said: the cap, not the header, decides
            raise _refuse(f"{path!r} expands past the size limits")
        self.out.files[path] = data
        self.out.total += len(data)


def _refuse(why: str) -> ImportFailed:
    return ImportFailed(f"the knowledge base was refused: {why}; nothing was stored", field="source")


def safe_path(name: str) -> str:
    """A member's name as a relative '/'-path, or a refusal when it could land elsewhere."""
    if "\\" in name or "\x00" in name or name.startswith("/") or (len(name) > 1 and name[1] == ":"):
        raise _refuse(f"{name[:200]!r} is not a relative path")
    parts = [p for p in PurePosixPath(name).parts if p != "."]
    if not parts or any(p == ".." for p in parts):
        raise _refuse(f"{name[:200]!r} climbs out of the archive")
    if len(name) > 1000:
        raise _refuse(f"a path of {len(name)} characters is too long")
    return "/".join(parts)


def _hidden(path: str) -> bool:
    return any(p.startswith(".") or p == "__MACOSX" for p in path.split("/"))


def from_archive(data: bytes, limits: Limits) -> Collected:
    """A .zip, or a tar archive (plain, gzip, bzip2 or xz), by its first bytes."""
    if data[:4] == b"PK\x03\x04" or data[:4] == b"PK\x05\x06":
        return _zip(data, limits)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as archive:
            return _tar(archive, limits)
    except (tarfile.ReadError, EOFError, OSError):  # not a tar, or its compression is broken
        raise ImportFailed(
            "the upload is neither a .zip nor a .tar(.gz) archive; nothing was stored", field="source"
        ) from None


def _zip(data: bytes, limits: Limits) -> Collected:
    budget = _Budget(limits)
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                budget.entry()
                path = safe_path(info.filename)
                mode = info.external_attr >> 16
                if stat.S_ISLNK(mode):
                    raise _refuse(f"{path!r} is a link")
                if info.is_dir():
                    continue
                if _hidden(path):
                    budget.out.hidden.append(path)
                    continue
                room = budget.room(path, info.file_size)
                with archive.open(info) as member:
                    budget.add(path, member.read(room), room)
    except (
        zipfile.BadZipFile,
        zipfile.LargeZipFile,
        EOFError,
        OSError,
        ValueError,
        NotImplementedError,
    ) as exc:
        raise ImportFailed(
            f"the .zip archive is damaged ({exc}); nothing was stored", field="source"
        ) from None
    return budget.out


def _tar(archive: tarfile.TarFile, limits: Limits) -> Collected:
    budget = _Budget(limits)
    try:
        while (info := archive.next()) is not None:
            budget.entry()
            path = safe_path(info.name)
            if info.issym() or info.islnk():
                raise _refuse(f"{path!r} is a link")
            if info.isdir():
                continue
            if not info.isfile():
                raise _refuse(f"{path!r} is not a regular file")
            if _hidden(path):
                budget.out.hidden.append(path)
                continue
            room = budget.room(path, info.size)
            member = archive.extractfile(info)
            budget.add(path, member.read(room) if member is not None else b"", room)
    except (tarfile.TarError, EOFError, OSError, ValueError) as exc:
        raise ImportFailed(
            f"the tar archive is damaged ({exc}); nothing was stored", field="source"
        ) from None
    return budget.out


def from_folder(root: Path, limits: Limits) -> Collected:
    """Every file under ``root``; a link is followed only while it stays inside ``root``."""
    budget = _Budget(limits)
    base = root.resolve()
    for folder, dirs, files in os.walk(base, followlinks=False):
        dirs.sort()
        for name in sorted(files) + [d for d in dirs if (Path(folder) / d).is_symlink()]:
            budget.entry()
            full = Path(folder) / name
            path = full.relative_to(base).as_posix()
            target = full.resolve()
            if not target.is_relative_to(base):
                raise _refuse(f"{path!r} links outside the folder")
            if _hidden(path):
                budget.out.hidden.append(path)
                continue
            try:
                info = target.stat()
                if not stat.S_ISREG(info.st_mode):
                    budget.out.unreadable.append(
                        (path, "not a regular file (a link to a folder is not followed)")
                    )
                    continue
                room = budget.room(path, info.st_size)
                with target.open("rb") as handle:
                    budget.add(path, handle.read(room), room)
            except PermissionError:
                budget.out.unreadable.append((path, "permission denied"))
        dirs[:] = [d for d in dirs if not (Path(folder) / d).is_symlink()]
    return budget.out
