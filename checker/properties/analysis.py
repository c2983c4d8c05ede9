"""The analysis of one program: what its checks compute once and share, per DMA mode.

Every check of a program starts from the same facts: the static system (its lowering), where S'
ends (RUN-3), the maximal run, the counters' totals, the program's symmetry and fold. `Analysis`
holds them for one program, each computed on first use; `Analysis.mode(m)` is the analysis of
(program, m). Whoever checks a program (`checking.check_program`, `checking.check_modes`, the
mode worker) makes one and hands it to every check; a check called without one makes its own.
There is no module-level state: two analyses of one program share nothing.

The facts are computed from the layers below: the model, the static system, and the fact modules
`failing_facts` and `race_order`, which import no property. The properties import this module and
read the facts; nothing here imports a property (tests/test_import_graph.py: no cycle).

The interpreter's two DMA modes share what does not depend on when copies complete (the lowering,
S''s end, the totals: DMA-6, RUN-3); those facts are kept once, on the program's analysis, for
both. Facts of another program (a fold, S' cut at its failures, DR-9's split) have their own
analysis, kept here too, so that every check of that program shares it as well.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import cached_property
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, TypeVar

from semcheck.checker.frontend.grid_copies import grid_copy_of, hardware_overlap
from semcheck.checker.properties.confined_scopes import (has_scopes, interpreter_failure, scope_runs,
                                                         scope_verdict)
from semcheck.checker.properties.failing_facts import (deferred_never_raise, every_run_fails, scope_exploration,
                                                       view_ops)
from semcheck.checker.properties.race_order import ordered
from semcheck.checker.static.least_stuck import complete, maximal_run, s_prime_end, s_prime_run
from semcheck.checker.static.lowering import lower, totals
from semcheck.checker.static.symmetry import find_rotation
from semcheck.checker.static.system import EncodingBug
from semcheck.model.fold import race_symmetry, skeleton_fold
from semcheck.model.happens_before import traced_run
from semcheck.model.ops import DmaStart, Program
from semcheck.model.partial_arrivals import split, split_lazily
from semcheck.model.symmetric import Symmetric, with_cores

if TYPE_CHECKING:
    from semcheck.checker.static.lowering import Lowered
    from semcheck.checker.static.least_stuck import SPrimeEnd
    from semcheck.model.quotient import Quotient
    from semcheck.model.ops import Op
    from semcheck.model.partial_arrivals import Split
    from semcheck.model.state import Outcome

T = TypeVar("T")


def family(mode: str) -> str:
    """The semantics a mode belongs to: the interpreter's (eager, on_wait) or the hardware's."""
    return "hardware" if mode == "hardware" else "interpreter"


class Analysis:
    """The facts of one program shared by its checks in every mode (see the module docstring).

    `modes`: the modes this process checks the program in (the race check computes the
    interpreter's two together when both are to be checked, DR-7). `symmetry`: the program's
    symmetry when it is known already (DR-9's split program reads its own off the program's).
    """

    def __init__(self, program: Program, *, modes: tuple[str, ...] = (),
                 symmetry: tuple[int, Quotient | None] | None = None, split_of: tuple[Analysis, Split] | None = None
                 ) -> None:
        self.program = program
        self.modes = tuple(modes)
        # DR-9's split program: the analysis of the program it splits and the split (DR-32, DR-33 read the
        # program's facts instead of the split's)
        self.split_of = split_of
        self._modes: dict[str, ModeAnalysis] = {}
        self._shared: dict[tuple, Any] = {}
        self._traces_read: set[str] = set()  # run modes whose traced run the race pass has read (DR-46)
        # RUN-65: `checking.exposures_of(self, fold)` by fold, as a forked mode worker found it
        self.exposed: dict[bool, tuple] = {}
        if symmetry is not None:
            self.__dict__["symmetry"] = symmetry

    def mode(self, mode: str) -> ModeAnalysis:
        """The analysis of (this program, `mode`)."""
        m = self._modes.get(mode)
        if m is None:
            m = self._modes[mode] = ModeAnalysis(self, mode)
        return m

    def shared(self, key: tuple, compute: Callable[[], T]) -> T:
        """A fact several modes share (`key` names it and its family), computed by the first to ask."""
        if key not in self._shared:
            self._shared[key] = compute()
        return self._shared[key]

    def known(self, key: tuple) -> Any:
        """A shared fact if some mode computed it already, else None."""
        return self._shared.get(key)

    def keep(self, key: tuple, value: Any) -> None:
        self._shared[key] = value

    def traced(self, run_mode: str) -> tuple:
        """DR-46: (final state, observer calls) of the program's fast run in `run_mode`, as the race pass reads
        it: the one the maximal run of that mode recorded, or made now (no schedule: no maximal run reads it)."""
        m = self.mode(run_mode)
        out, trace = m.traced_run if "traced_run" in m.__dict__ else traced_run(self.program, run_mode, record=False)
        return out.state, trace

    def read_trace(self, run_mode: str) -> None:
        """The race pass has read `run_mode`'s run (DR-46): its calls are dropped, and no later maximal run
        records them."""
        self._traces_read.add(run_mode)
        m = self._modes.get(run_mode)
        if m is not None:
            m.__dict__.pop("traced_run", None)

    @cached_property
    def symmetry(self) -> tuple[int, Quotient | None]:
        """`race_symmetry` (DR-5, DR-8) of the program with its accesses; of a `Symmetric`, read off one
        period of its cores (RUN-20)."""
        program = self.program
        if self.symmetric:
            return race_symmetry(program, within=program.period)
        return race_symmetry(program)

    @cached_property
    def symmetric(self) -> bool:
        """Whether the program is a `Symmetric` (RUN-20): its checks read it through `whole_program`."""
        return isinstance(self.program, Symmetric)

    @cached_property
    def whole_program(self) -> Analysis | str:
        """RUN-21: the analysis of the materialised program of a `Symmetric` (with this one's symmetry, fold
        are the materialised program's, RUN-20), or why it is not built; this analysis
        itself for a `Program`."""
        if not self.symmetric:
            return self
        why = self.program.materialise_refusal()
        if why is not None:
            return why
        whole = Analysis(self.program.materialise(), modes=self.modes, symmetry=self.symmetry)
        for fact in ("fold", "fold_analysis"):
            whole.__dict__[fact] = getattr(self, fact)
        return whole

    @cached_property
    def fold(self) -> Quotient | None:
        """The fold (RUN-7) of the program's synchronisation skeleton (`model.fold.skeleton_fold`), read off
        its symmetry."""
        return skeleton_fold(self.program, self.symmetry)

    @cached_property
    def fold_analysis(self) -> Analysis | None:
        """The analysis of the fold's program, shared by the properties proved on it."""
        return None if self.fold is None else Analysis(self.fold.program)

    @cached_property
    def view_ops(self) -> tuple[Op, ...]:
        """The distinct operations through a view the interpreter cannot index (ERR-9), in program order."""
        program = self.program
        if self.symmetric:
            # DR-36 as below, on the representatives (RUN-20); where they have such operations, the list
            # is the whole program's (RUN-21), or the representatives' when it is not built: only whether
            # there are any is read then (`failing_runs.fold_unsafe`), every other reader has the whole
            found = view_ops(SimpleNamespace(cores=program.representatives))
            whole = self.whole_program if found else None
            return whole.view_ops if isinstance(whole, Analysis) else found
        k = self.__dict__["symmetry"][0] if "symmetry" in self.__dict__ else program.topology.num_devices
        if k < program.topology.num_devices:
            # DR-36: the rotation keeps `view_error` (RUN-7 keeps every field but devices and regions), so
            # a program without such an operation on its first k devices has none
            reps = program.cores[: k * program.topology.cores_per_device]
            if not view_ops(dataclasses.replace(program, cores=tuple(reps) + ((),) * (len(program.cores) - len(reps)))):
                return ()
        return view_ops(program)

    @cached_property
    def partial_arrivals(self) -> tuple[Split, Analysis]:
        """DR-9's split program and its analysis, with its symmetry (DR-5, DR-8) read off the program's:
        splitting is done copy by copy, so a rotation that maps the program onto itself maps each copy's
        forerunner onto the image's, and the split of the program's fold is the fold of its split.

        DR-31: the program is split lazily, core by core as the race pass reads them, with what is split
        and what is mixed read off the devices of one period of the symmetry; DR-32: the split program's
        accesses are the program's, moved past the forerunners (`race_order.access_lister`)."""
        program = self.program
        k, fold = self.symmetry
        parts = split_lazily(program, k)
        if parts.program is program:
            return parts, self
        if parts.mixed:
            return parts, Analysis(parts.program)
        folded = None if fold is None else dataclasses.replace(fold, program=split(fold.program).program)
        return parts, Analysis(parts.program, symmetry=(k, folded), split_of=(self, parts))

    @cached_property
    def grid_overlap(self) -> str | None:
        """GRID-4's `hardware_overlap` of the program; of the program it splits for DR-9's split (DR-33)."""
        if self.split_of is not None:
            return self.split_of[0].grid_overlap
        return hardware_overlap(self._grid_representatives() or self.program)

    def _grid_representatives(self) -> Program | None:
        """DR-34: the program with only the cores of devices `0 .. k-1` (DR-5's period `k`), where GRID-4
        reads the same off them as off the program; None where it may not (no symmetry, or a copy that
        lands on another device's buffer that the grid copies)."""
        program = self.program
        topo = program.topology
        k = self.symmetry[0]
        if k >= topo.num_devices:
            return None
        reps = program.cores[: k * topo.cores_per_device]
        copied = {op.buf for ops in reps for op in ops if (loc := grid_copy_of(op)) is not None and loc.hbm}
        if any(type(op) is DmaStart and op.device is not None and op.dst_buf in copied for ops in reps for op in ops):
            return None
        return with_cores(program, tuple(reps) + ((),) * (topo.num_cores - len(reps)))


class ModeAnalysis:
    """The facts of one program under one DMA mode; `whole` holds those the modes share."""

    def __init__(self, whole: Analysis, mode: str) -> None:
        self.whole = whole
        self.program = whole.program
        self.mode = mode
        self.family = family(mode)
        self._runs: dict[bool, Outcome] = {}
        self._dma_bytes: dict[bool, Any] = {}

    @cached_property
    def deferred_views(self) -> bool:
        """Whether a copy goes through a view the interpreter cannot index: it fails in its start under
        eager (ERR-9) and in the waiter that runs it under on_wait (ACC-11), so the two modes' lowerings
        differ and none is shared."""
        return self.family != "hardware" and any(type(op) is DmaStart for op in self.whole.view_ops)

    @cached_property
    def deferred_never_raise(self) -> bool | None:
        """ACC-11: whether no run under on_wait runs a half of a copy whose view raises, by every schedule
        (`failing_facts.deferred_never_raise`); None when the explorer runs out of states."""
        return deferred_never_raise(self.program, self.mode)

    @cached_property
    def lowering(self) -> Lowered:
        """The static system (`static.lowering.lower`); eager and on_wait share one: what it records
        (counters, targets, failures) follows the semaphore rules, not when copies complete."""
        def lowered() -> Lowered:
            # RUN-29: happens-before reads program order and barriers only, so every mode's lowering shares one
            low = lower(self.program, self.mode, hb=self.whole.known(("happens_before",)))
            self.whole.keep(("happens_before",), low.hb)
            return low

        if self.family == "hardware" or self.deferred_views:
            return lowered()
        shared = self.whole.shared(("lowering", "interpreter"), lowered)
        return shared if shared.mode == self.mode else dataclasses.replace(shared, mode=self.mode)

    @cached_property
    def s_prime_run(self) -> Outcome:
        """This mode's own run of S' (`static.least_stuck.s_prime_run`): its schedule replays under the mode.
        Without failing positions S' is the program itself, and its run the program's maximal run."""
        low = self.lowering
        if low.failing:
            return s_prime_run(low)
        out = self.maximal_run()
        if out.failure is not None:
            raise EncodingBug(f"S' run failed although the lowering found no failure there: {out.failure}")
        return out

    @cached_property
    def end(self) -> SPrimeEnd:
        """Where S' ends (`static.least_stuck.s_prime_end`); eager and on_wait share it when the lowering is static."""
        low = self.lowering
        if not low.ok:
            return s_prime_end(low, run=self.s_prime_run)
        if self.family == "hardware":
            return s_prime_end(low)
        return self.whole.shared(("end", "interpreter"), lambda: s_prime_end(low))

    def maximal_run(self, *, lookup_errors: bool = True) -> Outcome:
        """The program's fast run continued to a terminal state (`static.least_stuck.maximal_run`).

        DR-46: where the race pass will read this mode's own run, that run is made once, its observer calls
        recorded (`traced_run`), and serves both."""
        out = self._runs.get(lookup_errors)
        if out is None:
            if lookup_errors and self._race_reads_own_run():
                out = complete(self.program, self.mode, self.traced_run[0])
            else:
                out = maximal_run(self.program, self.mode, lookup_errors=lookup_errors)
            self._runs[lookup_errors] = out
        return out

    @cached_property
    def traced_run(self) -> tuple:
        """DR-46: this mode's fast run with its observer calls (`happens_before.traced_run`); dropped once the
        race pass has read it (`Analysis.read_trace`)."""
        return traced_run(self.program, self.mode)

    def _race_reads_own_run(self) -> bool:
        """Whether the race pass is still to read this mode's run of the program itself (DR-7: eager's and
        hardware's; DR-8: only without a fold), as far as what is known already says: nothing is computed
        to ask it."""
        whole = self.whole
        if "traced_run" in self.__dict__:
            return True
        return (self.mode in ("eager", "hardware") and self.mode not in whole._traces_read and not whole.symmetric
                and "symmetry" in whole.__dict__ and whole.symmetry[1] is None)

    @cached_property
    def rotation(self):
        """RUN-6's smallest rotation that is an automorphism of the lowering (`static.symmetry.find_rotation`),
        or None; eager and on_wait share it where they share the lowering (RUN-48)."""
        if self.family == "hardware" or self.deferred_views:
            return find_rotation(self.lowering)
        return self.whole.shared(("rotation", "interpreter"), lambda: find_rotation(self.lowering))

    @cached_property
    def totals(self) -> dict:
        """counter -> (contributed, waited) (`static.lowering.totals`): a function of the lowering alone."""
        return self.whole.shared(("totals", self.mode if self.deferred_views else self.family),
                                 lambda: totals(self.lowering))

    @cached_property
    def every_run_fails(self):
        """How every run ends when each one raises ERR-9 or ERR-11 (`failing_facts.every_run_fails`), else None."""
        return every_run_fails(self, Analysis)

    @cached_property
    def scopes(self):
        """BUF-13's verdict on the program's copies of run_scoped buffers (`confined_scopes.scope_verdict`),
        None when it has none."""
        if not isinstance(self.program, Program):
            return scope_verdict(self.program, self.mode)
        # the held runs are hardware runs: every mode reads the same ones
        return scope_verdict(self.program, self.mode, self.whole.shared(("scope_runs",), lambda: scope_runs(self.program)))

    @cached_property
    def scope_failure(self) -> str | None:
        """BUF-14: why a run of this interpreter mode may raise at a run_scoped buffer, which no engine
        follows (so nothing else of the mode is proved); None when no run can, as in ERR-49's relaxed program."""
        if not getattr(self.program, "scoped_keys", True):
            return None
        if self.whole.symmetric and has_scopes(self.program):
            # a Symmetric's scopes need every core's run (BUF-13): the built program's answer, as checking's
            built = self.whole.whole_program
            if not isinstance(built, str):
                return built.mode(self.mode).scope_failure
        return interpreter_failure(self.scopes, self.mode)

    @cached_property
    def clock_failure(self) -> str | None:
        """RACE-1: why a wait of this interpreter mode may fail the race detector's clock assertion, which
        only the runs of the model follow (so nothing else of the mode is proved); None when none may."""
        from semcheck.checker.properties.clock_waits import clock_risk

        return clock_risk(self.program, self.mode)

    @cached_property
    def scope_runs_explored(self):
        """BUF-14, RACE-1: every schedule of this interpreter mode explored (`failing_facts.scope_exploration`)
        when a run may raise at a run_scoped buffer (`scope_failure`) or at a wait's clock (`clock_failure`);
        None when none may or past the budget."""
        if self.scope_failure is None and self.clock_failure is None:
            return None
        return scope_exploration(self)

    @cached_property
    def race_order(self):
        """The happens-before pass (DR-6) of this mode (`race_order.ordered`)."""
        return ordered(self)

    def dma_bytes(self, exits: bool, compute: Callable[[], T]) -> T:
        """dma-bytes' verdict, computed once per `exits`."""
        if exits not in self._dma_bytes:
            self._dma_bytes[exits] = compute()
        return self._dma_bytes[exits]


def analysis_of(program: Program, mode: str, facts: ModeAnalysis | None) -> ModeAnalysis:
    """`facts` when it is the analysis of (program, mode); a fresh one when the caller has none."""
    if facts is None:
        return Analysis(program).mode(mode)
    if facts.program is not program or facts.mode != mode:
        raise ValueError("the analysis handed to a check is of another program or mode")
    return facts
