"""Declarations of the /tokenize and /detokenize bodies (a /tokenize body with messages is a chat body)."""

from __future__ import annotations

from gateway.validation.declare import Obj, array, string
from gateway.validation.fields import MODEL

MAX_DETOKENIZE_IDS = 1 << 20

TOKENIZE_PROMPT = Obj(
    "TokenizePromptRequest",
    {"model": MODEL, "prompt": string("Text encoded as a completions prompt would be.", required=True)},
)
DETOKENIZE = Obj(
    "DetokenizeRequest",
    {
        "model": MODEL,
        "tokens": array(
            {"type": "integer", "minimum": 0}, MAX_DETOKENIZE_IDS, "Ids below the vocabulary size.", required=True
        ),
    },
)
