"""The park-and-wake schedule of a greedy maximal run (RUN-3).

Each core runs as far as it can; a core that cannot go on parks on the counter it waits for, or on
the barrier it waits at, and is woken when that counter changes or that barrier opens. The fast run
(`semcheck.model.fast`) drives the program's operations with it and the least stuck vector
(`semcheck.checker.static.least_stuck`) the static system's events: one scheduler, so the two runs visit
cores in the same order.

This is a run's working state (mutable, owned by one run), not a model value.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable


class ParkAndWake:
    """The cores ready to run, in order, and those parked on a counter or at a barrier.

    `on_counter` is exposed so that a driver's hot path can test a counter for a parked waiter
    without a call; everything that changes the schedule goes through the methods.
    """

    __slots__ = ("ready", "queued", "on_counter", "at_barrier")

    def __init__(self, num_cores: int) -> None:
        self.ready = deque(range(num_cores))
        self.queued = [True] * num_cores
        self.on_counter: dict[Hashable, int] = {}  # counter -> the core parked on it (only its own core waits on it)
        self.at_barrier: dict[tuple[str, int], list[int]] = {}  # (name, k) -> the cores parked at it

    def next(self) -> int | None:
        """The next core to run, taken off the ready queue; None when every core is parked or done."""
        if not self.ready:
            return None
        core = self.ready.popleft()
        self.queued[core] = False
        return core

    def wake(self, core: int) -> None:
        if not self.queued[core]:
            self.queued[core] = True
            self.ready.append(core)

    def park_on(self, counter: Hashable, core: int) -> None:
        """`core` waits for `counter` to change."""
        self.on_counter[counter] = core

    def changed(self, counter: Hashable) -> None:
        """`counter` changed (a signal, or a task queued on it): wake the core parked on it, if any."""
        core = self.on_counter.pop(counter, None)
        if core is not None and not self.queued[core]:  # `wake`, inline: a ring wakes a core per step
            self.queued[core] = True
            self.ready.append(core)

    def park_at(self, name: str, k: int, core: int) -> None:
        """`core` waits at its `k`-th barrier named `name`."""
        self.at_barrier.setdefault((name, k), []).append(core)

    def opened(self, name: str, k: int) -> None:
        """The `k`-th barriers named `name` opened: wake the cores parked at them."""
        for core in self.at_barrier.pop((name, k), ()):
            self.wake(core)
