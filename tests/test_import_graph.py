"""The import graph of the product (model/, checker/, src/semcheck), the bench and the test oracles
(oracles/): no new import cycle, no private name used across modules, the model imports nothing of the
checker, jax or z3, and the product imports nothing of the oracles (they are not in its package).

Imports inside functions count (they are still a dependency), imports under `if TYPE_CHECKING:` do
not (they never run), and so does each property's check that `decide` imports by the name the
registry gives it (`module:function`, so that listing the properties loads no solver). A private name is one with a leading underscore; another module may not import
it (`from m import _x`) nor read it off the module (`m._x`). The one exception is a private module
of a package imported by a module of the same package (`semcheck._cache` imports
`semcheck._cache_entry`): the package is what keeps it private. There is no import cycle:
the facts every check shares (`checker.properties.analysis`) are computed from the layers below it,
and the properties read them.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"model": "model", "checker": "checker", "src/semcheck": "", "bench": "bench", "oracles": "oracles"}

def _modules() -> dict[str, Path]:
    out = {}
    for d, prefix in PACKAGES.items():
        for f in sorted((ROOT / d).rglob("*.py")):
            parts = [p for p in f.relative_to(ROOT / d).with_suffix("").parts if p != "__init__"]
            name = ".".join(([prefix] if prefix else []) + parts) or "semcheck"
            out[name if prefix else ("." .join(parts) or "semcheck")] = f
    return out


def _short(dotted: str) -> str:
    return dotted[len("semcheck."):] if dotted.startswith("semcheck.") else dotted


def _package(m: str) -> str:
    return m.rpartition(".")[0] if "." in m else ("semcheck" if m != "semcheck" else "")


def _private(importer: str, module: str, name: str, mods: dict[str, str]) -> bool:
    """`name` of `module`, used in `importer`, is private to `module` (a private submodule is its
    package's, see the docstring)."""
    if not name.startswith("_") or name.startswith("__") or module == importer:
        return False
    sub = f"{module}.{name}" if module != "semcheck" else name
    return not (sub in mods and _package(sub) == _package(importer))


@functools.cache  # one parse of the product for the module's five tests
def _graph() -> tuple[dict[str, set[str]], set[tuple[str, str, str]], dict[str, set[str]]]:
    mods = _modules()
    edges: dict[str, set[str]] = {m: set() for m in mods}
    private: set[tuple[str, str, str]] = set()
    external: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        tree = ast.parse(f.read_text(encoding="utf-8"))
        skip = {id(x) for n in ast.walk(tree) if isinstance(n, ast.If) and "TYPE_CHECKING" in ast.unparse(n.test)
                for b in n.body for x in ast.walk(b)}
        aliases: dict[str, str] = {}  # a local name bound to a module of the product
        for n in ast.walk(tree):
            if id(n) in skip:
                continue
            if isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
                base = _short(n.module)
                external[m].add(n.module.split(".")[0] if not n.module.startswith("semcheck") else "")
                for a in n.names:
                    full = f"{base}.{a.name}" if base != "semcheck" else a.name
                    target = full if full in mods else base if base in mods else None
                    if target and target != m:
                        edges[m].add(target)
                    if full in mods:
                        aliases[a.asname or a.name] = full
                    if base in mods and _private(m, base, a.name, mods):
                        private.add((m, base, a.name))
            elif isinstance(n, ast.Import):
                for a in n.names:
                    external[m].add(a.name.split(".")[0])
                    if _short(a.name) in mods and _short(a.name) != m:
                        edges[m].add(_short(a.name))
                        if a.asname:
                            aliases[a.asname] = _short(a.name)
        for n in ast.walk(tree):  # `module._name`, through an imported alias or the dotted path
            if isinstance(n, ast.Attribute) and id(n) not in skip:
                v = aliases.get(n.value.id) if isinstance(n.value, ast.Name) else _short(ast.unparse(n.value))
                if v in mods and _private(m, v, n.attr, mods):
                    private.add((m, v, n.attr))
    for m, targets in _named_imports().items():
        if m in edges:
            edges[m] |= {t for t in targets if t in mods}
    return edges, private, external


def _named_imports() -> dict[str, set[str]]:
    """The imports made by name at run time: `decide` imports each registered property's check."""
    from semcheck.checker.properties.registry import REGISTRY

    return {"checker.properties.decide": {_short(p.check_ref.partition(":")[0]) for p in REGISTRY}}


def _cycles(edges: dict[str, set[str]]) -> list[frozenset[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    edges, _, _ = _graph()
    cycles = _cycles(edges)
    assert not cycles, f"import cycles (imports inside functions count): {[sorted(c) for c in cycles]}"


def test_the_cycle_check_sees_a_cycle_through_a_function_level_import(tmp_path, monkeypatch):
    """The check must be able to fail: two modules that import each other, one of them inside a
    function, are a cycle."""
    for d in PACKAGES:
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "checker" / "a.py").write_text("from semcheck.checker import b\n")
    (tmp_path / "checker" / "b.py").write_text("def f():\n    from semcheck.checker.a import g\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    edges, _, _ = _graph.__wrapped__()
    assert _cycles(edges) == [frozenset({"checker.a", "checker.b"})]


def test_the_checks_decide_imports_by_name_are_edges():
    edges, _, _ = _graph()
    assert {"checker.properties.races", "checker.z3.ids"} <= edges["checker.properties.decide"]


def test_no_private_name_across_modules():
    _, private, _ = _graph()
    assert not private, ("private names used across modules (make the name public at its definition, or "
                         f"move it to the module that uses it): {sorted(private)}")


def test_the_private_name_check_sees_both_kinds_of_use(tmp_path, monkeypatch):
    """The check must be able to fail: an import of `_x` and a read of `m._x` from another module
    are both caught, a package's own private submodule is not."""
    for d in PACKAGES:
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "model" / "a.py").write_text("_x = 1\n")
    (tmp_path / "model" / "b.py").write_text("from semcheck.model.a import _x\n")
    (tmp_path / "model" / "c.py").write_text("from semcheck.model import a\nprint(a._x)\n")
    (tmp_path / "src/semcheck" / "_p.py").write_text("")
    (tmp_path / "src/semcheck" / "_q.py").write_text("from semcheck import _p\n")
    monkeypatch.setitem(globals(), "ROOT", tmp_path)
    _, private, _ = _graph.__wrapped__()
    assert private == {("model.b", "model.a", "_x"), ("model.c", "model.a", "_x")}


def test_the_model_imports_nothing_of_the_checker_jax_or_z3():
    edges, _, external = _graph()
    for m in edges:
        if m.startswith("model"):
            assert not any(t.startswith("checker") for t in edges[m]), (m, edges[m])
            assert not external[m] & {"jax", "jaxlib", "z3"}, (m, external[m])


def test_the_product_imports_nothing_of_the_oracles():
    """SPIN's Promela rendering (oracles/spin) is a test oracle and bench baseline: an installed semcheck
    has no `oracles` package, so a product module that imported one would fail there."""
    edges, _, external = _graph()
    assert any(m.startswith("oracles.spin") for m in edges)  # the check sees the oracles
    product = [m for m in edges if not m.startswith(("bench", "oracles"))]
    leaks = {m: sorted(t for t in edges[m] if t.startswith("oracles")) for m in product}
    assert not {m: t for m, t in leaks.items() if t}, leaks
    assert not [m for m in product if "oracles" in external[m]]


def test_nothing_but_the_console_script_imports_the_cli():
    edges, _, _ = _graph()
    importers = sorted(m for m, ts in edges.items() if "checker.run.cli" in ts)
    assert importers == [], importers
