"""``search_tools`` as agents call it: one ``query``, or up to five ``queries`` (use cases).

A use case may carry ``known_fields`` ("city:Paris, date:2026-12-01"): the agent already holds
those values, so tools whose input schema takes those fields are ranked up (each matched field
is worth ``FIELD_BOOST`` places). ``toolkit``/``providers`` and ``tags`` narrow the search
(``tags`` match a tool's group: OpenAPI tag, MCP server group, catalogue toolkit). Results of
several use cases come grouped, each group with the ranking that served it.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from appliance.catalogue import toolkit_reads
from appliance.errors import ArgumentsInvalid
from appliance.gateway import costs
from appliance.gateway.runtime import Runtime
from appliance.gateway.searching import Outcome, check_query, search
from appliance.models import Principal, Tool
from appliance.search import directory
from appliance.search.text import param_names

FIELD_BOOST = 5
MAX_QUERIES = 5
# Tags filter after ranking, so each use case looks this much deeper before cutting.
TAG_DEPTH = 5


def version_of(tool: Tool) -> str:
    """A short hash of the tool's definition: changes whenever what an agent relies on changes."""
    doc = {"n": tool.name, "d": tool.description, "k": tool.kind, "s": tool.input_schema}
    return hashlib.blake2b(orjson.dumps(doc, option=orjson.OPT_SORT_KEYS), digest_size=6).hexdigest()


def parse_known_fields(text: str, where: str) -> list[str]:
    """``"city:Paris, date: 2026-12-01"`` -> ``["city", "date"]`` (lower-cased field names)."""
    keys = []
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, _ = item.partition(":")
        if not sep or not key.strip():
            raise ArgumentsInvalid(
                f"known_fields must be 'key:value' pairs separated by commas: {item.strip()!r}", field=where
            )
        keys.append(key.strip().lower())
    return keys


def _boost(results: list[Any], fields: list[str]) -> list[Any]:
    if not fields:
        return results
    wanted = set(fields)

    def place(item: tuple[int, Any]) -> float:
        pos, r = item
        names = {n.lower() for n in param_names(r.tool.input_schema)}
        return pos - FIELD_BOOST * len(wanted & names)

    return [r for _, r in sorted(enumerate(results), key=place)]


async def _one(
    rt: Runtime,
    render: Any,
    use_case: str,
    fields: list[str],
    *,
    args: dict[str, Any],
    toolkit_ids: set[int] | None,
    principal: Principal | None,
) -> tuple[list[Tool], list[dict[str, Any]], Outcome]:
    limit = args.get("limit") or rt.settings.search_default_limit
    tags = {t.lower() for t in args.get("tags") or []}
    deep = min(rt.settings.search_max_limit * TAG_DEPTH, 100)
    depth = deep if (tags or fields) else limit
    outcome = await search(
        rt,
        use_case,
        toolkit=args.get("toolkit"),
        project=args.get("project"),
        limit=depth,
        max_limit=max(depth, rt.settings.search_max_limit),
        allowed_toolkit_ids=toolkit_ids,
        principal=principal,
    )
    results = [r for r in outcome.results if not tags or r.tool.group.lower() in tags]
    results = _boost(results, fields)[:limit]
    tools = [r.tool for r in results]
    priced = await costs.of(rt, principal, tools)  # the caller's cost and calls left, if any
    return tools, [{**render(t), "version": version_of(t), **priced.get(t.id, {})} for t in tools], outcome


async def _toolkit_ids(rt: Runtime, providers: list[str], project: str | None) -> set[int]:
    async with rt.db.read() as conn:
        return await toolkit_reads.ids_of_slugs(conn, providers, project)


def _suggestions(query: str, tools: list[Tool], installed: tuple[list[str], list[str]]) -> dict[str, Any]:
    best = 0.0
    if tools:
        top = tools[0]
        best = directory.coverage(query, directory.stems_of(f"{top.toolkit} {top.name} {top.description}"))
    found = directory.suggest(query, installed[0], installed[1], best)
    return {"suggestions": found} if found else {}


async def _installed(rt: Runtime) -> tuple[list[str], list[str]]:
    async with rt.db.read() as conn:
        rows = await toolkit_reads.installed(conn)
    return [slug for slug, _ in rows], [source for _, source in rows]


async def search_for_agent(
    rt: Runtime,
    args: dict[str, Any],
    render: Any,
    *,
    principal: Principal | None = None,
    can_install: bool = False,
) -> dict[str, Any]:
    """``{"results", "ranking"}`` for a ``query``; ``{"groups": [...]}`` for ``queries``; each
    result is ``render(tool)`` with the tool's ``version``, and what a call costs the caller
    and how many more its ceilings admit when either applies (``gateway/costs.py``).

    ``can_install``: the caller may install toolkits, so well-known toolkits that are not
    installed and match better than anything installed come back as ``suggestions`` (beside
    the results, never among them), each with the command or admin-API call that installs it.
    """
    query, queries = args.get("query"), args.get("queries")
    if (query is None) == (queries is None):
        raise ArgumentsInvalid("give either 'query' or 'queries' (1 to 5 use cases)", field="/query")
    if query is not None:
        check_query(query, "/query")
    for i, item in enumerate(queries or []):
        check_query(item["use_case"], f"/queries/{i}/use_case")
        check_query(item.get("known_fields") or "", f"/queries/{i}/known_fields")
    providers = args.get("providers")
    toolkit_ids = await _toolkit_ids(rt, providers, args.get("project")) if providers else None
    installed = await _installed(rt) if can_install else None
    if query is not None:
        tools, results, outcome = await _one(
            rt, render, query, [], args=args, toolkit_ids=toolkit_ids, principal=principal
        )
        extra = _suggestions(query, tools, installed) if installed else {}
        return {"results": results, "ranking": outcome.ranking, **extra}
    groups = []
    for i, item in enumerate(queries or []):
        fields = parse_known_fields(item.get("known_fields") or "", f"/queries/{i}/known_fields")
        tools, results, outcome = await _one(
            rt, render, item["use_case"], fields, args=args, toolkit_ids=toolkit_ids, principal=principal
        )
        group: dict[str, Any] = {"use_case": item["use_case"], "ranking": outcome.ranking, "results": results}
        if item.get("known_fields"):
            group["known_fields"] = item["known_fields"]
        if installed:
            group.update(_suggestions(item["use_case"], tools, installed))
        groups.append(group)
    return {"groups": groups}
