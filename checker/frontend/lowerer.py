"""`Lowerer`: the SPMD evaluator with every rule module stacked on it.

Each rule module is a mixin over `evaluator.Evaluator` whose `__init__`
registers its rules (cooperatively, through `super().__init__`). A new kind of
rule is a new mixin here; no rule module knows about the others, except
`ScalarStateRules`, first in the bases: it wraps rules the others registered.
"""

from __future__ import annotations

from semcheck.checker.frontend.accesses import AccessRules
from semcheck.checker.frontend.control_flow import ControlFlowRules
from semcheck.checker.frontend.grid import GridRules
from semcheck.checker.frontend.numeric import NumericRules
from semcheck.checker.frontend.pipeline import PipelineRules
from semcheck.checker.frontend.dma_rules import DmaRules
from semcheck.checker.frontend.scalar_state import ScalarStateRules


class Lowerer(ScalarStateRules, DmaRules, AccessRules, GridRules, ControlFlowRules, PipelineRules, NumericRules):
    """Evaluates one kernel for all devices, one core and grid point at a time (`lower.lower_kernel`)."""
