"""A principal's ``Scope`` as SQL: the WHERE clauses the catalogue and search add to their queries.

``models.Scope`` says what a principal may see (computed by ``access/visibility.py``); this is
the one place that turns it into SQL text, below both rooms that filter by it. The id sets go
in as JSON arrays read by ``json_each``, so a statement's text does not grow with the number of
toolkits or tools a principal sees, and SQLite builds each set once per statement (the ``IN``
subqueries are not correlated).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

import orjson


class Scoped(Protocol):
    """What a ``models.Scope`` holds (named by shape: db/ sits below models)."""

    @property
    def toolkits(self) -> frozenset[int] | None: ...

    @property
    def restricted(self) -> Mapping[int, frozenset[int]]: ...

    @property
    def kinds(self) -> frozenset[str] | None: ...

    @property
    def denied(self) -> frozenset[int]: ...


def toolkit_clause(scope: Scoped | None, alias: str = "k") -> tuple[str, list[Any]]:
    """A WHERE clause (and its parameters) keeping the visible toolkits; ("", []) for all."""
    if scope is None or scope.toolkits is None:
        return "", []
    return f"{alias}.id IN (SELECT value FROM json_each(?))", [_ids(scope.toolkits)]


def tool_clause(scope: Scoped | None, alias: str = "t") -> tuple[str, list[Any]]:
    """A WHERE clause (and its parameters) keeping the visible tools; ("", []) for all.

    A tool is visible when its toolkit is, and, where its toolkit is restricted to some tools,
    when it is one of them. A scope narrowed to what could run also keeps only its ``kinds``
    and leaves out its ``denied`` tools (the call policy, ``gateway/policy.py``)."""
    if scope is None:
        return "", []
    clauses: list[str] = []
    params: list[Any] = []
    if scope.toolkits is not None:
        clauses.append(f"{alias}.toolkit_id IN (SELECT value FROM json_each(?))")
        params.append(_ids(scope.toolkits))
        if scope.restricted:
            clauses.append(
                f"({alias}.toolkit_id NOT IN (SELECT value FROM json_each(?))"
                f" OR {alias}.id IN (SELECT value FROM json_each(?)))"
            )
            params += [_ids(scope.restricted), _ids(i for ids in scope.restricted.values() for i in ids)]
    if scope.kinds is not None:
        clauses.append(f"{alias}.kind IN (SELECT value FROM json_each(?))")
        params.append(orjson.dumps(sorted(scope.kinds)).decode())
    if scope.denied:
        clauses.append(f"{alias}.id NOT IN (SELECT value FROM json_each(?))")
        params.append(_ids(scope.denied))
    return " AND ".join(clauses), params


def _ids(ids: Iterable[Any]) -> str:
    return orjson.dumps(sorted(int(i) for i in ids)).decode()
