"""canitoolcall adapter that replays every Kimi fixture through the gateway's Kimi family of its version.

`models[0]` picks the variant: Kimi-K3 → `kimi_k3` (`KimiK3Parser`, starting in
the channel the generation prompt left open), Kimi-K2* → `kimi_k2` (its
parser, in reasoning when the generation prompt ends in `<think>`).

The fixtures' ids are real K3 / K2 ids, and neither vocabulary (tiktoken rank
files) is available offline. What a parser needs from an id is whether it is
one of the format's control tokens (K3: `<|open|>`=163587, `<|close|>`=163588,
`<|sep|>`=163589; K2: `<|tool_calls_section_begin|>`=163595, `…_end|>`=163596,
`<|tool_call_begin|>`=163597, `<|tool_call_argument_begin|>`=163598,
`<|tool_call_end|>`=163599, `</think>`=163607, found by lining up every K2
fixture's large ids with its marker spellings) and, for the others, their
text. (K3 re-uses K2's ids 163586-163588 for other tokens, so each variant has
its own table.) So the ids are decoded by alignment with `raw_output`
(`tests/conformance/alignment.py`), learnt over the fixtures of the same
variant; every fixture must align in exactly one way
(`k3-control-marker-text-in-value`, whose value spells
`<|close|>argument<|sep|>` with ordinary ids, needs the learnt `argument`).

Run with:
    python -m canitoolcall run --engine tests.conformance.adapters.kimi:Adapter --family kimi
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import cache
from typing import Any

from canitoolcall.adapters.base import ReplayInput, Support, ToolSpec
from canitoolcall.fixtures import load_fixtures

from gateway.families.base import FamilyContext, OutputParser
from gateway.families.kimi import KimiK2Family
from gateway.families.kimi.markers import CLOSE, K2_SECTIONS, OPEN, SEP
from gateway.families.kimi.parser import KimiK3Parser
from gateway.types import ChatRequest
from tests.conformance.alignment import AlignedPieces, AlignmentError, Vocabulary
from tests.conformance.common import GatewayAdapter

FAMILY = "kimi"
ENGINE = "tests.conformance.adapters.kimi:Adapter"
EXPECTED_FAILURES: dict[str, str] = {}

K3_MODEL = "moonshotai/Kimi-K3"
K2_MODELS = ("moonshotai/Kimi-K2.6", "moonshotai/Kimi-K2-Instruct-0905", "moonshotai/Kimi-K2-Instruct")
CONTROL_IDS: dict[int, str] = {163587: OPEN, 163588: CLOSE, 163589: SEP}
"""K3's control tokens."""
K2_CONTROL_IDS: dict[int, str] = {
    163595: K2_SECTIONS.section_begin,
    163596: K2_SECTIONS.section_end,
    163597: K2_SECTIONS.call_begin,
    163598: K2_SECTIONS.arguments_begin,
    163599: K2_SECTIONS.call_end,
    163607: K2_SECTIONS.think_end,
}
"""K2's control tokens that its fixtures' outputs hold."""


@cache
def vocabulary(k3: bool) -> Vocabulary:
    """Ordinary id texts learnt from every fixture with ids of the same variant (K3, or K2)."""
    learnt = Vocabulary(CONTROL_IDS if k3 else K2_CONTROL_IDS)
    fixtures = load_fixtures(None, families=[FAMILY])
    learnt.learn(
        [
            (f.raw_output, f.output_token_ids)
            for f in fixtures
            if (f.reference_model == K3_MODEL) == k3 and f.output_token_ids
        ]
    )
    return learnt


@cache
def k2_family() -> KimiK2Family:
    """The gateway's kimi_k2 family (only its parser is used: no tokenizer or template needed)."""
    return KimiK2Family(FamilyContext(None, None, None, None, [], []))


class Adapter(GatewayAdapter):
    """The gateway's Kimi parser of the fixture's variant, fed Pieces the way the gateway's detokenizer makes them."""

    name = "llm-gateway-kimi"
    tokens_per_step = "many"

    def supports(self, family: str, model: str) -> Support:
        if family == FAMILY and (model == K3_MODEL or model in K2_MODELS):
            return Support(True)
        return Support(False, f"no kimi variant serves {model}")

    def parser_config(self, raw: ReplayInput) -> dict[str, Any]:
        if raw.model == K3_MODEL:
            return {"parser": "gateway.families.kimi.KimiK3Parser", "channel": _channel(raw), "ids": "aligned"}
        return {"family": "kimi_k2", "generation_prompt": raw.generation_prompt, "ids": "aligned"}

    def units(self, raw: ReplayInput) -> list[int]:
        if raw.token_ids is None:
            raise AlignmentError(f"{raw.fixture_id} has no token ids and the Kimi vocabulary is not available")
        return list(raw.token_ids)

    def special_token_ids(self, raw: ReplayInput) -> Collection[int]:
        return frozenset(CONTROL_IDS if raw.model == K3_MODEL else K2_CONTROL_IDS)

    def family_parser(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> OutputParser:
        if raw.model == K3_MODEL:
            return KimiK3Parser(channel=_channel(raw))
        request = ChatRequest(messages=[{"role": "user", "content": ""}], tools=list(tools))
        return k2_family().parser(request, raw.generation_prompt or "")

    def pieces(self, raw: ReplayInput) -> AlignedPieces:
        learnt = vocabulary(raw.model == K3_MODEL)
        return AlignedPieces(learnt.texts(raw.text, self.units(raw)), learnt.controls)


def _channel(raw: ReplayInput) -> str:
    """The channel the K3 generation prompt left open."""
    prompt = raw.generation_prompt or ""
    return "response" if prompt.endswith(f"{OPEN}response{SEP}") or raw.thinking is False else "think"
