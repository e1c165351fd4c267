"""The bundled torch inference worker: its own process speaking SGLang's native HTTP dialect."""
