"""Settings, each declared once: defaults < toml file < environment < CLI flags.

A setting is one field of ``Settings`` (``settings.py``): its name is the TOML key, its
annotation the type, and its declaration gives the environment variable, the default, the
parser with its bounds (``values.py``) and the help text. Everything else derives from that one
declaration: ``load`` (``loading.py``), ``flag_help`` (a command-line flag's help) and the table
in ``docs/configuration.md`` (``table.py``; ``python -m appliance.config --markdown`` prints it,
``--update FILE`` rewrites it in place; a test fails when the document is out of step).

This package is the only code that reads the environment. Every credential is a ``Secret``: a
repr of the settings, a log line or a traceback shows none.
"""

from appliance.config.loading import environment_snapshot, flag_help, load
from appliance.config.settings import SETTINGS, Setting, Settings
from appliance.config.table import TABLE_END, TABLE_START, markdown_table, with_table

__all__ = [
    "SETTINGS",
    "TABLE_END",
    "TABLE_START",
    "Setting",
    "Settings",
    "environment_snapshot",
    "flag_help",
    "load",
    "markdown_table",
    "with_table",
]
