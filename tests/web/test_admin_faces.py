"""One rule per admin operation: the CLI and the admin API give the same answer and the same error.

The app of ``toolspoke serve``, served in process (tests/support/inprocess.py), answers the
API; the CLI runs through click's runner on the same data directory (the operator, as
``toolspoke`` run by whoever owns it). Each operation is done on both faces with the same
input, and each bad input is refused on both with the same message (and, on the API, the
reason and status of its one ApplianceError).

Moved from tests/e2e/test_admin_faces.py. Both faces stay covered as processes:
tests/e2e/test_access.py runs the CLI as a process against a real ``toolspoke serve`` whose
world it built through the admin API.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from appliance.cli import main
from tests.support.inprocess import InProcess, served_in_process

pytestmark = pytest.mark.inprocess


@dataclass
class Faces:
    app: InProcess
    api: httpx.Client
    runner: CliRunner

    def cli(self, *args: str) -> tuple[int, str, str]:
        done = self.runner.invoke(main, list(args), catch_exceptions=False)
        return done.exit_code, done.stdout, done.stderr

    def cli_json(self, *args: str) -> Any:
        code, out, err = self.cli(*args)
        assert code == 0, err
        return json.loads(out)

    def ok(self, method: str, path: str, status: int = 200, **kw: Any) -> Any:
        r = self.api.request(method, path, **kw)
        assert r.status_code == status, r.text
        return r.json()

    def refused_alike(
        self, cli_args: tuple[str, ...], method: str, path: str, status: int, reason: str, **kw: Any
    ) -> str:
        """The API refuses with ``status``/``reason``; the CLI exits 1 with the same message."""
        r = self.api.request(method, path, **kw)
        assert r.status_code == status, r.text
        error = r.json()["error"]
        assert error["reason"] == reason, error
        code, _, err = self.cli(*cli_args)
        assert code == 1, err
        assert err.startswith(f"error: {error['message']}"), (err, error)
        assert "Traceback" not in err + r.text
        return str(error["message"])


@pytest.fixture(scope="module")
def faces(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Faces]:
    data = tmp_path_factory.mktemp("faces") / "data"
    with served_in_process(data) as app:
        headers = {"Authorization": f"Bearer {app.key}"}
        with app.client(prefix="/api/v1", headers=headers, timeout=30) as api:
            runner = CliRunner(env={"TOOLSPOKE_DATA_DIR": str(data), "TOOLSPOKE_API_KEY": None})
            yield Faces(app, api, runner)


def _without(doc: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in doc.items() if k not in keys}


def _user(faces: Faces, name: str) -> int:
    return int(faces.ok("POST", "/users", 201, json={"name": name})["id"])


# -- projects --------------------------------------------------------------------------------


def test_projects_are_created_listed_and_deleted_alike(faces: Faces) -> None:
    made = faces.ok("POST", "/projects", 201, json={"slug": "by-api", "title": "Made here"})
    assert _without(made, "created_at") == {"slug": "by-api", "title": "Made here"}
    code, _, err = faces.cli("projects", "add", "by-cli", "--title", "Made here")
    assert (code, err.strip()) == (0, "added project by-cli")

    listed_api = faces.ok("GET", "/projects")["projects"]
    assert listed_api == faces.cli_json("projects", "--json")
    titles = {p["slug"]: p["title"] for p in listed_api}
    assert titles["by-api"] == titles["by-cli"] == "Made here"

    assert faces.ok("DELETE", "/projects/by-api") == {"deleted": "by-api"}
    code, _, err = faces.cli("projects", "remove", "by-cli")
    assert (code, err.strip()) == (0, "removed project by-cli")
    left = {p["slug"] for p in faces.ok("GET", "/projects")["projects"]}
    assert not left & {"by-api", "by-cli"}
    assert left == {p["slug"] for p in faces.cli_json("projects", "--json")}


def test_a_bad_project_is_refused_alike(faces: Faces) -> None:
    long_title = "t" * 201  # the API's limit, which the CLI did not apply
    message = faces.refused_alike(
        ("projects", "add", "long", "--title", long_title),
        "POST",
        "/projects",
        422,
        "invalid_params",
        json={"slug": "long", "title": long_title},
    )
    assert "'title'" in message
    faces.refused_alike(
        ("projects", "add", "Not A Slug"),
        "POST",
        "/projects",
        422,
        "import_failed",
        json={"slug": "Not A Slug"},
    )
    faces.ok("POST", "/projects", 201, json={"slug": "twice"})
    faces.refused_alike(
        ("projects", "add", "twice"), "POST", "/projects", 409, "conflict", json={"slug": "twice"}
    )
    assert "default" in faces.refused_alike(
        ("projects", "remove", "default"), "DELETE", "/projects/default", 409, "conflict"
    )
    faces.refused_alike(
        ("projects", "remove", "never-was"), "DELETE", "/projects/never-was", 404, "not_found"
    )
    listed = [p["slug"] for p in faces.cli_json("projects", "--json")]
    assert "long" not in listed and listed.count("twice") == 1  # nothing written by a refusal


# -- users and agents ------------------------------------------------------------------------


def test_users_are_created_alike_and_bad_names_refused_alike(faces: Faces) -> None:
    by_api = faces.ok("POST", "/users", 201, json={"name": "uma", "is_admin": True})
    by_cli = faces.cli_json("users", "--json", "add", "ulf", "--admin")
    assert _without(by_api, "id", "name", "created_at") == _without(by_cli, "id", "name", "created_at")
    assert by_cli["is_admin"] is True
    listed = {u["name"]: u for u in faces.ok("GET", "/users")["users"]}
    assert listed["ulf"] == by_cli and listed["uma"] == by_api
    assert faces.cli_json("users", "--json") == faces.ok("GET", "/users")["users"]

    faces.refused_alike(("users", "add", "uma"), "POST", "/users", 409, "conflict", json={"name": "uma"})
    faces.refused_alike(
        ("users", "add", " padded"), "POST", "/users", 422, "invalid_params", json={"name": " padded"}
    )


def test_agents_are_created_alike_and_bad_preloads_refused_alike(faces: Faces) -> None:
    uid = _user(faces, "ada")
    by_api = faces.ok(
        "POST", "/agents", 201, json={"name": "api-bot", "user_id": uid, "preload": ["demo__listNotes"]}
    )
    by_cli = faces.cli_json(
        "agents", "--json", "add", "cli-bot", "--user", "ada", "--preload", "demo__listNotes"
    )
    assert _without(by_api, "id", "name", "created_at") == _without(by_cli, "id", "name", "created_at")
    assert by_cli["user_id"] == uid and by_cli["preload"] == ["demo__listNotes"]

    too_long = "x" * 257
    faces.refused_alike(
        ("agents", "add", "bad-bot", "--user", "ada", "--preload", too_long),
        "POST",
        "/agents",
        422,
        "invalid_params",
        json={"name": "bad-bot", "user_id": uid, "preload": [too_long]},
    )
    faces.refused_alike(
        ("agents", "add", "api-bot", "--user", "ada"),
        "POST",
        "/agents",
        409,
        "conflict",
        json={"name": "api-bot", "user_id": uid},
    )
    names = {a["name"] for a in faces.cli_json("agents", "--json") if a["user_id"] == uid}
    assert names == {"api-bot", "cli-bot"}


# -- keys ------------------------------------------------------------------------------------


def test_keys_are_issued_alike_work_on_the_api_and_are_revoked_alike(faces: Faces) -> None:
    _user(faces, "kim")
    uid = _user(faces, "kit")
    by_api = faces.ok(
        "POST", "/keys", 201, json={"user_id": uid, "name": "k", "preload": ["demo__listNotes"]}
    )
    by_cli = faces.cli_json(
        "keys", "--json", "create", "--user", "kit", "--name", "k", "--preload", "demo__listNotes"
    )
    same = ("prefix", "key", "created_at")
    assert _without(by_api, *same) == _without(by_cli, *same)
    assert by_cli["user"] == "kit" and by_cli["preload"] == ["demo__listNotes"]

    for issued in (by_api, by_cli):  # each face's key is a working key of kit's
        me = faces.app.client(timeout=30).get(
            "/api/v1/me", headers={"Authorization": f"Bearer {issued['key']}"}
        )
        assert me.status_code == 200 and me.json()["name"] == "kit"

    revoked_by_api = faces.ok("DELETE", f"/keys/{by_cli['prefix']}")
    revoked_by_cli = faces.cli_json("keys", "--json", "revoke", by_api["prefix"])
    assert revoked_by_api["revoked_at"] and revoked_by_cli["revoked_at"]
    assert _without(revoked_by_api, "prefix", "created_at", "revoked_at") == _without(
        revoked_by_cli, "prefix", "created_at", "revoked_at"
    )
    for issued in (by_api, by_cli):
        me = faces.app.client(timeout=30).get(
            "/api/v1/me", headers={"Authorization": f"Bearer {issued['key']}"}
        )
        assert me.status_code == 401
    faces.refused_alike(("keys", "revoke", "tsk_nothere0"), "DELETE", "/keys/tsk_nothere0", 404, "not_found")


def test_bad_keys_are_refused_alike(faces: Faces) -> None:
    kid = _user(faces, "kai")
    other = _user(faces, "kay")
    agent = faces.ok("POST", "/agents", 201, json={"name": "kai-bot", "user_id": kid})["id"]
    before = faces.cli_json("keys", "--json")

    # The agent acts for kai, not kay: one Conflict on both faces (the API said invalid_params).
    message = faces.refused_alike(
        ("keys", "create", "--user", "kay", "--agent", str(agent)),
        "POST",
        "/keys",
        409,
        "conflict",
        json={"user_id": other, "agent_id": agent},
    )
    assert str(agent) in message and "kay" in message
    too_long = "x" * 257  # a preload entry the CLI used to store unchecked
    faces.refused_alike(
        ("keys", "create", "--user", "kai", "--preload", too_long),
        "POST",
        "/keys",
        422,
        "invalid_params",
        json={"user_id": kid, "preload": [too_long]},
    )
    faces.refused_alike(
        ("keys", "create", "--user", "kai", "--expires", "tomorrow"),
        "POST",
        "/keys",
        422,
        "invalid_params",
        json={"user_id": kid, "expires_at": "tomorrow"},
    )
    assert faces.cli_json("keys", "--json") == before  # no refusal wrote a key


# -- grants and toolkit access ---------------------------------------------------------------


def test_toolkit_access_is_set_alike(faces: Faces) -> None:
    by_cli = faces.cli_json("toolkits", "access", "demo", "--json", "--visibility", "published")
    assert by_cli == faces.ok("GET", "/toolkits/demo/access")
    by_api = faces.ok("PATCH", "/toolkits/demo/access", json={"visibility": "private"})
    assert _without(by_api, "visibility") == _without(by_cli, "visibility")
    assert by_api["visibility"] == "private"

    too_long = "x" * 257
    faces.refused_alike(
        ("toolkits", "access", "demo", "--allow", too_long),
        "PATCH",
        "/toolkits/demo/access",
        422,
        "invalid_params",
        json={"allowed_tools": [too_long]},
    )
    faces.refused_alike(
        ("toolkits", "access", "nothing-here", "--visibility", "published"),
        "PATCH",
        "/toolkits/nothing-here/access",
        404,
        "not_found",
        json={"visibility": "published"},
    )
    faces.ok("PATCH", "/toolkits/demo/access", json={"visibility": "published"})  # for the grants below


def test_grants_are_made_and_revoked_alike(faces: Faces) -> None:
    faces.ok("PATCH", "/toolkits/demo/access", json={"visibility": "published"})
    uid = _user(faces, "gus")
    bots = [faces.ok("POST", "/agents", 201, json={"name": f"g{i}", "user_id": uid})["id"] for i in range(2)]
    by_api = faces.ok(
        "POST", "/grants", 201, json={"agent_id": bots[0], "toolkit": "demo", "tools": ["demo__listNotes"]}
    )
    by_cli = faces.cli_json("grants", "--json", "add", str(bots[1]), "demo", "--tool", "demo__listNotes")
    same = ("id", "agent_id", "created_at")
    assert _without(by_api, *same) == _without(by_cli, *same)
    assert by_cli["tools"] == ["demo__listNotes"] and by_cli["agent_id"] == bots[1]
    assert faces.cli_json("grants", "--agent", str(bots[1]), "--json") == [by_cli]

    faces.refused_alike(
        ("grants", "add", str(bots[0]), "demo"),
        "POST",
        "/grants",
        409,
        "conflict",
        json={"agent_id": bots[0], "toolkit": "demo"},
    )
    faces.refused_alike(
        ("grants", "add", str(bots[0]), "no-such-kit"),
        "POST",
        "/grants",
        404,
        "not_found",
        json={"agent_id": bots[0], "toolkit": "no-such-kit"},
    )
    faces.refused_alike(  # an empty project name: the API refused it, the CLI looked it up
        ("grants", "add", str(bots[0]), "demo", "--project", ""),
        "POST",
        "/grants",
        422,
        "invalid_params",
        json={"agent_id": bots[0], "toolkit": "demo", "project": ""},
    )

    assert faces.ok("DELETE", f"/grants/{by_cli['id']}") == {"deleted": by_cli["id"]}
    code, _, err = faces.cli("grants", "remove", str(by_api["id"]))
    assert (code, err.strip()) == (0, f"removed grant {by_api['id']}")
    assert faces.ok("GET", f"/grants?agent_id={bots[0]}")["grants"] == []
    faces.refused_alike(
        ("grants", "remove", str(by_api["id"])), "DELETE", f"/grants/{by_api['id']}", 404, "not_found"
    )


# -- quotas and credit -----------------------------------------------------------------------


def test_a_quota_is_set_alike(faces: Faces) -> None:
    by_api = faces.ok("PUT", "/toolkits/demo/quota", json={"fee": 2, "daily_limit": 10})
    by_cli = faces.cli_json("quota", "set", "demo", "--fee", "2", "--daily", "10", "--json")
    assert by_cli == by_api == faces.cli_json("quota", "show", "demo", "--json")
    assert by_api["fee"] == 2 and by_api["daily_limit"] == 10
    faces.refused_alike(
        ("quota", "set", "demo", "--fee", "-1"),
        "PUT",
        "/toolkits/demo/quota",
        422,
        "invalid_params",
        json={"fee": -1},
    )
    faces.refused_alike(
        ("quota", "set", "demo", "--unit", "credits"),
        "PUT",
        "/toolkits/demo/quota",
        422,
        "invalid_params",
        json={"unit": "credits"},
    )
    assert faces.ok("GET", "/toolkits/demo/quota") == by_api  # nothing changed by a refusal
    faces.ok("PUT", "/toolkits/demo/quota", json={"fee": 0, "daily_limit": 0})


def test_credit_is_granted_alike(faces: Faces) -> None:
    uid = _user(faces, "cleo")
    by_api = faces.ok("POST", f"/users/{uid}/credits", 201, json={"amount": 5, "note": "welcome"})
    by_cli = faces.cli_json("credits", "grant", "cleo", "5", "--note", "welcome", "--json")
    assert (by_api["user_id"], by_api["amount"], by_api["balance"]) == (uid, 5, 5)
    assert (by_cli["user_id"], by_cli["amount"], by_cli["balance"]) == (uid, 5, 10)
    shown = faces.cli_json("credits", "show", "cleo", "--json")
    assert shown == faces.ok("GET", f"/users/{uid}/credits")
    assert shown["balance"] == 10
    faces.refused_alike(
        ("credits", "grant", "cleo", "0"),
        "POST",
        f"/users/{uid}/credits",
        422,
        "invalid_params",
        json={"amount": 0},
    )
    assert faces.ok("GET", f"/users/{uid}/credits")["balance"] == 10


# -- call policy (issue 20): read-only agents and keys, a toolkit's rules ---------------------


def test_read_only_agents_and_keys_are_set_alike(faces: Faces) -> None:
    uid = _user(faces, "rory")
    agents = [faces.ok("POST", "/agents", 201, json={"name": n, "user_id": uid})["id"] for n in ("r1", "r2")]
    by_api = faces.ok("PATCH", f"/agents/{agents[0]}", json={"read_only": True})
    by_cli = faces.cli_json("agents", "--json", "read-only", str(agents[1]))
    assert by_api["read_only"] is by_cli["read_only"] is True
    assert _without(by_api, "id", "name", "created_at") == _without(by_cli, "id", "name", "created_at")
    lifted = faces.cli_json("agents", "--json", "read-only", str(agents[1]), "--off")
    assert lifted["read_only"] is False

    made_api = faces.ok("POST", "/keys", 201, json={"user_id": uid, "read_only": True})
    made_cli = faces.cli_json("keys", "--json", "create", "--user", "rory", "--read-only")
    same = ("prefix", "key", "created_at")
    assert _without(made_api, *same) == _without(made_cli, *same)
    assert made_cli["read_only"] is made_cli["effective_read_only"] is True

    plain = [faces.ok("POST", "/keys", 201, json={"agent_id": agents[0]})["prefix"] for _ in range(2)]
    set_api = faces.ok("PATCH", f"/keys/{plain[0]}", json={"read_only": True})
    set_cli = faces.cli_json("keys", "--json", "read-only", plain[1])
    assert _without(set_api, "prefix", "created_at") == _without(set_cli, "prefix", "created_at")
    # Lifting the key's own flag leaves its read-only agent's: an agent never widens a key.
    off_api = faces.ok("PATCH", f"/keys/{plain[0]}", json={"read_only": False})
    off_cli = faces.cli_json("keys", "--json", "read-only", plain[1], "--off")
    for off in (off_api, off_cli):
        assert off["read_only"] is False and off["effective_read_only"] is True

    faces.refused_alike(
        ("keys", "read-only", "tsk_nothere0"),
        "PATCH",
        "/keys/tsk_nothere0",
        404,
        "not_found",
        json={"read_only": True},
    )
    faces.refused_alike(
        ("agents", "read-only", "999999"),
        "PATCH",
        "/agents/999999",
        404,
        "not_found",
        json={"read_only": True},
    )


def test_a_toolkit_policy_is_shown_and_set_alike(faces: Faces) -> None:
    shown = faces.ok("GET", "/toolkits/demo/policy")
    assert shown == faces.cli_json("toolkits", "policy", "demo", "--json")
    assert shown["rules"] == {"toolkit": None, "kinds": {}, "tools": {}}
    by_api = faces.ok("PUT", "/toolkits/demo/policy", json={"kind": "destructive", "action": "deny"})
    assert by_api["version"] == shown["version"] + 1
    by_cli = faces.cli_json("toolkits", "policy", "demo", "--json", "--tool", "createNote", "--deny")
    assert by_cli["version"] == by_api["version"] + 1
    assert by_cli["rules"] == {
        "toolkit": None,
        "kinds": {"destructive": "deny"},
        "tools": {"demo__createNote": "deny"},
    }
    assert by_cli == faces.ok("GET", "/toolkits/demo/policy")
    code, out, _ = faces.cli("toolkits", "policy", "demo")
    assert code == 0 and "demo__createNote: deny" in out and "destructive: deny" in out

    faces.refused_alike(
        ("toolkits", "policy", "demo", "--tool", "noSuchTool", "--deny"),
        "PUT",
        "/toolkits/demo/policy",
        404,
        "not_found",
        json={"tool": "noSuchTool", "action": "deny"},
    )
    faces.refused_alike(
        ("toolkits", "policy", "demo", "--tool", "createNote", "--kind", "write", "--allow"),
        "PUT",
        "/toolkits/demo/policy",
        422,
        "invalid_params",
        json={"tool": "createNote", "kind": "write", "action": "allow"},
    )
    faces.refused_alike(
        ("toolkits", "policy", "nothing-here", "--deny"),
        "PUT",
        "/toolkits/nothing-here/policy",
        404,
        "not_found",
        json={"action": "deny"},
    )
    cleared_api = faces.ok("PUT", "/toolkits/demo/policy", json={"kind": "destructive", "action": None})
    cleared_cli = faces.cli_json("toolkits", "policy", "demo", "--json", "--tool", "createNote", "--inherit")
    assert cleared_api["rules"]["kinds"] == {} and cleared_cli["rules"] == shown["rules"]
