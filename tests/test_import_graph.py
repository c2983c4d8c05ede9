"""The import graph of the product (model/, checker/, src/semcheck): no new import cycle, no new
private name imported across modules, and the model imports nothing of the checker, jax or z3.

Imports inside functions count (they are still a dependency), imports under `if TYPE_CHECKING:` do
not (they never run). The cycles and private imports that remain are listed below, to shrink: a
change may remove an entry (the test then asks for it to be removed here too), never add one.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"model": "model", "checker": "checker", "src/semcheck": ""}

# what is left of the cycles (strongly connected components, module names without "semcheck.")
KNOWN_CYCLES = (
    frozenset({'checker.frontend.closed_refs', 'checker.frontend.trace'}),
    frozenset({'checker.frontend.block_copies', 'checker.frontend.grid', 'checker.frontend.lowerer'}),
    frozenset({'checker.properties.confined', 'checker.properties.confined_scopes'}),
    frozenset({'checker.properties.analysis', 'checker.properties.deadlock', 'checker.properties.decide', 'checker.properties.dma_bytes', 'checker.properties.exit_balance', 'checker.properties.failing_runs', 'checker.properties.folding', 'checker.properties.races'}),
    frozenset({'checker.properties.checking', 'checker.run.mode_worker'}),
    frozenset({'checker.report.lines', 'checker.report.markdown', 'checker.report.render', 'checker.report.sarif', 'checker.report.text'}),
)

# what is left of the private names imported across modules: (importer, module, name)
KNOWN_PRIVATE = {
    ('_cache', 'semcheck', '_cache_entry'),
    ('checker.frontend.block_copies', 'checker.frontend.grid', '_hbm_labels'),
    ('checker.frontend.closed_refs', 'checker.frontend.trace', '_arg_names'),
    ('checker.frontend.collective_ids', 'checker.frontend.trace', '_sub_jaxprs'),
    ('checker.frontend.concrete_inputs', 'checker.frontend.trace', '_jaxpr_types'),
    ('checker.frontend.concrete_inputs', 'checker.frontend.trace', '_operand'),
    ('checker.frontend.evaluator', 'checker.frontend.trace', '_jaxpr_types'),
    ('checker.frontend.interpreter_lowering', 'checker.frontend.trace', '_jaxpr_types'),
    ('checker.frontend.lower', 'checker.frontend.grid', '_hbm_labels'),
    ('checker.frontend.program_devices', 'checker.frontend.program_ir', '_Stop'),
    ('checker.frontend.program_devices', 'checker.frontend.program_ir', '_deps'),
    ('checker.frontend.program_jaxpr', 'checker.frontend.concrete_inputs', '_Device'),
    ('checker.frontend.program_jaxpr', 'checker.frontend.concrete_inputs', '_shard'),
    ('checker.frontend.program_jaxpr', 'checker.frontend.trace', '_sub_jaxprs'),
    ('checker.frontend.program_lower', 'checker.frontend.grid', '_hbm_labels'),
    ('checker.frontend.program_walk', 'checker.frontend.collective_ids', '_module_key'),
    ('checker.frontend.program_walk', 'checker.frontend.program_ir', '_CALL_PRIMITIVES'),
    ('checker.frontend.program_walk', 'checker.frontend.program_ir', '_Stop'),
    ('checker.frontend.program_walk', 'checker.frontend.program_ir', '_deps'),
    ('checker.frontend.program_walk', 'checker.frontend.trace', '_from_mpmd_map'),
    ('checker.frontend.program_walk', 'checker.frontend.trace', '_from_pallas_call'),
    ('checker.frontend.programs', 'checker.frontend.program_lower', '_communicates'),
    ('checker.frontend.programs', 'checker.frontend.trace', '_sub_jaxprs'),
    ('checker.frontend.regions', 'checker.frontend.region_transforms', '_Box'),
    ('checker.frontend.regions', 'checker.frontend.region_transforms', '_I64'),
    ('checker.frontend.regions', 'checker.frontend.region_transforms', '_bitcast_preimage'),
    ('checker.frontend.regions', 'checker.frontend.region_transforms', '_describe_unknown'),
    ('checker.frontend.regions', 'checker.frontend.region_transforms', '_forward_shapes'),
    ('checker.frontend.regions', 'checker.frontend.region_transforms', '_indexer_preimage'),
    ('checker.frontend.regions', 'checker.frontend.region_transforms', '_jax'),
    ('checker.frontend.regions', 'checker.frontend.region_transforms', '_reshape_preimage'),
    ('checker.frontend.regions', 'checker.frontend.region_transforms', '_whole'),
    ('checker.frontend.rotation_certificate', 'checker.frontend.rotation_obligations', '_Ob'),
    ('checker.frontend.rotation_walk', 'checker.frontend.grid', '_hbm_labels'),
    ('checker.frontend.rotation_walk', 'checker.frontend.rotation_obligations', '_ACCESS'),
    ('checker.frontend.rotation_walk', 'checker.frontend.rotation_obligations', '_MASKED'),
    ('checker.frontend.rotation_walk', 'checker.frontend.rotation_obligations', '_Ob'),
    ('checker.frontend.rotation_walk', 'checker.frontend.rotation_obligations', '_Ref'),
    ('checker.frontend.rotation_walk', 'checker.frontend.rotation_obligations', '_SYNC'),
    ('checker.frontend.size_bound', 'checker.frontend.trace', '_sub_jaxprs'),
    ('checker.frontend.sync_rules', 'checker.frontend.trace', '_is_semaphore_dtype'),
    ('checker.frontend.trace', 'checker.frontend.targets', '_user_loc'),
    ('checker.frontend.window_bounds', 'checker.frontend.region_transforms', '_jax'),
    ('checker.frontend.window_bounds', 'checker.frontend.region_transforms', '_scalar'),
    ('checker.frontend.window_bounds', 'checker.frontend.region_transforms', '_static_int'),
    ('checker.parametric.ids', 'checker.parametric.template', '_has_run_scoped'),
    ('checker.properties.confined', 'checker.frontend.program_lower', '_name'),
    ('checker.properties.confined', 'checker.frontend.program_lower', '_prefix'),
    ('checker.properties.confined', 'checker.frontend.program_lower', '_renames'),
    ('checker.properties.confined_scopes', 'checker.properties.confined', '_Starts'),
    ('checker.report.markdown', 'checker.report.render', '_rel'),
    ('checker.report.markdown', 'checker.report.render', '_row_summary'),
    ('checker.report.markdown', 'checker.report.render', '_where'),
    ('checker.report.markdown', 'checker.report.render', '_worst'),
    ('checker.report.sarif', 'checker.report.render', '_difference_line'),
    ('checker.report.text', 'checker.report.render', '_configs'),
    ('checker.report.text', 'checker.report.render', '_header'),
    ('checker.report.text', 'checker.report.render', '_rel'),
    ('checker.report.text', 'checker.report.render', '_row_summary'),
    ('checker.report.text', 'checker.report.render', '_where'),
    ('checker.report.text', 'checker.report.render', '_worst'),
    ('checker.run.child', 'checker.frontend.targets', '_user_loc'),
    ('model.hb_observers', 'model.access_index', '_Chain'),
}


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
        for n in ast.walk(tree):
            if id(n) in skip:
                continue
            if isinstance(n, ast.ImportFrom) and n.module and n.level == 0:
                base = _short(n.module)
                external[m].add(n.module.split(".")[0] if not n.module.startswith("semcheck") else "")
                for a in n.names:
                    full = f"{base}.{a.name}"
                    target = full if full in mods else base if base in mods else None
                    if target and target != m:
                        edges[m].add(target)
                    if base in mods and a.name.startswith("_") and not a.name.startswith("__") and base != m:
                        private.add((m, base, a.name))
            elif isinstance(n, ast.Import):
                for a in n.names:
                    external[m].add(a.name.split(".")[0])
                    if _short(a.name) in mods and _short(a.name) != m:
                        edges[m].add(_short(a.name))
    return edges, private, external


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


def test_no_new_import_cycle():
    edges, _, _ = _graph()
    for comp in _cycles(edges):
        assert any(comp <= known for known in KNOWN_CYCLES), (
            f"a new import cycle (imports inside functions count): {sorted(comp)}")


def test_the_known_cycles_are_still_there():
    edges, _, _ = _graph()
    found = _cycles(edges)
    for known in KNOWN_CYCLES:
        assert any(comp & known for comp in found), (
            f"the cycle {sorted(known)} is gone: remove it from KNOWN_CYCLES")


def test_no_new_private_import_across_modules():
    _, private, _ = _graph()
    assert private <= KNOWN_PRIVATE, f"private names imported across modules: {sorted(private - KNOWN_PRIVATE)}"
    assert not KNOWN_PRIVATE - private, f"gone, remove from KNOWN_PRIVATE: {sorted(KNOWN_PRIVATE - private)}"


def test_the_model_imports_nothing_of_the_checker_jax_or_z3():
    edges, _, external = _graph()
    for m in edges:
        if m.startswith("model"):
            assert not any(t.startswith("checker") for t in edges[m]), (m, edges[m])
            assert not external[m] & {"jax", "jaxlib", "z3"}, (m, external[m])


def test_nothing_but_the_console_script_imports_the_cli():
    edges, _, _ = _graph()
    importers = sorted(m for m, ts in edges.items() if "checker.run.cli" in ts)
    assert importers == [], importers
