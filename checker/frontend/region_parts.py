"""A box of a reshaped view as exact boxes of the reshape's input (ACC-2).

A reshape keeps the row-major order of the elements: the elements of a box of the reshaped view
are a set of flat index ranges, and each range is a union of a few boxes of the input (at most two
per dimension). So a box of the view whose elements are not one box of the input is still exactly a
union of boxes, which decides overlap exactly. The number of ranges grows with the box's rows, so
the decomposition stops at `MAX_PARTS` boxes: past it the caller keeps the bounding box (widened,
with that reason).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

Box = tuple[tuple[int, int], ...]

# More boxes than this for one region: the bounding box is kept instead (widened, with the reason).
MAX_PARTS = 256


def flat_runs(lo: Sequence[int], hi: Sequence[int], shape: Sequence[int], limit: int = MAX_PARTS
              ) -> list[tuple[int, int]] | None:
    """The maximal runs `[a, b)` of row-major flat indices of the box `[lo, hi)` of `shape`, in order,
    or None when there are more than `limit`."""
    rank = len(shape)
    if any(h <= l for l, h in zip(lo, hi)):
        return []
    # the box is contiguous along its innermost dimensions that it covers whole, and one more
    j = rank - 1
    while j > 0 and lo[j] == 0 and hi[j] == shape[j]:
        j -= 1
    inner = math.prod(shape[j + 1:])
    strides = [math.prod(shape[d + 1:]) for d in range(rank)]
    count = math.prod(hi[d] - lo[d] for d in range(j))
    if count > limit:
        return None
    runs: list[tuple[int, int]] = []
    outer = [range(lo[d], hi[d]) for d in range(j)]
    for index in _product(outer):
        a = sum(i * s for i, s in zip(index, strides)) + lo[j] * inner
        b = a + (hi[j] - lo[j]) * inner
        if runs and runs[-1][1] == a:
            runs[-1] = (runs[-1][0], b)
        else:
            runs.append((a, b))
    return runs


def _product(ranges: list[range]):
    if not ranges:
        yield ()
        return
    for i in ranges[0]:
        for rest in _product(ranges[1:]):
            yield (i, *rest)


def interval_boxes(a: int, b: int, shape: Sequence[int]) -> list[Box]:
    """The boxes of `shape` whose union is exactly the flat indices `[a, b)` (row-major), disjoint."""
    if a >= b:
        return []
    if not shape:
        return [()]
    inner = math.prod(shape[1:])
    rest = tuple((0, s) for s in shape[1:])
    i0, r0 = divmod(a, inner)
    i1, r1 = divmod(b, inner)
    if i0 == i1:
        return [((i0, i0 + 1), *bx) for bx in interval_boxes(r0, r1, shape[1:])]
    out: list[Box] = []
    if r0:
        out += [((i0, i0 + 1), *bx) for bx in interval_boxes(r0, inner, shape[1:])]
        i0 += 1
    if i1 > i0:
        out.append(((i0, i1), *rest))
    if r1:
        out += [((i1, i1 + 1), *bx) for bx in interval_boxes(0, r1, shape[1:])]
    return out


def merge_boxes(boxes: list[Box]) -> list[Box]:
    """Disjoint `boxes` with neighbours merged: two boxes equal in every dimension but one, where they
    meet, become one, until none do (the union is unchanged)."""
    if len(boxes) < 2:
        return list(boxes)
    rank = len(boxes[0])
    changed = True
    while changed:
        changed = False
        for d in reversed(range(rank)):
            groups: dict[Box, list[tuple[int, int]]] = {}
            for bx in boxes:
                groups.setdefault(bx[:d] + bx[d + 1:], []).append(bx[d])
            merged: list[Box] = []
            for key, spans in groups.items():
                spans.sort()
                run = [spans[0]]
                for a, b in spans[1:]:
                    if a == run[-1][1]:
                        run[-1] = (run[-1][0], b)
                        changed = True
                    else:
                        run.append((a, b))
                merged += [key[:d] + (span,) + key[d:] for span in run]
            boxes = merged
    return sorted(boxes)


def reshape_parts(lo: Sequence[int], hi: Sequence[int], out_shape: Sequence[int], in_shape: Sequence[int],
                  limit: int = MAX_PARTS) -> list[Box] | None:
    """The boxes of `in_shape` whose union is exactly the elements of the box `[lo, hi)` of the reshaped view
    `out_shape`, or None when that takes more than `limit` boxes."""
    runs = flat_runs(lo, hi, out_shape, limit)
    if runs is None:
        return None
    out: list[Box] = []
    for a, b in runs:
        out += interval_boxes(a, b, in_shape)
        if len(out) > limit:
            return None
    return merge_boxes(out)


__all__ = ["MAX_PARTS", "flat_runs", "interval_boxes", "merge_boxes", "reshape_parts"]
