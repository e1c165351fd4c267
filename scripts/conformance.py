"""Run canitoolcall over every fixture family's adapter and print the per-family table (last line `total: N/M`).

.venv/bin/python scripts/conformance.py                               # print the table
.venv/bin/python scripts/conformance.py --write docs/conformance.md   # also write it as Markdown
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.conformance.report import collect, render_markdown, render_text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", type=Path, metavar="PATH", help="also write the table as Markdown to PATH")
    args = parser.parse_args(argv)
    reports = collect()
    if args.write:
        args.write.write_text(render_markdown(reports), encoding="utf-8")
    sys.stdout.write(render_text(reports))
    return 0


if __name__ == "__main__":
    sys.exit(main())
