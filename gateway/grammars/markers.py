"""A family's markers in a structural tag: the added token by id where the served vocabulary has one, else text.

A marker written as text (`const_string`, a tag's string `begin`) is also satisfied by its spelling in ordinary
tokens (`<`, `tool`, `_call`, `>`), which a token-aware parser reads as text; a `token` format by id takes only the
added token; so does `Token(id)` in EBNF (`in_ebnf`, for markers inside an EBNF body). Ids, not token strings: vLLM
validates structural tags without a tokenizer and accepts only ids. It also carries what an argument value must not
spell (`values_exclude`): a text region cannot tell a control token from its spelling (`gateway.grammars.safe_json`);
and the vocabulary's other special tokens (`specials`: stop, role and unused ones), which no free text holds.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from gateway.grammars.safe_json import added_spellings, special_ids

Format = dict[str, Any]


@dataclass(frozen=True)
class MarkerTokens:
    """The ids of the markers that the served vocabulary has as added tokens (one token each), the whole
    spellings no argument value may hold (the markers' and the vocabulary's special added tokens'), and the ids of
    the special added tokens that are no marker (free text and reasoning hold none)."""

    ids: Mapping[str, int] = field(default_factory=dict)
    values_exclude: tuple[str, ...] = ()
    specials: frozenset[int] = frozenset()

    @classmethod
    def of(cls, tokenizer: Any, spellings: Iterable[str]) -> MarkerTokens:
        """The added-token ids of `spellings` in a `tokenizers.Tokenizer` (a spelling it lacks is left out), and
        what values exclude: `spellings` (as text where they are not tokens) and the special added tokens; the
        special added tokens that are none of `spellings`."""
        added = {t.content: i for i, t in tokenizer.get_added_tokens_decoder().items()}
        spellings = frozenset(spellings)
        ids = {s: added[s] for s in spellings if s in added}
        return cls(ids, added_spellings(tokenizer, spellings), special_ids(tokenizer) - set(ids.values()))

    def token(self, spelling: str) -> Format | None:
        """The `token` format of `spelling`, or None when the vocabulary has no added token for it."""
        token_id = self.ids.get(spelling)
        return None if token_id is None else {"type": "token", "token": token_id}

    def format(self, spelling: str) -> Format:
        """`spelling` as its token where there is one, else as text."""
        return self.token(spelling) or {"type": "const_string", "value": spelling}

    def in_ebnf(self, ebnf: str, spellings: Iterable[str]) -> str:
        """`ebnf` (xgrammar's printed EBNF) with each of `spellings` that has a token, where a string literal holds
        it, as that token (`Token(id)`); strings inside `TagDispatch(…)` (its excludes and triggers) stay text."""
        tokens = tuple((s, self.ids[s]) for s in spellings if s in self.ids)
        return _tokens_in_ebnf(ebnf, tokens) if tokens else ebnf


@lru_cache(maxsize=1024)
def _tokens_in_ebnf(ebnf: str, tokens: tuple[tuple[str, int], ...]) -> str:
    ids = dict(tokens)
    split = re.compile("(" + "|".join(re.escape(s) for s in sorted(ids, key=len, reverse=True)) + ")")
    out: list[str] = []
    depth = 0  # parentheses open inside a TagDispatch call
    for piece in _EBNF_PIECES.findall(ebnf):
        if depth:
            depth += {"(": 1, ")": -1}.get(piece, 0)
        elif piece == "TagDispatch(":
            depth = 1
        elif piece.startswith('"') and len(piece) > 1 and split.search(piece):
            parts = [f"Token({ids[p]})" if p in ids else f'"{p}"' for p in split.split(piece[1:-1]) if p]
            piece = "(" + " ".join(parts) + ")"
        out.append(piece)
    return "".join(out)


_EBNF_PIECES = re.compile(r'"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|TagDispatch\(|[()]|[^"\[()T]+|.', re.DOTALL)
"""xgrammar's EBNF in pieces: string literals, character classes, `TagDispatch(`, parentheses, the rest."""

TEXT_MARKERS = MarkerTokens()
"""Every marker as text (a vocabulary without the markers' added tokens)."""
