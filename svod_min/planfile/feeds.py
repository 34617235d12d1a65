"""The ``run`` command's inputs and outputs as ``.npy`` files, without numpy (the zipapp runs on a bare
interpreter): ``--input NAME=FILE.npy`` read and bound (ranged dims: planfile/binding.py) before any is copied
in, and an output's bytes at its bound shape for ``--save``."""

from __future__ import annotations

import math
from typing import Any, Dict, List, Mapping, Tuple

from ..error import PlanError
from ..npy import read_npy
from .load import LoadedPlan
from .memory_budget import host_payload

#: (input name, dtype name, shape, bytes) of one ``--input``
Feed = Tuple[str, str, Tuple[int, ...], Any]


def read_feeds(items: List[str]) -> List[Feed]:
    """Each ``--input NAME=FILE.npy`` read; NAME is everything before the last '=' (input names may hold any
    character)."""
    feeds = []
    for item in items:
        name, sep, path = item.rpartition("=")
        if not sep or not name or not path:
            raise PlanError("--input %r: expected NAME=FILE.npy" % item)
        try:
            dt, shape, payload = read_npy(path)
        except OSError as exc:
            raise PlanError("--input %s: cannot read %s: %s" % (name, path, exc.strerror or exc)) from None
        feeds.append((name, dt.name, tuple(shape), payload))
    return feeds


def replace_inputs(loaded: LoadedPlan, items: List[str], given: Mapping[str, int]) -> Tuple[List[str], Dict[str, int]]:
    """Every file read, and the variables that inputs with ranged dims bind checked against each other and
    ``given`` (--var), before any is copied in; returns the names replaced and the variables bound."""
    feeds = read_feeds(items)
    bound = loaded.bind({name: shape for name, _, shape, _ in feeds}, given)
    for name, dtype_name, shape, payload in feeds:
        loaded.set_input(name, dtype_name, shape, payload)
    return [feed[0] for feed in feeds], bound


def output_payload(loaded: LoadedPlan, name: str, buf: Any) -> Tuple[Tuple[int, ...], Any]:
    """Output ``name``'s shape and bytes as ``--save`` writes them: with ranged dims, the bound tensor at the
    start of the buffer; from host memory without a copy."""
    shape = loaded.bound_shape(name)
    payload = host_payload(buf)
    if shape != tuple(buf.shape):
        payload = payload[: buf.dtype.itemsize * math.prod(shape)]
    return shape, payload


__all__ = ["Feed", "output_payload", "read_feeds", "replace_inputs"]
