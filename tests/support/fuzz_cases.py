"""Hostile HTTP cases built from a valid request, and the loop that sends and judges them.

``Run.case`` turns one valid request (method, path, JSON template, its headers) into a hostile
one of a given category; ``Run.send`` sends it raw and records what was wrong with the
answer; ``Run.probe`` checks that valid requests are still served.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tests.support import fuzz
from tests.support.fuzz import EVIL_HOST, EVIL_ORIGIN, Answer, Mutator, Tally, dumps, exchange
from tests.support.fuzz_targets import LEGACY, Server
from tests.support.servers import ADMIN_KEY

MAX_BODY = 256 * 1024  # the fuzzed server's TOOLSPOKE_MAX_REQUEST_BYTES


@dataclass
class Case:
    data: bytes
    what: str
    half_close: bool = False
    framing_ok: bool = True  # a well-framed HTTP request: it must get the face's own answer
    guarded: bool = False  # carries a refused Origin or Host: a 2xx is a bypass
    head_only: bool = False


class Run:
    """One face's loop: build a case per category in turn, send, judge, probe."""

    def __init__(self, server: Server, tally: Tally, rng: random.Random, paths: tuple[bytes, ...]) -> None:
        self.server, self.tally, self.rng, self.paths = server, tally, rng, paths
        self.mut = Mutator(rng)

    def base(self, extra: list[tuple[str, str]] | None = None) -> list[tuple[str, str]]:
        return [
            ("Host", f"127.0.0.1:{self.server.port}"),
            ("Authorization", f"Bearer {ADMIN_KEY}"),
            ("Content-Type", "application/json"),
            ("Accept", "application/json, text/event-stream"),
            ("Connection", "close"),
            *(extra or []),
        ]

    def case(
        self,
        category: str,
        method: str,
        path: str,
        doc: dict[str, Any] | None,
        headers: Callable[[Any], list[tuple[str, str]]],
    ) -> Case:
        rng, mut = self.rng, self.mut
        valid = dumps(doc) if doc is not None else b""
        if (
            category in ("malformed", "wrong_type", "huge", "deep", "batch", "notification")
            and doc is not None
        ):
            body, what = mut.body(category, doc)
            try:
                parsed = json.loads(body) if category != "deep" and rng.random() < 0.5 else doc
            except (ValueError, RecursionError):
                parsed = doc
            return Case(fuzz.request_bytes(method, path, headers(parsed), body), f"{category} {what}")
        if category == "truncated":
            return self.truncated(method, path, headers(doc), valid)
        if category == "oversized":
            return self.oversized(method, path, headers(doc), doc)
        hdrs, what, guarded, framing = mutate_headers(rng, headers(doc), self.server.port)
        return Case(
            fuzz.request_bytes(method, path, hdrs, valid),
            f"headers {what}",
            framing_ok=framing,
            guarded=guarded,
        )

    def sweep_guards(
        self,
        method: str,
        path: str,
        doc: dict[str, Any] | None,
        headers: list[tuple[str, str]],
        *,
        head_only: bool = False,
    ) -> None:
        """Send a valid request once with each hostile Origin and Host (``guard_sweep``)."""
        body = dumps(doc) if doc is not None else b""
        for hdrs, what in guard_sweep(headers):
            data = fuzz.request_bytes(method, path, hdrs, body)
            self.send(Case(data, f"sweep {method} {path} {what}", guarded=True, head_only=head_only), None)

    def truncated(self, method: str, path: str, hdrs: list[tuple[str, str]], valid: bytes) -> Case:
        rng = self.rng
        cut = rng.randrange(0, max(1, len(valid)))
        shape = rng.randrange(4)
        if shape == 0:
            data = fuzz.request_bytes(method, path, hdrs, valid[:cut], length=len(valid))
            return Case(data, f"truncated body {cut}/{len(valid)}", half_close=True, framing_ok=False)
        chunked = [*hdrs, ("Transfer-Encoding", "chunked")]
        if shape == 1:
            data = fuzz.request_bytes(method, path, chunked, f"{len(valid):x}\r\n".encode() + valid[:cut])
            return Case(data, "truncated chunk", half_close=True, framing_ok=False)
        if shape == 2:
            data = fuzz.request_bytes(method, path, chunked, b"zz\r\n" + valid + b"\r\n0\r\n\r\n")
            return Case(data, "bad chunk size", framing_ok=False)
        both = [*chunked, ("Content-Length", str(len(valid)))]
        body = f"{len(valid):x}\r\n".encode() + valid + b"\r\n0\r\n\r\n"
        return Case(
            fuzz.request_bytes(method, path, both, body, length=-1), "chunked and length", framing_ok=False
        )

    def oversized(
        self, method: str, path: str, hdrs: list[tuple[str, str]], doc: dict[str, Any] | None
    ) -> Case:
        rng = self.rng
        shape = rng.randrange(4)
        if shape == 0:
            padded = dumps({**(doc or {}), "pad": "p" * (MAX_BODY + rng.randrange(1, 4096))})
            return Case(fuzz.request_bytes(method, path, hdrs, padded), f"oversized body {len(padded)}")
        if shape == 1:
            lie = [*hdrs, ("Content-Length", str(rng.choice((10**12, 2**63, MAX_BODY + 1))))]
            data = fuzz.request_bytes(method, path, lie, b"{}", length=-1)
            return Case(data, "huge Content-Length", half_close=True, framing_ok=False)
        if shape == 2:
            bad = [*hdrs, ("Content-Length", rng.choice(("-5", "abc", "1e3", "2, 2", "")))]
            return Case(
                fuzz.request_bytes(method, path, bad, b"{}", length=-1),
                "bad Content-Length",
                framing_ok=False,
            )
        chunk = b"p" * 65536
        n = MAX_BODY // len(chunk) + 2
        body = (f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n") * n + b"0\r\n\r\n"
        data = fuzz.request_bytes(method, path, [*hdrs, ("Transfer-Encoding", "chunked")], body)
        return Case(data, f"oversized chunked {n * len(chunk)}")

    def send(self, case: Case, shape: Callable[[Any], bool] | None) -> Answer:
        ans = exchange(self.server.port, case.data, half_close=case.half_close, head_only=case.head_only)
        fuzz.judge(self.tally, ans, case.what, self.paths)
        if case.guarded and ans.status is not None and 200 <= ans.status < 300:
            self.tally.fail("guard_bypassed", f"{case.what}: served {ans.status}")
        if case.framing_ok and ans.status is None and not ans.timed_out:
            self.tally.fail("no_answer", f"{case.what}: connection closed without an answer {ans.error}")
        if shape is not None and case.framing_ok and ans.status is not None and 400 <= ans.status < 500:
            try:
                ok = shape(ans.json())
            except ValueError:
                ok = False
            if not ok:
                self.tally.fail("error_shape", f"{case.what}: {ans.status} {ans.body[:160]!r}")
        if ans.timed_out:
            self.server.recover(self.tally, case.what)
        return ans

    def probe(self, extra: Callable[[], str | None] | None = None) -> None:
        problem = self.server.valid_call() or (extra() if extra else None)
        if problem:
            self.tally.fail("valid_failed", problem)
            self.server.recover(self.tally, "a failed valid request")


def is_rpc_error(doc: Any) -> bool:
    error = doc.get("error") if isinstance(doc, dict) else None
    return doc.get("jsonrpc") == "2.0" and isinstance(error, dict) and isinstance(error.get("code"), int)


def is_api_error(doc: Any) -> bool:
    error = doc.get("error") if isinstance(doc, dict) else None
    return (
        isinstance(error, dict)
        and isinstance(error.get("reason"), str)
        and isinstance(error.get("message"), str)
    )


HOSTILE_ORIGINS = (EVIL_ORIGIN, "null", "http://127.0.0.1.evil.example", "file://", "http://[::1")
HOSTILE_HOSTS = (EVIL_HOST, "evil.example:80", "127.0.0.1.evil.example", "[::1]evil", "a" * 300)


def guard_sweep(headers: list[tuple[str, str]]) -> list[tuple[list[tuple[str, str]], str]]:
    """Every hostile Origin and Host once: a random draw met ``http://[::1`` one time in 60,
    so a face could pass its fuzz without ever being sent the value that once answered 500."""
    kept = [(k, v) for k, v in headers if k.lower() != "host"]
    return [([*headers, ("Origin", o)], f"Origin {o}") for o in HOSTILE_ORIGINS] + [
        ([*kept, ("Host", h)], f"Host {h[:40]}") for h in HOSTILE_HOSTS
    ]


def mutate_headers(
    rng: random.Random, headers: list[tuple[str, str]], port: int
) -> tuple[list[tuple[str, str]], str, bool, bool]:
    """(headers, what, guarded, well framed): one hostile change to a valid request's headers."""
    good_host = f"127.0.0.1:{port}"
    pick = rng.randrange(12)
    names = {k.lower(): v for k, v in headers}

    def without(*drop: str) -> list[tuple[str, str]]:
        return [(k, v) for k, v in headers if k.lower() not in drop]

    if pick == 0:
        name = rng.choice([k for k, _ in headers if k.lower() != "connection"])
        return without(name.lower()), f"no {name}", False, True
    if pick == 1:
        value = rng.choice(HOSTILE_ORIGINS)
        return [*headers, ("Origin", value)], f"Origin {value}", True, True
    if pick == 2:
        pair = [("Origin", "http://127.0.0.1"), ("Origin", EVIL_ORIGIN)]
        pair = pair if rng.random() < 0.5 else pair[::-1]
        return [*headers, *pair], f"duplicate Origin {pair}", True, True
    if pick == 3:
        value = rng.choice(HOSTILE_HOSTS)
        return [*without("host"), ("Host", value)], f"Host {value}", True, True
    if pick == 4:
        pair = [("Host", good_host), ("Host", EVIL_HOST)]
        pair = pair if rng.random() < 0.5 else pair[::-1]
        return [*without("host"), *pair], f"duplicate Host {pair}", True, True
    if pick == 5:
        value = rng.choice(
            ("text/plain", "application/json-patch+json", "application/json, text/plain", "", "*/*")
        )
        extra = (
            [("Content-Type", value)]
            if rng.random() < 0.7
            else [("Content-Type", "application/json"), ("Content-Type", value)]
        )
        return [*without("content-type"), *extra], f"Content-Type {extra}", False, True
    if pick == 6:
        value = rng.choice(("text/html", "", "image/png", "application/json;q=0", "x" * 3000))
        return [*without("accept"), ("Accept", value)], f"Accept {value[:40]}", False, True
    if pick == 7:
        good = f"Bearer {ADMIN_KEY}"
        options = [
            [("Authorization", "Bearer")],
            [("Authorization", "Bearer   ")],
            [("Authorization", "Basic YWRtaW46YWRtaW4=")],
            [("Authorization", "Bearer tsk_" + "A" * 5000)],
            [("Authorization", good), ("Authorization", "Bearer tsk_wrong")],
            [("Authorization", "Bearer tsk_wrong"), ("Authorization", good)],
            [("Authorization", good.lower())],
            [("Authorization", f"Bearer {ADMIN_KEY[:-1]}")],
        ]
        extra = rng.choice(options)
        return [*without("authorization"), *extra], f"Authorization {[v[:30] for _, v in extra]}", False, True
    if pick == 8:
        value = rng.choice(
            ("", "x" * 5000, "../../etc/passwd", "é", "0", names.get("mcp-session-id", "s") + " ")
        )
        if rng.random() < 0.4 and "mcp-session-id" in names:
            extra = [("Mcp-Session-Id", names["mcp-session-id"]), ("Mcp-Session-Id", value)]
        else:
            extra = [("Mcp-Session-Id", value)]
        return (
            [*without("mcp-session-id"), *extra],
            f"Mcp-Session-Id {[v[:30] for _, v in extra]}",
            False,
            True,
        )
    if pick == 9:
        value = rng.choice(
            ("1999-01-01", "2026-07-28\t", "9999-99-99", "", "2026-07-28, 2025-11-25", LEGACY, "2026")
        )
        extra = [("MCP-Protocol-Version", value)]
        if rng.random() < 0.4:
            extra.insert(0, ("MCP-Protocol-Version", names.get("mcp-protocol-version", LEGACY)))
        return [*without("mcp-protocol-version"), *extra], f"MCP-Protocol-Version {extra}", False, True
    if pick == 10:
        return [*headers, ("X-Fill", "a" * rng.choice((9000, 100_000)))], "huge header", False, False
    many = [(f"X-H{i}", "v") for i in range(rng.choice((150, 1000)))]
    return [*headers, *many], f"{len(many)} headers", False, False
