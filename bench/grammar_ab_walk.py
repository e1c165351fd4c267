"""Do two trees' grammars take the same outputs? Random walks of one tree's grammar fed to the other's, both ways.

`dump` (run once under each tree's PYTHONPATH) writes every family's grammar (tests/grammar_walks.py's subjects,
on their real vocabularies) for each request shape of tests/grammar_walks.py's ASKS and a few more whose tools hold
what grammar rewrites touch (optional members before, between and after required ones, additional properties, one
pattern on several parameters, mixed enums, nested objects); `walk` compiles both trees' grammar of each family and
shape, walks each at random (`tests.grammar_walks.walk`) and replays the ids on both: after every prefix both must
allow the same next tokens (stop tokens included: equal languages, equal masks). Equal grammar texts are not walked.

    PYTHONPATH=/work/main python bench/grammar_ab_walk.py dump /tmp/main.json
    PYTHONPATH=$PWD python bench/grammar_ab_walk.py dump /tmp/branch.json
    python bench/grammar_ab_walk.py walk /tmp/main.json /tmp/branch.json [--walks 30] [--family hermes]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import xgrammar as xg

from backends.xgrammar_compile import compile_grammar
from gateway.types import ChatRequest
from tests.grammar_walks import ASKS, SUBJECTS, function_tool, walk

_CODE = {"type": "string", "pattern": "^[a-z]{2}[0-9]$"}
EXTRA_TOOLS = [
    function_tool("mixed", {"type": "object", "properties": {
        "a": {"type": "integer"}, "b": {"type": "string"}, "c": {"type": "boolean"}, "d": {"type": "number"},
        "e": {"type": "integer"}, "f": {"type": "string", "enum": ["x", "", "y z", 1, None, True]}},
        "required": ["c"]}),
    function_tool("codes", {"type": "object", "properties": {"p": _CODE, "q": _CODE, "r": _CODE, "s": _CODE}}),
    function_tool("nested", {"type": "object", "properties": {
        "o": {"type": "object", "properties": {"u": {"type": "integer"}, "v": {"type": "integer"},
                                               "w": {"type": "string"}}},
        "k": {"type": "array", "items": {"type": "object", "properties": {"m": {"type": "integer"}}},
              "maxItems": 2}}, "required": ["k"]}),
    function_tool("extra", {"type": "object", "properties": {"g": {"type": "integer"}, "h": {"type": "integer"}},
                  "additionalProperties": {"type": "integer"}}),
]  # fmt: skip


def _shapes() -> list[tuple[str, ChatRequest, bool]]:
    """(label, request, reasoning) for each ask of tests/grammar_walks.py and the extra tools' shapes."""
    shapes = [(ask.label, ask.request(), ask.reasoning) for ask in ASKS]
    for choice in ("required", "auto"):
        shapes.append(
            (f"extra+{choice}", ChatRequest(messages=[{"role": "user", "content": "x"}], tools=EXTRA_TOOLS,
                                            tool_choice=choice), False)
        )  # fmt: skip
    return shapes


def dump(path: str, families: list[str]) -> None:
    out: dict[str, dict[str, Any]] = {}
    for name in families:
        subject = SUBJECTS[name]()
        out[name] = {}
        for label, request, reasoning in _shapes():
            try:
                grammar = subject.family.grammar(request, subject.prompts[reasoning])
                out[name][label] = None if grammar is None else [grammar.kind, grammar.text]
            except Exception as exc:  # noqa: BLE001 - a refusal is an answer to compare
                out[name][label] = ["error", f"{type(exc).__name__}: {exc}"]
        print(name, len(out[name]), flush=True)
    Path(path).write_text(json.dumps(out))


def _differs(first: xg.CompiledGrammar, second: xg.CompiledGrammar, ids: list[int]) -> str | None:
    """None when both grammars allow the same next tokens (the stop tokens included) after every prefix of `ids`,
    and take each of them; else where they part."""
    matchers = [xg.GrammarMatcher(first), xg.GrammarMatcher(second)]
    masks = [xg.allocate_token_bitmask(1, first.tokenizer_info.vocab_size) for _ in matchers]
    for i in range(len(ids) + 1):
        for matcher, mask in zip(matchers, masks, strict=True):
            matcher.fill_next_token_bitmask(mask)
        if not bool((masks[0] == masks[1]).all()):
            return f"the next tokens after {i} ids"
        if i < len(ids) and not all(m.accept_token(ids[i]) for m in matchers):
            return f"token {i} ({ids[i]})"
    return None


def ab_walk(first: str, second: str, families: list[str], walks: int, seed: int) -> None:
    a, b = json.loads(Path(first).read_text()), json.loads(Path(second).read_text())
    print("| family | shapes | equal texts | walked | walks each way | differ A→B | differ B→A |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    notes: list[str] = []
    for name in families or sorted(set(a) & set(b)):
        subject = SUBJECTS[name]()
        equal = walked = count = refused_ab = refused_ba = 0
        for label in a[name]:
            ga, gb = a[name][label], b[name].get(label)
            if ga == gb:
                equal += 1
                continue
            if ga is None or gb is None or "error" in (ga[0], gb[0]):
                notes.append(f"{name} {label}: {str(ga)[:120]} / {str(gb)[:120]}")
                continue
            walked += 1
            ca, cb = (compile_grammar(subject.compiler, g[0], g[1]) for g in (ga, gb))
            rng = random.Random(f"{seed}:{name}:{label}")
            for _ in range(walks):
                for source, target, direction in ((ca, cb, "A→B"), (cb, ca, "B→A")):
                    result = walk(xg.GrammarMatcher(source), subject.classes, subject.stop_id, rng)
                    refused = _differs(source, target, result.ids)
                    count += direction == "A→B"
                    if refused is not None:
                        refused_ab += direction == "A→B"
                        refused_ba += direction == "B→A"
                        text = subject.tokenizer.decode(result.ids, skip_special_tokens=False)
                        notes.append(f"{name} {label} {direction}: {refused}: {text[:300]!r}")
        total = len(a[name])
        print(f"| {name} | {total} | {equal} | {walked} | {count} | {refused_ab} | {refused_ba} |", flush=True)
    print("\n".join(notes[:40]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out")
    d.add_argument("--family", action="append", choices=sorted(SUBJECTS))
    w = sub.add_parser("walk")
    w.add_argument("first")
    w.add_argument("second")
    w.add_argument("--family", action="append", choices=sorted(SUBJECTS))
    w.add_argument("--walks", type=int, default=30, help="walks each way per family and shape")
    w.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.command == "dump":
        dump(args.out, args.family or list(SUBJECTS))
    else:
        ab_walk(args.first, args.second, args.family or [], args.walks, args.seed)


if __name__ == "__main__":
    main()
