"""Run-time checks that kernels report: the status buffer a plan's checking kernels write, read after each run.

A kernel that checks what it reads from data (an ONNX Gather's indices, and every later op that takes indices
from a tensor) does not trust it: on a bad value it writes nothing out of bounds, skips that piece of work and
records what it found in its own slot of the plan's status buffer. The plan file declares the buffer and what
each record means (``"checks"``, docs/plan-format.md); after every run the plan compares the buffer with zeros
(one copy of a few hundred bytes) and, when a kernel recorded something, raises
:class:`IndexOutOfRangeError` naming the node, the value, its position and the bound, then clears the buffer so
the next run starts clean. The Python path and the native runner run the same kernels on the same buffers, so
both report alike; the check is not a failure of the plan (it is not poisoned: the next call may bring good data).

Layout: every core_id call of a checking op owns one slot of :data:`SLOT_WORDS` int64 words (no two calls share
a word, so kernels need no atomics, which some targets' compilers would call out of line), laid out as
``[flag, value, position, lo, hi, 0, 0, 0]``: flag 1 once the call met a bad value; the value; its flat position
in the index tensor (the call keeps the lowest it met); the range ``[lo, hi]`` it broke. Of all the slots the one
with the lowest position is reported, so the report does not depend on how the calls were scheduled.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Dict, List, Sequence, Tuple

from ..error import IndexOutOfRangeError
from .schema import as_int, as_list, as_object, as_text, known_keys, need

#: int64 words per core_id call: one 64-byte cache line, so calls on different cores never share a line.
SLOT_WORDS = 8


@dataclass
class CheckRecord:
    """One checking op: where its slots start (in words), how many, and how to name what it checks."""

    offset: int
    slots: int
    node: str  # "node 3 (Gather, 'g')"
    what: str  # "indices 'i'"
    shape: Tuple[int, ...]  # the index tensor's shape, to give a flat position as an index
    why: str  # where the bound comes from: "axis 1 of 'x' has 4 elements"


class StatusCheck:
    """The after-run check of one plan: read the status buffer, raise for the first bad value, clear."""

    def __init__(self, buffer: Any, records: Sequence[CheckRecord]) -> None:
        self.buffer = buffer
        self.records = list(records)
        self.zeros = bytes(int(buffer.nbytes))

    def __call__(self) -> None:
        raw = self.buffer.copyout()
        if raw == self.zeros:
            return
        self.buffer.copyin(self.zeros)  # cleared before raising: the next run starts clean
        raise IndexOutOfRangeError(self.describe(raw))

    def describe(self, raw: bytes) -> str:
        words = struct.unpack("<%dq" % (len(raw) // 8), raw)
        found: List[Tuple[int, int, CheckRecord, Sequence[int]]] = []
        for order, rec in enumerate(self.records):
            slots = [
                words[at : at + SLOT_WORDS] for at in range(rec.offset, rec.offset + rec.slots * SLOT_WORDS, SLOT_WORDS)
            ]
            hits = [s for s in slots if s[0]]
            if hits:
                first = min(hits, key=lambda s: s[2])
                found.append((order, first[2], rec, first))
        if not found:  # a word outside every record: a kernel broke the layout
            return "a kernel wrote its run-time check's status outside its slots; the outputs are not valid"
        _, _, rec, slot = min(found, key=lambda f: f[0])  # the first checking op in plan order
        return (
            "%s: index %d at position %s of %s is out of range [%d, %d] (%s); nothing was read or written "
            % (
                rec.node,
                slot[1],
                list(unravel(slot[2], rec.shape)),
                rec.what,
                slot[3],
                slot[4],
                rec.why,
            )
            + "outside a buffer, and this run's outputs are not valid"
        )


def unravel(flat: int, shape: Sequence[int]) -> Tuple[int, ...]:
    """A flat C-order position as an index into ``shape``."""
    out = []
    for dim in reversed(list(shape)):
        out.append(flat % dim if dim else 0)
        flat = flat // dim if dim else 0
    return tuple(reversed(out))


def read_checks(value: Any, buffers: Dict[str, Any], path: str = "checks") -> StatusCheck:
    """The document's ``checks`` object: ``{"buffer": NAME, "records": [{"offset", "slots", "node", "what",
    "shape", "why"}...]}``, each record's slots inside the int64 buffer."""
    spec = as_object(value, path)
    known_keys(spec, {"buffer", "records"}, path)
    name = as_text(spec.get("buffer"), path + ".buffer")
    need(name in buffers, path + ".buffer", "unknown buffer %r" % name)
    buf = buffers[name]
    dtype = getattr(buf.dtype, "name", str(buf.dtype))
    need(dtype == "int64", path + ".buffer", "the status buffer must be int64, not %s" % dtype)
    words = int(buf.nbytes) // 8
    records = []
    for i, r in enumerate(as_list(spec.get("records"), path + ".records")):
        where = "%s.records[%d]" % (path, i)
        r = as_object(r, where)
        known_keys(r, {"offset", "slots", "node", "what", "shape", "why"}, where)
        offset = as_int(r.get("offset"), where + ".offset", 0)
        slots = as_int(r.get("slots"), where + ".slots", 1)
        need(offset + slots * SLOT_WORDS <= words, where, "its slots end past the status buffer's %d words" % words)
        shape = tuple(
            as_int(d, "%s.shape[%d]" % (where, j), 0) for j, d in enumerate(as_list(r.get("shape"), where + ".shape"))
        )
        records.append(
            CheckRecord(
                offset,
                slots,
                as_text(r.get("node"), where + ".node"),
                as_text(r.get("what"), where + ".what"),
                shape,
                as_text(r.get("why"), where + ".why"),
            )
        )
    return StatusCheck(buf, records)


__all__ = ["SLOT_WORDS", "CheckRecord", "StatusCheck", "read_checks", "unravel"]
