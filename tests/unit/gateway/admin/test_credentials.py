"""A credential form's fields as the credential document (gateway/admin/credentials.py): only
the scheme's own fields, empty ones left out so the missing secret is refused by name, an
environment as NAME=value lines; a bad scheme or line refused naming the field."""

from __future__ import annotations

import pytest

from appliance.errors import InvalidParams
from appliance.gateway.admin.credentials import form_document
from appliance.gateway.admin.imports import ARGS_MAX


def test_a_form_keeps_only_its_schemes_fields_and_leaves_the_empty_ones_out() -> None:
    fields = {"scheme": "header", "name": "X-Key", "value": "v" * 20, "token": "stray", "password": ""}
    assert form_document(fields) == {"scheme": "header", "name": "X-Key", "value": "v" * 20}
    assert form_document({"scheme": "bearer", "token": ""}) == {"scheme": "bearer"}  # refused later, by name
    oauth = form_document(
        {"scheme": "oauth2", "token_url": "https://a.example/t", "client_id": "c", "scope": ""}
    )
    assert oauth == {"scheme": "oauth2", "token_url": "https://a.example/t", "client_id": "c"}


def test_an_environment_is_read_as_name_value_lines() -> None:
    doc = form_document({"scheme": "env", "env": "API_KEY=abc=def\r\n\n  OTHER = x \n"})
    assert doc == {"scheme": "env", "env": {"API_KEY": "abc=def", "OTHER": " x"}}


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"scheme": "<b>"}, "scheme"),
        ({}, "scheme"),
        ({"scheme": "env", "env": "NO_EQUALS"}, "env"),
        ({"scheme": "env", "env": "\n".join(f"A{i}=1" for i in range(ARGS_MAX + 1))}, "env"),
    ],
)
def test_a_bad_form_is_refused_naming_its_field(fields: dict[str, str], field: str) -> None:
    with pytest.raises(InvalidParams) as refused:
        form_document(fields)
    assert refused.value.field == field
