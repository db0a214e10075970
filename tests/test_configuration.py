"""Settings: one table, documented, and resolved defaults < toml < env < CLI."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from appliance import config
from appliance.errors import ConfigError

DOC = Path(__file__).resolve().parents[1] / "docs" / "configuration.md"


def test_every_setting_is_documented_in_configuration_md() -> None:
    text = DOC.read_text(encoding="utf-8")
    for setting in config.SETTINGS:
        assert f"`{setting.env}`" in text, f"{setting.env} is missing from docs/configuration.md"
        assert f"`{setting.name}`" in text, f"{setting.name} (toml key) is missing from docs/configuration.md"


def test_the_documentation_names_no_setting_that_does_not_exist() -> None:
    documented = set(re.findall(r"`((?:TOOLSPOKE_|ALLOWED_|SEMANTIC_|OPENROUTER_)[A-Z_]+)`", DOC.read_text()))
    known = {s.env for s in config.SETTINGS} | {"TOOLSPOKE_CONFIG"}
    assert documented <= known, f"documented but unknown: {documented - known}"


def test_later_sources_win_defaults_then_toml_then_env_then_cli(tmp_path: Path) -> None:
    toml = tmp_path / "t.toml"
    toml.write_text('port = 9001\nhost = "127.0.0.2"\nlog_level = "debug"\n')
    env = {"TOOLSPOKE_PORT": "9002", "TOOLSPOKE_DATA_DIR": str(tmp_path)}
    s = config.load(cli={"port": 9003}, env=env, config_file=str(toml))
    assert s.port == 9003
    assert s.host == "127.0.0.2"
    assert s.log_level == "DEBUG"
    assert config.load(env=env, config_file=str(toml)).port == 9002
    assert config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path)}, config_file=str(toml)).port == 9001
    assert config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path)}).port == 8765


def test_the_default_bind_is_loopback(tmp_path: Path) -> None:
    assert config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path)}).host == "127.0.0.1"


@pytest.mark.parametrize(
    ("env", "field"),
    [
        ({"TOOLSPOKE_PORT": "seventy"}, "port"),
        ({"TOOLSPOKE_PORT": "70000"}, "port"),
        ({"ALLOWED_TOOL_CIDRS": "*"}, "allowed_tool_cidrs"),
        ({"ALLOWED_TOOL_CIDRS": "10.0.0.0/8,not-a-net"}, "allowed_tool_cidrs"),
        ({"TOOLSPOKE_DEMO": "maybe"}, "demo"),
        ({"TOOLSPOKE_UPSTREAM_TIMEOUT_S": "-1"}, "upstream_timeout_s"),
    ],
)
def test_a_bad_value_is_refused_naming_the_setting(env: dict[str, str], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        config.load(env=env)
    assert err.value.field == field
    assert field in err.value.public_message


def test_an_unknown_toml_key_is_refused(tmp_path: Path) -> None:
    toml = tmp_path / "t.toml"
    toml.write_text("prot = 1\n")
    with pytest.raises(ConfigError, match="unknown setting 'prot'"):
        config.load(env={}, config_file=str(toml))
