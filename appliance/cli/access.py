"""Commands on who may see and call what: users, agents, keys, grants, projects, toolkit access,
and call policy (read-only agents and keys, a toolkit's allow and deny rules).

They act as the operator (whoever owns the data directory) through ``gateway/admin``, the
operations the admin API offers over HTTP: the same rules and the same errors. (``--key`` on
``search`` and ``call`` makes those act for a key instead: see ``cli/acting.py``.)
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import click

from appliance.cli.catalogue import toolkits
from appliance.cli.common import JSON_OUT, STORE, emit, fail, main, number, operate
from appliance.gateway.admin import grants as grant_ops
from appliance.gateway.admin import keys as key_ops
from appliance.gateway.admin import people
from appliance.gateway.admin import policy as policy_ops
from appliance.gateway.admin import projects as project_ops
from appliance.models import OPERATOR

Obj = tuple[Any, ...]  # (data_dir, config_file, as_json) of the command group


def _run(obj: Obj, op: Callable[[Any], Awaitable[Any]]) -> Any:
    """One admin operation on the runtime of the group's data directory and settings."""
    return operate(obj[0], obj[1], op)


def _show(obj: Obj, value: Any, line: Callable[[Any], str]) -> None:
    if obj[2]:
        emit(value)
        return
    for item in value if isinstance(value, list) else [value]:
        click.echo(line(item))


def _group(
    ctx: click.Context,
    obj: Obj,
    listing: Callable[[Any], Awaitable[Any]],
    line: Callable[[Any], str],
) -> None:
    """A group's own run: keep its options for the subcommand, or (without one) list."""
    ctx.obj = obj
    if ctx.invoked_subcommand is None:
        _show(obj, _run(obj, listing), line)


def _user_line(u: dict[str, Any]) -> str:
    return f"{u['id']:>4}  {u['name']:<24} {'admin' if u['is_admin'] else 'user'}"


def _agent_line(a: dict[str, Any]) -> str:
    guard = "  read-only" if a["read_only"] else ""
    preload = ", ".join(a["preload"]) or "-"
    return f"{a['id']:>4}  user {a['user_id']:<4} {a['name']:<24} preload: {preload}{guard}"


def _key_line(k: dict[str, Any]) -> str:
    state = "revoked" if k["revoked_at"] else ("expires " + k["expires_at"] if k["expires_at"] else "active")
    owner = k["user"] + (f"/{k['agent']}" if k["agent"] else "")
    guard = "  read-only" if k["effective_read_only"] else ""
    if k.get("scope") is not None:
        guard += "  only " + ", ".join(
            f"{s['toolkit']}" + (f":{','.join(s['tools'])}" if s["tools"] else "") for s in k["scope"]
        )
    if k.get("budget") is not None:
        guard += f"  budget {k['spent']} of {k['budget']}"
    return f"{k['prefix']}  {owner:<28} {k['name'] or '-':<16} {state}{guard}"


def _grant_line(g: dict[str, Any]) -> str:
    what = ", ".join(g["tools"]) or "whole toolkit"
    return f"{g['id']:>4}  agent {g['agent_id']:<4} {g['project']}/{g['toolkit']:<24} {what}" + (
        "" if g["enabled"] else "  (disabled: opted out)"
    )


# -- users -----------------------------------------------------------------------------------


@main.group(invoke_without_command=True)
@STORE
@click.pass_context
def users(ctx: click.Context, data_dir: str | None, config_file: str | None, as_json: bool) -> None:
    """Users: list them (no subcommand), add, remove, make admin."""
    _group(ctx, (data_dir, config_file, as_json), lambda rt: people.list_users(rt, OPERATOR), _user_line)


@users.command("add")
@click.argument("name")
@click.option("--admin", is_flag=True, help="Make the user an admin.")
@click.pass_obj
def users_add(obj: Obj, name: str, admin: bool) -> None:
    _show(obj, _run(obj, lambda rt: people.create_user(rt, OPERATOR, name, is_admin=admin)), _user_line)


@users.command("remove")
@click.argument("name")
@click.pass_obj
def users_remove(obj: Obj, name: str) -> None:
    """Remove a user with their agents, keys and grants (their toolkits become the platform's)."""
    _run(obj, lambda rt: people.delete_user(rt, OPERATOR, name))
    click.echo(f"removed user {name}", err=True)


@users.command("admin")
@click.argument("name")
@click.option("--off", is_flag=True, help="Take the admin role away instead.")
@click.pass_obj
def users_admin(obj: Obj, name: str, off: bool) -> None:
    _show(obj, _run(obj, lambda rt: people.set_admin(rt, OPERATOR, name, not off)), _user_line)


# -- agents ----------------------------------------------------------------------------------


@main.group(invoke_without_command=True)
@STORE
@click.pass_context
def agents(ctx: click.Context, data_dir: str | None, config_file: str | None, as_json: bool) -> None:
    """Agents (each acts for one user): list them (no subcommand), add, remove, preload."""
    _group(ctx, (data_dir, config_file, as_json), lambda rt: people.list_agents(rt, OPERATOR), _agent_line)


@agents.command("add")
@click.argument("name")
@click.option("--user", "user_name", required=True, help="The user the agent acts for.")
@click.option("--preload", multiple=True, metavar="TOOL", help="A tool its sessions list directly.")
@click.pass_obj
def agents_add(obj: Obj, name: str, user_name: str, preload: tuple[str, ...]) -> None:
    agent = _run(
        obj, lambda rt: people.create_agent(rt, OPERATOR, name, user=user_name, preload=list(preload))
    )
    _show(obj, agent, _agent_line)


@agents.command("remove")
@click.argument("agent_id", type=int)
@click.pass_obj
def agents_remove(obj: Obj, agent_id: int) -> None:
    _run(obj, lambda rt: people.delete_agent(rt, OPERATOR, agent_id))
    click.echo(f"removed agent {agent_id} with its keys and grants", err=True)


@agents.command("preload")
@click.argument("agent_id", type=int)
@click.argument("tools", nargs=-1)
@click.pass_obj
def agents_preload(obj: Obj, agent_id: int, tools: tuple[str, ...]) -> None:
    """Set the tools an agent's sessions list directly (none: clear)."""
    agent = _run(obj, lambda rt: people.update_agent(rt, OPERATOR, agent_id, preload=list(tools)))
    _show(obj, agent, _agent_line)


@agents.command("read-only")
@click.argument("agent_id", type=int)
@click.option("--off", is_flag=True, help="Lift it instead.")
@click.pass_obj
def agents_read_only(obj: Obj, agent_id: int, off: bool) -> None:
    """Make every key of an agent read-only: only read tools run, search shows no others."""
    agent = _run(obj, lambda rt: people.update_agent(rt, OPERATOR, agent_id, read_only=not off))
    _show(obj, agent, _agent_line)


# -- keys ------------------------------------------------------------------------------------


@main.group(invoke_without_command=True)
@STORE
@click.pass_context
def keys(ctx: click.Context, data_dir: str | None, config_file: str | None, as_json: bool) -> None:
    """API keys, listed by prefix (no subcommand); create one (shown once) or revoke one."""
    _group(ctx, (data_dir, config_file, as_json), lambda rt: key_ops.list_keys(rt, OPERATOR), _key_line)


@keys.command("create")
@click.option("--user", "user_name", required=True, help="The user the key belongs to.")
@click.option("--agent", "agent_id", type=int, default=None, help="Make it a key of this agent (id).")
@click.option("--name", default="", help="A name to recognise it by.")
@click.option("--expires", default=None, help="RFC 3339 time, e.g. 2030-01-31T00:00:00Z.")
@click.option("--preload", multiple=True, metavar="TOOL", help="A tool this key's sessions list directly.")
@click.option("--read-only", is_flag=True, help="Only read tools run with this key.")
@click.option(
    "--scope",
    multiple=True,
    metavar="[PROJECT/]TOOLKIT[:TOOL,...]",
    help="Narrow the key to this toolkit (or these of its tools); never wider than its agent.",
)
@click.option("--budget", default=None, help="Credits this key may spend in all (its user pays, as ever).")
@click.pass_obj
def keys_create(
    obj: Obj,
    user_name: str,
    agent_id: int | None,
    name: str,
    expires: str | None,
    preload: tuple[str, ...],
    read_only: bool,
    scope: tuple[str, ...],
    budget: str | None,
) -> None:
    """Create a key; the secret is printed once, on stdout."""
    spend = None if budget is None else number(budget, "budget")
    secret, listed = _run(
        obj,
        lambda rt: key_ops.issue(
            rt,
            OPERATOR,
            user=user_name,
            agent_id=agent_id,
            name=name,
            expires_at=expires,
            preload=list(preload) or None,
            read_only=read_only,
            scope=key_ops.scope_from_text(list(scope)),
            budget=spend,
        ),
    )
    if obj[2]:
        emit({**listed, "key": secret})
        return
    click.echo(f"key {listed['prefix']} (shown once; store it now):", err=True)
    click.echo(secret)


@keys.command("revoke")
@click.argument("prefix")
@click.pass_obj
def keys_revoke(obj: Obj, prefix: str) -> None:
    """Revoke a key by its prefix; it fails from its next request on."""
    _show(obj, _run(obj, lambda rt: key_ops.revoke(rt, OPERATOR, prefix)), _key_line)


@keys.command("read-only")
@click.argument("prefix")
@click.option("--off", is_flag=True, help="Lift it instead (its agent's flag still counts).")
@click.pass_obj
def keys_read_only(obj: Obj, prefix: str, off: bool) -> None:
    """Make a key read-only: only read tools run with it, search shows no others."""
    _show(obj, _run(obj, lambda rt: key_ops.set_read_only(rt, OPERATOR, prefix, not off)), _key_line)


@keys.command("set")
@click.argument("prefix")
@click.option("--budget", default=None, help="Credits it may spend in all, or `none` (no budget of its own).")
@click.option("--expires", default=None, help="RFC 3339 time, or `never`.")
@click.pass_obj
def keys_set(obj: Obj, prefix: str, budget: str | None, expires: str | None) -> None:
    """Change a key's budget or expiry (what it spent so far still counts)."""
    doc: dict[str, Any] = {}
    if budget is not None:
        doc["budget"] = None if budget == "none" else number(budget, "budget")
    if expires is not None:
        doc["expires_at"] = None if expires == "never" else expires
    if not doc:
        fail("name --budget or --expires", 2)
    _show(obj, _run(obj, lambda rt: key_ops.update(rt, OPERATOR, prefix, doc)), _key_line)


# -- grants ----------------------------------------------------------------------------------


@main.group(invoke_without_command=True)
@click.option("--agent", "agent_id", type=int, default=None, help="Only this agent's grants.")
@STORE
@click.pass_context
def grants(
    ctx: click.Context, agent_id: int | None, data_dir: str | None, config_file: str | None, as_json: bool
) -> None:
    """Grants of toolkits to agents: list (no subcommand), add, set, remove."""

    def listing(rt: Any) -> Awaitable[Any]:
        return grant_ops.list_grants(rt, OPERATOR, agent_id=agent_id)

    _group(ctx, (data_dir, config_file, as_json), listing, _grant_line)


@grants.command("add")
@click.argument("agent_id", type=int)
@click.argument("toolkit")
@click.option("--project", default="default", show_default=True)
@click.option("--tool", "tools", multiple=True, metavar="NAME", help="Grant only this tool (repeatable).")
@click.option("--disabled", is_flag=True, help="Opt the agent out of a platform default instead.")
@click.pass_obj
def grants_add(
    obj: Obj, agent_id: int, toolkit: str, project: str, tools: tuple[str, ...], disabled: bool
) -> None:
    grant = _run(
        obj,
        lambda rt: grant_ops.create_grant(
            rt, OPERATOR, agent_id, toolkit, project=project, tools=list(tools), enabled=not disabled
        ),
    )
    _show(obj, grant, _grant_line)


@grants.command("set")
@click.argument("grant_id", type=int)
@click.option("--tool", "tools", multiple=True, metavar="NAME", help="Limit the grant to these tools.")
@click.option("--all-tools", is_flag=True, help="Grant the whole toolkit again.")
@click.option("--enable/--disable", default=None, help="Switch the grant on or off.")
@click.pass_obj
def grants_set(obj: Obj, grant_id: int, tools: tuple[str, ...], all_tools: bool, enable: bool | None) -> None:
    if tools and all_tools:
        fail("give --tool or --all-tools, not both", 2)
    chosen = [] if all_tools else (list(tools) or None)
    grant = _run(obj, lambda rt: grant_ops.update_grant(rt, OPERATOR, grant_id, tools=chosen, enabled=enable))
    _show(obj, grant, _grant_line)


@grants.command("remove")
@click.argument("grant_id", type=int)
@click.pass_obj
def grants_remove(obj: Obj, grant_id: int) -> None:
    _run(obj, lambda rt: grant_ops.delete_grant(rt, OPERATOR, grant_id))
    click.echo(f"removed grant {grant_id}", err=True)


# -- projects --------------------------------------------------------------------------------


@main.group(invoke_without_command=True)
@STORE
@click.pass_context
def projects(ctx: click.Context, data_dir: str | None, config_file: str | None, as_json: bool) -> None:
    """Projects: list them (no subcommand), add, remove (when empty)."""
    _group(
        ctx,
        (data_dir, config_file, as_json),
        lambda rt: project_ops.list_projects(rt, OPERATOR),
        lambda p: f"{p['slug']:<24} {p['title']}",
    )


@projects.command("add")
@click.argument("slug")
@click.option("--title", default=None)
@click.pass_obj
def projects_add(obj: Obj, slug: str, title: str | None) -> None:
    _run(obj, lambda rt: project_ops.create_project(rt, OPERATOR, slug, title))
    click.echo(f"added project {slug}", err=True)


@projects.command("remove")
@click.argument("slug")
@click.pass_obj
def projects_remove(obj: Obj, slug: str) -> None:
    _run(obj, lambda rt: project_ops.delete_project(rt, OPERATOR, slug))
    click.echo(f"removed project {slug}", err=True)


# -- toolkit access --------------------------------------------------------------------------


@toolkits.command("access")
@click.argument("slug")
@JSON_OUT
@click.option("--project", default="default", show_default=True)
@click.option("--visibility", type=click.Choice(["private", "published"]), default=None)
@click.option("--default/--no-default", "is_default", default=None, help="Platform default for every agent.")
@click.option("--allow", multiple=True, metavar="TOOL", help="Only these tools are visible (repeatable).")
@click.option("--allow-all", is_flag=True, help="Clear the allow-list: every tool is visible.")
@click.option("--owner", default=None, help="Give the toolkit to this user.")
@click.pass_context
def toolkits_access(
    ctx: click.Context,
    slug: str,
    project: str,
    visibility: str | None,
    is_default: bool | None,
    allow: tuple[str, ...],
    allow_all: bool,
    owner: str | None,
    as_json: bool,
) -> None:
    """Show or change a toolkit's owner, visibility, platform default and tool allow-list."""
    data_dir, config_file = ctx.obj["data_dir"], ctx.obj["config_file"]
    if allow and allow_all:
        fail("give --allow or --allow-all, not both", 2)
    access = operate(
        data_dir,
        config_file,
        lambda rt: grant_ops.set_toolkit_access(
            rt,
            OPERATOR,
            slug,
            project,
            visibility=visibility,
            default=is_default,
            allowed_tools=[] if allow_all else (list(allow) or None),
            owner=owner,
        ),
    )
    if as_json:
        emit(access)
        return
    owner_text = access["owner_id"] or "platform"
    click.echo(
        f"{access['project']}/{access['toolkit']}: {access['visibility']}, owner {owner_text}"
        f"{', platform default' if access['default'] else ''}; "
        f"tools: {', '.join(access['allowed_tools']) or 'all'}"
    )


# -- call policy -----------------------------------------------------------------------------


@toolkits.command("policy")
@click.argument("slug")
@JSON_OUT
@click.option("--project", default="default", show_default=True)
@click.option("--tool", default=None, help="A rule (or labels) for this tool (full name or action).")
@click.option(
    "--kind",
    type=click.Choice(["read", "write", "destructive"]),
    default=None,
    help="A rule for the toolkit's tools of this kind.",
)
@click.option("--allow", "action", flag_value="allow", default=None, help="Set the rule to allow.")
@click.option(
    "--approve", "action", flag_value="approve", help="Set the rule to approve: a person's yes per call."
)
@click.option(
    "--approver",
    type=click.Choice(["owner", "admin", "user"]),
    default=None,
    help="With --approve or --dataflow-action approve: who may approve (owner: the toolkit's owner or an "
    "admin, the default).",
)
@click.option("--deny", "action", flag_value="deny", help="Set the rule to deny.")
@click.option("--inherit", "action", flag_value="inherit", help="Remove the rule: a broader one decides.")
@click.option(
    "--labels",
    default=None,
    help="Data-flow labels of the toolkit (or --tool): comma-separated private, untrusted, outward; "
    "'none' for no labels (a tool without its toolkit's); 'inherit' removes them.",
)
@click.option(
    "--dataflow-window",
    type=int,
    default=None,
    help="The data-flow guard's window in seconds for this toolkit.",
)
@click.option(
    "--dataflow-action",
    type=click.Choice(["approve", "deny", "inherit"]),
    default=None,
    help="What the data-flow guard does to this toolkit's held outward calls ('inherit': the appliance's "
    "setting).",
)
@click.pass_context
def toolkits_policy(
    ctx: click.Context,
    slug: str,
    project: str,
    tool: str | None,
    kind: str | None,
    action: str | None,
    approver: str | None,
    labels: str | None,
    dataflow_window: int | None,
    dataflow_action: str | None,
    as_json: bool,
) -> None:
    """Show a toolkit's call policy, or set one rule (the toolkit's, a --kind's or a --tool's),
    data-flow labels (--labels) or the data-flow guard's setting (--dataflow-action, --dataflow-window).
    The most specific rule wins: tool over kind over toolkit; no rule is allow."""
    data_dir, config_file = ctx.obj["data_dir"], ctx.obj["config_file"]
    flow = dataflow_action is not None or dataflow_window is not None
    if sum((action is not None, labels is not None, flow)) > 1:
        fail("give one change: a rule (--allow, --approve, --deny, --inherit), --labels, or --dataflow-*", 2)
    if labels is not None:
        if kind is not None:
            fail("labels are for the toolkit or one --tool, not a --kind", 2)
        named = (
            None
            if labels == "inherit"
            else []
            if labels == "none"
            else [x.strip() for x in labels.split(",")]
        )
        shown = operate(
            data_dir,
            config_file,
            lambda rt: policy_ops.set_labels(rt, OPERATOR, slug, project, labels=named, tool=tool),
        )
    elif flow:
        if tool is not None or kind is not None:
            fail("the data-flow guard's setting is the toolkit's, not a --tool's or a --kind's", 2)
        setting: dict[str, Any] | None = None
        if dataflow_action != "inherit":
            setting = {"window_s": dataflow_window, "action": dataflow_action}
            if approver is not None:
                setting["approver"] = approver
        shown = operate(
            data_dir,
            config_file,
            lambda rt: policy_ops.set_guard(rt, OPERATOR, slug, project, setting=setting),
        )
    elif action is None:
        if tool is not None or kind is not None:
            fail("give --allow, --deny or --inherit with --tool or --kind", 2)
        shown = operate(
            data_dir, config_file, lambda rt: policy_ops.toolkit_policy(rt, OPERATOR, slug, project)
        )
    else:
        shown = operate(
            data_dir,
            config_file,
            lambda rt: policy_ops.set_toolkit_policy(
                rt,
                OPERATOR,
                slug,
                project,
                action=None if action == "inherit" else action,
                tool=tool,
                kind=kind,
                approver=approver,
            ),
        )
    if as_json:
        emit(shown)
        return
    rules = shown["rules"]
    click.echo(f"{shown['project']}/{shown['toolkit']}: policy version {shown['version']}")
    who = shown["approvers"]

    def by(action_of: str, approver_of: str | None) -> str:
        return f"{action_of} (approver: {approver_of})" if approver_of else action_of

    click.echo(
        f"  toolkit: {by(rules['toolkit'], who['toolkit']) if rules['toolkit'] else 'allow (no rule)'}"
    )
    for level in ("kinds", "tools"):
        for what, action_of in rules[level].items():
            click.echo(f"  {what}: {by(action_of, who[level].get(what))}")
    marks = shown["labels"]
    click.echo(f"  labels: {', '.join(marks['toolkit']) or 'none'}")
    for what, found in marks["tools"].items():
        click.echo(f"  labels of {what}: {', '.join(found) or 'none'}")
    guard = shown["dataflow"]
    click.echo(
        f"  data-flow guard ({guard['source']}'s): within {guard['window_s']} s, "
        f"{by(guard['action'], guard['approver'] if guard['action'] == 'approve' else None)}"
    )
