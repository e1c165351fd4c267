"""Schemathesis against the session gateway on the embedded model, driven by the gateway's own /openapi.json.

Every operation gets positive (schema-valid) and negative (mutated) bodies, parameters and headers; the stored
Responses are walked statefully through the document's links (create → GET → input_items → DELETE). Checked on
every answer: no 5xx, a status and content type the document lists, the body matching its schema (so every error
is in the OpenAI shape, Anthropic's on /v1/messages), and schema-invalid requests refused.

The model's output is not what is fuzzed: a hook clamps max_tokens / max_completion_tokens / max_output_tokens
and n to tiny values (and names a tiny max_tokens where a body names none) so a case costs a prefill and a token
or two. Generation is derandomized (the same cases every run) and never shrinks. GATEWAY_FUZZ_CASES sets the
number of cases per operation for a longer run (see docs/operations.md).
"""

from __future__ import annotations

import os
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from backends.checkpoint import EMBEDDED_MODEL_ID
from gateway.api.openapi import build_document
from gateway.validation.fields import MAX_N, MAX_NEW_TOKENS

CASES_PER_OPERATION = int(os.environ.get("GATEWAY_FUZZ_CASES", "48"))
"""48 per operation (~570 cases in all) cost ~42 CPU-seconds here, test process, gateway and worker together;
the 2,000 the issue asks for cost ~120-145 (GATEWAY_FUZZ_CASES=200: ~2,250 cases, 0 failures), too much for every run."""
STATEFUL_STEPS = max(10, CASES_PER_OPERATION // 5)
TINY = 2
"""max_tokens and n at most this: each valid case generates a token or two."""
_TOKEN_CAPS = {
    "/v1/chat/completions": ("max_completion_tokens", "max_tokens"),
    "/v1/completions": ("max_tokens",),
    "/v1/responses": ("max_output_tokens",),
    "/v1/messages": ("max_tokens",),
}
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
    negative_data_rejection,
]
SETTINGS = settings(
    max_examples=CASES_PER_OPERATION,
    derandomize=True,
    database=None,
    deadline=None,
    phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure is reported as generated
    suppress_health_check=list(HealthCheck),
)


@schemathesis.hook
def map_body(context: Any, body: Any) -> Any:
    """Clamp the generation budget of a body (the model's output is not what is fuzzed)."""
    if not isinstance(body, dict):
        return body
    if isinstance(body.get("model"), str):
        body["model"] = EMBEDDED_MODEL_ID  # a random name is a 404 before anything else is read
    keys = _TOKEN_CAPS.get(context.operation.path) if context.operation else None
    if not keys:
        return body
    for key, most in [*((k, MAX_NEW_TOKENS) for k in keys), ("n", MAX_N)]:
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and TINY < value <= most:
            body[key] = TINY  # a value out of bounds stays: the case means it to be refused
    if context.operation.path != "/v1/messages" and all(body.get(k) is None for k in keys):
        body[keys[-1]] = TINY  # no budget named: the gateway's default would be 64 tokens
    return body


OPERATIONS = [
    (method, path, "requestBody" in op or "parameters" in op or "parameters" in item)
    for path, item in build_document()["paths"].items()
    for method, op in item.items()
    if method in ("get", "post", "delete")
]
"""(method, path, whether it takes inputs): one without inputs has a single case."""


@pytest.fixture(scope="module")
def contract(gateway):
    schema = schemathesis.openapi.from_url(f"{gateway.base_url}/openapi.json")
    schema.config.generation.update(no_shrink=True)
    # A schema-valid body may still break a rule JSON Schema cannot say (tool names unique, arguments that
    # encode an object, stream_options only with stream): its 400 is right, so positive data may be refused.
    schema.config.checks.positive_data_acceptance.enabled = False
    return schema


@pytest.mark.parametrize(("method", "path", "inputs"), OPERATIONS, ids=[f"{m.upper()} {p}" for m, p, _ in OPERATIONS])
def test_every_operation_keeps_its_contract(contract, method, path, inputs):
    operation = contract[path][method.upper()]
    cases = st.one_of(operation.as_strategy(GenerationMode.POSITIVE), operation.as_strategy(GenerationMode.NEGATIVE))
    calls = 0

    @given(case=cases)
    @SETTINGS
    def call(case):
        nonlocal calls
        calls += 1
        case.call_and_validate(checks=CHECKS, timeout=60)

    call()
    assert calls >= (CASES_PER_OPERATION * 0.9 if inputs else 1)


def test_stored_responses_keep_their_contract_statefully(contract):
    machine = contract.as_state_machine()
    machine.run(settings=settings(SETTINGS, max_examples=STATEFUL_STEPS, stateful_step_count=4))
