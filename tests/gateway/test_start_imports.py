"""What a `gateway serve` process imports only once it needs it: xgrammar (and with it torch and transformers, ~1.3
CPU-s a process) for a first grammar, redis-py for --redis, jsonschema for --policies, and of the model families
other than the one it serves only what recognises a checkpoint (their `claims` and `markers`)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# `gateway serve --backend-url` up to its app (the embedded model's tokenizer, the compile budget, no backend
# reached, no policies), then a plain chat planned and a response_format only validated: the modules loaded by then
START_AND_PLAIN_CHAT = textwrap.dedent(
    """
    import sys
    from contextlib import ExitStack

    from gateway.app import create_app
    from gateway.cli import _serve_config, build_parser
    from gateway.models.planning import plan_chat
    from gateway.process.launch import start_models
    from gateway.validation.chat import parse_chat_completion

    config = _serve_config(build_parser().parse_args(["serve", "--backend-url", "http://127.0.0.1:9"]))
    with ExitStack() as stack:
        registry = start_models(config, stack)
        create_app(registry)
        (model,) = registry
        assert "text_bound" in vars(model.encoder)  # the prompt bound read at load, not by the first long prompt
        assert model.grammar_budget is not None
        plain = parse_chat_completion({"model": model.id, "messages": [{"role": "user", "content": "hi"}]})
        assert plan_chat(model, plain.chat, plain.settings).grammar is None
        answer = {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "object"}}}
        parse_chat_completion({"model": model.id, "messages": plain.chat.messages, "response_format": answer})
    libraries = [m for m in ("xgrammar", "torch", "transformers", "redis", "jsonschema") if m in sys.modules]
    served = type(model.family).__module__.rsplit(".", 1)[0]  # gateway.families.hermes
    others = [m for m in sys.modules if m.startswith("gateway.families.") and m.count(".") == 3]
    others = [m for m in others if not m.startswith(served + ".") and m.rsplit(".", 1)[1] not in ("claims", "markers")]
    print(" ".join(libraries + others))
    """
)


def test_a_gateway_start_and_a_plain_chat_import_no_grammar_redis_policy_schema_or_other_family_code():
    done = subprocess.run(
        [sys.executable, "-c", START_AND_PLAIN_CHAT], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []
