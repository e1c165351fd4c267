"""Backend output → choice steps: detokenized pieces, stop strings matched, a request's choices merged."""
