"""A request's choices as they stream: backend chunks → detokenized pieces → stop strings; n choices merged."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Sequence
from contextlib import aclosing

from backends.base import Backend, BackendError, GenerateRequest, Grammar, SamplingParams
from backends.detokenizer import Detokenizer, Piece
from backends.stop_strings import StopMatcher
from gateway.errors import APIError
from gateway.families.base import OutputParser
from gateway.models.registry import ServedModel
from gateway.observability.tracing import backend_stream
from gateway.types import ChoiceStep, Events, FinishReason
from gateway.validation.fields import GenerationSettings


async def choice_steps(
    backend: Backend,
    request: GenerateRequest,
    detokenizer: Detokenizer,
    stops: Sequence[str],
    index: int = 0,
    keep_stop: bool = False,
    reasoning: OutputParser | None = None,
    eos: int | None = None,
) -> Events:
    """Stream choice `index` of a generation; a matched stop string ends it (closing the backend stream aborts
    the request), kept at the end of the text with `keep_stop` (vLLM's include_stop_str_in_output); none ends
    within the sampling's first `min_new_tokens` tokens (vLLM's min_tokens), nor inside the reasoning that
    `reasoning` (a parser of the choice's own) reads. Its steps come tagged already, so one choice reaches the
    answer with no layer in between. The last step names the stop token that ended the choice unless it is `eos`,
    the model's EOS token (vLLM's stop_reason is null for EOS and the token's id for any other stop token)."""
    matcher = StopMatcher(stops)
    unarmed = request.sampling.min_new_tokens
    gate = ReasoningGate(reasoning) if stops and reasoning is not None else None
    count = 0
    chunks = backend_stream(backend, request)
    try:  # closed in the finally (as `aclosing` would, without its two awaits)
        async for chunk in chunks:
            ids = chunk.output_ids
            if chunk.finish_reason == "abort":
                raise BackendError("the backend aborted the request", retryable=True)
            text_ids = ids
            if chunk.finish_reason == "stop" and ids and ids[-1] == chunk.matched_stop:
                text_ids = ids[:-1]  # the stop token ends the turn; it is not output text
            if stops and (len(ids) > 1 or count < unarmed or gate):  # a stop may end before the chunk's last token
                pieces, used = _until_stop(matcher, detokenizer, text_ids, unarmed - count, gate)
                used = used if matcher.matched is not None else len(ids)
                gate = gate if gate and gate.reading else None
            elif stops:
                pieces, used = matcher.feed(detokenizer.feed(text_ids)), len(ids)
            else:  # nothing to match: the pieces as they are (no copy through the matcher per step)
                pieces, used = detokenizer.feed(text_ids), len(ids)
            count += used
            finish: FinishReason | None = chunk.finish_reason
            if finish is not None and matcher.matched is None:
                rest = detokenizer.flush()
                pieces += matcher.feed(rest, armed=not (gate and gate.in_reasoning(rest)))
                pieces += matcher.flush()
            logprobs = chunk.logprobs or []
            if matcher.matched is not None:
                finish = "stop"
                logprobs = logprobs[:used]
                if keep_stop:
                    pieces.append(Piece(matcher.matched))
            step = ChoiceStep(pieces, logprobs, finish, count, chunk.cached_tokens, matcher.matched)
            if finish is None:
                if step.pieces or step.logprobs:
                    yield index, step
                continue
            if finish == "stop" and matcher.matched is None and chunk.matched_stop != eos:
                step.stop_token = chunk.matched_stop
            yield index, step
            return
    finally:
        await chunks.aclose()
    raise BackendError("the backend stream ended without a finish reason", retryable=True)


def _until_stop(
    matcher: StopMatcher, detokenizer: Detokenizer, ids: list[int], unarmed: int = 0, gate: ReasoningGate | None = None
) -> tuple[list[Piece], int]:
    """Feed `ids` one at a time until a stop string matches: the certain pieces, and how many ids were used (all of
    them without a match). A backend may send several tokens in one chunk; the usage and logprobs of a stopped
    choice end at the token that completed the stop string, however the chunks fell. No stop string may end in
    the first `unarmed` - 1 tokens (vLLM checks stops from the min_tokens-th token on), nor in reasoning (`gate`)."""
    pieces: list[Piece] = []
    for used, token in enumerate(ids, 1):
        new = detokenizer.feed([token])
        armed = used >= unarmed and (gate is None or not gate.in_reasoning(new))
        pieces += matcher.feed(new, armed=armed)
        if matcher.matched is not None:
            return pieces, used
    return pieces, len(ids)


class ReasoningGate:
    """Whether a choice's output is in its reasoning, as a parser of its own reads it: a client's stop strings end
    the answer, never the thinking before it (vLLM skips them in reasoning content, PR #14550; a stop string the
    chain of thought restates left an answer with no content). Read until the first content or tool call."""

    def __init__(self, parser: OutputParser):
        self._parser = parser
        self._reasoning = False
        self.reading = True
        """False once the answer proper began: the parser is no longer fed."""

    def in_reasoning(self, pieces: Sequence[Piece]) -> bool:
        """Whether the output is in reasoning once `pieces` are added (text the parser holds keeps the state)."""
        if not self.reading:
            return False
        for delta in self._parser.feed(pieces):
            if delta.content or delta.tool_index is not None:
                self.reading = self._reasoning = False
                return False
            if delta.reasoning:
                self._reasoning = True
        return self._reasoning


_END = object()


def merge(streams: Sequence[Events], buffer: int = 16) -> Events:
    """The steps of all `streams` as they come: one stream as it is (no queue, no task, no layer), several
    through a queue. The first failure is raised and the other streams are cancelled; closing the result early
    cancels (and so closes) every stream."""
    return streams[0] if len(streams) == 1 else _merged(streams, buffer)


async def _merged(streams: Sequence[Events], buffer: int) -> Events:
    queue: asyncio.Queue[object] = asyncio.Queue(maxsize=buffer)

    async def pump(index: int, stream: Events) -> None:
        try:
            async with aclosing(stream):
                async for item in stream:
                    await queue.put(item)
            await queue.put(_END)
        except Exception as e:  # noqa: BLE001 - handed to the consumer, who raises it
            await queue.put(e)

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        running = len(tasks)
        while running:
            item = await queue.get()
            if item is _END:
                running -= 1
            elif isinstance(item, Exception):
                raise item
            else:
                yield item  # type: ignore[misc]
    finally:
        for task in tasks:
            task.cancel()


def generate(
    model: ServedModel,
    rid: str,
    prompts: Sequence[tuple[list[int], SamplingParams]],
    settings: GenerationSettings,
    grammar: Grammar | None,
    each: Callable[[Events], Events] | None = None,
    reasoning: Callable[[], OutputParser] | None = None,
) -> Events:
    """Every choice's steps, merged: choice `p * n + j` is sample j of prompt p (seeds differ per sample).
    `each` wraps every choice's stream (a fair queue's slot per choice); `reasoning` makes a parser per choice that
    tells its reasoning apart, where no stop string may end."""
    if model.backend is None:
        raise APIError(
            f"the model {model.id!r} only tokenizes; it has no backend", param="model", code="model_not_generative"
        )
    streams = []
    for p, (ids, sampling) in enumerate(prompts):
        for j in range(settings.n):
            request = GenerateRequest(  # positional, in the dataclass's field order (keywords cost ~3 K more)
                f"{rid}-{p * settings.n + j}",  # rid
                list(ids),  # input_ids
                sampling if j == 0 else dataclasses.replace(sampling, seed=_nth_seed(sampling.seed, j)),
                grammar,
                settings.logprobs,
                settings.top_logprobs,
                model.vocab_size,
            )
            detokenizer = Detokenizer(model.tokenizer, model.added_ids)
            index = p * settings.n + j
            steps = choice_steps(
                model.backend,
                request,
                detokenizer,
                settings.stop,
                index,
                settings.include_stop_str_in_output,
                reasoning() if reasoning and settings.stop else None,
                model.eos_token_id,
            )
            streams.append(each(steps) if each else steps)
    return merge(streams)


def _nth_seed(seed: int | None, j: int) -> int | None:
    """Sample j's seed (j > 0; the first sample keeps the request's): distinct ones, still in int64."""
    return None if seed is None else (seed + j + (1 << 63)) % (1 << 64) - (1 << 63)
