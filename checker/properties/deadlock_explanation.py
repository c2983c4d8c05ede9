"""Why a program deadlocks: the witness of a `deadlock-free` violation, in words (PROP-4).

The verdict is the least stuck vector's (`semcheck.checker.properties.deadlock`); this module replays the
fast run's schedule that reaches it on the step relation and says, per blocked core, what it
waits for and why that never comes. It reads the static system (`static.system.Lowered`) and the
model; it needs no solver.
"""

from __future__ import annotations

from bisect import bisect_left
from typing import NamedTuple

from semcheck.checker.properties.sites import site, sites
from semcheck.checker.properties.verdict import Witness
from semcheck.checker.static.system import EncodingBug, Lowered
from semcheck.checker.static.lowering import lower
from semcheck.model.barrier import instance
from semcheck.model.ops import DmaMode, Program, Wait
from semcheck.model.run import run
from semcheck.model.semaphore import shortfall
from semcheck.model.state import Outcome


def deadlock_witness(program: Program, mode: DmaMode, out: Outcome, low: Lowered | None = None, *,
                     replay: bool = True) -> Witness:
    """Replay `out.schedule` on the step relation and explain the blocked cores.

    The explanation (`details["explanation"]`, the report's text) says, for
    each blocked wait, which operations add to its counter and why each has
    not run (its core is itself blocked at some line, it comes after this
    wait, ...), or by how much the count falls short even if all of them ran;
    when the blocked cores wait for each other in a cycle it says so in one
    sentence; and cores whose explanation is the same up to a rotation of the
    devices are described once ("devices 0-3, each ... its left neighbour").
    """
    if replay:
        again = run(program, mode, out.schedule)
        if again.kind != "deadlock" or again.state.pcs != out.state.pcs:
            raise EncodingBug(f"the witness schedule replays to {again.kind} at {again.state.pcs}, not {out.state.pcs}")
    if low is None:
        try:
            low = lower(program, mode)
        except Exception:  # noqa: BLE001 - the explanation is a courtesy; the witness stands without it
            low = None
        if low is not None and not low.ok:
            low = None
    blocked, details = [], []
    for b in out.blocked:
        entry = {"core": b.core, "pc": b.pc, "op": b.op.describe(), "loc": str(b.op.loc)}
        if isinstance(b.op, Wait) and low is not None and (b.core, b.pc) in low.waits:
            w = low.waits[(b.core, b.pc)]
            entry.update(semaphore=str(b.op.sem), count=out.state.counts.get(w.counter, 0), needs=w.value)
        blocked.append((b.core, b.pc, b.reason))
        details.append(entry)
    why = explain_deadlock(program, out, low)
    stuck: dict = {}  # a blocked line: the cores blocked there, and what they wait for
    said = {e["core"]: e["what"] for e in why.waits}
    for b in out.blocked:
        what = said.get(b.core, b.op.describe())
        stuck.setdefault(b.op.loc, ([], what))[0].append(b.core)
    found = sites(*(site("blocked-wait", loc, f"{_names(program, cores)} {'blocks' if len(cores) == 1 else 'block'} "
                                              f"here, {what}, and never {'returns' if len(cores) == 1 else 'return'}")
                    for loc, (cores, what) in stuck.items()),
                  *(site(role, loc, note) for role, loc, note in why.marks))
    return Witness(
        message="deadlock: " + "; ".join(line.strip() for line in why.lines),
        schedule=tuple(out.schedule),
        blocked=tuple(blocked),
        locs=tuple(dict.fromkeys([*(b.op.loc for b in out.blocked), *why.locs])),
        details={"blocked": details, "terminal_pcs": list(out.state.pcs),
                 "lengths": [len(c) for c in program.cores], "explanation": why.lines, "waits": why.waits,
                 **({"cycle": why.cycle} if why.cycle else {}), "sites": found},
    )


def _names(program: Program, cores: list[int]) -> str:
    """`device 0`, `devices 0, 1` or `devices 0-63` (or `device 0 core 1`) for a site's note."""
    topo = program.topology
    if topo.cores_per_device > 1:
        return ", ".join(f"device {topo.device_of(g)} core {topo.local_core_of(g)}" for g in cores[:4]) + \
            (f" and {len(cores) - 4} more" if len(cores) > 4 else "")
    ds = sorted(topo.device_of(g) for g in cores)
    if len(ds) == 1:
        return f"device {ds[0]}"
    run = ds == list(range(ds[0], ds[0] + len(ds)))
    return f"devices {ds[0]}-{ds[-1]}" if run and len(ds) > 2 else "devices " + ", ".join(map(str, ds[:8])) + \
        (" ..." if len(ds) > 8 else "")


# --- explaining a deadlock ------------------------------------------------------------------


class Explanation(NamedTuple):
    lines: list[str]  # for people: the cycle sentence, then per group of blocked cores what they wait for
    locs: list  # kernel lines of the operations that never run
    cycle: list[int]  # global cores of a wait-for cycle, in dependency order (empty: none)
    waits: list[dict]  # per blocked core, for diagrams: where it waits and what adds to its counter
    marks: list = []  # (role, loc, note) of the lines the reports place the finding at (REP-10)


def _line(loc) -> str:
    return f"line {loc.line}" if loc is not None and loc.line else "(launch)"


def _code(loc) -> str:
    text = (loc.text or "").split("#", 1)[0].strip() if loc is not None else ""
    return f" `{text}`" if text else ""


def explain_deadlock(program: Program, out: Outcome, low: Lowered | None) -> Explanation:
    """Why each blocked core stays blocked, in words; see `deadlock_witness`."""
    topo = program.topology
    n, per = topo.num_devices, topo.cores_per_device
    pcs = out.state.pcs
    at = {b.core: b for b in out.blocked}

    def rel(owner: int, c: int) -> str:
        """Where core `owner` is, seen from core `c` (the same words for every rotation of the devices)."""
        off = (topo.device_of(owner) - topo.device_of(c)) % n
        core = f" core {topo.local_core_of(owner)}" if per > 1 else ""
        if off == 0:
            return "this device" + core if owner != c else "this core"
        if n == 2:
            return "the other device" + core
        if off == n - 1:
            return "its left neighbour" + core
        if off == 1:
            return "its right neighbour" + core
        k = off if off <= n // 2 else off - n
        return f"the device {abs(k)} to its {'right' if k > 0 else 'left'}" + core

    def what(x) -> str:
        op = program.cores[x.owner][x.pos]
        if x.kind == "signal":
            return f"the signal +{x.amount} at {_line(op.loc)}{_code(op.loc)}"
        if x.kind == "dma_write":
            return f"the copy of {x.amount} bytes started at {_line(op.loc)}{_code(op.loc)}"
        return f"the send side of the copy of {x.amount} bytes started at {_line(op.loc)}{_code(op.loc)}"

    never_locs = []
    marks: list = []
    waits: list[dict] = []

    def name(g: int) -> str:
        return f"device {topo.device_of(g)}" + (f" core {topo.local_core_of(g)}" if per > 1 else "")

    def brief(x) -> str:
        return f"signal +{x.amount}" if x.kind == "signal" else \
            f"copy {x.amount} B" if x.kind == "dma_write" else f"send side of a copy {x.amount} B"

    deps: dict[int, list[int]] = {}
    barrier_nodes: dict[tuple, int] = {}  # a barrier instance's node in `deps` (negative)
    strays = None  # `_strays`, made at the first blocked wait that needs it
    shapes: dict[int, tuple] = {}
    texts: dict[int, tuple[str, list[str]]] = {}
    for b in out.blocked:
        c = b.core
        loc = b.op.loc
        w = low.waits.get((c, b.pc)) if low is not None and isinstance(b.op, Wait) else None
        if w is None:  # a barrier, or no lowering: the model's own words
            bname = getattr(b.op, "name", None)
            if isinstance(bname, str) and bname.startswith("join"):
                head = f"block at the end of the kernel ({_line(loc)}), waiting for the other cores of this device"
            elif isinstance(bname, str):
                head = f"block at barrier {bname!r} ({_line(loc)}), waiting for the other cores that take part in it"
            else:
                head = f"block at {_line(loc)}{_code(loc)}: {b.reason}"
            texts[c] = (head, [])
            shapes[c] = (head,)
            deps[c] = []
            waits.append({"core": c, "name": name(c), "line": loc.line,
                          "what": head.split(", waiting")[0].removeprefix("block at ").split(" (line")[0],
                          "needs": []})
            if low is not None and (c, b.pc) in low.barriers:
                bar = low.barriers[(c, b.pc)]
                # the participants that never get to their own barrier, once per barrier instance: the
                # cores blocked at it depend on a node of its own standing for them (a negative id,
                # dropped from the cycle), so N cores at one barrier of N make N edges, not N^2
                key = instance(bar.name, bar.k, bar.participants)
                node = barrier_nodes.get(key)
                if node is None:
                    node = barrier_nodes[key] = -1 - len(barrier_nodes)
                    deps[c] = [node]
                    deps[node] = [p for p in sorted(bar.participants)
                                  if p in at and low.barrier_pos.get((p, bar.name, bar.k), -1) > pcs[p]]
                deps[c] = [node]
            continue
        have = out.state.counts.get(w.counter, 0)
        kind = "a DMA wait" if w.kind == "dma" else "a wait"
        head = f"block at {_line(loc)}{_code(loc)}, {kind} for {w.value} on {b.op.sem} (count {have})"
        subs: list[str] = []
        shape: list = [head]
        missing = 0
        mine: list[int] = []
        entry = {"core": c, "name": name(c), "line": loc.line,
                 "what": f"{kind.removeprefix('a ')} for {w.value} on {b.op.sem}, count {have}", "needs": []}
        waits.append(entry)
        for x in low.by_counter.get(w.counter, ()):
            op = program.cores[x.owner][x.pos]
            if pcs[x.owner] > x.pos:  # started: in a terminal state every started DMA half has run
                if x.owner != c and sum(nd["runs"] for nd in entry["needs"]) < 2:
                    entry["needs"].append({"core": x.owner, "name": name(x.owner), "line": op.loc.line,
                                           "what": brief(x), "runs": True})
                continue
            entry["needs"].append({"core": x.owner, "name": name(x.owner), "line": op.loc.line,
                                   "what": brief(x), "runs": False})
            missing += x.amount
            if x.owner == c:
                why = f"it comes after this wait ({_line(b.op.loc)}) on the same core"
            elif x.owner in at:
                why = f"that {'device' if per == 1 else 'core'} is itself blocked at {_line(at[x.owner].op.loc)}"
                mine.append(x.owner)
            else:
                why = f"that core stops at {_line(program.cores[x.owner][pcs[x.owner]].loc) if pcs[x.owner] < len(program.cores[x.owner]) else 'its end'}"
            who = "this core" if x.owner == c else rel(x.owner, c)
            line = f"needs {what(x)} on {who}, which never runs: {why}"
            if line not in subs:
                subs.append(line)
                never_locs.append(op.loc)
                marks.append(("never-runs", op.loc, f"{name(x.owner)}: {brief(x)} for the wait at line {loc.line} "
                                                    f"on {name(c)}, never runs: {why}"))
            shape.append(line)
        waited_before = sum(v.value for v in low.waits_by_counter.get(w.counter, ()) if v.pos < b.pc)
        delivered_before = have + waited_before
        possible = have + missing
        if shortfall(possible, w.value) > 0:
            short = f"even if every operation that adds to it ran, the count would reach {possible} of {w.value}: " \
                    f"short by {shortfall(possible, w.value)}"
            if not subs:
                short = f"nothing left to run adds to {b.op.sem} here: the count stays {have} of {w.value}, " \
                        f"short by {shortfall(have, w.value)}"
            if strays is None:
                strays = _strays(low, topo)
            astray, stray = _astray(strays, w, c, rel, what, topo)
            if stray is not None:  # for the reports' diagrams: an arrow to where the operation goes
                x, to = stray
                entry["astray"] = {"core": x.owner, "name": name(x.owner), "to": to, "to_name": name(to),
                                   "line": program.cores[x.owner][x.pos].loc.line, "what": brief(x)}
                marks.append(("astray", program.cores[x.owner][x.pos].loc,
                              f"{name(x.owner)}: {brief(x)} on {b.op.sem} goes to {name(to)}, where nothing waits "
                              f"for it, not to the wait at line {loc.line}"))
            subs.append(short + (f"; {astray}" if astray else ""))
            shape.append(subs[-1])
        del delivered_before
        if len(subs) > 3:
            subs = subs[:3] + [f"and {len(subs) - 3} more"]
        texts[c] = (head, subs)
        shapes[c] = tuple(shape)
        deps[c] = list(dict.fromkeys(mine))

    cycle = [g for g in _cycle(deps) if g >= 0]  # a barrier's node stands between its cores
    lines = _story(texts, shapes, cycle, topo, rel, at)
    return Explanation(lines, list(dict.fromkeys(never_locs)), cycle, waits, marks)


def _story(texts: dict, shapes: dict, cycle: list[int], topo, rel, at: dict) -> list[str]:
    """The explanation's lines: the cycle, then each blocked core's words (`texts`); cores whose story
    is the same up to rotating the devices (`shapes`) are described once."""
    groups: dict[tuple, list[int]] = {}
    for c in sorted(texts):
        groups.setdefault((topo.local_core_of(c), shapes[c]), []).append(c)
    lines: list[str] = []
    if cycle:
        lines.append(_cycle_sentence(cycle, topo, rel, at))
    for (_, _), cores in groups.items():
        head, subs = texts[cores[0]]
        who = _cores(cores, topo)
        lines.append(f"{who} {'each ' if len(cores) > 1 else ''}{head if len(cores) > 1 else head.replace('block', 'blocks', 1)}")
        lines += [f"  {s}" for s in subs]
    return lines


def _strays(low: Lowered, topo) -> dict:
    """Per semaphore key, the operations (DMA read halves aside) adding to a counter more than is
    waited for on it, grouped by the device that issues them: {key: (sorted devices, {device: [(x, core
    the counter is on)]})}. Computed once per explanation: each blocked core then looks at the devices
    nearest it rather than at every counter (a scan per blocked core was quadratic at pod scale)."""
    grouped: dict = {}
    for counter, xs in low.by_counter.items():
        surplus = sum(x.amount for x in xs) - sum(v.value for v in low.waits_by_counter.get(counter, ()))
        if surplus <= 0:
            continue
        by_device = grouped.setdefault(counter[0], {})
        for x in xs:
            if x.kind != "dma_read":
                by_device.setdefault(topo.device_of(x.owner), []).append((x, counter[1]))
    return {key: (sorted(by_device), by_device) for key, by_device in grouped.items()}


def _astray(strays: dict, w, c: int, rel, what, topo) -> tuple[str, tuple | None]:
    """An operation on the same semaphore that adds to a counter nobody drains (a wrong device_id /
    core_index, say), chosen the same way from every core's point of view (nearest first): its
    sentence, and (the operation, the core it goes to), or ("", None). `strays`: `_strays`."""
    if w.counter[0] not in strays:
        return "", None
    devices, by_device = strays[w.counter[0]]
    n = topo.num_devices
    me = topo.device_of(c)
    start = bisect_left(devices, me)
    best = None
    # the devices in order of their distance to the right of this one: the first rank component,
    # so the nearest device with a candidate holds the best one
    for i in range(len(devices)):
        d = devices[(start + i) % len(devices)]
        for x, to in by_device[d]:
            if to == c:
                continue
            rank = ((d - me) % n, topo.local_core_of(x.owner), (topo.device_of(to) - me) % n,
                    topo.local_core_of(to), x.pos)
            if best is None or rank < best[0]:
                best = (rank, x, to)
        if best is not None:
            break
    if best is None:
        return "", None
    _, x, to = best
    return f"{what(x)} on {rel(x.owner, c)} goes to {rel(to, c)}, where nothing waits for it", (x, to)


def _cycle(deps: dict[int, list[int]]) -> list[int]:
    """A cycle of the wait-for graph (core -> cores it needs), as a list of cores, or []."""
    color: dict[int, int] = {}
    for start in deps:
        if start in color:
            continue
        path: list[int] = []
        stack = [(start, iter(deps.get(start, ())))]
        color[start] = 1
        path.append(start)
        while stack:
            node, it = stack[-1]
            nxt = next(it, None)
            if nxt is None:
                stack.pop()
                path.pop()
                color[node] = 2
                continue
            if color.get(nxt) == 1:
                return path[path.index(nxt):]
            if nxt not in color and nxt in deps:
                color[nxt] = 1
                path.append(nxt)
                stack.append((nxt, iter(deps.get(nxt, ()))))
    return []


def _cycle_sentence(cycle: list[int], topo, rel, at) -> str:
    """One sentence for a wait-for cycle; uniform cycles (every step the same rotation) in words that do
    not grow with the number of devices."""
    steps = {rel(cycle[(i + 1) % len(cycle)], c) for i, c in enumerate(cycle)}
    lines = {at[c].op.loc.line for c in cycle}
    where = f"at line {next(iter(lines))}" if len(lines) == 1 else "at their waits"
    if len(steps) == 1:
        step = steps.pop()
        if len(cycle) == topo.num_cores:
            unit = "devices" if topo.cores_per_device == 1 else "cores"
            who = f"both {unit}" if len(cycle) == 2 else f"all {len(cycle)} {unit}"
        else:
            who = f"{_cores(sorted(cycle), topo)} ({len(cycle)} of them)"
        return (f"cycle: {who} wait for each other {where}: each waits for {step}, which is itself waiting, "
                f"so none of them moves")
    names = [_cores([c], topo) for c in cycle]
    shown = " -> ".join(names[:6] + (["..."] if len(names) > 6 else []) + [names[0]])
    return f"cycle: {shown}: each waits {where} for the next, which is itself waiting, so none of them moves"


def _cores(cores: list[int], topo) -> str:
    """`device 3`, `devices 0-3`, `devices 0, 2, 5` (with `core k` when devices have several cores)."""
    per = topo.cores_per_device
    if per == 1 or len({topo.local_core_of(c) for c in cores}) == 1:
        suffix = f" core {topo.local_core_of(cores[0])}" if per > 1 else ""
        devs = sorted({topo.device_of(c) for c in cores})
        if len(devs) == 1:
            return f"device {devs[0]}{suffix}"
        runs: list[str] = []
        i = 0
        while i < len(devs):
            j = i
            while j + 1 < len(devs) and devs[j + 1] == devs[j] + 1:
                j += 1
            runs.append(f"{devs[i]}-{devs[j]}" if j > i + 1 else ", ".join(map(str, devs[i:j + 1])))
            i = j + 1
        return f"devices {', '.join(runs)}{suffix}"
    return ", ".join(f"device {topo.device_of(c)} core {topo.local_core_of(c)}" for c in cores)
