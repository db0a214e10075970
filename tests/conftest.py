"""Shared fixtures: a real appliance on loopback and a real HTTP upstream."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import fuzz
from tests.support.conformance import SUMMARY
from tests.support.servers import (
    SANDBOX_READ_PATHS,
    TEST_DEFAULTS,
    Appliance,
    PetstoreUpstream,
    running_appliance,
)

# Every appliance the tests start (a process inheriting this environment, or the CLI run in
# process) sandboxes its stdio servers where bubblewrap works; they run from this checkout
# (the npm peers, the test servers) and this Python, which the sandbox must let them read.
os.environ.setdefault("TOOLSPOKE_STDIO_SANDBOX_READ_PATHS", SANDBOX_READ_PATHS)
# ... and searches lexically unless a test says otherwise (tests/support/servers.TEST_DEFAULTS).
for _name, _value in TEST_DEFAULTS.items():
    os.environ.setdefault(_name, _value)


@pytest.fixture
def petstore() -> Iterator[PetstoreUpstream]:
    with PetstoreUpstream() as upstream:
        yield upstream


@pytest.fixture
def appliance(tmp_path: Path) -> Iterator[Appliance]:
    with running_appliance(tmp_path / "data") as app:
        yield app


# Under pytest-xdist each worker holds its own stash: a worker hands its summary lines to the
# controller (``workeroutput``), which adds them to its own before the terminal summary.
_SUMMARIES = {"conformance": SUMMARY, "fuzz": fuzz.SUMMARY}


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        out["summaries"] = {name: session.config.stash.get(key, []) for name, key in _SUMMARIES.items()}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    got = getattr(node, "workeroutput", {}).get("summaries", {})
    for name, key in _SUMMARIES.items():
        node.config.stash.setdefault(key, []).extend(got.get(name, []))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """The MCP conformance counts per (mode, endpoint, spec version) and the protocol fuzz's
    counts per face, whatever -s says."""
    lines = config.stash.get(SUMMARY, [])
    if lines:
        terminalreporter.section("MCP conformance (tests/e2e/test_conformance.py)")
        for line in lines:
            terminalreporter.write_line(line)
    fuzzed = config.stash.get(fuzz.SUMMARY, [])
    if fuzzed:
        terminalreporter.section(
            "protocol fuzz: messages and failures per face (tests/e2e/test_fuzz_faces.py)"
        )
        for line in fuzzed:
            terminalreporter.write_line(line)
