"""Client for vLLM (0.33): OpenAI `/v1/completions` with token-id prompts, or the tokens-only `/inference/v1/generate`.

Both APIs stream deltas: `choices[0].token_ids` holds the new ids, usage comes in a
last chunk with no choices (asked for with `stream_options.include_usage`), so the
finishing chunk is held until that usage chunk or `[DONE]` arrives. Grammars go in
`structured_outputs` (the old `guided_*` fields are silently ignored by vLLM). vLLM
aborts a request when its HTTP stream is closed: closing the iterator is the abort.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any, Literal

import msgspec
import orjson

from backends.base import (
    LOGPROB_FLOOR,
    BackendError,
    GenerateChunk,
    GenerateRequest,
    Grammar,
    MalformedStream,
    TokenLogprob,
)
from backends.http_backend import (
    SHAPE_ERRORS,
    SSE_DONE,
    HTTPBackend,
    batch_chunk,
    http_error,
    shape_error,
    stream_event,
    token_ids,
)
from backends.typed_event import NO_RAW, Int, TypedEvent, raw_value, typed_event

VLLMApi = Literal["completions", "generate"]

_PATHS: dict[VLLMApi, str] = {"completions": "/v1/completions", "generate": "/inference/v1/generate"}
_TOKEN_ID = "token_id:"
# Grammar kind -> vLLM's structured_outputs key.
_CONSTRAINT = {"json_schema": "json", "regex": "regex", "ebnf": "grammar", "structural_tag": "structural_tag"}


def structured_outputs(grammar: Grammar) -> dict[str, Any]:
    """vLLM's `structured_outputs` object for `grammar` (a JSON schema goes as an object, a structural tag as text)."""
    if grammar.kind != "json_schema":
        return {_CONSTRAINT[grammar.kind]: grammar.text}
    try:
        return {"json": orjson.loads(grammar.text)}
    except orjson.JSONDecodeError as e:
        raise BackendError(f"the JSON schema is not valid JSON: {e}", status=400) from None


def sampling_fields(request: GenerateRequest) -> dict[str, Any]:
    """Sampling settings under vLLM's names: top-level in /v1/completions, `sampling_params` in the generate API."""
    fields = request.sampling.wire_fields(max_tokens="max_tokens", seed="seed", min_tokens="min_tokens")
    fields["top_k"] = max(fields["top_k"], 0)  # vLLM disables top-k with 0
    if request.grammar is not None:
        fields["structured_outputs"] = structured_outputs(request.grammar)
    if request.logprobs:
        fields["logprobs"] = request.top_logprobs
    return fields


def completions_payload(request: GenerateRequest, model: str) -> dict[str, Any]:
    """The `/v1/completions` body: token ids in, token-id deltas out, usage at the end."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": request.input_ids,
        **sampling_fields(request),
        "return_token_ids": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "request_id": request.rid,
    }
    if request.logprobs:
        body["return_tokens_as_token_ids"] = True  # logprob keys become `token_id:N`
    return body


def generate_payload(request: GenerateRequest, model: str) -> dict[str, Any]:
    """The `/inference/v1/generate` body (vLLM's tokens-in/tokens-out API)."""
    return {
        "model": model,
        "request_id": request.rid,
        "token_ids": request.input_ids,
        "sampling_params": sampling_fields(request),
        "stream": True,
        "stream_options": {"include_usage": True},
    }


class VLLMBackend(HTTPBackend):
    """A vLLM server at `base_url`; `model` is its served model name (asked of `/v1/models` once when not given)."""

    def __init__(
        self,
        base_url: str,
        *,
        api: VLLMApi = "completions",
        model: str | None = None,
        **http: Any,
    ):
        if api not in _PATHS:
            raise ValueError(f"api must be one of {', '.join(_PATHS)}, not {api!r}")
        super().__init__(base_url, **http)
        self.api = api
        self._model = model
        self._model_lock = asyncio.Lock()

    async def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        model = await self.model()
        payload = completions_payload if self.api == "completions" else generate_payload
        body = orjson.dumps(payload(request, model))
        reader = _StreamReader(self.api, request)
        posted = self._stream_lines(_PATHS[self.api], body)
        async with posted as batches:
            async for lines in batches:
                chunk, failure = batch_chunk(lines, reader.line, reader.ended)
                if failure is None and reader.done:
                    posted.read_rest_later()  # the caller may stop at the finish: the connection reads the rest
                if chunk is not None:
                    yield chunk
                if failure is not None:
                    raise failure
                if reader.done:
                    return
            for chunk in reader.end():
                yield chunk

    async def model(self) -> str:
        """The served model name: the configured one, else the first of `/v1/models` (asked once)."""
        if self._model is None:
            async with self._model_lock:
                if self._model is None:
                    self._model = await self._discover_model()
        return self._model

    async def _discover_model(self) -> str:
        try:
            status, body = await self.call("GET", "/v1/models")
        except BackendError as e:
            raise BackendError(
                f"backend {self.base_url} did not list its models: {e}", status=503, retryable=True
            ) from e
        if status != 200:
            raise http_error(status, body)
        try:
            return str(orjson.loads(body)["data"][0]["id"])
        except (orjson.JSONDecodeError, KeyError, IndexError, TypeError):
            raise BackendError(f"backend {self.base_url} sent no model in /v1/models", retryable=True) from None


class _Choice(msgspec.Struct, gc=False):
    token_ids: list[Int]
    index: Int = 0
    finish_reason: str | None = None
    stop_reason: Int | str | None = None
    logprobs: msgspec.Raw = NO_RAW


class _Event(TypedEvent, gc=False):
    """The fields of a streamed event the reader uses (backends/typed_event.py)."""

    choices: list[_Choice] | None = None


_decode = msgspec.json.Decoder(_Event).decode


class _StreamReader:
    """Turns the SSE lines of one vLLM stream into GenerateChunks; the finishing one waits for the usage chunk."""

    def __init__(self, api: VLLMApi, request: GenerateRequest):
        self.done = False
        self._logprobs = _completion_logprobs if api == "completions" else _generate_logprobs
        self._top = request.top_logprobs
        self._prompt_tokens = len(request.input_ids)
        self._completion_tokens = 0
        self._last_id: int | None = None
        self._finished: GenerateChunk | None = None

    def ended(self) -> bool:
        return self.done

    def line(self, line: bytes) -> list[GenerateChunk]:
        """The chunks ready after this line (none, one, or the held finishing chunk)."""
        typed = typed_event(line, _decode)
        try:
            if typed is not None and (chunks := self._typed_chunks(typed)) is not None:
                return chunks
            event = stream_event(line)
            if event == SSE_DONE:
                self.done = True
                return self.end()
            if not isinstance(event, dict):
                return []
            if isinstance(event.get("usage"), dict) and not event.get("choices"):
                self._usage(event["usage"])
                return []
            return [chunk for choice in event.get("choices") or () if (chunk := self._choice(choice)) is not None]
        except SHAPE_ERRORS as e:
            raise shape_error(e) from None

    def _typed_chunks(self, event: _Event) -> list[GenerateChunk] | None:
        """The chunks of a typed event of one choice; None: the general read reads it (a usage chunk, other choices,
        logprobs orjson refuses)."""
        choices = event.choices
        if choices is None or len(choices) != 1 or choices[0].index != 0:
            return None
        choice = choices[0]
        logprobs, read = raw_value(choice.logprobs) if choice.logprobs else (None, True)
        if not read:
            return None
        self._not_finished()
        chunk = self._output(choice.token_ids, choice.finish_reason, choice.stop_reason, logprobs)
        return [] if chunk is None else [chunk]

    def end(self) -> list[GenerateChunk]:
        """At the end of the stream: the held finishing chunk; without one the stream broke off."""
        if self._finished is None:
            raise BackendError("backend stream ended without a finish reason", retryable=True)
        finished, self._finished = self._finished, None
        return [finished]

    def _choice(self, choice: Any) -> GenerateChunk | None:
        if not isinstance(choice, dict) or choice.get("index", 0) != 0:
            raise MalformedStream("backend sent a choice this single-choice request did not ask for")
        self._not_finished()
        if "token_ids" not in choice:
            raise MalformedStream("backend sent no token_ids (needs vLLM with return_token_ids)")
        ids = token_ids(choice["token_ids"], "token_ids")
        return self._output(ids, choice.get("finish_reason"), choice.get("stop_reason"), choice.get("logprobs"))

    def _not_finished(self) -> None:
        if self._finished is not None:
            raise MalformedStream("backend sent output after the finish reason")

    def _output(self, ids: list[int], finish: Any, stop_reason: Any, logprobs: Any) -> GenerateChunk | None:
        """A choice's chunk: the output (None when empty), or held as the finishing one (then None)."""
        self._completion_tokens += len(ids)
        if ids:
            self._last_id = ids[-1]
        reason, matched = self._finish(finish, stop_reason)
        chunk = GenerateChunk(  # positional: the dataclass's field order (keywords cost more per event)
            ids,
            self._logprobs(logprobs, ids, self._top) if logprobs else None,
            reason,
            matched,
            self._prompt_tokens,
            self._completion_tokens,
        )
        if reason is None:
            return chunk if ids else None
        self._finished = chunk
        return None

    def _finish(self, reason: Any, stop_reason: Any) -> tuple[Literal["stop", "length"] | None, int | None]:
        """The finish reason, and the stop token id (vLLM names a stop token id, and nothing for EOS)."""
        if reason is None:
            return None, None
        if reason == "length":
            return "length", None
        if reason == "stop":
            if isinstance(stop_reason, int):
                return "stop", stop_reason
            return "stop", self._last_id if stop_reason is None else None
        if reason == "abort":
            raise BackendError("backend aborted the request", status=503, retryable=True)
        raise MalformedStream(f"backend sent an unknown finish reason {reason!r}")

    def _usage(self, usage: dict[str, Any]) -> None:
        if self._finished is None:
            raise MalformedStream("backend sent usage before the finish reason")
        details = usage.get("prompt_tokens_details") or {}
        self._finished.prompt_tokens = int(usage.get("prompt_tokens") or self._prompt_tokens)
        self._finished.completion_tokens = int(usage.get("completion_tokens") or self._completion_tokens)
        self._finished.cached_tokens = int(details.get("cached_tokens") or 0)


def _top(candidates: Iterable[tuple[int, float]], k: int) -> list[tuple[int, float]]:
    """The k most likely of vLLM's candidates (the sampled token plus the top k, in any order)."""
    return sorted(candidates, key=lambda c: c[1], reverse=True)[:k]


def _completion_logprobs(logprobs: Any, ids: list[int], k: int) -> list[TokenLogprob]:
    """`/v1/completions` logprobs (keys `token_id:N` with return_tokens_as_token_ids) per delta token id."""
    values = logprobs.get("token_logprobs") or []
    tops = logprobs.get("top_logprobs") or [None] * len(values)
    if not len(values) == len(tops) == len(ids):
        raise MalformedStream("backend sent logprobs that do not match its token ids")
    out = []
    for token_id, value, top in zip(ids, values, tops):
        candidates = ((_token_id(key), float(lp)) for key, lp in (top or {}).items())
        out.append(TokenLogprob(token_id, _logprob(value), _top(candidates, k)))
    return out


def _generate_logprobs(logprobs: Any, ids: list[int], k: int) -> list[TokenLogprob]:
    """Generate-API logprobs: integer token ids, top candidates as a list."""
    content = logprobs.get("content") or []
    if [entry.get("token_id") for entry in content] != ids:
        raise MalformedStream("backend sent logprobs that do not match its token ids")
    return [
        TokenLogprob(
            int(entry["token_id"]),
            _logprob(entry.get("logprob")),
            _top(((int(c["token_id"]), float(c["logprob"])) for c in entry.get("top_logprobs") or ()), k),
        )
        for entry in content
    ]


def _token_id(key: str) -> int:
    if not key.startswith(_TOKEN_ID):
        raise MalformedStream(f"backend sent logprob token {key!r}, not `token_id:N` (return_tokens_as_token_ids)")
    return int(key[len(_TOKEN_ID) :])


def _logprob(value: Any) -> float:
    """A logprob; vLLM sends null where it has none and floors -inf at -9999."""
    return float(value) if value is not None else LOGPROB_FLOOR
