"""gpt-oss, Llama 3 and Mistral tool grammars: build and xgrammar compile time of a 5-tool request per vocabulary.

Each family builds its grammar for one request with five tools (a string, an optional integer, an enum, a
string array, a bounded string; tool_choice "required", the only choice Llama 3 constrains) on its real
vocabulary (o200k_harmony, Llama 3.1, tekken 240911). The xgrammar `TokenizerInfo` spells every token as
text, control tokens included, as SGLang's and vLLM's `from_huggingface` does. Cells, median (min) over
--repeats runs:

- build: `family.grammar(request, "")` with the JSON-schema caches cleared first;
- compile: `compile_structural_tag` on a `GrammarCompiler(cache_enabled=False, max_threads=--threads)`.

Run it on a tree before and after a grammar change to compare (bench/RESULTS.md has both):

    python bench/family_grammar_bench.py [--repeats 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import xgrammar as xg

from gateway.families.base import FamilyContext
from gateway.families.gpt_oss import harmony_tokenizer
from gateway.families.gpt_oss.family import GptOssFamily
from gateway.families.llama import llama3_tokenizer
from gateway.families.llama.family import Llama3Family
from gateway.families.mistral import tekken_tokenizer
from gateway.families.mistral.family import MistralFamily
from gateway.grammars import json as json_grammar
from gateway.types import ChatRequest

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string"},
        "limit": {"type": "integer"},
        "mode": {"type": "string", "enum": ["fast", "exact"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "title": {"type": "string", "maxLength": 40},
    },
    "required": ["query", "mode"],
}
REQUEST = ChatRequest(
    messages=[{"role": "user", "content": "x"}],
    tools=[{"type": "function", "function": {"name": f"tool_{i}", "parameters": PARAMETERS}} for i in range(5)],
    tool_choice="required",
)
FAMILIES: list[tuple[str, Callable[[], Any], type, str]] = [
    ("gpt-oss (o200k_harmony)", harmony_tokenizer, GptOssFamily, "<|endoftext|>"),
    ("llama 3 (llama3)", llama3_tokenizer, Llama3Family, "<|eot_id|>"),
    ("mistral (tekken 240911)", tekken_tokenizer, MistralFamily, "</s>"),
]


def _clear_caches() -> None:
    json_grammar._ebnf.cache_clear()
    try:
        from gateway.grammars import safe_json

        safe_json._json_value_ebnf.cache_clear()
    except ImportError:  # a tree from before safe_json
        pass


def _timed(fn: Callable[[], Any], repeats: int) -> tuple[float, float, Any]:
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), min(times), out


def row(label: str, load: Callable[[], Any], family_class: type, stop: str, repeats: int, threads: int) -> str:
    """One family's table row."""
    tokenizer = load()
    stop_id = tokenizer.token_to_id(stop)
    family = family_class(FamilyContext(tokenizer, None, None, stop, [stop_id], []))
    strings = [tokenizer.id_to_token(i) or "" for i in range(tokenizer.get_vocab_size())]
    info = xg.TokenizerInfo(strings, xg.VocabType.BYTE_LEVEL, stop_token_ids=[stop_id])

    def build() -> Any:
        _clear_caches()
        return family.grammar(REQUEST, "")

    b_med, b_min, grammar = _timed(build, repeats)
    compiler = xg.GrammarCompiler(info, max_threads=threads, cache_enabled=False)
    c_med, c_min, _ = _timed(lambda: compiler.compile_structural_tag(grammar.text), repeats)
    return f"| {label} | {len(strings)} | {len(grammar.text)} | {b_med:.1f} ({b_min:.1f}) | {c_med:.0f} ({c_min:.0f}) |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    print(f"| family (vocabulary) | vocab | grammar chars | build ms | compile ms (cold) |  # repeats={args.repeats}")
    print("|---|---|---|---|---|")
    for label, load, family_class, stop in FAMILIES:
        print(row(label, load, family_class, stop, args.repeats, args.threads))


if __name__ == "__main__":
    main()
