import copy
import functools
import json
import statistics
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from appliance.catalogue.openapi import convert_openapi
from appliance.catalogue.spec_loader import parse_document
from appliance.errors import ImportFailed
from appliance.models import ToolkitDraft
from tests.support.servers import FIXTURES

LIMIT = 50_000_000
OPS = {
    "oai-v3.0-petstore.yaml": 3,
    "oai-v3.0-petstore-expanded.yaml": 4,
    "oai-v3.0-uspto.yaml": 3,
    "oai-v3.0-callback-example.yaml": 1,
    "oai-v3.1-webhook-example.yaml": 0,
    "oai-v2.0-petstore.json": 3,
    "oai-v2.0-petstore-expanded.json": 4,
    "swagger-petstore-v3-openapi.yaml": 19,
    "redocly-museum-openapi.yaml": 8,
    "gotify-spec.json": 42,
    "slack-web-openapi-v2.json": 174,
    "asana-oas.yaml": 247,
    "digitalocean-bundled.yaml": 659,
    "kubernetes-swagger.json": 1123,
}


@functools.cache
def spec(name: str) -> dict[str, Any]:
    return parse_document((FIXTURES / name).read_bytes(), source=name, max_bytes=LIMIT)


@functools.cache
def toolkit(name: str) -> ToolkitDraft:
    return convert_openapi(spec(name), "t")


def tool(name: str, upstream: str):
    return next(t for t in toolkit(name).tools if t.upstream_name == upstream)


@pytest.mark.parametrize("name", sorted(OPS))
def test_every_fixture_converts_every_operation_into_a_tool_or_a_reported_skip(name):
    kit = toolkit(name)
    assert len(kit.tools) + len(kit.skipped) == OPS[name]
    names = [t.name for t in kit.tools]
    assert len(set(names)) == len(names)
    assert all(len(n) <= 64 and n.startswith("t__") for n in names)
    for t in kit.tools:
        assert t.input_schema["type"] == "object"
        assert json.loads(json.dumps(t.binding)) == t.binding
    for t in _meta_schema_sample(kit):
        Draft202012Validator.check_schema(t.input_schema)


def _meta_schema_sample(kit: ToolkitDraft) -> list:
    """Every tool of a small spec; for big ones the 12 largest schemas and every 25th tool.

    The 2020-12 meta-schema costs ~15 ms per Kubernetes schema; all 2,000 would take 30 s.
    """
    if len(kit.tools) <= 60:
        return kit.tools
    largest = sorted(kit.tools, key=lambda t: len(json.dumps(t.input_schema)))[-12:]
    return largest + kit.tools[::25]


def test_only_unsupported_required_bodies_are_skipped():
    skipped = [s for name in OPS for s in toolkit(name).skipped]
    assert [s.where for s in skipped] == ["PUT /<upload_url>"]
    assert "application/octet-stream" in skipped[0].reason


def test_kubernetes_converts_fast_with_bounded_schemas():
    data = (FIXTURES / "kubernetes-swagger.json").read_bytes()
    started = time.thread_time()  # CPU time: the wall clock reads a loaded machine's queue
    kit = convert_openapi(parse_document(data, source="", max_bytes=LIMIT), "k8s")
    elapsed = time.thread_time() - started
    sizes = sorted(len(json.dumps(t.input_schema)) for t in kit.tools)
    assert elapsed < 3.0
    assert sizes[-1] < 40_000
    assert statistics.median(sizes) < 8_000


def test_a_self_referencing_schema_goes_into_defs_and_still_validates():
    doc = {
        "openapi": "3.0.0",
        "paths": {
            "/n": {
                "post": {
                    "operationId": "put node",
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Node"}}},
                    },
                }
            }
        },
        "components": {
            "schemas": {
                "Node": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "children": {"type": "array", "items": {"$ref": "#/components/schemas/Node"}},
                    },
                }
            }
        },
    }
    schema = convert_openapi(doc, "t").tools[0].input_schema
    assert schema["properties"]["body"] == {"$ref": "#/$defs/Node"}
    assert "Node" in schema["$defs"]
    validator = Draft202012Validator(schema)
    assert validator.is_valid({"body": {"name": "a", "children": [{"name": "b", "children": []}]}})
    assert not validator.is_valid({"body": {"children": [{"name": 3}]}})


def test_the_kubernetes_json_schema_props_cycle_terminates_in_crd_tools():
    t = tool("kubernetes-swagger.json", "createApiextensionsV1CustomResourceDefinition")
    Draft202012Validator.check_schema(t.input_schema)
    assert t.input_schema["required"] == ["body"]


def test_over_long_kubernetes_operation_ids_are_shortened_deterministically():
    long_ones = [t for t in toolkit("kubernetes-swagger.json").tools if len(t.upstream_name) > 61]
    assert len(long_ones) >= 16
    assert all(len(t.name) == 64 for t in long_ones)
    again = convert_openapi(spec("kubernetes-swagger.json"), "t")
    assert [t.name for t in again.tools] == [t.name for t in toolkit("kubernetes-swagger.json").tools]


def test_a_spaced_operation_id_becomes_a_snake_case_name():
    assert tool("oai-v3.0-petstore-expanded.yaml", "find pet by id").name == "t__find_pet_by_id"
    assert tool("oai-v2.0-petstore-expanded.json", "find pet by id").name == "t__find_pet_by_id"


def test_a_missing_operation_id_is_named_from_method_and_path():
    t = toolkit("oai-v3.0-callback-example.yaml").tools[0]
    assert (t.name, t.upstream_name, t.kind) == ("t__post_streams", "POST /streams", "write")


def test_path_level_parameters_are_merged_into_every_operation():
    doc = spec("asana-oas.yaml")
    path, item = next((p, i) for p, i in doc["paths"].items() if i.get("parameters") and "get" in i)
    t = next(t for t in toolkit("asana-oas.yaml").tools if t.binding["path"] == path and t.kind == "read")
    shared = {
        doc["components"]["parameters"][r["$ref"].rsplit("/", 1)[-1]]["name"] for r in item["parameters"]
    }
    assert shared <= {p["name"] for p in t.binding["params"]}


def test_an_operation_parameter_wins_over_the_path_level_one_of_the_same_name():
    doc = {
        "swagger": "2.0",
        "paths": {
            "/a/{id}": {
                "parameters": [{"name": "id", "in": "path", "type": "string", "required": True}],
                "get": {
                    "operationId": "getA",
                    "parameters": [{"name": "id", "in": "path", "type": "integer", "required": True}],
                },
            }
        },
    }
    schema = convert_openapi(doc, "t").tools[0].input_schema
    assert schema["properties"]["id"]["type"] == "integer"


def test_slack_token_parameters_are_credentials_not_inputs():
    kit = toolkit("slack-web-openapi-v2.json")
    assert all("token" not in t.input_schema["properties"] for t in kit.tools)
    post = tool("slack-web-openapi-v2.json", "chat_postMessage")
    assert {"name": "token", "location": "header", "scheme": None} in post.binding["credentials"]
    assert "channel" in post.binding["body_fields"]


def test_gotify_api_key_and_authorization_parameters_are_never_inputs():
    kit = toolkit("gotify-spec.json")
    schemes = kit.meta["security_schemes"]
    assert schemes["appTokenQuery"] == {"type": "apiKey", "in": "query", "name": "token"}
    assert schemes["basicAuth"] == {"type": "http", "scheme": "basic"}
    for t in kit.tools:
        assert not {"token", "X-Gotify-Key", "Authorization"} & set(t.input_schema["properties"])


def test_an_oauth2_authorization_code_flow_is_kept_without_secrets():
    """OpenAPI 3 ``flows.authorizationCode`` and Swagger 2 ``flow: accessCode``: the endpoints
    and scope names (issue 19, item 4); an implicit or client-credentials flow is not kept."""
    paths = {"/a": {"get": {"operationId": "a", "responses": {"200": {"description": "ok"}}}}}
    v3 = {
        "openapi": "3.0.0",
        "servers": [{"url": "https://api.example.com"}],
        "components": {
            "securitySchemes": {
                "o": {
                    "type": "oauth2",
                    "flows": {
                        "authorizationCode": {
                            "authorizationUrl": "https://auth.example.com/authorize",
                            "tokenUrl": "https://auth.example.com/token",
                            "refreshUrl": "https://auth.example.com/refresh",
                            "scopes": {"read": "r", "write": "w"},
                            "x-client-secret": "never kept",
                        },
                        "implicit": {"authorizationUrl": "https://auth.example.com/i", "scopes": {}},
                    },
                },
                "cc": {
                    "type": "oauth2",
                    "flows": {"clientCredentials": {"tokenUrl": "https://t", "scopes": {}}},
                },
            }
        },
        "paths": paths,
    }
    schemes = convert_openapi(v3, "t").meta["security_schemes"]
    assert schemes["o"]["authorization_code"] == {
        "authorization_url": "https://auth.example.com/authorize",
        "token_url": "https://auth.example.com/token",
        "refresh_url": "https://auth.example.com/refresh",
        "scopes": ["read", "write"],
    }
    assert schemes["cc"] == {"type": "oauth2"}
    assert "never kept" not in json.dumps(schemes)
    v2 = {
        "swagger": "2.0",
        "host": "api.example.com",
        "securityDefinitions": {
            "o": {
                "type": "oauth2",
                "flow": "accessCode",
                "authorizationUrl": "https://auth.example.com/authorize",
                "tokenUrl": "https://auth.example.com/token",
                "scopes": {"read": "r"},
            },
            "i": {"type": "oauth2", "flow": "implicit", "authorizationUrl": "https://x/a", "scopes": {}},
        },
        "paths": paths,
    }
    schemes = convert_openapi(v2, "t").meta["security_schemes"]
    assert schemes["o"]["authorization_code"] == {
        "authorization_url": "https://auth.example.com/authorize",
        "token_url": "https://auth.example.com/token",
        "scopes": ["read"],
    }
    assert "authorization_code" not in schemes["i"]


def test_an_api_key_parameter_and_forbidden_headers_are_dropped():
    doc = {
        "openapi": "3.0.0",
        "components": {"securitySchemes": {"k": {"type": "apiKey", "in": "query", "name": "key"}}},
        "paths": {
            "/x": {
                "get": {
                    "operationId": "x",
                    "security": [{"k": []}],
                    "parameters": [
                        {"name": "key", "in": "query", "schema": {"type": "string"}},
                        {"name": "Host", "in": "header", "schema": {"type": "string"}},
                        {"name": "X-Forwarded-For", "in": "header", "schema": {"type": "string"}},
                        {"name": "q", "in": "query", "schema": {"type": "string"}},
                    ],
                }
            }
        },
    }
    kit = convert_openapi(doc, "t")
    t = kit.tools[0]
    assert list(t.input_schema["properties"]) == ["q"]
    assert t.binding["credentials"] == [{"name": "key", "location": "query", "scheme": "k"}]
    assert t.binding["security"] == [{"k": []}]
    assert any("Host" in note for note in kit.meta["notes"])


def test_clashing_names_across_locations_get_a_location_prefix():
    doc = {
        "openapi": "3.1.0",
        "paths": {
            "/x/{id}": {
                "post": {
                    "operationId": "x",
                    "parameters": [
                        {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}},
                        {"name": "id", "in": "header", "schema": {"type": "string"}},
                        {"name": "id", "in": "cookie", "schema": {"type": "string"}},
                    ],
                    "requestBody": {
                        "content": {
                            "application/x-www-form-urlencoded": {
                                "schema": {"type": "object", "properties": {"id": {"type": "string"}}}
                            }
                        }
                    },
                }
            }
        },
    }
    b = convert_openapi(doc, "t").tools[0].binding
    assert {(p["arg"], p["location"]) for p in b["params"]} == {
        ("id", "path"),
        ("header_id", "header"),
        ("cookie_id", "cookie"),
    }
    assert b["body_fields"] == ["form_id"] and b["body_field_names"] == {"form_id": "id"}


def test_server_variables_are_substituted_with_their_defaults():
    assert toolkit("oai-v3.0-uspto.yaml").base_url == "https://developer.uspto.gov/ds-api"


def test_a_relative_server_url_resolves_against_an_http_source_or_is_flagged():
    doc = {"openapi": "3.0.0", "servers": [{"url": "/api/v3"}], "paths": {}}
    resolved = convert_openapi(doc, "t", source="https://example.com/openapi.json")
    assert resolved.base_url == "https://example.com/api/v3"
    local = convert_openapi(doc, "t", source="/tmp/openapi.json")
    assert (local.base_url, local.meta["base_url_status"]) == ("/api/v3", "relative")
    assert convert_openapi(doc, "t", base_url="https://x.test/").base_url == "https://x.test"


def test_swagger_host_base_path_and_scheme_make_the_base_url():
    assert toolkit("oai-v2.0-petstore.json").base_url == "http://petstore.swagger.io/v1"
    assert toolkit("kubernetes-swagger.json").meta["base_url_status"] == "missing"


def test_uspto_form_body_is_flattened_into_fields():
    t = tool("oai-v3.0-uspto.yaml", "perform-search")
    assert t.binding["body_media_type"] == "application/x-www-form-urlencoded"
    assert t.binding["body_fields"] == ["criteria", "start", "rows"]
    assert t.binding["body_arg"] is None
    assert set(t.input_schema["properties"]) == {"version", "dataset", "criteria", "start", "rows"}


def test_petstore_get_pet_by_id_binding_is_exact():
    t = tool("swagger-petstore-v3-openapi.yaml", "getPetById")
    assert (t.name, t.kind, t.group) == ("t__getPetById", "read", "pet")
    assert t.binding["method"] == "GET" and t.binding["path"] == "/pet/{petId}"
    assert t.binding["params"] == [
        {"arg": "petId", "name": "petId", "location": "path", "style": "simple", "explode": False}
    ]
    assert t.input_schema["required"] == ["petId"]


def test_a_json_body_goes_under_the_body_property_and_delete_is_destructive():
    t = tool("swagger-petstore-v3-openapi.yaml", "addPet")
    assert (t.binding["body_arg"], t.binding["body_media_type"]) == ("body", "application/json")
    assert "id" in t.input_schema["properties"]["body"]["properties"]
    assert tool("swagger-petstore-v3-openapi.yaml", "deletePet").kind == "destructive"


def test_nullable_and_boolean_exclusive_minimum_become_2020_12():
    doc = {
        "openapi": "3.0.0",
        "paths": {
            "/x": {
                "get": {
                    "operationId": "x",
                    "parameters": [
                        {
                            "name": "n",
                            "in": "query",
                            "schema": {
                                "type": "integer",
                                "nullable": True,
                                "minimum": 1,
                                "exclusiveMinimum": True,
                            },
                        }
                    ],
                }
            }
        },
    }
    prop = convert_openapi(doc, "t").tools[0].input_schema["properties"]["n"]
    assert prop == {"type": ["integer", "null"], "exclusiveMinimum": 1}


def test_a_reference_to_another_file_skips_the_operation_with_a_reason():
    doc = {
        "openapi": "3.0.0",
        "paths": {
            "/x": {
                "get": {"operationId": "a", "parameters": [{"$ref": "other.yaml#/p"}]},
                "post": {"operationId": "b"},
            }
        },
    }
    kit = convert_openapi(doc, "t")
    assert [t.upstream_name for t in kit.tools] == ["b"]
    assert kit.skipped[0].where == "GET /x" and "outside this document" in kit.skipped[0].reason


def test_an_unresolvable_local_reference_skips_only_that_operation():
    doc = {
        "swagger": "2.0",
        "paths": {
            "/x": {
                "post": {
                    "parameters": [{"in": "body", "name": "b", "schema": {"$ref": "#/definitions/Nope"}}]
                },
                "get": {},
            }
        },
    }
    kit = convert_openapi(doc, "t")
    assert len(kit.tools) == 1 and "does not resolve" in kit.skipped[0].reason


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b'{"openapi": "3.0.0",', "not valid JSON"),
        (b"openapi: [3.0\npaths: {", "line"),
        (b"- a\n- b\n", "mapping"),
        (b"openapi: 4.0.0\n", "unsupported openapi version"),
        (b"swagger: '1.2'\n", "unsupported swagger version"),
        (b"info: {}\n", "neither"),
        (b"\xff\xfeopenapi", "not UTF-8"),
        (b"x" * 200, "limit"),
    ],
)
def test_bad_documents_raise_import_failed_naming_the_problem(data, needle):
    with pytest.raises(ImportFailed) as info:
        parse_document(data, source="spec", max_bytes=100)
    assert needle in info.value.public_message


def test_a_bom_and_an_unquoted_swagger_version_are_tolerated():
    doc = parse_document(
        b"\xef\xbb\xbfswagger: 2.0\ninfo: {title: x, version: 2024-01-01}\npaths: {}\n",
        source="",
        max_bytes=1000,
    )
    assert doc["info"]["version"] == "2024-01-01"


def test_paths_that_are_not_a_mapping_fail_the_import_on_the_paths_field():
    with pytest.raises(ImportFailed) as info:
        convert_openapi({"openapi": "3.0.0", "paths": ["/x"]}, "t")
    assert info.value.field == "/paths"


def test_a_webhook_only_spec_yields_no_tools():
    kit = toolkit("oai-v3.1-webhook-example.yaml")
    assert kit.tools == [] and kit.skipped == []


def test_the_guide_and_description_come_from_info_and_tags():
    kit = toolkit("swagger-petstore-v3-openapi.yaml")
    assert kit.title == "Swagger Petstore - OpenAPI 3.0"
    assert "- pet:" in kit.guide and len(kit.guide) <= 6000
    assert kit.description and len(kit.description) <= 300


SMALL = spec("swagger-petstore-v3-openapi.yaml")
JUNK = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    st.sampled_from(["#/components/schemas/Pet", "#/nope", "x.yaml#/a", "#", {"$ref": "#"}]),
)


def _paths_of(doc: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out.extend(_paths_of(v, (*prefix, k)))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out.extend(_paths_of(v, (*prefix, i)))
    return out


ALL_PATHS = [p for p in _paths_of(SMALL) if p]


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.sampled_from(ALL_PATHS or [("x",)]), JUNK), min_size=1, max_size=4))
def test_random_mutations_of_a_spec_only_ever_raise_import_failed(mutations):
    doc = copy.deepcopy(SMALL)
    for path, value in mutations:
        node = doc
        try:
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = (
                {"$ref": value} if isinstance(value, str) and value.startswith(("#", "x")) else value
            )
        except (KeyError, IndexError, TypeError):
            continue
    try:
        kit = convert_openapi(doc, "t")
    except ImportFailed:
        return
    for t in kit.tools:
        Draft202012Validator.check_schema(t.input_schema)
        json.dumps(t.input_schema)
        json.dumps(t.binding)
