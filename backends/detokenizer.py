"""Incremental detokenization of output ids into Pieces: the gateway's and the bundled worker's one detokenizer.

Added (control) tokens become their own Piece, spelled exactly, with token_id
set. Ordinary tokens are decoded with prefix offsets: the text of the window
[prefix, end) minus the text of [prefix, read) is what the new tokens add, and
it is emitted only once it does not end in U+FFFD, so a character whose UTF-8
bytes span several tokens is never emitted broken. The window restarts after
every emission, so each token costs O(1); for a byte-level BPE whose emitted text ends at a character, the new
tokens' bytes are decoded alone (one decode per token). After an added token the window
starts with that token as its prefix, so the text after it reads as in a decode
of the whole output (SentencePiece strips the leading space of an output's
first piece only, not of the first piece after `[TOOL_CALLS]`). Output that is
not UTF-8 at all is released as U+FFFD after MAX_HELD_TOKENS tokens and
decoding starts afresh.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from tokenizers import Tokenizer, decoders

from .base import BackendError, outside_vocabulary

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
        self._decode = _text_of(tokenizer)
        self._bytes_only = isinstance(self._decode, _ByteLevelText)
        """Text is bytes alone: decoding splits at a character boundary, so the emitted text is the next prefix's."""
        self._added = added
        self._window: list[int] = []
        self._read = 0  # window[:read] is already emitted; window[0] starts at a character boundary
        self._prefix: str | None = None  # the text of window[:read], once known

    def feed(self, ids: Sequence[int]) -> list[Piece]:
        """Pieces that the new ids complete; adjacent text is merged into one Piece."""
        if len(ids) == 1 and self._bytes_only and self._prefix is not None and self._read == len(self._window):
            # Most steps of a byte-level BPE: one ordinary token after text that ended at a character. Its piece
            # is what the loop below makes of it (its bytes decoded alone), kept per id by the decoder.
            token_id = ids[0]
            piece = self._decode.piece(token_id) if token_id not in self._added else None  # type: ignore[attr-defined]
            if piece is not None:
                self._window = [token_id]
                self._read = 1
                self._prefix = piece.text
                return [piece]
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
                self._prefix = None
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
                self._prefix = ""
            return ""
        decode = self._decode
        prefix = self._prefix
        if self._bytes_only and prefix is not None:  # the prefix ends at a character: the new bytes decode alone
            new = decode.whole_text(self._window[self._read :])  # type: ignore[attr-defined]
            if new and not new.endswith(_REPLACEMENT):
                return self._emitted(new, force)
        if prefix is None:
            prefix = self._prefix = decode(self._window[: self._read]) if self._read else ""
        full = decode(self._window)
        held = len(self._window) - self._read
        broken = full.endswith(_REPLACEMENT)
        if not force and held < MAX_HELD_TOKENS and (broken or len(full) <= len(prefix)):
            return ""
        # A tail still broken after MAX_HELD_TOKENS is a hard boundary: decode anew after it.
        return self._emitted(full[len(prefix) :], force or broken)

    def _emitted(self, new: str, restart: bool) -> str:
        """`new` goes out; the window restarts empty (`restart`: a forced or broken end, a hard boundary) or keeps the
        emitted tokens as the next decode's prefix."""
        if restart:
            self._window.clear()
            self._read = 0
            self._prefix = ""
        else:
            del self._window[: self._read]
            self._read = len(self._window)
            self._prefix = new if self._bytes_only else None
        return new


def _append_text(out: list[Piece], text: str) -> None:
    if not text:
        return
    if out and out[-1].token_id is None:
        out[-1] = Piece(out[-1].text + text)
    else:
        out.append(Piece(text))


_TEXT_OF: weakref.WeakKeyDictionary[Tokenizer, Callable[[list[int]], str]] = weakref.WeakKeyDictionary()


def _text_of(tokenizer: Tokenizer) -> Callable[[list[int]], str]:
    """The tokenizer's decode (special tokens kept), made once per tokenizer: for a byte-level BPE in Python."""
    text_of = _TEXT_OF.get(tokenizer)
    if text_of is None:
        text_of = _ByteLevelText(tokenizer) if isinstance(tokenizer.decoder, decoders.ByteLevel) else _Text(tokenizer)
        _TEXT_OF[tokenizer] = text_of
    return text_of


class _ByteLevelText:
    """What `tokenizer.decode(ids, skip_special_tokens=False)` gives for ordinary ids of a byte-level BPE (its
    decoder is ByteLevel alone: each token's characters stand for bytes, and the bytes are read as UTF-8 with
    U+FFFD for what is not). A few ids cost a dict lookup each instead of a call into tokenizers (~5 µs); ids it
    cannot spell as bytes (added tokens, unknown ids) go to tokenizers."""

    def __init__(self, tokenizer: Tokenizer):
        self._tokenizer = tokenizer
        self._bytes: dict[int, bytes] = {}
        self._byte_of = {c: b for b, c in BYTE_LEVEL_CHARS.items()}
        self._added = frozenset(tokenizer.get_added_tokens_decoder())
        self._size = tokenizer.get_vocab_size(with_added_tokens=True)
        self._pieces: dict[int, Piece | None] = {}

    def __call__(self, ids: list[int]) -> str:
        known = self._bytes
        try:
            data = b"".join([known[i] for i in ids])
        except KeyError:
            if not all(self._learn(i) for i in ids):
                return self._tokenizer.decode(ids, skip_special_tokens=False)
            data = b"".join([known[i] for i in ids])
        return data.decode("utf-8", "replace")

    def whole_text(self, ids: list[int]) -> str | None:
        """The text of `ids` when their bytes are known and whole UTF-8 (None otherwise: decode them as above)."""
        known = self._bytes
        try:
            return (known[ids[0]] if len(ids) == 1 else b"".join([known[i] for i in ids])).decode()
        except (KeyError, UnicodeDecodeError):
            return None

    def piece(self, token_id: int) -> Piece | None:
        """The Piece of `token_id` decoded alone, when its bytes are known and are whole UTF-8 text not ending in
        U+FFFD (None otherwise): made once per id and shared, a Piece being immutable."""
        piece = self._pieces.get(token_id, False)
        if piece is False:
            data = self._bytes.get(token_id)
            if data is None:
                return None  # not learned yet: the general path decodes it (and learns its bytes)
            try:
                text = data.decode()
            except UnicodeDecodeError:
                text = ""
            piece = self._pieces[token_id] = Piece(text) if text and not text.endswith(_REPLACEMENT) else None
        return piece

    def _learn(self, token_id: int) -> bool:
        """Keep the bytes of `token_id`; False when it has none here (an added or unknown token)."""
        if token_id in self._bytes:
            return True
        check_token_id(token_id, self._size)
        token = None if token_id in self._added else self._tokenizer.id_to_token(token_id)
        if token is None or not all(c in self._byte_of for c in token):
            return False
        self._bytes[token_id] = bytes(self._byte_of[c] for c in token)
        return True


class _Text:
    """`tokenizer.decode(ids, skip_special_tokens=False)` of ids the tokenizer has."""

    def __init__(self, tokenizer: Tokenizer):
        self._decode = functools.partial(tokenizer.decode, skip_special_tokens=False)
        self._size = tokenizer.get_vocab_size(with_added_tokens=True)

    def __call__(self, ids: list[int]) -> str:
        for token_id in ids:
            check_token_id(token_id, self._size)
        return self._decode(ids)


def check_token_id(token_id: int, size: int) -> None:
    """A backend's id outside the vocabulary of `size` ids (negative, or past its last id) is a broken answer, a 502: tokenizers
    would raise OverflowError for some and decode others as nothing."""
    if not 0 <= token_id < size:
        raise BackendError(outside_vocabulary(token_id, size))


def _byte_chars() -> dict[int, str]:
    """GPT-2's byte ↔ character table (the ByteLevel pre-tokenizer's and decoder's): printable bytes stand for
    themselves, the others for characters from U+0100 on."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


BYTE_LEVEL_CHARS = _byte_chars()
"""GPT-2's byte-level table: each byte's character (the detokenizer and the worker's text bound read it)."""


def added_tokens(tokenizer: Tokenizer) -> tuple[dict[int, str], frozenset[int]]:
    """The tokenizer's added tokens (id → exact spelling) and, of those, the ones marked special."""
    decoder = tokenizer.get_added_tokens_decoder()
    return {i: t.content for i, t in decoder.items()}, frozenset(i for i, t in decoder.items() if t.special)
