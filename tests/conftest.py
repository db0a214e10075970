"""Shared fixtures: a real appliance on loopback and a real HTTP upstream."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import fuzz
from tests.support.conformance import SUMMARY
from tests.support.servers import Appliance, PetstoreUpstream, running_appliance


@pytest.fixture
def petstore() -> Iterator[PetstoreUpstream]:
    with PetstoreUpstream() as upstream:
        yield upstream


@pytest.fixture
def appliance(tmp_path: Path) -> Iterator[Appliance]:
    with running_appliance(tmp_path / "data") as app:
        yield app


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
