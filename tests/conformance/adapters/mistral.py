"""canitoolcall adapter: mistral fixtures through the gateway's Mistral parser, on Mistral's real tokenizers.

Tekken (v7+, `tokenizer.mode` "mistral"): mistral-common's `tekken_240911.json`
converted with the v7+ special tokens at their ids (`[TOOL_CALLS]`=9,
`[ARGS]`=32, `[CALL_ID]`=33, `[THINK]`=34, `[/THINK]`=35); the recorded ids are
decoded by the gateway's Detokenizer. Mistral 7B v0.3 (SentencePiece v3):
`[TOOL_CALLS]`=5 known, its ids aligned with the text
(tests/conformance/alignment.py). Magistral Small 2506 writes `<think>` as
text (the `mistral_text_think` variant).

    python -m canitoolcall run --engine tests.conformance.adapters.mistral:Adapter --family mistral
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from canitoolcall.adapters.base import ReplayInput, Support, ToolSpec
from tokenizers import Tokenizer

from gateway.families.mistral import MistralParser, tekken_tokenizer
from gateway.families.mistral.markers import TOOL_CALLS
from tests.conformance.alignment import AlignedPieces, Vocabulary
from tests.conformance.common import PieceSource
from tests.conformance.vocabulary import VocabularyAdapter

FAMILY = "mistral"
ENGINE = "tests.conformance.adapters.mistral:Adapter"
EXPECTED_FAILURES: dict[str, str] = {}
V3_CONTROL = {5: TOOL_CALLS}
TEXT_THINK_MODELS = ("mistralai/Magistral-Small-2506",)


def is_v3(raw: ReplayInput) -> bool:
    return raw.tokenizer_mode == "hf"


class Adapter(VocabularyAdapter):
    """The gateway's Mistral parser fed by its Detokenizer over tekken (or aligned v3 ids)."""

    name = "llm-gateway-mistral"

    def supports(self, family: str, model: str) -> Support:
        return Support(True) if family == FAMILY else Support(False, "the mistral family parses [TOOL_CALLS] only")

    def parser_config(self, raw: ReplayInput) -> dict[str, Any]:
        tokenizer = "v3 SentencePiece ids aligned with raw_output" if is_v3(raw) else "tekken_240911 (mistral-common)"
        return {"parser": "MistralParser", "text_think": raw.model in TEXT_THINK_MODELS, "tokenizer": tokenizer}

    def load_tokenizer(self) -> Tokenizer:
        return tekken_tokenizer()

    def special_token_ids(self, raw: ReplayInput) -> Collection[int]:
        return set(V3_CONTROL) if is_v3(raw) else super().special_token_ids(raw)

    def family_parser(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> MistralParser:
        return MistralParser(text_think=raw.model in TEXT_THINK_MODELS)

    def pieces(self, raw: ReplayInput) -> PieceSource:
        if is_v3(raw):
            return AlignedPieces(Vocabulary(V3_CONTROL).texts(raw.text, self.units(raw)), V3_CONTROL)
        return super().pieces(raw)
