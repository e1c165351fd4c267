"""Why qwen3_xml's tool grammar compiles slowly: its parts, and bounded raw strings in plain EBNF, on Qwen3's vocabulary.

Two tables, cold compiles (`GrammarCompiler(cache_enabled=False, max_threads=2)`), median of --repeats, ms of
process CPU time:

- parts: qwen3_xml's structural tag for one tool with the family_grammar_bench parameters, or a part of them;
- ebnf: a length-bounded raw string between `<p>` and `</p>`, written the ways xgrammar's `qwen_xml` style, its
  rewrites and this gateway (`gateway.grammars.safe_json._tight_bounded_values`) would write it (bench/RESULTS.md,
  "Why qwen3_xml's grammar costs ~1.2 s of CPU", "Length-bounded raw values without the style's whitespace").

    python bench/xml_bounded_string_bench.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import xgrammar as xg
from family_grammar_bench import PARAMETERS, qwen3_tokenizer

from gateway.families.base import FamilyContext
from gateway.families.qwen3_xml.family import Qwen3XmlFamily
from gateway.types import ChatRequest

WS = "[ \\n\\r\\t]*"
NESTED = "\n".join(f'r{i} ::= "" | (c r{i - 1})' for i in range(1, 41)) + '\nr0 ::= ""'
EBNF = {
    "[^<]{0,40} </p>": 'root ::= "<p>" c{0,40} "</p>"\nc ::= [^<]',
    "any{0,40} </p> (main's character)": 'root ::= "<p>" c{0,40} "</p>"\nc ::= [\\0-\\U0010ffff]',
    "[^<]{0,40} ws </p>": f'root ::= "<p>" c{{0,40}} {WS} "</p>"\nc ::= [^<]',
    "ws [^<]{0,40} ws </p> (qwen_xml's)": f'root ::= "<p>" {WS} c{{0,40}} {WS} "</p>"\nc ::= [^<]',
    "ws (|[^<]{0,39} non-space) ws </p>": f'root ::= "<p>" {WS} ("" | (c{{0,39}} n)) {WS} "</p>"\nc ::= [^<]\n'
    "n ::= [^< \\n\\r\\t]",
    "ws [^<]{0,40} (= ws </p>) ws </p>": f'root ::= "<p>" {WS} v {WS} "</p>"\nv ::= c{{0,40}} (= {WS} "</p>")\n'
    "c ::= [^<]",
    "ws 40 nested optionals ws </p>": f'root ::= "<p>" {WS} r40 {WS} "</p>"\nc ::= [^<]\n{NESTED}',
    "(|\\n) [^<]{0,40} </p> (this gateway's, count inline)": 'root ::= "<p>" ("" | "\\n") c{0,40} "</p>" [ \\n\\r\\t]*\n'
    "c ::= [^<]",
    "(|\\n) v </p>, v ::= [^<]{0,40} (the count in its own rule)": 'root ::= "<p>" ("" | "\\n") v "</p>" [ \\n\\r\\t]*\n'
    "v ::= c{0,40}\nc ::= [^<]",
    "(|\\n) [^<]{0,40} (|\\n) </p> (the parser's exact language)": 'root ::= "<p>" ("" | "\\n") c{0,40} ("" | "\\n") '
    '"</p>"\nc ::= [^<]',
    "[^<\\n]{0,40} </p> (no newline)": 'root ::= "<p>" c{0,40} "</p>"\nc ::= [^<\\n]',
    'JSON "[^"\\\\<]{0,40}"': 'root ::= "\\"" c{0,40} "\\""\nc ::= [^"\\\\<]',
}


def parts() -> dict[str, dict[str, Any]]:
    """The bench's parameters, each alone, and variants of the bounded `title`."""
    props = PARAMETERS["properties"]
    out: dict[str, dict[str, Any]] = {"the five parameters": PARAMETERS}
    out.update({f"only {k}": {"type": "object", "properties": {k: v}, "required": [k]} for k, v in props.items()})
    unbounded = copy.deepcopy(PARAMETERS)
    del unbounded["properties"]["title"]["maxLength"]
    out["the five, title without maxLength"] = unbounded
    variants = {
        "maxLength 10": {"type": "string", "maxLength": 10},
        "maxLength 100": {"type": "string", "maxLength": 100},
        'type ["string", "null"], maxLength 40': {"type": ["string", "null"], "maxLength": 40},
        "anyOf [maxLength 40, integer]": {"anyOf": [{"type": "string", "maxLength": 40}, {"type": "integer"}]},
        "minLength 3, no maxLength": {"type": "string", "minLength": 3},
    }
    for label, title in variants.items():
        out[f"only title, {label}"] = {"type": "object", "properties": {"title": title}}
    out["any parameters"] = {"type": "object"}
    return out


def cpu_ms(compile_text: Callable[[str], Any], text: str, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.process_time()
        compile_text(text)
        times.append((time.process_time() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    tokenizer = qwen3_tokenizer()
    stop = tokenizer.token_to_id("<|im_end|>")
    strings = [tokenizer.id_to_token(i) or "" for i in range(tokenizer.get_vocab_size())]
    info = xg.TokenizerInfo(strings, xg.VocabType.BYTE_LEVEL, stop_token_ids=[stop])
    compiler = xg.GrammarCompiler(info, max_threads=2, cache_enabled=False)
    family = Qwen3XmlFamily(FamilyContext(tokenizer, None, None, "<|im_end|>", [stop], []))
    print("| qwen3_xml, one tool with | compile CPU ms |\n|---|---:|")
    for label, schema in parts().items():
        tool = {"type": "function", "function": {"name": "t", "parameters": schema}}
        request = ChatRequest(messages=[{"role": "user", "content": "x"}], tools=[tool], tool_choice="required")
        text = family.grammar(request, "").text
        print(f"| {label} | {cpu_ms(compiler.compile_structural_tag, text, args.repeats):.0f} |", flush=True)
    print("\n| EBNF between `<p>` and `</p>` | compile CPU ms |\n|---|---:|")
    for label, text in EBNF.items():
        print(f"| {label} | {cpu_ms(compiler.compile_grammar, text, args.repeats):.0f} |", flush=True)


if __name__ == "__main__":
    main()
