"""What a `gateway serve` process imports only once it needs it: xgrammar for a first grammar (and then only its
grammar compiler: never torch or transformers, ~1.5 CPU-s a process), redis-py for --redis, jsonschema for
--policies, and of the model families other than the one it serves only what recognises a checkpoint (their
`claims` and `markers`)."""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx

from backends.checkpoint import EMBEDDED_MODEL_ID
from tests.gateway.http_server import serve
from tests.gateway.sglang_standin import Script, SGLangStandIn

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


def test_gateway_serve_loads_its_grammar_compiler_without_torch_or_transformers(tmp_path, checkpoint):
    """The real start (the embedded model, grammar warm-up and compile budget on by default) and a first grammar
    request, compiled in a compile child (a fork, whose imports `-X importtime` writes to the same stderr)."""
    answer = '{"city": "Paris"}'
    standin = SGLangStandIn(incremental=False)  # `--backend-url`'s SGLang streams whole outputs
    standin.script = lambda body: Script(ids=checkpoint.tokenizer.encode(answer, add_special_tokens=False).ids)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path / "gateway.log"
    with serve(standin.app) as backend_url, log.open("wb") as out:
        argv = ["serve", "--port", str(port), "--backend-url", backend_url, "--log-level", "warning"]
        proc = subprocess.Popen([sys.executable, "-X", "importtime", "-m", "gateway.cli", *argv], cwd=ROOT, stderr=out)
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_ready(url, proc, log)
            schema = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
            body = {
                "model": EMBEDDED_MODEL_ID,
                "messages": [{"role": "user", "content": "a city"}],
                "response_format": {"type": "json_schema", "json_schema": {"name": "c", "schema": schema}},
            }
            response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60)
        finally:
            proc.terminate()
            proc.wait(30)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == answer
    assert "ebnf" in standin.bodies[0]["sampling_params"] or "json_schema" in standin.bodies[0]["sampling_params"]
    imported = {line.rsplit("|", 1)[1].strip() for line in log.read_text().splitlines() if line.startswith("import ")}
    assert {"tvm_ffi", "xgrammar.base", "xgrammar.tokenizer_info"} <= imported  # xgrammar's import is in the log
    # A blocked optional import is logged under its bare name (`torch`); a real one imports the package's modules
    assert sorted(m for m in imported if m.startswith(("torch.", "transformers."))) == []


def _wait_ready(url: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()[-4000:]
        try:
            if httpx.get(f"{url}/ready").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError(f"the gateway did not get ready:\n{log.read_text()[-4000:]}")
