"""Stop strings and min_new_tokens in the engine, on the real model: the output ends on the token completing a stop."""

from __future__ import annotations

from backends.detokenizer import Detokenizer, added_tokens
from backends.worker.output_text import OutputText

from .conftest import Collector, prompt_ids, submit

COUNTING = "1, 2, 3, 4,"  # greedy: " 5, 6, 7, ..." one token per character
COMMA = 28


def output_text(checkpoint, stops: list[str], **kwargs) -> OutputText:
    added, _ = added_tokens(checkpoint.tokenizer)
    return OutputText(Detokenizer(checkpoint.tokenizer, added), stops, **kwargs)


def counting(engine, checkpoint, **runs: dict) -> dict[str, tuple[list[int], str, object]]:
    """Run the counting prompt with each keyword's settings, all in one batch: output ids, the text the engine's
    events carried, and the finish, by name."""
    prompt = prompt_ids(checkpoint, COUNTING)
    collectors = {name: submit(engine, f"count-{name}", prompt, **settings) for name, settings in runs.items()}
    return {name: _read(collector) for name, collector in collectors.items()}


def _read(collector: Collector) -> tuple[list[int], str, object]:
    out, text = [], []
    while True:
        event = collector.next()
        out += [t.token_id for t in event.tokens]
        text += [p.text for p in event.pieces or []]
        if event.finish is not None:
            return out, "".join(text), event.finish


def test_a_stop_string_spanning_tokens_ends_the_output_on_its_last_token(engine, checkpoint):
    runs = counting(
        engine,
        checkpoint,
        cut={"max_new_tokens": 8, "text": output_text(checkpoint, ["5, 6", "7"])},
        kept={"max_new_tokens": 8, "text": output_text(checkpoint, ["5, 6"], keep_stop=True)},
        unmatched={"max_new_tokens": 3, "text": output_text(checkpoint, ["zzz"])},
    )
    ids, text, finish = runs["cut"]
    assert checkpoint.tokenizer.decode(ids) == " 5, 6" and len(ids) == 5  # " ", "5", ",", " ", "6"
    assert (text, finish.type, finish.matched) == (" ", "stop", "5, 6")
    assert runs["kept"][:2] == (ids, " 5, 6")
    ids, text, finish = runs["unmatched"]
    assert (text, finish.type) == (checkpoint.tokenizer.decode(ids), "length")


def test_min_tokens_gates_stop_strings_only_when_asked(engine, checkpoint):
    runs = counting(
        engine,
        checkpoint,
        sglang={"max_new_tokens": 8, "min_new_tokens": 4, "text": output_text(checkpoint, [","])},
        vllm={"max_new_tokens": 8, "min_new_tokens": 4, "text": output_text(checkpoint, [","], unarmed_tokens=4)},
    )
    assert (len(runs["sglang"][0]), runs["sglang"][1]) == (3, " 5")  # SGLang: min_new_tokens gates stop tokens only
    assert (len(runs["vllm"][0]), runs["vllm"][1]) == (6, " 5, 6")  # vLLM: the first "," ends in the first 4 tokens


def test_min_new_tokens_holds_stop_tokens_back(engine, checkpoint):
    runs = counting(
        engine,
        checkpoint,
        free={"max_new_tokens": 6, "stop_token_ids": [COMMA]},
        held={"max_new_tokens": 6, "stop_token_ids": [COMMA], "min_new_tokens": 4},
    )
    assert runs["free"][0][-1] == COMMA and len(runs["free"][0]) == 3
    ids, _, _ = runs["held"]
    assert COMMA not in ids[:4] and len(ids) >= 5  # EOS is held back too
