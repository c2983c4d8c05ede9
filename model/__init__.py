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
