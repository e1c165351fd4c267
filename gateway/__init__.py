"""An OpenAI-compatible LLM gateway that owns rendering, shielding, grammars and parsing."""
