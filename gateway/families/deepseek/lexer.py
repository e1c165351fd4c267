"""Output pieces → events: text (a `str`), DSML tags and control tokens.

A DSML tag is `<` or `</`, then the `｜DSML｜` token, then text up to `>`
(outside quotes). The marker counts only when it arrives as its token: text
that merely spells `｜DSML｜` stays text. A trailing `<` / `</` is held until
the next piece says whether a tag starts; a tag that does not close within
`MAX_TAG_BODY` characters, or is interrupted by another token, is text again.
The end-of-sentence token is no event.
"""

from __future__ import annotations

from dataclasses import dataclass

from gateway.types import Piece

from .markers import DSML, EOS

MAX_TAG_BODY = 1024
_HOLDS = ("<", "/")
"""A piece's last character that may leave a `<` or `</` to hold (checked before the exact suffixes)."""


@dataclass(frozen=True)
class Token:
    """A control token other than the DSML marker, by spelling."""

    text: str


@dataclass(frozen=True)
class Tag:
    """`<｜DSML｜body>` or (closing) `</｜DSML｜body>`; `raw` is its exact spelling."""

    closing: bool
    body: str
    raw: str

    @property
    def name(self) -> str:
        """The tag name: `calls`, `tool_calls`, `invoke`, `parameter`, …"""
        words = self.body.split(None, 1)
        return words[0].rstrip("/") if words else ""

    @property
    def self_closing(self) -> bool:
        return self.body.rstrip().endswith("/")


Event = str | Token | Tag
"""Plain text is a `str` event (one per output token: building an event object cost ~1.4 K instructions a token)."""


class Lexer:
    """Turns pieces into events, holding back only what could still start or continue a tag."""

    def __init__(self) -> None:
        self._held = ""  # a trailing "<" or "</"
        self._tag: list[str] | None = None  # [opener, body] while a tag is being read

    def feed(self, piece: Piece) -> list[Event]:
        """The events `piece` completes (a list, not a generator: one is made per output token)."""
        text = piece.text
        if piece.token_id is None and not self._held and self._tag is None and text[-1:] not in _HOLDS:
            return [text] if text else []  # most pieces: text with no tag open and none to hold
        events: list[Event] = []
        if piece.token_id is not None:
            self._token(text, events)
        else:
            self._text(text, events)
        return events

    def finish(self) -> list[Event]:
        events: list[Event] = []
        self._release(events)
        return events

    def _token(self, spelling: str, events: list[Event]) -> None:
        if spelling == DSML and self._held and self._tag is None:
            self._tag = [self._held + DSML, ""]
            self._held = ""
            return
        self._release(events)
        if spelling != EOS:  # the end of the output is no event (it only releases what is held)
            events.append(Token(spelling) if spelling != DSML else spelling)

    def _text(self, text: str, events: list[Event]) -> None:
        if self._tag is not None:
            opener, body = self._tag
            end = _tag_end(body, text)
            if end is None:
                body += text
                if len(body) <= MAX_TAG_BODY:
                    self._tag[1] = body
                    return
                self._tag = None
                text = opener + body
            else:
                self._tag = None
                body += text[:end]
                events.append(Tag(opener.startswith("</"), body, f"{opener}{body}>"))
                text = text[end + 1 :]
        text = self._held + text
        self._held = ""
        for suffix in ("</", "<"):
            if text.endswith(suffix):
                text, self._held = text[: -len(suffix)], suffix
                break
        if text:
            events.append(text)

    def _release(self, events: list[Event]) -> None:
        pending = self._held + ("".join(self._tag) if self._tag is not None else "")
        self._held, self._tag = "", None
        if pending:
            events.append(pending)


def _tag_end(body: str, text: str) -> int | None:
    """Index in `text` of the `>` that closes a tag whose body so far is `body`."""
    quoted = body.count('"') % 2 == 1
    for index, char in enumerate(text):
        if char == '"':
            quoted = not quoted
        elif char == ">" and not quoted:
            return index
    return None
