"""Bounds on what one chat-template render may cost: steps (loop iterations, macro calls, and the items the filters
and calls they make go over) and the size of any value an operation builds (a string or list repeated, joined, padded,
formatted, concatenated; an integer raised or multiplied; what any filter or call returned, and a list or mapping a
filter writes out as text), so a template that loops for ever or builds a string
past the prompt's limit stops with `TemplateError` instead of hanging or taking the memory of the process.

The sandbox (prompts/template.py) routes its operators, calls and filters here; `bound_loops` rewrites a parsed
template so that each `for` loop's items pass through a counting filter, and each `~` concatenation and chain of `+`
through a sizing one. A loop is charged the iterations it runs: one that has no `{% break %}` of its own runs all
its items (charged at its start, in one call), one that has is charged an item as it takes it; a `range(...)` a loop
goes over is charged only so (any other range its length when made: a `|list`, a `|sum` of it goes over it all). The budget is the current thread's, set by `render_budget` around one render; without one (a
template rendered outside it) nothing is counted.
"""

from __future__ import annotations

import operator
import re
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import wraps
from string import Formatter
from types import BuiltinMethodType, FunctionType, MethodType
from typing import Any

from jinja2 import nodes, pass_context
from jinja2.runtime import Context, LoopContext, Macro
from jinja2.sandbox import safe_range

MAX_TEMPLATE_STEPS = 20_000_000
"""Steps one render may take (a loop's item, an item a filter goes over in Python; a macro's or a recursive loop's
call counts MACRO_STEPS; any other call is bounded by its input)."""
MACRO_STEPS = 64
"""What a call of a macro (or of a recursive loop's `loop`) costs in steps: about as much CPU as 64 loop items."""
MAX_RENDER_CPU_S = 10.0
"""The thread CPU time one render may take, whatever its steps cost (a backstop to the step count)."""
MAX_INTEGER_BITS = 1 << 20
"""The largest integer (in bits) a template's `*` or `**` may make."""


class TemplateError(ValueError):
    """A chat template could not be compiled or rendered (a client error: HTTP 400); prompts/template.py's."""


class RenderOverBudget(TemplateError):
    """A render stopped past its steps or its CPU time: a loop without end, or a finite one too long for the limit
    (a template whose work grows as the square of the messages, on a long conversation)."""

    def __init__(self, limit: str, conversation: str = "") -> None:
        """`limit`: the limit passed, in words (`20,000,000 steps`, `10 s of CPU`); `conversation`: how long the
        conversation rendered was, in words (`3,000 messages, 2 tools`), where known."""
        self.limit = limit
        work = f"the template's work for this conversation ({conversation})" if conversation else "the template's work"
        super().__init__(f"chat template error: {work} exceeded its limit of {limit}")


class _Budget:
    __slots__ = ("chars", "deadline", "limit", "next_clock", "steps")

    def __init__(self, steps: int, chars: int):
        self.limit = steps
        self.steps = steps
        self.chars = chars
        self.deadline = time.thread_time() + MAX_RENDER_CPU_S
        self.next_clock = max(steps - _CLOCK_EVERY, -1)


_CLOCK_EVERY = 4096
"""Steps between two reads of the thread's CPU clock."""


_STATE = threading.local()


@contextmanager
def render_budget(steps: int, chars: int) -> Iterator[None]:
    """Renders in this thread, meanwhile, take at most `steps` steps and build no value of more than `chars` items;
    within a budget already running here, they count against that one."""
    if getattr(_STATE, "budget", None) is not None:
        yield
        return
    _STATE.budget = _Budget(steps, chars)
    try:
        yield
    finally:
        _STATE.budget = None


def charge(steps: int) -> None:
    """Count `steps` against the current render's budget; TemplateError past it."""
    budget = getattr(_STATE, "budget", None)
    if budget is not None:
        budget.steps -= steps
        if budget.steps < budget.next_clock:
            _checkpoint(budget)


def _checkpoint(budget: _Budget) -> None:
    """Past a few thousand steps since the last: refuse a render out of steps or past its CPU time."""
    if budget.steps < 0:
        raise RenderOverBudget(f"{budget.limit:,} steps")
    budget.next_clock = max(budget.steps - _CLOCK_EVERY, -1)
    if time.thread_time() > budget.deadline:
        raise RenderOverBudget(f"{MAX_RENDER_CPU_S:g} s of CPU")


ALWAYS_FITS = 1 << 16
"""A value of at most this many items is never refused (no render's limit is smaller): the common case costs no
look-up of the budget."""


def check_size(size: int, what: str) -> None:
    """Refuse a value of `size` items (characters, elements) past the current render's limit."""
    if size <= ALWAYS_FITS:
        return
    budget = getattr(_STATE, "budget", None)
    if budget is not None and size > budget.chars:
        raise TemplateError(f"chat template error: {what} would make a value of {size} items (at most {budget.chars})")


def check_built(value: Any, what: str) -> Any:
    """`value`, refused when a string, list or tuple past the current render's limit: sized once made, so a chain of
    operations that each multiply their input (`tojson` doubling backslashes, `'{}{}'.format(s, s)`) stops within a
    few times the limit."""
    if isinstance(value, (str, list, tuple)) and len(value) > ALWAYS_FITS:
        check_size(len(value), what)
    return value


def text_size(value: Any, limit: int) -> int:
    """The characters at least that `value` takes as text (its strings' lengths, a character per other item),
    counted until past `limit`; a step charged per item gone over."""
    size, pending, seen = 0, [value], 0
    while pending and size <= limit:
        item = pending.pop()
        seen += 1
        if isinstance(item, str):
            size += len(item) + 2
        elif isinstance(item, dict):
            size += 2
            pending += item.keys()
            pending += item.values()
        elif isinstance(item, (list, tuple)):
            size += 2
            pending += item
        else:
            size += 1
    charge(seen)
    return size


def _items(value: Any) -> int:
    """The items a filter that goes over `value` in Python takes steps for (a string's characters it does not)."""
    return len(value) if isinstance(value, (list, tuple, dict)) else 0


# -- for loops and concatenations ---------------------------------------------------------------------------------

COUNT_FILTER = "gateway-count"
"""The filter the items of a `for` loop without a `break` of its own pass through (a name no template can spell: a
filter name is an identifier)."""
COUNT_AS_RUN_FILTER = "gateway-count-as-run"
"""The filter the items of a `for` loop that can end early (a `break` of its own) pass through."""
LOOP_RANGE_FILTER = "gateway-loop-range"
"""The filter a `for` loop's `range(...)` becomes: the range, not charged as made (the loop charges what it runs)."""
CONCAT_FILTER = "gateway-concat"
"""The filter a `~` concatenation becomes."""
PLUS_FILTER = "gateway-plus"
"""The filter a chain of `+` becomes (one call for the chain rather than one per `+`)."""


_SIZED = frozenset((list, tuple, dict, str, range))
"""The types whose items a loop can count before it starts (all of them charged then, as it cannot go on for ever)."""


def counted(items: Any) -> Any:
    """`items`, charged a step each: a container's at once, any other iterable's as the loop takes them."""
    budget = getattr(_STATE, "budget", None)
    if budget is None:
        return items
    if type(items) in _SIZED:
        charge(len(items))
        return items
    return _counting(items, budget)


def counted_as_run(items: Any) -> Any:
    """`items`, charged a step each as the loop takes it (a loop that can end early: the items it skips cost
    nothing); a container keeps its length (`loop.length`, `loop.last` read it, not a copy)."""
    budget = getattr(_STATE, "budget", None)
    if budget is None:
        return items
    if type(items) in _SIZED:
        return _CountedAsRun(items, budget)
    return _counting(items, budget)


class _CountedAsRun:
    """A container whose iteration charges a step per item taken."""

    __slots__ = ("budget", "items")

    def __init__(self, items: Any, budget: _Budget) -> None:
        self.items = items
        self.budget = budget

    def __len__(self) -> int:
        return len(self.items)

    def __iter__(self) -> Iterator[Any]:
        return _counting(self.items, self.budget)


@pass_context
def loop_range(context: Context, function: Any, *args: Any) -> Any:
    """`function(*args)` for a loop's `range(...)`: the sandbox's range (at most 100,000 items) uncharged, as the loop
    charges the items it runs; a `range` the template rebound called as any call is."""
    if function is bounded_range:
        return safe_range(*args)
    return context.environment.call(context, function, *args)


def _counting(items: Any, budget: _Budget) -> Iterator[Any]:
    for item in items:
        budget.steps -= 1
        if budget.steps < budget.next_clock:
            _checkpoint(budget)
        yield item


def concat(parts: list[Any]) -> str:
    """Jinja's `~`: the parts as strings, joined, within the size limit."""
    texts = [str(part) for part in parts]
    check_size(sum(map(len, texts)), "a '~' concatenation")
    return "".join(texts)


def summed(first: Any, *rest: Any) -> Any:
    """Jinja's `+` over a chain of operands, left to right, each sum within the size limit."""
    for part in rest:
        first = first + part
        if (type(first) in _SEQUENCE_TYPES or isinstance(first, (str, list, tuple))) and len(first) > ALWAYS_FITS:
            check_size(len(first), "'+'")
    return first


_SEQUENCE_TYPES = frozenset((str, list, tuple))
"""The types a sum's size is checked for, looked up before `isinstance` tries their subclasses (a quarter faster)."""


def bound_loops(template: nodes.Template) -> nodes.Template:
    """`template` with each `for` loop's items counted, each `~` concatenation bounded and each chain of `+` whose
    operands cannot fail summed in one bounded call."""
    for loop in template.find_all(nodes.For):
        items = _range_of_loop(loop.iter) or loop.iter
        counter = COUNT_AS_RUN_FILTER if _can_end_early(loop.body) else COUNT_FILTER
        loop.iter = nodes.Filter(items, counter, [], [], None, None, lineno=loop.lineno)
    for parent in template.find_all(nodes.Node):
        for field in parent.fields:
            value = getattr(parent, field, None)
            if isinstance(value, nodes.Expr):
                setattr(parent, field, _bounded(value))
            elif isinstance(value, list):
                setattr(parent, field, [_bounded(v) if isinstance(v, nodes.Expr) else v for v in value])
    return template


def _range_of_loop(items: nodes.Expr) -> nodes.Filter | None:
    """`range(...)` as a loop's items: the same call through the loop's range filter; else None."""
    if not isinstance(items, nodes.Call) or items.kwargs or items.dyn_args or items.dyn_kwargs:
        return None
    if not (isinstance(items.node, nodes.Name) and items.node.name == "range"):
        return None
    return nodes.Filter(items.node, LOOP_RANGE_FILTER, items.args, [], None, None, lineno=items.lineno)


def _can_end_early(body: list[nodes.Node]) -> bool:
    """Whether a loop's body has a `{% break %}` of its own (not one of a loop inside it; one in an inner loop's
    `else` is the outer loop's)."""
    pending: list[nodes.Node] = list(body)
    while pending:
        node = pending.pop()
        if isinstance(node, nodes.Break):
            return True
        if isinstance(node, nodes.For):
            pending += node.else_
        else:
            pending += node.iter_child_nodes()
    return False


def _bounded(node: nodes.Expr) -> nodes.Expr:
    if isinstance(node, nodes.Concat):
        return nodes.Filter(
            nodes.List(node.nodes, lineno=node.lineno), CONCAT_FILTER, [], [], None, None, lineno=node.lineno
        )
    if isinstance(node, nodes.Add):
        return _summed_chain(node) or node
    return node


def _summed_chain(node: nodes.Add) -> nodes.Filter | None:
    """`a + b + c ...` as one call of the `+` filter, where that cannot change which error the chain raises: its
    operands are all evaluated before its first `+` (which can fail) runs, so each operand past the second must be
    one that cannot fail then (a constant, a name, or an item or attribute of a name an earlier operand read one of:
    that name is then no undefined)."""
    operands: list[nodes.Expr] = []
    while isinstance(node, nodes.Add):
        operands.append(node.right)
        node = node.left
    operands = [node, *reversed(operands)]
    if len(operands) < 3:
        return None
    read: set[str] = set()
    for index, operand in enumerate(operands):
        owner = _read_name(operand)
        if index >= 2 and not isinstance(operand, (nodes.Const, nodes.Name)) and owner not in read:
            return None
        if owner is not None:
            read.add(owner)
    return nodes.Filter(operands[0], PLUS_FILTER, operands[1:], [], None, None, lineno=node.lineno)


def _read_name(node: nodes.Expr) -> str | None:
    """`x` for `x.attribute` or `x[constant]`, else None."""
    key_is_constant = isinstance(node, nodes.Getattr) or (
        isinstance(node, nodes.Getitem) and isinstance(node.arg, nodes.Const)
    )
    if key_is_constant and isinstance(node.node, nodes.Name):
        return node.node.name
    return None


# -- operators --------------------------------------------------------------------------------------------------

BOUNDED_BINOPS = frozenset({"*", "**", "+", "%"})
"""The operators whose results are sized before they are made (`+`'s after: never more than twice its larger
operand; the sandbox checks it inline, `binop` takes the others)."""


def binop(operator_name: str, left: Any, right: Any) -> Any:
    """`left <operator> right`, refused where its result would be past the limits."""
    if operator_name == "*":
        _check_product(left, right)
        return left * right
    if operator_name == "**":
        _check_power(left, right)
        return left**right
    if isinstance(left, str):
        check_percent_format(left, right)
    return check_built(operator.mod(left, right), "'%'")


def _check_product(left: Any, right: Any) -> None:
    for sequence, count in ((left, right), (right, left)):
        if isinstance(sequence, (str, list, tuple)) and isinstance(count, int):
            check_size(len(sequence) * max(count, 0), "'*'")
            charge(max(count, 0) // 64)
    if _is_int(left) and _is_int(right) and abs(left).bit_length() + abs(right).bit_length() > MAX_INTEGER_BITS:
        raise TemplateError("chat template error: '*' would make an integer past its limit")


def _check_power(base: Any, exponent: Any) -> None:
    growing = _is_int(base) and _is_int(exponent) and exponent > 0 and abs(base) > 1
    if growing and exponent * abs(base).bit_length() > MAX_INTEGER_BITS:
        raise TemplateError("chat template error: '**' would make an integer past its limit")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?")


def check_percent_format(text: str, values: Any) -> None:
    """Refuse a `%` format whose widths or precisions (written, or `*` taken from `values`) pass the size limit."""
    starred = False
    for match in _PERCENT_SPEC.finditer(text):
        for group in match.groups():
            if group == "*":
                starred = True
            elif group is not None:
                check_size(int(group), "a '%' format's width")
    if starred:
        for value in values if isinstance(values, tuple) else (values,):
            if _is_int(value):
                check_size(value, "a '%' format's width")


def check_str_format(text: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Refuse a `str.format` whose format specs' widths or precisions (or nested fields) pass the size limit."""
    try:
        specs = [spec for _, field, spec, _ in Formatter().parse(text) if field is not None and spec]
    except ValueError:
        return  # malformed: format itself raises
    for spec in specs:
        for number in re.findall(r"\d+", spec):
            check_size(int(number), "a format's width")
        if "{" in spec:
            for value in (*args, *kwargs.values()):
                if _is_int(value):
                    check_size(value, "a format's width")


# -- calls and filters --------------------------------------------------------------------------------------------


def check_call(obj: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Charge a macro's call (or a recursive loop's), and size what a str method would make; any other call is
    bounded by its input (the loop it may be in is counted)."""
    kind = type(obj)
    if kind is BuiltinMethodType or kind is MethodType:
        owner = obj.__self__
        if isinstance(owner, str) and obj.__name__ in _GROWING_STR_METHODS:
            _check_str_method(owner, obj.__name__, args, kwargs)
    elif kind is FunctionType:
        wrapped = getattr(obj, "__wrapped__", None)
        name = obj.__name__
        if wrapped is not None and isinstance(getattr(wrapped, "__self__", None), str) and name in _FORMATS:
            mapping = args[0] if name == "format_map" and args and isinstance(args[0], dict) else kwargs
            check_str_format(wrapped.__self__, args if name == "format" else (), mapping)
    elif isinstance(obj, (Macro, LoopContext)):
        charge(MACRO_STEPS)


_FORMATS = frozenset(("format", "format_map"))
"""The str methods the sandbox wraps (in a function of the same name) to format safely."""
_GROWING_STR_METHODS = frozenset(("center", "ljust", "rjust", "zfill", "expandtabs", "replace", "join"))
"""The str methods whose result can be far larger than their inputs: sized before they run."""


def _check_str_method(owner: str, name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    if name in ("center", "ljust", "rjust", "zfill") and args and _is_int(args[0]):
        check_size(args[0], f"str.{name}")
    elif name == "expandtabs":
        size = args[0] if args and _is_int(args[0]) else kwargs.get("tabsize", 8)
        check_size(len(owner) * max(size if _is_int(size) else 8, 1), "str.expandtabs")
    elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        check_size(_replaced_size(owner, args[0], args[1]), "str.replace")
    elif name == "join" and args:
        check_size(_joined_size(owner, args[0]), "str.join")


def _replaced_size(text: str, old: str, new: str) -> int:
    return len(text) + (text.count(old) if old else len(text) + 1) * max(len(new) - len(old), 0)


def _joined_size(separator: str, items: Any) -> int:
    if not isinstance(items, (list, tuple)):
        return 0  # an iterator: join reads it once, items of sizes known only then
    return sum(len(item) for item in items if isinstance(item, str)) + len(separator) * max(len(items) - 1, 0)


def _bounded_center(value: Any, width: Any = 80) -> None:
    if _is_int(width):
        check_size(width, "the 'center' filter")


def _bounded_indent(value: Any, width: Any = 4, *args: Any, **kwargs: Any) -> None:
    text = str(value)
    pad = len(width) if isinstance(width, str) else width if _is_int(width) else 0
    check_size(len(text) + (text.count("\n") + 1) * max(pad, 0), "the 'indent' filter")


def _bounded_batch(value: Any, linecount: Any = 1, fill_with: Any = None) -> None:
    if fill_with is not None and _is_int(linecount):
        check_size(linecount, "the 'batch' filter")


def _bounded_slice(value: Any, slices: Any = 1, fill_with: Any = None) -> None:
    if _is_int(slices):
        check_size(slices, "the 'slice' filter")


def _bounded_format(value: Any, *args: Any, **kwargs: Any) -> None:
    check_percent_format(str(value), kwargs or args)


def _bounded_replace(value: Any, old: Any = "", new: Any = "", *args: Any) -> None:
    if isinstance(old, str) and isinstance(new, str):
        check_size(_replaced_size(str(value), old, new), "the 'replace' filter")


def _bounded_join(value: Any, d: Any = "", *args: Any, **kwargs: Any) -> None:
    if isinstance(value, (list, tuple)) and isinstance(d, str):
        check_size(_joined_size(d, [str(item) for item in value]), "the 'join' filter")


def _bounded_tojson(value: Any, *args: Any, indent: Any = None, **kwargs: Any) -> None:
    indent = args[1] if len(args) > 1 and indent is None else indent
    if _is_int(indent):
        check_size(indent * 1024, "tojson's indent")


FILTER_CHECKS: dict[str, Callable[..., None]] = {
    "center": _bounded_center,
    "indent": _bounded_indent,
    "batch": _bounded_batch,
    "slice": _bounded_slice,
    "format": _bounded_format,
    "replace": _bounded_replace,
    "join": _bounded_join,
    "tojson": _bounded_tojson,
}
"""Filters that can make a value far larger than their input, and the check run before each."""


_KEEPS_ITEMS = frozenset(
    ("length", "count", "first", "last", "list", "random", "reverse", "default", "d", "attr", "items", "dictsort")
    + ("map", "select", "reject", "selectattr", "rejectattr", "groupby", "unique", "batch", "slice", "sort", "min")
    + ("max", "sum", "join", "abs", "bool", "int", "float", "round")
)
"""Filters that take a list or mapping without writing it out as text (those that do are sized first: `string`,
`tojson`, `pprint`, `upper` ... of a list of one long string repeated)."""


def _check_as_text(value: Any, name: str) -> None:
    budget = getattr(_STATE, "budget", None)
    if budget is not None:
        check_size(text_size(value, max(budget.chars, ALWAYS_FITS)), f"the '{name}' filter")


ITERATING_FILTERS = frozenset(
    ("map", "select", "reject", "selectattr", "rejectattr", "groupby", "unique", "batch", "slice", "sum", "join")
    + ("dictsort", "sort", "min", "max", "items")
)
"""Filters that go over their input's items in Python: charged a step per item."""


def bounded_filter(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """Filter `function`, going over its input in Python, charging a step per item, after `name`'s size check where it
    has one, its list or mapping input sized as text where it writes one out, its result sized once made; a filter
    that keeps its input's items and needs none of these as it is (bounded by its input; the loop around is counted)."""
    check = FILTER_CHECKS.get(name)
    per_item = name in ITERATING_FILTERS
    if check is None and not per_item and name in _KEEPS_ITEMS:
        return function  # takes its input's items and makes nothing larger than it: bounded by its input
    first_arg = 1 if getattr(function, "jinja_pass_arg", None) is not None else 0

    @wraps(function)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        value_args = args[first_arg:]
        charge(1 + (_items(value_args[0]) if per_item and value_args else 0))
        if check is not None and value_args:
            try:
                check(*value_args, **kwargs)
            except TypeError:  # arguments the filter itself refuses: it raises, as transformers' does
                pass
        if value_args and isinstance(value_args[0], (list, tuple, dict)) and name not in _KEEPS_ITEMS:
            _check_as_text(value_args[0], name)
        return check_built(function(*args, **kwargs), f"the '{name}' filter")

    return bounded


def bounded_range(*args: int) -> range:
    """The sandbox's `range` (at most 100,000 items), charged its length."""
    numbers = safe_range(*args)
    charge(len(numbers))
    return numbers


def bounded_lipsum(n: Any = 5, html: Any = True, min: Any = 20, max: Any = 100) -> Any:
    """Jinja's `lipsum`, within the size limit (its paragraphs times their words)."""
    from jinja2.utils import generate_lorem_ipsum

    if _is_int(n) and _is_int(max):
        check_size(n * max * 16, "lipsum")
        charge(n * max)
    return generate_lorem_ipsum(n, html, min, max)
