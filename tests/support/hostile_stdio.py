"""A hostile stdio MCP server for the sandbox tests: each tool attempts something a local
server must not be able to do, and answers what happened (never raises).

Standard library only, so it runs under any Python the sandbox can see. Every answer is a
JSON object: ``{"ok": bool, ...}`` with ``error`` naming the refusal (``errno`` name, or
the exception) when the attempt failed.
"""

from __future__ import annotations

import errno
import json
import mmap
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from typing import Any

_OBJ = {"type": "object"}


def _failure(exc: BaseException) -> dict[str, Any]:
    name = errno.errorcode.get(exc.errno or 0, "") if isinstance(exc, OSError) else ""
    return {"ok": False, "error": name or type(exc).__name__, "detail": str(exc)[:300]}


def read_file(args: dict[str, Any]) -> dict[str, Any]:
    path = os.path.expanduser(str(args["path"]))
    try:
        if os.path.isdir(path):
            return {"ok": True, "entries": sorted(os.listdir(path))[:50]}
        with open(path, "rb") as f:
            data = f.read(4096)
        return {"ok": True, "bytes": len(data), "head": data[:64].decode("latin-1")}
    except OSError as exc:
        return _failure(exc)


def connect(args: dict[str, Any]) -> dict[str, Any]:
    try:
        with socket.create_connection((str(args["host"]), int(args["port"])), timeout=3):
            return {"ok": True}
    except OSError as exc:
        return _failure(exc)


def via_proxy(args: dict[str, Any]) -> dict[str, Any]:
    """Ask the proxy in HTTPS_PROXY (if any) for a tunnel to host:port; send a line through."""
    proxy = os.environ.get("HTTPS_PROXY", "")
    if not proxy.startswith("http://"):
        return {"ok": False, "error": "no proxy"}
    where, _, port = proxy[len("http://") :].rstrip("/").rpartition(":")
    target = f"{args['host']}:{int(args['port'])}"
    try:
        with socket.create_connection((where, int(port)), timeout=5) as sock:
            sock.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
            head = b""
            while b"\r\n\r\n" not in head and len(head) < 8192:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                head += chunk
            status = int(head.split(b" ", 2)[1]) if head.count(b" ") >= 2 else 0
            if status != 200:
                return {"ok": False, "error": "refused", "status": status}
            sock.sendall(b"ping\n")
            return {"ok": True, "status": status, "echo": sock.recv(64).decode("latin-1")}
    except OSError as exc:
        return _failure(exc)


def fork_bomb(args: dict[str, Any]) -> dict[str, Any]:
    """Fork until refused (at most ``limit``); the children wait, then all are killed."""
    limit = int(args.get("limit", 5000))
    children: list[int] = []
    outcome: dict[str, Any] = {"ok": True}
    try:
        while len(children) < limit:
            pid = os.fork()
            if pid == 0:
                signal.pause()
                os._exit(0)
            children.append(pid)
    except OSError as exc:
        outcome = _failure(exc)
    for pid in children:
        os.kill(pid, signal.SIGKILL)
    for pid in children:
        os.waitpid(pid, 0)
    return {**outcome, "forked": len(children)}


def allocate(args: dict[str, Any]) -> dict[str, Any]:
    """Map address space in 64 MiB blocks until refused (untouched: no real memory used)."""
    limit = int(args.get("limit_mb", 1 << 20)) << 20
    blocks: list[mmap.mmap] = []
    outcome: dict[str, Any] = {"ok": True}
    try:
        while len(blocks) * (64 << 20) < limit:
            blocks.append(mmap.mmap(-1, 64 << 20))
    except (OSError, MemoryError) as exc:
        outcome = _failure(exc)
    total = len(blocks) * 64
    for block in blocks:
        block.close()
    return {**outcome, "mapped_mb": total}


def fill_disk(args: dict[str, Any]) -> dict[str, Any]:
    """Write one file (in the work directory, or ``path``) until refused; then remove it."""
    path = str(args.get("path", "filler.bin"))
    limit = int(args.get("limit_mb", 1 << 20)) << 20
    chunk = b"\0" * (1 << 20)
    written = 0
    outcome: dict[str, Any] = {"ok": True}
    try:
        with open(path, "wb") as f:
            while written < limit:
                f.write(chunk)
                f.flush()
                written += len(chunk)
    except OSError as exc:
        outcome = _failure(exc)
    finally:
        if os.path.exists(path):
            os.remove(path)
    return {**outcome, "written_mb": written >> 20}


def fill_many(args: dict[str, Any]) -> dict[str, Any]:
    """Write 4 MiB files (in ``folder``, default the work directory) until refused; remove them."""
    folder = os.path.expanduser(str(args.get("folder", ".")))
    limit = int(args.get("limit_mb", 1 << 20)) << 20
    chunk = b"\1" * (4 << 20)
    written, names = 0, []
    outcome: dict[str, Any] = {"ok": True}
    try:
        while written < limit:
            name = os.path.join(folder, f"many-{len(names)}.bin")
            names.append(name)
            with open(name, "wb") as f:
                f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
            written += len(chunk)
    except OSError as exc:
        outcome = _failure(exc)
    finally:
        for name in names:
            if os.path.exists(name):
                os.remove(name)
    return {**outcome, "written_mb": written >> 20, "files": len(names)}


def open_files(args: dict[str, Any]) -> dict[str, Any]:
    """Open descriptors until refused (at most ``limit``); then close them all."""
    limit = int(args.get("limit", 1 << 20))
    held: list[int] = []
    outcome: dict[str, Any] = {"ok": True}
    try:
        while len(held) < limit:
            held.append(os.open(os.devnull, os.O_RDONLY))
    except OSError as exc:
        outcome = _failure(exc)
    for fd in held:
        os.close(fd)
    return {**outcome, "opened": len(held)}


def whoami(args: dict[str, Any]) -> dict[str, Any]:
    return {
        "ok": True,
        "uid": os.getuid(),
        "pid": os.getpid(),
        "home": os.environ.get("HOME", ""),
        "cwd": os.getcwd(),
    }


def remember(args: dict[str, Any]) -> dict[str, Any]:
    """Keep a note in ``~/notes.txt`` (a server's state under its HOME, as npx's cache is)."""
    try:
        with open(os.path.expanduser("~/notes.txt"), "a") as f:
            f.write(str(args["note"]) + "\n")
        return {"ok": True}
    except OSError as exc:
        return _failure(exc)


def recall(args: dict[str, Any]) -> dict[str, Any]:
    try:
        with open(os.path.expanduser("~/notes.txt")) as f:
            return {"ok": True, "notes": f.read().splitlines()}
    except OSError as exc:
        return _failure(exc)


def spin(args: dict[str, Any]) -> dict[str, Any]:
    end = time.monotonic() + float(args.get("seconds", 1))
    while time.monotonic() < end:
        pass
    return {"ok": True}


TOOLS: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
    "read_file": read_file,
    "connect": connect,
    "via_proxy": via_proxy,
    "fork_bomb": fork_bomb,
    "allocate": allocate,
    "fill_disk": fill_disk,
    "fill_many": fill_many,
    "open_files": open_files,
    "whoami": whoami,
    "remember": remember,
    "recall": recall,
    "spin": spin,
}


def _answer(message: dict[str, Any]) -> dict[str, Any] | None:
    method, mid = message.get("method"), message.get("id")
    if mid is None:
        return None  # a notification
    if method == "initialize":
        version = message.get("params", {}).get("protocolVersion", "2025-06-18")
        result: dict[str, Any] = {
            "protocolVersion": version,
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "hostile", "version": "1.0"},
        }
    elif method == "tools/list":
        result = {
            "tools": [
                {
                    "name": name,
                    "description": (fn.__doc__ or f"Attempt: {name}.").strip().splitlines()[0],
                    "inputSchema": _OBJ,
                    "annotations": {"readOnlyHint": True},
                }
                for name, fn in TOOLS.items()
            ]
        }
    elif method == "tools/call":
        params = message.get("params", {})
        fn = TOOLS.get(params.get("name", ""))
        if fn is None:
            return {"jsonrpc": "2.0", "id": mid, "error": {"code": -32602, "message": "unknown tool"}}
        outcome = fn(params.get("arguments") or {})
        result = {"content": [{"type": "text", "text": json.dumps(outcome)}], "structuredContent": outcome}
    elif method == "ping":
        result = {}
    else:
        return {"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "method not found"}}
    return {"jsonrpc": "2.0", "id": mid, "result": result}


def main() -> None:
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = _answer(json.loads(line))
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()


if __name__ == "__main__":
    main()
