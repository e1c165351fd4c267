"""A JSON object's free names never spell a declared name with an escape.

xgrammar 0.2.9 writes an object's free names (`additionalProperties` or `unevaluatedProperties` a schema or `true`
beside `properties`) as a trie of the declared names whose nodes refuse a declared name written plainly but take
any escape (`\\"`, `\\\\`, `\\/`, `\\b`…, `\\uXXXX` of any hex): `{"properties": {"a": {"type": "string"}},
"additionalProperties": {"type": "integer"}}` took `{"\\u0061": 1}`, which JSON reads as `{"a": 1}`. Here each
trie node that a declared name continues from (a literal branch) loses its escape: a free name is written plainly
while it follows a declared name's first characters, and may escape a character only once it has left them (or
is a whole declared name no other one extends). A narrowing: a free name whose first characters (or those within
a declared name's) need an escape (`"`, `\\`, a control character) is not written; any other is, as before.
"""

from __future__ import annotations

import re

_TRIE_NODE = re.compile(r"^(\S+_addl_key_\d+) ::= (.*)$", re.MULTILINE)
_BRANCH = re.compile(r'\("(?:[^"\\]|\\.)+" \S+_addl_key_\d+\)')
_ESCAPE = ' | ("\\\\" basic_escape basic_string_sub)'


def plain_free_names(ebnf: str) -> str:
    """xgrammar's JSON `ebnf` with no escape at a free-name trie node that a declared name branches from."""

    def plain(rule: re.Match[str]) -> str:
        if not _BRANCH.search(rule[2]) or _ESCAPE not in rule[2]:
            return rule[0]
        return f"{rule[1]} ::= {rule[2].replace(_ESCAPE, '', 1)}"

    return _TRIE_NODE.sub(plain, ebnf)
