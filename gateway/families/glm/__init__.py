"""GLM (4.5 / 4.6 newline layout, 4.7 / 5.x compact layout): prompts, token-aware parser, structural tags."""

from gateway.families import lazy_exports

from .claims import RECOGNITION

__getattr__ = lazy_exports(
    __name__,
    {
        ".family": ("FAMILIES", "Glm45Family", "Glm47Family"),
        ".parser": ("GlmParser",),
    },
)
__all__ = ["FAMILIES", "RECOGNITION", "Glm45Family", "Glm47Family", "GlmParser"]
