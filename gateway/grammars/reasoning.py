"""A think block in front of a constrained answer, for families whose reasoning is a think block."""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from backends.base import Grammar
from gateway.grammars.markers import TEXT_MARKERS, MarkerTokens

Format = dict[str, Any]


@dataclass(frozen=True)
class ThinkBlock:
    """A family's think block: its markers and the whitespace the model writes after the end marker."""

    start: str
    end: str
    after: str = ""


def with_reasoning(
    answer: Format,
    *,
    prompt_opens_reasoning: bool,
    reasoning_optional: bool,
    think: ThinkBlock,
    markers: MarkerTokens = TEXT_MARKERS,
    excludes: tuple[str, ...] = (),
    stops: Collection[int] = (),
) -> Grammar:
    """A structural tag: `answer`, after the reasoning block where it could otherwise be rejected.

    A prompt that opened the think block always needs its end. A strict answer (forced calls, JSON)
    gets an optional complete block; lazy calls allow any text, a think block included (or, where the
    vocabulary has the think tokens, an optional block first and free text without them).
    Where `markers` has the end marker's token, the block ends only at that token (its text spelled
    with ordinary tokens is reasoning), and starts only at the start marker's token where there is one; nor does
    it hold the tokens of `excludes` (a call's opening marker, which a parser may read as the reasoning's end), the
    vocabulary's special tokens that are no marker (`markers.specials`) or the `stops` (the family's stop tokens:
    the backend ends the output at one, and an answer owed after the block would be lost).
    """
    reasoning: Format | None = None
    if prompt_opens_reasoning:
        reasoning = _block(think, markers, excludes, stops, opened=True)
    elif reasoning_optional:
        reasoning = {"type": "optional", "content": _block(think, markers, excludes, stops, opened=False)}
    fmt = answer if reasoning is None else {"type": "sequence", "elements": [reasoning, answer]}
    return Grammar("structural_tag", json.dumps({"type": "structural_tag", "format": fmt}, ensure_ascii=False))


def _block(
    think: ThinkBlock, markers: MarkerTokens, excludes: tuple[str, ...], stops: Collection[int], opened: bool
) -> Format:
    end = markers.token(think.end)
    if end is None:
        begin = "" if opened else think.start
        return {"type": "tag", "begin": begin, "content": {"type": "any_text"}, "end": think.end + think.after}
    excluded = {end["token"], *(markers.ids[s] for s in excludes if s in markers.ids), *markers.specials, *stops}
    text = {"type": "any_tokens", "exclude_tokens": sorted(excluded)}
    elements = ([] if opened else [markers.format(think.start)]) + [text, end]
    if think.after:
        elements.append({"type": "const_string", "value": think.after})
    return {"type": "sequence", "elements": elements}
