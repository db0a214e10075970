"""The settings table of ``docs/configuration.md``, generated from the declarations."""

from __future__ import annotations

from typing import Any

from appliance.config.settings import SETTINGS

TABLE_START = (
    "<!-- settings: generated from appliance/config/settings.py by `python -m appliance.config --update` -->"
)
TABLE_END = "<!-- end of settings -->"


def shown(default: Any) -> str:
    if default is None:
        return "(unset)"
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, tuple):
        return ", ".join(default) or "(empty)"
    return str(default)


def markdown_table() -> str:
    """The settings table of ``docs/configuration.md``, one row per setting, in order."""
    rows = ["| TOML key | environment variable | default | meaning |", "|---|---|---|---|"]
    for s in SETTINGS:
        meaning = s.help.replace("|", "\\|")  # a bare bar would end the cell
        rows.append(f"| `{s.name}` | `{s.env}` | {shown(s.default)} | {meaning} |")
    return "\n".join(rows) + "\n"


def with_table(document: str) -> str:
    """``document`` with the text between the table's markers replaced by the current table."""
    start, end = document.find(TABLE_START), document.find(TABLE_END)
    if start < 0 or end < start:
        raise ValueError(f"the document lacks the markers {TABLE_START!r} … {TABLE_END!r}")
    # blank lines around the table: a comment line next to it would end or start it early
    return f"{document[: start + len(TABLE_START)]}\n\n{markdown_table()}\n{document[end:]}"
