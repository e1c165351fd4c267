"""Declarations of the /tokenize and /detokenize bodies (a /tokenize body with messages is a chat body)."""

from __future__ import annotations

from gateway.validation.chat import CHAT_FIELDS
from gateway.validation.completions import ADD_SPECIAL_TOKENS
from gateway.validation.declare import Obj, array, boolean, string

MAX_DETOKENIZE_IDS = 1 << 20

OPTIONAL_MODEL = string(
    "The served model's id; may be left out where one model is served (vLLM's: its tokenize and detokenize "
    "requests declare `model: str | None = None`)."
)

TOKEN_STRS = boolean(False, "Also answer `token_strs`: each id's vocabulary entry (vLLM's).")
TOKENIZE_PROMPT = Obj(
    "TokenizePromptRequest",
    {
        "model": OPTIONAL_MODEL,
        "prompt": string("Text encoded as a completions prompt would be.", required=True),
        "add_special_tokens": ADD_SPECIAL_TOKENS,
        "return_token_strs": TOKEN_STRS,
    },
)
TOKENIZE_CHAT = Obj("TokenizeChatRequest", {**CHAT_FIELDS, "model": OPTIONAL_MODEL, "return_token_strs": TOKEN_STRS})
"""A chat body, rendered as /v1/chat/completions would render it."""
DETOKENIZE = Obj(
    "DetokenizeRequest",
    {
        "model": OPTIONAL_MODEL,
        "tokens": array(
            {"type": "integer", "minimum": 0}, MAX_DETOKENIZE_IDS, "Ids below the vocabulary size.", required=True
        ),
    },
)
