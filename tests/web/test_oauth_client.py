"""``/oauth/client-metadata.json``: the appliance's Client ID Metadata Document, served in process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.inprocess import served_in_process

pytestmark = pytest.mark.inprocess


def test_the_document_names_its_own_url_and_the_callback_and_needs_no_key(tmp_path: Path) -> None:
    env = {"TOOLSPOKE_PUBLIC_URL": "https://toolspoke.example.com/"}
    with served_in_process(tmp_path / "data", env=env) as app:
        answer = app.client().get("/oauth/client-metadata.json")  # no Authorization header
    assert answer.status_code == 200
    assert answer.json() == {
        "client_id": "https://toolspoke.example.com/oauth/client-metadata.json",
        "client_name": "toolspoke",
        "client_uri": "https://toolspoke.example.com",
        "redirect_uris": ["https://toolspoke.example.com/oauth/callback"],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": "none",
    }


def test_a_copy_hosted_elsewhere_is_the_client_id_and_no_public_url_is_no_document(tmp_path: Path) -> None:
    env = {
        "TOOLSPOKE_PUBLIC_URL": "http://toolspoke.lan:8765",
        "TOOLSPOKE_OAUTH_CLIENT_METADATA_URL": "https://static.example.com/toolspoke.json",
    }
    with served_in_process(tmp_path / "a", env=env) as app:
        doc = app.client().get("/oauth/client-metadata.json").json()
    assert doc["client_id"] == "https://static.example.com/toolspoke.json"
    assert doc["redirect_uris"] == ["http://toolspoke.lan:8765/oauth/callback"]
    with served_in_process(tmp_path / "b") as app:
        assert app.client().get("/oauth/client-metadata.json").status_code == 404
