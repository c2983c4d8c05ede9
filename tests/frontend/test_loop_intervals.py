"""PRG-228, PRG-229, PRG-230, PRG-233: the carries of a kernel's loops in PRG-202's interval analysis. Drawn small
loops (an accumulator, a counter, a running max, over a literal or a loaded trip count) are walked trip by trip on the
values the call runs on, so an index is cleared exactly where the run never indexes below 0; summarised (the
trip-by-trip walk turned off), a cleared index is at least 0 in the run too."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax.experimental import pallas as pl  # noqa: E402
from jax.experimental.pallas import tpu as pltpu  # noqa: E402

from semcheck.checker.frontend import loop_intervals  # noqa: E402
from semcheck.checker.frontend.kernel_outputs import unwritten_reads  # noqa: E402

SMEM = pl.BlockSpec(memory_space=pltpu.SMEM)
N = 4  # entries of the loaded input
NAMED = "an index semcheck cannot show is at least 0"

_UPDATES = {
    "add": lambda acc, v: acc + v,
    "add_positive": lambda acc, v: acc + jnp.maximum(v, 0),
    "sub": lambda acc, v: acc - v,
    "max": lambda acc, v: jnp.maximum(acc, v),
    "count": lambda acc, v: acc + 1,
    "dec": lambda acc, v: acc - 1,
}
_PY = {"add": lambda acc, v: acc + v, "add_positive": lambda acc, v: acc + max(v, 0), "sub": lambda acc, v: acc - v,
       "max": max, "count": lambda acc, v: acc + 1, "dec": lambda acc, v: acc - 1}

LOOPS = st.fixed_dictionaries({
    "init": st.sampled_from([-2, 0, 3]),
    "trips": st.sampled_from(["loaded", 0, 2, 5]),
    "update": st.sampled_from(sorted(_UPDATES)),
    "off": st.integers(-2, 3),
    "inside": st.booleans(),
})
VALUES = st.lists(st.integers(-3, 5), min_size=N, max_size=N)


def _eqn(loop):
    """A kernel whose `fori_loop` carries `acc` (updated by `c[i % N]`) and stores at `acc - off`, inside the
    loop (at each trip's start) or after it."""
    upd, off = _UPDATES[loop["update"]], loop["off"]

    def kernel(c_ref, o_ref):
        def body(i, acc):
            if loop["inside"]:
                o_ref[acc - off] = i
            return upd(acc, c_ref[i % N])

        trips = c_ref[0] if loop["trips"] == "loaded" else loop["trips"]
        acc = jax.lax.fori_loop(0, trips, body, jnp.int32(loop["init"]))
        if not loop["inside"]:
            o_ref[acc - off] = 1

    def f(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64,), jnp.int32), in_specs=[SMEM],
                              out_specs=SMEM, interpret=True)(x)

    return next(q for q in jax.make_jaxpr(f)(jnp.ones((N,), jnp.int32)).eqns if q.primitive.name == "pallas_call")


def _indices(loop, c):
    """The indices the kernel's store runs at, given the input `c`."""
    trips = c[0] if loop["trips"] == "loaded" else loop["trips"]
    acc, out = loop["init"], []
    for i in range(max(trips, 0)):
        if loop["inside"]:
            out.append(acc - loop["off"])
        acc = _PY[loop["update"]](acc, c[i % N])
    return out if loop["inside"] else [acc - loop["off"]]


@pytest.mark.jax
@pytest.mark.rule("PRG-228")
@settings(max_examples=60, deadline=None)
@given(LOOPS, VALUES)
@example({"init": 0, "trips": "loaded", "update": "add_positive", "off": 0, "inside": True}, [3, -1, 2, 0])
@example({"init": 0, "trips": 5, "update": "add", "off": 0, "inside": False}, [1, -3, 2, 0])
@example({"init": 0, "trips": "loaded", "update": "sub", "off": -2, "inside": True}, [2, 1, 5, 5])
def test_a_loop_walked_trip_by_trip_clears_an_index_exactly_when_the_run_never_indexes_below_0(loop, c):
    """On the values the call runs on, every carry of a few trips is exact: the store's index is cleared exactly
    where none of the indices the run stores at is negative."""
    why = unwritten_reads(_eqn(loop), [jnp.asarray(c, jnp.int32)])
    assert (why == "") == all(i >= 0 for i in _indices(loop, c)), (loop, c, why)
    assert why == "" or NAMED in why


@pytest.mark.jax
@pytest.mark.rule("PRG-229")
@settings(max_examples=60, deadline=None)
@given(LOOPS, VALUES)
@example({"init": 0, "trips": 5, "update": "add_positive", "off": 0, "inside": True}, [1, -3, 2, 0])
@example({"init": 0, "trips": "loaded", "update": "max", "off": 0, "inside": False}, [3, -1, 2, 0])
@example({"init": 3, "trips": 5, "update": "count", "off": 3, "inside": False}, [0, 0, 0, 0])
@example({"init": 3, "trips": 5, "update": "sub", "off": 0, "inside": False}, [1, 1, 1, 1])  # 3 - 5 < 0
@example({"init": 3, "trips": "loaded", "update": "sub", "off": 0, "inside": True}, [5, 1, 1, 1])
@example({"init": 3, "trips": "loaded", "update": "dec", "off": 0, "inside": False}, [4, 0, 0, 0])  # 4 trips: -1
@example({"init": 3, "trips": "loaded", "update": "dec", "off": 0, "inside": False}, [3, 0, 0, 0])  # 3 trips: 0
def test_a_summarised_loop_clears_only_indices_the_run_keeps_at_least_0(loop, c):
    """With no loop walked trip by trip (the summary of PRG-229 for each), a cleared index is at least 0 on
    every store of the run."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop_intervals, "UNROLL_TRIPS", 0)
        why = unwritten_reads(_eqn(loop), [jnp.asarray(c, jnp.int32)])
    if why == "":
        assert all(i >= 0 for i in _indices(loop, c)), (loop, c)
    if loop["update"] == "dec" and loop["trips"] == "loaded" and not loop["inside"]:
        # a step of exactly -1 over the loaded trip count: the summary's lower end is the run's end
        assert (why == "") == all(i >= 0 for i in _indices(loop, c)), (loop, c, why)


def _long(update, trips=5000, init=0, bounded=True):
    def kernel(c_ref, o_ref):
        def body(i, acc):
            o_ref[acc] = i
            return update(acc, c_ref[i % N])

        n = trips if bounded else c_ref[0] * 1000
        o_ref[jax.lax.fori_loop(0, n, body, jnp.int32(init))] = 1

    def f(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64,), jnp.int32), in_specs=[SMEM],
                              out_specs=SMEM, interpret=True)(x)

    return next(q for q in jax.make_jaxpr(f)(jnp.ones((N,), jnp.int32)).eqns if q.primitive.name == "pallas_call")


@pytest.mark.jax
@pytest.mark.rule("PRG-229")
def test_an_accumulator_of_a_long_loop_is_bounded_by_its_trip_count():
    """Past the trip-by-trip limit: an accumulator growing by a value >= 0 over 5000 trips, a running max and a
    counter are cleared; one that may shrink is named, and so is one whose sum over the trips may pass int32's
    end (it may wrap below 0), over a trip count known only to be below int32's end too."""
    c = [jnp.asarray([1, 0, 2, 3], jnp.int32)]
    assert unwritten_reads(_long(lambda a, v: a + jnp.maximum(v, 0)), c) == ""
    assert unwritten_reads(_long(lambda a, v: jnp.maximum(a, v)), c) == ""
    assert unwritten_reads(_long(lambda a, v: a + 1), c) == ""
    assert NAMED in unwritten_reads(_long(lambda a, v: a + v), [jnp.asarray([1, 0, -2, 3], jnp.int32)])
    assert NAMED in unwritten_reads(_long(lambda a, v: a + v + 2**20), c)  # 5000 * 2**20 > 2**31
    assert unwritten_reads(_long(lambda a, v: a + v + 2**10), c) == ""
    # no values: the trip count is only below int32's end, so a sum of 2 a trip may wrap, one of 1 may not
    assert NAMED in unwritten_reads(_long(lambda a, v: a + 2, bounded=False), [])
    assert unwritten_reads(_long(lambda a, v: a + 1, bounded=False), []) == ""


def _loads_at(kernel, shape=(N,), block=None):
    spec = SMEM if block is None else pl.BlockSpec(block, lambda i: (0,), memory_space=pltpu.SMEM)

    def f(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((8,), jnp.int32), in_specs=[spec],
                              out_specs=SMEM, grid=(1,), interpret=True)(x)

    return next(q for q in jax.make_jaxpr(f)(jnp.ones(shape, jnp.int32)).eqns if q.primitive.name == "pallas_call")


@pytest.mark.jax
@pytest.mark.rule("PRG-230")
def test_a_load_at_a_known_index_reads_the_values_there():
    """A load at an index whose interval lies in the ref is in the interval of the elements there (a slice too);
    one that may fall outside, or one from a block that is not the whole input, is in the input's interval."""
    def at_first(c_ref, o_ref):
        o_ref[c_ref[c_ref[0]]] = 1  # c[c[0]]: an index of c's elements at c[0]

    def in_a_slice(c_ref, o_ref):
        o_ref[c_ref[pl.ds(c_ref[0], 2)][1]] = 1  # an element of c[c[0]:c[0] + 2]

    assert unwritten_reads(_loads_at(at_first), [jnp.asarray([2, -1, 3, 0], jnp.int32)]) == ""  # c[2] == 3
    assert NAMED in unwritten_reads(_loads_at(at_first), [jnp.asarray([1, -1, 0, 0], jnp.int32)])  # c[1] == -1
    assert unwritten_reads(_loads_at(in_a_slice), [jnp.asarray([2, -1, 3, 0], jnp.int32)]) == ""
    assert NAMED in unwritten_reads(_loads_at(in_a_slice), [jnp.asarray([1, -1, 3, 0], jnp.int32)])


@pytest.mark.jax
@pytest.mark.rule("PRG-230")
def test_a_load_past_the_ref_or_from_a_partial_block_takes_the_whole_inputs_interval():
    def past(c_ref, o_ref):
        o_ref[c_ref[c_ref[0] + 3]] = 1  # c[0] + 3 may pass c's end: c's interval

    def through_block(c_ref, o_ref):
        o_ref[c_ref[1]] = 1

    assert NAMED in unwritten_reads(_loads_at(past), [jnp.asarray([1, -1, 0, 2], jnp.int32)])  # c[4]: any of c
    assert unwritten_reads(_loads_at(past), [jnp.asarray([1, 1, 0, 2], jnp.int32)]) == ""
    assert unwritten_reads(_loads_at(past), [jnp.asarray([0, -1, 0, 2], jnp.int32)]) == ""  # c[3] == 2
    eqn = _loads_at(through_block, shape=(2 * N,), block=(N,))
    assert NAMED in unwritten_reads(eqn, [jnp.asarray([0, 1, 0, 2, -1, 0, 0, 0], jnp.int32)])
    assert unwritten_reads(_loads_at(through_block), [jnp.asarray([0, 1, -1, 2], jnp.int32)]) == ""


NESTS = st.fixed_dictionaries({
    "init": st.sampled_from([-1, 0, 2]),
    "update": st.sampled_from(["add", "sub", "add_positive"]),
    "off": st.integers(-1, 2),
})


def _nest_eqn(nest):
    """GDN's shape: an outer `fori_loop` over `c[0]` sequences carrying `count`, an inner one over `c[s % N]`
    chunks storing at `count + j - off`; the outer trip grows `count` by `c[s % N]` (updated as `nest` says)."""
    upd, off = _UPDATES[nest["update"]], nest["off"]

    def kernel(c_ref, o_ref):
        def outer(s, count):
            n = c_ref[s % N]

            def inner(j, carry):
                o_ref[count + j - off] = s
                return carry

            jax.lax.fori_loop(0, n, inner, 0)
            return upd(count, n)

        o_ref[jax.lax.fori_loop(0, c_ref[0], outer, jnp.int32(nest["init"])) - off] = 1

    def f(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64,), jnp.int32), in_specs=[SMEM],
                              out_specs=SMEM, interpret=True)(x)

    return next(q for q in jax.make_jaxpr(f)(jnp.ones((N,), jnp.int32)).eqns if q.primitive.name == "pallas_call")


def _nest_indices(nest, c):
    count, out = nest["init"], []
    for s in range(max(c[0], 0)):
        n = c[s % N]
        out += [count + j - nest["off"] for j in range(max(n, 0))]
        count = _PY[nest["update"]](count, n)
    return out + [count - nest["off"]]


@pytest.mark.jax
@pytest.mark.rule("PRG-228", "PRG-229")
@settings(max_examples=40, deadline=None)
@given(NESTS, VALUES, st.booleans())
@example({"init": 0, "update": "add", "off": 0}, [3, -2, 1, 2], False)  # count + n may shrink: 0, -2 ...
@example({"init": 0, "update": "add_positive", "off": 0}, [3, 2, 1, 2], True)
def test_nested_loops_storing_at_an_accumulated_index(nest, c, summarised):
    """Nested loops as the GDN metadata kernel's: walked trip by trip, the store is cleared exactly where the run
    never stores below 0; summarised, only where it does not."""
    with pytest.MonkeyPatch.context() as mp:
        if summarised:
            mp.setattr(loop_intervals, "UNROLL_TRIPS", 0)
        why = unwritten_reads(_nest_eqn(nest), [jnp.asarray(c, jnp.int32)])
    ok = all(i >= 0 for i in _nest_indices(nest, c))
    assert (why == "") == ok if not summarised else (why != "" or ok), (nest, c, summarised, why)


WRAPS = st.fixed_dictionaries({
    "dtype": st.sampled_from(["int8", "int16"]),
    "step": st.integers(1, 4),
    "below_max": st.integers(0, 3),
    "start": st.integers(0, 3),
    "spare": st.integers(0, 3),
})


def _wrap_eqn(w):
    """`while i < y: o[acc] = 1; i += step; acc -= 1` with `i` of a narrow dtype from the loaded `c[0]`, `y`
    `below_max` under the dtype's end and `acc` from `y - start + spare`: at most `y - start` trips where `i`
    cannot wrap, so `acc` stays >= 0; where `y - 1 + step` passes the dtype's end it wraps below `y` and the loop
    runs on."""
    dt = jnp.dtype(w["dtype"]).type
    y = int(jnp.iinfo(dt).max) - w["below_max"]

    def kernel(c_ref, o_ref):
        def body(s):
            i, acc = s
            o_ref[acc] = 1
            return i + dt(w["step"]), acc - 1

        jax.lax.while_loop(lambda s: s[0] < dt(y), body, (c_ref[0].astype(dt), jnp.int32(y - w["start"] + w["spare"])))

    def f(x):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((64,), jnp.int32), in_specs=[SMEM],
                              out_specs=SMEM, interpret=True)(x)

    return next(q for q in jax.make_jaxpr(f)(jnp.ones((N,), jnp.int32)).eqns if q.primitive.name == "pallas_call")


def _wrap_run_keeps_acc(w) -> bool:
    """Whether the run (two's complement in the narrow dtype, as XLA adds) never stores below 0."""
    bits = 8 * jnp.dtype(w["dtype"]).itemsize
    top = 2 ** (bits - 1)
    y = top - 1 - w["below_max"]
    i, acc = w["start"], y - w["start"] + w["spare"]
    while i < y:
        if acc < 0:
            return False
        i, acc = (i + w["step"] + top) % (2 * top) - top, acc - 1
    return True


@pytest.mark.jax
@pytest.mark.rule("PRG-233")
@settings(max_examples=40, deadline=None)
@given(WRAPS)
@example({"dtype": "int16", "step": 3, "below_max": 0, "start": 0, "spare": 0})  # 54,613 trips, not 32,767
@example({"dtype": "int8", "step": 2, "below_max": 1, "start": 0, "spare": 0})  # 125 + 2 <= 127: no wrap
def test_a_trip_count_follows_only_from_a_counter_that_cannot_wrap(w):
    """Summarised, the loop's trip count (and so `acc`'s lower end) follows from its counter only where the
    counter's step cannot wrap it past its dtype's end: cleared exactly there, and never where the run stores
    below 0."""
    c = [jnp.asarray([w["start"], 0, 0, 0], jnp.int32)]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(loop_intervals, "UNROLL_TRIPS", 0)
        why = unwritten_reads(_wrap_eqn(w), c)
    if why == "":
        assert _wrap_run_keeps_acc(w), w
    assert (why == "") == (w["step"] <= w["below_max"] + 1), (w, why)
