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

    def __init__(self, ids: list[int], size: int, end: int | None = None):
        self.ids, self.size, self.end = ids + ([end] if end is not None else []), size, end

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        for start in range(0, len(self.ids), self.size):
            ids = self.ids[start : start + self.size]
            last = start + self.size >= len(self.ids)
            logprobs = [TokenLogprob(i, -0.5, []) for i in ids]
            finish = None if not last else "length" if self.end is None else "stop"
            yield GenerateChunk(ids, logprobs, finish, matched_stop=self.end)

    async def ready(self) -> bool:
        return True


async def steps_of(
    checkpoint,
    size: int,
    stops: list[str],
    text: str = TEXT,
    end: int | None = None,
    min_tokens: int = 0,
    keep_stop: bool = False,
    eos: int | None = None,
    steps: list | None = None,
) -> tuple[str, int, int, str | None]:
    tokenizer = checkpoint.tokenizer
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    sampling = SamplingParams(max_new_tokens=len(ids), min_new_tokens=min_tokens)
    request = GenerateRequest("r", [1], sampling, logprobs=True)
    detokenizer = Detokenizer(tokenizer, added_tokens(tokenizer)[0])
    text, logprobs, last = "", 0, None
    async for _, step in choice_steps(
        Chunked(ids, size, end), request, detokenizer, stops, keep_stop=keep_stop, eos=eos
    ):
        if steps is not None:
            steps.append(step)
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


async def test_a_stop_on_the_token_before_the_end_token_leaves_the_end_token_uncounted(checkpoint):
    """A last chunk [" END", <|im_end|>] counts as the tokens came alone: the choice ends before the end token."""
    end = checkpoint.tokenizer.token_to_id("<|im_end|>")
    alone = await steps_of(checkpoint, 1, ["END"], "Sunny. END", end)
    assert alone[0] == "Sunny. " and alone[3] == "stop"
    assert await steps_of(checkpoint, 3, ["END"], "Sunny. END", end) == alone  # ["Sun", "ny", "."], [" END", end]


@pytest.mark.parametrize("size", [1, 3, 100])
async def test_min_tokens_lets_no_stop_string_end_the_output_before_it(checkpoint, size):
    """vLLM's min_tokens: stops are checked from the min_tokens-th token on, however the chunks fall."""
    text = "a, b, c, d, e"
    assert (
        len(checkpoint.tokenizer.encode(text, add_special_tokens=False).ids) == 9
    )  # "a" "," " b" "," " c" ...: the first "," is token 2, the second token 4
    assert (await steps_of(checkpoint, size, [","], text, min_tokens=2))[:2] == ("a", 2)
    assert (await steps_of(checkpoint, size, [","], text, min_tokens=3))[:2] == ("a, b", 4)


@pytest.mark.parametrize("size", [1, 100])
async def test_include_stop_str_in_output_keeps_the_matched_stop(checkpoint, size):
    assert await steps_of(checkpoint, size, ["END"], keep_stop=True) == ("Sunny. END", 4, 4, "stop")


@pytest.mark.parametrize("size", [1, 3])
async def test_the_last_step_names_what_stopped_the_choice_as_vllms_stop_reason(checkpoint, size):
    """A stop string, or a stop token other than the model's EOS (vLLM names no stop_reason for EOS, nor for
    length)."""
    im_end, endoftext = (checkpoint.tokenizer.token_to_id(t) for t in ("<|im_end|>", "<|endoftext|>"))
    cases = [
        (["END"], im_end, "END"),
        (["zzz"], endoftext, endoftext),
        (["zzz"], im_end, None),
        ([], endoftext, endoftext),
        (["zzz"], None, None),  # length
    ]
    for stops, end, reason in cases:
        steps: list = []
        await steps_of(checkpoint, size, stops, "Sunny. END", end, eos=im_end, steps=steps)
        assert steps[-1].stop_reason == reason, (stops, end)
        assert all(step.stop_reason is None for step in steps[:-1])
