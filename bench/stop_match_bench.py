"""CPU per output piece of the stop-string matcher as the number of stop strings grows (the bound on Messages'
stop_sequences, which Anthropic leaves unstated). Each stop string is 256 random characters (the longest allowed),
none of which occurs, so every piece pays the full scan; times are process CPU seconds, so other load on a shared
machine does not move them much.

    python bench/stop_match_bench.py [--counts 4 64 1024 8191] [--pieces 400]
"""

from __future__ import annotations

import argparse
import random
import string
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.detokenizer import Piece
from backends.stop_strings import StopMatcher
from gateway.validation.fields import MAX_STOP_CHARS


def cpu_per_piece(count: int, pieces: int, rng: random.Random) -> float:
    """Microseconds of CPU per piece fed to a matcher holding `count` stop strings."""
    stops = ["".join(rng.choices(string.ascii_letters, k=MAX_STOP_CHARS)) for _ in range(count)]
    matcher = StopMatcher(stops)
    words = [Piece(" " + "".join(rng.choices(string.digits, k=5))) for _ in range(pieces)]
    start = time.process_time()
    for piece in words:
        matcher.feed([piece])
    return (time.process_time() - start) / pieces * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--counts", type=int, nargs="+", default=[4, 64, 1024, 8191])
    parser.add_argument("--pieces", type=int, default=400)
    args = parser.parse_args()
    rng = random.Random(0)
    print("| stop strings | CPU µs per piece |")
    print("|---:|---:|")
    for count in args.counts:
        print(f"| {count:,} | {cpu_per_piece(count, args.pieces, rng):,.1f} |")


if __name__ == "__main__":
    main()
