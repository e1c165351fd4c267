"""Shielding fuzz at scale: each family on its vocabulary × each door's body × client strings laced with added-token
spellings and near misses (tests/shield_fuzz.py), checked against the neutral twin.

The table gives, per family, the cases checked, those a door or template refused (skipped), the problems found and
the CPU seconds; below it, up to three reproducers per family (the laced strings, the door, the template kwargs and shape).
`--no-shield` runs the same cases with the shield off, to show the check sees forged tokens.

    python bench/shield_fuzz.py [--family kimi_k3 ...] [--cases 200] [--seed 1] [--no-shield]
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from gateway.prompts import shield
from tests import shield_fuzz

DOORS = ("chat", "responses", "messages")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", action="append", choices=sorted(shield_fuzz.subjects()), help="default: all")
    parser.add_argument("--cases", type=int, default=200, help="cases per door")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-shield", action="store_true", help="the shield off: the check must see forgeries")
    args = parser.parse_args()
    if args.no_shield:
        shield.Shielder.shield = lambda self, request, keep=frozenset(): (request, shield.Shield("@", []))
    print("| family | cases | refused | problems | CPU s |\n|---|---|---|---|---|")
    examples = []
    for name in args.family or sorted(shield_fuzz.subjects()):
        subject = shield_fuzz.subject(name)
        refused = sum(shield_fuzz.REFUSED.values())
        start = time.process_time()
        found = shield_fuzz.run(subject, DOORS, args.cases, args.seed)
        cpu = time.process_time() - start
        refused = sum(shield_fuzz.REFUSED.values()) - refused
        print(f"| {name} | {args.cases * len(DOORS)} | {refused} | {len(found)} | {cpu:.1f} |", flush=True)
        for problem, finding in list({f.problem: f for f in found}.items())[:3]:
            strings = {k: v for k, v in finding.case.strings.items() if v != f"{k} text"}
            examples.append(f"    {name} [{finding.case.door} {finding.case.kwargs} {finding.case.shape}]: {problem}")
            examples.append(f"        {strings!r:.600}")
    print("\n".join(examples))
    print("refused:", dict(Counter(shield_fuzz.REFUSED).most_common(5)))


if __name__ == "__main__":
    main()
