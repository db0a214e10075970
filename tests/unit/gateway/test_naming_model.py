"""The naming model's settings: off when the URL is empty, a half or badly configured one
stops start-up naming the setting, and its key never prints."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance import config
from appliance.errors import ConfigError
from appliance.gateway.naming_model import NamingModel

KEY = "sk-naming-canary-9d04"


def settings(tmp_path: Path, **env: str) -> config.Settings:
    return config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path), **env})


def test_it_is_off_unless_a_url_is_set(tmp_path: Path) -> None:
    assert NamingModel.from_settings(settings(tmp_path)) is None
    assert NamingModel.from_settings(settings(tmp_path, TOOLSPOKE_INFER_CHAT_URL="")) is None


def test_a_configured_one_keeps_its_key_out_of_sight(tmp_path: Path) -> None:
    env = {
        "TOOLSPOKE_INFER_CHAT_URL": "http://127.0.0.1:11434/v1/",
        "TOOLSPOKE_INFER_CHAT_MODEL": "llama3.2",
        "TOOLSPOKE_INFER_CHAT_API_KEY": KEY,
        "TOOLSPOKE_INFER_CHAT_TIMEOUT_S": "7.5",
    }
    model = NamingModel.from_settings(settings(tmp_path, **env))
    assert model is not None
    assert (model.base_url, model.model, model.timeout_s) == ("http://127.0.0.1:11434/v1", "llama3.2", 7.5)
    assert KEY not in repr(model) and KEY not in str(vars(model))


@pytest.mark.parametrize(
    ("env", "field", "says"),
    [
        (
            {"TOOLSPOKE_INFER_CHAT_URL": "http://127.0.0.1:11434/v1"},
            "infer_chat_model",
            "needs infer_chat_model",
        ),
        ({"TOOLSPOKE_INFER_CHAT_URL": "ftp://models.lan/v1"}, "infer_chat_url", "must start with http://"),
        ({"TOOLSPOKE_INFER_CHAT_URL": "http://user:pw@models.lan/v1"}, "infer_chat_url", "infer_chat_url: "),
        ({"TOOLSPOKE_INFER_CHAT_URL": "http://2130706433/v1"}, "infer_chat_url", "infer_chat_url: "),
    ],
)
def test_a_half_or_badly_configured_one_names_the_setting(
    tmp_path: Path, env: dict[str, str], field: str, says: str
) -> None:
    if field != "infer_chat_model":
        env = {**env, "TOOLSPOKE_INFER_CHAT_MODEL": "m"}
    with pytest.raises(ConfigError) as caught:
        NamingModel.from_settings(settings(tmp_path, **env))
    assert caught.value.field == field and says in caught.value.public_message
