"""Benchmark the bundled worker against Hugging Face transformers on the same model and threads.

    python bench/worker_bench.py [--threads 2] [--tokens 64] [--device cpu|cuda] [--prefill 500 2000]
                                 [--weights fp32 bf16] [--worker-threads N] [--cuda-graphs off auto]

Starts the real worker process (fp32, then bf16 weights; each `--cuda-graphs` setting in turn) and talks to it
over HTTP; runs
transformers `generate` in this process while the worker is idle. Prefill is timed on prompts of
each `--prefill` length (the worker's own prefill timer; one forward of transformers). Needs `transformers` and
`accelerate` (bench-only dependencies). Prints the CPU features it ran on; a configuration the
worker refuses on this CPU (bf16 without AVX-512 or AVX-NE-CONVERT) is reported with the reason.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from backends.checkpoint import embedded_gguf_path, load_checkpoint
from backends.worker.cpu_features import cpu_features
from backends.worker.threads import describe_cpus

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):",
    "Once upon a time, in a small village,",
    "The three laws of thermodynamics are",
    "<|im_start|>user\nWrite a haiku about the sea.<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nWhat is 17 times 23?<|im_end|>\n<|im_start|>assistant\n",
    "Here is a list of fruits: apple, banana,",
    "In machine learning, overfitting means",
]
SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {
            "name": {"type": "string"},
            "age": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}},
        },
        "required": ["name", "age", "tags"],
    }
)


@dataclass
class Row:
    name: str
    decode_b1: float
    aggregate_b8: float
    prefill: dict[int, float]
    grammar_ms: float | None = None
    grammar_pct: float | None = None
    agreement: str = "reference"
    decode_path: str = "n/a"
    """The worker's `cuda_graphs` state, and how its decode steps ran (graph replays / eager)."""


class WorkerDidNotStart(RuntimeError):
    """The worker exited before serving; the message is its last line on stderr."""


@contextlib.contextmanager
def worker(*options: str, root: Path = ROOT) -> Iterator[str]:
    """`python -m backends.worker --port 0` with `options`, started from the checkout at `root`, until the block
    ends: its base URL, once it is ready."""
    cmd = [sys.executable, "-m", "backends.worker", "--port", "0", *options]
    with tempfile.TemporaryFile("w+") as log:
        proc = subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            line = proc.stdout.readline()
            if not line.startswith("READY "):
                proc.wait(timeout=30)
                log.seek(0)
                last = (log.read().strip().splitlines() or ["no output"])[-1]
                raise WorkerDidNotStart(f"exit code {proc.returncode}: {last.removeprefix('[worker] ')}")
            yield f"http://127.0.0.1:{line.split()[1]}"
        finally:
            proc.terminate()
            proc.wait(timeout=30)


async def stream_times(
    client: httpx.AsyncClient, ids: list[int], tokens: int, **extra
) -> tuple[list[float], list[int]]:
    """Arrival time of each streamed event and all output ids."""
    body = {
        "input_ids": ids,
        "stream": True,
        "sampling_params": {"max_new_tokens": tokens, "temperature": 0, "ignore_eos": True, **extra},
    }
    times, out = [], []
    async with client.stream("POST", "/generate", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: {"):
                times.append(time.perf_counter())
                out += json.loads(line[6:])["output_ids"]
    return times, out


async def worker_decode_rate(client: httpx.AsyncClient, ids: list[int], tokens: int) -> float:
    """Batch-1 decode tokens/s of one streamed request: events after the first over their span."""
    times, _ = await stream_times(client, ids, tokens)
    return (len(times) - 1) / (times[-1] - times[0])


async def server_stats(client: httpx.AsyncClient) -> dict:
    return (await client.get("/get_server_info")).json()["internal_states"][0]


def delta(after: dict, before: dict) -> dict:
    return {k: after[k] - before[k] for k in after if isinstance(after[k], (int, float))}


async def measure_worker(
    url: str,
    name: str,
    prompts: list[list[int]],
    long_prompts: list[list[int]],
    tokens: int,
    reference: list[list[int]] | None,
) -> tuple[Row, list[list[int]]]:
    async with httpx.AsyncClient(base_url=url, timeout=600) as client:
        await stream_times(client, prompts[0], 4)  # warm-up
        rates = [await worker_decode_rate(client, ids, tokens) for ids in prompts[:3]]
        began = time.perf_counter()
        results = await asyncio.gather(*(stream_times(client, ids, tokens) for ids in prompts))
        aggregate = sum(len(out) for _, out in results) / (time.perf_counter() - began)
        prefill = {}
        for long_prompt in long_prompts:
            before = await server_stats(client)
            await stream_times(client, long_prompt, 1)
            done = delta(await server_stats(client), before)
            prefill[len(long_prompt)] = done["prefill_tokens"] / done["prefill_seconds"]
        before = await server_stats(client)
        await stream_times(client, prompts[4], tokens, json_schema=SCHEMA, ignore_eos=False)
        g = delta(await server_stats(client), before)
        greedy = [(await stream_times(client, ids, tokens))[1] for ids in prompts]
        stats = await server_stats(client)
    step_ms = g["decode_seconds"] / g["decode_steps"] * 1e3
    grammar_ms = g["grammar_seconds"] / g["decode_steps"] * 1e3
    row = Row(name, statistics.median(rates), aggregate, prefill, grammar_ms, 100 * grammar_ms / step_ms)
    row.decode_path = (
        f"{stats['decode_graph_replays']} / {stats['decode_eager_steps']} ({stats['cuda_graphs']})"
        if "cuda_graphs" in stats
        else "n/a"
    )
    if reference is not None:
        row.agreement = agreement(greedy, reference)
    return row, greedy


def agreement(outputs: list[list[int]], reference: list[list[int]]) -> str:
    same = sum(a == b for o, r in zip(outputs, reference) for a, b in zip(o, r))
    total = sum(len(r) for r in reference)
    identical = sum(o == r for o, r in zip(outputs, reference))
    return f"{100 * same / total:.1f}% tokens, {identical}/{len(reference)} prompts identical"


def load_transformers(device: str):
    """The embedded model in transformers (float32) on `device`: read from its GGUF by transformers, or, where
    `accelerate` (which that needs) is absent, transformers' `LlamaForCausalLM` holding the worker's own dequantized
    weights (the same numbers: its logits match the worker's)."""
    from transformers import AutoModelForCausalLM

    path = embedded_gguf_path()
    try:
        import accelerate  # noqa: F401
    except ImportError:
        return llama_from_worker_weights().to(device).eval()
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    return model.to(device).eval()


def llama_from_worker_weights():
    """transformers' `LlamaForCausalLM` built from the embedded checkpoint's config and the worker's weights."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from backends.worker.weights import load_weights

    checkpoint = load_checkpoint(None)
    c, weights = checkpoint.config, load_weights(checkpoint)
    config = LlamaConfig(
        vocab_size=c.vocab_size,
        hidden_size=c.hidden,
        intermediate_size=c.ffn,
        num_hidden_layers=c.n_layers,
        num_attention_heads=c.n_heads,
        num_key_value_heads=c.n_kv_heads,
        head_dim=c.head_dim,
        rope_theta=c.rope_base,
        rms_norm_eps=c.rms_eps,
        max_position_embeddings=c.context_length,
        tie_word_embeddings=c.tied_embeddings,
        torch_dtype=torch.float32,
    )
    state = {"model.embed_tokens.weight": weights.embedding, "model.norm.weight": weights.final_norm}
    state["lm_head.weight"] = weights.lm_head
    for i, layer in enumerate(weights.layers):
        names = {"self_attn.q_proj": layer.q, "self_attn.k_proj": layer.k, "self_attn.v_proj": layer.v}
        names |= {"self_attn.o_proj": layer.o, "mlp.gate_proj": layer.gate, "mlp.up_proj": layer.up}
        names |= {"mlp.down_proj": layer.down, "input_layernorm": layer.attn_norm}
        names["post_attention_layernorm"] = layer.ffn_norm
        state |= {f"model.layers.{i}.{name}.weight": tensor for name, tensor in names.items()}
    model = LlamaForCausalLM(config)
    model.load_state_dict(state, strict=False)
    return model


def _finished(device: str) -> float:
    """perf_counter once the device's queued work is done."""
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter()


def transformers_generate(model, batch: list[list[int]], n: int, device: str) -> float:
    """Seconds for greedy `generate` of exactly `n` new tokens for each (left-padded) prompt of `batch`."""
    width = max(map(len, batch))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in batch], device=device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=device)
    began = _finished(device)
    with torch.inference_mode():
        model.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0
        )
    return _finished(device) - began


def transformers_decode_rate(model, prompt: list[int], tokens: int, device: str) -> float:
    """Batch-1 decode tokens/s: `tokens` new tokens less the prefill and first token."""
    full = transformers_generate(model, [prompt], tokens, device)
    return (tokens - 1) / (full - transformers_generate(model, [prompt], 1, device))


def measure_transformers(prompts: list[list[int]], long_prompts: list[list[int]], tokens: int, device: str) -> Row:
    model = load_transformers(device)

    def prefill(ids: list[int]) -> float:
        with torch.inference_mode():
            began = _finished(device)
            model(torch.tensor([ids], device=device))
            return len(ids) / (_finished(device) - began)

    transformers_generate(model, prompts[:1], 4, device)
    rates = [transformers_decode_rate(model, p, tokens, device) for p in prompts[:3]]
    aggregate = len(prompts) * tokens / transformers_generate(model, prompts, tokens, device)
    prefills = {len(ids): max(prefill(ids) for _ in range(2)) for ids in long_prompts}
    return Row("transformers generate (fp32)", statistics.median(rates), aggregate, prefills, agreement="n/a")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per request")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--prefill", type=int, nargs="+", default=[500], help="prompt lengths whose prefill is timed")
    parser.add_argument("--weights", nargs="+", choices=["fp32", "bf16"], default=["fp32", "bf16"])
    parser.add_argument("--worker-threads", type=int, help="the worker's torch threads (default: --threads)")
    parser.add_argument(
        "--cuda-graphs",
        nargs="+",
        choices=["off", "auto"],
        default=["auto"],
        help="the worker's --cuda-graphs settings, a worker (and a row) each per weights dtype",
    )
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    checkpoint = load_checkpoint(None)
    encode = lambda text: checkpoint.tokenizer.encode(text).ids
    prompts = [encode(p) for p in PROMPTS]
    text = encode(" ".join(PROMPTS))
    long_prompts = [(text * (n // len(text) + 1))[:n] for n in args.prefill]

    hf = measure_transformers(prompts, long_prompts, args.tokens, args.device)
    rows: dict[str, Row] = {}
    not_run: dict[str, str] = {}
    reference = None
    names = {"fp32": "worker fp32", "bf16": "worker bf16 weights"}
    for dtype in args.weights:
        for graphs in args.cuda_graphs:
            name = names[dtype] + (f", graphs {graphs}" if len(args.cuda_graphs) > 1 else "")
            try:
                threads = str(args.worker_threads or args.threads)
                options = (
                    "--device",
                    args.device,
                    "--max-batch",
                    "8",
                    "--context-length",
                    "2048",
                    "--weights-dtype",
                    dtype,
                    "--cuda-graphs",
                    graphs,
                )
                with worker("--threads", threads, *options) as url:
                    rows[name], greedy = asyncio.run(
                        measure_worker(url, name, prompts, long_prompts, args.tokens, reference)
                    )
            except WorkerDidNotStart as e:
                not_run[name] = str(e)
                continue
            reference = reference or greedy

    print(
        f"threads={args.threads} worker_threads={args.worker_threads or args.threads} new_tokens={args.tokens} "
        f"torch={torch.__version__} device={args.device}"
    )
    print(
        f"cpu: {cpu_features().describe()} (torch dispatch {torch.backends.cpu.get_cpu_capability()}; "
        f"{describe_cpus()})"
    )
    if args.device == "cuda":
        print(f"gpu: {torch.cuda.get_device_name()}")
    prefill_heads = "".join(f" prefill tok/s ({n} tokens) |" for n in args.prefill)
    print(
        f"| engine | decode tok/s (batch 1) | aggregate tok/s (8 concurrent) |{prefill_heads} "
        "grammar per step | greedy agreement vs the first worker | decode steps: graph replays / eager |"
    )
    print("|---|---:|---:|" + "---:|" * len(args.prefill) + "---:|---|---|")
    for row in (hf, *rows.values()):
        grammar = "n/a" if row.grammar_ms is None else f"{row.grammar_ms:.2f} ms ({row.grammar_pct:.1f}%)"
        prefills = "".join(f" {row.prefill[n]:.0f} |" for n in args.prefill)
        print(
            f"| {row.name} | {row.decode_b1:.1f} | {row.aggregate_b8:.1f} |{prefills} {grammar} | {row.agreement} "
            f"| {row.decode_path} |"
        )
    for name, reason in not_run.items():
        print(f"| {name} | not run: {reason} |" + " |" * (4 + len(args.prefill)))
    fp32 = next((row for name, row in rows.items() if name.startswith(names["fp32"])), None)
    if fp32 is not None:
        prefill = ", ".join(f"{n} tokens {fp32.prefill[n] / hf.prefill[n]:.2f}x" for n in args.prefill)
        print(
            f"worker fp32 vs transformers at batch 1: {fp32.decode_b1 / hf.decode_b1:.2f}x (goal >= 1.5x); "
            f"prefill {prefill} (goal >= 1x); "
            f"8 concurrent vs batch 1: {fp32.aggregate_b8 / fp32.decode_b1:.2f}x (goal >= 5x); "
            f"grammar {fp32.grammar_pct:.1f}% of a step (goal <= 3%)"
        )


if __name__ == "__main__":
    main()
