"""The import direction of ARCHITECTURE.md, enforced by parsing every module's imports.

errors, config, models ← db ← rooms (catalogue, search, vault, access, ledger, upstream)
← gateway ← rpc ← web ← cli. Rooms never import each other. Some libraries live in one
place only: sanic in web/, click in cli.py, aiosqlite in db/, cryptography in
vault/crypto.py, httpx in upstream/ only (the embeddings provider reaches its endpoint
through gateway/semantic_egress.py, so no room but upstream/ holds an HTTP client).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "appliance"
# errors is the floor; config and models may use it (never each other's neighbours above).
BASE = {"__init__": 0, "errors": 1, "secret": 1, "config": 2, "models": 2}
ROOMS = ("catalogue", "search", "vault", "access", "ledger", "upstream")
LEVEL = {
    **BASE,
    "db": 3,
    **dict.fromkeys(ROOMS, 4),
    "gateway": 5,
    "rpc": 6,
    "web": 7,
    "cli": 8,
    "__main__": 9,
}
LIBRARY_HOMES = {
    "sanic": ("web",),
    "click": ("cli",),
    "aiosqlite": ("db",),
    "sqlean": ("db",),
    "cryptography": ("vault/crypto",),
    "httpx": ("upstream",),
    "ahocorasick": ("secret",),
}


def _part(module_path: Path) -> str:
    rel = module_path.relative_to(PKG).with_suffix("")
    return rel.parts[0]


def _imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
    return found


MODULES = sorted(PKG.rglob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_a_module_imports_only_downward_and_never_a_sibling_room(path: Path) -> None:
    mine = _part(path)
    for target in _imports(path):
        if not target.startswith("appliance."):
            continue
        theirs = target.split(".")[1]
        if theirs == mine:
            continue
        assert theirs in LEVEL, f"{path.name} imports unknown part {target}"
        assert LEVEL[theirs] < LEVEL[mine], f"{path.relative_to(PKG)} imports {target}: wrong-way arrow"
        if mine in ROOMS:
            assert theirs not in ROOMS, f"room {mine} imports room {theirs} ({target})"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PKG)))
def test_a_library_is_imported_only_in_its_home(path: Path) -> None:
    rel = str(path.relative_to(PKG).with_suffix(""))
    for target in _imports(path):
        lib = target.split(".")[0]
        homes = LIBRARY_HOMES.get(lib)
        if homes is None:
            continue
        assert any(rel == h or rel.startswith(h + "/") for h in homes), f"{rel} imports {lib}"


def test_only_config_reads_the_environment() -> None:
    for path in MODULES:
        text = path.read_text(encoding="utf-8")
        if path.name == "config.py":
            continue
        assert "os.environ" not in text and "os.getenv" not in text, f"{path.relative_to(PKG)} reads env"


def test_the_layer_check_notices_a_wrong_way_arrow(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from appliance.web.app import create_app\n")
    assert "appliance.web.app" in _imports(bad)
    assert LEVEL["web"] > LEVEL["gateway"]
