"""Inference from examples: templates, inputs, body schemas, credentials, conflicts (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from appliance.catalogue.examples_entry import Example
from appliance.catalogue.examples_infer import Inference, infer_toolkit
from appliance.catalogue.examples_schema import Shape
from appliance.errors import ImportFailed

TOKEN = "tok-0123456789abcdef"
API = "https://api.example.com"


def ex(
    n: int,
    method: str,
    url: str,
    body: Any = None,
    *,
    headers: tuple[tuple[str, str], ...] = (),
    response: Any = None,
    status: int | None = 200,
) -> Example:
    text = body if isinstance(body, str) or body is None else json.dumps(body)
    extra = (("Content-Type", "application/json"),) if body is not None and not isinstance(body, str) else ()
    return Example(
        f"entry {n}",
        method,
        url,
        headers + extra,
        text,
        status=status,
        response_body=None if response is None else json.dumps(response),
    )


def infer(*examples: Example, base_url: str | None = None) -> Inference:
    return infer_toolkit(list(examples), "kit", source="test", base_url=base_url)


def tools(inference: Inference) -> dict[str, Any]:
    return {t.name: t for t in inference.draft.tools}


def test_ids_become_path_parameters_and_methods_become_kinds_and_names() -> None:
    uuid = "0b8f5f0e-8c1b-4b8e-9d7a-2f3c4d5e6f70"
    found = tools(
        infer(
            ex(1, "GET", f"{API}/v1/notes/7"),
            ex(2, "GET", f"{API}/v1/notes/8"),
            ex(3, "DELETE", f"{API}/v1/notes/9"),
            ex(4, "GET", f"{API}/v1/users/{uuid}/notes"),
            ex(5, "POST", f"{API}/v1/notes", {"title": "a"}),
            ex(6, "PATCH", f"{API}/v1/commits/9fceb02d0ae598e95dc970b74767f19372d61af8", {"msg": "m"}),
        )
    )
    assert sorted(found) == [
        "kit__create_note",
        "kit__delete_note",
        "kit__get_note",
        "kit__list_user_notes",
        "kit__update_commit",
    ]
    get = found["kit__get_note"]
    assert get.binding["path"] == "/v1/notes/{note_id}" and get.kind == "read"
    assert get.input_schema["properties"]["note_id"] == {"type": "integer"}
    assert get.binding["inferred_from"] == ["entry 1", "entry 2"]
    assert found["kit__delete_note"].kind == "destructive" and found["kit__create_note"].kind == "write"
    user = found["kit__list_user_notes"]
    assert user.binding["path"] == "/v1/users/{user_id}/notes"  # one example alone is enough
    assert user.input_schema["properties"]["user_id"] == {"type": "string", "format": "uuid"}
    assert found["kit__update_commit"].binding["path"] == "/v1/commits/{commit_id}"


def test_a_varying_word_becomes_a_parameter_only_when_the_answers_agree() -> None:
    same = {"id": 1, "name": "n"}
    merged = tools(
        infer(
            *(
                ex(i, "GET", f"{API}/users/{u}/profile", response=same)
                for i, u in enumerate(["alice", "bob", "carol"], 1)
            )
        )
    )
    assert [t.binding["path"] for t in merged.values()] == ["/users/{user_id}/profile"]
    apart = tools(
        infer(
            ex(1, "GET", f"{API}/api/users", response={"users": []}),
            ex(2, "GET", f"{API}/api/orders", response={"orders": []}),
            ex(3, "GET", f"{API}/api/items", response={"items": []}),
        )
    )
    assert sorted(t.binding["path"] for t in apart.values()) == ["/api/items", "/api/orders", "/api/users"]
    enveloped = tools(
        infer(
            *(
                ex(i, "GET", f"{API}/api/{name}", response={"items": [{f"{name}_id": 1}], "total": 1})
                for i, name in enumerate(["users", "orders", "items"], 1)
            )
        )
    )
    assert len(enveloped) == 3  # the same envelope around different items: three endpoints


def test_query_parameters_get_types_from_values_and_are_required_when_always_sent() -> None:
    (tool,) = infer(
        ex(1, "GET", f"{API}/search?q=cats&limit=5&tag=a&tag=b&exact=true"),
        ex(2, "GET", f"{API}/search?q=dogs&limit=10&since=2024-01-02T03:04:05Z"),
    ).draft.tools
    props = tool.input_schema["properties"]
    assert props["q"] == {"type": "string"}
    assert props["limit"] == {"type": "integer"}
    assert props["tag"] == {"type": "array", "items": {"type": "string"}}
    assert props["exact"] == {"type": "boolean"}
    assert props["since"] == {"type": "string", "format": "date-time"}
    assert tool.input_schema["required"] == ["q", "limit"]
    assert {p["name"]: p["location"] for p in tool.binding["params"]} == dict.fromkeys(props, "query")


def test_the_body_schema_comes_from_every_example() -> None:
    bodies = [
        {
            "title": "a",
            "status": "open",
            "due": "2024-01-02",
            "owner": {"email": "a@x.org", "id": 1},
            "tags": ["x"],
            "score": 1,
        },
        {
            "title": "b",
            "status": "done",
            "owner": {"email": "b@x.org", "id": 2},
            "tags": [],
            "score": 2.5,
            "url": "https://x.org/1",
        },
        {
            "title": "c",
            "status": "open",
            "owner": {"email": "c@x.org", "id": 3},
            "tags": ["y"],
            "score": None,
        },
        {"title": "d", "status": "done", "owner": {"email": "d@x.org", "id": 4}, "tags": ["z"], "score": 3},
    ]
    (tool,) = infer(*(ex(i, "POST", f"{API}/tasks", b) for i, b in enumerate(bodies, 1))).draft.tools
    body = tool.input_schema["properties"]["body"]
    assert tool.input_schema["required"] == ["body"] and tool.binding["body_arg"] == "body"
    assert tool.binding["body_media_type"] == "application/json"
    props = body["properties"]
    assert props["title"] == {"type": "string"}  # four different values: no enum
    assert props["status"] == {"type": "string", "enum": ["done", "open"]}
    assert props["due"] == {"type": "string", "format": "date"}
    assert props["owner"]["properties"]["email"] == {"type": "string", "format": "email"}
    assert props["owner"]["required"] == ["email", "id"]
    assert props["tags"] == {"type": "array", "items": {"type": "string"}}
    assert props["score"] == {"type": ["number", "null"]}
    assert props["url"] == {"type": "string", "format": "uri"}
    assert body["required"] == ["title", "status", "owner", "tags", "score"]


def test_form_bodies_are_flattened_like_the_openapi_importer_does() -> None:
    (tool,) = infer(
        Example(
            "line 1",
            "POST",
            f"{API}/login",
            (("Content-Type", "application/x-www-form-urlencoded"),),
            "user=a&n=1",
        ),
        Example(
            "line 2",
            "POST",
            f"{API}/login",
            (("Content-Type", "application/x-www-form-urlencoded"),),
            "user=b",
        ),
    ).draft.tools
    assert tool.binding["body_fields"] == ["user", "n"]
    assert tool.binding["body_field_names"] == {"user": "user", "n": "n"}
    assert tool.binding["body_media_type"] == "application/x-www-form-urlencoded"
    assert tool.input_schema["required"] == ["user"]


@pytest.mark.parametrize(
    ("header", "scheme", "parts"),
    [
        (("Authorization", f"Bearer {TOKEN}"), "bearer", {"token": TOKEN}),
        (
            ("Authorization", "Basic YWxpY2U6cHctMDEyMzQ1Njc4OQ=="),
            "basic",
            {"username": "alice", "password": "pw-0123456789"},
        ),
        (("X-API-Key", TOKEN), "header", {"value": TOKEN}),
        (("X-Session-Token", TOKEN), "header", {"value": TOKEN}),
        (("Cookie", f"theme=dark; session={TOKEN}"), "cookie", {"value": TOKEN}),
    ],
)
def test_credential_headers_go_to_the_vault_never_into_inputs(
    header: tuple[str, str], scheme: str, parts: dict[str, str]
) -> None:
    found = infer(ex(1, "GET", f"{API}/me", headers=(header, ("X-Tenant", "t1"))))
    (tool,) = found.draft.tools
    assert found.credential is not None and found.credential.scheme == scheme
    assert found.credential.parts == parts
    assert list(tool.input_schema["properties"]) == ["X-Tenant"]  # an ordinary header stays an input
    text = json.dumps([tool.input_schema, tool.binding, tool.description, found.draft.meta])
    for value in parts.values():
        assert value not in text
    assert TOKEN not in repr(found)


def test_a_credential_in_the_query_goes_to_the_vault_too() -> None:
    found = infer(ex(1, "GET", f"{API}/data?api_key={TOKEN}&page=2"))
    assert found.credential is not None and found.credential.document() == {
        "scheme": "query",
        "name": "api_key",
        "value": TOKEN,
    }
    assert list(found.draft.tools[0].input_schema["properties"]) == ["page"]


def test_several_credentials_keep_the_one_seen_most_and_say_so() -> None:
    found = infer(
        ex(1, "GET", f"{API}/a", headers=(("Authorization", f"Bearer {TOKEN}"),)),
        ex(2, "GET", f"{API}/b", headers=(("Authorization", f"Bearer {TOKEN}x"),)),
        ex(3, "GET", f"{API}/c", headers=(("X-API-Key", "other-0123456789"),)),
    )
    assert found.credential is not None and found.credential.parts == {"token": f"{TOKEN}x"}
    notes = " ".join(found.draft.meta["notes"])
    assert "2 different values of the bearer credential" in notes and "(entry 2) is kept" in notes
    assert "also send a header credential (x-api-key)" in notes
    assert TOKEN not in notes and "other-0123456789" not in notes
    assert found.secrets == sorted({TOKEN, f"{TOKEN}x", "other-0123456789"})


def test_the_description_says_what_the_examples_show() -> None:
    (tool,) = infer(
        ex(1, "GET", f"{API}/notes/1", response={"id": 1, "title": "t", "body": "b"}),
        ex(2, "GET", f"{API}/notes/2", status=404, response={"error": "gone"}),
    ).draft.tools
    assert tool.description == (
        "GET /notes/{note_id}, inferred from 2 examples (entry 1, entry 2). "
        "Answered 200, 404. Response fields: id, title, body, error."
    )


@pytest.mark.parametrize(
    ("bodies", "where", "kinds"),
    [
        ([{"a": "x"}, {"a": {"b": 1}}], "body.a", {"string": "entry 1", "object": "entry 2"}),
        ([{"a": [1]}, {"a": ["x"]}], "body.a[]", {"integer": "entry 1", "string": "entry 2"}),
        ([{"a": 1}, [1]], "body", {"object": "entry 1", "array": "entry 2"}),
    ],
)
def test_conflicting_shapes_refuse_the_import_naming_the_entries(
    bodies: list[Any], where: str, kinds: dict[str, str]
) -> None:
    with pytest.raises(ImportFailed) as caught:
        infer(*(ex(i, "POST", f"{API}/things", b) for i, b in enumerate(bodies, 1)))
    assert (
        "conflicting shapes" in caught.value.public_message
        and "nothing was stored" in caught.value.public_message
    )
    assert caught.value.data["conflicts"] == [{"tool": "POST /things", "where": where, "kinds": kinds}]
    assert caught.value.field == "entry 1"


def test_a_json_body_and_a_form_body_for_one_endpoint_conflict() -> None:
    form = Example(
        "entry 2", "POST", f"{API}/things", (("Content-Type", "application/x-www-form-urlencoded"),), "a=1"
    )
    with pytest.raises(ImportFailed) as caught:
        infer(ex(1, "POST", f"{API}/things", {"a": 1}), form)
    assert caught.value.data["conflicts"][0]["kinds"] == {"a JSON body": "entry 1", "a form body": "entry 2"}


def test_origins_and_the_base_url() -> None:
    assert infer(ex(1, "GET", f"{API}/a")).draft.base_url == API
    with pytest.raises(ImportFailed, match="the examples call 2 origins"):
        infer(ex(1, "GET", f"{API}/a"), ex(2, "GET", "https://other.example.com/b"))
    given = infer(ex(1, "GET", f"{API}/v2/a/1"), base_url=f"{API}/v2")
    assert given.draft.base_url == f"{API}/v2" and given.draft.tools[0].binding["path"] == "/a/{a_id}"
    with pytest.raises(ImportFailed, match="entry 1: the URL carries a user name or password"):
        infer(ex(1, "GET", "https://u:p@api.example.com/a"))
    with pytest.raises(ImportFailed, match="entry 1: the request body is not valid JSON"):
        infer(Example("entry 1", "POST", f"{API}/a", (("Content-Type", "application/json"),), "{nope"))


def test_nesting_past_the_limit_is_left_open_not_recursed() -> None:
    deep: Any = "leaf"
    for _ in range(200):
        deep = {"d": deep}
    shape = Shape()
    shape.observe(deep, "entry 1")
    schema = shape.schema("body")
    depth = 0
    while schema.get("properties"):
        schema, depth = schema["properties"]["d"], depth + 1
    assert schema == {} and depth == 13


def test_an_object_of_thousands_of_keys_keeps_a_bounded_schema() -> None:
    shape = Shape()
    shape.observe({f"k{i}": i for i in range(5000)}, "entry 1")
    assert len(shape.schema("body")["properties"]) == 200


def test_a_field_named_like_a_credential_never_lists_its_values() -> None:
    logins = [{"user": "ops", "password": "hunter2-repeated", "mode": "a"} for _ in range(6)]
    (tool,) = infer(*(ex(i, "POST", f"{API}/login", b) for i, b in enumerate(logins, 1))).draft.tools
    props = tool.input_schema["properties"]["body"]["properties"]
    assert props["password"] == {"type": "string"}
    assert props["user"] == {"type": "string", "enum": ["ops"]} and props["mode"]["enum"] == ["a"]
