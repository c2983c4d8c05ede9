"""The budgets of the evaluation of loops around kernel calls (specs/deciding/programs.md PRG-168, PRG-183,
PRG-185, PRG-186): beyond them a call's values are not told apart and what needs them is unknown."""

from __future__ import annotations

# PRG-168, PRG-185: the iterations of one loop around kernel calls evaluated one by one (a `scan`, or a
# `while_loop`, PRG-186), and the reaches of one launch PRG-183 tells apart
MAX_SCAN = 1024
# PRG-185: the distinct programs of one launch PRG-183 checks (PRG-199: lowerings that make one program are one)
MAX_ITERATION_LOWERINGS = 128

__all__ = ["MAX_ITERATION_LOWERINGS", "MAX_SCAN"]
