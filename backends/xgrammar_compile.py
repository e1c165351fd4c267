"""xgrammar's view of a checkpoint's vocabulary, and a grammar compiled by its kind: the bundled worker and the
gateway's compile budget share them.

xgrammar is loaded when a vocabulary is first converted, not with this module (backends/xgrammar_core.py: the
whole package, torch and transformers with it, or in a gateway process only its grammar compiler).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from backends.base import GrammarKind
from backends.checkpoint import Checkpoint
from backends.xgrammar_core import xgrammar

if TYPE_CHECKING:
    import xgrammar as xgr


def out_of_memory(error: BaseException | None) -> bool:
    """Whether xgrammar's error is an allocation that failed (its std::bad_alloc comes as a RuntimeError): a compile
    child past its memory bound (backends/compile_process.py), not a grammar it refuses."""
    return isinstance(error, MemoryError) or (isinstance(error, RuntimeError) and "bad_alloc" in str(error))


class GrammarError(ValueError):
    """The grammar text could not be compiled."""


def tokenizer_info(checkpoint: Checkpoint, vocab_size: int) -> xgr.TokenizerInfo:
    """xgrammar's view of the vocabulary: control tokens are special (never text), eos ids stop."""
    xgr = xgrammar()

    control = set(checkpoint.control_token_ids)
    vocab = [("" if i in control else token) for i, token in enumerate(checkpoint.vocab[:vocab_size])]
    return xgr.TokenizerInfo(
        vocab, _vocab_type(checkpoint), vocab_size=vocab_size, stop_token_ids=list(checkpoint.eos_token_ids)
    )


def _vocab_type(checkpoint: Checkpoint) -> xgr.VocabType:
    xgr = xgrammar()

    decoder = checkpoint.tokenizer.decoder  # its own document only: the whole tokenizer's is its vocabulary
    decoder = json.loads(decoder.__getstate__()) if decoder is not None else {}
    kinds = {decoder.get("type")} | {d.get("type") for d in decoder.get("decoders", [])}
    if "ByteLevel" in kinds:
        return xgr.VocabType.BYTE_LEVEL
    if "ByteFallback" in kinds:
        return xgr.VocabType.BYTE_FALLBACK
    return xgr.VocabType.RAW


def compile_grammar(compiler: xgr.GrammarCompiler, kind: GrammarKind, text: str) -> xgr.CompiledGrammar:
    """`text` compiled as a grammar of `kind`; GrammarError with xgrammar's reason when it cannot be."""
    try:
        if kind == "json_schema":
            return compiler.compile_json_schema(text)
        if kind == "regex":
            return compiler.compile_regex(text)
        if kind == "ebnf":
            return compiler.compile_grammar(text)
        if kind == "structural_tag":
            return compiler.compile_structural_tag(text)
    except Exception as exc:  # xgrammar raises RuntimeError, ValueError or its own types
        raise GrammarError(f"invalid {kind}: {exc}") from exc
    raise GrammarError(f"unknown grammar kind {kind!r}")
