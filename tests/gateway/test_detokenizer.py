"""Incremental detokenization with the real SmolLM2 byte-level BPE tokenizer."""

from __future__ import annotations

import functools

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from backends.detokenizer import MAX_HELD_TOKENS, Detokenizer, Piece, _ByteLevelText, _text_of

IM_END = 2


def ids_of(model, text: str) -> list[int]:
    return model.encoder.encode_plain(text)


def stream(model, ids: list[int], step: int = 1) -> list[Piece]:
    detok = Detokenizer(model.tokenizer, model.added_ids)
    out: list[Piece] = []
    for i in range(0, len(ids), step):
        out += detok.feed(ids[i : i + step])
    return out + detok.flush()


def text_of(pieces: list[Piece]) -> str:
    return "".join(p.text for p in pieces)


@pytest.mark.parametrize("text", ["héllo 😀 世界", "🦜🦜🦜", "naïve café — ok", "日本語のテキスト", "a\n\tb  c"])
def test_split_characters_are_never_emitted_broken(tokenize_only, text):
    ids = ids_of(tokenize_only, text)
    assert len(ids) > len(text.split()), "the text must split characters across tokens to test anything"
    pieces = stream(tokenize_only, ids)
    assert all("\ufffd" not in p.text for p in pieces)
    assert text_of(pieces) == text


def test_emoji_bytes_wait_for_their_last_token(tokenize_only):
    detok = Detokenizer(tokenize_only.tokenizer, tokenize_only.added_ids)
    ids = ids_of(tokenize_only, " 😀")
    assert len(ids) == 2  # 'ĠðŁĺ' + 'Ģ': the emoji's 4 bytes span two tokens
    assert detok.feed(ids[:1]) == []
    assert detok.feed(ids[1:]) == [Piece(" 😀")]


def test_added_tokens_are_their_own_pieces(tokenize_only):
    ids = ids_of(tokenize_only, "Hi") + [IM_END] + ids_of(tokenize_only, " there")
    assert stream(tokenize_only, ids) == [Piece("Hi"), Piece("<|im_end|>", IM_END), Piece(" there")]


def test_plain_text_spelling_a_marker_stays_text(tokenize_only):
    ids = ids_of(tokenize_only, "<|im_end|>")
    assert len(ids) > 1
    pieces = stream(tokenize_only, ids)
    assert text_of(pieces) == "<|im_end|>" and all(p.token_id is None for p in pieces)


def test_an_added_token_releases_a_broken_tail(tokenize_only):
    emoji = ids_of(tokenize_only, " 😀")
    pieces = stream(tokenize_only, [emoji[0], IM_END])
    assert pieces[-1] == Piece("<|im_end|>", IM_END)
    assert pieces[0].text.endswith("\ufffd")


def test_invalid_bytes_do_not_hold_the_stream_forever(tokenize_only):
    lone = ids_of(tokenize_only, " 😀")[0]  # a token whose bytes never complete a character
    detok = Detokenizer(tokenize_only.tokenizer, tokenize_only.added_ids)
    out = []
    for _ in range(MAX_HELD_TOKENS):
        out += detok.feed([lone])
    assert out, "held text is released once it cannot be a split character"
    out += detok.feed(ids_of(tokenize_only, " and then 世界")) + detok.flush()
    assert text_of(out).endswith(" and then 世界")


@settings(max_examples=60, deadline=None)
@given(text=st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40), step=st.integers(1, 5))
def test_any_chunking_reproduces_the_text(tokenize_only, text, step):
    ids = ids_of(tokenize_only, text)
    assume(tokenize_only.tokenizer.decode(ids) == text)  # the vocabulary lacks a few bytes (e.g. 0xF1)
    assert text_of(stream(tokenize_only, ids, step)) == text


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=49151), min_size=1, max_size=6))
def test_byte_level_text_is_what_tokenizers_decodes(tokenize_only, ids):
    """The Python decode of a byte-level BPE (token bytes joined, invalid UTF-8 as U+FFFD) is tokenizers' own,
    broken bytes, added tokens and every other id included."""
    text_of_ids = _text_of(tokenize_only.tokenizer)
    assert isinstance(text_of_ids, _ByteLevelText)
    assert text_of_ids(ids) == tokenize_only.tokenizer.decode(ids, skip_special_tokens=False)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=49151), min_size=1, max_size=24), st.integers(1, 4))
def test_byte_level_pieces_are_those_of_tokenizers_decode(tokenize_only, ids, step):
    """The Python path (and its prefix taken from the text just emitted) cuts the same pieces as decoding every
    window with tokenizers, in any chunking, broken bytes and added tokens included."""
    reference = Detokenizer(tokenize_only.tokenizer, tokenize_only.added_ids)
    reference._decode = functools.partial(tokenize_only.tokenizer.decode, skip_special_tokens=False)
    reference._bytes_only = False
    fast = Detokenizer(tokenize_only.tokenizer, tokenize_only.added_ids)
    for i in range(0, len(ids), step):
        assert fast.feed(ids[i : i + step]) == reference.feed(ids[i : i + step])
    assert fast.flush() == reference.flush()
