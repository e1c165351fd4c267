"""What the gateway's canitoolcall adapters and their fixture tests share.

Adapters: `GatewayAdapter` replays chunks of ids as the gateway does (ids ->
Pieces -> a family parser's Deltas -> canitoolcall's `StreamAccumulator`);
`CheckpointAdapter` adds a checkpoint whose tokenizer decodes the ids through
`backends.detokenizer.Detokenizer`, added-token spellings included. Each family's
adapter says which parser, which ids and what it supports.

Tests: `run_fixtures` runs an adapter over a family's fixtures with
canitoolcall's own runner and checks, every default chunking strategy.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from functools import cached_property
from pathlib import Path
from typing import Protocol

from canitoolcall.adapters.base import Adapter, ReplayInput, ToolSpec
from canitoolcall.chunking import DEFAULT_STRATEGIES
from canitoolcall.results import ParseResult, RunResults, StreamAccumulator
from canitoolcall.runner import RunConfig, run

from backends.checkpoint import Checkpoint, load_checkpoint
from backends.detokenizer import Detokenizer
from gateway.types import Delta, Piece

REPO = Path(__file__).resolve().parents[2]


class PieceSource(Protocol):
    """Turns chunks of ids into Pieces: the gateway's `Detokenizer`, or a stand-in with its interface."""

    def feed(self, ids: Sequence[int]) -> list[Piece]: ...

    def flush(self) -> list[Piece]: ...


class FamilyParser(Protocol):
    """A gateway family's streaming parser."""

    def feed(self, pieces: Sequence[Piece]) -> list[Delta]: ...

    def finish(self) -> list[Delta]: ...


class GatewayAdapter(Adapter):
    """A gateway family parser, driven the way the gateway drives it.

    Subclasses give `family_parser` (a fresh parser for one output) and
    `pieces` (what turns the output's id chunks into Pieces). The non-streaming
    parse is the streaming path in one chunk unless a subclass says otherwise.
    """

    pinned_version = "0.1.0"

    def version(self) -> str:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("llm-gateway")
        except PackageNotFoundError:
            return self.pinned_version

    def family_parser(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> FamilyParser:
        raise NotImplementedError

    def pieces(self, raw: ReplayInput) -> PieceSource:
        raise NotImplementedError

    def parse(self, raw: ReplayInput, tools: Sequence[ToolSpec]) -> ParseResult:
        return self.parse_stream(raw, [self.units(raw)], tools)

    def parse_stream(self, raw: ReplayInput, chunks: Sequence[Sequence[int]], tools: Sequence[ToolSpec]) -> ParseResult:
        return replay(self.family_parser(raw, tools), self.pieces(raw), chunks)


class CheckpointAdapter(GatewayAdapter):
    """A `GatewayAdapter` whose ids a checkpoint's tokenizer decodes with `backends.detokenizer.Detokenizer`."""

    checkpoint_ref: str | None = None
    """What `load_checkpoint` loads; None is the embedded model."""

    @cached_property
    def checkpoint(self) -> Checkpoint:
        return load_checkpoint(self.checkpoint_ref)

    @cached_property
    def added_tokens(self) -> dict[int, str]:
        """Added-token id -> exact spelling, as the detokenizer renders them."""
        return {i: t.content for i, t in self.checkpoint.tokenizer.get_added_tokens_decoder().items()}

    def encode(self, text: str) -> list[int]:
        return self.checkpoint.tokenizer.encode(text, add_special_tokens=False).ids

    def special_token_ids(self, raw: ReplayInput) -> Collection[int] | None:
        return set(self.added_tokens)

    def pieces(self, raw: ReplayInput) -> PieceSource:
        return Detokenizer(self.checkpoint.tokenizer, self.added_tokens)


def replay(parser: FamilyParser, pieces: PieceSource, chunks: Iterable[Sequence[int]]) -> ParseResult:
    """Feed each chunk's Pieces to `parser` as the gateway does, then flush and finish."""
    deltas: list[Delta] = []
    for chunk in chunks:
        deltas += parser.feed(pieces.feed(chunk))
    deltas += parser.feed(pieces.flush()) + parser.finish()
    return accumulate(deltas)


def accumulate(deltas: Iterable[Delta]) -> ParseResult:
    """Merge deltas as an OpenAI client does (canitoolcall's own accumulator)."""
    acc = StreamAccumulator()
    for d in deltas:
        acc.add_content(d.content)
        acc.add_reasoning(d.reasoning)
        if d.tool_index is not None:
            acc.add_tool_call(d.tool_index, d.tool_name, d.tool_arguments)
    return acc.result()


def sent_before_its_end(where: str, name: str, arguments: str) -> str:
    """Why a fixture whose call the length limit cut after it was sent cannot pass (its expected-failure reason)."""
    return (
        f"cut {where}: the client gets {name} with the unterminated arguments `{arguments}` and finish_reason "
        "length. A call is sent once its first argument is complete, so that the rest streams; canitoolcall fails "
        "any call a client received, and whether a call closes is known only at its end marker, so passing means "
        "holding every call whole until it closes (no argument streaming)"
    )


def run_fixtures(engine: str, families: Sequence[str], ids: Sequence[str] = ()) -> RunResults:
    """`engine` over the fixtures of `families` (all, or those matching `ids`), every default chunking strategy,
    with canitoolcall's own runner and checks (in one worker process)."""
    config = RunConfig(
        engine=engine,
        families=list(families),
        ids=list(ids),
        strategies=DEFAULT_STRATEGIES,
        env={"PYTHONPATH": str(REPO)},
        include_observed="failures",
    )
    return run(config)
