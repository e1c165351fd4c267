"""Token texts of logprobs: a candidate id the tokenizer does not have is the backend's fault (a 502), not a crash."""

from __future__ import annotations

import pytest

from backends.base import BackendError
from backends.checkpoint import load_checkpoint
from backends.detokenizer import added_tokens
from gateway.api.logprobs import TokenTexts


@pytest.mark.parametrize("token", [-1, 49152, 2**40])
def test_a_candidate_outside_the_vocabulary_is_a_backend_error(token):
    tokenizer = load_checkpoint().tokenizer
    texts = TokenTexts(tokenizer, added_tokens(tokenizer)[0])
    assert texts.text(tokenizer.token_to_id("Hello")) == "Hello"
    with pytest.raises(BackendError, match=f"token id {token}, outside the vocabulary"):
        texts.bytes(token)  # -1 and 2**40 were OverflowErrors (a 500), 49152 the empty token b""
