"""`gateway serve` without policies stays on loopback unless told otherwise; policy options are checked
before anything loads."""

from __future__ import annotations

import pytest

from gateway.api.response_store import RedisStore
from gateway.cli import build_parser, main, redis_client_options
from gateway.process.config import GatewayConfig
from gateway.process.policy_gate import policy_gate


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--host", "0.0.0.0"], "refusing to serve on 0.0.0.0 without --policies"),
        (["--host", "10.1.2.3", "--port", "9"], "--allow-unauthenticated"),
        (["--audit-log", "/tmp/audit.jsonl"], "--audit-log needs --policies"),
        (["--policies", "/nonexistent/policies"], "is not a directory"),
        (["--redis-timeout", "2"], "--redis-timeout needs --redis"),
    ],
)
def test_serve_refuses_before_loading(argv, words, capsys):
    assert main(["serve", *argv]) == 2
    assert words in capsys.readouterr().err


@pytest.mark.anyio
async def test_the_redis_timeout_reaches_both_redis_clients(tmp_path):
    """`--redis-timeout` bounds every call of the limiter's and the response store's clients, connecting included
    (nothing connects here: the clients are only built)."""
    url = "redis://127.0.0.1:21399/0"
    args = build_parser().parse_args(["serve", "--policies", str(tmp_path), "--redis", url, "--redis-timeout", "2.5"])
    options = redis_client_options(args)
    limiter = policy_gate(tmp_path, url, None, GatewayConfig(models=[]), options).limiter
    store = RedisStore(url, **options)
    try:
        for calls in (limiter._calls, store._calls):
            settings = calls.client.connection_pool.connection_kwargs
            assert (settings["socket_timeout"], settings["socket_connect_timeout"]) == (2.5, 2.5)
    finally:
        await limiter.close()
        await store._calls.client.aclose()
