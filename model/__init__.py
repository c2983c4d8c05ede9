"""semcheck.model: the executable reference model (numpy only; no jax, no z3, no threads)."""

from semcheck.model.launch import Scratch, launch
from semcheck.model.ops import (
    BARRIER,
    DMA_MODES,
    INTERPRETER_MODES,
    NO_LOC,
    AllocBuffer,
    AllocSem,
    Barrier,
    DmaMode,
    DmaStart,
    ExitCheck,
    FreeBuffer,
    Access,
    Region,
    GetBarrierSem,
    Loc,
    Op,
    Program,
    Read,
    SemRef,
    Signal,
    Topology,
    Wait,
)
from semcheck.model.errors import (
    BadTarget,
    CoreIndexOutOfBounds,
    IdCollision,
    Int16Overflow,
    InterpreterView,
    ModelBug,
    NoCollectiveId,
    RevisitedBlock,
    SemIndexOutOfBounds,
    UnknownSemaphore,
    Violation,
)
from semcheck.model.explore import Exploration, ExplorationLimit, explore, visible
from semcheck.model.fast import fast_run
from semcheck.model.fold import find_fold
from semcheck.model.quotient import Quotient
from semcheck.model.run import classify, run
from semcheck.model.state import Blocked, Dma, ExitWarning, Failure, Outcome, State
from semcheck.model.step import enabled, step
