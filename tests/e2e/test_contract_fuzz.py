"""Schemathesis against the session gateway on the embedded model, driven by the gateway's own /openapi.json.

Every operation gets positive (schema-valid) and negative (mutated) bodies, parameters and headers; the stored
Responses are walked statefully through the document's links (create → GET → input_items → DELETE). Checked on
every answer: no 5xx, a status and content type the document lists, the body matching its schema (so every error
is in the OpenAI shape, Anthropic's on /v1/messages), and schema-invalid requests refused.

What a case costs, and what keeps it cheap (figures and commands in bench/RESULTS.md, "Contract fuzz"):
- Cases are drawn from `request_view` of the document: every array a request body holds has at most ARRAY_CAP
  items (a positive body is still valid against the document as served; answers are checked against that one).
  Hypothesis's draws grow with the body: uncapped, a /v1/messages body averaged 5 KB and 50 ms of CPU to draw,
  capped 0.6 KB and 10 ms, and the model prefills the shorter prompts too.
- The model's output is not what is fuzzed: a hook clamps max_tokens / max_completion_tokens /
  max_output_tokens and n to 1 (and names max_tokens 1 where a body names none), so an accepted case costs a
  prefill and no decode step.
- The operations the model answers get 2/3 of the cases of the others (MODEL_SHARE).
- Generation is derandomized (the same cases every run), never shrinks and keeps no example database.
GATEWAY_FUZZ_CASES sets the cases per operation (see docs/operations.md).
"""

from __future__ import annotations

import copy
import os
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import httpx
import jsonschema_rs
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
from backends.json_types import as_integer
from gateway.api.openapi import build_document
from gateway.validation.fields import MAX_N, MAX_NEW_TOKENS
from gateway.validation.responses import MIN_OUTPUT_TOKENS

CASES_PER_OPERATION = int(os.environ.get("GATEWAY_FUZZ_CASES", "210"))
"""Cases per operation that takes inputs, but MODEL_SHARE of it for those the model answers: 7 x 210 + 4 x 140
= 2,030, with the single cases of the five operations without inputs and the stateful walks."""
MODEL_SHARE = 2 / 3
"""A case of an operation the model answers costs it a prefill when accepted (~60 ms of CPU here, seconds for a
long prompt); a case of the others costs 5-25 ms."""
STATEFUL_STEPS = max(10, CASES_PER_OPERATION // 10)
ARRAY_CAP = 2
"""Items at most in any array of a generated request body: several messages, tools, parts, but small bodies."""
TINY = 1
"""max_tokens and n at most this: each accepted case is a prefill and one sampled token."""
_TOKEN_CAPS = {
    "/v1/chat/completions": ("max_completion_tokens", "max_tokens"),
    "/v1/completions": ("max_tokens",),
    "/v1/responses": ("max_output_tokens",),
    "/v1/messages": ("max_tokens",),
}
_LEAST = {"max_output_tokens": MIN_OUTPUT_TOKENS}
"""Budgets whose least allowed value is above TINY (OpenAI's Responses: 16)."""
SHORT_ANSWER = {"type": "json_schema", "name": "short", "schema": {"const": 1}}
"""A format whose answer is `1` and the end: two tokens, where plain text would use the 16 allowed."""
MODEL_OPERATIONS = frozenset(_TOKEN_CAPS)
SETTINGS = settings(
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
        value = as_integer(body.get(key))  # 5.0 is an integer too (JSON Schema's, and the gateway's)
        least = _LEAST.get(key, TINY)
        if value is not None and least < value <= most:
            body[key] = least  # a value out of bounds stays: the case means it to be refused
    if context.operation.path != "/v1/messages" and all(body.get(k) is None for k in keys):
        body[keys[-1]] = _LEAST.get(keys[-1], TINY)  # no budget named: the gateway's default would be 64 tokens
    text = body.get("text")
    if context.operation.path == "/v1/responses" and _plain_text(text):
        # at least 16 tokens allowed: a plain answer would use them all; text's other fields kept (a negative case's
        # bad `verbosity` must stay bad)
        body["text"] = {**(text or {}), "format": SHORT_ANSWER}
    return body


def _plain_text(text: Any) -> bool:
    """Whether a Responses `text` asks for plain text (absent, or format `text`)."""
    return text is None or (isinstance(text, dict) and text.get("format") in (None, {"type": "text"}))


_SUBSCHEMA = ("items", "additionalProperties", "propertyNames", "not", "contains")
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "patternProperties")
_CAPPED = "Capped"
_COMPONENT = "#/components/schemas/"


def request_view(document: dict[str, Any]) -> dict[str, Any]:
    """The document cases are drawn from: request bodies (and capped copies of the components they name) hold
    arrays of at most ARRAY_CAP items; the answers' schemas are the served ones."""
    view = copy.deepcopy(document)
    schemas = view["components"]["schemas"]
    for name in list(schemas):
        schemas[name + _CAPPED] = _capped(copy.deepcopy(schemas[name]))
    for body in _request_bodies(view):
        body["schema"] = _capped(body["schema"])
    return view


def _request_bodies(document: dict[str, Any]) -> list[dict[str, Any]]:
    """Every operation's request media objects (`{"schema": ...}`)."""
    return [
        media
        for item in document["paths"].values()
        for op in item.values()
        if isinstance(op, dict)
        for media in op.get("requestBody", {}).get("content", {}).values()
    ]


def _capped(schema: Any) -> Any:
    """`schema` (changed in place) with every array capped and every component reference to its capped copy."""
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(_COMPONENT):
        schema["$ref"] = ref + _CAPPED
    types = schema.get("type")
    if "items" in schema or types == "array" or (isinstance(types, list) and "array" in types):
        schema["maxItems"] = max(min(schema.get("maxItems", ARRAY_CAP), ARRAY_CAP), schema.get("minItems", 0))
    for key in _SUBSCHEMA:
        _capped(schema.get(key))
    for key in _SUBSCHEMA_LISTS:
        for sub in schema.get(key, []):
            _capped(sub)
    for key in _SUBSCHEMA_MAPS:
        for sub in schema.get(key, {}).values():
            _capped(sub)
    return schema


def body_validators(document: dict[str, Any]) -> dict[tuple[str, str], Callable[[Any], bool]]:
    """(METHOD, path) → whether a JSON body is valid against that operation's request schema in `document`."""
    validators = {}
    for path, item in document["paths"].items():
        for method, op in item.items():
            media = (
                op.get("requestBody", {}).get("content", {}).get("application/json") if isinstance(op, dict) else None
            )
            if media is not None:
                schema = {"$schema": "https://json-schema.org/draft/2020-12/schema", **media["schema"]}
                validators[(method.upper(), path)] = jsonschema_rs.validator_for(
                    {**schema, "components": document["components"]}
                ).is_valid
    return validators


def contract_checks(served: dict[str, Any], view: dict[str, Any]) -> list[Callable[..., Any]]:
    """The checks every answer goes through; a negative case is one the served document refuses, not the view."""
    valid_served, valid_view = body_validators(served), body_validators(view)

    def only_the_cap_refuses(case: Any) -> bool:
        key = (case.method.upper(), case.path)
        body = case.body
        if key not in valid_served or not isinstance(body, (dict, list, str, int, float, bool)):
            return False
        return valid_served[key](body) and not valid_view[key](body)

    def negative_data_refused(ctx: Any, response: Any, case: Any) -> bool | None:
        """negative_data_rejection, except for a body that only ARRAY_CAP made invalid (the gateway accepts it)."""
        if case.meta is not None and case.meta.generation.mode.is_negative and only_the_cap_refuses(case):
            return None
        return negative_data_rejection(ctx, response, case)

    return [
        not_a_server_error,
        status_code_conformance,
        content_type_conformance,
        response_schema_conformance,
        negative_data_refused,
    ]


OPERATIONS = [
    (method, path, "requestBody" in op or "parameters" in op or "parameters" in item)
    for path, item in build_document()["paths"].items()
    for method, op in item.items()
    if method in ("get", "post", "delete")
]
"""(method, path, whether it takes inputs): one without inputs has a single case."""


class Contract:
    """The schema cases are drawn from (the request view, answering at the gateway) and the checks they face."""

    def __init__(self, base_url: str):
        served = httpx.get(f"{base_url}/openapi.json", timeout=30).raise_for_status().json()
        view = request_view(served)
        self.schema = schemathesis.openapi.from_dict(view)
        self.schema.location = f"{base_url}/openapi.json"
        self.schema.config.generation.update(no_shrink=True)
        # A schema-valid body may still break a rule JSON Schema cannot say (tool names unique, arguments that
        # encode an object, stream_options only with stream): its 400 is right, so positive data may be refused.
        self.schema.config.checks.positive_data_acceptance.enabled = False
        self.checks = contract_checks(served, view)


@pytest.fixture(scope="module")
def contract(gateway) -> Contract:
    return Contract(gateway.base_url)


@pytest.mark.parametrize(("method", "path", "inputs"), OPERATIONS, ids=[f"{m.upper()} {p}" for m, p, _ in OPERATIONS])
def test_every_operation_keeps_its_contract(contract, method, path, inputs):
    operation = contract.schema[path][method.upper()]
    cases = st.one_of(operation.as_strategy(GenerationMode.POSITIVE), operation.as_strategy(GenerationMode.NEGATIVE))
    calls = 0

    wanted = round(CASES_PER_OPERATION * (MODEL_SHARE if path in MODEL_OPERATIONS else 1))

    @given(case=cases)
    @settings(SETTINGS, max_examples=wanted)
    def call(case):
        nonlocal calls
        calls += 1
        case.call_and_validate(checks=contract.checks, timeout=60)

    call()
    assert calls >= (wanted * 0.9 if inputs else 1)


def test_stored_responses_keep_their_contract_statefully(contract):
    checks = contract.checks

    class Walk(contract.schema.as_state_machine()):
        def validate_response(self, response, case, additional_checks=None, **kwargs):
            case.validate_response(response, checks=checks, transport_kwargs=kwargs or None)

    Walk.run(settings=settings(SETTINGS, max_examples=STATEFUL_STEPS, stateful_step_count=4))


def test_request_view_caps_request_arrays_only():
    """The view caps every request array (through component references too) and leaves the answers' schemas."""
    served = build_document()
    view = request_view(served)
    chat = view["paths"]["/v1/chat/completions"]["post"]
    assert chat["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": f"{_COMPONENT}ChatCompletionRequest{_CAPPED}"
    }
    assert (
        view["components"]["schemas"][f"ChatCompletionRequest{_CAPPED}"]["properties"]["messages"]["maxItems"]
        == ARRAY_CAP
    )
    assert (
        view["components"]["schemas"]["ChatCompletionRequest"]
        == served["components"]["schemas"]["ChatCompletionRequest"]
    )
    assert chat["responses"] == served["paths"]["/v1/chat/completions"]["post"]["responses"]
    long_chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}] * 3}
    served_valid, view_valid = body_validators(served), body_validators(view)
    assert served_valid[("POST", "/v1/chat/completions")](long_chat)
    assert not view_valid[("POST", "/v1/chat/completions")](long_chat)
    assert view_valid[("POST", "/v1/chat/completions")]({**long_chat, "messages": long_chat["messages"][:2]})


def test_the_body_hook_keeps_a_negative_case_invalid():
    """Found by an explore run: a Responses case whose only flaw was `text.verbosity` had its whole `text` replaced by
    the short-answer format, was valid after the hook, was answered 200, and failed negative_data_rejection."""
    served_valid = body_validators(build_document())[("POST", "/v1/responses")]
    context = SimpleNamespace(operation=SimpleNamespace(path="/v1/responses"))
    for text in (
        {"verbosity": 0},
        {"format": None, "verbosity": []},
        {"format": {"type": "text"}, "verbosity": "loud"},
    ):
        body = map_body(context, {"model": "m", "input": "hi", "text": dict(text)})
        assert not served_valid(body), body
    assert map_body(context, {"model": "m", "input": "hi", "text": {"verbosity": "low"}})["text"] == {
        "verbosity": "low",
        "format": SHORT_ANSWER,
    }
