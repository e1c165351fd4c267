"""Harmony's control tokens (o200k_harmony ids) and channel names."""

from __future__ import annotations

START = "<|start|>"
END = "<|end|>"
MESSAGE = "<|message|>"
CHANNEL = "<|channel|>"
CONSTRAIN = "<|constrain|>"
CALL = "<|call|>"
RETURN = "<|return|>"

CONTROL_TOKENS = (START, END, MESSAGE, CHANNEL, CONSTRAIN, CALL, RETURN)
"""Every Harmony control token; only their token ids are structure, never their spelling."""
TERMINATORS = frozenset({END, CALL, RETURN})
"""Tokens that close a message."""
STOP_TOKENS = (RETURN, CALL)
"""A generation ends at the last message's `<|return|>` or at a tool call's `<|call|>`."""

ANALYSIS = "analysis"
COMMENTARY = "commentary"
FINAL = "final"
FUNCTIONS = "functions."
"""Recipient prefix of a function tool call (`to=functions.NAME`)."""
