"""The mutants of ring_allgather_variants.py as verification targets, for `semcheck verify --every-n`
(tests/cli/test_every_n_verify.py): each is a correct ring at N = 2 and 4, the device counts verified
there, and wrong only at other N (odd N; past N = 2048; semaphore ids past int16 from N = 15383 on; a
collective id among the internal ids at N = 1000)."""

from __future__ import annotations

from ring_allgather_variants import build as _build

import semcheck


@semcheck.target
def clean(num_devices, **kwargs):
    return _build(num_devices, **kwargs)


@semcheck.target
def odd_n(num_devices, **kwargs):
    return _build(num_devices, variant="odd_n", **kwargs)


@semcheck.target
def wraps_past(num_devices, **kwargs):
    return _build(num_devices, variant="wraps_past", **kwargs)


@semcheck.target
def sems_grow(num_devices, **kwargs):
    return _build(num_devices, variant="sems_grow", **kwargs)


@semcheck.target
def cid_from_n(num_devices, **kwargs):
    return _build(num_devices, variant="cid_from_n", **kwargs)
