"""GLM (4.5 / 4.6 newline layout, 4.7 / 5.x compact layout): prompts, token-aware parser, structural tags."""

from .family import Glm45Family, Glm47Family
from .parser import GlmParser

FAMILIES = (Glm45Family, Glm47Family)
__all__ = ["FAMILIES", "Glm45Family", "Glm47Family", "GlmParser"]
