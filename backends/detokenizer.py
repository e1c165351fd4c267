"""Incremental detokenization of output ids into Pieces: the gateway's and the bundled worker's one detokenizer.

Added (control) tokens become their own Piece, spelled exactly, with token_id
set. Ordinary tokens are decoded with prefix offsets: the text of the window
[prefix, end) minus the text of [prefix, read) is what the new tokens add, and
it is emitted only once it does not end in U+FFFD, so a character whose UTF-8
bytes span several tokens is never emitted broken. The window restarts after
every emission, so each token costs O(1). After an added token the window
starts with that token as its prefix, so the text after it reads as in a decode
of the whole output (SentencePiece strips the leading space of an output's
first piece only, not of the first piece after `[TOOL_CALLS]`). Output that is
not UTF-8 at all is released as U+FFFD after MAX_HELD_TOKENS tokens and
decoding starts afresh.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from tokenizers import Tokenizer

_REPLACEMENT = "\ufffd"


@dataclass(frozen=True)
class Piece:
    """A run of detokenized output text; `token_id` is set when the piece is one added/control token."""

    text: str
    token_id: int | None = None

MAX_HELD_TOKENS = 4
"""A UTF-8 character has at most 4 bytes: a tail still broken after this many tokens is invalid output, not a split."""


class Detokenizer:
    """Turns one choice's output ids into Pieces, in order, as soon as their text is certain."""

    def __init__(self, tokenizer: Tokenizer, added: Mapping[int, str]):
        self._tokenizer = tokenizer
        self._added = added
        self._window: list[int] = []
        self._read = 0  # window[:read] is already emitted; window[0] starts at a character boundary

    def feed(self, ids: Iterable[int]) -> list[Piece]:
        """Pieces that the new ids complete; adjacent text is merged into one Piece."""
        out: list[Piece] = []
        for token_id in ids:
            spelling = self._added.get(token_id)
            if spelling is None:
                self._window.append(token_id)
                _append_text(out, self._decode_new(force=False))
            else:
                _append_text(out, self._decode_new(force=True))
                out.append(Piece(spelling, token_id))
                self._window.append(token_id)  # the context the next text is decoded in, never emitted
                self._read = 1
        return out

    def flush(self) -> list[Piece]:
        """The output has ended: whatever text is held back, broken characters included."""
        out: list[Piece] = []
        _append_text(out, self._decode_new(force=True))
        return out

    def _decode_new(self, force: bool) -> str:
        if self._read == len(self._window):
            if force:
                self._window.clear()
                self._read = 0
            return ""
        decode = self._tokenizer.decode
        prefix = decode(self._window[: self._read], skip_special_tokens=False) if self._read else ""
        full = decode(self._window, skip_special_tokens=False)
        held = len(self._window) - self._read
        if not force and held < MAX_HELD_TOKENS and (full.endswith(_REPLACEMENT) or len(full) <= len(prefix)):
            return ""
        new = full[len(prefix) :]
        if force or held >= MAX_HELD_TOKENS:  # a broken tail is a hard boundary: decode anew after it
            self._window.clear()
            self._read = 0
        else:
            del self._window[: self._read]
            self._read = len(self._window)
        return new


def _append_text(out: list[Piece], text: str) -> None:
    if not text:
        return
    if out and out[-1].token_id is None:
        out[-1] = Piece(out[-1].text + text)
    else:
        out.append(Piece(text))


def added_tokens(tokenizer: Tokenizer) -> tuple[dict[int, str], frozenset[int]]:
    """The tokenizer's added tokens (id → exact spelling) and, of those, the ones marked special."""
    decoder = tokenizer.get_added_tokens_decoder()
    return {i: t.content for i, t in decoder.items()}, frozenset(i for i, t in decoder.items() if t.special)
