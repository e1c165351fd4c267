"""Added-token shielding: text a client writes can never become a control token.

Before rendering, every added-token spelling (in any letter case, which a template's `lower`
or `upper` could turn into the spelling) inside client-written strings
(message content, reasoning, names, tool results, tool-call arguments and keys,
tool definitions) is replaced by a marker `@GW<nonce>:<n>@`, one marker per
distinct spelling, so equal client strings stay equal for the template. So is
a string's open end: its longest tail that begins a spelling (`</think` of a key
the template closes with `>`, `<|im_` of a system message the template joins to
the next one), since the template may complete it into a spelling. The
nonce is random per request and re-drawn until no request string contains its
prefix, so a client who types marker syntax gets plain text back. A vocabulary with
an added token that such a marker could hold or reach across (`@`, `:0@`) gets
markers of Private Use characters instead (`MarkerSyntax.safe_for`). After
rendering, the encoder cuts only at spellings the template wrote; markers are
spelled back inside the plain-text regions between cuts, which are encoded with
no added token matched. A marked string (`Marked`) still sorts as the client's own
string, so an encoder that sorts keys gives the order, and the prompt, of the client's strings;
a marker a template upper- or lower-cased comes back as its spelling so cased.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any, Self

import orjson

from gateway.types import ChatRequest

_ASSISTANT_KEEP_FIELDS = ("content", "reasoning_content")
_JSON_ESCAPED = re.compile(r'[\x00-\x1f"\\]')
"""Characters a JSON dump (orjson) writes as escapes; every other character is written as itself."""


def spelling_pattern(spellings: Iterable[str], ignore_case: bool = False) -> re.Pattern[str] | None:
    """A regex finding `spellings` leftmost first, the longest one at a position; None for none.

    Built as a trie (shared prefixes written once), so a scan costs about the same
    for thousands of spellings as for a few.
    """
    trie: dict[str, dict] = {}
    for spelling in set(spellings):
        if spelling:
            node = trie
            for char in spelling:
                node = node.setdefault(char, {})
            node[""] = {}
    return re.compile(_trie_regex(trie), re.IGNORECASE if ignore_case else 0) if trie else None


def _trie_regex(node: dict[str, dict]) -> str:
    """The regex of a trie node; a spelling that ends here is tried after every longer one."""
    branches = [re.escape(char) + _trie_regex(child) for char, child in node.items() if char]
    ends_here = "" in node
    if not branches:
        return ""
    if len(branches) == 1 and not ends_here:
        return branches[0]
    return "(?:" + "|".join(branches) + ("|)" if ends_here else ")")


@dataclass(frozen=True)
class MarkerSyntax:
    """How markers are written: `{open}{nonce}{sep}{number}{close}`, the nonce 16 of `digits`, the number in their
    first ten. Safe for a vocabulary when no spelling can match within a marker or across its edges."""

    open: str
    sep: str
    close: str
    digits: str

    def prefix(self) -> str:
        """A new random prefix: `open`, the nonce, `sep`; the nonce holds a letter where the digits have letters, so
        a marker a template upper-cased shows it (an all-digit nonce was the same upper-cased, and came back uncased)."""
        while True:
            nonce = secrets.token_hex(8).translate(self._from_hex)
            if nonce.upper() != nonce or self.digits.upper() == self.digits:
                return self.open + nonce + self.sep

    @cached_property
    def _from_hex(self) -> dict[int, str]:
        """Each hex digit's character among `digits` (a table for `str.translate`: one call per nonce, not an
        `int(c, 16)` per character)."""
        return {ord(c): self.digits[i] for i, c in enumerate("0123456789abcdef")}

    def number(self, n: int) -> str:
        return "".join(self.digits[int(c)] for c in str(n)) + self.close

    def pattern(self, prefix: str) -> re.Pattern[str]:
        """Markers of `prefix`, also as a template's `upper` or `lower` wrote them."""
        digits = re.escape(self.digits[:10])
        return re.compile(re.escape(prefix) + f"([{digits}]+)" + re.escape(self.close), re.IGNORECASE)

    def index(self, number: str) -> int:
        return int(number.translate({ord(c): str(i) for i, c in enumerate(self.digits[:10])}))

    def safe_for(self, spellings: Iterable[str]) -> bool:
        """No spelling holds an edge character (`open`'s first, `close`): none can reach across a marker's edge;
        and none is made of the inner characters alone: none can lie within one."""
        edges = {self.open[0], self.close}
        inner = set(self.open[1:] + self.sep + self.digits)
        return not any(edges & set(s) or set(s) <= inner for s in spellings)


ASCII_MARKERS = MarkerSyntax("@GW", ":", "@", "0123456789abcdef")
"""`@GW<nonce>:<n>@`: kept through JSON escaping (a template's `tojson`, ASCII-only or not) and attribute escaping."""
PRIVATE_MARKERS = MarkerSyntax("\ue000", "\ue001", "\ue002", "".join(map(chr, range(0xE010, 0xE020))))
"""For a vocabulary with an added token that ASCII markers could hold (`@`, a digit, `a`): Private Use characters."""


@dataclass
class Shield:
    """The markers one request's strings were given, and how to spell them back."""

    prefix: str
    originals: list[str]
    syntax: MarkerSyntax = ASCII_MARKERS

    @cached_property
    def _pattern(self) -> re.Pattern[str]:
        return self.syntax.pattern(self.prefix)

    @cached_property
    def _prefixes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((self.prefix, self.prefix.upper(), self.prefix.lower())))

    def restore(self, text: str) -> str:
        """`text` with every marker replaced by the spelling it hides (upper- or lower-cased where a template's
        `upper` or `lower` cased the marker)."""
        if not self.originals or not any(p in text for p in self._prefixes):
            return text
        return self._pattern.sub(self._spelled, text)

    def _spelled(self, found: re.Match[str]) -> str:
        n = self.syntax.index(found.group(1))
        original, marker = self.originals[n], self.prefix + self.syntax.number(n)
        if found.group() == marker:
            return original
        if found.group() == marker.upper():
            return original.upper()
        return original.lower() if found.group() == marker.lower() else original


class Marked(str):
    """A client string with markers in place of its spellings, which compares for order as the client's own string:
    an encoder or template that sorts keys (Kimi K3's tool declaration) orders them as for the client's strings, not
    by the marker's random nonce."""

    original: str

    def __new__(cls, marked: str, original: str) -> Self:
        text = super().__new__(cls, marked)
        text.original = original
        return text

    def __getnewargs__(self) -> tuple[str, str]:  # copies and pickles
        return str(self), self.original

    def lower(self) -> Marked:  # Jinja's `lower`, and its `sort` / `dictsort`, which ignore case
        return Marked(str.lower(self), self.original.lower())

    def upper(self) -> Marked:
        return Marked(str.upper(self), self.original.upper())

    def __lt__(self, other: object) -> bool:
        return self.original < _original(other) if isinstance(other, str) else NotImplemented

    def __le__(self, other: object) -> bool:
        return self.original <= _original(other) if isinstance(other, str) else NotImplemented

    def __gt__(self, other: object) -> bool:
        return self.original > _original(other) if isinstance(other, str) else NotImplemented

    def __ge__(self, other: object) -> bool:
        return self.original >= _original(other) if isinstance(other, str) else NotImplemented


def _original(text: str) -> str:
    return text.original if isinstance(text, Marked) else text


class _PrefixTaken(Exception):
    """A request string holds the drawn marker prefix: draw another."""


class Shielder:
    """Replaces added-token spellings in client strings by markers, for one tokenizer."""

    def __init__(self, spellings: Iterable[str]):
        spellings = set(spellings)
        # Spellings in any case: a template's `lower` or `upper` could make one of a case variant.
        self._spelling = spelling_pattern(spellings, ignore_case=True)
        self._openings = {s[:k].lower() for s in spellings for k in range(1, len(s))}
        """Every proper prefix of a spelling: what a string may end with that text after it could complete."""
        self._longest_opening = max(map(len, self._openings), default=0)
        # In a JSON dump, a spelling, or a string that ends with an opening (the opening, then the closing quote).
        self._in_dump = spelling_pattern(spellings | {opening + '"' for opening in self._openings}, ignore_case=True)
        # A JSON dump spells out every spelling its strings hold unless a spelling has a char JSON escapes.
        self._dump_holds_spellings = not any(_JSON_ESCAPED.search(s) for s in spellings)
        self.syntax = next((m for m in (ASCII_MARKERS, PRIVATE_MARKERS) if m.safe_for(spellings)), None)
        if self.syntax is None:
            raise ValueError("no marker syntax is safe for this vocabulary's added tokens")
        self._unmarked = Shield("", [], self.syntax)
        """The Shield of every request whose strings spell nothing: no marker, no prefix (one, never changed)."""

    def shield(
        self, request: ChatRequest, keep_in_assistant: frozenset[str] = frozenset()
    ) -> tuple[ChatRequest, Shield]:
        """`request` with client strings that spell no added token (itself when none does), and its Shield. A
        request whose strings spell nothing gets no marker, so no prefix is drawn for it."""
        if self._spells_nothing((request.messages, request.tools, request.response_format, request.template_kwargs)):
            return request, self._unmarked
        while True:
            try:
                return self._shield(request, keep_in_assistant, self.syntax.prefix())
            except _PrefixTaken:
                continue

    def _shield(
        self, request: ChatRequest, keep_in_assistant: frozenset[str], prefix: str
    ) -> tuple[ChatRequest, Shield]:
        markers: dict[str, str] = {}

        def marker(spelling: str) -> str:
            found = markers.get(spelling)
            if found is None:
                found = markers[spelling] = prefix + self.syntax.number(len(markers))
            return found

        def mark(text: str, keep: frozenset[str] = frozenset()) -> str:
            if prefix in text:
                raise _PrefixTaken
            if self._spelling is None:
                return text
            end = self._open_end(text)
            body = self._spelling.sub(lambda m: m.group() if m.group() in keep else marker(m.group()), text[:end])
            marked = body + marker(text[end:]) if end < len(text) else body
            return text if marked == text else Marked(marked, text)

        def deep(value: Any) -> Any:
            if isinstance(value, str):
                return mark(value)
            if isinstance(value, dict):
                marked = {mark(k) if isinstance(k, str) else k: deep(v) for k, v in value.items()}
                return marked if type(value) is dict else type(value)(marked)  # (UndeclaredParameters stays one)
            if isinstance(value, list):
                return [deep(v) for v in value]
            return value

        messages = []
        for message in request.messages:
            keep = keep_in_assistant if message.get("role") == "assistant" else frozenset()
            out = {}
            for key, value in message.items():
                if key == "role":
                    out[key] = value
                elif key in _ASSISTANT_KEEP_FIELDS and isinstance(value, str):
                    out[key] = mark(value, keep)
                else:
                    out[key] = deep(value)
            messages.append(out)
        shielded = replace(
            request,
            messages=messages,
            tools=deep(request.tools),
            response_format=deep(request.response_format),
            template_kwargs=deep(request.template_kwargs),
        )
        return shielded, Shield(prefix, list(markers), self.syntax)

    def _open_end(self, text: str) -> int:
        """Where `text`'s longest tail that is a proper prefix of a spelling starts; len(text) when none is."""
        for length in range(min(self._longest_opening, len(text)), 0, -1):
            if text[-length:].lower() in self._openings:
                return len(text) - length
        return len(text)

    def _spells_nothing(self, value: Any) -> bool:
        """Whether no string in `value` can hold an added-token spelling, from one scan of its JSON dump."""
        if not self._dump_holds_spellings:
            return False
        try:
            dump = orjson.dumps(value).decode()
        except orjson.JSONEncodeError:  # e.g. a non-str key, an int past 64 bits, a lone surrogate
            return False
        return self._in_dump is None or self._in_dump.search(dump) is None
