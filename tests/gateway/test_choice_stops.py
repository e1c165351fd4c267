"""A stop string inside a chunk of several tokens: the choice's token count and logprobs end at the token that
completed it, as when every token came alone (a backend's socket read may bring several events at once)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from backends.base import Backend, GenerateChunk, GenerateRequest, SamplingParams, TokenLogprob
from backends.detokenizer import Detokenizer, added_tokens
from gateway.generation.choices import choice_steps

pytestmark = pytest.mark.anyio

TEXT = "Sunny. END and more words after it"


class Chunked(Backend):
    """Sends the scripted ids in chunks of `size`, the last one finishing with `length`."""

    def __init__(self, ids: list[int], size: int):
        self.ids, self.size = ids, size

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        for start in range(0, len(self.ids), self.size):
            ids = self.ids[start : start + self.size]
            last = start + self.size >= len(self.ids)
            logprobs = [TokenLogprob(i, -0.5, []) for i in ids]
            yield GenerateChunk(ids, logprobs, "length" if last else None)

    async def ready(self) -> bool:
        return True


async def steps_of(checkpoint, size: int, stops: list[str]) -> tuple[str, int, int, str | None]:
    tokenizer = checkpoint.tokenizer
    ids = tokenizer.encode(TEXT, add_special_tokens=False).ids
    request = GenerateRequest("r", [1], SamplingParams(max_new_tokens=len(ids)), logprobs=True)
    detokenizer = Detokenizer(tokenizer, added_tokens(tokenizer)[0])
    text, logprobs, last = "", 0, None
    async for _, step in choice_steps(Chunked(ids, size), request, detokenizer, stops):
        text += "".join(p.text for p in step.pieces)
        logprobs += len(step.logprobs)
        last = step
    return text, last.completion_tokens, logprobs, last.finish_reason


@pytest.mark.parametrize("size", [2, 3, 5, 100])
async def test_a_stop_inside_a_chunk_ends_the_count_where_one_token_at_a_time_does(checkpoint, size):
    alone = await steps_of(checkpoint, 1, ["END"])
    assert alone[0] == "Sunny. " and alone[3] == "stop" and alone[1] == alone[2]
    assert await steps_of(checkpoint, size, ["END"]) == alone


async def test_without_a_match_every_token_counts(checkpoint):
    text, count, logprobs, finish = await steps_of(checkpoint, 4, ["zzz"])
    assert (text, finish) == (TEXT, "length") and count == logprobs == len(checkpoint.tokenizer.encode(TEXT).ids)
