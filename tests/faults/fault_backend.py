"""`python -m tests.faults.fault_backend --port 0 --mode MODE`: an SGLang `/generate` server that fails on purpose.

It is the SGLang stand-in of tests/gateway (requests and events checked against SGLang's published
contract, incremental streaming) in a process of its own, answering every request with a real
SmolLM2 reply, broken the way its mode says. `POST /fault` with `mode`, `after`, `delay`, `token` and
`healthy` (each left out takes its default) replaces the fault at run time and, like `GET /fault`,
answers what it saw. Prints `READY <port>` once it serves.
"""

from __future__ import annotations

import argparse
import dataclasses
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass

import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from backends.checkpoint import load_checkpoint
from tests.gateway.http_server import serve
from tests.gateway.sglang_standin import Script, SGLangStandIn

REPLY = (
    "The quick brown fox jumps over the lazy dog, then rests in the shade of an old oak tree while the river "
    "runs past the quiet village and the evening light slowly fades."
)
END_OF_TURN = "<|im_end|>"
INVALID_JSON = b'data: {"text": "", "output_ids": [1\n\n'
WRONG_SHAPE = b'data: {"text": "", "output_ids": "not ids", "meta_info": "not a mapping"}\n\n'
"""Valid JSON, but not SGLang's event: output_ids must be token ids, meta_info an object."""


@dataclass
class Fault:
    """How the next requests fail."""

    mode: str = "ok"
    after: int = 2
    """Tokens sent before the fault (0: before any output)."""
    delay: float = 0.0
    """Seconds before each token."""
    token: int = -1
    """The id `bad_id` sends after `after` tokens (negative, or outside the vocabulary)."""


MODES: dict[str, Callable[[Fault, list[int]], Script]] = {
    "ok": lambda f, ids: Script(ids, delay=f.delay),
    "slow": lambda f, ids: Script(ids, delay=f.delay, hold_after=f.after),
    "malformed": lambda f, ids: Script(ids, delay=f.delay, garbage_after=f.after, garbage=INVALID_JSON),
    "wrong_shape": lambda f, ids: Script(ids, delay=f.delay, garbage_after=f.after, garbage=WRONG_SHAPE),
    "truncated": lambda f, ids: Script(ids, delay=f.delay, cut_after=f.after),
    "bad_id": lambda f, ids: Script([*ids[: f.after], f.token, *ids[f.after :]], delay=f.delay),
    "endless": lambda f, ids: Script(ids[:-1] * 100_000, delay=f.delay),
    "refuse503": lambda f, ids: Script(refuse=503),
    "refuse429": lambda f, ids: Script(refuse=429),
}
"""slow: holds after `after` tokens until the client leaves; truncated: drops the connection there; bad_id: sends
`token` there, an id no tokenizer has; endless: the reply without its end, again and again (up to max tokens)."""


def reply_ids(checkpoint: str | None) -> list[int]:
    """The reply every request gets: real SmolLM2 token ids, ending the turn."""
    tokenizer = load_checkpoint(checkpoint).tokenizer
    return tokenizer.encode(REPLY).ids + [tokenizer.token_to_id(END_OF_TURN)]


def fault_app(fault: Fault, ids: list[int]) -> Starlette:
    """The stand-in's routes playing `fault`, plus `/fault` to change and inspect it."""
    standin = SGLangStandIn(incremental=True)
    standin.script = lambda body: MODES[fault.mode](fault, ids)

    async def control(request: Request) -> JSONResponse:
        nonlocal fault
        if request.method == "POST":
            changes = orjson.loads(await request.body())
            healthy = changes.pop("healthy", True)
            if changes.get("mode", Fault.mode) not in MODES:
                return JSONResponse({"error": f"unknown mode {changes['mode']!r}"}, status_code=400)
            fault, standin.healthy = Fault(**changes), healthy
        return JSONResponse(
            {
                **dataclasses.asdict(fault),
                "healthy": standin.healthy,
                "generate_requests": len(standin.bodies),
                "open_streams": len(standin.streaming),
            }
        )

    return Starlette(routes=[*standin.app.routes, Route("/fault", control, methods=["GET", "POST"])])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.faults.fault_backend", description=__doc__)
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--checkpoint", help="where the SmolLM2 tokenizer comes from (default: the embedded model)")
    parser.add_argument("--mode", choices=sorted(MODES), default="ok", help="how it fails from the start")
    args = parser.parse_args(argv)
    app = fault_app(Fault(args.mode), reply_ids(args.checkpoint))
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, frame: stop.set())
    with serve(app, port=args.port) as url:
        print(f"READY {url.rsplit(':', 1)[1]}", flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
