"""vLLM's dialect on the worker: `/v1/completions` and `/inference/v1/generate` with token-id prompts, `/v1/models`.

Requests are translated into the SGLang `/generate` body and validated by the same
parser, so both dialects share one set of rules; responses are the SGLang payload of
each engine event reshaped into vLLM's stream chunks. Streaming only: these endpoints
exist for `backends.vllm.VLLMBackend`, which always streams.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from backends.asgi import json_response, sse_frame
from backends.json_types import as_integer
from backends.worker.engine import EngineEvent, Finish
from backends.worker.generations import Generation, Start, WorkerState, start_or_refusal
from backends.worker.protocol import (
    MAX_TOP_LOGPROBS,
    GenerateCall,
    ProtocolError,
    is_neutral,
    parse_generate,
    reject_unknown,
    request_json,
)
from backends.worker.sampling import TokenChoice

Stream = Callable[[Generation, asyncio.Future], Response]
Watch = Callable[[Request], asyncio.Future]

# vLLM sampling names this worker implements -> the SGLang name parse_generate validates.
_SAMPLING = {
    "max_tokens": "max_new_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "min_p": "min_p",
    "seed": "sampling_seed",
    "stop_token_ids": "stop_token_ids",
    "ignore_eos": "ignore_eos",
    "skip_special_tokens": "skip_special_tokens",
    "frequency_penalty": "frequency_penalty",
    "presence_penalty": "presence_penalty",
    "include_stop_str_in_output": "no_stop_trim",
    "stop": "stop",
    "min_tokens": "min_new_tokens",
}
# vLLM fields this worker does not implement: accepted only at their neutral value.
_NEUTRAL = {
    "n": (None, 1),
    "repetition_penalty": (None, 1, 1.0),
    "prompt_logprobs": (None,),
    "logit_bias": (None, {}),
    "allowed_token_ids": (None,),
    "bad_words": (None, []),
    "spaces_between_special_tokens": (None, True),
    "echo": (None, False),
    "use_beam_search": (None, False),
    "suffix": (None, ""),
    "detokenize": (None, True),
}
_SAMPLING_KEYS = frozenset(_SAMPLING) | frozenset(_NEUTRAL) | {"top_k", "logprobs", "structured_outputs"}
_COMPLETION_KEYS = _SAMPLING_KEYS | {
    "model",
    "prompt",
    "stream",
    "stream_options",
    "request_id",
    "user",
    "return_token_ids",
    "return_tokens_as_token_ids",
    "add_special_tokens",
}
_GENERATE_KEYS = frozenset(
    {
        "request_id",
        "token_ids",
        "sampling_params",
        "model",
        "stream",
        "stream_options",
        "return_token_ids",
        "output_mode",
    }
)
# structured_outputs constraint -> the worker's grammar kind (None: not implemented here).
_CONSTRAINTS = {
    "json": "json_schema",
    "regex": "regex",
    "grammar": "ebnf",
    "structural_tag": "structural_tag",
    "choice": None,
    "json_object": None,
}
_STRUCTURED_KEYS = frozenset(_CONSTRAINTS) | {
    "disable_any_whitespace",
    "disable_additional_properties",
    "whitespace_pattern",
}
_STREAM_OPTION_KEYS = frozenset({"include_usage", "continuous_usage_stats"})
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # the OpenAI completions default, as vLLM applies it
# parse_generate's refusals name SGLang's fields: these spellings become the vLLM body's.
_RENAMED = {sglang: name for name, sglang in _SAMPLING.items() if sglang != name}
_COMPLETION_NAMES = {"sampling_params.": "", "input_ids": "prompt", **_RENAMED}
_GENERATE_NAMES = {"sampling_params.": "sampling_params.", "input_ids": "token_ids", **_RENAMED}
_SGLANG_FIELD = re.compile("|".join([r"sampling_params\.", *(rf"\b{name}\b" for name in ["input_ids", *_RENAMED])]))
"""A field of SGLang's spelling in a refusal of parse_generate's."""


@dataclass(frozen=True)
class ResponseOptions:
    """How a vLLM-dialect response is shaped, beyond what the engine call needs."""

    request_id: str
    model: str
    include_usage: bool
    continuous_usage: bool
    """Every chunk carries the usage so far (vLLM's `continuous_usage_stats`, honoured with `include_usage`)."""
    return_token_ids: bool
    ids_as_tokens: bool


class VLLMGeneration(Generation, ABC):
    """One vLLM-dialect request: each engine event's SGLang payload reshaped into vLLM chunks."""

    def __init__(self, call: GenerateCall, state: WorkerState, options: ResponseOptions):
        super().__init__(call, state)
        self.options = options
        self.created = int(time.time())
        self._eos = state.checkpoint.eos_token_id
        self._prompt_sent = False
        self._text_offset = 0
        """The length of the text sent so far (vLLM's logprobs offsets start there)."""

    def frames(self, event: EngineEvent) -> bytes:
        payload = self.payload(event)
        choice: dict[str, Any] = {
            "index": 0,
            "finish_reason": event.finish.type if event.finish else None,
            "stop_reason": self._stop_reason(event.finish),
        }
        chunk = self.chunk(choice, payload["text"], payload["output_ids"], event.tokens)
        if self.options.return_token_ids and not self._prompt_sent:
            self.prompt_ids(chunk, choice)
            self._prompt_sent = True
        if self.options.continuous_usage:
            chunk["usage"] = self._usage()
        frames = sse_frame(chunk)
        if self.done and self.options.include_usage:
            usage = {**self._usage(), "prompt_tokens_details": {"cached_tokens": self.cached_tokens}}
            frames += sse_frame(self.envelope([], usage=usage))
        return frames

    def _usage(self) -> dict[str, int]:
        """The token counts so far, as vLLM's UsageInfo."""
        prompt = len(self.call.input_ids)
        return {
            "prompt_tokens": prompt,
            "completion_tokens": self.completion_tokens,
            "total_tokens": prompt + self.completion_tokens,
        }

    def error_frame(self, message: str) -> bytes:
        return sse_frame(error_body(message, 500, "InternalServerError"))

    @abstractmethod
    def chunk(self, choice: dict[str, Any], text: str, ids: list[int], tokens: list[TokenChoice]) -> dict[str, Any]:
        """The stream chunk carrying `choice`, completed with this event's text, ids and logprobs."""

    @abstractmethod
    def envelope(self, choices: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
        """A stream chunk of this API around `choices`."""

    @abstractmethod
    def prompt_ids(self, chunk: dict[str, Any], choice: dict[str, Any]) -> None:
        """Put the prompt's token ids where this API sends them in its first chunk."""

    def token_text(self, token_id: int) -> str:
        """A logprob entry's token: `token_id:N` (return_tokens_as_token_ids) or the token's text."""
        if self.options.ids_as_tokens:
            return f"token_id:{token_id}"
        return self.decoded_token(token_id)

    def _stop_reason(self, finish: Finish | None) -> int | str | None:
        """vLLM's stop_reason: the stop token id or stop string that ended the output; None for length, abort and
        the tokenizer's EOS (vLLM's check_stop), not for the config's other end tokens (a generation-config EOS
        joins the request's stop_token_ids there: its id is named)."""
        if finish is None or finish.type != "stop":
            return None
        if finish.matched == self._eos and not self.call.sampling.ignore_eos:
            return None
        return finish.matched


class CompletionGeneration(VLLMGeneration):
    """`/v1/completions` stream chunks (`text_completion` objects)."""

    def envelope(self, choices: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
        return {
            "id": self.options.request_id,
            "object": "text_completion",
            "created": self.created,
            "model": self.options.model,
            "choices": choices,
            **fields,
        }

    def chunk(self, choice: dict[str, Any], text: str, ids: list[int], tokens: list[TokenChoice]) -> dict[str, Any]:
        choice["text"] = text
        choice["logprobs"] = self._logprobs(tokens) if self.call.return_logprob else None
        self._text_offset += len(text)
        if self.options.return_token_ids:
            choice["token_ids"] = ids
        return self.envelope([choice])

    def prompt_ids(self, chunk: dict[str, Any], choice: dict[str, Any]) -> None:
        choice["prompt_token_ids"] = self.call.input_ids

    def _logprobs(self, tokens: list[TokenChoice]) -> dict[str, list]:
        """OpenAI's legacy logprobs object: per token its text, offset, logprob and top alternatives. As vLLM's, the
        offsets start at the length of the text sent in earlier chunks (text a stop string holds back is not) and
        go on by each token's text."""
        out: dict[str, list] = {"text_offset": [], "token_logprobs": [], "tokens": [], "top_logprobs": []}
        offset = self._text_offset
        for t in tokens:
            text = self.token_text(t.token_id)
            out["text_offset"].append(offset)
            out["token_logprobs"].append(t.logprob)
            out["tokens"].append(text)
            top = {text: t.logprob}
            top.update((self.token_text(i), lp) for i, lp in t.top)
            out["top_logprobs"].append(top)
            offset += len(text)
        return out


class TokensGeneration(VLLMGeneration):
    """`/inference/v1/generate` stream chunks (`output_mode: tokens`)."""

    def envelope(self, choices: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
        return {"request_id": self.options.request_id, "choices": choices, "output_mode": "tokens", **fields}

    def chunk(self, choice: dict[str, Any], text: str, ids: list[int], tokens: list[TokenChoice]) -> dict[str, Any]:
        choice["token_ids"] = ids
        choice["logprobs"] = {"content": [_token_logprob(t) for t in tokens]} if self.call.return_logprob else None
        return self.envelope([choice])

    def prompt_ids(self, chunk: dict[str, Any], choice: dict[str, Any]) -> None:
        chunk["prompt_token_ids"] = self.call.input_ids


def _token_logprob(t: TokenChoice) -> dict[str, Any]:
    """A generate-API logprob entry: the sampled token, then the top candidates (the sampled one first)."""
    top = {t.token_id: t.logprob}
    top.update(t.top)
    return {
        "token_id": t.token_id,
        "logprob": t.logprob,
        "top_logprobs": [{"token_id": i, "logprob": lp} for i, lp in top.items()],
    }


def error_body(message: str, status: int, kind: str = "BadRequestError") -> dict[str, Any]:
    """vLLM's ErrorResponse object."""
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def _error(message: str, status: int = 400, kind: str = "BadRequestError") -> Response:
    return json_response(error_body(message, status, kind), status)


def vllm_routes(state: WorkerState, start: Start, stream: Stream, watch: Watch) -> list[Route]:
    """The vLLM endpoints, submitting through `start` and answering with `stream`, both given the client's watch."""
    model = state.model_path

    async def serve(request: Request, parse: Callable[[Any, WorkerState], VLLMGeneration]) -> Response:
        try:
            generation = parse(await request_json(request), state)
        except ProtocolError as exc:
            return _error(str(exc), exc.status)
        if generation.options.model != model:
            return _error(
                f"The model `{generation.options.model}` does not exist. Valid aliases: {model}.", 404, "NotFoundError"
            )
        disconnected = watch(request)
        refused = await start_or_refusal(start, generation, disconnected, _error)
        if refused is not None:
            return refused
        return stream(generation, disconnected)

    async def completions(request: Request) -> Response:
        return await serve(request, parse_completion)

    async def generate(request: Request) -> Response:
        return await serve(request, parse_tokens)

    async def models(_: Request) -> Response:
        card = {
            "id": model,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "worker",
            "root": model,
            "max_model_len": state.engine.context_length,
        }
        return json_response({"object": "list", "data": [card]})

    return [
        Route("/v1/completions", completions, methods=["POST"]),
        Route("/inference/v1/generate", generate, methods=["POST"]),
        Route("/v1/models", models, methods=["GET"]),
    ]


def parse_completion(body: Any, state: WorkerState) -> CompletionGeneration:
    """Validate a `/v1/completions` body (token-id prompt, streamed)."""
    body = _object(body, "request body")
    reject_unknown(body, _COMPLETION_KEYS, "request")
    prompt = body.get("prompt")
    if isinstance(prompt, str) or (isinstance(prompt, list) and any(isinstance(p, str) for p in prompt)):
        raise ProtocolError("this worker does not tokenize text prompts: send token ids")
    rid = f"cmpl-{_request_id(body)}"
    call = _engine_call(
        state, prompt, body, rid=rid, default_max_tokens=COMPLETIONS_DEFAULT_MAX_TOKENS, names=_COMPLETION_NAMES
    )
    options = _options(body, rid, state, ids_as_tokens=body.get("return_tokens_as_token_ids") is True)
    return CompletionGeneration(call, state, options)


def parse_tokens(body: Any, state: WorkerState) -> TokensGeneration:
    """Validate an `/inference/v1/generate` body (tokens in, tokens out, streamed)."""
    body = _object(body, "request body")
    reject_unknown(body, _GENERATE_KEYS, "request")
    if body.get("output_mode", "tokens") != "tokens":
        raise ProtocolError("only output_mode 'tokens' is supported by this worker")
    sampling = _object(body.get("sampling_params"), "sampling_params")
    reject_unknown(sampling, _SAMPLING_KEYS, "sampling_params")
    prompt = body.get("token_ids")
    rid = f"generate-tokens-{_request_id(body)}"
    remaining = state.engine.context_length - len(prompt) if isinstance(prompt, list) else 0
    call = _engine_call(state, prompt, sampling, rid=rid, default_max_tokens=remaining, names=_GENERATE_NAMES)
    return TokensGeneration(call, state, _options(body, rid, state, ids_as_tokens=True))


def _options(body: dict, rid: str, state: WorkerState, *, ids_as_tokens: bool) -> ResponseOptions:
    if body.get("stream") is not True:
        raise ProtocolError("this worker serves the vLLM API with stream=true only")
    stream_options = _object({} if body.get("stream_options") is None else body["stream_options"], "stream_options")
    reject_unknown(stream_options, _STREAM_OPTION_KEYS, "stream_options")
    for key in _STREAM_OPTION_KEYS:
        if not isinstance(stream_options.get(key, False), bool | None):
            raise ProtocolError(f"stream_options.{key} must be a boolean, got {stream_options[key]!r}")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise ProtocolError(f"model must be a string, got {model!r}")
    include_usage = stream_options.get("include_usage") is True
    return ResponseOptions(
        request_id=rid,
        model=model or state.model_path,
        include_usage=include_usage,
        continuous_usage=include_usage and stream_options.get("continuous_usage_stats") is True,
        return_token_ids=body.get("return_token_ids") is True,
        ids_as_tokens=ids_as_tokens,
    )


def _engine_call(
    state: WorkerState, prompt: Any, sampling: dict, *, rid: str, default_max_tokens: int, names: dict[str, str]
) -> GenerateCall:
    """The engine call for a token-id prompt and vLLM sampling fields, validated as SGLang's /generate (its
    refusals spelled with `names`: the fields of the body the client sent)."""
    if not isinstance(prompt, list) or not prompt or any(isinstance(p, list) for p in prompt):
        raise ProtocolError("the prompt must be one non-empty list of token ids (batches are not supported)")
    for key, neutral in _NEUTRAL.items():
        if not is_neutral(sampling.get(key), neutral):
            raise ProtocolError(f"{key} is not supported by this worker")
    params = {sglang: sampling[name] for name, sglang in _SAMPLING.items() if sampling.get(name) is not None}
    params.setdefault("max_new_tokens", default_max_tokens)
    top_k = sampling.get("top_k")
    if top_k is not None:
        params["top_k"] = -1 if as_integer(top_k) == 0 else top_k  # vLLM disables top-k with 0, SGLang with -1
    grammar = _grammar(sampling.get("structured_outputs"))
    if grammar is not None:
        params[grammar[0]] = grammar[1]
    logprobs = sampling.get("logprobs")
    if logprobs is not None:
        logprobs = as_integer(logprobs)
        if logprobs is None or not 0 <= logprobs <= MAX_TOP_LOGPROBS:
            raise ProtocolError(f"logprobs must be an integer in [0, {MAX_TOP_LOGPROBS}], got {sampling['logprobs']!r}")
    try:
        call = _parse_as_sglang(state, prompt, params, rid, logprobs)
    except ProtocolError as exc:
        spelled = _SGLANG_FIELD.sub(lambda m: names[m.group()], str(exc))
        raise ProtocolError(spelled, exc.status) from None
    if call.sampling.max_new_tokens < 1:  # SGLang takes 0 (prompt logprobs only); vLLM's SamplingParams refuses it
        raise ProtocolError(f"max_tokens must be at least 1, got {call.sampling.max_new_tokens}.")
    return call


def _parse_as_sglang(state: WorkerState, prompt: Any, params: dict, rid: str, logprobs: int | None) -> GenerateCall:
    return parse_generate(
        {
            "input_ids": prompt,
            "sampling_params": params,
            "rid": rid,
            "stream": True,
            "return_logprob": logprobs is not None,
            "top_logprobs_num": logprobs or 0,
        },
        vocab_size=state.engine.model.vocab_size,
        context_length=state.engine.context_length,
        encode=_no_text,
        stop_strings_wait_for_min=True,
        past_context=_past_context,
    )


def _past_context(prompt: int, max_tokens: int, context: int) -> str:
    """vLLM's refusal of a prompt longer than the context leaves after max_tokens (its renderer's token length
    check, defaulted max_tokens included)."""
    return (
        f"You passed {prompt} input tokens and requested {max_tokens} output tokens. However, the model's context "
        f"length is only {context} tokens, resulting in a maximum input length of {context - max_tokens} tokens. "
        "Please reduce the length of the input prompt."
    )


def _grammar(structured: Any) -> tuple[str, str] | None:
    """(worker grammar kind, text) for vLLM's `structured_outputs`, or None without one."""
    if structured is None:
        return None
    structured = _object(structured, "structured_outputs")
    reject_unknown(structured, _STRUCTURED_KEYS, "structured_outputs")
    if structured.get("whitespace_pattern") is not None or any(
        structured.get(k) for k in ("disable_any_whitespace", "disable_additional_properties")
    ):
        raise ProtocolError("structured_outputs whitespace and additional-properties options are not supported")
    given = [key for key in _CONSTRAINTS if structured.get(key) is not None]
    if len(given) != 1:
        raise ProtocolError(f"structured_outputs needs exactly one of {', '.join(_CONSTRAINTS)}")
    key, value = given[0], structured[given[0]]
    kind = _CONSTRAINTS[key]
    if kind is None:
        raise ProtocolError(f"structured_outputs.{key} is not supported by this worker")
    if key == "json" and isinstance(value, dict):
        value = orjson.dumps(value).decode()
    if not isinstance(value, str):
        raise ProtocolError(f"structured_outputs.{key} must be a string" + (" or an object" if key == "json" else ""))
    return kind, value


def _request_id(body: dict) -> str:
    rid = body.get("request_id")
    if rid is not None and not isinstance(rid, str):
        raise ProtocolError("request_id must be a string")
    return rid or uuid.uuid4().hex


def _object(value: Any, where: str) -> dict:
    if not isinstance(value, dict):
        raise ProtocolError(f"{where} must be a JSON object")
    return value


def _no_text(text: str) -> list[int]:
    raise ProtocolError("this worker does not tokenize text prompts: send token ids")
