"""Structural-tag formats written as one EBNF grammar, each distinct embedded grammar in it once.

A structural tag has no references: a value grammar used by many parameters (a tool's 1,000 integer parameters,
200 parameters of one `$ref`) is a copy in each `grammar` format that holds it, each parsed by the backend's
xgrammar (DeepSeek V4.1's 1,000 integers: 4.5 MB of grammar, ~0.8 s to compile on its vocabulary). Written here
as one EBNF, the parts are the same expressions xgrammar's structural-tag conversion writes for them (`Token(…)` and
`ExcludeToken(…)`, which every pinned xgrammar parses since 0.1.33, `TagDispatch(…)`, `*`, `+`, `?`), and each
distinct embedded grammar is one set of rules (renamed `g<n>_…`) that every use refers to: the grammar grows by a
reference per use, not a copy. Equal rule bodies are one rule, each star / plus is a rule of a rule, as that
conversion writes them, and each optional one rule `("" | x)` (inline, xgrammar compiles them slower: see
`_written`).

Formats written: const_string, token, exclude_token, any_tokens, any_text (`excludes`), sequence, or, optional,
star, plus, regex, grammar, dispatch (`rules`, `loop`, `excludes`).
"""

from __future__ import annotations

import json
from typing import Any

from gateway.grammars.ebnf_rules import RULE_NAME, prefixed_rules
from gateway.grammars.safe_json import regex_grammar

Format = dict[str, Any]

_SHARED_KINDS = frozenset(
    {"sequence", "or", "optional", "star", "plus", "any_tokens", "exclude_token", "any_text", "dispatch"}
)
"""Formats written once as a rule where the same object is used again (a token or a literal is short to repeat)."""
_REPEATS = {"optional": "?", "star": "*", "plus": "+"}


class EbnfWriter:
    """Formats to one EBNF grammar (`grammar`); each distinct embedded grammar text is written once."""

    def __init__(self) -> None:
        self._rules: list[str] = []
        self._embedded: dict[str, str] = {}
        self._named_formats: dict[int, str] = {}
        self._bodies: dict[str, str] = {}

    def grammar(self, fmt: Format) -> str:
        """The EBNF whose `root` is `fmt`. A format object found more than once in it (one invoke in a call and in
        the calls after it; the shared tails of a chain) is one rule, written before the formats that hold it, so
        a chain of shared formats n long is n rules, never n nested expressions or Python calls."""
        shared = _shared_in_post_order(fmt)
        for node in shared:
            self._named_formats[id(node)] = self._add_rule(self._written(node))
        root = self.expression(fmt)
        return "\n".join([f"root ::= {root}", *self._rules]) + "\n"

    def expression(self, fmt: Format) -> str:
        """An EBNF expression for `fmt` (rules it needs are added)."""
        return self._named_formats.get(id(fmt)) or self._written(fmt)

    def _written(self, fmt: Format) -> str:
        kind = fmt["type"]
        if kind == "const_string":
            return _literal(fmt["value"])
        if kind in ("token", "exclude_token"):
            ids = [fmt["token"]] if kind == "token" else fmt["exclude_tokens"]
            return f"{'Token' if kind == 'token' else 'ExcludeToken'}({', '.join(str(int(i)) for i in ids)})"
        if kind == "any_tokens":  # a rule, one per distinct set: each use inline compiled on its own (Kimi: +20 %)
            return self._add_rule(f"(ExcludeToken({', '.join(str(int(i)) for i in fmt['exclude_tokens'])}))*")
        if kind == "sequence":
            return "(" + " ".join(self.expression(e) for e in fmt["elements"]) + ")"
        if kind == "or":
            return "(" + " | ".join(self.expression(e) for e in fmt["elements"]) + ")"
        if kind == "optional":
            # a rule `"" | x`: inline in a sequence, many `(…)?` compile in time growing with their square; `x`
            # not a rule of its own, as the structural tag's conversion writes it (a rule of a rule): each rule adds
            # to the cost of every token mask xgrammar computes (DeepSeek's 2,000 optional parameters: 1.5 -> 0.8 s)
            return self._add_rule(f'("" | {self.expression(fmt["content"])})')
        if kind in ("star", "plus"):
            # each a rule of a rule, as the structural tag's conversion writes them: xgrammar writes `(x)+` as
            # `x r | x` (x twice)
            content = self.expression(fmt["content"])
            if not RULE_NAME.fullmatch(content):
                content = self._add_rule(content)
            return self._add_rule(f"({content}){_REPEATS[kind]}")
        if kind == "grammar":
            return self._embed(fmt["grammar"])
        if kind == "regex":
            return self._embed(regex_grammar(fmt["pattern"]))
        if kind in ("any_text", "dispatch"):
            return self._dispatch(fmt)
        raise ValueError(f"no EBNF for the structural-tag format {kind!r}")

    def _dispatch(self, fmt: Format) -> str:
        """A TagDispatch rule: `any_text` (no tags, no loop) or `dispatch` (tags, each then its format)."""
        tags = [f"({_literal(tag)}, {self._named(rule)})" for tag, rule in fmt.get("rules", [])]
        loop = "true" if fmt.get("loop", True) and fmt["type"] == "dispatch" else "false"
        excludes = ", ".join(_literal(s) for s in fmt.get("excludes", []))
        parts = [*tags, f"loop_after_dispatch={loop}", *([f"excludes=({excludes})"] if excludes else [])]
        return self._add_rule(f"TagDispatch({', '.join(parts)})")

    def _named(self, fmt: Format) -> str:
        """A rule name for `fmt` (a TagDispatch's tag takes a rule, not an expression)."""
        if fmt["type"] in ("grammar", "regex"):
            return self.expression(fmt)
        return self._add_rule(self.expression(fmt))

    def _add_rule(self, body: str) -> str:
        """A rule for `body`; an equal body already written is that rule (each string value's raw text, built
        afresh per parameter, is one TagDispatch: each costs a pass over the vocabulary to compile)."""
        if body not in self._bodies:
            self._bodies[body] = f"r{len(self._rules)}"
            self._rules.append(f"{self._bodies[body]} ::= {body}")
        return self._bodies[body]

    def _embed(self, ebnf: str) -> str:
        """The root rule of `ebnf`'s rules, renamed and written once per distinct text."""
        if ebnf not in self._embedded:
            prefix = f"g{len(self._embedded)}_"
            self._rules.append(prefixed_rules(ebnf, prefix).strip())
            self._embedded[ebnf] = prefix + "root"
        return self._embedded[ebnf]


def _shared_in_post_order(fmt: Format) -> list[Format]:
    """The format objects of `_SHARED_KINDS` found more than once in `fmt`, each after every shared one it holds
    (each object walked once, without recursion)."""
    seen: set[int] = set()
    again: set[int] = set()
    order: list[Format] = []
    stack: list[tuple[Format, bool]] = [(fmt, False)]
    while stack:
        node, finished = stack.pop()
        if finished:
            order.append(node)
            continue
        if id(node) in seen:
            again.add(id(node))
            continue
        seen.add(id(node))
        stack.append((node, True))
        children = [node["content"]] if "content" in node else node.get("elements", [])
        stack += [(child, False) for child in [*children, *(rule for _, rule in node.get("rules", []))]]
    return [node for node in order if id(node) in again and node["type"] in _SHARED_KINDS]


def _literal(text: str) -> str:
    """An EBNF string literal (JSON's escapes, which xgrammar's EBNF reads)."""
    return json.dumps(text, ensure_ascii=False)
