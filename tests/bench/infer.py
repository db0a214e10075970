"""Tool inference from examples: how long a 500-request HAR takes, parsed, inferred, stored.

Run from the repo root: ``.venv/bin/python tests/bench/infer.py [--requests N]``.

Builds a HAR like a recorded session of an internal API (25 endpoints: collections, items by
id, nested resources; JSON bodies with nested objects and arrays; JSON answers of about a
kilobyte; a bearer token on every request), then times the pure work (parse + infer, best
of several runs), a dry run and a stored import through the gateway on a fresh data
directory, and the pure work at 10x the size (the work should grow linearly). Prints a
table; not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from appliance import config
from appliance.catalogue.examples_har import parse_har
from appliance.catalogue.examples_infer import infer_toolkit
from appliance.gateway import examples_import
from appliance.gateway.runtime import Runtime
from tests.bench.redaction_bench import best

RESOURCES = ["users", "projects", "tickets", "comments", "builds", "deploys", "alerts", "teams"]
TOKEN = "bench-token-0123456789abcdef"


def entry(rng: random.Random, i: int) -> dict[str, Any]:
    res = RESOURCES[i % len(RESOURCES)]
    item = {
        "id": rng.randint(1, 10_000),
        "name": f"{res}-{rng.randint(1, 999)}",
        "status": rng.choice(["open", "closed", "pending"]),
        "created": "2026-01-02T03:04:05Z",
        "owner": {"email": f"u{rng.randint(1, 99)}@example.org", "id": rng.randint(1, 99)},
        "labels": [rng.choice(["a", "b", "c"]) for _ in range(rng.randint(0, 4))],
        "notes": "x" * rng.randint(200, 700),
        f"{res[:-1]}_field": rng.randint(1, 9),  # each resource has fields of its own
    }
    shape = i % 5
    if shape == 0:
        method, url, body = "GET", f"/api/v2/{res}?page={rng.randint(1, 9)}&per_page=50", None
        answer: Any = {"items": [item, item], "total": 2}
    elif shape == 1:
        method, url, body = "GET", f"/api/v2/{res}/{item['id']}", None
        answer = item
    elif shape == 2:
        method, url, body = (
            "POST",
            f"/api/v2/{res}",
            {k: item[k] for k in ("name", "status", "owner", "labels")},
        )
        answer = item
    elif shape == 3:
        method, url, body = "PATCH", f"/api/v2/{res}/{item['id']}", {"status": item["status"]}
        answer = item
    else:
        method, url, body = "GET", f"/api/v2/teams/{rng.randint(1, 50)}/{res}", None
        answer = [item]
    request: dict[str, Any] = {
        "method": method,
        "url": "https://internal.example.com" + url,
        "headers": [
            {"name": "Authorization", "value": f"Bearer {TOKEN}"},
            {"name": "Accept", "value": "application/json"},
            {"name": "User-Agent", "value": "bench"},
        ],
    }
    if body is not None:
        request["postData"] = {"mimeType": "application/json", "text": orjson.dumps(body).decode()}
    text = orjson.dumps(answer).decode()
    return {
        "request": request,
        "response": {"status": 200, "headers": [], "content": {"mimeType": "application/json", "text": text}},
    }


def har(n: int) -> bytes:
    rng = random.Random(7)
    return orjson.dumps({"log": {"version": "1.2", "entries": [entry(rng, i) for i in range(n)]}})


def pure(data: bytes) -> int:
    examples, skipped = parse_har(data.decode())
    return len(infer_toolkit(examples, "bench", source="bench", skipped=skipped).draft.tools)


async def through_gateway(data: bytes, base: Path) -> tuple[float, float, int]:
    settings = config.load(cli={"data_dir": str(base / "data")}, env={"TOOLSPOKE_DEMO": "0"})
    rt = Runtime(settings)
    await rt.open()
    try:
        started = time.perf_counter()
        await examples_import.import_examples(rt, "bench.har", slug="bench", data=data, dry_run=True)
        dry = time.perf_counter() - started
        started = time.perf_counter()
        report = await examples_import.import_examples(rt, "bench.har", slug="bench", data=data)
        stored = time.perf_counter() - started
        return dry, stored, len(report.tools)
    finally:
        await rt.close()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=500)
    args = p.parse_args()
    data = har(args.requests)
    tools = pure(data)
    seconds = best(lambda: pure(data), 5)
    big = har(args.requests * 10)
    big_seconds = best(lambda: pure(big), 2)
    with tempfile.TemporaryDirectory() as tmp:
        dry, stored, stored_tools = asyncio.run(through_gateway(data, Path(tmp)))
    print(f"| HAR of {args.requests} requests | {len(data) / 1024:.0f} KiB | {tools} tools |")
    print("|---|---|---|")
    per = seconds / args.requests * 1e6
    print(f"| parse + infer (pure, best of 5) | {seconds * 1000:.1f} ms | {per:.0f} µs/request |")
    print(f"| dry run through the gateway | {dry * 1000:.1f} ms | |")
    print(f"| import stored (pending, credential sealed) | {stored * 1000:.1f} ms | {stored_tools} tools |")
    print(
        f"| parse + infer at {args.requests * 10} requests ({len(big) / 1024 / 1024:.1f} MiB) | "
        f"{big_seconds * 1000:.1f} ms | {big_seconds / seconds:.1f}x for 10x the input |"
    )


if __name__ == "__main__":
    main()
