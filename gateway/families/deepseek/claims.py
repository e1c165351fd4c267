"""The checkpoints the DeepSeek families claim (read by the registry without importing the families)."""

from __future__ import annotations

from gateway.families.recognition import Recognition

from .markers import ASSISTANT, DSML, GROUNDING, SECTIONS, TOOL_SEP, USER, V4, V32, V41

V3_TOKENS = frozenset({USER, ASSISTANT, *SECTIONS.call_tokens})
"""V3's chat and tool-call tokens, kept by every later version: V3 to V3.2 differ only in templates and config."""
V4_TOKENS = frozenset({USER, ASSISTANT, DSML, *GROUNDING})
"""What V4's vocabulary adds: the DSML token and the grounding tokens. V4 and V4.1 share it (and ship no template)."""

RECOGNITION = {
    "deepseek_v3": (Recognition(tokens=V3_TOKENS, template=("```json",)),),  # V3 / R1 templates fence the arguments
    "deepseek_v31": (Recognition(tokens=V3_TOKENS, template=(f"['name'] + '{TOOL_SEP}'",)),),  # the name, then the sep
    "deepseek_v32": (
        Recognition(tokens=V3_TOKENS, architectures=frozenset({"deepseek_v32"})),  # V3.2 ships no Jinja template
        Recognition(tokens=V3_TOKENS, template=(V32.calls_open,)),
    ),
    "deepseek_v4": (Recognition(tokens=V4_TOKENS, template=(V4.calls_open,)),),
    "deepseek_v41": (Recognition(tokens=V4_TOKENS), Recognition(tokens=V4_TOKENS, template=(V41.calls_open,))),
    # The V4 vocabulary alone means V4.1, the newest format on it; V4 needs a template that says so, or a name.
}
