"""Stop strings and min_new_tokens in the engine, on the real model: the output ends on the token completing a stop."""

from __future__ import annotations

from backends.detokenizer import Detokenizer, added_tokens
from backends.worker.output_text import OutputText

from .conftest import chat_ids, prompt_ids, submit

COUNTING = "1, 2, 3, 4,"  # greedy: " 5, 6, 7, ..." one token per character


def output_text(checkpoint, stops: list[str], **kwargs) -> OutputText:
    added, _ = added_tokens(checkpoint.tokenizer)
    return OutputText(Detokenizer(checkpoint.tokenizer, added), stops, **kwargs)


def run(engine, rid: str, ids: list[int], **kwargs) -> tuple[list[int], str, object]:
    """Output ids, the text the engine's events carried, and the finish."""
    collector = submit(engine, rid, ids, **kwargs)
    out, text = [], []
    while True:
        event = collector.next()
        out += [t.token_id for t in event.tokens]
        text += [p.text for p in event.pieces or []]
        if event.finish is not None:
            return out, "".join(text), event.finish


def test_a_stop_string_spanning_tokens_ends_the_output_on_its_last_token(engine, checkpoint):
    prompt = prompt_ids(checkpoint, COUNTING)
    free, _ = submit(engine, "count", prompt, max_new_tokens=8).wait()
    assert checkpoint.tokenizer.decode(free).startswith(" 5, 6, 7")
    ids, text, finish = run(engine, "count-stop", prompt, max_new_tokens=8, text=output_text(checkpoint, ["5, 6"]))
    assert (ids, text, finish.type, finish.matched) == (free[:5], " ", "stop", "5, 6")
    ids, text, _ = run(engine, "count-keep", prompt, max_new_tokens=8,
                       text=output_text(checkpoint, ["5, 6"], keep_stop=True))
    assert (ids, text) == (free[:5], " 5, 6")
    ids, text, finish = run(engine, "count-none", prompt, max_new_tokens=3, text=output_text(checkpoint, ["zzz"]))
    assert (text, finish.type) == (checkpoint.tokenizer.decode(free[:3]), "length")


def test_min_tokens_gates_stop_strings_only_when_asked(engine, checkpoint):
    prompt = prompt_ids(checkpoint, COUNTING)
    ids, text, _ = run(engine, "sglang-min", prompt, max_new_tokens=8, min_new_tokens=4,
                       text=output_text(checkpoint, [","]))
    assert (len(ids), text) == (3, " 5")  # SGLang: min_new_tokens holds back stop tokens, not stop strings
    ids, text, _ = run(engine, "vllm-min", prompt, max_new_tokens=8, min_new_tokens=4,
                       text=output_text(checkpoint, [","], unarmed_tokens=4))
    assert (len(ids), text) == (6, " 5, 6")  # vLLM: the first "," ends inside the first 4 tokens


def test_min_new_tokens_holds_eos_back(engine, checkpoint):
    prompt = chat_ids(checkpoint, "Say hi.")
    free, _ = submit(engine, "hi", prompt, max_new_tokens=40).wait()
    assert free[-1] == 2
    least = len(free) + 2
    ids, _ = submit(engine, "hi-min", prompt, max_new_tokens=least + 4, min_new_tokens=least).wait()
    assert 2 not in ids[:least] and len(ids) > least
