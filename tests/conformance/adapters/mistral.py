"""canitoolcall adapter: mistral fixtures through the gateway's Mistral parser, on Mistral's real tokenizers.

Tekken (v7+, `tokenizer.mode` "mistral"): mistral-common's `tekken_240911.json`
converted with the v7+ special tokens at their ids (`[TOOL_CALLS]`=9,
`[ARGS]`=32, `[CALL_ID]`=33, `[THINK]`=34, `[/THINK]`=35); the recorded ids are
decoded by the gateway's Detokenizer. Mistral 7B v0.3: mistral-common's
SentencePiece `tokenizer.model.v3` converted by `backends.sentencepiece_tokenizer`
(`[TOOL_CALLS]`=5), the same path. Magistral Small 2506 writes `<think>` as
text (the `mistral_text_think` variant).

    python -m canitoolcall run --engine tests.conformance.adapters.mistral:Adapter --family mistral
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from canitoolcall.adapters.base import ReplayInput, Support, ToolSpec
from tokenizers import Tokenizer

from backends.detokenizer import Detokenizer, added_tokens
from gateway.families.mistral import MistralParser, sentencepiece_tokenizer, tekken_tokenizer
from tests.conformance.common import PieceSource
from tests.conformance.vocabulary import VocabularyAdapter

FAMILY = "mistral"
ENGINE = "tests.conformance.adapters.mistral:Adapter"
EXPECTED_FAILURES: dict[str, str] = {}
TEXT_THINK_MODELS = ("mistralai/Magistral-Small-2506",)


def is_v3(raw: ReplayInput) -> bool:
    return raw.tokenizer_mode == "hf"


class Adapter(VocabularyAdapter):
    """The gateway's Mistral parser fed by its Detokenizer over tekken (or aligned v3 ids)."""

    name = "llm-gateway-mistral"

    def supports(self, family: str, model: str) -> Support:
        return Support(True) if family == FAMILY else Support(False, "the mistral family parses [TOOL_CALLS] only")

    def parser_config(self, raw: ReplayInput) -> dict[str, Any]:
        tokenizer = "tokenizer.model.v3 (mistral-common)" if is_v3(raw) else "tekken_240911 (mistral-common)"
        return {"parser": "MistralParser", "text_think": raw.model in TEXT_THINK_MODELS, "tokenizer": tokenizer}

    def load_tokenizer(self) -> Tokenizer:
        return tekken_tokenizer()

    def units(self, raw: ReplayInput) -> list[int]:
        if is_v3(raw) and raw.token_ids is None:
            return sentencepiece_tokenizer().encode(raw.text, add_special_tokens=False).ids
        return super().units(raw)

    def special_token_ids(self, raw: ReplayInput) -> Collection[int]:
        return set(added_tokens(sentencepiece_tokenizer())[0]) if is_v3(raw) else super().special_token_ids(raw)

    def family_parser(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> MistralParser:
        return MistralParser(text_think=raw.model in TEXT_THINK_MODELS)

    def pieces(self, raw: ReplayInput) -> PieceSource:
        if is_v3(raw):
            return Detokenizer(sentencepiece_tokenizer(), added_tokens(sentencepiece_tokenizer())[0])
        return super().pieces(raw)
