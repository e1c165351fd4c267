"""Hostile tool schemas: what building each family's grammar costs (CPU, grammar size, peak Python memory).

Each cell builds `family.grammar(request, "")` for one hostile request (tool_choice "required", the choice every
family constrains; one tool unless the case says otherwise)
in a forked child under RLIMIT_CPU (--limit seconds: a cell past it prints `> N s`), on the vocabularies of
bench/family_grammar_bench.py (Gemma 4's control tokens on Qwen3's; Kimi K3's synthetic checkpoint from
tests/test_kimi_grammar.py). Only the build: the compile budget (gateway/grammars/budget.py) bounds the compile,
and the build runs in its child too; a build that is linear and small stays far under it. Cells: build CPU ms /
grammar KB / peak MB (tracemalloc), or the exception. With `--compile`, each cell also gives the CPU ms of
xgrammar's compile of that grammar on the family's vocabulary (one thread, no cache; Kimi K3's synthetic one), in
the same child and under the same limit: build + compile is what the compile budget (default 2 s) bounds.

    python bench/hostile_grammar_bench.py [--limit 10] [--only gemma4 --only kimi] [--case fan] [--compile]
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import xgrammar as xg
from family_grammar_bench import FAMILIES

from gateway.families.base import FamilyContext
from gateway.types import ChatRequest


def _tool(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "parameters": parameters}}


def _object(properties: dict[str, Any], required: list[str] | None = None) -> dict[str, Any]:
    return {"type": "object", "properties": properties, **({"required": required} if required else {})}


def _array(item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "maxItems": 16, "items": item}


def _fan(levels: int) -> dict[str, Any]:
    """Each level's `$ref` used twice: 2^levels paths through a schema of 2 x levels nodes."""
    defs: dict[str, Any] = {f"d{levels}": {"type": "string"}}
    for i in range(levels):
        nxt = {"$ref": f"#/$defs/d{i + 1}"}
        defs[f"d{i}"] = {"anyOf": [nxt, {"allOf": [nxt]}]}
    return {"type": "object", "$defs": defs, "properties": {"a": {"$ref": "#/$defs/d0"}}}


def _nested_any_of(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        node = {"anyOf": [node]}
    return _object({"a": node})


CASES: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "enum 10k": lambda: [_tool("f", _object({"a": {"enum": [f"v{i}" for i in range(10_000)]}}))],
    "128 tools x 20 params": lambda: [
        _tool(f"t{i}", _object({f"p{j}": {"type": "string"} for j in range(20)})) for i in range(128)
    ],
    "2000 optional params": lambda: [_tool("f", _object({f"p{j}": {"type": "integer"} for j in range(2000)}))],
    "1000 integer params": lambda: [
        _tool("f", _object({f"p{j}": {"type": "integer"} for j in range(1000)}, [f"p{j}" for j in range(1000)]))
    ],
    "anyOf of 500 objects": lambda: [
        _tool("f", _object({"a": {"anyOf": [_object({f"x{i}": {"type": "string"}}) for i in range(500)]}}))
    ],
    "anyOf nested 18": lambda: [_tool("f", _nested_any_of(18))],
    "$ref fan 18 levels": lambda: [_tool("f", _fan(18))],
    "500 patterns": lambda: [
        _tool("f", _object({f"p{j}": {"type": "string", "pattern": "^[a-z]{1,8}(x|y)*$"} for j in range(500)}))
    ],
    "500 distinct patterns": lambda: [
        _tool("f", _object({f"p{j}": {"type": "string", "pattern": f"^[a-z]{{1,8}}(x|y{j})*$"} for j in range(500)}))
    ],
    "16x16 arrays, 50 KB enum": lambda: [_tool("f", _object({"a": _array(_array({"enum": ["y" * 50_000]}))}))],
    "nesting 60": lambda: [_tool("f", _nested_objects(60))],
    "200 $ref params, 40 levels": lambda: [_tool("f", _ref_chain_parameters(200, 40))],
}


def _ref_chain_parameters(parameters: int, levels: int) -> dict[str, Any]:
    """`parameters` parameters (each with its own description) of one definition that nests `levels` objects deep
    through `$defs`."""
    defs: dict[str, Any] = {f"d{levels}": {"type": "integer"}}
    for i in range(levels):
        defs[f"d{i}"] = _object({"v": {"type": "integer"}, "next": {"$ref": f"#/$defs/d{i + 1}"}}, ["v"])
    properties = {f"p{j}": {"$ref": "#/$defs/d0", "description": f"parameter {j}"} for j in range(parameters)}
    return {**_object(properties, [f"p{j}" for j in range(parameters)]), "$defs": defs}


def _nested_objects(levels: int) -> dict[str, Any]:
    node: dict[str, Any] = {"type": "string"}
    for i in range(levels):
        node = _object({f"k{i}": node})
    return node


def _kimi_family() -> Any:
    """Kimi K3's family on tests/test_kimi_grammar.py's synthetic checkpoint (control ids, think channel)."""
    from backends.kimi_tokenizer import load_kimi_tokenizer
    from gateway.families.kimi.grammar import ControlIds, build_grammar
    from tests.test_kimi_grammar import synthetic_vocab

    directory = Path(tempfile.mkdtemp())
    ids: ControlIds = synthetic_vocab(directory)[2]

    class Kimi:
        tokenizer = load_kimi_tokenizer(directory)

        def grammar(self, request: ChatRequest, prompt: str) -> Any:
            return build_grammar(request, "think", ids)

    return Kimi()


def _families(only: list[str]) -> list[tuple[str, Callable[[], Any]]]:
    """Each family of family_grammar_bench once (its tool_choice "auto" row where it has one), and Kimi K3."""
    rows: dict[type, tuple[str, Callable[[], Any], str]] = {}
    for label, load, family_class, stop, request in FAMILIES:
        if "bounds" not in label and (family_class not in rows or request.tool_choice == "auto"):
            rows[family_class] = (label.replace(" auto", "").replace(" required", ""), load, stop)
    picked: list[tuple[str, Callable[[], Any]]] = []
    for family_class, (label, load, stop) in rows.items():
        if not only or any(w in label for w in only):

            def make(load: Callable[[], Any] = load, family_class: type = family_class, stop: str = stop) -> Any:
                tokenizer = load()
                return family_class(FamilyContext(tokenizer, None, None, stop, [tokenizer.token_to_id(stop)], []))

            picked.append((label, make))
    if not only or any(w in "kimi_k3" for w in only):
        picked.append(("kimi_k3 (synthetic)", _kimi_family))
    return picked


def _compiler(family: Any) -> xg.GrammarCompiler:
    """One thread, no cache, on the family's vocabulary (every token as text, as SGLang's and vLLM's)."""
    tokenizer = family.tokenizer if hasattr(family, "tokenizer") else family.context.tokenizer
    strings = [tokenizer.id_to_token(i) or "" for i in range(tokenizer.get_vocab_size())]
    return xg.GrammarCompiler(xg.TokenizerInfo(strings, xg.VocabType.BYTE_LEVEL), max_threads=1, cache_enabled=False)


def _compiled(compiler: xg.GrammarCompiler, grammar: Any) -> str:
    started = time.process_time()
    if grammar.kind == "structural_tag":
        compiler.compile_structural_tag(grammar.text)
    else:
        compiler.compile_grammar(grammar.text)
    return f" / compile {(time.process_time() - started) * 1000:,.0f} ms"


def _cell(family: Any, tools: list[dict[str, Any]], limit: int, out: Any, compiler: Any = None) -> None:
    resource.setrlimit(resource.RLIMIT_CPU, (int(time.process_time()) + limit, resource.RLIM_INFINITY))
    request = ChatRequest(messages=[{"role": "user", "content": "x"}], tools=tools, tool_choice="required")
    tracemalloc.start()
    started = time.process_time()
    grammar = None
    try:
        grammar = family.grammar(request, "")
        size = f"{len(grammar.text) / 1000:,.0f} KB" if grammar else "none"
    except Exception as e:  # noqa: BLE001 - the exception is the cell's answer
        size = type(e).__name__
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()
    cell = f"{(time.process_time() - started) * 1000:,.0f} ms / {size} / {peak:,.1f} MB"
    if compiler is not None and grammar is not None:
        out.send(cell + " (build too long to compile)")  # what is left when the compile runs past the limit
        cell += _compiled(compiler, grammar)
    out.send(cell)


def _run_cell(family: Any, tools: list[dict[str, Any]], limit: int, compiler: Any = None) -> str:
    ours, theirs = multiprocessing.Pipe()
    child = multiprocessing.get_context("fork").Process(target=_cell, args=(family, tools, limit, theirs, compiler))
    child.start()
    child.join()
    answer = None
    while ours.poll():
        answer = ours.recv()
    if answer is None:
        return f"> {limit} s"
    return answer.replace(" (build too long to compile)", f" / compile > {limit} s in all")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=10, help="CPU seconds a cell may take")
    parser.add_argument("--only", action="append", default=[], help="families whose label contains this")
    parser.add_argument("--case", action="append", default=[], help="cases whose name contains this")
    parser.add_argument("--compile", action="store_true", help="also compile each grammar on the vocabulary")
    args = parser.parse_args()
    cases = [name for name in CASES if not args.case or any(w in name for w in args.case)]
    families = [(label, make()) for label, make in _families(args.only)]
    compilers = {label: _compiler(f) if args.compile else None for label, f in families}
    print("| case | " + " | ".join(label for label, _ in families) + " |")
    print("|---" * (len(families) + 1) + "|")
    for name in cases:
        tools = CASES[name]()
        print(
            f"| {name} | "
            + " | ".join(_run_cell(f, tools, args.limit, compilers[label]) for label, f in families)
            + " |",
            flush=True,
        )


if __name__ == "__main__":
    main()
