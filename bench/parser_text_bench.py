"""Instructions per token of a plain text answer (no call), each family's parser fed one word piece per `feed`.

The call-heavy `parser_bench.py` makes few deltas for families that emit a call whole; a text answer makes one
content (or reasoning, where the parser starts in reasoning) delta a token in every family. Run under callgrind:

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/text.cg.%p \
        python bench/parser_text_bench.py /tmp/text.cg [--tokens 2000]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from callgrind_counts import counted
from parser_bench import FAMILIES

from gateway.types import Piece


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("callgrind", help="this process runs under callgrind writing to CALLGRIND.%%p")
    parser.add_argument("--tokens", type=int, default=2000)
    args = parser.parse_args()
    pieces = [Piece(f" word{i % 50}") for i in range(args.tokens)]
    print("| family | deltas | instructions/token |\n|---|---:|---:|")
    for dump, family in enumerate(FAMILIES, 1):

        def run(family=family) -> int:
            out = family.parser()
            return sum(len(out.feed((piece,))) for piece in pieces)

        deltas = run()
        print(f"| {family.name} | {deltas} | {counted(args.callgrind, dump, run) / len(pieces):,.0f} |")


if __name__ == "__main__":
    main()
