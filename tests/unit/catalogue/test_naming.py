import re

import pytest

from appliance.catalogue.naming import (
    action_from_route,
    assign_names,
    sanitise_action,
    tool_name,
    validate_slug,
)
from appliance.errors import ImportFailed

NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


def test_a_spaced_operation_id_becomes_a_snake_case_name():
    assert tool_name("pets", "find pet by id") == "pets__find_pet_by_id"


def test_a_missing_operation_id_is_derived_from_method_and_path():
    assert action_from_route("GET", "/pets/{petId}") == "get_pets_petId"
    assert action_from_route("post", "/chat.postMessage") == "post_chat_postMessage"


def test_a_long_action_is_cut_to_64_characters_with_a_hash_of_the_whole_action():
    a = tool_name("k8s", "x" * 80 + "Alpha")
    b = tool_name("k8s", "x" * 80 + "Beta")
    assert len(a) == 64 and len(b) == 64
    assert a != b
    assert NAME_RE.match(a)
    assert a == tool_name("k8s", "x" * 80 + "Alpha")  # deterministic


def test_an_action_of_only_invalid_characters_still_gets_a_stable_name():
    assert sanitise_action("???") == sanitise_action("???")
    assert NAME_RE.match(tool_name("s", "???"))


def test_clashing_actions_all_get_a_suffix_that_does_not_depend_on_order():
    items = [("find pet", "GET /a"), ("find_pet", "GET /b"), ("other", "GET /c")]
    forward = assign_names("s", items)
    backward = assign_names("s", list(reversed(items)))
    assert forward == list(reversed(backward))
    assert len(set(forward)) == 3
    assert forward[2] == "s__other"
    assert all(n.startswith("s__find_pet_") for n in forward[:2])


@pytest.mark.parametrize("slug", ["petstore", "k8s", "a", "my-api-2"])
def test_a_lower_case_slug_is_accepted(slug):
    assert validate_slug(slug) == slug


@pytest.mark.parametrize("slug", ["", "Pets", "a__b", "a_b", "-a", "x" * 32, "a b", "é"])
def test_a_bad_slug_raises_import_failed_on_the_slug_field(slug):
    with pytest.raises(ImportFailed) as info:
        validate_slug(slug)
    assert info.value.field == "slug"
