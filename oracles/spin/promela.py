"""The Promela text of a program under one DMA mode: declarations, one process per core and, under
hardware, the DMA engine (the package's docstring says what each is)."""

from __future__ import annotations

import dataclasses
import math
import os

from semcheck.model.ops import DmaMode, Op, Program
from oracles.spin.abstract import Abstract
from oracles.spin.resolve import PromelaUnsupported

MODES: tuple[str, ...] = ("hardware", "eager", "on_wait")
MAX_PROCESSES = 255  # SPIN numbers processes with one byte


@dataclasses.dataclass(frozen=True)
class Rendering:
    """A Promela model of one program under one mode, and what SPIN needs to check it."""

    text: str
    mode: str
    counters: tuple[tuple, ...]  # semcnt[i] is the count of counters[i] = (key, core)
    scale: tuple[int, ...]  # semcnt[i] holds the real count divided by scale[i]
    barriers: tuple[tuple[str, int], ...]  # arrived[b] is the k-th barrier named n: (n, k)
    dmas: int
    processes: int
    max_steps: int  # an upper bound on the length of any run
    vector_bytes: int  # an upper bound on SPIN's state vector


def _key_text(key: tuple) -> str:
    if key[0] == "site":
        return f"{key[1]}[{key[2]}]"
    if key[0] == "barrier":
        return "barrier"
    return f"{key[0]} id {key[1]}"


def _comment(text: str) -> str:
    return "/* " + text.replace("*/", "* /") + " */"


def _loc(op: Op) -> str:
    loc = op.loc
    return f"{os.path.basename(loc.file)}:{loc.line}" if loc.line else ""


def _int_type(lo: int, hi: int) -> tuple[str, int]:
    if 0 <= lo and hi <= 255:
        return "byte", 1
    if -(2**15) <= lo and hi < 2**15:
        return "short", 2
    if -(2**31) <= lo and hi < 2**31:
        return "int", 4
    raise PromelaUnsupported(f"semaphore counts can reach {hi}, beyond Promela's int")


def render(program: Program, mode: DmaMode = "hardware") -> Rendering:
    """The Promela model of `program` under `mode`: the abstract actions (`Abstract`), the declarations,
    one process per core and, under hardware, the DMA engine."""
    if mode not in MODES:
        raise PromelaUnsupported(f"the Promela rendering covers the modes {', '.join(MODES)}, not {mode!r}")
    hw = mode == "hardware"
    procs = program.topology.num_cores + (1 if hw else 0)
    if procs > MAX_PROCESSES:
        raise PromelaUnsupported(f"{procs} processes: SPIN runs at most {MAX_PROCESSES}")
    ab = Abstract(program, mode)
    scale, types = _scales(ab)
    out = _declarations(program, ab, scale, types)
    for core, acts in enumerate(ab.actions):
        out += _core_process(ab, scale, core, acts)
    if hw and ab.dma_list:
        out += _dma_engine(ab, scale)
    elif hw:
        procs -= 1

    # Every rendered op is one step, a barrier two (arrive, then leave), a hardware DMA two more.
    actions, dma_list, queued = ab.actions, ab.dma_list, ab.queued
    max_steps = sum(len(a) for a in actions) + sum(x[0] == "barrier" for a in actions for x in a)
    max_steps += 2 * len(dma_list) if hw else 0
    tasks = sum(map(len, queued.values()))  # on_wait: each popped task is one more step of a wait
    max_steps += 2 * tasks + sum(x[0] == "wait" for a in actions for x in a)
    vector = (len(ab.counter_ix) * types["count"][1] + len(ab.barrier_ix) * types["arrivals"][1]
              + (len(dma_list) if hw or queued else 0) + 8 * procs + 64)
    vector += tasks * types["task"][1] + len(queued)
    return Rendering(
        text="\n".join(out) + "\n",
        mode=mode,
        counters=tuple(ab.counter_ix),
        scale=tuple(scale),
        barriers=tuple(ab.barrier_ix),
        dmas=len(dma_list),
        processes=procs,
        max_steps=max_steps,
        vector_bytes=vector,
    )


def _scales(ab: Abstract) -> tuple[list[int], dict[str, tuple[str, int]]]:
    """Each counter's unit (the gcd of everything that touches it), and the Promela type and bytes of a
    count, an arrival count and a queued task, each sized to what it holds."""
    ncnt, incs, waits = len(ab.counter_ix), ab.incs, ab.waits
    scale = [1] * ncnt
    lo, hi = 0, 0
    for i in range(ncnt):
        g = 0
        for v in incs[i] + waits[i]:
            g = math.gcd(g, abs(v))
        scale[i] = g or 1
        # a wait only subtracts what is there, so a count stays within [negative incs, positive incs]
        hi = max(hi, sum(v for v in incs[i] if v > 0) // scale[i])
        lo = min(lo, sum(v for v in incs[i] if v < 0) // scale[i])
    return scale, {"count": _int_type(lo, hi), "arrivals": _int_type(0, max(ab.barrier_size.values(), default=1)),
                   "task": _int_type(0, 2 * len(ab.dma_list) + 1)}


def _declarations(program: Program, ab: Abstract, scale: list[int], types: dict[str, tuple[str, int]]) -> list[str]:
    """The header comments and the global arrays: counts, barrier arrivals, DMA phases, task stacks."""
    topo, mode, ncnt = program.topology, ab.mode, len(ab.counter_ix)
    hw = mode == "hardware"
    counter_ix, barrier_ix, barrier_size, dma_list, queued = (ab.counter_ix, ab.barrier_ix, ab.barrier_size,
                                                              ab.dma_list, ab.queued)
    out: list[str] = []
    w = out.append
    w(_comment(f"semcheck Promela rendering of {program.name}: {topo.num_devices} devices x "
               f"{topo.cores_per_device} cores, dma mode {mode}"))
    w(_comment("a deadlock is an invalid end state: some core blocked while nothing can move"))
    w("")
    w(f"{types['count'][0]} semcnt[{max(ncnt, 1)}];")
    for (key, core), i in counter_ix.items():
        w(_comment(f"semcnt[{i}]: {_key_text(key)} on core {core}" + (f", in units of {scale[i]}" if scale[i] != 1 else "")))
    if barrier_ix:
        w(f"{types['arrivals'][0]} arrived[{len(barrier_ix)}];")
        for (name, k), b in barrier_ix.items():
            w(_comment(f"arrived[{b}]: arrivals at barrier {name!r} #{k} ({barrier_size[b]} participants)"))
    if hw and dma_list:
        w(f"byte dmaphase[{len(dma_list)}];  " + _comment("0 not started, 1 started, 2 read half done, 3 complete"))
    if queued:
        w(f"byte dmaphase[{len(dma_list)}];  " + _comment("0 queued, 1 read half done, 2 complete"))
        for i, tasks in sorted(queued.items()):
            w(f"{types['task'][0]} queue{i}[{len(tasks)}]; byte queued{i};  "
              + _comment(f"semcnt[{i}]'s task stack (DMA-3): 2k reads DMA k, 2k+1 reads then writes it"))
    w("")
    return out


def _half(ab: Abstract, scale: list[int], k: int, write: bool) -> str:
    """DMA-2's half of DMA k, at most once (the on_wait phases)."""
    src, dst, src_inc, dst_inc, _, _ = ab.dma_list[k]
    counter, inc, phase = (dst, dst_inc, 1) if write else (src, src_inc, 0)
    add = "" if counter is None else f"semcnt[{counter}] = semcnt[{counter}] + {inc // scale[counter]}; "
    return f"if :: dmaphase[{k}] == {phase} -> {add}dmaphase[{k}] = {phase + 1} :: else -> skip fi"


def _pop(ab: Abstract, scale: list[int], a: int, v: int) -> str:
    """SEM-7 / DMA-4: a short wait on counter `a` runs the last task queued there."""
    cases = " ".join(f":: queue{a}[queued{a}] == {t} -> {_half(ab, scale, t // 2, False)}"
                     + (f"; {_half(ab, scale, t // 2, True)}" if t % 2 else "")
                     for t in sorted(set(ab.queued[a])))
    return (f"d_step {{ semcnt[{a}] < {v // scale[a]} && queued{a} > 0 -> queued{a} = queued{a} - 1; "
            f"if {cases} fi }}")


def _core_process(ab: Abstract, scale: list[int], core: int, acts: list[tuple]) -> list[str]:
    """One core's process: each abstract action as one Promela step (one case per action kind)."""
    mode, dma_list, queued = ab.mode, ab.dma_list, ab.queued
    hw = mode == "hardware"

    def s(i: int, v: int) -> int:
        return v // scale[i]

    out: list[str] = []
    w = out.append
    w(f"active proctype core{core}() {{")
    body = 0
    for kind, a, b, text, op in acts:
        where = _loc(op)
        note = _comment(text + (f" @ {where}" if where else ""))
        if kind == "signal":
            w(f"  semcnt[{a}] = semcnt[{a}] + {s(a, b)}; {note}")
        elif kind == "wait" and a in queued:  # SEM-5 first, else a queued task, else blocked
            w(f"  do :: atomic {{ semcnt[{a}] >= {s(a, b)} -> semcnt[{a}] = semcnt[{a}] - {s(a, b)} }}; break")
            w(f"     :: {_pop(ab, scale, a, b)} od; skip; {note}")  # break lands on skip, never inside a d_step
        elif kind == "wait":
            w(f"  atomic {{ semcnt[{a}] >= {s(a, b)} -> semcnt[{a}] = semcnt[{a}] - {s(a, b)} }}; {note}")
        elif kind == "dma":
            src, dst, src_inc, dst_inc, _, _ = dma_list[a]
            if hw:
                w(f"  dmaphase[{a}] = 1; {note}")
            elif mode == "on_wait":
                pushes = [f"queue{c}[queued{c}] = {t}; queued{c} = queued{c} + 1"
                          for c, t in (((src, 2 * a),) if src is not None else ()) + ((dst, 2 * a + 1),)]
                w(f"  d_step {{ {'; '.join(pushes)} }}; {note}")
            else:
                parts = ([f"semcnt[{src}] = semcnt[{src}] + {s(src, src_inc)}"] if src is not None else [])
                parts.append(f"semcnt[{dst}] = semcnt[{dst}] + {s(dst, dst_inc)}")
                w(f"  d_step {{ {'; '.join(parts)} }}; {note}")
        elif kind == "barrier":
            w(f"  atomic {{ arrived[{a}] = arrived[{a}] + 1; arrived[{a}] == {b} }}; {note}")
        elif kind == "fail":  # ERR-7: the failure ends the run; SPIN reports the assertion
            w(f"  assert(false); {note}")
        else:
            w(f"  {note}")
            continue
        body += 1
    if body == 0:
        w("  skip")
    w("}")
    w("")
    return out


def _dma_engine(ab: Abstract, scale: list[int]) -> list[str]:
    """Under hardware, the process that lands each started DMA's two halves (DMA-2), in any order."""
    out = ["active proctype dma_engine() {", "end:", "  do"]
    w = out.append
    for k, (src, dst, src_inc, dst_inc, core, text) in enumerate(ab.dma_list):
        w(f"  {_comment(f'dmaphase[{k}] from core {core}: {text}')}")
        read = f"semcnt[{src}] = semcnt[{src}] + {src_inc // scale[src]}; " if src is not None else ""
        w(f"  :: d_step {{ dmaphase[{k}] == 1 -> {read}dmaphase[{k}] = 2 }}")
        w(f"  :: d_step {{ dmaphase[{k}] == 2 -> semcnt[{dst}] = semcnt[{dst}] + {dst_inc // scale[dst]}; "
          f"dmaphase[{k}] = 3 }}")
    w("  od")
    w("}")
    return out
