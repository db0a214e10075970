"""Resolving the settings: defaults < toml file < environment < CLI flags.

``load`` is called once per process (by the CLI) and returns a frozen ``Settings``; everything
else receives it. This package is the only place that reads the environment.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from appliance.config.settings import SETTINGS, Setting, Settings
from appliance.config.table import shown
from appliance.errors import ConfigError

_BY_NAME = {s.name: s for s in SETTINGS}


def _default_data_dir() -> str:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return str(Path(base) / "toolspoke")


def _parse(setting: Setting, raw: Any, source: str) -> Any:
    if raw is None:
        return None
    try:
        return setting.parse(raw)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"setting {setting.name} ({source}): {exc}", field=setting.name) from None


def load(
    cli: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    config_file: str | None = None,
) -> Settings:
    """Resolve every setting; later sources win: default, toml file, environment, CLI."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {s.name: s.default for s in SETTINGS}
    path = config_file or env.get("TOOLSPOKE_CONFIG")
    if path:
        try:
            with open(path, "rb") as fh:
                doc = tomllib.load(fh)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
        for key, raw in doc.items():
            setting = _BY_NAME.get(key)
            if setting is None:
                raise ConfigError(f"config file {path}: unknown setting {key!r}", field=key)
            values[key] = _parse(setting, raw, path)
    for setting in SETTINGS:
        if setting.env in env:
            values[setting.name] = _parse(setting, env[setting.env], setting.env)
    for key, raw in (cli or {}).items():
        if raw is not None:
            values[key] = _parse(_BY_NAME[key], raw, "command line")
    if not values["data_dir"]:
        values["data_dir"] = _default_data_dir()
    values["data_dir"] = str(Path(values["data_dir"]).expanduser().resolve())
    return Settings(**values)


def environment_snapshot(names: tuple[str, ...]) -> dict[str, str]:
    """The named environment variables that are set: what a stdio upstream may inherit."""
    return {n: os.environ[n] for n in names if n in os.environ}


def flag_help(name: str) -> str:
    """A command-line flag's help: the setting's own text, and where else it can be set."""
    setting = _BY_NAME[name]
    default = "" if setting.default is None else f"; default {shown(setting.default)}"
    return f"{setting.help} Also {setting.env}{default}."
