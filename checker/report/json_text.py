"""The JSON report's text (REP-38): what `json.dumps(obj, indent=2, default=default)` writes, character for
character, written without the standard library's per-value generators. With an indent the standard
library encodes in Python, a generator per container and a yielded piece per value; a pod-scale report
(the deadlocking ring at 8,960 devices: 200 MB, mostly schedules and timelines) spent most of its JSON
time there. Here a container whose members are all plain scalars (a timeline's events, a blocked
core's fields), and a list of such lists (a schedule's steps), is encoded by `json`'s C encoder without
an indent, its separator the newline and indent of its level; every other container goes one member at
a time, in the order and with the spelling of the standard library (`ensure_ascii`, `allow_nan`, no key
sorting, keys converted as `json` converts them, `default` for anything else).

Why the C encoder's text can be re-indented by plain replacing: an encoded string never holds a newline
(`json` escapes it), so every newline of that text is a separator; and no scalar's text ends in `]`, so
in a list of lists the separators after a `]` are exactly those between the lists."""

from __future__ import annotations

from collections.abc import Callable
from itertools import chain
from json import JSONEncoder
from json.encoder import c_make_encoder, encode_basestring_ascii as _string
from typing import Any

_INDENT = "  "


def _float(o: float) -> str:
    if o != o:
        return "NaN"
    if o == float("inf"):
        return "Infinity"
    if o == float("-inf"):
        return "-Infinity"
    return float.__repr__(o)


_SCALARS: dict[type, Callable[[Any], str]] = {
    str: _string,
    int: int.__repr__,
    float: _float,
    bool: lambda o: "true" if o else "false",
    type(None): lambda o: "null",
}
"""The exact types `json` writes as one token, with how it writes each (a subclass goes the long way,
as `json` checks it: `isinstance`, in its order)."""


def _key(k: Any) -> str:
    """A dict key as `json` writes it: a string as itself, a float, bool, None or int as its JSON spelling."""
    if isinstance(k, str):
        return _string(k)
    if isinstance(k, float):
        return _string(_float(k))
    if k is True:
        return '"true"'
    if k is False:
        return '"false"'
    if k is None:
        return '"null"'
    if isinstance(k, int):
        return _string(int.__repr__(k))
    raise TypeError(f"keys must be str, int, float, bool or None, not {k.__class__.__name__}")


def dumps(obj: Any, default: Callable[[Any], Any]) -> str:
    """`json.dumps(obj, indent=2, default=default)`, the same characters."""
    w = _Writer(default)
    w.value(obj, 0)
    return "".join(w.out)


class _Writer:
    """Writes a value's pieces into `out` (joined once at the end: a big member is not copied at each level)."""

    def __init__(self, default: Callable[[Any], Any]) -> None:
        self.default = default
        self.out: list[str] = []
        self.seps = [",\n" + _INDENT * (n + 1) for n in range(8)]

    def sep(self, level: int) -> str:
        """The separator between the members of a container at `level`: a comma, a newline, its members' indent."""
        while len(self.seps) <= level:
            self.seps.append(",\n" + _INDENT * (len(self.seps) + 1))
        return self.seps[level]

    def value(self, o: Any, level: int) -> None:
        f = _SCALARS.get(type(o))
        if f is not None:
            self.out.append(f(o))
        elif isinstance(o, str):
            self.out.append(_string(o))
        elif o is None or o is True or o is False:
            self.out.append(_SCALARS[type(o)](o))
        elif isinstance(o, int):
            self.out.append(int.__repr__(o))
        elif isinstance(o, float):
            self.out.append(_float(o))
        elif isinstance(o, (list, tuple)):
            self.array(o, level)
        elif isinstance(o, dict):
            self.object(o, level)
        else:
            self.value(self.default(o), level)

    def array(self, o: list | tuple, level: int) -> None:
        out = self.out
        if not o:
            out.append("[]")
            return
        sep = self.sep(level)
        types = set(map(type, o))
        if types.issubset(_SCALARS):
            out += ("[", sep[1:], _flat(o, sep)[1:-1], "\n", sep[2:-2], "]")
            return
        close = _rows(o, types)
        if close:
            inner = self.sep(level + 1)
            start = "{" if close == "}" else "["
            text = _flat(o, inner)[2:-2].replace(close + inner + start, "\n" + sep[2:] + close + sep + start + inner[1:])
            out += ("[", sep[1:], start, inner[1:], text, "\n", sep[2:], close, "\n", sep[2:-2], "]")
            return
        out += ("[", sep[1:])
        value = self.value
        for i, x in enumerate(o):
            if i:
                out.append(sep)
            value(x, level + 1)
        out += ("\n", sep[2:-2], "]")

    def object(self, o: dict, level: int) -> None:
        out = self.out
        if not o:
            out.append("{}")
            return
        sep = self.sep(level)
        if set(map(type, o.values())).issubset(_SCALARS):
            out += ("{", sep[1:], _flat(o, sep)[1:-1], "\n", sep[2:-2], "}")
            return
        keys = map(_string, o) if set(map(type, o)) == {str} else map(_key, o)
        out += ("{", sep[1:])
        value = self.value
        for i, (k, v) in enumerate(zip(keys, o.values())):
            if i:
                out.append(sep)
            out += (k, ": ")
            value(v, level + 1)
        out += ("\n", sep[2:-2], "}")


_ROWS = frozenset({list, tuple})


def _rows(o: list | tuple, types: set[type]) -> str:
    """`]` when `o` (its members' `types`) is a list of non-empty lists of plain scalars, `}` when one of
    non-empty dicts of plain scalars (any keys `json` takes), else empty."""
    if types.issubset(_ROWS):
        members = chain.from_iterable(o)
    elif types == {dict}:
        members = chain.from_iterable(map(dict.values, o))
    else:
        return ""
    if not all(map(len, o)) or not set(map(type, members)).issubset(_SCALARS):
        return ""
    return "}" if types == {dict} else "]"


def _flat(o: list | tuple | dict, sep: str) -> str:
    """`o` (its members plain scalars, or lists of them) by `json`'s C encoder: no indent, `sep` between members."""
    encode = _FLAT.get(sep)
    if encode is None:
        encode = _FLAT[sep] = _encoder(sep)
    return "".join(encode(o, 0))


def _encoder(sep: str) -> Callable[[Any, int], Any]:
    """The C encoder `JSONEncoder(separators=(sep, ": "))` uses, made once per separator (`json` makes one
    per call); `json`'s own encoder where the C one is missing."""
    if c_make_encoder is None:
        return JSONEncoder(separators=(sep, ": ")).iterencode
    return c_make_encoder(None, _no_default, _string, None, ": ", sep, False, False, True)


def _no_default(o: Any) -> Any:
    raise TypeError(f"Object of type {o.__class__.__name__} is not JSON serializable")


_FLAT: dict[str, Callable[[Any, int], Any]] = {}
