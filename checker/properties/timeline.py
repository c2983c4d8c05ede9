"""Per-device timelines of a witness schedule, for reports, and how reports name what the lowering
labelled: `naming` puts every verdict's text in the words of the kernel's source (issue 26.4)."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from semcheck.model.ops import Op, Program


# A run_scoped allocation's label (`scoped@file.py:70#0/3`, `buf@file.py:60#0/1`) and its site
# (`scoped@file.py:70#0`): the lowering needs them unique, a reader needs the body's parameter that
# names it (`Program.names`, keyed by site) and the line of the run_scoped.
_SCOPED = re.compile(r"'?\b(?P<kind>scoped|buf)@(?P<file>[\w.-]+\.py):(?P<line>\d+)(?P<dot>\.\d+)?#(?P<k>\d+)"
                     r"(?:/\d+)?'?(?P<index>\[[^\]]*\])?")
_SITE = re.compile(r"\bsite (?P<label>" + _SCOPED.pattern.replace("?P<", "?P<s_") + r") index (?P<at>\d+)")
_CORE_OP = re.compile(r"\bcore (\d+) op (\d+)\b(, \S+\.py:\d+)?")  # with the op's line when it follows
# a core the text already places on a device (`device 3 core 1`, `devices 0-3 core 1`, `this device core 1`,
# `its left neighbour core 1`, `the device 2 to its right core 0`): a local core, left as it is
_CORE = re.compile(r"\b((?:device(?: \d+)?|devices [\d, \-]*\d|neighbour|right|left) )?core (\d+)\b")


def _scoped(m: re.Match, names: dict[str, str] | None = None, prefix: str = "") -> str:
    kind, file, line, k = m["kind"], m["file"], m["line"], int(m["k"])
    what = "semaphore" if kind == "scoped" else "buffer"
    name = (names or {}).get(f"{prefix}{kind}@{file}:{line}{m['dot'] or ''}#{k}")
    if name:  # as the body's parameter, with where the run_scoped is
        return f"{name}{m['index'] or ''} (run_scoped {what}, {file}:{line})"
    nth = f" {k + 1}" if k else ""
    return f"run_scoped {what}{nth} ({file}:{line}){m['index'] or ''}"


# A program of kernel calls renames each call's labels `kernel#i.label` (PRG-105): a reader knows
# the parameter, the kernel and which call of it.
_CALL = re.compile(r"\b(?P<kernel>\w+)#(?P<i>\d+)\.(?P<label>" + _SCOPED.pattern.replace("'?", "").replace("?P<", "?P<c_")
                   + r"|[A-Za-z_]\w*)(?P<cindex>\[[^\]]*\])?")


def _call(m: re.Match, names: dict[str, str] | None = None) -> str:
    kernel, i, label, index = m["kernel"], int(m["i"]), m["label"], m["cindex"] or ""
    prefix = f"{kernel}#{i}."
    label = _SCOPED.sub(lambda s: _scoped(s, names, prefix), label)
    loops = (names or {}).get(f"{kernel}#{i}")  # PRG-187: the loops' iterations the call is in
    return f"{label}{index} of {kernel} (call {i}{', ' + loops if loops else ''})"  # as Invocation.describe


_HBM = re.compile(r"\b(?:\w+#\d+\.)?hbm\d+\b")  # a launch's HBM buffer, in a program of calls with its call


def label_name(label: str, names: dict[str, str] | None = None) -> str:
    """How reports name a semaphore or buffer label (`names`: the program's `Program.names`)."""
    text = str(label)
    if names:
        text = _HBM.sub(lambda m: names.get(m.group(0), m.group(0)), text)
    text = _CALL.sub(lambda m: _call(m, names), text)
    return _SCOPED.sub(lambda m: _scoped(m, names), text)


def _plain(x, names: dict[str, str], memo: dict[str, str] | None = None):
    """`x` (witness details: JSON data) with every label in it named as reports name it.

    `memo`: the texts named so far. A pod-scale deadlock's details repeat a few texts per device
    (each device's timeline and blocked wait), and naming is a pure function of the text and `names`.
    A container's texts, numbers and None are handled in place (RUN-54: a call per member was most of
    naming's time at pod scale); any other member, and a container or text of a subclass, by the call."""
    memo = {} if memo is None else memo
    t = type(x)
    if t is dict:
        out = {}
        for k, v in x.items():
            tv = type(v)
            if tv is str:
                got = memo.get(v)
                out[k] = got if got is not None else _named(v, names, memo)
            elif tv in _AS_THEY_ARE:
                out[k] = v
            else:
                out[k] = _plain(v, names, memo)
        return out
    if t is list or t is tuple:
        out_list = []
        for v in x:
            tv = type(v)
            if tv is str:
                got = memo.get(v)
                out_list.append(got if got is not None else _named(v, names, memo))
            elif tv in _AS_THEY_ARE:
                out_list.append(v)
            else:
                out_list.append(_plain(v, names, memo))
        return out_list if t is list else tuple(out_list)
    if isinstance(x, str):
        got = memo.get(x)
        return got if got is not None else _named(x, names, memo)
    if isinstance(x, dict):
        return {k: _plain(v, names, memo) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_plain(v, names, memo) for v in x)
    return x


_AS_THEY_ARE = frozenset({int, float, bool, type(None)})
"""The exact types `_plain` returns as they are (it names texts and goes into containers only)."""


def _named(text: str, names: dict[str, str], memo: dict[str, str]) -> str:
    got = memo[text] = humanize(text, names=names)
    return got


def who(program: Program, core: int) -> str:
    """A global core as the user knows it: `device 3`, or `device 3 core 1` in a multi-core kernel."""
    topo = program.topology
    d = f"device {topo.device_of(core)}"
    return d if topo.cores_per_device == 1 else f"{d} core {topo.local_core_of(core)}"


def _site(m: re.Match, names: dict[str, str] | None) -> str:
    """`site scoped@f.py:61#1 index 0`: an allocation site, by its parameter when the body named it."""
    key = f"{m['s_kind']}@{m['s_file']}:{m['s_line']}{m['s_dot'] or ''}#{m['s_k']}"
    name = (names or {}).get(key)
    where = f"{m['s_file']}:{m['s_line']}"
    return f"{name} (allocated at {where}), index {m['at']}" if name else f"allocated at {where}, index {m['at']}"


def humanize(text: str, program: Program | None = None, names: dict[str, str] | None = None) -> str:
    """`text` (a verdict's message, hint or reason) in the kernel's words: run_scoped labels by their
    line, `core C op N` by the device (and core) and the op's line, a bare global `core N` as the
    device (and core) it is. A `device D core C` is already in those words and left alone."""
    if not text:
        return text
    names = dict(program.names) if program is not None else names
    text = _SITE.sub(lambda m: _site(m, names), text)
    text = label_name(text, names)
    if program is None:
        return text
    n = program.topology.num_cores

    def core_op(m: re.Match) -> str:
        c, i = int(m.group(1)), int(m.group(2))
        if c >= n or i >= len(program.cores[c]):
            return m.group(0)
        op = program.cores[c][i]
        if m.group(3):  # the line is said already
            return f"{who(program, c)}{m.group(3)}"
        return f"{who(program, c)} at {_short(op)}" if op.loc.line else f"{who(program, c)} (launch)"

    text = _CORE_OP.sub(core_op, text)
    return _CORE.sub(lambda m: m.group(0) if m.group(1) or int(m.group(2)) >= n
                     else who(program, int(m.group(2))), text)


def naming(v, program: Program, shared: dict | None = None):
    """Verdict `v` with its message, hint, reason and sites' notes humanized for `program` (REP-34).

    `shared`: one dict for the verdicts of one program named in a row (RUN-54): the texts named so far, and each
    detail that is a list or dict as named, by the object (the modes' witnesses share a timeline, RUN-47)."""
    w = v.witness
    if w is not None:
        # the details' and blocked cores' texts name local cores (a timeline's `core 1:`): labels only;
        # but a site's note and the id-int16 `what` (its message again) name global cores, as messages do
        names = dict(program.names)
        memo = {} if shared is None else shared.setdefault("texts", {})
        if shared is not None and type(w.details) is dict:
            details = _plain_shared(w.details, names, memo, shared.setdefault("values", {}))
        else:
            details = _plain(w.details, names, memo)
        if isinstance(details, dict):
            details = _global_words(details, program)
        w = dataclasses.replace(w, message=humanize(w.message, program), hint=humanize(w.hint, program),
                                details=details,
                                blocked=tuple((c, pc, _plain(what, names, memo)) for c, pc, what in w.blocked))
    return dataclasses.replace(v, reason=humanize(v.reason, program), witness=w)


def _plain_shared(details: dict, names: dict[str, str], memo: dict[str, str], values: dict[int, tuple]) -> dict:
    """`_plain(details, names, memo)`, a detail that is a list or dict named once per object (`values`: its id ->
    (it, as named); it is kept, so its id is not reused). `_plain` of a container is a function of its members and
    `names`, and a verdict's details are not changed once made: the same object names the same."""
    out = {}
    for k, v in details.items():
        tv = type(v)
        if tv is list or tv is dict:
            hit = values.get(id(v))
            if hit is None or hit[0] is not v:
                hit = values[id(v)] = (v, _plain(v, names, memo))
            out[k] = hit[1]
        else:
            out[k] = _plain({k: v}, names, memo)[k]
    return out


def _global_words(details: dict, program: Program) -> dict:
    """`details` with the texts that name global cores (each site's note, a top-level `what`) in the
    device's words (REP-24): a note is a related location's message in every format."""
    out = dict(details)
    if isinstance(out.get("what"), str):
        out["what"] = humanize(out["what"], program)
    if isinstance(out.get("sites"), list):
        out["sites"] = [{**s, "note": humanize(s["note"], program)} if isinstance(s, dict) and "note" in s else s
                        for s in out["sites"]]
    return out


def describe(op: Op) -> str:
    """A short human description of one operation, in the program's labels (`naming` puts them in the
    kernel's words, with the program's `names`, once the verdict is made)."""
    return op.describe()


def timeline(
    program: Program, pcs: Sequence[int], devices: Sequence[int] | None = None, last: int = 6
) -> list[dict]:
    """The last `last` kernel operations each core executed before positions `pcs`,
    and the operation it was at when the witness ended (stuck at, or failing at).

    Only operations with a source line (the kernel's, not the launch
    wrapper's) are listed. Returns `[{"device": d, "events": [str, ...], "steps": [...]}]`: `steps` are
    the events as data, `{file, line, op, stop}` (and `core` in a multi-core kernel), for the SARIF
    report's thread flows (REP-13).
    """
    topo = program.topology
    wanted = range(topo.num_devices) if devices is None else devices
    out = []
    for d in wanted:
        events: list[str] = []
        steps: list[dict] = []
        for g in topo.cores_of_device(d):
            ops = program.cores[g]
            who = f"core {topo.local_core_of(g)}: " if topo.cores_per_device > 1 else ""
            done = _last_lined(ops, pcs[g], last)
            at = [ops[pcs[g]]] if pcs[g] < len(ops) else []
            for op, stop in [*((op, False) for op in done), *((op, True) for op in at)]:
                said = describe(op)  # once per event: the text and the step name the same words
                events.append(f"{who}{_short(op)}  {'>> ' if stop else ''}{said}")
                steps.append({"file": op.loc.file, "line": op.loc.line, "op": said, "stop": stop,
                              **({"core": topo.local_core_of(g)} if topo.cores_per_device > 1 else {})})
        out.append({"device": d, "events": events, "steps": steps})
    return out


def _last_lined(ops: Sequence[Op], pc: int, last: int) -> list[Op]:
    """The last `last` operations with a source line before position `pc`, in order: read backwards
    from `pc`, so a pod-scale witness's timeline costs `last` operations per core, not its prefix."""
    out: list[Op] = []
    i = pc - 1
    while i >= 0 and len(out) < last:
        if ops[i].loc.line > 0:
            out.append(ops[i])
        i -= 1
    out.reverse()
    return out


def _short(op: Op) -> str:
    return f"{op.loc.file.rsplit('/', 1)[-1]}:{op.loc.line}" if op.loc.line else "(launch)"
