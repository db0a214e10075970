"""The Makefile's ``binary`` is a real file target: ``make smoke`` reuses dist/toolspoke until
something that goes into it changes. Checked with ``make -n`` on a stand-in tree (no build)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.servers import REPO

MAKE = shutil.which("make")
# Oldest first: each file is given a time after the ones before it (what a finished build leaves).
TREE = [
    "pyproject.toml",
    "build/make_model.py",
    ".venv/bin/python",
    ".venv/.installed",
    ".venv/.installed-binary",
    "appliance/search/model/minilm-l6-v2-int8.onnx",
    "appliance/__init__.py",
    "appliance/gateway/calls.py",
    "migrations/0001_initial.sql",
    "toolspoke.spec",
    "dist/toolspoke",
]


def plan(root: Path, target: str = "smoke") -> str:
    assert MAKE, "make is needed"
    done = subprocess.run(
        [MAKE, "-n", "-f", str(REPO / "Makefile"), target],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def built(tmp_path: Path) -> Path:
    for i, rel in enumerate(TREE):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x")
        os.utime(path, (1_000_000 + i * 10, 1_000_000 + i * 10))
    return tmp_path


def test_a_second_smoke_without_changes_reuses_the_binary(built: Path) -> None:
    steps = plan(built)
    assert "pyinstaller" not in steps
    assert "build/smoke.py dist/toolspoke" in steps


@pytest.mark.parametrize(
    "changed",
    ["appliance/gateway/calls.py", "migrations/0001_initial.sql", "toolspoke.spec", "appliance/new.py"],
)
def test_a_changed_source_rebuilds_it(built: Path, changed: str) -> None:
    (built / changed).write_text("changed")
    os.utime(built / changed, (2_000_000, 2_000_000))
    assert "pyinstaller" in plan(built)


def test_bytecode_caches_written_by_the_tests_do_not_rebuild_it(built: Path) -> None:
    cache = built / "appliance" / "gateway" / "__pycache__" / "calls.cpython-311.pyc"
    cache.parent.mkdir()
    cache.write_text("pyc")
    os.utime(cache, (2_000_000, 2_000_000))
    assert "pyinstaller" not in plan(built)
