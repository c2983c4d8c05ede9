"""Runs over many requests: device counts of one kernel file, or many files, `jobs` processes at a
time, answered from the result cache where it can (`semcheck._cache`)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from semcheck.checker.run.child import kill_all, kill_path, verify
from semcheck.checker.run.planning import guess_targets
from semcheck.checker.run.request import NOT_CACHED, Findings, InputError, Note, Request, unknown_results


def run_sweep(
    requests: Sequence[Request],
    *,
    jobs: int = 1,
    debug: bool = False,
    on_done: Callable[[Request, Findings], None] | None = None,
    cache: Any = None,
) -> Findings:
    """Verify several device counts of one kernel file, `jobs` at a time; results in request order.

    The first input error (in request order, so the same one whatever
    `jobs` is) stops the sweep: the other children are killed.
    """
    (run,) = run_files([FileRun("", list(requests))], jobs=jobs, debug=debug, on_done=on_done, cache=cache)
    if run.error is not None:
        raise run.error
    assert run.findings is not None
    return run.findings


@dataclasses.dataclass
class FileRun:
    """One kernel file of a run over many: its requests (device counts, targets) and what came of them."""

    path: str  # as reports show it: as given on the command line, or as discovered under a directory
    requests: list[Request]
    findings: Findings | None = None
    error: InputError | None = None
    cached: int = 0  # requests answered from the result cache


def run_files(
    files: Sequence[FileRun],
    *,
    jobs: int = 1,
    debug: bool = False,
    on_done: Callable[[Request, Findings], None] | None = None,
    cache: Any = None,
) -> Sequence[FileRun]:
    """Verify every request of every file, `jobs` child processes at a time over all of them.

    Per file, as for one file: results in request order, and the first input
    error (in request order, whatever `jobs` is) stops that file -- its other
    children are killed and its results dropped (`FileRun.error` says why);
    the other files go on. `cache` (`semcheck._cache.ResultCache`)
    answers requests verified before with the same inputs, and keeps new
    answers that contain no timeout.
    """
    stopped: set[int] = set()
    hung: dict[int, Request] = {}  # a file whose import outlived --timeout at this request

    def one(i: int, req: Request) -> tuple[Findings, bool]:
        if i in stopped:
            return Findings([]), False
        if i in hung:  # importing is the same at every device count: it would hang again
            first = hung[i]
            reason = (f"timeout: importing the kernel file did not finish within --timeout "
                      f"{first.timeout:g}s at {first.devices} devices; not tried again")
            if req.every_n:  # no per-N rows: the claim is missing, and says why (PAR-8)
                from semcheck.checker.parametric.every_n import TargetClaims

                skipped = Findings([], claims=[TargetClaims(t, reason=reason.removeprefix("timeout: ") + " (PAR-8)",
                                                            timed_out=True, modes=req.modes)
                                               for t in guess_targets(req)])
            else:
                # no note: the first device count's says it once for the file (checker/run/child.py)
                skipped = Findings(unknown_results(req, guess_targets(req), reason))
            skipped.imported = False
            if on_done is not None:  # the sweep's progress counts it, as not tried
                on_done(req, skipped)
            return skipped, False
        hit = cache.get(req) if cache is not None else None
        if hit is None:
            out = verify(req, debug=debug)
            why = cache.put(req, out) if cache is not None else None
            if why is not None:  # said under -v only (checker/run/cli.py): the answer itself is the same
                out.notes.append(Note(NOT_CACHED, f"{os.path.basename(req.path)} at {req.devices} devices: "
                                                  f"not kept in the result cache: {why}", req.devices))
            if not out.imported:
                hung.setdefault(i, req)
        else:
            out = hit
            out.claims = [dataclasses.replace(c, cached=True) for c in out.claims]  # said so, as rows are
        if on_done is not None:
            on_done(req, out)
        return out, hit is not None

    pool = ThreadPoolExecutor(max_workers=max(1, jobs))
    try:
        futures = [[pool.submit(one, i, req) for req in f.requests] for i, f in enumerate(files)]
        for i, (f, fs) in enumerate(zip(files, futures, strict=True)):
            found = Findings([])
            for fut in fs:
                try:
                    out, hit = fut.result()
                except InputError as e:
                    stopped.add(i)
                    for g in fs:
                        g.cancel()
                    for path in {r.path for r in f.requests}:
                        kill_path(path)
                    f.error = e
                    break
                f.cached += hit
                found.results.extend(out.results)
                found.notes.extend(out.notes)
                found.claims.extend(out.claims)
                found.errors.extend(e for e in out.errors
                                    if (e[0], e[1].message) not in {(t, x.message) for t, x in found.errors})
            if f.error is None:
                f.findings = found
    except BaseException:
        kill_all()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return files
