"""The tests are laid out the way the package is (issue 17 item 8).

- ``tests/unit/<package>/`` names a package of ``appliance/`` and is a package itself;
  ``tests/unit/test_<name>.py`` names a top-level module (``appliance/<name>.py``) or is one
  of the few files whose subject crosses every package (``CROSS_CUTTING``).
- Every file in ``tests/web/`` and ``tests/rpc/`` serves the app in process and says so with
  the ``inprocess`` marker; every file in ``tests/e2e/`` starts real servers and is marked
  ``e2e``, so ``-m`` selects each kind whole.

Each check is a function over a tree, run on this repository and on planted bad trees.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.servers import REPO

# Files of tests/unit/ whose subject is no one module, with why.
CROSS_CUTTING = {
    # every regular expression of appliance/ that meets outside text, whatever its package
    "test_hostile_text.py",
}
MARKED = {"web": "inprocess", "rpc": "inprocess", "e2e": "e2e"}


def unit_layout_faults(tests: Path, appliance: Path) -> list[str]:
    """What in ``tests/unit`` does not mirror ``appliance``: one line per fault."""
    packages = {p.parent.name for p in appliance.glob("*/__init__.py")}
    modules = {f"test_{p.stem}" for p in appliance.glob("*.py")}
    faults = []
    for entry in sorted((tests / "unit").iterdir()):
        if entry.name.startswith((".", "__")):
            continue
        if entry.is_dir():
            if entry.name not in packages:
                faults.append(f"tests/unit/{entry.name}/ names no package of appliance/")
            if not (entry / "__init__.py").is_file():
                faults.append(f"tests/unit/{entry.name}/ has no __init__.py")
            faults += [  # a sub-folder mirrors a sub-package (tests/unit/gateway/admin/)
                f"tests/unit/{entry.name}/{d.name}/ names no sub-package of appliance/{entry.name}/"
                for d in sorted(entry.iterdir())
                if d.is_dir()
                and not d.name.startswith((".", "__"))
                and not (appliance / entry.name / d.name / "__init__.py").is_file()
            ]
        elif entry.suffix == ".py" and entry.name not in CROSS_CUTTING and entry.stem not in modules:
            faults.append(f"tests/unit/{entry.name} names no top-level module of appliance/")
    return faults


def _markers(tree: ast.Module) -> set[str]:
    """The marker names of a module's ``pytestmark`` (one mark or a list of them)."""
    found: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            values = node.value.elts if isinstance(node.value, ast.List | ast.Tuple) else [node.value]
            for value in values:
                mark = value.func if isinstance(value, ast.Call) else value
                if isinstance(mark, ast.Attribute):
                    found.add(mark.attr)
    return found


def marker_faults(tests: Path) -> list[str]:
    """Test files of tests/web, tests/rpc and tests/e2e without their kind's marker."""
    faults = []
    for folder, marker in MARKED.items():
        for path in sorted((tests / folder).glob("test_*.py")):
            if marker not in _markers(ast.parse(path.read_text(encoding="utf-8"))):
                faults.append(f"tests/{folder}/{path.name} is not marked {marker!r} (pytestmark)")
    return faults


def test_tests_unit_mirrors_the_package() -> None:
    assert unit_layout_faults(REPO / "tests", REPO / "appliance") == []


def test_every_in_process_and_e2e_file_is_marked_with_its_kind() -> None:
    assert marker_faults(REPO / "tests") == []


@pytest.fixture
def planted(tmp_path: Path) -> tuple[Path, Path]:
    """A small package and a tests tree laid out correctly."""
    appliance, tests = tmp_path / "appliance", tmp_path / "tests"
    for name in ("vault/__init__.py", "vault/crypto.py", "config.py", "__init__.py"):
        (appliance / name).parent.mkdir(parents=True, exist_ok=True)
        (appliance / name).write_text("")
    for name in ("unit/__init__.py", "unit/vault/__init__.py", "unit/vault/test_crypto.py"):
        (tests / name).parent.mkdir(parents=True, exist_ok=True)
        (tests / name).write_text("")
    (tests / "unit" / "test_config.py").write_text("")
    for folder, marker in MARKED.items():
        (tests / folder).mkdir()
        (tests / folder / "test_ok.py").write_text(f"import pytest\npytestmark = pytest.mark.{marker}\n")
    (tests / "e2e" / "test_listed.py").write_text("import pytest\npytestmark = [pytest.mark.e2e]\n")
    return appliance, tests


def test_a_tree_laid_out_right_has_no_fault(planted: tuple[Path, Path]) -> None:
    appliance, tests = planted
    assert unit_layout_faults(tests, appliance) == []
    assert marker_faults(tests) == []


def test_each_misplaced_unit_test_is_reported(planted: tuple[Path, Path]) -> None:
    appliance, tests = planted
    (tests / "unit" / "upstream").mkdir()  # no such package, and no __init__.py
    (tests / "unit" / "vault" / "deep").mkdir()
    (tests / "unit" / "test_vault_crypto.py").write_text("")  # a package's test at the top
    assert unit_layout_faults(tests, appliance) == [
        "tests/unit/test_vault_crypto.py names no top-level module of appliance/",
        "tests/unit/upstream/ names no package of appliance/",
        "tests/unit/upstream/ has no __init__.py",
        "tests/unit/vault/deep/ names no sub-package of appliance/vault/",
    ]


def test_a_file_without_its_kinds_marker_is_reported(planted: tuple[Path, Path]) -> None:
    _, tests = planted
    (tests / "web" / "test_bare.py").write_text("import pytest\n")
    (tests / "rpc" / "test_wrong.py").write_text("import pytest\npytestmark = pytest.mark.e2e\n")
    (tests / "e2e" / "test_local.py").write_text("import pytest\nmark = pytest.mark.e2e\n")
    assert marker_faults(tests) == [
        "tests/web/test_bare.py is not marked 'inprocess' (pytestmark)",
        "tests/rpc/test_wrong.py is not marked 'inprocess' (pytestmark)",
        "tests/e2e/test_local.py is not marked 'e2e' (pytestmark)",
    ]
