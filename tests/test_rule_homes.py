"""One implementation per rule: each engine decides a shared rule by calling its home function.

The rules below are written once (`HOMES`: the module and the functions that state the rule) and
every engine that decides them (`ENGINES`: the step relation, the fast run, the static system's
lowering and least stuck vector, the deadlock encoding) must call one of those functions. Besides,
the shapes such rules took when they were copied are looked for in every product module but the
home (`copies`): a wait decided by comparing a count with a wait's value, a barrier decided by a
comparison over its participants, an id counter's first value written as a literal, a DMA's phase
set outside the half rules. The checks read the sources with `ast`; the last tests run them on
small fake sources to show that they catch a copy.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("model", "checker", "src")

# rule -> (home module, the functions that state it)
HOMES: dict[str, tuple[str, tuple[str, ...]]] = {
    "SEM-5": ("model/semaphore.py", ("shortfall",)),
    "SEM-7": ("model/semaphore.py", ("next_task",)),
    "BAR-1": ("model/barrier.py", ("reached", "opens", "awaited", "opens_at")),
    "SEM-1": ("model/semaphore.py", ("handout", "advanced")),
    "BUF-1": ("model/buffer.py", ("handout", "advanced")),
    "DMA-2": ("model/dma.py", ("read_half", "write_half", "run_half_task")),
    "ACC-11": ("model/dma.py", ("deferred_failure",)),
    "BUF-14": ("model/scope_keys.py", ("held_scoped", "copy_keys", "freed_failures")),
    "RACE-1": ("model/clocks.py", ("keeps_clocks", "reached", "finished_wait")),
    "ERR-27": ("model/detector_windows.py", ("detector_windows_meet", "starts_meet")),
    "DR-47": ("model/access.py", ("conflicts", "regions_meet")),
}

# rule -> the modules that decide it, each of which must call one of its home functions
ENGINES: dict[str, tuple[str, ...]] = {
    "SEM-5": ("model/semaphore.py", "model/fast.py", "checker/static/least_stuck.py", "checker/z3/deadlock.py"),
    "SEM-7": ("model/semaphore.py", "model/fast.py"),
    "BAR-1": ("model/step.py", "model/fast.py", "checker/static/system.py", "checker/static/least_stuck.py",
              "checker/z3/deadlock.py"),
    "SEM-1": ("model/semaphore.py", "model/step.py", "model/fast.py", "model/explore.py", "checker/static/id_handout.py"),
    "BUF-1": ("model/buffer.py", "model/kernel_buffer.py", "model/fast.py", "checker/static/id_handout.py"),
    "DMA-2": ("model/dma.py", "model/fast.py"),
    "ACC-11": ("model/dma.py", "model/fast.py"),
    "BUF-14": ("model/step.py", "model/fast.py", "model/dma.py"),
    "RACE-1": ("model/step.py", "model/fast.py", "model/manager.py", "checker/properties/clock_waits.py"),
    # the detector's windows: the interpreter modes' conflicts, and every-N's solver query (PAR-14)
    "ERR-27": ("model/access.py", "checker/parametric/races.py"),
    # the one conflict test: the listing of conflicting pairs and the happens-before pass's index
    "DR-47": ("model/access.py", "model/access_index.py"),
}

# the literals a copy of SEM-1 / BUF-1 would write: the counters' first ids (model/ids.py names them)
FIRST_IDS = (2000, 100)
IDS_MODULE = "model/ids.py"


def _module_name(path: str) -> str:
    """`model/dma.py` -> `semcheck.model.dma` (the package layout of pyproject.toml)."""
    parts = Path(path).with_suffix("").parts
    return "semcheck." + ".".join(parts[1:] if parts[0] == "src" else parts)


def called(source: str, path: str, home: str, functions: tuple[str, ...]) -> set[str]:
    """The functions of `home` that the module at `path` calls (under any name it imports them by)."""
    tree = ast.parse(source, filename=path)
    target = _module_name(home)
    package, _, leaf = target.rpartition(".")
    direct: dict[str, str] = {}  # local name -> home function
    modules: set[str] = set()  # local names of the home module
    if path == home:
        direct.update({f: f for f in functions})
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for a in node.names:
                if node.module == target and a.name in functions:
                    direct[a.asname or a.name] = a.name
                elif node.module == package and a.name == leaf:
                    modules.add(a.asname or a.name)
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name == target and a.asname:
                    modules.add(a.asname)
    out = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id in direct:
            out.add(direct[f.id])
        elif isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id in modules and f.attr in functions:
            out.add(f.attr)
    return out


_ORDER = (ast.Lt, ast.LtE, ast.Gt, ast.GtE)


def _single_order(node: ast.AST) -> bool:
    return isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], _ORDER)


def _named(node: ast.AST, name: str) -> bool:
    return (isinstance(node, ast.Name) and node.id == name) or (isinstance(node, ast.Attribute) and node.attr == name)


def copies(source: str, path: str) -> list[str]:
    """Where the module at `path` repeats a shared rule instead of calling it: `line: what`."""
    tree = ast.parse(source, filename=path)
    # a plain name `value` is a wait's value only where waits are handled (elsewhere it is an id, say)
    waits = any((isinstance(n, ast.Name) and n.id in ("Wait", "WaitOp"))
                or (isinstance(n, ast.alias) and n.name in ("Wait", "WaitOp")) for n in ast.walk(tree))
    out = []
    for node in ast.walk(tree):
        if _single_order(node):
            # a wait decided by hand: a count against a wait's value (a comparison with a constant
            # is a check of the operand, not a wait)
            sides = (node.left, node.comparators[0])
            if path != HOMES["SEM-5"][0] and not any(isinstance(s, ast.Constant) for s in sides) and any(
                    (isinstance(s, ast.Attribute) and s.attr == "value") or (waits and _named(s, "value"))
                    for s in sides):
                out.append(f"{node.lineno}: SEM-5 decided by hand ({ast.unparse(node)}), not by semaphore.shortfall")
        if isinstance(node, (ast.GeneratorExp, ast.ListComp, ast.SetComp)) and path != HOMES["BAR-1"][0]:
            # (a chained comparison over the participants is a range check of their indices)
            over = [g for g in node.generators if _named(g.iter, "participants")]
            if over and any(_single_order(n) for n in ast.walk(node.elt)):
                out.append(f"{node.lineno}: BAR-1 decided by hand over the participants, not by model/barrier.py")
        if isinstance(node, ast.Constant) and type(node.value) is int and node.value in FIRST_IDS \
                and path != IDS_MODULE:
            out.append(f"{node.lineno}: the literal {node.value}, a first id (SEM-1 / BUF-1): use model/ids.py")
        if path != HOMES["DMA-2"][0]:
            if isinstance(node, ast.keyword) and node.arg == "phase":
                out.append(f"{node.lineno}: a DMA's phase set outside the half rules (model/dma.py)")
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and node.value.value in (1, 2) \
                    and any(isinstance(t, ast.Subscript) and (_named(t.value, "phase") or _named(t.value, "phases"))
                            for t in node.targets):
                out.append(f"{node.lineno}: a DMA's phase set outside the half rules (model/dma.py)")
    return sorted(out, key=lambda line: int(line.split(":")[0]))


def _product_files() -> list[str]:
    # the front end lowers jax to the IR and decides none of these rules; its literals are its own
    return sorted(str(p.relative_to(ROOT)) for d in PRODUCT for p in (ROOT / d).rglob("*.py")
                  if "frontend" not in p.parts)


@pytest.mark.rule("SEM-5", "SEM-7", "BAR-1", "SEM-1", "BUF-1", "DMA-2")
def test_every_home_states_its_rule():
    for rule, (home, functions) in HOMES.items():
        tree = ast.parse((ROOT / home).read_text(), filename=home)
        defined = {n.name: ast.get_docstring(n) or "" for n in tree.body if isinstance(n, ast.FunctionDef)}
        for f in functions:
            assert f in defined, f"{home} has no function {f} ({rule})"
            assert rule in defined[f], f"{home}:{f}'s docstring does not cite {rule}"


@pytest.mark.rule("SEM-5", "SEM-7", "BAR-1", "SEM-1", "BUF-1", "DMA-2")
@pytest.mark.parametrize("rule", sorted(ENGINES))
def test_every_engine_calls_the_rule(rule):
    home, functions = HOMES[rule]
    for path in ENGINES[rule]:
        assert called((ROOT / path).read_text(), path, home, functions), \
            f"{path} decides {rule} without calling {home}'s {', '.join(functions)}"


@pytest.mark.rule("SEM-5", "BAR-1", "SEM-1", "BUF-1", "DMA-2")
def test_no_product_module_copies_a_rule():
    found = {path: copies((ROOT / path).read_text(), path) for path in _product_files()}
    assert not {p: c for p, c in found.items() if c}


# --- the checks catch what they should -------------------------------------------------------------

ENGINE = '''
from semcheck.model import barrier as bar
from semcheck.model.semaphore import shortfall as lack


def wait(have, value):
    return lack(have, value) <= 0


def barrier(k, reached, participants):
    return bar.opens(k, [reached[p] for p in participants])
'''

COPIED = '''
from semcheck.model.ops import Wait


def wait(have, value):
    return have >= value


def barrier(k, reached, participants):
    return all(reached[p] >= k for p in participants)


def first(next_id, core):
    return next_id.get(core, 2000)


def finish(phase, ident):
    phase[ident] = 2
'''


def test_calls_are_found_under_any_import_name():
    assert called(ENGINE, "model/x.py", "model/semaphore.py", ("shortfall",)) == {"shortfall"}
    assert called(ENGINE, "model/x.py", "model/barrier.py", ("opens", "reached")) == {"opens"}
    assert not called(COPIED, "model/x.py", "model/barrier.py", ("opens",))


def test_copies_of_rules_are_reported():
    found = copies(COPIED, "model/x.py")
    assert [line.split(": ", 1)[1].split(" ")[0] for line in found] == ["SEM-5", "BAR-1", "the", "a"], found
    assert not copies(ENGINE, "model/x.py")
    # the homes may state their rules; a comparison with a constant is not a wait
    assert not copies("def f(value):\n    return value < 0\n", "model/x.py")
