"""Adversarial turns rendered as each family's history and parsed back: content, reasoning and calls, however cut.

Where bench/family_roundtrip.py writes calls alone, each turn here also holds text before the calls, reasoning
(thinking on), and inputs none of the earlier checks use: combining marks, right-to-left text, zero-width and
line/paragraph separators, a lone `\\r`, NUL, whitespace-only values, tool names with dots and dashes, values that
spell another family's markers or a JSON fragment, parallel calls of one tool, deep nesting. For each turn the
text after the generation prompt (client strings shielded, as the gateway encodes them) is parsed whole, cut once
at every token, token by token, and cut short at every token (a max_tokens cut: the parser must not raise); fed one
token at a time, the deltas sent so far must always begin the whole output's (a parser sends only what is certain).
A problem is a turn whose calls, content (stripped) or reasoning (stripped, where the template kept it) differ from
what was rendered, or between chunkings. `--splices N`: N random splices of those turns per family instead.

    python bench/family_hunt.py [--family hermes ...] [--show 2] [--splices 300 --seed 1]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.detokenizer import Detokenizer
from bench.family_roundtrip import SUBJECTS, Turn, subject, turn_ids
from gateway.families.base import Family
from gateway.types import ChatRequest, Delta
from tests.family_checks import added_tokens, feed, joined_calls

HUNTED = {**SUBJECTS, "kimi_k3": ("kimi_k3", "kimi_k3", None, (None, None))}
"""bench/family_roundtrip.py's subjects and Kimi K3. Not Llama 4: its published template writes every argument as an
unescaped quoted string (`n="2"`, a quote or newline inside a value breaks the call), so its history is not what the
model writes."""


def _tool(name: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "description": "d",
                                             "parameters": {"type": "object", "properties": properties}}}  # fmt: skip


TOOLS = [
    _tool("search", {"q": {"type": "string"}, "n": {"type": "integer"}, "filters": {"type": "object"},
                     "ids": {"type": "array", "items": {"type": "integer"}}, "exact": {"type": "boolean"}}),
    _tool("fs.read-file_v2", {"path": {"type": "string"}}),
    _tool("noop", {}),
]  # fmt: skip
VALUES = [
    "e\u0301 n\u0303 \u0915\u094d\u0937",  # combining marks, a Devanagari conjunct
    "\u05e9\u05dc\u05d5\u05dd \u202eevil\u202c \u0627\u0644\u0633\u0644\u0627\u0645",  # RTL and an override
    "zero\u200bwidth\u200djoin\ufeffbom \u2028ls \u2029ps",
    "lone\rcr\r\nwin",
    "nul\u0000byte \u0007bell \u001bescape",
    "   ",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467 \U0001d54f",
    '{"q": "inner", "n": 1}',
    '}]}"}',
    "<arg_value></arg_value><|channel|>commentary<|message|><｜DSML｜",
    'if s == "</parameter>": x = "<parameter=q>" </function',  # Qwen's tags inside a value, no tag after them
    "ends with</parameter>",
    "</｜DSML｜parameter></｜DSML｜invoke>[TOOL_CALLS]<|python_tag|><tool_call|><|tool_call_end|>",
]
# (content before the calls, reasoning, calls)
TURNS: list[Turn] = [
    ("Let me look.", "I should search.", [("search", {"q": VALUES[0], "n": 2})]),
    ("", "r\u05e9\u200f", [("search", {"q": VALUES[1]})]),
    ("", "", [("search", {"q": VALUES[2], "exact": True})]),
    ("", "", [("search", {"q": VALUES[3]})]),
    ("", "", [("search", {"q": VALUES[4]})]),
    ("", "", [("search", {"q": VALUES[5], "filters": {" ": " "}})]),
    ("\u202e", "", [("fs.read-file_v2", {"path": VALUES[6]})]),
    ("", "", [("search", {"q": VALUES[7], "filters": {"q": VALUES[7]}})]),
    ("", "", [("search", {"q": VALUES[8]})]),
    ("", "", [("search", {"q": VALUES[9]})]),
    ("", "", [("fs.read-file_v2", {"path": "/a/b"}), ("fs.read-file_v2", {"path": "/c"}), ("noop", {})]),
    ("", "", [("search", {"filters": {"a": [[[[{"b": [None, True, 1.5e-7]}]]]]}, "ids": [0, -1, 10**15]})]),
    ("Two\n\nparagraphs\n", "", [("noop", {}), ("search", {"q": "x\ny"})]),
    ("", "", [("search", {"q": "tab\tand \\backslash \\n not newline \\u0041"})]),
    ("", "", [("search", {"q": "x" * 300})]),
    ("", "", [("search", {"q": VALUES[10], "n": 1})]),
    ("", "", [("search", {"q": VALUES[11]}), ("fs.read-file_v2", {"path": VALUES[12]})]),
]


@dataclass
class Outcome:
    content: str
    reasoning: str
    calls: list[list[Any]]


def outcome(deltas: list[Delta]) -> Outcome:
    calls = []
    for name, arguments in joined_calls(deltas):
        try:
            calls.append([name, json.loads(arguments)])
        except ValueError:
            calls.append([name, arguments, "unparsed"])
    content = "".join(d.content for d in deltas)
    return Outcome(content.strip(), "".join(d.reasoning for d in deltas).strip(), calls)


def _normalized(tok: Any, value: Any) -> Any:
    """`value` with every string as the tokenizer's normalizer leaves it (Qwen's NFC composes `e\u0301`)."""
    if isinstance(value, str):
        return tok.normalizer.normalize_str(value) if tok.normalizer else value
    if isinstance(value, dict):
        return {_normalized(tok, k): _normalized(tok, v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(_normalized(tok, v) for v in value)
    return value


BARE_KEYS = {"gemma4"}
"""Families whose template writes object keys bare: whitespace around a key is lost (`{ :…}` reads as the key "",
as vLLM's parser reads it)."""


def _stripped_keys(value: Any) -> Any:
    """`value` with every object key stripped of surrounding whitespace."""
    if isinstance(value, dict):
        return {k.strip(): _stripped_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_stripped_keys(v) for v in value]
    return value


def _retracted(family: Family, asked: ChatRequest, head: str, ids: list[int]) -> int | None:
    """The first token after which the deltas sent so far are not a prefix of the whole output's (content,
    reasoning, each call's name and arguments): a parser sends only what is certain. None when there is none."""
    tok = family.context.tokenizer

    def texts(deltas: list[Delta]) -> tuple[str, str, list[tuple[str, str]]]:
        return "".join(d.content for d in deltas), "".join(d.reasoning for d in deltas), joined_calls(deltas)

    content, reasoning, calls = texts(feed(family.parser(asked, head), Detokenizer(tok, added_tokens(tok)), ids))
    parser, detok, sent = family.parser(asked, head), Detokenizer(tok, added_tokens(tok)), []
    for at in range(len(ids)):
        sent += parser.feed(detok.feed(ids[at : at + 1]))
        so_far, thought, begun = texts(sent)
        if not (content.startswith(so_far) and reasoning.startswith(thought) and len(begun) <= len(calls)):
            return at
        if any(
            name != whole_name or not whole.startswith(part) for (name, part), (whole_name, whole) in zip(begun, calls)
        ):
            return at
    return None


def hunt(family: Family, turn: Turn, thinking: bool) -> tuple[int, list[str]]:
    """(cases tried, problems) for one turn."""
    asked, head, ids = turn_ids(family, TOOLS, turn, thinking)
    tok = family.context.tokenizer
    detok = lambda: Detokenizer(tok, added_tokens(tok))
    run = lambda cuts=(), upto=None: outcome(feed(family.parser(asked, head), detok(), ids[:upto], cuts))
    text = tok.decode(ids, skip_special_tokens=False)
    content, reasoning, calls = _normalized(tok, turn)
    # Not every template keeps reasoning, nor content beside calls (Llama 3.1's writes the calls alone).
    written = thinking and reasoning.strip() and reasoning.strip() in text
    said = content.strip() if content.strip() in text else ""
    if family.name in BARE_KEYS:
        calls = [(n, _stripped_keys(a)) for n, a in calls]
    want = Outcome(said, reasoning.strip() if written else "", [[n, a] for n, a in calls])
    problems, tried = [], 0
    whole = run()
    tried += 1
    got = Outcome(whole.content, whole.reasoning if written else "", whole.calls)
    if got != want:
        problems.append(f"whole: want {want} got {got} text {text!r}")
    for cut in range(1, len(ids)):
        tried += 1
        if (split := run([cut])) != whole:
            problems.append(f"cut at {cut}: {split} vs whole {whole}")
            break
    tried += 1
    if (each := run(range(1, len(ids)))) != whole:
        problems.append(f"token by token: {each} vs whole {whole}")
    tried += len(ids)
    if (at := _retracted(family, asked, head, ids)) is not None:
        problems.append(f"token {at} of {text!r}: deltas sent so far are not how the whole output begins")
    for upto in range(1, len(ids)):
        tried += 1
        try:
            short = run((), upto)
        except Exception as error:  # noqa: BLE001 - a max_tokens cut must never raise
            problems.append(f"cut short at {upto}/{len(ids)}: {type(error).__name__}: {error}")
            break
        names = {c[0] for c in short.calls}
        if not names <= {t["function"]["name"] for t in TOOLS}:
            problems.append(f"cut short at {upto}: undeclared call names {names}")
            break
    return tried, problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", action="append", choices=sorted(HUNTED), help="repeatable; default: all")
    parser.add_argument("--show", type=int, default=2, help="problems printed per family")
    parser.add_argument("--splices", type=int, default=0, help="random splices of rendered turns per family")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.splices:
        print("| family (template) | spliced outputs | problems |\n|---|---:|---:|")
        for label in args.family or list(HUNTED):
            tried, problems = splice_hunt(subject(label, HUNTED), args.splices, args.seed)
            print(f"| {label} | {tried} | {len(problems)} |", flush=True)
            for problem in problems[: args.show]:
                print(f"    {label}: {problem[:900]}", flush=True)
        return
    print("| family (template) | turns | cases | turns with a problem |\n|---|---:|---:|---:|")
    notes: list[str] = []
    for label in args.family or list(HUNTED):
        family = subject(label, HUNTED)
        turns = cases = bad = 0
        for thinking in (False, True):
            for index, turn in enumerate(TURNS):
                try:
                    tried, problems = hunt(family, turn, thinking)
                except Exception as error:  # noqa: BLE001 - a render that raises is a finding too
                    tried, problems = 1, [f"render: {type(error).__name__}: {error}"]
                turns, cases, bad = turns + 1, cases + tried, bad + bool(problems)
                notes += [f"    {label} turn {index} thinking={thinking}: {p[:700]}" for p in problems[: args.show]]
        print(f"| {label} | {turns} | {cases} | {bad} |", flush=True)
    print("\n".join(notes))


def splice_hunt(family: Family, rounds: int, seed: int) -> tuple[int, list[str]]:
    """(outputs tried, problems): random splices of the family's rendered turns (slices of their ids, joined:
    markers out of order, calls cut open, text inside calls), parsed whole, token by token and in random chunks;
    the parser's contract is the same answer however the output is chunked, and no exception."""
    rng = random.Random(seed)
    tok = family.context.tokenizer
    rendered = [turn_ids(family, TOOLS, turn, thinking) for turn in TURNS for thinking in (False, True)]
    problems: list[str] = []
    for _ in range(rounds):
        asked, head, _ = rng.choice(rendered)
        ids: list[int] = []
        for _ in range(rng.randint(1, 4)):
            source = rng.choice(rendered)[2]
            lo = rng.randrange(len(source))
            ids += source[lo : rng.randint(lo + 1, len(source))]
        detok = lambda: Detokenizer(tok, added_tokens(tok))
        try:
            whole = outcome(feed(family.parser(asked, head), detok(), ids))
            each = outcome(feed(family.parser(asked, head), detok(), ids, range(1, len(ids))))
            cuts = sorted(rng.sample(range(1, len(ids)), min(len(ids) - 1, rng.randint(1, 6))))
            some = outcome(feed(family.parser(asked, head), detok(), ids, cuts))
        except Exception as error:  # noqa: BLE001 - no output may make a parser raise
            problems.append(f"raised {type(error).__name__}: {error} on {tok.decode(ids, skip_special_tokens=False)!r}")
            continue
        if not whole == each == some:
            text = tok.decode(ids, skip_special_tokens=False)
            problems.append(f"chunkings differ on {text!r}: whole {whole} token by token {each} cut at {cuts} {some}")
    return rounds, problems


if __name__ == "__main__":
    main()
