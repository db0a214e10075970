"""The layering checker: the house plan as data, checked against any package tree.

A ``Plan`` says, for each part of the package (a top-level module or sub-package), which
parts it may import; which pairs of parts must never import each other (in either
direction, whatever an allow-list says); where each third-party library may be imported;
where SQL text and environment reads may live; and how long a module may grow.
``check(root, plan)`` parses every module under ``root`` (nothing is imported or run) and
returns what breaks the plan, each as a ``Violation`` whose ``key`` is stable across edits
that do not change the violation itself (no line numbers), so that a baseline of accepted
violations can be compared with what the tree holds today. ``tests/test_layers.py`` holds
the plan of ``appliance/`` and runs this on it and on planted bad trees.
"""

from __future__ import annotations

import ast
import re
import sys
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ANYWHERE = ("*",)  # a library every part may import (orjson, say)


@dataclass(frozen=True)
class Plan:
    imports: Mapping[str, frozenset[str]]  # part -> the other parts it may import
    never: frozenset[frozenset[str]]  # pairs that must not import each other either way
    libraries: Mapping[str, tuple[str, ...]]  # import name -> homes (a part or a module path)
    sql_homes: tuple[str, ...]  # where SQL text may be written
    env_homes: tuple[str, ...]  # where the process environment may be read
    max_lines: int = 800


@dataclass(frozen=True, order=True)
class Violation:
    key: str  # one baseline line: kind, module and what, no line number
    detail: str = field(compare=False)  # the rule it breaks and where, for the failure message


def check(root: Path, plan: Plan) -> list[Violation]:
    """Every violation of ``plan`` by the package rooted at ``root`` (a directory)."""
    found: list[Violation] = []
    for path in sorted(root.rglob("*.py")):
        found.extend(_check_module(root, path, plan))
    return sorted(found)


def plan_errors(plan: Plan) -> list[str]:
    """What is wrong with a plan itself: unknown names, an allowed forbidden pair, a cycle."""
    errors = []
    parts = set(plan.imports)
    for part, allowed in plan.imports.items():
        for other in sorted(allowed - parts):
            errors.append(f"{part} may import {other}, which the plan does not name")
        for other in sorted(allowed & parts):
            if frozenset((part, other)) in plan.never:
                errors.append(f"{part} may import {other}, a pair that must never meet")
        if part in allowed:
            errors.append(f"{part} lists itself")
    for pair in plan.never:
        for part in sorted(pair - parts):
            errors.append(f"the never-pair {sorted(pair)} names {part}, which the plan does not")
    for lib, homes in plan.libraries.items():
        if homes != ANYWHERE:
            for home in homes:
                if home.split("/")[0] not in parts:
                    errors.append(f"{lib}'s home {home} is in no part of the plan")
    for home in plan.sql_homes + plan.env_homes:
        if home.split("/")[0] not in parts:
            errors.append(f"{home} is in no part of the plan")
    cycle = _cycle(plan.imports)
    if cycle:
        errors.append("the allowed imports go round: " + " -> ".join(cycle))
    return errors


def read_baseline(path: Path) -> list[str]:
    """The entries of a baseline file: one key a line; ``#`` starts a comment line."""
    entries = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            entries.append(line.strip())
    return entries


def compare(found: Iterable[str], baseline: Iterable[str]) -> tuple[list[str], list[str]]:
    """(new, stale): violations the baseline does not accept, and entries no longer found.

    Both are multisets: a module with two identical statements needs two entries, and
    removing one of them leaves a stale entry behind.
    """
    have, accepted = Counter(found), Counter(baseline)
    return sorted((have - accepted).elements()), sorted((accepted - have).elements())


# --- one module ------------------------------------------------------------------------------


def _check_module(root: Path, path: Path, plan: Plan) -> Iterator[Violation]:
    rel = path.relative_to(root).as_posix()
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text, filename=rel)
    mine = _part_of(rel)
    lines = len(text.splitlines())
    if lines > plan.max_lines:
        yield Violation(f"size {rel}", f"{rel} has {lines} lines; the cap is {plan.max_lines}")
    if mine not in plan.imports:
        yield Violation(f"part {rel}", f"{rel} is in part {mine!r}, which the plan does not name")
        return
    seen: set[str] = set()
    for target, lineno in _imports(root, path, tree):
        if target not in seen:  # one violation per module imported, however many names
            seen.add(target)
            yield from _check_import(root, rel, lineno, mine, target, plan)
    if not _at_home(rel, plan.sql_homes):
        for sql, lineno in _sql_literals(tree):
            shown = " ".join(sql.split())
            shown = shown if len(shown) <= 90 else shown[:89] + "…"
            yield Violation(
                f"sql {rel}: {shown}",
                f"{rel}:{lineno} writes SQL outside {', '.join(plan.sql_homes)}",
            )
    if not _at_home(rel, plan.env_homes):
        for name, lineno in _env_reads(tree):
            yield Violation(f"env {rel}: {name}", f"{rel}:{lineno} reads the environment ({name})")


def _check_import(
    root: Path, rel: str, lineno: int, mine: str, target: str, plan: Plan
) -> Iterator[Violation]:
    where = f"{rel}:{lineno}"
    if target.startswith("."):  # a relative import that climbs out of the package
        yield Violation(f"import {rel} -> {target}", f"{where}: {target} leaves the package")
        return
    top, _, rest = target.partition(".")
    if top != root.name:
        yield from _check_library(rel, where, top, plan)
        return
    theirs = rest.split(".")[0] if rest else "__init__"
    if theirs == mine:
        return
    key = f"import {rel} -> {target}"
    if frozenset((mine, theirs)) in plan.never:
        yield Violation(key, f"{where}: {mine} and {theirs} must never import each other ({target})")
    elif theirs not in plan.imports:
        yield Violation(key, f"{where}: imports {target}, a part the plan does not name")
    elif theirs not in plan.imports[mine]:
        yield Violation(key, f"{where}: {mine} may not import {theirs} ({target})")


def _check_library(rel: str, where: str, lib: str, plan: Plan) -> Iterator[Violation]:
    if lib in sys.stdlib_module_names:
        return
    homes = plan.libraries.get(lib)
    if homes is None:
        yield Violation(f"library {rel} -> {lib}", f"{where}: {lib} is a library the plan does not name")
    elif homes != ANYWHERE and not _at_home(rel, homes):
        yield Violation(f"library {rel} -> {lib}", f"{where}: {lib} lives only in {', '.join(homes)}")


def _part_of(rel: str) -> str:
    """``gateway/calls.py`` -> ``gateway``; ``config.py`` -> ``config``."""
    first = rel.split("/")[0]
    return first.removesuffix(".py")


def _at_home(rel: str, homes: Iterable[str]) -> bool:
    """Whether module ``rel`` is one of ``homes``: a part, a sub-package or a module path."""
    stem = rel.removesuffix(".py").removesuffix("/__init__")
    return any(stem == h or stem.startswith(h + "/") for h in homes)


# --- imports ---------------------------------------------------------------------------------


def _imports(root: Path, path: Path, tree: ast.Module) -> Iterator[tuple[str, int]]:
    """Every module ``path`` imports, absolute, with relative imports resolved.

    ``from pkg import name`` counts as importing ``pkg.name`` when that is a module of the
    tree (``from appliance import secret``), and ``pkg`` itself otherwise. Imports under
    ``TYPE_CHECKING`` and inside functions count: they are dependencies all the same.
    """
    here = _package_of(root, path)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(here, node.level, node.module)
            if base is None:
                yield "." * node.level + (node.module or ""), node.lineno
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                yield (sub if _is_module(root, sub) else base), node.lineno


def _package_of(root: Path, path: Path) -> list[str]:
    rel = path.relative_to(root).with_suffix("")
    parts = [root.name, *rel.parts]
    return parts[:-1]  # a package's __init__ and a plain module alike: their containing package


def _absolute(package: list[str], level: int, module: str | None) -> str | None:
    """The absolute name of ``from <level dots><module>``, or None if it leaves the tree."""
    if level == 0:
        return module
    if level - 1 >= len(package):
        return None
    base = package[: len(package) - (level - 1)]
    return ".".join(base + (module.split(".") if module else []))


def _is_module(root: Path, dotted: str) -> bool:
    parts = dotted.split(".")
    if parts[0] != root.name:
        return False
    inner = root.joinpath(*parts[1:])
    return inner.with_suffix(".py").is_file() or (inner / "__init__.py").is_file()


# --- SQL text --------------------------------------------------------------------------------

# Statement openings and SQL-only shapes. Matched in capitals, they are SQL; matched in any
# other case, they count only beside a mark no sentence carries (``= ?``, ``(?``, ``count(*)``),
# so that an error message such as "delete from the vault first" is not SQL.
_START = r"(?:^|[;(]|\bBEGIN\b)\s*"  # a statement opens the text, follows ';' or '(' or a trigger's BEGIN
_SHAPES = [
    _START + r"SELECT(?:\s+\S|\s+$)",
    _START + r"(?:INSERT|REPLACE)\s+(?:OR\s+\w+\s+)?INTO(?:\s|$)",
    _START + r"UPDATE\s+(?:OR\s+\w+\s+)?\w+\s+SET\s+\w",
    _START + r"DELETE\s+FROM(?:\s|$)",
    _START + r"CREATE\s+(?:UNIQUE\s+|TEMP\s+|TEMPORARY\s+|VIRTUAL\s+)?(?:TABLE|INDEX|VIEW|TRIGGER)\b",
    _START + r"DROP\s+(?:TABLE|INDEX|VIEW|TRIGGER)\b",
    _START + r"ALTER\s+TABLE\s+\w",
    _START + r"PRAGMA\s+\w+",
    _START + r"WITH\s+(?:RECURSIVE\s+)?\w+(?:\s*\([^)]*\))?\s+AS\s*(?:NOT\s+)?(?:MATERIALIZED\s+)?\(",
    r"\bFROM\s+\w+.*?\bWHERE\b",
    r"\bJOIN\s+\w+(?:\s+\w+)?\s+ON\s+\w+\.\w+\s*=",
    r"\bVALUES\s*\(\s*\?",
    r"^\s*(?:WHERE|AND|OR|ORDER\s+BY|GROUP\s+BY|(?:LEFT\s+|INNER\s+)?JOIN|ON\s+CONFLICT|SET)\s+"
    r".*?(?:[=<>]|\bIN\s*\(|\bIS\s+(?:NOT\s+)?NULL\b|\b(?:MATCH|LIKE|GLOB)\s+\?)",
]
_CAPITALS = [re.compile(s, re.S) for s in _SHAPES]
_ANY_CASE = [re.compile(s, re.S | re.I) for s in _SHAPES]
_MARK = re.compile(r"[=<>]\s*\?|\?\s*[,)]|\(\s*\?|\bcount\(\*\)|\bselect\s+\*|\bjson_each\(", re.I)
# whole-string statements: only in capitals ("commit" or "begin" alone is an ordinary word)
_BARE = re.compile(
    r"^\s*(?:BEGIN(?:\s+(?:DEFERRED|IMMEDIATE|EXCLUSIVE))?(?:\s+TRANSACTION)?|COMMIT|ROLLBACK"
    r"|VACUUM(?:\s+INTO\s+.*)?|ANALYZE|SAVEPOINT\s+\w+|RELEASE\s+\w+)\s*;?\s*$"
)


def looks_like_sql(text: str) -> bool:
    if _BARE.match(text) or any(p.search(text) for p in _CAPITALS):
        return True
    return bool(_MARK.search(text)) and any(p.search(text) for p in _ANY_CASE)


def _sql_literals(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """String literals that hold SQL, docstrings and bare string statements left out.

    An f-string is read with each replacement field as ``{}``, so a statement assembled
    around a placeholder is still seen whole.
    """
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant | ast.JoinedStr):
            skip.add(id(node.value))  # a docstring or a comment written as a string
        if isinstance(node, ast.JoinedStr):
            skip.update(id(n) for n in ast.walk(node) if n is not node)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        elif isinstance(node, ast.JoinedStr):
            text = "".join(
                v.value if isinstance(v, ast.Constant) and isinstance(v.value, str) else "{}"
                for v in node.values
            )
        else:
            continue
        if looks_like_sql(text):
            yield text, node.lineno


# --- the environment -------------------------------------------------------------------------

_ENV_NAMES = {"environ", "environb", "getenv", "getenvb", "putenv", "unsetenv"}


def _env_reads(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """``os.environ``, ``os.getenv`` and the like, under any name ``os`` is imported as."""
    aliases = {"os"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update(a.asname or a.name for a in node.names if a.name == "os")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "os" and node.level == 0:
            for alias in node.names:
                if alias.name in _ENV_NAMES:
                    yield f"os.{alias.name}", node.lineno
        elif (
            isinstance(node, ast.Attribute)
            and node.attr in _ENV_NAMES
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            yield f"os.{node.attr}", node.lineno


# --- the plan's own shape --------------------------------------------------------------------


def _cycle(graph: Mapping[str, frozenset[str]]) -> list[str]:
    """One cycle of allowed imports, or [] (a plan must be a partial order)."""
    state: dict[str, int] = {}  # 1 on the path, 2 done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, frozenset())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        path.pop()
        state[node] = 2
        return []

    for start in sorted(graph):
        if start not in state and (found := visit(start)):
            return found
    return []
