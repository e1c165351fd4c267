"""canitoolcall adapter: gpt-oss (Harmony) fixtures through the gateway's Harmony parser, on the real tokenizer.

The tokenizer is o200k_harmony converted from quicktok's data files (o200k
ranks + Harmony's special tokens at their published ids); the fixtures'
recorded ids are decoded by the gateway's own Detokenizer.

    python -m canitoolcall run --engine tests.conformance.adapters.gpt_oss:Adapter --family gpt-oss
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from canitoolcall.adapters.base import ReplayInput, Support, ToolSpec
from tokenizers import Tokenizer

from gateway.families.gpt_oss import HarmonyParser, harmony_tokenizer
from tests.conformance.vocabulary import VocabularyAdapter

FAMILY = "gpt-oss"
ENGINE = "tests.conformance.adapters.gpt_oss:Adapter"
EXPECTED_FAILURES: dict[str, str] = {}
DEFAULT_GENERATION_PROMPT = "<|start|>assistant"


class Adapter(VocabularyAdapter):
    """The gateway's Harmony parser fed by its Detokenizer over the o200k_harmony vocabulary."""

    name = "llm-gateway-gpt-oss"

    def supports(self, family: str, model: str) -> Support:
        return Support(True) if family == FAMILY else Support(False, "the gpt_oss family parses Harmony only")

    def parser_config(self, raw: ReplayInput) -> dict[str, Any]:
        return {"parser": "gateway.families.gpt_oss.HarmonyParser", "tokenizer": "o200k_harmony (quicktok data)"}

    def load_tokenizer(self) -> Tokenizer:
        return harmony_tokenizer()

    def family_parser(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> HarmonyParser:
        return HarmonyParser.after(raw.generation_prompt or DEFAULT_GENERATION_PROMPT)
