"""Policy files: the examples load, every kind of mistake is reported with file, line and field, the
loader and policy.schema.json agree, defaults are inherited, directories are checked as a whole."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml

from policies import watch
from policies.auth import hash_key
from policies.loader import PolicyFileError, check_directory, load_policy, read_defaults, validator
from policies.store import PolicyStore
from policies.watch import PolicyWatcher

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "policies" / "examples"
HASH = hash_key("k1")
GOOD = f"""tenant: t
keys:
  - id: k1
    sha256: {HASH}
models: ["m-*"]
"""

# (file text, line, field, words of the message)
INVALID = {
    "unknown top-level field": (GOOD + "modles: [a]\n", 6, "modles", "unknown field"),
    "unknown limit": (GOOD + "limits:\n  requets_per_minute: 5\n", 7, "limits.requets_per_minute", "unknown field"),
    "key not hex": (GOOD.replace(HASH, "xyz"), 4, "keys[0].sha256", "64 hex digits"),
    "key is a raw key": (GOOD.replace(HASH, "sk-" + "a" * 61), 4, "keys[0].sha256", "64 hex digits"),
    "no such date": (GOOD + "", None, None, None),  # replaced below
    "zero max_tokens": (GOOD + "limits:\n  max_tokens: 0\n", 7, "limits.max_tokens", "minimum"),
    "zero requests_per_minute": (
        GOOD + "limits:\n  requests_per_minute: 0\n",
        7,
        "limits.requests_per_minute",
        "a limit of 0 would refuse every request",
    ),
    "zero tokens_per_day": (GOOD + "limits:\n  tokens_per_day: 0\n", 7, "limits.tokens_per_day", "delete its file"),
    "limits not a mapping": (GOOD + "limits: 5\n", 6, "limits", "object"),
    "max_tokens not a number": (GOOD + "limits:\n  max_tokens: lots\n", 7, "limits.max_tokens", "integer"),
    "strict mode": (GOOD + "tools:\n  strict: sometimes\n", 7, "tools.strict", "sometimes"),
    "priority": (GOOD + "priority: urgent\n", 6, "priority", "urgent"),
    "audit shape": (GOOD + "audit:\n  prompt: true\n", 6, "audit", "prompts"),
    "store error mode": (GOOD + "on_store_error: maybe\n", 6, "on_store_error", "maybe"),
    "missing keys": ("tenant: t\nmodels: [a]\n", 1, "keys", "required"),
    "key without id": (f"tenant: t\nkeys:\n  - sha256: {HASH}\n", 3, "keys[0].id", "required"),
    "models not a list": (GOOD.replace('["m-*"]', "m-*"), 5, "models", "array"),
    "unknown per-model limit": (
        GOOD + "limits:\n  models:\n    m-1: {max_tokens: 5}\n",
        8,
        "limits.models.m-1.max_tokens",
        "unknown field",
    ),
    "zero per-model limit": (
        GOOD + "limits:\n  models:\n    m-1:\n      tokens_per_minute: 0\n",
        9,
        "limits.models.m-1.tokens_per_minute",
        "a limit of 0 would refuse every request",
    ),
    "per-model limits not a mapping": (GOOD + "limits:\n  models: [m-1]\n", 7, "limits.models", "object"),
}
INVALID["no such date"] = (
    GOOD.replace(f"sha256: {HASH}", f"sha256: {HASH}\n    expires: 2027-13-45"),
    5,
    "keys[0].expires",
    "date",
)
LOADER_ONLY = {
    "YAML syntax": ("tenant: t\nkeys: [\n", 3, None, "not YAML"),
    # a character YAML never allows: PyYAML refuses it before parsing (it crashed `policy check` and every reload)
    "a NUL byte": (GOOD + "\x00\n", 6, None, "#x0000 is not allowed"),
    # aliases: a few lines of them spell billions of nodes ("billion laughs"), read in the reload forever
    "an alias": (GOOD.replace('["m-*"]', '&m ["m-*"]') + "tools:\n  allow: *m\n", 7, "tools.allow", "aliases"),
    "nested too deep": (GOOD + "limits: " + "[" * 40 + "]" * 40 + "\n", 6, "limits" + "[0]" * 16, "deeper than 16"),
    "larger than a ConfigMap": (GOOD + "#" * (1 << 20) + "\n", None, None, "larger than 1 MiB"),
    "nested past the stack": (GOOD + "limits: " + "[" * 600 + "]" * 600 + "\n", None, None, "deeper than 16"),
    "field twice": (GOOD + "tenant: u\n", 6, "tenant", "twice"),
    "key id twice": (
        GOOD.replace("models", f"  - id: k1\n    sha256: {hash_key('k2')}\nmodels"),
        5,
        "keys[1].id",
        "twice",
    ),
    # one hash under two ids (one expired, say): which entry the key is would depend on their order
    "key hash twice": (
        GOOD.replace("models", f"  - id: k2\n    sha256: {HASH.upper()}\nmodels"),
        6,
        "keys[1].sha256",
        "twice",
    ),
    # NaN passes every comparison a schema makes; asyncio timers at NaN or infinity never fire
    "queue timeout NaN": (GOOD + "limits:\n  queue_timeout_s: .nan\n", 7, "limits.queue_timeout_s", "finite"),
    "queue timeout infinite": (GOOD + "limits:\n  queue_timeout_s: .inf\n", 7, "limits.queue_timeout_s", "finite"),
}
"""Mistakes a JSON Schema cannot see (YAML itself, uniqueness inside a list of objects, numbers that are not finite)."""


def write(directory: Path, name: str, text: str) -> Path:
    path = directory / name
    path.write_text(text)
    return path


def raw(text: str):
    """A YAML document as the JSON the schema describes (dates as ISO strings)."""

    def plain(value):
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value.isoformat() if isinstance(value, dt.date) else value

    try:
        return plain(yaml.safe_load(text))
    except ValueError:  # PyYAML cannot build 2027-13-45; the schema sees the text
        return plain(yaml.load(text, Loader=yaml.BaseLoader))


def schema_accepts(text: str) -> bool:
    return validator().is_valid(raw(text))


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("[!_]*.yaml")), ids=lambda p: p.name)
def test_every_example_loads_and_the_schema_accepts_it(path):
    defaults = read_defaults(EXAMPLES)
    policy = load_policy(path, defaults)
    merged = {**yaml.safe_load((EXAMPLES / "_defaults.yaml").read_text()), **yaml.safe_load(path.read_text())}
    assert schema_accepts(yaml.safe_dump(merged))
    assert policy.keys and all(len(k.sha256) == 64 for k in policy.keys)


CASES = {**{k: (*v, True) for k, v in INVALID.items()}, **{k: (*v, False) for k, v in LOADER_ONLY.items()}}


@pytest.mark.parametrize("case", sorted(CASES))
def test_mistakes_are_named_by_file_line_and_field_and_the_schema_agrees(tmp_path, case):
    text, line, field, words, schema_sees_it = CASES[case]
    path = write(tmp_path, "t.yaml", text)
    with pytest.raises(PolicyFileError) as caught:
        load_policy(path, None)
    errors = caught.value.errors
    assert [(e.file, e.line, e.field) for e in errors] == [(str(path), line, field)], errors
    assert words in errors[0].message, errors[0]
    if schema_sees_it:
        assert not schema_accepts(text)


def test_good_file_passes_the_schema_and_loads(tmp_path):
    assert schema_accepts(GOOD)
    policy = load_policy(write(tmp_path, "t.yaml", GOOD), None)
    assert policy.tenant == "t" and policy.models.match("m-1") and not policy.models.match("x")
    assert policy.tools_allow is None and policy.tools_strict == "client" and policy.priority == "interactive"


@pytest.mark.parametrize("digits", ["1234567890" * 6 + "1234", "0" + "1234567" * 9, "0" * 64])
def test_an_unquoted_hash_of_digits_is_the_hash_not_a_number(tmp_path, digits):
    """YAML reads 64 decimal digits as an integer (digits 0-7 after a 0 as an octal one): the key's text counts."""
    text = f"tenant: 2024\nkeys:\n  - id: 7\n    sha256: {digits}\nmodels: [m]\n"
    policy = load_policy(write(tmp_path, "t.yaml", text), None)
    assert (policy.tenant, policy.keys[0].id, policy.keys[0].sha256) == ("2024", "7", digits)


def test_a_hostile_file_is_refused_cheaply_and_reported_in_a_bounded_number_of_lines(tmp_path):
    """150,000 globs in a 750 KB file were accepted after 9.5 CPU-s of building one regex (per reload, and matched on
    every request); 100,000 unknown fields were 100,000 log lines at each reload; a message quoted the whole value."""
    globs = GOOD.replace('["m-*"]', "[" + ", ".join(["m-*"] * 1001) + "]")
    with pytest.raises(PolicyFileError) as caught:
        load_policy(write(tmp_path, "t.yaml", globs), None)
    [error] = caught.value.errors
    assert (error.line, error.field, error.message) == (5, "models", "at most 1000 entries, not 1001")
    long_name = GOOD + "tools:\n  allow: [" + "a" * 257 + "]\n"
    with pytest.raises(PolicyFileError) as caught:
        load_policy(write(tmp_path, "t.yaml", long_name), None)
    assert [(e.field, e.message) for e in caught.value.errors] == [
        ("tools.allow[0]", "at most 256 characters, not 257")
    ]
    model_limits = GOOD + "limits:\n  models:\n" + "".join(f"    m-{i}: {{}}\n" for i in range(1001))
    with pytest.raises(PolicyFileError) as caught:
        load_policy(write(tmp_path, "t.yaml", model_limits), None)
    assert [(e.field, e.message) for e in caught.value.errors] == [("limits.models", "at most 1000 entries, not 1001")]
    long_glob = GOOD + "limits:\n  models: {" + "a" * 257 + ": {}}\n"
    with pytest.raises(PolicyFileError) as caught:
        load_policy(write(tmp_path, "t.yaml", long_glob), None)
    assert [e.field for e in caught.value.errors] == ["limits.models"]
    not_a_map = GOOD + "limits: [" + ", ".join(["1"] * 5000) + "]\n"
    with pytest.raises(PolicyFileError) as caught:
        load_policy(write(tmp_path, "t.yaml", not_a_map), None)
    assert len(caught.value.errors[0].message) == 300
    unknown = GOOD + "".join(f"x{i}: 1\n" for i in range(60))
    with pytest.raises(PolicyFileError) as caught:
        load_policy(write(tmp_path, "t.yaml", unknown), None)
    errors = caught.value.errors
    assert len(errors) == 51 and str(errors[-1]) == f"{tmp_path / 't.yaml'}: 10 more problems"


def test_whole_numbers_written_as_floats_are_integer_limits(tmp_path):
    """JSON Schema's integers include 5.0: the limits must still be ints (the limiter refuses a float)."""
    text = GOOD + "limits: {requests_per_minute: 5.0, max_tokens: 16.0, tokens_per_day: 1.0e+6}\n"
    limits = load_policy(write(tmp_path, "t.yaml", text), None).limits
    assert (limits.requests_per_minute, limits.max_tokens, limits.tokens_per_day) == (5, 16, 1_000_000)
    assert type(limits.requests_per_minute) is type(limits.max_tokens) is type(limits.tokens_per_day) is int


def test_every_error_of_a_file_is_reported(tmp_path):
    path = write(tmp_path, "t.yaml", GOOD.replace(HASH, "nope") + "priority: urgent\nlimits: {max_tokens: -1}\n")
    with pytest.raises(PolicyFileError) as caught:
        load_policy(path, None)
    assert [e.field for e in caught.value.errors] == ["keys[0].sha256", "priority", "limits.max_tokens"]


def test_defaults_are_deep_merged_and_their_mistakes_point_into_the_defaults_file(tmp_path):
    write(tmp_path, "_defaults.yaml", "limits:\n  max_tokens: 100\n  requests_per_minute: 5\naudit: {prompts: true}\n")
    path = write(tmp_path, "t.yaml", GOOD + "limits:\n  max_tokens: 50\n")
    policy = load_policy(path, read_defaults(tmp_path))
    assert (policy.limits.max_tokens, policy.limits.requests_per_minute) == (50, 5)
    assert policy.audit and policy.audit_prompts
    write(tmp_path, "_defaults.yaml", "priority: batch\nlimits:\n  max_tokns: 100\n")
    with pytest.raises(PolicyFileError) as caught:
        load_policy(path, read_defaults(tmp_path))
    [error] = caught.value.errors
    assert (error.file, error.line, error.field) == (str(tmp_path / "_defaults.yaml"), 3, "limits.max_tokns")


def test_a_models_limits_are_the_first_glob_it_matches_and_a_tenant_replaces_the_defaults_whole(tmp_path):
    """`limits.models` is read in order, so a tenant's entries are not merged after the defaults' (whose `*` would then
    come first and win for every model)."""
    write(
        tmp_path, "_defaults.yaml", "limits:\n  requests_per_minute: 9\n  models:\n    '*': {requests_per_minute: 3}\n"
    )
    defaults = read_defaults(tmp_path)
    inherited = load_policy(write(tmp_path, "t.yaml", GOOD), defaults)
    assert inherited.model_limits.for_model("m-1").requests_per_minute == 3
    text = (
        GOOD
        + "limits:\n  models:\n    m-big: {tokens_per_minute: 500}\n    m-free: {}\n    m-*: {requests_per_minute: 2}\n"
    )
    policy = load_policy(write(tmp_path, "t.yaml", text), defaults)
    big, other = policy.model_limits.for_model("m-big"), policy.model_limits.for_model("m-1")
    assert (big.tokens_per_minute, big.requests_per_minute, other.requests_per_minute) == (500, None, 2)
    assert policy.model_limits.for_model("x") is None  # no glob matches: only the tenant's own limits
    assert policy.model_limits.for_model("m-free") is None  # matched first by {}: the same
    assert policy.limits.requests_per_minute == 9 and policy.limiter_limits.requests_per_minute == 9


def test_defaults_may_not_name_a_tenant_or_keys(tmp_path):
    """Merged under every file, they would make one tenant of a file that forgot its name, or its keys every
    tenant's (a file without `keys` then passed with the defaults' key)."""
    write(tmp_path, "_defaults.yaml", f"models: [m]\ntenant: shared\nkeys:\n  - id: k\n    sha256: {HASH}\n")
    write(tmp_path, "t.yaml", "tenant: t\n")
    good, errors = check_directory(tmp_path)
    assert good == {}
    assert [(Path(e.file).name, e.line, e.field) for e in errors] == [
        ("_defaults.yaml", 2, "tenant"),
        ("_defaults.yaml", 3, "keys"),
    ]
    assert "each tenant's own file" in errors[0].message


def test_a_directory_rejects_clashing_tenants_and_shared_keys(tmp_path):
    write(tmp_path, "a.yaml", GOOD)
    write(tmp_path, "b.yaml", GOOD.replace("k1\n", "k9\n"))  # same tenant, same key hash
    other = GOOD.replace("tenant: t", "tenant: u")
    write(tmp_path, "c.yaml", other)  # another tenant holding a's key
    write(tmp_path, "_notes.yaml", "not: a tenant\n")
    write(tmp_path, "readme.txt", "ignored")
    good, errors = check_directory(tmp_path)
    assert sorted(Path(f).name for f in good) == ["a.yaml"]
    assert [(Path(e.file).name, e.field) for e in errors] == [("b.yaml", "tenant"), ("c.yaml", "keys")]


def test_a_reload_keeps_the_last_good_version_of_a_broken_file(tmp_path):
    path = write(tmp_path, "t.yaml", GOOD)
    store = PolicyStore(tmp_path)
    assert store.reload() == [] and store.lookup(HASH)[0].tenant == "t"
    write(tmp_path, "t.yaml", GOOD + "priority: urgent\n")
    [error] = store.reload()
    assert (error.file, error.line, error.field) == (str(path), 6, "priority")
    assert store.lookup(HASH)[0].tenant == "t"
    path.unlink()
    assert store.reload() == [] and store.lookup(HASH) is None


def test_a_new_version_that_clashes_with_a_last_good_one_is_rejected_and_its_own_last_good_stays(tmp_path):
    """a.yaml's edit takes c's tenant (rejected: a's last good version stays, with its key), and b.yaml's edit takes
    the key a's edit gave up, which a's last good version still holds: b's edit is rejected too, with an error, and
    b's last good version stays (b's tenant used to vanish, its every key a 401, and no error said why)."""
    key = GOOD[GOOD.index("sha256: ") + 8 :].split()[0]
    write(tmp_path, "a.yaml", GOOD)
    write(tmp_path, "b.yaml", GOOD.replace("tenant: t", "tenant: u").replace(key, "b" * 64))
    write(tmp_path, "c.yaml", GOOD.replace("tenant: t", "tenant: v").replace(key, "c" * 64))
    store = PolicyStore(tmp_path)
    assert store.reload() == []
    write(tmp_path, "a.yaml", GOOD.replace("tenant: t", "tenant: v").replace(key, "a" * 64))
    write(tmp_path, "b.yaml", GOOD.replace("tenant: t", "tenant: u"))
    errors = store.reload()
    assert [(Path(e.file).name, e.field) for e in errors] == [("a.yaml", "tenant"), ("b.yaml", "keys")]
    assert {t: p.keys[0].sha256 for t, p in store.tenants.items()} == {"t": key, "u": "b" * 64, "v": "c" * 64}


def test_a_file_written_in_place_is_reloaded_once_it_holds_still(tmp_path):
    """An editor writing a file in place shows it empty or half-written for a moment (this half is even valid: a
    tenant without models); the watcher reloads only a change that held still between two looks."""
    path = write(tmp_path, "t.yaml", GOOD)
    store = PolicyStore(tmp_path)
    store.reload()
    watcher = PolicyWatcher(store)
    assert not watcher.due()
    edited = GOOD.replace('"m-*"', '"m-*", "other"')
    path.write_text(edited[: edited.index("models")])  # the writer is at work...
    assert not watcher.due()
    path.write_text(edited)  # ... and done
    assert not watcher.due()
    assert watcher.due()
    store.reload()
    assert store.lookup(HASH)[0].models.patterns == ("m-*", "other")


def test_a_rewrite_that_restores_size_and_mtime_triggers_a_reload_that_says_what_it_parsed(tmp_path, caplog):
    """A file rewritten to the same size with its mtime restored (`touch -r`, a copy that keeps mtimes) changes only
    its ctime: the watcher's look compared name, mtime, size and inode, so the change a reload would read triggered
    none (until SIGHUP or another change). The reload's line says how many files it parsed and how many it reused."""
    rpm10, rpm20 = (GOOD + f"limits:\n  requests_per_minute: {n}\n" for n in (10, 20))
    path = write(tmp_path, "t.yaml", rpm10)
    write(tmp_path, "u.yaml", GOOD.replace("tenant: t", "tenant: u").replace(HASH, "b" * 64))
    store = PolicyStore(tmp_path)
    store.reload()
    watcher = PolicyWatcher(store)
    before = path.stat()
    while path.stat().st_ctime_ns == before.st_ctime_ns:  # a later ctime tick (no clock can set it back)
        path.write_text(rpm20)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert not watcher.due()  # changed since the last look...
    assert watcher.due()  # ... and held still
    caplog.set_level(logging.WARNING, logger=watch.__name__)
    asyncio.run(watcher._reload(verify=False))
    assert store.lookup(HASH)[0].limits.requests_per_minute == 20
    lines = [r.getMessage() for r in caplog.records if r.name == watch.__name__ and r.levelno == logging.WARNING]
    assert lines == [f"policies reloaded from {tmp_path}: 2 tenants, 0 problems, 1 files parsed, 1 reused"]


def test_a_writer_that_starts_right_after_the_look_that_found_the_directory_still_is_reloaded_once_done(
    tmp_path, monkeypatch
):
    """A file edited in place (same length: 10 → 20) by a writer that starts just after the watcher's look found the
    previous edit still, and whose two halves share one mtime (a coarse clock tick): the state that held still is the
    one counted as loaded, so the finished edit is seen and reloaded (a second look taken at the reload saw the first
    half, and the end left size and mtime alike: never reloaded)."""
    path = write(tmp_path, "t.yaml", GOOD)
    store = PolicyStore(tmp_path)
    store.reload()
    watcher = PolicyWatcher(store, poll_s=0.01)
    rpm10, rpm20 = (GOOD + f"limits:\n  requests_per_minute: {n}\n" for n in (10, 20))
    path.write_text(rpm10)
    os.utime(path, ns=(10**18, 10**18))
    held, looks, tick = watch.snapshot(tmp_path), [], (2 * 10**18, 2 * 10**18)

    def looking(directory: Path) -> tuple:
        state = real_snapshot(directory)
        looks.append(state)
        if looks.count(held) == 2 and state == held:  # the look that finds the edit still; the writer starts
            with path.open("r+") as f:
                f.write(rpm20[: rpm20.index("20")])
            os.utime(path, ns=tick)
        return state

    real_snapshot = watch.snapshot
    monkeypatch.setattr(watch, "snapshot", looking)

    async def watched() -> None:
        task = asyncio.create_task(watcher.run())
        async with asyncio.timeout(10):  # upper bounds, never speed checks
            while (
                store.reloads < 2
            ):  # the edit to 10 (read while the writer is at work: its first half changed no byte)
                await asyncio.sleep(0.01)
            path.write_text(rpm20)  # ... and done, in the same tick
            os.utime(path, ns=tick)
            while store.lookup(HASH)[0].limits.requests_per_minute != 20:
                await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(watched())


def test_a_writer_that_starts_right_after_the_look_that_found_the_directory_still_is_never_read_half_done(
    tmp_path, monkeypatch
):
    """The reload runs after the look that found an edit still: a writer that starts in between (truncates the file,
    writes a first half that parses: the tenant without its tool rules and limits) had that half read and enforced
    until the next reload. A file whose stamp differs from the look's is being written: its last good version stays
    until a later look finds the directory still again."""
    ruled = GOOD + "tools:\n  allow: [get_x]\nlimits:\n  requests_per_minute: {rpm}\n"
    path = write(tmp_path, "t.yaml", ruled.format(rpm=10))
    store = PolicyStore(tmp_path)
    store.reload()
    watcher = PolicyWatcher(store, poll_s=0.01)
    path.write_text(ruled.format(rpm=20))
    held, looks, enforced = watch.snapshot(tmp_path), [], []
    finished = ruled.format(rpm=30)

    def looking(directory: Path) -> tuple:
        state = real_snapshot(directory)
        looks.append(state)
        if looks.count(held) == 2 and state == held:  # the look that finds the edit still; the writer starts
            path.write_text(finished[: finished.index("tools")])
        return state

    def reloaded(ok: bool) -> None:
        enforced.append(store.lookup(HASH)[0])
        if len(enforced) == 1:
            path.write_text(finished)  # the writer's second half, before the next look

    real_snapshot = watch.snapshot
    monkeypatch.setattr(watch, "snapshot", looking)
    watcher.on_reload = reloaded

    async def watched() -> None:
        task = asyncio.create_task(watcher.run())
        async with asyncio.timeout(10):  # an upper bound, never a speed check
            while store.lookup(HASH)[0].limits.requests_per_minute != 30:
                await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(watched())
    assert [(p.tools_allow and p.tools_allow.patterns, p.limits.requests_per_minute) for p in enforced[:1]] == [
        (("get_x",), 10)
    ]
    assert all(p.tools_allow is not None for p in enforced), enforced


def test_a_reload_reads_the_files_off_the_event_loop(tmp_path, monkeypatch):
    """Reading the files costs ~0.7 ms of CPU each (0.33 s for 500 tenants, every file at each change): on the event
    loop, every stream of the gateway would stall that long."""
    write(tmp_path, "t.yaml", GOOD)
    store = PolicyStore(tmp_path)
    store.reload()
    watcher = PolicyWatcher(store, poll_s=0.01)
    threads: list[threading.Thread] = []
    reload = store.reload
    monkeypatch.setattr(store, "reload", lambda *args: threads.append(threading.current_thread()) or reload(*args))

    async def watched() -> None:
        task = asyncio.create_task(watcher.run())
        watcher.request_reload()
        async with asyncio.timeout(10):  # an upper bound, never a speed check
            while store.reloads < 2:
                await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(watched())
    assert threads and threading.main_thread() not in threads


def test_a_reload_that_fails_itself_keeps_the_watcher_going(tmp_path, monkeypatch):
    """A reload that raises (a loader bug; a RecursionError did) is logged and counted as a failure; the watcher
    goes on, so the next change is reloaded (the watcher's task died with it: no reload ever again)."""
    write(tmp_path, "t.yaml", GOOD)
    store = PolicyStore(tmp_path)
    store.reload()
    outcomes: list[bool] = []
    watcher = PolicyWatcher(store, poll_s=0.01, on_reload=outcomes.append)
    reload, failures = store.reload, [RuntimeError("a loader bug")]

    def failing_once(verify: bool, held: dict | None):
        if failures:
            raise failures.pop()
        return reload(verify, held)

    monkeypatch.setattr(store, "reload", failing_once)

    async def watched() -> None:
        task = asyncio.create_task(watcher.run())
        async with asyncio.timeout(10):  # an upper bound, never a speed check
            for count in (1, 2):
                watcher.request_reload()
                while len(outcomes) < count:
                    await asyncio.sleep(0.01)
        task.cancel()

    asyncio.run(watched())
    assert outcomes == [False, True]


def test_policy_check_command(tmp_path):
    write(tmp_path, "good.yaml", GOOD)
    write(tmp_path, "bad.yaml", GOOD.replace("tenant: t", "tenant: u").replace(HASH, "f" * 63) + "extra: 1\n")
    run = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "policy", "check", str(tmp_path)],
        capture_output=True,
        check=False,
        text=True,
        cwd=ROOT,
    )
    assert run.returncode == 1
    assert run.stderr.splitlines() == [
        (
            f"{tmp_path / 'bad.yaml'}:4: keys[0].sha256: must be 64 hex digits: the SHA-256 of the key "
            "(gateway policy hash-key prints it)"
        ),
        (
            f"{tmp_path / 'bad.yaml'}:6: extra: unknown field; allowed: audit, keys, limits, metrics, models, "
            "on_store_error, priority, tenant, tools"
        ),
    ]
    examples = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "policy", "check", str(EXAMPLES)], cwd=ROOT, check=False
    )
    assert examples.returncode == 0


def test_hash_key_command_reads_stdin():
    run = subprocess.run(
        [sys.executable, "-m", "gateway.cli", "policy", "hash-key"],
        input="k1\n",
        capture_output=True,
        check=False,
        text=True,
        cwd=ROOT,
    )
    assert run.returncode == 0 and run.stdout.strip() == HASH
