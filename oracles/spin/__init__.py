"""SPIN, the explicit-state baseline: a lowered `Program` rendered as a Promela model, and SPIN asked
whether it deadlocks.

This is an independent route to the `deadlock-free` verdict: the same
program, written down for a general-purpose model checker. The benchmark
(`bench/run.py`) uses it as the explicit-state baseline semcheck is measured
against, and `tests/test_promela.py` holds SPIN's verdicts against the
reference model's.

The rendering, for one DMA mode:

* every semaphore count `(key, core)` is one element of the global array
  `semcnt`; amounts on one count are divided by their greatest common divisor
  (counts only ever change by those amounts and are compared with them, so
  the verdict is unchanged and the state vector stays small);
* one `active proctype` per global core, its operations in order:
  a signal is `semcnt[i] = semcnt[i] + inc`, a wait is
  `atomic { semcnt[i] >= v -> semcnt[i] = semcnt[i] - v }` (SEM-5), the k-th barrier
  named n is an arrival counter `arrived[b]` that every participant increments
  and then waits to see complete (BAR-1);
* `eager` (DMA-2): a DMA start adds to both of its counts in one step;
  `hardware` (DMA-5): a DMA start only marks the DMA started, and one
  `dma_engine` process performs each started DMA's read half and then its
  write half, as two separate steps in any order with everything else; its
  loop carries an `end` label, so an idle engine is a valid end state;
  `on_wait` (DMA-3, DMA-4): a DMA start pushes its tasks on the task stacks of
  its counters, and a wait whose count is short pops the last one and runs it
  (each half at most once), until its count suffices or the stack is empty;
* allocations, reads, buffer operations and the exit check do not change
  what can block, so they are resolved statically and rendered as comments;
* a static failure (ERR-7: an out-of-bounds index, a bad target, a missing
  collective id, an int16 overflow, a view the interpreter cannot index, a
  lookup that finds the collective id in both tables) is `assert(false)` at
  its operation: SPIN reports an assertion violation when some run reaches it.

A core that finishes terminates; a core still blocked in a state with no
successor is what SPIN's invalid-end-state check reports: a deadlock.

Not rendered (`PromelaUnsupported`): what depends on the schedule beyond the
interleaving of these steps (a lookup of the collective id that another core's
allocation may or may not have reached, an `on_wait` copy through a view the
interpreter cannot index), and a failure that ends only its own device.

The modules, one job each: `resolve` (semaphore references and static failures, resolved
without running the program), `abstract` (each operation as an abstract action on counters),
`promela` (the Promela text), `pan` (running SPIN and reading its answer), `export` (the
command line, `python -m oracles.spin export ...`).
"""

from oracles.spin.pan import SpinResult, run_spin, spin_available
from oracles.spin.promela import MODES, Rendering, render
from oracles.spin.resolve import PromelaUnsupported

__all__ = ["MODES", "PromelaUnsupported", "Rendering", "SpinResult", "render", "run_spin", "spin_available"]
