"""The memory store's item index (item_reference): memory per stored item and CPU to resolve a request's references.

Stores one response of N small message items (short client ids, the index's worst case against the JSON), measures
with tracemalloc what the record and its index hold per item, then resolves N references to them at once.
Prints a table: items, JSON bytes/item, held bytes/item, index bytes/item, the INDEX_ENTRY_BYTES the store counts,
and the CPU seconds of one get_items over all N ids.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import tracemalloc

import orjson

from gateway.api.response_store import INDEX_ENTRY_BYTES, MemoryStore


def measure(count: int) -> tuple[float, float, float]:
    items = [
        {"type": "message", "id": f"m{i}", "role": "user", "content": [{"type": "input_text", "text": ""}]}
        for i in range(count)
    ]
    record = {"id": "r", "owner": "tenant", "response": {"output": []}, "input_items": items, "history": []}
    store = MemoryStore(max_bytes=1 << 40, max_count=1 << 30)
    json_bytes = len(orjson.dumps(record)) / count
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    asyncio.run(store.put(record))
    held = (tracemalloc.get_traced_memory()[0] - before) / count
    tracemalloc.stop()
    started = time.process_time()
    found = asyncio.run(store.get_items([item["id"] for item in items], "tenant"))
    cpu = time.process_time() - started
    assert len(found) == count
    return json_bytes, held, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    args = parser.parse_args()
    print("| items | JSON bytes/item | held bytes/item | index bytes/item | counted | get_items CPU s |")
    print("|---:|---:|---:|---:|---:|---:|")
    for count in args.counts:
        json_bytes, held, cpu = measure(count)
        index = held - json_bytes
        print(f"| {count} | {json_bytes:.0f} | {held:.0f} | {index:.0f} | {INDEX_ENTRY_BYTES} | {cpu:.3f} |")


if __name__ == "__main__":
    main()
