"""Scans that stop once they have found what they look for: a parsed chat template's `for` loops whose every later
iteration would do nothing get a `{% if <done> %}{% break %}{% endif %}` at the end of each branch that can make
that so. The render's text is the same; its cost no longer grows with the items left after the find.

A scan is a loop whose body is, after assignments that cannot fail once they have not (`prefix`), one `{% if %}`
guarded by a flag: a test of one attribute of a name (`ns.found`) that the loop does not rebind, read before anything
else in the test. Two shapes:

- `{% if not ns.found and ... %}…{% endif %}` (no elif, no else): once the flag test is false, an iteration does
  nothing; the check ends the branch;
- `{% if ns.stopped or ... %}{% elif ... %}…{% else %}…{% endif %}` with an empty first branch: once the flag test is
  true, an iteration takes that branch and does nothing; the check ends every other branch.

Why the break changes no render that completes: the `if` is the last statement of the loop's body, so the check
runs at the end of the iteration, with the flag as the next iteration's guard will read it; between the two, nothing
runs but the loop taking its next item (no template code: the items of a list, a range or a Jinja filter's
generator) and binding its target (never the flag's name). The iteration after the check would then run only the
prefix (assignments to loop-local names, which Jinja does not let out of the loop, each from the loop's counters and
names it does not change or their lengths, by `+` and `-`: what did not fail does not fail) and the flag test (no
call, no error: it read the same attribute a moment before), and so would every one after it. A flag that becomes
done elsewhere (a `continue` skipping the check, a macro in the test setting it) leaves the loop as it was, only
slower. A loop with a `break` is charged the items it takes (prompts/template_bounds.py): the skipped ones cost no
steps either.
"""

from __future__ import annotations

from dataclasses import dataclass

from jinja2 import nodes

__all__ = ["Scan", "end_finished_scans", "finished_scan"]

_COUNTERS = frozenset(("index", "index0", "revindex", "revindex0", "first", "last", "length", "depth", "depth0"))
"""The `loop` attributes that are numbers (or booleans) in every iteration."""
_FLAG_TESTS = frozenset(("true", "false", "none", "defined", "undefined", "boolean", "sameas"))
"""Jinja tests a flag may be put to: they call nothing and raise nothing."""
_FLAG_COMPARISONS = frozenset(("eq", "ne"))


@dataclass(frozen=True)
class Scan:
    """A loop every later iteration of which does nothing once `flag` (a test of `ns.attribute`) is `done_when`;
    `branches`: the bodies at whose end that can first hold."""

    flag: nodes.Expr
    done_when: bool
    branches: list[list[nodes.Node]]

    def stop(self) -> nodes.If:
        """`{% if <done> %}{% break %}{% endif %}`, its nodes new."""
        lineno = self.flag.lineno
        done = _copy(self.flag) if self.done_when else nodes.Not(_copy(self.flag), lineno=lineno)
        stop = nodes.If(done, [nodes.Break(lineno=lineno)], [], [], lineno=lineno)
        return stop.set_environment(self.flag.environment) if hasattr(self.flag, "environment") else stop


def end_finished_scans(template: nodes.Template) -> int:
    """Give every finished scan of `template` its `break`; how many loops got one."""
    scans = [scan for loop in template.find_all(nodes.For) if (scan := finished_scan(loop)) is not None]
    for scan in scans:
        for branch in scan.branches:
            branch.append(scan.stop())
    return len(scans)


def finished_scan(loop: nodes.For) -> Scan | None:
    """`loop` as a scan; None where it is no scan this module can prove every later iteration of does nothing."""
    if loop.recursive or loop.test is not None or loop.else_ or not loop.body:
        return None
    *prefix, guard = loop.body
    if not isinstance(guard, nodes.If):
        return None
    bound = _bound_names(loop)
    written = {ref.name for ref in loop.find_all(nodes.NSRef)}
    if not all(_harmless_assignment(statement, bound, written) for statement in prefix):
        return None
    if not guard.elif_ and not guard.else_:  # the flag test false: no branch taken
        scan = Scan(_leftmost(guard.test, nodes.And), False, [guard.body])
    elif not guard.body:  # the flag test true: the empty branch taken
        others = [branch.body for branch in guard.elif_] + ([guard.else_] if guard.else_ else [])
        scan = Scan(_leftmost(guard.test, nodes.Or), True, others)
    else:
        return None
    name = _flag_name(scan.flag)
    return None if name is None or name in bound or name == "loop" else scan


def _leftmost(test: nodes.Expr, chain: type[nodes.BinExpr]) -> nodes.Expr:
    """The operand of an `and` (or `or`) chain that Python evaluates first, deciding alone when it is false (true)."""
    while isinstance(test, chain):
        test = test.left
    return test


def _flag_name(test: nodes.Expr) -> str | None:
    """`ns` where `test` reads `ns.attribute` and nothing else, through `not`, `==`/`!=` a constant or a plain test;
    else None."""
    if isinstance(test, nodes.Getattr) and isinstance(test.node, nodes.Name) and test.node.ctx == "load":
        return test.node.name
    if isinstance(test, nodes.Not):
        return _flag_name(test.node)
    if isinstance(test, nodes.Compare) and len(test.ops) == 1:
        operand = test.ops[0]
        if operand.op in _FLAG_COMPARISONS and isinstance(operand.expr, nodes.Const):
            return _flag_name(test.expr)
    if isinstance(test, nodes.Test) and test.name in _FLAG_TESTS and _constant_arguments(test):
        return _flag_name(test.node)
    return None


def _constant_arguments(test: nodes.Test) -> bool:
    return all(isinstance(arg, nodes.Const) for arg in test.args) and not (
        test.kwargs or test.dyn_args or test.dyn_kwargs
    )


def _bound_names(loop: nodes.For) -> set[str]:
    """Every name `loop` binds: its target, and any name set, looped over, passed or defined inside it."""
    names = {name.name for name in loop.find_all(nodes.Name) if name.ctx in ("store", "param")}
    return names | {macro.name for macro in loop.find_all(nodes.Macro)}


def _harmless_assignment(statement: nodes.Node, bound: set[str], written: set[str]) -> bool:
    """`{% set name = value %}` whose value, having been computed once in this loop, is computed again without error:
    counters of the loop and values it does not change, joined by `+` and `-`."""
    return (
        isinstance(statement, nodes.Assign)
        and isinstance(statement.target, nodes.Name)
        and _repeatable(statement.node, bound, written)
    )


def _repeatable(value: nodes.Expr, bound: set[str], written: set[str]) -> bool:
    if isinstance(value, (nodes.Add, nodes.Sub)):
        return _repeatable(value.left, bound, written) and _repeatable(value.right, bound, written)
    if isinstance(value, nodes.Getattr) and isinstance(value.node, nodes.Name) and value.node.name == "loop":
        return value.attr in _COUNTERS
    return _unchanging(value, bound, written)


def _unchanging(value: nodes.Expr, bound: set[str], written: set[str]) -> bool:
    """Whether `value` is the same in every iteration: a constant, a name the loop does not bind or set attributes
    of, or the length of one (an attribute is left out: the name may alias a namespace the loop sets)."""
    if isinstance(value, nodes.Const):
        return True
    if isinstance(value, nodes.Name):
        return value.name not in bound and value.name not in written and value.name != "loop"
    if isinstance(value, nodes.Filter) and value.name == "length" and not (value.args or value.kwargs):
        return value.dyn_args is None and value.dyn_kwargs is None and _unchanging(value.node, bound, written)
    return False


def _copy(node: nodes.Node) -> nodes.Node:
    """A fresh copy of an expression's nodes (the original stays where it is in the tree)."""
    fields = [_copy_value(getattr(node, name)) for name in node.fields]
    copied = type(node)(*fields, lineno=node.lineno)
    return copied.set_environment(node.environment) if hasattr(node, "environment") else copied


def _copy_value(value: object) -> object:
    if isinstance(value, nodes.Node):
        return _copy(value)
    if isinstance(value, list):
        return [_copy_value(item) for item in value]
    return value
