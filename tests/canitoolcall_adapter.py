"""canitoolcall adapter that replays qwen3-hermes fixtures through the gateway's hermes parser.

The fixtures' token ids are Qwen3 ids and no Qwen tokenizer is available
offline, so (contract rule 1 fallback) the units are the embedded SmolLM2
tokenizer's encoding of `raw_output`, added-token spellings matched. Chunks
are detokenized with `gateway.detokenizer.Detokenizer`, the gateway's own
incremental detokenizer, and fed to `HermesParser` as the gateway feeds it.

Run the whole family with:
    python -m canitoolcall run --engine tests.canitoolcall_adapter:HermesAdapter --family qwen3-hermes
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from functools import cached_property
from typing import Any

from canitoolcall.adapters.base import Adapter, ReplayInput, Support, ToolSpec
from canitoolcall.results import ParseResult, StreamAccumulator

from backends.checkpoint import Checkpoint, load_checkpoint
from gateway.detokenizer import Detokenizer
from gateway.families.base import Delta, Piece
from gateway.families.hermes import HermesParser
from gateway.families.hermes.markers import prompt_opens_reasoning

FAMILY = "qwen3-hermes"


class HermesAdapter(Adapter):
    """The gateway's hermes family parser, driven the way the gateway drives it."""

    name = "llm-gateway-hermes"
    pinned_version = "0.1.0"

    @cached_property
    def checkpoint(self) -> Checkpoint:
        return load_checkpoint()

    @cached_property
    def added_tokens(self) -> dict[int, str]:
        """Added-token id -> exact spelling, as the detokenizer renders them."""
        return {i: t.content for i, t in self.checkpoint.tokenizer.get_added_tokens_decoder().items()}

    def version(self) -> str:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("llm-gateway")
        except PackageNotFoundError:
            return self.pinned_version

    def supports(self, family: str, model: str) -> Support:
        if family == FAMILY:
            return Support(True)
        return Support(False, f"the hermes parser serves {FAMILY} only")

    def parser_config(self, raw: ReplayInput) -> dict[str, Any]:
        return {
            "parser": "gateway.families.hermes.HermesParser",
            "in_reasoning": _opens_reasoning(raw),
            "tool_calls": True,
            "units": "embedded SmolLM2 tokenizer encoding of raw_output (fixture ids are Qwen3 ids; no Qwen tokenizer offline)",
            "detokenizer": "gateway.detokenizer.Detokenizer",
            "tokenizer": str(self.checkpoint.path.name),
        }

    def units(self, raw: ReplayInput) -> list[int]:
        return self.checkpoint.tokenizer.encode(raw.text, add_special_tokens=False).ids

    def special_token_ids(self, raw: ReplayInput) -> Collection[int] | None:
        return set(self.added_tokens)

    def parse(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> ParseResult:
        parser = self._parser(raw, tools)
        return _accumulate(parser.feed([Piece(raw.text)]) + parser.finish())

    def parse_stream(self, raw: ReplayInput, chunks: Sequence[Sequence[int]], tools: Sequence[ToolSpec]) -> ParseResult:
        parser = self._parser(raw, tools)
        detokenizer = Detokenizer(self.checkpoint.tokenizer, self.added_tokens)
        deltas: list[Delta] = []
        for chunk in chunks:
            deltas += parser.feed(detokenizer.feed(chunk))
        deltas += parser.feed(detokenizer.flush()) + parser.finish()
        return _accumulate(deltas)

    def _parser(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> HermesParser:
        return HermesParser(tool_calls=bool(tools), in_reasoning=_opens_reasoning(raw))


def _opens_reasoning(raw: ReplayInput) -> bool:
    return prompt_opens_reasoning(raw.generation_prompt or "")


def _accumulate(deltas: Sequence[Delta]) -> ParseResult:
    """Merge deltas as an OpenAI client does (canitoolcall's own accumulator)."""
    acc = StreamAccumulator()
    for d in deltas:
        acc.add_content(d.content)
        acc.add_reasoning(d.reasoning)
        if d.tool_index is not None:
            acc.add_tool_call(d.tool_index, d.tool_name, d.tool_arguments)
    return acc.result()
