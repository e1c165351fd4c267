"""What observability costs on the hot path, in CPU microseconds (one process, no network).

- per request: the record the middleware opens, `record_request` (counters and histograms of a generation)
  and the JSON access line (formatted and written to /dev/null), each alone;
- per output step: `step_notes`' note called on each step of a stream of choice steps, against the same stream not
  noted.

    python bench/metrics_bench.py [--requests 20000] [--steps 200000]
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import time

from gateway.observability.access_log import access_log, log_access
from gateway.observability.metrics import GatewayMetrics
from gateway.observability.requests import RequestRecord, begin_request, end_request, step_notes
from gateway.types import ChoiceStep, Piece


def finished_record() -> RequestRecord:
    record = RequestRecord(
        "POST",
        "/v1/chat/completions",
        request_id="0" * 32,
        status=200,
        model="m",
        generating=True,
        replica="http://10.0.0.1:30000",
        prompt_tokens=40,
        completion_tokens=256,
        cached_tokens=16,
        finish_reasons=["stop"],
        grammar_seconds=0.001,
    )
    record.dispatched = record.started + 0.001
    record.first_token = record.started + 0.01
    record.last_token = record.started + 1.0
    return record


def per_request(n: int) -> dict[str, float]:
    metrics = GatewayMetrics()
    records = [finished_record() for _ in range(n)]
    out = {}
    began = time.perf_counter()
    for record in records:
        end_request(begin_request(record))
    out["open and close the request's record"] = (time.perf_counter() - began) / n * 1e6
    began = time.perf_counter()
    for record in records:
        metrics.record_request(record, "/v1/chat/completions", record.started + 1.0)
    out["record_request (a generation's metrics)"] = (time.perf_counter() - began) / n * 1e6
    access_log.handlers[:] = [logging.FileHandler("/dev/null")]
    access_log.propagate = False
    access_log.setLevel(logging.INFO)
    began = time.perf_counter()
    for record in records:
        log_access(record, "/v1/chat/completions", record.started + 1.0)
    out["JSON access line, written"] = (time.perf_counter() - began) / n * 1e6
    access_log.setLevel(logging.WARNING)
    began = time.perf_counter()
    for record in records:
        log_access(record, "/v1/chat/completions", record.started + 1.0)
    out["access line, level above info (skipped)"] = (time.perf_counter() - began) / n * 1e6
    return out


async def _steps(n: int):
    step = ChoiceStep([Piece("x")])
    for _ in range(n):
        yield 0, step


async def _drain(events, note=None) -> float:
    """Seconds to read every step of `events`, calling `note` on each when given (as the answer's loop does)."""
    began = time.perf_counter()
    if note is None:
        async for _ in events:
            pass
    else:
        async for _, step in events:
            note(step)
    return time.perf_counter() - began


async def per_step(n: int) -> tuple[float, float]:
    plain = await _drain(_steps(n))
    token = begin_request(RequestRecord("POST", "/v1/chat/completions"))
    observed = await _drain(_steps(n), step_notes())
    end_request(token)
    return plain / n * 1e6, observed / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--steps", type=int, default=200000)
    args = parser.parse_args()
    print("| per request | µs |\n|---|---:|")
    for name, value in per_request(args.requests).items():
        print(f"| {name} | {value:.2f} |")
    plain, observed = asyncio.run(per_step(args.steps))
    print("\n| per output step | µs |\n|---|---:|")
    print(f"| a stream of steps, not noted | {plain:.3f} |")
    print(f"| the same stream, each step noted (step_notes) | {observed:.3f} |")
    print(f"| added by the notes | {observed - plain:.3f} |")


if __name__ == "__main__":
    main()
