"""The one interface every backend sits behind: token ids and a grammar in, token ids out."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

GrammarKind = Literal["structural_tag", "json_schema", "regex", "ebnf"]


@dataclass(frozen=True)
class Grammar:
    """A constraint on the output; `text` is what SGLang's sampling_params key of the same name takes."""

    kind: GrammarKind
    text: str


@dataclass
class SamplingParams:
    """Per-request sampling settings, in SGLang's vocabulary."""

    max_new_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    min_p: float = 0.0
    seed: int | None = None
    stop_token_ids: list[int] = field(default_factory=list)
    ignore_eos: bool = False
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    skip_special_tokens: bool = True
    """Only the backend's own text output: False whenever tools or a grammar are in play."""
    min_new_tokens: int = 0
    """Tokens generated before a stop token may end the output (vLLM's min_tokens); at most max_new_tokens."""

    def wire_fields(self, *, max_tokens: str, seed: str, min_tokens: str) -> dict[str, Any]:
        """The settings as a server's JSON fields, under its names for the token budget, the seed and the least
        tokens; `top_k` stays SGLang's (-1 for off). Unset stop ids and seed, and no least tokens, are left out."""
        fields: dict[str, Any] = {
            max_tokens: self.max_new_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "top_k": self.top_k,
            "min_p": self.min_p,
            "frequency_penalty": self.frequency_penalty,
            "presence_penalty": self.presence_penalty,
            "ignore_eos": self.ignore_eos,
            "skip_special_tokens": self.skip_special_tokens,
        }
        if self.stop_token_ids:
            fields["stop_token_ids"] = list(self.stop_token_ids)
        if self.seed is not None:
            fields[seed] = self.seed
        if self.min_new_tokens:
            fields[min_tokens] = min(self.min_new_tokens, self.max_new_tokens)
        return fields


@dataclass
class GenerateRequest:
    """One generation: a pre-tokenized prompt, sampling, an optional grammar."""

    rid: str
    input_ids: list[int]
    sampling: SamplingParams
    grammar: Grammar | None = None
    logprobs: bool = False
    top_logprobs: int = 0
    vocab_size: int | None = None
    """The ids the output may hold are 0 to vocab_size - 1: the router refuses a first chunk with any other as a
    MalformedStream, failed over (None: not checked)."""


LOGPROB_FLOOR = -9999.0
"""The least logprob reported (OpenAI's and vLLM's floor for -inf), so that JSON never carries -Infinity."""


@dataclass
class TokenLogprob:
    token_id: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)


@dataclass
class GenerateChunk:
    """New output since the previous chunk. `finish_reason` is set on the last one only."""

    output_ids: list[int]
    logprobs: list[TokenLogprob] | None = None
    finish_reason: Literal["stop", "length", "abort"] | None = None
    matched_stop: int | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0


def joined(chunks: list[GenerateChunk]) -> GenerateChunk:
    """Consecutive chunks of one stream as one (those a single socket read brought): their ids and logprobs in
    order, the last one's finish and counts."""
    if len(chunks) == 1:
        return chunks[0]
    last = chunks[-1]
    logprobs = None
    if any(c.logprobs is not None for c in chunks):
        logprobs = [entry for c in chunks for entry in c.logprobs or ()]
    return GenerateChunk(
        [i for c in chunks for i in c.output_ids],
        logprobs,
        last.finish_reason,
        last.matched_stop,
        last.prompt_tokens,
        last.completion_tokens,
        max(c.cached_tokens for c in chunks),
    )


class BackendError(Exception):
    """The backend failed: unreachable, refused the request, or broke the protocol."""

    def __init__(
        self,
        message: str,
        status: int = 502,
        retryable: bool = False,
        *,
        code: str | None = None,
        retry_after: int | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.retryable = retryable
        """Another replica (or a later try) may succeed."""
        self.code = code
        self.retry_after = retry_after
        """Seconds a client should wait before trying again, when known."""


class MalformedStream(BackendError):
    """The replica's stream broke the protocol (invalid JSON, an event of the wrong shape): its failure, not the
    request's. Before any output the router moves the request to another replica; with none left, a 502."""


def outside_vocabulary(token_id: int, size: int) -> str:
    """What a backend did wrong sending `token_id` for a vocabulary of `size` ids."""
    return f"the backend sent token id {token_id}, outside the vocabulary (0 to {size - 1})"


def check_vocabulary(chunk: GenerateChunk, size: int) -> None:
    """A chunk with an id (output, or a logprob's candidate) outside a vocabulary of `size` ids is a MalformedStream."""
    ids = chunk.output_ids
    if chunk.logprobs:
        ids = [*ids, *(i for entry in chunk.logprobs for i in (entry.token_id, *(c for c, _ in entry.top)))]
    if ids and (min(ids) < 0 or max(ids) >= size):
        raise MalformedStream(outside_vocabulary(next(i for i in ids if not 0 <= i < size), size))


class Backend(ABC):
    """A server that turns token ids into token ids."""

    @abstractmethod
    def generate(self, request: GenerateRequest) -> AsyncIterator[GenerateChunk]:
        """Stream the output; closing the iterator early aborts the request on the backend."""

    @abstractmethod
    async def ready(self) -> bool:
        """Whether the backend answers its health check now."""

    async def close(self) -> None:
        """Release connections."""
