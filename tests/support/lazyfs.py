"""A LazyFS-like FUSE filesystem for power-loss tests (RELIABILITY CRASH-02, after LazyFS).

``python -m tests.support.lazyfs BACKING MOUNT`` serves BACKING at MOUNT. File data written
through MOUNT stays in this process's memory until the file is fsynced (``fsync`` or
``fdatasync``), which is the only way it reaches BACKING. Stopping the filesystem (unmount
or kill) therefore drops every unsynced byte at once: what BACKING holds afterwards is what
a disk would hold after a power cut. Metadata (create, unlink, rename, mkdir) is applied to
BACKING at once, as a journaling filesystem would make it durable soon anyway; an unsynced
file that was created survives as an empty file.

Writes of one file are kept as a whole in-memory copy (fine for the few MB a test writes).
"""

from __future__ import annotations

import errno
import os
import sys
import threading
from typing import Any

import mfusepy as fuse


class Lazy(fuse.Operations):
    use_ns = True

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self.dirty: dict[str, bytearray] = {}  # unsynced file contents, by path
        self._mutex = threading.Lock()

    def _real(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def _load(self, path: str) -> bytearray:
        data = self.dirty.get(path)
        if data is None:
            with open(self._real(path), "rb") as f:
                data = bytearray(f.read())
            self.dirty[path] = data
        return data

    def init(self, path: str) -> None:
        print("mounted", flush=True)  # the test waits for this line

    # -- metadata: straight to the backing directory ------------------------------------

    def getattr(self, path: str, fh: Any = None) -> dict[str, Any]:
        with self._mutex:
            try:
                st = os.lstat(self._real(path))
            except FileNotFoundError:
                raise fuse.FuseOSError(errno.ENOENT) from None
            keys = ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime_ns", "st_mtime_ns")
            out = {k.replace("_ns", ""): getattr(st, k) for k in keys}
            out["st_ctime"] = st.st_ctime_ns
            if path in self.dirty:
                out["st_size"] = len(self.dirty[path])
            return out

    def readdir(self, path: str, fh: Any) -> list[str]:
        return [".", "..", *os.listdir(self._real(path))]

    def access(self, path: str, amode: int) -> int:
        if not os.access(self._real(path), amode):
            raise fuse.FuseOSError(errno.EACCES)
        return 0

    def mkdir(self, path: str, mode: int) -> None:
        os.mkdir(self._real(path), mode)

    def rmdir(self, path: str) -> None:
        os.rmdir(self._real(path))

    def chmod(self, path: str, mode: int) -> int:
        os.chmod(self._real(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> None:
        os.chown(self._real(path), uid, gid)

    def utimens(self, path: str, times: Any = None) -> int:
        os.utime(self._real(path), ns=times)
        return 0

    def statfs(self, path: str) -> dict[str, Any]:
        st = os.statvfs(self._real(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_frsize")
        return {k: getattr(st, k) for k in (*keys, "f_flag", "f_namemax")}

    def unlink(self, path: str) -> None:
        with self._mutex:
            os.unlink(self._real(path))
            self.dirty.pop(path, None)

    def rename(self, old: str, new: str) -> None:
        with self._mutex:
            os.rename(self._real(old), self._real(new))
            self.dirty.pop(new, None)
            if old in self.dirty:
                self.dirty[new] = self.dirty.pop(old)

    # -- data: in memory until fsync ----------------------------------------------------

    def create(self, path: str, mode: int, fi: Any = None) -> int:
        with self._mutex:
            os.close(os.open(self._real(path), os.O_WRONLY | os.O_CREAT, mode))
            self.dirty.setdefault(path, bytearray())
        return 0

    def open(self, path: str, flags: int) -> int:
        if flags & os.O_TRUNC:
            self.truncate(path, 0)
        return 0

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        with self._mutex:
            data = self.dirty.get(path)
            if data is not None:
                return bytes(data[offset : offset + size])
        with open(self._real(path), "rb") as f:
            f.seek(offset)
            return f.read(size)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self._mutex:
            buf = self._load(path)
            if offset > len(buf):
                buf.extend(b"\0" * (offset - len(buf)))
            buf[offset : offset + len(data)] = data
            return len(data)

    def truncate(self, path: str, length: int, fh: Any = None) -> int:
        with self._mutex:
            buf = self._load(path)
            if length < len(buf):
                del buf[length:]
            else:
                buf.extend(b"\0" * (length - len(buf)))
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        with self._mutex:
            data = self.dirty.pop(path, None)
            if data is not None:
                fd = os.open(self._real(path), os.O_WRONLY | os.O_TRUNC)
                try:
                    os.write(fd, bytes(data))
                    os.fsync(fd)
                finally:
                    os.close(fd)
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        return 0

    def flush(self, path: str, fh: int) -> int:
        return 0  # close() is not a sync: unsynced data stays in memory

    def release(self, path: str, fh: int) -> int:
        return 0


def main() -> None:
    backing, mount = sys.argv[1], sys.argv[2]
    fuse.FUSE(Lazy(backing), mount, foreground=True, nothreads=False)


if __name__ == "__main__":
    main()
