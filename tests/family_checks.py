"""What the family tests share: a tokenize-only model around an in-memory tokenizer, the check of a converted
vocabulary against the fixtures' recorded ids, and replaying ids through a parser however they are split."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

from canitoolcall.results import ParseResult
from tokenizers import Tokenizer

from backends.checkpoint import Checkpoint, ModelConfig
from backends.detokenizer import Detokenizer
from gateway.families.base import OutputParser
from gateway.models.registry import ServedModel, served_model_from_checkpoint
from gateway.types import Delta
from tests.conformance.common import accumulate


def tokenize_only_model(name: str, tokenizer: Tokenizer, family: str, context_length: int = 131072) -> ServedModel:
    """The ServedModel `name` of `family` on `tokenizer`, with no backend; every added token is a control token."""
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    config = ModelConfig(0, 0, 0, 0, 0, 0, 0.0, 0.0, vocab_size, context_length, False)
    checkpoint = Checkpoint(
        path=Path(name),
        config=config,
        tokenizer=tokenizer,
        chat_template=None,
        special_tokens={},
        eos_token_ids=[],
        control_token_ids=sorted(tokenizer.get_added_tokens_decoder()),
    )
    return served_model_from_checkpoint(name, checkpoint, family, None)


def added_tokens(tokenizer: Tokenizer) -> dict[int, str]:
    return {i: t.content for i, t in tokenizer.get_added_tokens_decoder().items()}


def check_recorded_ids(tokenizer: Tokenizer, plain: Callable[[str], list[int]], fixtures: Iterable[Any]) -> int:
    """Each fixture's ids decode to its text, and each run of ordinary ids is what the tokenizer makes of that run's
    text (encoded with no added token matched); the number of fixtures checked."""
    specials: Collection[int] = added_tokens(tokenizer)
    checked = 0
    for fixture in fixtures:
        ids = list(fixture.output_token_ids)
        assert tokenizer.decode(ids, skip_special_tokens=False) == fixture.raw_output, fixture.id
        runs: list[list[int]] = [[]]
        for token in ids:
            runs.append([]) if token in specials else runs[-1].append(token)
        for run in filter(None, runs):
            assert plain(tokenizer.decode(run, skip_special_tokens=False)) == run, fixture.id
        checked += 1
    return checked


def feed(parser: OutputParser, detokenizer: Detokenizer, ids: Sequence[int], cuts: Iterable[int] = ()) -> list[Delta]:
    """`ids` cut at `cuts` (ascending token indices), through `detokenizer` into `parser`, both flushed at the end:
    every delta."""
    deltas: list[Delta] = []
    for lo, hi in pairwise([0, *cuts, len(ids)]):
        deltas += parser.feed(detokenizer.feed(ids[lo:hi]))
    return deltas + parser.feed(detokenizer.flush()) + parser.finish()


def joined_calls(deltas: Iterable[Delta]) -> list[tuple[str, str]]:
    """Each call in `deltas` as (name, arguments text), its fragments joined, in index order."""
    calls: dict[int, list[str]] = {}
    for d in deltas:
        if d.tool_index is not None:
            slot = calls.setdefault(d.tool_index, ["", ""])
            slot[0] += d.tool_name or ""
            slot[1] += d.tool_arguments
    return [(name, arguments) for _, (name, arguments) in sorted(calls.items())]


def merged(deltas: Sequence[Delta]) -> dict[str, Any]:
    """The message an OpenAI client accumulates from `deltas`: content, reasoning, and each call as (name, parsed
    arguments); call ids are left out (they are random)."""
    return {
        "content": "".join(d.content for d in deltas),
        "reasoning": "".join(d.reasoning for d in deltas),
        "calls": [(name, json.loads(arguments)) for name, arguments in joined_calls(deltas)],
    }


def replay(parser: OutputParser, tokenizer: Tokenizer, ids: Sequence[int], cuts: Sequence[int] = ()) -> ParseResult:
    """`ids` cut at `cuts`, detokenized by the gateway's Detokenizer and fed to `parser`; the merged result."""
    return accumulate(feed(parser, Detokenizer(tokenizer, added_tokens(tokenizer)), ids, cuts))


def check_every_split(new_parser: Callable[[], OutputParser], tokenizer: Tokenizer, ids: Sequence[int]) -> None:
    """The same result in one chunk, cut anywhere once, and one token per chunk."""
    whole = replay(new_parser(), tokenizer, ids)
    for cut in range(1, len(ids)):
        assert replay(new_parser(), tokenizer, ids, [cut]) == whole, cut
    assert replay(new_parser(), tokenizer, ids, range(1, len(ids))) == whole
