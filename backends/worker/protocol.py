"""SGLang's native `/generate` dialect: validate a request body, shape the responses."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request

from backends.asgi import BodyTimedOut, BodyTooLarge, ClientLeft, read_json_body
from backends.base import Grammar, SamplingParams
from backends.exact_json import WideInteger
from backends.json_types import as_integer, as_token_ids, is_number
from backends.worker.engine import Finish
from backends.worker.sampling import TokenChoice


class ProtocolError(ValueError):
    """The request is malformed or asks for something this worker cannot do (HTTP 400, or `status`)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


MAX_BODY_BYTES = 64 * 1024 * 1024
"""Longer request bodies are refused (413) as they arrive, not read into memory: a prompt of a million token ids
is ~8 MB of JSON."""


class BodyBytes:
    """The bytes of request bodies read and not yet parsed, all requests together, up to `limit`."""

    def __init__(self, limit: int):
        self.limit = limit
        self.held = 0


BODIES = BodyBytes(4 * MAX_BODY_BYTES)
"""Past it a body is refused (503) as it arrives: many large bodies at once would each hold up to 64 MiB."""


async def request_json(request: Request) -> Any:
    """The request's body parsed as JSON; ProtocolError when it is not JSON (400), is longer than MAX_BODY_BYTES
    (413), would take BODIES past its limit (503), the client left before it ended (499: nobody reads the answer) or
    it stalled (408, as the HTTP protocol answered when it cut the body, backends/client_timeouts.py)."""
    held = 0

    async def receive() -> Any:
        nonlocal held
        message = await request.receive()
        size = len(message.get("body", b""))
        if BODIES.held + size > BODIES.limit:
            raise ProtocolError("the worker is reading too many request bodies at once; retry later", 503)
        BODIES.held += size
        held += size
        return message

    try:
        return await read_json_body(request.scope, receive, MAX_BODY_BYTES)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"request body is not valid JSON: {exc}") from None
    except WideInteger as exc:
        raise ProtocolError(f"request body holds {exc}") from None
    except BodyTooLarge:
        raise ProtocolError(f"the request body is larger than {MAX_BODY_BYTES} bytes", 413) from None
    except BodyTimedOut:  # the server answered 408 already (this answer goes nowhere): the records say 408 too
        raise ProtocolError("the request body paused or came too slowly", 408) from None
    except ClientLeft:
        raise ProtocolError("the client left before its body ended", 499) from None
    finally:
        BODIES.held -= held


# Every key SGLang's SamplingParams accepts; anything else is rejected, as SGLang does.
_SGLANG_SAMPLING_KEYS = frozenset(
    {
        "max_new_tokens",
        "stop",
        "stop_token_ids",
        "stop_regex",
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "frequency_penalty",
        "presence_penalty",
        "repetition_penalty",
        "min_new_tokens",
        "n",
        "json_schema",
        "regex",
        "ebnf",
        "structural_tag",
        "ignore_eos",
        "skip_special_tokens",
        "spaces_between_special_tokens",
        "no_stop_trim",
        "custom_params",
        "stream_interval",
        "logit_bias",
        "sampling_seed",
    }
)
# Accepted SGLang keys this worker does not implement: allowed only at their neutral value.
_NEUTRAL_ONLY = {
    "stop_regex": (None, "", []),
    "repetition_penalty": (None, 1, 1.0),
    "n": (None, 1),
    "custom_params": (None, {}),
    "logit_bias": (None, {}),
}
MAX_STOP_STRINGS = 32
"""SGLang's MAX_STOP_COUNT."""
MAX_TOP_LOGPROBS = 20
"""vLLM's default max_logprobs (and OpenAI's top_logprobs bound): more per token would be a top-k over the whole
vocabulary, and a JSON list that long, for every output token."""
MAX_STOP_CHARS = 256
"""Longer stop strings are refused: matching holds back and rescans up to this many characters per token."""
_GRAMMAR_KEYS = ("json_schema", "regex", "ebnf", "structural_tag")
_TOP_LEVEL_KEYS = frozenset(
    {
        "text",
        "input_ids",
        "sampling_params",
        "stream",
        "rid",
        "return_logprob",
        "logprob_start_len",
        "top_logprobs_num",
        "return_text_in_logprobs",
    }
)
DEFAULT_MAX_NEW_TOKENS = 128


@dataclass
class GenerateCall:
    """A validated `/generate` request."""

    rid: str
    input_ids: list[int]
    sampling: SamplingParams
    grammar: Grammar | None
    stream: bool
    return_logprob: bool
    top_logprobs_num: int
    skip_special_tokens: bool
    no_stop_trim: bool
    stop: list[str]
    min_new_tokens: int = 0
    stop_strings_wait_for_min: bool = False
    """vLLM's rule: no stop string may end within the first min_new_tokens tokens (SGLang's gates stop tokens only)."""
    return_text_in_logprobs: bool = False
    """Each logprob entry carries its token's text (SGLang's third element), else null."""


def parse_generate(
    body: Any,
    *,
    vocab_size: int,
    context_length: int,
    encode: Callable[[str], list[int]],
    stop_strings_wait_for_min: bool = False,
    past_context: Callable[[int, int, int], str] | None = None,
) -> GenerateCall:
    """Validate a `/generate` body; `encode(text) -> ids` tokenizes a `text` prompt, once every check that needs no
    ids has passed. A prompt and max_new_tokens past the context are refused with `past_context(prompt, max_new,
    context)` (SGLang's, for an explicit max_new_tokens only, by default)."""
    if not isinstance(body, dict):
        raise ProtocolError("request body must be a JSON object")
    reject_unknown(body, _TOP_LEVEL_KEYS, "request")
    prompt = _prompt(body, context_length)
    sp = body.get("sampling_params")
    sp = {} if sp is None else sp
    if not isinstance(sp, dict):
        raise ProtocolError("sampling_params must be an object")
    reject_unknown(sp, _SGLANG_SAMPLING_KEYS, "sampling_params")
    stop_ids = sp.get("stop_token_ids")
    if isinstance(stop_ids, list) and len(stop_ids) > vocab_size:  # more must repeat ids; each is read on the loop
        raise ProtocolError(f"stop_token_ids may hold at most {vocab_size} ids (this model's vocabulary size)")
    for key, neutral in _NEUTRAL_ONLY.items():
        if not is_neutral(sp.get(key), neutral):
            raise ProtocolError(f"sampling_params.{key} is not supported by this worker")
    sampling = _sampling(sp)
    if any(not 0 <= i < vocab_size for i in sampling.stop_token_ids):
        raise ProtocolError(f"stop_token_ids must be token ids in [0, {vocab_size})")
    min_new = _int(sp, "min_new_tokens", 0)
    if not 0 <= min_new <= sampling.max_new_tokens:
        raise ProtocolError(f"min_new_tokens must be in [0, max_new_tokens ({sampling.max_new_tokens})]")
    grammars = [k for k in _GRAMMAR_KEYS if sp.get(k) is not None]
    if len(grammars) > 1:
        raise ProtocolError(f"only one of {', '.join(_GRAMMAR_KEYS)} may be set")
    grammar = None
    if grammars:
        text = sp[grammars[0]]
        if not isinstance(text, str):
            raise ProtocolError(f"sampling_params.{grammars[0]} must be a string")
        grammar = Grammar(grammars[0], text)
    top_n = _int(body, "top_logprobs_num", 0, "request")
    if not 0 <= top_n <= MAX_TOP_LOGPROBS:
        raise ProtocolError(f"top_logprobs_num must be in [0, {MAX_TOP_LOGPROBS}], got {top_n}")
    if body.get("logprob_start_len") not in (None, -1):
        raise ProtocolError("prompt logprobs (logprob_start_len) are not supported by this worker")
    rid = body.get("rid")
    if rid is not None and not isinstance(rid, str):
        raise ProtocolError("rid must be a string")
    call = GenerateCall(
        rid=rid or uuid.uuid4().hex,
        input_ids=[],
        sampling=sampling,
        grammar=grammar,
        stream=_bool(body, "stream", False, "request"),
        return_logprob=_bool(body, "return_logprob", False, "request"),
        top_logprobs_num=top_n,
        skip_special_tokens=_bool(sp, "skip_special_tokens", True),
        no_stop_trim=_bool(sp, "no_stop_trim", False),
        stop=_stop_strings(sp.get("stop")),
        min_new_tokens=min_new,
        stop_strings_wait_for_min=stop_strings_wait_for_min,
        return_text_in_logprobs=_bool(body, "return_text_in_logprobs", False, "request"),
    )
    call.input_ids = _checked_prompt(prompt, encode, vocab_size, context_length)
    if len(call.input_ids) + sampling.max_new_tokens > context_length and (
        past_context is not None or sp.get("max_new_tokens") is not None
    ):
        message = past_context or sglang_past_context
        raise ProtocolError(message(len(call.input_ids), sampling.max_new_tokens, context_length))
    return call


def _past_context_message(prompt: int, context: int) -> str:
    return f"the prompt has {prompt} tokens; this model's context length is {context}"


def sglang_past_context(prompt: int, max_new: int, context: int) -> str:
    """SGLang's refusal of a prompt and an explicit max_new_tokens past the context (its TokenizerManager's request
    validation; an absent max_new_tokens is capped instead)."""
    return (
        f"Requested token count exceeds the model's maximum context length of {context} tokens. You requested a "
        f"total of {prompt + max_new} tokens: {prompt} tokens from the input messages and {max_new} tokens for the "
        "completion. Please reduce the number of tokens in the input messages or the completion to fit within the "
        "limit."
    )


def _stop_strings(stop: Any) -> list[str]:
    """`stop`: one string or a list of them, each non-empty and bounded."""
    if stop is None:
        return []
    stops = [stop] if isinstance(stop, str) else stop
    if isinstance(stops, list) and len(stops) > MAX_STOP_STRINGS:  # before each is read: the list may be millions
        raise ProtocolError(f"at most {MAX_STOP_STRINGS} stop strings are allowed, got {len(stops)}")
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise ProtocolError("stop must be a string or a list of strings")
    for s in stops:
        if not s:
            raise ProtocolError("stop strings must not be empty")
        if len(s) > MAX_STOP_CHARS:
            raise ProtocolError(f"stop strings may be at most {MAX_STOP_CHARS} characters long")
    return list(dict.fromkeys(stops))


def _prompt(body: dict, context_length: int) -> str | list[int]:
    """The body's prompt as given: its `text`, or its `input_ids` read as integers (a list too long for the context
    refused before each id is read: up to 64 MiB of them)."""
    ids, text = body.get("input_ids"), body.get("text")
    if (ids is None) == (text is None):
        raise ProtocolError("give exactly one of input_ids or text")
    if text is not None:
        if not isinstance(text, str):
            raise ProtocolError("text must be a string (batches are not supported)")
        return text
    if isinstance(ids, list) and len(ids) >= context_length:
        raise ProtocolError(_past_context_message(len(ids), context_length))
    token_ids = as_token_ids(ids)
    if token_ids is None:
        raise ProtocolError("input_ids must be a list of integers (batches are not supported)")
    return token_ids


def _checked_prompt(
    prompt: str | list[int], encode: Callable[[str], list[int]], vocab_size: int, context_length: int
) -> list[int]:
    """The prompt's ids (a text encoded, the costly step: after every cheap check of the body), non-empty, within
    the context and the vocabulary."""
    input_ids = encode(prompt) if isinstance(prompt, str) else prompt
    if not input_ids:
        raise ProtocolError("the prompt is empty")
    if len(input_ids) >= context_length:
        raise ProtocolError(_past_context_message(len(input_ids), context_length))
    if any(not 0 <= i < vocab_size for i in input_ids):
        raise ProtocolError(f"input_ids must be token ids in [0, {vocab_size})")
    return input_ids


def _sampling(sp: dict) -> SamplingParams:
    max_new = _int(sp, "max_new_tokens", DEFAULT_MAX_NEW_TOKENS)
    temperature = _float(sp, "temperature", 1.0)
    top_p = _float(sp, "top_p", 1.0)
    top_k = _int(sp, "top_k", -1)
    min_p = _float(sp, "min_p", 0.0)
    if max_new < 0:
        raise ProtocolError("max_new_tokens must be >= 0")
    if temperature < 0:
        raise ProtocolError("temperature must be >= 0")
    if not 0.0 < top_p <= 1.0:
        raise ProtocolError("top_p must be in (0, 1]")
    if top_k == 0 or top_k < -1:
        raise ProtocolError("top_k must be -1 (disabled) or at least 1")
    if not 0.0 <= min_p <= 1.0:
        raise ProtocolError("min_p must be in [0, 1]")
    penalties = {k: _float(sp, k, 0.0) for k in ("frequency_penalty", "presence_penalty")}
    if any(not -2.0 <= v <= 2.0 for v in penalties.values()):
        raise ProtocolError("frequency_penalty and presence_penalty must be in [-2, 2]")
    stop_ids = as_token_ids([] if sp.get("stop_token_ids") is None else sp["stop_token_ids"])
    if stop_ids is None:
        raise ProtocolError("stop_token_ids must be a list of integers")
    seed = _int(sp, "sampling_seed", None)
    if seed is not None and not -(1 << 63) <= seed < 1 << 63:
        raise ProtocolError("sampling_seed must be a 64-bit signed integer, as SGLang's")
    return SamplingParams(
        max_new_tokens=max_new,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        min_p=min_p,
        seed=seed,
        stop_token_ids=stop_ids,
        ignore_eos=_bool(sp, "ignore_eos", False),
        **penalties,
    )


def is_neutral(value: Any, neutral: tuple) -> bool:
    """`value` is one of the `neutral` values of a field this worker does not implement (1.0 is 1, but a boolean
    matches only a boolean: JSON `true` is not 1 nor `false` 0)."""
    return any(value == n and isinstance(value, bool) == isinstance(n, bool) for n in neutral)


def reject_unknown(obj: dict, known: frozenset[str], where: str) -> None:
    """ProtocolError naming the fields of `obj` outside `known` (the dialects refuse what they cannot honour)."""
    unknown = sorted(set(obj) - known)
    if unknown:
        raise ProtocolError(f"unknown or unsupported {where} field(s): {', '.join(unknown)}")


def _int(obj: dict, key: str, default: Any, where: str = "sampling_params") -> Any:
    """`obj[key]` as an int (an integral float such as 16.0 is taken, as SGLang's and vLLM's pydantic models take
    it; 1.5 and booleans are refused), or `default` when absent."""
    value = obj.get(key)
    if value is None:
        return default
    number = as_integer(value)
    if number is None:
        raise ProtocolError(f"{where}.{key} must be an integer, got {value!r}")
    return number


def _float(obj: dict, key: str, default: float) -> float:
    value = obj.get(key)
    if value is None:
        return default
    if not is_number(value):
        raise ProtocolError(f"sampling_params.{key} must be a finite number")
    return float(value)


def _bool(obj: dict, key: str, default: bool, where: str = "sampling_params") -> bool:
    value = obj.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ProtocolError(f"{where}.{key} must be a boolean")
    return value


def finish_reason(finish: Finish | None) -> dict | None:
    """SGLang's `meta_info.finish_reason` object."""
    if finish is None:
        return None
    if finish.type == "stop":
        return {"type": "stop", "matched": finish.matched}
    if finish.type == "length":
        return {"type": "length", "length": finish.length}
    return {"type": "abort", "message": finish.message}


def logprob_fields(
    tokens: list[TokenChoice], top_n: int, token_text: Callable[[int], str] | None = None
) -> dict[str, list]:
    """`output_token_logprobs` ([logprob, id, text] per token) and, when asked, `output_top_logprobs`; the text is
    `token_text(id)` when given (`return_text_in_logprobs`), else null, as SGLang's."""

    def text(token_id: int) -> str | None:
        return None if token_text is None else token_text(token_id)

    fields: dict[str, list] = {"output_token_logprobs": [[t.logprob, t.token_id, text(t.token_id)] for t in tokens]}
    if top_n > 0:
        fields["output_top_logprobs"] = [[[lp, i, text(i)] for i, lp in t.top] for t in tokens]
    return fields
