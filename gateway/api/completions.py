"""POST /v1/completions: raw prompts (text or token ids) in, text out; no chat template, no parsing."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from gateway.api.admission import request_policy
from gateway.api.bodies import read_json
from gateway.api.logprobs import TokenTexts, completion_logprobs
from gateway.api.streaming import Events, respond
from gateway.api.usage import usage
from gateway.errors import invalid
from gateway.generation.choices import generate
from gateway.ids import new_id, now
from gateway.models.planning import encode_texts_off_loop, past_context, sampling_params, token_budget
from gateway.models.registry import ModelRegistry, ServedModel, served_model
from gateway.observability.tracing import note_request, stage
from gateway.types import ChoiceStep
from gateway.validation.completions import COMPLETION, DEFAULT_MAX_TOKENS, Prompt, parse_completion
from gateway.validation.fields import note_ignored


async def completions(request: Request, registry: ModelRegistry, max_body: int) -> Response:
    body = await read_json(request, max_body)
    note_ignored(body, COMPLETION)
    parsed = parse_completion(body)
    model = served_model(registry, parsed.model)
    settings = parsed.settings
    policy = request_policy(request)
    policy.check_max_tokens(settings.max_tokens, "max_tokens")
    with stage("gateway.render"):
        prompts = await _prompts_ids(model, parsed.prompts, parsed.add_special_tokens)
    stop_ids = model.stop_token_ids
    prompt_tokens = sum(len(ids) for ids, _ in prompts)
    choices = len(prompts) * settings.n
    batch = [
        (
            ids,
            sampling_params(
                settings,
                policy.cap(
                    token_budget(model, len(ids), settings.max_tokens, param, DEFAULT_MAX_TOKENS),
                    settings.max_tokens,
                    prompt_tokens,
                    choices,
                    model.id,
                ),
                stop_ids,
                settings.skip_special_tokens,
            ),
        )
        for ids, param in prompts
    ]
    rid = new_id("cmpl")
    note_request("text_completion", rid, model.id, max(sampling.max_new_tokens for _, sampling in batch), settings)

    def start() -> Events:
        longest = max(len(ids) + sampling.max_new_tokens for ids, sampling in batch)
        return generate(model, rid, batch, settings, None, policy.queued(model, longest))

    budget = settings.n * sum(sampling.max_new_tokens for _, sampling in batch)
    with stage("gateway.admission"):
        events = await policy.admit(
            model,
            prompt_tokens,
            budget,
            start,
            prompt_param="prompt",
            prompt=parsed.prompts,
            choices=choices,
            n=settings.n,
            defaulted=[sampling for _, sampling in batch] if settings.max_tokens is None else (),
        )
    texts = TokenTexts(model.tokenizer, model.added_ids) if settings.logprobs else None
    skipped = frozenset(model.family.context.control_token_ids) if settings.skip_special_tokens else frozenset()
    echoed = [_prompt_text(model, p) for p in parsed.prompts for _ in range(settings.n)] if parsed.echo else None
    prompt_sizes = [len(ids) for ids, _ in batch]
    renderer = CompletionRenderer(len(batch) * settings.n, texts, skipped, prompt_sizes, echoed)
    envelope = {"id": rid, "object": "text_completion", "created": now(), "model": model.id}
    return await respond(request, events, renderer, envelope, settings, "text_completion")


async def _prompts_ids(
    model: ServedModel, prompts: Sequence[Prompt], add_special_tokens: bool
) -> list[tuple[list[int], str]]:
    """Each prompt's token ids and param: texts are encoded with added-token spellings as tokens (and the
    tokenizer's special tokens with `add_special_tokens`; refused unencoded when a length proves one past the
    context; off the event loop when long), ids are checked and kept as they are."""
    params = ["prompt"] if len(prompts) == 1 else [f"prompt[{i}]" for i in range(len(prompts))]
    texts = []
    for prompt, param in zip(prompts, params):
        if isinstance(prompt, str):
            at_least = model.least_tokens(prompt)
            if at_least is not None:
                raise past_context(model, at_least, param)
            texts.append(prompt)
        else:
            _check_ids(model, prompt, param)
    encoded = iter(await encode_texts_off_loop(model, texts, add_special_tokens))
    return [(next(encoded) if isinstance(p, str) else list(p), param) for p, param in zip(prompts, params)]


def _check_ids(model: ServedModel, ids: Sequence[int], param: str) -> None:
    """A 400 naming the first id outside the vocabulary."""
    vocab = model.tokenizer.get_vocab_size(with_added_tokens=True)
    bad = next((i for i, t in enumerate(ids) if not 0 <= t < vocab), None)
    if bad is not None:
        raise invalid(
            f"'{param}[{bad}]' is token id {ids[bad]}, outside this model's vocabulary of {vocab}", f"{param}[{bad}]"
        )


def _prompt_text(model: ServedModel, prompt: Prompt) -> str:
    """A prompt as `echo` writes it back: its text, or its token ids decoded."""
    return prompt if isinstance(prompt, str) else model.decode(prompt)


class CompletionRenderer:
    """Choice steps → text completion chunk choices; with `echoed`, each choice's prompt text opens it."""

    def __init__(
        self,
        choices: int,
        texts: TokenTexts | None,
        skipped: Collection[int],
        prompt_sizes: Sequence[int],
        echoed: Sequence[str] | None = None,
    ):
        self._echoed = echoed or ()
        self._texts = texts
        self._skipped = skipped
        self._prompt_sizes = prompt_sizes
        """Each prompt's tokens, in the batch's order."""
        self._completion_tokens = [0] * choices
        self._cached_tokens = 0
        self._offsets = [0] * choices

    def opening(self) -> list[dict[str, Any]]:
        return [_choice(i, text, None) for i, text in enumerate(self._echoed)]

    def step(self, index: int, step: ChoiceStep) -> list[dict[str, Any]]:
        self._completion_tokens[index] = step.completion_tokens
        self._cached_tokens = max(self._cached_tokens, step.cached_tokens)
        text = "".join(p.text for p in step.pieces if p.token_id not in self._skipped)
        logprobs = None
        if self._texts and step.logprobs:
            logprobs = completion_logprobs(step.logprobs, self._texts, self._offsets[index])
            self._offsets[index] += sum(len(t) for t in logprobs["tokens"])
        out = []
        if text or logprobs:
            out.append(_choice(index, text, logprobs))
        if step.finish_reason is not None:
            out.append(_choice(index, "", None, step.finish_reason, step.stop_reason))
        return out

    def fold(self, chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        choices = range(len(self._completion_tokens))
        folded = [_choice(i, "", _no_logprobs() if self._texts else None) for i in choices]
        for chunk in chunks:
            choice = folded[chunk["index"]]
            choice["text"] += chunk["text"]
            for key, values in (chunk["logprobs"] or {}).items():
                choice["logprobs"][key] += values
            if chunk["finish_reason"]:
                choice["finish_reason"], choice["stop_reason"] = chunk["finish_reason"], chunk["stop_reason"]
        return folded

    def usage(self) -> dict[str, Any]:
        return usage(sum(self._prompt_sizes), sum(self._completion_tokens), self._cached_tokens)

    def choice_usage(self, index: int) -> dict[str, Any]:
        """The choice's own prompt (choices run prompt by prompt, n of each) and tokens."""
        per_prompt = len(self._completion_tokens) // len(self._prompt_sizes)
        return usage(self._prompt_sizes[index // per_prompt], self._completion_tokens[index], self._cached_tokens)


def _choice(
    index: int,
    text: str,
    logprobs: dict[str, Any] | None,
    finish_reason: str | None = None,
    stop_reason: str | int | None = None,
) -> dict[str, Any]:
    """A completion choice; `stop_reason` on every chunk, null until the finishing one, as vLLM's completions stream
    (serving_completion.py builds each chunk's CompletionResponseStreamChoice with `stop_reason=output.stop_reason`,
    so the key is set, null included, in every chunk its `exclude_unset` dump writes; its chat stream sets it on the
    finishing chunk only, api/chat.py)."""
    return {
        "index": index,
        "text": text,
        "logprobs": logprobs,
        "finish_reason": finish_reason,
        "stop_reason": stop_reason,
    }


def _no_logprobs() -> dict[str, list[Any]]:
    return {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
