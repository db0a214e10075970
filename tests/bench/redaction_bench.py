"""Redaction on the call path: what ``PreparedCall.redact`` costs against a large vault.

Run from the repo root: ``.venv/bin/python tests/bench/redaction_bench.py [--secrets N]``.

Builds the needles of N vault secrets (every encoded form, one Aho-Corasick automaton, as
``gateway/redaction.py`` does once per change of the vault), then redacts a 1 MiB answer
(no secret in it, and one secret in it) and a small answer, best of several runs. Prints a
table; not a test (``tests/unit/gateway/test_redaction.py`` bounds the work instead).
"""

from __future__ import annotations

import argparse
import random
import secrets
import string
import time
from collections.abc import Callable

from appliance.egress.auth import UpstreamAuth
from appliance.gateway.credentials import PreparedCall
from appliance.models import CallResult
from appliance.secret import Needles, Secret


def best(fn: Callable[[], object], runs: int) -> float:
    fastest = float("inf")
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        fastest = min(fastest, time.perf_counter() - started)
    return fastest


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--secrets", type=int, default=1000)
    args = p.parse_args()
    rng = random.Random(1)
    values = ["sk_live_" + secrets.token_urlsafe(24) for _ in range(args.secrets)]
    text = "".join(rng.choice(string.ascii_letters + string.digits + ' "{}:,') for _ in range(1 << 20))
    started = time.perf_counter()
    needles = Needles(values)
    build = time.perf_counter() - started
    call = PreparedCall(
        auth=UpstreamAuth("bearer", value=Secret(values[7])),
        authorizer=None,
        max_bytes=1 << 24,
        needles=needles,
    )

    def answer(body: str) -> CallResult:
        return CallResult(content=[{"type": "text", "text": body}], is_error=False)

    clean, leaky = answer(text), answer(text[: 1 << 19] + values[3] + text[1 << 19 :])
    small = answer('{"id": 42, "name": "widget", "ok": true}')
    print(f"needles of {args.secrets} secrets ({needles.size} forms): built in {build * 1000:.0f} ms")
    print(f"1 MiB answer, no secret:  {best(lambda: call.redact(clean), 7) * 1000:7.1f} ms")
    print(f"1 MiB answer, one secret: {best(lambda: call.redact(leaky), 7) * 1000:7.1f} ms")
    print(f"small answer:             {best(lambda: call.redact(small), 2000) * 1e6:7.1f} µs")


if __name__ == "__main__":
    main()
