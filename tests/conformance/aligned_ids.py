"""Recorded ids decoded without their vocabulary: each id's text by alignment with the fixture's `raw_output`.

For a format whose tokenizer is not available offline (Llama 4, Gemma 4), what
a parser needs from an id is whether it is one of the format's control tokens
(known ids) and, for the others, their text. The text is cut at the control
spellings, in order, such that every run of n ordinary ids spells at least n
UTF-8 bytes; exactly one cut must fit (AlignmentError otherwise). Within a run
the bytes are shared out evenly and decoded incrementally, so ordinary token
boundaries are synthetic; control tokens are atomic, as in every engine.
"""

from __future__ import annotations

import codecs
from collections.abc import Iterable, Mapping, Sequence
from functools import cache

from gateway.types import Piece


class AlignmentError(ValueError):
    """The ids cannot be matched to the text in exactly one way."""


def aligned_texts(text: str, ids: Sequence[int], control: Mapping[int, str]) -> list[str]:
    """The text of each id of `ids` (a control id its spelling), decoded incrementally as a detokenizer would."""
    data = text.encode()
    runs: list[int] = [0]
    spellings: list[bytes] = []
    for token in ids:
        if token in control:
            spellings.append(control[token].encode())
            runs.append(0)
        else:
            runs[-1] += 1

    @cache
    def cuts(segment: int, start: int) -> tuple[tuple[int, ...], ...]:
        """The ways to place spellings[segment:] in data[start:], as the offsets where each starts (at most two)."""
        if segment == len(spellings):
            return ((len(data),),) if _fits(len(data) - start, runs[segment]) else ()
        found: list[tuple[int, ...]] = []
        at = data.find(spellings[segment], start)
        while at != -1 and len(found) < 2:
            if _fits(at - start, runs[segment]):
                found += [(at, *rest) for rest in cuts(segment + 1, at + len(spellings[segment]))]
            at = data.find(spellings[segment], at + 1) if runs[segment] else -1
        return tuple(found[:2])

    ways = cuts(0, 0)
    if len(ways) != 1:
        raise AlignmentError(f"{len(ways)} alignments of the ids with the text")
    decoder = codecs.getincrementaldecoder("utf-8")()
    out: list[str] = []
    start, controls = 0, iter(t for t in ids if t in control)
    for segment, (count, end) in enumerate(zip(runs, ways[0], strict=True)):
        part = data[start:end]
        out += [decoder.decode(part[len(part) * i // count : len(part) * (i + 1) // count]) for i in range(count)]
        if segment < len(spellings):
            out.append(control[next(controls)])
            start = end + len(spellings[segment])
    return out


def _fits(size: int, count: int) -> bool:
    """Whether `count` ordinary ids can spell `size` bytes (at least one byte each; none for no ids)."""
    return size >= count if count else size == 0


class AlignedPieces:
    """Stand-in for the gateway's detokenizer: each id becomes a Piece of its aligned text, control ids marked."""

    def __init__(self, texts: Iterable[str], control: Mapping[int, str]) -> None:
        self._texts = iter(texts)
        self._control = control

    def feed(self, ids: Sequence[int]) -> list[Piece]:
        return [Piece(next(self._texts), token_id if token_id in self._control else None) for token_id in ids]

    def flush(self) -> list[Piece]:
        return []
