"""``python -m appliance.config --markdown | --update [FILE]``: print or rewrite the settings table."""

from __future__ import annotations

import sys
from pathlib import Path

from appliance.config.table import markdown_table, with_table


def _main(argv: list[str]) -> int:
    if argv == ["--markdown"]:
        sys.stdout.write(markdown_table())
        return 0
    if argv[:1] == ["--update"] and len(argv) <= 2:
        # By default the source tree's own document (beside the package, in a checkout).
        target = Path(argv[1]) if len(argv) == 2 else Path(__file__).parents[2] / "docs" / "configuration.md"
        target.write_text(with_table(target.read_text(encoding="utf-8")), encoding="utf-8")
        return 0
    sys.stderr.write("usage: python -m appliance.config --markdown | --update [FILE]\n")
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
