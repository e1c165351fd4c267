"""vLLM 0.33's own request and response models, as a line-oriented JSON checker run in its own process.

Reads `{"kind": ..., "body": ...}` lines on stdin and answers each with `{"ok": summary}`
or `{"error": message}`. Requests are parsed the way vLLM's server parses them, turned
into its SamplingParams, and their grammar checked with vLLM's xgrammar validation;
fields vLLM would silently ignore are errors here. Started by vllm_contract.py with
vLLM's sources on PYTHONPATH (see setup_vllm_contract.sh); imports nothing of the project.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import msgspec
from pydantic import BaseModel
from vllm.entrypoints.openai.completion.protocol import (
    CompletionRequest,
    CompletionResponseStreamChoice,
    CompletionStreamResponse,
)
from vllm.entrypoints.scale_out.token_in_token_out.protocol import (
    GenerateRequest,
    GenerateTokensStreamChoice,
    GenerateTokensStreamResponse,
)
from vllm.entrypoints.serve.engine.protocol import ErrorResponse, ModelList
from vllm.sampling_params import SamplingParams
from vllm.v1.structured_output.backend_xgrammar import validate_xgrammar_grammar

_SUMMARY = (
    "max_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "seed",
    "stop_token_ids",
    "ignore_eos",
    "skip_special_tokens",
    "logprobs",
    "frequency_penalty",
    "presence_penalty",
    "include_stop_str_in_output",
    "stop",
    "min_tokens",
)
_CONSTRAINTS = ("json", "regex", "choice", "grammar", "json_object", "structural_tag")


def _ignored(data: dict[str, Any], model: type[BaseModel], where: str) -> None:
    """Fail on keys `model` does not define: vLLM accepts and silently drops them."""
    unknown = sorted(set(data) - set(model.model_fields))
    if unknown:
        raise ValueError(f"vLLM would ignore {where} field(s) {unknown}")


def _sampling(params: SamplingParams) -> dict[str, Any]:
    """What the engine gets, after vLLM's own validation of the grammar."""
    validate_xgrammar_grammar(params)
    summary = {name: getattr(params, name) for name in _SUMMARY}
    so = params.structured_outputs
    summary["structured_outputs"] = (
        None if so is None else {k: getattr(so, k) for k in _CONSTRAINTS if getattr(so, k) is not None}
    )
    return summary


def completion_request(body: dict[str, Any]) -> dict[str, Any]:
    _ignored(body, CompletionRequest, "request")
    request = CompletionRequest.model_validate(body)
    return {
        "model": request.model,
        "prompt": request.prompt,
        "request_id": request.request_id,
        "stream": request.stream,
        "include_usage": bool(request.stream_options and request.stream_options.include_usage),
        "return_token_ids": request.return_token_ids,
        "return_tokens_as_token_ids": request.return_tokens_as_token_ids,
        "sampling": _sampling(request.to_sampling_params(request.max_tokens)),
    }


def generate_request(body: dict[str, Any]) -> dict[str, Any]:
    _ignored(body, GenerateRequest, "request")
    unknown = sorted(set(body.get("sampling_params") or {}) - {f.name for f in msgspec.structs.fields(SamplingParams)})
    if unknown:
        raise ValueError(f"vLLM would ignore sampling_params field(s) {unknown}")
    request = GenerateRequest.model_validate(body)
    return {
        "model": request.model,
        "token_ids": request.token_ids,
        "request_id": request.request_id,
        "stream": request.stream,
        "include_usage": bool(request.stream_options and request.stream_options.include_usage),
        "sampling": _sampling(request.sampling_params),
    }


def _response(body: dict[str, Any], model: type[BaseModel], choice: type[BaseModel]) -> dict[str, Any]:
    _ignored(body, model, "response")
    for c in body.get("choices", ()):
        _ignored(c, choice, "choice")
    return model.model_validate(body).model_dump(mode="json", exclude_unset=True)


def completion_chunk(body: dict[str, Any]) -> dict[str, Any]:
    return _response(body, CompletionStreamResponse, CompletionResponseStreamChoice)


def generate_chunk(body: dict[str, Any]) -> dict[str, Any]:
    return _response(body, GenerateTokensStreamResponse, GenerateTokensStreamChoice)


def model_list(body: dict[str, Any]) -> dict[str, Any]:
    return ModelList.model_validate(body).model_dump(mode="json")


def error(body: dict[str, Any]) -> dict[str, Any]:
    _ignored(body, ErrorResponse, "error response")
    return ErrorResponse.model_validate(body).model_dump(mode="json")


CHECKS = {
    f.__name__: f for f in (completion_request, generate_request, completion_chunk, generate_chunk, model_list, error)
}


def main() -> None:
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        message = json.loads(line)
        try:
            answer = {"ok": CHECKS[message["kind"]](message["body"])}
        except Exception as exc:  # noqa: BLE001 - every refusal (pydantic's, vLLM's, xgrammar's) is an answer
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer, default=str), flush=True)
    # stdin closed: the checker is done. Leave without the interpreter's teardown of vLLM's and torch's modules
    # (~2 CPU-s; over 30 s at a load average of 20, when the suite's wait for it ran out)
    os._exit(0)


if __name__ == "__main__":
    main()
