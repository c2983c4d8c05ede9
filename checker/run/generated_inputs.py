"""Targets whose inputs a hypothesis strategy generates (`@semcheck.target(inputs=...)`, spec RUN-8).

A target declared with `inputs=STRATEGY` is built from values the strategy
draws: `fn(num_devices, value)`. For one device count, `explore`:

1. verifies the kernel for up to `examples` drawn values (each a fresh
   build and lowering, checked in every requested DMA mode: the ordinary
   per-target verification), in hypothesis's generate phase;
2. stops at the first input with a violation, the *key* being the first
   violated (kernel, DMA mode, property) of that input; or at the first input
   on which building or tracing the kernel raises (key: the error's class);
3. shrinks that input with hypothesis's own shrinker (`hypothesis.find`):
   a smaller value counts as failing when it violates the same property in
   the same mode of the same kernel (a raise: raises the same way); each try
   lowers again and checks that one property in that one mode;
4. verifies the shrunk input in full.

Runs are reproducible: `derandomize=True` (the inputs drawn depend only on
the strategy and `examples`), no example database, no deadline, phases
generate and shrink only. The same inputs are drawn at every device count.

`aggregate` then merges the per-input results into one `Result` per
kernel x DMA mode: a property is violated if it is violated on some input
(with the shrunk input when it is violated there), else unknown if it is
unknown on some input (the first such input is named), else proved: for
exactly the inputs verified (`Result.examples`), never more. A --timeout
that runs out before `examples` inputs were tried turns what was proved into
unknown (the reason says how many inputs held).

Nothing here imports jax: the caller (`checking.generated_results`) passes the functions
that lower and check one input.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from semcheck.checker.frontend.errors import FrontendError
from semcheck.checker.properties.verdict import GeneratedInput, Verdict

DEFAULT_EXAMPLES = 20
MAX_EXAMPLES = 10_000
TEXT_LIMIT = 200

Key = tuple[str, str, str]
"""(kernel name, DMA mode, property) of a violation; ("!raise", error code, cause class) of a raise."""


class BadExamples(ValueError):
    """`--examples` / `[tool.semcheck] examples` out of range (a usage error)."""


class GeneratedInputRaised(FrontendError):
    """Building or tracing the kernel raised on a generated input: an input error, with the (shrunk) input."""

    def __init__(self, error: FrontendError, text: str) -> None:
        on = "" if f"input {text}" in error.message else f" (on input {text})"
        super().__init__(f"{error.message}{on}", path=error.path, loc=error.loc)
        self.code = error.code  # the original error's stable code (kernel-raised, bad-target-return, ...)
        self.input_text = text


def check_examples(n: Any) -> int:
    """The number of inputs to generate: an integer from 1 to `MAX_EXAMPLES`."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_EXAMPLES:
        raise BadExamples(f"{n!r}: must be an integer between 1 and {MAX_EXAMPLES}")
    return n


def describe(value: Any) -> tuple[Any, str]:
    """A value's JSON form (None if it has none) and how reports show it (at most `TEXT_LIMIT` characters)."""
    plain = _plain(value)
    try:
        json.dumps(plain)
    except (TypeError, ValueError):
        plain = None
    text = repr(plain) if plain is not None else repr(value)
    if len(text) > TEXT_LIMIT:
        text = text[: TEXT_LIMIT - 3] + "..."
    return plain, text


def _plain(x: Any) -> Any:
    if hasattr(x, "tolist") and hasattr(x, "dtype"):  # numpy arrays and scalars
        return x.tolist()
    if isinstance(x, (list, tuple)):
        return [_plain(y) for y in x]
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if x is None or isinstance(x, (bool, int, float, str)):
        return x
    raise TypeError(type(x).__name__)


@dataclasses.dataclass
class Tried:
    """One input verified in full: its results (request.Result per kernel x mode)."""

    value: Any  # JSON form (or None)
    text: str
    index: int  # 1-based among the generated inputs; 0 for the shrunk input
    results: list[Any]


@dataclasses.dataclass
class Exploration:
    """What `explore` found for one target at one device count."""

    tried: list[Tried]
    examples: int  # asked for
    key: Key | None = None  # the violation (or raise) the failing input was shrunk on
    failing: Tried | None = None  # the first generated input with that violation
    shrunk: Tried | None = None  # the minimal input, verified in full (None: same as failing, or no time)
    shrunk_verdict: Verdict | None = None  # the key's verdict on the minimal input
    shrink_steps: int = 0
    timed_out: bool = False
    raised: GeneratedInputRaised | None = None


def _first_violation(results: Sequence[Any]) -> Key | None:
    for r in results:
        for v in r.verdicts:
            if v.verdict == "violated":
                return (r.target, r.dma_mode, v.property)
    return None


def explore(
    strategy: Any,
    examples: int,
    verify_input: Callable[[Any, str], list[Any]],
    check_key: Callable[[Any, str, Key], Verdict | None],
    deadline: float,
) -> Exploration:
    """Verify up to `examples` drawn inputs; shrink the first failing one (see the module docstring).

    `verify_input(value, text)` returns the input's `request.Result`s (every
    kernel x mode) or raises `FrontendError` (the kernel raised on it);
    `check_key(value, text, key)` builds and lowers a candidate input (raising
    as `verify_input` does) and returns the key's verdict on it (None when it
    does not apply: the kernel is not there, say).
    `deadline` is a `time.monotonic()` value: past it, nothing more is
    verified and shrinking stops at the smallest input found so far.
    """
    from hypothesis import HealthCheck, Phase, Verbosity, find, settings
    from hypothesis.errors import HypothesisException, NoSuchExample

    out = Exploration(tried=[], examples=examples)
    decided: dict[str, bool] = {}  # text -> failing? (a value is judged once: no flakiness)
    verdict_of: dict[str, Verdict] = {}
    raised_of: dict[str, GeneratedInputRaised] = {}
    values: dict[str, Any] = {}
    last_failing: list[str] = []

    def condition(value: Any) -> bool:
        plain, text = describe(value)
        if text in decided:
            return decided[text]
        if time.monotonic() >= deadline:
            out.timed_out = True
            return False  # not decided (not memoised either: nothing is claimed for it)
        values[text] = value
        if out.key is None:
            failing = _generate(value, plain, text)
        else:
            out.shrink_steps += 1
            failing = _shrink_step(value, text)
        decided[text] = failing
        if failing:
            last_failing.append(text)
        return failing

    def _generate(value: Any, plain: Any, text: str) -> bool:
        try:
            results = verify_input(value, text)
        except FrontendError as e:
            out.key = ("!raise", e.code, type(getattr(e, "cause", None) or e).__name__)
            raised_of[text] = GeneratedInputRaised(e, text)
            out.failing = Tried(plain, text, len(out.tried) + 1, [])
            return True
        tried = Tried(plain, text, len(out.tried) + 1, results)
        out.tried.append(tried)
        key = _first_violation(results)
        if key is None:
            return False
        out.key, out.failing = key, tried
        verdict_of[text] = next(v for r in results if (r.target, r.dma_mode) == key[:2]
                                for v in r.verdicts if v.property == key[2])
        return True

    def _shrink_step(value: Any, text: str) -> bool:
        assert out.key is not None
        if out.key[0] == "!raise":
            try:
                check_key(value, text, out.key)  # builds and lowers; no kernel has the name "!raise"
            except FrontendError as e:
                same = (e.code, type(getattr(e, "cause", None) or e).__name__) == out.key[1:]
                if same:
                    raised_of[text] = GeneratedInputRaised(e, text)
                return same
            return False
        try:
            v = check_key(value, text, out.key)
        except FrontendError:
            return False  # raises on this candidate: another failure, not this one
        if v is not None and v.verdict == "violated":
            verdict_of[text] = v
            return True
        return False

    config = settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        phases=[Phase.generate, Phase.shrink],
        verbosity=Verbosity.quiet,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
    )
    minimal_text: str | None = None
    try:
        minimal = find(strategy, condition, settings=config)
        minimal_text = describe(minimal)[1]
    except NoSuchExample:
        pass
    except HypothesisException:  # e.g. a strategy that cannot draw: fall back on what was seen
        minimal_text = last_failing[-1] if last_failing else None
    if out.key is not None and minimal_text is None:
        minimal_text = last_failing[-1] if last_failing else out.failing.text if out.failing else None
    if out.key is None or minimal_text is None:
        return out
    if out.key[0] == "!raise":
        out.raised = raised_of.get(minimal_text) or raised_of.get(out.failing.text if out.failing else "")
        if out.raised is not None and out.failing is not None and minimal_text != out.failing.text:
            out.raised.message += f" (shrunk from generated input {out.failing.text})"
        return out
    out.shrunk_verdict = verdict_of.get(minimal_text)
    if out.failing is not None and minimal_text != out.failing.text and time.monotonic() < deadline:
        plain, _ = describe(values[minimal_text])
        try:
            out.shrunk = Tried(plain, minimal_text, 0, verify_input(values[minimal_text], minimal_text))
        except FrontendError:
            out.shrunk = None
    return out


def aggregate(ex: Exploration, modes: Sequence[str], properties: Sequence[str]) -> list[Any]:
    """One `request.Result` per kernel x mode, merged over every input tried (see the module docstring)."""
    from semcheck.checker.run.request import Result

    tried = list(ex.tried) + ([ex.shrunk] if ex.shrunk is not None else [])
    shrunk_text = ex.shrunk.text if ex.shrunk is not None else (
        ex.failing.text if ex.failing is not None and ex.shrunk_verdict is not None else None)
    n = len({t.text for t in ex.tried})  # generated inputs only: the shrunk one is shown, not counted

    names = list(dict.fromkeys(r.target for t in tried for r in t.results))
    out = []
    for name in names:
        for mode in modes:
            per_input = [(t, r) for t in tried for r in t.results if (r.target, r.dma_mode) == (name, mode)]
            if not per_input:
                continue
            verdicts = []
            for p in properties:
                vs = [(t, v) for t, r in per_input for v in r.verdicts if v.property == p]
                verdicts.append(_merge(p, vs, shrunk_text, n, ex))
            first = per_input[0][1]
            seconds: dict[str, float] = {}
            for _, r in per_input:
                for k, s in r.seconds.items():
                    seconds[k] = round(seconds.get(k, 0.0) + s, 4)
            out.append(Result(target=name, devices=first.devices, dma_mode=mode, verdicts=verdicts,
                              program=dict(first.program), seconds=seconds, examples=n))
    return out


def _merge(p: str, vs: list[tuple[Tried, Verdict]], shrunk_text: str | None, n: int,
           ex: Exploration) -> Verdict:
    def with_input(t: Tried, v: Verdict) -> Verdict:
        shrunk = t.text == shrunk_text and ex.failing is not None and t.text != ex.failing.text
        gi = GeneratedInput(value=t.value, text=t.text, index=t.index, examples=n,
                            shrunk_from=ex.failing.text if shrunk and ex.failing is not None else None,
                            shrink_steps=ex.shrink_steps if t.text == shrunk_text else 0)
        return dataclasses.replace(v, input=gi)

    violated = [(t, v) for t, v in vs if v.verdict == "violated"]
    if violated:
        on_shrunk = [(t, v) for t, v in violated if t.text == shrunk_text]
        return with_input(*(on_shrunk or violated)[0])
    unknown = [(t, v) for t, v in vs if v.verdict == "unknown"]
    if unknown:
        t, v = ([(t, v) for t, v in unknown if t.text == shrunk_text] or unknown)[0]
        return with_input(t, dataclasses.replace(v, reason=f"{v.reason} (on input {t.text})"))
    if ex.timed_out and ex.key is None and n < ex.examples:
        return Verdict(p, "unknown", reason=f"timeout: --timeout ran out after {n} of {ex.examples} generated "
                                            f"inputs (the property held on those {n})")
    # no stats: a fold or a solver's numbers belong to one input, not to all of them
    return Verdict(p, "proved", reason=f"proved for {n} generated input{'s' if n != 1 else ''}")


# --- how reports say it --------------------------------------------------------------


def input_line(v: Verdict) -> str | None:
    """The line a report shows beside a verdict's witness: which input, and where it came from."""
    gi = v.input
    if gi is None:
        return None
    if gi.shrunk_from is not None:
        return (f"input: {gi.text}, shrunk from generated input {gi.shrunk_from} "
                f"({gi.shrink_steps} shrinking tries)")
    return f"input: {gi.text}, generated input {gi.index} of {gi.examples}"


def row_suffix(examples: int | None) -> str:
    """What a report's row of a target with generated inputs adds to its summary."""
    if examples is None:
        return ""
    return f" for {examples} generated input{'s' if examples != 1 else ''}"


def coverage(results: Sequence[Any]) -> list[str]:
    """One line per target with generated inputs: what was covered, exactly (never more).

    `proved for 20 generated inputs at 2, 4 devices` when every property is
    proved at every device count and mode; otherwise how many inputs were
    verified and the input that failed or was not decided.
    """
    by_target: dict[str, list[Any]] = {}
    for r in results:
        if r.examples is not None:
            by_target.setdefault(r.target, []).append(r)
    lines = []
    for target, rs in by_target.items():
        counts: dict[int, int] = {}
        for r in rs:
            counts[r.devices] = max(counts.get(r.devices, 0), r.examples)
        if len(set(counts.values())) == 1:
            n = next(iter(counts.values()))
            where = f"{n} generated input{'s' if n != 1 else ''} at {', '.join(map(str, sorted(counts)))} devices"
        else:
            where = ", ".join(f"{n} generated inputs at {d} devices" for d, n in sorted(counts.items()))
        verdicts = [v for r in rs for v in r.verdicts]
        violated = [v for v in verdicts if v.verdict == "violated"]
        unknown = [v for v in verdicts if v.verdict == "unknown"]
        if violated:
            shown = next((v for v in violated if v.input is not None and v.input.shrunk_from), violated[0])
            text = shown.input.text if shown.input is not None else "?"
            lines.append(f"{target}: {shown.property} violated on input {text}; {where} verified")
        elif unknown:
            shown = unknown[0]
            on = f" on input {shown.input.text}" if shown.input is not None else ""
            lines.append(f"{target}: {shown.property} unknown{on}; {where} verified, nothing more is claimed")
        else:
            lines.append(f"{target}: proved for {where}")
    return lines


__all__ = ["DEFAULT_EXAMPLES", "MAX_EXAMPLES", "BadExamples", "GeneratedInputRaised", "Exploration", "Tried",
           "check_examples", "describe", "explore", "aggregate", "input_line", "row_suffix", "coverage"]
