"""canitoolcall adapter: llama fixtures through the gateway's Llama parsers.

`models[0]` picks the variant: Llama 3.x → `LLAMA3_JSON` on the real Llama 3
tokenizer (quicktok's `llama3.vocab` with Llama 3.1's special tokens; the
recorded ids are decoded by the gateway's Detokenizer); Llama 4 →
`LLAMA4_PYTHONIC`. Llama 4's vocabulary is gated and not available offline,
so its ids are decoded by alignment with the text (tests/conformance/alignment.py),
its control tokens `<|python_start|>`=200016 and `<|python_end|>`=200017 known.

    python -m canitoolcall run --engine tests.conformance.adapters.llama:Adapter --family llama
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from canitoolcall.adapters.base import ReplayInput, Support, ToolSpec
from tokenizers import Tokenizer

from gateway.families.llama import LLAMA3_JSON, LLAMA4_PYTHONIC, LlamaParser, llama3_tokenizer
from gateway.families.llama.markers import PYTHON_END, PYTHON_START
from tests.conformance.alignment import AlignedPieces, Vocabulary
from tests.conformance.common import PieceSource
from tests.conformance.vocabulary import VocabularyAdapter

FAMILY = "llama"
ENGINE = "tests.conformance.adapters.llama:Adapter"
EXPECTED_FAILURES: dict[str, str] = {}
LLAMA4_CONTROL = {200016: PYTHON_START, 200017: PYTHON_END}


def is_llama4(raw: ReplayInput) -> bool:
    return "Llama-4" in raw.model


class Adapter(VocabularyAdapter):
    """The gateway's Llama parsers, fed by its Detokenizer (Llama 3) or aligned ids (Llama 4)."""

    name = "llm-gateway-llama"

    def supports(self, family: str, model: str) -> Support:
        return Support(True) if family == FAMILY else Support(False, "the llama family parses Llama 3/4 calls only")

    def parser_config(self, raw: ReplayInput) -> dict[str, Any]:
        if is_llama4(raw):
            return {"parser": "LlamaParser(LLAMA4_PYTHONIC)", "ids": "aligned with raw_output (gated vocabulary)"}
        return {"parser": "LlamaParser(LLAMA3_JSON)", "tokenizer": "llama3 (quicktok data, Llama 3.1 specials)"}

    def load_tokenizer(self) -> Tokenizer:
        return llama3_tokenizer()

    def special_token_ids(self, raw: ReplayInput) -> Collection[int]:
        return set(LLAMA4_CONTROL) if is_llama4(raw) else super().special_token_ids(raw)

    def family_parser(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> LlamaParser:
        return LlamaParser(LLAMA4_PYTHONIC if is_llama4(raw) else LLAMA3_JSON)

    def pieces(self, raw: ReplayInput) -> PieceSource:
        if is_llama4(raw):
            return AlignedPieces(Vocabulary(LLAMA4_CONTROL).texts(raw.text, self.units(raw)), LLAMA4_CONTROL)
        return super().pieces(raw)
