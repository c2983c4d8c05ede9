"""ERR-23: a kernel that raises while jax traces it is reported at the kernel line that raised (the innermost
frame of the user's code: the kernel file or a module of the user's project it runs; jax's, Python's and
semcheck's frames excluded), with the call into that code as the related line, in every report format.

Traced in this process (no checker process: cheap); the three kernels raise at different depths."""

from __future__ import annotations

import json
import textwrap

import pytest

from semcheck.checker.frontend.errors import KernelRaised
from semcheck.checker.frontend.targets import import_kernel_file
from semcheck.checker.frontend.trace import make_jaxpr
from semcheck.checker.report.render import render
from semcheck.checker.report.rows import FileReport
from semcheck.checker.run.request import InputError

# a module of the user's project the kernel file imports: a run_scoped body that raises
HELPERS = textwrap.dedent("""\
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu


    def scoped_step(o_ref):
        def body(buf):
            buf[...] = o_ref[...]
            raise ValueError("the scoped body refuses")

        pl.run_scoped(body, pltpu.VMEM((8, 128), jnp.float32))
    """)

KERNELS = textwrap.dedent("""\
    import functools

    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    from helpers import scoped_step


    def _check(ref):
        raise ValueError("the helper refuses")


    def _kernel(x_ref, o_ref, *, where):
        o_ref[...] = x_ref[...]
        if where == "helper":
            _check(o_ref)
        if where == "when":
            @pl.when(pl.program_id(0) == 0)
            def _():
                @pl.when(x_ref[0, 0] > 0)
                def _():
                    raise ValueError("the nested when refuses")
        if where == "scoped":
            scoped_step(o_ref)


    def make(where):
        spec = jax.ShapeDtypeStruct((8, 128), jnp.float32)
        call = pl.pallas_call(functools.partial(_kernel, where=where), out_shape=spec, grid=(1,),
                              interpret=pltpu.InterpretParams())
        return jax.jit(call), (spec,)
    """)

# where -> (file, line) that raised, (file, line) of the call into it: the kernel line that called the helper,
# the outer pl.when's line, the kernel's call of the neighbour module's run_scoped step
CASES = {
    "helper": (("kernels.py", 12), ("kernels.py", 18)),
    "when": (("kernels.py", 24), ("kernels.py", 20)),
    "scoped": (("helpers.py", 9), ("kernels.py", 26)),
}


@pytest.fixture(scope="module")
def raised(tmp_path_factory) -> dict[str, KernelRaised]:
    d = tmp_path_factory.mktemp("trace_errors")
    (d / "helpers.py").write_text(HELPERS)
    (d / "kernels.py").write_text(KERNELS)
    module = import_kernel_file(str(d / "kernels.py"))
    out = {}
    for where in CASES:
        with pytest.raises(KernelRaised) as e:
            make_jaxpr(*module.make(where), path=str(d / "kernels.py"))
        out[where] = e.value
    return out


def _at(loc) -> tuple[str, int]:
    return loc.file.rsplit("/", 1)[-1], loc.line


@pytest.mark.jax
@pytest.mark.rule("ERR-23")
@pytest.mark.parametrize("where", sorted(CASES))
def test_a_trace_time_error_names_the_kernel_line_and_its_call(raised, where):
    e = raised[where]
    line, call = CASES[where]
    assert e.stage == "trace" and e.code == "kernel-raised"
    assert _at(e.loc) == line and _at(e.related) == call
    assert f"at {e.loc.file}:{line[1]} (called from {e.related.file}:{call[1]})" in str(e)
    assert f"ValueError: the {'nested when' if where == 'when' else where} " in str(e)


@pytest.mark.jax
@pytest.mark.rule("ERR-23")
@pytest.mark.parametrize("where", sorted(CASES))
def test_every_format_reports_the_kernel_line_and_the_call(raised, where):
    e = raised[where]
    err = InputError(e.code, str(e), e.loc, file=e.path, related=e.related)
    (file, line), (call_file, call_line) = CASES[where]
    text = err.one_line()  # the text format's one line on stderr
    assert f"{file}:{line}" in text and "called from" in text and f"{call_file}:{call_line}" in text
    files = [FileReport(e.path, [], error=err)]
    report = json.loads(render("json", e.path, files, "test"))
    (row,) = report["errors"]
    assert _at_json(row["location"]) == (file, line)
    ((related),) = row["related_locations"]
    assert _at_json(related) == (call_file, call_line) and related["role"] == "called-from"
    github = render("github", e.path, files, "test")
    assert f"{file},line={line}::" in github and "called from" in github and f"{call_file}:{call_line}" in github


def _at_json(loc: dict) -> tuple[str, int]:
    return loc["file"].rsplit("/", 1)[-1], loc["line"]
