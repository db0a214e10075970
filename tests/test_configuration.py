"""Settings: one table, documented, and resolved defaults < toml < env < CLI."""

from __future__ import annotations

import dataclasses
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

from appliance import config
from appliance.errors import ConfigError
from appliance.secret import Secret

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
        ({"TOOLSPOKE_STDIO_EGRESS_UPSTREAM_PROXY": "https://proxy:3128"}, "stdio_egress_upstream_proxy"),
        ({"TOOLSPOKE_STDIO_EGRESS_UPSTREAM_PROXY": "http://u:p@proxy:3128"}, "stdio_egress_upstream_proxy"),
        ({"TOOLSPOKE_STDIO_EGRESS_UPSTREAM_PROXY": "http://proxy"}, "stdio_egress_upstream_proxy"),
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


def test_the_settings_table_in_configuration_md_is_the_generated_one() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert config.with_table(text) == text, (
        "docs/configuration.md is out of step with appliance/config/settings.py: "
        "run `python -m appliance.config --update`"
    )


def test_the_table_has_one_row_per_setting_in_declaration_order() -> None:
    rows = re.findall(r"^\| `(\w+)` \| `(\w+)` \|", config.markdown_table(), re.M)
    assert rows == [(s.name, s.env) for s in config.SETTINGS]
    assert len(rows) == len(dataclasses.fields(config.Settings))


def test_a_bar_in_a_help_text_is_escaped_in_its_table_cell() -> None:
    row = next(r for r in config.markdown_table().splitlines() if r.startswith("| `semantic_search`"))
    assert "semantic on\\|off" in row
    assert row.count(" | ") == 3  # four cells, whatever the text holds


def test_the_generator_refuses_a_document_without_the_markers() -> None:
    with pytest.raises(ValueError, match="markers"):
        config.with_table("# Configuration\n\nno table here\n")


def test_python_m_appliance_config_markdown_prints_the_table() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "appliance.config", "--markdown"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == config.markdown_table()


def test_update_rewrites_only_the_table_of_a_stale_document(tmp_path: Path) -> None:
    stale = tmp_path / "configuration.md"
    before, after = "# Configuration\n\nintro\n\n", "\n\n## Later\n\nkept\n"
    stale.write_text(f"{before}{config.TABLE_START}\n| old | table |\n{config.TABLE_END}{after}")
    done = subprocess.run(
        [sys.executable, "-m", "appliance.config", "--update", str(stale)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert (
        stale.read_text()
        == f"{before}{config.TABLE_START}\n\n{config.markdown_table()}\n{config.TABLE_END}{after}"
    )


CREDENTIALS = {
    "TOOLSPOKE_ADMIN_KEY": "tsk_admin-credential-0123456789",
    "TOOLSPOKE_API_KEY": "tsk_api-credential-0123456789",
    "TOOLSPOKE_EMBEDDINGS_API_KEY": "sk-embeddings-credential-0123",
    "OPENROUTER_API_KEY": "sk-or-openrouter-credential-0123",
    "TOOLSPOKE_MASTER_KEY": "ab" * 32,
    "TOOLSPOKE_METRICS_KEY": "metrics-credential-0123456789",
    "TOOLSPOKE_INFER_CHAT_API_KEY": "chat-credential-0123456789",
}


def test_a_repr_or_str_of_the_settings_shows_no_credential(tmp_path: Path) -> None:
    s = config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path), **CREDENTIALS})
    logged = logging.LogRecord("t", logging.INFO, __file__, 1, "settings: %s %r", (s, s), None).getMessage()
    for shown in (repr(s), str(s), f"{s}", logged):
        for env, value in CREDENTIALS.items():
            assert value not in shown, f"{env}'s value is printed by the settings"
    # ... and each is still there for the code that puts it on the wire
    assert s.admin_key is not None and s.admin_key.reveal() == CREDENTIALS["TOOLSPOKE_ADMIN_KEY"]
    assert s.api_key is not None and s.api_key.reveal() == CREDENTIALS["TOOLSPOKE_API_KEY"]
    assert s.embeddings_api_key is not None
    assert s.embeddings_api_key.reveal() == CREDENTIALS["TOOLSPOKE_EMBEDDINGS_API_KEY"]
    assert s.openrouter_api_key is not None
    assert s.openrouter_api_key.reveal() == CREDENTIALS["OPENROUTER_API_KEY"]
    assert s.infer_chat_api_key is not None
    assert s.infer_chat_api_key.reveal() == CREDENTIALS["TOOLSPOKE_INFER_CHAT_API_KEY"]


def test_every_credential_bearing_setting_is_a_secret(tmp_path: Path) -> None:
    # a per-key limit is a number, not a key
    credentials = {s.name for s in config.SETTINGS if s.name.endswith("_key") and "_per_" not in s.name}
    assert credentials == {
        "admin_key",
        "api_key",
        "master_key",
        "embeddings_api_key",
        "openrouter_api_key",
        "metrics_key",
        "infer_chat_api_key",
    }
    typed = {f.name: f.type for f in dataclasses.fields(config.Settings)}
    assert {name: typed[name] for name in credentials} == dict.fromkeys(credentials, "Secret | None")
    s = config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path), **CREDENTIALS})
    assert all(isinstance(getattr(s, name), Secret) for name in credentials)


def test_a_bad_value_names_the_setting_and_its_source_as_the_documentation_shows() -> None:
    with pytest.raises(ConfigError) as err:
        config.load(env={"TOOLSPOKE_PORT": "seventy"})
    message = "setting port (TOOLSPOKE_PORT): invalid literal for int() with base 10: 'seventy'"
    assert err.value.public_message == message
    assert f"`error: {message}`" in DOC.read_text(encoding="utf-8")


def test_a_flag_shows_the_help_text_of_its_setting() -> None:
    from click.testing import CliRunner

    from appliance.cli import main

    shown = " ".join(CliRunner().invoke(main, ["serve", "--help"]).output.split())
    for name in ("host", "port", "data_dir"):
        assert " ".join(config.flag_help(name).split()) in shown, name


def test_every_default_passes_its_own_parser_and_has_the_declared_type() -> None:
    kinds = {"str": str, "int": int, "float": float, "bool": bool, "tuple[str, ...]": tuple}
    typed = {f.name: str(f.type) for f in dataclasses.fields(config.Settings)}
    for s in config.SETTINGS:
        if s.default is None:
            assert typed[s.name].endswith("| None") or s.name == "data_dir", s.name
            continue
        assert isinstance(s.default, kinds[typed[s.name]]), s.name
        as_env = ",".join(s.default) if isinstance(s.default, tuple) else str(s.default)
        assert s.parse(as_env) == s.default, f"{s.name}: its default fails its own parser"


def test_settings_cannot_be_built_with_a_setting_left_out(tmp_path: Path) -> None:
    values = {
        f.name: getattr(config.load(env={"TOOLSPOKE_DATA_DIR": str(tmp_path)}), f.name)
        for f in dataclasses.fields(config.Settings)
    }
    del values["port"]
    with pytest.raises(TypeError, match="port"):
        config.Settings(**values)
