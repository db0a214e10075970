"""A fresh clone is all the project needs: no file of it reaches outside the repository.

The tests, benches, build and ``make run`` once read a sibling ``shared`` folder and an absolute workspace
path, so a clone in an ordinary directory failed at collection (and a test that skipped when
its fixture was missing hid it). Everything now lives in the repository; this keeps it so.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# A relative climb into a sibling folder, a path built from the repository's parent, or an
# absolute path into the workspace this project was first written in.
OUTSIDE = re.compile(
    r"""\.\./shared"""
    r"""|parents?\[\d+\]\s*/\s*["']shared["']"""
    r"""|\.parent\s*/\s*["']shared["']"""
    r"""|["']/wor[k]/"""
)
# Prose may say where data came from; only code and build files are held to this.
CHECKED = (".py", ".spec", ".toml", ".cfg", ".sh", ".json", ".yaml", ".yml", "Makefile", "run")


def _tracked() -> list[Path]:
    out = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    me = Path(__file__).resolve()
    return [REPO / line for line in out.splitlines() if line.endswith(CHECKED) and REPO / line != me]


def _offenders(paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        if not path.is_file() or path.stat().st_size > 2_000_000:  # data files, not code
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{path}:{n}: {line.strip()}")
    return found


def test_no_tracked_file_reads_outside_the_repository() -> None:
    tracked = _tracked()
    assert len(tracked) > 100, "git ls-files found too little to be this repository"
    assert _offenders(tracked) == []


@pytest.mark.parametrize(
    "line",
    [
        'SHARED = REPO.parent / "shared"',
        'Path(__file__).resolve().parents[3] / "shared" / "peers"',
        'FIXTURES = Path("/wo' + 'rk/shared/fixtures/openapi")',
        "spec = '.." + "/shared/fixtures/openapi/petstore.yaml'",
    ],
)
def test_the_check_catches_each_way_a_file_once_reached_outside(tmp_path: Path, line: str) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(f"{line}\n")
    assert len(_offenders([planted])) == 1


def test_every_fixture_and_data_set_the_tests_use_is_in_the_repository() -> None:
    from tests.support.peers import UPSTREAM
    from tests.support.servers import FIXTURES

    assert UPSTREAM.is_file()
    specs = sorted(p.name for p in FIXTURES.iterdir() if p.suffix in {".json", ".yaml"})
    assert len(specs) == 14, specs
    assert (FIXTURES / "SOURCES.md").is_file()
    retrieval = REPO / "bench" / "data" / "retrieval"
    for name in ("bfcl-live", "livemcpbench", "metatool", "toolbench"):
        for part in ("catalog.jsonl", "queries-dev.jsonl", "SOURCES.md"):
            assert (retrieval / name / part).is_file(), f"{name}/{part}"


def _leaving(links: dict[str, str]) -> list[str]:
    """The links (path in the repository: target) whose target is absolute or climbs out."""
    return [
        path
        for path, target in links.items()
        if os.path.isabs(target)
        or os.path.normpath(os.path.join(os.path.dirname(path), target)).startswith("..")
    ]


def test_no_tracked_symbolic_link_points_out_of_the_repository() -> None:
    # A worktree's links to another checkout's model and npm peers were once committed: a
    # merge then replaced the real folders with links to themselves, and a clone got links
    # to a path that does not exist there.
    out = subprocess.run(
        ["git", "ls-files", "-s"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout
    paths = [line.split("\t", 1)[1] for line in out.splitlines() if line.startswith("120000 ")]
    links = {path: os.readlink(REPO / path) for path in paths if (REPO / path).is_symlink()}
    assert _leaving(links) == [], f"tracked links that leave the repository: {_leaving(links)}"


def test_the_link_check_catches_absolute_and_climbing_targets() -> None:
    links = {"a/model": "/elsewhere/model", "b/c": "../../x", "d/e": "../f", "g": "h/i"}
    assert _leaving(links) == ["a/model", "b/c"]
