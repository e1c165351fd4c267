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


@pytest.mark.anyio
async def test_redis_url_and_password_come_from_the_environment(own_redis_server, tmp_path, monkeypatch):
    """The chart passes a Redis URL and password as environment variables from Secrets, never on the command line
    (readable by any process of the node in /proc/PID/cmdline): both clients authenticate to a server that
    requires the password, which a client without it is refused by."""
    import redis
    import redis.exceptions

    password = "p@ss:w/rd#1 with spaces"  # a Secret's key as it is: nothing a URL would need escaped
    redis.Redis.from_url(own_redis_server.url).config_set("requirepass", password)
    monkeypatch.setenv("LLM_GATEWAY_REDIS_URL", own_redis_server.url)
    monkeypatch.setenv("LLM_GATEWAY_REDIS_PASSWORD", password)
    args = build_parser().parse_args(["serve", "--policies", str(tmp_path)])
    assert args.redis == own_redis_server.url
    options = redis_client_options(args)
    limiter = policy_gate(tmp_path, args.redis, None, GatewayConfig(models=[]), options).limiter
    store = RedisStore(args.redis, **options)
    anonymous = RedisStore(args.redis)
    try:
        record = {"id": "resp_1", "owner": "acme", "response": {"id": "resp_1"}, "input_items": []}
        await store.put(record)
        assert await store.get("resp_1", "acme") == record
        async with limiter._calls.turn() as client:
            assert await client.ping()
        with pytest.raises(redis.exceptions.AuthenticationError):
            async with anonymous._calls.turn() as client:
                await client.ping()
    finally:
        await limiter.close()
        for each in (store, anonymous):
            await each.close()
