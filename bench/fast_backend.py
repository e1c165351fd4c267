"""A fast stand-in for an SGLang server: `POST /generate` streams real SmolLM2 token ids at a GPU-like pace.

It speaks the native dialect as `backends/sglang.py` reads it in incremental mode
(`--incremental-streaming-output`): one `data: {"text", "output_ids", "meta_info"}` event per
token carrying only the new id, finish `{"type": "length"}` on the last, then `data: [DONE]`.
It ignores stops and sampling settings and always sends `max_new_tokens` tokens, cycling through
the ids of an English paragraph encoded with the embedded tokenizer. The first token goes out as
soon as the request is read (prefill costs nothing here, unless `--prefill-ms`: the response head goes out at
once and the first token that much later, in a write of its own, as a real server's do); after that one "decode step" every
`--interval-ms` gives each running stream its next token, as a continuous-batching GPU server
does (0: no pacing, as fast as the event loop writes). Also `GET /health` and `POST /abort_request`.

    python bench/fast_backend.py [--port 0] [--interval-ms 15] [--prefill-ms 0]

Prints `READY <port>` once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import orjson
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.checkpoint import load_checkpoint

PARAGRAPH = (
    "The printing press changed how ideas moved through Europe. Before it, a book was copied by hand, "
    "which took months and made every copy expensive and slightly different. Around 1440, Johannes "
    "Gutenberg combined movable metal type, an oil-based ink and a screw press adapted from wine making. "
    "Within fifty years, presses were running in more than two hundred cities, and millions of volumes had "
    "been printed. Prices fell, literacy rose, and scholars could compare identical texts for the first "
    "time. Pamphlets spread religious and political arguments faster than any authority could answer them, "
    "while printed maps, tables and diagrams made science easier to check and to build on. Some historians "
    "call it the first information revolution; others point out that manuscripts, letters and sermons kept "
    "their place for centuries, and that the change was gradual, uneven and shaped by trade routes, paper "
    "supply and the interests of the people who paid for the work."
)
DONE = b"data: [DONE]\n\n"


def paragraph_ids() -> tuple[list[int], list[int]]:
    """The token ids of PARAGRAPH under the embedded SmolLM2 tokenizer, and the positions where a word starts.

    Streams start at a word, so that their first token is visible text (not a lone space or a piece of a word).
    """
    tokenizer = load_checkpoint(None).tokenizer
    ids = tokenizer.encode(" " + PARAGRAPH, add_special_tokens=False).ids  # the leading space joins the cycle's ends
    words = [i for i, t in enumerate(ids) if (text := tokenizer.decode([t])).startswith(" ") and text[1:].isalpha()]
    return ids, words


class DecodeSteps:
    """A GPU-like schedule: one step every `interval` seconds, anchored so that a late step does not shift the rest."""

    def __init__(self, interval: float):
        self.interval = interval
        self._waiting: list[asyncio.Future[None]] = []
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def next(self) -> None:
        """Wait for the next decode step."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())
        future = asyncio.get_running_loop().create_future()
        self._waiting.append(future)
        self._wake.set()
        await future

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time()
        while True:
            deadline += self.interval
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            waiting, self._waiting = self._waiting, []
            for future in waiting:
                if not future.done():
                    future.set_result(None)
            if not waiting and not self._waiting:  # idle: the next stream to arrive starts a new schedule
                self._wake.clear()
                await self._wake.wait()
                deadline = loop.time()


class FastBackend:
    """The server's state: the id cycle, the step schedule and the aborted request ids."""

    def __init__(self, ids: list[int], starts: list[int], interval: float, prefill: float = 0.0):
        self._prefill = prefill
        self._ids = [str(i).encode() for i in ids]
        self._starts = starts
        self._steps = DecodeSteps(interval) if interval > 0 else None
        self._aborted: set[str] = set()
        self._started = 0
        self.app = Starlette(
            routes=[
                Route("/generate", self._generate, methods=["POST"]),
                Route("/abort_request", self._abort, methods=["POST"]),
                Route("/health", self._health, methods=["GET"]),
            ]
        )

    async def _health(self, request: Request) -> Response:
        return Response(status_code=200)

    async def _abort(self, request: Request) -> Response:
        self._aborted.add(str(orjson.loads(await request.body()).get("rid")))
        return JSONResponse({})

    async def _generate(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        if not body.get("stream") or not body.get("input_ids"):
            return JSONResponse({"error": {"message": "this stand-in only streams token-id prompts"}}, status_code=400)
        rid = str(body.get("rid") or f"fast-{self._started}")
        tokens = int(body.get("sampling_params", {}).get("max_new_tokens") or 16)
        self._started += 1
        start = self._starts[self._started * 7 % len(self._starts)]
        events = self._events(rid, len(body["input_ids"]), tokens, start)
        return StreamingResponse(events, media_type="text/event-stream")

    async def _events(self, rid: str, prompt_tokens: int, tokens: int, start: int) -> AsyncIterator[bytes]:
        head = b'data: {"text":"","output_ids":['
        meta = b'],"meta_info":{"id":' + orjson.dumps(rid) + b',"finish_reason":'
        counts = b',"prompt_tokens":%d,"completion_tokens":' % prompt_tokens
        tail = b',"cached_tokens":0}}\n\n'
        ids, cycle = self._ids, len(self._ids)
        for k in range(1, tokens + 1):
            if k > 1 and self._steps is not None:
                await self._steps.next()
            elif k == 1 and self._prefill:
                await asyncio.sleep(self._prefill)
            if rid in self._aborted:
                self._aborted.discard(rid)
                return
            finish = b'{"type":"length","length":%d}' % k if k == tokens else b"null"
            yield b"".join((head, ids[(start + k - 1) % cycle], meta, finish, counts, b"%d" % k, tail))
        yield DONE


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0, help="0: a free port (printed on the READY line)")
    parser.add_argument("--interval-ms", type=float, default=15.0, help="time between decode steps; 0: no pacing")
    parser.add_argument("--prefill-ms", type=float, default=0.0, help="time from the response head to the first token")
    args = parser.parse_args()
    backend = FastBackend(*paragraph_ids(), args.interval_ms / 1e3, args.prefill_ms / 1e3)
    # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets whose proto says TCP, and accepted ones inherit it.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    print(f"READY {sock.getsockname()[1]}", flush=True)
    config = uvicorn.Config(backend.app, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
