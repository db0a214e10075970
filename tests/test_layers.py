"""The house plan of ``appliance/`` as data, and the tree held to it.

Each part lists the parts it may import (nothing is allowed by level alone: ``egress/``
sits beside ``db/`` and may not import it). The faces (``rpc``, ``web``, ``cli``) reach
storage and the rooms only through the gateway, and no room imports another. A library
lives in its home; SQL text only in ``db/`` and the rooms that own the tables; only
``config`` reads the environment; no module passes 800 lines. Today's exceptions are in
``tests/layers-baseline.txt``, which may only shrink: a violation missing from it fails, and
so does an entry that no longer occurs. The checker is ``tests/support/layers.py``; the
planted trees below show it reports each kind of break.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from tests.support.layers import (
    ANYWHERE,
    Plan,
    Violation,
    check,
    compare,
    looks_like_sql,
    plan_errors,
    read_baseline,
)

PKG = Path(__file__).resolve().parents[1] / "appliance"
BASELINE = Path(__file__).resolve().parent / "layers-baseline.txt"

FLOOR = frozenset({"__init__", "errors"})  # the version string and the error tree: for all
# lore/ (issue 23): a knowledge base's documents, chunks and their index are a concept of
# their own, neither tools (catalogue/) nor the search over tools (search/)
# artifacts/ (issue 22): large results kept aside, owned by their caller; neither the audit
# (a call's record) nor the ledger (its charge)
# codemode/ (issue 24): a script's run in the embedded JavaScript engine, within its limits;
# its calls reach tools only through the gateway's pipeline, handed in as a Host
ROOMS = (
    "catalogue",
    "search",
    "vault",
    "access",
    "ledger",
    "lore",
    "artifacts",
    "egress",
    "children",
    "mcpclient",
    "oauthclient",
    "codemode",
)
FACES = ("rpc", "web", "cli")
# the protocol layer (issue 17, item 3): MCP wire vocabulary below rpc/ and the MCP client alike
PROTOCOL = "protocol"

IMPORTS: dict[str, frozenset[str]] = {
    "__init__": frozenset(),
    "errors": frozenset(),
    "secret": FLOOR,
    PROTOCOL: FLOOR,
    "config": FLOOR | {"secret"},
    "models": FLOOR,
    "db": FLOOR,
    "catalogue": FLOOR | {"db", "models"},
    "search": FLOOR | {"db", "models"},
    "access": FLOOR | {"db", "models"},
    "ledger": FLOOR | {"db", "models"},
    "lore": FLOOR | {"db", "models"},
    "artifacts": FLOOR | {"db", "models"},
    "vault": FLOOR | {"db", "models", "config", "secret"},
    # HTTP egress and the stdio children: no storage, so no db/
    "egress": FLOOR | {"models", "config", "secret", PROTOCOL},
    "children": FLOOR | {"models", "config", "secret", PROTOCOL},
    # the MCP client speaks over both: the one room that stands on other rooms
    "mcpclient": FLOOR | {"models", "config", "secret", PROTOCOL, "egress", "children"},
    # OAuth 2.1 as an MCP client (issue 19): metadata, registration and tokens over HTTP egress;
    # the MCP client takes it through its own HttpAuth protocol, never by import
    "oauthclient": FLOOR | {"config", "secret", "egress"},
    "codemode": FLOOR,  # no storage, no settings: its limits are handed in
    "gateway": FLOOR | {"secret", "config", "models", PROTOCOL, "db", *ROOMS},
    "rpc": FLOOR | {"models", PROTOCOL, "gateway"},
    "web": FLOOR | {"config", "models", PROTOCOL, "gateway", "rpc"},
    "cli": FLOOR | {"config", "models", "gateway", "web"},
    "__main__": frozenset({"cli"}),
}
# the MCP client over HTTP egress and the stdio children, and the OAuth client over HTTP egress:
# the pairs of rooms that may meet
CLIENT_OVER = {
    frozenset(("mcpclient", "egress")),
    frozenset(("mcpclient", "children")),
    frozenset(("oauthclient", "egress")),
}
NEVER = frozenset(
    {frozenset((a, b)) for i, a in enumerate(ROOMS) for b in ROOMS[i + 1 :]} - CLIENT_OVER  # rooms apart
    | {frozenset((face, low)) for face in FACES for low in ("db", *ROOMS)}  # faces via gateway
)
LIBRARIES: dict[str, tuple[str, ...]] = {
    "orjson": ANYWHERE,
    "sanic": ("web",),
    "click": ("cli",),
    "uvloop": ("cli/common",),
    "sqlean": ("db",),
    "sqlite_vec": ("db",),
    # the vault's AEAD; the OAuth client's ES256 signatures (private_key_jwt, DPoP proofs)
    "cryptography": ("vault/crypto", "oauthclient/jose"),
    "httpx": ("egress", "mcpclient/http_transport"),
    "ahocorasick": ("secret",),
    "onnxruntime": ("search/embedders",),
    "tokenizers": ("search/embedders",),
    "numpy": ("search", "gateway/semantic"),
    "jsonschema": ("catalogue", "gateway/validation", "gateway/validation_errors", "gateway/patterns"),
    "prometheus_client": ("gateway/telemetry", "web/metrics"),
    "yaml": ("catalogue/spec_loader",),
    "pypdf": ("lore/pdf",),
    "jinja2": ("web/console/rendering",),
    "quickjs": ("codemode/engine", "codemode/interrupt"),  # the quickjs-ng engine (issue 24)
}
PLAN = Plan(
    imports=IMPORTS,
    never=NEVER,
    libraries=LIBRARIES,
    sql_homes=("db", "catalogue", "search", "vault", "access", "ledger", "lore", "artifacts"),
    env_homes=("config",),
    max_lines=800,
)


def test_the_plan_itself_is_whole_and_goes_one_way() -> None:
    assert plan_errors(PLAN) == []


def test_the_tree_keeps_the_plan_but_for_its_shrinking_baseline() -> None:
    found = [v.key for v in check(PKG, PLAN)]
    baseline = read_baseline(BASELINE)
    print(f"layers baseline: {len(baseline)} entries, {len(found)} violations found")
    new, stale = compare(found, baseline)
    details = {v.key: v.detail for v in check(PKG, PLAN)}
    assert not new, "violations of the plan:\n" + "\n".join(f"{k}\n    {details[k]}" for k in new)
    assert not stale, "gone from the tree: remove from tests/layers-baseline.txt:\n" + "\n".join(stale)


def test_the_baseline_accepts_nothing_but_sql_and_imports_and_names_each_once() -> None:
    baseline = read_baseline(BASELINE)
    kinds = {entry.split(" ")[0] for entry in baseline}
    assert kinds <= {"import", "sql"}, kinds  # no module over the cap, no env read, no library
    imports = [e for e in baseline if e.startswith("import ")]
    assert len(imports) == len(set(imports))


# --- the checker on planted trees --------------------------------------------------------


def _plant(tmp_path: Path, files: dict[str, str]) -> Path:
    """A tree named ``appliance`` with one clean module per part, plus ``files``."""
    root = tmp_path / "appliance"
    for part in IMPORTS:
        if part not in ("__init__", "__main__"):
            (root / part).mkdir(parents=True, exist_ok=True)
            (root / part / "__init__.py").write_text('"""A part."""\n')
    (root / "__init__.py").write_text('__version__ = "0"\n')
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(textwrap.dedent(text))
    return root


def _keys(root: Path) -> list[str]:
    return [v.key for v in check(root, PLAN)]


def test_a_planted_tree_that_keeps_the_plan_passes(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "gateway/ok.py": """
                import orjson
                from appliance import __version__
                from appliance.db import connection
                from appliance.egress import guard
                from . import sibling
                from ..access import keys
                QUERY_MESSAGE = "delete from the vault first, then select a toolkit from the list where it is"
                METHOD = "DELETE"
            """,
            "gateway/sibling.py": "",
            "db/connection.py": 'SQL = "SELECT id FROM users WHERE name = ?"\n',
            "access/keys.py": "from appliance.db import connection\n",
            "config.py": "import os\nHOME = os.environ.get('HOME')\n",
            "egress/guard.py": "import httpx\n",
        },
    )
    assert check(root, PLAN) == []


def test_a_wrong_way_import_is_reported(tmp_path: Path) -> None:
    root = _plant(tmp_path, {"gateway/bad.py": "from appliance.web.app import create_app\n"})
    assert _keys(root) == ["import gateway/bad.py -> appliance.web.app"]
    root = _plant(
        tmp_path / "b", {"egress/bad.py": "from appliance.db import connection\n", "db/connection.py": ""}
    )
    (violation,) = check(root, PLAN)
    assert violation.key == "import egress/bad.py -> appliance.db.connection"
    assert "egress may not import db" in violation.detail


def test_a_forbidden_pair_is_reported_in_both_directions(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "access/bad.py": "import appliance.ledger.store\n",
            "ledger/bad.py": "from appliance.access import keys\n",
            "web/bad.py": "from appliance.access import keys\n",
        },
    )
    found = check(root, PLAN)
    assert [v.key for v in found] == [
        "import access/bad.py -> appliance.ledger.store",
        "import ledger/bad.py -> appliance.access",
        "import web/bad.py -> appliance.access",
    ]
    assert all("must never import each other" in v.detail for v in found)


def test_a_relative_import_is_resolved_and_reported_when_it_crosses_a_boundary(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "egress/bad.py": "from ..db import connection\n",
            "egress/inner/deep.py": "from ...gateway import runtime\n",
            "web/bad.py": "from .. import access\n",
            "web/worse.py": "from .... import anything\n",
            "db/connection.py": "",
            "gateway/runtime.py": "",
        },
    )
    assert _keys(root) == [
        "import egress/bad.py -> appliance.db.connection",
        "import egress/inner/deep.py -> appliance.gateway.runtime",
        "import web/bad.py -> appliance.access",
        "import web/worse.py -> ....",
    ]


def test_a_library_outside_its_home_is_reported(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "gateway/bad.py": "import sanic\n",
            "vault/keyring.py": "from cryptography.hazmat import primitives\n",
            "web/bad.py": "import requests\n",
            "vault/crypto.py": "import cryptography\nimport json\n",
        },
    )
    found = check(root, PLAN)
    assert [v.key for v in found] == [
        "library gateway/bad.py -> sanic",
        "library vault/keyring.py -> cryptography",
        "library web/bad.py -> requests",
    ]
    assert "not name" in found[2].detail


def test_sql_in_a_face_is_reported_but_not_in_a_room_or_a_docstring(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "web/bad.py": '''
                """SELECT id FROM users WHERE name = ? is how a docstring may say it."""
                def f(conn, kit_filter, marks):
                    """DELETE FROM users: a docstring again."""
                    conn.all("SELECT id FROM users WHERE name = ?", ("x",))
                    conn.all(f"select id from toolkits where slug = ? and k in ({marks})")
                    return (
                        "UPDATE users SET is_admin = 1"
                        f" WHERE id = {kit_filter}"
                    )
            ''',
            "access/fine.py": 'SQL = "INSERT INTO projects (slug, title) VALUES (?, ?)"\n',
        },
    )
    assert _keys(root) == [
        "sql web/bad.py: SELECT id FROM users WHERE name = ?",
        "sql web/bad.py: UPDATE users SET is_admin = 1 WHERE id = {}",
        "sql web/bad.py: select id from toolkits where slug = ? and k in ({})",
    ]


@pytest.mark.parametrize(
    "text",
    [
        "SELECT 1",
        "  select count(*) from tools",
        "INSERT OR IGNORE INTO tools (name) VALUES (?)",
        "DELETE FROM projects WHERE id = ?",
        "PRAGMA quick_check",
        "CREATE VIRTUAL TABLE fts USING fts5(x)",
        "WITH picked(id) AS (SELECT 1) SELECT id FROM picked",
        " WHERE (?1 IS NULL OR k.slug = ?1)",
        "x.id IN (SELECT value FROM json_each(?))",
        "BEGIN IMMEDIATE",
        "k.name FROM toolkits k WHERE k.id = ?",
        "\n    FROM tools t JOIN toolkits k ON k.id = t.toolkit_id\n",
        "DELETE FROM ",
        " (tool_id, embedding) VALUES (?, ?)",
        " WHERE f.tools_fts MATCH ?",
        " FOR EACH ROW BEGIN UPDATE cache_generation SET n = n + 1 WHERE id = 1; END",
    ],
)
def test_sql_is_recognised(text: str) -> None:
    assert looks_like_sql(text)


@pytest.mark.parametrize(
    "text",
    [
        "DELETE",
        "POST, DELETE",
        "Delete a note for good",
        "delete from the vault first",
        "Update the key set before the next call",
        "select a toolkit from the list where it is shown",
        "toolkit {} is not an MCP server; re-import its spec with --replace to update it",
        "you cannot delete your own user",
        "begin",
        "with --replace",
        "SELECT",
        "join the project on the left",
        "the values (a, b) are kept",
    ],
)
def test_prose_is_not_sql(text: str) -> None:
    assert not looks_like_sql(text)


def test_the_environment_is_read_only_in_config(tmp_path: Path) -> None:
    root = _plant(
        tmp_path,
        {
            "gateway/bad.py": "import os as system\nKEY = system.environ['K']\n",
            "web/bad.py": "from os import getenv\n",
            "web/fine.py": "ENV = {'PATH': '/bin'}  # os.environ is mentioned, not read\n",
            "config.py": "import os\nX = os.getenv('X')\n",
        },
    )
    assert _keys(root) == ["env gateway/bad.py: os.environ", "env web/bad.py: os.getenv"]


def test_a_module_over_800_lines_is_reported(tmp_path: Path) -> None:
    root = _plant(tmp_path, {"gateway/long.py": "x = 1\n" * 801, "gateway/short.py": "x = 1\n" * 800})
    (violation,) = check(root, PLAN)
    assert violation.key == "size gateway/long.py"
    assert "801 lines" in violation.detail


def test_a_part_the_plan_does_not_name_is_reported(tmp_path: Path) -> None:
    root = _plant(tmp_path, {"newpart/x.py": "", "gateway/uses.py": "import appliance.newpart.x\n"})
    assert _keys(root) == ["import gateway/uses.py -> appliance.newpart.x", "part newpart/x.py"]


def test_the_baseline_fails_on_a_new_violation_and_on_a_stale_entry() -> None:
    found = ["import web/a.py -> appliance.db", "sql web/a.py: SELECT 1", "sql web/a.py: SELECT 1"]
    assert compare(found, found) == ([], [])
    assert compare(found, found[:2]) == (["sql web/a.py: SELECT 1"], [])
    assert compare(found[1:], found) == ([], ["import web/a.py -> appliance.db"])


def test_a_broken_plan_is_reported() -> None:
    looped = {**IMPORTS, "errors": frozenset({"__main__"}), "web": IMPORTS["web"] | {"db"}}
    broken = Plan(looped, NEVER, {**LIBRARIES, "x": ("nowhere",)}, ("db",), ("config",))
    errors = plan_errors(broken)
    assert "web may import db, a pair that must never meet" in errors
    assert "x's home nowhere is in no part of the plan" in errors
    assert any(e.startswith("the allowed imports go round: ") for e in errors)


def test_violations_compare_by_key() -> None:
    assert Violation("sql a.py: SELECT 1", "a.py:1") == Violation("sql a.py: SELECT 1", "a.py:9")
