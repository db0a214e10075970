"""A steady load of paid calls for the durability tests: raw stateless (2026-07-28) POSTs.

Each worker posts one ``tools/call`` after another until told to stop (or until the server
goes away) and sorts every answer: acknowledged (HTTP 200 with a non-error result), another
answer (kept with its status and text), or no answer at all (the connection was refused or
dropped). Raw requests rather than the SDK client: a worker then learns at once that the
server stopped, and an HTTP 200 with a result is exactly what "acknowledged" means.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.support.clients import modern_tools_call
from tests.support.servers import Appliance


@dataclass
class PaidLoad:
    app: Appliance
    keys: list[str]
    tool: str
    workers: int = 8
    arguments: dict[str, Any] | None = None
    acked: Counter[str] = field(default_factory=Counter)  # per key prefix
    other: list[tuple[int, str]] = field(default_factory=list)  # (status, body) of any other answer
    dropped: int = 0  # requests that got no HTTP answer
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    _moved: asyncio.Event = field(default_factory=asyncio.Event)  # set on every answer

    @property
    def total(self) -> int:
        return sum(self.acked.values())

    async def run(self) -> None:
        await asyncio.gather(*(self._worker(self.keys[i % len(self.keys)]) for i in range(self.workers)))

    async def reach(self, n: int, timeout: float = 60) -> None:
        """Wait (bounded) until ``n`` calls in all have been acknowledged."""

        async def watch() -> None:
            while self.total < n:
                if self.stop.is_set() or self.dropped:
                    raise AssertionError(f"the load stopped at {self.total} of {n} calls: {self.other[:3]}")
                self._moved.clear()
                await self._moved.wait()

        await asyncio.wait_for(watch(), timeout)

    async def _worker(self, key: str) -> None:
        headers, body = modern_tools_call(key, self.tool, self.arguments)
        async with httpx.AsyncClient(base_url=self.app.base_url, headers=headers, timeout=60) as http:
            while not self.stop.is_set():
                try:
                    r = await http.post("/mcp", json=body)
                except httpx.TransportError:
                    self.dropped += 1
                    self._moved.set()
                    return  # the server is gone (or going)
                doc = r.json() if r.headers.get("content-type", "").startswith("application/json") else {}
                if r.status_code == 200 and "result" in doc and not doc["result"]["isError"]:
                    self.acked[key[:12]] += 1
                else:
                    self.other.append((r.status_code, r.text[:300]))
                self._moved.set()
