"""/openapi.json: a valid OpenAPI 3.1 document whose request schemas are the validators' own declarations."""

from __future__ import annotations

import ast
from pathlib import Path

import httpx
import jsonschema
import pytest
from schemathesis.specs.openapi.definitions import OPENAPI_31

from gateway.api.openapi import ANSWERS, REQUEST_BODIES, build_document, document_bytes
from gateway.app import create_app
from gateway.errors import APIError
from gateway.models.registry import ModelRegistry
from gateway.validation.chat import CHAT, parse_chat_completion
from gateway.validation.completions import parse_completion
from gateway.validation.declare import Obj, Variants
from gateway.validation.fields import Fields
from gateway.validation.messages import parse_messages_request
from gateway.validation.responses import INPUT_ITEMS_QUERY, parse_responses_request
from tests.gateway.http_server import serve

ROOT = Path(__file__).resolve().parents[2]
READERS = {"string", "boolean", "integer", "integer_text", "number", "obj", "array", "items", "mapping", "refuse"}
"""Fields methods whose first argument is a body key (get/has are left out: dicts have them too)."""


@pytest.fixture(scope="module")
def document() -> dict:
    return build_document()


def _declarations(shape, seen: dict[str, Obj]) -> None:
    """Every Obj reachable from `shape`, by name."""
    if isinstance(shape, Variants):
        for case in shape.cases.values():
            _declarations(case, seen)
    elif isinstance(shape, Obj) and shape.name not in seen:
        seen[shape.name] = shape
        for f in shape.fields.values():
            for inner in (f.obj, f.items, *f.alternatives):
                _declarations(inner, seen)


def _all_declarations() -> dict[str, Obj]:
    seen: dict[str, Obj] = {}
    for decl in [*REQUEST_BODIES.values(), INPUT_ITEMS_QUERY]:
        for shape in decl if isinstance(decl, tuple) else (decl,):
            _declarations(shape, seen)
    return seen


def test_the_document_is_openapi_31_with_valid_schemas(document):
    jsonschema.Draft202012Validator(OPENAPI_31).validate(document)
    for schema in document["components"]["schemas"].values():
        jsonschema.Draft202012Validator.check_schema(schema)


def test_every_declared_field_is_in_the_document_as_declared(document):
    components = document["components"]["schemas"]
    declarations = _all_declarations()
    assert len(declarations) > 30
    for name, decl in declarations.items():
        if decl is INPUT_ITEMS_QUERY:
            continue
        assert components[name]["properties"] == {k: f.schema({}) for k, f in decl.fields.items()}, name
    query = {
        p["name"]: p["schema"]
        for p in document["paths"]["/v1/responses/{response_id}/input_items"]["get"]["parameters"]
    }
    assert set(INPUT_ITEMS_QUERY.fields) <= set(query)


def test_request_and_answer_schemas_have_their_own_names():
    assert not set(_all_declarations()) & set(ANSWERS)


def test_every_key_the_validators_read_is_declared():
    """A field read by validation code but declared nowhere fails here (and at run time, with a KeyError)."""
    declared = {key for decl in _all_declarations().values() for key in decl.fields}
    read = set()
    for path in [*ROOT.glob("gateway/validation/*.py"), *ROOT.glob("gateway/api/*.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in READERS
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                read.add(node.args[0].value)
    assert len(read) > 40
    assert read <= declared, read - declared


def test_reading_an_undeclared_field_is_a_programming_error():
    with pytest.raises(KeyError, match="declares no field 'temprature'"):
        Fields({"temprature": 1}, CHAT).number("temprature")


def test_a_request_schema_carries_the_validators_bounds(document):
    chat = document["components"]["schemas"]["ChatCompletionRequest"]
    assert chat["required"] == ["model", "messages"]
    n = chat["properties"]["n"]["anyOf"][0]
    assert (n["type"], n["minimum"], n["maximum"]) == ("integer", 1, 16)
    assert chat["properties"]["logit_bias"]["anyOf"] == [{"type": "null"}, {"const": {}}]


def test_served_once_per_process_as_stored_bytes():
    app = create_app(ModelRegistry([]))
    routes = {(route.path.replace(":path", ""), method.lower()) for route in app.routes for method in route.methods}
    described = {(path, method) for path, item in build_document()["paths"].items() for method in item}
    assert routes - {(path, "head") for path, _ in routes} <= described
    with serve(app) as base:
        first = httpx.get(f"{base}/openapi.json")
        second = httpx.get(f"{base}/openapi.json")
    assert first.status_code == 200 and first.headers["content-type"] == "application/json"
    assert first.content == second.content == document_bytes()
    assert document_bytes() is document_bytes()


INTEGER_FIELDS = [
    (decl, key)
    for decl in _all_declarations().values()
    if decl is not INPUT_ITEMS_QUERY  # query parameters are text
    for key, f in decl.fields.items()
    if f.type == "integer"
]


@pytest.mark.parametrize(("decl", "key"), INTEGER_FIELDS, ids=[f"{d.name}.{k}" for d, k in INTEGER_FIELDS])
def test_every_integer_field_reads_integral_floats_as_its_schema_does(decl, key):
    """1.0 is an integer to JSON Schema (and to pydantic's lax ints): the validator takes it as an int; 1.5, a
    boolean and a value out of bounds are a 400 naming the field, and the schema refuses them too."""
    f = decl.fields[key]
    schema = jsonschema.Draft202012Validator(f.schema({}))
    valid = 0 if (f.lo is None or f.lo <= 0) and (f.hi is None or f.hi >= 0) else int(f.lo)
    got = Fields({key: float(valid)}, decl).integer(key)
    assert schema.is_valid(float(valid)) and got == valid and type(got) is int
    refused = [valid + 0.5, True] + ([float(f.hi) * 2 + 2] if f.hi is not None else [])
    for value in refused:
        assert not schema.is_valid(value), value
        with pytest.raises(APIError) as e:
            Fields({key: value}, decl).integer(key)
        assert (e.value.status, e.value.param) == (400, key), value


M = {"model": "m"}
USER = [{"role": "user", "content": "hi"}]
AGREEMENT = [
    # (schema name, parser, body, accepted): bodies the fuzz found the document and the validator disagreeing on
    (
        "ResponsesRequest",
        parse_responses_request,
        {**M, "input": "x", "text": {"format": {"type": "text", "name": 0}}},
        True,
    ),
    (
        "ResponsesRequest",
        parse_responses_request,
        {**M, "input": "x", "text": {"format": {"type": "json_schema", "name": 0}}},
        False,
    ),
    (
        "ResponsesRequest",
        parse_responses_request,
        {**M, "input": [{"role": "user", "content": [{"type": "input_text", "text": "x", "refusal": 5}]}]},
        True,
    ),
    (
        "ResponsesRequest",
        parse_responses_request,
        {**M, "input": [{"role": "user", "content": [{"type": "refusal", "text": "x"}]}]},
        False,
    ),
    (
        "ChatCompletionRequest",
        parse_chat_completion,
        {**M, "messages": USER, "max_completion_tokens": 5, "max_tokens": "x"},
        False,
    ),
    ("ChatCompletionRequest", parse_chat_completion, {**M, "messages": [{"role": "tool", "content": "x"}]}, False),
    ("ChatCompletionRequest", parse_chat_completion, {**M, "messages": [{"role": "assistant", "content": ""}]}, True),
    ("ChatCompletionRequest", parse_chat_completion, {**M, "messages": [{"role": "assistant"}]}, False),
    (
        "ChatCompletionRequest",
        parse_chat_completion,
        {**M, "messages": [{"role": "assistant", "content": [], "tool_calls": []}]},
        False,
    ),
    (
        "ChatCompletionRequest",
        parse_chat_completion,
        {**M, "messages": USER, "response_format": {"type": "text", "json_schema": 5}},
        True,
    ),
    (
        "ChatCompletionRequest",
        parse_chat_completion,
        {**M, "messages": USER, "stream_options": {"include_usage": "x"}},
        False,
    ),
    (
        "AnthropicMessagesRequest",
        parse_messages_request,
        {**M, "max_tokens": 1, "messages": USER, "thinking": {"type": "disabled", "budget_tokens": "x"}},
        True,
    ),
    (
        "AnthropicMessagesRequest",
        parse_messages_request,
        {**M, "max_tokens": 1, "messages": USER, "tool_choice": {"type": "auto", "name": 5}},
        False,
    ),
    ("ChatCompletionRequest", parse_chat_completion, {**M, "messages": USER, "n": 2.0, "max_tokens": 16.0}, True),
    ("ChatCompletionRequest", parse_chat_completion, {**M, "messages": USER, "n": 1.5}, False),
    ("CompletionRequest", parse_completion, {**M, "prompt": [1.0, 2.0], "best_of": 1.0}, True),
    ("CompletionRequest", parse_completion, {**M, "prompt": [1.5]}, False),
    ("AnthropicMessagesRequest", parse_messages_request, {**M, "max_tokens": 8.0, "messages": USER}, True),
    ("ResponsesRequest", parse_responses_request, {**M, "input": "x", "max_output_tokens": 16.0}, True),
]


@pytest.mark.parametrize(("name", "parse", "body", "accepted"), AGREEMENT)
def test_the_document_and_the_validator_agree(document, name, parse, body, accepted):
    schema = {"$ref": f"#/components/schemas/{name}", "components": document["components"]}
    assert jsonschema.Draft202012Validator(schema).is_valid(body) is accepted
    if accepted:
        parse(body)
    else:
        with pytest.raises(APIError) as refused:
            parse(body)
        assert refused.value.status == 400 and refused.value.param
