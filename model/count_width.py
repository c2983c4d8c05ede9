"""ACC-90: jax's interpreter keeps a semaphore's count in an int32 (`Semaphore.count_by_core` in its
`shared_memory.py`), whose arithmetic wraps; semcheck's counts (SEM-5) are integers.

The two agree wherever no count reaches 2**31: every count starts at 0 and only a signal, a copy's half or a wait
for less than 0 (ACC-76, `semaphore.raised`) adds to it, so the sum of everything a program adds bounds every count
of every run. Only a program with such a wait is asked (a wait past int32 is the one way a kernel's own numbers,
not its memory's size, reach such a count): where the bound reaches 2**31 the model's counts may not be the
interpreter's (a wait for -2**31 after a copy of 512 bytes leaves -2**31 + 512, which no later wait passes).
"""

from __future__ import annotations

from semcheck.model.ops import DmaStart, Program, Signal, Wait
from semcheck.model.semaphore import raised

COUNT_LIMIT = 2 ** 31  # the first count an int32 cannot hold


def count_past_int32(program: Program) -> Wait | None:
    """ACC-90: the first wait for less than 0 of `program` where the sum of everything it adds to counts reaches
    2**31 (some count of some run may then wrap in jax's interpreter), else None."""
    first, total = None, 0
    for ops in program.cores:
        for op in ops:
            if type(op) is Signal:
                total += max(op.inc, 0)
            elif type(op) is DmaStart:
                total += 2 * max(op.nbytes, 0)  # (its two halves: a send and a receive semaphore)
            elif type(op) is Wait and op.value < 0:
                total += raised(op.value)
                first = first or op
    return first if first is not None and total >= COUNT_LIMIT else None


__all__ = ["COUNT_LIMIT", "count_past_int32"]
