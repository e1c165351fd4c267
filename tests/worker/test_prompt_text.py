"""A `text` prompt's length bound: sound for the real tokenizer, exact ids for what fits, the GIL released."""

from __future__ import annotations

import random
import threading
import time

import pytest
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

from backends.worker.prompt_text import encode_prompt_text, max_chars_per_token
from backends.worker.protocol import ProtocolError


@pytest.fixture(scope="module")
def tokenizer(checkpoint) -> Tokenizer:
    return checkpoint.tokenizer


@pytest.fixture(scope="module")
def bound(tokenizer) -> int:
    chars = max_chars_per_token(tokenizer)
    assert chars is not None
    return chars


def test_the_bound_is_the_longest_token_and_no_text_beats_it(tokenizer, bound):
    vocab = tokenizer.get_vocab(with_added_tokens=True)
    assert bound == max(map(len, vocab))
    longest = max(vocab, key=len)
    texts = [
        tokenizer.decode([vocab[longest]]) * 50,
        "\n" + " " * 5000,
        "<|im_start|>" * 40,
        "".join(random.Random(7).choice("ab \n\té€😀<|>") for _ in range(5000)),
    ]
    for text in texts:
        assert len(text) <= bound * len(encode_prompt_text(tokenizer, text, 10**9, bound))


def test_a_text_past_the_bound_is_refused_and_one_within_it_encoded_exactly(tokenizer, bound):
    context = 64
    fits = "The capital of France is Paris. " * 8
    assert encode_prompt_text(tokenizer, fits, context, bound) == tokenizer.encode(fits, add_special_tokens=False).ids
    with pytest.raises(ProtocolError, match=f"at least {context} tokens .* context length is {context}"):
        encode_prompt_text(tokenizer, "x" * (bound * (context - 1) + 1), context, bound)


VOCAB = {"a": 0, "b": 1, "ab": 2, "[UNK]": 3}


def test_a_bpe_without_fused_unknowns_is_bounded_by_its_longest_token():
    assert max_chars_per_token(Tokenizer(models.BPE(VOCAB, [("a", "b")], unk_token="[UNK]"))) == 5


@pytest.mark.parametrize(
    ("normalizer", "pre_tokenizer", "model"),
    [
        (normalizers.Strip(), None, models.BPE(VOCAB, [])),  # drops characters before the model
        (None, pre_tokenizers.WhitespaceSplit(), models.BPE(VOCAB, [])),
        (None, None, models.BPE(VOCAB, [], unk_token="[UNK]", fuse_unk=True)),  # a run of unknowns: one token
        (None, None, models.WordPiece(VOCAB, unk_token="[UNK]")),
    ],
)
def test_no_bound_where_the_tokenizer_can_cover_a_run_of_characters_outside_its_vocabulary(
    normalizer, pre_tokenizer, model
):
    tokenizer = Tokenizer(model)
    tokenizer.normalizer, tokenizer.pre_tokenizer = normalizer, pre_tokenizer
    assert max_chars_per_token(tokenizer) is None


def test_a_large_text_that_fits_is_encoded_with_the_gil_released(tokenizer, bound):
    """tokenizers' `encode` holds the GIL: a long text stalled the event loop (and the engine thread) until it was
    encoded. This thread runs meanwhile: it
    reads the process CPU 0.1 s past the start and 0.1 s short of the end."""
    text = "hello world, this is text. " * 30000
    start, seen = time.process_time(), []
    encoding = threading.Thread(target=encode_prompt_text, args=(tokenizer, text, len(text), bound))
    encoding.start()
    while encoding.is_alive():
        seen.append(time.process_time())
        time.sleep(0.01)
    end = time.process_time()
    assert any(start + 0.1 < spent < end - 0.1 for spent in seen), (start, seen[:3], seen[-3:], end)
