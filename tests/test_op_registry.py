"""Adding one IR operation touches few modules: the drivers read what an operation declares.

An operation describes itself (`Op.describe`) and declares what the engines outside the step
relation ask of it (`hands_out_ids`, `fetches_barrier`, `propagates_failure`, in `model/ops.py`).
Only the modules that execute operations dispatch on their classes (`EXECUTORS`); a function
anywhere else that tests for many operation classes in turn (an `isinstance` chain, `type(op) is
X` cases) is a new place a contributor would have to find, and this test names it.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
import typing
from pathlib import Path

from semcheck.model import ops

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("model", "checker", "src")
ORACLES = ("oracles",)  # outside the product (not counted in CONTRIBUTING), but their executors are held too
OP_CLASSES = frozenset(cls.__name__ for cls in typing.get_args(ops.Op))

CHAIN = 5
"""A function testing this many distinct operation classes is a per-operation chain."""

# (module, function) -> why it may dispatch on every operation's class
EXECUTORS: dict[tuple[str, str], str] = {
    ("model/fast.py", "run_core"): "the fast run executes each operation (its rules are model/step.py's)",
    ("checker/static/lowering.py", "_lower_cores"): "the static system lowers each operation",
    ("checker/static/lowering.py", "_lower_op"): "the static system lowers each operation",
    ("model/explore.py", "_safe"): "RUN-5: whether an operation's step is independent is per operation",
    ("oracles/spin/abstract.py", "action"): "the SPIN model renders each operation",
    ("checker/frontend/program_lower.py", "_kept"): "which operations of a call a composed program keeps (specs/deciding/programs.md)",
    ("model/symmetric.py", "_rotate"): "RUN-20: a rotation moves, class by class, the fields RUN-7 names (devices, "
                                        "barrier names and participants, DR-5's regions), as model/fold.py compares them",
}


def classes_tested(node: ast.AST) -> set[str]:
    """The operation classes `node` tests, not counting nested functions: `isinstance(x, C)`,
    `isinstance(x, (C, D))`, `type(x) is C`, `t is C`, `t in (C, D)`."""
    out: set[str] = set()
    stack = list(ast.iter_child_nodes(node))
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            continue
        stack.extend(ast.iter_child_nodes(n))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "isinstance" and len(n.args) == 2:
            arg = n.args[1]
            out |= {e.id for e in (arg.elts if isinstance(arg, ast.Tuple) else [arg]) if isinstance(e, ast.Name)}
        elif isinstance(n, ast.Compare):
            for op, right in zip(n.ops, n.comparators):
                if isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq)) and isinstance(right, ast.Name):
                    out.add(right.id)
                elif isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.Set)):
                    out |= {e.id for e in right.elts if isinstance(e, ast.Name)}
    return out & OP_CLASSES


def chains(source: str, path: str) -> dict[str, set[str]]:
    """function name -> the operation classes it tests, for the functions of `source` that test at least CHAIN."""
    out = {}
    for f in ast.walk(ast.parse(source, filename=path)):
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names = classes_tested(f)
            if len(names) >= CHAIN:
                out[f.name] = names
    return out


def _product_files() -> list[str]:
    return sorted(str(p.relative_to(ROOT)) for d in PRODUCT + ORACLES for p in (ROOT / d).rglob("*.py")
                  if p.relative_to(ROOT).as_posix() != "model/ops.py")


def test_only_the_executors_dispatch_on_every_operation_class():
    found = {(path, name): names for path in _product_files()
             for name, names in chains((ROOT / path).read_text(), path).items()}
    strays = {k: sorted(v) for k, v in found.items() if k not in EXECUTORS}
    assert not strays, (f"per-operation chains outside the executors: {strays}; declare what they ask "
                        "as a property of the operations in model/ops.py, or add the function to EXECUTORS with why")
    gone = set(EXECUTORS) - set(found)
    assert not gone, f"EXECUTORS lists functions that no longer dispatch on the operations: {sorted(gone)}"


def test_every_operation_describes_itself_and_declares_its_properties():
    for cls in typing.get_args(ops.Op):
        assert "describe" in vars(cls), f"{cls.__name__} has no describe()"
        for prop in ("hands_out_ids", "fetches_barrier", "propagates_failure"):
            assert isinstance(getattr(cls, prop), bool)
    assert {c.__name__ for c in typing.get_args(ops.Op) if c.hands_out_ids} == {"AllocSem", "GetBarrierSem"}
    assert [c.__name__ for c in typing.get_args(ops.Op) if not c.propagates_failure] == ["GetBarrierSem"]


CHAINED = '''
def name(op):
    if isinstance(op, Signal):
        return "signal"
    if isinstance(op, (Wait, Read)):
        return "wait"
    t = type(op)
    if t is DmaStart:
        return "dma"
    elif t in (Barrier, ExitCheck):
        return "other"

def fine(op):
    return op.describe() if isinstance(op, Signal) else ""
'''


def test_a_chain_is_reported():
    assert chains(CHAINED, "fake.py") == {"name": {"Signal", "Wait", "Read", "DmaStart", "Barrier", "ExitCheck"}}


# CONTRIBUTING's counts, computed here: which product modules name an IR operation (its class) and a jax
# sync primitive (its name as a string, or its `<name>_p` object). A contributor adding either joins these.
CONTRIBUTING = ROOT / "CONTRIBUTING.md"


def _modules_naming(test: typing.Callable[[tokenize.TokenInfo], bool]) -> list[str]:
    out = []
    for path in sorted(str(p.relative_to(ROOT)) for d in PRODUCT for p in (ROOT / d).rglob("*.py")):
        toks = tokenize.generate_tokens(io.StringIO((ROOT / path).read_text(encoding="utf-8")).readline)
        if any(test(t) for t in toks):
            out.append(path)
    return out


def _stated(subject: str) -> list[str]:
    """The modules CONTRIBUTING says name `subject`: `` `X` is named in N product modules: `a`, `b`. ``"""
    text = " ".join(CONTRIBUTING.read_text(encoding="utf-8").split())
    m = re.search(rf"`{re.escape(subject)}` is named in \*?\*?(\d+) product modules\*?\*?[^:]*:(.*?)\.(\s|$)", text)
    assert m, f"CONTRIBUTING.md no longer says which modules name {subject}"
    listed = re.findall(r"`([^`]+)`", m.group(2))
    assert int(m.group(1)) == len(listed), f"CONTRIBUTING.md counts {m.group(1)} modules naming {subject} but lists {listed}"
    return sorted(listed)


def test_contributing_names_the_modules_an_operation_touches():
    named = _modules_naming(lambda t: t.type == tokenize.NAME and t.string == "GetBarrierSem")
    assert _stated("GetBarrierSem") == named, f"CONTRIBUTING.md's list for GetBarrierSem is stale: today {named}"


def test_contributing_names_the_modules_a_jax_sync_primitive_touches():
    def names(t: tokenize.TokenInfo) -> bool:
        return ((t.type == tokenize.NAME and t.string == "semaphore_signal_p")
                or (t.type == tokenize.STRING and t.string.strip("\"'") == "semaphore_signal"))

    named = _modules_naming(names)
    assert _stated("semaphore_signal") == named, f"CONTRIBUTING.md's list for semaphore_signal is stale: today {named}"
