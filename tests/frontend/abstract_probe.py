"""Run in a fresh process: trace kernel files with and without an abstract mesh (RUN-14), or compare
the size estimate with the built program (RUN-13). Prints one JSON line per (file, target, N).

    python abstract_probe.py equal REAL_DEVICES N[,N...] FILE...
    python abstract_probe.py estimate REAL_DEVICES N[,N...] FILE...

`equal`: each target lowered with real devices and with an abstract mesh; `programs_equal` compares
the `Program`s (or the front-end errors) of its kernels, `abstract` says whether the staged build took
the abstract mesh (False: it declined and real devices traced it). `estimate`: the estimate of
`checker/frontend/size_bound.py` and the built program's size, per kernel.
"""

from __future__ import annotations

import json
import sys


def _outcome(t, n):
    from semcheck.checker.frontend.api import lower_target
    from semcheck.checker.frontend.errors import FrontendError

    try:
        return [k.program for k in lower_target(t, n)]
    except FrontendError as e:
        return (type(e).__name__, str(e))


def _takes_abstract_mesh(t, n) -> bool:
    import jax
    from jax.sharding import AbstractMesh

    built = t.build_shapes(n, abstract=True)
    if built is None:
        return False
    meshes = [getattr(getattr(x, "sharding", None), "mesh", None) for x in jax.tree.leaves(built[1])]
    return any(isinstance(m, AbstractMesh) for m in meshes)


def main(argv: list[str]) -> None:
    what, real, counts, files = argv[0], int(argv[1]), [int(x) for x in argv[2].split(",")], argv[3:]
    from semcheck.checker.frontend import provision_devices

    provision_devices(real)
    import jax

    jax.devices()  # real devices exist from here on: the real builds use them
    from semcheck.checker.frontend import targets
    from semcheck.checker.frontend.targets import load_targets

    for f in files:
        for t in load_targets(f):
            if t.inputs is not None:
                continue
            for n in counts:
                row = {"file": f, "target": t.name, "devices": n}
                if what == "equal":
                    saved = targets.ABSTRACT_MESH_FROM
                    try:
                        targets.ABSTRACT_MESH_FROM = 10**9
                        real_outcome = _outcome(t, n)
                        targets.ABSTRACT_MESH_FROM = 1
                        abstract_outcome = _outcome(t, n)
                    finally:
                        targets.ABSTRACT_MESH_FROM = saved
                    row.update(programs_equal=real_outcome == abstract_outcome, abstract=_takes_abstract_mesh(t, n),
                               error=real_outcome[0] if isinstance(real_outcome, tuple) else None)
                else:
                    from semcheck.checker.frontend.api import lower_target
                    from semcheck.checker.frontend.errors import FrontendError
                    from semcheck.checker.frontend.size_bound import estimate

                    try:
                        kernels = lower_target(t, n)
                    except FrontendError:
                        continue
                    row["kernels"] = [(estimate(k.call).ops, k.program.num_ops) for k in kernels]
                print("ROW " + json.dumps(row), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
