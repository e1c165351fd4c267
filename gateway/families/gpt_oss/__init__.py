"""gpt-oss (OpenAI Harmony): native prompt encoder, token-aware channel parser and structural tags bound to token ids."""

from gateway.families import lazy_exports

from .claims import RECOGNITION

__getattr__ = lazy_exports(
    __name__,
    {
        ".family": ("FAMILIES", "GptOssFamily", "harmony_tokenizer"),
        ".parser": ("HarmonyParser",),
    },
)
__all__ = ["FAMILIES", "RECOGNITION", "GptOssFamily", "HarmonyParser", "harmony_tokenizer"]
