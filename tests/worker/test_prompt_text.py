"""A `text` prompt's length bound: sound for the real tokenizer, exact ids for what fits, the GIL released."""

from __future__ import annotations

import random
import threading
import time

import pytest
from tokenizers import AddedToken, Tokenizer, models, normalizers, pre_tokenizers

from backends.prompt_text import TextBound, text_bound
from backends.worker.prompt_text import encode_prompt_text
from backends.worker.protocol import ProtocolError


@pytest.fixture(scope="module")
def tokenizer(checkpoint) -> Tokenizer:
    return checkpoint.tokenizer


@pytest.fixture(scope="module")
def bound(tokenizer) -> TextBound:
    found = text_bound(tokenizer)
    assert found is not None
    return found


def test_the_bound_is_the_longest_token_and_no_text_beats_it(tokenizer, bound):
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    assert bound.chars_per_token == max(map(len, vocab))
    longest = max(vocab, key=len)
    texts = [
        tokenizer.decode([vocab[longest]]) * 50,
        "\n" + " " * 5000,
        "<|im_start|>" * 40,
        "".join(random.Random(7).choice("ab \n\té€😀<|>\x04\x1d") for _ in range(5000)),
    ]
    for text in texts:
        assert bound.counted(text) <= bound.chars_per_token * len(encode_prompt_text(tokenizer, text, 10**9, bound))


def test_characters_the_tokenizer_drops_are_not_counted(tokenizer, bound):
    """The embedded vocabulary spells a few ASCII controls in no token: a prompt of them fits whatever its length."""
    assert bound.dropped == "\x04\x06\x13\x14\x16\x1d"
    text = "\x04" * (bound.chars_per_token * 64) + "Paris"
    assert encode_prompt_text(tokenizer, text, 64, bound) == tokenizer.encode("Paris", add_special_tokens=False).ids


def test_a_text_past_the_bound_is_refused_and_one_within_it_encoded_exactly(tokenizer, bound):
    context = 64
    fits = "The capital of France is Paris. " * 8
    assert encode_prompt_text(tokenizer, fits, context, bound) == tokenizer.encode(fits, add_special_tokens=False).ids
    with pytest.raises(ProtocolError, match=f"at least {context} tokens .* context length is {context}"):
        encode_prompt_text(tokenizer, "x" * (bound.chars_per_token * (context - 1) + 1), context, bound)


VOCAB = {"a": 0, "b": 1, "ab": 2, "[UNK]": 3}


def test_a_bpe_without_fused_unknowns_is_bounded_by_its_longest_token():
    assert text_bound(Tokenizer(models.BPE(VOCAB, [("a", "b")], unk_token="[UNK]"))) == TextBound(5)


@pytest.mark.parametrize(
    ("normalizer", "pre_tokenizer", "model"),
    [
        (normalizers.Strip(), None, models.BPE(VOCAB, [])),  # drops characters before the model
        (None, pre_tokenizers.WhitespaceSplit(), models.BPE(VOCAB, [])),
        (None, None, models.BPE(VOCAB, [], unk_token="[UNK]", fuse_unk=True)),  # a run of unknowns: one token
        (None, None, models.WordPiece(VOCAB, unk_token="[UNK]")),
        (None, pre_tokenizers.Metaspace(), models.BPE(VOCAB, [])),  # no unknown token: an unknown character dropped
        (None, pre_tokenizers.ByteLevel(), models.BPE(VOCAB, [])),  # byte-level, but not every byte in the vocabulary
    ],
)
def test_no_bound_where_the_tokenizer_can_cover_a_run_of_characters_outside_its_vocabulary(
    normalizer, pre_tokenizer, model
):
    tokenizer = Tokenizer(model)
    tokenizer.normalizer, tokenizer.pre_tokenizer = normalizer, pre_tokenizer
    assert text_bound(tokenizer) is None


def test_no_bound_where_an_added_token_takes_the_whitespace_beside_it():
    """An added token with lstrip or rstrip (Phi-3's) covers a whole run of spaces with one token."""
    tokenizer = Tokenizer(models.BPE(VOCAB, [("a", "b")], unk_token="[UNK]"))
    tokenizer.add_special_tokens([AddedToken("<end>", rstrip=True)])
    assert len(tokenizer.encode("<end>" + " " * 500, add_special_tokens=False).ids) == 1
    assert text_bound(tokenizer) is None


def test_a_byte_level_bpe_without_an_unknown_token_is_bounded_when_it_spells_every_byte():
    alphabet = {char: i for i, char in enumerate(pre_tokenizers.ByteLevel.alphabet())}
    tokenizer = Tokenizer(models.BPE({**alphabet, "ĠĠĠĠ": 256}, []))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    assert text_bound(tokenizer) == TextBound(4)


def test_a_large_text_that_fits_is_encoded_with_the_gil_released(tokenizer, bound):
    """tokenizers' `encode` holds the GIL: a long text stalled the event loop (and the engine thread) until it was
    encoded. This thread runs meanwhile: it reads the process CPU within the encoding's middle half (a share of
    the CPU the encoding took, not seconds: the same on a machine of any speed or load)."""
    text = "hello world, this is text. " * 10000
    start, seen = time.process_time(), []
    encoding = threading.Thread(target=encode_prompt_text, args=(tokenizer, text, len(text), bound))
    encoding.start()
    while encoding.is_alive():
        seen.append(time.process_time())
        time.sleep(0.002)
    end = time.process_time()
    quarter = (end - start) / 4
    assert any(start + quarter < spent < end - quarter for spent in seen), (start, seen[:3], seen[-3:], end)
