"""Stream-parse long tool-call outputs one token per delta: each family's parser vs SGLang's detector of that family.

Per family, the output is synthetic but shaped like the model's: a short reasoning block, then calls whose last
argument is a long string (the long-argument stream); marker tokens are single pieces with a token id, as the
gateway's detokenizer delivers them. The peer (llm-router-utils' extraction of SGLang's detector) runs in its own
interpreter, never imported here: it gets the text after the reasoning block (what SGLang hands it after its
reasoning parser), one token's text per increment. Times are CPU seconds of the parsing process (the
machine is shared), so the figures do not depend on other load. Other families add a row to FAMILIES; a family
whose output is not a think block and calls (gpt-oss, llama, mistral, gemma4) gives its whole `output` instead,
one call with a long string argument, and its peer gets all of it.

    python bench/parser_bench.py [--peer-python /tmp/peer-venv/bin/python] [--sizes 1000 8000 32000]
        [--family NAME ...] [--peer-max TOKENS]
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/tmp/parser.cg.%p \
        python bench/parser_bench.py --callgrind /tmp/parser.cg --sizes 2000   # instructions per token, no peer
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from callgrind_counts import counted

from bench.kimi_parse_bench import run_peer, words
from bench.kimi_parse_bench import synthetic_output as kimi_k3_output
from gateway.families.base import OutputParser
from gateway.families.chatml import TOKEN_MARKERS
from gateway.families.deepseek import DsmlParser
from gateway.families.deepseek.markers import (
    DSML,
    SECTIONS,
    TOOL_CALL_BEGIN,
    TOOL_CALL_END,
    TOOL_CALLS_BEGIN,
    TOOL_SEP,
    V4,
    V32,
    V41,
    Dialect,
)
from gateway.families.deepseek.parser import split_v3_call, split_v31_call
from gateway.families.gemma4 import Gemma4Parser
from gateway.families.glm import GlmParser
from gateway.families.gpt_oss import HarmonyParser
from gateway.families.hermes import HermesParser
from gateway.families.kimi.markers import K2_SECTIONS as K2
from gateway.families.kimi.parser import KimiK3Parser, split_k2_call
from gateway.families.llama import LLAMA3_JSON, LLAMA4_PYTHONIC, LlamaParser
from gateway.families.mistral import MistralParser
from gateway.families.qwen3_xml import Qwen3XmlParser
from gateway.families.token_sections import SectionParser
from gateway.types import Piece

TOOL = {
    "type": "function",
    "function": {
        "name": "write_file",
        "parameters": {
            "type": "object",
            "properties": {"path": {"type": "string"}, "lines": {"type": "integer"}, "content": {"type": "string"}},
        },
    },
}
QWEN_IDS = {"<think>": 151667, "</think>": 151668, "<tool_call>": 151657, "</tool_call>": 151658}
GLM_IDS = {"<think>": 151350, "</think>": 151351, "<tool_call>": 151352, "</tool_call>": 151353, "<arg_key>": 151356,
           "</arg_key>": 151357, "<arg_value>": 151358, "</arg_value>": 151359}  # fmt: skip

DEEPSEEK_IDS = {"</think>": 128822, DSML: 128825, TOOL_CALLS_BEGIN: 128806, TOOL_CALL_BEGIN: 128808,
                TOOL_CALL_END: 128809, TOOL_SEP: 128814}  # fmt: skip
K2_IDS = {"</think>": 163607, K2.section_begin: 163595, K2.call_begin: 163597, K2.arguments_begin: 163598,
          K2.call_end: 163599}  # fmt: skip


def pieces_of(parts: list[str | list[Piece]], ids: dict[str, int]) -> list[Piece]:
    """Marker strings as their token pieces, other strings as one piece, word lists as they are."""
    out: list[Piece] = []
    for part in parts:
        out += part if isinstance(part, list) else [Piece(part, ids.get(part))]
    return out


def hermes_call(length: int, seed: int) -> list[str | list[Piece]]:
    body = [Piece(json.dumps(w.text)[1:-1]) for w in words(length, seed)]
    return ["<tool_call>", '\n{"name": "write_file", "arguments": {"path": "notes.txt", "lines": 12, "content": "',
            body, '"}}\n', "</tool_call>", "\n"]  # fmt: skip


def qwen_xml_call(length: int, seed: int) -> list[str | list[Piece]]:
    head = "\n<function=write_file>\n<parameter=path>\nnotes.txt\n</parameter>\n<parameter=lines>\n12\n</parameter>\n"
    return ["<tool_call>", head + "<parameter=content>\n", words(length, seed), "\n</parameter>\n</function>\n",
            "</tool_call>", "\n"]  # fmt: skip


def glm_call(length: int, seed: int) -> list[str | list[Piece]]:
    return ["<tool_call>", "write_file", "<arg_key>", "path", "</arg_key>", "<arg_value>", "notes.txt", "</arg_value>",
            "<arg_key>", "lines", "</arg_key>", "<arg_value>", "12", "</arg_value>", "<arg_key>", "content",
            "</arg_key>", "<arg_value>", words(length, seed), "</arg_value>", "</tool_call>"]  # fmt: skip


def glm45_call(length: int, seed: int) -> list[str | list[Piece]]:
    """GLM-4.5's layout: the same tags as GLM-4.7 with a newline after the name and after each value."""
    out: list[str | list[Piece]] = []
    for part in glm_call(length, seed):
        out += ["write_file\n"] if part == "write_file" else [part, "\n"] if part == "</arg_value>" else [part]
    return out


def json_call(head: list[str], length: int, seed: int, tail: list[str]) -> list[str | list[Piece]]:
    """A call whose JSON arguments end in a long string (its words JSON-escaped, one piece each)."""
    body = [Piece(json.dumps(w.text)[1:-1]) for w in words(length, seed)]
    return [*head, '{"path": "notes.txt", "lines": 12, "content": "', body, '"}', *tail]


def deepseek_v3_call(length: int, seed: int) -> list[str | list[Piece]]:
    head = [TOOL_CALL_BEGIN, "function", TOOL_SEP, "write_file\n```json\n"]
    return ([TOOL_CALLS_BEGIN] if seed == 1 else []) + json_call(head, length, seed, ["\n```", TOOL_CALL_END, "\n"])


def deepseek_v31_call(length: int, seed: int) -> list[str | list[Piece]]:
    head = [TOOL_CALL_BEGIN, "write_file", TOOL_SEP]
    return ([TOOL_CALLS_BEGIN] if seed == 1 else []) + json_call(head, length, seed, [TOOL_CALL_END])


def kimi_k2_call(length: int, seed: int) -> list[str | list[Piece]]:
    head = [K2.call_begin, f"functions.write_file:{seed - 1}", K2.arguments_begin]
    return ([K2.section_begin] if seed == 1 else []) + json_call(head, length, seed, [K2.call_end])


def dsml_call(dialect: Dialect) -> Callable[[int, int], list[str | list[Piece]]]:
    """A DSML invoke of `dialect` (its block opened before the first call), tags as `<` + the DSML token + text."""

    def tag(text: str) -> list[str]:
        closing = text.startswith("/")
        return ["</" if closing else "<", DSML, text.lstrip("/")]

    def call(length: int, seed: int) -> list[str | list[Piece]]:
        opening = ["\n\n", *tag(dialect.calls + ">\n")] if seed == 1 else []
        path = [
            *tag(dialect.parameter + ' name="path" string="true">'),
            "notes.txt",
            *tag("/" + dialect.parameter + ">\n"),
        ]
        lines = [*tag(dialect.parameter + ' name="lines" string="false">'), "12", *tag("/" + dialect.parameter + ">\n")]
        content = [*tag(dialect.parameter + ' name="content" string="true">'), words(length, seed)]
        close = [*tag("/" + dialect.parameter + ">\n"), *tag("/" + dialect.invoke + ">\n")]
        return [*opening, *tag(dialect.invoke + ' name="write_file">\n'), *path, *lines, *content, *close]

    return call


def argument_words(count: int) -> list[Piece]:
    """Argument text pieces that are safe inside a JSON string."""
    return [Piece(json.dumps(w.text, ensure_ascii=False)[1:-1]) for w in words(count)]


def control(text: str) -> Piece:
    return Piece(text, 1)


def harmony_output(tokens: int) -> list[Piece]:
    head = [control("<|channel|>"), Piece("analysis"), control("<|message|>"), *words(30), control("<|end|>")]
    head += [control("<|start|>"), Piece("assistant"), control("<|channel|>"), Piece("commentary to=functions.write")]
    head += [Piece("_file "), control("<|constrain|>"), Piece("json"), control("<|message|>")]
    head += [Piece('{"path": "notes.txt", "content": "')]
    return [*head, *argument_words(tokens - len(head) - 2), Piece('"}'), control("<|call|>")]


def llama3_output(tokens: int) -> list[Piece]:
    head = Piece('{"name": "write_file", "parameters": {"path": "notes.txt", "content": "')
    return [head, *argument_words(tokens - 2), Piece('"}}')]


def llama4_output(tokens: int) -> list[Piece]:
    head = Piece("[write_file(path='notes.txt', content='")
    return [head, *(Piece(repr(w.text)[1:-1]) for w in words(tokens - 2)), Piece("')]")]  # no word holds a `'`


def kimi_k3_tools(tokens: int) -> list[Piece]:
    """Kimi K3's output from its `<|close|>think<|sep|>` on (the K3 bench's output, its reasoning words cut)."""
    out = kimi_k3_output(tokens + tokens * 3 // 10)
    return out[next(i for i, p in enumerate(out) if p.token_id is not None) :]


def mistral_text_think_output(tokens: int) -> list[Piece]:
    """Magistral Small 2506: `<think>` reasoning written as text, then a v11+ call."""
    return [Piece("<think>"), *words(30), Piece("</think>"), *mistral_output(tokens - 32)]


def mistral_output(tokens: int) -> list[Piece]:
    head = [
        control("[TOOL_CALLS]"),
        Piece("write_file"),
        control("[ARGS]"),
        Piece('{"path": "notes.txt", "content": "'),
    ]
    return [*head, *argument_words(tokens - len(head) - 1), Piece('"}')]


def gemma4_output(tokens: int) -> list[Piece]:
    quote = control('<|"|>')
    head = [control("<|tool_call>"), Piece("call:write_file{path:"), quote, Piece("notes.txt"), quote]
    head += [Piece(",content:"), quote]
    return [*head, *words(tokens - len(head) - 3), quote, Piece("}"), control("<tool_call|>")]


@dataclass(frozen=True)
class Family:
    """One row: our parser, how a call is written, its marker ids, and the peer detector."""

    name: str
    parser: Callable[[], OutputParser]
    call: Callable[[int, int], list[str | list[Piece]]] | None
    ids: dict[str, int]
    peer: str  # module:class under llm_router_utils.sglang.srt.function_call
    output: Callable[[int], list[Piece]] | None = None
    """The whole output (instead of a think block and `call`s); the peer gets all of it."""


FAMILIES = [
    Family("qwen3-hermes", lambda: HermesParser(tool_calls=True, in_reasoning=True, token_markers=TOKEN_MARKERS),
           hermes_call, QWEN_IDS,
           "qwen25_detector:Qwen25Detector"),
    Family("qwen3-xml", lambda: Qwen3XmlParser([TOOL], in_reasoning=True), qwen_xml_call, QWEN_IDS,
           "qwen3_coder_detector:Qwen3CoderDetector"),
    Family("glm", lambda: GlmParser([TOOL], in_reasoning=True), glm_call, GLM_IDS, "glm47_moe_detector:Glm47MoeDetector"),
    Family("glm45", lambda: GlmParser([TOOL], in_reasoning=True), glm45_call, GLM_IDS, "glm4_moe_detector:Glm4MoeDetector"),
    Family("deepseek-v3", lambda: SectionParser(SECTIONS, split_v3_call, True), deepseek_v3_call, DEEPSEEK_IDS,
           "deepseekv3_detector:DeepSeekV3Detector"),
    Family("deepseek-v31", lambda: SectionParser(SECTIONS, split_v31_call, True), deepseek_v31_call, DEEPSEEK_IDS,
           "deepseekv31_detector:DeepSeekV31Detector"),
    Family("deepseek-v32", lambda: DsmlParser(True, dialect=V32), dsml_call(V32), DEEPSEEK_IDS,
           "deepseekv32_detector:DeepSeekV32Detector"),
    Family("deepseek-v4", lambda: DsmlParser(True, dialect=V4), dsml_call(V4), DEEPSEEK_IDS,
           "deepseekv4_detector:DeepSeekV4Detector"),
    Family("deepseek-v41", lambda: DsmlParser(True, dialect=V41), dsml_call(V41), DEEPSEEK_IDS,
           "deepseekv41_detector:DeepSeekV41Detector"),
    Family("kimi-k2", lambda: SectionParser(K2, split_k2_call, True), kimi_k2_call, K2_IDS,
           "kimik2_detector:KimiK2Detector"),
    Family("kimi-k3", KimiK3Parser, None, {}, "kimik3_detector:KimiK3Detector", kimi_k3_tools),
    Family("gpt-oss", lambda: HarmonyParser.after("<|start|>assistant"), None, {}, "gpt_oss_detector:GptOssDetector",
           harmony_output),
    Family("llama", lambda: LlamaParser(LLAMA3_JSON), None, {}, "llama32_detector:Llama32Detector", llama3_output),
    Family("llama4-pythonic", lambda: LlamaParser(LLAMA4_PYTHONIC), None, {}, "pythonic_detector:PythonicDetector",
           llama4_output),
    Family("mistral", MistralParser, None, {}, "mistral_detector:MistralDetector", mistral_output),
    Family("mistral-text-think", lambda: MistralParser(text_think=True), None, {}, "mistral_detector:MistralDetector",
           mistral_text_think_output),
    Family("gemma4", Gemma4Parser, None, {}, "gemma4_detector:Gemma4Detector", gemma4_output),
]  # fmt: skip

PEER_SCRIPT = r"""
import importlib, json, sys, time
from llm_router_utils.sglang.srt.entrypoints.openai.protocol import Tool
spec, tool, texts = json.load(sys.stdin)
module, name = spec.split(":")
detector = getattr(importlib.import_module("llm_router_utils.sglang.srt.function_call." + module), name)()
tools = [Tool.model_validate(tool)]
calls = 0
start = time.process_time()
for text in texts:
    calls += sum(1 for c in detector.parse_streaming_increment(text, tools).calls if c.name)
print(json.dumps({"seconds": time.process_time() - start, "calls": calls}))
"""


def synthetic_output(family: Family, tokens: int) -> tuple[list[Piece], int]:
    """About `tokens` pieces: a reasoning block, then calls with long last arguments; and where the block ends."""
    if family.output is not None:
        return family.output(tokens), 0
    parts: list[str | list[Piece]] = [words(tokens // 10), "</think>", "\n\n"]
    out = pieces_of(parts, family.ids)
    after_think = len(out)
    calls = 0
    while len(out) < tokens - 40:
        calls += 1
        out += pieces_of(family.call(min(2000, tokens - len(out) - 40), calls), family.ids)
    return out, after_think


def ours(family: Family, pieces: list[Piece]) -> tuple[float, int]:
    """Seconds to stream `pieces` one per feed, and the calls seen."""
    parser = family.parser()
    calls = 0
    start = time.process_time()
    for piece in pieces:
        calls += sum(d.tool_name is not None for d in parser.feed((piece,)))
    calls += sum(d.tool_name is not None for d in parser.finish())
    return time.process_time() - start, calls


def peer(python: str, family: Family, pieces: list[Piece], after_think: int) -> tuple[float, int] | None:
    """The peer detector's seconds and calls on the post-reasoning text, or None when it cannot run."""
    return run_peer(python, PEER_SCRIPT, [family.peer, TOOL, [p.text for p in pieces[after_think:]]])


def counted_per_token(out: str, dumps: Iterator[int], family: Family, pieces: list[Piece]) -> tuple[float, int]:
    """Instructions per piece to stream `pieces` (a warm second run: the first fills regex and import caches),
    counted by this process's callgrind writing to `out`.%p, and the calls seen."""
    ours(family, pieces)
    result: list[int] = []
    instructions = counted(out, next(dumps), lambda: result.append(ours(family, pieces)[1]))
    return instructions / len(pieces), result[0]


def rows(args: argparse.Namespace) -> Iterator[tuple[Family, int]]:
    """The families asked for (all by default), each with every size."""
    for family in FAMILIES:
        if not args.family or family.name in args.family:
            yield from ((family, size) for size in args.sizes)


def callgrind_table(args: argparse.Namespace) -> None:
    """Per family and size: instructions per token of our parser (no peer)."""
    dumps = itertools.count(1)
    print("| family | tokens | instructions/token | calls |")
    print("|---|---:|---:|---:|")
    for family, size in rows(args):
        pieces, _ = synthetic_output(family, size)
        per_token, calls = counted_per_token(args.callgrind, dumps, family, pieces)
        print(f"| {family.name} | {len(pieces)} | {per_token:,.0f} | {calls} |", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 8000, 32000])
    parser.add_argument("--peer-python", default=os.environ.get("PARSER_PEER_PYTHON", "/tmp/peer-venv/bin/python"))
    parser.add_argument("--family", action="append", help="only these families (default: all)")
    parser.add_argument("--peer-max", type=int, help="largest size the peer runs (some peers are quadratic)")
    parser.add_argument("--callgrind", help="this process runs under callgrind writing to CALLGRIND.%%p: count")
    args = parser.parse_args()
    if args.callgrind:
        callgrind_table(args)
        return
    print("| family | tokens | ours µs/token | ours calls | peer | peer µs/token | peer calls |")
    print("|---|---:|---:|---:|---|---:|---:|")
    for family, size in rows(args):
        pieces, after_think = synthetic_output(family, size)
        seconds, calls = min(ours(family, pieces) for _ in range(3))
        runs_peer = Path(args.peer_python).exists() and (args.peer_max is None or size <= args.peer_max)
        theirs = peer(args.peer_python, family, pieces, after_think) if runs_peer else None
        peer_cells = f"{theirs[0] / len(pieces) * 1e6:.1f} | {theirs[1]}" if theirs else "n/a | n/a"
        name = family.peer.split(":")[1]
        print(
            f"| {family.name} | {len(pieces)} | {seconds / len(pieces) * 1e6:.2f} | {calls} | {name} | {peer_cells} |"
        )


if __name__ == "__main__":
    main()
