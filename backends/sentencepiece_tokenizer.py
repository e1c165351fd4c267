"""SentencePiece BPE model files (`tokenizer.model`, Mistral's `tokenizer.model.v3`) as a `tokenizers.Tokenizer`.

A `.model` file is a protobuf `ModelProto`: its pieces (text, score, type), a trainer spec (model type, byte
fallback) and a normalizer spec (dummy prefix, whitespace). It is read here with a small protobuf wire reader,
so neither `sentencepiece` nor `protobuf` is needed. The conversion is the one Hugging Face uses for Llama and
Mistral: the pieces are the BPE vocabulary at their ids, one merge per way of writing a piece as two pieces,
ordered by the piece's score (SentencePiece merges the adjacent pair whose result scores highest; whitespace-only
pieces score lowest), spaces
written `▁`, a `▁` put before the text (the dummy prefix), bytes without a piece spelled `<0xNN>`. Control
pieces (`<s>`, `[INST]`, ...) are special added tokens; user-defined pieces are added tokens that text also
matches, as in SentencePiece. Only what this conversion reproduces is accepted: BPE, an identity normalizer,
no whitespace collapsing (ValueError otherwise).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

from tokenizers import Tokenizer

from backends.conversion_cache import cached_tokenizer
from backends.tiktoken_bpe import added_token

SPACE = "\u2581"
"""How SentencePiece writes a space inside pieces."""


class PieceType(IntEnum):
    """`SentencePiece.Type` of sentencepiece_model.proto."""

    NORMAL = 1
    UNKNOWN = 2
    CONTROL = 3
    USER_DEFINED = 4
    UNUSED = 5
    BYTE = 6


_BPE = 2  # TrainerSpec.ModelType.BPE
_BOS_ID, _EOS_ID = 41, 42  # TrainerSpec.bos_id, eos_id (proto defaults 1 and 2; -1 disables)
_NO_ID = 2**64 - 1  # an int32 -1 on the wire


@dataclass(frozen=True)
class SentencePieceModel:
    """What the conversion needs of a `ModelProto`."""

    pieces: tuple[tuple[str, float, PieceType], ...]
    model_type: int
    byte_fallback: bool
    normalizer: str
    add_dummy_prefix: bool
    remove_extra_whitespaces: bool


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, at


def _fields(data: bytes) -> Iterator[tuple[int, int | bytes]]:
    """(field number, value) of each field of a protobuf message: varints as ints, everything else as bytes."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
            yield number, value
            continue
        if wire == 2:
            size, at = _varint(data, at)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
        else:
            raise ValueError(f"unsupported protobuf wire type {wire}")
        yield number, data[at : at + size]
        at += size


def _message(data: int | bytes) -> dict[int, int | bytes]:
    if isinstance(data, bytes):
        return dict(_fields(data))
    raise ValueError("malformed SentencePiece model: a message field is not length-delimited")


def read_model(path: Path) -> SentencePieceModel:
    """The pieces and specs of a SentencePiece `.model` file."""
    pieces: list[tuple[str, float, PieceType]] = []
    trainer: dict[int, int | bytes] = {}
    normalizer: dict[int, int | bytes] = {}
    for number, value in _fields(path.read_bytes()):
        if number == 1:
            piece = _message(value)
            score = struct.unpack("<f", piece[2])[0] if isinstance(piece.get(2), bytes) else 0.0
            pieces.append((bytes(piece[1]).decode("utf-8"), score, PieceType(piece.get(3, PieceType.NORMAL))))
        elif number == 2:
            trainer = _message(value)
        elif number == 3:
            normalizer = _message(value)
    return SentencePieceModel(
        pieces=tuple(pieces),
        model_type=int(trainer.get(3, 1)),  # proto default: UNIGRAM
        byte_fallback=bool(trainer.get(35, 0)),
        normalizer=bytes(normalizer.get(1, b"nmt_nfkc")).decode(),
        add_dummy_prefix=bool(normalizer.get(3, 1)),
        remove_extra_whitespaces=bool(normalizer.get(4, 1)),
    )


def boundary_ids(path: Path) -> tuple[int | None, int | None]:
    """The ids of a SentencePiece model's begin- and end-of-sentence pieces (its trainer spec's `bos_id`,
    `eos_id`; None where disabled), read without converting the model."""
    trainer = next((_message(value) for number, value in _fields(path.read_bytes()) if number == 2), {})
    return _piece_id(trainer.get(_BOS_ID, 1)), _piece_id(trainer.get(_EOS_ID, 2))


def _piece_id(value: int | bytes) -> int | None:
    return None if value == _NO_ID else int(value)


def _merges(vocab: dict[str, int], scores: dict[str, float]) -> list[tuple[str, str]]:
    """Every split of a mergeable piece (one of `scores`) into two, the best-scoring result first (then by id)."""
    found: list[tuple[float, int, int, int, str, str]] = []
    for piece, score in scores.items():
        for cut in range(1, len(piece)):
            left, right = piece[:cut], piece[cut:]
            if left in scores and right in scores:
                found.append((-score, vocab[piece], vocab[left], vocab[right], left, right))
    found.sort()
    return [(left, right) for *_, left, right in found]


def load_sentencepiece(path: Path) -> Tokenizer:
    """The `tokenizers.Tokenizer` of a SentencePiece BPE model file (ValueError for what it cannot reproduce)."""
    return cached_tokenizer([path], [], lambda: _convert(path))


def _convert(path: Path) -> Tokenizer:
    model = read_model(path)
    if model.model_type != _BPE:
        raise ValueError(f"{path.name}: a SentencePiece model of type {model.model_type}; only BPE ({_BPE}) converts")
    if model.normalizer != "identity" or model.remove_extra_whitespaces:
        raise ValueError(
            f"{path.name}: normalizer {model.normalizer!r} (whitespace collapsed: "
            f"{model.remove_extra_whitespaces}); only the identity normalizer converts"
        )
    vocab = {text: i for i, (text, _, _) in enumerate(model.pieces)}
    scores = {text: score for text, score, kind in model.pieces if kind is PieceType.NORMAL}
    unknown = next((text for text, _, kind in model.pieces if kind is PieceType.UNKNOWN), None)
    added = [
        added_token(i, text, special=kind is not PieceType.USER_DEFINED)
        for i, (text, _, kind) in enumerate(model.pieces)
        if kind in (PieceType.UNKNOWN, PieceType.CONTROL, PieceType.USER_DEFINED)
    ]
    space = {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}
    dummy_prefix = [{"type": "Prepend", "prepend": SPACE}] if model.add_dummy_prefix else []
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [*dummy_prefix, space]},
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": {
            "type": "Sequence",
            "decoders": [
                {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
                {"type": "ByteFallback"},
                {"type": "Fuse"},
                *([{"type": "Strip", "content": " ", "start": 1, "stop": 0}] if model.add_dummy_prefix else []),
            ],
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": unknown,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": model.byte_fallback,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [[left, right] for left, right in _merges(vocab, scores)],
        },
    }
    return Tokenizer.from_str(json.dumps(spec, ensure_ascii=False))
