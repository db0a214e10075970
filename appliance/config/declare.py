"""How a setting is declared: ``_setting`` on a ``Settings`` field (``settings.py``), and
``Setting``, the declaration as the loader, the flags' help and the documentation read it."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Setting:
    """One setting as ``load`` and the documentation see it (derived from its field)."""

    name: str
    env: str
    default: Any
    parse: Callable[[Any], Any]
    help: str


_DECLARED = "toolspoke.setting"


def _setting(env: str, default: Any, parse: Callable[[Any], Any], help: str) -> Any:
    """The declaration of the field it is assigned to. No dataclass default: ``load`` fills
    every field, so a ``Settings`` built by hand with one missing is an error, not a guess."""
    return field(metadata={_DECLARED: (env, default, parse, help)})
