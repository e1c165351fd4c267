"""Chat request → prompt ids: added-token shielding, template rendering, and encoding at the template's own markers."""
