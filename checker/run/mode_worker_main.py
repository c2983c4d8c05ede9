"""The mode worker's process when it is not a fork (`mode_worker`'s docstring): reads the request on
stdin, writes the answer on stdout."""

from __future__ import annotations

import gc
import os
import pickle
import sys

from semcheck.checker.properties.analysis import Analysis
from semcheck.checker.properties.checking import check_program
from semcheck.checker.run.mode_worker import answer_of


def main() -> int:
    gc.disable()  # as in the verify child: short-lived, allocation-heavy
    program, modes, properties, timeout_ms, deadline, fold, finish, also, known = pickle.load(sys.stdin.buffer)
    analysis = Analysis(program, symmetry=known.get("symmetry"))
    out = answer_of(check_program, analysis, modes, properties, timeout_ms, deadline, fold, finish, also)
    sys.stdout.buffer.write(pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL))
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    code = main()
    # The verify child reads the answer up to end of file, which comes when this process exits;
    # freeing a large program's objects one by one at interpreter exit is slow (bench/README.md).
    os._exit(code)
